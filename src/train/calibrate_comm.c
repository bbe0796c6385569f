/*
 * The calibration probe's communicator part (hp/calibrate.h): for every group size that divides the
 * world, every group of that size at once (as the groups of one mesh axis run their collectives),
 * each operation timed at several sizes (kept) and fitted to alpha + beta * bytes, where bytes is what the
 * busiest rank receives under the redistribution planner's convention (hp_redistribute_min_bytes):
 * all-reduce 2 (p-1)/p x, all-gather (p-1) x of a block x, reduce-scatter and all-to-all (p-1)/p x.
 */
#include "train/calibrate_internal.h"

#include <math.h>
#include <stdlib.h>

/* Elements of the whole tensor (the all-reduced buffer, the gathered result, the scattered input). */
static const size_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1048576};
#define N_SIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define MAX_ELEMS 1048576

/* One operation of `kind` over c on a tensor of E elements; *recv gets the bytes the fit uses. */
static hp_status comm_op(hp_comm *c, hp_xfer_kind kind, size_t E, float *a, float *b, double *recv) {
    int p = hp_comm_size(c), r = hp_comm_rank(c);
    size_t blk = E / (size_t)p ? E / (size_t)p : 1;
    switch (kind) {
    case HP_XFER_ALL_REDUCE:
        *recv = 2.0 * (p - 1) / p * (double)E * 4.0;
        return hp_comm_all_reduce(c, a, b, E, HP_DTYPE_F32, HP_REDUCE_SUM);
    case HP_XFER_ALL_GATHER:
        *recv = (double)(p - 1) * (double)blk * 4.0;
        return hp_comm_all_gather(c, a, b, blk, HP_DTYPE_F32);
    case HP_XFER_REDUCE_SCATTER:
        *recv = (double)(p - 1) * (double)blk * 4.0;
        return hp_comm_reduce_scatter(c, a, b, blk, HP_DTYPE_F32, HP_REDUCE_SUM);
    case HP_XFER_ALL_TO_ALL:
        *recv = (double)(p - 1) * (double)blk * 4.0;
        return hp_comm_all_to_all(c, a, b, blk, HP_DTYPE_F32);
    case HP_XFER_SEND_RECV:
        *recv = (double)E * 4.0;
        if (r % 2 == 0) return r + 1 < p ? hp_comm_send(c, a, E, HP_DTYPE_F32, r + 1, 7) : HP_STATUS_OK;
        return hp_comm_recv(c, b, E, HP_DTYPE_F32, r - 1, 7);
    default: return hp_error(HP_STATUS_INVALID_ARGUMENT, "calibrate: communicator operation %d", (int)kind);
    }
}

/* Seconds of one operation at E elements: the median of reps timed batches, the slowest rank's. */
static hp_status time_op(const hp__probe *pr, hp_comm *c, hp_xfer_kind kind, size_t E, float *a, float *b,
                         double *seconds, double *recv) {
    double t0, trial;
    HP_CHECK(hp__calib_barrier(pr));
    t0 = hp_now_seconds();
    HP_CHECK(comm_op(c, kind, E, a, b, recv));
    trial = hp_now_seconds() - t0;
    HP_CHECK(hp__calib_reduce(pr, &trial, 1, HP_REDUCE_MAX));
    int k = trial > 0 ? (int)ceil(2e-3 / trial) : 200;
    k = k < 1 ? 1 : k > 200 ? 200 : k;
    int reps = pr->o->reps;
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: %d runs", reps);
    hp_status st = HP_STATUS_OK;
    for (int rep = 0; rep < reps && st == HP_STATUS_OK; rep++) {
        st = hp__calib_barrier(pr);
        t0 = hp_now_seconds();
        for (int i = 0; i < k && st == HP_STATUS_OK; i++) st = comm_op(c, kind, E, a, b, recv);
        t[rep] = (hp_now_seconds() - t0) / k;
    }
    if (st == HP_STATUS_OK) {
        *seconds = hp__calib_median(t, reps);
        if (pr->o->stat == HP_CALIBRATE_STAT_MIN) *seconds = t[0]; /* sorted by the median */
        st = hp__calib_reduce(pr, seconds, 1, HP_REDUCE_MAX);
    }
    free(t);
    return st;
}

static hp_status fit_group(const hp__probe *pr, hp_comm *c, int p, float *a, float *b, hp_calibration *out) {
    for (int kind = 0; kind < HP_XFER_KIND_COUNT; kind++) {
        if (kind == HP_XFER_SEND_RECV && p != 2) continue; /* point-to-point: pairs only */
        hp__calib_say(pr, "%s on groups of %d ranks", hp_xfer_kind_name((hp_xfer_kind)kind), p);
        double bytes[N_SIZES], secs[N_SIZES];
        for (int s = 0; s < N_SIZES; s++)
            HP_CHECK(time_op(pr, c, (hp_xfer_kind)kind, sizes[s], a, b, &secs[s], &bytes[s]));
        hp_comm_fit f = {.kind = (hp_xfer_kind)kind, .group = p, .n_points = N_SIZES};
        HP_CHECK(hp_comm_fit_alpha_beta(bytes, secs, N_SIZES, &f.alpha, &f.beta, &f.max_rel_err));
        for (int s = 0; s < N_SIZES && f.n_kept < HP_CAL_COMM_POINTS; s++)
            if (f.n_kept == 0 || bytes[s] > f.bytes[f.n_kept - 1]) {
                f.bytes[f.n_kept] = bytes[s];
                f.seconds[f.n_kept++] = secs[s];
            }
        HP_CHECK(hp_calibration_set_comm(out, &f));
    }
    return HP_STATUS_OK;
}

hp_status hp__calibrate_comm(const hp__probe *pr, hp_calibration *out) {
    int n = pr->size, rank = hp_comm_rank(pr->world);
    float *a = calloc(MAX_ELEMS, sizeof *a), *b = calloc(MAX_ELEMS, sizeof *b);
    hp_status st = a && b ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: communication buffers");
    for (int p = 2; p <= n && st == HP_STATUS_OK; p++) {
        if (n % p) continue;
        hp_comm *c = NULL;
        st = hp_comm_split(pr->world, rank / p, rank, &c); /* the groups of p consecutive ranks */
        if (st == HP_STATUS_OK) st = fit_group(pr, c, p, a, b, out);
        hp_comm_free(c);
    }
    free(a);
    free(b);
    return st;
}
