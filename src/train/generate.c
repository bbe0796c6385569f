/* Batched generation with a KV cache, or by recomputing the window (hp/generate.h). */
#include "hp/generate.h"

#include "hp/compile.h"
#include "hp/rng.h"
#include "hp/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One decode-graph program: single-device (c NULL) or compiled under the strategy, with the
 * per-rank ids of its inputs and of its (replicated) logits. */
typedef struct gprog {
    hp_graph *g;
    hp_compiled *c;
    hp_program *p;
    hp_gpt_decode m;
    hp_tid tok, pos, pid, logits;
} gprog;

struct hp_generator {
    hp_gpt_config cfg;
    hp_store *store;
    hp_generator_opts o;
    int t_max;
    /* with the cache: the decode program (seq 1); without: the recompute program (seq t_max) */
    gprog step;
    hp_gpt full;
    /* with the cache: the last prefill program built (seq pre.m.seq) */
    gprog pre;
    /* under a strategy: the ranks that hold one model replica together (the axes that split a
     * parameter; owned by the mesh), NULL when one rank does; their first rank's tokens are
     * broadcast each step (`picked`: one step's token per slot) */
    hp_comm *agree;
    int32_t *picked;
    hp_generator_stats stats;
};

static hp_status make_program(hp_graph *g, hp_store *store, hp_tid logits, bool small, hp_program **out) {
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    /* A decode step's nodes are tiny (one row per sequence; `small`: at most 64 rows in all):
     * dispatched one by one, each kernel runs on the calling thread below its parallel threshold
     * (or opens its own region above it), instead of a thread team meeting at a barrier after
     * every node (bench_generate on the shared 2-core machine: 7x the tokens/s). */
    po.node_by_node = small;
    po.keep = &logits;
    po.n_keep = 1;
    po.store = store;
    return hp_program_new(g, &po, out);
}

static void gprog_free(gprog *x) {
    if (x->c) hp_compiled_free(x->c);
    else hp_program_free(x->p);
    hp_graph_free(x->g);
    memset(x, 0, sizeof *x);
}

/* The name of layer l's key projection weight (its dim 0 split is the heads' split). */
static void k_weight_name(const hp_gpt_config *c, int l, char *buf, size_t n) {
    if (c->family == HP_MODEL_FAMILY_LLAMA) snprintf(buf, n, "model.layers.%d.self_attn.k_proj.weight", l);
    else snprintf(buf, n, "blocks.%d.attn.k.weight", l);
}
static void q_weight_name(const hp_gpt_config *c, int l, char *buf, size_t n) {
    if (c->family == HP_MODEL_FAMILY_LLAMA) snprintf(buf, n, "model.layers.%d.self_attn.q_proj.weight", l);
    else snprintf(buf, n, "blocks.%d.attn.q.weight", l);
}

/*
 * The leaf layouts of a decode graph under the generator's strategy: the strategy's parameter
 * rules (hp_strategy_annotate), then each layer's cache pair split over kv heads (dim 1) by the
 * axes that split its key projection's output features (dim 0), so ATTENTION_CACHE's sharding rule
 * finds the cache in the layout it asks for and writes it in place (no copy, no write-back).
 */
static hp_status annotate(void *user, const hp_graph *g, const hp_mesh *mesh, hp_layout *lay) {
    const hp_generator *gen = user;
    const hp_gpt_config *c = &gen->cfg;
    HP_CHECK(hp_strategy_annotate_part(gen->o.strategy, g, lay));
    const char *inputs[3] = {"tokens", "positions", "position_ids"};
    for (int i = 0; i < 3; i++) {
        hp_tid t = hp_graph_find(g, inputs[i]);
        if (t == HP_TID_NONE || lay[t].ndim < 0) continue;
        for (int d = 0; d < lay[t].ndim; d++)
            if (lay[t].nmap[d] > 0)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: the strategy splits input '%s' (dim %d); the "
                                "generator's inputs are replicated (its strategy splits the weights: tensor "
                                "parallelism over heads)", inputs[i], d);
    }
    const int64_t H = c->heads, KV = c->family == HP_MODEL_FAMILY_LLAMA && c->kv_heads ? c->kv_heads : c->heads;
    for (int l = 0; l < c->layers; l++) {
        char kn[96], qn[96], cn[32];
        k_weight_name(c, l, kn, sizeof kn);
        q_weight_name(c, l, qn, sizeof qn);
        hp_tid kw = hp_graph_find(g, kn), qw = hp_graph_find(g, qn);
        if (kw == HP_TID_NONE || qw == HP_TID_NONE)
            return hp_error(HP_STATUS_INTERNAL, "generate: no parameter '%s' or '%s' in the decode graph", kn, qn);
        hp_layout kl = lay[kw].ndim >= 0 ? lay[kw] : (hp_layout){.ndim = 2};
        hp_layout ql = lay[qw].ndim >= 0 ? lay[qw] : (hp_layout){.ndim = 2};
        int64_t ks = hp_layout_shards(&kl, mesh, 0), qs = hp_layout_shards(&ql, mesh, 0);
        bool same = kl.nmap[0] == ql.nmap[0];
        for (int a = 0; same && a < kl.nmap[0]; a++) same = kl.map[0][a] == ql.map[0][a];
        if (!same)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: '%s' splits its output features over %lld shards "
                            "and '%s' over %lld (other axes): the query and key heads split together", qn,
                            (long long)qs, kn, (long long)ks);
        if (ks > 1 && (H % ks != 0 || KV % ks != 0))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: tensor parallelism of degree %lld over the heads "
                            "does not divide %s %lld (heads %lld, kv_heads %lld)", (long long)ks,
                            KV % ks ? "kv_heads" : "heads", (long long)(KV % ks ? KV : H), (long long)H, (long long)KV);
        hp_layout cache;
        hp_layout_init(&cache, 4);
        cache.nmap[1] = kl.nmap[0];
        for (int a = 0; a < kl.nmap[0]; a++) cache.map[1][a] = kl.map[0][a];
        for (int which = 0; which < 2; which++) {
            snprintf(cn, sizeof cn, "kv.%d.%c", l, which ? 'v' : 'k');
            hp_tid t = hp_graph_find(g, cn);
            if (t != HP_TID_NONE) lay[t] = cache;
        }
    }
    return HP_STATUS_OK;
}

/* Records the logical shape and layout of every parameter and cache entry of x in the store, but
 * for entries declared already (a co-located learner's: x bound to their views). */
static hp_status declare_entries(hp_generator *gen, const gprog *x) {
    hp_partition *part = hp_compiled_partition(x->c);
    for (int t = 0; t < hp_graph_n_tensors(x->g); t++) {
        const hp_tensor *y = hp_graph_tensor(x->g, t);
        hp_store_entry_info info;
        if ((y->kind != HP_TENSOR_KIND_PARAM && y->kind != HP_TENSOR_KIND_STATE) || !y->name) continue;
        if (hp_store_info(gen->store, y->name, &info) == HP_STATUS_OK && info.declared) continue;
        HP_CHECK(hp_store_declare(gen->store, y->name, y->dtype, &y->shape, hp_partition_layout(part, t)));
    }
    return HP_STATUS_OK;
}

/* The sub-communicator over the mesh axes that split some parameter of x (the ranks holding one
 * model replica together) into gen->agree; none when they are one rank. Collective over the mesh. */
static hp_status agree_comm(hp_generator *gen, const gprog *x) {
    hp_partition *part = hp_compiled_partition(x->c);
    hp_mesh *mesh = hp_strategy_mesh(gen->o.strategy);
    bool used[HP_MESH_MAX_AXES] = {false};
    for (int t = 0; t < hp_graph_n_tensors(x->g); t++) {
        if (hp_graph_tensor(x->g, t)->kind != HP_TENSOR_KIND_PARAM) continue;
        const hp_layout *l = hp_partition_layout(part, t);
        for (int d = 0; l && d < l->ndim; d++)
            for (int a = 0; a < l->nmap[d]; a++) used[l->map[d][a]] = true;
    }
    int axes[HP_MESH_MAX_AXES], n = 0, size = 1;
    for (int a = 0; a < hp_mesh_naxes(mesh); a++)
        if (used[a]) axes[n++] = a, size *= hp_mesh_dim(mesh, a);
    if (size <= 1) return HP_STATUS_OK;
    gen->picked = malloc(sizeof *gen->picked * (size_t)gen->o.slots);
    if (!gen->picked) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory");
    return hp_mesh_axes_comm(mesh, n, axes, &gen->agree);
}

/* Under a strategy: every rank of a model replica takes its first rank's token i of each of the
 * n_seq sequences (one broadcast a step). The replicated logits and the shared draws make them
 * equal already whenever the all-reduces hand every rank the same bytes (Open MPI's do; MPI only
 * recommends it); the broadcast makes it a guarantee, and a seed that differs between the ranks
 * harmless. */
static hp_status agree_tokens(hp_generator *gen, int n_seq, int N, int i, int32_t *out) {
    if (!gen->agree) return HP_STATUS_OK;
    for (int j = 0; j < n_seq; j++) gen->picked[j] = out[(size_t)j * N + i];
    HP_CHECK(hp_comm_broadcast(gen->agree, gen->picked, (size_t)n_seq, HP_DTYPE_I32, 0));
    for (int j = 0; j < n_seq; j++) out[(size_t)j * N + i] = gen->picked[j];
    return HP_STATUS_OK;
}

/* A decode-graph program of `seq` tokens per slot into *x: on one device, or compiled under the
 * strategy (collective over its mesh). */
static hp_status build_decode(hp_generator *gen, int seq, gprog *x) {
    memset(x, 0, sizeof *x);
    x->g = hp_graph_new();
    if (!x->g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a graph");
    HP_CHECK(hp_gpt_build_decode(x->g, &gen->cfg, gen->o.slots, seq, gen->t_max, &x->m));
    bool small = (int64_t)seq * gen->o.slots <= 64;
    if (!gen->o.strategy) {
        HP_CHECK(make_program(x->g, gen->store, x->m.logits, small, &x->p));
        x->tok = x->m.tokens, x->pos = x->m.positions, x->pid = x->m.position_ids, x->logits = x->m.logits;
        return HP_STATUS_OK;
    }
    hp_compile_opts co = HP_COMPILE_OPTS_INIT;
    co.loss = x->m.logits; /* resolved replicated: every rank samples from the whole vocabulary */
    co.mesh = hp_strategy_mesh(gen->o.strategy);
    co.annotate = annotate;
    co.annotate_user = gen;
    co.comm = gen->o.comm;
    co.bucket_size = 0;
    co.program.node_by_node = small;
    co.program.store = gen->store;
    HP_CHECK(hp_compile(x->g, &co, &x->c));
    x->p = hp_compiled_program(x->c);
    hp_partition *part = hp_compiled_partition(x->c);
    x->tok = hp_partition_local(part, x->m.tokens);
    x->pos = hp_partition_local(part, x->m.positions);
    x->pid = x->m.position_ids == HP_TID_NONE ? HP_TID_NONE : hp_partition_local(part, x->m.position_ids);
    x->logits = hp_compiled_loss(x->c);
    return declare_entries(gen, x);
}

hp_status hp_generator_new(const hp_gpt_config *c, hp_store *store, const hp_generator_opts *o, hp_generator **out) {
    *out = NULL;
    if (o->slots < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: slots (batch) must be >= 1, got %d", o->slots);
    if (o->t_max < 0 || o->t_max > c->context)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: cache length %d is outside [0, context %d]", o->t_max,
                        c->context);
    if (o->strategy && !o->use_cache)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: a strategy needs the cache (use_cache); recomputing "
                        "the window runs on one device");
    hp_generator *gen = calloc(1, sizeof *gen);
    if (!gen) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory");
    gen->cfg = *c;
    gen->cfg.dropout = 0.0f;
    gen->store = store;
    gen->o = *o;
    gen->t_max = o->t_max ? o->t_max : c->context;
    hp_status st;
    if (o->use_cache) {
        st = build_decode(gen, 1, &gen->step);
        if (st == HP_STATUS_OK && o->strategy) st = agree_comm(gen, &gen->step);
        for (int l = 0; st == HP_STATUS_OK && l < c->layers; l++)
            for (int which = 0; which < 2; which++) {
                char cn[32];
                hp_store_entry_info info;
                snprintf(cn, sizeof cn, "kv.%d.%c", l, which ? 'v' : 'k');
                if (hp_store_info(store, cn, &info) == HP_STATUS_OK) gen->stats.cache_bytes += info.bytes;
            }
    } else {
        gen->step.g = hp_graph_new();
        st = gen->step.g ? hp_gpt_build(gen->step.g, &gen->cfg, o->slots, gen->t_max, false, &gen->full)
                         : hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a graph");
        if (st == HP_STATUS_OK) st = make_program(gen->step.g, store, gen->full.logits, false, &gen->step.p);
    }
    if (st != HP_STATUS_OK) {
        hp_generator_free(gen);
        return st;
    }
    *out = gen;
    return HP_STATUS_OK;
}

void hp_generator_free(hp_generator *gen) {
    if (!gen) return;
    gprog_free(&gen->pre);
    gprog_free(&gen->step);
    free(gen->picked);
    free(gen);
}

const hp_graph *hp_generator_graph(const hp_generator *gen) { return gen->step.g; }

void hp_generator_get_stats(const hp_generator *gen, hp_generator_stats *out) { *out = gen->stats; }

/* Prompt j's id at t (an empty prompt is the single id 0) and its effective length. */
static int plen(const int *lens, int j) { return lens[j] > 0 ? lens[j] : 1; }
static int32_t pid(const int32_t *const *prompts, const int *lens, int j, int t) { return lens[j] > 0 ? prompts[j][t] : 0; }

static hp_status check_request(const hp_generator *gen, int n_seq, const int32_t *const *prompts, const int *lens,
                               const hp_generate_opts *o) {
    if (n_seq < 1 || n_seq > gen->o.slots)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: %d sequences is outside [1, batch slots %d]", n_seq,
                        gen->o.slots);
    if (o->max_new_tokens < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: max_new_tokens must be >= 0, got %d", o->max_new_tokens);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: top_p %g is outside (0, 1]", (double)o->top_p);
    for (int j = 0; j < n_seq; j++) {
        if (lens[j] < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: prompt %d has length %d", j, lens[j]);
        if (lens[j] > gen->t_max)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: prompt %d of %d tokens is longer than the context "
                            "of %d tokens", j, lens[j], gen->t_max);
        if ((int64_t)plen(lens, j) + o->max_new_tokens > gen->t_max)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: prompt %d of %d tokens + %d new tokens = %lld tokens "
                            "is beyond the context of %d tokens", j, plen(lens, j), o->max_new_tokens,
                            (long long)plen(lens, j) + o->max_new_tokens, gen->t_max);
        for (int t = 0; t < lens[j]; t++)
            if (prompts[j][t] < 0 || prompts[j][t] >= gen->cfg.vocab)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: prompt %d has id %d at position %d, outside "
                                "[0, vocab %d)", j, (int)prompts[j][t], t, gen->cfg.vocab);
    }
    return HP_STATUS_OK;
}

/* Samples token i of sequence j from `row` (V logits) into out. */
static hp_status pick(const hp_generate_opts *o, int vocab, const float *row, int j, int i, int32_t *out) {
    int N = o->max_new_tokens, tok, V = vocab;
    uint64_t key = hp_rng_hash("sample") ^ o->seed ^ ((uint64_t)j * 0x9e3779b97f4a7c15ull);
    double u = hp_rng_uniform(key, o->first_draw + (uint64_t)i);
    if (u >= 1.0) u = 0.0;
    if (o->sample_vocab > 0 && o->sample_vocab < V) V = o->sample_vocab;
    HP_CHECK(hp_sample_token(row, V, o->temperature, o->top_k, o->top_p, u, &tok));
    out[(size_t)j * N + i] = tok;
    if (o->logits) memcpy(o->logits + ((size_t)j * N + i) * (size_t)vocab, row, (size_t)vocab * sizeof *row);
    return HP_STATUS_OK;
}

/* Runs p, adding its time to *seconds and one to *runs. */
static hp_status timed_run(hp_program *p, double *seconds, int64_t *runs) {
    double t0 = hp_now_seconds();
    hp_status st = hp_program_run(p);
    *seconds += hp_now_seconds() - t0;
    (*runs)++;
    return st;
}

/* Writes the inputs of a decode-graph program: row (s, t) gets id tok and position pos (-1: pad). */
static void set_row(const gprog *x, int s, int t, int32_t tok, int32_t pos) {
    size_t r = (size_t)s * x->m.seq + t;
    ((int32_t *)hp_program_data(x->p, x->tok))[r] = tok;
    ((int32_t *)hp_program_data(x->p, x->pos))[r] = pos;
    if (x->pid != HP_TID_NONE) ((int32_t *)hp_program_data(x->p, x->pid))[r] = pos < 0 ? 0 : pos;
}

static hp_status generate_cached(hp_generator *gen, int n_seq, const int32_t *const *prompts, const int *lens,
                                 const hp_generate_opts *o, int32_t *out) {
    const int S = gen->o.slots, V = gen->cfg.vocab, N = o->max_new_tokens;
    int Tp = 1;
    for (int j = 0; j < n_seq; j++) Tp = plen(lens, j) > Tp ? plen(lens, j) : Tp;
    const gprog *x = &gen->step;
    if (Tp > 1) { /* a prefill program of Tp rows per slot (kept for the next call of that length) */
        if (!gen->pre.p || gen->pre.m.seq != Tp) {
            gprog_free(&gen->pre);
            hp_status st = build_decode(gen, Tp, &gen->pre);
            if (st != HP_STATUS_OK) {
                gprog_free(&gen->pre);
                return st;
            }
        }
        x = &gen->pre;
    }
    for (int s = 0; s < S; s++)
        for (int t = 0; t < Tp; t++) {
            bool real = s < n_seq && t < plen(lens, s);
            set_row(x, s, t, real ? pid(prompts, lens, s, t) : 0, real ? t : -1);
        }
    HP_CHECK(timed_run(x->p, &gen->stats.prefill_seconds, &gen->stats.prefill_runs));
    const float *logits = hp_program_data(x->p, x->logits);
    for (int j = 0; j < n_seq; j++) HP_CHECK(pick(o, V, logits + ((size_t)j * Tp + plen(lens, j) - 1) * V, j, 0, out));
    HP_CHECK(agree_tokens(gen, n_seq, N, 0, out));
    x = &gen->step;
    logits = hp_program_data(x->p, x->logits);
    for (int i = 1; i < N; i++) {
        for (int s = 0; s < S; s++)
            if (s < n_seq) set_row(x, s, 0, out[(size_t)s * N + i - 1], plen(lens, s) + i - 1);
            else set_row(x, s, 0, 0, -1);
        HP_CHECK(timed_run(x->p, &gen->stats.decode_seconds, &gen->stats.decode_runs));
        for (int j = 0; j < n_seq; j++) HP_CHECK(pick(o, V, logits + (size_t)j * V, j, i, out));
        HP_CHECK(agree_tokens(gen, n_seq, N, i, out));
    }
    return HP_STATUS_OK;
}

/* The old path: every token re-runs the whole window (the sequence so far, left-aligned; causal
 * attention makes the zero padding after it irrelevant to the logits at its last position). */
static hp_status generate_recompute(hp_generator *gen, int n_seq, const int32_t *const *prompts, const int *lens,
                                    const hp_generate_opts *o, int32_t *out) {
    const int S = gen->o.slots, V = gen->cfg.vocab, N = o->max_new_tokens, T = gen->full.seq;
    int32_t *tok = hp_program_data(gen->step.p, gen->full.tokens);
    const float *logits = hp_program_data(gen->step.p, gen->full.logits);
    for (int i = 0; i < N; i++) {
        memset(tok, 0, sizeof *tok * (size_t)S * T);
        for (int s = 0; s < n_seq; s++) {
            int32_t *row = tok + (size_t)s * T;
            int P = plen(lens, s);
            for (int t = 0; t < P; t++) row[t] = pid(prompts, lens, s, t);
            for (int t = 0; t < i; t++) row[P + t] = out[(size_t)s * N + t];
        }
        HP_CHECK(timed_run(gen->step.p, &gen->stats.decode_seconds, &gen->stats.decode_runs));
        for (int j = 0; j < n_seq; j++)
            HP_CHECK(pick(o, V, logits + ((size_t)j * T + plen(lens, j) + i - 1) * V, j, i, out));
    }
    return HP_STATUS_OK;
}

hp_status hp_generate(hp_generator *gen, int n_seq, const int32_t *const *prompts, const int *prompt_lens,
                      const hp_generate_opts *o, int32_t *out) {
    HP_CHECK(check_request(gen, n_seq, prompts, prompt_lens, o));
    if (o->max_new_tokens == 0) return HP_STATUS_OK;
    hp_status st = gen->o.use_cache ? generate_cached(gen, n_seq, prompts, prompt_lens, o, out)
                                    : generate_recompute(gen, n_seq, prompts, prompt_lens, o, out);
    if (st == HP_STATUS_OK) gen->stats.tokens += (int64_t)n_seq * o->max_new_tokens;
    return st;
}
