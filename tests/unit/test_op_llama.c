/* The Llama operators: RMSNORM, ROPE, SWIGLU and grouped-query ATTENTION. Gradients by finite
 * differences, forward values against direct formulas (double), GQA against multi-head attention
 * on explicitly repeated k and v (Hugging Face's repeat_kv), and the shape errors. */
#include "gradcheck.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- RMSNORM ---- */

static hp_tid b_rmsnorm(hp_graph *g, const hp_tid *p, void *u) {
    (void)u;
    return hp_rmsnorm(g, p[0], p[1], 1e-5f);
}

static void test_rmsnorm_grad(void **state) {
    (void)state;
    int64_t cs[3] = {7, 6, 70};
    hp_shape xs[3] = {HP_SHAPE(1, 7), HP_SHAPE(3, 2, 6), HP_SHAPE(5, 70)};
    for (int i = 0; i < 3; i++) {
        hp_gc_spec s = {.n = 2, .shapes = {xs[i], HP_SHAPE(cs[i])}, .lo = -1, .hi = 1, .build = b_rmsnorm};
        hp_gradcheck(&s);
    }
}

static void test_rmsnorm_values_and_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(3, 5));
    hp_tid w = hp_input(g, "w", HP_DTYPE_F32, HP_SHAPE(5));
    hp_tid y = hp_rmsnorm(g, x, w, 1e-6f);
    hp_program *p = hp_test_compile(g, &y, 1);
    float *px = hp_program_data(p, x), *pw = hp_program_data(p, w);
    hp_test_fill_uniform(px, 15, 3, -2, 2);
    hp_test_fill_uniform(pw, 5, 4, 0.5f, 1.5f);
    assert_ok(hp_program_run(p));
    const float *py = hp_program_data(p, y);
    for (int r = 0; r < 3; r++) {
        double ss = 0;
        for (int i = 0; i < 5; i++) ss += (double)px[r * 5 + i] * px[r * 5 + i];
        double rs = 1.0 / sqrt(ss / 5 + 1e-6);
        for (int i = 0; i < 5; i++) assert_close(py[r * 5 + i], px[r * 5 + i] * rs * pw[i], 1e-6, 1e-7);
    }
    hp_program_free(p);
    hp_graph_free(g);

    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(3, 5));
    w = hp_param(g, "w", HP_SHAPE(4));
    assert_int_equal(hp_rmsnorm(g, x, w, 1e-5f), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("weight must be (C) = [5]");
    hp_graph_free(g);
    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(3, 5));
    w = hp_param(g, "w", HP_SHAPE(5));
    assert_int_equal(hp_rmsnorm(g, x, w, 0.0f), HP_TID_NONE);
    hp_test_assert_error_contains("eps must be > 0");
    hp_graph_free(g);
}

/* ---- ROPE ---- */

typedef struct rope_case {
    int H;
    int64_t off;
} rope_case;

static hp_tid b_rope(hp_graph *g, const hp_tid *p, void *u) {
    const rope_case *c = u;
    return hp_rope(g, p[0], c->H, 10000.0f, c->off);
}

static void test_rope_grad(void **state) {
    (void)state;
    rope_case cs[3] = {{1, 0}, {2, 0}, {3, 5}};
    for (int i = 0; i < 3; i++) {
        hp_gc_spec s = {.n = 1, .shapes = {HP_SHAPE(2, 5, cs[i].H * 6)}, .lo = -1, .hi = 1, .build = b_rope,
                        .user = &cs[i]};
        hp_gradcheck(&s);
    }
}

/* Values against the rotate_half formula in double; positions shifted by the offset; inverse. */
static void test_rope_values_and_errors(void **state) {
    (void)state;
    const int64_t B = 2, T = 7, H = 3, D = 8, C = H * D, off = 4;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(B, T, C));
    hp_tid y = hp_rope(g, x, (int)H, 500.0f, off);
    hp_attrs at = hp_graph_node(g, hp_graph_n_nodes(g) - 1)->attr;
    at.i[2] = 1;
    hp_tid back = hp_graph_add_node(g, HP_OP_ROPE, &y, 1, &at); /* the inverse rotation */
    hp_tid keep[2] = {y, back};
    hp_program *p = hp_test_compile(g, keep, 2);
    float *px = hp_program_data(p, x);
    hp_test_fill_uniform(px, (size_t)(B * T * C), 9, -1, 1);
    assert_ok(hp_program_run(p));
    const float *py = hp_program_data(p, y), *pb = hp_program_data(p, back);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < D / 2; j++) {
                    double a = (double)(t + off) / pow(500.0, 2.0 * (double)j / (double)D);
                    const float *xr = px + (b * T + t) * C + h * D;
                    const float *yr = py + (b * T + t) * C + h * D;
                    assert_close(yr[j], xr[j] * cos(a) - xr[j + D / 2] * sin(a), 2e-5, 2e-6);
                    assert_close(yr[j + D / 2], xr[j + D / 2] * cos(a) + xr[j] * sin(a), 2e-5, 2e-6);
                }
    for (int64_t i = 0; i < B * T * C; i++) assert_close(pb[i], px[i], 1e-5, 1e-6);
    hp_program_free(p);
    hp_graph_free(g);

    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(2, 3, 12));
    assert_int_equal(hp_rope(g, x, 4, 10000.0f, 0), HP_TID_NONE); /* D = 3, odd */
    hp_test_assert_error_contains("even head dims");
    hp_graph_free(g);
    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(2, 3, 12));
    assert_int_equal(hp_rope(g, x, 2, 0.5f, 0), HP_TID_NONE);
    hp_test_assert_error_contains("base must be > 1");
    hp_graph_free(g);
}

/* ---- SWIGLU ---- */

static hp_tid b_swiglu(hp_graph *g, const hp_tid *p, void *u) {
    (void)u;
    return hp_swiglu(g, p[0], p[1]);
}

static void test_swiglu(void **state) {
    (void)state;
    hp_shape shapes[2] = {HP_SHAPE(4, 7), HP_SHAPE(2, 3, 5)};
    for (int i = 0; i < 2; i++) {
        hp_gc_spec s = {.n = 2, .shapes = {shapes[i], shapes[i]}, .lo = -3, .hi = 3, .build = b_swiglu};
        hp_gradcheck(&s);
    }
    hp_graph *g = hp_graph_new();
    hp_tid a = hp_input(g, "a", HP_DTYPE_F32, HP_SHAPE(501));
    hp_tid b = hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(501));
    hp_tid y = hp_swiglu(g, a, b);
    hp_program *p = hp_test_compile(g, &y, 1);
    float *pa = hp_program_data(p, a), *pb = hp_program_data(p, b);
    for (int i = 0; i < 501; i++) pa[i] = -10.0f + 0.04f * (float)i, pb[i] = 0.5f - 0.002f * (float)i;
    assert_ok(hp_program_run(p));
    const float *py = hp_program_data(p, y);
    for (int i = 0; i < 501; i++) assert_close(py[i], pa[i] / (1.0 + exp(-(double)pa[i])) * pb[i], 1e-5, 1e-7);
    hp_program_free(p);
    hp_graph_free(g);
    g = hp_graph_new();
    a = hp_input(g, "a", HP_DTYPE_F32, HP_SHAPE(4, 5));
    b = hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(4, 6));
    assert_int_equal(hp_swiglu(g, a, b), HP_TID_NONE);
    hp_test_assert_error_contains("differ");
    hp_graph_free(g);
}

/* ---- grouped-query ATTENTION ---- */

typedef struct gqa_case {
    int H, KV;
    bool causal;
} gqa_case;

static hp_tid b_gqa(hp_graph *g, const hp_tid *p, void *u) {
    const gqa_case *c = u;
    return hp_attention_gqa(g, p[0], p[1], p[2], c->H, c->KV, c->causal);
}

static void test_gqa_grad(void **state) {
    (void)state;
    gqa_case cs[4] = {{4, 2, true}, {4, 1, true}, {6, 3, false}, {2, 2, true}};
    for (int i = 0; i < 4; i++) {
        int64_t D = 4, T = 5;
        hp_gc_spec s = {.n = 3, .lo = -1, .hi = 1, .build = b_gqa, .user = &cs[i],
                        .shapes = {HP_SHAPE(2, T, cs[i].H * D), HP_SHAPE(2, T, cs[i].KV * D),
                                   HP_SHAPE(2, T, cs[i].KV * D)}};
        hp_gradcheck(&s);
    }
}

/* GQA equals multi-head attention with every kv head repeated H/KV times (repeat_kv), forward and
 * backward (dk, dv summed over the copies), over several query blocks. */
static void test_gqa_equals_repeat_kv(void **state) {
    (void)state;
    const int64_t B = 2, T = 70, H = 6, KV = 2, D = 8, C = H * D, CK = KV * D, G = H / KV;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_param(g, "q", HP_SHAPE(B, T, C)), k = hp_param(g, "k", HP_SHAPE(B, T, CK));
    hp_tid v = hp_param(g, "v", HP_SHAPE(B, T, CK));
    hp_tid kr = hp_param(g, "kr", HP_SHAPE(B, T, C)), vr = hp_param(g, "vr", HP_SHAPE(B, T, C));
    hp_tid o1 = hp_attention_gqa(g, q, k, v, (int)H, (int)KV, true);
    hp_tid o2 = hp_attention(g, q, kr, vr, (int)H, true);
    hp_tid r = hp_input(g, "r", HP_DTYPE_F32, HP_SHAPE(B, T, C));
    hp_tid l1 = hp_sum(g, hp_mul(g, o1, r), -1), l2 = hp_sum(g, hp_mul(g, o2, r), -1);
    hp_tid loss = hp_add(g, l1, l2);
    hp_tid wrt[5] = {q, k, v, kr, vr}, gr[5];
    assert_ok(hp_autodiff(g, loss, wrt, 5, gr));
    hp_tid keep[7] = {o1, o2, gr[0], gr[1], gr[2], gr[3], gr[4]};
    hp_program *p = hp_test_compile(g, keep, 7);
    float *pq = hp_program_data(p, q), *pk = hp_program_data(p, k), *pv = hp_program_data(p, v);
    float *pkr = hp_program_data(p, kr), *pvr = hp_program_data(p, vr);
    hp_test_fill_uniform(pq, (size_t)(B * T * C), 1, -1, 1);
    hp_test_fill_uniform(pk, (size_t)(B * T * CK), 2, -1, 1);
    hp_test_fill_uniform(pv, (size_t)(B * T * CK), 3, -1, 1);
    hp_test_fill_uniform(hp_program_data(p, r), (size_t)(B * T * C), 4, -1, 1);
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t e = 0; e < D; e++) {
                pkr[bt * C + h * D + e] = pk[bt * CK + h / G * D + e];
                pvr[bt * C + h * D + e] = pv[bt * CK + h / G * D + e];
            }
    assert_ok(hp_program_run(p));
    const float *a = hp_program_data(p, o1), *b = hp_program_data(p, o2);
    for (int64_t i = 0; i < B * T * C; i++) assert_close(a[i], b[i], 1e-5, 1e-6);
    const float *dk = hp_program_data(p, gr[1]), *dv = hp_program_data(p, gr[2]);
    const float *dkr = hp_program_data(p, gr[3]), *dvr = hp_program_data(p, gr[4]);
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t kh = 0; kh < KV; kh++)
            for (int64_t e = 0; e < D; e++) {
                double sk = 0, sv = 0;
                for (int64_t h = kh * G; h < (kh + 1) * G; h++) sk += dkr[bt * C + h * D + e], sv += dvr[bt * C + h * D + e];
                assert_close(dk[bt * CK + kh * D + e], sk, 1e-4, 1e-5);
                assert_close(dv[bt * CK + kh * D + e], sv, 1e-4, 1e-5);
            }
    hp_program_free(p);
    hp_graph_free(g);
}

static void test_gqa_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(1, 4, 12)), k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(1, 4, 6));
    hp_tid v = hp_input(g, "v", HP_DTYPE_F32, HP_SHAPE(1, 4, 6));
    assert_int_equal(hp_attention_gqa(g, q, k, v, 4, 3, true), HP_TID_NONE);
    hp_test_assert_error_contains("kv_heads 3 does not divide n_head 4");
    hp_graph_free(g);
    g = hp_graph_new();
    q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(1, 4, 12));
    k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(1, 4, 12));
    v = hp_input(g, "v", HP_DTYPE_F32, HP_SHAPE(1, 4, 12));
    assert_int_equal(hp_attention_gqa(g, q, k, v, 4, 2, true), HP_TID_NONE);
    hp_test_assert_error_contains("must be [1, 4, 6]");
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_grad),       cmocka_unit_test(test_rmsnorm_values_and_errors),
        cmocka_unit_test(test_rope_grad),          cmocka_unit_test(test_rope_values_and_errors),
        cmocka_unit_test(test_swiglu),             cmocka_unit_test(test_gqa_grad),
        cmocka_unit_test(test_gqa_equals_repeat_kv), cmocka_unit_test(test_gqa_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
