/*
 * MoE operators (hp/moe.h): MOE_ROUTE (softmax and sigmoid_bias), MOE_DISPATCH, MOE_COMBINE,
 * MOE_GEMM (+ MOE_GEMM_DW), MOE_BALANCE_LOSS and a whole MoE layer composed from them: finite-difference
 * gradient checks, forward values against naive references (the sort order, counts, gates), the
 * bias update, and errors naming the bad value.
 */
#include "gradcheck.h"
#include "hp/moe.h"
#include "hp/nn.h"
#include "hp/runtime.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Deterministic ints in [0, range). */
static void fill_ints(int32_t *d, int64_t n, int64_t range, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        d[i] = (int32_t)((s >> 33) % (uint64_t)range);
    }
}

/* Output j of the last node added. */
static hp_tid last_out(hp_graph *g, int j) { return hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out[j]; }

/* ---- MOE_ROUTE ---- */

typedef struct route_case {
    int k;
    hp_moe_router router;
    int which; /* 0: gates, 2: probs, 3: gates * 3 + (sum of probs over experts, broadcast) */
    hp_tid bias;
} route_case;

static hp_tid b_route(hp_graph *g, const hp_tid *p, void *user) {
    route_case *u = user;
    const hp_shape *ls = &hp_graph_tensor(g, p[0])->shape;
    u->bias = u->router == HP_MOE_ROUTER_SIGMOID_BIAS ? hp_input(g, "bias", HP_DTYPE_F32, HP_SHAPE(ls->dim[1]))
                                                      : HP_TID_NONE;
    hp_tid gates = hp_moe_route(g, p[0], u->bias, u->k, u->router);
    hp_tid probs = last_out(g, 2);
    if (u->which == 0) return gates;
    if (u->which == 2) return probs;
    return hp_add(g, hp_scale(g, gates, 3.0f), hp_sum_to(g, hp_scale(g, probs, 0.5f), gates));
}

static void init_bias(hp_graph *g, hp_program *p, void *user) {
    (void)g;
    route_case *u = user;
    if (u->bias == HP_TID_NONE) return;
    const hp_tensor *b = hp_graph_tensor(g, u->bias);
    hp_test_fill_uniform(hp_program_data(p, u->bias), (size_t)hp_shape_numel(&b->shape), 3, -0.3f, 0.3f);
}

static void test_route_grad(void **state) {
    (void)state;
    const hp_shape shapes[] = {HP_SHAPE(6, 5), HP_SHAPE(3, 8), HP_SHAPE(4, 2)};
    const int ks[] = {2, 3, 1};
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < 3; i++)
            for (int w = 0; w < 3; w++) {
                route_case u = {.k = ks[i], .router = (hp_moe_router)r, .which = w == 1 ? 2 : w};
                hp_gc_spec s = {.n = 1, .shapes = {shapes[i]}, .lo = -2, .hi = 2, .h = 1e-3f, .rtol = 3e-2f,
                                .atol = 3e-3f, .build = b_route, .init = init_bias, .user = &u};
                hp_gradcheck(&s);
            }
}

/* Gates, ids and probs of both routers against a naive reference on one token. */
static void test_route_values(void **state) {
    (void)state;
    for (int r = 0; r < 2; r++) {
        hp_graph *g = hp_graph_new();
        hp_tid l = hp_input(g, "l", HP_DTYPE_F32, HP_SHAPE(1, 4));
        hp_tid b = r ? hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(4)) : HP_TID_NONE;
        hp_tid gates = hp_moe_route(g, l, b, 2, (hp_moe_router)r);
        hp_tid idx = last_out(g, 1), probs = last_out(g, 2);
        hp_tid keep[3] = {gates, idx, probs};
        hp_program *p = hp_test_compile(g, keep, 3);
        const float lv[4] = {0.5f, 2.0f, -1.0f, 1.0f};
        memcpy(hp_program_data(p, l), lv, sizeof lv);
        if (r) { /* the bias moves expert 2 (lowest score) into the selection: s + b ranks 1, 2 */
            const float bv[4] = {0.0f, 0.0f, 2.0f, -1.0f};
            memcpy(hp_program_data(p, b), bv, sizeof bv);
        }
        assert_ok(hp_program_run(p));
        const int32_t *id = hp_program_data(p, idx);
        const float *gt = hp_program_data(p, gates), *pr = hp_program_data(p, probs);
        double sc[4], sum = 0;
        for (int e = 0; e < 4; e++) sum += (sc[e] = r ? 1.0 / (1.0 + exp(-lv[e])) : exp(lv[e]));
        int want0 = r ? 2 : 1, want1 = r ? 1 : 3; /* softmax: 2.0 then 1.0; sigmoid+bias: e2 (0.27+2), e1 (0.88) */
        assert_int_equal(id[0], want0);
        assert_int_equal(id[1], want1);
        double gs = sc[want0] + sc[want1];
        assert_close(gt[0], sc[want0] / gs, 1e-6, 1e-7);
        assert_close(gt[1], sc[want1] / gs, 1e-6, 1e-7);
        for (int e = 0; e < 4; e++) assert_close(pr[e], sc[e] / sum, 1e-6, 1e-7);
        hp_program_free(p);
        hp_graph_free(g);
    }
}

static void test_route_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid l = hp_input(g, "l", HP_DTYPE_F32, HP_SHAPE(3, 4));
    assert_int_equal(hp_moe_route(g, l, HP_TID_NONE, 5, HP_MOE_ROUTER_SOFTMAX), HP_TID_NONE);
    hp_test_assert_error_contains("top_k 5 must be in [1, experts 4]");
    hp_graph_free(g);
    g = hp_graph_new();
    l = hp_input(g, "l", HP_DTYPE_F32, HP_SHAPE(3, 4));
    assert_int_equal(hp_moe_route(g, l, HP_TID_NONE, 2, HP_MOE_ROUTER_SIGMOID_BIAS), HP_TID_NONE);
    hp_test_assert_error_contains("sigmoid_bias router needs a bias");
    hp_graph_free(g);
}

/* ---- MOE_DISPATCH / MOE_COMBINE ---- */

typedef struct disp_case {
    int64_t N, k, E, C;
    hp_tid idx, x; /* x: a non-param token input when the params are elsewhere */
} disp_case;

static void init_idx(hp_graph *g, hp_program *p, void *user) {
    (void)g;
    disp_case *u = user;
    fill_ints(hp_program_data(p, u->idx), u->N * u->k, u->E, 11);
    if (u->x != HP_TID_NONE)
        hp_test_fill_uniform(hp_program_data(p, u->x), (size_t)(u->N * u->C), 5, -1, 1);
}

static hp_tid b_dispatch(hp_graph *g, const hp_tid *p, void *user) {
    disp_case *u = user;
    u->idx = hp_input(g, "idx", HP_DTYPE_I32, HP_SHAPE(u->N, u->k));
    u->x = HP_TID_NONE;
    return hp_moe_dispatch(g, p[0], u->idx, (int)u->E);
}

/* combine(ys, pos, gates) with pos from a dispatch of a token input: params ys (N*k, C), gates (N, k). */
static hp_tid b_combine(hp_graph *g, const hp_tid *p, void *user) {
    disp_case *u = user;
    u->idx = hp_input(g, "idx", HP_DTYPE_I32, HP_SHAPE(u->N, u->k));
    u->x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(u->N, u->C));
    hp_moe_dispatch(g, u->x, u->idx, (int)u->E);
    return hp_moe_combine(g, p[0], last_out(g, 2), p[1]);
}

/* grouped gemm: params x (N*k, K), w (E, F, K); counts from a dispatch of a token input. */
static hp_tid b_gemm(hp_graph *g, const hp_tid *p, void *user) {
    disp_case *u = user;
    u->idx = hp_input(g, "idx", HP_DTYPE_I32, HP_SHAPE(u->N, u->k));
    u->x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(u->N, u->C));
    hp_moe_dispatch(g, u->x, u->idx, (int)u->E);
    return hp_moe_gemm(g, p[0], p[1], last_out(g, 1), true);
}

/* balance loss of params probs (N, E) with counts from a dispatch; times 1 to make a 1-element y. */
static hp_tid b_balance(hp_graph *g, const hp_tid *p, void *user) {
    disp_case *u = user;
    u->idx = hp_input(g, "idx", HP_DTYPE_I32, HP_SHAPE(u->N, u->k));
    u->x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(u->N, u->C));
    hp_moe_dispatch(g, u->x, u->idx, (int)u->E);
    return hp_moe_balance_loss(g, p[0], last_out(g, 1), (int)u->k);
}

static void test_dispatch_combine_gemm_balance_grad(void **state) {
    (void)state;
    disp_case cases[] = {{7, 2, 4, 5, 0, 0}, {5, 1, 3, 3, 0, 0}, {4, 3, 6, 2, 0, 0}};
    for (size_t i = 0; i < 3; i++) {
        disp_case *u = &cases[i];
        int64_t R = u->N * u->k;
        hp_gc_spec d = {.n = 1, .shapes = {HP_SHAPE(u->N, u->C)}, .lo = -1, .hi = 1, .build = b_dispatch,
                        .init = init_idx, .user = u};
        hp_gradcheck(&d);
        hp_gc_spec c = {.n = 2, .shapes = {HP_SHAPE(R, u->C), HP_SHAPE(u->N, u->k)}, .lo = -1, .hi = 1,
                        .build = b_combine, .init = init_idx, .user = u};
        hp_gradcheck(&c);
        hp_gc_spec m = {.n = 2, .shapes = {HP_SHAPE(R, 3), HP_SHAPE(u->E, 4, 3)}, .lo = -1, .hi = 1,
                        .build = b_gemm, .init = init_idx, .user = u};
        hp_gradcheck(&m);
        hp_gc_spec b = {.n = 1, .shapes = {HP_SHAPE(u->N, u->E)}, .lo = 0, .hi = 1, .build = b_balance,
                        .init = init_idx, .user = u};
        hp_gradcheck(&b);
    }
}

/* The sort: stable by expert, counts, pos; combine inverts it; the grouped GEMM per expert. */
static void test_dispatch_values(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(3, 2));
    hp_tid idx = hp_input(g, "idx", HP_DTYPE_I32, HP_SHAPE(3, 2));
    hp_tid w = hp_input(g, "w", HP_DTYPE_F32, HP_SHAPE(3, 1, 2));
    hp_tid xs = hp_moe_dispatch(g, x, idx, 3);
    hp_tid counts = last_out(g, 1), pos = last_out(g, 2);
    hp_tid back = hp_moe_combine(g, xs, pos, HP_TID_NONE);
    hp_tid y = hp_moe_gemm(g, xs, w, counts, true);
    hp_tid keep[5] = {xs, counts, pos, back, y};
    hp_program *p = hp_test_compile(g, keep, 5);
    const float xv[6] = {1, 2, 3, 4, 5, 6};
    const int32_t iv[6] = {2, 0, 0, 2, 2, 1}; /* token 0 -> e2, e0; token 1 -> e0, e2; token 2 -> e2, e1 */
    const float wv[6] = {1, 0, 0, 1, 1, 1};   /* e0 picks c0, e1 picks c1, e2 sums */
    memcpy(hp_program_data(p, x), xv, sizeof xv);
    memcpy(hp_program_data(p, idx), iv, sizeof iv);
    memcpy(hp_program_data(p, w), wv, sizeof wv);
    assert_ok(hp_program_run(p));
    const int32_t *cn = hp_program_data(p, counts), *ps = hp_program_data(p, pos);
    assert_int_equal(cn[0], 2);
    assert_int_equal(cn[1], 1);
    assert_int_equal(cn[2], 3);
    /* rows: e0: (t0, t1), e1: (t2), e2: (t0, t1, t2) */
    const int32_t want_pos[6] = {3, 0, 1, 4, 5, 2};
    for (int i = 0; i < 6; i++) assert_int_equal(ps[i], want_pos[i]);
    const float *r = hp_program_data(p, xs);
    const float want_rows[12] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 12; i++) assert_close(r[i], want_rows[i], 0, 0);
    const float *b = hp_program_data(p, back);
    for (int i = 0; i < 6; i++) assert_close(b[i], 2 * xv[i], 0, 0);
    const float *yy = hp_program_data(p, y);
    const float want_y[6] = {1, 3, 6, 3, 7, 11};
    for (int i = 0; i < 6; i++) assert_close(yy[i], want_y[i], 1e-6, 0);
    /* an expert id outside [0, E) is a kernel error naming it */
    ((int32_t *)hp_program_data(p, idx))[3] = 7;
    assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("expert id 7 of token 1 slot 1");
    hp_program_free(p);
    hp_graph_free(g);
}

/* Skewed routing: every token to expert 1, experts 0 and 2 receive nothing: their GEMMs are empty,
 * their weight gradients exactly zero, expert 1's the whole dy^T x. */
static void test_gemm_empty_experts(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(4, 3));
    hp_tid idx = hp_input(g, "idx", HP_DTYPE_I32, HP_SHAPE(4, 1));
    hp_tid w = hp_input(g, "w", HP_DTYPE_F32, HP_SHAPE(3, 2, 3));
    hp_tid dy = hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(4, 2));
    hp_tid xs = hp_moe_dispatch(g, x, idx, 3);
    hp_tid counts = last_out(g, 1);
    hp_tid y = hp_moe_gemm(g, xs, w, counts, true);
    hp_tid in[3] = {dy, xs, counts};
    hp_tid dw = hp_graph_add_node(g, HP_OP_MOE_GEMM_DW, in, 3, NULL);
    hp_tid keep[3] = {y, dw, counts};
    hp_program *p = hp_test_compile(g, keep, 3);
    float *xv = hp_program_data(p, x), *wv = hp_program_data(p, w), *dyv = hp_program_data(p, dy);
    hp_test_fill_uniform(xv, 12, 1, -1, 1);
    hp_test_fill_uniform(wv, 18, 2, -1, 1);
    hp_test_fill_uniform(dyv, 8, 3, -1, 1);
    float *dwv = hp_program_data(p, dw);
    for (int i = 0; i < 18; i++) dwv[i] = 7.0f; /* stale values the kernel must overwrite */
    int32_t *iv = hp_program_data(p, idx);
    for (int i = 0; i < 4; i++) iv[i] = 1;
    assert_ok(hp_program_run(p));
    const int32_t *cn = hp_program_data(p, counts);
    assert_int_equal(cn[0], 0);
    assert_int_equal(cn[1], 4);
    assert_int_equal(cn[2], 0);
    const float *yv = hp_program_data(p, y);
    for (int n = 0; n < 4; n++)
        for (int o = 0; o < 2; o++) {
            double want = 0;
            for (int c = 0; c < 3; c++) want += (double)xv[n * 3 + c] * wv[6 + o * 3 + c];
            assert_close(yv[n * 2 + o], want, 1e-5, 1e-6);
        }
    for (int i = 0; i < 6; i++) {
        assert_close(dwv[i], 0.0, 0, 0);
        assert_close(dwv[12 + i], 0.0, 0, 0);
    }
    for (int o = 0; o < 2; o++)
        for (int c = 0; c < 3; c++) {
            double want = 0;
            for (int n = 0; n < 4; n++) want += (double)dyv[n * 2 + o] * xv[n * 3 + c];
            assert_close(dwv[6 + o * 3 + c], want, 1e-5, 1e-6);
        }
    hp_program_free(p);
    hp_graph_free(g);
}

/* DeepSeek-V3's bias update: toward the mean load, by the rate, zero where a load is the mean. */
static void test_bias_update(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid b = hp_leaf(g, "b", HP_TENSOR_KIND_CONST, HP_DTYPE_F32, HP_SHAPE(4));
    hp_tid c = hp_input(g, "c", HP_DTYPE_I32, HP_SHAPE(4));
    assert_ok(hp_moe_bias_update(g, b, c, 0.25f));
    assert_true(hp_graph_node(g, hp_graph_n_nodes(g) - 1)->flags & HP_NODE_FLAG_INPLACE);
    hp_tid keep[1] = {b};
    hp_program *p = hp_test_compile(g, keep, 1);
    const float bv[4] = {0, 1, 0, 0};
    const int32_t cv[4] = {1, 5, 3, 3}; /* mean 3 */
    memcpy(hp_program_data(p, b), bv, sizeof bv);
    memcpy(hp_program_data(p, c), cv, sizeof cv);
    assert_ok(hp_program_run(p));
    const float *o = hp_program_data(p, b);
    assert_close(o[0], 0.25, 0, 0);
    assert_close(o[1], 0.75, 0, 0);
    assert_close(o[2], 0.0, 0, 0);
    assert_close(o[3], 0.0, 0, 0);
    hp_program_free(p);
    hp_graph_free(g);
}

/* ---- a whole layer from the operators: router weight, expert weights and x all get gradients ---- */

typedef struct layer_case {
    int k;
    hp_moe_router router;
    hp_tid bias;
} layer_case;

/* params: x (N, C), router (E, C), fc (E, F, C), proj (E, C, F) */
static hp_tid b_layer(hp_graph *g, const hp_tid *p, void *user) {
    layer_case *u = user;
    const int64_t E = hp_graph_tensor(g, p[1])->shape.dim[0];
    u->bias = u->router ? hp_input(g, "bias", HP_DTYPE_F32, HP_SHAPE(E)) : HP_TID_NONE;
    hp_tid logits = hp_linear(g, p[0], p[1], HP_TID_NONE);
    hp_tid gates = hp_moe_route(g, logits, u->bias, u->k, u->router);
    hp_tid idx = last_out(g, 1), probs = last_out(g, 2);
    hp_tid xs = hp_moe_dispatch(g, p[0], idx, (int)E);
    hp_tid counts = last_out(g, 1), pos = last_out(g, 2);
    hp_tid h = hp_gelu(g, hp_moe_gemm(g, xs, p[2], counts, true));
    hp_tid y = hp_moe_combine(g, hp_moe_gemm(g, h, p[3], counts, true), pos, gates);
    hp_tid aux = hp_moe_balance_loss(g, probs, counts, u->k);
    return hp_add(g, y, aux); /* (N, C) + scalar: the loss reaches the router through both paths */
}

static void init_layer(hp_graph *g, hp_program *p, void *user) {
    (void)g;
    layer_case *u = user;
    if (u->bias != HP_TID_NONE) hp_test_fill_uniform(hp_program_data(p, u->bias), 4, 9, -0.2f, 0.2f);
}

static void test_layer_grad(void **state) {
    (void)state;
    for (int r = 0; r < 2; r++)
        for (int k = 1; k <= 2; k++) {
            layer_case u = {.k = k, .router = (hp_moe_router)r};
            hp_gc_spec s = {.n = 4,
                            .shapes = {HP_SHAPE(6, 5), HP_SHAPE(4, 5), HP_SHAPE(4, 3, 5), HP_SHAPE(4, 5, 3)},
                            .lo = -1, .hi = 1, .h = 1e-3f, .rtol = 3e-2f, .atol = 3e-3f, .build = b_layer,
                            .init = init_layer, .user = &u};
            hp_gradcheck(&s);
        }
}

/* Both families with MoE layers: the parameter count (hp_gpt_n_params) is what the graph holds, and the
 * MoE layers replace the MLPs of the layers named (llama: SwiGLU experts). */
static void test_model_param_count(void **state) {
    (void)state;
    for (int fam = 0; fam < 2; fam++) {
        hp_gpt_config gc = {.family = fam ? HP_MODEL_FAMILY_LLAMA : HP_MODEL_FAMILY_GPT2, .vocab = 32, .context = 8,
                            .layers = 3, .heads = 4, .width = 16, .kv_heads = fam ? 2 : 0, .ffn_width = fam ? 24 : 0};
        gc.moe = HP_MOE_CONFIG_INIT;
        gc.moe.experts = 4;
        gc.moe.top_k = 2;
        gc.moe.expert_width = 12;
        gc.moe.shared_experts = 1;
        gc.moe.every = 2; /* layer 1 only */
        hp_graph *g = hp_graph_new();
        hp_gpt m;
        assert_ok(hp_gpt_build(g, &gc, 2, 8, true, &m));
        hp_tid params[128];
        int np = hp_graph_params(g, params, 128);
        int64_t total = 0;
        for (int i = 0; i < np; i++) total += hp_shape_numel(&hp_graph_tensor(g, params[i])->shape);
        assert_int_equal(total, hp_gpt_n_params(&gc));
        const char *expert = fam ? "model.layers.1.mlp.experts.gate_proj.weight" : "blocks.1.mlp.experts.fc.weight";
        const char *dense = fam ? "model.layers.1.mlp.gate_proj.weight" : "blocks.1.mlp.fc.weight";
        if (hp_graph_find(g, expert) == HP_TID_NONE) fail_msg("%s: no %s", hp_model_family_name(gc.family), expert);
        assert_int_equal(hp_graph_find(g, dense), HP_TID_NONE);
        hp_graph_free(g);
    }
}

/* hp_moe_build: names, the config check's messages. */
static void test_layer_build(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(2, 3, 8));
    hp_moe_config c = HP_MOE_CONFIG_INIT;
    c.experts = 4;
    c.top_k = 2;
    c.expert_width = 6;
    c.shared_experts = 1;
    c.router = HP_MOE_ROUTER_SIGMOID_BIAS;
    c.balance_loss = 0.01f;
    c.training = true;
    hp_moe_layer ml;
    assert_ok(hp_moe_build(g, x, &c, "mlp", &ml));
    assert_true(hp_shape_equal(&hp_graph_tensor(g, ml.y)->shape, &hp_graph_tensor(g, x)->shape));
    assert_int_not_equal(ml.aux_loss, HP_TID_NONE);
    const char *names[] = {"mlp.router.weight", "mlp.router.bias", "mlp.experts.fc.weight", "mlp.experts.proj.weight",
                           "mlp.shared.fc.weight", "mlp.shared.proj.weight"};
    int64_t total = 0;
    for (int i = 0; i < 6; i++) {
        hp_tid t = hp_graph_find(g, names[i]);
        assert_int_not_equal(t, HP_TID_NONE);
        total += hp_shape_numel(&hp_graph_tensor(g, t)->shape);
    }
    assert_int_equal(total, hp_moe_n_params(&c, 8));
    assert_int_equal(hp_moe_active_params(&c, 8), 4 * 8 + 2 * 2 * 6 * 8 + 2 * 6 * 8);
    hp_graph_free(g);

    /* SwiGLU experts (the Llama family's): gate, up and down per expert and for the shared expert */
    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(2, 3, 8));
    c.expert = HP_MOE_EXPERT_SWIGLU;
    assert_ok(hp_moe_build(g, x, &c, "mlp", &ml));
    const char *swi[] = {"mlp.router.weight", "mlp.router.bias", "mlp.experts.gate_proj.weight",
                         "mlp.experts.up_proj.weight", "mlp.experts.down_proj.weight", "mlp.shared.gate_proj.weight",
                         "mlp.shared.up_proj.weight", "mlp.shared.down_proj.weight"};
    total = 0;
    for (int i = 0; i < 8; i++) {
        hp_tid t = hp_graph_find(g, swi[i]);
        if (t == HP_TID_NONE) fail_msg("no parameter %s", swi[i]);
        total += hp_shape_numel(&hp_graph_tensor(g, t)->shape);
    }
    assert_int_equal(hp_graph_find(g, "mlp.experts.fc.weight"), HP_TID_NONE);
    assert_int_equal(total, hp_moe_n_params(&c, 8));
    assert_int_equal(hp_moe_active_params(&c, 8), 4 * 8 + 2 * 3 * 6 * 8 + 3 * 6 * 8);
    hp_graph_free(g);
    c.expert = HP_MOE_EXPERT_GELU;

    c.top_k = 5;
    assert_int_equal(hp_moe_config_check(&c, 4), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("model.moe.top_k 5 must be in [1, model.moe.experts 4]");
    c.top_k = 2;
    c.every = 0;
    c.n_layers = 2;
    c.layers[0] = 1;
    c.layers[1] = 4;
    assert_int_equal(hp_moe_config_check(&c, 4), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("model.moe.layers[1] = 4 is outside [0, model.layers 4)");
    c.layers[1] = 3;
    assert_ok(hp_moe_config_check(&c, 4));
    assert_true(hp_moe_config_layer(&c, 3));
    assert_false(hp_moe_config_layer(&c, 2));
    c.every = 2;
    assert_true(hp_moe_config_layer(&c, 1));
    assert_false(hp_moe_config_layer(&c, 2));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_grad),      cmocka_unit_test(test_route_values),
        cmocka_unit_test(test_route_errors),    cmocka_unit_test(test_dispatch_combine_gemm_balance_grad),
        cmocka_unit_test(test_dispatch_values), cmocka_unit_test(test_bias_update),
        cmocka_unit_test(test_gemm_empty_experts),
        cmocka_unit_test(test_layer_grad),      cmocka_unit_test(test_layer_build),
        cmocka_unit_test(test_model_param_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
