/*
 * The redistribution planner: Dijkstra over layouts. Edges are one-axis steps (local slice,
 * partial, all-gather, all-to-all, reduce-scatter, all-reduce) plus one general all-to-allv to the
 * target tensor_map; the cost is the bytes the busiest rank receives, then a step weight.
 */
#include "redist_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 4096

int64_t hp_redistribute_min_bytes(hp_redist_kind kind, int64_t x, int n) {
    switch (kind) {
    case HP_REDIST_LOCAL_SLICE:
    case HP_REDIST_LOCAL_PARTIAL: return 0;
    case HP_REDIST_ALL_GATHER: return (int64_t)(n - 1) * x;
    case HP_REDIST_ALL_TO_ALL:
    case HP_REDIST_REDUCE_SCATTER: return (int64_t)(n - 1) * x / n;
    case HP_REDIST_ALL_REDUCE: return 2 * (int64_t)(n - 1) * x / n;
    default: return -1;
    }
}

int64_t hp__numel(int ndim, const int64_t *len) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= len[d];
    return n;
}

/* ---------------------------------------------------------------- group geometry */

void hp__group_free(hp__group *g) {
    free(g->members);
    free(g->bs);
    g->members = NULL;
    g->bs = NULL;
}

static bool box_inside(int nd, const int64_t *is, const int64_t *il, const int64_t *os, const int64_t *ol) {
    for (int d = 0; d < nd; d++) {
        if (il[d] == 0) return true; /* an empty box is inside anything */
    }
    for (int d = 0; d < nd; d++)
        if (is[d] < os[d] || is[d] + il[d] > os[d] + ol[d]) return false;
    return true;
}

hp_status hp__group_make(const hp_mesh *m, const hp_redist_step *s, const hp_shape *shape, int me,
                         hp__group *g, bool *valid) {
    memset(g, 0, sizeof *g);
    int a = s->axis, nd = shape->ndim;
    int n = hp_mesh_dim(m, a);
    g->n = n;
    g->members = malloc((size_t)n * sizeof *g->members);
    g->bs = malloc((size_t)n * 4 * sizeof *g->bs);
    if (!g->members || !g->bs) {
        hp__group_free(g);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute: group of %d", n);
    }
    g->bl = g->bs + n;
    g->as = g->bs + 2 * n;
    g->al = g->bs + 3 * n;
    int coords[HP_MESH_MAX_AXES];
    hp_mesh_coords(m, me, coords);
    g->pos = coords[a];
    for (int c = 0; c < n; c++) {
        coords[a] = c;
        g->members[c] = hp_mesh_index(m, coords);
        HP_CHECK(hp_layout_slice_of(&s->before, m, shape, g->members[c], g->bs[c], g->bl[c]));
        HP_CHECK(hp_layout_slice_of(&s->after, m, shape, g->members[c], g->as[c], g->al[c]));
    }
    *valid = true;
    for (int d = 0; d < nd; d++) g->pad[d] = 0;
    int64_t is[HP_MAX_DIMS], il[HP_MAX_DIMS];
    for (int p = 0; p < n && *valid; p++) {
        int64_t covered = 0;
        for (int c = 0; c < n; c++) {
            bool hit = hp_slice_intersect(nd, g->bs[c], g->bl[c], g->as[p], g->al[p], is, il);
            switch (s->kind) {
            case HP_REDIST_ALL_GATHER:
                /* every member's block lies inside every member's target */
                if (!box_inside(nd, g->bs[c], g->bl[c], g->as[p], g->al[p])) *valid = false;
                break;
            case HP_REDIST_REDUCE_SCATTER:
            case HP_REDIST_LOCAL_SLICE:
                if (!box_inside(nd, g->as[p], g->al[p], g->bs[c], g->bl[c])) *valid = false;
                break;
            default: break;
            }
            if (hit) {
                covered += hp__numel(nd, il);
                for (int d = 0; d < nd; d++)
                    if (il[d] > g->pad[d]) g->pad[d] = il[d];
            }
        }
        int64_t need = hp__numel(nd, g->al[p]);
        if (s->kind == HP_REDIST_ALL_GATHER || s->kind == HP_REDIST_ALL_TO_ALL) {
            if (covered != need) *valid = false;
        }
    }
    g->pad_numel = hp__numel(nd, g->pad);
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- step evaluation */

typedef struct ctx {
    const hp_mesh *m;
    const hp_shape *shape;
    size_t es;
} ctx;

/* Cost of step s (bytes the busiest rank receives); *valid false when not possible. */
static hp_status eval_step(const ctx *c, hp_redist_step *s, bool *valid) {
    const hp_mesh *m = c->m;
    int P = hp_mesh_size(m), nd = c->shape->ndim;
    int64_t worst = 0;
    *valid = true;
    switch (s->kind) {
    case HP_REDIST_LOCAL_PARTIAL: break;
    case HP_REDIST_ALL_REDUCE: {
        int n = hp_mesh_dim(m, s->axis);
        for (int i = 0; i < P; i++) {
            hp_shape ls;
            HP_CHECK(hp_layout_local_shape(&s->before, m, c->shape, i, &ls));
            int64_t b = hp_redistribute_min_bytes(HP_REDIST_ALL_REDUCE, hp_shape_numel(&ls) * (int64_t)c->es, n);
            if (b > worst) worst = b;
        }
        break;
    }
    case HP_REDIST_ALL_TO_ALLV: {
        hp_transfer *t;
        int nt;
        HP_CHECK(hp_redistribute_transfers(m, &s->before, m, &s->after, c->shape, &t, &nt));
        int64_t *recv = calloc((size_t)P, sizeof *recv);
        if (!recv) {
            free(t);
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute planner");
        }
        for (int k = 0; k < nt; k++)
            if (t[k].src_index != t[k].dst_index) recv[t[k].dst_index] += hp__numel(nd, t[k].len) * (int64_t)c->es;
        for (int i = 0; i < P; i++)
            if (recv[i] > worst) worst = recv[i];
        free(recv);
        free(t);
        break;
    }
    default: {
        int n = hp_mesh_dim(m, s->axis);
        for (int i = 0; i < P && *valid; i++) {
            int coords[HP_MESH_MAX_AXES];
            hp_mesh_coords(m, i, coords);
            if (coords[s->axis] != 0) continue; /* one rank per group: the group sees all */
            hp__group g;
            HP_CHECK(hp__group_make(m, s, c->shape, i, &g, valid));
            int64_t b = s->kind == HP_REDIST_LOCAL_SLICE ? 0 : (int64_t)(n - 1) * g.pad_numel * (int64_t)c->es;
            if (b > worst) worst = b;
            hp__group_free(&g);
        }
        break;
    }
    }
    s->bytes = worst;
    return HP_STATUS_OK;
}

static int step_weight(hp_redist_kind k) {
    switch (k) {
    case HP_REDIST_LOCAL_SLICE:
    case HP_REDIST_LOCAL_PARTIAL: return 1;
    case HP_REDIST_ALL_TO_ALLV: return 4;
    default: return 2;
    }
}

/* ---------------------------------------------------------------- search */

typedef struct node {
    hp_layout l;
    int64_t bytes;
    int weight;
    int prev;
    bool done;
    hp_redist_step step; /* the step from prev */
} node;

typedef struct search {
    ctx c;
    const hp_layout *dst;
    node *nodes;
    int n;
} search;

static void remove_axis(hp_layout *l, int d, int k) {
    for (int j = k; j + 1 < l->nmap[d]; j++) l->map[d][j] = l->map[d][j + 1];
    l->nmap[d]--;
}

static hp_status relax(search *s, int from, hp_redist_kind kind, int axis, int dfrom, int dto,
                       const hp_layout *after) {
    hp_redist_step st = {.kind = kind, .axis = axis, .dim_from = dfrom, .dim_to = dto,
                         .before = s->nodes[from].l, .after = *after};
    int idx = -1;
    for (int i = 0; i < s->n; i++)
        if (hp_layout_equal(&s->nodes[i].l, after)) {
            idx = i;
            break;
        }
    if (idx >= 0 && s->nodes[idx].done) return HP_STATUS_OK;
    bool valid;
    HP_CHECK(eval_step(&s->c, &st, &valid));
    if (!valid) return HP_STATUS_OK;
    int64_t bytes = s->nodes[from].bytes + st.bytes;
    int weight = s->nodes[from].weight + step_weight(kind);
    if (idx < 0) {
        if (s->n >= MAX_NODES) return hp_error(HP_STATUS_INTERNAL, "redistribute planner exceeded %d layouts", MAX_NODES);
        idx = s->n++;
        s->nodes[idx] = (node){.l = *after, .bytes = INT64_MAX, .prev = -1};
    }
    node *nd = &s->nodes[idx];
    if (bytes < nd->bytes || (bytes == nd->bytes && weight < nd->weight)) {
        nd->bytes = bytes;
        nd->weight = weight;
        nd->prev = from;
        nd->step = st;
    }
    return HP_STATUS_OK;
}

static hp_status expand(search *s, int from) {
    const hp_mesh *m = s->c.m;
    const hp_layout *dst = s->dst;
    hp_layout L = s->nodes[from].l;
    int na = hp_mesh_naxes(m), nd = L.ndim;
    uint32_t used = hp_layout_sharded_axes(&L);
    bool op_differs = L.partial && dst->partial && L.partial_op != dst->partial_op;
    for (int a = 0; a < na; a++) {
        uint32_t bit = 1u << a;
        if ((L.partial & bit) && (!(dst->partial & bit) || op_differs)) {
            hp_layout t = L;
            t.partial &= ~bit;
            HP_CHECK(relax(s, from, HP_REDIST_ALL_REDUCE, a, -1, -1, &t));
            for (int d = 0; d < nd; d++) {
                t = L;
                t.partial &= ~bit;
                t.map[d][t.nmap[d]++] = a;
                HP_CHECK(relax(s, from, HP_REDIST_REDUCE_SCATTER, a, -1, d, &t));
            }
        }
        if (!(L.partial & bit) && !(used & bit)) {
            for (int d = 0; d < nd; d++) {
                hp_layout t = L;
                t.map[d][t.nmap[d]++] = a;
                HP_CHECK(relax(s, from, HP_REDIST_LOCAL_SLICE, a, -1, d, &t));
            }
            if ((dst->partial & bit) && (!L.partial || L.partial_op == dst->partial_op)) {
                hp_layout t = L;
                t.partial |= bit;
                t.partial_op = dst->partial_op;
                HP_CHECK(relax(s, from, HP_REDIST_LOCAL_PARTIAL, a, -1, -1, &t));
            }
        }
    }
    for (int d = 0; d < nd; d++) {
        if (L.nmap[d] == 0) continue;
        int a = L.map[d][L.nmap[d] - 1];
        hp_layout t = L;
        remove_axis(&t, d, t.nmap[d] - 1);
        HP_CHECK(relax(s, from, HP_REDIST_ALL_GATHER, a, d, -1, &t));
        for (int j = 0; j < nd; j++) {
            if (j == d) continue;
            hp_layout u = t;
            u.map[j][u.nmap[j]++] = a;
            HP_CHECK(relax(s, from, HP_REDIST_ALL_TO_ALL, a, d, j, &u));
        }
    }
    /* General exchange to the target tensor_map, keeping the current partial axes. */
    if ((L.partial & ~dst->partial) == 0 && (!L.partial || L.partial_op == dst->partial_op)) {
        hp_layout t = *dst;
        t.partial = L.partial;
        t.partial_op = L.partial ? L.partial_op : dst->partial_op;
        if (!hp_layout_equal(&t, &L)) HP_CHECK(relax(s, from, HP_REDIST_ALL_TO_ALLV, -1, -1, -1, &t));
    }
    return HP_STATUS_OK;
}

/*
 * To or from a ragged split (hp_layout.ragged; MoE expert parallelism): one RAGGED_ALL_TO_ALLV over
 * the ragged axis between the ragged layout and the same tensor_map as a block split (partial axes
 * kept: the exchange is linear), with the ordinary plan before it (to a ragged layout) or after it
 * (from one), e.g. TP-EP's pending sum over tp all-reduced after the rows are back. The step's bytes
 * are the balanced case's, (n-1)/n of the block (the real number depends on the step's routing).
 * Two different ragged layouts: HP_STATUS_UNSUPPORTED.
 */
static hp_status plan_ragged(const hp_mesh *m, hp_redistribute_plan *out) {
    const hp_layout src = out->src, dst = out->dst;
    char la[256], lb[256];
    if (hp_layout_equal(&src, &dst)) return HP_STATUS_OK;
    if (src.ragged && dst.ragged)
        return hp_error(HP_STATUS_UNSUPPORTED, "redistribute: %s -> %s: between two ragged splits",
                        hp_layout_format(&src, m, la, sizeof la), hp_layout_format(&dst, m, lb, sizeof lb));
    const hp_layout *r = src.ragged ? &src : &dst;
    hp_layout even = *r;
    even.ragged = 0;
    int axis = 0;
    while (!(r->ragged & (1u << axis))) axis++;
    int n = hp_mesh_dim(m, axis);
    hp_shape ls;
    HP_CHECK(hp_layout_local_shape(&even, m, &out->shape, 0, &ls));
    int64_t block = hp_shape_numel(&ls) * (int64_t)hp_dtype_size(out->dtype);
    hp_redist_step rag = {.kind = HP_REDIST_RAGGED_ALL_TO_ALLV, .axis = axis, .dim_from = 0, .dim_to = 0,
                          .before = src.ragged ? src : even, .after = src.ragged ? even : dst,
                          .bytes = block * (n - 1) / n};
    hp_redistribute_plan rest;
    hp_status st = src.ragged ? hp_redistribute_plan_make(m, &even, &dst, &out->shape, out->dtype, &rest)
                              : hp_redistribute_plan_make(m, &src, &even, &out->shape, out->dtype, &rest);
    if (st != HP_STATUS_OK)
        return hp_error_prefix(st, "redistribute: %s -> %s through the block split: ",
                               hp_layout_format(&src, m, la, sizeof la), hp_layout_format(&dst, m, lb, sizeof lb));
    if (rest.nsteps + 1 > HP_REDIST_MAX_STEPS)
        return hp_error(HP_STATUS_INTERNAL, "redistribute: a ragged plan of %d steps", rest.nsteps + 1);
    out->nsteps = 0;
    if (src.ragged) out->steps[out->nsteps++] = rag;
    for (int k = 0; k < rest.nsteps; k++) out->steps[out->nsteps++] = rest.steps[k];
    if (!src.ragged) out->steps[out->nsteps++] = rag;
    out->bytes = rest.bytes + rag.bytes;
    return HP_STATUS_OK;
}

hp_status hp_redistribute_plan_make(const hp_mesh *m, const hp_layout *src, const hp_layout *dst,
                                    const hp_shape *shape, hp_dtype dt, hp_redistribute_plan *out) {
    HP_CHECK(hp_layout_validate(src, m, shape));
    HP_CHECK(hp_layout_validate(dst, m, shape));
    if (hp_dtype_size(dt) == 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid dtype %d", (int)dt);
    memset(out, 0, sizeof *out);
    out->shape = *shape;
    out->dtype = dt;
    out->src = *src;
    out->dst = *dst;
    if (src->ragged || dst->ragged) return plan_ragged(m, out);
    hp_layout dnorm = *dst;
    if (!dnorm.partial) dnorm.partial_op = HP_REDUCE_SUM;
    search s = {.c = {m, shape, hp_dtype_size(dt)}, .dst = &dnorm};
    s.nodes = malloc(MAX_NODES * sizeof *s.nodes);
    if (!s.nodes) return hp_error(HP_STATUS_OUT_OF_MEMORY, "redistribute planner");
    s.nodes[0] = (node){.l = *src, .bytes = 0, .weight = 0, .prev = -1};
    if (!s.nodes[0].l.partial) s.nodes[0].l.partial_op = HP_REDUCE_SUM;
    s.n = 1;
    hp_status st = HP_STATUS_OK;
    int goal = -1;
    for (;;) {
        int best = -1;
        for (int i = 0; i < s.n; i++) {
            node *nd = &s.nodes[i];
            if (nd->done || nd->bytes == INT64_MAX) continue;
            if (best < 0 || nd->bytes < s.nodes[best].bytes ||
                (nd->bytes == s.nodes[best].bytes && nd->weight < s.nodes[best].weight))
                best = i;
        }
        if (best < 0) break;
        s.nodes[best].done = true;
        if (hp_layout_equal(&s.nodes[best].l, &dnorm)) {
            goal = best;
            break;
        }
        HP_CHECK_GOTO(expand(&s, best), st, done);
    }
    if (goal < 0) {
        st = hp_error(HP_STATUS_INTERNAL, "redistribute planner found no path");
        goto done;
    }
    int chain[HP_REDIST_MAX_STEPS + 1], n = 0;
    for (int i = goal; s.nodes[i].prev >= 0; i = s.nodes[i].prev) {
        if (n == HP_REDIST_MAX_STEPS) {
            st = hp_error(HP_STATUS_INTERNAL, "redistribute plan longer than %d steps", HP_REDIST_MAX_STEPS);
            goto done;
        }
        chain[n++] = i;
    }
    for (int k = 0; k < n; k++) {
        out->steps[k] = s.nodes[chain[n - 1 - k]].step;
        out->bytes += out->steps[k].bytes;
    }
    out->nsteps = n;
done:
    free(s.nodes);
    return st;
}

char *hp_redistribute_plan_str(const hp_redistribute_plan *p, const hp_mesh *m, char *buf, size_t n) {
    size_t k = 0;
    char a[256], b[256];
    if (n) buf[0] = 0;
    for (int i = 0; i < p->nsteps; i++) {
        const hp_redist_step *s = &p->steps[i];
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s", hp_redist_kind_name(s->kind));
        if (s->axis >= 0) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, " %s", hp_mesh_axis_name(m, s->axis));
        if (s->dim_from >= 0) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, " from dim %d", s->dim_from);
        if (s->dim_to >= 0) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, " to dim %d", s->dim_to);
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, ": %s -> %s (%lld bytes)\n",
                              hp_layout_format(&s->before, m, a, sizeof a),
                              hp_layout_format(&s->after, m, b, sizeof b), (long long)s->bytes);
    }
    return buf;
}
