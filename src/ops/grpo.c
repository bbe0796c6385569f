/*
 * GRPO_LOSS(logits (R..., V) f32, tokens (R...) i32, old_logp, ref_logp, adv, weight (R...) f32)
 *   -> scalar  -sum_r weight[r] * (min(ratio A, clip(ratio, 1 - eps, 1 + eps) A) - beta k3)
 * per token r (a row of the logits): logp = log softmax(logits[r])[tokens[r]], ratio =
 * exp(logp - old_logp), A = adv[r], k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1 (the
 * unbiased, always non-negative KL estimator of Schulman 2020 that DeepSeekMath's GRPO uses).
 * Group Relative Policy Optimization (Shao et al. 2024, "DeepSeekMath", eq. 3-4). attr f[0] = eps,
 * f[1] = beta. The weights carry both the completion mask (0 on prompt and padding tokens) and the
 * normalization (DeepSeekMath: 1 / (G |o_i|) per token of sample i), so the loss is a plain weighted
 * sum and a rank holding some rows contributes a pending sum with no global count to know.
 * Its gradient is GRPO_LOSS_BACKWARD(dloss, logits, tokens, old, ref, adv, weight) -> dlogits
 * = dloss * g_r (onehot(tokens[r]) - softmax(logits[r])) with
 *   g_r = -weight[r] * ([ratio A <= clip(ratio) A] ratio A - beta (1 - exp(ref_logp - logp)))
 * (the clipped branch is constant in logp, so it passes no gradient). The softmax is recomputed.
 */
#include "ops/op.h"

hp_tid hp_grpo_loss(hp_graph *g, hp_tid logits, hp_tid tokens, hp_tid old_logp, hp_tid ref_logp, hp_tid adv,
                    hp_tid weight, float eps, float beta) {
    hp_tid in[6] = {logits, tokens, old_logp, ref_logp, adv, weight};
    hp_attrs a = {0};
    a.f[0] = eps;
    a.f[1] = beta;
    return hp_graph_add_node(g, HP_OP_GRPO_LOSS, in, 6, &a);
}

/* The inputs from `first` (the logits) on: tokens i32 and four f32 tensors shaped like the rows. */
static hp_status check_in(const hp_graph *g, const hp_node *n, int first) {
    static const char *const names[] = {"tokens", "old_logp", "ref_logp", "adv", "weight"};
    for (int i = 0; i < 6; i++)
        if (n->in[first + i] == HP_TID_NONE)
            return hp_error(HP_STATUS_SHAPE, "grpo_loss: %s is required", i == 0 ? "logits" : names[i - 1]);
    const hp_tensor *l = hp_graph_tensor(g, n->in[first]);
    if (l->dtype != HP_DTYPE_F32 || l->shape.ndim < 2 || l->shape.dim[l->shape.ndim - 1] < 1)
        return hp_error(HP_STATUS_SHAPE, "grpo_loss: logits must be f32 (..., V), are %s %s", hp_dtype_name(l->dtype),
                        hp__shape_s(&l->shape));
    hp_shape rows = l->shape;
    rows.ndim--;
    for (int i = 1; i < 6; i++) {
        const hp_tensor *t = hp_graph_tensor(g, n->in[first + i]);
        hp_dtype want = i == 1 ? HP_DTYPE_I32 : HP_DTYPE_F32;
        if (t->dtype != want || !hp_shape_equal(&rows, &t->shape))
            return hp_error(HP_STATUS_SHAPE, "grpo_loss: %s must be %s %s (the rows of logits %s), is %s %s", names[i - 1],
                            hp_dtype_name(want), hp__shape_s(&rows), hp__shape_s(&l->shape), hp_dtype_name(t->dtype),
                            hp__shape_s(&t->shape));
    }
    if (!(n->attr.f[0] >= 0.0f) || !(n->attr.f[1] >= 0.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "grpo_loss: clip eps %g and beta %g must be >= 0",
                        (double)n->attr.f[0], (double)n->attr.f[1]);
    return HP_STATUS_OK;
}

static hp_status grpo_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_in(g, n, 0));
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE_SCALAR;
    return HP_STATUS_OK;
}

static hp_status grpo_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_in(g, n, 1));
    if (n->in[0] == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "grpo_loss_backward: dloss is required");
    const hp_tensor *d = hp_graph_tensor(g, n->in[0]);
    if (d->dtype != HP_DTYPE_F32 || hp_shape_numel(&d->shape) != 1)
        return hp_error(HP_STATUS_SHAPE, "grpo_loss_backward: dloss must be an f32 scalar, is %s %s",
                        hp_dtype_name(d->dtype), hp__shape_s(&d->shape));
    dt[0] = HP_DTYPE_F32;
    s[0] = *hp__shp(g, n->in[1]);
    return HP_STATUS_OK;
}

static hp_status grpo_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) {
        hp_tid in[7] = {dout[0], n.in[0], n.in[1], n.in[2], n.in[3], n.in[4], n.in[5]};
        din[0] = hp_graph_add_node(g, HP_OP_GRPO_LOSS_BACKWARD, in, 7, &n.attr);
    }
    /* tokens are integers; the old and reference log-probs, advantages and weights are data */
    return hp_graph_status(g);
}

static void grpo_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    c->flops = 13.0 * (double)hp_shape_numel(hp__shp(g, n->in[0]));
}

static void grpo_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double e = (double)hp_shape_numel(hp__shp(g, n->in[1]));
    c->flops = 26.0 * e;
    c->bytes_read += e * 4.0;
}

/* One double per row for the per-token terms, summed in row order (deterministic). */
static size_t grpo_workspace(const hp_graph *g, const hp_node *n) {
    return (size_t)hp_shape_numel(hp__shp(g, n->in[1])) * sizeof(double);
}

/* ---- sharding rules: the rows split any way (the vocabulary whole), the five row inputs follow
 * them; the loss is a pending sum over the axes splitting the rows. ---- */

static hp_layout grpo_rows(const hp_shard_ctx *c, const hp_node *n, int li, const hp_layout *in, hp_layout *req) {
    const hp_shape *ls = hp__shp(c->g, n->in[li]);
    hp_layout l = hp__lay_resolve(c, &in[li], NULL, ls);
    hp__lay_unshard_dim(&l, l.ndim - 1);
    hp_layout t = hp__lay_replicated(l.ndim - 1);
    for (int d = 0; d < l.ndim - 1; d++) hp__lay_copy_dim(&t, d, &l, d);
    req[li] = l;
    for (int i = 1; i < 6; i++) req[li + i] = t;
    return l;
}

static hp_status grpo_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                            hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    (void)local;
    hp_layout l = grpo_rows(c, n, 0, in, req);
    hp_layout o = hp__lay_replicated(0);
    hp__lay_set_partial(&o, hp__lay_all_axes(&l), HP_REDUCE_SUM);
    out[0] = o;
    return HP_STATUS_OK;
}

static hp_status grpo_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                     hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    (void)local;
    hp_layout l = grpo_rows(c, n, 1, in, req);
    req[0] = hp__lay_replicated(hp__shp(c->g, n->in[0])->ndim);
    out[0] = l;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_grpo_loss = {
    .name = "grpo_loss",
    .min_in = 6,
    .max_in = 6,
    .n_out = 1,
    .infer = grpo_infer,
    .grad = grpo_grad,
    .cost = grpo_cost,
    .workspace = grpo_workspace,
    .shard = grpo_shard,
};
const hp_op_def hp__op_def_grpo_loss_backward = {
    .name = "grpo_loss_backward",
    .min_in = 7,
    .max_in = 7,
    .n_out = 1,
    .infer = grpo_backward_infer,
    .cost = grpo_backward_cost,
    .shard = grpo_backward_shard,
};
