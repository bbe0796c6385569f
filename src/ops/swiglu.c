/*
 * SwiGLU's gate (Shazeer 2020, "GLU Variants Improve Transformer"; the Llama MLP
 * down_proj(silu(gate_proj(x)) * up_proj(x))):
 *   SWIGLU(gate (...), up (...)) -> y = silu(gate) * up, silu(g) = g sigmoid(g)
 *   SWIGLU_BACKWARD(dy, gate, up) -> dgate = dy up sigmoid(g) (1 + g (1 - sigmoid(g))), dup = dy silu(g)
 * gate and up have the same shape (no broadcasting).
 */
#include "ops/op.h"

hp_tid hp_swiglu(hp_graph *g, hp_tid gate, hp_tid up) {
    hp_tid in[2] = {gate, up};
    return hp_graph_add_node(g, HP_OP_SWIGLU, in, 2, NULL);
}

static hp_status same_f32(const hp_graph *g, const hp_node *n, int first, int count) {
    const char *names[3] = {"dy", "gate", "up"};
    const hp_shape *s0 = hp__shp(g, n->in[first]);
    for (int i = first; i < first + count; i++) {
        const hp_tensor *t = hp_graph_tensor(g, n->in[i]);
        const char *what = names[count == 2 ? i + 1 : i];
        if (t->dtype != HP_DTYPE_F32)
            return hp_error(HP_STATUS_SHAPE, "swiglu: %s must be f32, is %s", what, hp_dtype_name(t->dtype));
        if (!hp_shape_equal(&t->shape, s0))
            return hp_error(HP_STATUS_SHAPE, "swiglu: %s %s and %s %s differ", names[count == 2 ? first + 1 : first],
                            hp__shape_s(s0), what, hp__shape_s(&t->shape));
    }
    return HP_STATUS_OK;
}

static hp_status swiglu_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(same_f32(g, n, 0, 2));
    dt[0] = HP_DTYPE_F32;
    s[0] = *hp__shp(g, n->in[0]);
    return HP_STATUS_OK;
}

static hp_status swiglu_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(same_f32(g, n, 0, 3));
    dt[0] = dt[1] = HP_DTYPE_F32;
    s[0] = s[1] = *hp__shp(g, n->in[1]);
    return HP_STATUS_OK;
}

static hp_status swiglu_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (dout[0] == HP_TID_NONE || !(need[0] || need[1])) return HP_STATUS_OK;
    hp_tid in[3] = {dout[0], n.in[0], n.in[1]};
    hp_graph_add_node(g, HP_OP_SWIGLU_BACKWARD, in, 3, NULL);
    if (hp_graph_status(g) != HP_STATUS_OK) return hp_graph_status(g);
    const hp_node *b = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    for (int i = 0; i < 2; i++)
        if (need[i]) din[i] = b->out[i];
    return HP_STATUS_OK;
}

/* An exp and a divide (~10 flops) plus the products. */
static void swiglu_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 13.0, c); }
static void swiglu_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 9.0, c); /* per output element, two outputs */
}

/* ---- sharding rules: elementwise, every operand in gate's layout (pending sums resolved first:
 * SwiGLU is not linear) ---- */

static hp_status swiglu_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout x = hp__lay_resolve(c, &in[0], &c->hint[0], hp__shp(c->g, n->in[0]));
    req[0] = req[1] = x;
    out[0] = x;
    return HP_STATUS_OK;
}

static hp_status swiglu_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                       hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout x = hp__lay_resolve(c, &in[1], NULL, hp__shp(c->g, n->in[1]));
    req[0] = req[1] = req[2] = x;
    out[0] = out[1] = x;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_swiglu = {
    .name = "swiglu", .min_in = 2, .max_in = 2, .n_out = 1, .infer = swiglu_infer,
    .grad = swiglu_grad, .cost = swiglu_cost, .shard = swiglu_shard,
};
const hp_op_def hp__op_def_swiglu_backward = {
    .name = "swiglu_backward", .min_in = 3, .max_in = 3, .n_out = 2, .infer = swiglu_backward_infer,
    .cost = swiglu_backward_cost, .shard = swiglu_backward_shard,
};
