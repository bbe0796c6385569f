/*
 * Rotary position embedding (Su et al. 2021, "RoFormer"), in Hugging Face Llama's rotate_half form
 * (LlamaRotaryEmbedding + apply_rotary_pos_emb):
 *   ROPE(x (B, T, H*D); i[0] = H, i[1] = position offset p0, i[2] = inverse, f[0] = base) -> y (B, T, H*D)
 * Heads are interleaved as (H, D) in the last axis (the layout of ATTENTION's q and k); D is even.
 * For the token at time t (position p = p0 + t), head h and j < D/2, with
 *   inv_freq[j] = 1 / base^(2j / D)  and  a = p * inv_freq[j]  (both in f32, as Hugging Face computes them):
 *   y[j]       = x[j] cos a - x[j + D/2] sin a
 *   y[j + D/2] = x[j + D/2] cos a + x[j] sin a
 * The rotation is orthogonal, so the gradient is the inverse rotation (angle -a) of dy: the same
 * operator with i[2] = 1. The position offset is for generation with a cache (the positions of the
 * new tokens); training graphs use 0, and the sharding rule sets each rank's global offset when the
 * sequence is split (context parallelism).
 * Optional in[1] = positions (B, T) i32 (hp_rope_at): the position of row (b, t) is then
 * p0 + positions[b, t] (batched generation: each sequence of the batch at its own length); a
 * negative position (a padding row) is taken as 0. Without it p = p0 + t for every batch row.
 */
#include "ops/op.h"

hp_tid hp_rope_at(hp_graph *g, hp_tid x, hp_tid positions, int n_head, float base) {
    hp_attrs at = {0};
    at.i[0] = n_head;
    at.f[0] = base;
    hp_tid in[2] = {x, positions};
    return hp_graph_add_node(g, HP_OP_ROPE, in, 2, &at);
}

hp_tid hp_rope(hp_graph *g, hp_tid x, int n_head, float base, int64_t pos_offset) {
    hp_attrs at = {0};
    at.i[0] = n_head;
    at.i[1] = pos_offset;
    at.f[0] = base;
    return hp_graph_add_node(g, HP_OP_ROPE, &x, 1, &at);
}

static hp_status rope_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_tensor *x = hp_graph_tensor(g, n->in[0]);
    if (x->dtype != HP_DTYPE_F32 || x->shape.ndim != 3)
        return hp_error(HP_STATUS_SHAPE, "rope: x must be f32 (B, T, H*D), is %s %s", hp_dtype_name(x->dtype),
                        hp__shape_s(&x->shape));
    int64_t H = n->attr.i[0];
    if (H <= 0 || x->shape.dim[2] % H != 0 || (x->shape.dim[2] / H) % 2 != 0)
        return hp_error(HP_STATUS_SHAPE, "rope: %lld heads must divide the channels of x %s into even head dims",
                        (long long)H, hp__shape_s(&x->shape));
    if (!(n->attr.f[0] > 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "rope: base must be > 1, is %g", (double)n->attr.f[0]);
    if (n->attr.i[1] < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "rope: position offset must be >= 0, is %lld",
                        (long long)n->attr.i[1]);
    if (n->n_in > 1 && n->in[1] != HP_TID_NONE) {
        const hp_tensor *p = hp_graph_tensor(g, n->in[1]);
        hp_shape want = HP_SHAPE(x->shape.dim[0], x->shape.dim[1]);
        if (p->dtype != HP_DTYPE_I32 || !hp_shape_equal(&p->shape, &want))
            return hp_error(HP_STATUS_SHAPE, "rope: positions must be i32 %s for x %s, is %s %s", hp__shape_s(&want),
                            hp__shape_s(&x->shape), hp_dtype_name(p->dtype), hp__shape_s(&p->shape));
    }
    dt[0] = HP_DTYPE_F32;
    s[0] = x->shape;
    return HP_STATUS_OK;
}

static hp_status rope_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    if (!need[0] || dout[0] == HP_TID_NONE) return HP_STATUS_OK;
    hp_attrs at = n.attr;
    at.i[2] = !at.i[2];
    hp_tid in[2] = {dout[0], n.n_in > 1 ? n.in[1] : HP_TID_NONE};
    din[0] = hp_graph_add_node(g, HP_OP_ROPE, in, in[1] != HP_TID_NONE ? 2 : 1, &at);
    return hp_graph_status(g);
}

/* Two multiplies and an add per element, plus the angle's cos and sin per (row, pair). */
static void rope_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 3.0, c); }

/*
 * Sharding rule: the batch and the sequence may be split; the channel dim only on head boundaries
 * (tensor parallelism over heads), which sets the local head count; otherwise it is gathered. With
 * the sequence split (context parallelism) each rank rotates its rows by their global positions:
 * the local node's offset is the logical offset plus the first row of this rank's block. With a
 * positions input the positions are split like x's rows instead (each row reads its own).
 */
static hp_status rope_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                            hp_layout *out, hp_attrs *local, bool *drop) {
    (void)drop;
    const hp_shape *s = hp__shp(c->g, n->in[0]);
    hp_layout r = hp__lay_resolve(c, &in[0], &c->hint[0], s);
    int64_t H = n->attr.i[0], shards = hp_layout_shards(&r, c->mesh, 2);
    if (shards > 1 && H % shards != 0) {
        hp__lay_unshard_dim(&r, 2);
        shards = 1;
    }
    local->i[0] = H / shards;
    bool has_pos = n->n_in > 1 && n->in[1] != HP_TID_NONE;
    if (r.nmap[1] > 0 && !has_pos) {
        int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
        HP_CHECK(hp_layout_slice_of(&r, c->mesh, s, c->index, start, len));
        local->i[1] = n->attr.i[1] + start[1];
    }
    req[0] = r;
    out[0] = r;
    if (has_pos) { /* positions follow the batch and sequence splits (each row's own position) */
        req[1] = hp__lay_replicated(2);
        hp__lay_copy_dim(&req[1], 0, &r, 0);
        hp__lay_copy_dim(&req[1], 1, &r, 1);
    }
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_rope = {
    .name = "rope", .min_in = 1, .max_in = 2, .n_out = 1, .infer = rope_infer,
    .grad = rope_grad, .cost = rope_cost, .shard = rope_shard,
};
