/* Elementwise operators: ADD, SUB, MUL (numpy broadcasting), SCALE, FILL, COPY. */
#include "ops/op.h"

#include <string.h>

/* ---- builders ---- */

static hp_tid binary(hp_graph *g, hp_op op, hp_tid a, hp_tid b) {
    hp_tid in[2] = {a, b};
    return hp_graph_add_node(g, op, in, 2, NULL);
}

hp_tid hp_add(hp_graph *g, hp_tid a, hp_tid b) { return binary(g, HP_OP_ADD, a, b); }
hp_tid hp_sub(hp_graph *g, hp_tid a, hp_tid b) { return binary(g, HP_OP_SUB, a, b); }
hp_tid hp_mul(hp_graph *g, hp_tid a, hp_tid b) { return binary(g, HP_OP_MUL, a, b); }

hp_tid hp_scale(hp_graph *g, hp_tid a, float s) {
    hp_attrs at = {0};
    at.f[0] = s;
    return hp_graph_add_node(g, HP_OP_SCALE, &a, 1, &at);
}

hp_tid hp_fill(hp_graph *g, hp_shape shape, float value) {
    hp_attrs at = {0};
    at.f[0] = value;
    at.shape = shape;
    return hp_graph_add_node(g, HP_OP_FILL, NULL, 0, &at);
}

hp_tid hp_copy(hp_graph *g, hp_tid a) { return hp_graph_add_node(g, HP_OP_COPY, &a, 1, NULL); }

/* ---- shape inference ---- */

static hp_status check_f32(const hp_graph *g, hp_tid t, const char *what) {
    const hp_tensor *x = hp_graph_tensor(g, t);
    if (x->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "%s must be f32, is %s", what, hp_dtype_name(x->dtype));
    return HP_STATUS_OK;
}

static hp_status binary_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_f32(g, n->in[0], "first operand"));
    HP_CHECK(check_f32(g, n->in[1], "second operand"));
    dt[0] = HP_DTYPE_F32;
    return hp__broadcast_shape(hp__shp(g, n->in[0]), hp__shp(g, n->in[1]), &s[0]);
}

static hp_status unary_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = *hp__shp(g, n->in[0]);
    return HP_STATUS_OK;
}

static hp_status scale_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_f32(g, n->in[0], "operand"));
    return unary_infer(g, n, dt, s);
}

static hp_status fill_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)g;
    for (int i = 0; i < n->attr.shape.ndim; i++)
        if (n->attr.shape.dim[i] <= 0) return hp_error(HP_STATUS_SHAPE, "fill shape %s", hp__shape_s(&n->attr.shape));
    dt[0] = HP_DTYPE_F32;
    s[0] = n->attr.shape;
    return HP_STATUS_OK;
}

/* ---- gradients ---- */

/* d(a op b): the incoming gradient, reduced to each operand's shape (broadcast's adjoint). */
static hp_tid reduce_like(hp_graph *g, hp_tid d, hp_tid like) {
    if (hp_shape_equal(hp__shp(g, d), hp__shp(g, like))) return d;
    return hp_sum_to(g, d, like);
}

static hp_status add_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) din[0] = reduce_like(g, dout[0], n.in[0]);
    if (need[1]) din[1] = reduce_like(g, dout[0], n.in[1]);
    return hp_graph_status(g);
}

static hp_status sub_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) din[0] = reduce_like(g, dout[0], n.in[0]);
    if (need[1]) din[1] = reduce_like(g, hp_scale(g, dout[0], -1.0f), n.in[1]);
    return hp_graph_status(g);
}

static hp_status mul_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) din[0] = reduce_like(g, hp_mul(g, dout[0], n.in[1]), n.in[0]);
    if (need[1]) din[1] = reduce_like(g, hp_mul(g, dout[0], n.in[0]), n.in[1]);
    return hp_graph_status(g);
}

static hp_status scale_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    float s = hp_graph_node(g, node)->attr.f[0];
    if (need[0]) din[0] = hp_scale(g, dout[0], s);
    return hp_graph_status(g);
}

static hp_status copy_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    (void)node;
    if (need[0]) din[0] = dout[0];
    return hp_graph_status(g);
}

static void cost1(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 1.0, c); }
static void cost0(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 0.0, c); }

const hp_op_def hp__op_def_add = {"add", 2, 2, 1, binary_infer, add_grad, cost1, NULL};
const hp_op_def hp__op_def_sub = {"sub", 2, 2, 1, binary_infer, sub_grad, cost1, NULL};
const hp_op_def hp__op_def_mul = {"mul", 2, 2, 1, binary_infer, mul_grad, cost1, NULL};
const hp_op_def hp__op_def_scale = {"scale", 1, 1, 1, scale_infer, scale_grad, cost1, NULL};
const hp_op_def hp__op_def_fill = {"fill", 0, 0, 1, fill_infer, NULL, cost0, NULL};
const hp_op_def hp__op_def_copy = {"copy", 1, 1, 1, unary_infer, copy_grad, cost0, NULL};
