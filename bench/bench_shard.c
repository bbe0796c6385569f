/*
 * HyperShard benchmark (run under mpirun): for each strategy family that fits the world size, the
 * bytes each rank receives per training step as planned by the partitioner against the textbook
 * analytic minimum for that strategy, the step time against the single-rank step of the same
 * global batch (measured on rank 0 alone in the same run), and the time spent in communication
 * (the communication queues' busy time) with the fraction hidden behind compute (1 - the time
 * the compute thread waited / busy time), and the step time with overlap switched off
 * (hp_program_opts.sync_comm), the number of communication queues and the progress strategy
 * (HP_PROGRESS, else chosen from the cores). One JSON line per strategy.
 *
 *   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
 *     mpirun --oversubscribe -n 4 ./build/bench/bench_shard [--steps N]
 *
 * Analytic minima (bytes received per rank per step; P = parameter bytes, A = activation bytes of
 * one (B_local, T, C) tensor, ring collectives: all-reduce 2(n-1)/n X, all-gather and
 * reduce-scatter (n-1)/n X; Chan et al. 2007; Rajbhandari et al. 2020 for ZeRO; Shoeybi et al.
 * 2019 and Korthikanti et al. 2022 for Megatron TP and SP):
 *   dp     2(n-1)/n P                       zero2  2(n-1)/n P (reduce-scatter + all-gather)
 *   fsdp   3(n-1)/n P                       hsdp   3(f-1)/f P + 2(d-1)/d P/f
 *   tp     4 L 2(n-1)/n A                   tpsp   4 L 2(n-1)/n A (reduce-scatter + all-gather pairs)
 *   dpxtp  4 L 2(t-1)/t A + 2(d-1)/d P_tp   (P_tp: the per-rank parameter bytes under TP)
 * Context parallelism (Ulysses, Jacobs et al. 2023: the sequence split over c ranks, all-to-all to
 * head-split around attention: q, k, v, o forward, do, dq, dk, dv backward, each moving (c-1)/c of
 * a rank's 1/c block; the weight gradients are sums over the sequence, all-reduced as in DP):
 *   cp     8 L (c-1)/c A/c + 2(c-1)/c P     dpxcp  8 L (c-1)/c A/(d c) + 2(n-1)/n P (c = 2)
 *   tpxcp  8 L (c-1)/c A/(t c) + 4 L 2(t-1)/t A/c + 2(c-1)/c P_tp   (t = 2)
 * For these the all-to-all bytes alone are also printed against their term (all_to_all_*).
 * The small terms (scalar norm/loss reductions; LayerNorm-weight gradients under SP) are ignored,
 * so a ratio slightly above 1.00 is expected.
 */
#include "hp/comm_mpi.h"
#include "hp/compile.h"
#include "hp/config.h"
#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/rng.h"
#include "hp/runtime.h"
#include "hp/shard.h"
#include "hp/strategy.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const hp_gpt_config GPT = {.vocab = 256, .context = 128, .layers = 4, .heads = 4, .width = 256, .tied_head = false};
#define BATCH 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *TP =
    "  params:\n"
    "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
    "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n";

static void strategy_yaml(char *b, size_t cap, const char *fam, int n) {
    int h = n / 2;
    if (!strcmp(fam, "dp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                         "  inputs: {tokens: [dp, none], targets: [dp, none]}\n", n);
    else if (!strcmp(fam, "zero2"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                         "  inputs: {tokens: [dp, none], targets: [dp, none]}\n  optimizer: {shard: [dp]}\n", n);
    else if (!strcmp(fam, "fsdp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                         "  inputs: {tokens: [dp, none], targets: [dp, none]}\n"
                         "  params:\n    - {match: \"*\", tensor_map: [dp]}\n", n);
    else if (!strcmp(fam, "hsdp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, fsdp]}\n"
                         "  inputs: {tokens: [[dp, fsdp], none], targets: [[dp, fsdp], none]}\n"
                         "  params:\n    - {match: \"*\", tensor_map: [fsdp]}\n", h);
    else if (!strcmp(fam, "tp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [tp]}\n%s", n, TP);
    else if (!strcmp(fam, "tpsp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [tp]}\n"
                         "  inputs: {tokens: [none, tp], targets: [none, tp]}\n%s", n, TP);
    else if (!strcmp(fam, "cp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n"
                         "  inputs: {tokens: [none, cp], targets: [none, cp]}\n", n);
    else if (!strcmp(fam, "dpxcp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, cp]}\n"
                         "  inputs: {tokens: [dp, cp], targets: [dp, cp]}\n", h);
    else if (!strcmp(fam, "tpxcp"))
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [2, %d], alias_name: [tp, cp]}\n"
                         "  inputs: {tokens: [none, cp], targets: [none, cp]}\n%s", h, TP);
    else /* dpxtp */
        snprintf(b, cap, "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, tp]}\n"
                         "  inputs: {tokens: [dp, none], targets: [dp, none]}\n%s", h, TP);
}

/* Parameter bytes; the TP-split ones (q, k, v, fc, their biases, both proj weights) separately. */
static void param_bytes(double *all, double *tp_split) {
    double C = GPT.width, L = GPT.layers;
    *all = 4.0 * (double)hp_gpt_n_params(&GPT);
    *tp_split = 4.0 * L * (3 * (C * C + C) + (4 * C * C + 4 * C) + C * C + 4 * C * C);
}

/* Ulysses' all-to-all term of the context-parallel families (0 for the others). */
static double analytic_all_to_all(const char *fam, int n) {
    double L = GPT.layers, A = 4.0 * BATCH * GPT.context * GPT.width;
    if (!strcmp(fam, "cp")) return 8 * L * (n - 1.0) / n * A / n;
    if (!strcmp(fam, "dpxcp")) return 8 * L * 0.5 * A / n;
    if (!strcmp(fam, "tpxcp")) return 8 * L * (n / 2 - 1.0) / (n / 2) * A / n;
    return 0;
}

static double analytic(const char *fam, int n) {
    double P, Ps;
    param_bytes(&P, &Ps);
    double L = GPT.layers, A = 4.0 * BATCH * GPT.context * GPT.width;
    int h = n / 2;
    if (!strcmp(fam, "cp")) return analytic_all_to_all(fam, n) + 2.0 * (n - 1) / n * P;
    if (!strcmp(fam, "dpxcp")) return analytic_all_to_all(fam, n) + 2.0 * (n - 1) / n * P;
    if (!strcmp(fam, "tpxcp"))
        return analytic_all_to_all(fam, n) + 4 * L * 2.0 * (2 - 1) / 2 * (A / h) + 2.0 * (h - 1) / h * (P - Ps / 2);
    if (!strcmp(fam, "dp") || !strcmp(fam, "zero2")) return 2.0 * (n - 1) / n * P;
    if (!strcmp(fam, "fsdp")) return 3.0 * (n - 1) / n * P;
    if (!strcmp(fam, "hsdp")) return 3.0 * (2 - 1) / 2 * P + 2.0 * (h - 1) / h * P / 2;
    if (!strcmp(fam, "tp") || !strcmp(fam, "tpsp")) return 4 * L * 2.0 * (n - 1) / n * A;
    /* dpxtp: TP over 2 on the local batch, DP over h on the per-rank parameters */
    return 4 * L * 2.0 * (2 - 1) / 2 * (A / h) + 2.0 * (h - 1) / h * (P - Ps / 2);
}

/* Whether the comma-separated `list` names `fam`. */
static bool list_has(const char *list, const char *fam) {
    size_t n = strlen(fam);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, fam, n) && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

typedef struct built {
    hp_graph *g;
    hp_gpt gpt;
    hp_compiled *c; /* owns the partition and the program */
    hp_partition *part;
    hp_program *p;
} built;

static hp_status build(const char *strategy_text, int world_size, hp_comm *comm, bool sync_comm, hp_strategy **s,
                       built *b) {
    memset(b, 0, sizeof *b);
    hp_run_config cfg;
    char text[4096];
    snprintf(text, sizeof text, "model: {vocab: 256}\n%s", strategy_text);
    HP_CHECK(hp_run_config_load_string(text, strlen(text), "bench", &cfg));
    hp_offload_plan_config unused;
    hp_status st = hp_compile_config_objects(&cfg, world_size, s, &unused);
    hp_run_config_free(&cfg);
    HP_CHECK(st);
    b->g = hp_graph_new();
    hp_optim_config o = {.lr = 3e-4, .min_lr = 3e-5, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                         .grad_clip = 1.0};
    HP_CHECK(hp_gpt_build(b->g, &GPT, BATCH, GPT.context, true, &b->gpt));
    hp_compile_opts co = HP_COMPILE_OPTS_INIT;
    co.loss = b->gpt.loss;
    co.train = true;
    co.optim = &o;
    co.strategy = *s;
    co.comm = comm;
    co.program.sync_comm = sync_comm;
    HP_CHECK(hp_compile(b->g, &co, &b->c));
    b->part = hp_compiled_partition(b->c);
    b->p = hp_compiled_program(b->c);
    /* small random weights and tokens: timing only */
    hp_graph *lg = hp_partition_graph(b->part);
    for (int t = 0; t < hp_graph_n_tensors(lg); t++) {
        const hp_tensor *x = hp_graph_tensor(lg, t);
        void *d = hp_program_data(b->p, t);
        if (!d || x->producer >= 0) continue;
        int64_t ne = hp_shape_numel(&x->shape);
        if (x->kind == HP_TENSOR_KIND_PARAM)
            for (int64_t i = 0; i < ne; i++) ((float *)d)[i] = 0.02f * (hp_rng_uniform(1, (uint64_t)(t * 1000003 + i)) - 0.5f);
        else if (x->kind == HP_TENSOR_KIND_INPUT && x->dtype == HP_DTYPE_I32)
            for (int64_t i = 0; i < ne; i++) ((int32_t *)d)[i] = (int32_t)(hp_rng_u64(2, (uint64_t)i) % 256);
        else if (x->kind == HP_TENSOR_KIND_INPUT) /* opt.lr and opt.step */
            for (int64_t i = 0; i < ne; i++) ((float *)d)[i] = x->name && !strcmp(x->name, "opt.step") ? 1.0f : 1e-4f;
    }
    return HP_STATUS_OK;
}

static void destroy(built *b) {
    hp_compiled_free(b->c);
    hp_graph_free(b->g);
}

static double time_steps(built *b, hp_comm *comm, int steps) {
    for (int i = -1; i < steps; i++) { /* one warm-up step */
        if (i == 0 && comm) hp_comm_barrier(comm);
        static double t0;
        if (i == 0) t0 = now_s();
        if (hp_program_run(b->p) != HP_STATUS_OK) {
            fprintf(stderr, "bench_shard: step failed: %s\n", hp_error_message());
            exit(1);
        }
        if (i == steps - 1) return (now_s() - t0) / steps;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    hp_comm_mpi_world(&world);
    int rank = hp_comm_rank(world), n = hp_comm_size(world), steps = 5;
    const char *only = NULL; /* --only FAM[,FAM...]: just these strategies */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    }
    hp_progress progress;
    if (hp_progress_auto(&progress) != HP_STATUS_OK) {
        fprintf(stderr, "bench_shard: %s\n", hp_error_message());
        return 1;
    }
    /* the single-rank step of the same global batch, on rank 0 alone */
    double single = 0;
    if (rank == 0) {
        hp_comm *self = hp_comm_self_new();
        hp_strategy *s;
        built b;
        if (build("", 1, self, true, &s, &b) != HP_STATUS_OK) {
            fprintf(stderr, "bench_shard: %s\n", hp_error_message());
            return 1;
        }
        single = time_steps(&b, NULL, steps);
        destroy(&b);
        hp_strategy_free(s);
        hp_comm_free(self);
    }
    hp_comm_broadcast(world, &single, 2, HP_DTYPE_I32, 0);
    const char *fams[] = {"dp", "zero2", "fsdp", "hsdp", "tp", "tpsp", "dpxtp", "cp", "dpxcp", "tpxcp"};
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        if ((!strcmp(fams[f], "hsdp") || !strcmp(fams[f], "dpxtp") || !strcmp(fams[f], "dpxcp")) && (n < 4 || n % 2))
            continue;
        /* Ulysses splits the 4 heads over the cp (and tp) ranks */
        if ((!strcmp(fams[f], "cp") && GPT.heads % n) || (!strcmp(fams[f], "tpxcp") && (n < 4 || n % 2 || GPT.heads % n)))
            continue;
        if (only && !list_has(only, fams[f])) continue;
        char text[2048];
        strategy_yaml(text, sizeof text, fams[f], n);
        double step[2], busy = 0, wait = 0;
        int64_t planned = 0, a2a = 0;
        int ncoll = 0, nqueues = 0;
        for (int mode = 0; mode < 2; mode++) { /* 0: communication stream (overlap), 1: in order */
            hp_strategy *s;
            built b;
            if (build(text, n, world, mode == 1, &s, &b) != HP_STATUS_OK) {
                fprintf(stderr, "[rank %d] bench_shard %s: %s\n", rank, fams[f], hp_error_message());
                return 1;
            }
            step[mode] = time_steps(&b, world, steps);
            if (mode == 0) {
                hp_program_stats st;
                hp_program_get_stats(b.p, &st);
                busy = st.comm_busy_s / (steps + 1);
                wait = st.comm_wait_s / (steps + 1);
                planned = hp_partition_bytes(b.part);
                for (int i = 0; i < hp_partition_n_collectives(b.part); i++) {
                    const hp_redistribute_plan *pl = &hp_partition_collective(b.part, i)->plan;
                    for (int k = 0; k < pl->nsteps; k++)
                        if (pl->steps[k].kind == HP_REDIST_ALL_TO_ALL) a2a += pl->steps[k].bytes;
                }
                if (getenv("HP_BENCH_DEBUG")) {
                    const hp_graph *lg = hp_partition_graph(b.part);
                    int na = 0;
                    for (int i = 0; i < hp_graph_n_nodes(lg); i++) na += !!(hp_graph_node(lg, i)->flags & HP_NODE_FLAG_ASYNC);
                    fprintf(stderr, "async nodes %d, busy %g wait %g runs %d\n", na, st.comm_busy_s, st.comm_wait_s, st.n_runs);
                }
                ncoll = hp_partition_n_collectives(b.part);
                nqueues = st.n_queues;
            }
            destroy(&b);
            hp_strategy_free(s);
        }
        double min = analytic(fams[f], n);
        if (rank == 0)
            printf("{\"bench\": \"shard\", \"strategy\": \"%s\", \"ranks\": %d, \"bytes_per_rank_per_step\": %lld, "
                   "\"analytic_min_bytes\": %.0f, \"ratio_to_min\": %.3f, \"collectives\": %d, \"step_s\": %.4f, "
                   "\"step_s_no_overlap\": %.4f, \"single_rank_step_s\": %.4f, \"speedup_vs_single\": %.2f, "
                   "\"comm_s\": %.4f, \"comm_exposed_s\": %.4f, \"comm_hidden_fraction\": %.2f, \"queues\": %d, "
                   "\"progress\": \"%s\", \"all_to_all_bytes\": %lld, \"all_to_all_min\": %.0f}\n",
                   fams[f], n, (long long)planned, min, (double)planned / min, ncoll, step[0], step[1], single,
                   single / step[0], busy, wait, busy > 0 ? 1.0 - wait / busy : 0.0, nqueues,
                   hp_progress_name(progress), (long long)a2a, analytic_all_to_all(fams[f], n));
        fflush(stdout);
    }
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return 0;
}
