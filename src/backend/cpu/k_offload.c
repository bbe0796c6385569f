/*
 * CPU kernels of HyperOffload's operators. PREFETCH and OFFLOAD queue a copy on the plan's copy
 * stream (hp/copy_engine.h) and record the transfer's event; OFFLOAD_WAIT waits for it. ADAMW_STREAM
 * runs AdamW chunk by chunk where the states are (hp_copy_stream_chunks: fast and host buffers in
 * place, disk buffers staged through host memory with the next chunk's read overlapping the update);
 * operands the planner read early into the fast tier are updated in place there and written back.
 * A deferred ADAMW_STREAM (attr.i[0] = 1) queues the same update on the disk stream instead
 * and returns; the next step waits for it (an OFFLOAD_WAIT on the update's record).
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"
#include "offload/planner_internal.h"

#include <math.h>
#include <string.h>

hp_status hp__cpu_prefetch(const hp_kernel_args *a) {
    hp__ofl_xfer *x = a->node->extra;
    if (!x) return hp_error(HP_STATUS_INVALID_ARGUMENT, "prefetch: node has no transfer record (not from the planner)");
    HP_CHECK(hp_copy_async(x->ce, hp_loc_mem(HP_TIER_DEVICE, a->out[0]), hp__ofl_loc(x->st, x->slow, NULL), x->bytes));
    return hp_event_record(x->ev, x->ce);
}

hp_status hp__cpu_offload(const hp_kernel_args *a) {
    hp__ofl_xfer *x = a->node->extra;
    if (!x) return hp_error(HP_STATUS_INVALID_ARGUMENT, "offload: node has no transfer record (not from the planner)");
    HP_CHECK(hp_copy_async(x->ce, hp__ofl_loc(x->st, x->slow, NULL), hp_loc_mem(HP_TIER_DEVICE, a->in[0]), x->bytes));
    return hp_event_record(x->ev, x->ce);
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

/* Inside a team (team.h) thread 0 drives the stream and hands every chunk to the whole team: the
 * chunk is published in the team's shared scratch, every thread updates its share, and thread 0
 * queues the chunk's write-back only after all shares are done. */
typedef struct team_chunk {
    const adamw_ctx *c;
    void *bufs[4];
    size_t count;
    int done;
} team_chunk;
_Static_assert(sizeof(team_chunk) <= HP_TEAM_SHARED_DOUBLES * sizeof(double), "team scratch too small");

static hp_status adamw_chunk_team(void *user, size_t chunk, size_t first, size_t count, void *const *bufs) {
    (void)chunk, (void)first;
    team_chunk *tc = user;
    memcpy(tc->bufs, bufs, sizeof tc->bufs);
    tc->count = count;
    hp__team_sync(); /* publish the chunk */
    hp__adamw_update(tc->c, bufs[0], bufs[1], bufs[2], bufs[3], (int64_t)count);
    hp__team_sync(); /* every share done */
    return HP_STATUS_OK;
}

/* The threads other than 0: one share of every published chunk until thread 0 says done. */
static void adamw_stream_worker(const team_chunk *tc) {
    for (;;) {
        hp__team_sync();
        if (tc->done) return;
        hp__adamw_update(tc->c, tc->bufs[0], tc->bufs[1], tc->bufs[2], tc->bufs[3], (int64_t)tc->count);
        hp__team_sync();
    }
}

/* ---------------------------------------------------------------- deferred updates */

/* The write-back record of operand t when the planner read it early into the fast tier, or NULL. */
static hp__ofl_xfer *write_back_of(const hp_offload_state *st, hp_tid t) {
    return st->write_back && t >= 0 && t < st->n_tensors ? st->write_back[t] : NULL;
}

/* One chunk of a deferred update, on the disk stream's worker (its disk operands are staged). */
static void async_chunk(void *user) {
    const hp__ofl_chunk *ch = user;
    const hp__ofl_async *r = ch->rec;
    hp__adamw_coef c;
    memcpy(&c, r->coef, sizeof c);
    float *b[4];
    for (int k = 0; k < 4; k++)
        b[k] = r->stage[k] ? (float *)r->stage[k] : (float *)r->loc[k].ptr + ch->first;
    hp__adamw_update(&c, b[0], b[1], b[2], b[3], (int64_t)ch->count);
}

/* Fills the record of a deferred update (the step's scalars, where the operands are, the
 * write-backs of early-read copies), then queues what may go before every update still to come. */
static hp_status adamw_deferred(const hp_kernel_args *a, hp__ofl_async *r, const hp__adamw_coef *coef) {
    hp_offload_state *st = r->x.st;
    _Static_assert(sizeof r->coef == sizeof *coef, "coef layout");
    memcpy(r->coef, coef, sizeof r->coef);
    r->chunk_fn = async_chunk;
    for (int k = 0; k < 4; k++) {
        hp_tid t = a->node->in[k];
        r->loc[k] = hp__ofl_loc(st, t, a->in[k]);
        const hp__ofl_xfer *x = write_back_of(st, t);
        r->wb_bytes[k] = x ? x->bytes : 0;
        if (x) {
            r->wb_dst[k] = hp__ofl_loc(st, x->slow, NULL);
            r->wb_src[k] = hp_loc_mem(HP_TIER_DEVICE, a->in[k]);
        }
    }
    r->pending = true;
    return hp__ofl_async_flush(st, r->later_min);
}

/* A team kernel (team.h). */
hp_status hp__cpu_adamw_stream(const hp_kernel_args *a) {
    if (!a->node->extra) return hp__cpu_adamw(a); /* nothing offloaded: the plain kernel */
    /* Deferred: with an operand streamed from disk the whole update runs on the disk stream; with
     * every operand in memory (early-read copies, host homes) the team updates them now and only
     * the write-backs go to the disk stream. */
    hp__ofl_async *rec = a->node->attr.i[0] == 1 ? a->node->extra : NULL;
    bool job = rec && rec->job;
    if (job && hp__team_all() && omp_get_thread_num() != 0) return HP_STATUS_OK;
    hp_offload_state *st = rec ? rec->x.st : a->node->extra;
    const float lr = *(const float *)a->in[4], t = *(const float *)a->in[5];
    const float sc = (a->node->n_in > 6 && a->in[6]) ? *(const float *)a->in[6] : 1.0f;
    adamw_ctx c = {lr, sc, a->node->attr.f[0], a->node->attr.f[1], a->node->attr.f[2], a->node->attr.f[3], 0, 0};
    if (!(t >= 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: step must be >= 1 (counts from 1), is %g", (double)t);
    if (!isfinite(lr) || !isfinite(sc))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: lr %g and scale %g must be finite", (double)lr, (double)sc);
    c.c1 = (float)(1.0 / (1.0 - pow((double)c.b1, (double)t)));
    c.c2 = (float)(1.0 / (1.0 - pow((double)c.b2, (double)t)));
    if (job) return adamw_deferred(a, rec, &c);
    hp_stream_buffer b[4];
    for (int k = 0; k < 4; k++)
        b[k] = (hp_stream_buffer){hp__ofl_loc(st, a->node->in[k], a->in[k]), sizeof(float), k != 1};
    size_t numel = (size_t)hp_shape_numel(hp__in_shape(a, 0));
    size_t chunk = st->chunk_bytes / sizeof(float);
    hp_copy_engine *ce = st->ce; /* operands on disk stream on the disk stream */
    for (int k = 0; k < 4; k++)
        if (b[k].home.tier == HP_TIER_DISK && st->ce_disk) ce = st->ce_disk;
    if (hp__team_all()) {
        team_chunk *tc = (team_chunk *)(void *)hp__team_shared();
        if (omp_get_thread_num() != 0) {
            adamw_stream_worker(tc);
            return HP_STATUS_OK;
        }
        tc->c = &c;
        tc->done = 0;
        hp_status rs = hp_copy_stream_chunks(ce, b, 4, numel, chunk, HP_TIER_HOST, adamw_chunk_team, tc);
        tc->done = 1;
        hp__team_sync(); /* release the other threads, also after an error */
        HP_CHECK(rs);
    } else {
        HP_CHECK(hp_copy_stream_chunks(ce, b, 4, numel, chunk, HP_TIER_HOST, adamw_chunk, &c));
    }
    if (rec) return adamw_deferred(a, rec, &c); /* thread 0, after the team's update */
    /* Operands read early into the fast tier (param, m, v) are written back home now; an
     * OFFLOAD_WAIT on the same record keeps the copy alive until the write is done. */
    for (int k = 0; k < 4; k++) {
        hp__ofl_xfer *x = write_back_of(st, a->node->in[k]);
        if (!x) continue;
        HP_CHECK(hp_copy_async(x->ce, hp__ofl_loc(st, x->slow, NULL), hp_loc_mem(HP_TIER_DEVICE, a->in[k]), x->bytes));
        HP_CHECK(hp_event_record(x->ev, x->ce));
    }
    return HP_STATUS_OK;
}
