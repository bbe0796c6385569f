/* MATMUL and LINEAR: forward against a naive triple loop, gradients by finite differences. */
#include "gradcheck.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct mm_case {
    bool ta, tb;
} mm_case;

static hp_tid b_matmul(hp_graph *g, const hp_tid *p, void *u) {
    const mm_case *c = u;
    return hp_matmul(g, p[0], p[1], c->ta, c->tb);
}

/* a, b shapes for op(a) (..., M, K), op(b) (..., K, N) with the given transposes. */
static hp_shape mat(int nb, const int64_t *batch, int64_t r, int64_t c, bool t) {
    int64_t d[HP_MAX_DIMS];
    for (int i = 0; i < nb; i++) d[i] = batch[i];
    d[nb] = t ? c : r;
    d[nb + 1] = t ? r : c;
    return hp_shape_make(nb + 2, d);
}

static void test_matmul_grad_all_transposes(void **state) {
    (void)state;
    const int64_t batch[2] = {2, 3};
    for (int t = 0; t < 4; t++) {
        mm_case c = {t & 1, (t >> 1) & 1};
        int64_t M = 3, K = 4, N = 5;
        /* plain 2-D */
        hp_gc_spec s = {.n = 2, .lo = -1, .hi = 1, .build = b_matmul, .user = &c};
        s.shapes[0] = mat(0, batch, M, K, c.ta);
        s.shapes[1] = mat(0, batch, K, N, c.tb);
        hp_gradcheck(&s);
        /* batched, equal leading dims */
        s.shapes[0] = mat(2, batch, M, K, c.ta);
        s.shapes[1] = mat(2, batch, K, N, c.tb);
        hp_gradcheck(&s);
        /* b broadcast: 2-D b against a (2, 3, ...) */
        s.shapes[0] = mat(2, batch, M, K, c.ta);
        s.shapes[1] = mat(0, batch, K, N, c.tb);
        hp_gradcheck(&s);
        /* b broadcast over the outer batch dim only */
        s.shapes[0] = mat(2, batch, M, K, c.ta);
        s.shapes[1] = mat(1, batch + 1, K, N, c.tb);
        hp_gradcheck(&s);
        /* a broadcast (fewer leading dims than b) */
        s.shapes[0] = mat(0, batch, M, K, c.ta);
        s.shapes[1] = mat(1, batch, K, N, c.tb);
        hp_gradcheck(&s);
    }
}

/* The folded form (attr i[2] = 1, made by LINEAR's gradient rule): every leading dim merged into
 * the row axis, a 2-D result. Its own gradient rule is exercised here on 3-D operands. */
static hp_tid b_matmul_fold(hp_graph *g, const hp_tid *p, void *u) {
    const mm_case *c = u;
    hp_attrs at = {0};
    at.i[0] = c->ta;
    at.i[1] = c->tb;
    at.i[2] = 1;
    return hp_graph_add_node(g, HP_OP_MATMUL, p, 2, &at);
}

static void test_matmul_fold_grad(void **state) {
    (void)state;
    /* rows of the folded views: a (2, 3, 4) -> (6, 4), b (3, 2, 5) -> (6, 5) */
    const hp_shape sa[4] = {HP_SHAPE(2, 3, 4), HP_SHAPE(2, 3, 4), HP_SHAPE(2, 3, 4), HP_SHAPE(2, 3, 4)};
    const hp_shape sb[4] = {HP_SHAPE(2, 2, 5), HP_SHAPE(5, 2, 4), HP_SHAPE(3, 2, 5), HP_SHAPE(3, 1, 6)};
    /* (6,4) @ (4,5) from b (2,2,5);  (6,4) @ (10,4)^T from b (5,2,4);
     * (6,4)^T @ (6,5) from b (3,2,5);  (6,4)^T @ (3,6)^T from b (3,1,6). */
    const mm_case cs[4] = {{false, false}, {false, true}, {true, false}, {true, true}};
    for (int t = 0; t < 4; t++) {
        mm_case c = cs[t];
        hp_gc_spec s = {.n = 2, .lo = -1, .hi = 1, .build = b_matmul_fold, .user = &c, .shapes = {sa[t], sb[t]}};
        hp_gradcheck(&s);
    }
}

static hp_tid b_linear_bias(hp_graph *g, const hp_tid *p, void *u) {
    (void)u;
    return hp_linear(g, p[0], p[1], p[2]);
}
static hp_tid b_linear_nobias(hp_graph *g, const hp_tid *p, void *u) {
    (void)u;
    return hp_linear(g, p[0], p[1], HP_TID_NONE);
}

static void test_linear_grad(void **state) {
    (void)state;
    hp_gc_spec s = {.n = 3, .lo = -1, .hi = 1, .build = b_linear_bias,
                    .shapes = {HP_SHAPE(4, 6), HP_SHAPE(5, 6), HP_SHAPE(5)}};
    hp_gradcheck(&s);
    s.shapes[0] = HP_SHAPE(2, 3, 6);
    hp_gradcheck(&s);
    s.n = 2;
    s.build = b_linear_nobias;
    hp_gradcheck(&s);
    s.shapes[0] = HP_SHAPE(7, 6);
    hp_gradcheck(&s);
}

/* Linear composed with itself (a weight used twice) and a second-order path through the folded
 * dW matmul is not needed; instead check a two-layer chain, which exercises dx flowing on. */
static hp_tid b_mlp(hp_graph *g, const hp_tid *p, void *u) {
    (void)u;
    hp_tid h = hp_linear(g, p[0], p[1], p[2]);
    return hp_linear(g, h, p[3], HP_TID_NONE);
}

static void test_linear_chain_grad(void **state) {
    (void)state;
    hp_gc_spec s = {.n = 4, .lo = -1, .hi = 1, .build = b_mlp,
                    .shapes = {HP_SHAPE(2, 3, 4), HP_SHAPE(5, 4), HP_SHAPE(5), HP_SHAPE(3, 5)}};
    hp_gradcheck(&s);
}

/* ---- forward against naive loops, sizes beyond any blocking ---- */

static double at2(const float *x, int64_t r, int64_t c, int64_t ld, bool t) { return t ? x[c * ld + r] : x[r * ld + c]; }

static void check_matmul_forward(int nb, const int64_t *batch_a, int nbb, const int64_t *batch_b, int64_t M, int64_t K,
                                 int64_t N, bool ta, bool tb) {
    hp_graph *g = hp_graph_new();
    hp_shape sa = mat(nb, batch_a, M, K, ta), sb = mat(nbb, batch_b, K, N, tb);
    hp_tid a = hp_input(g, "a", HP_DTYPE_F32, sa), b = hp_input(g, "b", HP_DTYPE_F32, sb);
    hp_tid y = hp_matmul(g, a, b, ta, tb);
    assert_ok(hp_graph_status(g));
    hp_program *p;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &y;
    o.n_keep = 1;
    assert_ok(hp_program_new(g, &o, &p));
    float *A = hp_program_data(p, a), *B = hp_program_data(p, b);
    hp_test_fill_uniform(A, (size_t)hp_shape_numel(&sa), 1, -1, 1);
    hp_test_fill_uniform(B, (size_t)hp_shape_numel(&sb), 2, -1, 1);
    assert_ok(hp_program_run(p));
    const float *Y = hp_program_data(p, y);
    int64_t nbatch = hp_shape_prod(&sa, 0, nb), bbatch = hp_shape_prod(&sb, 0, nbb);
    int64_t lda = sa.dim[sa.ndim - 1], ldb = sb.dim[sb.ndim - 1];
    for (int64_t bi = 0; bi < nbatch; bi++) {
        const float *Ab = A + bi * M * K, *Bb = B + (bi % bbatch) * K * N;
        for (int64_t i = 0; i < M; i += 7)
            for (int64_t j = 0; j < N; j += 5) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += at2(Ab, i, k, lda, ta) * at2(Bb, k, j, ldb, tb);
                assert_close(Y[bi * M * N + i * N + j], s, 1e-4, 1e-4);
            }
    }
    hp_program_free(p);
    hp_graph_free(g);
}

static void test_matmul_forward_naive(void **state) {
    (void)state;
    const int64_t b2[2] = {2, 3};
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = (t >> 1) & 1;
        check_matmul_forward(0, b2, 0, b2, 300, 70, 130, ta, tb);
        check_matmul_forward(2, b2, 2, b2, 33, 20, 17, ta, tb);
        check_matmul_forward(2, b2, 0, b2, 150, 40, 90, ta, tb); /* folded into one GEMM when !ta */
    }
}

static void test_linear_forward_naive(void **state) {
    (void)state;
    int64_t Bn = 3, T = 70, K = 48, N = 300;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        hp_graph *g = hp_graph_new();
        hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(Bn, T, K));
        hp_tid w = hp_input(g, "w", HP_DTYPE_F32, HP_SHAPE(N, K));
        hp_tid bias = with_bias ? hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(N)) : HP_TID_NONE;
        hp_tid y = hp_linear(g, x, w, bias);
        assert_ok(hp_graph_status(g));
        hp_program *p;
        hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
        o.keep = &y;
        o.n_keep = 1;
        assert_ok(hp_program_new(g, &o, &p));
        float *X = hp_program_data(p, x), *W = hp_program_data(p, w), *Bv = NULL;
        hp_test_fill_uniform(X, (size_t)(Bn * T * K), 3, -1, 1);
        hp_test_fill_uniform(W, (size_t)(N * K), 4, -1, 1);
        if (with_bias) {
            Bv = hp_program_data(p, bias);
            hp_test_fill_uniform(Bv, (size_t)N, 5, -1, 1);
        }
        assert_ok(hp_program_run(p));
        const float *Y = hp_program_data(p, y);
        for (int64_t r = 0; r < Bn * T; r += 3)
            for (int64_t n = 0; n < N; n += 7) {
                double s = Bv ? Bv[n] : 0.0;
                for (int64_t k = 0; k < K; k++) s += (double)X[r * K + k] * W[n * K + k];
                assert_close(Y[r * N + n], s, 1e-4, 1e-4);
            }
        hp_program_free(p);
        hp_graph_free(g);
    }
}

static void test_shape_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid a = hp_param(g, "a", HP_SHAPE(3, 4)), b = hp_param(g, "b", HP_SHAPE(5, 6));
    assert_int_equal(hp_matmul(g, a, b, false, false), HP_TID_NONE);
    hp_test_assert_error_contains("[3, 4]");
    hp_test_assert_error_contains("[5, 6]");
    hp_graph_free(g);

    g = hp_graph_new();
    hp_tid x = hp_param(g, "x", HP_SHAPE(2, 8, 4)), w = hp_param(g, "w", HP_SHAPE(6, 5));
    assert_int_equal(hp_linear(g, x, w, HP_TID_NONE), HP_TID_NONE);
    hp_test_assert_error_contains("[6, 5]");
    hp_graph_free(g);

    g = hp_graph_new();
    x = hp_param(g, "x", HP_SHAPE(2, 4));
    w = hp_param(g, "w", HP_SHAPE(6, 4));
    hp_tid bias = hp_param(g, "bias", HP_SHAPE(5));
    assert_int_equal(hp_linear(g, x, w, bias), HP_TID_NONE);
    hp_test_assert_error_contains("bias [5]");
    hp_graph_free(g);

    g = hp_graph_new();
    a = hp_param(g, "a", HP_SHAPE(2, 3, 4));
    b = hp_param(g, "b", HP_SHAPE(3, 4, 5));
    assert_int_equal(hp_matmul(g, a, b, false, false), HP_TID_NONE);
    hp_test_assert_error_contains("do not broadcast");
    hp_graph_free(g);
}

static void test_cost(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "x", HP_SHAPE(2, 8, 4)), w = hp_param(g, "w", HP_SHAPE(6, 4));
    hp_tid bias = hp_param(g, "bias", HP_SHAPE(6));
    hp_linear(g, x, w, bias);
    hp_tid b = hp_param(g, "b", HP_SHAPE(4, 6));
    hp_matmul(g, x, b, false, false);
    assert_ok(hp_graph_status(g));
    hp_op_cost c0 = hp_node_cost(g, 0), c1 = hp_node_cost(g, 1);
    assert_close(c0.flops, 2.0 * 16 * 6 * 4 + 16 * 6, 0, 0);
    assert_close(c1.flops, 2.0 * 16 * 6 * 4, 0, 0);
    assert_close(c1.bytes_written, 16 * 6 * 4, 0, 0);
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_grad_all_transposes),
        cmocka_unit_test(test_matmul_fold_grad),
        cmocka_unit_test(test_linear_grad),
        cmocka_unit_test(test_linear_chain_grad),
        cmocka_unit_test(test_matmul_forward_naive),
        cmocka_unit_test(test_linear_forward_naive),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
