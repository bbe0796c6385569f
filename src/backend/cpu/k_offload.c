/*
 * CPU kernel of ADAMW_STREAM: AdamW where the states may live on slower tiers. What moves where is
 * the offload pass's business (its runtime instruction, hp_instr, runs the chunk stream); the
 * backend lends it the per-chunk update (hp_exec_ctx): inside a thread team (team.h) thread 0 runs
 * the instruction and every chunk's update is shared by the team (the chunk is published in the
 * team's shared scratch, every thread updates its share, thread 0 goes on only after all shares are
 * done); the same update on one thread serves the updates the pass defers to its disk stream.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"
#include "hp/backend.h"

#include <math.h>
#include <string.h>

typedef hp__adamw_coef adamw_ctx;

/* The update of one chunk on the calling thread (hp_exec_ctx.update). */
static void adamw_plain(const void *coef, void *const *bufs, size_t count) {
    adamw_ctx c;
    memcpy(&c, coef, sizeof c);
    hp__adamw_update(&c, bufs[0], bufs[1], bufs[2], bufs[3], (int64_t)count);
}

static hp_status adamw_chunk(void *user, void *const *bufs, size_t count) {
    hp__adamw_update(user, bufs[0], bufs[1], bufs[2], bufs[3], (int64_t)count);
    return HP_STATUS_OK;
}

typedef struct team_chunk {
    const adamw_ctx *c;
    void *bufs[4];
    size_t count;
    int done;
} team_chunk;
_Static_assert(sizeof(team_chunk) <= HP_TEAM_SHARED_DOUBLES * sizeof(double), "team scratch too small");

static hp_status adamw_chunk_team(void *user, void *const *bufs, size_t count) {
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

/* A team kernel (team.h). */
hp_status hp__cpu_adamw_stream(const hp_kernel_args *a) {
    const hp_instr *x = hp_node_instr(a->node);
    if (!x) return hp__cpu_adamw(a); /* nothing offloaded: the plain kernel */
    if (x->team_serial && hp__team_all() && omp_get_thread_num() != 0) return HP_STATUS_OK;
    const float lr = *(const float *)a->in[4], t = *(const float *)a->in[5];
    const float sc = (a->node->n_in > 6 && a->in[6]) ? *(const float *)a->in[6] : 1.0f;
    adamw_ctx c = {lr, sc, a->node->attr.f[0], a->node->attr.f[1], a->node->attr.f[2], a->node->attr.f[3], 0, 0};
    if (!(t >= 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: step must be >= 1 (counts from 1), is %g", (double)t);
    if (!isfinite(lr) || isinf(sc)) /* a NaN scale skips the step: hp__adamw_update leaves every chunk as it is */
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: lr %g and scale %g must be finite", (double)lr, (double)sc);
    c.c1 = (float)(1.0 / (1.0 - pow((double)c.b1, (double)t)));
    c.c2 = (float)(1.0 / (1.0 - pow((double)c.b2, (double)t)));
    hp_exec_ctx ctx = {.team_update = adamw_chunk, .user = &c, .update = adamw_plain, .coef = &c, .coef_bytes = sizeof c};
    if (x->team_serial || !hp__team_all()) return hp__cpu_run_instr(a, &ctx);
    team_chunk *tc = (team_chunk *)(void *)hp__team_shared();
    if (omp_get_thread_num() != 0) {
        adamw_stream_worker(tc);
        return HP_STATUS_OK;
    }
    tc->c = &c;
    tc->done = 0;
    ctx.team_update = adamw_chunk_team;
    ctx.user = tc;
    hp_status rs = hp__cpu_run_instr(a, &ctx);
    tc->done = 1;
    hp__team_sync(); /* release the other threads, also after an error */
    return rs;
}
