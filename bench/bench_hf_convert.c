/*
 * `hp convert` at a real model's size: import a Hugging Face directory, export it back, import the
 * export again, and (given the reference logits gpt2_ref.py wrote for it) compare the imported
 * model's logits with the reference. Prints one JSON line per phase: seconds, parameters, MB/s of
 * weights (float32 bytes / seconds); then whether the re-import is bitwise the first import, and the
 * largest |ours - ref| logit (and
 * over the largest |logit|).
 *
 *     /usr/bin/python3 scripts/hf-ref/gpt2_ref.py make /tmp/gpt2-small --shape small
 *     OMP_NUM_THREADS=2 ./build/bench/bench_hf_convert /tmp/gpt2-small /tmp/hf-bench \
 *         [/tmp/gpt2-small.ref.safetensors]
 *
 * WORK_DIR must not exist (it receives run/, hf/ and back/).
 */
#include "hp/checkpoint.h"
#include "hp/hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(hp_status st, const char *what) {
    fprintf(stderr, "bench_hf_convert: %s: %s (%s)\n", what, hp_error_message(), hp_status_str(st));
    return 1;
}

static void line(const char *phase, double s, int64_t params) {
    printf("{\"bench\": \"hf_convert\", \"phase\": \"%s\", \"seconds\": %.3f, \"params\": %lld, \"MB_per_s\": %.1f}\n",
           phase, s, (long long)params, (double)params * 4.0 / 1e6 / s);
    fflush(stdout);
}

/* The model tensors of two step directories, bitwise. */
static hp_status same(const char *a_dir, const char *b_dir, const hp_hf_arch *arch, bool *eq) {
    hp_hf_model a, b;
    hp_status st = hp_hf_model_alloc(arch, &a);
    if (st == HP_STATUS_OK) st = hp_hf_model_alloc(arch, &b);
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_model(a_dir, a.tensors, a.n);
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_model(b_dir, b.tensors, b.n);
    *eq = st == HP_STATUS_OK;
    for (size_t i = 0; *eq && i < a.n; i++)
        *eq = !memcmp(a.tensors[i].data, b.tensors[i].data, (size_t)hp_shape_numel(&a.tensors[i].shape) * 4);
    hp_hf_model_free(&a);
    hp_hf_model_free(&b);
    return st;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_hf_convert HF_DIR WORK_DIR [REF.safetensors]\n");
        return 2;
    }
    char run[4096], hf[4096], back[4096];
    snprintf(run, sizeof run, "%s/run", argv[2]);
    snprintf(hf, sizeof hf, "%s/hf", argv[2]);
    snprintf(back, sizeof back, "%s/back", argv[2]);
    hp_hf_import_info in, in2;
    hp_hf_export_info ex;
    double t0 = now_s();
    hp_status st = hp_hf_import(argv[1], run, &in);
    if (st != HP_STATUS_OK) return fail(st, "import");
    line("import", now_s() - t0, in.params);
    t0 = now_s();
    if ((st = hp_hf_export(run, hf, &ex)) != HP_STATUS_OK) return fail(st, "export");
    line("export", now_s() - t0, ex.params);
    t0 = now_s();
    if ((st = hp_hf_import(hf, back, &in2)) != HP_STATUS_OK) return fail(st, "re-import");
    line("re-import", now_s() - t0, in2.params);
    bool eq = false;
    if ((st = same(in.step_dir, in2.step_dir, &in.arch, &eq)) != HP_STATUS_OK) return fail(st, "compare");
    printf("{\"bench\": \"hf_convert\", \"phase\": \"round_trip\", \"bitwise_equal\": %s}\n", eq ? "true" : "false");
    if (argc > 3) {
        hp_safetensors *f;
        if ((st = hp_safetensors_open(argv[3], &f)) != HP_STATUS_OK) return fail(st, "reference");
        const hp_safetensors_entry *tk = hp_safetensors_find(f, "tokens"), *lg = hp_safetensors_find(f, "logits");
        if (!tk || !lg) {
            fprintf(stderr, "bench_hf_convert: %s lacks tokens or logits\n", argv[3]);
            return 1;
        }
        int n = (int)tk->shape.dim[0];
        int64_t V = lg->shape.dim[1];
        int32_t *tokens = malloc(sizeof *tokens * (size_t)n);
        float *ref = malloc(sizeof *ref * (size_t)n * (size_t)V), *ours = malloc(sizeof *ours * (size_t)n * (size_t)V);
        memcpy(tokens, tk->data, sizeof *tokens * (size_t)n);
        memcpy(ref, lg->data, sizeof *ref * (size_t)n * (size_t)V);
        hp_safetensors_close(f);
        t0 = now_s();
        if ((st = hp_checkpoint_logits(run, tokens, n, ours, V)) != HP_STATUS_OK) return fail(st, "logits");
        double s = now_s() - t0, worst = 0, scale = 0;
        for (int64_t i = 0; i < (int64_t)n * V; i++) {
            double d = fabs((double)ours[i] - ref[i]);
            worst = fmax(worst, d);
            scale = fmax(scale, fabs(ref[i]));
        }
        printf("{\"bench\": \"hf_convert\", \"phase\": \"logits\", \"tokens\": %d, \"vocab\": %lld, \"seconds\": %.3f, "
               "\"max_abs_diff\": %.3g, \"max_abs_logit\": %.3g, \"diff_over_max_logit\": %.2g}\n",
               n, (long long)V, s, worst, scale, worst / scale);
        free(tokens);
        free(ref);
        free(ours);
    }
    return eq ? 0 : 1;
}
