/*
 * Kernel throughput: the sgemm ceiling, LINEAR forward and backward GEMMs, and ATTENTION forward
 * and backward, at the shapes of the two GPT configurations we compare with PyTorch:
 *   A: B=8, T=256, C=256, H=4, L=4          B: GPT-2 small, B=4, T=1024, C=768, H=12, L=12
 * Each case is one graph node run through hp_program (the same path training takes). Prints one
 * JSON line per case: seconds per call (best and mean), GFLOP/s (from the best), and that as a
 * fraction of the sgemm peak measured first in the same run.
 *
 *     OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE ./build/bench/bench_kernels [filter]
 *
 * `filter` (optional) runs only cases whose name contains it (the peak always runs).
 */
#include "hp/ops.h"
#include "hp/runtime.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double g_peak = 0.0, g_peak_core = 0.0;
static const char *g_filter = NULL;

static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((s >> 40) * (1.0 / 16777216.0)) - 0.5f;
    }
}

/* Times fn(ctx) for at least min_s seconds (and 3 calls), after one warm-up call. Also the mean
 * process CPU seconds per call, which stays meaningful when other jobs share the cores: flops per
 * CPU-second against the same for the sgemm peak measures kernel efficiency independent of load. */
static double g_cpu_per_call;
static void time_it(void (*fn)(void *), void *ctx, double min_s, double *best, double *mean) {
    fn(ctx);
    double t_all = 0, b = 1e30, c0 = cpu_s();
    int n = 0;
    while (n < 3 || t_all < min_s) {
        double t0 = now_s();
        fn(ctx);
        double dt = now_s() - t0;
        t_all += dt;
        b = dt < b ? dt : b;
        n++;
    }
    g_cpu_per_call = (cpu_s() - c0) / n;
    *best = b;
    *mean = t_all / n;
}

static void report(const char *name, const char *shape, double flops, double best, double mean) {
    double gf = flops / best * 1e-9, gfc = flops / g_cpu_per_call * 1e-9;
    printf("{\"case\": \"%s\", \"shape\": \"%s\", \"gflop\": %.3f, \"best_s\": %.6f, \"mean_s\": %.6f, "
           "\"gflops\": %.1f, \"frac_of_peak\": %.3f, \"gflop_per_cpu_s\": %.1f, \"cpu_frac_of_peak\": %.3f}\n",
           name, shape, flops * 1e-9, best, mean, gf, g_peak > 0 ? gf / g_peak : 1.0, gfc,
           g_peak_core > 0 ? gfc / g_peak_core : 1.0);
    fflush(stdout);
}

/* ---- sgemm peak ---- */

typedef struct sgemm_ctx {
    int n;
    float *a, *b, *c;
} sgemm_ctx;

static void run_sgemm(void *p) {
    sgemm_ctx *c = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->n, c->n, c->n, 1.0f, c->a, c->n, c->b, c->n, 0.0f, c->c,
                c->n);
}

static void bench_peak(void) {
    sgemm_ctx c = {2048, NULL, NULL, NULL};
    size_t n = (size_t)c.n * (size_t)c.n;
    c.a = malloc(n * 4);
    c.b = malloc(n * 4);
    c.c = malloc(n * 4);
    fill(c.a, n, 1);
    fill(c.b, n, 2);
    double best, mean;
    time_it(run_sgemm, &c, 1.0, &best, &mean);
    double flops = 2.0 * (double)n * c.n;
    report("sgemm_peak", "2048x2048x2048", flops, best, mean);
    g_peak = flops / best * 1e-9;
    g_peak_core = flops / g_cpu_per_call * 1e-9;
    free(c.a);
    free(c.b);
    free(c.c);
}

/* ---- one-node programs ---- */

typedef struct prog_ctx {
    hp_graph *g;
    hp_program *p;
} prog_ctx;

static void run_prog(void *p) {
    prog_ctx *c = p;
    if (hp_program_run(c->p) != HP_STATUS_OK) {
        fprintf(stderr, "run failed: %s\n", hp_error_message());
        exit(1);
    }
}

/* Compiles g keeping the outputs of its last node, fills every input, times, reports, frees. */
static void bench_graph(const char *name, const char *shape, hp_graph *g, double min_s) {
    if (hp_graph_status(g) != HP_STATUS_OK) {
        fprintf(stderr, "%s: build failed: %s\n", name, hp_graph_error(g));
        exit(1);
    }
    int nn = hp_graph_n_nodes(g);
    hp_tid keep[16];
    int nk = 0;
    double flops = 0;
    for (int i = 0; i < nn; i++) {
        const hp_node *n = hp_graph_node(g, i);
        for (int j = 0; j < n->n_out && nk < 16; j++) keep[nk++] = n->out[j];
        flops += hp_node_cost(g, i).flops;
    }
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = nk;
    prog_ctx c = {g, NULL};
    if (hp_program_new(g, &o, &c.p) != HP_STATUS_OK) {
        fprintf(stderr, "%s: program failed: %s\n", name, hp_error_message());
        exit(1);
    }
    for (int t = 0; t < hp_graph_n_tensors(g); t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->producer < 0) fill(hp_program_data(c.p, t), (size_t)hp_shape_numel(&x->shape), (uint64_t)t + 3);
    }
    /* lse inputs of a standalone backward must be consistent: run the graph's forward first if any. */
    double best, mean;
    time_it(run_prog, &c, min_s, &best, &mean);
    report(name, shape, flops, best, mean);
    hp_program_free(c.p);
    hp_graph_free(g);
}

static bool wanted(const char *name) { return !g_filter || strstr(name, g_filter); }

/* LINEAR forward; backward as its two GEMMs: dx = dy @ w and dw = dy^T x over all rows (folded). */
static void bench_linear(const char *cfg, const char *layer, int64_t M, int64_t K, int64_t N, double min_s) {
    char name[96], shape[96];
    snprintf(shape, sizeof shape, "M=%lld K=%lld N=%lld", (long long)M, (long long)K, (long long)N);
    snprintf(name, sizeof name, "linear_fwd_%s_%s", cfg, layer);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(M, K));
        hp_tid w = hp_input(g, "w", HP_DTYPE_F32, HP_SHAPE(N, K));
        hp_tid b = hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(N));
        hp_linear(g, x, w, b);
        bench_graph(name, shape, g, min_s);
    }
    snprintf(name, sizeof name, "linear_bwd_dx_%s_%s", cfg, layer);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_tid dy = hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(M, N));
        hp_tid w = hp_input(g, "w", HP_DTYPE_F32, HP_SHAPE(N, K));
        hp_matmul(g, dy, w, false, false);
        bench_graph(name, shape, g, min_s);
    }
    snprintf(name, sizeof name, "linear_bwd_dw_%s_%s", cfg, layer);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_tid dy = hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(M, N));
        hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(M, K));
        hp_matmul(g, dy, x, true, false);
        bench_graph(name, shape, g, min_s);
    }
}

/* A linear layer's forward and backward built by autodiff on a 3-D x, to check that the gradient
 * rule's GEMMs (dx = dy w, one GEMM; dw = dy^T x folded over B*T rows, no reshape copy) run at GEMM
 * speed. Only the LINEAR and MATMUL nodes are timed (per-node profile); the loss scaffolding
 * (y * dy summed) is excluded. */
static void bench_linear_autodiff(const char *cfg, int64_t B, int64_t T, int64_t K, int64_t N, double min_s) {
    char name[96], shape[96];
    snprintf(name, sizeof name, "linear_fwd_bwd_autodiff_%s", cfg);
    if (!wanted(name)) return;
    snprintf(shape, sizeof shape, "x=(%lld,%lld,%lld) w=(%lld,%lld), gemm nodes only", (long long)B, (long long)T,
             (long long)K, (long long)N, (long long)K);
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "x", HP_SHAPE(B, T, K));
    hp_tid w = hp_param(g, "w", HP_SHAPE(N, K));
    hp_tid b = hp_param(g, "b", HP_SHAPE(N));
    hp_tid y = hp_linear(g, x, w, b);
    hp_tid dy = hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(B, T, N));
    hp_tid loss = hp_sum(g, hp_mul(g, y, dy), -1);
    hp_tid wrt[3] = {x, w, b}, grads[3];
    if (hp_autodiff(g, loss, wrt, 3, grads) != HP_STATUS_OK) {
        fprintf(stderr, "%s: autodiff failed: %s\n", name, hp_error_message());
        exit(1);
    }
    double flops = 0;
    int n_reshape = 0;
    for (int i = 0; i < hp_graph_n_nodes(g); i++) {
        const hp_node *n = hp_graph_node(g, i);
        if (n->op == HP_OP_LINEAR || n->op == HP_OP_MATMUL) flops += hp_node_cost(g, i).flops;
        if (n->op == HP_OP_RESHAPE && (n->flags & HP_NODE_FLAG_BACKWARD)) n_reshape++;
    }
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    hp_tid keep[4] = {grads[0], grads[1], grads[2], y};
    o.keep = keep;
    o.n_keep = 4;
    o.profile = true;
    prog_ctx c = {g, NULL};
    if (hp_program_new(g, &o, &c.p) != HP_STATUS_OK) {
        fprintf(stderr, "%s: program failed: %s\n", name, hp_error_message());
        exit(1);
    }
    for (int t = 0; t < hp_graph_n_tensors(g); t++) {
        const hp_tensor *xt = hp_graph_tensor(g, t);
        if (xt->producer < 0) fill(hp_program_data(c.p, t), (size_t)hp_shape_numel(&xt->shape), (uint64_t)t + 3);
    }
    double best, mean;
    time_it(run_prog, &c, min_s, &best, &mean);
    hp_program_stats st;
    hp_program_get_stats(c.p, &st);
    int runs = st.op_calls[HP_OP_LINEAR] ? st.op_calls[HP_OP_LINEAR] : 1;
    double gemm_s = (st.op_seconds[HP_OP_LINEAR] + st.op_seconds[HP_OP_MATMUL]) / runs;
    double gf = (st.op_flops[HP_OP_LINEAR] + st.op_flops[HP_OP_MATMUL]) / runs / gemm_s * 1e-9;
    if (getenv("HP_BENCH_PROFILE")) hp_program_profile_report(c.p, stderr);
    printf("{\"case\": \"%s\", \"shape\": \"%s\", \"gflop\": %.3f, \"mean_s\": %.6f, \"gflops\": %.1f, "
           "\"frac_of_peak\": %.3f, \"backward_reshapes\": %d}\n",
           name, shape, flops * 1e-9, gemm_s, gf, g_peak > 0 ? gf / g_peak : 1.0, n_reshape);
    fflush(stdout);
    hp_program_free(c.p);
    hp_graph_free(g);
}

/* The alternative design for dW: RESHAPE dy and x to 2-D (copies in this runtime), then one
 * MATMUL with trans_a. Kept as a measured comparison for the folded form used by LINEAR's rule. */
static void bench_dw_reshape(const char *cfg, int64_t B, int64_t T, int64_t K, int64_t N, double min_s) {
    char name[96], shape[96];
    snprintf(shape, sizeof shape, "x=(%lld,%lld,%lld) N=%lld", (long long)B, (long long)T, (long long)K, (long long)N);
    snprintf(name, sizeof name, "linear_bwd_dw_via_reshape_%s", cfg);
    if (!wanted(name)) return;
    hp_graph *g = hp_graph_new();
    hp_tid dy = hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(B, T, N));
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(B, T, K));
    hp_tid dy2 = hp_reshape(g, dy, HP_SHAPE(B * T, N)), x2 = hp_reshape(g, x, HP_SHAPE(B * T, K));
    hp_matmul(g, dy2, x2, true, false);
    bench_graph(name, shape, g, min_s);
}

static void bench_attention(const char *cfg, int64_t B, int64_t T, int64_t H, int64_t D, double min_s) {
    char name[96], shape[96];
    snprintf(shape, sizeof shape, "B=%lld T=%lld H=%lld D=%lld causal", (long long)B, (long long)T, (long long)H,
             (long long)D);
    snprintf(name, sizeof name, "attention_fwd_%s", cfg);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_shape s = HP_SHAPE(B, T, H * D);
        hp_tid q = hp_input(g, "q", HP_DTYPE_F32, s), k = hp_input(g, "k", HP_DTYPE_F32, s);
        hp_tid v = hp_input(g, "v", HP_DTYPE_F32, s);
        hp_attention(g, q, k, v, (int)H, true);
        bench_graph(name, shape, g, min_s);
    }
    snprintf(name, sizeof name, "attention_bwd_%s", cfg);
    if (wanted(name)) {
        /* Inputs of the backward as leaves; lse filled with log(T/2)-ish values is fine for timing
         * (the work does not depend on the values). */
        hp_graph *g = hp_graph_new();
        hp_shape s = HP_SHAPE(B, T, H * D);
        hp_tid in[6];
        in[0] = hp_input(g, "do", HP_DTYPE_F32, s);
        in[1] = hp_input(g, "q", HP_DTYPE_F32, s);
        in[2] = hp_input(g, "k", HP_DTYPE_F32, s);
        in[3] = hp_input(g, "v", HP_DTYPE_F32, s);
        in[4] = hp_input(g, "o", HP_DTYPE_F32, s);
        in[5] = hp_input(g, "lse", HP_DTYPE_F32, HP_SHAPE(B, H, T));
        hp_attrs at = {0};
        at.i[0] = H;
        at.i[1] = 1;
        hp_graph_add_node(g, HP_OP_ATTENTION_BACKWARD, in, 6, &at);
        bench_graph(name, shape, g, min_s);
    }
}

/* The memory-bound operators of a block at (M rows, C width, F = 4C hidden): GELU forward and
 * backward on (M, F), the bias gradient (SUM_TO over rows) of (M, F), LAYERNORM backward on (M, C),
 * and a residual ADD of (M, C). GFLOP/s from the cost rules; bytes matter more here. */
static void bench_elementwise(const char *cfg, int64_t M, int64_t C, double min_s) {
    char name[96], shape[96];
    int64_t F = 4 * C;
    snprintf(shape, sizeof shape, "M=%lld F=%lld", (long long)M, (long long)F);
    snprintf(name, sizeof name, "gelu_fwd_%s", cfg);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_gelu(g, hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(M, F)));
        bench_graph(name, shape, g, min_s);
    }
    snprintf(name, sizeof name, "gelu_bwd_%s", cfg);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_tid in[2] = {hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(M, F)), hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(M, F))};
        hp_graph_add_node(g, HP_OP_GELU_BACKWARD, in, 2, NULL);
        bench_graph(name, shape, g, min_s);
    }
    snprintf(name, sizeof name, "bias_grad_%s", cfg);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_sum_to(g, hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(M, F)), hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(F)));
        bench_graph(name, shape, g, min_s);
    }
    snprintf(shape, sizeof shape, "M=%lld C=%lld", (long long)M, (long long)C);
    snprintf(name, sizeof name, "layernorm_bwd_%s", cfg);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_tid in[5] = {hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(M, C)), hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(M, C)),
                        hp_input(g, "gamma", HP_DTYPE_F32, HP_SHAPE(C)), hp_input(g, "mean", HP_DTYPE_F32, HP_SHAPE(M)),
                        hp_input(g, "rstd", HP_DTYPE_F32, HP_SHAPE(M))};
        hp_graph_add_node(g, HP_OP_LAYERNORM_BACKWARD, in, 5, NULL);
        bench_graph(name, shape, g, min_s);
    }
    snprintf(name, sizeof name, "add_%s", cfg);
    if (wanted(name)) {
        hp_graph *g = hp_graph_new();
        hp_add(g, hp_input(g, "a", HP_DTYPE_F32, HP_SHAPE(M, C)), hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(M, C)));
        bench_graph(name, shape, g, min_s);
    }
}

int main(int argc, char **argv) {
    g_filter = argc > 1 ? argv[1] : NULL;
    const char *wp = getenv("OMP_WAIT_POLICY");
    printf("{\"bench\": \"kernels\", \"threads\": %d, \"omp_wait_policy\": \"%s\"}\n", omp_get_max_threads(),
           wp ? wp : "(unset)");
    bench_peak();
    /* Config A: B=8, T=256, C=256 -> M = 2048 rows. */
    bench_linear("A", "qkv", 2048, 256, 768, 0.3);
    bench_linear("A", "attn_proj", 2048, 256, 256, 0.3);
    bench_linear("A", "fc", 2048, 256, 1024, 0.3);
    bench_linear("A", "fc_proj", 2048, 1024, 256, 0.3);
    bench_linear_autodiff("A", 8, 256, 256, 1024, 0.3);
    bench_dw_reshape("A", 8, 256, 256, 1024, 0.3);
    bench_attention("A", 8, 256, 4, 64, 0.3);
    bench_elementwise("A", 2048, 256, 0.2);
    /* Config B: GPT-2 small, B=4, T=1024, C=768 -> M = 4096 rows. */
    bench_linear("B", "qkv", 4096, 768, 2304, 0.5);
    bench_linear("B", "attn_proj", 4096, 768, 768, 0.5);
    bench_linear("B", "fc", 4096, 768, 3072, 0.5);
    bench_linear("B", "fc_proj", 4096, 3072, 768, 0.5);
    bench_linear_autodiff("B", 4, 1024, 768, 3072, 0.5);
    bench_dw_reshape("B", 4, 1024, 768, 3072, 0.5);
    bench_attention("B", 4, 1024, 12, 64, 0.5);
    return 0;
}
