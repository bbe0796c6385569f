/*
 * The MoE router (see hp/moe.h): MOE_ROUTE, its backward, and the sigmoid_bias router's bias update.
 *
 *   MOE_ROUTE(logits (N, E) [, bias (E)]; k = i[0], router = i[1]) -> gates (N, k), idx (N, k) i32,
 *                                                                      probs (N, E)
 *   MOE_ROUTE_BACKWARD(dgates | none, dprobs | none, logits, idx; router = i[1]) -> dlogits (N, E)
 *   MOE_BIAS_UPDATE(bias (E), counts (E) i32; rate = f[0]), in place on bias
 *
 * Gradients (per token; sel = the k selected experts):
 *   softmax: gates = softmax over the selected logits (= the top-k probs renormalised), so
 *     dlogit_m = g_m (dg_m - sum_j g_j dg_j) for m in sel, 0 elsewhere; probs = softmax(logits) adds
 *     p_m (dp_m - sum_e p_e dp_e).
 *   sigmoid_bias: s = sigmoid(logits), gates g_m = s_m / S, S = sum_sel s: ds_m = (dg_m - sum_j g_j dg_j) / S
 *     for m in sel; probs p = s / sum_e s adds ds_m = (dp_m - sum_e p_e dp_e) / sum_e s; then
 *     dlogit_m = ds_m s_m (1 - s_m). The bias only selects: it gets a zero gradient.
 */
#include "ops/moe_rule.h"

#include <math.h>

const char *hp_moe_router_name(hp_moe_router r) {
    return r == HP_MOE_ROUTER_SOFTMAX ? "softmax" : r == HP_MOE_ROUTER_SIGMOID_BIAS ? "sigmoid_bias" : "?";
}

hp_tid hp_moe_route(hp_graph *g, hp_tid logits, hp_tid bias, int k, hp_moe_router router) {
    hp_attrs at = {0};
    at.i[0] = k;
    at.i[1] = router;
    hp_tid in[2] = {logits, bias};
    return hp_graph_add_node(g, HP_OP_MOE_ROUTE, in, 2, &at);
}

hp_status hp_moe_bias_update(hp_graph *g, hp_tid bias, hp_tid counts, float rate) {
    return hp_moe_bias_update_n(g, bias, &counts, 1, rate);
}

hp_status hp_moe_bias_update_n(hp_graph *g, hp_tid bias, const hp_tid *counts, int n, float rate) {
    if (n < 1 || n > HP_MAX_NODE_INPUTS - 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_bias_update: %d counts tensors, must be 1 to %d", n,
                        HP_MAX_NODE_INPUTS - 1);
    hp_attrs at = {0};
    at.f[0] = rate;
    hp_tid in[HP_MAX_NODE_INPUTS] = {bias};
    for (int i = 0; i < n; i++) in[1 + i] = counts[i];
    hp_graph_add_node(g, HP_OP_MOE_BIAS_UPDATE, in, 1 + n, &at);
    if (hp_graph_status(g) == HP_STATUS_OK) hp_graph_node(g, hp_graph_n_nodes(g) - 1)->flags |= HP_NODE_FLAG_INPLACE;
    return hp_graph_status(g);
}

static hp_status route_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(hp__moe_mat(g, n->in[0], HP_DTYPE_F32, "router logits"));
    const hp_shape *ls = hp__shp(g, n->in[0]);
    int64_t N = ls->dim[0], E = ls->dim[1], k = n->attr.i[0], mode = n->attr.i[1];
    if (mode != HP_MOE_ROUTER_SOFTMAX && mode != HP_MOE_ROUTER_SIGMOID_BIAS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_route: unknown router %lld", (long long)mode);
    if (k < 1 || k > E)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_route: top_k %lld must be in [1, experts %lld]", (long long)k,
                        (long long)E);
    bool has_bias = n->in[1] != HP_TID_NONE;
    if (has_bias != (mode == HP_MOE_ROUTER_SIGMOID_BIAS))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_route: the %s router %s a bias",
                        hp_moe_router_name((hp_moe_router)mode), has_bias ? "takes no" : "needs");
    if (has_bias) {
        const hp_tensor *b = hp_graph_tensor(g, n->in[1]);
        if (b->dtype != HP_DTYPE_F32 || b->shape.ndim != 1 || b->shape.dim[0] != E)
            return hp_error(HP_STATUS_SHAPE, "moe_route: bias must be f32 (E) = [%lld], is %s %s", (long long)E,
                            hp_dtype_name(b->dtype), hp__shape_s(&b->shape));
    }
    dt[0] = HP_DTYPE_F32;
    dt[1] = HP_DTYPE_I32;
    dt[2] = HP_DTYPE_F32;
    s[0] = s[1] = HP_SHAPE(N, k);
    s[2] = *ls;
    return HP_STATUS_OK;
}

static hp_status route_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(hp__moe_mat(g, n->in[2], HP_DTYPE_F32, "router logits"));
    HP_CHECK(hp__moe_mat(g, n->in[3], HP_DTYPE_I32, "router idx"));
    const hp_shape *ls = hp__shp(g, n->in[2]), *is = hp__shp(g, n->in[3]);
    if (is->dim[0] != ls->dim[0] || is->dim[1] < 1 || is->dim[1] > ls->dim[1])
        return hp_error(HP_STATUS_SHAPE, "moe_route_backward: idx %s does not fit logits %s", hp__shape_s(is),
                        hp__shape_s(ls));
    if (n->in[0] != HP_TID_NONE && !hp_shape_equal(hp__shp(g, n->in[0]), is))
        return hp_error(HP_STATUS_SHAPE, "moe_route_backward: dgates %s must be %s", hp__shape_s(hp__shp(g, n->in[0])),
                        hp__shape_s(is));
    if (n->in[1] != HP_TID_NONE && !hp_shape_equal(hp__shp(g, n->in[1]), ls))
        return hp_error(HP_STATUS_SHAPE, "moe_route_backward: dprobs %s must be %s", hp__shape_s(hp__shp(g, n->in[1])),
                        hp__shape_s(ls));
    dt[0] = HP_DTYPE_F32;
    s[0] = *ls;
    return HP_STATUS_OK;
}

static hp_status bias_update_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)dt, (void)s;
    const hp_tensor *b = hp_graph_tensor(g, n->in[0]);
    for (int i = 1; i < n->n_in; i++) {
        const hp_tensor *c = hp_graph_tensor(g, n->in[i]);
        if (b->dtype != HP_DTYPE_F32 || b->shape.ndim != 1 || c->dtype != HP_DTYPE_I32 ||
            !hp_shape_equal(&b->shape, &c->shape))
            return hp_error(HP_STATUS_SHAPE, "moe_bias_update: bias must be f32 (E) and counts i32 (E), are %s %s and %s %s",
                            hp_dtype_name(b->dtype), hp__shape_s(&b->shape), hp_dtype_name(c->dtype),
                            hp__shape_s(&c->shape));
    }
    if (!(n->attr.f[0] > 0.0f) || !(n->attr.f[0] < INFINITY))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_bias_update: rate %g must be finite and > 0",
                        (double)n->attr.f[0]);
    return HP_STATUS_OK;
}

static hp_status route_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0] && (dout[0] != HP_TID_NONE || dout[2] != HP_TID_NONE)) {
        hp_attrs at = {0};
        at.i[1] = n.attr.i[1];
        hp_tid in[4] = {dout[0], dout[2], n.in[0], n.out[1]};
        din[0] = hp_graph_add_node(g, HP_OP_MOE_ROUTE_BACKWARD, in, 4, &at);
    }
    /* The bias selects only: a zero gradient keeps it a parameter of the step (stored, initialised and
     * checkpointed with the others) that AdamW leaves exactly as it is (zero moments, no decay). */
    if (n.in[1] != HP_TID_NONE && need[1]) din[1] = hp_fill(g, *hp__shp(g, n.in[1]), 0.0f);
    return hp_graph_status(g);
}

/* Per token: the scores (E), a top-k selection over E and the gates: about 12 + k flops per logit. */
static void route_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    c->flops = (12.0 + (double)n->attr.i[0]) * (double)hp_shape_numel(hp__shp(g, n->in[0]));
}
static void route_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 16.0, c);
}

/* ---- sharding rules: token rows split any way, the experts dim whole, the bias replicated ---- */

static hp_status route_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                             hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout rows = hp__moe_rows(c, n, in, 0, 2);
    req[0] = rows;
    req[1] = hp__lay_replicated(1);
    out[0] = out[1] = out[2] = rows;
    return HP_STATUS_OK;
}

static hp_status route_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                      hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout rows = hp__moe_rows(c, n, in, 2, 2);
    for (int i = 0; i < 4; i++) req[i] = rows;
    out[0] = rows;
    return HP_STATUS_OK;
}

/* The bias is updated from the global loads on every rank alike: both replicated (a pending sum of
 * per-rank counts becomes an all-reduce). */
static hp_status bias_update_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                   hp_layout *out, hp_attrs *local, bool *drop) {
    (void)c, (void)in, (void)out, (void)local, (void)drop;
    for (int i = 0; i < n->n_in; i++) req[i] = hp__lay_replicated(1);
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_moe_route = {
    .name = "moe_route", .min_in = 1, .max_in = 2, .n_out = 3, .infer = route_infer, .grad = route_grad,
    .cost = route_cost, .shard = route_shard,
};
const hp_op_def hp__op_def_moe_route_backward = {
    .name = "moe_route_backward", .min_in = 4, .max_in = 4, .n_out = 1, .infer = route_backward_infer,
    .cost = route_backward_cost, .shard = route_backward_shard,
};
const hp_op_def hp__op_def_moe_bias_update = {
    .name = "moe_bias_update", .min_in = 2, .max_in = HP_MAX_NODE_INPUTS, .n_out = 0, .infer = bias_update_infer,
    .shard = bias_update_shard, .inplace_inputs = 1u,
};
