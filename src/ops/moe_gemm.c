/*
 * The grouped GEMM of the MoE experts (see hp/moe.h; MegaBlocks' grouped/block-sparse form,
 * Gale et al. 2023, without padding to blocks):
 *
 *   MOE_GEMM(x (R, K), w, counts (E) i32; trans_w = i[0]) -> y (R, N)
 *       trans_w = 1: w (E, N, K), y_e = x_e w[e]^T     (the forward, as LINEAR per expert)
 *       trans_w = 0: w (E, K, N), y_e = x_e w[e]       (the input gradient)
 *   MOE_GEMM_DW(dy (R, N), x (R, K), counts [, w]) -> dw (E, N, K), dw[e] = dy_e^T x_e
 *       (w, the forward's weight, is not read: its layout tells the sharding rule where the experts are)
 *
 * where x_e are the counts[e] consecutive rows of expert e (expert 0's first). The counts change
 * every step; the shapes do not. Gradients of the forward form: dx = MOE_GEMM(dy, w, 0),
 * dw = MOE_GEMM_DW(dy, x, counts).
 */
#include "ops/moe_rule.h"

hp_tid hp_moe_gemm(hp_graph *g, hp_tid x, hp_tid w, hp_tid counts, bool trans_w) {
    hp_attrs at = {0};
    at.i[0] = trans_w;
    hp_tid in[3] = {x, w, counts};
    return hp_graph_add_node(g, HP_OP_MOE_GEMM, in, 3, &at);
}

/* counts (E) i32 for E experts. */
static hp_status check_counts(const hp_graph *g, hp_tid counts, int64_t E) {
    if (counts == HP_TID_NONE) return hp_error(HP_STATUS_SHAPE, "grouped gemm: counts is required");
    const hp_tensor *c = hp_graph_tensor(g, counts);
    if (c->dtype != HP_DTYPE_I32 || c->shape.ndim != 1 || c->shape.dim[0] != E)
        return hp_error(HP_STATUS_SHAPE, "grouped gemm: counts must be i32 (E) = [%lld], is %s %s", (long long)E,
                        hp_dtype_name(c->dtype), hp__shape_s(&c->shape));
    return HP_STATUS_OK;
}

static hp_status gemm_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(hp__moe_mat(g, n->in[0], HP_DTYPE_F32, "grouped gemm x"));
    const hp_tensor *w = hp_graph_tensor(g, n->in[1]);
    if (w->dtype != HP_DTYPE_F32 || w->shape.ndim != 3)
        return hp_error(HP_STATUS_SHAPE, "grouped gemm: w must be f32 (E, N, K), is %s %s", hp_dtype_name(w->dtype),
                        hp__shape_s(&w->shape));
    HP_CHECK(check_counts(g, n->in[2], w->shape.dim[0]));
    const hp_shape *xs = hp__shp(g, n->in[0]);
    bool tw = n->attr.i[0] != 0;
    int64_t K = w->shape.dim[tw ? 2 : 1], N = w->shape.dim[tw ? 1 : 2];
    if (xs->dim[1] != K)
        return hp_error(HP_STATUS_SHAPE, "grouped gemm: x %s has K = %lld but w %s%s has K = %lld", hp__shape_s(xs),
                        (long long)xs->dim[1], hp__shape_s(&w->shape), tw ? " (E, N, K)" : " (E, K, N)", (long long)K);
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE(xs->dim[0], N);
    return HP_STATUS_OK;
}

static hp_status gemm_dw_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    if (n->n_in > 3 && n->in[3] != HP_TID_NONE && hp_graph_tensor(g, n->in[3])->shape.ndim != 3)
        return hp_error(HP_STATUS_SHAPE, "grouped gemm dw: w must be (E, N, K), is %s", hp__shape_s(hp__shp(g, n->in[3])));
    HP_CHECK(hp__moe_mat(g, n->in[0], HP_DTYPE_F32, "grouped gemm dy"));
    HP_CHECK(hp__moe_mat(g, n->in[1], HP_DTYPE_F32, "grouped gemm x"));
    const hp_shape *dy = hp__shp(g, n->in[0]), *xs = hp__shp(g, n->in[1]);
    if (dy->dim[0] != xs->dim[0])
        return hp_error(HP_STATUS_SHAPE, "grouped gemm dw: dy %s and x %s differ in rows", hp__shape_s(dy),
                        hp__shape_s(xs));
    const hp_tensor *c = hp_graph_tensor(g, n->in[2]);
    if (c->shape.ndim != 1) return hp_error(HP_STATUS_SHAPE, "grouped gemm dw: counts must be (E)");
    HP_CHECK(check_counts(g, n->in[2], c->shape.dim[0]));
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE(c->shape.dim[0], dy->dim[1], xs->dim[1]);
    return HP_STATUS_OK;
}

static hp_status gemm_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (n.attr.i[0] == 0)
        return hp_error(HP_STATUS_UNSUPPORTED, "grouped gemm: only the trans_w form (the forward) has a gradient rule");
    if (need[0]) din[0] = hp_moe_gemm(g, dout[0], n.in[1], n.in[2], false);
    if (need[1]) {
        hp_tid in[4] = {dout[0], n.in[0], n.in[2], n.in[1]};
        din[1] = hp_graph_add_node(g, HP_OP_MOE_GEMM_DW, in, 4, NULL);
    }
    return hp_graph_status(g);
}

/* All experts together do one (R x K) (K x N) product's work, in E smaller products. */
static void gemm_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    const hp_shape *x = hp__shp(g, n->in[0]), *y = hp__shp(g, n->out[0]);
    c->flops = 2.0 * (double)x->dim[0] * (double)x->dim[1] * (double)y->dim[1];
    c->kind = HP_COST_GEMM;
    c->m = x->dim[0];
    c->n = y->dim[1];
    c->k = x->dim[1];
    c->batch = 1;
}
static void gemm_dw_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    const hp_shape *dy = hp__shp(g, n->in[0]), *x = hp__shp(g, n->in[1]);
    c->flops = 2.0 * (double)dy->dim[0] * (double)dy->dim[1] * (double)x->dim[1];
    c->kind = HP_COST_GEMM;
    c->m = dy->dim[1];
    c->n = x->dim[1];
    c->k = dy->dim[0];
    c->batch = 1;
    c->trans_a = true;
}

/*
 * Expert parallelism: the axis `a` when the expert weights' experts dim (dim 0 of `w`) is split
 * over exactly one mesh axis that also splits the token rows (the last of their axes, so the rows
 * of one group of the other axes stay together); -1 otherwise (data parallelism). The other two
 * dims may be split over axes that do not split the rows (TP-EP: each expert's F over tp).
 */
static int ep_axis(const hp_layout *w, const hp_layout *rows) {
    if (w->ndim != 3 || w->nmap[0] != 1 || w->partial || rows->nmap[0] < 1) return -1;
    int a = w->map[0][0];
    uint32_t row_axes = hp__lay_dim_axes(rows, 0);
    if ((hp__lay_dim_axes(w, 1) | hp__lay_dim_axes(w, 2)) & row_axes) return -1;
    return rows->map[0][rows->nmap[0] - 1] == a ? a : -1;
}

/*
 * The rows of an expert-parallel grouped GEMM: split like the token rows, the last axis (ep)
 * ragged by the counts (each rank holds its experts' rows from every rank of its ep group), dim 1
 * split like weight dim `wdim` (TP-EP: the F dim of the expert), and the counts it needs: each
 * expert's rows on the ep group, i.e. the loads split over ep like the experts and still pending
 * over the other token axes (a reduce-scatter over ep of the addends).
 */
static void ep_layouts(const hp_node *n, const hp_layout *rows_in, int a, const hp_layout *w, int wdim,
                       hp_layout *rows, hp_layout *counts) {
    *rows = hp__moe_rows_like(rows_in, 2);
    hp__lay_copy_dim(rows, 1, w, wdim);
    rows->ragged = 1u << a;
    rows->ragged_by = n->in[2];
    *counts = hp__lay_replicated(1);
    counts->nmap[0] = 1;
    counts->map[0][0] = a;
    hp__lay_set_partial(counts, hp__lay_dim_axes(rows, 0) & ~(1u << a), HP_REDUCE_SUM);
}

/*
 * Sharding rules. Data parallelism (expert weights whole): each rank multiplies its own rows (split
 * like x's rows over axes A) by the replicated weights, grouped by its own counts (the pending sum
 * over A as it is); the weight gradient is a pending sum over A. Expert parallelism (the weights'
 * experts dim over a token axis ep, ep_axis): the rows are brought to their experts' ranks (a
 * ragged split, whose redistribution is the all-to-all-v), each rank multiplies the rows of its
 * experts by its block of the weights, and the weight gradient is that block, pending only over the
 * token axes other than ep (the ranks that replicate the expert). local i[1] = 1 tells the kernel
 * that rows past the counts are capacity.
 */
static hp_status gemm_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                            hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout rows = hp__moe_rows(c, n, in, 0, 2);
    int a = ep_axis(&in[1], &rows);
    if (a >= 0) { /* w (E, N, K) with trans_w, else (E, K, N): x's columns split like K, y's like N */
        const bool tw = n->attr.i[0] != 0;
        const int kdim = tw ? 2 : 1, ndim = tw ? 1 : 2;
        ep_layouts(n, &rows, a, &in[1], kdim, &req[0], &req[2]);
        req[1] = in[1];
        out[0] = req[0];
        hp__lay_copy_dim(&out[0], 1, &in[1], ndim);
        hp__lay_set_partial(&out[0], hp__lay_dim_axes(&in[1], kdim), HP_REDUCE_SUM); /* TP-EP's row-parallel sum */
        local->i[1] = 1;
        return HP_STATUS_OK;
    }
    uint32_t axes = hp__lay_dim_axes(&rows, 0);
    req[0] = rows;
    req[1] = hp__lay_replicated(3);
    req[2] = hp__moe_counts_layout(axes);
    out[0] = rows;
    return HP_STATUS_OK;
}

/* MOE_GEMM_DW's input 3 is the weight (not read: its layout tells the rule whether the experts are
 * split, and is dropped from the per-rank node). */
static hp_status gemm_dw_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                               hp_layout *out, hp_attrs *local, bool *drop) {
    hp_layout rows = hp__moe_rows(c, n, in, 1, 2);
    int a = n->n_in > 3 && n->in[3] != HP_TID_NONE ? ep_axis(&in[3], &rows) : -1;
    if (n->n_in > 3) drop[3] = true;
    if (a >= 0) { /* w (E, N, K): dy's columns split like N, x's like K, dw like w */
        ep_layouts(n, &rows, a, &in[3], 1, &req[0], &req[2]);
        req[1] = req[0];
        hp__lay_copy_dim(&req[1], 1, &in[3], 2);
        req[3] = in[3];
        hp_layout o = in[3];
        hp__lay_set_partial(&o, hp__lay_dim_axes(&rows, 0) & ~(1u << a), HP_REDUCE_SUM);
        out[0] = o;
        local->i[1] = 1;
        return HP_STATUS_OK;
    }
    uint32_t axes = hp__lay_dim_axes(&rows, 0);
    req[0] = req[1] = rows;
    req[2] = hp__moe_counts_layout(axes);
    hp_layout o = hp__lay_replicated(3);
    if (axes) hp__lay_set_partial(&o, axes, HP_REDUCE_SUM);
    out[0] = o;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_moe_gemm = {
    .name = "moe_gemm", .min_in = 3, .max_in = 3, .n_out = 1, .infer = gemm_infer, .grad = gemm_grad,
    .cost = gemm_cost, .shard = gemm_shard,
};
const hp_op_def hp__op_def_moe_gemm_dw = {
    .name = "moe_gemm_dw", .min_in = 3, .max_in = 4, .n_out = 1, .infer = gemm_dw_infer, .cost = gemm_dw_cost,
    .shard = gemm_dw_shard, .saved_inputs = 1u << 1, /* x: the forward's exchanged rows */
};
