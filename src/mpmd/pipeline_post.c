/*
 * Post-validated steps (hp/pipeline.h, hp_pipeline_step_post): Qi et al., "Zero Bubble Pipeline
 * Parallelism" (ICLR 2024), section 5, optimizer post-validation. A synchronous step ends in two
 * all-reduces over every rank (the loss, the gradient norm the clip needs), so no rank starts the
 * next step before the last rank has finished this one: under ZB-V the first stage's rank then
 * idles at the end of each step and the next stage's at the start of the next. Here each rank
 * starts the all-reduce of (loss share, squared norm) without waiting for it, keeps a copy of its
 * store, and updates at once as if the check will pass (the clip scale is 1, the step counted).
 * The check lands while the next step runs; when it fails (a NaN or Inf loss or gradient, or a
 * norm the clip would scale) every rank learns it from the same sums, restores its copy, redoes
 * the update as the synchronous step would have (the clip applied, or the step skipped) and runs
 * the next step's schedule again. A step that passes is bitwise the synchronous step: the clip's
 * scale min(1, c / (norm + 1e-6)) is exactly 1 whenever the check passes.
 */
#include "mpmd/pipeline_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Copies every store entry of this rank into the backup (restore: back into the store, each
 * entry touched; the store must hold the same entries as when it was copied). With a trace, one
 * span on the compute track: kind copy, phase opt, "post-validation copy" or "... restore". */
static hp_status copy_store(hp_pipeline *pp, bool restore) {
    double t0 = pp->trace ? hp_trace_begin(pp->trace) : 0;
    int n = hp_store_n_entries(pp->store);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(pp->store, hp_store_name(pp->store, i), &e));
        if (e.tier != HP_TIER_DEVICE)
            return hp_error(HP_STATUS_UNSUPPORTED, "pipeline: post-validated steps keep a copy of the store, but "
                            "'%s' is not in device memory", e.name);
        if (!e.data)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: store entry '%s' has no storage yet (initialise "
                            "the parameters before a post-validated step)", e.name);
        total += e.bytes;
    }
    if (restore && (n != pp->post.backup_n || total != pp->post.backup_used))
        return hp_error(HP_STATUS_INTERNAL, "pipeline: the store changed since its post-validation copy (%d entries, "
                        "%zu bytes; copied %d, %zu)", n, total, pp->post.backup_n, pp->post.backup_used);
    if (!restore && total > pp->post.backup_bytes) {
        unsigned char *b = realloc(pp->post.backup, total);
        if (!b) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: %zu bytes for the post-validation copy", total);
        pp->post.backup = b, pp->post.backup_bytes = total;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const char *name = hp_store_name(pp->store, i);
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(pp->store, name, &e));
        if (restore) {
            memcpy(e.data, pp->post.backup + off, e.bytes);
            HP_CHECK(hp_store_touch(pp->store, name));
        } else {
            memcpy(pp->post.backup + off, e.data, e.bytes);
        }
        off += e.bytes;
    }
    if (!restore) pp->post.backup_n = n, pp->post.backup_used = total;
    if (pp->trace) {
        hp_trace_span s = HP_TRACE_SPAN_INIT;
        s.name = pp->trace_name[restore ? 8 : 7];
        s.kind = HP_TRACE_KIND_COPY;
        s.phase = HP_TRACE_PHASE_OPT;
        s.bytes = (double)total;
        hp_trace_end(pp->trace, pp->trace_track, t0, &s);
    }
    return HP_STATUS_OK;
}

/* Takes the pending step's update back: the store from its copy, the optimizer's step count. */
static hp_status restore_copy(hp_pipeline *pp) {
    HP_CHECK(copy_store(pp, true));
    pp->step = pp->post.step_before;
    return HP_STATUS_OK;
}

/* Whether the synchronous step would have updated with a clip scale of exactly 1: a finite loss
 * and norm, and no clip or one the norm stays under (the CLIP_SCALE kernel's own arithmetic). */
static bool passes(const hp_pipeline *pp, double loss, double sq) {
    if (!isfinite(loss) || !(sq >= 0.0) || isinf(sq)) return false;
    if (!(pp->optim.grad_clip > 0)) return true;
    double max_norm = (float)pp->optim.grad_clip;
    return max_norm / (sqrt(sq) + 1e-6) >= 1.0;
}

/* Waits for the pending check (unless its request already completed: req NULL) and settles its
 * step into *out; *redone when it failed (the store restored and the update redone or skipped). */
static hp_status settle(hp_pipeline *pp, hp_pipeline_settled *out, bool *redone) {
    *redone = false;
    memset(out, 0, sizeof *out);
    if (!pp->post.pending) return HP_STATUS_OK;
    hp_status st = hp_comm_wait(pp->post.req); /* NULL: OK */
    pp->post.req = NULL;
    pp->post.pending = false;
    HP_CHECK(st);
    double loss = pp->post.res[0], sq = pp->post.res[1];
    out->valid = true;
    out->loss = (float)loss;
    out->grad_norm = sqrtf(pp->post.res[1]);
    if (!isfinite(loss)) out->grad_norm = NAN; /* as hp_pipeline_step reports a skipped step */
    if (!passes(pp, loss, sq)) {
        double t1 = hp_now_seconds();
        HP_CHECK(restore_copy(pp));
        out->rolled_back = true;
        out->skipped = !isfinite(loss) || !isfinite(sq);
        if (out->skipped) HP_CHECK(hp__pp_zero_accumulators(pp));
        else HP_CHECK(hp__pp_apply_update(pp, pp->post.lr, pp->post.res[1]));
        pp->stats.rollbacks++;
        pp->stats.update_seconds += hp_now_seconds() - t1;
        *redone = true;
    }
    return HP_STATUS_OK;
}

hp_status hp_pipeline_step_post(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float lr,
                                hp_pipeline_settled *prev) {
    double part = 0;
    hp_pipeline_settled s;
    bool redone = false;
    HP_CHECK(hp__pp_run_schedule(pp, tokens, targets, &part));
    HP_CHECK(settle(pp, &s, &redone));
    if (redone) /* this step ran on parameters the failed check took back: again, from the redone ones */
        HP_CHECK(hp__pp_run_schedule(pp, tokens, targets, &part));
    HP_CHECK(hp__pp_reduce_gradients(pp));
    float sq = 0;
    HP_CHECK(hp__pp_local_sq(pp, &sq));
    double t0 = hp_now_seconds();
    hp_status st = copy_store(pp, false); /* before the all-reduce: a failure leaves nothing pending */
    pp->stats.update_seconds += hp_now_seconds() - t0;
    HP_CHECK(st);
    pp->post.send[0] = (float)part, pp->post.send[1] = sq;
    HP_CHECK(hp_comm_iall_reduce(pp->comm, pp->post.send, pp->post.res, 2, HP_DTYPE_F32, HP_REDUCE_SUM, &pp->post.req));
    pp->post.pending = true;
    pp->post.lr = lr;
    pp->post.step_before = pp->step;
    st = hp__pp_apply_update(pp, lr, 0.0f); /* the check passing: the clip's scale 1 */
    if (st != HP_STATUS_OK) { /* nothing of this step stays: its check dropped, the copy back */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hp_error_message());
        hp__pp_post_drop(pp);
        (void)restore_copy(pp);
        return hp_error(st, "%s", msg);
    }
    if (prev) *prev = s;
    return HP_STATUS_OK;
}

hp_status hp_pipeline_settle(hp_pipeline *pp, hp_pipeline_settled *last) {
    hp_pipeline_settled s;
    bool redone;
    HP_CHECK(settle(pp, &s, &redone));
    if (last) *last = s;
    return HP_STATUS_OK;
}

hp_status hp_pipeline_discard(hp_pipeline *pp) {
    if (!pp->post.pending) return HP_STATUS_OK;
    hp_status wait = hp_comm_wait(pp->post.req); /* its result is not needed, only its buffers back */
    pp->post.req = NULL;
    pp->post.pending = false;
    double t0 = hp_now_seconds();
    hp_status st = restore_copy(pp);
    if (st == HP_STATUS_OK) st = hp__pp_zero_accumulators(pp);
    pp->stats.update_seconds += hp_now_seconds() - t0;
    return st != HP_STATUS_OK ? st : wait;
}

void hp__pp_post_after_failure(hp_pipeline *pp) {
    if (!pp->post.pending) return;
    bool done = false;
    if (hp_comm_test(pp->post.req, &done) == HP_STATUS_OK && done) { /* settled like every other rank */
        pp->post.req = NULL;
        hp_pipeline_settled s;
        bool redone;
        (void)settle(pp, &s, &redone);
    }
}

hp_status hp__pp_post_idle(const hp_pipeline *pp) {
    if (!pp->post.pending) return HP_STATUS_OK;
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: a post-validated step is pending (hp_pipeline_settle first)");
}

void hp__pp_post_drop(hp_pipeline *pp) {
    if (!pp->post.pending) return;
    (void)hp_comm_wait(pp->post.req);
    pp->post.req = NULL;
    pp->post.pending = false;
}

void hp__pp_post_free(hp_pipeline *pp) {
    hp__pp_post_drop(pp);
    free(pp->post.backup);
    pp->post.backup = NULL;
}
