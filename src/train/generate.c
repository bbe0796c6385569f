/* Batched generation with a KV cache, or by recomputing the window (hp/generate.h). */
#include "hp/generate.h"

#include "hp/rng.h"
#include "hp/runtime.h"

#include <stdlib.h>
#include <string.h>

struct hp_generator {
    hp_gpt_config cfg;
    hp_store *store;
    hp_generator_opts o;
    int t_max;
    /* with the cache: the decode program (seq 1); without: the recompute program (seq t_max) */
    hp_graph *g_step;
    hp_program *p_step;
    hp_gpt_decode dec;
    hp_gpt full;
    /* with the cache: the last prefill program built (seq pre_T) */
    hp_graph *g_pre;
    hp_program *p_pre;
    hp_gpt_decode pre;
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

/* A decode-graph program of `seq` tokens per slot into *g, *p, *m. */
static hp_status build_decode(const hp_generator *gen, int seq, hp_graph **g, hp_program **p, hp_gpt_decode *m) {
    *g = hp_graph_new();
    if (!*g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a graph");
    HP_CHECK(hp_gpt_build_decode(*g, &gen->cfg, gen->o.slots, seq, gen->t_max, m));
    return make_program(*g, gen->store, m->logits, (int64_t)seq * gen->o.slots <= 64, p);
}

hp_status hp_generator_new(const hp_gpt_config *c, hp_store *store, const hp_generator_opts *o, hp_generator **out) {
    *out = NULL;
    if (o->slots < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: slots (batch) must be >= 1, got %d", o->slots);
    if (o->t_max < 0 || o->t_max > c->context)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: cache length %d is outside [0, context %d]", o->t_max,
                        c->context);
    hp_generator *gen = calloc(1, sizeof *gen);
    if (!gen) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory");
    gen->cfg = *c;
    gen->cfg.dropout = 0.0f;
    gen->store = store;
    gen->o = *o;
    gen->t_max = o->t_max ? o->t_max : c->context;
    hp_status st;
    if (o->use_cache) {
        st = build_decode(gen, 1, &gen->g_step, &gen->p_step, &gen->dec);
        if (st == HP_STATUS_OK) {
            int64_t KV = c->family == HP_MODEL_FAMILY_LLAMA && c->kv_heads ? c->kv_heads : c->heads;
            gen->stats.cache_bytes = (size_t)(2 * (int64_t)c->layers * o->slots * KV * gen->t_max *
                                              (c->width / c->heads)) * sizeof(float);
        }
    } else {
        gen->g_step = hp_graph_new();
        st = gen->g_step ? hp_gpt_build(gen->g_step, &gen->cfg, o->slots, gen->t_max, false, &gen->full)
                         : hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a graph");
        if (st == HP_STATUS_OK) st = make_program(gen->g_step, store, gen->full.logits, false, &gen->p_step);
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
    hp_program_free(gen->p_pre);
    hp_graph_free(gen->g_pre);
    hp_program_free(gen->p_step);
    hp_graph_free(gen->g_step);
    free(gen);
}

const hp_graph *hp_generator_graph(const hp_generator *gen) { return gen->g_step; }

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
static void set_row(hp_program *p, const hp_gpt_decode *m, int s, int t, int32_t tok, int32_t pos) {
    size_t r = (size_t)s * m->seq + t;
    ((int32_t *)hp_program_data(p, m->tokens))[r] = tok;
    ((int32_t *)hp_program_data(p, m->positions))[r] = pos;
    if (m->position_ids != HP_TID_NONE) ((int32_t *)hp_program_data(p, m->position_ids))[r] = pos < 0 ? 0 : pos;
}

static hp_status generate_cached(hp_generator *gen, int n_seq, const int32_t *const *prompts, const int *lens,
                                 const hp_generate_opts *o, int32_t *out) {
    const int S = gen->o.slots, V = gen->cfg.vocab, N = o->max_new_tokens;
    int Tp = 1;
    for (int j = 0; j < n_seq; j++) Tp = plen(lens, j) > Tp ? plen(lens, j) : Tp;
    hp_program *p = gen->p_step;
    const hp_gpt_decode *m = &gen->dec;
    if (Tp > 1) { /* a prefill program of Tp rows per slot (kept for the next call of that length) */
        if (!gen->p_pre || gen->pre.seq != Tp) {
            hp_program_free(gen->p_pre);
            hp_graph_free(gen->g_pre);
            gen->p_pre = NULL;
            gen->g_pre = NULL;
            HP_CHECK(build_decode(gen, Tp, &gen->g_pre, &gen->p_pre, &gen->pre));
        }
        p = gen->p_pre;
        m = &gen->pre;
    }
    for (int s = 0; s < S; s++)
        for (int t = 0; t < Tp; t++) {
            bool real = s < n_seq && t < plen(lens, s);
            set_row(p, m, s, t, real ? pid(prompts, lens, s, t) : 0, real ? t : -1);
        }
    HP_CHECK(timed_run(p, &gen->stats.prefill_seconds, &gen->stats.prefill_runs));
    const float *logits = hp_program_data(p, m->logits);
    for (int j = 0; j < n_seq; j++) HP_CHECK(pick(o, V, logits + ((size_t)j * Tp + plen(lens, j) - 1) * V, j, 0, out));
    p = gen->p_step;
    m = &gen->dec;
    logits = hp_program_data(p, m->logits);
    for (int i = 1; i < N; i++) {
        for (int s = 0; s < S; s++)
            if (s < n_seq) set_row(p, m, s, 0, out[(size_t)s * N + i - 1], plen(lens, s) + i - 1);
            else set_row(p, m, s, 0, 0, -1);
        HP_CHECK(timed_run(p, &gen->stats.decode_seconds, &gen->stats.decode_runs));
        for (int j = 0; j < n_seq; j++) HP_CHECK(pick(o, V, logits + (size_t)j * V, j, i, out));
    }
    return HP_STATUS_OK;
}

/* The old path: every token re-runs the whole window (the sequence so far, left-aligned; causal
 * attention makes the zero padding after it irrelevant to the logits at its last position). */
static hp_status generate_recompute(hp_generator *gen, int n_seq, const int32_t *const *prompts, const int *lens,
                                    const hp_generate_opts *o, int32_t *out) {
    const int S = gen->o.slots, V = gen->cfg.vocab, N = o->max_new_tokens, T = gen->full.seq;
    int32_t *tok = hp_program_data(gen->p_step, gen->full.tokens);
    const float *logits = hp_program_data(gen->p_step, gen->full.logits);
    for (int i = 0; i < N; i++) {
        memset(tok, 0, sizeof *tok * (size_t)S * T);
        for (int s = 0; s < n_seq; s++) {
            int32_t *row = tok + (size_t)s * T;
            int P = plen(lens, s);
            for (int t = 0; t < P; t++) row[t] = pid(prompts, lens, s, t);
            for (int t = 0; t < i; t++) row[P + t] = out[(size_t)s * N + t];
        }
        HP_CHECK(timed_run(gen->p_step, &gen->stats.decode_seconds, &gen->stats.decode_runs));
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
