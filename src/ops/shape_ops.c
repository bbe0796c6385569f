/* Data-movement operators: RESHAPE, TRANSPOSE, SLICE, PAD, CONCAT. */
#include "ops/op.h"

/* ---- sharding rules ---- */

/*
 * RESHAPE: dims are matched in groups of equal element count (row-major). A group keeps its split
 * when only its outermost input dim is split and both outermost dims divide evenly by the shard
 * count (the blocks are then the same contiguous runs); any other split group is gathered first.
 */
static hp_status reshape_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                               hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    const hp_shape *si = hp__shp(c->g, n->in[0]), *so = &n->attr.shape;
    hp_layout r = in[0], o = hp__lay_replicated(so->ndim);
    int i = 0, k = 0;
    while (i < si->ndim || k < so->ndim) {
        int i0 = i, k0 = k;
        int64_t pi = i < si->ndim ? si->dim[i++] : 1, po = k < so->ndim ? so->dim[k++] : 1;
        while (pi != po) {
            if (pi < po && i < si->ndim) pi *= si->dim[i++];
            else if (po < pi && k < so->ndim) po *= so->dim[k++];
            else break;
        }
        bool inner_split = false;
        for (int d = i0 + 1; d < i; d++) inner_split |= r.nmap[d] > 0;
        int64_t shards = i0 < si->ndim ? hp_layout_shards(&r, c->mesh, i0) : 1;
        if (i0 < i && k0 < k && !inner_split && shards > 1 && si->dim[i0] % shards == 0 && so->dim[k0] % shards == 0)
            hp__lay_copy_dim(&o, k0, &r, i0);
        else
            for (int d = i0; d < i; d++) hp__lay_unshard_dim(&r, d);
    }
    req[0] = r;
    o.partial = r.partial;
    o.partial_op = r.partial_op;
    out[0] = o;
    return hp_layout_local_shape(&o, c->mesh, so, c->index, &local->shape);
}

/* TRANSPOSE: the splits move with the dims. */
static hp_status transpose_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                 hp_layout *out, hp_attrs *local, bool *drop) {
    (void)c, (void)req, (void)local, (void)drop;
    int nd = in[0].ndim;
    int d0 = hp__axis((int)n->attr.i[0], nd), d1 = hp__axis((int)n->attr.i[1], nd);
    hp_layout o = in[0];
    hp__lay_copy_dim(&o, d0, &in[0], d1);
    hp__lay_copy_dim(&o, d1, &in[0], d0);
    out[0] = o;
    return HP_STATUS_OK;
}

/* SLICE, PAD: the sliced / padded dim must be whole; other splits and pending sums pass. */
static hp_status slice_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                             hp_layout *out, hp_attrs *local, bool *drop) {
    (void)c, (void)local, (void)drop;
    hp_layout r = in[0];
    hp__lay_unshard_dim(&r, hp__axis((int)n->attr.i[0], r.ndim));
    req[0] = r;
    out[0] = r;
    return HP_STATUS_OK;
}

/* CONCAT: every input in the first input's layout with the concatenated dim whole. */
static hp_status concat_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    hp_layout r = hp__lay_resolve(c, &in[0], NULL, hp__shp(c->g, n->in[0]));
    hp__lay_unshard_dim(&r, hp__axis((int)n->attr.i[0], r.ndim));
    for (int i = 0; i < n->n_in; i++) req[i] = r;
    out[0] = r;
    return HP_STATUS_OK;
}

hp_tid hp_reshape(hp_graph *g, hp_tid a, hp_shape shape) {
    hp_attrs at = {0};
    at.shape = shape;
    return hp_graph_add_node(g, HP_OP_RESHAPE, &a, 1, &at);
}

static hp_status reshape_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_shape *a = hp__shp(g, n->in[0]);
    if (hp_shape_numel(a) != hp_shape_numel(&n->attr.shape))
        return hp_error(HP_STATUS_SHAPE, "cannot reshape %s (%lld elements) to %s (%lld elements)", hp__shape_s(a),
                        (long long)hp_shape_numel(a), hp__shape_s(&n->attr.shape),
                        (long long)hp_shape_numel(&n->attr.shape));
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = n->attr.shape;
    return HP_STATUS_OK;
}

static hp_status reshape_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_tid in = hp_graph_node(g, node)->in[0];
    if (need[0]) din[0] = hp_reshape(g, dout[0], *hp__shp(g, in));
    return hp_graph_status(g);
}

/* The runtime usually makes the output a view of the input (hp_program_opts.view_reshape): no kernel.
 * The bytes are those of the copy it makes otherwise. */
static void reshape_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    c->kind = HP_COST_VIEW;
}

const hp_op_def hp__op_def_reshape = {
    .name = "reshape",
    .cost = reshape_cost,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = reshape_infer,
    .grad = reshape_grad,
    .shard = reshape_shard,
};

/* ---- shared checks ---- */

/* Normalized axis of `s` (negative counts from the end), or an HP_STATUS_SHAPE error naming it. */
static hp_status axis_of(int64_t axis, const hp_shape *s, int *out) {
    int ax = axis < -s->ndim || axis >= s->ndim ? -1 : hp__axis((int)axis, s->ndim);
    if (ax < 0) return hp_error(HP_STATUS_SHAPE, "axis %lld out of range for %s", (long long)axis, hp__shape_s(s));
    *out = ax;
    return HP_STATUS_OK;
}

static hp_status present(const hp_node *n, int i) {
    if (n->in[i] == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "input %d is required", i);
    return HP_STATUS_OK;
}

/* Pure data movement: no flops, bytes of inputs read and outputs written. */
static void move_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 0.0, c); }

/* ---- TRANSPOSE: swap axes i[0], i[1] ---- */

hp_tid hp_transpose(hp_graph *g, hp_tid a, int d0, int d1) {
    hp_attrs at = {0};
    at.i[0] = d0;
    at.i[1] = d1;
    return hp_graph_add_node(g, HP_OP_TRANSPOSE, &a, 1, &at);
}

static hp_status transpose_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(present(n, 0));
    const hp_shape *a = hp__shp(g, n->in[0]);
    int d0 = 0, d1 = 0;
    HP_CHECK(axis_of(n->attr.i[0], a, &d0));
    HP_CHECK(axis_of(n->attr.i[1], a, &d1));
    hp_shape r = *a;
    r.dim[d0] = a->dim[d1];
    r.dim[d1] = a->dim[d0];
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = r;
    return HP_STATUS_OK;
}

static hp_status transpose_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) din[0] = hp_transpose(g, dout[0], (int)n.attr.i[0], (int)n.attr.i[1]);
    return hp_graph_status(g);
}

/* ---- SLICE: a[..., start:start+len, ...] along axis i[0], start i[1], length i[2] ---- */

hp_tid hp_slice(hp_graph *g, hp_tid a, int axis, int64_t start, int64_t len) {
    hp_attrs at = {0};
    at.i[0] = axis;
    at.i[1] = start;
    at.i[2] = len;
    return hp_graph_add_node(g, HP_OP_SLICE, &a, 1, &at);
}

static hp_status slice_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(present(n, 0));
    const hp_shape *a = hp__shp(g, n->in[0]);
    int ax = 0;
    HP_CHECK(axis_of(n->attr.i[0], a, &ax));
    int64_t start = n->attr.i[1], len = n->attr.i[2];
    if (start < 0 || len < 1 || start + len > a->dim[ax])
        return hp_error(HP_STATUS_SHAPE, "slice [%lld, %lld) of axis %d is outside %s", (long long)start,
                        (long long)(start + len), ax, hp__shape_s(a));
    hp_shape r = *a;
    r.dim[ax] = len;
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = r;
    return HP_STATUS_OK;
}

static hp_status slice_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    const hp_shape *a = hp__shp(g, n.in[0]);
    int ax = hp__axis((int)n.attr.i[0], a->ndim);
    if (need[0]) din[0] = hp_pad(g, dout[0], ax, n.attr.i[1], a->dim[ax]);
    return hp_graph_status(g);
}

/* ---- PAD: zero-pad axis i[0] to length i[2], the input placed at offset i[1] ---- */

hp_tid hp_pad(hp_graph *g, hp_tid a, int axis, int64_t start, int64_t full) {
    hp_attrs at = {0};
    at.i[0] = axis;
    at.i[1] = start;
    at.i[2] = full;
    return hp_graph_add_node(g, HP_OP_PAD, &a, 1, &at);
}

static hp_status pad_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(present(n, 0));
    const hp_shape *a = hp__shp(g, n->in[0]);
    int ax = 0;
    HP_CHECK(axis_of(n->attr.i[0], a, &ax));
    int64_t start = n->attr.i[1], full = n->attr.i[2];
    if (start < 0 || start + a->dim[ax] > full)
        return hp_error(HP_STATUS_SHAPE, "pad of %s at offset %lld on axis %d does not fit length %lld", hp__shape_s(a),
                        (long long)start, ax, (long long)full);
    hp_shape r = *a;
    r.dim[ax] = full;
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = r;
    return HP_STATUS_OK;
}

static hp_status pad_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    const hp_shape *a = hp__shp(g, n.in[0]);
    int ax = hp__axis((int)n.attr.i[0], a->ndim);
    if (need[0]) din[0] = hp_slice(g, dout[0], ax, n.attr.i[1], a->dim[ax]);
    return hp_graph_status(g);
}

/* ---- CONCAT: n inputs along axis i[0] ---- */

hp_tid hp_concat(hp_graph *g, const hp_tid *xs, int n, int axis) {
    if (n < 1 || n > HP_MAX_NODE_INPUTS) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "concat takes 1 to %d tensors, got %d", HP_MAX_NODE_INPUTS, n);
        return HP_TID_NONE;
    }
    hp_attrs at = {0};
    at.i[0] = axis;
    return hp_graph_add_node(g, HP_OP_CONCAT, xs, n, &at);
}

static hp_status concat_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    for (int i = 0; i < n->n_in; i++) HP_CHECK(present(n, i));
    const hp_shape *a = hp__shp(g, n->in[0]);
    hp_dtype d = hp_graph_tensor(g, n->in[0])->dtype;
    int ax = 0;
    HP_CHECK(axis_of(n->attr.i[0], a, &ax));
    hp_shape r = *a;
    for (int i = 1; i < n->n_in; i++) {
        const hp_shape *b = hp__shp(g, n->in[i]);
        bool ok = b->ndim == a->ndim && hp_graph_tensor(g, n->in[i])->dtype == d;
        for (int k = 0; ok && k < a->ndim; k++) ok = k == ax || b->dim[k] == a->dim[k];
        if (!ok)
            return hp_error(HP_STATUS_SHAPE, "input %d %s %s does not match input 0 %s %s except on axis %d", i,
                            hp_dtype_name(hp_graph_tensor(g, n->in[i])->dtype), hp__shape_s(b), hp_dtype_name(d),
                            hp__shape_s(a), ax);
        r.dim[ax] += b->dim[ax];
    }
    dt[0] = d;
    s[0] = r;
    return HP_STATUS_OK;
}

static hp_status concat_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    int ax = hp__axis((int)n.attr.i[0], hp__shp(g, n.in[0])->ndim);
    int64_t off = 0;
    for (int i = 0; i < n.n_in; i++) {
        int64_t len = hp__shp(g, n.in[i])->dim[ax];
        if (need[i]) din[i] = hp_slice(g, dout[0], ax, off, len);
        off += len;
    }
    return hp_graph_status(g);
}

const hp_op_def hp__op_def_transpose = {
    .name = "transpose",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = transpose_infer,
    .grad = transpose_grad,
    .cost = move_cost,
    .shard = transpose_shard,
};
const hp_op_def hp__op_def_slice = {
    .name = "slice",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = slice_infer,
    .grad = slice_grad,
    .cost = move_cost,
    .shard = slice_shard,
};
const hp_op_def hp__op_def_pad = {
    .name = "pad",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = pad_infer,
    .grad = pad_grad,
    .cost = move_cost,
    .shard = slice_shard,
};
const hp_op_def hp__op_def_concat = {
    .name = "concat",
    .min_in = 1,
    .max_in = HP_MAX_NODE_INPUTS,
    .n_out = 1,
    .infer = concat_infer,
    .grad = concat_grad,
    .cost = move_cost,
    .shard = concat_shard,
};
