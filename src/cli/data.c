/*
 * `hp data prepare CORPUS... --tokenizer T -o DIR [--shard-tokens N] [--threads N] [--val-fraction F]`:
 * tokenize text files and JSONL into a shard set (hp/shards.h), with a progress bar on stderr.
 * `hp data verify DIR`: check a shard set (index, headers, every payload's crc32) and print its sizes.
 */
#include "cli/cli.h"

#include "hp/shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PREPARE_USAGE                                                                              \
    "usage: hp data prepare CORPUS... --tokenizer T -o DIR [--shard-tokens N] [--threads N]\n"     \
    "                       [--val-fraction F] [--quiet]\n"                                        \
    "       hp data verify DIR\n"

typedef struct bar {
    double t0, last;
    bool tty;
} bar;

static void progress(uint64_t done, uint64_t total, uint64_t tokens, void *user) {
    bar *b = user;
    double now = hp_now_seconds();
    if (done < total && now - b->last < (b->tty ? 0.2 : 10.0)) return;
    b->last = now;
    double frac = total ? (double)done / (double)total : 1.0, dt = now - b->t0;
    char fill[31];
    int k = (int)(frac * 30.0 + 0.5);
    for (int i = 0; i < 30; i++) fill[i] = i < k ? '#' : '.';
    fill[30] = 0;
    double mbs = dt > 0 ? (double)done / 1e6 / dt : 0.0, eta = frac > 0 ? dt * (1.0 - frac) / frac : 0.0;
    fprintf(stderr, "%s[%s] %5.1f%%  %.1f/%.1f MB  %llu tokens  %.1f MB/s  ETA %.0f s%s", b->tty ? "\r" : "", fill,
            100.0 * frac, (double)done / 1e6, (double)total / 1e6, (unsigned long long)tokens, mbs, eta,
            b->tty ? "" : "\n");
    fflush(stderr);
}

static void print_set(const hp_shard_set *s) {
    char spec[4096];
    printf("%s: tokenizer %s (%s), vocabulary %d\n", hp_shard_set_dir(s), hp_shard_set_tokenizer_kind(s),
           hp_shard_set_tokenizer_spec(s, spec, sizeof spec), (int)hp_shard_set_vocab(s));
    const char *names[2] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        uint64_t t = hp_shard_set_tokens(s, (hp_shard_split)k), b = hp_shard_set_bytes(s, (hp_shard_split)k);
        printf("  %-5s %llu tokens from %llu bytes (%.3f bytes/token) in %d shard%s\n", names[k], (unsigned long long)t,
               (unsigned long long)b, t ? (double)b / (double)t : 0.0, hp_shard_set_count(s, (hp_shard_split)k),
               hp_shard_set_count(s, (hp_shard_split)k) == 1 ? "" : "s");
    }
}

static int prepare(int argc, char **argv) {
    hp_shards_prepare_options o = hp_shards_prepare_options_default();
    const char *out = NULL;
    bool quiet = false, tok_given = false;
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    int n = 0;
    if (!inputs) return hp_cli_fail(hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory"), NULL);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool takes = !strcmp(a, "--tokenizer") || !strcmp(a, "-o") || !strcmp(a, "--shard-tokens") ||
                     !strcmp(a, "--threads") || !strcmp(a, "--val-fraction");
        if (takes && !hp_cli_has_value(argc, argv, i)) goto usage;
        int64_t v;
        if (!strcmp(a, "--tokenizer")) {
            o.tokenizer = argv[++i];
            tok_given = true;
        } else if (!strcmp(a, "-o")) {
            out = argv[++i];
        } else if (!strcmp(a, "--shard-tokens")) {
            if (!hp_cli_int(a, argv[++i], 1, (int64_t)HP_SHARD_MAX_TOKENS, &v)) goto usage;
            o.shard_tokens = (uint64_t)v;
        } else if (!strcmp(a, "--threads")) {
            if (!hp_cli_int(a, argv[++i], 1, 1024, &v)) goto usage;
            o.threads = (int)v;
        } else if (!strcmp(a, "--val-fraction")) {
            if (!hp_cli_double(a, argv[++i], 1e-9, 1.0 - 1e-9, &o.val_fraction)) goto usage;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (a[0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for data prepare\n", a);
            goto usage;
        } else {
            inputs[n++] = a;
        }
    }
    if (!n || !out || !tok_given) {
        fprintf(stderr, "hp: error: data prepare needs at least one CORPUS, --tokenizer and -o\n");
        goto usage;
    }
    bar b = {.t0 = hp_now_seconds(), .last = -1e9, .tty = isatty(2)};
    if (!quiet) o.progress = progress, o.user = &b;
    hp_shards_prepare_result r;
    hp_status st = hp_shards_prepare(inputs, n, out, &o, &r);
    if (!quiet && b.tty) fprintf(stderr, "\n");
    free(inputs);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, out);
    uint64_t bytes = r.bytes[0] + r.bytes[1];
    printf("prepared %s: %llu train + %llu val tokens in %d + %d shards from %llu bytes%s in %.2f s (%.1f MB/s, %d "
           "thread%s)\n", out, (unsigned long long)r.tokens[0], (unsigned long long)r.tokens[1], r.shards[0], r.shards[1],
           (unsigned long long)bytes, r.documents ? " of documents" : "", r.seconds,
           r.seconds > 0 ? (double)bytes / 1e6 / r.seconds : 0.0, o.threads, o.threads == 1 ? "" : "s");
    return 0;
usage:
    free(inputs);
    fputs(PREPARE_USAGE, stderr);
    return 2;
}

static int verify(int argc, char **argv) {
    if (argc != 1 || argv[0][0] == '-') {
        fputs(PREPARE_USAGE, stderr);
        return 2;
    }
    hp_shard_set *s;
    hp_status st = hp_shard_set_open(argv[0], true, &s);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, argv[0]);
    print_set(s);
    printf("ok: every shard's header and crc32 check out\n");
    hp_shard_set_free(s);
    return 0;
}

int hp_cli_data(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "prepare")) return prepare(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "verify")) return verify(argc - 1, argv + 1);
    fputs(PREPARE_USAGE, stderr);
    return 2;
}
