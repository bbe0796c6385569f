/*
 * Expert parallelism's all-to-all bytes (run under mpirun): one MoE layer (hp_moe_build) behind a
 * dense layer, x0 (N, C) -> x = x0 W0^T -> MoE -> mean(y^2), trained one step at a time (forward,
 * backward, AdamW at lr 0 so the routing depends on the data only) with the tokens and the
 * experts split over the n ranks of axis ep. Per configuration one JSON line:
 *
 *   measured   bytes each rank received in the ragged all-to-all-v's of the step (dispatch and
 *              combine, forward and backward; hp_redistribute_ragged_bytes), max over ranks,
 *              mean over the steps;
 *   min        the analytic minimum, from the routing computed here in plain C (x0 W0^T W_r^T,
 *              top-k, ties to the lower expert, as MOE_ROUTE): a row (token, slot) must cross the
 *              network when its token's rank is not its expert's rank (block distribution of
 *              the E experts over n ranks), once to the expert and once back in the forward pass
 *              and again both ways in the backward pass (dys to the expert, dxs back); rank r
 *              receives 2 (rows into r + rows back to r) C 4 bytes. Max over ranks, mean over steps;
 *   counts     the count exchange on top (an all-gather of E i32 per all-to-all-v: 4 (n-1) E 4);
 *   load       tokens per expert max / mean of the routing (1.0 = balanced);
 *   masking    with hp_moe_config.chunks c (the experts over c chunks of positions, every chunk's
 *              dispatch issued before any expert runs): the communication queues' busy time, the
 *              compute thread's time blocked on them (exposed), and masking_ratio = 1 - exposed /
 *              busy (hp_program_stats; all the step's collectives, the all-to-all-v's dominating),
 *              after one warm-up step.
 *
 * Routers: "random" (N(0, 0.5) weights) and "skewed" (zero weights: every token picks experts
 * 0..k-1, so the ranks holding other experts receive nothing and rank 0 everything).
 *
 * Then training (the trainer, as `hp train` runs examples/moe_ep2.yaml's layouts, on the KJV): a
 * small MoE GPT (8 experts of width 128, top-2, every layer, width 64) for --train-steps steps
 * without and with the Switch balancing loss (0.01); per variant the ragged all-to-all-v bytes
 * per step of the busiest rank against the ranks' mean over the last half of the steps (1.00:
 * the experts' ranks load evenly; the busiest rank sets the all-to-all's time).
 *
 *   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
 *     mpirun --oversubscribe -n 4 ./build/bench/bench_moe_ep [--steps N] [--train-steps N]
 */
#include "hp/comm_mpi.h"
#include "hp/compile.h"
#include "hp/moe.h"
#include "hp/ops.h"
#include "hp/redistribute.h"
#include "hp/rng.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int C = 64;  /* model width (set per configuration) */
static int F = 128; /* expert width */
#define C_MAX 1024
#define T 64 /* positions per sequence: x0 is (N / T, T, C) */

typedef struct model {
    hp_graph *g;
    hp_tid x0, loss;
} model;

static hp_status annotate(void *user, const hp_graph *g, const hp_mesh *mesh, hp_layout *lay) {
    const model *m = user;
    HP_CHECK(hp_layout_parse("[ep, none, none]", mesh, &lay[m->x0]));
    for (int t = 0; t < hp_graph_n_tensors(g); t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->producer < 0 && x->kind == HP_TENSOR_KIND_PARAM && x->name && strstr(x->name, "experts."))
            HP_CHECK(hp_layout_parse("[ep, none, none]", mesh, &lay[t]));
    }
    return HP_STATUS_OK;
}

/* Deterministic values of a named tensor: element i of the global tensor. */
static float value(const char *name, int64_t i, float scale) { return scale * hp_rng_normal(hp_rng_hash(name), (uint64_t)i); }

/* The routing of the N tokens (ids (N, k)) from the global x0, W0 (C, C), Wr (E, C). */
static void route(const float *x0, const float *w0, const float *wr, int N, int E, int k, int32_t *ids) {
    float h[C_MAX], l[64];
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < C; o++) {
            double s = 0;
            for (int i = 0; i < C; i++) s += (double)x0[n * C + i] * w0[o * C + i];
            h[o] = (float)s;
        }
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int i = 0; i < C; i++) s += (double)h[i] * wr[e * C + i];
            l[e] = (float)s;
        }
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int q = 0; q < j; q++) taken |= ids[n * k + q] == e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            ids[n * k + j] = best;
        }
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int owner(int e, int E, int n) {
    int b = (E + n - 1) / n;
    return e / b;
}

int main(int argc, char **argv) {
    int steps = 5, train_steps = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--train-steps") && i + 1 < argc) train_steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_moe_ep [--steps N]\n");
            return 2;
        }
    }
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    const int n = hp_comm_size(world), rank = hp_comm_rank(world);
    struct cfg {
        int E, k, tokens_per_rank;
        const char *router;
        int chunks;
        int width, expert_width; /* C, F */
    } cfgs[] = {{8, 2, 512, "random", 1, 64, 128},  {8, 1, 512, "random", 1, 64, 128},
                {6, 2, 512, "random", 1, 64, 128},  {8, 2, 512, "skewed", 1, 64, 128},
                {8, 2, 4096, "random", 1, 64, 128}, {8, 2, 4096, "random", 2, 64, 128},
                {8, 2, 4096, "random", 4, 64, 128}, {8, 2, 2048, "random", 1, 256, 1024},
                {8, 2, 2048, "random", 2, 256, 1024}, {8, 2, 2048, "random", 4, 256, 1024}};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const int E = cfgs[ci].E, k = cfgs[ci].k, N = cfgs[ci].tokens_per_rank * n;
        C = cfgs[ci].width, F = cfgs[ci].expert_width;
        const bool skew = !strcmp(cfgs[ci].router, "skewed");
        model m = {.g = hp_graph_new()};
        m.x0 = hp_input(m.g, "x0", HP_DTYPE_F32, HP_SHAPE(N / T, T, C));
        hp_graph_push_scope(m.g, "in");
        hp_tid w0 = hp_param(m.g, "weight", HP_SHAPE(C, C));
        hp_graph_pop_scope(m.g);
        hp_tid x = hp_linear(m.g, m.x0, w0, HP_TID_NONE);
        hp_moe_config mc = HP_MOE_CONFIG_INIT;
        mc.experts = E, mc.top_k = k, mc.expert_width = F, mc.chunks = cfgs[ci].chunks;
        hp_moe_layer ml;
        hp_optim_config o = {.lr = 0.0, .min_lr = 0.0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
        if (hp_moe_build(m.g, x, &mc, "mlp", &ml) != HP_STATUS_OK) goto fail;
        m.loss = hp_mean(m.g, hp_mul(m.g, ml.y, ml.y), -1);
        hp_mesh *mesh;
        const char *ep = "ep";
        if (hp_mesh_new(1, &n, &ep, NULL, 0, &mesh) != HP_STATUS_OK) goto fail;
        hp_compile_opts co = HP_COMPILE_OPTS_INIT;
        co.loss = m.loss, co.train = true, co.optim = &o, co.mesh = mesh, co.annotate = annotate, co.annotate_user = &m;
        co.comm = world;
        hp_compiled *c;
        if (hp_compile(m.g, &co, &c) != HP_STATUS_OK) goto fail;
        hp_program *p = hp_compiled_program(c);
        hp_graph *lg = hp_compiled_graph(c);
        int64_t planned = 0;
        const hp_partition *part = hp_compiled_partition(c);
        for (int i = 0; i < hp_partition_n_collectives(part); i++) {
            const hp_collective_info *ci2 = hp_partition_collective(part, i);
            for (int s = 0; s < ci2->plan.nsteps; s++)
                if (ci2->plan.steps[s].kind == HP_REDIST_RAGGED_ALL_TO_ALLV) planned += ci2->plan.steps[s].bytes;
        }
        /* global tensors for the routing: x0 per step, W0, Wr */
        float *gx = malloc(sizeof(float) * (size_t)N * C), *gw0 = malloc(sizeof(float) * C * C),
              *gwr = malloc(sizeof(float) * (size_t)E * C);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)N * (size_t)k);
        for (int64_t i = 0; i < C * C; i++) gw0[i] = value("in.weight", i, 0.2f);
        for (int64_t i = 0; i < (int64_t)E * C; i++) gwr[i] = skew ? 0.0f : value("mlp.router.weight", i, 0.5f);
        for (int t = 0; t < hp_graph_n_tensors(lg); t++) { /* parameters and the optimizer inputs */
            const hp_tensor *tt = hp_graph_tensor(lg, t);
            float *d = hp_program_data(p, t);
            if (!d || tt->producer >= 0 || tt->dtype != HP_DTYPE_F32) continue;
            int64_t ne = hp_shape_numel(&tt->shape);
            if (tt->name && !strcmp(tt->name, "in.weight")) memcpy(d, gw0, sizeof(float) * C * C);
            else if (tt->name && !strcmp(tt->name, "mlp.router.weight")) memcpy(d, gwr, sizeof(float) * (size_t)E * C);
            else if (tt->kind == HP_TENSOR_KIND_PARAM)
                for (int64_t i = 0; i < ne; i++) d[i] = value(tt->name ? tt->name : "p", i + rank * ne, 0.05f);
            else if (tt->kind == HP_TENSOR_KIND_INPUT && tt->name && !strcmp(tt->name, "opt.step")) d[0] = 1.0f;
            else if (tt->kind == HP_TENSOR_KIND_INPUT && tt->name && strcmp(tt->name, "x0")) memset(d, 0, sizeof(float) * (size_t)ne);
        }
        float *lx = hp_program_data(p, hp_partition_local(part, m.x0));
        double meas_max = 0, min_max = 0, load = 0, secs = 0;
        hp_program_stats st0, st1;
        for (int s = -1; s < steps; s++) { /* s = -1: warm-up, not counted */
            if (s == 0) {
                hp_comm_barrier(world);
                hp_program_get_stats(p, &st0);
            }
            for (int64_t i = 0; i < (int64_t)N * C; i++) gx[i] = value("x0", i + (int64_t)s * N * C, 1.0f);
            memcpy(lx, gx + (int64_t)rank * (N / n) * C, sizeof(float) * (size_t)(N / n) * C);
            int64_t before = hp_redistribute_ragged_bytes();
            double t0 = now_s();
            if (hp_program_run(p) != HP_STATUS_OK) goto fail;
            if (s >= 0) secs += now_s() - t0;
            int32_t got = (int32_t)(hp_redistribute_ragged_bytes() - before), all[64];
            hp_comm_all_gather(world, &got, all, 1, HP_DTYPE_I32);
            if (s < 0) continue;
            route(gx, gw0, gwr, N, E, k, ids);
            int64_t into[64] = {0}, back[64] = {0}, per_e[64] = {0};
            for (int64_t i = 0; i < (int64_t)N * k; i++) {
                int src = (int)((i / k) / (N / n)), dst = owner(ids[i], E, n);
                per_e[ids[i]]++;
                if (src != dst) into[dst]++, back[src]++;
            }
            double mx = 0, mn = 0, lmax = 0;
            for (int r = 0; r < n; r++) {
                double b = 2.0 * (double)(into[r] + back[r]) * C * 4;
                mn = b > mn ? b : mn;
                mx = all[r] > mx ? all[r] : mx;
            }
            for (int e = 0; e < E; e++) lmax = per_e[e] > lmax ? (double)per_e[e] : lmax;
            meas_max += mx / steps;
            min_max += mn / steps;
            load += lmax / ((double)N * k / E) / steps;
        }
        hp_program_get_stats(p, &st1);
        double busy = st1.comm_busy_s - st0.comm_busy_s, wait = st1.comm_wait_s - st0.comm_wait_s;
        double counts = 4.0 * (n - 1) * E * 4;
        if (rank == 0)
            printf("{\"bench\": \"moe_ep_all_to_all\", \"ranks\": %d, \"experts\": %d, \"top_k\": %d, \"router\": \"%s\", "
                   "\"tokens\": %d, \"width\": %d, \"expert_width\": %d, \"steps\": %d, \"measured_bytes_per_rank\": %.0f, "
                   "\"analytic_min_bytes\": %.0f, \"ratio_to_min\": %.3f, \"count_exchange_bytes\": %.0f, "
                   "\"ratio_with_counts\": %.3f, \"planned_bytes\": %lld, \"load_max_over_mean\": %.2f, \"chunks\": %d, "
                   "\"step_s\": %.4f, \"comm_s\": %.4f, \"comm_exposed_s\": %.4f, \"masking_ratio\": %.2f}\n",
                   n, E, k, cfgs[ci].router, N, C, F, steps, meas_max, min_max, min_max > 0 ? meas_max / min_max : 0.0,
                   counts, min_max > 0 ? (meas_max + counts) / min_max : 0.0, (long long)planned, load, cfgs[ci].chunks,
                   secs / steps, busy / steps, wait / steps, busy > 0 ? 1.0 - wait / busy : 0.0);
        fflush(stdout);
        free(gx), free(gw0), free(gwr), free(ids);
        hp_compiled_free(c);
        hp_mesh_free(mesh);
        hp_graph_free(m.g);
        continue;
    fail:
        fprintf(stderr, "[rank %d] bench_moe_ep: %s\n", rank, hp_error_message());
        hp_comm_mpi_abort(1);
    }
    for (int v = 0; v < 2 && train_steps > 1; v++) {
        char text[2048];
        snprintf(text, sizeof text,
                 "model: {vocab: 256, context: 64, layers: 2, heads: 4, width: 64, tied_head: false,\n"
                 "        moe: {experts: 8, top_k: 2, expert_width: 128, every: 1, router: softmax, balance_loss: %s}}\n"
                 "data: {corpus: data/kjv.txt, val_fraction: 0.05}\n"
                 "train: {steps: %d, batch: 16, seed: 1, checkpoint_dir: /tmp/unused}\n"
                 "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 20, weight_decay: 0.1, grad_clip: 1.0}\n"
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [ep]}\n"
                 "  inputs: {tokens: [ep, none], targets: [ep, none]}\n"
                 "  params:\n    - {match: \"*.experts.*\", tensor_map: [ep, none, none]}\n",
                 v ? "0.01" : "0.0", train_steps, n);
        hp_run_config cfg;
        hp_trainer *t = NULL;
        if (hp_run_config_load_string(text, strlen(text), "bench_moe_ep", &cfg) != HP_STATUS_OK ||
            hp_trainer_new_dist(&cfg, world, &t) != HP_STATUS_OK) {
            fprintf(stderr, "[rank %d] bench_moe_ep train: %s\n", rank, hp_error_message());
            hp_comm_mpi_abort(1);
        }
        double busiest = 0, mean = 0, loss = 0;
        for (int s = 0; s < train_steps; s++) {
            hp_step_metrics m;
            int64_t before = hp_redistribute_ragged_bytes();
            if (hp_trainer_step(t, &m) != HP_STATUS_OK) {
                fprintf(stderr, "[rank %d] bench_moe_ep train: %s\n", rank, hp_error_message());
                hp_comm_mpi_abort(1);
            }
            loss = m.loss;
            int32_t got = (int32_t)(hp_redistribute_ragged_bytes() - before), all[64];
            hp_comm_all_gather(world, &got, all, 1, HP_DTYPE_I32);
            if (s < train_steps / 2) continue;
            double mx = 0, sum = 0;
            for (int r = 0; r < n; r++) mx = all[r] > mx ? all[r] : mx, sum += all[r];
            busiest += mx;
            mean += sum / n;
        }
        if (rank == 0)
            printf("{\"bench\": \"moe_ep_train\", \"ranks\": %d, \"balance_loss\": %s, \"steps\": %d, "
                   "\"loss\": %.4f, \"busiest_rank_bytes_per_step\": %.0f, \"mean_rank_bytes_per_step\": %.0f, "
                   "\"busiest_over_mean\": %.3f}\n", n, v ? "0.01" : "0", train_steps, loss,
                   busiest / (train_steps - train_steps / 2), mean / (train_steps - train_steps / 2), busiest / mean);
        fflush(stdout);
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
    }
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return 0;
}
