/*
 * Fused multi-head self-attention: ATTENTION (outputs o, lse) and ATTENTION_BACKWARD (outputs dq,
 * dk, dv), after FlashAttention (Dao et al. 2022): the forward keeps only o and the per-row
 * log-sum-exp of the scaled scores; the backward recomputes the probabilities from q, k and lse
 * block by block, so no (T, T) matrix per head outlives a kernel call.
 *
 * ATTENTION attrs: i[0] = n_head H, i[1] = causal (1/0), i[2] = kv_heads KV (0: KV = H), i[3] = the
 * causal offset (query row i sees key j when j <= i + offset: q_start - k_start of a ring step's
 * block pair; 0 for self-attention), i[4] = n (hp_attention_balanced: causal over a sequence in the
 * load-balanced ring order for n ranks; only ring attention's expansion runs it, into rectangles
 * with i[4] = 0; the CPU kernel refuses it).
 * q (B, T, H*D), k and v (B, Tk, KV*D) (Tk = T for self-attention; a ring step's block may differ;
 * a row that sees no key gets o = 0 and lse = -inf), heads interleaved as (H, D) in the last axis; o (B, T, H*D);
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
#include "ops/attention_ring.h"

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
    /* k and v may hold another number of rows than q (a ring step's key/value block) */
    const hp_shape *k = hp__shp(g, n->in[first + 1]);
    hp_shape kv = HP_SHAPE(q->dim[0], k->ndim == 3 ? k->dim[1] : q->dim[1], q->dim[2] / H * KV);
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

/* Score-matrix entries computed (causal: those with j <= i + offset). */
static double score_pairs(const hp_graph *g, const hp_node *n, int qi) {
    const hp_shape *q = hp__shp(g, n->in[qi]);
    int64_t T = q->dim[1], Tk = hp__shp(g, n->in[qi + 1])->dim[1], off = n->attr.i[3];
    double B = (double)q->dim[0], H = (double)n->attr.i[0], pairs = (double)T * (double)Tk;
    if (n->attr.i[1]) { /* sum over rows of clamp(i + off + 1, 0, Tk) */
        pairs = 0.0;
        for (int64_t i = 0; i < T; i++) {
            int64_t v = i + off + 1;
            pairs += (double)(v < 0 ? 0 : v > Tk ? Tk : v);
        }
    }
    return B * H * pairs;
}

/* The kernel class of input qi's attention: B x H score matrices of T x T, head dim D. */
static void attention_shape(const hp_graph *g, const hp_node *n, int qi, hp_op_cost *c) {
    const hp_shape *q = hp__shp(g, n->in[qi]);
    c->kind = HP_COST_ATTENTION;
    c->m = q->dim[1];
    c->n = hp__shp(g, n->in[qi + 1])->dim[1];
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
    int64_t T = hp__shp(g, n->in[qi])->dim[1], Tk = hp__shp(g, n->in[qi + 1])->dim[1];
    int64_t rows = T < HP_ATTN_BLOCK ? T : HP_ATTN_BLOCK;
    /* n_blocks (rows, Tk) score blocks + row sums / rowsum(dO o O) */
    size_t per_thread = (size_t)(n_blocks * rows * Tk + (T > Tk ? T : Tk)) * sizeof(float);
    per_thread = (per_thread + 63) & ~(size_t)63;
    return per_thread * (size_t)omp_get_max_threads();
}

static size_t attention_workspace(const hp_graph *g, const hp_node *n) { return workspace_common(g, n, 0, 1); }
static size_t attention_backward_workspace(const hp_graph *g, const hp_node *n) { return workspace_common(g, n, 1, 2); }

/* ---- sharding rules ---- */

/*
 * The layout attention runs in: q's, with pending sums resolved, and the head dim split only on
 * head boundaries (Megatron: heads per rank); with grouped-query attention also on kv-head
 * boundaries (k and v take the same layout: each rank holds the kv heads of its query heads).
 * Every query needs every key, so the sequence dim must be whole there: the mesh axes that split
 * the sequence move to the heads, appended after the head dim's own axes (Ulysses context
 * parallelism, Jacobs et al. 2023, "DeepSpeed Ulysses": each rank then holds whole sequences of
 * H / (tp * cp) heads, and the redistribution planner makes the move one all-to-all per tensor
 * and axis). Where the heads do not divide that way, the sequence is gathered instead, and where
 * they do not divide over the head dim's own axes either, the heads too (replicated attention).
 * Sets the local head counts. *home receives q's resolved layout: when it differs from the
 * attention layout in the sequence dim, the outputs like q are published back to it (the inverse
 * all-to-all), so the rest of the block keeps the sequence split the user declared.
 */
static hp_layout attn_layout(const hp_shard_ctx *c, const hp_node *n, int qi, const hp_layout *q, hp_attrs *local,
                             hp_layout *home) {
    const hp_shape *s = hp__shp(c->g, n->in[qi]);
    hp_layout r = hp__lay_resolve(c, q, NULL, s);
    *home = r;
    int64_t H = n->attr.i[0], KV = n->attr.i[2] ? n->attr.i[2] : H;
    if (c->ring && r.nmap[1] == 1) {
        /* Ring attention (attention_ring.c): the sequence stays split on its one axis and the node
         * expands into ring steps; the heads keep the head dim's own axes where they divide. */
        hp_layout u = r;
        int64_t shards = hp_layout_shards(&u, c->mesh, 2);
        if (shards > 1 && (H % shards != 0 || KV % shards != 0)) {
            hp__lay_unshard_dim(&u, 2);
            shards = 1;
        }
        local->i[0] = H / shards;
        local->i[2] = n->attr.i[2] ? KV / shards : 0;
        return u;
    }
    hp_layout u = r; /* Ulysses: the sequence axes go to the heads */
    for (int k = 0; k < r.nmap[1]; k++) u.map[2][u.nmap[2]++] = r.map[1][k];
    hp__lay_unshard_dim(&u, 1);
    int64_t shards = hp_layout_shards(&u, c->mesh, 2);
    if (shards > 1 && (H % shards != 0 || KV % shards != 0)) {
        u = r;
        hp__lay_unshard_dim(&u, 1);
        shards = hp_layout_shards(&u, c->mesh, 2);
        if (shards > 1 && (H % shards != 0 || KV % shards != 0)) {
            hp__lay_unshard_dim(&u, 2);
            shards = 1;
        }
    }
    local->i[0] = H / shards;
    local->i[2] = n->attr.i[2] ? KV / shards : 0;
    return u;
}

static hp_layout lse_layout(const hp_layout *q) {
    hp_layout l = hp__lay_replicated(3); /* (B, H, T) */
    hp__lay_copy_dim(&l, 0, q, 0);
    hp__lay_copy_dim(&l, 1, q, 2);
    hp__lay_copy_dim(&l, 2, q, 1); /* split only under ring attention */
    return l;
}

/* Outputs like q go back to q's sequence split when attention took it away (see attn_layout). */
static void publish_home(const hp_shard_ctx *c, const hp_layout *run, const hp_layout *home, int first, int count) {
    if (!c->publish || home->nmap[1] == 0 || hp_layout_equal(run, home)) return;
    for (int j = first; j < first + count; j++) c->publish[j] = *home;
}

static hp_status attention_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                 hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout home, q = attn_layout(c, n, 0, &in[0], local, &home);
    req[0] = req[1] = req[2] = q;
    out[0] = q;
    out[1] = lse_layout(&q);
    publish_home(c, &q, &home, 0, 1);
    return HP_STATUS_OK;
}

/* ATTENTION_BACKWARD(do, q, k, v, o, lse): everything in q's layout; dq, dk, dv too, published back
 * to q's sequence split. q, k, v and o are the forward's saved tensors: the forward's head-split
 * copies are reused (saved_inputs below), so Ulysses' backward moves only do, dq, dk and dv. */
static hp_status attention_backward_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in,
                                          hp_layout *req, hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    hp_layout home, q = attn_layout(c, n, 1, &in[1], local, &home);
    for (int i = 0; i < 5; i++) req[i] = q;
    req[5] = lse_layout(&q);
    out[0] = out[1] = out[2] = q;
    publish_home(c, &q, &home, 0, 3);
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_attention = {
    .name = "attention", .min_in = 3, .max_in = 3, .n_out = 2, .infer = attention_infer,
    .grad = attention_grad, .cost = attention_cost, .workspace = attention_workspace, .shard = attention_shard,
    .expand = hp__attention_ring_expand,
};
const hp_op_def hp__op_def_attention_backward = {
    .name = "attention_backward", .min_in = 6, .max_in = 6, .n_out = 3, .infer = attention_backward_infer,
    .cost = attention_backward_cost, .workspace = attention_backward_workspace,
    .shard = attention_backward_shard, .expand = hp__attention_backward_ring_expand,
    .saved_inputs = 0x3eu, /* q, k, v, o, lse */
};
