/*
 * Ring attention's kernel pieces (src/ops/attention_ring.c): attention over a rectangular
 * (q block, kv block) pair with a causal offset, by finite differences (q, k, v; with grouped-query
 * heads, offsets that hide whole rows, and blocks longer and shorter than q); the (o, lse) merge
 * and the backward per kv block from the final o and lse, against the whole attention and by
 * finite differences of the merged output's loss. The load-balanced order's permutation
 * (hp_ring_balance_positions), and the refusal of balanced attention outside a ring.
 */
#include "gradcheck.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct block_case {
    int H, KV;
    bool causal;
    int64_t off;
} block_case;

static hp_tid b_block(hp_graph *g, const hp_tid *p, void *u) {
    const block_case *c = u;
    return hp_attention_block(g, p[0], p[1], p[2], c->H, c->KV, c->causal, c->off, NULL);
}

static void test_block_grad(void **state) {
    (void)state;
    const int64_t offs[] = {-2, 0, 3, 7};
    const int64_t tks[] = {3, 5, 8};
    for (int gqa = 0; gqa < 2; gqa++)
        for (int causal = 0; causal < 2; causal++)
            for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++)
                for (size_t ti = 0; ti < sizeof tks / sizeof tks[0]; ti++) {
                    block_case c = {gqa ? 4 : 2, gqa ? 2 : 2, causal, offs[oi]};
                    int64_t D = 3, Tq = 5, Tk = tks[ti];
                    hp_gc_spec s = {.n = 3, .lo = -1, .hi = 1, .build = b_block, .user = &c,
                                    .shapes = {HP_SHAPE(2, Tq, c.H * D), HP_SHAPE(2, Tk, c.KV * D),
                                               HP_SHAPE(2, Tk, c.KV * D)}};
                    hp_gradcheck(&s);
                }
}

/* A row before every key (causal offset -2: rows 0, 1 see nothing): o = 0 and lse = -inf. */
static void test_block_empty_rows(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(1, 4, 2));
    hp_tid k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(1, 3, 2));
    hp_tid v = hp_input(g, "v", HP_DTYPE_F32, HP_SHAPE(1, 3, 2));
    hp_tid lse, o = hp_attention_block(g, q, k, v, 1, 1, true, -2, &lse);
    assert_ok(hp_graph_status(g));
    hp_tid keep[2] = {o, lse};
    hp_program *p;
    hp_program_opts opt = HP_PROGRAM_OPTS_DEFAULT;
    opt.keep = keep;
    opt.n_keep = 2;
    assert_ok(hp_program_new(g, &opt, &p));
    hp_test_fill_uniform(hp_program_data(p, q), 8, 1, -1, 1);
    hp_test_fill_uniform(hp_program_data(p, k), 6, 2, -1, 1);
    hp_test_fill_uniform(hp_program_data(p, v), 6, 3, -1, 1);
    assert_ok(hp_program_run(p));
    const float *O = hp_program_data(p, o), *L = hp_program_data(p, lse);
    for (int i = 0; i < 2; i++) {
        assert_true(isinf(L[i]) && L[i] < 0);
        assert_true(O[2 * i] == 0.0f && O[2 * i + 1] == 0.0f);
    }
    assert_true(isfinite(L[2]) && isfinite(L[3]));
    /* row 2 sees key 0 only: o = v[0] */
    assert_close(O[4], ((float *)hp_program_data(p, v))[0], 1e-6, 1e-7);
    hp_program_free(p);
    hp_graph_free(g);
}

/*
 * Rows [Q0, Q0 + Tq) of a sequence of T attend to three key blocks split at 3 and 6 (offsets Q0 -
 * k_start), merged pairwise; the backward runs per block from the merged o and lse. Checked
 * against the whole attention's rows and its ATTENTION_BACKWARD, and the loss sum(r o) by central
 * differences of the merged forward.
 */
typedef struct ring_graph {
    hp_graph *g;
    hp_tid qf, k, v, r, ref_o, ref_lse, ref_dq, ref_dk, ref_dv, o, lse, dq, dk, dv;
} ring_graph;

enum { B = 2, T = 9, H = 4, KV = 2, D = 3, Q0 = 3, TQ = 6, NBLK = 3 };

static void build_ring(ring_graph *rg, bool causal) {
    hp_graph *g = rg->g = hp_graph_new();
    int64_t C = H * D, Ck = KV * D;
    rg->qf = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(B, T, C));
    rg->k = hp_input(g, "k", HP_DTYPE_F32, HP_SHAPE(B, T, Ck));
    rg->v = hp_input(g, "v", HP_DTYPE_F32, HP_SHAPE(B, T, Ck));
    rg->r = hp_input(g, "r", HP_DTYPE_F32, HP_SHAPE(B, TQ, C)); /* dO of the block's rows */
    /* the whole attention and its backward with dO = r on rows [Q0, Q0 + TQ), 0 elsewhere */
    hp_tid full = hp_attention_gqa(g, rg->qf, rg->k, rg->v, H, KV, causal);
    hp_tid full_lse = hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out[1];
    hp_attrs pad = {0};
    pad.i[0] = 1;
    pad.i[1] = Q0;
    pad.i[2] = T;
    hp_tid dfull = hp_graph_add_node(g, HP_OP_PAD, &rg->r, 1, &pad);
    hp_attrs at = {0};
    at.i[0] = H;
    at.i[1] = causal;
    at.i[2] = KV;
    hp_tid bin[6] = {dfull, rg->qf, rg->k, rg->v, full, full_lse};
    hp_graph_add_node(g, HP_OP_ATTENTION_BACKWARD, bin, 6, &at);
    const hp_node *bn = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    rg->ref_dq = hp_slice(g, bn->out[0], 1, Q0, TQ);
    rg->ref_dk = bn->out[1];
    rg->ref_dv = bn->out[2];
    rg->ref_o = hp_slice(g, full, 1, Q0, TQ);
    rg->ref_lse = hp_slice(g, full_lse, 2, Q0, TQ);
    /* the ring side */
    hp_tid q = hp_slice(g, rg->qf, 1, Q0, TQ), o = HP_TID_NONE, lse = HP_TID_NONE;
    hp_tid kb[NBLK], vb[NBLK];
    for (int j = 0; j < NBLK; j++) {
        kb[j] = hp_slice(g, rg->k, 1, 3 * j, 3);
        vb[j] = hp_slice(g, rg->v, 1, 3 * j, 3);
        hp_tid lb, ob = hp_attention_block(g, q, kb[j], vb[j], H, KV, causal, Q0 - 3 * j, &lb);
        if (j == 0) {
            o = ob;
            lse = lb;
        } else {
            o = hp_attention_merge(g, o, lse, ob, lb, H, &lse);
        }
    }
    rg->o = o;
    rg->lse = lse;
    hp_tid dks[NBLK], dvs[NBLK], dq = HP_TID_NONE;
    for (int j = 0; j < NBLK; j++) {
        hp_attrs bt = at;
        bt.i[3] = Q0 - 3 * j;
        hp_tid in[6] = {rg->r, q, kb[j], vb[j], o, lse};
        hp_graph_add_node(g, HP_OP_ATTENTION_BACKWARD, in, 6, &bt);
        const hp_node *n = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
        hp_tid bq = n->out[0];
        dks[j] = n->out[1];
        dvs[j] = n->out[2];
        dq = j ? hp_add(g, dq, bq) : bq;
    }
    rg->dq = dq;
    rg->dk = hp_concat(g, dks, NBLK, 1);
    rg->dv = hp_concat(g, dvs, NBLK, 1);
    assert_ok(hp_graph_status(g));
}

static void expect_close(hp_program *p, const hp_graph *g, hp_tid a, hp_tid b, double rtol, double atol) {
    const hp_tensor *t = hp_graph_tensor(g, a);
    size_t n = (size_t)hp_shape_numel(&t->shape);
    const float *x = hp_program_data(p, a), *y = hp_program_data(p, b);
    for (size_t i = 0; i < n; i++) assert_close(x[i], y[i], rtol, atol);
}

static double loss_of(hp_program *p, const ring_graph *rg) {
    const float *o = hp_program_data(p, rg->o), *r = hp_program_data(p, rg->r);
    double s = 0;
    for (size_t i = 0; i < (size_t)(B * TQ * H * D); i++) s += (double)o[i] * r[i];
    return s;
}

static void check_ring_pieces(bool causal) {
    ring_graph rg;
    build_ring(&rg, causal);
    hp_tid keep[] = {rg.ref_o, rg.ref_lse, rg.ref_dq, rg.ref_dk, rg.ref_dv, rg.o, rg.lse, rg.dq, rg.dk, rg.dv};
    hp_program *p;
    hp_program_opts opt = HP_PROGRAM_OPTS_DEFAULT;
    opt.keep = keep;
    opt.n_keep = (int)(sizeof keep / sizeof keep[0]);
    assert_ok(hp_program_new(rg.g, &opt, &p));
    hp_tid ins[4] = {rg.qf, rg.k, rg.v, rg.r};
    size_t counts[4] = {B * T * H * D, B * T * KV * D, B * T * KV * D, B * TQ * H * D};
    for (int i = 0; i < 4; i++) hp_test_fill_uniform(hp_program_data(p, ins[i]), counts[i], 40 + (uint64_t)i, -1, 1);
    assert_ok(hp_program_run(p));
    expect_close(p, rg.g, rg.o, rg.ref_o, 1e-5, 1e-6);
    expect_close(p, rg.g, rg.lse, rg.ref_lse, 1e-5, 1e-6);
    expect_close(p, rg.g, rg.dq, rg.ref_dq, 1e-4, 1e-6);
    expect_close(p, rg.g, rg.dk, rg.ref_dk, 1e-4, 1e-6);
    expect_close(p, rg.g, rg.dv, rg.ref_dv, 1e-4, 1e-6);
    /* central differences of sum(r o) against the per-block backward, every input element */
    hp_tid grads[3] = {rg.dq, rg.dk, rg.dv};
    for (int t = 0; t < 3; t++) {
        float *x = hp_program_data(p, ins[t]);
        size_t n = counts[t];
        float *gcopy = malloc(sizeof(float) * (t == 0 ? (size_t)(B * TQ * H * D) : n));
        memcpy(gcopy, hp_program_data(p, grads[t]), sizeof(float) * (t == 0 ? (size_t)(B * TQ * H * D) : n));
        for (size_t i = 0; i < n; i += 2) {
            int64_t row = (int64_t)(i / (size_t)(t == 0 ? H * D : KV * D)) % T;
            if (t == 0 && (row < Q0 || row >= Q0 + TQ)) continue; /* q rows outside the block */
            float x0 = x[i], h = 1e-2f;
            x[i] = x0 + h;
            assert_ok(hp_program_run(p));
            double lp = loss_of(p, &rg);
            x[i] = x0 - h;
            assert_ok(hp_program_run(p));
            double lm = loss_of(p, &rg);
            x[i] = x0;
            double fd = (lp - lm) / (2.0 * h), an;
            if (t == 0) {
                size_t b = i / (size_t)(T * H * D), rest = i % (size_t)(H * D);
                an = gcopy[(b * TQ + (size_t)(row - Q0)) * H * D + rest];
            } else {
                an = gcopy[i];
            }
            assert_close(an, fd, 2e-2, 2e-3);
        }
        free(gcopy);
    }
    hp_program_free(p);
    hp_graph_free(rg.g);
}

static void test_ring_pieces(void **state) {
    (void)state;
    check_ring_pieces(true);
    check_ring_pieces(false);
}

static void test_merge_shape_error(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid o = hp_input(g, "o", HP_DTYPE_F32, HP_SHAPE(1, 4, 6));
    hp_tid l = hp_input(g, "l", HP_DTYPE_F32, HP_SHAPE(1, 2, 4));
    hp_tid bad = hp_input(g, "bad", HP_DTYPE_F32, HP_SHAPE(1, 2, 5));
    (void)hp_attention_merge(g, o, l, o, bad, 2, NULL);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("input 3");
    hp_graph_free(g);
}

/* The load-balanced order: block r of the permuted sequence is chunk r then chunk 2n - 1 - r. */
static void test_balance_positions(void **state) {
    (void)state;
    int32_t pos[16];
    assert_ok(hp_ring_balance_positions(8, 2, pos)); /* chunks of 2: rank 0 {0, 3}, rank 1 {1, 2} */
    const int32_t want8[8] = {0, 1, 6, 7, 2, 3, 4, 5};
    assert_memory_equal(pos, want8, sizeof want8);
    assert_ok(hp_ring_balance_positions(7, 2, pos)); /* blocks 4 + 3: chunks 2, 2, 1, 2 */
    const int32_t want7[7] = {0, 1, 5, 6, 2, 3, 4};
    assert_memory_equal(pos, want7, sizeof want7);
    assert_ok(hp_ring_balance_positions(10, 4, pos)); /* blocks 3 3 3 1: chunks 2 2 2 1 0 1 1 1 */
    const int32_t want10[10] = {0, 1, 9, 2, 3, 8, 4, 5, 7, 6};
    assert_memory_equal(pos, want10, sizeof want10);
    for (int n = 1; n <= 5; n++) /* always a permutation */
        for (int T = 1; T <= 16; T++) {
            assert_ok(hp_ring_balance_positions(T, n, pos));
            int seen[16] = {0};
            for (int p = 0; p < T; p++) seen[pos[p]]++;
            for (int p = 0; p < T; p++) assert_int_equal(seen[p], 1);
        }
    assert_int_equal(hp_ring_balance_positions(0, 2, pos), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("T 0");
}

/* Attention over the load-balanced order runs only as ring attention: on one device it is refused. */
static void test_balanced_needs_ring(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(1, 4, 4));
    hp_tid o = hp_attention_balanced(g, q, q, q, 2, 2, 2);
    assert_ok(hp_graph_status(g));
    hp_program *p;
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = &o;
    po.n_keep = 1;
    assert_ok(hp_program_new(g, &po, &p));
    assert_int_equal(hp_program_run(p), HP_STATUS_UNSUPPORTED);
    hp_test_assert_error_contains("runs only as ring attention");
    hp_program_free(p);
    (void)hp_attention_balanced(g, q, q, q, 2, 2, 1);
    assert_int_equal(hp_graph_status(g), HP_STATUS_INVALID_ARGUMENT);
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_balance_positions),
        cmocka_unit_test(test_balanced_needs_ring),
        cmocka_unit_test(test_block_grad),
        cmocka_unit_test(test_block_empty_rows),
        cmocka_unit_test(test_ring_pieces),
        cmocka_unit_test(test_merge_shape_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
