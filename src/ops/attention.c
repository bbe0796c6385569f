/*
 * Fused multi-head self-attention: ATTENTION (outputs o, lse) and ATTENTION_BACKWARD (outputs dq,
 * dk, dv), after FlashAttention (Dao et al. 2022): the forward keeps only o and the per-row
 * log-sum-exp of the scaled scores; the backward recomputes the probabilities from q, k and lse
 * block by block, so no (T, T) matrix per head outlives a kernel call.
 *
 * ATTENTION attrs: i[0] = n_head H, i[1] = causal (1/0), i[2] = kv_heads KV (0: KV = H).
 * q (B, T, H*D), k and v (B, T, KV*D), heads interleaved as (H, D) in the last axis; o (B, T, H*D);
 * lse (B, H, T) f32. Scale 1/sqrt(D) on the scores. Grouped-query attention (Ainslie et al. 2023):
 * KV divides H and query head h reads key/value head h / (H / KV), as Hugging Face's repeat_kv;
 * KV = 1 is multi-query attention (Shazeer 2019).
 * ATTENTION_BACKWARD(do, q, k, v, o, lse), same attrs -> dq (like q), dk, dv (like k).
 *
 * Workspace: the CPU kernel processes query blocks of HP_ATTN_BLOCK rows; each thread holds the
 * block's scores against all T keys (forward: one block x T floats plus the rows' sums; backward:
 * two blocks plus T floats of rowsum(dO * O)). The rule below sizes it for omp_get_max_threads()
 * threads at program build; the kernels never use more threads than the workspace holds.
 */
#include "ops/op.h"

#include <omp.h>

/* Query rows per block of the CPU kernels; the same constant in k_attention.c. */
#ifndef HP_ATTN_BLOCK
#define HP_ATTN_BLOCK 64
#endif

hp_tid hp_attention(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, bool causal) {
    return hp_attention_gqa(g, q, k, v, n_head, 0, causal);
}

hp_tid hp_attention_gqa(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, int kv_heads, bool causal) {
    hp_attrs at = {0};
    at.i[0] = n_head;
    at.i[1] = causal;
    at.i[2] = kv_heads == n_head ? 0 : kv_heads;
    hp_tid in[3] = {q, k, v};
    return hp_graph_add_node(g, HP_OP_ATTENTION, in, 3, &at);
}

static hp_status check_qkv(const hp_graph *g, const hp_node *n, int first, int64_t *B, int64_t *T, int64_t *C) {
    const char *names[3] = {"q", "k", "v"};
    const hp_shape *q = hp__shp(g, n->in[first]);
    *B = *T = *C = 0;
    int64_t H = n->attr.i[0], KV = n->attr.i[2] ? n->attr.i[2] : H;
    if (q->ndim != 3) return hp_error(HP_STATUS_SHAPE, "attention q must be (B, T, H*D), is %s", hp__shape_s(q));
    if (H <= 0 || q->dim[2] % H != 0)
        return hp_error(HP_STATUS_SHAPE, "attention: n_head %lld does not divide the channels of q %s", (long long)H,
                        hp__shape_s(q));
    if (KV <= 0 || H % KV != 0)
        return hp_error(HP_STATUS_SHAPE, "attention: kv_heads %lld does not divide n_head %lld", (long long)KV,
                        (long long)H);
    hp_shape kv = HP_SHAPE(q->dim[0], q->dim[1], q->dim[2] / H * KV);
    for (int i = 0; i < 3; i++) {
        const hp_tensor *t = hp_graph_tensor(g, n->in[first + i]);
        if (t->dtype != HP_DTYPE_F32) return hp_error(HP_STATUS_SHAPE, "attention %s must be f32", names[i]);
        if (t->shape.ndim != 3)
            return hp_error(HP_STATUS_SHAPE, "attention %s must be (B, T, H*D), is %s", names[i], hp__shape_s(&t->shape));
        if (!hp_shape_equal(&t->shape, i ? &kv : q))
            return hp_error(HP_STATUS_SHAPE, "attention %s must be %s for q %s and %lld kv heads, is %s", names[i],
                            hp__shape_s(i ? &kv : q), hp__shape_s(q), (long long)KV, hp__shape_s(&t->shape));
    }
    *B = q->dim[0];
    *T = q->dim[1];
    *C = q->dim[2];
    return HP_STATUS_OK;
}

static hp_status attention_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    int64_t B, T, C;
    HP_CHECK(check_qkv(g, n, 0, &B, &T, &C));
    dt[0] = dt[1] = HP_DTYPE_F32;
    s[0] = *hp__shp(g, n->in[0]);
    s[1] = HP_SHAPE(B, n->attr.i[0], T);
    return HP_STATUS_OK;
}

static hp_status attention_backward_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    int64_t B, T, C;
    HP_CHECK(check_qkv(g, n, 1, &B, &T, &C));
    const hp_shape *q = hp__shp(g, n->in[1]);
    for (int i = 0; i < 6; i += 4) {
        const hp_tensor *t = hp_graph_tensor(g, n->in[i]);
        if (t->dtype != HP_DTYPE_F32 || !hp_shape_equal(&t->shape, q))
            return hp_error(HP_STATUS_SHAPE, "attention backward: %s %s must be f32 like q %s", i ? "o" : "do",
                            hp__shape_s(&t->shape), hp__shape_s(q));
    }
    const hp_tensor *l = hp_graph_tensor(g, n->in[5]);
    hp_shape want = HP_SHAPE(B, n->attr.i[0], T);
    if (l->dtype != HP_DTYPE_F32 || !hp_shape_equal(&l->shape, &want))
        return hp_error(HP_STATUS_SHAPE, "attention backward: lse %s must be f32 %s", hp__shape_s(&l->shape),
                        hp__shape_s(&want));
    for (int j = 0; j < 3; j++) {
        dt[j] = HP_DTYPE_F32;
        s[j] = *hp__shp(g, n->in[1 + j]);
    }
    return HP_STATUS_OK;
}

static hp_status attention_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    /* The lse output is a statistic for the backward; a gradient flowing into it is not supported. */
    if (dout[1] != HP_TID_NONE)
        return hp_error(HP_STATUS_UNSUPPORTED, "attention: gradient with respect to the lse output is not supported");
    if (dout[0] == HP_TID_NONE || !(need[0] || need[1] || need[2])) return HP_STATUS_OK;
    hp_tid in[6] = {dout[0], n.in[0], n.in[1], n.in[2], n.out[0], n.out[1]};
    hp_graph_add_node(g, HP_OP_ATTENTION_BACKWARD, in, 6, &n.attr);
    if (hp_graph_status(g) != HP_STATUS_OK) return hp_graph_status(g);
    const hp_node *b = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    for (int i = 0; i < 3; i++)
        if (need[i]) din[i] = b->out[i];
    return HP_STATUS_OK;
}

/* Score-matrix entries computed (causal: the lower triangle with the diagonal). */
static double score_pairs(const hp_graph *g, const hp_node *n, int qi) {
    const hp_shape *q = hp__shp(g, n->in[qi]);
    double B = (double)q->dim[0], T = (double)q->dim[1], H = (double)n->attr.i[0];
    return B * H * (n->attr.i[1] ? T * (T + 1) / 2 : T * T);
}

/* The kernel class of input qi's attention: B x H score matrices of T x T, head dim D. */
static void attention_shape(const hp_graph *g, const hp_node *n, int qi, hp_op_cost *c) {
    const hp_shape *q = hp__shp(g, n->in[qi]);
    c->kind = HP_COST_ATTENTION;
    c->m = c->n = q->dim[1];
    c->k = q->dim[2] / n->attr.i[0];
    c->batch = q->dim[0] * n->attr.i[0];
}

static void attention_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double D = (double)hp__shp(g, n->in[0])->dim[2] / (double)n->attr.i[0];
    c->flops = 4.0 * score_pairs(g, n, 0) * D; /* QK^T and PV, 2 flops per multiply-add */
    attention_shape(g, n, 0, c);
}

static void attention_backward_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    double D = (double)hp__shp(g, n->in[1])->dim[2] / (double)n->attr.i[0];
    c->flops = 10.0 * score_pairs(g, n, 1) * D; /* QK^T again, dV, dP, dQ, dK */
    attention_shape(g, n, 1, c);
}

static size_t workspace_common(const hp_graph *g, const hp_node *n, int qi, int n_blocks) {
    int64_t T = hp__shp(g, n->in[qi])->dim[1];
    int64_t rows = T < HP_ATTN_BLOCK ? T : HP_ATTN_BLOCK;
    size_t per_thread = (size_t)(n_blocks * rows * T + T) * sizeof(float); /* + row sums / rowsum(dO o O) */
    per_thread = (per_thread + 63) & ~(size_t)63;
    return per_thread * (size_t)omp_get_max_threads();
}

static size_t attention_workspace(const hp_graph *g, const hp_node *n) { return workspace_common(g, n, 0, 1); }
static size_t attention_backward_workspace(const hp_graph *g, const hp_node *n) { return workspace_common(g, n, 1, 2); }

/* ---- sharding rules ---- */

/*
 * The layout attention runs in: q's, with pending sums resolved, the sequence whole (no context
 * parallelism yet) and the head dim split only on head boundaries (Megatron: heads per rank); with
 * grouped-query attention also on kv-head boundaries (k and v take the same layout: each rank holds
 * the kv heads of its query heads), else the heads are gathered (replicated attention). Sets the
 * local head counts.
 */
static hp_layout attn_layout(const hp_shard_ctx *c, const hp_node *n, int qi, const hp_layout *q, hp_attrs *local) {
    const hp_shape *s = hp__shp(c->g, n->in[qi]);
    hp_layout r = hp__lay_resolve(c, q, NULL, s);
    hp__lay_unshard_dim(&r, 1);
    int64_t H = n->attr.i[0], KV = n->attr.i[2] ? n->attr.i[2] : H, shards = hp_layout_shards(&r, c->mesh, 2);
    if (shards > 1 && (H % shards != 0 || KV % shards != 0)) {
        hp__lay_unshard_dim(&r, 2);
        shards = 1;
    }
    local->i[0] = H / shards;
    local->i[2] = n->attr.i[2] ? KV / shards : 0;
    return r;
}

static hp_layout lse_layout(const hp_layout *q) {
    hp_layout l = hp__lay_replicated(3); /* (B, H, T) */
    hp__lay_copy_dim(&l, 0, q, 0);
    hp__lay_copy_dim(&l, 1, q, 2);
    return l;
}

static hp_status attention_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                 hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout q = attn_layout(c, n, 0, &in[0], local);
    req[0] = req[1] = req[2] = q;
    out[0] = q;
    out[1] = lse_layout(&q);
    return HP_STATUS_OK;
}

/* ATTENTION_BACKWARD(do, q, k, v, o, lse): everything in q's layout; dq, dk, dv too. */
static hp_status attention_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in,
                                          hp_layout *req, hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout q = attn_layout(c, n, 1, &in[1], local);
    for (int i = 0; i < 5; i++) req[i] = q;
    req[5] = lse_layout(&q);
    out[0] = out[1] = out[2] = q;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_attention = {
    .name = "attention", .min_in = 3, .max_in = 3, .n_out = 2, .infer = attention_infer,
    .grad = attention_grad, .cost = attention_cost, .workspace = attention_workspace, .shard = attention_shard,
};
const hp_op_def hp__op_def_attention_backward = {
    .name = "attention_backward", .min_in = 6, .max_in = 6, .n_out = 3, .infer = attention_backward_infer,
    .cost = attention_backward_cost, .workspace = attention_backward_workspace,
    .shard = attention_backward_shard,
};
