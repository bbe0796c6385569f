/*
 * MoE combine (see hp/moe.h): the expert outputs un-permuted, weighted by the gates and summed.
 *
 *   MOE_COMBINE(ys (N*k, C), pos (N, k) i32 [, gates (N, k)]) -> y (N, C),
 *       y[n] = sum_j gates[n, j] ys[pos[n, j]]                                  (gates 1 when absent)
 *   MOE_COMBINE_BACKWARD(dy (N, C), pos [, gates] [, ys]) -> dys (N*k, C), dgates (N, k),
 *       dys[pos[n, j]] = gates[n, j] dy[n],  dgates[n, j] = dy[n] . ys[pos[n, j]] (0 without ys)
 *
 * pos is a bijection of the (token, slot) pairs onto the N*k rows (MOE_DISPATCH makes it), so every
 * row of dys is written exactly once and every y[n] is a sum in slot order: deterministic.
 */
#include "ops/moe_rule.h"

hp_tid hp_moe_combine(hp_graph *g, hp_tid ys, hp_tid pos, hp_tid gates) {
    hp_tid in[3] = {ys, pos, gates};
    return hp_graph_add_node(g, HP_OP_MOE_COMBINE, in, 3, NULL);
}

/* pos (N, k) i32, gates absent or f32 (N, k), rows (N*k, C) f32 named `what`. */
static hp_status check(const hp_graph *g, hp_tid rows, hp_tid pos, hp_tid gates, const char *what) {
    HP_CHECK(hp__moe_mat(g, pos, HP_DTYPE_I32, "combine pos"));
    const hp_shape *ps = hp__shp(g, pos);
    if (gates != HP_TID_NONE) {
        HP_CHECK(hp__moe_mat(g, gates, HP_DTYPE_F32, "combine gates"));
        if (!hp_shape_equal(hp__shp(g, gates), ps))
            return hp_error(HP_STATUS_SHAPE, "moe_combine: gates %s must be the shape of pos %s",
                            hp__shape_s(hp__shp(g, gates)), hp__shape_s(ps));
    }
    if (rows != HP_TID_NONE) {
        HP_CHECK(hp__moe_mat(g, rows, HP_DTYPE_F32, what));
        if (hp__shp(g, rows)->dim[0] != ps->dim[0] * ps->dim[1])
            return hp_error(HP_STATUS_SHAPE, "moe_combine: %s %s must have N*k = %lld rows for pos %s", what,
                            hp__shape_s(hp__shp(g, rows)), (long long)(ps->dim[0] * ps->dim[1]), hp__shape_s(ps));
    }
    return HP_STATUS_OK;
}

static hp_status combine_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(hp__moe_mat(g, n->in[0], HP_DTYPE_F32, "combine ys"));
    HP_CHECK(check(g, n->in[0], n->in[1], n->in[2], "ys"));
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE(hp__shp(g, n->in[1])->dim[0], hp__shp(g, n->in[0])->dim[1]);
    return HP_STATUS_OK;
}

static hp_status combine_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(hp__moe_mat(g, n->in[0], HP_DTYPE_F32, "combine dy"));
    HP_CHECK(check(g, n->in[3], n->in[1], n->in[2], "ys"));
    const hp_shape *dy = hp__shp(g, n->in[0]), *ps = hp__shp(g, n->in[1]);
    if (dy->dim[0] != ps->dim[0] || (n->in[3] != HP_TID_NONE && hp__shp(g, n->in[3])->dim[1] != dy->dim[1]))
        return hp_error(HP_STATUS_SHAPE, "moe_combine_backward: dy %s does not fit pos %s", hp__shape_s(dy),
                        hp__shape_s(ps));
    dt[0] = dt[1] = HP_DTYPE_F32;
    s[0] = HP_SHAPE(ps->dim[0] * ps->dim[1], dy->dim[1]);
    s[1] = *ps;
    return HP_STATUS_OK;
}

static hp_status combine_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (!need[0] && !need[2]) return HP_STATUS_OK;
    bool dg = need[2] && n.in[2] != HP_TID_NONE;
    hp_tid in[4] = {dout[0], n.in[1], n.in[2], dg ? n.in[0] : HP_TID_NONE};
    hp_graph_add_node(g, HP_OP_MOE_COMBINE_BACKWARD, in, 4, NULL);
    if (hp_graph_status(g) != HP_STATUS_OK) return hp_graph_status(g);
    const hp_node *b = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    if (need[0]) din[0] = b->out[0];
    if (dg) din[2] = b->out[1];
    return HP_STATUS_OK;
}

/* 2 flops (multiply, add) per element of ys; the backward as much again for dgates. */
static void combine_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    c->flops = 2.0 * (double)hp_shape_numel(hp__shp(g, n->in[0]));
}
static void combine_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    c->flops = (n->in[3] != HP_TID_NONE ? 3.0 : 1.0) * (double)hp_shape_numel(hp__shp(g, n->out[0]));
}

/* The axes of a pending sum over axes that do not split the rows, which the rule may keep: combine
 * is linear in ys (and its backward's dgates in ys), so a TP-EP expert output pending over tp stays
 * pending through it and is reduced on the (N, C) result instead of the (N*k, C) rows. */
static uint32_t keepable_sum(const hp_layout *l, const hp_layout *rows) {
    if (!l->partial || l->partial_op != HP_REDUCE_SUM || (l->partial & hp__lay_dim_axes(rows, 0))) return 0;
    return l->partial;
}

/* Sharding rule of both: the token rows split like pos's (dispatch made it, each rank holding its
 * own tokens' rows), evenly, the channels whole; a pending sum of ys (keepable_sum) stays pending
 * in y (forward) and dgates (backward, where dy is whole). */
static hp_status combine_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                               hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout rows = hp__moe_rows(c, n, in, 1, 2);
    if (!hp__moe_even(c, &rows, hp__shp(c->g, n->in[1])->dim[0])) rows = hp__lay_replicated(2);
    for (int i = 0; i < n->n_in; i++) req[i] = rows;
    for (int j = 0; j < n->n_out; j++) out[j] = rows;
    const bool fwd = n->op == HP_OP_MOE_COMBINE;
    const int ys = fwd ? 0 : 3;
    uint32_t keep = n->in[ys] != HP_TID_NONE ? keepable_sum(&in[ys], &rows) : 0;
    if (!fwd && in[0].partial) keep = 0; /* dgates = dy . ys: one of the two may be pending */
    if (keep) {
        hp__lay_set_partial(&req[ys], keep, HP_REDUCE_SUM);
        hp__lay_set_partial(&out[fwd ? 0 : 1], keep, HP_REDUCE_SUM);
    }
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_moe_combine = {
    .name = "moe_combine", .min_in = 2, .max_in = 3, .n_out = 1, .infer = combine_infer, .grad = combine_grad,
    .cost = combine_cost, .shard = combine_shard,
};
const hp_op_def hp__op_def_moe_combine_backward = {
    .name = "moe_combine_backward", .min_in = 4, .max_in = 4, .n_out = 2, .infer = combine_backward_infer,
    .cost = combine_backward_cost, .shard = combine_shard,
    .saved_inputs = 1u << 3, /* ys: expert parallelism's forward all-to-all-v back is reused */
};
