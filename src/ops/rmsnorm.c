/*
 * RMSNorm over the last axis (Zhang & Sennrich 2019; Llama, Hugging Face's LlamaRMSNorm):
 *   RMSNORM(x (..., C), weight (C); eps = f[0]) -> y (..., C), rstd (...)
 * where y = x * rstd * weight and rstd = 1 / sqrt(mean(x^2) + eps). No mean is subtracted and there
 * is no bias. rstd is saved for RMSNORM_BACKWARD(dy, x, weight, rstd) -> dx, dweight:
 *   with xhat = x rstd and g = dy weight:  dx = rstd (g - xhat mean(g xhat)),  dweight = sum_rows dy xhat.
 */
#include "ops/op.h"

hp_tid hp_rmsnorm(hp_graph *g, hp_tid x, hp_tid weight, float eps) {
    hp_attrs at = {0};
    at.f[0] = eps;
    hp_tid in[2] = {x, weight};
    return hp_graph_add_node(g, HP_OP_RMSNORM, in, 2, &at);
}

static hp_status f32_in(const hp_graph *g, hp_tid t, const char *what) {
    if (t == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "rmsnorm: %s is required", what);
    const hp_tensor *x = hp_graph_tensor(g, t);
    if (x->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "rmsnorm: %s must be f32, is %s %s", what, hp_dtype_name(x->dtype),
                        hp__shape_s(&x->shape));
    return HP_STATUS_OK;
}

/* x (..., C) with C >= 1 and weight (C). */
static hp_status check_xw(const hp_graph *g, hp_tid x, hp_tid w) {
    HP_CHECK(f32_in(g, x, "x"));
    HP_CHECK(f32_in(g, w, "weight"));
    const hp_shape *xs = hp__shp(g, x), *ws = hp__shp(g, w);
    if (xs->ndim < 1 || xs->dim[xs->ndim - 1] < 1)
        return hp_error(HP_STATUS_SHAPE, "rmsnorm: x must be (..., C) with C >= 1, is %s", hp__shape_s(xs));
    if (ws->ndim != 1 || ws->dim[0] != xs->dim[xs->ndim - 1])
        return hp_error(HP_STATUS_SHAPE, "rmsnorm: weight must be (C) = [%lld] for x %s, is %s",
                        (long long)xs->dim[xs->ndim - 1], hp__shape_s(xs), hp__shape_s(ws));
    return HP_STATUS_OK;
}

static hp_shape rows_of(const hp_shape *x) {
    hp_shape r = *x;
    r.ndim--;
    return r;
}

static hp_status rmsnorm_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_xw(g, n->in[0], n->in[1]));
    if (!(n->attr.f[0] > 0.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "rmsnorm eps must be > 0, is %g", (double)n->attr.f[0]);
    const hp_shape *xs = hp__shp(g, n->in[0]);
    dt[0] = dt[1] = HP_DTYPE_F32;
    s[0] = *xs;
    s[1] = rows_of(xs);
    return HP_STATUS_OK;
}

static hp_status rmsnorm_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(f32_in(g, n->in[0], "dy"));
    HP_CHECK(check_xw(g, n->in[1], n->in[2]));
    HP_CHECK(f32_in(g, n->in[3], "rstd"));
    const hp_shape *xs = hp__shp(g, n->in[1]), *dy = hp__shp(g, n->in[0]);
    if (!hp_shape_equal(dy, xs))
        return hp_error(HP_STATUS_SHAPE, "rmsnorm backward: dy %s and x %s differ", hp__shape_s(dy), hp__shape_s(xs));
    hp_shape rows = rows_of(xs);
    if (!hp_shape_equal(hp__shp(g, n->in[3]), &rows))
        return hp_error(HP_STATUS_SHAPE, "rmsnorm backward: rstd must be %s for x %s, is %s", hp__shape_s(&rows),
                        hp__shape_s(xs), hp__shape_s(hp__shp(g, n->in[3])));
    dt[0] = dt[1] = HP_DTYPE_F32;
    s[0] = *xs;
    s[1] = *hp__shp(g, n->in[2]);
    return HP_STATUS_OK;
}

static hp_status rmsnorm_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (dout[1] != HP_TID_NONE || dout[0] == HP_TID_NONE)
        return hp_error(HP_STATUS_UNSUPPORTED, "rmsnorm: gradients flow only through y, not through the saved rstd");
    if (!need[0] && !need[1]) return HP_STATUS_OK;
    hp_tid in[4] = {dout[0], n.in[0], n.in[1], n.out[1]};
    hp_graph_add_node(g, HP_OP_RMSNORM_BACKWARD, in, 4, &n.attr);
    if (hp_graph_status(g) != HP_STATUS_OK) return hp_graph_status(g);
    const hp_node *b = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    for (int i = 0; i < 2; i++)
        if (need[i]) din[i] = b->out[i];
    return HP_STATUS_OK;
}

/* Forward: square, sum, scale twice: about 4 flops per element. Backward: about 7. */
static void rmsnorm_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 4.0, c); }
static void rmsnorm_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 7.0, c);
}

/* ---- sharding rules (LayerNorm's: rows split any way, the normalised dim whole) ---- */

static hp_layout rms_rows(const hp_shard_ctx *c, const hp_layout *x, const hp_shape *s) {
    hp_layout r = hp__lay_resolve(c, x, NULL, s);
    hp__lay_unshard_dim(&r, r.ndim - 1);
    return r;
}

static hp_layout leading(const hp_layout *x) {
    hp_layout r = hp__lay_replicated(x->ndim - 1);
    for (int d = 0; d < x->ndim - 1; d++) hp__lay_copy_dim(&r, d, x, d);
    return r;
}

static hp_status rmsnorm_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                               hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout x = rms_rows(c, &in[0], hp__shp(c->g, n->in[0]));
    req[0] = x;
    req[1] = hp__lay_replicated(1);
    out[0] = x;
    out[1] = leading(&x);
    return HP_STATUS_OK;
}

/* RMSNORM_BACKWARD(dy, x, weight, rstd): dx in x's rows; dweight a sum over rows, pending where
 * rows are split. */
static hp_status rmsnorm_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                        hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout x = rms_rows(c, &in[1], hp__shp(c->g, n->in[1]));
    req[0] = x;
    req[1] = x;
    req[2] = hp__lay_replicated(1);
    req[3] = leading(&x);
    out[0] = x;
    hp_layout p = hp__lay_replicated(1);
    hp__lay_set_partial(&p, hp__lay_all_axes(&x), HP_REDUCE_SUM);
    out[1] = p;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_rmsnorm = {
    .name = "rmsnorm", .min_in = 2, .max_in = 2, .n_out = 2, .infer = rmsnorm_infer,
    .grad = rmsnorm_grad, .cost = rmsnorm_cost, .shard = rmsnorm_shard,
};
const hp_op_def hp__op_def_rmsnorm_backward = {
    .name = "rmsnorm_backward", .min_in = 4, .max_in = 4, .n_out = 2, .infer = rmsnorm_backward_infer,
    .cost = rmsnorm_backward_cost, .shard = rmsnorm_backward_shard,
};
