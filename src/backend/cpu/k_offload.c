/*
 * CPU kernels of HyperOffload's operators. PREFETCH and OFFLOAD queue a copy on the plan's copy
 * stream (hp/copy_engine.h) and record the transfer's event; OFFLOAD_WAIT waits for it. ADAMW_STREAM
 * runs AdamW chunk by chunk where the states are (hp_copy_stream_chunks: fast and host buffers in
 * place, disk buffers staged through host memory with the next chunk's read overlapping the update);
 * operands the planner read early into the fast tier are updated in place there and written back.
 */
#include "backend/cpu/cpu.h"
#include "offload/planner_internal.h"

#include <math.h>

hp_status hp__cpu_prefetch(const hp_kernel_args *a) {
    hp__ofl_xfer *x = a->node->extra;
    if (!x) return hp_error(HP_STATUS_INVALID_ARGUMENT, "prefetch: node has no transfer record (not from the planner)");
    HP_CHECK(hp_copy_async(x->st->ce, hp_loc_mem(HP_TIER_DEVICE, a->out[0]), hp__ofl_loc(x->st, x->slow, NULL), x->bytes));
    return hp_event_record(x->ev, x->st->ce);
}

hp_status hp__cpu_offload(const hp_kernel_args *a) {
    hp__ofl_xfer *x = a->node->extra;
    if (!x) return hp_error(HP_STATUS_INVALID_ARGUMENT, "offload: node has no transfer record (not from the planner)");
    HP_CHECK(hp_copy_async(x->st->ce, hp__ofl_loc(x->st, x->slow, NULL), hp_loc_mem(HP_TIER_DEVICE, a->in[0]), x->bytes));
    return hp_event_record(x->ev, x->st->ce);
}

hp_status hp__cpu_offload_wait(const hp_kernel_args *a) {
    hp__ofl_xfer *x = a->node->extra;
    if (!x) return hp_error(HP_STATUS_INVALID_ARGUMENT, "offload_wait: node has no transfer record");
    return hp_event_wait(x->ev);
}

typedef hp__adamw_coef adamw_ctx;

/* One chunk of the streamed update: the same per-element update as ADAMW (bitwise). */
static hp_status adamw_chunk(void *user, size_t chunk, size_t first, size_t count, void *const *bufs) {
    (void)chunk, (void)first;
    hp__adamw_update(user, bufs[0], bufs[1], bufs[2], bufs[3], (int64_t)count);
    return HP_STATUS_OK;
}

hp_status hp__cpu_adamw_stream(const hp_kernel_args *a) {
    hp_offload_state *st = a->node->extra;
    if (!st) return hp__cpu_adamw(a); /* nothing offloaded: the plain kernel */
    const float lr = *(const float *)a->in[4], t = *(const float *)a->in[5];
    const float sc = (a->node->n_in > 6 && a->in[6]) ? *(const float *)a->in[6] : 1.0f;
    adamw_ctx c = {lr, sc, a->node->attr.f[0], a->node->attr.f[1], a->node->attr.f[2], a->node->attr.f[3], 0, 0};
    if (!(t >= 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: step must be >= 1 (counts from 1), is %g", (double)t);
    if (!isfinite(lr) || !isfinite(sc))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: lr %g and scale %g must be finite", (double)lr, (double)sc);
    c.c1 = (float)(1.0 / (1.0 - pow((double)c.b1, (double)t)));
    c.c2 = (float)(1.0 / (1.0 - pow((double)c.b2, (double)t)));
    hp_stream_buffer b[4];
    for (int k = 0; k < 4; k++)
        b[k] = (hp_stream_buffer){hp__ofl_loc(st, a->node->in[k], a->in[k]), sizeof(float), k != 1};
    size_t numel = (size_t)hp_shape_numel(hp__in_shape(a, 0));
    size_t chunk = st->chunk_bytes / sizeof(float);
    HP_CHECK(hp_copy_stream_chunks(st->ce, b, 4, numel, chunk, HP_TIER_HOST, adamw_chunk, &c));
    /* Operands read early into the fast tier (param, m, v) are written back home now; an
     * OFFLOAD_WAIT on the same record keeps the copy alive until the write is done. */
    for (int k = 0; k < 4; k++) {
        hp_tid t = a->node->in[k];
        hp__ofl_xfer *x = st->write_back && t >= 0 && t < st->n_tensors ? st->write_back[t] : NULL;
        if (!x) continue;
        HP_CHECK(hp_copy_async(st->ce, hp__ofl_loc(st, x->slow, NULL), hp_loc_mem(HP_TIER_DEVICE, a->in[k]), x->bytes));
        HP_CHECK(hp_event_record(x->ev, st->ce));
    }
    return HP_STATUS_OK;
}
