/*
 * Streaming token shards (hp/shards.h): opens a shard set (checking every payload's crc32), reads
 * the whole training split once in order, then draws training batches at random like the trainer
 * does, and reports throughput and this process's peak resident set (getrusage ru_maxrss). The set
 * is memory-mapped: the peak should stay near the program's own buffers whatever the set's size.
 *
 *     ./build/bench/bench_shards DIR [--batch B] [--context T] [--steps N] [--no-verify]
 *
 * Prints one JSON line per phase: {"phase": "open"|"scan"|"batches", ...} and a final summary.
 */
#include "hp/data.h"
#include "hp/shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static double peak_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* kilobytes on Linux */
}

/* The current resident set from /proc/self/statm (pages), in MiB. */
static double rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (double)res * 4096.0 / (1 << 20);
}

static int fail(const char *what) {
    fprintf(stderr, "bench_shards: %s: %s\n", what, hp_error_message());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_shards DIR [--batch B] [--context T] [--steps N] [--no-verify]\n");
        return 2;
    }
    const char *dir = argv[1];
    long B = 64, T = 1024, steps = 2000;
    bool verify = true;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atol(argv[++i]);
        else if (!strcmp(argv[i], "--context") && i + 1 < argc) T = atol(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-verify")) verify = false;
        else {
            fprintf(stderr, "bench_shards: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    double t0 = hp_now_seconds();
    hp_shard_set *s;
    if (hp_shard_set_open(dir, verify, &s) != HP_STATUS_OK) return fail(dir);
    uint64_t nt = hp_shard_set_tokens(s, HP_SHARD_SPLIT_TRAIN), nv = hp_shard_set_tokens(s, HP_SHARD_SPLIT_VAL);
    int tb = hp_shard_set_vocab(s) <= 65536 ? 2 : 4;
    double t1 = hp_now_seconds();
    printf("{\"phase\": \"open\", \"verify\": %s, \"train_tokens\": %llu, \"val_tokens\": %llu, \"shards\": %d, "
           "\"gib\": %.3f, \"seconds\": %.2f, \"rss_mib\": %.1f, \"peak_rss_mib\": %.1f}\n",
           verify ? "true" : "false", (unsigned long long)nt, (unsigned long long)nv,
           hp_shard_set_count(s, HP_SHARD_SPLIT_TRAIN) + hp_shard_set_count(s, HP_SHARD_SPLIT_VAL),
           (double)(nt + nv) * tb / (1 << 30), t1 - t0, rss_mib(), peak_mib());
    fflush(stdout);
    /* one pass over the training split, in order */
    enum { CHUNK = 1 << 20 };
    int32_t *buf = malloc(CHUNK * sizeof *buf);
    uint64_t sum = 0;
    for (uint64_t at = 0; at < nt; at += CHUNK) {
        size_t k = nt - at < CHUNK ? (size_t)(nt - at) : CHUNK;
        if (hp_shard_set_read(s, HP_SHARD_SPLIT_TRAIN, at, k, buf) != HP_STATUS_OK) return fail("scan");
        for (size_t j = 0; j < k; j++) sum += (uint64_t)buf[j];
    }
    double t2 = hp_now_seconds();
    printf("{\"phase\": \"scan\", \"tokens\": %llu, \"token_sum\": %llu, \"seconds\": %.2f, \"mtokens_per_s\": %.1f, "
           "\"rss_mib\": %.1f, \"peak_rss_mib\": %.1f}\n", (unsigned long long)nt, (unsigned long long)sum, t2 - t1,
           (double)nt / 1e6 / (t2 - t1), rss_mib(), peak_mib());
    fflush(stdout);
    /* random training batches, as the trainer draws them */
    hp_loader_options o = hp_loader_options_default();
    o.batch = B, o.context = T, o.seed = 1;
    hp_loader *ld;
    if (hp_loader_new_shards(s, &o, &ld) != HP_STATUS_OK) return fail("loader");
    int32_t *x = malloc((size_t)(B * T) * sizeof *x), *y = malloc((size_t)(B * T) * sizeof *y);
    for (long st = 0; st < steps; st++)
        if (hp_loader_batch(ld, st, x, y) != HP_STATUS_OK) return fail("batch");
    double t3 = hp_now_seconds();
    double tokens = (double)steps * (double)B * (double)T;
    printf("{\"phase\": \"batches\", \"steps\": %ld, \"batch\": %ld, \"context\": %ld, \"seconds\": %.2f, "
           "\"mtokens_per_s\": %.1f, \"rss_mib\": %.1f, \"peak_rss_mib\": %.1f}\n", steps, B, T, t3 - t2,
           tokens / 1e6 / (t3 - t2), rss_mib(), peak_mib());
    printf("{\"bench\": \"shards\", \"dir\": \"%s\", \"gib_of_tokens\": %.3f, \"peak_rss_mib\": %.1f}\n", dir,
           (double)(nt + nv) * tb / (1 << 30), peak_mib());
    hp_loader_free(ld);
    hp_shard_set_free(s);
    free(buf);
    free(x);
    free(y);
    return 0;
}
