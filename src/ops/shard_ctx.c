/*
 * Helpers for the operators' sharding rules that read the sharding context (declared in
 * src/ops/op.h): layout-change costs through the context's cost callback, and the resolution of
 * pending reductions. The pure layout algebra is in src/layout/rule_util.c.
 */
#include "ops/op.h"

int64_t hp__lay_cost(const hp_shard_ctx *c, const hp_layout *a, const hp_layout *b, const hp_shape *shape,
                     hp_dtype dt) {
    if (hp_layout_equal(a, b)) return 0;
    if (!c->cost) return 1; /* no cost model: every change costs the same */
    return c->cost(c->cost_user, a, b, shape, dt);
}

int64_t hp__lay_cost_in(const hp_shard_ctx *c, const hp_node *n, int k, const hp_layout *from, const hp_layout *to,
                        bool any_phase) {
    if (hp_layout_equal(from, to)) return 0;
    if (c->has_copy && c->has_copy(c->copy_user, n->in[k], to, any_phase)) return 0;
    return hp__lay_cost(c, from, to, hp__shp(c->g, n->in[k]), hp_graph_tensor(c->g, n->in[k])->dtype);
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
