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

/* ---- sharding rules ---- */

/* Layout of input k when the output is laid out as `o`. */
static hp_layout operand(const hp_graph *g, const hp_node *n, int k, const hp_layout *o) {
    return hp__lay_broadcast_operand(o, hp__shp(g, n->out[0]), hp__shp(g, n->in[k]));
}

/* The output layout input k implies (its splits on the dims it shares with the output). */
static hp_layout expand(const hp_graph *g, const hp_node *n, int k, const hp_layout *l) {
    const hp_shape *so = hp__shp(g, n->out[0]), *si = hp__shp(g, n->in[k]);
    hp_layout o = hp__lay_replicated(so->ndim);
    for (int i = 0; i < si->ndim; i++) {
        int d = so->ndim - si->ndim + i;
        if (si->dim[i] == so->dim[d] && si->dim[i] != 1) hp__lay_copy_dim(&o, d, l, i);
    }
    return o;
}

static int64_t total_cost(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, const hp_layout *req) {
    int64_t s = 0;
    for (int k = 0; k < n->n_in; k++)
        s += hp__lay_cost(c, &in[k], &req[k], hp__shp(c->g, n->in[k]), HP_DTYPE_F32);
    return s;
}

/*
 * ADD, SUB, MUL: the output follows one operand's splits and the other operand is redistributed,
 * whichever moves fewer bytes. Pending sums pass through where the operator is linear in them:
 * ADD/SUB of two operands partial on the same axes, MUL with one partial operand.
 */
static hp_status binary_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    const hp_graph *g = c->g;
    int64_t best = -1;
    for (int cand = 0; cand < 2; cand++) {
        hp_layout o = expand(g, n, cand, &in[cand]);
        uint32_t keep = 0; /* partial axes kept */
        if (n->op != HP_OP_MUL && in[0].partial && in[0].partial == in[1].partial &&
            in[0].partial_op == HP_REDUCE_SUM && in[1].partial_op == HP_REDUCE_SUM)
            keep = in[0].partial;
        if (n->op == HP_OP_MUL && (in[cand].partial != 0) != (in[1 - cand].partial != 0) && in[cand].partial &&
            in[cand].partial_op == HP_REDUCE_SUM)
            keep = in[cand].partial;
        hp__lay_drop_axes(&o, keep);
        hp_layout r[2];
        for (int k = 0; k < 2; k++) {
            r[k] = operand(g, n, k, &o);
            if (keep && (n->op != HP_OP_MUL || in[k].partial)) hp__lay_set_partial(&r[k], keep, HP_REDUCE_SUM);
        }
        int64_t cost = total_cost(c, n, in, r);
        if (best < 0 || cost < best) {
            best = cost;
            req[0] = r[0];
            req[1] = r[1];
            out[0] = o;
            hp__lay_set_partial(&out[0], keep, HP_REDUCE_SUM);
        }
    }
    /* ADD/SUB: keep the union of both operands' pending sums (an operand without a pending sum
     * on an axis becomes one for free: one rank keeps its value, the others zeros), so chains of
     * partial sums (the global gradient norm) resolve once, at the end. Scalars only: on a
     * tensor a kept pending sum is free here but costs more downstream (the residual stream would
     * be reduce-scattered and gathered again), which a local rule cannot see. */
    uint32_t u = hp_shape_numel(hp__shp(g, n->out[0])) == 1 ? in[0].partial | in[1].partial : 0;
    bool sums = (!in[0].partial || in[0].partial_op == HP_REDUCE_SUM) && (!in[1].partial || in[1].partial_op == HP_REDUCE_SUM);
    if (n->op != HP_OP_MUL && u && sums) {
        hp_layout o = expand(g, n, 0, &in[0]);
        hp__lay_drop_axes(&o, u);
        hp_layout r[2];
        for (int k = 0; k < 2; k++) {
            r[k] = operand(g, n, k, &o);
            hp__lay_set_partial(&r[k], u, HP_REDUCE_SUM);
        }
        int64_t cost = total_cost(c, n, in, r);
        if (cost < best) {
            req[0] = r[0];
            req[1] = r[1];
            out[0] = o;
            hp__lay_set_partial(&out[0], u, HP_REDUCE_SUM);
        }
    }
    return HP_STATUS_OK;
}

/* SCALE, COPY: the output has the input's layout, pending reductions included. */
static hp_status same_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                            hp_layout *out, hp_attrs *local, bool *drop) {
    (void)c, (void)n, (void)req, (void)local, (void)drop;
    out[0] = in[0];
    return HP_STATUS_OK;
}

static void cost1(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 1.0, c); }
static void cost0(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 0.0, c); }

const hp_op_def hp__op_def_add = {.name = "add", .min_in = 2, .max_in = 2, .n_out = 1, .infer = binary_infer,
                                  .grad = add_grad, .cost = cost1, .shard = binary_shard};
const hp_op_def hp__op_def_sub = {.name = "sub", .min_in = 2, .max_in = 2, .n_out = 1, .infer = binary_infer,
                                  .grad = sub_grad, .cost = cost1, .shard = binary_shard};
const hp_op_def hp__op_def_mul = {.name = "mul", .min_in = 2, .max_in = 2, .n_out = 1, .infer = binary_infer,
                                  .grad = mul_grad, .cost = cost1, .shard = binary_shard};
const hp_op_def hp__op_def_scale = {.name = "scale", .min_in = 1, .max_in = 1, .n_out = 1, .infer = scale_infer,
                                    .grad = scale_grad, .cost = cost1, .shard = same_shard};
/* FILL has no inputs: the default rule makes it replicated. */
const hp_op_def hp__op_def_fill = {.name = "fill", .min_in = 0, .max_in = 0, .n_out = 1, .infer = fill_infer,
                                   .cost = cost0};
const hp_op_def hp__op_def_copy = {.name = "copy", .min_in = 1, .max_in = 1, .n_out = 1, .infer = unary_infer,
                                   .grad = copy_grad, .cost = cost0, .shard = same_shard};
