/* Optimizer operators: SUMSQ, CLIP_SCALE and ADAMW values against hand computations; errors. */
#include "backend/cpu/cpu.h"
#include "hp/runtime.h"
#include "testutil.h"

#include <math.h>
#include <string.h>


static void test_sumsq_and_clip_scale(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x[3] = {hp_input(g, "a", HP_DTYPE_F32, HP_SHAPE(3, 5)), hp_input(g, "b", HP_DTYPE_F32, HP_SHAPE(7)),
                   hp_input(g, "c", HP_DTYPE_F32, HP_SHAPE(200001))};
    hp_tid ss = hp_sumsq(g, x, 3);
    hp_tid cs = hp_clip_scale(g, ss, 1.5f);
    hp_tid ss1 = hp_sumsq(g, x, 1);
    hp_tid cs1 = hp_clip_scale(g, ss1, 100.0f);
    hp_tid keep[4] = {ss, cs, ss1, cs1};
    hp_program *p = hp_test_compile(g, keep, 4);
    int64_t sizes[3] = {15, 7, 200001};
    double want = 0, want1 = 0;
    for (int i = 0; i < 3; i++) {
        float *d = hp_program_data(p, x[i]);
        hp_test_fill_uniform(d, (size_t)sizes[i], 3 + (uint64_t)i, -1, 1);
        for (int64_t k = 0; k < sizes[i]; k++) want += (double)d[k] * d[k];
        if (i == 0) want1 = want;
    }
    assert_ok(hp_program_run(p));
    assert_close(*(float *)hp_program_data(p, ss), want, 1e-6, 0);
    assert_close(*(float *)hp_program_data(p, cs), 1.5 / (sqrt(want) + 1e-6), 1e-6, 0);
    assert_close(*(float *)hp_program_data(p, ss1), want1, 1e-6, 0);
    assert_close(*(float *)hp_program_data(p, cs1), 1.0, 0, 0); /* norm below max: no clipping */
    hp_op_cost c = hp_node_cost(g, hp_graph_tensor(g, ss)->producer);
    assert_close(c.flops, 2.0 * (15 + 7 + 200001), 0, 0);
    hp_program_free(p);
    hp_graph_free(g);
}

/* One AdamW element step in double, the formula of hp/ops.h. */
static void ref_adamw(double *p, double *m, double *v, double g, double lr, double t, double b1, double b2,
                      double eps, double wd) {
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double mh = *m / (1 - pow(b1, t)), vh = *v / (1 - pow(b2, t));
    *p -= lr * (mh / (sqrt(vh) + eps) + wd * *p);
}

static void run_adamw(bool with_scale, bool no_decay) {
    hp_graph *g = hp_graph_new();
    hp_tid w = hp_param(g, "w", HP_SHAPE(3, 11));
    hp_graph_tensor(g, w)->no_weight_decay = no_decay;
    hp_tid gr = hp_input(g, "g", HP_DTYPE_F32, HP_SHAPE(3, 11));
    hp_tid m = hp_leaf(g, "m", HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, HP_SHAPE(3, 11));
    hp_tid v = hp_leaf(g, "v", HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, HP_SHAPE(3, 11));
    hp_tid lr = hp_input(g, "lr", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    hp_tid step = hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    hp_tid sc = with_scale ? hp_input(g, "scale", HP_DTYPE_F32, HP_SHAPE_SCALAR) : HP_TID_NONE;
    hp_adamw_params hp = {0.8f, 0.95f, 1e-6f, 0.1f};
    assert_ok(hp_adamw(g, w, gr, m, v, lr, step, sc, &hp));
    const hp_node *nd = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    assert_int_equal(nd->op, HP_OP_ADAMW);
    assert_true(nd->flags & HP_NODE_FLAG_INPLACE);
    assert_int_equal(nd->n_out, 0);
    hp_op_cost c = hp_node_cost(g, hp_graph_n_nodes(g) - 1);
    assert_true(c.flops > 0 && c.bytes_written == 3 * 4 * 33);
    hp_program *p = hp_test_compile(g, NULL, 0);
    float *pw = hp_program_data(p, w), *pg = hp_program_data(p, gr);
    float *pm = hp_program_data(p, m), *pv = hp_program_data(p, v);
    hp_test_fill_uniform(pw, 33, 1, -1, 1);
    double rp[33], rm[33] = {0}, rv[33] = {0};
    for (int k = 0; k < 33; k++) rp[k] = pw[k];
    double scale = with_scale ? 0.25 : 1.0, wd = no_decay ? 0.0 : 0.1;
    if (with_scale) *(float *)hp_program_data(p, sc) = 0.25f;
    *(float *)hp_program_data(p, lr) = 0.01f;
    for (int t = 1; t <= 3; t++) {
        hp_test_fill_uniform(pg, 33, 10 + (uint64_t)t, -2, 2);
        *(float *)hp_program_data(p, step) = (float)t;
        assert_ok(hp_program_run(p));
        for (int k = 0; k < 33; k++) {
            ref_adamw(&rp[k], &rm[k], &rv[k], pg[k] * scale, (double)0.01f, t, (double)0.8f, (double)0.95f,
                      (double)1e-6f, (double)(float)wd);
            assert_close(pw[k], rp[k], 1e-5, 1e-6);
            assert_close(pm[k], rm[k], 1e-5, 1e-7);
            assert_close(pv[k], rv[k], 1e-5, 1e-8);
        }
    }
    /* step counts from 1: step 0 is a kernel error naming it */
    *(float *)hp_program_data(p, step) = 0.0f;
    assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("step must be >= 1");
    hp_program_free(p);
    hp_graph_free(g);
}

static void test_adamw_steps(void **state) {
    (void)state;
    run_adamw(false, false);
    run_adamw(true, false);
    run_adamw(true, true);
}

/* First AdamW step by hand: m = 0.1 g, v = 0.001 g^2, mhat = g, vhat = g^2, p -= lr (sign(g) + wd p). */
static void test_adamw_first_step_by_hand(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid w = hp_param(g, "w", HP_SHAPE(2));
    hp_tid gr = hp_input(g, "g", HP_DTYPE_F32, HP_SHAPE(2));
    hp_tid m = hp_leaf(g, "m", HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, HP_SHAPE(2));
    hp_tid v = hp_leaf(g, "v", HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, HP_SHAPE(2));
    hp_tid lr = hp_input(g, "lr", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    hp_tid step = hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    hp_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.5f};
    assert_ok(hp_adamw(g, w, gr, m, v, lr, step, HP_TID_NONE, &hp));
    hp_program *p = hp_test_compile(g, NULL, 0);
    float *pw = hp_program_data(p, w), *pg = hp_program_data(p, gr);
    pw[0] = 1.0f, pw[1] = -2.0f, pg[0] = 3.0f, pg[1] = -0.5f;
    *(float *)hp_program_data(p, lr) = 0.1f;
    *(float *)hp_program_data(p, step) = 1.0f;
    assert_ok(hp_program_run(p));
    assert_close(pw[0], 1.0 - 0.1 * (1.0 + 0.5 * 1.0), 1e-6, 1e-7);    /* 0.85 */
    assert_close(pw[1], -2.0 - 0.1 * (-1.0 + 0.5 * -2.0), 1e-6, 1e-7); /* -1.8 */
    assert_close(((float *)hp_program_data(p, m))[0], 0.3, 1e-6, 0);
    assert_close(((float *)hp_program_data(p, v))[1], 0.001 * 0.25, 1e-4, 0);
    hp_program_free(p);
    hp_graph_free(g);
}

static void test_optim_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid w = hp_param(g, "w", HP_SHAPE(4, 3));
    hp_tid gr = hp_input(g, "g", HP_DTYPE_F32, HP_SHAPE(3, 4));
    hp_tid m = hp_leaf(g, "m", HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, HP_SHAPE(4, 3));
    hp_tid lr = hp_input(g, "lr", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    assert_int_equal(hp_adamw(g, w, gr, m, m, lr, lr, HP_TID_NONE, NULL), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("[3, 4]");
    hp_test_assert_error_contains("[4, 3]");
    hp_graph_free(g);

    g = hp_graph_new();
    w = hp_param(g, "w", HP_SHAPE(4, 3));
    hp_tid v2 = hp_input(g, "v2", HP_DTYPE_F32, HP_SHAPE(2));
    assert_int_equal(hp_clip_scale(g, w, 1.0f), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("[4, 3]");
    hp_graph_free(g);
    (void)v2;

    g = hp_graph_new();
    hp_tid id = hp_input(g, "ids", HP_DTYPE_I32, HP_SHAPE(4));
    assert_int_equal(hp_sumsq(g, &id, 1), HP_TID_NONE);
    hp_test_assert_error_contains("i32");
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sumsq_and_clip_scale),
        cmocka_unit_test(test_adamw_steps),
        cmocka_unit_test(test_adamw_first_step_by_hand),
        cmocka_unit_test(test_optim_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
