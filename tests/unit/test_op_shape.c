/* Data-movement operators: TRANSPOSE, SLICE, PAD, CONCAT: gradchecks, values (f32 and i32), errors. */
#include "gradcheck.h"
#include "hp/runtime.h"
#include "testutil.h"

#include <string.h>

typedef struct args {
    int i[3];
} args;

static hp_tid b_transpose(hp_graph *g, const hp_tid *p, void *u) {
    args *a = u;
    return hp_transpose(g, p[0], a->i[0], a->i[1]);
}
static hp_tid b_slice(hp_graph *g, const hp_tid *p, void *u) {
    args *a = u;
    return hp_slice(g, p[0], a->i[0], a->i[1], a->i[2]);
}
static hp_tid b_pad(hp_graph *g, const hp_tid *p, void *u) {
    args *a = u;
    return hp_pad(g, p[0], a->i[0], a->i[1], a->i[2]);
}
static hp_tid b_concat(hp_graph *g, const hp_tid *p, void *u) {
    args *a = u;
    return hp_concat(g, p, a->i[1], a->i[0]);
}

static void check(hp_gc_build b, int n, const hp_shape *shapes, args a) {
    hp_gc_spec s = {.n = n, .lo = -1, .hi = 1, .build = b, .user = &a};
    for (int i = 0; i < n; i++) s.shapes[i] = shapes[i];
    hp_gradcheck(&s);
}

static void check1(hp_gc_build b, hp_shape shape, args a) { check(b, 1, &shape, a); }

static void test_transpose_grad(void **state) {
    (void)state;
    check1(b_transpose, HP_SHAPE(3, 5), (args){{0, 1, 0}});
    check1(b_transpose, HP_SHAPE(2, 3, 4), (args){{0, 2, 0}});
    check1(b_transpose, HP_SHAPE(2, 3, 4), (args){{-1, -2, 0}});
    check1(b_transpose, HP_SHAPE(1, 4, 1, 3), (args){{3, 1, 0}});
    check1(b_transpose, HP_SHAPE(2, 3), (args){{1, 1, 0}});
}

static void test_slice_pad_grad(void **state) {
    (void)state;
    check1(b_slice, HP_SHAPE(5, 7), (args){{1, 2, 3}});
    check1(b_slice, HP_SHAPE(2, 6, 3), (args){{0, 1, 1}});
    check1(b_slice, HP_SHAPE(2, 6, 3), (args){{-1, 0, 3}});
    check1(b_slice, HP_SHAPE(1, 9), (args){{1, 8, 1}});
    check1(b_pad, HP_SHAPE(2, 3), (args){{0, 1, 5}});
    check1(b_pad, HP_SHAPE(2, 3, 1), (args){{2, 0, 4}});
    check1(b_pad, HP_SHAPE(4, 3), (args){{-1, 3, 6}});
}

static void test_concat_grad(void **state) {
    (void)state;
    hp_shape a[3] = {HP_SHAPE(2, 3), HP_SHAPE(2, 1), HP_SHAPE(2, 4)};
    check(b_concat, 3, a, (args){{1, 3, 0}});
    hp_shape b[2] = {HP_SHAPE(1, 2, 5), HP_SHAPE(3, 2, 5)};
    check(b_concat, 2, b, (args){{0, 2, 0}});
    hp_shape c[2] = {HP_SHAPE(2, 2, 5), HP_SHAPE(2, 3, 5)};
    check(b_concat, 2, c, (args){{-2, 2, 0}});
    check(b_concat, 1, c, (args){{2, 1, 0}});
}

/* Values on i32 data (the kernels move bytes of any dtype) against index arithmetic. */
static void test_values_i32(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_I32, HP_SHAPE(2, 3, 4, 5));
    hp_tid t = hp_transpose(g, x, 1, 3);     /* (2, 5, 4, 3) */
    hp_tid s = hp_slice(g, x, 2, 1, 2);      /* (2, 3, 2, 5) */
    hp_tid p = hp_pad(g, s, 2, 1, 4);        /* (2, 3, 4, 5): rows 1..2 of axis 2 kept, others 0 */
    hp_tid parts[3] = {hp_slice(g, x, 1, 0, 1), hp_slice(g, x, 1, 1, 1), hp_slice(g, x, 1, 2, 1)};
    hp_tid c = hp_concat(g, parts, 3, 1);    /* x again */
    assert_ok(hp_graph_status(g));
    assert_int_equal(hp_graph_tensor(g, c)->dtype, HP_DTYPE_I32);
    hp_tid keep[4] = {t, s, p, c};
    hp_program *pr;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = 4;
    assert_ok(hp_program_new(g, &o, &pr));
    int32_t *px = hp_program_data(pr, x);
    for (int i = 0; i < 120; i++) px[i] = i * 7 - 3;
    assert_ok(hp_program_run(pr));
    const int32_t *pt = hp_program_data(pr, t), *ps = hp_program_data(pr, s), *pp = hp_program_data(pr, p);
    const int32_t *pc = hp_program_data(pr, c);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int k = 0; k < 4; k++)
                for (int d = 0; d < 5; d++) {
                    int32_t v = px[((a * 3 + b) * 4 + k) * 5 + d];
                    assert_int_equal(pt[((a * 5 + d) * 4 + k) * 3 + b], v);
                    if (k >= 1 && k < 3) assert_int_equal(ps[((a * 3 + b) * 2 + (k - 1)) * 5 + d], v);
                    assert_int_equal(pp[((a * 3 + b) * 4 + k) * 5 + d], (k >= 1 && k < 3) ? v : 0);
                }
    assert_memory_equal(pc, px, 120 * sizeof(int32_t));
    hp_program_free(pr);
    hp_graph_free(g);
}

static void test_shape_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "x", HP_SHAPE(4, 6));
    assert_int_equal(hp_slice(g, x, 1, 4, 3), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("slice [4, 7) of axis 1 is outside [4, 6]");
    hp_graph_free(g);

    g = hp_graph_new();
    x = hp_param(g, "x", HP_SHAPE(4, 6));
    assert_int_equal(hp_transpose(g, x, 0, 2), HP_TID_NONE);
    hp_test_assert_error_contains("axis 2 out of range for [4, 6]");
    hp_graph_free(g);

    g = hp_graph_new();
    x = hp_param(g, "x", HP_SHAPE(4, 6));
    assert_int_equal(hp_pad(g, x, 0, 2, 5), HP_TID_NONE);
    hp_test_assert_error_contains("does not fit length 5");
    hp_graph_free(g);

    g = hp_graph_new();
    hp_tid xs[2] = {hp_param(g, "a", HP_SHAPE(4, 6)), hp_param(g, "b", HP_SHAPE(3, 5))};
    assert_int_equal(hp_concat(g, xs, 2, 1), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("[3, 5]");
    hp_test_assert_error_contains("[4, 6]");
    hp_graph_free(g);

    g = hp_graph_new();
    xs[0] = hp_param(g, "a", HP_SHAPE(4, 6));
    xs[1] = hp_input(g, "b", HP_DTYPE_I32, HP_SHAPE(4, 6));
    assert_int_equal(hp_concat(g, xs, 2, 0), HP_TID_NONE);
    hp_test_assert_error_contains("i32");
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transpose_grad),
        cmocka_unit_test(test_slice_pad_grad),
        cmocka_unit_test(test_concat_grad),
        cmocka_unit_test(test_values_i32),
        cmocka_unit_test(test_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
