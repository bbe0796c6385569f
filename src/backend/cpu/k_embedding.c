/* CPU kernels for EMBEDDING (gather rows) and EMBEDDING_BACKWARD (deterministic scatter-add). */
#include "backend/cpu/cpu.h"

#include <omp.h>
#include <string.h>

/* Every id in [0, V); else HP_STATUS_INVALID_ARGUMENT naming the first bad id and its position. */
static hp_status check_ids(const int32_t *ids, int64_t n, int64_t v, const char *op) {
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= v) {
            bad = i;
            break;
        }
    if (bad >= 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: id %d at position %lld is outside [0, %lld)", op,
                        (int)ids[bad], (long long)bad, (long long)v);
    return HP_STATUS_OK;
}

hp_status hp__cpu_embedding(const hp_kernel_args *a) {
    const float *table = a->in[0];
    const int32_t *ids = a->in[1];
    float *y = a->out[0];
    const hp_shape *ts = hp__in_shape(a, 0);
    const int64_t v = ts->dim[0], c = ts->dim[1], n = hp_shape_numel(hp__in_shape(a, 1));
    HP_CHECK(check_ids(ids, n, v, "embedding"));
#pragma omp parallel for schedule(static) if (n * c > 32768)
    for (int64_t r = 0; r < n; r++) memcpy(y + r * c, table + (int64_t)ids[r] * c, (size_t)c * sizeof *y);
    return HP_STATUS_OK;
}

/*
 * dtable[ids[r], :] += dy[r, :]. Parallel over column blocks of C: each thread owns a block of
 * columns and scans every row in order, so no two threads write the same element (no atomics)
 * and every element's sum is taken in row order (deterministic for any thread count).
 */
hp_status hp__cpu_embedding_backward(const hp_kernel_args *a) {
    const float *dy = a->in[0];
    const int32_t *ids = a->in[1];
    float *dt = a->out[0];
    const hp_shape *ts = hp__out_shape(a, 0);
    const int64_t v = ts->dim[0], c = ts->dim[1], n = hp_shape_numel(hp__in_shape(a, 1));
    HP_CHECK(check_ids(ids, n, v, "embedding_backward"));
    memset(dt, 0, (size_t)(v * c) * sizeof *dt);
    int nt = omp_get_max_threads();
    int64_t blk = (c + nt - 1) / nt;
    blk = (blk + 15) / 16 * 16; /* whole cache lines per thread */
    if (blk < 16) blk = 16;
    int64_t nblk = (c + blk - 1) / blk;
#pragma omp parallel for schedule(static) if (n * c > 32768)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * blk, c1 = c0 + blk < c ? c0 + blk : c;
        for (int64_t r = 0; r < n; r++) {
            float *o = dt + (int64_t)ids[r] * c;
            const float *d = dy + r * c;
            for (int64_t j = c0; j < c1; j++) o[j] += d[j];
        }
    }
    return HP_STATUS_OK;
}
