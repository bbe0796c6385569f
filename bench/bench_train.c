/*
 * Training-step benchmark (issue: foundation). For GPT config A (vocab 256, context 256, 4 layers,
 * 4 heads, width 256, batch 8) and B (GPT-2 small: vocab 50257, context 1024, 12 layers, 12 heads,
 * width 768, batch 4, tied head), and L (A's shape as a Llama, 2 kv heads; --config L), times the whole step (forward, backward, clipping, AdamW) and
 * prints one JSON line per config:
 *   tokens/s, achieved GFLOP/s by nanoGPT's estimate (6 N + 12 L C T per token, the same formula
 *   as bench/torch_gpt.py), the machine's SGEMM peak measured in the same run, and the fraction.
 * With --torch it also runs bench/torch_gpt.py (Debian's python3-torch, 2 threads,
 * OMP_WAIT_POLICY=PASSIVE, its fastest setting) on the same config in the same run and prints the
 * ratio; --pairs N alternates the two N times (so drift in the machine's load hits both sides)
 * and prints every pair's ratio, then the median, minimum and maximum.
 *
 *   OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE ./build/bench/bench_train --config A --steps 20 --torch
 */
#include "hp/compile.h"
#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/rng.h"
#include "hp/runtime.h"
#include "hp/train.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of 5 SGEMMs of n x n x n: the ceiling our kernels are measured against. */
static double sgemm_peak(int n) {
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n),
          *c = malloc(sizeof(float) * (size_t)n * n);
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = 1e-3f * (float)(i % 101);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = 2.0 * n * n * (double)n / (now_s() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

typedef struct cfg {
    const char *name;
    hp_gpt_config gpt;
    int batch;
} cfg;

static const cfg CONFIGS[] = {
    {"A", {.vocab = 256, .context = 256, .layers = 4, .heads = 4, .width = 256, .tied_head = false}, 8},
    {"B", {.vocab = 50257, .context = 1024, .layers = 12, .heads = 12, .width = 768, .tied_head = true}, 4},
    /* config A's shape as a Llama (RMSNorm, RoPE, 4 heads over 2 kv heads, SwiGLU of the default
     * width 768, no biases): the cost of the Llama operators beside GPT-2's */
    {"L", {.family = HP_MODEL_FAMILY_LLAMA, .vocab = 256, .context = 256, .layers = 4, .heads = 4, .kv_heads = 2,
           .width = 256, .tied_head = false}, 8},
};

/* Runs bench/torch_gpt.py on config c, echoes its JSON line; returns its tokens/s (0 if unavailable). */
static double torch_tps(const cfg *c, int warmup, int steps) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_gpt.py --config %s --steps %d "
             "--warmup %d",
             c->name, steps, warmup);
    FILE *f = popen(cmd, "r");
    char line[4096];
    double ttps = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *q = strstr(line, "\"tokens_per_s\": ");
        if (q) ttps = strtod(q + 16, NULL);
        fputs(line, stdout);
    }
    if (f) pclose(f);
    fflush(stdout);
    return ttps;
}

/* Times `steps` training steps of config c after `warmup`; prints the JSON line; *tps_out = tokens/s. */
static int run(const cfg *c, int warmup, int steps, bool profile, double peak, double *tps_out) {
    hp_graph *g = hp_graph_new();
    hp_gpt gpt;
    hp_optim_config o = {.lr = 3e-4, .min_lr = 3e-5, .warmup = 0, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                         .eps = 1e-8, .grad_clip = 1.0};
    hp_status st = hp_gpt_build(g, &c->gpt, c->batch, c->gpt.context, true, &gpt);
    hp_compile_opts co = HP_COMPILE_OPTS_INIT; /* one device: autodiff + optimizer, shard, memplan */
    co.loss = gpt.loss;
    co.train = true;
    co.optim = &o;
    co.program.profile = profile;
    hp_compiled *comp = NULL;
    if (st == HP_STATUS_OK) st = hp_compile(g, &co, &comp);
    if (st != HP_STATUS_OK) {
        fprintf(stderr, "bench_train: %s\n", hp_error_message());
        return 1;
    }
    hp_program *p = hp_compiled_program(comp);
    const hp_partition *part = hp_compiled_partition(comp);
    const hp_train_step ts = *hp_compiled_step(comp);
#define LOCAL(t) hp_partition_local(part, (t))
    for (int i = 0; i < ts.n_params; i++) {
        const hp_tensor *x = hp_graph_tensor(g, ts.params[i]);
        hp_gpt_init_param(&c->gpt, x->name, 1, 0, hp_shape_numel(&x->shape), hp_program_data(p, LOCAL(ts.params[i])));
    }
    int32_t *tok = hp_program_data(p, LOCAL(gpt.tokens)), *tgt = hp_program_data(p, LOCAL(gpt.targets));
    size_t bt = (size_t)c->batch * (size_t)c->gpt.context;
    double total = 0, best = 1e30;
    float loss = 0;
    for (int s = 0; s < warmup + steps; s++) {
        for (size_t i = 0; i < bt; i++) {
            tok[i] = (int32_t)(hp_rng_u64(7, (uint64_t)s * bt + i) % (uint64_t)c->gpt.vocab);
            tgt[i] = (int32_t)(hp_rng_u64(8, (uint64_t)s * bt + i) % (uint64_t)c->gpt.vocab);
        }
        *(float *)hp_program_data(p, LOCAL(ts.lr)) = 3e-4f;
        *(float *)hp_program_data(p, LOCAL(ts.step)) = (float)(s + 1);
        double t0 = now_s();
        st = hp_program_run(p);
        double dt = now_s() - t0;
        if (st != HP_STATUS_OK) {
            fprintf(stderr, "bench_train: %s\n", hp_error_message());
            return 1;
        }
        loss = *(float *)hp_program_data(p, hp_compiled_loss(comp));
        if (s >= warmup) {
            total += dt;
            if (dt < best) best = dt;
        }
    }
    double step_s = total / steps, tps = (double)bt / step_s;
    double fpt = hp_gpt_train_flops_per_token(&c->gpt, c->gpt.context);
    double gflops = fpt * tps / 1e9;
    hp_program_stats stats;
    hp_program_get_stats(p, &stats);
    printf("{\"bench\": \"train_step\", \"impl\": \"hyperparallel\", \"config\": \"%s\", \"tokens_per_s\": %.1f, "
           "\"step_s\": %.4f, \"step_s_min\": %.4f, \"gflops\": %.2f, \"sgemm_peak_gflops\": %.1f, "
           "\"peak_fraction\": %.3f, \"params\": %lld, \"flops_per_token\": %.0f, "
           "\"flops_formula\": \"6*N + 12*L*C*T (nanoGPT estimate_mfu; N excludes wpe, and wte when untied)\", "
           "\"arena_mib\": %.1f, \"persistent_mib\": %.1f, \"last_loss\": %.4f, \"steps\": %d, "
           "\"omp_wait_policy\": \"%s\", \"gomp_spincount\": \"%s\"}\n",
           c->name, tps, step_s, best, gflops, peak, gflops / peak, (long long)hp_gpt_n_params(&c->gpt), fpt,
           (double)stats.arena_bytes / (1 << 20), (double)stats.persistent_bytes / (1 << 20), loss, steps,
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)",
           getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "(unset)");
    fflush(stdout);
    if (profile) hp_program_profile_report(p, stderr);
#undef LOCAL
    hp_compiled_free(comp);
    hp_graph_free(g);
    *tps_out = tps;
    return 0;
}

int main(int argc, char **argv) {
    const char *which = "AB";
    int steps = 0, warmup = -1;
    bool torch = false, profile = false;
    int pairs = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--torch")) torch = true;
        else if (!strcmp(argv[i], "--profile")) profile = true;
        else if (!strcmp(argv[i], "--pairs") && i + 1 < argc) pairs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_train [--config A|B|L|AB] [--steps N] [--warmup N] [--torch [--pairs N]] [--profile]\n");
            return 2;
        }
    }
    double peak = sgemm_peak(2048);
    int rc = 0;
    for (size_t k = 0; k < sizeof CONFIGS / sizeof CONFIGS[0]; k++) {
        if (!strchr(which, CONFIGS[k].name[0])) continue;
        const cfg *c = &CONFIGS[k];
        bool big = c->name[0] == 'B';
        int w = warmup >= 0 ? warmup : (big ? 1 : 3), n = steps > 0 ? steps : (big ? 3 : 20);
        double ratio[64];
        int np = 0;
        for (int r = 0; r < (torch ? pairs : 1) && r < 64; r++) {
            double tps = 0;
            rc |= run(c, w, n, profile, peak, &tps);
            if (!torch || c->gpt.family != HP_MODEL_FAMILY_GPT2) break; /* bench/torch_gpt.py: GPT only */
            double ttps = torch_tps(c, w, n);
            if (ttps <= 0) {
                printf("{\"bench\": \"train_step\", \"config\": \"%s\", \"pytorch\": \"unavailable (run "
                       "scripts/setup-bench.sh)\"}\n",
                       c->name);
                break;
            }
            ratio[np++] = tps / ttps;
            printf("{\"bench\": \"train_step\", \"config\": \"%s\", \"pair\": %d, \"ratio_vs_pytorch\": %.2f, "
                   "\"goal\": 1.5}\n",
                   c->name, np, ratio[np - 1]);
            fflush(stdout);
        }
        if (np > 1) {
            double sorted[64];
            memcpy(sorted, ratio, sizeof(double) * (size_t)np);
            for (int a = 1; a < np; a++) /* insertion sort: at most 64 pairs */
                for (int b = a; b > 0 && sorted[b] < sorted[b - 1]; b--) {
                    double t = sorted[b];
                    sorted[b] = sorted[b - 1];
                    sorted[b - 1] = t;
                }
            double med = np % 2 ? sorted[np / 2] : 0.5 * (sorted[np / 2 - 1] + sorted[np / 2]);
            printf("{\"bench\": \"train_step\", \"config\": \"%s\", \"pairs\": %d, \"ratio_median\": %.2f, "
                   "\"ratio_min\": %.2f, \"ratio_max\": %.2f, \"goal\": 1.5}\n",
                   c->name, np, med, sorted[0], sorted[np - 1]);
        }
    }
    return rc;
}
