/*
 * The analysis layer's timeline searches (hp_timeline_start_before, hp_timeline_end_after) against
 * a brute-force scan of their definitions, on random timelines with idle (dead, zero-second) nodes.
 */
#include "hp/liveness.h"
#include "testutil.h"

#include <stdlib.h>

#include <cmocka.h>

/* Latest p in [lo, use] with at[use] - at[p] >= x, or lo. */
static int32_t brute_start(const hp_timeline *tl, int32_t lo, int32_t use, double x) {
    for (int32_t p = use; p >= lo; p--)
        if (tl->at[use] - tl->at[p] >= x) return p;
    return lo;
}

/* Earliest w in [def, cap] with at[w + 1] - at[def + 1] >= x, or cap (def when cap <= def). */
static int32_t brute_end(const hp_timeline *tl, int32_t def, int32_t cap, double x) {
    if (cap <= def) return def;
    for (int32_t w = def; w <= cap; w++)
        if (tl->at[w + 1] - tl->at[def + 1] >= x) return w;
    return cap;
}

static void test_timeline_searches_match_brute_force(void **state) {
    (void)state;
    srand(7);
    enum { N = 40 };
    double at[N + 1];
    hp_timeline tl = {.n_nodes = N, .at = at};
    int checked = 0, interior = 0;
    for (int trial = 0; trial < 50; trial++) {
        at[0] = 0.0;
        for (int i = 0; i < N; i++) at[i + 1] = at[i] + (rand() % 3 == 0 ? 0.0 : (double)(rand() % 5 + 1));
        for (int32_t a = -1; a < N; a++) {
            for (int32_t b = a < 0 ? 0 : a; b < N; b++) {
                double x = (double)(rand() % 12);
                if (a >= 0) {
                    int32_t got = hp_timeline_start_before(&tl, a, b, x), want = brute_start(&tl, a, b, x);
                    assert_int_equal(got, want);
                    if (got > a && got < b) interior++;
                }
                int32_t got = hp_timeline_end_after(&tl, a, b, x), want = brute_end(&tl, a, b, x);
                assert_int_equal(got, want);
                checked++;
            }
        }
    }
    assert_true(checked > 10000);
    assert_true(interior > 1000); /* the searches were exercised away from their bounds */
}

static void test_timeline_search_edges(void **state) {
    (void)state;
    double at[] = {0, 1, 1, 3, 6}; /* node seconds 1, 0, 2, 3 */
    hp_timeline tl = {.n_nodes = 4, .at = at};
    assert_int_equal(hp_timeline_start_before(&tl, 0, 4, 3.0), 3);  /* node 3 alone gives 3 s */
    assert_int_equal(hp_timeline_start_before(&tl, 0, 4, 3.5), 2);
    assert_int_equal(hp_timeline_start_before(&tl, 0, 4, 99.0), 0); /* too late even at lo */
    assert_int_equal(hp_timeline_start_before(&tl, 2, 2, 0.0), 2);
    assert_int_equal(hp_timeline_end_after(&tl, 0, 3, 2.0), 2);     /* nodes 1..2 give 2 s */
    assert_int_equal(hp_timeline_end_after(&tl, 0, 3, 99.0), 3);    /* never hidden: cap */
    assert_int_equal(hp_timeline_end_after(&tl, 2, 1, 1.0), 2);     /* cap <= def: def */
    assert_int_equal(hp_timeline_end_after(&tl, -1, 3, 1.0), 0);
    assert_true(hp_timeline_between(&tl, 0, 3) == 2.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeline_searches_match_brute_force),
        cmocka_unit_test(test_timeline_search_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
