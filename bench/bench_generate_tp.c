/*
 * Cached generation under tensor parallelism (hp_generator_opts.strategy) against one rank: the
 * same model, prompts and greedy decoding, first on rank 0 alone (a one-device generator; the other
 * rank waits at a barrier; on 1 rank only this), then tp2 over both ranks (Megatron: q/k/v and fc column-parallel,
 * proj row-parallel, the KV cache split over heads, two all-reduces per layer and token). Tokens/s
 * counts every sequence's generated tokens; the best of 3 runs of each; both must give the same
 * tokens (checked, printed as "same"). On a shared machine two processes get a larger share of the
 * cores than one, so the wall-clock ratio flatters tp2; the cpu_* figures divide the tokens by the
 * CPU seconds of the process (of the busier rank for tp2): the rate each rank would reach with a
 * core of its own.
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
 *         OMPI_MCA_mpi_yield_when_idle=1 mpirun --oversubscribe -n 2 ./build/bench/bench_generate_tp
 *
 * (yield_when_idle: the waiting rank yields its core instead of busy-polling, as `hp` sets it).
 *
 * One JSON line per case (width, batch). Model: GPT-2, vocab 256, context 160, 4 layers, 8 heads;
 * a 16-token prompt, 128 new tokens.
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/generate.h"
#include "hp/redistribute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT 16
#define NEW 128
#define ROUNDS 3

static const char *const TP_STRATEGY =
    "model: {vocab: 256, context: 160, layers: 4, heads: 8, width: %d, tied_head: false}\n"
    "strategy:\n"
    "  mesh: {device_matrix: [2], alias_name: [tp]}\n"
    "  params:\n"
    "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
    "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n";

/* This process's CPU time, seconds. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best tokens/s of ROUNDS runs of `batch` sequences, NEW tokens each, into *tps (wall clock) and
 * *cpu_tps (tokens per CPU second of this process: what the rank would do with a core of its own,
 * whatever else runs on the machine), and out. */
static hp_status bench(const hp_gpt_config *c, hp_strategy *s, int batch, double *tps, double *cpu_tps, int32_t *out) {
    hp_mesh *mesh = s ? hp_strategy_mesh(s) : NULL;
    hp_store *store;
    HP_CHECK(hp_store_new(mesh, NULL, &store));
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    go.slots = batch;
    go.strategy = s;
    hp_generator *gen = NULL;
    hp_status st = hp_generator_new(c, store, &go, &gen);
    const hp_graph *g = st == HP_STATUS_OK ? hp_generator_graph(gen) : NULL;
    for (int t = 0; g && st == HP_STATUS_OK && t < hp_graph_n_tensors(g); t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->kind != HP_TENSOR_KIND_PARAM) continue;
        int64_t n = hp_shape_numel(&x->shape);
        float *full = malloc(sizeof(float) * (size_t)n);
        hp_store_entry_info info;
        st = full ? hp_gpt_init_param(c, x->name, 1, 0, n, full) : HP_STATUS_OUT_OF_MEMORY;
        if (st == HP_STATUS_OK) st = hp_store_info(store, x->name, &info);
        hp_layout rep;
        hp_layout_init(&rep, x->shape.ndim);
        if (st == HP_STATUS_OK)
            st = mesh ? hp_redistribute_tensor(mesh, &rep, &info.layout, &x->shape, HP_DTYPE_F32, full,
                                               hp_store_data(store, x->name), NULL)
                      : (memcpy(hp_store_data(store, x->name), full, sizeof(float) * (size_t)n), HP_STATUS_OK);
        if (st == HP_STATUS_OK) st = hp_store_touch(store, x->name);
        free(full);
    }
    int32_t prompt[PROMPT];
    const int32_t *prompts[64];
    int lens[64];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)("And God said, Let"[i] & 0xff);
    for (int j = 0; j < batch; j++) prompts[j] = prompt, lens[j] = PROMPT - j % 4;
    hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
    o.max_new_tokens = NEW;
    *tps = *cpu_tps = 0.0;
    for (int r = 0; r < ROUNDS && st == HP_STATUS_OK; r++) {
        double t0 = hp_now_seconds(), c0 = cpu_seconds();
        st = hp_generate(gen, batch, prompts, lens, &o, out);
        double v = (double)batch * NEW / (hp_now_seconds() - t0), u = (double)batch * NEW / (cpu_seconds() - c0);
        *tps = v > *tps ? v : *tps;
        *cpu_tps = u > *cpu_tps ? u : *cpu_tps;
    }
    hp_generator_free(gen);
    hp_store_free(store);
    return st;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    int rank = hp_comm_rank(world), rc = 0;
    const int size = hp_comm_size(world);
    if (size != 1 && size != 2) {
        if (rank == 0) fprintf(stderr, "bench_generate_tp: run it on 2 ranks (mpirun -n 2), or 1 for the baseline alone\n");
        rc = 2;
        goto out;
    }
    const int widths[2] = {256, 512}, batches[2] = {1, 8};
    for (int wi = 0; wi < 2 && rc == 0; wi++)
        for (int bi = 0; bi < 2 && rc == 0; bi++) {
            char text[2048];
            snprintf(text, sizeof text, TP_STRATEGY, widths[wi]);
            hp_run_config cfg;
            hp_strategy *s = NULL;
            hp_status st = hp_run_config_load_string(text, strlen(text), "bench", &cfg);
            if (st != HP_STATUS_OK) {
                rc = 1;
                break;
            }
            hp_gpt_config c = hp_gpt_config_from_model(&cfg.model);
            int B = batches[bi];
            int32_t *one = calloc((size_t)B * NEW, sizeof(int32_t)), *tp = calloc((size_t)B * NEW, sizeof(int32_t));
            double t1 = 0.0, t2 = 0.0, u1 = 0.0, u2 = 0.0;
            float u2f = 0.0f, u2min = 0.0f;
            if (rank == 0) st = bench(&c, NULL, B, &t1, &u1, one);
            hp_comm_barrier(world);
            if (st == HP_STATUS_OK && size == 2) st = hp_strategy_new(&cfg.strategy, 2, &s);
            if (st == HP_STATUS_OK && size == 2) st = hp_mesh_attach(hp_strategy_mesh(s), world);
            if (st == HP_STATUS_OK && size == 2) st = bench(&c, s, B, &t2, &u2, tp);
            else memcpy(tp, one, sizeof(int32_t) * (size_t)B * NEW);
            if (st == HP_STATUS_OK && size == 2) /* the busier rank's CPU time bounds the pair */
                u2f = (float)u2, st = hp_comm_all_reduce(world, &u2f, &u2min, 1, HP_DTYPE_F32, HP_REDUCE_MIN);
            if (st != HP_STATUS_OK) {
                fprintf(stderr, "[rank %d] bench_generate_tp: %s\n", rank, hp_error_message());
                rc = 1;
            } else if (rank == 0) {
                printf("{\"bench\": \"generate_tp\", \"width\": %d, \"layers\": 4, \"heads\": 8, \"batch\": %d, "
                       "\"prompt\": %d, \"new_tokens\": %d, \"tokens_per_s_1rank\": %.1f, \"tokens_per_s_tp2\": %.1f, "
                       "\"speedup\": %.2f, \"cpu_tokens_per_s_1rank\": %.1f, \"cpu_tokens_per_s_tp2\": %.1f, "
                       "\"cpu_speedup\": %.2f, \"same\": %s}\n", widths[wi], B, PROMPT, NEW, t1, t2, t2 / t1, u1,
                       (double)u2min,
                       u1 > 0 ? (double)u2min / u1 : 0.0,
                       memcmp(one, tp, sizeof(int32_t) * (size_t)B * NEW) == 0 ? "true" : "false");
                fflush(stdout);
            }
            free(one);
            free(tp);
            hp_strategy_free(s);
            hp_run_config_free(&cfg);
        }
out:
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return rc;
}
