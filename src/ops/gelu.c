/*
 * GELU, tanh approximation (Hendrycks & Gimpel 2016, as in GPT-2):
 *   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
 * and GELU_BACKWARD(dy, x) -> dx = dy * gelu'(x).
 */
#include "ops/op.h"

hp_tid hp_gelu(hp_graph *g, hp_tid x) { return hp_graph_add_node(g, HP_OP_GELU, &x, 1, NULL); }

static hp_status f32_in(const hp_graph *g, hp_tid t, const char *what) {
    if (t == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "%s is required", what);
    const hp_tensor *x = hp_graph_tensor(g, t);
    if (x->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "%s must be f32, is %s %s", what, hp_dtype_name(x->dtype),
                        hp__shape_s(&x->shape));
    return HP_STATUS_OK;
}

static hp_status gelu_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(f32_in(g, n->in[0], "x"));
    dt[0] = HP_DTYPE_F32;
    s[0] = *hp__shp(g, n->in[0]);
    return HP_STATUS_OK;
}

static hp_status gelu_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(f32_in(g, n->in[0], "dy"));
    HP_CHECK(f32_in(g, n->in[1], "x"));
    const hp_shape *dy = hp__shp(g, n->in[0]), *x = hp__shp(g, n->in[1]);
    if (!hp_shape_equal(dy, x))
        return hp_error(HP_STATUS_SHAPE, "dy %s and x %s differ", hp__shape_s(dy), hp__shape_s(x));
    dt[0] = HP_DTYPE_F32;
    s[0] = *x;
    return HP_STATUS_OK;
}

static hp_status gelu_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_tid x = hp_graph_node(g, node)->in[0];
    if (need[0]) {
        hp_tid in[2] = {dout[0], x};
        din[0] = hp_graph_add_node(g, HP_OP_GELU_BACKWARD, in, 2, NULL);
    }
    return hp_graph_status(g);
}

/* Counting tanh as ~10 flops (an exp and a divide). */
static void gelu_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 18.0, c); }
static void gelu_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 26.0, c);
}

/* ---- sharding rules ---- */

/* GELU: elementwise; a pending sum must be resolved first (GELU is not linear). */
static hp_status gelu_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                            hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    req[0] = hp__lay_resolve(c, &in[0], &c->hint[0], hp__shp(c->g, n->in[0]));
    out[0] = req[0];
    return HP_STATUS_OK;
}

/* GELU_BACKWARD(dy, x): both in x's layout (dy's pending sum resolves into it). */
static hp_status gelu_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                     hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout x = hp__lay_resolve(c, &in[1], NULL, hp__shp(c->g, n->in[1]));
    req[0] = x;
    req[1] = x;
    out[0] = x;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_gelu = {
    .name = "gelu",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = gelu_infer,
    .grad = gelu_grad,
    .cost = gelu_cost,
    .shard = gelu_shard,
};
const hp_op_def hp__op_def_gelu_backward = {
    .name = "gelu_backward",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = gelu_backward_infer,
    .cost = gelu_backward_cost,
    .shard = gelu_backward_shard,
};
