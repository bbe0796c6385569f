/* Incremental decoding with a KV cache (hp/generate.h): greedy cached decoding equals full
 * recomputation (tokens exactly, logits within 1e-5) for GPT-2 and Llama (multi-head, GQA,
 * multi-query), batched sequences of different prompt lengths equal the same sequences alone,
 * ATTENTION_CACHE equals causal ATTENTION, the sampler's top-k / top-p / temperature properties,
 * seeded determinism, and the bad inputs. */
#include "testutil.h"

#include "hp/generate.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static hp_gpt_config gpt2_cfg(void) {
    return (hp_gpt_config){.family = HP_MODEL_FAMILY_GPT2, .vocab = 61, .context = 24, .layers = 2, .heads = 4,
                           .width = 32, .tied_head = true};
}

static hp_gpt_config llama_cfg(int kv_heads) {
    return (hp_gpt_config){.family = HP_MODEL_FAMILY_LLAMA, .vocab = 61, .context = 24, .layers = 2, .heads = 4,
                           .width = 32, .kv_heads = kv_heads, .ffn_width = 48};
}

/* Random weights (wide enough that greedy choices are not near-ties), the same for every store. */
static void fill_weights(hp_generator *gen, hp_store *st) {
    const hp_graph *g = hp_generator_graph(gen);
    int n = hp_graph_params(g, NULL, 0);
    hp_tid *ids = calloc((size_t)n, sizeof *ids);
    hp_graph_params(g, ids, n);
    for (int i = 0; i < n; i++) {
        const hp_tensor *x = hp_graph_tensor(g, ids[i]);
        float *d = hp_store_data(st, x->name);
        assert_non_null(d);
        uint64_t seed = 1469598103934665603ull;
        for (const char *c = x->name; *c; c++) seed = (seed ^ (unsigned char)*c) * 1099511628211ull;
        hp_test_fill_uniform(d, (size_t)hp_shape_numel(&x->shape), seed, -0.4f, 0.4f);
        assert_ok(hp_store_touch(st, x->name));
    }
    free(ids);
}

typedef struct run_result {
    int32_t *tokens;
    float *logits;
} run_result;

/* Generates with a fresh store and generator; the caller frees the result's arrays. */
static run_result run(const hp_gpt_config *c, bool cache, int slots, int n_seq, const int32_t *const *prompts,
                      const int *lens, const hp_generate_opts *o) {
    hp_store *st;
    assert_ok(hp_store_new(NULL, NULL, &st));
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    go.slots = slots;
    go.use_cache = cache;
    hp_generator *gen;
    assert_ok(hp_generator_new(c, st, &go, &gen));
    fill_weights(gen, st);
    run_result r;
    size_t n = (size_t)n_seq * (size_t)o->max_new_tokens;
    r.tokens = calloc(n + 1, sizeof *r.tokens);
    r.logits = calloc(n * (size_t)c->vocab + 1, sizeof *r.logits);
    hp_generate_opts oo = *o;
    oo.logits = r.logits;
    assert_ok(hp_generate(gen, n_seq, prompts, lens, &oo, r.tokens));
    hp_generator_stats s;
    hp_generator_get_stats(gen, &s);
    assert_int_equal(s.tokens, (int64_t)n);
    if (cache) {
        assert_int_equal(s.decode_runs, o->max_new_tokens - 1);
        assert_true(s.cache_bytes > 0);
    }
    hp_generator_free(gen);
    hp_store_free(st);
    return r;
}

static const int32_t P0[] = {3, 14, 15, 9, 26, 5, 35}, P1[] = {8, 9, 7}, P2[] = {42};

/* Greedy: cached == recomputed (tokens, logits), batched == alone. */
static void check_equal(const hp_gpt_config *c, bool need_varied) {
    const int32_t *prompts[3] = {P0, P1, P2};
    int lens[3] = {7, 3, 0}; /* the empty prompt is the single id 0 */
    hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
    o.max_new_tokens = 12;
    /* 4 slots, 3 used: an idle slot (all padding) rides along */
    run_result a = run(c, true, 4, 3, prompts, lens, &o), b = run(c, false, 3, 3, prompts, lens, &o);
    size_t n = 3 * 12;
    double worst = 0;
    for (size_t i = 0; i < n; i++) assert_int_equal(a.tokens[i], b.tokens[i]);
    for (size_t i = 0; i < n * (size_t)c->vocab; i++) {
        double d = fabs((double)a.logits[i] - b.logits[i]);
        worst = d > worst ? d : worst;
        assert_close(a.logits[i], b.logits[i], 0.0, 1e-5);
    }
    print_message("  max |logit cached - recomputed| = %.3g\n", worst);
    /* the tokens are not constant (the comparison means something) */
    bool varied = false;
    for (size_t i = 1; i < n; i++) varied |= a.tokens[i] != a.tokens[0];
    if (need_varied) assert_true(varied);
    /* each sequence alone, in a one-slot generator: the same tokens */
    for (int j = 0; j < 3; j++) {
        run_result s = run(c, true, 1, 1, &prompts[j], &lens[j], &o);
        for (int i = 0; i < 12; i++) assert_int_equal(s.tokens[i], a.tokens[j * 12 + i]);
        free(s.tokens);
        free(s.logits);
    }
    free(a.tokens);
    free(a.logits);
    free(b.tokens);
    free(b.logits);
}

static void test_greedy_gpt2(void **state) {
    (void)state;
    hp_gpt_config c = gpt2_cfg();
    c.tied_head = false;
    check_equal(&c, true);
    c.tied_head = true; /* random tied weights settle on one token: still compared */
    check_equal(&c, false);
}

static void test_greedy_llama(void **state) {
    (void)state;
    hp_gpt_config c = llama_cfg(0);
    check_equal(&c, true);
}

static void test_greedy_llama_gqa(void **state) {
    (void)state;
    hp_gpt_config c = llama_cfg(2);
    check_equal(&c, true);
    c = llama_cfg(1); /* multi-query */
    check_equal(&c, true);
}

/* Sampled (temperature, top-k, top-p): cached == recomputed for the same seed; another seed differs. */
static void test_sampled_seeded(void **state) {
    (void)state;
    hp_gpt_config c = llama_cfg(2);
    const int32_t *prompts[2] = {P0, P1};
    int lens[2] = {7, 3};
    hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
    o.max_new_tokens = 14;
    o.temperature = 1.5f;
    o.top_k = 20;
    o.top_p = 0.95f;
    o.seed = 11;
    run_result a = run(&c, true, 2, 2, prompts, lens, &o), b = run(&c, false, 2, 2, prompts, lens, &o);
    run_result a2 = run(&c, true, 2, 2, prompts, lens, &o);
    o.seed = 12;
    run_result d = run(&c, true, 2, 2, prompts, lens, &o);
    int differ = 0;
    for (int i = 0; i < 28; i++) {
        assert_int_equal(a.tokens[i], b.tokens[i]);
        assert_int_equal(a.tokens[i], a2.tokens[i]);
        differ += a.tokens[i] != d.tokens[i];
    }
    assert_true(differ > 0);
    run_result *all[4] = {&a, &b, &a2, &d};
    for (int i = 0; i < 4; i++) {
        free(all[i]->tokens);
        free(all[i]->logits);
    }
}

/* ATTENTION_CACHE over an empty cache with positions 0..T-1 is causal ATTENTION; then one more row
 * at position T attends to all T + 1. */
static void test_op_equals_attention(void **state) {
    (void)state;
    const int S = 2, T = 5, H = 4, KV = 2, D = 3, TM = 8;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(S, T, H * D));
    hp_tid k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(S, T, KV * D));
    hp_tid v = hp_input(g, "v", HP_DTYPE_F32, HP_SHAPE(S, T, KV * D));
    hp_tid kc = hp_leaf(g, "kc", HP_TENSOR_KIND_STATE, HP_DTYPE_F32, HP_SHAPE(S, KV, TM, D));
    hp_tid vc = hp_leaf(g, "vc", HP_TENSOR_KIND_STATE, HP_DTYPE_F32, HP_SHAPE(S, KV, TM, D));
    hp_tid pos = hp_input(g, "pos", HP_DTYPE_I32, HP_SHAPE(S, T));
    hp_tid o1 = hp_attention_cache(g, q, k, v, kc, vc, pos, H, KV);
    hp_tid o2 = hp_attention_gqa(g, q, k, v, H, KV, true);
    assert_ok(hp_graph_status(g));
    hp_tid keep[2] = {o1, o2};
    hp_program *p = hp_test_compile(g, keep, 2);
    hp_test_fill_uniform(hp_program_data(p, q), S * T * H * D, 1, -1, 1);
    hp_test_fill_uniform(hp_program_data(p, k), S * T * KV * D, 2, -1, 1);
    hp_test_fill_uniform(hp_program_data(p, v), S * T * KV * D, 3, -1, 1);
    int32_t *pp = hp_program_data(p, pos);
    for (int i = 0; i < S * T; i++) pp[i] = i % T;
    pp[T + T - 1] = -1; /* slot 1's last row is padding: zero output, no write */
    assert_ok(hp_program_run(p));
    const float *a = hp_program_data(p, o1), *b = hp_program_data(p, o2);
    for (int i = 0; i < S * T * H * D; i++) {
        bool pad = i / (H * D) == T + T - 1;
        assert_close(a[i], pad ? 0.0f : b[i], 1e-5, 1e-6);
    }
    const float *kk = hp_program_data(p, k), *kcd = hp_program_data(p, kc);
    /* slot 0, kv head 1, position 2 holds row 2's head 1 */
    for (int d = 0; d < D; d++) assert_true(kcd[((0 * KV + 1) * TM + 2) * D + d] == kk[2 * KV * D + D + d]);
    for (int d = 0; d < D; d++) assert_true(kcd[((1 * KV + 0) * TM + T - 1) * D + d] == 0.0f); /* the pad row */
    /* a position beyond the cache is an error naming it */
    pp[3] = TM;
    assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("position 8 of slot 0, row 3");
    hp_program_free(p);
    /* no gradient: the autodiff refuses with a clear error */
    hp_tid loss = hp_sum(g, o1, -1);
    hp_tid grad;
    assert_int_equal(hp_autodiff(g, loss, &q, 1, &grad), HP_STATUS_UNSUPPORTED);
    hp_test_assert_error_contains("inference operator");
    hp_graph_free(g);
    /* shape errors */
    g = hp_graph_new();
    q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(S, T, H * D));
    k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(S, T, KV * D));
    kc = hp_leaf(g, "kc", HP_TENSOR_KIND_STATE, HP_DTYPE_F32, HP_SHAPE(S, KV, TM, D + 1));
    pos = hp_input(g, "pos", HP_DTYPE_I32, HP_SHAPE(S, T));
    assert_int_equal(hp_attention_cache(g, q, k, k, kc, kc, pos, H, KV), HP_TID_NONE);
    hp_test_assert_error_contains("k_cache must be f32 [2, 2, 8, 3]");
    hp_graph_free(g);
}

/* The sharding rule: heads split over tp (the caches' kv-head dim with them, positions by slot);
 * kv heads the axis does not divide: replicated attention. */
static void test_op_shard_rule(void **state) {
    (void)state;
    hp_mesh *mesh;
    assert_ok(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, NULL, 0, &mesh));
    for (int kv = 2; kv >= 1; kv--) {
        const int S = 4, T = 3, H = 4, D = 2, TM = 8;
        hp_graph *g = hp_graph_new();
        hp_tid q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(S, T, H * D));
        hp_tid k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(S, T, kv * D));
        hp_tid kc = hp_leaf(g, "kc", HP_TENSOR_KIND_STATE, HP_DTYPE_F32, HP_SHAPE(S, kv, TM, D));
        hp_tid pos = hp_input(g, "pos", HP_DTYPE_I32, HP_SHAPE(S, T));
        assert_true(hp_attention_cache(g, q, k, k, kc, kc, pos, H, kv) != HP_TID_NONE);
        const hp_node *n = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
        hp_layout hint[HP_MAX_NODE_INPUTS];
        for (int i = 0; i < HP_MAX_NODE_INPUTS; i++) hint[i].ndim = -1;
        hp_shard_ctx c = {.g = g, .mesh = mesh, .index = 0, .hint = hint};
        hp_layout in[HP_MAX_NODE_INPUTS], req[HP_MAX_NODE_INPUTS], out[1], want;
        assert_ok(hp_layout_parse("[dp, none, tp]", mesh, &in[0]));
        for (int i = 1; i < 6; i++) in[i] = hp__lay_replicated(i == 3 || i == 4 ? 4 : i == 5 ? 2 : 3);
        for (int i = 0; i < 6; i++) req[i] = in[i];
        hp_layout_init(&out[0], 3);
        hp_attrs local = n->attr;
        bool drop[HP_MAX_NODE_INPUTS] = {0};
        assert_ok(hp__op_def(HP_OP_ATTENTION_CACHE)->shard(&c, n, in, req, out, &local, drop));
        assert_ok(hp_layout_parse(kv == 2 ? "[dp, tp, none, none]" : "[dp, none, none, none]", mesh, &want));
        assert_true(hp_layout_equal(&req[3], &want) && hp_layout_equal(&req[4], &want));
        assert_ok(hp_layout_parse("[dp, none]", mesh, &want));
        assert_true(hp_layout_equal(&req[5], &want));
        assert_ok(hp_layout_parse(kv == 2 ? "[dp, none, tp]" : "[dp, none, none]", mesh, &want));
        assert_true(hp_layout_equal(&out[0], &want) && hp_layout_equal(&req[1], &want));
        assert_int_equal(local.i[0], kv == 2 ? H / 2 : H);
        assert_int_equal(local.i[2], 1); /* 2 kv heads over tp 2; or the 1 kv head whole */
        hp_graph_free(g);
    }
    hp_mesh_free(mesh);
}

/* ---- the sampler ---- */

static void test_sampler_topk1_greedy(void **state) {
    (void)state;
    float l[97];
    for (int r = 0; r < 20; r++) {
        hp_test_fill_uniform(l, 97, 100 + (uint64_t)r, -3, 3);
        int best = 0, t;
        for (int j = 1; j < 97; j++) best = l[j] > l[best] ? j : best;
        for (int i = 0; i < 50; i++) {
            double u = i / 50.0;
            assert_ok(hp_sample_token(l, 97, 1.0f, 1, 1.0f, u, &t));
            assert_int_equal(t, best);
            assert_ok(hp_sample_token(l, 97, 0.0f, 0, 1.0f, u, &t));
            assert_int_equal(t, best);
            assert_ok(hp_sample_token(l, 97, 2.0f, 1, 0.3f, u, &t));
            assert_int_equal(t, best);
        }
    }
}

/* Frequencies over a fine grid of u: exactly the kept ids, in the renormalized proportions. */
static void freqs(const float *l, int V, float temp, int k, float p, double *f) {
    const int n = 20000;
    for (int j = 0; j < V; j++) f[j] = 0;
    for (int i = 0; i < n; i++) {
        int t;
        assert_ok(hp_sample_token(l, V, temp, k, p, (i + 0.5) / n, &t));
        assert_true(t >= 0 && t < V);
        f[t] += 1.0 / n;
    }
}

static void test_sampler_top_p_top_k_temperature(void **state) {
    (void)state;
    /* ids in shuffled order; probabilities 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1 */
    float l[4] = {logf(0.3f), logf(0.05f), logf(0.5f), logf(0.15f)};
    double f[4];
    freqs(l, 4, 1.0f, 0, 0.75f, f); /* nucleus 0.75: {2, 0} (0.5 + 0.3 >= 0.75) */
    assert_close(f[2], 0.5 / 0.8, 0, 1e-3);
    assert_close(f[0], 0.3 / 0.8, 0, 1e-3);
    assert_true(f[1] == 0 && f[3] == 0);
    freqs(l, 4, 1.0f, 0, 0.85f, f); /* 0.85 needs the third: {2, 0, 3} */
    assert_close(f[3], 0.15 / 0.95, 0, 1e-3);
    assert_true(f[1] == 0);
    freqs(l, 4, 1.0f, 0, 0.4f, f); /* the top token alone already holds 0.5 */
    assert_close(f[2], 1.0, 0, 1e-9);
    freqs(l, 4, 1.0f, 2, 1.0f, f); /* top-k 2: the same set as nucleus 0.75 */
    assert_close(f[2], 0.5 / 0.8, 0, 1e-3);
    assert_true(f[1] == 0 && f[3] == 0);
    freqs(l, 4, 1.0f, 3, 0.9f, f); /* top-k 3 then nucleus 0.9 of the renormalized 0.95 */
    assert_true(f[1] == 0 && f[3] > 0);
    freqs(l, 4, 1.0f, 0, 1.0f, f); /* no filter: the softmax itself */
    assert_close(f[1], 0.05, 0, 1e-3);
    assert_close(f[2], 0.5, 0, 1e-3);
    freqs(l, 4, 2.0f, 0, 1.0f, f); /* temperature 2: p^(1/2), renormalized */
    double z = sqrt(0.3) + sqrt(0.05) + sqrt(0.5) + sqrt(0.15);
    assert_close(f[1], sqrt(0.05) / z, 0, 1e-3);
    assert_close(f[2], sqrt(0.5) / z, 0, 1e-3);
    /* errors */
    int t;
    assert_int_equal(hp_sample_token(l, 4, 1.0f, 0, 0.0f, 0.5, &t), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("top_p 0 must be in (0, 1]");
    assert_int_equal(hp_sample_token(l, 4, 1.0f, 0, 1.0f, 1.0, &t), HP_STATUS_INVALID_ARGUMENT);
    l[1] = NAN;
    assert_int_equal(hp_sample_token(l, 4, 1.0f, 0, 1.0f, 0.5, &t), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("logit 1 is NaN");
}

/* ---- bad input ---- */

static void test_bad_input(void **state) {
    (void)state;
    hp_gpt_config c = gpt2_cfg();
    hp_store *st;
    assert_ok(hp_store_new(NULL, NULL, &st));
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    go.slots = 2;
    hp_generator *gen;
    assert_ok(hp_generator_new(&c, st, &go, &gen));
    int32_t longp[30] = {0}, out[64];
    const int32_t *pr[3] = {longp, longp, longp};
    int lens[3] = {25, 1, 1};
    hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
    o.max_new_tokens = 1;
    assert_int_equal(hp_generate(gen, 1, pr, lens, &o, out), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("prompt 0 of 25 tokens is longer than the context of 24 tokens");
    lens[0] = 20;
    o.max_new_tokens = 5;
    assert_int_equal(hp_generate(gen, 1, pr, lens, &o, out), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("prompt 0 of 20 tokens + 5 new tokens = 25 tokens is beyond the context of 24");
    o.max_new_tokens = 4; /* exactly the context: fine */
    assert_ok(hp_generate(gen, 1, pr, lens, &o, out));
    longp[3] = 61;
    assert_int_equal(hp_generate(gen, 1, pr, lens, &o, out), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("prompt 0 has id 61 at position 3, outside [0, vocab 61)");
    longp[3] = 0;
    assert_int_equal(hp_generate(gen, 3, pr, lens, &o, out), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("3 sequences is outside [1, batch slots 2]");
    o.top_p = 1.5f;
    assert_int_equal(hp_generate(gen, 1, pr, lens, &o, out), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("top_p 1.5 is outside (0, 1]");
    hp_generator_free(gen);
    go.t_max = 25;
    assert_int_equal(hp_generator_new(&c, st, &go, &gen), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("cache length 25 is outside [0, context 24]");
    go.t_max = 0;
    go.slots = 0;
    assert_int_equal(hp_generator_new(&c, st, &go, &gen), HP_STATUS_INVALID_ARGUMENT);
    hp_store_free(st);
    /* the decode graph refuses a dropout */
    hp_graph *g = hp_graph_new();
    hp_gpt_decode m;
    c.dropout = 0.1f;
    assert_int_equal(hp_gpt_build_decode(g, &c, 1, 1, 24, &m), HP_STATUS_INVALID_ARGUMENT);
    hp_graph_free(g);
}

/* The cache is state-store state: one entry per layer and k/v, (slots, kv_heads, t_max, D). */
static void test_cache_in_store(void **state) {
    (void)state;
    hp_gpt_config c = llama_cfg(2);
    hp_store *st;
    assert_ok(hp_store_new(NULL, NULL, &st));
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    go.slots = 3;
    hp_generator *gen;
    assert_ok(hp_generator_new(&c, st, &go, &gen));
    hp_store_entry_info info;
    assert_ok(hp_store_info(st, "kv.1.v", &info));
    hp_shape want = HP_SHAPE(3, 2, 24, 8);
    assert_true(hp_shape_equal(&info.shape, &want));
    assert_int_equal(info.tier, HP_TIER_DEVICE);
    hp_generator_stats s;
    hp_generator_get_stats(gen, &s);
    assert_int_equal(s.cache_bytes, 2 * 2 * 3 * 2 * 24 * 8 * sizeof(float));
    hp_generator_free(gen);
    hp_store_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_gpt2),           cmocka_unit_test(test_greedy_llama),
        cmocka_unit_test(test_greedy_llama_gqa),      cmocka_unit_test(test_sampled_seeded),
        cmocka_unit_test(test_op_equals_attention),   cmocka_unit_test(test_op_shard_rule),
        cmocka_unit_test(test_sampler_topk1_greedy),
        cmocka_unit_test(test_sampler_top_p_top_k_temperature), cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_cache_in_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
