/*
 * LayerNorm over the last axis (Ba et al. 2016):
 *   LAYERNORM(x (..., C), gamma (C), beta (C); eps = f[0]) -> y (..., C), mean (...), rstd (...)
 * where y = (x - mean) * rstd * gamma + beta and rstd = 1 / sqrt(var + eps) (biased variance).
 * mean and rstd are saved for LAYERNORM_BACKWARD(dy, x, gamma, mean, rstd) -> dx, dgamma, dbeta.
 */
#include "ops/op.h"

hp_tid hp_layernorm(hp_graph *g, hp_tid x, hp_tid gamma, hp_tid beta, float eps) {
    hp_attrs at = {0};
    at.f[0] = eps;
    hp_tid in[3] = {x, gamma, beta};
    return hp_graph_add_node(g, HP_OP_LAYERNORM, in, 3, &at);
}

static hp_status f32_in(const hp_graph *g, hp_tid t, const char *what) {
    if (t == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "%s is required", what);
    const hp_tensor *x = hp_graph_tensor(g, t);
    if (x->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "%s must be f32, is %s %s", what, hp_dtype_name(x->dtype),
                        hp__shape_s(&x->shape));
    return HP_STATUS_OK;
}

/* x (..., C) with C > 0 and a vector (C) named `what`. */
static hp_status check_vec(const hp_graph *g, hp_tid x, hp_tid v, const char *what) {
    HP_CHECK(f32_in(g, v, what));
    const hp_shape *xs = hp__shp(g, x), *vs = hp__shp(g, v);
    if (vs->ndim != 1 || vs->dim[0] != xs->dim[xs->ndim - 1])
        return hp_error(HP_STATUS_SHAPE, "%s must be (C) = [%lld] for x %s, is %s", what,
                        (long long)xs->dim[xs->ndim - 1], hp__shape_s(xs), hp__shape_s(vs));
    return HP_STATUS_OK;
}

static hp_status check_x(const hp_graph *g, hp_tid x) {
    HP_CHECK(f32_in(g, x, "x"));
    const hp_shape *xs = hp__shp(g, x);
    if (xs->ndim < 1 || xs->dim[xs->ndim - 1] < 1)
        return hp_error(HP_STATUS_SHAPE, "x must be (..., C) with C >= 1, is %s", hp__shape_s(xs));
    return HP_STATUS_OK;
}

static hp_shape rows_of(const hp_shape *x) {
    hp_shape r = *x;
    r.ndim--;
    return r;
}

static hp_status layernorm_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_x(g, n->in[0]));
    HP_CHECK(check_vec(g, n->in[0], n->in[1], "gamma"));
    HP_CHECK(check_vec(g, n->in[0], n->in[2], "beta"));
    if (!(n->attr.f[0] > 0.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "layernorm eps must be > 0, is %g", (double)n->attr.f[0]);
    const hp_shape *xs = hp__shp(g, n->in[0]);
    dt[0] = dt[1] = dt[2] = HP_DTYPE_F32;
    s[0] = *xs;
    s[1] = s[2] = rows_of(xs);
    return HP_STATUS_OK;
}

static hp_status layernorm_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_x(g, n->in[1]));
    HP_CHECK(f32_in(g, n->in[0], "dy"));
    const hp_shape *xs = hp__shp(g, n->in[1]), *dy = hp__shp(g, n->in[0]);
    if (!hp_shape_equal(dy, xs))
        return hp_error(HP_STATUS_SHAPE, "dy %s and x %s differ", hp__shape_s(dy), hp__shape_s(xs));
    HP_CHECK(check_vec(g, n->in[1], n->in[2], "gamma"));
    hp_shape rows = rows_of(xs);
    for (int i = 3; i < 5; i++) {
        HP_CHECK(f32_in(g, n->in[i], i == 3 ? "mean" : "rstd"));
        if (!hp_shape_equal(hp__shp(g, n->in[i]), &rows))
            return hp_error(HP_STATUS_SHAPE, "%s must be %s for x %s, is %s", i == 3 ? "mean" : "rstd",
                            hp__shape_s(&rows), hp__shape_s(xs), hp__shape_s(hp__shp(g, n->in[i])));
    }
    dt[0] = dt[1] = dt[2] = HP_DTYPE_F32;
    s[0] = *xs;
    s[1] = s[2] = *hp__shp(g, n->in[2]);
    return HP_STATUS_OK;
}

static hp_status layernorm_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (dout[1] != HP_TID_NONE || dout[2] != HP_TID_NONE || dout[0] == HP_TID_NONE)
        return hp_error(HP_STATUS_UNSUPPORTED,
                        "layernorm: gradients flow only through y, not through the saved mean/rstd outputs");
    hp_tid in[5] = {dout[0], n.in[0], n.in[1], n.out[1], n.out[2]};
    hp_graph_add_node(g, HP_OP_LAYERNORM_BACKWARD, in, 5, NULL);
    const hp_node *b = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    if (hp_graph_status(g) != HP_STATUS_OK) return hp_graph_status(g);
    for (int i = 0; i < 3; i++)
        if (need[i]) din[i] = b->out[i];
    return HP_STATUS_OK;
}

/* Forward: mean, variance, normalize, scale, shift: about 8 flops per element. */
static void layernorm_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 8.0, c); }
/* Backward: xhat, two row reductions, dx, and the dgamma/dbeta column sums: about 12 per element. */
static void layernorm_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 12.0, c);
}

/* ---- sharding rules ---- */

/* The layout rows are normalised in: x resolved, its last (normalised) dim whole. */
static hp_layout ln_rows(const hp_shard_ctx *c, const hp_layout *x, const hp_shape *s) {
    hp_layout r = hp__lay_resolve(c, x, NULL, s);
    hp__lay_unshard_dim(&r, r.ndim - 1);
    return r;
}

static hp_layout leading(const hp_layout *x) {
    hp_layout r = hp__lay_replicated(x->ndim - 1);
    for (int d = 0; d < x->ndim - 1; d++) hp__lay_copy_dim(&r, d, x, d);
    return r;
}

/* LAYERNORM: rows may be split any way (batch, sequence: sequence parallelism); the normalised
 * dim stays whole; gamma and beta replicated. */
static hp_status layernorm_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                 hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout x = ln_rows(c, &in[0], hp__shp(c->g, n->in[0]));
    req[0] = x;
    req[1] = hp__lay_replicated(1);
    req[2] = hp__lay_replicated(1);
    out[0] = x;
    out[1] = leading(&x);
    out[2] = leading(&x);
    return HP_STATUS_OK;
}

/* LAYERNORM_BACKWARD: dx in x's row layout; dgamma and dbeta are sums over rows, so split rows
 * leave pending sums. */
static hp_status layernorm_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in,
                                          hp_layout *req, hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout x = ln_rows(c, &in[1], hp__shp(c->g, n->in[1]));
    req[0] = x;
    req[1] = x;
    req[2] = hp__lay_replicated(1);
    req[3] = leading(&x);
    req[4] = leading(&x);
    out[0] = x;
    hp_layout p = hp__lay_replicated(1);
    hp__lay_set_partial(&p, hp__lay_all_axes(&x), HP_REDUCE_SUM);
    out[1] = p;
    out[2] = p;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_layernorm = {
    .name = "layernorm",
    .min_in = 3,
    .max_in = 3,
    .n_out = 3,
    .infer = layernorm_infer,
    .grad = layernorm_grad,
    .cost = layernorm_cost,
    .shard = layernorm_shard,
};
const hp_op_def hp__op_def_layernorm_backward = {
    .name = "layernorm_backward",
    .min_in = 5,
    .max_in = 5,
    .n_out = 3,
    .infer = layernorm_backward_infer,
    .cost = layernorm_backward_cost,
    .shard = layernorm_backward_shard,
};
