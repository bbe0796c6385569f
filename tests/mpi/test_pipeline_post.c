/* ranks: 2 4 */
/*
 * Post-validated pipeline steps (hp_pipeline_step_post, Qi et al.'s optimizer post-validation)
 * against synchronous ones (hp_pipeline_step) on the same model, data and schedule: every step's
 * loss and gradient norm and, after the last, every store entry (parameters, accumulators, AdamW
 * states) bitwise equal, under ZB-V and 1F1B,
 *   - without a clip: no check fails, nothing is redone;
 *   - with a clip the norms exceed: each such step's check fails, is rolled back and redone;
 *   - with a NaN written into a weight after step 2: the next steps' losses are NaN, their checks
 *     fail and their updates are skipped, as the synchronous step skips them.
 * Last, a step whose action fails while the previous step's check is pending stops every rank
 * with the error and leaves nothing pending (check_failed_post).
 */
#include "hp/comm_mpi.h"
#include "hp/pipeline.h"
#include "hp/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define OK_ON_FAIL goto out
#include "mpi_check.h"

#define BATCH 16
#define SEQ 8
#define STEPS 6

static void batch(int step, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < BATCH * SEQ; i++) {
        tok[i] = (int32_t)(hp_rng_u64(11 + (uint64_t)step, (uint64_t)i) % 48);
        tgt[i] = (int32_t)(hp_rng_u64(23 + (uint64_t)step, (uint64_t)i) % 48);
    }
}

static bool same(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

/* A NaN in this rank's first weight (its first store entry that is neither an accumulator nor an
 * AdamW state). */
static hp_status poison(hp_pipeline *pp) {
    hp_store *st = hp_pipeline_store(pp);
    for (int i = 0; i < hp_store_n_entries(st); i++) {
        const char *name = hp_store_name(st, i);
        if (!strncmp(name, "grad_acc.", 9) || !strncmp(name, "exp_avg", 7)) continue;
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(st, name, &e));
        ((float *)e.data)[0] = NAN;
        return hp_store_touch(st, name);
    }
    return HP_STATUS_OK;
}

/* One run of STEPS steps: post-validated or not; the losses and norms per step, and the
 * pipeline (the caller frees it) for comparing stores. */
static hp_status run(hp_comm *w, const hp_schedule *s, double clip, bool nan_w, bool post, float *loss, float *gn,
                     int64_t *rollbacks, hp_pipeline **out) {
    int p = hp_comm_size(w);
    hp_gpt_config c = {.vocab = 48, .context = SEQ, .layers = 2 * p, .heads = 2, .width = 16};
    hp_optim_config optim = {.lr = 3e-3, .min_lr = 3e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                             .eps = 1e-8, .grad_clip = clip};
    hp_pipeline_opts o = HP_PIPELINE_OPTS_INIT;
    o.model = &c, o.batch = BATCH, o.seq = SEQ, o.schedule = s, o.optim = &optim, o.comm = w;
    hp_pipeline *pp = NULL;
    hp_status st = hp_pipeline_new(&o, &pp);
    if (st == HP_STATUS_OK) st = hp_pipeline_init_params(pp, 7);
    int32_t tok[BATCH * SEQ], tgt[BATCH * SEQ];
    for (int i = 0; st == HP_STATUS_OK && i < STEPS; i++) {
        batch(i, tok, tgt);
        float lr = 3e-3f;
        if (nan_w && i == 3) st = poison(pp);
        if (st != HP_STATUS_OK) break;
        if (!post) {
            st = hp_pipeline_step(pp, tok, tgt, lr, &loss[i], &gn[i]);
            continue;
        }
        hp_pipeline_settled prev;
        st = hp_pipeline_step_post(pp, tok, tgt, lr, &prev);
        if (st == HP_STATUS_OK && (i > 0) != prev.valid) st = hp_error(HP_STATUS_INTERNAL, "step %d: settled %d", i, prev.valid);
        if (st == HP_STATUS_OK && i > 0) loss[i - 1] = prev.loss, gn[i - 1] = prev.grad_norm;
    }
    if (st == HP_STATUS_OK && post) {
        hp_pipeline_settled last;
        st = hp_pipeline_settle(pp, &last);
        loss[STEPS - 1] = last.loss, gn[STEPS - 1] = last.grad_norm;
        if (st == HP_STATUS_OK && !last.valid) st = hp_error(HP_STATUS_INTERNAL, "the last step was not pending");
    }
    hp_pipeline_stats ps;
    if (pp) hp_pipeline_get_stats(pp, &ps);
    *rollbacks = pp ? ps.rollbacks : 0;
    *out = pp;
    return st;
}

static void check(hp_comm *w, hp_sched_kind kind, double clip, bool nan_w, int64_t want_min, int64_t want_max) {
    float la[STEPS], ga[STEPS], lb[STEPS], gb[STEPS];
    int64_t ra = 0, rb = 0;
    hp_pipeline *a = NULL, *b = NULL;
    hp_schedule s;
    if (hp_schedule_build(kind, hp_comm_size(w), 2 * hp_comm_size(w), 0, &s) != HP_STATUS_OK) {
        CHECK(false, "schedule: %s", hp_error_message());
        return;
    }
    OK(run(w, &s, clip, nan_w, false, la, ga, &ra, &a));
    OK(run(w, &s, clip, nan_w, true, lb, gb, &rb, &b));
    for (int i = 0; i < STEPS; i++)
        CHECK(same(la[i], lb[i]) && same(ga[i], gb[i]), "%s clip %g%s step %d: loss %.9g / %.9g, norm %.9g / %.9g",
              hp_sched_kind_name(kind), clip, nan_w ? " NaN weight" : "", i, la[i], lb[i], ga[i], gb[i]);
    CHECK(rb >= want_min && rb <= want_max, "%s clip %g%s: %lld checks failed, expected %lld-%lld",
          hp_sched_kind_name(kind), clip, nan_w ? " NaN weight" : "", (long long)rb, (long long)want_min,
          (long long)want_max);
    hp_store *sa = hp_pipeline_store(a), *sb = hp_pipeline_store(b);
    CHECK(hp_store_n_entries(sa) == hp_store_n_entries(sb), "stores differ in size");
    int differ = 0;
    for (int i = 0; i < hp_store_n_entries(sa); i++) {
        hp_store_entry_info ea, eb;
        OK(hp_store_info(sa, hp_store_name(sa, i), &ea));
        OK(hp_store_info(sb, hp_store_name(sa, i), &eb));
        const float *x = ea.data, *y = eb.data;
        for (size_t k = 0; k < ea.bytes / sizeof(float); k++) differ += !same(x[k], y[k]);
    }
    CHECK(differ == 0, "%s clip %g%s: %d stored values differ after %d steps", hp_sched_kind_name(kind), clip,
          nan_w ? " NaN weight" : "", differ, STEPS);
    if (g_rank == 0)
        printf("%s clip %g%s: %d post-validated steps equal the synchronous ones (%lld redone)\n",
               hp_sched_kind_name(kind), clip, nan_w ? " NaN weight" : "", STEPS, (long long)rb);
out:
    hp_pipeline_free(a);
    hp_pipeline_free(b);
    hp_schedule_free(&s);
}

/* Last (a failure notice is job-wide: later waits of any family would give up): an action that
 * fails (rank 0's embedding meets id 48 in micro-batch 1) in a post-validated step while the
 * previous step's check is pending: every rank returns the error within seconds, the previous check settled or given up
 * (nothing pending afterwards: hp_pipeline_settle has nothing to settle, hp_pipeline_free does not
 * wait). */
static void check_failed_post(hp_comm *w) {
    int p = hp_comm_size(w);
    hp_schedule s;
    hp_pipeline *pp = NULL;
    bool built = false;
    OK(hp_schedule_build(HP_SCHED_KIND_1F1B, p, 2 * p, 0, &s));
    built = true;
    float loss[STEPS], gn[STEPS];
    int64_t rb;
    OK(run(w, &s, 0.0, false, true, loss, gn, &rb, &pp)); /* settled: one more step leaves a check pending */
    int32_t tok[BATCH * SEQ], tgt[BATCH * SEQ];
    batch(0, tok, tgt);
    OK(hp_pipeline_step_post(pp, tok, tgt, 3e-3f, NULL));
    tok[(BATCH / 4) * SEQ + 3] = 48; /* micro-batch 1, vocab 48 */
    double t0 = hp_now_seconds();
    hp_status st = hp_pipeline_step_post(pp, tok, tgt, 3e-3f, NULL);
    double wall = hp_now_seconds() - t0;
    CHECK(st != HP_STATUS_OK && wall < 10.0, "failed post-validated step: status %s after %.1f s (%s)",
          hp_status_str(st), wall, hp_error_message());
    if (g_rank == 0)
        CHECK(strstr(hp_error_message(), "id 48") != NULL, "rank 0's error does not name the id: %s", hp_error_message());
    hp_pipeline_settled last;
    OK(hp_pipeline_settle(pp, &last));
    CHECK(!last.valid, "rank %d: a check still pending after the failed step", g_rank);
out:
    hp_pipeline_free(pp);
    if (built) hp_schedule_free(&s);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    hp_sched_kind kinds[2] = {HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_1F1B};
    for (int k = 0; k < 2; k++) {
        check(world, kinds[k], 0.0, false, 0, 0);         /* no clip: every check passes */
        check(world, kinds[k], 1e-3, false, STEPS, STEPS); /* every norm over the clip */
        check(world, kinds[k], 0.0, true, STEPS - 3, STEPS - 3); /* steps 3-5's NaN losses */
    }
    hp_comm *fam; /* a communicator family of its own: the failure ends it */
    if (hp_comm_mpi_world(&fam) == HP_STATUS_OK && hp_comm_set_timeout(fam, 120) == HP_STATUS_OK) check_failed_post(fam);
    hp_comm_free(fam);
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "post-validated steps equal synchronous ones");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
