/*
 * The compute timeline's transfer queries (hp/liveness.h, src/analysis/timeline.c) against a
 * linear search over every node: the latest start of a prefetch that still finishes before a use,
 * the earliest node by which an offload after a def is done, on random node times, with the edge
 * cases (transfer longer than all compute, zero-length transfer, cap <= def).
 */
#include "testutil.h"

#include "hp/liveness.h"

#include <stdlib.h>

#define N 40

/* at[] of N nodes with random times in [0, 1) seconds, some zero (nodes that take no time). */
static void make_timeline(hp_timeline *tl, double *at, unsigned seed) {
    srand(seed);
    at[0] = 0.0;
    for (int i = 0; i < N; i++) {
        double t = (rand() % 4 == 0) ? 0.0 : (double)(rand() % 1000) / 1000.0;
        at[i + 1] = at[i] + t;
    }
    tl->n_nodes = N;
    tl->at = at;
}

static int32_t latest_start_ref(const hp_timeline *tl, int32_t lo, int32_t use, double x) {
    for (int32_t p = use; p >= lo; p--)
        if (tl->at[use] - tl->at[p] >= x) return p;
    return lo;
}

static int32_t earliest_end_ref(const hp_timeline *tl, int32_t def, int32_t cap, double x) {
    if (cap <= def) return def;
    for (int32_t w = def; w <= cap; w++)
        if (tl->at[w + 1] - tl->at[def + 1] >= x) return w;
    return cap;
}

static void test_latest_start(void **state) {
    (void)state;
    double at[N + 1];
    hp_timeline tl;
    const double xs[] = {0.0, 0.25, 1.0, 3.5, 1e9};
    for (unsigned seed = 1; seed <= 5; seed++) {
        make_timeline(&tl, at, seed);
        for (int32_t use = 0; use < N; use++)
            for (int32_t lo = 0; lo <= use; lo += 3)
                for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
                    int32_t got = hp_timeline_latest_start(&tl, lo, use, xs[k]);
                    int32_t want = latest_start_ref(&tl, lo, use, xs[k]);
                    if (got != want)
                        fail_msg("seed %u lo %d use %d x %g: got %d, want %d", seed, lo, use, xs[k], got, want);
                }
        /* a zero-length transfer may start at the use itself; one longer than all compute at lo */
        assert_int_equal(hp_timeline_latest_start(&tl, 0, N - 1, 0.0), N - 1);
        assert_int_equal(hp_timeline_latest_start(&tl, 2, N - 1, 1e9), 2);
    }
}

static void test_earliest_end(void **state) {
    (void)state;
    double at[N + 1];
    hp_timeline tl;
    const double xs[] = {0.0, 0.25, 1.0, 3.5, 1e9};
    for (unsigned seed = 1; seed <= 5; seed++) {
        make_timeline(&tl, at, seed);
        for (int32_t def = 0; def < N; def++)
            for (int32_t cap = 0; cap < N; cap += 2)
                for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
                    int32_t got = hp_timeline_earliest_end(&tl, def, cap, xs[k]);
                    int32_t want = earliest_end_ref(&tl, def, cap, xs[k]);
                    if (got != want)
                        fail_msg("seed %u def %d cap %d x %g: got %d, want %d", seed, def, cap, xs[k], got, want);
                }
        assert_int_equal(hp_timeline_earliest_end(&tl, 5, 3, 1.0), 5); /* cap <= def */
        assert_int_equal(hp_timeline_earliest_end(&tl, 0, N - 1, 1e9), N - 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latest_start),
        cmocka_unit_test(test_earliest_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
