/* `hp ckpt verify CKPT` and `hp ckpt list RUN_DIR`: check checkpoints without loading them. */
#include "cli/cli.h"

#include "hp/checkpoint.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f, "usage: hp ckpt verify CKPT      (a step directory, or a run directory: the step its latest names)\n"
               "       hp ckpt list RUN_DIR\n");
}

static const char *health_str(hp_checkpoint_health h) {
    return h == HP_CHECKPOINT_HEALTH_OK ? "ok" : h == HP_CHECKPOINT_HEALTH_CORRUPT ? "corrupt" : "incomplete";
}

static void print_bytes(char *buf, size_t n, int64_t b) {
    if (b >= (int64_t)1 << 30)
        snprintf(buf, n, "%.1f GiB", (double)b / (double)((int64_t)1 << 30));
    else if (b >= 1 << 20)
        snprintf(buf, n, "%.1f MiB", (double)b / (1 << 20));
    else if (b >= 1 << 10)
        snprintf(buf, n, "%.1f KiB", (double)b / (1 << 10));
    else
        snprintf(buf, n, "%lld B", (long long)b);
}

static int verify(const char *path) {
    char dir[4096];
    hp_status st = hp_checkpoint_resolve(path, dir, sizeof dir);
    struct stat sb;
    if (st == HP_STATUS_NOT_FOUND && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && strlen(path) < sizeof dir)
        snprintf(dir, sizeof dir, "%s", path); /* a step directory that lost its state.json: verify says so */
    else if (st != HP_STATUS_OK)
        return hp_cli_fail(st, path);
    hp_checkpoint_report r;
    st = hp_checkpoint_verify(dir, &r);
    printf("checkpoint %s\n", dir);
    if (r.step >= 0)
        printf("  format %d, step %lld, written by %d rank%s%s%s\n", r.format_version, (long long)r.step,
               r.world_size ? r.world_size : 1, r.world_size > 1 ? "s" : "", r.has_config ? ", model " : "",
               r.has_config ? r.model : "");
    for (int i = 0; i < r.n_files; i++) {
        const hp_checkpoint_file_report *f = &r.files[i];
        char b[32];
        print_bytes(b, sizeof b, f->bytes);
        if (f->rank < 0)
            printf("  %-28s %-6s %10s  ok\n", f->name, f->role, b);
        else
            printf("  %-28s %-6s %10s  rank %d, %lld tensors, %s\n", f->name, f->role, b, f->rank, (long long)f->tensors,
                   f->checksummed ? "checksums ok" : "no checksums (an imported file)");
    }
    int rc;
    if (st == HP_STATUS_OK) {
        char b[32];
        print_bytes(b, sizeof b, r.n_bytes);
        printf("ok: %lld tensors in %d files (%s); checksums, bindings, finite values and the config against the "
               "tensors verified\n", (long long)r.n_tensors, r.n_files, b);
        rc = 0;
    } else {
        fflush(stdout);
        rc = hp_cli_fail(st, r.incomplete ? "incomplete checkpoint" : "corrupt checkpoint");
    }
    hp_checkpoint_report_free(&r);
    return rc;
}

static int list(const char *run_dir) {
    hp_checkpoint_listing *l;
    int n;
    hp_status st = hp_checkpoint_list(run_dir, &l, &n);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, run_dir);
    printf("run directory %s: %d checkpoint%s\n", run_dir, n, n == 1 ? "" : "s");
    int rc = 0;
    for (int i = 0; i < n; i++) {
        printf("  %-24s %s%s%s%s\n", l[i].name, health_str(l[i].health), l[i].latest ? " (latest)" : "",
               l[i].fault ? ": " : "", l[i].fault ? l[i].fault : "");
        if (l[i].latest && l[i].health != HP_CHECKPOINT_HEALTH_OK) rc = 1;
    }
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "hp: error: 'latest' in %s names a checkpoint that is not ok\n", run_dir);
    }
    hp_checkpoint_listing_free(l, n);
    return rc;
}

int hp_cli_ckpt(int argc, char **argv) {
    if (argc == 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) {
        usage(stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[0], "verify")) return verify(argv[1]);
    if (!strcmp(argv[0], "list")) return list(argv[1]);
    fprintf(stderr, "hp: unknown ckpt command '%s'\n", argv[0]);
    usage(stderr);
    return 2;
}
