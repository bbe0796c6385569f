/*
 * The Switch/GShard load-balancing loss (Fedus et al. 2021, eq. 4; Lepikhin et al. 2020):
 *
 *   MOE_BALANCE_LOSS(probs (N, E), counts (E) i32; k = i[0], N = i[1]) -> scalar
 *       aux = E sum_e f_e P_e,  f_e = counts_e / (N k),  P_e = (1/N) sum_n probs[n, e]
 *   MOE_BALANCE_LOSS_BACKWARD(dl (), probs, counts; same attrs) -> dprobs (N, E) = dl E f_e / N
 *
 * f is a count (not differentiable); the gradient reaches the router through P. aux is 1 when both
 * are uniform. N in the attributes is the logical token count, so a rank holding some of the rows
 * computes its addend of the global sum.
 */
#include "ops/moe_rule.h"

hp_tid hp_moe_balance_loss(hp_graph *g, hp_tid probs, hp_tid counts, int k) {
    hp_attrs at = {0};
    at.i[0] = k;
    at.i[1] = probs != HP_TID_NONE && probs < hp_graph_n_tensors(g) ? hp__shp(g, probs)->dim[0] : 0;
    hp_tid in[2] = {probs, counts};
    return hp_graph_add_node(g, HP_OP_MOE_BALANCE_LOSS, in, 2, &at);
}

static hp_status check(const hp_graph *g, const hp_node *n, hp_tid probs, hp_tid counts) {
    HP_CHECK(hp__moe_mat(g, probs, HP_DTYPE_F32, "balance loss probs"));
    const hp_shape *ps = hp__shp(g, probs);
    const hp_tensor *c = hp_graph_tensor(g, counts);
    if (c->dtype != HP_DTYPE_I32 || c->shape.ndim != 1 || c->shape.dim[0] != ps->dim[1])
        return hp_error(HP_STATUS_SHAPE, "moe_balance_loss: counts must be i32 (E) = [%lld], is %s %s",
                        (long long)ps->dim[1], hp_dtype_name(c->dtype), hp__shape_s(&c->shape));
    if (n->attr.i[0] < 1 || n->attr.i[0] > ps->dim[1] || n->attr.i[1] < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_balance_loss: top_k %lld must be in [1, E %lld] and N %lld >= 1",
                        (long long)n->attr.i[0], (long long)ps->dim[1], (long long)n->attr.i[1]);
    return HP_STATUS_OK;
}

static hp_status balance_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check(g, n, n->in[0], n->in[1]));
    dt[0] = HP_DTYPE_F32;
    s[0] = HP_SHAPE_SCALAR;
    return HP_STATUS_OK;
}

static hp_status balance_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    HP_CHECK(check(g, n, n->in[1], n->in[2]));
    const hp_tensor *dl = hp_graph_tensor(g, n->in[0]);
    if (dl->dtype != HP_DTYPE_F32 || hp_shape_numel(&dl->shape) != 1)
        return hp_error(HP_STATUS_SHAPE, "moe_balance_loss_backward: dl must be an f32 scalar, is %s",
                        hp__shape_s(&dl->shape));
    dt[0] = HP_DTYPE_F32;
    s[0] = *hp__shp(g, n->in[1]);
    return HP_STATUS_OK;
}

static hp_status balance_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (need[0]) {
        hp_tid in[3] = {dout[0], n.in[0], n.in[1]};
        din[0] = hp_graph_add_node(g, HP_OP_MOE_BALANCE_LOSS_BACKWARD, in, 3, &n.attr);
    }
    return hp_graph_status(g);
}

/* Sharding rules: the rows of probs split any way (over axes A); counts resolved to the global loads
 * (replicated); the loss a pending sum over A, its gradient split like probs. */
static hp_status balance_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                               hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    bool fwd = n->op == HP_OP_MOE_BALANCE_LOSS;
    int p = fwd ? 0 : 1;
    hp_layout rows = hp__moe_rows(c, n, in, p, 2);
    if (!fwd) req[0] = hp__lay_replicated(hp__shp(c->g, n->in[0])->ndim);
    req[p] = rows;
    req[p + 1] = hp__lay_replicated(1);
    if (fwd) {
        hp_layout o = hp__lay_replicated(0);
        uint32_t axes = hp__lay_dim_axes(&rows, 0);
        if (axes) hp__lay_set_partial(&o, axes, HP_REDUCE_SUM);
        out[0] = o;
    } else {
        out[0] = rows;
    }
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_moe_balance_loss = {
    .name = "moe_balance_loss", .min_in = 2, .max_in = 2, .n_out = 1, .infer = balance_infer,
    .grad = balance_grad, .shard = balance_shard,
};
const hp_op_def hp__op_def_moe_balance_loss_backward = {
    .name = "moe_balance_loss_backward", .min_in = 3, .max_in = 3, .n_out = 1, .infer = balance_backward_infer,
    .shard = balance_shard,
};
