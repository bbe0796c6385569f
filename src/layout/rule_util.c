/* Helpers shared by the operators' sharding rules (declared in src/ops/op.h). */
#include "ops/op.h"

#include "hp/redistribute.h"

#include <string.h>

uint32_t hp__lay_dim_axes(const hp_layout *l, int d) {
    uint32_t m = 0;
    for (int k = 0; k < l->nmap[d]; k++) m |= 1u << l->map[d][k];
    return m;
}

uint32_t hp__lay_all_axes(const hp_layout *l) {
    uint32_t m = 0;
    for (int d = 0; d < l->ndim; d++) m |= hp__lay_dim_axes(l, d);
    return m;
}

void hp__lay_drop_axes(hp_layout *l, uint32_t axes) {
    for (int d = 0; d < l->ndim; d++) {
        int w = 0;
        for (int k = 0; k < l->nmap[d]; k++)
            if (!(axes & (1u << l->map[d][k]))) l->map[d][w++] = l->map[d][k];
        l->nmap[d] = w;
    }
}

void hp__lay_clear_partial(hp_layout *l) { l->partial = 0; }

void hp__lay_unshard_dim(hp_layout *l, int d) { l->nmap[d] = 0; }

void hp__lay_copy_dim(hp_layout *dst, int dd, const hp_layout *src, int sd) {
    dst->nmap[dd] = src->nmap[sd];
    memcpy(dst->map[dd], src->map[sd], sizeof src->map[sd]);
}

void hp__lay_set_partial(hp_layout *l, uint32_t axes, hp_reduce_op op) {
    l->partial |= axes;
    if (axes) l->partial_op = op;
}

hp_layout hp__lay_replicated(int ndim) {
    hp_layout l;
    hp_layout_init(&l, ndim);
    return l;
}

hp_layout hp__lay_broadcast_operand(const hp_layout *out, const hp_shape *out_shape, const hp_shape *in_shape) {
    hp_layout l = hp__lay_replicated(in_shape->ndim);
    for (int i = 0; i < in_shape->ndim; i++) {
        int o = out_shape->ndim - in_shape->ndim + i;
        if (o >= 0 && in_shape->dim[i] == out_shape->dim[o] && in_shape->dim[i] != 1) hp__lay_copy_dim(&l, i, out, o);
    }
    return l;
}

int64_t hp__lay_cost(const hp_shard_ctx *c, const hp_layout *a, const hp_layout *b, const hp_shape *shape,
                     hp_dtype dt) {
    if (hp_layout_equal(a, b)) return 0;
    hp_redistribute_plan p;
    if (hp_redistribute_plan_make(c->mesh, a, b, shape, dt, &p) != HP_STATUS_OK) return INT64_MAX / 4;
    return p.bytes;
}

hp_layout hp__lay_resolve(const hp_shard_ctx *c, const hp_layout *in, const hp_layout *hint, const hp_shape *shape) {
    if (!in->partial) return *in;
    if (hint && hint->ndim == in->ndim && !hint->partial) {
        /* the hint must keep the dims' existing splits */
        bool ok = true;
        for (int d = 0; d < in->ndim && ok; d++)
            for (int k = 0; k < in->nmap[d]; k++)
                if (k >= hint->nmap[d] || hint->map[d][k] != in->map[d][k]) ok = false;
        if (ok) return *hint;
    }
    hp_layout r = *in;
    r.partial = 0;
    for (int a = 0; a < hp_mesh_naxes(c->mesh); a++) {
        if (!(in->partial & (1u << a))) continue;
        int best = -1;
        int64_t n = hp_mesh_dim(c->mesh, a);
        for (int d = 0; d < r.ndim; d++) {
            int64_t per = shape->dim[d] / hp_layout_shards(&r, c->mesh, d);
            if (per % n == 0 && per >= n && (best < 0 || shape->dim[d] > shape->dim[best])) best = d;
        }
        if (best >= 0 && r.nmap[best] < HP_MESH_MAX_AXES) r.map[best][r.nmap[best]++] = a;
    }
    return r;
}
