#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hp_test_assert_error_contains(const char *needle) {
    const char *msg = hp_error_message();
    if (!strstr(msg, needle)) fail_msg("error message '%s' does not contain '%s'", msg, needle);
}

void hp_test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
}

const char *hp_test_source_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", rel);
    return buf;
}
