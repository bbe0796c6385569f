/* ranks: 2 4 */
/*
 * A pipeline step whose action fails on one rank must not leave the ranks waiting on each other's
 * transfers (hp_pipeline_forward_backward reports the failure to every rank and gives up its
 * communicator family before draining: hp_comm_report_failure, hp_comm_give_up). Then every rank
 * reaches MPI_Finalize without a crash: hp_comm_free cancels the abandoned receives and gives the
 * abandoned collectives (the other ranks' final all-reduce of `world` below, which they may give up:
 * rank 0's failure notice is job-wide) a second to complete, keeping what is still pending until
 * MPI_Finalize (docs/design.md, "In-flight requests after a give-up"). Nothing is leaked, so the
 * sanitizer pass runs it too. A rank whose stages alone fail to build stops every rank's build, also
 * when it fails before a collective of the build.
 */
#include "hp/comm_mpi.h"
#include "hp/offload.h"
#include "hp/pipeline.h"
#include "hp/rng.h"

#include <stdio.h>
#include <string.h>

#define OK_ON_FAIL goto out
#include "mpi_check.h"

#define BATCH 24
#define SEQ 8
#define SEED 7

static const hp_optim_config OPTIM = {.lr = 3e-3, .min_lr = 3e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                                      .eps = 1e-8, .grad_clip = 0.5};

static hp_gpt_config model(bool tied, int layers) {
    return (hp_gpt_config){.vocab = 48, .context = SEQ, .layers = layers, .heads = 2, .width = 16, .tied_head = tied};
}

static void batch(int step, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < BATCH * SEQ; i++) {
        tok[i] = (int32_t)(hp_rng_u64(11 + (uint64_t)step, (uint64_t)i) % 48);
        tgt[i] = (int32_t)(hp_rng_u64(23 + (uint64_t)step, (uint64_t)i) % 48);
    }
}

/* One check's pipeline: a communicator family of its own (a failure ends it), p stages under 1F1B
 * with m = 4, and the options of their pipeline over it. */
typedef struct fixture {
    hp_comm *w;
    hp_schedule s;
    hp_gpt_config c;
    hp_pipeline_opts o;
    hp_pipeline *pp;
} fixture;

static hp_status setup(int p, fixture *f) {
    memset(f, 0, sizeof *f);
    HP_CHECK(hp_comm_mpi_world(&f->w));
    HP_CHECK(hp_comm_set_timeout(f->w, 120));
    f->c = model(false, p);
    HP_CHECK(hp_schedule_build(HP_SCHED_KIND_1F1B, p, 4, 0, &f->s));
    f->o = HP_PIPELINE_OPTS_INIT;
    f->o.model = &f->c, f->o.batch = BATCH, f->o.seq = SEQ, f->o.schedule = &f->s, f->o.optim = &OPTIM;
    f->o.comm = f->w;
    return HP_STATUS_OK;
}

static void teardown(fixture *f) {
    hp_pipeline_free(f->pp);
    hp_schedule_free(&f->s);
    hp_comm_free(f->w);
}

/* A rank whose action fails (rank 0's embedding meets an id outside the vocabulary in micro-batch
 * 1, after micro-batch 0 left) must not leave the ranks waiting on each other's transfers: every
 * rank returns an error within seconds, rank 0 naming the id, the others rank 0's failure. */
static void check_failed_action(int p) {
    fixture f;
    OK(setup(p, &f));
    OK(hp_pipeline_new(&f.o, &f.pp));
    OK(hp_pipeline_init_params(f.pp, SEED));
    int32_t tok[BATCH * SEQ], tgt[BATCH * SEQ];
    batch(0, tok, tgt);
    tok[(BATCH / 4) * SEQ + 3] = 48; /* micro-batch 1, vocab 48 */
    double t0 = hp_now_seconds();
    float loss;
    hp_status st = hp_pipeline_forward_backward(f.pp, tok, tgt, &loss);
    double wall = hp_now_seconds() - t0;
    CHECK(st != HP_STATUS_OK && wall < 10.0, "failed action: status %s after %.1f s (%s)", hp_status_str(st), wall,
          hp_error_message());
    if (g_rank == 0)
        CHECK(strstr(hp_error_message(), "id 48") != NULL, "rank 0's error does not name the id: %s", hp_error_message());
    else
        CHECK(strstr(hp_error_message(), "world rank 0") != NULL && strstr(hp_error_message(), "failed"),
              "rank %d's error does not name rank 0's failure: %s", g_rank, hp_error_message());
out:
    teardown(&f);
}

/* Builds f's pipeline, which rank 0 alone cannot build: every rank must fail within seconds, rank
 * 0 with `want` and an error naming `mentions`, the others with HP_STATUS_COMM naming rank 0. */
static void expect_rank0_build_failure(fixture *f, hp_status want, const char *mentions, const char *what) {
    double t0 = hp_now_seconds();
    hp_status st = hp_pipeline_new(&f->o, &f->pp);
    double wall = hp_now_seconds() - t0;
    CHECK(st != HP_STATUS_OK && f->pp == NULL && wall < 10.0, "%s: status %s after %.1f s", what, hp_status_str(st),
          wall);
    if (g_rank == 0)
        CHECK(st == want && strstr(hp_error_message(), mentions) != NULL, "%s: rank 0's build failed with %s: %s", what,
              hp_status_str(st), hp_error_message());
    else
        CHECK(st == HP_STATUS_COMM && strstr(hp_error_message(), "rank 0 ") != NULL,
              "%s: rank %d's error does not name rank 0's failure: %s", what, g_rank, hp_error_message());
}

/* A rank whose stages alone fail to build (rank 0 alone asks for a 1 kB offload budget, which its
 * stage cannot run under) must not leave the others to wait for its sends: every rank's
 * hp_pipeline_new fails, rank 0 with its budget error, the others naming rank 0. Before the
 * ranks agreed on the build, rank 1 waited the communicator's whole timeout in its first receive. */
static void check_failed_build(int p) {
    fixture f;
    OK(setup(p, &f));
    hp_offload_plan_config oc;
    hp_offload_plan_config_init(&oc);
    oc.device_budget = 1000;
    oc.bandwidth[HP_TIER_HOST] = 1e10; /* no probe */
    if (g_rank == 0) f.o.offload = &oc;
    expect_rank0_build_failure(&f, HP_STATUS_OUT_OF_MEMORY, "", "failed build (rank 0's budget)");
out:
    teardown(&f);
}

/* A rank whose stage's layer range alone is wrong (rank 0 is given first layer -1) fails before the
 * collective split a tied head's exchange needs: the ranks agree on the stages' parts first, so the
 * others stop with an error naming rank 0 instead of waiting in the split for it. */
static void check_failed_parts(int p) {
    fixture f;
    OK(setup(p, &f));
    f.c = model(true, p);
    int first[8] = {-1, 1, 2, 3, 4, 5, 6, 7};
    if (g_rank == 0) f.o.first_layer = first;
    expect_rank0_build_failure(&f, HP_STATUS_INVALID_ARGUMENT, "[-1, 1)", "failed parts (rank 0's layer range)");
out:
    teardown(&f);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    check_failed_build(hp_comm_size(world));
    check_failed_parts(hp_comm_size(world));
    check_failed_action(hp_comm_size(world));
    /* rank 0's failure notice reached every rank: the others' waits of any family give up after 2 ms,
     * so each rank's own verdict decides its exit status too */
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any || failed ? "FAILED" : "a failed action stops every rank with its error");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any || failed ? 1 : 0;
}
