/* Finite-difference gradient checks: elementwise operators and reductions. */
#include "gradcheck.h"
#include "testutil.h"

#include <string.h>

static hp_tid b_add(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_add(g, p[0], p[1]); }
static hp_tid b_sub(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_sub(g, p[0], p[1]); }
static hp_tid b_mul(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_mul(g, p[0], p[1]); }
static hp_tid b_scale(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_scale(g, p[0], -2.5f); }
static hp_tid b_copy(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_copy(g, p[0]); }
static hp_tid b_sum0(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_sum(g, p[0], 1); }
static hp_tid b_mean(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_mean(g, p[0], -1); }
static hp_tid b_mean_ax(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_mean(g, p[0], 0); }
static hp_tid b_reshape(hp_graph *g, const hp_tid *p, void *u) {
    (void)u;
    return hp_reshape(g, p[0], HP_SHAPE(6, 4));
}

static void check2(hp_gc_build b, hp_shape s0, hp_shape s1) {
    hp_gc_spec s = {.n = 2, .shapes = {s0, s1}, .lo = -1, .hi = 1, .build = b};
    hp_gradcheck(&s);
}

static void check1(hp_gc_build b, hp_shape s0) {
    hp_gc_spec s = {.n = 1, .shapes = {s0}, .lo = -1, .hi = 1, .build = b};
    hp_gradcheck(&s);
}

static void test_binary_broadcast(void **state) {
    (void)state;
    hp_gc_build ops[3] = {b_add, b_sub, b_mul};
    for (int i = 0; i < 3; i++) {
        check2(ops[i], HP_SHAPE(3, 5), HP_SHAPE(3, 5));
        check2(ops[i], HP_SHAPE(2, 3, 5), HP_SHAPE(5));
        check2(ops[i], HP_SHAPE(2, 3, 5), HP_SHAPE(3, 1));
        check2(ops[i], HP_SHAPE(4, 1), HP_SHAPE(1, 6));
        check2(ops[i], HP_SHAPE(1), HP_SHAPE(2, 2));
    }
}

static void test_unary_and_reductions(void **state) {
    (void)state;
    check1(b_scale, HP_SHAPE(4, 7));
    check1(b_copy, HP_SHAPE(4, 7));
    check1(b_sum0, HP_SHAPE(2, 3, 4));
    check1(b_mean, HP_SHAPE(2, 3, 4));
    check1(b_mean_ax, HP_SHAPE(5, 3));
    check1(b_reshape, HP_SHAPE(2, 3, 4));
}

static void test_shape_errors_name_tensors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_graph_push_scope(g, "blk");
    hp_tid a = hp_param(g, "a", HP_SHAPE(3, 4));
    hp_tid b = hp_param(g, "b", HP_SHAPE(5));
    assert_int_equal(hp_add(g, a, b), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("blk.a");
    hp_test_assert_error_contains("[3, 4]");
    /* sticky: later builders return NONE and keep the first error */
    assert_int_equal(hp_scale(g, a, 2.0f), HP_TID_NONE);
    assert_non_null(strstr(hp_graph_error(g), "do not broadcast"));
    hp_graph_free(g);
}

static void test_duplicate_name_and_verify(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid a = hp_param(g, "w", HP_SHAPE(2));
    assert_int_not_equal(a, HP_TID_NONE);
    assert_int_equal(hp_graph_find(g, "w"), a);
    hp_tid y = hp_scale(g, a, 3.0f);
    assert_ok(hp_graph_verify(g));
    assert_int_not_equal(y, HP_TID_NONE);
    assert_int_equal(hp_param(g, "w", HP_SHAPE(2)), HP_TID_NONE);
    hp_test_assert_error_contains("'w' is used twice");
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_unary_and_reductions),
        cmocka_unit_test(test_shape_errors_name_tensors),
        cmocka_unit_test(test_duplicate_name_and_verify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
