/* Shared helpers for the cmocka tests. */
#ifndef HP_TESTUTIL_H
#define HP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hp/core.h"

/* Fails the test, printing the status name and hp_error_message(), unless st is HP_STATUS_OK. */
#define assert_ok(expr)                                                                            \
    do {                                                                                           \
        hp_status st_ = (expr);                                                                    \
        if (st_ != HP_STATUS_OK)                                                                   \
            fail_msg("%s returned %s: %s", #expr, hp_status_str(st_), hp_error_message());          \
    } while (0)

/* Fails unless |a - b| <= atol + rtol * |b|, printing both values. */
#define assert_close(a, b, rtol, atol)                                                             \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        double d_ = a_ > b_ ? a_ - b_ : b_ - a_;                                                   \
        double m_ = b_ < 0 ? -b_ : b_;                                                             \
        if (!(d_ <= (atol) + (rtol) * m_))                                                         \
            fail_msg("%s = %.9g vs %s = %.9g (diff %.3g)", #a, a_, #b, b_, d_);                     \
    } while (0)

/* Fails unless the message of the last error contains `needle`. */
void hp_test_assert_error_contains(const char *needle);

/* Deterministic uniform floats in [lo, hi) for test data (xorshift, seeded). */
void hp_test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);

/* A path under the source tree ($HP_SOURCE_DIR or "."), in a static buffer. */
const char *hp_test_source_path(const char *rel);

/* Compiles g (which must have no builder error) into a program keeping keep[0..nk). */
struct hp_graph;
struct hp_program *hp_test_compile(struct hp_graph *g, int32_t *keep, int nk);

/* Forward declarations so tests that train need not repeat these helpers. */
struct hp_trainer;
struct hp_run_config;
/* A tiny GPT run config on the KJV corpus (context 32, 2 layers, 2 heads, width 32, batch 4,
 * 20 steps, seed 7); checkpoint_dir = ckdir or "/tmp/unused". */
void hp_test_tiny_config(struct hp_run_config *c, const char *ckdir);
/* Runs n training steps, storing each step's loss (fails the test on error). */
void hp_test_run_steps(struct hp_trainer *t, int n, double *losses);

#endif
