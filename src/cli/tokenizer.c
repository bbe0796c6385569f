/* `hp tokenizer train|encode|decode|info`: byte-level BPE tokenizers (hp/tokenizer.h). */
#include "cli/cli.h"

#include "hp/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: hp tokenizer train CORPUS... --vocab N -o tokenizer.json [--special TEXT]... [--no-special]\n"
            "                         [--min-frequency N] [--quiet]\n"
            "       hp tokenizer encode --tokenizer T [FILE] [--threads N] [--count]\n"
            "       hp tokenizer decode --tokenizer T [FILE]\n"
            "       hp tokenizer info T\n"
            "T: \"bytes\", a tokenizer.json, GPT-2's encoder.json (vocab.bpe beside it) or a directory holding them.\n"
            "encode prints one id per line (FILE or stdin: any bytes); decode reads ids (whitespace-separated)\n"
            "and writes the bytes.\n");
}

static int read_all(const char *path, char **out, size_t *len) {
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "hp: error: cannot open '%s'\n", path);
        return 1;
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) free(buf);
        buf = nb;
    }
    int err = !buf || ferror(f);
    if (path) fclose(f);
    if (err) {
        free(buf);
        fprintf(stderr, "hp: error: cannot read '%s'\n", path ? path : "(stdin)");
        return 1;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

typedef struct bar {
    bool tty;
    int last_phase, last_pct;
    double t0;
} bar;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(void *ctx, hp_tokenizer_train_phase phase, int64_t done, int64_t total) {
    bar *b = ctx;
    int pct = total > 0 ? (int)(100 * done / total) : 100;
    if ((int)phase == b->last_phase && pct == b->last_pct) return;
    const char *what = phase == HP_TOKENIZER_TRAIN_PHASE_COUNT ? "counting words" : "learning merges";
    if ((int)phase != b->last_phase && b->last_phase >= 0 && b->tty) fputc('\n', stderr);
    b->last_phase = (int)phase;
    b->last_pct = pct;
    if (b->tty) {
        char fill[41];
        int k = pct * 40 / 100;
        for (int i = 0; i < 40; i++) fill[i] = i < k ? '#' : '.';
        fill[40] = 0;
        fprintf(stderr, "\r%-16s [%s] %3d%%  %lld/%lld  %.1f s", what, fill, pct, (long long)done, (long long)total,
                now_s() - b->t0);
    } else if (pct % 25 == 0) {
        fprintf(stderr, "%s: %d%% (%lld/%lld, %.1f s)\n", what, pct, (long long)done, (long long)total,
                now_s() - b->t0);
    }
    fflush(stderr);
}

static int cmd_train(int argc, char **argv) {
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    const char **special = calloc((size_t)argc + 1, sizeof *special);
    int np = 0, ns = 0, rc = 2;
    bool no_special = false, quiet = false;
    const char *out = NULL;
    hp_tokenizer_train_options o = hp_tokenizer_train_options_default();
    if (!paths || !special) goto done;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--vocab") || !strcmp(a, "-o") || !strcmp(a, "--special") || !strcmp(a, "--min-frequency")) {
            if (!hp_cli_has_value(argc, argv, i)) goto done;
            const char *v = argv[++i];
            int64_t x;
            if (!strcmp(a, "--vocab")) {
                if (!hp_cli_int(a, v, 257, INT32_MAX, &x)) goto done;
                o.vocab_size = (int32_t)x;
            } else if (!strcmp(a, "--min-frequency")) {
                if (!hp_cli_int(a, v, 1, INT64_MAX, &x)) goto done;
                o.min_frequency = x;
            } else if (!strcmp(a, "-o")) {
                out = v;
            } else {
                special[ns++] = v;
            }
        } else if (!strcmp(a, "--no-special")) {
            no_special = true;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hp: error: unknown option '%s' for tokenizer train\n", a);
            goto done;
        } else {
            paths[np++] = a;
        }
    }
    if (!np || !out) {
        usage(stderr);
        goto done;
    }
    if (ns || no_special) {
        o.special = special;
        o.n_special = ns;
    }
    bar b = {isatty(2), -1, -1, now_s()};
    if (!quiet) {
        o.progress = progress;
        o.progress_ctx = &b;
    }
    hp_tokenizer *t;
    hp_status st = hp_tokenizer_train(paths, np, &o, &t);
    if (!quiet && b.tty && b.last_phase >= 0) fputc('\n', stderr);
    if (st != HP_STATUS_OK) {
        rc = hp_cli_fail(st, "tokenizer train");
        goto done;
    }
    st = hp_tokenizer_save(t, out);
    if (st == HP_STATUS_OK)
        fprintf(stderr, "wrote %s: vocabulary %d (256 bytes, %d merges, %d special) in %.1f s\n", out,
                hp_tokenizer_vocab_size(t), hp_tokenizer_merge_count(t),
                hp_tokenizer_vocab_size(t) - 256 - hp_tokenizer_merge_count(t), now_s() - b.t0);
    hp_tokenizer_free(t);
    rc = st == HP_STATUS_OK ? 0 : hp_cli_fail(st, "tokenizer train");
done:
    free(paths);
    free(special);
    return rc;
}

/* Parses --tokenizer T, --threads N, --count and at most one FILE. */
static int load_args(int argc, char **argv, const char *cmd, hp_tokenizer **t, const char **file, int64_t *threads,
                     bool *count) {
    const char *spec = NULL;
    *file = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tokenizer")) {
            if (!hp_cli_has_value(argc, argv, i)) return 2;
            spec = argv[++i];
        } else if (threads && !strcmp(a, "--threads")) {
            if (!hp_cli_has_value(argc, argv, i) || !hp_cli_int(a, argv[++i], 0, 1024, threads)) return 2;
        } else if (count && !strcmp(a, "--count")) {
            *count = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hp: error: unknown option '%s' for tokenizer %s\n", a, cmd);
            return 2;
        } else if (*file) {
            fprintf(stderr, "hp: error: tokenizer %s takes one FILE, got '%s' and '%s'\n", cmd, *file, a);
            return 2;
        } else {
            *file = strcmp(a, "-") ? a : NULL;
        }
    }
    if (!spec) {
        fprintf(stderr, "hp: error: tokenizer %s needs --tokenizer T\n", cmd);
        return 2;
    }
    hp_status st = hp_tokenizer_load(spec, t);
    return st == HP_STATUS_OK ? 0 : hp_cli_fail(st, "loading the tokenizer");
}

static int cmd_encode(int argc, char **argv) {
    hp_tokenizer *t;
    const char *file;
    int64_t threads = 1;
    bool count = false;
    int rc = load_args(argc, argv, "encode", &t, &file, &threads, &count);
    if (rc) return rc;
    char *text;
    size_t len;
    if (read_all(file, &text, &len)) {
        hp_tokenizer_free(t);
        return 1;
    }
    int32_t *ids;
    size_t n;
    hp_status st = hp_tokenizer_encode_parallel(t, text, len, (int)threads, &ids, &n);
    free(text);
    hp_tokenizer_free(t);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, "encode");
    if (count) {
        printf("%zu\n", n);
    } else {
        for (size_t i = 0; i < n; i++) printf("%d\n", ids[i]);
    }
    free(ids);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

static int cmd_decode(int argc, char **argv) {
    hp_tokenizer *t;
    const char *file;
    int rc = load_args(argc, argv, "decode", &t, &file, NULL, NULL);
    if (rc) return rc;
    char *text;
    size_t len;
    if (read_all(file, &text, &len)) {
        hp_tokenizer_free(t);
        return 1;
    }
    size_t n = 0, cap = 1024;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *p = text;
    rc = 0;
    while (ids) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < INT32_MIN || v > INT32_MAX || (*end && !strchr(" \n\t\r", *end))) {
            fprintf(stderr, "hp: error: decode: '%.20s' is not a token id\n", p);
            rc = 1;
            break;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *ni = realloc(ids, cap * sizeof *ids);
            if (!ni) free(ids);
            ids = ni;
            if (!ids) break;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    free(text);
    if (!ids) rc = hp_cli_fail(HP_STATUS_OUT_OF_MEMORY, "decode");
    if (!rc) {
        char *out;
        size_t olen;
        hp_status st = hp_tokenizer_decode(t, ids, n, &out, &olen);
        if (st != HP_STATUS_OK) {
            rc = hp_cli_fail(st, "decode");
        } else {
            rc = fwrite(out, 1, olen, stdout) == olen && fflush(stdout) == 0 ? 0 : 1;
            free(out);
        }
    }
    free(ids);
    hp_tokenizer_free(t);
    return rc;
}

static int cmd_info(int argc, char **argv) {
    if (argc != 1) {
        usage(stderr);
        return 2;
    }
    hp_tokenizer *t;
    hp_status st = hp_tokenizer_load(argv[0], &t);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, "loading the tokenizer");
    int32_t v = hp_tokenizer_vocab_size(t);
    printf("tokenizer %s: %s, vocabulary %d, %d merges\n", argv[0], hp_tokenizer_kind(t), v,
           hp_tokenizer_merge_count(t));
    for (int32_t i = 0; i < v && strcmp(hp_tokenizer_kind(t), "bpe") == 0; i++) {
        size_t len;
        const uint8_t *b = hp_tokenizer_token(t, i, &len);
        char s[256];
        snprintf(s, sizeof s, "%.*s", (int)(len < 200 ? len : 200), (const char *)b);
        if (hp_tokenizer_special_id(t, s) == i) printf("  special %d: %s\n", i, s);
    }
    hp_tokenizer_free(t);
    return 0;
}

int hp_cli_tokenizer(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[0], "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(argv[0], "decode")) return cmd_decode(argc - 1, argv + 1);
    if (!strcmp(argv[0], "info")) return cmd_info(argc - 1, argv + 1);
    fprintf(stderr, "hp: error: unknown tokenizer command '%s'\n", argv[0]);
    usage(stderr);
    return 2;
}
