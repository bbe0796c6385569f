/* ATTENTION / ATTENTION_BACKWARD: forward against an explicit softmax(QK^T/sqrt(D))V, gradients of
 * q, k, v by finite differences, the backward against the explicit formulas at a size that spans
 * several query blocks, and shape errors. */
#include "gradcheck.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_case {
    int H;
    bool causal;
} attn_case;

static hp_tid b_attn(hp_graph *g, const hp_tid *p, void *u) {
    const attn_case *c = u;
    return hp_attention(g, p[0], p[1], p[2], c->H, c->causal);
}

static void test_attention_grad(void **state) {
    (void)state;
    const int Hs[2] = {1, 3};
    for (int hi = 0; hi < 2; hi++)
        for (int causal = 0; causal < 2; causal++)
            for (int T = 5; T <= 9; T += 2) {
                attn_case c = {Hs[hi], causal};
                int64_t C = 4 * c.H;
                hp_gc_spec s = {.n = 3, .lo = -1, .hi = 1, .build = b_attn, .user = &c,
                                .shapes = {HP_SHAPE(2, T, C), HP_SHAPE(2, T, C), HP_SHAPE(2, T, C)}};
                hp_gradcheck(&s);
            }
}

/* Explicit reference of one head: probabilities P (T, T) in double. */
static void ref_probs(const float *q, const float *k, int64_t T, int64_t C, int64_t D, int64_t b, int64_t h,
                      bool causal, double *P) {
    double sc = 1.0 / sqrt((double)D);
    for (int64_t i = 0; i < T; i++) {
        double m = -INFINITY;
        for (int64_t j = 0; j < T; j++) {
            double s = 0;
            for (int64_t e = 0; e < D; e++) s += (double)q[(b * T + i) * C + h * D + e] * k[(b * T + j) * C + h * D + e];
            s *= sc;
            if (causal && j > i) s = -INFINITY;
            P[i * T + j] = s;
            if (s > m) m = s;
        }
        double z = 0;
        for (int64_t j = 0; j < T; j++) z += P[i * T + j] = exp(P[i * T + j] - m);
        for (int64_t j = 0; j < T; j++) P[i * T + j] /= z;
    }
}

static void check_large(int64_t B, int64_t T, int64_t H, int64_t D, bool causal) {
    int64_t C = H * D;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(B, T, C));
    hp_tid k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(B, T, C));
    hp_tid v = hp_input(g, "v", HP_DTYPE_F32, HP_SHAPE(B, T, C));
    hp_tid dy = hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(B, T, C));
    hp_tid o = hp_attention(g, q, k, v, (int)H, causal);
    assert_ok(hp_graph_status(g));
    hp_tid lse = hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out[1];
    hp_tid in[6] = {dy, q, k, v, o, lse};
    hp_attrs at = {0};
    at.i[0] = H;
    at.i[1] = causal;
    hp_graph_add_node(g, HP_OP_ATTENTION_BACKWARD, in, 6, &at);
    assert_ok(hp_graph_status(g));
    const hp_node *bn = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    hp_tid keep[5] = {o, lse, bn->out[0], bn->out[1], bn->out[2]};
    hp_program *p;
    hp_program_opts opt = HP_PROGRAM_OPTS_DEFAULT;
    opt.keep = keep;
    opt.n_keep = 5;
    assert_ok(hp_program_new(g, &opt, &p));
    size_t n = (size_t)(B * T * C);
    float *Q = hp_program_data(p, q), *K = hp_program_data(p, k), *V = hp_program_data(p, v);
    float *dY = hp_program_data(p, dy);
    hp_test_fill_uniform(Q, n, 11, -2, 2);
    hp_test_fill_uniform(K, n, 12, -2, 2);
    hp_test_fill_uniform(V, n, 13, -1, 1);
    hp_test_fill_uniform(dY, n, 14, -1, 1);
    assert_ok(hp_program_run(p));
    const float *O = hp_program_data(p, o), *LSE = hp_program_data(p, lse);
    const float *dQ = hp_program_data(p, keep[2]), *dK = hp_program_data(p, keep[3]), *dV = hp_program_data(p, keep[4]);
    double *P = malloc(sizeof(double) * (size_t)(T * T)), *dS = malloc(sizeof(double) * (size_t)(T * T));
    double sc = 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            ref_probs(Q, K, T, C, D, b, h, causal, P);
            /* o and lse */
            for (int64_t i = 0; i < T; i += 3) {
                for (int64_t e = 0; e < D; e++) {
                    double s = 0;
                    for (int64_t j = 0; j < T; j++) s += P[i * T + j] * V[(b * T + j) * C + h * D + e];
                    assert_close(O[(b * T + i) * C + h * D + e], s, 1e-4, 1e-5);
                }
                /* lse_i = log sum_j exp(s_ij): recover from P_i0 = exp(s_i0 - lse_i) */
                double s0 = 0;
                for (int64_t e = 0; e < D; e++) s0 += (double)Q[(b * T + i) * C + h * D + e] * K[(b * T) * C + h * D + e];
                assert_close(LSE[(b * H + h) * T + i], s0 * sc - log(P[i * T]), 1e-4, 1e-4);
            }
            /* dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ = sc dS K, dK = sc dS^T Q, dV = P^T dO */
            for (int64_t i = 0; i < T; i++) {
                double rs = 0;
                for (int64_t j = 0; j < T; j++) {
                    double dp = 0;
                    for (int64_t e = 0; e < D; e++) dp += (double)dY[(b * T + i) * C + h * D + e] * V[(b * T + j) * C + h * D + e];
                    dS[i * T + j] = dp;
                    rs += P[i * T + j] * dp;
                }
                for (int64_t j = 0; j < T; j++) dS[i * T + j] = P[i * T + j] * (dS[i * T + j] - rs);
            }
            for (int64_t i = 0; i < T; i += 5)
                for (int64_t e = 0; e < D; e++) {
                    double gq = 0, gk = 0, gv = 0;
                    for (int64_t j = 0; j < T; j++) {
                        gq += dS[i * T + j] * K[(b * T + j) * C + h * D + e];
                        gk += dS[j * T + i] * Q[(b * T + j) * C + h * D + e];
                        gv += P[j * T + i] * dY[(b * T + j) * C + h * D + e];
                    }
                    size_t at_ = (size_t)((b * T + i) * C + h * D + e);
                    assert_close(dQ[at_], gq * sc, 1e-3, 1e-4);
                    assert_close(dK[at_], gk * sc, 1e-3, 1e-4);
                    assert_close(dV[at_], gv, 1e-3, 1e-4);
                }
        }
    free(P);
    free(dS);
    hp_program_free(p);
    hp_graph_free(g);
}

static void test_attention_large_vs_reference(void **state) {
    (void)state;
    check_large(2, 300, 2, 16, true);
    check_large(2, 300, 2, 16, false);
    check_large(1, 70, 3, 8, true); /* fewer (b, h) pairs than... at least 3 blocks with a short tail */
}

static void test_attention_shape_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_param(g, "q", HP_SHAPE(2, 5, 12)), k = hp_param(g, "k", HP_SHAPE(2, 6, 12));
    hp_tid v = hp_param(g, "v", HP_SHAPE(2, 5, 12));
    assert_int_equal(hp_attention(g, q, k, v, 3, true), HP_TID_NONE);
    hp_test_assert_error_contains("[2, 6, 12]");
    hp_graph_free(g);

    g = hp_graph_new();
    q = hp_param(g, "q", HP_SHAPE(2, 5, 12));
    k = hp_param(g, "k", HP_SHAPE(2, 5, 12));
    v = hp_param(g, "v", HP_SHAPE(2, 5, 12));
    assert_int_equal(hp_attention(g, q, k, v, 5, true), HP_TID_NONE);
    hp_test_assert_error_contains("n_head 5");
    hp_graph_free(g);
}

static void test_attention_cost(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_param(g, "q", HP_SHAPE(2, 8, 12));
    hp_attention(g, q, q, q, 3, false);
    hp_attention(g, q, q, q, 3, true);
    assert_ok(hp_graph_status(g));
    assert_close(hp_node_cost(g, 0).flops, 4.0 * 2 * 3 * 8 * 8 * 4, 0, 0);
    assert_close(hp_node_cost(g, 1).flops, 4.0 * 2 * 3 * 36 * 4, 0, 0);
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_attention_large_vs_reference),
        cmocka_unit_test(test_attention_shape_errors),
        cmocka_unit_test(test_attention_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
