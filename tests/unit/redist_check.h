/*
 * Exhaustive redistribution checks shared by tests/unit/test_layout.c (simulated ranks) and
 * tests/mpi/test_redistribute.c (MPI ranks). Everything is checked locally on each rank, so the
 * same code runs under any communicator; a mismatch is recorded and the loop goes on (so every
 * rank keeps calling the same collectives) and reported at the end.
 */
#ifndef HP_TEST_REDIST_CHECK_H
#define HP_TEST_REDIST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hp/redistribute.h"

/* The global tensor: small integers, so sums and averages are exact in f32. */
static float rc_global(int64_t flat) { return (float)((flat * 7) % 13 - 6); }

static int64_t rc_flat(const hp_shape *s, const int64_t *idx) {
    int64_t f = 0;
    for (int d = 0; d < s->ndim; d++) f = f * s->dim[d] + idx[d];
    return f;
}

/* Visits every element of the box [start, start+len): fn(global flat index, local flat index). */
#define RC_FOR_BOX(shape, start, len, GFLAT, LFLAT, BODY)                                          \
    do {                                                                                           \
        int64_t n_ = 1, idx_[HP_MAX_DIMS];                                                         \
        for (int d_ = 0; d_ < (shape)->ndim; d_++) n_ *= (len)[d_];                                \
        for (int64_t LFLAT = 0; LFLAT < n_; LFLAT++) {                                             \
            int64_t r_ = LFLAT;                                                                    \
            for (int d_ = (shape)->ndim - 1; d_ >= 0; d_--) {                                      \
                idx_[d_] = (start)[d_] + r_ % (len)[d_];                                           \
                r_ /= (len)[d_];                                                                   \
            }                                                                                      \
            int64_t GFLAT = rc_flat(shape, idx_);                                                  \
            BODY;                                                                                  \
        }                                                                                          \
    } while (0)

/* The position q of mesh index i among the Q ranks of its partial group. */
static int rc_partial_pos(const hp_mesh *m, const hp_layout *l, int i, int *Q) {
    int c[HP_MESH_MAX_AXES], q = 0;
    *Q = 1;
    hp_mesh_coords(m, i, c);
    for (int a = 0; a < hp_mesh_naxes(m); a++)
        if (l->partial & (1u << a)) {
            q = q * hp_mesh_dim(m, a) + c[a];
            *Q *= hp_mesh_dim(m, a);
        }
    return q;
}

/* A partial piece q of Q whose reduction under op gives g exactly. */
static float rc_piece(float g, int q, int Q, hp_reduce_op op) {
    switch (op) {
    case HP_REDUCE_SUM: return q == 0 ? g - (float)(Q - 1) : 1.0f;
    case HP_REDUCE_AVG: return g + (float)(2 * q - (Q - 1));
    case HP_REDUCE_MAX: return q == 0 ? g : g - 1.0f - (float)q;
    default: return g + (float)q;
    }
}

/* Fills this rank's block (mesh index i) of the global tensor under l; returns malloc'ed data. */
static float *rc_make_local(const hp_mesh *m, const hp_layout *l, const hp_shape *shape, int i, int64_t *numel) {
    int64_t s[HP_MAX_DIMS], n[HP_MAX_DIMS];
    hp_layout_slice_of(l, m, shape, i, s, n);
    int Q, q = rc_partial_pos(m, l, i, &Q);
    int64_t tot = 1;
    for (int d = 0; d < shape->ndim; d++) tot *= n[d];
    float *x = malloc((size_t)tot * sizeof *x + 4);
    RC_FOR_BOX(shape, s, n, g, k, x[k] = l->partial ? rc_piece(rc_global(g), q, Q, l->partial_op) : rc_global(g));
    *numel = tot;
    return x;
}

/* Compares a non-partial block with the global tensor; 0 when equal, else the local index + 1. */
static int64_t rc_compare(const hp_mesh *m, const hp_layout *l, const hp_shape *shape, int i, const float *x,
                          float *got, float *want) {
    int64_t s[HP_MAX_DIMS], n[HP_MAX_DIMS], bad = 0;
    hp_layout_slice_of(l, m, shape, i, s, n);
    RC_FOR_BOX(shape, s, n, g, k, if (!bad && x[k] != rc_global(g)) { bad = k + 1; *got = x[k]; *want = rc_global(g); });
    return bad;
}

/* All layouts of an ndim tensor on mesh m: every axis unused, partial or in some dim, in every
 * order; partial layouts once per op in ops[]. Returns the count written (at most cap). */
static int rc_enumerate(const hp_mesh *m, int ndim, const hp_reduce_op *ops, int nops, hp_layout *out, int cap) {
    int na = hp_mesh_naxes(m), base = ndim + 2, total = 1, count = 0;
    for (int a = 0; a < na; a++) total *= base;
    for (int code = 0; code < total; code++) {
        int asg[HP_MESH_MAX_AXES], c = code;
        uint32_t partial = 0;
        for (int a = 0; a < na; a++) {
            asg[a] = c % base - 2; /* -2 partial, -1 unused, else dim */
            c /= base;
            if (asg[a] == -2) partial |= 1u << a;
        }
        /* per dim the axes, then every permutation product (at most 3 axes per dim here) */
        int lists[HP_MAX_DIMS][HP_MESH_MAX_AXES], ln[HP_MAX_DIMS] = {0}, nperm[HP_MAX_DIMS], prod = 1;
        for (int a = 0; a < na; a++)
            if (asg[a] >= 0) lists[asg[a]][ln[asg[a]]++] = a;
        for (int d = 0; d < ndim; d++) {
            nperm[d] = 1;
            for (int k = 2; k <= ln[d]; k++) nperm[d] *= k;
            prod *= nperm[d];
        }
        for (int p = 0; p < prod; p++) {
            hp_layout l;
            hp_layout_init(&l, ndim);
            int rem = p;
            for (int d = 0; d < ndim; d++) {
                int pi = rem % nperm[d], pool[HP_MESH_MAX_AXES], pn = ln[d];
                rem /= nperm[d];
                memcpy(pool, lists[d], sizeof pool);
                for (int k = 0; k < ln[d]; k++) { /* factorial-number-system permutation */
                    int f = 1;
                    for (int j = 2; j <= pn - 1; j++) f *= j;
                    int pick = pi / f;
                    pi %= f;
                    l.map[d][k] = pool[pick];
                    for (int j = pick; j + 1 < pn; j++) pool[j] = pool[j + 1];
                    pn--;
                }
                l.nmap[d] = ln[d];
            }
            l.partial = partial;
            for (int o = 0; o < (partial ? nops : 1); o++) {
                l.partial_op = partial ? ops[o] : HP_REDUCE_SUM;
                if (count < cap) out[count] = l;
                count++;
            }
        }
    }
    return count < cap ? count : cap;
}

typedef struct rc_stats {
    int pairs, failures;
    int64_t bytes;
    char first[512];
} rc_stats;

/* src -> dst on the attached mesh m, checked locally. Collective over the mesh. */
static hp_status rc_check_pair(hp_mesh *m, const hp_shape *shape, const hp_layout *src, const hp_layout *dst,
                               rc_stats *stats) {
    int me = hp_mesh_my_index(m);
    hp_redistribute_plan p, back;
    HP_CHECK(hp_redistribute_plan_make(m, src, dst, shape, HP_DTYPE_F32, &p));
    int64_t nin, nout;
    float *in = rc_make_local(m, src, shape, me, &nin);
    hp_shape os;
    HP_CHECK(hp_layout_local_shape(dst, m, shape, me, &os));
    nout = hp_shape_numel(&os);
    float *out = malloc((size_t)nout * sizeof *out + 4);
    hp_status st = hp_redistribute_execute(&p, m, in, out);
    const hp_layout *check_layout = dst;
    hp_layout repl;
    float *full = NULL;
    if (st == HP_STATUS_OK && dst->partial) {
        hp_layout_init(&repl, dst->ndim);
        for (int d = 0; d < dst->ndim; d++) {
            repl.nmap[d] = dst->nmap[d];
            memcpy(repl.map[d], dst->map[d], sizeof repl.map[d]);
        }
        st = hp_redistribute_plan_make(m, dst, &repl, shape, HP_DTYPE_F32, &back);
        hp_shape rs;
        if (st == HP_STATUS_OK) st = hp_layout_local_shape(&repl, m, shape, me, &rs);
        if (st == HP_STATUS_OK) {
            full = malloc((size_t)hp_shape_numel(&rs) * sizeof *full + 4);
            st = hp_redistribute_execute(&back, m, out, full);
        }
        check_layout = &repl;
    }
    if (st == HP_STATUS_OK) {
        float got = 0, want = 0;
        int64_t bad = rc_compare(m, check_layout, shape, me, full ? full : out, &got, &want);
        stats->pairs++;
        stats->bytes += p.bytes;
        if (bad && stats->failures++ == 0) {
            char a[128], b[128], ps[2048];
            snprintf(stats->first, sizeof stats->first, "%s -> %s: mesh index %d, local element %lld: got %g, want %g; plan:\n%s",
                     hp_layout_format(src, m, a, sizeof a), hp_layout_format(dst, m, b, sizeof b), me,
                     (long long)(bad - 1), got, want, hp_redistribute_plan_str(&p, m, ps, sizeof ps));
        }
    }
    free(in);
    free(out);
    free(full);
    return st;
}

/* Every pair (i, j) with (i * nl + j) % stride == offset. */
static hp_status rc_check_all(hp_mesh *m, const hp_shape *shape, const hp_layout *ls, int nl, int stride,
                              rc_stats *stats) {
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < nl; j++) {
            if ((i * nl + j) % stride) continue;
            hp_status st = rc_check_pair(m, shape, &ls[i], &ls[j], stats);
            if (st != HP_STATUS_OK) {
                char a[128], b[128];
                return hp_error_prefix(st, "%s -> %s: ", hp_layout_format(&ls[i], m, a, sizeof a),
                                       hp_layout_format(&ls[j], m, b, sizeof b));
            }
        }
    return HP_STATUS_OK;
}

/* Cross-mesh: src (non-partial) on sm -> dst on dm over world; checked locally on dm ranks. */
static hp_status rc_check_cross(hp_comm *world, const hp_mesh *sm, const hp_layout *src, const hp_mesh *dm,
                                const hp_layout *dst, const hp_shape *shape, rc_stats *stats) {
    int wr = hp_comm_rank(world), si = hp_mesh_index_of(sm, wr), di = hp_mesh_index_of(dm, wr);
    int64_t nin = 0;
    float *in = si >= 0 ? rc_make_local(sm, src, shape, si, &nin) : NULL;
    float *out = NULL;
    int64_t nout = 0;
    if (di >= 0) {
        hp_shape os;
        HP_CHECK(hp_layout_local_shape(dst, dm, shape, di, &os));
        nout = hp_shape_numel(&os);
        out = malloc((size_t)nout * sizeof *out + 4);
    }
    int64_t bytes = 0;
    hp_status st = hp_redistribute_cross(world, sm, src, in, dm, dst, out, shape, HP_DTYPE_F32, &bytes);
    if (st == HP_STATUS_OK) {
        stats->pairs++;
        stats->bytes += bytes;
    }
    if (st == HP_STATUS_OK && di >= 0) {
        int Q, q = rc_partial_pos(dm, dst, di, &Q);
        bool zero = dst->partial && dst->partial_op == HP_REDUCE_SUM && q != 0;
        int64_t s[HP_MAX_DIMS], n[HP_MAX_DIMS], bad = 0;
        hp_layout_slice_of(dst, dm, shape, di, s, n);
        float got = 0, want = 0;
        RC_FOR_BOX(shape, s, n, g, k, {
            float w = zero ? 0.0f : rc_global(g);
            if (!bad && out[k] != w) { bad = k + 1; got = out[k]; want = w; }
        });
        if (bad && stats->failures++ == 0) {
            char a[128], b[128];
            snprintf(stats->first, sizeof stats->first, "cross %s -> %s: world rank %d, local element %lld: got %g, want %g",
                     hp_layout_format(src, sm, a, sizeof a), hp_layout_format(dst, dm, b, sizeof b), wr,
                     (long long)(bad - 1), got, want);
        }
    }
    free(in);
    free(out);
    return st;
}

#endif
