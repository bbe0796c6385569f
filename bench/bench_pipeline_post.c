/*
 * Post-validated steps against synchronous ones (hp_pipeline_step_post, hp_pipeline_step; Qi et
 * al.'s optimizer post-validation), under mpirun with 2 ranks (2 stages): 1F1B and ZB-V, each
 * with and without post-validation, alternating per round. Each run: a warm-up step, a barrier,
 * then K consecutive steps with no barrier between them (post-validated: the last one settled
 * inside the window). Per run, from each rank's counters (hp_pipeline_stats): busy = F + B + W
 * program time, update = the norm and update programs plus (post-validated) the store's copy and
 * any redo; window = the slowest rank's wall time over the K steps. bubble = the ranks' idle
 * share of the window, 1 - (busy + update) / window averaged over the ranks (the optimizer's
 * work counted as work, as the trace's schedule window leaves it out); step_s = window / K.
 * Prints one JSON line per run and a summary per configuration (median over the rounds) with
 * the ratios the issue asks for: ZB-V's bubble over 1F1B's (synchronous 1F1B), and each
 * post-validated step time over its synchronous one.
 *
 *   OMP_NUM_THREADS=1 mpirun -n 2 ./build/bench/bench_pipeline_post [--steps K] [--rounds R]
 *       [--layers L] [--width W] [--batch B] [--m M] [--clip C]
 *
 * Defaults: 16 blocks of width 256, vocabulary 256, context 128, batch 32 in m = 8 micro-batches,
 * K = 8, R = 3, clip 0 (a clip the norms exceed makes every check fail: each step is then redone).
 */
#include "hp/comm_mpi.h"
#include "hp/pipeline.h"
#include "hp/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQ 128

static int g_rank;

static void fail(const char *what) {
    fprintf(stderr, "bench_pipeline_post [rank %d]: %s: %s\n", g_rank, what, hp_error_message());
    exit(1);
}

typedef struct result {
    double bubble, step_s, busy_s, update_s;
    long long rollbacks;
} result;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static result run(hp_comm *world, hp_sched_kind kind, bool post, const hp_gpt_config *c, int batch, int m, int steps,
                  double clip) {
    hp_schedule s;
    if (hp_schedule_build(kind, hp_comm_size(world), m, 0, &s) != HP_STATUS_OK) fail("schedule");
    hp_optim_config optim = {.lr = 1e-3, .min_lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                             .eps = 1e-8, .grad_clip = clip};
    hp_pipeline_opts o = HP_PIPELINE_OPTS_INIT;
    o.model = c, o.batch = batch, o.seq = SEQ, o.schedule = &s, o.optim = &optim, o.comm = world;
    hp_pipeline *pp;
    if (hp_pipeline_new(&o, &pp) != HP_STATUS_OK) fail("pipeline");
    if (hp_pipeline_init_params(pp, 1) != HP_STATUS_OK) fail("init");
    size_t n = (size_t)batch * SEQ;
    int32_t *tok = malloc(sizeof *tok * n), *tgt = malloc(sizeof *tgt * n);
    if (!tok || !tgt) fail("the batch");
    for (size_t i = 0; i < n; i++) tok[i] = (int32_t)(hp_rng_u64(1, i) % 256), tgt[i] = (tok[i] + 1) % 256;
    if (hp_pipeline_step(pp, tok, tgt, 1e-3f, NULL, NULL) != HP_STATUS_OK) fail("warm-up step");
    hp_comm_barrier(world);
    hp_pipeline_reset_stats(pp);
    double t0 = hp_now_seconds();
    for (int k = 0; k < steps; k++) {
        hp_status st = post ? hp_pipeline_step_post(pp, tok, tgt, 1e-3f, NULL) : hp_pipeline_step(pp, tok, tgt, 1e-3f, NULL, NULL);
        if (st != HP_STATUS_OK) fail("step");
    }
    if (post && hp_pipeline_settle(pp, NULL) != HP_STATUS_OK) fail("settle");
    double wall = hp_now_seconds() - t0;
    hp_pipeline_stats ps;
    hp_pipeline_get_stats(pp, &ps);
    float mine[3] = {(float)ps.busy_seconds, (float)ps.update_seconds, (float)wall}, sum[3], mx[3];
    hp_comm_all_reduce(world, mine, sum, 3, HP_DTYPE_F32, HP_REDUCE_SUM);
    hp_comm_all_reduce(world, mine, mx, 3, HP_DTYPE_F32, HP_REDUCE_MAX);
    int p = hp_comm_size(world);
    result r = {.bubble = 1 - (sum[0] + sum[1]) / (p * mx[2]), .step_s = mx[2] / steps, .busy_s = sum[0] / p / steps,
                .update_s = sum[1] / p / steps, .rollbacks = (long long)ps.rollbacks};
    hp_pipeline_free(pp);
    hp_schedule_free(&s);
    free(tok), free(tgt);
    return r;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int steps = 8, rounds = 3, layers = 16, width = 256, batch = 32, m = 8;
    double clip = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--width")) width = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--m")) m = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--clip")) clip = atof(argv[i + 1]);
        else {
            if (g_rank == 0) fprintf(stderr, "bench_pipeline_post: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (hp_comm_size(world) != 2 || steps < 1 || rounds < 1 || rounds > 64) {
        if (g_rank == 0) fprintf(stderr, "bench_pipeline_post: 2 ranks, --steps >= 1, --rounds 1..64\n");
        return 2;
    }
    hp_gpt_config c = {.vocab = 256, .context = SEQ, .layers = layers, .heads = 4, .width = width};
    enum { N = 4 };
    const hp_sched_kind kinds[N] = {HP_SCHED_KIND_1F1B, HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_1F1B};
    const bool posts[N] = {false, false, true, true};
    double bub[N][64], step[N][64];
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < N; j++) {
            int k = (j + r) % N; /* alternate the order per round */
            result x = run(world, kinds[k], posts[k], &c, batch, m, steps, clip);
            bub[k][r] = x.bubble, step[k][r] = x.step_s;
            if (g_rank == 0)
                printf("{\"bench\": \"pipeline_post\", \"schedule\": \"%s\", \"post\": %s, \"round\": %d, \"steps\": %d, "
                       "\"bubble\": %.4f, \"step_s\": %.4f, \"busy_s\": %.4f, \"update_s\": %.4f, \"rollbacks\": %lld}\n",
                       hp_sched_kind_name(kinds[k]), posts[k] ? "true" : "false", r, steps, x.bubble, x.step_s,
                       x.busy_s, x.update_s, x.rollbacks);
        }
    double mb[N], ms[N];
    for (int k = 0; k < N; k++) mb[k] = median(bub[k], rounds), ms[k] = median(step[k], rounds);
    if (g_rank == 0) {
        for (int k = 0; k < N; k++)
            printf("{\"bench\": \"pipeline_post_summary\", \"schedule\": \"%s\", \"post\": %s, \"rounds\": %d, "
                   "\"bubble\": %.4f, \"step_s\": %.4f, \"bubble_over_1f1b_sync\": %.3f}\n",
                   hp_sched_kind_name(kinds[k]), posts[k] ? "true" : "false", rounds, mb[k], ms[k], mb[k] / mb[0]);
        printf("{\"bench\": \"pipeline_post_ratio\", \"zb_v_post_over_1f1b_sync\": %.3f, \"zb_v_sync_over_1f1b_sync\": "
               "%.3f, \"zb_v_step_post_over_sync\": %.3f, \"1f1b_step_post_over_sync\": %.3f}\n",
               mb[2] / mb[0], mb[1] / mb[0], ms[2] / ms[1], ms[3] / ms[0]);
    }
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return 0;
}
