/* Running redistribution plans; slice intersections; the cross-mesh send/recv path. */
#include "redist_internal.h"

#include <stdlib.h>
#include <string.h>

#define TAG_CROSS 7301

/* ---------------------------------------------------------------- boxes */

static void copy_rec(char *dst, const int64_t *dstr, const char *src, const int64_t *srcr,
                     const int64_t *len, int nd, int d, size_t es) {
    if (d == nd - 1) {
        memcpy(dst, src, (size_t)len[d] * es);
        return;
    }
    for (int64_t i = 0; i < len[d]; i++)
        copy_rec(dst + (size_t)(i * dstr[d]) * es, dstr, src + (size_t)(i * srcr[d]) * es, srcr, len, nd, d + 1, es);
}

void hp_copy_box(void *dst, const hp_shape *dst_shape, const int64_t *dst_off, const void *src,
                 const hp_shape *src_shape, const int64_t *src_off, const int64_t *len, size_t es) {
    int nd = dst_shape->ndim;
    HP_ASSERT(src_shape->ndim == nd);
    if (nd == 0) {
        memcpy(dst, src, es);
        return;
    }
    for (int d = 0; d < nd; d++)
        if (len[d] <= 0) return;
    int64_t ds[HP_MAX_DIMS], ss[HP_MAX_DIMS], doff = 0, soff = 0;
    hp_shape_strides(dst_shape, ds);
    hp_shape_strides(src_shape, ss);
    for (int d = 0; d < nd; d++) {
        HP_ASSERT(dst_off[d] >= 0 && dst_off[d] + len[d] <= dst_shape->dim[d]);
        HP_ASSERT(src_off[d] >= 0 && src_off[d] + len[d] <= src_shape->dim[d]);
        doff += dst_off[d] * ds[d];
        soff += src_off[d] * ss[d];
    }
    copy_rec((char *)dst + (size_t)doff * es, ds, (const char *)src + (size_t)soff * es, ss, len, nd, 0, es);
}

static void rel(int nd, const int64_t *a, const int64_t *origin, int64_t *out) {
    for (int d = 0; d < nd; d++) out[d] = a[d] - origin[d];
}

/* ---------------------------------------------------------------- transfers */

typedef struct tlist {
    hp_transfer *t;
    int n, cap;
} tlist;

static hp_status push(tlist *l, const hp_transfer *t) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        hp_transfer *nt = realloc(l->t, (size_t)cap * sizeof *nt);
        if (!nt) return hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute: %d transfers", cap);
        l->t = nt;
        l->cap = cap;
    }
    l->t[l->n++] = *t;
    return HP_STATUS_OK;
}

hp_status hp_redistribute_transfers(const hp_mesh *sm, const hp_layout *src, const hp_mesh *dm,
                                    const hp_layout *dst, const hp_shape *shape, hp_transfer **out,
                                    int *nout) {
    *out = NULL;
    *nout = 0;
    HP_CHECK(hp_layout_validate(src, sm, shape));
    HP_CHECK(hp_layout_validate(dst, dm, shape));
    bool same = hp_mesh_equal(sm, dm);
    if (!same && src->partial)
        return hp_error(HP_STATUS_UNSUPPORTED, "cross-mesh redistribution from a partial layout: reduce on the source mesh first");
    int nd = shape->ndim, sna = hp_mesh_naxes(sm);
    int64_t k[HP_MAX_DIMS];
    int64_t ntuples = 1;
    for (int d = 0; d < nd; d++) {
        k[d] = hp_layout_shards(src, sm, d);
        ntuples *= k[d];
    }
    uint32_t used = hp_layout_sharded_axes(src);
    int nfree = 1;
    for (int a = 0; a < sna; a++)
        if (!(used & (1u << a))) nfree *= hp_mesh_dim(sm, a);
    tlist l = {0};
    hp_status st = HP_STATUS_OK;
    for (int r = 0; r < hp_mesh_size(dm); r++) {
        int64_t ds[HP_MAX_DIMS], dl[HP_MAX_DIMS];
        HP_CHECK_GOTO(hp_layout_slice_of(dst, dm, shape, r, ds, dl), st, fail);
        if (hp__numel(nd, dl) == 0) continue;
        int rcoords[HP_MESH_MAX_AXES];
        hp_mesh_coords(dm, r, rcoords);
        int self_src = same ? r : hp_mesh_index_of(sm, hp_mesh_rank(dm, r));
        int self_coords[HP_MESH_MAX_AXES];
        if (self_src >= 0) hp_mesh_coords(sm, self_src, self_coords);
        for (int64_t t = 0; t < ntuples; t++) {
            /* the shard index per dim (row-major over dims) and its slice */
            int64_t idx[HP_MAX_DIMS], ss[HP_MAX_DIMS], sl[HP_MAX_DIMS], rem = t;
            for (int d = nd - 1; d >= 0; d--) {
                idx[d] = rem % k[d];
                rem /= k[d];
                hp_block_range(shape->dim[d], k[d], idx[d], &ss[d], &sl[d]);
            }
            hp_transfer tr = {.dst_index = r};
            if (!hp_slice_intersect(nd, ss, sl, ds, dl, tr.start, tr.len) && nd > 0) continue;
            /* holder coordinates on the sharding axes */
            int hc[HP_MESH_MAX_AXES];
            for (int d = 0; d < nd; d++) {
                int64_t x = idx[d];
                for (int j = src->nmap[d] - 1; j >= 0; j--) {
                    int a = src->map[d][j];
                    hc[a] = (int)(x % hp_mesh_dim(sm, a));
                    x /= hp_mesh_dim(sm, a);
                }
            }
            bool self_holds = self_src >= 0;
            for (int a = 0; a < sna && self_holds; a++)
                if ((used & (1u << a)) && self_coords[a] != hc[a]) self_holds = false;
            if (self_holds && !same) {
                tr.src_index = self_src;
            } else {
                /* free axes: the destination's own coordinates (same mesh), else holders in turn */
                int j = r % nfree;
                for (int a = sna - 1; a >= 0; a--) {
                    if (used & (1u << a)) continue;
                    if (same) {
                        hc[a] = rcoords[a];
                    } else {
                        hc[a] = j % hp_mesh_dim(sm, a);
                        j /= hp_mesh_dim(sm, a);
                    }
                }
                tr.src_index = hp_mesh_index(sm, hc);
            }
            HP_CHECK_GOTO(push(&l, &tr), st, fail);
        }
    }
    *out = l.t;
    *nout = l.n;
    return HP_STATUS_OK;
fail:
    free(l.t);
    return st;
}

/* ---------------------------------------------------------------- local partial */

/* dst partial axes in `mask` newly applied: for sum, only coordinate 0 on each keeps the value. */
static void apply_partial(const hp_mesh *m, int me, uint32_t mask, hp_reduce_op op, void *buf, size_t bytes) {
    if (op != HP_REDUCE_SUM || !mask) return;
    int coords[HP_MESH_MAX_AXES];
    hp_mesh_coords(m, me, coords);
    for (int a = 0; a < hp_mesh_naxes(m); a++)
        if ((mask & (1u << a)) && coords[a] != 0) {
            memset(buf, 0, bytes);
            return;
        }
}


/* ---------------------------------------------------------------- steps */

typedef struct exec {
    hp_mesh *m;
    const hp_shape *shape;
    hp_dtype dt;
    size_t es;
    int me;
    const int32_t *counts; /* RAGGED_ALL_TO_ALLV: this rank's rows per group */
    int64_t n_groups;
} exec;

static hp_status exec_alltoallv(const exec *e, const hp_redist_step *s, const void *in, void *out) {
    hp_mesh *m = e->m;
    int P = hp_mesh_size(m), nd = e->shape->ndim, nt;
    size_t es = e->es;
    int64_t is[HP_MAX_DIMS], il[HP_MAX_DIMS], os[HP_MAX_DIMS], ol[HP_MAX_DIMS];
    HP_CHECK(hp_layout_slice_of(&s->before, m, e->shape, e->me, is, il));
    HP_CHECK(hp_layout_slice_of(&s->after, m, e->shape, e->me, os, ol));
    hp_shape ish = hp_shape_make(nd, il), osh = hp_shape_make(nd, ol);
    hp_comm *comm;
    int all[HP_MESH_MAX_AXES];
    for (int a = 0; a < hp_mesh_naxes(m); a++) all[a] = a;
    HP_CHECK(hp_mesh_axes_comm(m, hp_mesh_naxes(m), all, &comm));
    hp_transfer *t;
    HP_CHECK(hp_redistribute_transfers(m, &s->before, m, &s->after, e->shape, &t, &nt));
    size_t *cnt = calloc(4 * (size_t)P, sizeof *cnt);
    char *sbuf = NULL, *rbuf = NULL;
    hp_status st = HP_STATUS_OK;
    if (!cnt) {
        free(t);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute: all_to_allv counts");
    }
    size_t *sc = cnt, *sd = cnt + P, *rc = cnt + 2 * P, *rd = cnt + 3 * P;
    size_t stot = 0, rtot = 0;
    for (int i = 0; i < nt; i++) {
        size_t n = (size_t)hp__numel(nd, t[i].len);
        if (t[i].src_index == t[i].dst_index) continue;
        if (t[i].src_index == e->me) {
            sc[t[i].dst_index] += n;
            stot += n;
        }
        if (t[i].dst_index == e->me) {
            rc[t[i].src_index] += n;
            rtot += n;
        }
    }
    for (int p = 1; p < P; p++) {
        sd[p] = sd[p - 1] + sc[p - 1];
        rd[p] = rd[p - 1] + rc[p - 1];
    }
    sbuf = malloc(stot * es + 1);
    rbuf = malloc(rtot * es + 1);
    if (!sbuf || !rbuf) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute: all_to_allv buffers");
        goto done;
    }
    /* One piece per (source, destination) pair, so a pair's piece sits at its displacement. */
    int64_t off[HP_MAX_DIMS], off2[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    for (int i = 0; i < nt; i++) {
        hp_shape box = hp_shape_make(nd, t[i].len);
        if (t[i].src_index != e->me) continue;
        rel(nd, t[i].start, is, off);
        if (t[i].dst_index == e->me) {
            rel(nd, t[i].start, os, off2);
            hp_copy_box(out, &osh, off2, in, &ish, off, t[i].len, es);
        } else {
            hp_copy_box(sbuf + sd[t[i].dst_index] * es, &box, zero, in, &ish, off, t[i].len, es);
        }
    }
    HP_CHECK_GOTO(hp_comm_all_to_allv(comm, sbuf, sc, sd, rbuf, rc, rd, e->dt), st, done);
    for (int i = 0; i < nt; i++) {
        if (t[i].dst_index != e->me || t[i].src_index == e->me) continue;
        hp_shape box = hp_shape_make(nd, t[i].len);
        rel(nd, t[i].start, os, off2);
        hp_copy_box(out, &osh, off2, rbuf + rd[t[i].src_index] * es, &box, zero, t[i].len, es);
    }
done:
    free(sbuf);
    free(rbuf);
    free(cnt);
    free(t);
    return st;
}

static hp_status exec_group(const exec *e, const hp_redist_step *s, const void *in, void *out) {
    int nd = e->shape->ndim;
    size_t es = e->es;
    hp__group g;
    bool valid;
    HP_CHECK(hp__group_make(e->m, s, e->shape, e->me, &g, &valid));
    hp_status st = HP_STATUS_OK;
    char *sbuf = NULL, *rbuf = NULL;
    if (!valid) {
        st = hp_error(HP_STATUS_INTERNAL, "redistribute: %s step does not tile its target", hp_redist_kind_name(s->kind));
        goto done;
    }
    hp_comm *comm = NULL;
    if (s->kind != HP_REDIST_LOCAL_SLICE) HP_CHECK_GOTO(hp_mesh_axes_comm(e->m, 1, &s->axis, &comm), st, done);
    int n = g.n, me = g.pos;
    size_t B = (size_t)g.pad_numel;
    hp_shape pad = hp_shape_make(nd, g.pad), ish = hp_shape_make(nd, g.bl[me]), osh = hp_shape_make(nd, g.al[me]);
    int64_t zero[HP_MAX_DIMS] = {0}, off[HP_MAX_DIMS], bs[HP_MAX_DIMS], bl[HP_MAX_DIMS];
    if (s->kind == HP_REDIST_LOCAL_SLICE) {
        rel(nd, g.as[me], g.bs[me], off);
        hp_copy_box(out, &osh, zero, in, &ish, off, g.al[me], es);
        goto done;
    }
    sbuf = calloc(s->kind == HP_REDIST_ALL_GATHER ? B : B * (size_t)n, es);
    rbuf = calloc(s->kind == HP_REDIST_REDUCE_SCATTER ? B : B * (size_t)n, es);
    if ((!sbuf || !rbuf) && B) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute: %zu-element blocks", B);
        goto done;
    }
    switch (s->kind) {
    case HP_REDIST_ALL_GATHER:
        hp_copy_box(sbuf, &pad, zero, in, &ish, zero, g.bl[me], es);
        HP_CHECK_GOTO(hp_comm_all_gather(comm, sbuf, rbuf, B, e->dt), st, done);
        for (int c = 0; c < n; c++) {
            rel(nd, g.bs[c], g.as[me], off);
            hp_copy_box(out, &osh, off, rbuf + c * B * es, &pad, zero, g.bl[c], es);
        }
        break;
    case HP_REDIST_ALL_TO_ALL:
    case HP_REDIST_REDUCE_SCATTER:
        for (int p = 0; p < n; p++) {
            if (!hp_slice_intersect(nd, g.bs[me], g.bl[me], g.as[p], g.al[p], bs, bl)) continue;
            rel(nd, bs, g.bs[me], off);
            hp_copy_box(sbuf + p * B * es, &pad, zero, in, &ish, off, bl, es);
        }
        if (s->kind == HP_REDIST_REDUCE_SCATTER) {
            HP_CHECK_GOTO(hp_comm_reduce_scatter(comm, sbuf, rbuf, B, e->dt, s->before.partial_op), st, done);
            hp_copy_box(out, &osh, zero, rbuf, &pad, zero, g.al[me], es);
            break;
        }
        HP_CHECK_GOTO(hp_comm_all_to_all(comm, sbuf, rbuf, B, e->dt), st, done);
        for (int c = 0; c < n; c++) {
            if (!hp_slice_intersect(nd, g.bs[c], g.bl[c], g.as[me], g.al[me], bs, bl)) continue;
            rel(nd, bs, g.as[me], off);
            hp_copy_box(out, &osh, off, rbuf + c * B * es, &pad, zero, bl, es);
        }
        break;
    default: st = hp_error(HP_STATUS_INTERNAL, "redistribute: step kind %d is not a group step", (int)s->kind);
    }
done:
    free(sbuf);
    free(rbuf);
    hp__group_free(&g);
    return st;
}

static hp_status exec_step(const exec *e, const hp_redist_step *s, const void *in, void *out) {
    hp_shape ls;
    HP_CHECK(hp_layout_local_shape(&s->before, e->m, e->shape, e->me, &ls));
    size_t bytes = (size_t)hp_shape_numel(&ls) * e->es;
    switch (s->kind) {
    case HP_REDIST_LOCAL_PARTIAL:
        memcpy(out, in, bytes);
        apply_partial(e->m, e->me, 1u << s->axis, s->after.partial_op, out, bytes);
        return HP_STATUS_OK;
    case HP_REDIST_ALL_REDUCE: {
        hp_comm *comm;
        HP_CHECK(hp_mesh_axes_comm(e->m, 1, &s->axis, &comm));
        return hp_comm_all_reduce(comm, in, out, bytes / e->es, e->dt, s->before.partial_op);
    }
    case HP_REDIST_ALL_TO_ALLV: return exec_alltoallv(e, s, in, out);
    case HP_REDIST_RAGGED_ALL_TO_ALLV: return hp__redist_ragged(e->m, s, e->shape, e->dt, in, e->counts, e->n_groups, out);
    default: return exec_group(e, s, in, out);
    }
}

hp_status hp_redistribute_execute(const hp_redistribute_plan *p, hp_mesh *m, const void *in, void *out) {
    return hp_redistribute_execute_counts(p, m, in, NULL, 0, out);
}

hp_status hp_redistribute_execute_counts(const hp_redistribute_plan *p, hp_mesh *m, const void *in,
                                         const int32_t *counts, int64_t n_groups, void *out) {
    exec e = {.m = m, .shape = &p->shape, .dt = p->dtype, .es = hp_dtype_size(p->dtype), .me = hp_mesh_my_index(m),
              .counts = counts, .n_groups = n_groups};
    if (e.me < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "redistribute: this rank is not in the (attached) mesh");
    hp_shape ls;
    if (p->nsteps == 0) {
        HP_CHECK(hp_layout_local_shape(&p->src, m, &p->shape, e.me, &ls));
        memcpy(out, in, (size_t)hp_shape_numel(&ls) * e.es);
        return HP_STATUS_OK;
    }
    const void *cur = in;
    void *owned = NULL;
    hp_status st = HP_STATUS_OK;
    for (int k = 0; k < p->nsteps && st == HP_STATUS_OK; k++) {
        const hp_redist_step *s = &p->steps[k];
        void *next = out;
        if (k + 1 < p->nsteps) {
            HP_CHECK_GOTO(hp_layout_local_shape(&s->after, m, &p->shape, e.me, &ls), st, done);
            next = malloc((size_t)hp_shape_numel(&ls) * e.es + 1);
            if (!next) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute: step %d buffer", k);
                goto done;
            }
        }
        st = exec_step(&e, s, cur, next);
        free(owned);
        owned = next == out ? NULL : next;
        cur = next;
    }
done:
    free(owned);
    return st;
}

/* ---------------------------------------------------------------- across meshes */

hp_status hp_redistribute_cross(hp_comm *world, const hp_mesh *sm, const hp_layout *src, const void *in,
                                const hp_mesh *dm, const hp_layout *dst, void *out, const hp_shape *shape,
                                hp_dtype dt, int64_t *bytes) {
    size_t es = hp_dtype_size(dt);
    if (!es) return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid dtype %d", (int)dt);
    int W = hp_comm_size(world), wr = hp_comm_rank(world), nd = shape->ndim;
    for (int i = 0; i < hp_mesh_size(sm); i++)
        if (hp_mesh_rank(sm, i) >= W) return hp_error(HP_STATUS_INVALID_ARGUMENT, "source mesh rank %d outside a world of %d", hp_mesh_rank(sm, i), W);
    for (int i = 0; i < hp_mesh_size(dm); i++)
        if (hp_mesh_rank(dm, i) >= W) return hp_error(HP_STATUS_INVALID_ARGUMENT, "destination mesh rank %d outside a world of %d", hp_mesh_rank(dm, i), W);
    hp_transfer *t;
    int nt;
    HP_CHECK(hp_redistribute_transfers(sm, src, dm, dst, shape, &t, &nt));
    int si = hp_mesh_index_of(sm, wr), di = hp_mesh_index_of(dm, wr);
    int64_t is[HP_MAX_DIMS] = {0}, il[HP_MAX_DIMS] = {0}, os[HP_MAX_DIMS] = {0}, ol[HP_MAX_DIMS] = {0};
    hp_status st = HP_STATUS_OK;
    hp_comm_request **reqs = calloc((size_t)nt + 1, sizeof *reqs);
    char **bufs = calloc((size_t)nt + 1, sizeof *bufs);
    int64_t *recv = calloc((size_t)W, sizeof *recv);
    if (!reqs || !bufs || !recv) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "cross-mesh redistribution of %d pieces", nt);
        goto done;
    }
    if (si >= 0) HP_CHECK_GOTO(hp_layout_slice_of(src, sm, shape, si, is, il), st, done);
    if (di >= 0) HP_CHECK_GOTO(hp_layout_slice_of(dst, dm, shape, di, os, ol), st, done);
    hp_shape ish = hp_shape_make(nd, il), osh = hp_shape_make(nd, ol);
    int64_t off[HP_MAX_DIMS], off2[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    for (int i = 0; i < nt; i++) {
        int sr = hp_mesh_rank(sm, t[i].src_index), dr = hp_mesh_rank(dm, t[i].dst_index);
        size_t n = (size_t)hp__numel(nd, t[i].len);
        hp_shape box = hp_shape_make(nd, t[i].len);
        if (sr != dr) recv[dr] += (int64_t)(n * es);
        if (sr == wr && dr == wr) {
            rel(nd, t[i].start, is, off);
            rel(nd, t[i].start, os, off2);
            hp_copy_box(out, &osh, off2, in, &ish, off, t[i].len, es);
        } else if (sr == wr || dr == wr) {
            bufs[i] = malloc(n * es + 1);
            if (!bufs[i]) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "cross-mesh piece of %zu elements", n);
                break;
            }
            if (sr == wr) {
                rel(nd, t[i].start, is, off);
                hp_copy_box(bufs[i], &box, zero, in, &ish, off, t[i].len, es);
                st = hp_comm_isend(world, bufs[i], n, dt, dr, TAG_CROSS, &reqs[i]);
            } else {
                st = hp_comm_irecv(world, bufs[i], n, dt, sr, TAG_CROSS, &reqs[i]);
            }
            if (st != HP_STATUS_OK) break;
        }
    }
    hp_status wst = hp_comm_wait_all(nt, reqs);
    if (st == HP_STATUS_OK) st = wst;
    if (st != HP_STATUS_OK) goto done;
    for (int i = 0; i < nt; i++) {
        int sr = hp_mesh_rank(sm, t[i].src_index), dr = hp_mesh_rank(dm, t[i].dst_index);
        if (dr != wr || sr == wr) continue;
        hp_shape box = hp_shape_make(nd, t[i].len);
        rel(nd, t[i].start, os, off2);
        hp_copy_box(out, &osh, off2, bufs[i], &box, zero, t[i].len, es);
    }
    if (di >= 0) apply_partial(dm, di, dst->partial, dst->partial_op, out, (size_t)hp__numel(nd, ol) * es);
    if (bytes) {
        *bytes = 0;
        for (int r = 0; r < W; r++)
            if (recv[r] > *bytes) *bytes = recv[r];
    }
done:
    if (bufs)
        for (int i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    free(reqs);
    free(recv);
    free(t);
    return st;
}

hp_status hp_redistribute_tensor(hp_mesh *m, const hp_layout *src, const hp_layout *dst, const hp_shape *shape,
                                 hp_dtype dt, const void *in, void *out, int64_t *bytes_received) {
    hp_redistribute_plan plan;
    HP_CHECK(hp_redistribute_plan_make(m, src, dst, shape, dt, &plan));
    HP_CHECK(hp_redistribute_execute(&plan, m, in, out));
    if (bytes_received) *bytes_received = plan.bytes;
    return HP_STATUS_OK;
}
