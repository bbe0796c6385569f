/*
 * The RAGGED_ALL_TO_ALLV step (hp/redistribute.h): token rows exchanged between a block split of
 * dim 0 and a ragged split by group (MoE expert parallelism: the rows of each expert to the rank
 * holding that expert, and back). The counts are read at run time:
 *
 *   1. every member of the axis group contributes its own counts (E i32, the rows it holds per
 *      group, its rows being grouped by group: MOE_DISPATCH's order); an all-gather makes the
 *      (n, E) count matrix known to all members (E*4 bytes per member);
 *   2. forward (block -> ragged): member s sends member r the rows of r's groups (a contiguous
 *      range of its rows, since r's groups are consecutive ids in a block distribution), one
 *      all-to-allv; the receiver reorders the (source, group) blocks to group-major order (the
 *      grouped GEMM's order) and zeroes its capacity rows past the received ones;
 *   3. backward (ragged -> block): the inverse permutation, then the transposed all-to-allv; the
 *      rows arrive in group order, which is the member's original order.
 *
 * Only rows to other members count in the bytes (hp_redistribute_ragged_bytes). After DeepSpeed-MoE
 * (Rajbhandari et al. 2022) and Tutel/MegaBlocks' dropless all-to-allv.
 */
#include "redist_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic int64_t g_bytes;

int64_t hp_redistribute_ragged_bytes(void) { return atomic_load(&g_bytes); }

hp_status hp__redist_ragged(hp_mesh *m, const hp_redist_step *s, const hp_shape *shape, hp_dtype dt, const void *in,
                            const int32_t *counts, int64_t E, void *out) {
    if (!counts || E < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "ragged all_to_allv: needs the counts (E = %lld)", (long long)E);
    const bool forward = s->after.ragged != 0;
    const size_t es = hp_dtype_size(dt);
    const int me = hp_mesh_my_index(m);
    hp_shape ish, osh;
    HP_CHECK(hp_layout_local_shape(&s->before, m, shape, me, &ish));
    HP_CHECK(hp_layout_local_shape(&s->after, m, shape, me, &osh));
    const int64_t rin = ish.ndim ? ish.dim[0] : 0, rout = osh.ndim ? osh.dim[0] : 0;
    const int64_t W = rin ? hp_shape_numel(&ish) / rin : (rout ? hp_shape_numel(&osh) / rout : 0);
    hp_comm *comm;
    HP_CHECK(hp_mesh_axes_comm(m, 1, &s->axis, &comm));
    const int n = hp_comm_size(comm), p = hp_comm_rank(comm);
    int32_t *cm = malloc(sizeof *cm * (size_t)(n * E));
    size_t *cnt = calloc(4 * (size_t)n, sizeof *cnt);
    int64_t *g0 = malloc(sizeof *g0 * 2 * (size_t)n);
    char *tmp = NULL;
    hp_status st = HP_STATUS_OK;
    if (!cm || !cnt || !g0) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "ragged all_to_allv: %d members, %lld groups", n, (long long)E);
        goto done;
    }
    HP_CHECK_GOTO(hp_comm_all_gather(comm, counts, cm, (size_t)E, HP_DTYPE_I32), st, done);
    int64_t *gl = g0 + n; /* member j holds groups [g0[j], g0[j] + gl[j]) */
    for (int j = 0; j < n; j++) hp_block_range(E, n, j, &g0[j], &gl[j]);
    for (int64_t i = 0; i < n * E; i++)
        if (cm[i] < 0)
            HP_CHECK_GOTO(hp_error(HP_STATUS_INVALID_ARGUMENT, "ragged all_to_allv: count %d of group %lld is negative",
                                   cm[i], (long long)(i % E)), st, done);
    /* mine[j]: rows member j sends me (forward) = its counts over my groups; theirs[j]: rows I send j */
    size_t *mine = cnt, *theirs = cnt + n, *dm = cnt + 2 * n, *dt_ = cnt + 3 * n;
    int64_t total_mine = 0, total_theirs = 0;
    for (int j = 0; j < n; j++) {
        for (int64_t e = g0[p]; e < g0[p] + gl[p]; e++) mine[j] += (size_t)cm[j * E + e];
        for (int64_t e = g0[j]; e < g0[j] + gl[j]; e++) theirs[j] += (size_t)cm[p * E + e];
        total_mine += (int64_t)mine[j];
        total_theirs += (int64_t)theirs[j];
    }
    const int64_t held = forward ? rin : rout; /* my block of token rows */
    if (total_theirs != held || total_mine > (forward ? rout : rin)) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "ragged all_to_allv: counts give %lld rows here and %lld from the "
                      "group, the blocks hold %lld and %lld", (long long)total_theirs, (long long)total_mine,
                      (long long)rin, (long long)rout);
        goto done;
    }
    for (int j = 1; j < n; j++) {
        dm[j] = dm[j - 1] + mine[j - 1];
        dt_[j] = dt_[j - 1] + theirs[j - 1];
    }
    int64_t moved = 0;
    for (int j = 0; j < n; j++) moved += j == p ? 0 : (int64_t)mine[j];
    const size_t row = (size_t)W * es;
    tmp = malloc((size_t)total_mine * row + 1);
    if (!tmp) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "ragged all_to_allv: %lld rows", (long long)total_mine);
        goto done;
    }
    /* element counts for the exchange */
    size_t *ce = malloc(sizeof *ce * 4 * (size_t)n);
    if (!ce) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "ragged all_to_allv: counts");
        goto done;
    }
    for (int j = 0; j < 4 * n; j++) ce[j] = cnt[j] * (size_t)W;
    char *o = out;
    const char *x = in;
    if (forward) {
        st = hp_comm_all_to_allv(comm, in, ce + n, ce + 3 * n, tmp, ce, ce + 2 * n, dt);
        if (st == HP_STATUS_OK) { /* (source, group) blocks -> group-major */
            int64_t r = 0;
            for (int64_t e = g0[p]; e < g0[p] + gl[p]; e++)
                for (int j = 0; j < n; j++) {
                    int64_t off = (int64_t)dm[j];
                    for (int64_t q = g0[p]; q < e; q++) off += cm[j * E + q];
                    memcpy(o + (size_t)r * row, tmp + (size_t)off * row, (size_t)cm[j * E + e] * row);
                    r += cm[j * E + e];
                }
            memset(o + (size_t)r * row, 0, (size_t)(rout - r) * row);
        }
    } else {
        int64_t r = 0; /* group-major -> (destination, group) blocks */
        for (int64_t e = g0[p]; e < g0[p] + gl[p]; e++)
            for (int j = 0; j < n; j++) {
                int64_t off = (int64_t)dm[j];
                for (int64_t q = g0[p]; q < e; q++) off += cm[j * E + q];
                memcpy(tmp + (size_t)off * row, x + (size_t)r * row, (size_t)cm[j * E + e] * row);
                r += cm[j * E + e];
            }
        st = hp_comm_all_to_allv(comm, tmp, ce, ce + 2 * n, out, ce + n, ce + 3 * n, dt);
        moved = 0;
        for (int j = 0; j < n; j++) moved += j == p ? 0 : (int64_t)theirs[j];
    }
    free(ce);
    if (st == HP_STATUS_OK) atomic_fetch_add(&g_bytes, moved * (int64_t)row);
done:
    free(tmp);
    free(cm);
    free(cnt);
    free(g0);
    return st;
}
