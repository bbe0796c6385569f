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
 *
 * Causal load balancing (ATTENTION attr i[4] = n, hp_attention_balanced; strategy.ring_load_balance):
 * the graph's sequence is permuted (hp_ring_balance_positions) so that block r is chunk r followed
 * by chunk 2n - 1 - r. Each block is then attended as its two chunks: per step and query chunk the
 * key block's rectangles that are not wholly masked (rects_of), each with its own offset, merged
 * per query chunk; o and lse are the chunks' concatenation. Every step costs every rank the same
 * (2c^2 score entries for chunks of c rows). Backward: the same rectangles; a chunk's dK/dV share
 * is padded into its block. Every rank reads part of every block, so blocks travel n - 1 hops,
 * except that block 0 leaves home as its first chunk (chunk 2n - 1, the sequence's last, has no
 * other reader), and so does its accumulator.
 */
#include "ops/attention_ring.h"

#include <stdint.h>
#include <stdlib.h>
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

hp_tid hp_attention_balanced(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, int kv_heads, int n_ranks) {
    if (n_ranks < 2) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "balanced attention: n_ranks %d must be >= 2", n_ranks);
        return HP_TID_NONE;
    }
    hp_attrs at = {0};
    at.i[0] = n_head;
    at.i[1] = 1;
    at.i[2] = kv_heads == n_head ? 0 : kv_heads;
    at.i[4] = n_ranks;
    hp_tid in[3] = {q, k, v};
    return hp_graph_add_node(g, HP_OP_ATTENTION, in, 3, &at);
}

/* The 2n chunks of the load-balanced order: global start and rows of chunk c (hp_ring_balance_positions). */
static void balance_chunks(int64_t T, int n, int64_t *start, int64_t *rows) {
    for (int r = 0; r < n; r++) {
        int64_t s, len;
        hp_block_range(T, n, r, &s, &len);
        rows[r] = (len + 1) / 2;
        rows[2 * n - 1 - r] = len / 2;
    }
    int64_t at = 0;
    for (int c = 0; c < 2 * n; c++) {
        start[c] = at;
        at += rows[c];
    }
}

hp_status hp_ring_balance_positions(int64_t T, int n, int32_t *pos) {
    if (T < 1 || T > INT32_MAX || n < 1 || !pos)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "ring balance positions: T %lld, n %d, pos %s (need 1 <= T < 2^31, "
                        "n >= 1, pos not NULL)", (long long)T, n, pos ? "given" : "NULL");
    int64_t *start = malloc(sizeof *start * 4 * (size_t)n);
    if (!start) return hp_error(HP_STATUS_OUT_OF_MEMORY, "ring balance positions: out of memory for %d ranks", n);
    int64_t *rows = start + 2 * n;
    balance_chunks(T, n, start, rows);
    for (int r = 0; r < n; r++) {
        int64_t s, len;
        hp_block_range(T, n, r, &s, &len);
        int64_t a = r, b = 2 * n - 1 - r;
        for (int64_t u = 0; u < len; u++)
            pos[s + u] = (int32_t)(u < rows[a] ? start[a] + u : start[b] + u - rows[a]);
    }
    free(start);
    return HP_STATUS_OK;
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
    hp_shape kvt[HP_RING_MAX];  /* its shape away from home: kv, but load-balanced block 0 travels
                                 * without chunk 2n - 1 (the sequence's last, read only at home) */
    bool causal;
    bool lb;                       /* load-balanced order (ATTENTION attr i[4] = n): blocks of two chunks */
    int64_t cs[2 * HP_RING_MAX];   /* lb: global start of each chunk */
    int64_t cl[2 * HP_RING_MAX];   /* lb: rows of each chunk */
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
    R->lb = n->attr.i[4] != 0;
    if (R->lb && n->attr.i[4] != R->n)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "ring attention: the sequence is in the load-balanced order for %lld "
                        "ranks but the ring axis '%s' has %d (the model and the strategy disagree)",
                        (long long)n->attr.i[4], hp_mesh_axis_name(sc->mesh, R->axis), R->n);
    if (R->lb && (!R->causal || qs->dim[1] != ks->dim[1]))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "ring attention: the load-balanced order needs causal self-attention "
                        "(causal %d, q rows %lld, k rows %lld)", (int)R->causal, (long long)qs->dim[1],
                        (long long)ks->dim[1]);
    if (R->lb) balance_chunks(qs->dim[1], R->n, R->cs, R->cl);
    for (int j = 0; j < R->n; j++) {
        coords[R->axis] = j;
        int idx = hp_mesh_index(sc->mesh, coords);
        int64_t st[HP_MAX_DIMS], len[HP_MAX_DIMS];
        HP_CHECK(hp_layout_slice_of(q, sc->mesh, qs, idx, st, len));
        R->start[j] = st[1];
        R->rows[j] = len[1];
        HP_CHECK(hp_layout_local_shape(&c->in[qi + 1], sc->mesh, ks, idx, &R->kv[j]));
        R->kvt[j] = R->kv[j];
        if (R->lb && j == 0) R->kvt[0].dim[1] = R->cl[0];
        if (R->lb && R->rows[j] != R->cl[j] + R->cl[2 * R->n - 1 - j])
            return hp_error(HP_STATUS_INTERNAL, "ring attention: block %d of %lld rows is not its two chunks (%lld + %lld)",
                            j, (long long)R->rows[j], (long long)R->cl[j], (long long)R->cl[2 * R->n - 1 - j]);
    }
    *ok = true;
    return HP_STATUS_OK;
}

/* ---- load-balanced order: a block is two chunks, attended as up to four rectangles ---- */

typedef struct half {
    int64_t start, rows, local; /* global start, rows, first row within its block */
} half;

/* The two chunks of coordinate j's block: chunk j, then chunk 2n - 1 - j. */
static void halves(const ring *R, int j, half h[2]) {
    int a = j, b = 2 * R->n - 1 - j;
    h[0] = (half){R->cs[a], R->cl[a], 0};
    h[1] = (half){R->cs[b], R->cl[b], R->cl[a]};
}

enum { MASKED, PARTIAL, FULL };

/* How query chunk q sees key chunk k under the causal mask (global positions). */
static int chunk_vis(const half *q, const half *k) {
    if (q->rows == 0 || k->rows == 0 || k->start > q->start + q->rows - 1) return MASKED;
    return k->start + k->rows - 1 <= q->start ? FULL : PARTIAL;
}

typedef struct rect {
    int64_t k0, kn; /* key rows [k0, k0 + kn) of the block */
    bool causal;
    int64_t off;    /* causal: local row i sees local key t when t <= i + off */
} rect;

/* The rectangles query chunk q attends in key block k (two chunks): the whole block as one where
 * one offset describes it (both chunks wholly visible, or the first wholly and the second in part),
 * else each chunk not wholly masked on its own. Returns their count (0..2). */
static int rects_of(const half *q, const half k[2], rect out[2]) {
    int va = chunk_vis(q, &k[0]), vb = chunk_vis(q, &k[1]);
    int64_t total = k[0].rows + k[1].rows, off = q->start - k[1].start + k[0].rows;
    if (k[0].rows > 0 && k[1].rows > 0 && va == FULL && vb == FULL) {
        out[0] = (rect){0, total, false, 0};
        return 1;
    }
    if (k[0].rows > 0 && va == FULL && vb == PARTIAL && off >= k[0].rows - 1) {
        out[0] = (rect){0, total, true, off};
        return 1;
    }
    int m = 0;
    for (int a = 0; a < 2; a++) {
        int v = a ? vb : va;
        if (v != MASKED) out[m++] = (rect){k[a].local, k[a].rows, v == PARTIAL, q->start - k[a].start};
    }
    return m;
}

/* Whether some query row of coordinate `at` sees some key of block j (always, without the mask). */
static bool sees_at(const ring *R, int at, int j) {
    if (R->lb) {
        half q[2], k[2];
        halves(R, at, q);
        halves(R, j, k);
        for (int a = 0; a < 4; a++)
            if (chunk_vis(&q[a / 2], &k[a % 2]) != MASKED) return true;
        return false;
    }
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
    if (send && recv) return exchange(g, x, &R->kvt[jin], R, tag, out);
    if (send) {
        hp_send(g, x, next, tag);
        return on_axis(g, R);
    }
    if (recv) {
        *out = hp_recv(g, HP_DTYPE_F32, R->kvt[jin], prev, tag);
        return on_axis(g, R);
    }
    return HP_STATUS_OK;
}

/* The K, V block of step s (coordinate j) goes to the next rank, block j - 1 comes in. */
static hp_status pass_kv(hp_graph *g, const ring *R, int s, int j, hp_tid *k, hp_tid *v) {
    if (s == 0 && R->kvt[j].dim[1] != R->kv[j].dim[1] && needed_from(R, j, (R->me + 1) % R->n, 1)) {
        int64_t rows = R->kvt[j].dim[1]; /* leaving home: only the part the others read */
        HP_CHECK(hop(g, R, s, j, hp_slice(g, *k, 1, 0, rows), RING_TAG_K, k));
        return hop(g, R, s, j, hp_slice(g, *v, 1, 0, rows), RING_TAG_V, v);
    }
    HP_CHECK(hop(g, R, s, j, *k, RING_TAG_K, k));
    return hop(g, R, s, j, *v, RING_TAG_V, v);
}

/* This rank's query parts: its two chunks (load-balanced order) or its whole block. */
static int q_parts(const ring *R, half p[2]) {
    if (R->lb) {
        halves(R, R->me, p);
        return 2;
    }
    p[0] = (half){R->start[R->me], R->rows[R->me], 0};
    return 1;
}

/* The rectangles query part q attends in block j (the whole block with the block layout's offset,
 * or the load-balanced chunks' rectangles). */
static int rects_for(const ring *R, int j, const half *q, rect out[2]) {
    if (q->rows == 0) return 0;
    if (!R->lb) {
        out[0] = (rect){0, R->kv[j].dim[1], R->causal, R->start[R->me] - R->start[j]};
        return 1;
    }
    half k[2];
    halves(R, j, k);
    return rects_of(q, k, out);
}

/* Rows [start, start + len) of x on `axis` (x itself when that is all of its `full` rows). */
static hp_tid sub(hp_graph *g, hp_tid x, int axis, int64_t start, int64_t len, int64_t full) {
    return start == 0 && len == full ? x : hp_slice(g, x, axis, start, len);
}

/* The parts' tensors joined along `axis` into the block's (a part without rows has none). */
static hp_tid join(hp_graph *g, const hp_tid x[2], int np, int axis) {
    if (np == 1 || x[1] == HP_TID_NONE) return x[0];
    if (x[0] == HP_TID_NONE) return x[1];
    return hp_concat(g, x, 2, axis);
}

/* The attrs of one rectangle's ATTENTION or ATTENTION_BACKWARD. */
static hp_attrs rect_attrs(const hp_attrs *local, const rect *r) {
    hp_attrs at = *local;
    at.i[1] = r->causal;
    at.i[3] = r->causal ? r->off : 0;
    at.i[4] = 0;
    return at;
}

hp_status hp__attention_ring_expand(const hp_expand_ctx *c, const hp_node *n, const hp_tid *lin, const hp_attrs *local,
                                    hp_tid *lout, bool *done) {
    ring R;
    HP_CHECK(ring_of(c, n, 0, &R, done));
    if (!*done) {
        if (n->attr.i[4])
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "attention over the load-balanced order for %lld ranks runs only "
                            "as ring attention: the sequence must stay split over one mesh axis of that size "
                            "(strategy.context_parallel: ring)", (long long)n->attr.i[4]);
        return HP_STATUS_OK;
    }
    hp_graph *g = c->g;
    half qp[2];
    int np = q_parts(&R, qp);
    int64_t T = R.rows[R.me];
    hp_tid q[2], o[2] = {HP_TID_NONE, HP_TID_NONE}, lse[2] = {HP_TID_NONE, HP_TID_NONE};
    for (int h = 0; h < np; h++) q[h] = qp[h].rows ? sub(g, lin[0], 1, qp[h].local, qp[h].rows, T) : HP_TID_NONE;
    hp_tid k = lin[1], v = lin[2];
    for (int s = 0; s < R.n; s++) {
        int j = (R.me - s + R.n) % R.n;
        hp_tid kb = k, vb = v;
        if (s < R.n - 1) HP_CHECK(pass_kv(g, &R, s, j, &k, &v)); /* issued before the step's compute */
        if (s > 0 && !sees_at(&R, R.me, j)) continue;
        int64_t Tk = s == 0 ? R.kv[j].dim[1] : R.kvt[j].dim[1]; /* rows of the block as held */
        for (int h = 0; h < np; h++) {
            rect rc[2];
            int m = rects_for(&R, j, &qp[h], rc);
            for (int e = 0; e < m; e++) {
                if (rc[e].k0 + rc[e].kn > Tk)
                    return hp_error(HP_STATUS_INTERNAL, "ring attention: keys [%lld, %lld) of block %d outside its %lld rows",
                                    (long long)rc[e].k0, (long long)(rc[e].k0 + rc[e].kn), j, (long long)Tk);
                hp_attrs at = rect_attrs(local, &rc[e]);
                hp_tid in[3] = {q[h], sub(g, kb, 1, rc[e].k0, rc[e].kn, Tk), sub(g, vb, 1, rc[e].k0, rc[e].kn, Tk)};
                hp_tid ob = hp_graph_add_node(g, HP_OP_ATTENTION, in, 3, &at);
                HP_CHECK(hp_graph_status(g));
                hp_tid lb = hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out[1];
                if (o[h] == HP_TID_NONE) {
                    o[h] = ob;
                    lse[h] = lb;
                } else {
                    o[h] = hp_attention_merge(g, o[h], lse[h], ob, lb, (int)local->i[0], &lse[h]);
                    HP_CHECK(hp_graph_status(g));
                }
            }
        }
    }
    lout[0] = join(g, o, np, 1);
    lout[1] = join(g, lse, np, 2);
    return hp_graph_status(g);
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
    if (!*done) {
        if (n->attr.i[4])
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "attention backward over the load-balanced order for %lld ranks "
                            "runs only as ring attention", (long long)n->attr.i[4]);
        return HP_STATUS_OK;
    }
    hp_graph *g = c->g;
    half qp[2];
    int np = q_parts(&R, qp);
    int64_t T = R.rows[R.me];
    hp_tid qs[4][2]; /* per part: do, q, o (rows) and lse (axis 2) */
    const int qin[4] = {0, 1, 4, 5};
    for (int a = 0; a < 4; a++)
        for (int h = 0; h < np; h++)
            qs[a][h] = qp[h].rows ? sub(g, lin[qin[a]], a == 3 ? 2 : 1, qp[h].local, qp[h].rows, T) : HP_TID_NONE;
    hp_tid k = lin[2], v = lin[3], dq[2] = {HP_TID_NONE, HP_TID_NONE}, dk_own = HP_TID_NONE, dv_own = HP_TID_NONE;
    hp_tid dk = HP_TID_NONE, dv = HP_TID_NONE; /* the travelling accumulators, received */
    for (int s = 0; s < R.n; s++) {
        int j = (R.me - s + R.n) % R.n;
        hp_tid kb = k, vb = v, bk = HP_TID_NONE, bv = HP_TID_NONE;
        if (s < R.n - 1) HP_CHECK(pass_kv(g, &R, s, j, &k, &v));
        if (s == 0 || sees_at(&R, R.me, j)) {
            int64_t Tk = s == 0 ? R.kv[j].dim[1] : R.kvt[j].dim[1];
            for (int h = 0; h < np; h++) {
                rect rc[2];
                int m = rects_for(&R, j, &qp[h], rc);
                for (int e = 0; e < m; e++) {
                    if (rc[e].k0 + rc[e].kn > Tk)
                        return hp_error(HP_STATUS_INTERNAL, "ring attention backward: keys [%lld, %lld) of block %d "
                                        "outside its %lld rows", (long long)rc[e].k0, (long long)(rc[e].k0 + rc[e].kn), j,
                                        (long long)Tk);
                    hp_attrs at = rect_attrs(local, &rc[e]);
                    hp_tid in[6] = {qs[0][h], qs[1][h], sub(g, kb, 1, rc[e].k0, rc[e].kn, Tk),
                                    sub(g, vb, 1, rc[e].k0, rc[e].kn, Tk), qs[2][h], qs[3][h]};
                    hp_graph_add_node(g, HP_OP_ATTENTION_BACKWARD, in, 6, &at);
                    HP_CHECK(hp_graph_status(g));
                    const hp_node *b = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
                    hp_tid bq = b->out[0], ek = b->out[1], ev = b->out[2];
                    if (rc[e].k0 != 0 || rc[e].kn != Tk) { /* a chunk's share, placed in the block */
                        ek = hp_pad(g, ek, 1, rc[e].k0, Tk);
                        ev = hp_pad(g, ev, 1, rc[e].k0, Tk);
                    }
                    dq[h] = dq[h] == HP_TID_NONE ? bq : hp_add(g, dq[h], bq);
                    bk = bk == HP_TID_NONE ? ek : hp_add(g, bk, ek);
                    bv = bv == HP_TID_NONE ? ev : hp_add(g, bv, ev);
                    HP_CHECK(hp_graph_status(g));
                }
            }
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
                HP_CHECK(exchange(g, acc[a], &R.kvt[jin], &R, tags[a], &in));
            } else if (send) {
                hp_send(g, acc[a], next, tags[a]);
                HP_CHECK(on_axis(g, &R));
            } else if (recv) {
                in = hp_recv(g, HP_DTYPE_F32, R.kvt[jin], prev, tags[a]);
                HP_CHECK(on_axis(g, &R));
            }
            acc[a] = in;
        }
        dk = acc[0];
        dv = acc[1];
    }
    lout[0] = join(g, dq, np, 1);
    if (dk != HP_TID_NONE && R.kvt[R.me].dim[1] != R.kv[R.me].dim[1]) { /* the others' shares: the first chunk */
        dk = hp_pad(g, dk, 1, 0, R.kv[R.me].dim[1]);
        dv = hp_pad(g, dv, 1, 0, R.kv[R.me].dim[1]);
    }
    lout[1] = dk == HP_TID_NONE ? dk_own : hp_add(g, dk, dk_own);
    lout[2] = dv == HP_TID_NONE ? dv_own : hp_add(g, dv, dv_own);
    return hp_graph_status(g);
}
