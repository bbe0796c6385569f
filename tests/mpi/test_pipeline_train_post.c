/* ranks: 2 4 */
/*
 * The trainer's post-validated pipeline steps (pipeline.post_validate: true; hp_trainer_step_post,
 * hp_pipeline_step_post): each step's metrics come with the next step, or at once where the caller
 * settles. Against the same run with synchronous steps (hp_trainer_step), every step is reported
 * once and in order with the same loss and gradient norm, bitwise, and the validation losses after
 * steps 5, 8 and 12 are the same bitwise (so are the parameters they read): with a clip the norms
 * never reach (no step redone), and with one every norm exceeds (every step redone: the update
 * clipped after the fact and the next step's schedule run again; tests/mpi/test_pipeline_post.c
 * covers a NaN, skipped, at the pipeline's level). An evaluation between
 * two unsettled steps settles the pending one and its metrics come with the next call;
 * hp_trainer_step on a post-validated config settles at once and refuses while a step is
 * unreported. A run stopped by a non-finite step stops at the synchronous run's step with its
 * parameters (the step launched before the failure was known taken back). 2 ranks: ZB-V over two
 * one-rank stages; 4 ranks: 1F1B over two dp2 stages.
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK_ON_FAIL goto out
#include "mpi_check.h"

#define STEPS 12

static hp_status load(int p, bool post, double clip, double lr, int skip, hp_run_config *cfg) {
    char corpus[1024], text[4096];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    int off = snprintf(text, sizeof text,
                       "model: {vocab: 256, context: 32, layers: 4, heads: 4, width: 32}\n"
                       "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                       "train: {steps: %d, batch: 8, seed: 3, eval_batches: 2, skip_nonfinite: %d, "
                       "checkpoint_dir: /tmp/unused}\n"
                       "optim: {lr: %g, min_lr: 3.0e-4, warmup: 3, weight_decay: 0.1, grad_clip: %g}\n"
                       "pipeline: {schedule: %s, micro_batches: 4, split: auto, post_validate: %s}\ngroups:\n",
                       corpus, STEPS, skip, lr, clip, p == 2 ? "zb-v" : "1f1b", post ? "true" : "false");
    for (int s = 0; s < 2; s++)
        off += snprintf(text + off, sizeof text - (size_t)off,
                        p == 2 ? "  stage%d: {ranks: 1}\n"
                               : "  stage%d: {ranks: 2, mesh: {device_matrix: [2], alias_name: [dp]}, strategy: "
                                 "{inputs: {tokens: [dp, none], targets: [dp, none]}}}\n",
                        s);
    return hp_run_config_load_string(text, strlen(text), post ? "post" : "sync", cfg);
}

typedef struct trajectory {
    double loss[STEPS + 1], gn[STEPS + 1], val[3]; /* after steps 5, 12 and 8 */
    int reported[STEPS + 1], redone, skipped;
} trajectory;

static void record(trajectory *r, const hp_step_metrics *m, int64_t *expect) {
    CHECK(m->step == *expect, "step %lld reported where step %lld was due", (long long)m->step, (long long)*expect);
    if (m->step >= 1 && m->step <= STEPS) {
        r->loss[m->step] = m->loss, r->gn[m->step] = m->grad_norm;
        r->reported[m->step]++;
    }
    r->redone += m->redone;
    r->skipped += m->skipped;
    (*expect)++;
}

/* The run: synchronous steps (hp_trainer_step) or post-validated ones settled after steps 5 and 12
 * (where it evaluates), with an evaluation between steps 8 and 9 while step 8 is unsettled. */
static void run(hp_comm *world, bool post, double clip, double lr, trajectory *r) {
    memset(r, 0, sizeof *r);
    hp_run_config cfg;
    hp_trainer *t = NULL;
    if (load(hp_comm_size(world), post, clip, lr, 3, &cfg) != HP_STATUS_OK) {
        CHECK(0, "config: %s", hp_error_message());
        return;
    }
    OK(hp_trainer_new_dist(&cfg, world, &t));
    int64_t expect = 1;
    while (hp_trainer_steps_done(t) < STEPS) {
        int64_t next = hp_trainer_steps_done(t) + 1;
        hp_step_metrics ms[2];
        int n = 0;
        if (!post) {
            OK(hp_trainer_step(t, &ms[0]));
            n = 1;
        } else {
            OK(hp_trainer_step_post(t, next == 5 || next == STEPS, ms, &n));
        }
        for (int i = 0; i < n; i++) record(r, &ms[i], &expect);
        /* every step before this one reported (one step late at most), and this one where settled */
        bool settled = !post || next == 5 || next == STEPS;
        CHECK(expect == next + settled, "after step %lld (%d metrics returned), step %lld is due", (long long)next, n,
              (long long)expect);
        if (next == 5 || next == STEPS) {
            OK(hp_trainer_eval(t, &r->val[next == STEPS]));
        }
        if (next == 8) { /* step 8 unsettled under post: the evaluation settles it */
            OK(hp_trainer_eval(t, &r->val[2]));
            if (post) {
                hp_step_metrics one;
                CHECK(hp_trainer_step(t, &one) == HP_STATUS_INVALID_ARGUMENT,
                      "hp_trainer_step ran with step 8's metrics unreported");
            }
        }
    }
    hp_step_metrics rest[1];
    int n = 0;
    OK(hp_trainer_settle(t, rest, &n));
    CHECK(n == 0, "%d metrics left after the last step", n);
out:
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

static void compare(const char *what, const trajectory *a, const trajectory *b, int redone) {
    for (int s = 1; s <= STEPS; s++) {
        CHECK(a->reported[s] == 1, "%s: step %d reported %d times", what, s, a->reported[s]);
        bool same = (a->loss[s] == b->loss[s] || (isnan(a->loss[s]) && isnan(b->loss[s]))) &&
                    (a->gn[s] == b->gn[s] || (isnan(a->gn[s]) && isnan(b->gn[s])));
        CHECK(same, "%s: step %d loss %.9g gnorm %.9g, synchronous %.9g %.9g", what, s, a->loss[s], a->gn[s], b->loss[s],
              b->gn[s]);
    }
    for (int k = 0; k < 3; k++)
        CHECK(a->val[k] == b->val[k], "%s: val loss after step %d %.9g, synchronous %.9g", what, k == 0 ? 5 : k == 1 ? 12 : 8,
              a->val[k], b->val[k]);
    CHECK(a->redone == redone, "%s: %d steps redone, expected %d", what, a->redone, redone);
    CHECK(a->skipped == 0 && b->skipped == 0, "%s: %d and %d steps skipped", what, a->skipped, b->skipped);
    if (g_rank == 0)
        printf("%s: %d steps as the synchronous run's (step %d loss %.6f), %d redone\n", what, STEPS, STEPS,
               a->loss[STEPS], a->redone);
}

/* A run stopped by a non-finite step (train.skip_nonfinite 0; a learning rate that blows the
 * weights up within a few steps). */
typedef struct stopped {
    hp_status st;
    long long failed;   /* the step the error names */
    int64_t steps_done; /* after the error */
    double val;         /* validation loss of the parameters left */
    float w[4];         /* a few of one block's weights */
} stopped;

static void run_until_nonfinite(hp_comm *world, bool post, stopped *r) {
    memset(r, 0, sizeof *r);
    hp_run_config cfg;
    hp_trainer *t = NULL;
    if (load(hp_comm_size(world), post, 100.0, 1e30, 0, &cfg) != HP_STATUS_OK) {
        CHECK(0, "config: %s", hp_error_message());
        return;
    }
    OK(hp_trainer_new_dist(&cfg, world, &t));
    while (r->st == HP_STATUS_OK && hp_trainer_steps_done(t) < STEPS) {
        hp_step_metrics ms[2];
        int n;
        r->st = post ? hp_trainer_step_post(t, false, ms, &n) : hp_trainer_step(t, &ms[0]);
    }
    CHECK(r->st == HP_STATUS_NONFINITE, "%s run: %s", post ? "post-validated" : "synchronous",
          r->st == HP_STATUS_OK ? "no step was non-finite" : hp_error_message());
    const char *at = strstr(hp_error_message(), "step ");
    CHECK(at && sscanf(at, "step %lld", &r->failed) == 1, "no step named in: %s", hp_error_message());
    r->steps_done = hp_trainer_steps_done(t);
    OK(hp_trainer_eval(t, &r->val));
    int64_t numel = 0;
    const float *w = hp_trainer_param(t, "blocks.3.mlp.fc.weight", &numel);
    CHECK(w && numel >= 4, "blocks.3.mlp.fc.weight: %s", w ? "too small" : hp_error_message());
    memcpy(r->w, w, sizeof r->w);
out:
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    static trajectory sync, post;
    run(world, false, 100.0, 3e-3, &sync); /* a clip no norm reaches: every check passes */
    run(world, true, 100.0, 3e-3, &post);
    compare("no clip", &post, &sync, 0);
    run(world, false, 1e-3, 3e-3, &sync); /* every norm over the clip: every check fails */
    run(world, true, 1e-3, 3e-3, &post);
    compare("every step clipped", &post, &sync, STEPS);
    /* Stopped by a non-finite step: the post-validated trainer learns it during the next step, which
     * it takes back, so it stops where the synchronous one does, with its parameters, bitwise. */
    stopped a, b;
    run_until_nonfinite(world, false, &a);
    run_until_nonfinite(world, true, &b);
    CHECK(a.failed >= 1 && a.failed == b.failed && a.steps_done == a.failed - 1 && b.steps_done == a.steps_done,
          "non-finite stop: step %lld (%lld done), post-validated step %lld (%lld done)", a.failed,
          (long long)a.steps_done, b.failed, (long long)b.steps_done);
    CHECK(isfinite(a.w[0]) && (a.val == b.val || (isnan(a.val) && isnan(b.val))) && memcmp(a.w, b.w, sizeof a.w) == 0,
          "non-finite stop: val loss %.9g and weights %g %g, synchronous %.9g %g %g", b.val, b.w[0], b.w[1], a.val, a.w[0],
          a.w[1]);
    if (g_rank == 0)
        printf("non-finite stop: step %lld in both, %lld steps kept, val loss %.6f in both\n", a.failed,
               (long long)a.steps_done, a.val);
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "post-validated trainer steps are the synchronous steps");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
