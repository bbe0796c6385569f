/* ranks: 2 */
/*
 * Generation with the KV cache under tensor parallelism (hp_generator_opts.strategy): the decode
 * and prefill programs compiled under a Megatron tp2 strategy (q/k/v and fc/gate/up column-parallel,
 * proj/o/down row-parallel), the caches split over kv heads, give the greedy tokens of the
 * single-device generator with every sampled logit within 1e-5, for GPT-2 and for Llama with
 * grouped-query attention (4 heads, 2 kv heads), for GPT with MoE layers (each expert's hidden width split
 * over tp), over two calls (the second with another prompt
 * length: a new prefill program, the slots reused). Sampling at temperature 0.8 with top-p gives
 * the same tokens as one device on every rank. Each rank holds half of every cache; a degree that
 * does not divide kv_heads is refused naming the value, as are a strategy without the cache and
 * one that splits the inputs.
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/generate.h"
#include "hp/redistribute.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

#define SLOTS 3
#define NEW 10

/* Megatron over tp: q/k/v and fc column-parallel, the projections row-parallel. */
#define MEGATRON_TP                                                                                \
    "strategy:\n"                                                                                  \
    "  mesh: {device_matrix: [2], alias_name: [tp]}\n"                                             \
    "  params:\n"                                                                                  \
    "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"                      \
    "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}\n"                              \
    "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"                          \
    "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"                                  \
    "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"                       \
    "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n"

/* GPT with MoE layers in every second block (4 experts, top 2). */
#define MOE_MODEL                                                                                  \
    "model: {vocab: 256, context: 32, layers: 2, heads: 4, width: 32, tied_head: false,\n"          \
    "        moe: {experts: 4, top_k: 2, expert_width: 32, every: 2, router: softmax, balance_loss: 0.01}}\n"

static const char *const GPT_TP =
    "model: {vocab: 256, context: 32, layers: 2, heads: 4, width: 32, tied_head: false}\n" MEGATRON_TP;

/* Attention Megatron, each expert's hidden width split over tp (fc column-, proj row-parallel per
 * expert), the router replicated. */
static const char *const MOE_TP = MOE_MODEL MEGATRON_TP
    "    - {match: \"*.experts.fc.weight\", tensor_map: [none, tp, none]}\n"
    "    - {match: \"*.experts.proj.weight\", tensor_map: [none, none, tp]}\n";

/* Expert parallelism: the experts themselves split over the axis (each rank holds 2 of the 4). */
static const char *const MOE_EP = MOE_MODEL MEGATRON_TP
    "    - {match: \"*.experts.fc.weight\", tensor_map: [tp, none, none]}\n"
    "    - {match: \"*.experts.proj.weight\", tensor_map: [tp, none, none]}\n";

static const char *const LLAMA_TP =
    "model: {family: llama, vocab: 256, context: 32, layers: 2, heads: 4, kv_heads: %d, width: 32, ffn_width: 48, "
    "tied_head: false}\n"
    "strategy:\n"
    "  mesh: {device_matrix: [2], alias_name: [tp]}\n"
    "  params:\n"
    "    - {match: \"model.layers.*.self_attn.[qkv]_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.mlp.gate_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.mlp.up_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.self_attn.o_proj.weight\", tensor_map: [none, tp]}\n"
    "    - {match: \"model.layers.*.mlp.down_proj.weight\", tensor_map: [none, tp]}\n";

/* Writes the GPT-2 init (seed 5) of every parameter of the generator's graph into the store: the
 * whole tensor sliced to this rank's block under the layout the generator declared. */
static hp_status load_weights(const hp_gpt_config *c, hp_generator *gen, hp_store *store, hp_mesh *mesh) {
    const hp_graph *g = hp_generator_graph(gen);
    for (int t = 0; t < hp_graph_n_tensors(g); t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->kind != HP_TENSOR_KIND_PARAM) continue;
        int64_t n = hp_shape_numel(&x->shape);
        float *full = malloc(sizeof(float) * (size_t)n);
        if (!full) return hp_error(HP_STATUS_OUT_OF_MEMORY, "test: weights");
        hp_status st = hp_gpt_init_param(c, x->name, 5, 0, n, full);
        /* small random biases and norm weights too, so that every slice matters */
        for (int64_t i = 0; st == HP_STATUS_OK && x->shape.ndim == 1 && i < n; i++)
            full[i] += 0.05f * (float)((i * 37 + t * 11) % 17 - 8) / 8.0f;
        hp_store_entry_info info;
        if (st == HP_STATUS_OK) st = hp_store_info(store, x->name, &info);
        if (st == HP_STATUS_OK && mesh) {
            hp_layout rep;
            hp_layout_init(&rep, x->shape.ndim);
            st = hp_redistribute_tensor(mesh, &rep, &info.layout, &x->shape, HP_DTYPE_F32, full,
                                        hp_store_data(store, x->name), NULL);
        } else if (st == HP_STATUS_OK) {
            memcpy(hp_store_data(store, x->name), full, sizeof(float) * (size_t)n);
        }
        if (st == HP_STATUS_OK) st = hp_store_touch(store, x->name);
        free(full);
        HP_CHECK(st);
    }
    return HP_STATUS_OK;
}

typedef struct result {
    int32_t tok[2][SLOTS * NEW], sampled[SLOTS * NEW], own_seed[SLOTS * NEW];
    float *logits[2]; /* (SLOTS, NEW, V) per call */
    size_t cache_bytes;
    int expert_params; /* parameters of the decode graph named "*.experts.*" */
    int local_experts; /* dim 0 of this rank's first "*.experts.fc.weight" (its experts), or 0 */
} result;

static const int32_t P0[] = {3, 14, 15, 9, 26}, P1[] = {5, 35}, P2[] = {8, 9, 7, 9, 3, 2, 3};
static const int32_t Q0[] = {1, 2, 3}, Q1[] = {40, 41, 42}, Q2[] = {60};

/* Three calls of one generator (greedy, greedy with other prompts, sampled): one device when
 * strategy is NULL, else tp over it. */
static hp_status run(const hp_gpt_config *c, hp_strategy *strategy, hp_comm *world, result *r) {
    hp_mesh *mesh = strategy ? hp_strategy_mesh(strategy) : NULL;
    if (mesh && !hp_mesh_parent_comm(mesh)) HP_CHECK(hp_mesh_attach(mesh, world));
    hp_store *store;
    HP_CHECK(hp_store_new(mesh, NULL, &store));
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    go.slots = SLOTS;
    go.strategy = strategy;
    hp_generator *gen = NULL;
    hp_status st = hp_generator_new(c, store, &go, &gen);
    if (st == HP_STATUS_OK) st = load_weights(c, gen, store, mesh);
    for (int t = 0; st == HP_STATUS_OK && t < hp_graph_n_tensors(hp_generator_graph(gen)); t++) {
        const hp_tensor *x = hp_graph_tensor(hp_generator_graph(gen), t);
        r->expert_params += x->kind == HP_TENSOR_KIND_PARAM && x->name && strstr(x->name, ".experts.");
        hp_store_entry_info info; /* the store holds this rank's block of each weight */
        if (!r->local_experts && x->kind == HP_TENSOR_KIND_PARAM && x->name && strstr(x->name, ".experts.fc.weight") &&
            hp_store_info(store, x->name, &info) == HP_STATUS_OK)
            r->local_experts = (int)info.local_shape.dim[0];
    }
    const int32_t *pa[SLOTS] = {P0, P1, P2}, *pb[SLOTS] = {Q0, Q1, Q2};
    int la[SLOTS] = {5, 2, 7}, lb[SLOTS] = {3, 3, 1};
    hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
    o.max_new_tokens = NEW;
    for (int call = 0; call < 2 && st == HP_STATUS_OK; call++) {
        o.logits = r->logits[call];
        st = hp_generate(gen, SLOTS, call ? pb : pa, call ? lb : la, &o, r->tok[call]);
    }
    if (st == HP_STATUS_OK) {
        o.logits = NULL;
        o.temperature = 0.8f;
        o.top_p = 0.9f;
        o.seed = 17;
        st = hp_generate(gen, SLOTS, pa, la, &o, r->sampled);
    }
    if (st == HP_STATUS_OK) { /* a seed of each rank's own: the model replica takes its first rank's tokens */
        o.seed = 17 + (uint64_t)g_rank * 1000;
        st = hp_generate(gen, SLOTS, pa, la, &o, r->own_seed);
    }
    if (gen) {
        hp_generator_stats s;
        hp_generator_get_stats(gen, &s);
        r->cache_bytes = s.cache_bytes;
    }
    hp_generator_free(gen);
    hp_store_free(store);
    return st;
}

static void compare(const char *what, const hp_gpt_config *c, const char *text, hp_comm *world) {
    size_t nl = (size_t)SLOTS * NEW * (size_t)c->vocab;
    result ref = {0}, tp = {0};
    for (int k = 0; k < 2; k++) {
        ref.logits[k] = calloc(nl, sizeof(float));
        tp.logits[k] = calloc(nl, sizeof(float));
    }
    hp_run_config cfg;
    hp_strategy *s = NULL;
    OK(hp_run_config_load_string(text, strlen(text), what, &cfg));
    hp_status st = hp_strategy_new(&cfg.strategy, 2, &s);
    CHECK(st == HP_STATUS_OK, "%s: strategy: %s", what, hp_error_message());
    st = st == HP_STATUS_OK ? run(c, NULL, world, &ref) : st;
    CHECK(st == HP_STATUS_OK, "%s: one device: %s", what, hp_error_message());
    st = st == HP_STATUS_OK ? run(c, s, world, &tp) : st;
    CHECK(st == HP_STATUS_OK, "%s: tp2: %s", what, hp_error_message());
    if (st == HP_STATUS_OK) {
        double worst = 0.0;
        for (int k = 0; k < 2; k++) {
            CHECK(memcmp(ref.tok[k], tp.tok[k], sizeof ref.tok[k]) == 0, "%s: call %d: tp2 greedy tokens differ from "
                  "one device's", what, k + 1);
            for (size_t i = 0; i < nl; i++) {
                double d = fabs((double)ref.logits[k][i] - tp.logits[k][i]);
                worst = d > worst ? d : worst;
            }
        }
        CHECK(worst <= 1e-5, "%s: largest logit difference %.3g > 1e-5", what, worst);
        CHECK(memcmp(ref.sampled, tp.sampled, sizeof ref.sampled) == 0, "%s: sampled tokens differ", what);
        CHECK((c->moe.experts > 0) == (tp.expert_params > 0), "%s: %d expert parameters in the decode graph", what,
              tp.expert_params);
        /* expert parallelism ("ep2"): each rank holds half the experts; else all of them */
        int want = strstr(what, "ep2") ? c->moe.experts / 2 : c->moe.experts;
        CHECK(tp.local_experts == want, "%s: this rank holds %d experts, not %d", what, tp.local_experts, want);
        CHECK(tp.cache_bytes * 2 == ref.cache_bytes, "%s: this rank's cache %zu bytes, one device's %zu", what,
              tp.cache_bytes, ref.cache_bytes);
        /* every rank sampled the same tokens */
        int32_t mine[SLOTS * NEW], rank0[SLOTS * NEW];
        memcpy(mine, tp.sampled, sizeof mine);
        memcpy(rank0, tp.sampled, sizeof rank0);
        OK(hp_comm_broadcast(world, rank0, SLOTS * NEW, HP_DTYPE_I32, 0));
        CHECK(memcmp(mine, rank0, sizeof mine) == 0, "%s: rank %d sampled other tokens than rank 0", what, g_rank);
        memcpy(mine, tp.own_seed, sizeof mine);
        memcpy(rank0, tp.own_seed, sizeof rank0);
        OK(hp_comm_broadcast(world, rank0, SLOTS * NEW, HP_DTYPE_I32, 0));
        CHECK(memcmp(mine, rank0, sizeof mine) == 0, "%s: with a seed per rank, rank %d's tokens are not rank 0's",
              what, g_rank);
        /* rank 0's are one device's at its seed; the other seeds sample otherwise on one device, so
         * the agreement is the broadcast's, not the draws' */
        int differ = 0;
        for (int i = 0; i < SLOTS * NEW; i++) differ += ref.own_seed[i] != tp.own_seed[i];
        if (g_rank == 0) CHECK(differ == 0, "%s: rank 0's tokens differ from one device's at its seed", what);
        else CHECK(differ > 0, "%s: rank %d's own seed samples rank 0's tokens on one device too", what, g_rank);
        if (g_rank == 0)
            printf("%s: tp2 = one device (tokens of %d calls, logits within %.2g), cache %zu of %zu bytes per rank\n",
                   what, 3, worst, tp.cache_bytes, ref.cache_bytes);
    }
    hp_strategy_free(s);
    hp_run_config_free(&cfg);
    for (int k = 0; k < 2; k++) free(ref.logits[k]), free(tp.logits[k]);
}

/* What the generator refuses under a strategy (text: a run config; want: the message's part). */
static void refuse(hp_comm *world, const char *text, bool use_cache, const char *want) {
    hp_run_config cfg;
    OK(hp_run_config_load_string(text, strlen(text), "kv1", &cfg));
    hp_gpt_config c = hp_gpt_config_from_model(&cfg.model);
    hp_strategy *s = NULL;
    OK(hp_strategy_new(&cfg.strategy, 2, &s));
    OK(hp_mesh_attach(hp_strategy_mesh(s), world));
    hp_store *store = NULL;
    OK(hp_store_new(hp_strategy_mesh(s), NULL, &store));
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    go.strategy = s;
    go.use_cache = use_cache;
    hp_generator *gen = NULL;
    hp_status st = hp_generator_new(&c, store, &go, &gen);
    CHECK(st == HP_STATUS_INVALID_ARGUMENT && strstr(hp_error_message(), want), "expected '%s': status %d, message "
          "'%s'", want, (int)st, hp_error_message());
    hp_generator_free(gen);
    hp_store_free(store);
    hp_strategy_free(s);
    hp_run_config_free(&cfg);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    if (hp_comm_size(world) == 2) {
        hp_run_config cfg;
        if (hp_run_config_load_string(GPT_TP, strlen(GPT_TP), "gpt", &cfg) == HP_STATUS_OK) {
            hp_gpt_config c = hp_gpt_config_from_model(&cfg.model);
            compare("gpt tp2", &c, GPT_TP, world);
            hp_run_config_free(&cfg);
        }
        if (hp_run_config_load_string(MOE_TP, strlen(MOE_TP), "moe", &cfg) == HP_STATUS_OK) {
            hp_gpt_config c = hp_gpt_config_from_model(&cfg.model);
            compare("gpt moe tp2", &c, MOE_TP, world);
            hp_run_config_free(&cfg);
        }
        if (hp_run_config_load_string(MOE_EP, strlen(MOE_EP), "moe-ep", &cfg) == HP_STATUS_OK) {
            hp_gpt_config c = hp_gpt_config_from_model(&cfg.model);
            compare("gpt moe ep2", &c, MOE_EP, world);
            hp_run_config_free(&cfg);
        }
        char text[2048];
        snprintf(text, sizeof text, LLAMA_TP, 2);
        if (hp_run_config_load_string(text, strlen(text), "llama", &cfg) == HP_STATUS_OK) {
            hp_gpt_config c = hp_gpt_config_from_model(&cfg.model);
            compare("llama gqa tp2", &c, text, world);
            hp_run_config_free(&cfg);
        }
        snprintf(text, sizeof text, LLAMA_TP, 1); /* one kv head cannot be split over 2 ranks */
        refuse(world, text, true, "does not divide kv_heads 1 (heads 4, kv_heads 1)");
        snprintf(text, sizeof text, LLAMA_TP, 2);
        refuse(world, text, false, "a strategy needs the cache");
        char split[2048]; /* the generator writes whole rows of tokens: split inputs are refused */
        snprintf(split, sizeof split, "%s  inputs: {tokens: [tp, none]}\n", GPT_TP);
        refuse(world, split, true, "the strategy splits input 'tokens'");
    }
    int failed = g_failed;
    hp_comm_all_reduce(world, &g_failed, &failed, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    if (g_rank == 0) printf(failed ? "test_generate_tp: FAILED\n" : "test_generate_tp: ok\n");
    return failed ? 1 : 0;
}
