/*
 * CROSS_ENTROPY(logits (..., V) f32, targets (...) i32) -> scalar mean over the N = numel(targets)
 * rows of -log softmax(logits)[target]. Its gradient is
 * CROSS_ENTROPY_BACKWARD(dloss (scalar), logits, targets) -> dlogits = (softmax - onehot) dloss / N,
 * which recomputes the softmax from the logits, so nothing (N, V)-sized is saved besides them.
 * attr i[0]: the N to divide by (0: the rows of this node). A rank holding some of the rows of a
 * batch divides by the global row count, so the ranks' losses are a pending sum of the mean.
 */
#include "ops/op.h"

hp_tid hp_cross_entropy(hp_graph *g, hp_tid logits, hp_tid targets) {
    hp_tid in[2] = {logits, targets};
    return hp_graph_add_node(g, HP_OP_CROSS_ENTROPY, in, 2, NULL);
}

static hp_status check_lt(const hp_graph *g, hp_tid logits, hp_tid targets) {
    if (logits == HP_TID_NONE || targets == HP_TID_NONE)
        return hp_error(HP_STATUS_SHAPE, "logits and targets are required");
    const hp_tensor *l = hp_graph_tensor(g, logits), *t = hp_graph_tensor(g, targets);
    if (l->dtype != HP_DTYPE_F32 || l->shape.ndim < 1 || l->shape.dim[l->shape.ndim - 1] < 1)
        return hp_error(HP_STATUS_SHAPE, "logits must be f32 (..., V), are %s %s", hp_dtype_name(l->dtype),
                        hp__shape_s(&l->shape));
    if (t->dtype != HP_DTYPE_I32)
        return hp_error(HP_STATUS_SHAPE, "targets must be i32, are %s %s", hp_dtype_name(t->dtype),
                        hp__shape_s(&t->shape));
    hp_shape rows = l->shape;
    rows.ndim--;
    if (!hp_shape_equal(&rows, &t->shape))
        return hp_error(HP_STATUS_SHAPE, "targets %s must match the leading dims of logits %s, i.e. be %s",
                        hp__shape_s(&t->shape), hp__shape_s(&l->shape), hp__shape_s(&rows));
    return HP_STATUS_OK;
}

static hp_status xent_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_lt(g, n->in[0], n->in[1]));
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE_SCALAR;
    return HP_STATUS_OK;
}

static hp_status xent_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_lt(g, n->in[1], n->in[2]));
    if (n->in[0] == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "dloss is required");
    const hp_tensor *d = hp_graph_tensor(g, n->in[0]);
    if (d->dtype != HP_DTYPE_F32 || hp_shape_numel(&d->shape) != 1)
        return hp_error(HP_STATUS_SHAPE, "dloss must be an f32 scalar, is %s %s", hp_dtype_name(d->dtype),
                        hp__shape_s(&d->shape));
    dt[0] = HP_DTYPE_F32;
    s[0] = *hp__shp(g, n->in[1]);
    return HP_STATUS_OK;
}

static hp_status xent_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) {
        hp_tid in[3] = {dout[0], n.in[0], n.in[1]};
        din[0] = hp_graph_add_node(g, HP_OP_CROSS_ENTROPY_BACKWARD, in, 3, NULL);
    }
    return hp_graph_status(g); /* targets are integers: no gradient */
}

/* Per logit: max, subtract, exp (~10 flops), add. */
static void xent_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    c->flops = 13.0 * (double)hp_shape_numel(hp__shp(g, n->in[0]));
}

/* Statistics pass as forward, then exp, scale and subtract per logit. */
static void xent_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double e = (double)hp_shape_numel(hp__shp(g, n->in[1]));
    c->flops = 26.0 * e;
    c->bytes_read += e * 4.0; /* the logits are read twice */
}

/* One double per row for the per-row losses, summed in row order (deterministic). */
static size_t xent_workspace(const hp_graph *g, const hp_node *n) {
    return (size_t)hp_shape_numel(hp__shp(g, n->in[1])) * sizeof(double);
}

/* ---- sharding rules ---- */

/* Logits rows split any way, the vocabulary dim whole; targets follow the rows. The loss (a mean)
 * becomes a pending sum over the axes splitting the rows, each rank dividing by the global count. */
static hp_status xent_rows(const hp_shard_ctx *c, const hp_node *n, int li, const hp_layout *in, hp_layout *req,
                           hp_attrs *local, hp_layout *rows_axes_layout) {
    const hp_shape *ls = hp__shp(c->g, n->in[li]);
    hp_layout l = hp__lay_resolve(c, &in[li], NULL, ls);
    hp__lay_unshard_dim(&l, l.ndim - 1);
    hp_layout t = hp__lay_replicated(l.ndim - 1);
    for (int d = 0; d < l.ndim - 1; d++) hp__lay_copy_dim(&t, d, &l, d);
    req[li] = l;
    req[li + 1] = t;
    *rows_axes_layout = l;
    local->i[0] = hp_shape_numel(ls) / ls->dim[ls->ndim - 1];
    return HP_STATUS_OK;
}

static hp_status xent_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                            hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout l;
    HP_CHECK(xent_rows(c, n, 0, in, req, local, &l));
    hp_layout o = hp__lay_replicated(0);
    hp__lay_set_partial(&o, hp__lay_all_axes(&l), HP_REDUCE_SUM);
    out[0] = o;
    return HP_STATUS_OK;
}

static hp_status xent_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                     hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout l;
    HP_CHECK(xent_rows(c, n, 1, in, req, local, &l));
    req[0] = hp__lay_replicated(hp__shp(c->g, n->in[0])->ndim);
    out[0] = l;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_cross_entropy = {
    .name = "cross_entropy",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = xent_infer,
    .grad = xent_grad,
    .cost = xent_cost,
    .workspace = xent_workspace,
    .shard = xent_shard,
};
const hp_op_def hp__op_def_cross_entropy_backward = {
    .name = "cross_entropy_backward",
    .min_in = 3,
    .max_in = 3,
    .n_out = 1,
    .infer = xent_backward_infer,
    .cost = xent_backward_cost,
    .shard = xent_backward_shard,
};
