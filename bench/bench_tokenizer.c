/* Tokenizer encoding speed: the KJV (data/kjv.txt) with GPT-2's vocabulary (tests/data/gpt2),
 * encoded after one untimed warm-up encode; one JSON line per run. bench/tokenizer.sh runs it
 * alternately with node peers (js-tiktoken, tiktoken's WASM build) and prints the ratios.
 *
 *   ./build/bench/bench_tokenizer [--tokenizer T] [--text FILE] [--threads N] [--reps R]
 *
 * mb_per_s is 10^6 bytes of text per second of the fastest of R timed encodes (default 3). */
#include "hp/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *spec = "tests/data/gpt2", *path = "data/kjv.txt";
    int threads = 1, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tokenizer"))
            spec = argv[i + 1];
        else if (!strcmp(argv[i], "--text"))
            path = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_tokenizer: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenizer: cannot open %s (scripts/get-data.sh makes data/kjv.txt)\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", path);
        return 1;
    }
    fclose(f);
    hp_tokenizer *t;
    hp_status st = hp_tokenizer_load(spec, &t);
    if (st != HP_STATUS_OK) {
        fprintf(stderr, "bench_tokenizer: %s: %s\n", hp_status_str(st), hp_error_message());
        return 1;
    }
    double best = 1e30;
    size_t n = 0;
    for (int r = -1; r < reps; r++) {
        int32_t *ids;
        double t0 = now_s();
        st = hp_tokenizer_encode_parallel(t, text, (size_t)len, threads, &ids, &n);
        double dt = now_s() - t0;
        if (st != HP_STATUS_OK) {
            fprintf(stderr, "bench_tokenizer: %s: %s\n", hp_status_str(st), hp_error_message());
            return 1;
        }
        free(ids);
        if (r >= 0 && dt < best) best = dt;
    }
    printf("{\"bench\":\"tokenizer\",\"impl\":\"hp\",\"threads\":%d,\"text\":\"%s\",\"bytes\":%ld,\"tokens\":%zu,"
           "\"seconds\":%.6f,\"mb_per_s\":%.2f}\n",
           threads, path, len, n, best, (double)len / best / 1e6);
    hp_tokenizer_free(t);
    free(text);
    return 0;
}
