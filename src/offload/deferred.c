/*
 * Deferred AdamW updates (hp_offload_plan_config.async_update): queuing the updates the step's
 * ADAMW_STREAM kernels recorded onto the disk stream, earliest next-step deadline first.
 */
#include "offload/planner_internal.h"

/* A job: per chunk the reads of disk operands into staging, the update, the writes back (the stream
 * is FIFO, so one staging chunk per operand suffices). */
static hp_status queue_job(hp_copy_engine *ce, const hp__ofl_async *r) {
    for (size_t c = 0; c < r->n_chunks; c++) {
        const hp__ofl_chunk *ch = &r->chunk[c];
        size_t off = ch->first * sizeof(float), bytes = ch->count * sizeof(float);
        for (int k = 0; k < 4; k++)
            if (r->stage[k]) HP_CHECK(hp_copy_async(ce, hp_loc_mem(HP_TIER_HOST, r->stage[k]), hp_loc_at(r->loc[k], off), bytes));
        HP_CHECK(hp_copy_host_task(ce, r->chunk_fn, (void *)ch));
        for (int k = 0; k < 4; k++)
            if (r->stage[k] && k != 1) /* the gradient is only read */
                HP_CHECK(hp_copy_async(ce, hp_loc_at(r->loc[k], off), hp_loc_mem(HP_TIER_HOST, r->stage[k]), bytes));
    }
    return HP_STATUS_OK;
}

hp_status hp__ofl_async_flush(hp_offload_state *s, int32_t limit) {
    for (int i = 0; i < s->n_async; i++) {
        hp__ofl_async *r = &s->async[s->async_order[i]];
        if (r->deadline > limit) break; /* async_order is by deadline */
        if (!r->pending) continue;
        r->pending = false;
        hp_status st = r->job ? queue_job(s->ce_disk, r) : HP_STATUS_OK;
        for (int k = 0; k < 4 && st == HP_STATUS_OK; k++)
            if (r->wb_bytes[k]) st = hp_copy_async(s->ce_disk, r->wb_dst[k], r->wb_src[k], r->wb_bytes[k]);
        /* recorded also after a failure: the next step's wait then covers what was queued */
        hp_status s2 = hp_event_record(r->x.ev, s->ce_disk);
        HP_CHECK(st);
        HP_CHECK(s2);
    }
    return HP_STATUS_OK;
}
