/*
 * Optimizer operators: SUMSQ (global gradient norm), CLIP_SCALE (global-norm clipping factor) and
 * ADAMW (in-place update, Loshchilov & Hutter 2019, decoupled weight decay). None is
 * differentiable: they run after autodiff, on gradients.
 */
#include "ops/op.h"

#include <string.h>

/* ---- builders ---- */

hp_tid hp_sumsq(hp_graph *g, const hp_tid *xs, int n) {
    if (n < 1 || n > HP_MAX_NODE_INPUTS) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "sumsq takes 1 to %d tensors, got %d", HP_MAX_NODE_INPUTS, n);
        return HP_TID_NONE;
    }
    return hp_graph_add_node(g, HP_OP_SUMSQ, xs, n, NULL);
}

hp_tid hp_clip_scale(hp_graph *g, hp_tid sumsq, float max_norm) {
    hp_attrs at = {0};
    at.f[0] = max_norm;
    return hp_graph_add_node(g, HP_OP_CLIP_SCALE, &sumsq, 1, &at);
}

hp_tid hp_clip_scale_guarded(hp_graph *g, hp_tid sumsq, hp_tid loss, float max_norm) {
    hp_attrs at = {0};
    at.f[0] = max_norm;
    hp_tid in[2] = {sumsq, loss};
    return hp_graph_add_node(g, HP_OP_CLIP_SCALE, in, 2, &at);
}

hp_status hp_adamw(hp_graph *g, hp_tid param, hp_tid grad, hp_tid m, hp_tid v, hp_tid lr, hp_tid step,
                   hp_tid scale, const hp_adamw_params *p) {
    hp_adamw_params hp = p ? *p : HP_ADAMW_PARAMS_DEFAULT;
    hp_attrs at = {0};
    at.f[0] = hp.beta1;
    at.f[1] = hp.beta2;
    at.f[2] = hp.eps;
    at.f[3] = hp.weight_decay;
    /* Parameters the model marked as excluded from decay (biases, norm weights) get none. */
    if (param >= 0 && param < hp_graph_n_tensors(g) && hp_graph_tensor(g, param)->no_weight_decay) at.f[3] = 0.0f;
    hp_tid in[7] = {param, grad, m, v, lr, step, scale};
    int before = hp_graph_n_nodes(g);
    hp_graph_add_node(g, HP_OP_ADAMW, in, 7, &at);
    if (hp_graph_status(g) == HP_STATUS_OK && hp_graph_n_nodes(g) == before + 1)
        hp_graph_node(g, hp_graph_n_nodes(g) - 1)->flags |= HP_NODE_FLAG_INPLACE;
    return hp_graph_status(g);
}

/* ---- shape inference ---- */

static hp_status need_f32(const hp_graph *g, const hp_node *n, int i, const char *what) {
    if (n->in[i] == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "%s (input %d) is missing", what, i);
    const hp_tensor *t = hp_graph_tensor(g, n->in[i]);
    if (t->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "%s (input %d) must be f32, is %s", what, i, hp_dtype_name(t->dtype));
    return HP_STATUS_OK;
}

static hp_status need_scalar(const hp_graph *g, const hp_node *n, int i, const char *what) {
    HP_CHECK(need_f32(g, n, i, what));
    const hp_shape *s = hp__shp(g, n->in[i]);
    if (hp_shape_numel(s) != 1)
        return hp_error(HP_STATUS_SHAPE, "%s (input %d) must be a scalar, is %s", what, i, hp__shape_s(s));
    return HP_STATUS_OK;
}

static hp_status sumsq_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    for (int i = 0; i < n->n_in; i++) HP_CHECK(need_f32(g, n, i, "sumsq operand"));
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE_SCALAR;
    return HP_STATUS_OK;
}

static hp_status clip_scale_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(need_scalar(g, n, 0, "sum of squares"));
    if (n->n_in > 1) HP_CHECK(need_scalar(g, n, 1, "loss"));
    if (!(n->attr.f[0] > 0.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "clip_scale max_norm must be > 0, is %g", (double)n->attr.f[0]);
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE_SCALAR;
    return HP_STATUS_OK;
}

static hp_status adamw_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)dt, (void)s;
    static const char *names[4] = {"param", "grad", "m", "v"};
    for (int i = 0; i < 4; i++) HP_CHECK(need_f32(g, n, i, names[i]));
    const hp_shape *p = hp__shp(g, n->in[0]);
    for (int i = 1; i < 4; i++)
        if (!hp_shape_equal(p, hp__shp(g, n->in[i])))
            return hp_error(HP_STATUS_SHAPE, "adamw %s is %s, param is %s", names[i], hp__shape_s(hp__shp(g, n->in[i])),
                            hp__shape_s(p));
    HP_CHECK(need_scalar(g, n, 4, "lr"));
    HP_CHECK(need_scalar(g, n, 5, "step"));
    if (n->n_in > 6 && n->in[6] != HP_TID_NONE) HP_CHECK(need_scalar(g, n, 6, "scale"));
    const float *f = n->attr.f;
    if (!(f[0] >= 0.0f && f[0] < 1.0f) || !(f[1] >= 0.0f && f[1] < 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw betas must be in [0, 1), are %g, %g", (double)f[0],
                        (double)f[1]);
    if (!(f[2] > 0.0f) || !(f[3] >= 0.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw eps must be > 0 and weight_decay >= 0, are %g, %g",
                        (double)f[2], (double)f[3]);
    return HP_STATUS_OK;
}

/* ---- cost ---- */

static void sumsq_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double e = 0;
    for (int i = 0; i < n->n_in; i++) e += (double)hp_shape_numel(hp__shp(g, n->in[i]));
    c->flops = 2.0 * e;
}

static void clip_scale_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 4.0, c); }

/* Per element: scale the gradient, two moment updates, bias corrections, sqrt, divide, decay. */
static void adamw_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double e = (double)hp_shape_numel(hp__shp(g, n->in[0]));
    c->flops = 16.0 * e;
    c->bytes_written = 3.0 * 4.0 * e; /* param, m, v in place */
}

/* ---- sharding rules ---- */

/* SUMSQ: inputs resolved (a gradient's pending sum resolves into the optimizer's layout, so the
 * update reuses it); each input keeps only the axes all inputs share, and the result is a pending
 * sum over them (every element counted once across ranks). */
static hp_status sumsq_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                             hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    uint32_t common = ~0u;
    for (int i = 0; i < n->n_in; i++) {
        req[i] = hp__lay_resolve(c, &in[i], &c->hint[i], hp__shp(c->g, n->in[i]));
        common &= hp__lay_all_axes(&req[i]);
    }
    for (int i = 0; i < n->n_in; i++) hp__lay_drop_axes(&req[i], ~common);
    hp_layout o = hp__lay_replicated(0);
    hp__lay_set_partial(&o, common, HP_REDUCE_SUM);
    out[0] = o;
    return HP_STATUS_OK;
}

/* CLIP_SCALE: the global norm (and the loss it guards) must be complete: pending sums are resolved. */
static hp_status clip_scale_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                  hp_layout *out, hp_attrs *local, bool *drop) {
    (void)c, (void)in, (void)local, (void)drop;
    for (int i = 0; i < n->n_in; i++) req[i] = hp__lay_replicated(hp__shp(c->g, n->in[i])->ndim);
    out[0] = hp__lay_replicated(0);
    return HP_STATUS_OK;
}

/* ADAMW: the update runs in the optimizer state's layout (ZeRO: split over the data-parallel axes);
 * param and grad are brought to it (a gradient's pending sum becomes a reduce-scatter), and an
 * updated param copy is written back to the param's own layout by the partitioner. */
static hp_status adamw_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                             hp_layout *out, hp_attrs *local, bool *drop) {
    (void)out, (void)local, (void)drop;
    hp_layout t = in[2];
    req[0] = t;
    req[1] = t;
    req[2] = t;
    req[3] = t;
    for (int i = 4; i < n->n_in; i++)
        if (n->in[i] != HP_TID_NONE) req[i] = hp__lay_replicated(hp__shp(c->g, n->in[i])->ndim);
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_sumsq = {
    .name = "sumsq",
    .min_in = 1,
    .max_in = HP_MAX_NODE_INPUTS,
    .n_out = 1,
    .infer = sumsq_infer,
    .cost = sumsq_cost,
    .shard = sumsq_shard,
};
const hp_op_def hp__op_def_clip_scale = {
    .name = "clip_scale",
    .min_in = 1,
    .max_in = 2,
    .n_out = 1,
    .infer = clip_scale_infer,
    .cost = clip_scale_cost,
    .shard = clip_scale_shard,
};
const hp_op_def hp__op_def_adamw = {
    .name = "adamw",
    .min_in = 6,
    .max_in = 7,
    .n_out = 0,
    .infer = adamw_infer,
    .cost = adamw_cost,
    .inplace_inputs = (1u << 0) | (1u << 2) | (1u << 3), /* param, m, v */
    .shard = adamw_shard,
};
