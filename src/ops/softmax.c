/*
 * SOFTMAX over the last axis, y = exp(x - max) / sum(exp(x - max)), and
 * SOFTMAX_BACKWARD(dy, y) -> dx = y * (dy - sum(dy * y)) (per row).
 */
#include "ops/op.h"

hp_tid hp_softmax(hp_graph *g, hp_tid x) { return hp_graph_add_node(g, HP_OP_SOFTMAX, &x, 1, NULL); }

static hp_status rows_in(const hp_graph *g, hp_tid t, const char *what) {
    if (t == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "%s is required", what);
    const hp_tensor *x = hp_graph_tensor(g, t);
    if (x->dtype != HP_DTYPE_F32 || x->shape.ndim < 1 || x->shape.dim[x->shape.ndim - 1] < 1)
        return hp_error(HP_STATUS_SHAPE, "%s must be f32 (..., N) with N >= 1, is %s %s", what,
                        hp_dtype_name(x->dtype), hp__shape_s(&x->shape));
    return HP_STATUS_OK;
}

static hp_status softmax_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(rows_in(g, n->in[0], "x"));
    dt[0] = HP_DTYPE_F32;
    s[0] = *hp__shp(g, n->in[0]);
    return HP_STATUS_OK;
}

static hp_status softmax_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(rows_in(g, n->in[0], "dy"));
    HP_CHECK(rows_in(g, n->in[1], "y"));
    const hp_shape *dy = hp__shp(g, n->in[0]), *y = hp__shp(g, n->in[1]);
    if (!hp_shape_equal(dy, y)) return hp_error(HP_STATUS_SHAPE, "dy %s and y %s differ", hp__shape_s(dy), hp__shape_s(y));
    dt[0] = HP_DTYPE_F32;
    s[0] = *y;
    return HP_STATUS_OK;
}

static hp_status softmax_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_tid y = hp_graph_node(g, node)->out[0];
    if (need[0]) {
        hp_tid in[2] = {dout[0], y};
        din[0] = hp_graph_add_node(g, HP_OP_SOFTMAX_BACKWARD, in, 2, NULL);
    }
    return hp_graph_status(g);
}

/* max, subtract, exp (~10), sum, scale. */
static void softmax_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 14.0, c); }
static void softmax_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 4.0, c);
}

/* ---- sharding rules ---- */

/* SOFTMAX and its backward: rows split any way, the softmax dim whole, pending sums resolved. */
static hp_status softmax_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                               hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    int k = n->op == HP_OP_SOFTMAX ? 0 : 1; /* the forward input, or y for the backward */
    hp_layout x = hp__lay_resolve(c, &in[k], NULL, hp__shp(c->g, n->in[k]));
    hp__lay_unshard_dim(&x, x.ndim - 1);
    for (int i = 0; i < n->n_in; i++) req[i] = x;
    out[0] = x;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_softmax = {
    .name = "softmax",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = softmax_infer,
    .grad = softmax_grad,
    .cost = softmax_cost,
    .shard = softmax_shard,
};
const hp_op_def hp__op_def_softmax_backward = {
    .name = "softmax_backward",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = softmax_backward_infer,
    .cost = softmax_backward_cost,
    .shard = softmax_shard,
};
