#include "testutil.h"

#include <string.h>

static void test_status_messages(void **state) {
    (void)state;
    hp_status st = hp_error(HP_STATUS_SHAPE, "tensor '%s' has %d dims", "x", 3);
    assert_int_equal(st, HP_STATUS_SHAPE);
    assert_string_equal(hp_error_message(), "tensor 'x' has 3 dims");
    hp_error_prefix(st, "loading %s: ", "a.yaml");
    assert_string_equal(hp_error_message(), "loading a.yaml: tensor 'x' has 3 dims");
    assert_string_equal(hp_status_str(HP_STATUS_OK), "ok");
    assert_string_equal(hp_status_str((hp_status)999), "unknown status");
}

static void test_arena(void **state) {
    (void)state;
    hp_arena *a = hp_arena_new(128);
    assert_non_null(a);
    for (int i = 0; i < 100; i++) {
        int64_t *p = hp_arena_alloc(a, 40, 64);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        assert_int_equal(p[0], 0);
    }
    char *s = hp_arena_printf(a, "blocks.%d.%s", 3, "attn");
    assert_string_equal(s, "blocks.3.attn");
    assert_true(hp_arena_used(a) >= 4000);
    hp_arena_free(a);
}

static void test_shapes_and_dtypes(void **state) {
    (void)state;
    hp_shape s = HP_SHAPE(2, 3, 4);
    assert_int_equal(s.ndim, 3);
    assert_int_equal(hp_shape_numel(&s), 24);
    int64_t st[3];
    hp_shape_strides(&s, st);
    assert_int_equal(st[0], 12);
    assert_int_equal(st[2], 1);
    char buf[64];
    assert_string_equal(hp_shape_str(&s, buf, sizeof buf), "[2, 3, 4]");
    hp_shape sc = HP_SHAPE_SCALAR;
    assert_int_equal(hp_shape_numel(&sc), 1);
    hp_dtype d;
    assert_ok(hp_dtype_parse("BF16", &d));
    assert_int_equal(d, HP_DTYPE_BF16);
    assert_int_equal(hp_dtype_parse("f64", &d), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("f64");
    assert_true(hp_bf16_to_f32(hp_f32_to_bf16(1.5f)) == 1.5f);
}

static void test_tracked_memory(void **state) {
    (void)state;
    size_t before = hp_mem_in_use(HP_TIER_HOST);
    void *p = hp_mem_alloc(HP_TIER_HOST, 1000);
    assert_non_null(p);
    assert_int_equal(hp_mem_in_use(HP_TIER_HOST), before + 1000);
    assert_true(hp_mem_peak(HP_TIER_HOST) >= before + 1000);
    hp_mem_free(HP_TIER_HOST, p, 1000);
    assert_int_equal(hp_mem_in_use(HP_TIER_HOST), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_messages),
        cmocka_unit_test(test_arena),
        cmocka_unit_test(test_shapes_and_dtypes),
        cmocka_unit_test(test_tracked_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
