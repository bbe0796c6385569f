/*
 * MoE dispatch (see hp/moe.h): the token rows permuted by expert.
 *
 *   MOE_DISPATCH(x (N, C), idx (N, k) i32; E = i[0]) -> xs (N*k, C), counts (E) i32, pos (N, k) i32
 *
 * A stable counting sort of the (token, slot) pairs by expert id: pos[n, j] is the row of xs that
 * holds x[n] for its j-th expert; the rows of expert e are counts[e] consecutive rows starting at
 * sum_{e' < e} counts[e'], in token order (dropless: nothing is cut at a capacity). The gradient is
 * the un-permutation summed over slots, MOE_COMBINE(dxs, pos) with no gates.
 */
#include "ops/moe_rule.h"

hp_tid hp_moe_dispatch(hp_graph *g, hp_tid x, hp_tid idx, int experts) {
    hp_attrs at = {0};
    at.i[0] = experts;
    hp_tid in[2] = {x, idx};
    return hp_graph_add_node(g, HP_OP_MOE_DISPATCH, in, 2, &at);
}

static hp_status dispatch_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(hp__moe_mat(g, n->in[0], HP_DTYPE_F32, "dispatch x"));
    HP_CHECK(hp__moe_mat(g, n->in[1], HP_DTYPE_I32, "dispatch idx"));
    const hp_shape *xs = hp__shp(g, n->in[0]), *is = hp__shp(g, n->in[1]);
    if (is->dim[0] != xs->dim[0])
        return hp_error(HP_STATUS_SHAPE, "moe_dispatch: idx %s must have the rows of x %s", hp__shape_s(is),
                        hp__shape_s(xs));
    if (n->attr.i[0] < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_dispatch: experts %lld must be >= 1", (long long)n->attr.i[0]);
    dt[0] = HP_DTYPE_F32;
    dt[1] = dt[2] = HP_DTYPE_I32;
    s[0] = HP_SHAPE(xs->dim[0] * is->dim[1], xs->dim[1]);
    s[1] = HP_SHAPE(n->attr.i[0]);
    s[2] = *is;
    return HP_STATUS_OK;
}

static hp_status dispatch_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0] && dout[0] != HP_TID_NONE) din[0] = hp_moe_combine(g, dout[0], n.out[2], HP_TID_NONE);
    return hp_graph_status(g);
}

/* No arithmetic: the sort reads idx twice and every row of x is copied k times. */
static void dispatch_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 0.0, c); }

/* The kernel's write cursor per expert: E int64. */
static size_t dispatch_workspace(const hp_graph *g, const hp_node *n) {
    (void)g;
    return (size_t)n->attr.i[0] * sizeof(int64_t);
}

/*
 * Sharding rule: each rank sorts its own tokens (rows of x split over axes A, the channels whole).
 * xs and pos follow the token rows (the global xs is then the ranks' sorted blocks one after the
 * other); counts is a pending sum over A. The split must be even (N a multiple of the shards), so
 * that xs's N*k rows split the same way; otherwise everything is replicated.
 */
static hp_status dispatch_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout rows = hp__moe_rows(c, n, in, 0, 2);
    if (!hp__moe_even(c, &rows, hp__shp(c->g, n->in[0])->dim[0])) rows = hp__lay_replicated(2);
    req[0] = req[1] = rows;
    out[0] = out[2] = rows;
    out[1] = hp__moe_counts_layout(hp__lay_dim_axes(&rows, 0));
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_moe_dispatch = {
    .name = "moe_dispatch", .min_in = 2, .max_in = 2, .n_out = 3, .infer = dispatch_infer, .grad = dispatch_grad,
    .cost = dispatch_cost, .workspace = dispatch_workspace, .shard = dispatch_shard,
};
