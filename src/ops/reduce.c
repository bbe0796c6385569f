/* Reductions: SUM_TO (broadcast's adjoint), SUM and MEAN over an axis or everything. */
#include "ops/op.h"

hp_tid hp_sum_to(hp_graph *g, hp_tid a, hp_tid like) {
    if (hp_graph_status(g) != HP_STATUS_OK) return HP_TID_NONE;
    if (like < 0 || like >= hp_graph_n_tensors(g)) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "sum_to: 'like' is tensor id %d, which does not exist", like);
        return HP_TID_NONE;
    }
    /* Only the shape of `like` matters: it rides in the attrs, so no data dependence is made. */
    hp_attrs at = {0};
    at.shape = hp_graph_tensor(g, like)->shape;
    return hp_graph_add_node(g, HP_OP_SUM_TO, &a, 1, &at);
}

static hp_tid reduce(hp_graph *g, hp_op op, hp_tid a, int axis) {
    hp_attrs at = {0};
    at.i[0] = axis;
    return hp_graph_add_node(g, op, &a, 1, &at);
}

hp_tid hp_sum(hp_graph *g, hp_tid a, int axis) { return reduce(g, HP_OP_SUM, a, axis); }
hp_tid hp_mean(hp_graph *g, hp_tid a, int axis) { return reduce(g, HP_OP_MEAN, a, axis); }

static hp_status sum_to_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_shape *a = hp__shp(g, n->in[0]), *l = &n->attr.shape;
    hp_shape b;
    HP_CHECK(hp__broadcast_shape(a, l, &b));
    if (!hp_shape_equal(&b, a))
        return hp_error(HP_STATUS_SHAPE, "%s cannot be summed down to %s", hp__shape_s(a), hp__shape_s(l));
    dt[0] = HP_DTYPE_F32;
    s[0] = *l;
    return HP_STATUS_OK;
}

static hp_status reduce_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_shape *a = hp__shp(g, n->in[0]);
    if (hp_graph_tensor(g, n->in[0])->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "reduction operand must be f32");
    dt[0] = HP_DTYPE_F32;
    if (n->attr.i[0] == -1) {
        s[0] = hp_shape_make(0, NULL);
        return HP_STATUS_OK;
    }
    int ax = hp__axis((int)n->attr.i[0], a->ndim);
    if (ax < 0 || n->attr.i[0] < -a->ndim)
        return hp_error(HP_STATUS_SHAPE, "axis %lld out of range for %s", (long long)n->attr.i[0], hp__shape_s(a));
    hp_shape r = hp_shape_make(0, NULL);
    for (int i = 0; i < a->ndim; i++)
        if (i != ax) r.dim[r.ndim++] = a->dim[i];
    s[0] = r;
    return HP_STATUS_OK;
}

/* Gradient of a reduction: broadcast dout back over the reduced axis (as a keepdim reshape + add
 * to zeros would), scaled by 1/count for MEAN. */
static hp_status reduce_grad_common(hp_graph *g, int node, const hp_tid *dout, hp_tid *din, float scale) {
    hp_node n = *hp_graph_node(g, node);
    const hp_shape a = *hp__shp(g, n.in[0]);
    hp_tid d = dout[0];
    if (n.attr.i[0] != -1) {
        int ax = hp__axis((int)n.attr.i[0], a.ndim);
        hp_shape keep = a;
        keep.dim[ax] = 1;
        d = hp_reshape(g, d, keep);
    } else {
        hp_shape ones = a;
        for (int i = 0; i < ones.ndim; i++) ones.dim[i] = 1;
        d = hp_reshape(g, d, ones);
    }
    hp_tid z = hp_fill(g, a, 0.0f);
    hp_tid b = hp_add(g, z, d);
    din[0] = scale == 1.0f ? b : hp_scale(g, b, scale);
    return hp_graph_status(g);
}

static hp_status sum_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    if (!need[0]) return HP_STATUS_OK;
    return reduce_grad_common(g, node, dout, din, 1.0f);
}

static hp_status mean_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    if (!need[0]) return HP_STATUS_OK;
    const hp_node *n = hp_graph_node(g, node);
    const hp_shape *a = hp__shp(g, n->in[0]);
    int64_t cnt = n->attr.i[0] == -1 ? hp_shape_numel(a) : a->dim[hp__axis((int)n->attr.i[0], a->ndim)];
    return reduce_grad_common(g, node, dout, din, 1.0f / (float)cnt);
}

static hp_status sum_to_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) din[0] = hp_add(g, hp_fill(g, *hp__shp(g, n.in[0]), 0.0f), dout[0]);
    return hp_graph_status(g);
}

/* ---- sharding rules ---- */

/* SUM_TO: dims summed away turn their mesh axes into pending sums; kept dims keep their splits. */
static hp_status sum_to_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)req, (void)drop;
    const hp_shape *sa = hp__shp(c->g, n->in[0]), *sl = &n->attr.shape;
    hp_layout o = hp__lay_replicated(sl->ndim);
    uint32_t summed = 0;
    for (int i = 0; i < sa->ndim; i++) {
        int d = sl->ndim - sa->ndim + i;
        if (d >= 0 && sl->dim[d] == sa->dim[i])
            hp__lay_copy_dim(&o, d, &in[0], i);
        else
            summed |= hp__lay_dim_axes(&in[0], i);
    }
    if (in[0].partial && in[0].partial_op != HP_REDUCE_SUM) return hp_error(HP_STATUS_UNSUPPORTED, "sum of a non-sum partial");
    hp__lay_set_partial(&o, in[0].partial | summed, HP_REDUCE_SUM);
    out[0] = o;
    return hp_layout_local_shape(&o, c->mesh, sl, c->index, &local->shape);
}

/* SUM: a summed split dim becomes a pending sum. MEAN: the reduced dims must be whole. */
static hp_status reduce_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    const hp_shape *sa = hp__shp(c->g, n->in[0]);
    int ax = n->attr.i[0] == -1 ? -1 : hp__axis((int)n->attr.i[0], sa->ndim);
    hp_layout r = in[0];
    if (r.partial && r.partial_op != HP_REDUCE_SUM) r = hp__lay_resolve(c, &r, NULL, sa);
    if (n->op == HP_OP_MEAN) {
        for (int d = 0; d < sa->ndim; d++)
            if (ax < 0 || d == ax) hp__lay_unshard_dim(&r, d);
    }
    req[0] = r;
    hp_layout o = hp__lay_replicated(ax < 0 ? 0 : sa->ndim - 1);
    uint32_t summed = 0;
    for (int d = 0, w = 0; d < sa->ndim; d++) {
        if (ax < 0 || d == ax)
            summed |= hp__lay_dim_axes(&r, d);
        else
            hp__lay_copy_dim(&o, w++, &r, d);
    }
    hp__lay_set_partial(&o, r.partial | summed, HP_REDUCE_SUM);
    out[0] = o;
    return HP_STATUS_OK;
}

static void reduce_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    c->flops = (double)hp_shape_numel(hp__shp(g, n->in[0]));
}

const hp_op_def hp__op_def_sum_to = {.name = "sum_to", .min_in = 1, .max_in = 1, .n_out = 1, .infer = sum_to_infer,
                                     .grad = sum_to_grad, .cost = reduce_cost, .shard = sum_to_shard};
const hp_op_def hp__op_def_sum = {.name = "sum", .min_in = 1, .max_in = 1, .n_out = 1, .infer = reduce_infer,
                                  .grad = sum_grad, .cost = reduce_cost, .shard = reduce_shard};
const hp_op_def hp__op_def_mean = {.name = "mean", .min_in = 1, .max_in = 1, .n_out = 1, .infer = reduce_infer,
                                   .grad = mean_grad, .cost = reduce_cost, .shard = reduce_shard};
