/*
 * Internal: what the MoE operator files (src/ops/moe_*.c) share: input checks and the token-row
 * layout of their sharding rules (see hp/moe.h, "Sharding rules").
 */
#ifndef HP_OPS_MOE_RULE_H
#define HP_OPS_MOE_RULE_H

#include "hp/moe.h"
#include "ops/op.h"

/* HP_STATUS_SHAPE unless tensor t is present, of dtype dt and 2-D; `what` names it. */
static inline hp_status hp__moe_mat(const hp_graph *g, hp_tid t, hp_dtype dt, const char *what) {
    if (t == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "%s is required", what);
    const hp_tensor *x = hp_graph_tensor(g, t);
    if (x->dtype != dt || x->shape.ndim != 2)
        return hp_error(HP_STATUS_SHAPE, "%s must be a 2-D %s tensor, is %s %s", what, hp_dtype_name(dt),
                        hp_dtype_name(x->dtype), hp__shape_s(&x->shape));
    return HP_STATUS_OK;
}

/* The mesh axes splitting the token rows (dim 0) of input `k` of node n, partial sums resolved
 * first; 0 when the rows are whole. */
static inline uint32_t hp__moe_row_axes(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, int k) {
    hp_layout r = hp__lay_resolve(c, &in[k], NULL, hp__shp(c->g, n->in[k]));
    return hp__lay_dim_axes(&r, 0);
}

/* A layout of `ndim` dims whose dim 0 is split like dim 0 of `like` (the token rows), the rest whole. */
static inline hp_layout hp__moe_rows_like(const hp_layout *like, int ndim) {
    hp_layout r = hp__lay_replicated(ndim);
    hp__lay_copy_dim(&r, 0, like, 0);
    return r;
}

/* The token-row layout of `ndim` dims: dim 0 of input k's layout (resolved), other dims whole. */
static inline hp_layout hp__moe_rows(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, int k, int ndim) {
    hp_layout r = hp__lay_resolve(c, &in[k], NULL, hp__shp(c->g, n->in[k]));
    return hp__moe_rows_like(&r, ndim);
}

/* Whether `rows` rows split by layout l's dim 0 are split evenly (every shard the same length), so
 * that a tensor of rows*k rows has the shards k times as long. */
static inline bool hp__moe_even(const hp_shard_ctx *c, const hp_layout *l, int64_t rows) {
    int64_t parts = 1;
    for (int i = 0; i < l->nmap[0]; i++) parts *= hp_mesh_dim(c->mesh, l->map[0][i]);
    return rows % parts == 0;
}

/* Counts (E) of tokens split over `axes`: each rank's own loads, a pending sum over those axes
 * (replicated when axes is 0). */
static inline hp_layout hp__moe_counts_layout(uint32_t axes) {
    hp_layout l = hp__lay_replicated(1);
    if (axes) hp__lay_set_partial(&l, axes, HP_REDUCE_SUM);
    return l;
}

#endif
