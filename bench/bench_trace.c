/*
 * The cost of the timeline recorder (hp/trace.h, `hp train --trace`). Compiles the training step of
 * a run config (hp_compile_run) on each of `--ranks` simulated ranks (threads of this process over
 * the in-process communicator, so a dp2 config runs its collectives on the communication queues),
 * then times `--pairs` pairs of steps, one with the trace attached and one without
 * (hp_program_set_trace between runs; the order alternates from pair to pair, and the ranks meet
 * at a barrier before each step), so drift in the machine's load hits both sides. Prints one JSON
 * line: the median step time of each mode, the median (and min, max) of the per-pair ratios, the
 * spans recorded per step, the cost of one hp_trace_end call, and the time and size of writing the
 * trace. Nothing is read from the corpus: tokens are random, parameters GPT-2 initialised.
 *
 *   OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE ./build/bench/bench_trace examples/kjv.yaml --pairs 40
 *   OMP_NUM_THREADS=1 ./build/bench/bench_trace examples/dp2.yaml --ranks 2 --pairs 40
 *   ... --node-by-node   (the dispatch a program with communication queues uses, on one rank)
 */
#include "hp/comm.h"
#include "hp/compile.h"
#include "hp/config.h"
#include "hp/nn.h"
#include "hp/rng.h"
#include "hp/runtime.h"
#include "hp/shard.h"
#include "hp/trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct bench {
    hp_run_config cfg;
    int pairs, warmup;
    bool node_by_node;
    double *off, *on;      /* rank 0: step seconds per pair */
    double spans_per_step;
    double write_s;
    long long file_bytes;
} bench;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Random tokens and targets into this rank's block, GPT-2 initial weights into its parameters.
 * Under ring load balancing the input "positions" stays 0 (a valid position: the same cost). */
static void fill_inputs(hp_compiled *c, int seed) {
    hp_program *p = hp_compiled_program(c);
    const hp_partition *part = hp_compiled_partition(c);
    const hp_gpt *gpt = hp_compiled_gpt(c);
    const hp_graph *pg = hp_compiled_graph(c);
    hp_tid ids[2] = {gpt->tokens, gpt->targets};
    for (int k = 0; k < 2; k++) {
        hp_tid lt = hp_partition_local(part, ids[k]);
        int32_t *d = hp_program_data(p, lt);
        int64_t n = hp_shape_numel(&hp_graph_tensor(pg, lt)->shape);
        for (int64_t i = 0; d && i < n; i++)
            d[i] = (int32_t)(hp_rng_u64(7 + (uint64_t)k, (uint64_t)(seed * n + i)) % (uint64_t)gpt->cfg.vocab);
    }
}

static void init_params(hp_compiled *c) {
    hp_program *p = hp_compiled_program(c);
    const hp_partition *part = hp_compiled_partition(c);
    const hp_train_step *ts = hp_compiled_step(c);
    const hp_graph *lg = hp_compiled_logical(c), *pg = hp_compiled_graph(c);
    const hp_gpt *gpt = hp_compiled_gpt(c);
    for (int i = 0; i < ts->n_params; i++) {
        hp_tid lt = hp_partition_local(part, ts->params[i]);
        float *d = hp_program_data(p, lt);
        if (!d) continue; /* on disk (offload): zeros are as fast */
        hp_gpt_init_param(&gpt->cfg, hp_graph_tensor(lg, ts->params[i])->name, 1, 0,
                          hp_shape_numel(&hp_graph_tensor(pg, lt)->shape), d);
    }
    *(float *)hp_program_data(p, hp_partition_local(part, ts->lr)) = 3e-4f;
}

static hp_status rank_main(hp_comm *comm, int rank, void *user) {
    bench *b = user;
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.comm = comm;
    o.train = true;
    o.program.node_by_node = b->node_by_node;
    hp_compiled *c = NULL;
    hp_trace *tr = NULL;
    hp_trace_opts to = HP_TRACE_OPTS_DEFAULT;
    to.rank = rank;
    to.capacity = (size_t)1 << 20;
    HP_CHECK(hp_compile_run(&b->cfg, &o, &c));
    hp_status st = hp_trace_new(&to, &tr);
    if (st == HP_STATUS_OK) st = hp_trace_sync(tr, comm);
    hp_program *p = hp_compiled_program(c);
    const hp_train_step *ts = hp_compiled_step(c);
    float *step_in = hp_program_data(p, hp_partition_local(hp_compiled_partition(c), ts->step));
    if (st == HP_STATUS_OK) init_params(c);
    int total = b->warmup + 2 * b->pairs;
    for (int s = 0; s < total && st == HP_STATUS_OK; s++) {
        int pair = s - b->warmup;
        bool on = pair >= 0 && ((pair / 2) % 2 == 0 ? pair % 2 == 1 : pair % 2 == 0); /* off,on / on,off */
        st = hp_program_set_trace(p, on ? tr : NULL, NULL);
        fill_inputs(c, s);
        *step_in = (float)(s + 1);
        hp_trace_set_step(tr, s + 1);
        if (st == HP_STATUS_OK) st = hp_comm_barrier(comm);
        double t0 = hp_now_seconds();
        if (st == HP_STATUS_OK) st = hp_program_run(p);
        double dt = hp_now_seconds() - t0;
        if (rank == 0 && pair >= 0) (on ? b->on : b->off)[pair / 2] = dt;
    }
    if (st == HP_STATUS_OK) st = hp_program_set_trace(p, NULL, NULL);
    if (rank == 0) b->spans_per_step = (double)hp_trace_count(tr) / b->pairs;
    if (st == HP_STATUS_OK) st = hp_comm_barrier(comm);
    double t0 = hp_now_seconds();
    char path[128];
    snprintf(path, sizeof path, "/tmp/hp_bench_trace_%d.json", (int)getpid());
    if (st == HP_STATUS_OK) st = hp_trace_write(tr, comm, path);
    if (rank == 0) {
        b->write_s = hp_now_seconds() - t0;
        struct stat sb;
        b->file_bytes = stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
        remove(path);
    }
    hp_compiled_free(c);
    hp_trace_free(tr);
    return st;
}

/* Nanoseconds per hp_trace_end (clock read + slot fill), on one thread. */
static double ns_per_span(void) {
    hp_trace_opts to = HP_TRACE_OPTS_DEFAULT;
    to.capacity = (size_t)1 << 21;
    hp_trace *tr;
    int track;
    if (hp_trace_new(&to, &tr) != HP_STATUS_OK || hp_trace_track(tr, "compute", 0, &track) != HP_STATUS_OK) return NAN;
    hp_trace_span s = HP_TRACE_SPAN_INIT;
    s.name = hp_trace_intern(tr, "matmul");
    double t0 = hp_now_seconds();
    for (size_t i = 0; i < to.capacity; i++) hp_trace_end(tr, track, t0, &s);
    double dt = hp_now_seconds() - t0;
    hp_trace_free(tr);
    return 1e9 * dt / (double)to.capacity;
}

int main(int argc, char **argv) {
    bench b = {.pairs = 20, .warmup = 3};
    const char *config = NULL;
    int ranks = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pairs") && i + 1 < argc) b.pairs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--node-by-node")) b.node_by_node = true;
        else config = argv[i];
    }
    if (!config || b.pairs < 1 || ranks < 1) {
        fprintf(stderr, "usage: bench_trace CONFIG.yaml [--ranks N] [--pairs P] [--node-by-node]\n");
        return 2;
    }
    if (hp_run_config_load(config, &b.cfg) != HP_STATUS_OK) {
        fprintf(stderr, "bench_trace: %s\n", hp_error_message());
        return 1;
    }
    b.off = calloc((size_t)b.pairs, sizeof *b.off);
    b.on = calloc((size_t)b.pairs, sizeof *b.on);
    double *ratio = calloc((size_t)b.pairs, sizeof *ratio);
    hp_status st = hp_comm_sim_run(ranks, rank_main, &b);
    if (st != HP_STATUS_OK) {
        fprintf(stderr, "bench_trace: %s\n", hp_error_message());
        return 1;
    }
    for (int i = 0; i < b.pairs; i++) ratio[i] = b.on[i] / b.off[i];
    double moff = median(b.off, b.pairs), mon = median(b.on, b.pairs), mr = median(ratio, b.pairs);
    printf("{\"bench\": \"trace\", \"config\": \"%s\", \"ranks\": %d, \"dispatch\": \"%s\", \"pairs\": %d, "
           "\"off_median_step_s\": %.6f, \"trace_median_step_s\": %.6f, \"off_steps_per_s\": %.3f, "
           "\"trace_steps_per_s\": %.3f, \"paired_ratio_median\": %.4f, \"paired_ratio_min\": %.4f, "
           "\"paired_ratio_max\": %.4f, \"spans_per_step_rank0\": %.0f, \"ns_per_span\": %.1f, "
           "\"write_s\": %.4f, \"file_bytes\": %lld}\n",
           config, ranks, ranks > 1 || b.node_by_node ? "node_by_node" : "batched", b.pairs, moff, mon, 1 / moff,
           1 / mon, mr, ratio[0], ratio[b.pairs - 1], b.spans_per_step, ns_per_span(), b.write_s, b.file_bytes);
    free(b.off);
    free(b.on);
    free(ratio);
    hp_run_config_free(&b.cfg);
    return 0;
}
