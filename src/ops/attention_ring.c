/*
 * Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers"; Brandon et al.
 * 2023, "Striped Attention"): the pieces and the partitioner's expansion of ATTENTION and
 * ATTENTION_BACKWARD into ring steps when the sequence is split over a mesh axis and the strategy
 * asks for it (strategy.context_parallel: ring; attention's sharding rule, attention.c, keeps the
 * sequence split then).
 *
 * Pieces: ATTENTION with a rectangular (q block, kv block) pair and a causal offset (attention.c,
 * attr i[3]); ATTENTION_MERGE here, the FlashAttention recurrence across blocks; and the backward
 * per kv block, which is ATTENTION_BACKWARD given the final o and lse (P = exp(S - lse) is the
 * block's share of the softmax exactly, and D = rowsum(dO o O) uses the final o), so the blocks'
 * dq add up and each block's dk, dv are its own.
 *
 * Forward on rank r of n (ring axis coordinate r, block j = the rows rank j holds): step s holds
 * block j = (r - s) mod n; it sends that K, V block to rank r + 1 and receives block j - 1 from
 * r - 1 (SENDRECV, asynchronous on the point-to-point queue, issued before the step's compute so
 * the transfer runs behind it; the compute waits for it at the next step), attends q to block j with offset q_start(r) - k_start(j) and
 * merges. Causal: blocks j > r are wholly in the future and skipped (no compute, the transfers
 * still run: every rank issues the same transfers). Backward: the K, V blocks travel again; each
 * step adds the block's dq to the local dq and its dk, dv to accumulators that travel one step
 * behind the block and reach its owner after n - 1 hops. Without the mask a rank receives per layer
 * 2(n - 1) blocks forward and 4(n - 1) backward (K, V, dK, dV), B x T/n x KV*D floats each: the
 * minimum for a ring that keeps one K/V block resident. Causal, a block never travels past the
 * last rank that reads it (and an accumulator exists only once a rank after its owner read the
 * block): the ring moves n(n - 1) K/V blocks in all forward (n(n - 1)/2 each of K and V), as many
 * backward, and 2(n - 1)^2 dK/dV blocks.
 */
#include "ops/attention_ring.h"

#include <string.h>

#define RING_TAG_K 101
#define RING_TAG_V 102
#define RING_TAG_DK 103
#define RING_TAG_DV 104

hp_tid hp_attention_block(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, int kv_heads, bool causal,
                          int64_t offset, hp_tid *lse) {
    hp_attrs at = {0};
    at.i[0] = n_head;
    at.i[1] = causal;
    at.i[2] = kv_heads == n_head ? 0 : kv_heads;
    at.i[3] = offset;
    hp_tid in[3] = {q, k, v};
    hp_tid o = hp_graph_add_node(g, HP_OP_ATTENTION, in, 3, &at);
    if (lse) *lse = o == HP_TID_NONE ? HP_TID_NONE : hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out[1];
    return o;
}

hp_tid hp_attention_merge(hp_graph *g, hp_tid o_a, hp_tid lse_a, hp_tid o_b, hp_tid lse_b, int n_head, hp_tid *lse) {
    hp_attrs at = {0};
    at.i[0] = n_head;
    hp_tid in[4] = {o_a, lse_a, o_b, lse_b};
    hp_tid o = hp_graph_add_node(g, HP_OP_ATTENTION_MERGE, in, 4, &at);
    if (lse) *lse = o == HP_TID_NONE ? HP_TID_NONE : hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out[1];
    return o;
}

static hp_status merge_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_shape *o = hp__shp(g, n->in[0]);
    int64_t H = n->attr.i[0];
    if (o->ndim != 3 || H <= 0 || o->dim[2] % H != 0)
        return hp_error(HP_STATUS_SHAPE, "attention merge: o %s must be (B, T, H*D) with %lld heads", hp__shape_s(o),
                        (long long)H);
    hp_shape l = HP_SHAPE(o->dim[0], H, o->dim[1]);
    for (int i = 0; i < 4; i++) {
        const hp_tensor *t = hp_graph_tensor(g, n->in[i]);
        const hp_shape *want = (i & 1) ? &l : o;
        if (t->dtype != HP_DTYPE_F32 || !hp_shape_equal(&t->shape, want))
            return hp_error(HP_STATUS_SHAPE, "attention merge: input %d is %s, must be f32 %s", i,
                            hp__shape_s(&t->shape), hp__shape_s(want));
    }
    dt[0] = dt[1] = HP_DTYPE_F32;
    s[0] = *o;
    s[1] = l;
    return HP_STATUS_OK;
}

static void merge_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) { hp__cost_default(g, n, 2.0, c); }

const hp_op_def hp__op_def_attention_merge = {
    .name = "attention_merge", .min_in = 4, .max_in = 4, .n_out = 2, .infer = merge_infer, .cost = merge_cost,
};

/* ---- the expansion ---- */

typedef struct ring {
    int axis, n, me;            /* ring axis, its size, this rank's coordinate on it */
    int64_t start[HP_RING_MAX]; /* first global row of each coordinate's block */
    int64_t rows[HP_RING_MAX];  /* query rows of each coordinate */
    hp_shape kv[HP_RING_MAX];   /* local shape of each coordinate's k (and v) block */
    bool causal;
} ring;

static hp_status ring_of(const hp_expand_ctx *c, const hp_node *n, int qi, ring *R, bool *ok) {
    const hp_shard_ctx *sc = c->shard;
    const hp_layout *q = &c->in[qi];
    *ok = false;
    if (!sc->ring || q->nmap[1] != 1 || q->partial) return HP_STATUS_OK;
    R->axis = q->map[1][0];
    R->n = hp_mesh_dim(sc->mesh, R->axis);
    if (R->n < 2) return HP_STATUS_OK;
    if (R->n > HP_RING_MAX)
        return hp_error(HP_STATUS_UNSUPPORTED, "ring attention: axis '%s' of %d ranks (at most %d)",
                        hp_mesh_axis_name(sc->mesh, R->axis), R->n, HP_RING_MAX);
    int coords[HP_MESH_MAX_AXES];
    hp_mesh_coords(sc->mesh, sc->index, coords);
    R->me = coords[R->axis];
    R->causal = n->attr.i[1] != 0;
    const hp_shape *qs = hp__shp(sc->g, n->in[qi]), *ks = hp__shp(sc->g, n->in[qi + 1]);
    for (int j = 0; j < R->n; j++) {
        coords[R->axis] = j;
        int idx = hp_mesh_index(sc->mesh, coords);
        int64_t st[HP_MAX_DIMS], len[HP_MAX_DIMS];
        HP_CHECK(hp_layout_slice_of(q, sc->mesh, qs, idx, st, len));
        R->start[j] = st[1];
        R->rows[j] = len[1];
        HP_CHECK(hp_layout_local_shape(&c->in[qi + 1], sc->mesh, ks, idx, &R->kv[j]));
    }
    *ok = true;
    return HP_STATUS_OK;
}

/* Whether some query row of coordinate `at` sees some key of block j (always, without the mask). */
static bool sees_at(const ring *R, int at, int j) {
    if (!R->causal) return true;
    return R->rows[at] > 0 && R->kv[j].dim[1] > 0 && R->start[at] + R->rows[at] - 1 >= R->start[j];
}

/* Whether block j, arriving at coordinate `at` for its step s, is read there or further on. A
 * causal ring never sends a block past the last rank that reads it: the sender and the receiver
 * decide alike, so every send meets its receive. */
static bool needed_from(const ring *R, int j, int at, int s) {
    for (int t = s; t < R->n; t++)
        if (sees_at(R, (at + t - s) % R->n, j)) return true;
    return false;
}

/* x goes to the next rank on the ring; the block of shape s comes in from the previous one. */
static hp_status exchange(hp_graph *g, hp_tid x, const hp_shape *s, const ring *R, int tag, hp_tid *out) {
    *out = hp_sendrecv(g, x, (R->me + 1) % R->n, (R->me + R->n - 1) % R->n, tag, *s);
    HP_CHECK(hp_graph_status(g));
    hp_graph_node(g, hp_graph_n_nodes(g) - 1)->attr.i[3] = R->axis + 1; /* peers are coordinates on the axis */
    return HP_STATUS_OK;
}

/* Marks a lone SEND or RECV as a transfer on the ring axis (peer = a coordinate on it). */
static hp_status on_axis(hp_graph *g, const ring *R) {
    HP_CHECK(hp_graph_status(g));
    hp_graph_node(g, hp_graph_n_nodes(g) - 1)->attr.i[3] = R->axis + 1;
    return HP_STATUS_OK;
}

/* One ring hop of x (block j at step s): sent to the next rank where it is read there or further
 * on, block j - 1 received from the previous rank where it is read here or further on (else *out
 * is HP_TID_NONE). */
static hp_status hop(hp_graph *g, const ring *R, int s, int j, hp_tid x, int tag, hp_tid *out) {
    int next = (R->me + 1) % R->n, prev = (R->me + R->n - 1) % R->n, jin = (j + R->n - 1) % R->n;
    bool send = needed_from(R, j, next, s + 1), recv = needed_from(R, jin, R->me, s + 1);
    *out = HP_TID_NONE;
    if (send && recv) return exchange(g, x, &R->kv[jin], R, tag, out);
    if (send) {
        hp_send(g, x, next, tag);
        return on_axis(g, R);
    }
    if (recv) {
        *out = hp_recv(g, HP_DTYPE_F32, R->kv[jin], prev, tag);
        return on_axis(g, R);
    }
    return HP_STATUS_OK;
}

/* The K, V block of step s (coordinate j) goes to the next rank, block j - 1 comes in. */
static hp_status pass_kv(hp_graph *g, const ring *R, int s, int j, hp_tid *k, hp_tid *v) {
    HP_CHECK(hop(g, R, s, j, *k, RING_TAG_K, k));
    return hop(g, R, s, j, *v, RING_TAG_V, v);
}

hp_status hp__attention_ring_expand(const hp_expand_ctx *c, const hp_node *n, const hp_tid *lin, const hp_attrs *local,
                                    hp_tid *lout, bool *done) {
    ring R;
    HP_CHECK(ring_of(c, n, 0, &R, done));
    if (!*done) return HP_STATUS_OK;
    hp_graph *g = c->g;
    hp_tid k = lin[1], v = lin[2], o = HP_TID_NONE, lse = HP_TID_NONE;
    for (int s = 0; s < R.n; s++) {
        int j = (R.me - s + R.n) % R.n;
        hp_tid kb = k, vb = v;
        if (s < R.n - 1) HP_CHECK(pass_kv(g, &R, s, j, &k, &v)); /* issued before the step's compute */
        if (s > 0 && !sees_at(&R, R.me, j)) continue;
        hp_attrs at = *local;
        at.i[3] = R.start[R.me] - R.start[j];
        hp_tid in[3] = {lin[0], kb, vb};
        hp_tid ob = hp_graph_add_node(g, HP_OP_ATTENTION, in, 3, &at);
        HP_CHECK(hp_graph_status(g));
        hp_tid lb = hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out[1];
        if (o == HP_TID_NONE) {
            o = ob;
            lse = lb;
        } else {
            o = hp_attention_merge(g, o, lse, ob, lb, (int)local->i[0], &lse);
            HP_CHECK(hp_graph_status(g));
        }
    }
    lout[0] = o;
    lout[1] = lse;
    return HP_STATUS_OK;
}

/* Whether block j's dK, dV accumulator exists after step s (a rank j + t, 1 <= t <= s, read j). */
static bool acc_exists(const ring *R, int j, int s) {
    for (int t = 1; t <= s; t++)
        if (sees_at(R, (j + t) % R->n, j)) return true;
    return false;
}

/*
 * ATTENTION_BACKWARD(do, q, k, v, o, lse) -> dq, dk, dv. Step 0 computes the own block's share and
 * keeps it; from step 1 on, the accumulators of block j start at the first rank after j that reads
 * it, gain each reading rank's share and travel on one step behind the block, so after step n - 1
 * they arrive at their owner, which adds its own share: at most n - 1 hops of dK and dV (every
 * other rank's share must reach the owner), none for a block no other rank reads (causal: the last).
 */
hp_status hp__attention_backward_ring_expand(const hp_expand_ctx *c, const hp_node *n, const hp_tid *lin,
                                             const hp_attrs *local, hp_tid *lout, bool *done) {
    ring R;
    HP_CHECK(ring_of(c, n, 1, &R, done));
    if (!*done) return HP_STATUS_OK;
    hp_graph *g = c->g;
    hp_tid k = lin[2], v = lin[3], dq = HP_TID_NONE, dk_own = HP_TID_NONE, dv_own = HP_TID_NONE;
    hp_tid dk = HP_TID_NONE, dv = HP_TID_NONE; /* the travelling accumulators, received */
    for (int s = 0; s < R.n; s++) {
        int j = (R.me - s + R.n) % R.n;
        hp_tid kb = k, vb = v, bk = HP_TID_NONE, bv = HP_TID_NONE;
        if (s < R.n - 1) HP_CHECK(pass_kv(g, &R, s, j, &k, &v));
        if (s == 0 || sees_at(&R, R.me, j)) {
            hp_attrs at = *local;
            at.i[3] = R.start[R.me] - R.start[j];
            hp_tid in[6] = {lin[0], lin[1], kb, vb, lin[4], lin[5]};
            hp_graph_add_node(g, HP_OP_ATTENTION_BACKWARD, in, 6, &at);
            HP_CHECK(hp_graph_status(g));
            const hp_node *b = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
            hp_tid bq = b->out[0];
            bk = b->out[1];
            bv = b->out[2];
            dq = dq == HP_TID_NONE ? bq : hp_add(g, dq, bq);
            HP_CHECK(hp_graph_status(g));
        }
        if (s == 0) {
            dk_own = bk;
            dv_own = bv;
            continue;
        }
        if (bk != HP_TID_NONE) { /* this rank's share of block j joins its accumulator */
            dk = dk == HP_TID_NONE ? bk : hp_add(g, dk, bk);
            dv = dv == HP_TID_NONE ? bv : hp_add(g, dv, bv);
            HP_CHECK(hp_graph_status(g));
        }
        /* block j's accumulator goes on (where it exists), block j - 1's comes in (where it exists) */
        int next = (R.me + 1) % R.n, prev = (R.me + R.n - 1) % R.n, jin = (j + R.n - 1) % R.n;
        bool send = acc_exists(&R, j, s), recv = acc_exists(&R, jin, s);
        hp_tid acc[2] = {dk, dv};
        int tags[2] = {RING_TAG_DK, RING_TAG_DV};
        for (int a = 0; a < 2; a++) {
            hp_tid in = HP_TID_NONE;
            if (send && recv) {
                HP_CHECK(exchange(g, acc[a], &R.kv[jin], &R, tags[a], &in));
            } else if (send) {
                hp_send(g, acc[a], next, tags[a]);
                HP_CHECK(on_axis(g, &R));
            } else if (recv) {
                in = hp_recv(g, HP_DTYPE_F32, R.kv[jin], prev, tags[a]);
                HP_CHECK(on_axis(g, &R));
            }
            acc[a] = in;
        }
        dk = acc[0];
        dv = acc[1];
    }
    lout[0] = dq;
    lout[1] = dk == HP_TID_NONE ? dk_own : hp_add(g, dk, dk_own);
    lout[2] = dv == HP_TID_NONE ? dv_own : hp_add(g, dv, dv_own);
    return hp_graph_status(g);
}
