/*
 * EMBEDDING (row gather) and EMBEDDING_BACKWARD (scatter-add of output-gradient rows into a
 * table-shaped gradient). Inputs of EMBEDDING: table (V, C) f32, ids (...) i32 -> (..., C).
 * EMBEDDING_BACKWARD: dy (..., C), ids (...) -> (V, C), the table's shape carried in attr.shape
 * (no data dependence on the table, so sharding never moves the table for its shape).
 */
#include "ops/op.h"

hp_tid hp_embedding(hp_graph *g, hp_tid table, hp_tid ids) {
    hp_tid in[2] = {table, ids};
    return hp_graph_add_node(g, HP_OP_EMBEDDING, in, 2, NULL);
}

static hp_status check_table_ids(const hp_graph *g, hp_tid table, hp_tid ids) {
    if (table == HP_TID_NONE || ids == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "table and ids are required");
    const hp_tensor *t = hp_graph_tensor(g, table), *d = hp_graph_tensor(g, ids);
    if (t->dtype != HP_DTYPE_F32 || t->shape.ndim != 2)
        return hp_error(HP_STATUS_SHAPE, "table must be f32 (V, C), is %s %s", hp_dtype_name(t->dtype),
                        hp__shape_s(&t->shape));
    if (d->dtype != HP_DTYPE_I32)
        return hp_error(HP_STATUS_SHAPE, "ids must be i32, are %s %s", hp_dtype_name(d->dtype), hp__shape_s(&d->shape));
    if (d->shape.ndim >= HP_MAX_DIMS)
        return hp_error(HP_STATUS_SHAPE, "ids %s have too many dims for an (..., C) output", hp__shape_s(&d->shape));
    return HP_STATUS_OK;
}

/* (..., C) from ids (...) and table (V, C). */
static hp_shape rows_shape(const hp_shape *ids, int64_t c) {
    hp_shape s = *ids;
    s.dim[s.ndim++] = c;
    return s;
}

static hp_status embedding_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check_table_ids(g, n->in[0], n->in[1]));
    dt[0] = HP_DTYPE_F32;
    s[0] = rows_shape(hp__shp(g, n->in[1]), hp__shp(g, n->in[0])->dim[1]);
    return HP_STATUS_OK;
}

static hp_status embedding_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_shape *tab = &n->attr.shape;
    if (tab->ndim != 2) return hp_error(HP_STATUS_SHAPE, "table shape %s is not (V, C)", hp__shape_s(tab));
    const hp_tensor *dy = hp_graph_tensor(g, n->in[0]), *ids = hp_graph_tensor(g, n->in[1]);
    if (ids->dtype != HP_DTYPE_I32) return hp_error(HP_STATUS_SHAPE, "ids must be i32, are %s", hp_dtype_name(ids->dtype));
    hp_shape want = rows_shape(&ids->shape, tab->dim[1]);
    if (dy->dtype != HP_DTYPE_F32 || !hp_shape_equal(&dy->shape, &want))
        return hp_error(HP_STATUS_SHAPE, "dy is %s %s, expected f32 %s (ids %s, table %s)", hp_dtype_name(dy->dtype),
                        hp__shape_s(&dy->shape), hp__shape_s(&want), hp__shape_s(&ids->shape), hp__shape_s(tab));
    dt[0] = HP_DTYPE_F32;
    s[0] = *tab;
    return HP_STATUS_OK;
}

static hp_status embedding_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) {
        hp_tid in[2] = {dout[0], n.in[1]};
        hp_attrs at = {0};
        at.shape = *hp__shp(g, n.in[0]);
        din[0] = hp_graph_add_node(g, HP_OP_EMBEDDING_BACKWARD, in, 2, &at);
    }
    return hp_graph_status(g); /* ids are integers: no gradient */
}

/* Gather: no flops; reads the ids and the gathered rows (not the whole table). */
static void embedding_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double out = (double)hp_shape_numel(hp__shp(g, n->out[0])) * 4.0;
    c->bytes_read = (double)hp_shape_numel(hp__shp(g, n->in[1])) * 4.0 + out;
}

/* Scatter-add: one add per dy element; reads dy and ids, writes the whole table gradient. */
static void embedding_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double e = (double)hp_shape_numel(hp__shp(g, n->in[0]));
    c->flops = e;
    c->bytes_read = e * 4.0 + (double)hp_shape_numel(hp__shp(g, n->in[1])) * 4.0;
}

/* ---- sharding rules ---- */

/* EMBEDDING: the table's rows stay whole (an FSDP-split table is gathered before use); its column
 * split carries to the output's last dim, the ids' splits to the output's leading dims. */
static hp_status embedding_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                 hp_layout *out, hp_attrs *local, bool *drop) {
    (void)n, (void)local, (void)drop;
    hp_layout t = in[0], ids = in[1];
    if (t.partial) t = hp__lay_replicated(2);
    hp__lay_unshard_dim(&t, 0);
    hp__lay_drop_axes(&t, hp__lay_all_axes(&ids));
    req[0] = t;
    req[1] = ids;
    hp_layout o = hp__lay_replicated(ids.ndim + 1);
    for (int d = 0; d < ids.ndim; d++) hp__lay_copy_dim(&o, d, &ids, d);
    hp__lay_copy_dim(&o, ids.ndim, &t, 1);
    out[0] = o;
    (void)c;
    return HP_STATUS_OK;
}

/* EMBEDDING_BACKWARD: rows scattered from a split batch leave a pending sum over those axes; the
 * column split of dy carries to the table gradient's columns. */
static hp_status embedding_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in,
                                          hp_layout *req, hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout dy = in[0];
    if (dy.partial && dy.partial_op != HP_REDUCE_SUM) dy = hp__lay_resolve(c, &dy, NULL, hp__shp(c->g, n->in[0]));
    int lead = dy.ndim - 1;
    hp_layout ids = hp__lay_replicated(lead);
    uint32_t summed = 0;
    for (int d = 0; d < lead; d++) {
        hp__lay_copy_dim(&ids, d, &dy, d);
        summed |= hp__lay_dim_axes(&dy, d);
    }
    req[0] = dy;
    req[1] = ids;
    hp_layout o = hp__lay_replicated(2);
    hp__lay_copy_dim(&o, 1, &dy, lead);
    hp__lay_set_partial(&o, dy.partial | summed, HP_REDUCE_SUM);
    out[0] = o;
    return hp_layout_local_shape(&o, c->mesh, &n->attr.shape, c->index, &local->shape);
}

const hp_op_def hp__op_def_embedding = {
    .name = "embedding",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = embedding_infer,
    .grad = embedding_grad,
    .cost = embedding_cost,
    .shard = embedding_shard,
};
const hp_op_def hp__op_def_embedding_backward = {
    .name = "embedding_backward",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = embedding_backward_infer,
    .cost = embedding_backward_cost,
    .shard = embedding_backward_shard,
};
