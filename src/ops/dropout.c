/*
 * DROPOUT: inverted dropout with a counter-based mask (Srivastava et al. 2014; the 1/(1-p) scaling
 * at training time as in GPT-2 and PyTorch). The mask is a pure function of (key, step, global
 * element index) through hp/rng.h, so no mask tensor exists: the backward pass is the same
 * operator applied to dy, regenerating the mask; a sharded run drops exactly the elements the
 * single-device run drops, because each rank's node carries its block's global offsets.
 *
 * Attributes: i[0] = key, f[0] = p, shape = the global shape, i[1 + d] = the global index of the
 * first element of this node's block along dim d (zero in a logical graph).
 *
 * An optional third input, an i32 scalar, is added to the dim-0 offset at run time: a pipeline
 * stage's program runs one micro-batch of the global batch at a time, its rows starting at a row
 * that changes per run (hp_dropout_set_row_input), so its masks are the single-device run's.
 */
#include "ops/op.h"

#define DROPOUT_MAX_DIMS 5 /* i[1..5] hold the block's global offsets */

hp_tid hp_dropout(hp_graph *g, hp_tid x, hp_tid step, float p, uint64_t key) {
    if (hp_graph_status(g) != HP_STATUS_OK) return HP_TID_NONE;
    if (!(p >= 0.0f && p < 1.0f)) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "dropout: p %g must be in [0, 1)", (double)p);
        return HP_TID_NONE;
    }
    if (p == 0.0f) return x;
    hp_attrs at = {.i = {(int64_t)key}, .f = {p}};
    if (x >= 0 && x < hp_graph_n_tensors(g)) at.shape = *hp__shp(g, x);
    hp_tid in[2] = {x, step};
    return hp_graph_add_node(g, HP_OP_DROPOUT, in, 2, &at);
}

hp_status hp_dropout_set_row_input(hp_graph *g, int node, hp_tid row0, int64_t rows) {
    hp_node *n = hp_graph_node(g, node);
    if (!n || n->op != HP_OP_DROPOUT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "dropout: node %d is not a DROPOUT", node);
    const hp_tensor *r = row0 >= 0 && row0 < hp_graph_n_tensors(g) ? hp_graph_tensor(g, row0) : NULL;
    if (!r || r->dtype != HP_DTYPE_I32 || hp_shape_numel(&r->shape) != 1)
        return hp_error(HP_STATUS_SHAPE, "dropout: the row input must be an i32 scalar");
    if (n->attr.shape.ndim < 1 || rows < n->attr.shape.dim[0])
        return hp_error(HP_STATUS_SHAPE, "dropout: %lld global rows for a block of %lld", (long long)rows,
                        (long long)(n->attr.shape.ndim ? n->attr.shape.dim[0] : 0));
    n->in[2] = row0;
    n->n_in = 3;
    n->attr.shape.dim[0] = rows;
    return HP_STATUS_OK;
}

static hp_status dropout_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    if (n->in[0] == HP_TID_NONE || n->in[1] == HP_TID_NONE)
        return hp_error(HP_STATUS_SHAPE, "x and step are required");
    const hp_tensor *x = hp_graph_tensor(g, n->in[0]), *st = hp_graph_tensor(g, n->in[1]);
    if (x->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "x must be f32, is %s %s", hp_dtype_name(x->dtype), hp__shape_s(&x->shape));
    if (st->dtype != HP_DTYPE_F32 || hp_shape_numel(&st->shape) != 1)
        return hp_error(HP_STATUS_SHAPE, "step must be an f32 scalar, is %s %s", hp_dtype_name(st->dtype),
                        hp__shape_s(&st->shape));
    if (n->n_in > 2 && n->in[2] != HP_TID_NONE) {
        const hp_tensor *r = hp_graph_tensor(g, n->in[2]);
        if (r->dtype != HP_DTYPE_I32 || hp_shape_numel(&r->shape) != 1)
            return hp_error(HP_STATUS_SHAPE, "row offset must be an i32 scalar, is %s %s", hp_dtype_name(r->dtype),
                            hp__shape_s(&r->shape));
    }
    float p = n->attr.f[0];
    if (!(p >= 0.0f && p < 1.0f)) return hp_error(HP_STATUS_INVALID_ARGUMENT, "p %g must be in [0, 1)", (double)p);
    const hp_shape *gs = &n->attr.shape;
    if (x->shape.ndim > DROPOUT_MAX_DIMS)
        return hp_error(HP_STATUS_UNSUPPORTED, "x %s has more than %d dimensions", hp__shape_s(&x->shape),
                        DROPOUT_MAX_DIMS);
    if (gs->ndim != x->shape.ndim)
        return hp_error(HP_STATUS_SHAPE, "global shape %s does not match x %s", hp__shape_s(gs), hp__shape_s(&x->shape));
    for (int d = 0; d < gs->ndim; d++) {
        int64_t off = n->attr.i[1 + d];
        if (off < 0 || off + x->shape.dim[d] > gs->dim[d])
            return hp_error(HP_STATUS_SHAPE, "block of x %s at offset %lld in dim %d is outside the global shape %s",
                            hp__shape_s(&x->shape), (long long)off, d, hp__shape_s(gs));
    }
    dt[0] = HP_DTYPE_F32;
    s[0] = x->shape;
    return HP_STATUS_OK;
}

/* dx = dropout(dy) with the same key, step and offsets: the same mask and scale. */
static hp_status dropout_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    const hp_node *n = hp_graph_node(g, node);
    if (need[0] && dout[0] != HP_TID_NONE) {
        hp_attrs at = n->attr;
        hp_tid in[3] = {dout[0], n->in[1], n->n_in > 2 ? n->in[2] : HP_TID_NONE};
        din[0] = hp_graph_add_node(g, HP_OP_DROPOUT, in, n->n_in > 2 ? 3 : 2, &at);
    }
    return hp_graph_status(g);
}

/* One hash (two SplitMix64 rounds, ~12 integer ops) and a multiply per element. */
static void dropout_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 14.0, c); }

/*
 * Any layout passes through, pending reductions included: y = mask * x / (1 - p) is linear in x
 * with a nonnegative per-element factor, so it commutes with sum, avg, max and min over partial
 * values, and the mask depends only on the global element index, which the partial ranks share.
 * The rule gives this rank's node the global offsets of its block.
 */
static hp_status dropout_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                               hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    const hp_shape *gs = hp__shp(c->g, n->in[0]);
    req[0] = in[0];
    req[1] = hp__lay_replicated(hp__shp(c->g, n->in[1])->ndim);
    if (n->n_in > 2 && n->in[2] != HP_TID_NONE) req[2] = hp__lay_replicated(hp__shp(c->g, n->in[2])->ndim);
    out[0] = in[0];
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
    HP_CHECK(hp_layout_slice_of(&out[0], c->mesh, gs, c->index, start, len));
    /* the block's offsets within the logical tensor, added to the logical node's own (a pipeline
     * stage's tensor is itself a block of the global batch) */
    for (int d = 0; d < gs->ndim && d < DROPOUT_MAX_DIMS; d++) local->i[1 + d] = n->attr.i[1 + d] + start[d];
    local->shape = n->attr.shape;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_dropout = {
    .name = "dropout",
    .min_in = 2,
    .max_in = 3,
    .n_out = 1,
    .infer = dropout_infer,
    .grad = dropout_grad,
    .cost = dropout_cost,
    .shard = dropout_shard,
};
