/*
 * GEMM operators: MATMUL (batched, broadcasting) and LINEAR (PyTorch's Linear).
 *
 * MATMUL attrs: i[0] = transpose a, i[1] = transpose b (on the last two axes), i[2] = fold.
 *   fold = 0: a (..., M, K) @ b (..., K, N) -> (..., M, N); the leading (batch) dims of a and b
 *             broadcast numpy-style (e.g. a (B, T, K) @ b (K, N) -> (B, T, N), which the kernel runs
 *             as one (B*T, K) @ (K, N) GEMM).
 *   fold = 1: an internal form made by gradient rules: a and b are read as 2-D matrices with every
 *             leading dim merged into the row axis, a (d0, .., R, C) -> (d0*..*R, C), and the
 *             result is 2-D. dW = dY^T X of a linear layer is then one GEMM over all B*T rows with
 *             no reshape copy (RESHAPE copies in this runtime; measured 15-20% of the weight
 *             gradient's time at GPT-2 small shapes).
 *
 * Gradients (C = op(A) op(B)):
 *   dA = dC op(B)^T      (trans_a = 0)      dA = op(B) dC^T   (trans_a = 1)
 *   dB = op(A)^T dC      (trans_b = 0)      dB = dC^T op(A)   (trans_b = 1)
 * each summed down (SUM_TO) to the operand's shape where it was broadcast; the common case of a 2-D
 * b broadcast over a's batch uses the folded form instead (one GEMM, no reduction pass).
 */
#include "ops/op.h"

/* ---- builders ---- */

static hp_tid matmul_node(hp_graph *g, hp_tid a, hp_tid b, bool ta, bool tb, bool fold) {
    hp_attrs at = {0};
    at.i[0] = ta;
    at.i[1] = tb;
    at.i[2] = fold;
    hp_tid in[2] = {a, b};
    return hp_graph_add_node(g, HP_OP_MATMUL, in, 2, &at);
}

hp_tid hp_matmul(hp_graph *g, hp_tid a, hp_tid b, bool trans_a, bool trans_b) {
    return matmul_node(g, a, b, trans_a, trans_b, false);
}

hp_tid hp_linear(hp_graph *g, hp_tid x, hp_tid w, hp_tid bias) {
    hp_tid in[3] = {x, w, bias};
    return hp_graph_add_node(g, HP_OP_LINEAR, in, 3, NULL);
}

/* ---- shape inference ---- */

/* The 2-D view of s used by the folded form: (numel / last, last). */
static hp_shape fold2(const hp_shape *s) {
    int64_t c = s->dim[s->ndim - 1];
    return HP_SHAPE(c ? hp_shape_numel(s) / c : 0, c);
}

static hp_status matmul_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_tensor *A = hp_graph_tensor(g, n->in[0]), *B = hp_graph_tensor(g, n->in[1]);
    if (A->dtype != HP_DTYPE_F32 || B->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_SHAPE, "matmul operands must be f32, are %s and %s", hp_dtype_name(A->dtype),
                        hp_dtype_name(B->dtype));
    if (A->shape.ndim < 2 || B->shape.ndim < 2)
        return hp_error(HP_STATUS_SHAPE, "matmul operands need at least 2 dims, are %s and %s",
                        hp__shape_s(&A->shape), hp__shape_s(&B->shape));
    bool ta = n->attr.i[0] != 0, tb = n->attr.i[1] != 0, fold = n->attr.i[2] != 0;
    hp_shape a = fold ? fold2(&A->shape) : A->shape, b = fold ? fold2(&B->shape) : B->shape;
    int64_t M = a.dim[a.ndim - (ta ? 1 : 2)], Ka = a.dim[a.ndim - (ta ? 2 : 1)];
    int64_t Kb = b.dim[b.ndim - (tb ? 1 : 2)], N = b.dim[b.ndim - (tb ? 2 : 1)];
    if (Ka != Kb)
        return hp_error(HP_STATUS_SHAPE, "matmul inner dims differ: a %s%s @ b %s%s (%lld vs %lld)",
                        hp__shape_s(&A->shape), ta ? "^T" : "", hp__shape_s(&B->shape), tb ? "^T" : "",
                        (long long)Ka, (long long)Kb);
    hp_shape ba = hp_shape_make(a.ndim - 2, a.dim), bb = hp_shape_make(b.ndim - 2, b.dim), bo;
    if (hp__broadcast_shape(&ba, &bb, &bo) != HP_STATUS_OK)
        return hp_error(HP_STATUS_SHAPE, "matmul batch dims of a %s and b %s do not broadcast", hp__shape_s(&A->shape),
                        hp__shape_s(&B->shape));
    if (bo.ndim + 2 > HP_MAX_DIMS) return hp_error(HP_STATUS_SHAPE, "matmul result has too many dims");
    bo.dim[bo.ndim++] = M;
    bo.dim[bo.ndim++] = N;
    dt[0] = HP_DTYPE_F32;
    s[0] = bo;
    return HP_STATUS_OK;
}

static hp_status linear_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_tensor *X = hp_graph_tensor(g, n->in[0]), *W = hp_graph_tensor(g, n->in[1]);
    const hp_tensor *Bi = n->in[2] == HP_TID_NONE ? NULL : hp_graph_tensor(g, n->in[2]);
    if (X->dtype != HP_DTYPE_F32 || W->dtype != HP_DTYPE_F32 || (Bi && Bi->dtype != HP_DTYPE_F32))
        return hp_error(HP_STATUS_SHAPE, "linear operands must be f32");
    if (X->shape.ndim < 2 || W->shape.ndim != 2)
        return hp_error(HP_STATUS_SHAPE, "linear needs x (..., K) with at least 2 dims and w (N, K); got x %s, w %s",
                        hp__shape_s(&X->shape), hp__shape_s(&W->shape));
    int64_t K = X->shape.dim[X->shape.ndim - 1], N = W->shape.dim[0];
    if (W->shape.dim[1] != K)
        return hp_error(HP_STATUS_SHAPE, "linear: x %s has K = %lld but w %s is (N, K) with K = %lld",
                        hp__shape_s(&X->shape), (long long)K, hp__shape_s(&W->shape), (long long)W->shape.dim[1]);
    if (Bi && (Bi->shape.ndim != 1 || Bi->shape.dim[0] != N))
        return hp_error(HP_STATUS_SHAPE, "linear: bias %s must be (N) = (%lld) for w %s", hp__shape_s(&Bi->shape),
                        (long long)N, hp__shape_s(&W->shape));
    dt[0] = HP_DTYPE_F32;
    s[0] = X->shape;
    s[0].dim[s[0].ndim - 1] = N;
    return HP_STATUS_OK;
}

/* ---- gradients ---- */

/* d reduced (or re-viewed) to the shape of `like`. */
static hp_tid to_shape_of(hp_graph *g, hp_tid d, hp_tid like) {
    if (d == HP_TID_NONE) return d;
    const hp_shape *sd = hp__shp(g, d), *sl = hp__shp(g, like);
    if (hp_shape_equal(sd, sl)) return d;
    if (hp_shape_numel(sd) == hp_shape_numel(sl)) return hp_reshape(g, d, *sl);
    return hp_sum_to(g, d, like);
}

static hp_status matmul_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    hp_tid a = n.in[0], b = n.in[1], dc = dout[0];
    bool ta = n.attr.i[0] != 0, tb = n.attr.i[1] != 0, fold = n.attr.i[2] != 0;
    if (need[0]) {
        hp_tid d = ta ? matmul_node(g, b, dc, tb, true, fold) : matmul_node(g, dc, b, false, !tb, fold);
        din[0] = to_shape_of(g, d, a);
    }
    if (need[1]) {
        const hp_shape sa = *hp__shp(g, a), sb = *hp__shp(g, b);
        bool b_bcast = !fold && hp_shape_prod(&sb, 0, sb.ndim - 2) == 1 && hp_shape_prod(&sa, 0, sa.ndim - 2) > 1;
        hp_tid d;
        if (b_bcast && !ta) /* sum over a's batch inside one GEMM: fold a and dC to 2-D */
            d = tb ? matmul_node(g, dc, a, true, false, true) : matmul_node(g, a, dc, true, false, true);
        else
            d = tb ? matmul_node(g, dc, a, true, ta, fold) : matmul_node(g, a, dc, !ta, false, fold);
        din[1] = to_shape_of(g, d, b);
    }
    return hp_graph_status(g);
}

static hp_status linear_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_node n = *hp_graph_node(g, node);
    hp_tid x = n.in[0], w = n.in[1], bias = n.in[2], dy = dout[0];
    if (need[0]) din[0] = matmul_node(g, dy, w, false, false, false); /* (..., N) @ (N, K): one GEMM */
    if (need[1]) din[1] = matmul_node(g, dy, x, true, false, true);  /* (M, N)^T @ (M, K), M = all rows */
    if (bias != HP_TID_NONE && need[2]) din[2] = hp_sum_to(g, dy, bias);
    return hp_graph_status(g);
}

/* ---- cost ---- */

/* The GEMMs the CPU kernel runs (k_matmul.c): one product with a's batch folded into the rows when
 * b is not batched and a not transposed (or with the fold attribute), else one per batch element. */
static void matmul_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    const hp_shape *A = hp__shp(g, n->in[0]), *B = hp__shp(g, n->in[1]), *Y = hp__shp(g, n->out[0]);
    bool ta = n->attr.i[0] != 0, fold = n->attr.i[2] != 0;
    hp_shape a = fold ? fold2(A) : *A;
    int64_t K = a.dim[a.ndim - (ta ? 2 : 1)];
    c->flops = 2.0 * (double)hp_shape_numel(Y) * (double)K;
    int64_t M = Y->dim[Y->ndim - 2], N = Y->dim[Y->ndim - 1];
    int64_t batch = M > 0 && N > 0 ? hp_shape_numel(Y) / (M * N) : 1;
    bool one = fold || (!ta && hp_shape_prod(B, 0, B->ndim - 2) == 1 && hp_shape_prod(A, 0, A->ndim - 2) == batch);
    c->kind = HP_COST_GEMM;
    c->m = one ? M * batch : M;
    c->n = N;
    c->k = K;
    c->batch = one ? 1 : batch;
    c->trans_a = ta;
}

static void linear_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    const hp_shape *X = hp__shp(g, n->in[0]), *Y = hp__shp(g, n->out[0]);
    double out = (double)hp_shape_numel(Y);
    int64_t K = X->dim[X->ndim - 1], N = Y->dim[Y->ndim - 1];
    c->flops = 2.0 * out * (double)K + (n->in[2] != HP_TID_NONE ? out : 0.0);
    c->kind = HP_COST_GEMM; /* x (M, K) w^T: one (M, N, K) product */
    c->m = N ? hp_shape_numel(Y) / N : 0;
    c->n = N;
    c->k = K;
    c->batch = 1;
}

/* ---- sharding rules ---- */

/* Dim indices of a MATMUL operand: its row/col dims after the transpose flag. */
/* Moves b's contraction split onto `axes_from` (a's K dim) and frees those axes elsewhere in b. */
static void set_dim_from(hp_layout *l, int d, const hp_layout *src, int sd) {
    hp__lay_drop_axes(l, hp__lay_dim_axes(src, sd));
    hp__lay_copy_dim(l, d, src, sd);
}

/*
 * A contraction of a's dim ak with b's dim bk: both must be split alike. Candidates: b follows a, or
 * a follows b; and, when b is a split parameter, b stays in its own layout while a gives up the
 * axes that clash (a weight-stationary contraction: Megatron-SP gathers the activation, not the
 * weight). The cheapest is taken, except that a parameter the partitioner's search marked
 * stationary (c->stationary) always stays; where the stationary candidate was possible but not
 * taken, c->conflict records the parameter for that search. The output gets a's other dims and b's
 * free dim (bn); axes that would appear twice are taken from b's free dim (it is gathered). The
 * contraction axes become a pending sum (Megatron's row-parallel output; the data-parallel weight
 * gradient).
 */
static hp_status contract(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req, int ak,
                          int bk, int bn, bool b_batch_follows_a, hp_layout *ra, hp_layout *rb) {
    const hp_shape *sa = hp__shp(c->g, n->in[0]), *sb = hp__shp(c->g, n->in[1]);
    hp_layout a0 = in[0], b0 = hp__lay_resolve(c, &in[1], NULL, sb);
    if (a0.partial && (a0.partial_op != HP_REDUCE_SUM || b0.partial)) a0 = hp__lay_resolve(c, &a0, NULL, sa);
    const hp_tid bt = n->in[1];
    const bool bparam = hp_graph_tensor(c->g, bt)->kind == HP_TENSOR_KIND_PARAM && sb->ndim == 2 && !b0.partial &&
                        hp__lay_all_axes(&b0) != 0;
    const bool force = bparam && c->stationary && c->stationary[bt];
    int64_t best = -1;
    bool have_st = false;
    hp_layout st_a, st_b;
    for (int cand = 0; cand < 3; cand++) {
        hp_layout a = a0, b = b0;
        if (cand == 2) { /* b stays as it is; a gives up every axis b uses, then takes b's K split */
            if (!bparam) continue;
            hp__lay_drop_axes(&a, hp__lay_all_axes(&b));
            set_dim_from(&a, ak, &b, bk);
            a.partial = a0.partial & ~hp__lay_all_axes(&a);
            a.partial_op = a0.partial_op;
        } else if (cand == 0) {
            set_dim_from(&b, bk, &a, ak);
        } else {
            hp_layout bb = b;
            hp__lay_drop_axes(&a, hp__lay_dim_axes(&bb, bk) | bb.partial);
            set_dim_from(&a, ak, &bb, bk);
            a.partial = a0.partial & ~hp__lay_all_axes(&a);
            a.partial_op = a0.partial_op;
        }
        if (b_batch_follows_a) /* b's leading dims align with a's trailing batch dims */
            for (int d = 0; d < b.ndim - 2; d++) {
                int da = a.ndim - b.ndim + d;
                hp__lay_unshard_dim(&b, d);
                if (da >= 0 && sb->dim[d] == sa->dim[da]) set_dim_from(&b, d, &a, da);
            }
        /* axes a uses anywhere (and its pending sums) cannot split b's free dim */
        uint32_t used = hp__lay_all_axes(&a) | a.partial;
        uint32_t bfree = hp__lay_dim_axes(&b, bn) & used & ~hp__lay_dim_axes(&a, ak);
        if (bfree) {
            hp_layout keep = b;
            hp__lay_drop_axes(&b, bfree);
            for (int d = 0; d < b.ndim; d++)
                if (d != bn) hp__lay_copy_dim(&b, d, &keep, d);
        }
        /* b's free-dim axes cannot split a's other dims either (they would repeat in the output) */
        for (int d = 0; d < a.ndim; d++)
            if (d != ak) {
                uint32_t clash = hp__lay_dim_axes(&a, d) & hp__lay_dim_axes(&b, bn);
                if (clash) {
                    hp_layout t = b;
                    hp__lay_drop_axes(&t, clash);
                    hp__lay_copy_dim(&b, bn, &t, bn);
                }
            }
        if (hp_layout_validate(&a, c->mesh, sa) != HP_STATUS_OK || hp_layout_validate(&b, c->mesh, sb) != HP_STATUS_OK)
            continue;
        if (cand == 2) {
            if (!hp_layout_equal(&b, &b0)) continue; /* b would not stay after all */
            have_st = true, st_a = a, st_b = b;
        }
        int64_t cost = hp__lay_cost_in(c, n, 0, &in[0], &a, false) + hp__lay_cost_in(c, n, 1, &in[1], &b, false);
        /* A candidate that contracts a split dim leaves a pending sum on the output; what resolving
         * it costs counts too, or moving a batch split onto K (cheap here) would win and leave a
         * full-size sum to reduce later (seen with FSDP: 6 MB reduce-scatters per layer). */
        const hp_shape *so = hp__shp(c->g, n->out[0]);
        hp_layout o = hp__lay_replicated(so->ndim);
        for (int d = 0, w = 0; d < a.ndim && w < so->ndim - 1; d++)
            if (d != ak) hp__lay_copy_dim(&o, so->ndim - 1 - (a.ndim - 1) + w++, &a, d);
        hp__lay_copy_dim(&o, so->ndim - 1, &b, bn);
        uint32_t psum = (hp__lay_dim_axes(&a, ak) | a.partial) & ~in[0].partial;
        if (psum && hp_layout_validate(&o, c->mesh, so) == HP_STATUS_OK) {
            hp_layout op = o;
            hp__lay_set_partial(&op, psum, HP_REDUCE_SUM);
            hp_layout resolved = hp__lay_resolve(c, &op, NULL, so);
            cost += hp__lay_cost(c, &op, &resolved, so, HP_DTYPE_F32);
        }
        if (best < 0 || cost < best) {
            best = cost;
            *ra = a;
            *rb = b;
        }
    }
    if (have_st && force) {
        *ra = st_a, *rb = st_b;
    } else if (have_st && c->conflict && !(hp_layout_equal(ra, &st_a) && hp_layout_equal(rb, &st_b))) {
        c->conflict[bt] = 1;
    }
    if (best < 0) { /* no consistent split: compute replicated */
        *ra = hp__lay_replicated(sa->ndim);
        *rb = hp__lay_replicated(sb->ndim);
    }
    req[0] = *ra;
    req[1] = *rb;
    return HP_STATUS_OK;
}

/*
 * The weight-gradient form C (N, K) = a^T b over all rows (a (rows.., N), b (rows.., K)): the rows
 * of both must be split alike. Two candidates, the cheaper taken (ties: the first): b's rows
 * follow a's, or a's follow b's; each also pays for resolving the pending sum over the split rows.
 * b is the forward pass's activation (linear_grad's x): a copy of it the forward pass made is
 * reused (c->saved), so a weight-stationary contraction does not gather its input twice.
 */
static void fold_candidate(const hp_shard_ctx *c, const hp_node *n, const hp_layout *a0, const hp_layout *b0,
                           bool a_follows_b, hp_layout *ra, hp_layout *rb, hp_layout *ro) {
    const hp_shape *sa = hp__shp(c->g, n->in[0]), *sb = hp__shp(c->g, n->in[1]);
    int na = sa->ndim, nb = sb->ndim;
    hp_layout a = *a0, b = *b0;
    if (na != nb) {
        for (int d = 0; d < na - 1; d++) hp__lay_unshard_dim(&a, d);
        for (int d = 0; d < nb - 1; d++) hp__lay_unshard_dim(&b, d);
    } else if (a_follows_b) {
        for (int d = 0; d < na - 1; d++) set_dim_from(&a, d, &b, d);
        a.partial &= ~hp__lay_all_axes(&a);
    } else {
        for (int d = 0; d < na - 1; d++) set_dim_from(&b, d, &a, d);
    }
    uint32_t rows = 0;
    for (int d = 0; d < na - 1; d++) rows |= hp__lay_dim_axes(&a, d);
    uint32_t clash = hp__lay_dim_axes(&b, nb - 1) & (hp__lay_dim_axes(&a, na - 1) | rows | a.partial);
    if (clash) {
        hp_layout t = b;
        hp__lay_drop_axes(&t, clash);
        hp__lay_copy_dim(&b, nb - 1, &t, nb - 1);
    }
    hp_layout o = hp__lay_replicated(2);
    hp__lay_copy_dim(&o, 0, &a, na - 1);
    hp__lay_copy_dim(&o, 1, &b, nb - 1);
    hp__lay_set_partial(&o, rows | a.partial, HP_REDUCE_SUM);
    *ra = a, *rb = b, *ro = o;
}

static hp_status matmul_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local, (void)drop;
    bool ta = n->attr.i[0] != 0, tb = n->attr.i[1] != 0, fold = n->attr.i[2] != 0;
    const hp_shape *sa = hp__shp(c->g, n->in[0]), *sb = hp__shp(c->g, n->in[1]);
    int na = sa->ndim, nb = sb->ndim;
    hp_layout a, b, o = hp__lay_replicated(hp__shp(c->g, n->out[0])->ndim);
    if (fold) {
        if (!ta || tb) { /* only the dW form (a^T b over all rows) is made by the gradient rules */
            for (int i = 0; i < 2; i++) req[i] = hp__lay_replicated(i ? nb : na);
            return HP_STATUS_OK;
        }
        /* rows (all leading dims) are contracted */
        hp_layout a0 = in[0], b0 = hp__lay_resolve(c, &in[1], NULL, sb);
        if (a0.partial && (a0.partial_op != HP_REDUCE_SUM || b0.partial)) a0 = hp__lay_resolve(c, &a0, NULL, sa);
        const bool saved = hp_graph_tensor(c->g, n->in[1])->kind != HP_TENSOR_KIND_PARAM;
        if (saved && c->saved) c->saved[1] = true;
        int64_t best = -1;
        for (int cand = 0; cand < (na == nb ? 2 : 1); cand++) {
            hp_layout ca, cb, co;
            fold_candidate(c, n, &a0, &b0, cand == 1, &ca, &cb, &co);
            if (hp_layout_validate(&ca, c->mesh, sa) != HP_STATUS_OK ||
                hp_layout_validate(&cb, c->mesh, sb) != HP_STATUS_OK)
                continue;
            const hp_shape *so = hp__shp(c->g, n->out[0]);
            hp_layout resolved = hp__lay_resolve(c, &co, NULL, so);
            int64_t cost = hp__lay_cost_in(c, n, 0, &in[0], &ca, false) +
                           hp__lay_cost_in(c, n, 1, &in[1], &cb, saved && c->saved) +
                           hp__lay_cost(c, &co, &resolved, so, HP_DTYPE_F32);
            if (best < 0 || cost < best) best = cost, a = ca, b = cb, o = co;
        }
        if (best < 0) fold_candidate(c, n, &a0, &b0, false, &a, &b, &o);
        req[0] = a;
        req[1] = b;
        out[0] = o;
        return HP_STATUS_OK;
    }
    int am = ta ? na - 1 : na - 2, ak = ta ? na - 2 : na - 1;
    int bk = tb ? nb - 1 : nb - 2, bn = tb ? nb - 2 : nb - 1;
    HP_CHECK(contract(c, n, in, req, ak, bk, bn, true, &a, &b));
    int no = o.ndim;
    for (int d = 0; d < na - 2; d++) hp__lay_copy_dim(&o, no - na + d, &a, d);
    for (int d = 0; d < nb - 2; d++) { /* a batch dim that a broadcasts (size 1) but b splits */
        int od = no - nb + d;
        if (o.nmap[od] == 0 && b.nmap[d] > 0) hp__lay_copy_dim(&o, od, &b, d);
    }
    hp__lay_copy_dim(&o, no - 2, &a, am);
    hp__lay_copy_dim(&o, no - 1, &b, bn);
    hp__lay_set_partial(&o, hp__lay_dim_axes(&a, ak) | a.partial, HP_REDUCE_SUM);
    out[0] = o;
    return HP_STATUS_OK;
}

/* LINEAR: x (..., K) contracted with w (N, K) on K; the bias follows N. When K is split the output
 * is a pending sum and only the first rank of that group adds the bias. */
static hp_status linear_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)local;
    const hp_shape *sx = hp__shp(c->g, n->in[0]);
    int nx = sx->ndim;
    hp_layout x, w;
    HP_CHECK(contract(c, n, in, req, nx - 1, 1, 0, false, &x, &w));
    hp_layout o = hp__lay_replicated(nx);
    for (int d = 0; d < nx - 1; d++) hp__lay_copy_dim(&o, d, &x, d);
    hp__lay_copy_dim(&o, nx - 1, &w, 0);
    uint32_t psum = hp__lay_dim_axes(&x, nx - 1) | x.partial;
    hp__lay_set_partial(&o, psum, HP_REDUCE_SUM);
    out[0] = o;
    if (n->in[2] != HP_TID_NONE) {
        hp_layout bl = hp__lay_replicated(1);
        hp__lay_copy_dim(&bl, 0, &w, 0);
        req[2] = bl;
        int coords[HP_MESH_MAX_AXES];
        hp_mesh_coords(c->mesh, c->index, coords);
        for (int a = 0; a < hp_mesh_naxes(c->mesh); a++)
            if ((psum >> a) & 1u && coords[a] != 0) drop[2] = true;
    }
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_matmul = {
    .name = "matmul", .min_in = 2, .max_in = 2, .n_out = 1, .infer = matmul_infer, .grad = matmul_grad,
    .cost = matmul_cost, .shard = matmul_shard,
};
const hp_op_def hp__op_def_linear = {
    .name = "linear", .min_in = 2, .max_in = 3, .n_out = 1, .infer = linear_infer, .grad = linear_grad,
    .cost = linear_cost, .shard = linear_shard,
};
