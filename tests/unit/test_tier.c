/* Tier descriptors, the bandwidth probe and the fixed-capacity best-fit pool. */
#include "testutil.h"

#include "hp/tier.h"

#include <stdint.h>
#include <string.h>

static void test_tier_list_and_transfer_time(void **state) {
    (void)state;
    hp_tier_list l;
    hp_tier_list_init(&l);
    assert_int_equal(l.tier[HP_TIER_DISK].kind, HP_TIER_DISK);
    assert_true(l.tier[HP_TIER_HOST].capacity == SIZE_MAX);
    assert_true(hp_tier_transfer_seconds(&l, HP_TIER_HOST, HP_TIER_DEVICE, 100) == 0.0);
    l.tier[HP_TIER_HOST].read_bw = 100.0;
    l.tier[HP_TIER_HOST].write_bw = 50.0;
    l.tier[HP_TIER_DISK].read_bw = 10.0;
    l.tier[HP_TIER_DISK].write_bw = 5.0;
    assert_close(hp_tier_transfer_seconds(&l, HP_TIER_HOST, HP_TIER_DEVICE, 100), 1.0, 1e-12, 0);
    assert_close(hp_tier_transfer_seconds(&l, HP_TIER_DEVICE, HP_TIER_HOST, 100), 2.0, 1e-12, 0);
    assert_close(hp_tier_transfer_seconds(&l, HP_TIER_HOST, HP_TIER_DISK, 100), 21.0, 1e-12, 0);
    assert_true(hp_tier_transfer_seconds(&l, HP_TIER_DISK, HP_TIER_DISK, 100) == 0.0);
}

static void test_probe_is_bounded_and_positive(void **state) {
    (void)state;
    hp_tier_list l;
    hp_tier_list_init(&l);
    assert_ok(hp_tier_probe(&l, HP_TIER_HOST, NULL, (size_t)4 << 20));
    assert_true(l.tier[HP_TIER_HOST].measured);
    assert_true(l.tier[HP_TIER_HOST].read_bw > 0);
    assert_ok(hp_tier_probe(&l, HP_TIER_DISK, NULL, (size_t)4 << 20));
    assert_true(l.tier[HP_TIER_DISK].read_bw > 0 && l.tier[HP_TIER_DISK].write_bw > 0);
    assert_int_equal(hp_tier_probe(&l, (hp_tier)7, NULL, 0), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("7");
    /* A disk probe in a directory that does not exist names the path. */
    assert_int_equal(hp_tier_probe(&l, HP_TIER_DISK, "/nonexistent-hp-dir", 4096), HP_STATUS_IO);
    hp_test_assert_error_contains("/nonexistent-hp-dir");
}

static void test_pool_budget_and_peak(void **state) {
    (void)state;
    size_t before = hp_mem_in_use(HP_TIER_DEVICE);
    hp_pool *p;
    assert_ok(hp_pool_new(HP_TIER_DEVICE, 1 << 16, 256, true, &p));
    assert_true(hp_mem_in_use(HP_TIER_DEVICE) >= before + (1 << 16));
    size_t a, b, c;
    assert_ok(hp_pool_alloc(p, 1000, &a)); /* rounded to 1024 */
    assert_int_equal(hp_pool_in_use(p), 1024);
    assert_int_equal(hp_pool_block_size(p, a), 1024);
    assert_ok(hp_pool_alloc(p, 30000, &b));
    assert_ok(hp_pool_alloc(p, 30000, &c));
    assert_int_equal(a % 256, 0);
    assert_int_equal((uintptr_t)hp_pool_ptr(p, b) % 256, 0);
    assert_int_equal(hp_pool_offset_of(p, hp_pool_ptr(p, c)), c);
    memset(hp_pool_ptr(p, c), 7, 30000);
    size_t peak = hp_pool_in_use(p);
    assert_int_equal(hp_pool_peak(p), peak);
    size_t d;
    assert_int_equal(hp_pool_alloc(p, 8000, &d), HP_STATUS_OUT_OF_MEMORY);
    hp_test_assert_error_contains("device tier");
    hp_test_assert_error_contains("8000");
    assert_int_equal(hp_pool_alloc(p, (size_t)1 << 20, &d), HP_STATUS_OUT_OF_MEMORY);
    hp_test_assert_error_contains("1048576");
    assert_ok(hp_pool_free(p, b));
    assert_int_equal(hp_pool_free(p, b), HP_STATUS_INVALID_ARGUMENT); /* double free */
    assert_int_equal(hp_pool_peak(p), peak);
    hp_pool_reset_peak(p);
    assert_int_equal(hp_pool_peak(p), hp_pool_in_use(p));
    assert_ok(hp_pool_free(p, a));
    assert_ok(hp_pool_free(p, c));
    assert_int_equal(hp_pool_in_use(p), 0);
    assert_int_equal(hp_pool_largest_free(p), 1 << 16); /* everything coalesced */
    hp_pool_destroy(p);
    assert_int_equal(hp_mem_in_use(HP_TIER_DEVICE), before);
}

static void test_pool_best_fit_and_fragmentation(void **state) {
    (void)state;
    hp_pool *p;
    assert_ok(hp_pool_new(HP_TIER_HOST, 10 * 1024, 1024, false, &p));
    assert_null(hp_pool_ptr(p, 0));
    size_t o[10];
    for (int i = 0; i < 10; i++) assert_ok(hp_pool_alloc(p, 1024, &o[i]));
    /* Holes: [1] 1 KiB, [3,4] 2 KiB, [6,7,8] 3 KiB. */
    assert_ok(hp_pool_free(p, o[1]));
    assert_ok(hp_pool_free(p, o[3]));
    assert_ok(hp_pool_free(p, o[4]));
    assert_ok(hp_pool_free(p, o[6]));
    assert_ok(hp_pool_free(p, o[7]));
    assert_ok(hp_pool_free(p, o[8]));
    size_t x;
    assert_ok(hp_pool_alloc(p, 2000, &x)); /* best fit: the 2 KiB hole */
    assert_int_equal(x, o[3]);
    assert_ok(hp_pool_alloc(p, 500, &x)); /* best fit: the 1 KiB hole */
    assert_int_equal(x, o[1]);
    /* 3 KiB free in one piece, but 4 KiB asked: fragmentation reported with the largest block. */
    assert_int_equal(hp_pool_alloc(p, 4096, &x), HP_STATUS_OUT_OF_MEMORY);
    hp_test_assert_error_contains("largest free block 3072");
    assert_int_equal(hp_pool_free(p, 12345), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("12345");
    hp_pool_destroy(p);
    assert_int_equal(hp_pool_new(HP_TIER_HOST, 4096, 3, false, &p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("alignment 3");
    assert_int_equal(hp_pool_new(HP_TIER_HOST, 0, 64, false, &p), HP_STATUS_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tier_list_and_transfer_time),
        cmocka_unit_test(test_probe_is_bounded_and_positive),
        cmocka_unit_test(test_pool_budget_and_peak),
        cmocka_unit_test(test_pool_best_fit_and_fragmentation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
