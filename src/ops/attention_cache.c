/*
 * ATTENTION_CACHE: attention of new queries against a key/value cache, for incremental decoding
 * (the "KV cache" of autoregressive inference: Pope et al. 2022, "Efficiently Scaling Transformer
 * Inference"; Hugging Face's past_key_values). An inference operator: no gradient.
 *
 *   ATTENTION_CACHE(q (S, T, H*D), k (S, T, KV*D), v (S, T, KV*D),
 *                   k_cache (S, KV, T_max, D), v_cache (S, KV, T_max, D), positions (S, T) i32)
 *     attrs i[0] = H, i[2] = KV (0: KV = H)  ->  o (S, T, H*D)
 *
 * S is the number of cache slots (one per sequence), T the new tokens per slot in this run (the
 * prompt in a prefill, 1 in a decode step), T_max the cache length (the model's context). Row t of
 * slot s is the token at position p = positions[s, t]: first every row with p >= 0 writes its key
 * and value heads into k_cache[s, :, p, :] and v_cache[s, :, p, :] (in place), then its query
 * attends causally to the cache positions [0, p] of its slot: o = softmax(q K^T / sqrt(D)) V with
 * K, V = cache[s, h / (H / KV), 0..p]. A row with p = -1 is padding (slots with a shorter prompt,
 * or idle slots): it writes nothing and its output is zero. Positions must lie in [-1, T_max): the
 * kernel refuses others naming the slot, row and position. Grouped-query attention as ATTENTION.
 *
 * Cost: per row, 4 (p + 1) D flops per query head; bytes: the cache rows read (2 (p + 1) KV D)
 * are bounded by the whole cache (which is what the default counts).
 * Workspace: per thread one block of HP_ATTN_CACHE_BLOCK query rows times T_max scores.
 * Sharding rule: heads split for tensor parallelism (q on head boundaries, the caches' kv-head dim
 * and k, v by the same axes), slots (dim 0) split any way, positions follow the slots; the
 * sequence and T_max whole. Otherwise replicated.
 */
#include "ops/op.h"

#include <omp.h>

/* Query rows per block of the CPU kernel; the same constant in k_attention_cache.c. */
#define HP_ATTN_CACHE_BLOCK 32

hp_tid hp_attention_cache(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, hp_tid k_cache, hp_tid v_cache,
                          hp_tid positions, int n_head, int kv_heads) {
    hp_attrs at = {0};
    at.i[0] = n_head;
    at.i[2] = kv_heads == n_head ? 0 : kv_heads;
    hp_tid in[6] = {q, k, v, k_cache, v_cache, positions};
    return hp_graph_add_node(g, HP_OP_ATTENTION_CACHE, in, 6, &at);
}

static hp_status attention_cache_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const char *names[6] = {"q", "k", "v", "k_cache", "v_cache", "positions"};
    const hp_shape *q = hp__shp(g, n->in[0]);
    int64_t H = n->attr.i[0], KV = n->attr.i[2] ? n->attr.i[2] : H;
    if (q->ndim != 3) return hp_error(HP_STATUS_SHAPE, "attention_cache: q must be (S, T, H*D), is %s", hp__shape_s(q));
    if (H <= 0 || q->dim[2] % H != 0)
        return hp_error(HP_STATUS_SHAPE, "attention_cache: n_head %lld does not divide the channels of q %s",
                        (long long)H, hp__shape_s(q));
    if (KV <= 0 || H % KV != 0)
        return hp_error(HP_STATUS_SHAPE, "attention_cache: kv_heads %lld does not divide n_head %lld", (long long)KV,
                        (long long)H);
    const hp_shape *kc = hp__shp(g, n->in[3]);
    int64_t S = q->dim[0], T = q->dim[1], D = q->dim[2] / H;
    int64_t Tmax = kc->ndim == 4 ? kc->dim[2] : 0;
    hp_shape want[6] = {*q, HP_SHAPE(S, T, KV * D), HP_SHAPE(S, T, KV * D), HP_SHAPE(S, KV, Tmax, D),
                        HP_SHAPE(S, KV, Tmax, D), HP_SHAPE(S, T)};
    if (kc->ndim != 4 || Tmax < 1)
        return hp_error(HP_STATUS_SHAPE, "attention_cache: k_cache must be (S, KV, T_max, D) with T_max >= 1, is %s",
                        hp__shape_s(kc));
    for (int i = 0; i < 6; i++) {
        const hp_tensor *t = hp_graph_tensor(g, n->in[i]);
        hp_dtype wdt = i == 5 ? HP_DTYPE_I32 : HP_DTYPE_F32;
        if (t->dtype != wdt || !hp_shape_equal(&t->shape, &want[i]))
            return hp_error(HP_STATUS_SHAPE, "attention_cache: %s must be %s %s for q %s, %lld kv heads and T_max %lld, "
                            "is %s %s", names[i], hp_dtype_name(wdt), hp__shape_s(&want[i]), hp__shape_s(q),
                            (long long)KV, (long long)Tmax, hp_dtype_name(t->dtype), hp__shape_s(&t->shape));
    }
    if (T > Tmax)
        return hp_error(HP_STATUS_SHAPE, "attention_cache: %lld new rows per slot exceed the cache length T_max %lld",
                        (long long)T, (long long)Tmax);
    dt[0] = HP_DTYPE_F32;
    s[0] = *q;
    return HP_STATUS_OK;
}

/* An inference operator: the cache is written in place and no backward is defined. */
static hp_status attention_cache_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    (void)g, (void)node, (void)dout, (void)need, (void)din;
    return hp_error(HP_STATUS_UNSUPPORTED, "attention_cache is an inference operator (it writes the KV cache in "
                    "place): no gradient; train with ATTENTION (hp_attention_gqa)");
}

/* Worst case: every row attends to the whole cache. */
static void attention_cache_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    const hp_shape *q = hp__shp(g, n->in[0]), *kc = hp__shp(g, n->in[3]);
    double S = (double)q->dim[0], T = (double)q->dim[1], H = (double)n->attr.i[0];
    double D = (double)q->dim[2] / H, Tmax = (double)kc->dim[2];
    c->flops = 4.0 * S * T * H * Tmax * D;
    c->kind = HP_COST_ATTENTION;
    c->m = q->dim[1];
    c->n = kc->dim[2];
    c->k = q->dim[2] / n->attr.i[0];
    c->batch = q->dim[0] * n->attr.i[0];
}

static size_t attention_cache_workspace(const hp_graph *g, const hp_node *n) {
    int64_t T = hp__shp(g, n->in[0])->dim[1], Tmax = hp__shp(g, n->in[3])->dim[2];
    int64_t rows = T < HP_ATTN_CACHE_BLOCK ? T : HP_ATTN_CACHE_BLOCK;
    size_t per_thread = ((size_t)(rows * Tmax) * sizeof(float) + 63) & ~(size_t)63;
    return per_thread * (size_t)omp_get_max_threads();
}

/*
 * Sharding rule: q's layout with pending sums resolved, the sequence whole and channels split only
 * on head boundaries that are also kv-head boundaries (else gathered); k and v take q's layout; the
 * caches split dim 0 (slots) like q's dim 0 and dim 1 (kv heads) like q's dim 2; positions split
 * dim 0 like q's. Sets the local head counts.
 */
static hp_status attention_cache_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                                       hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    const hp_shape *s = hp__shp(c->g, n->in[0]);
    hp_layout r = hp__lay_resolve(c, &in[0], NULL, s);
    hp__lay_unshard_dim(&r, 1);
    int64_t H = n->attr.i[0], KV = n->attr.i[2] ? n->attr.i[2] : H, shards = hp_layout_shards(&r, c->mesh, 2);
    if (shards > 1 && (H % shards != 0 || KV % shards != 0)) {
        hp__lay_unshard_dim(&r, 2);
        shards = 1;
    }
    local->i[0] = (int)(H / shards);
    local->i[2] = n->attr.i[2] ? (int)(KV / shards) : 0;
    hp_layout cache = hp__lay_replicated(4), pos = hp__lay_replicated(2);
    hp__lay_copy_dim(&cache, 0, &r, 0);
    hp__lay_copy_dim(&cache, 1, &r, 2);
    hp__lay_copy_dim(&pos, 0, &r, 0);
    req[0] = req[1] = req[2] = r;
    req[3] = req[4] = cache;
    req[5] = pos;
    out[0] = r;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_attention_cache = {
    .name = "attention_cache", .min_in = 6, .max_in = 6, .n_out = 1, .infer = attention_cache_infer,
    .grad = attention_cache_grad, .cost = attention_cache_cost, .workspace = attention_cache_workspace,
    .shard = attention_cache_shard, .inplace_inputs = (1u << 3) | (1u << 4),
};
