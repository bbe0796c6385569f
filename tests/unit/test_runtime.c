/* Runtime: liveness, the static memory plan, plan vs reference execution, the program API. */
#include "testutil.h"

#include "hp/liveness.h"
#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASSERT_USES(lv, tid, ...)                                                                    \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        int nw_ = (int)(sizeof want_ / sizeof want_[0]);                                           \
        const hp_tensor_liveness *l_ = &(lv)->t[tid];                                                \
        if (l_->n_uses != nw_) fail_msg("tensor %d: %d uses, want %d", (int)(tid), l_->n_uses, nw_); \
        for (int k_ = 0; k_ < nw_; k_++)                                                           \
            if (l_->uses[k_] != want_[k_])                                                         \
                fail_msg("tensor %d use %d: node %d, want %d", (int)(tid), k_, l_->uses[k_], want_[k_]); \
    } while (0)

/* ---------------------------------------------------------------- liveness */

static void test_liveness_hand_built(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(2, 3)); /* leaves */
    hp_tid w = hp_param(g, "w", HP_SHAPE(2, 3));
    hp_tid a = hp_add(g, x, w);     /* node 0 */
    hp_tid b = hp_mul(g, a, a);     /* node 1: a used twice, counted once */
    hp_tid c = hp_scale(g, b, 2.f); /* node 2 */
    hp_tid d = hp_sub(g, c, a);     /* node 3 */
    hp_tid e = hp_scale(g, x, 3.f); /* node 4: dead (nobody uses e) */
    hp_tid s = hp_sum(g, d, -1);    /* node 5: kept */
    hp_graph_set_node_flags(g, HP_NODE_FLAG_INPLACE);
    hp_tid f = hp_copy(g, c); /* node 6: in place, so live although f is unused */
    hp_graph_set_node_flags(g, 0);
    assert_ok(hp_graph_status(g));

    hp_liveness lv;
    assert_ok(hp_liveness_compute(g, &s, 1, &lv));
    assert_int_equal(lv.n_nodes, 7);
    bool want_live[7] = {1, 1, 1, 1, 0, 1, 1};
    for (int i = 0; i < 7; i++) assert_int_equal(lv.node_live[i], want_live[i]);
    assert_int_equal(lv.n_live_nodes, 6);

    ASSERT_USES(&lv, x, 0); /* node 4 is dead: not a use */
    ASSERT_USES(&lv, w, 0);
    ASSERT_USES(&lv, a, 1, 3);
    ASSERT_USES(&lv, b, 2);
    ASSERT_USES(&lv, c, 3, 6);
    ASSERT_USES(&lv, d, 5);
    assert_int_equal(lv.t[s].n_uses, 0);

    assert_int_equal(lv.t[a].def, 0);
    assert_int_equal(lv.t[a].first_use, 1);
    assert_int_equal(lv.t[a].last_use, 3);
    assert_int_equal(lv.t[a].start, 0);
    assert_int_equal(lv.t[a].end, 3);
    assert_int_equal(lv.t[c].end, 6); /* the in-place write extends c's life */
    assert_int_equal(lv.t[x].def, -1);
    assert_true(lv.t[x].persistent && lv.t[w].persistent);
    assert_int_equal(lv.t[x].start, 0);
    assert_false(lv.t[a].persistent);

    assert_false(lv.t[e].live);
    assert_int_equal(lv.t[e].start, -1);
    assert_true(lv.t[f].live); /* defined by a live node, never read */
    assert_int_equal(lv.t[f].start, 6);
    assert_int_equal(lv.t[f].end, 6);

    assert_true(lv.t[s].kept && lv.t[s].persistent);
    assert_int_equal(lv.t[s].def, 5);
    assert_int_equal(lv.t[s].end, 6); /* read by the caller after the last node */
    hp_liveness_free(&lv);
    hp_liveness_free(&lv); /* idempotent */

    hp_tid bad = 999;
    assert_int_equal(hp_liveness_compute(g, &bad, 1, &lv), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("999");
    hp_graph_free(g);
}

/* ---------------------------------------------------------------- planner */

static bool bytes_overlap(size_t o1, size_t n1, size_t o2, size_t n2) {
    return n1 && n2 && o1 < o2 + n2 && o2 < o1 + n1;
}

static void test_memplan_random_intervals(void **state) {
    (void)state;
    uint64_t r = 12345;
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + trial * 3;
        hp_mem_interval *b = calloc((size_t)n, sizeof *b);
        size_t naive = 0, peak_live = 0;
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            int s = (int)((r >> 33) % 40);
            int len = (int)((r >> 45) % 12);
            b[i] = (hp_mem_interval){(size_t)((r >> 20) % 5000), s, s + len, 0};
            naive += (b[i].bytes + 63) & ~(size_t)63;
        }
        size_t arena;
        assert_ok(hp_memplan_assign(b, n, 64, &arena));
        for (int pt = 0; pt < 52; pt++) {
            size_t live = 0;
            for (int i = 0; i < n; i++)
                if (b[i].start <= pt && pt <= b[i].end) live += (b[i].bytes + 63) & ~(size_t)63;
            if (live > peak_live) peak_live = live;
        }
        for (int i = 0; i < n; i++) {
            assert_int_equal(b[i].offset % 64, 0);
            assert_true(b[i].offset + b[i].bytes <= arena);
            for (int j = i + 1; j < n; j++)
                if (b[i].start <= b[j].end && b[j].start <= b[i].end &&
                    bytes_overlap(b[i].offset, b[i].bytes, b[j].offset, b[j].bytes))
                    fail_msg("trial %d: blocks %d [%d,%d] @%zu+%zu and %d [%d,%d] @%zu+%zu overlap", trial, i,
                             b[i].start, b[i].end, b[i].offset, b[i].bytes, j, b[j].start, b[j].end, b[j].offset,
                             b[j].bytes);
        }
        assert_true(arena >= peak_live); /* a lower bound no plan can beat */
        assert_true(arena <= naive);
        free(b);
    }
    size_t arena;
    hp_mem_interval bad = {64, 3, 2, 0};
    assert_int_equal(hp_memplan_assign(&bad, 1, 64, &arena), HP_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hp_memplan_assign(NULL, 0, 48, &arena), HP_STATUS_INVALID_ARGUMENT);
}

/* Follows RESHAPE views to the tensor that owns the storage. */
static hp_tid storage_root(hp_program *p, const hp_graph *g, hp_tid t) {
    for (;;) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->producer < 0) return t;
        const hp_node *n = hp_graph_node(g, x->producer);
        size_t o1, o2;
        if (n->op != HP_OP_RESHAPE || !hp_program_arena_offset(p, t, &o1) ||
            !hp_program_arena_offset(p, n->in[0], &o2) || o1 != o2)
            return t;
        t = n->in[0];
    }
}

/* At every program point, no two planned tensors live there share a byte (views excepted). */
static void check_no_overlap(hp_program *p, const hp_graph *g) {
    const hp_liveness *lv = hp_program_liveness(p);
    int nt = lv->n_tensors, checked = 0;
    for (int pt = 0; pt < lv->n_nodes; pt++) {
        for (hp_tid i = 0; i < nt; i++) {
            size_t oi, oj;
            const hp_tensor_liveness *li = &lv->t[i];
            if (!hp_program_arena_offset(p, i, &oi) || li->start > pt || li->end < pt) continue;
            size_t ni = (size_t)hp_shape_numel(&hp_graph_tensor(g, i)->shape) * 4;
            for (hp_tid j = i + 1; j < nt; j++) {
                const hp_tensor_liveness *lj = &lv->t[j];
                if (!hp_program_arena_offset(p, j, &oj) || lj->start > pt || lj->end < pt) continue;
                if (storage_root(p, g, i) == storage_root(p, g, j)) continue;
                size_t nj = (size_t)hp_shape_numel(&hp_graph_tensor(g, j)->shape) * 4;
                checked++;
                if (bytes_overlap(oi, ni, oj, nj))
                    fail_msg("at node %d tensors %d (@%zu+%zu, [%d,%d]) and %d (@%zu+%zu, [%d,%d]) overlap", pt, i,
                             oi, ni, li->start, li->end, j, oj, nj, lj->start, lj->end);
            }
        }
    }
    assert_true(checked > 0);
}

static void test_chain_arena_smaller(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(64, 64));
    hp_tid y = x;
    for (int i = 0; i < 20; i++) y = hp_scale(g, y, 1.01f);
    hp_program *p;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &y;
    o.n_keep = 1;
    assert_ok(hp_program_new(g, &o, &p));
    hp_program_stats s;
    hp_program_get_stats(p, &s);
    size_t one = 64 * 64 * 4;
    assert_int_equal(s.n_planned, 19); /* the last one is kept */
    assert_int_equal(s.naive_bytes, 19 * one);
    assert_int_equal(s.arena_bytes, 2 * one); /* ping-pong: a producer and its consumer */
    assert_int_equal(s.peak_live_bytes, 2 * one);
    assert_int_equal(s.persistent_bytes, 2 * one);
    check_no_overlap(p, g);
    hp_program_free(p);
    hp_graph_free(g);
}

/* ---------------------------------------------------------------- random composed graphs */

typedef struct {
    hp_graph *g;
    hp_tid leaves[4];
    hp_tid keep[8];
    int n_keep;
} rand_graph;

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A DAG of ~n_ops nodes over (8, 16) tensors built from add/sub/mul/scale/sum/mean/reshape/fill/copy,
 * reaching both short- and long-lived tensors (operands are drawn from the whole pool). */
static rand_graph build_random(uint64_t seed, int n_ops) {
    rand_graph r = {0};
    hp_graph *g = r.g = hp_graph_new();
    hp_tid pool[256];
    int np = 0;
    uint64_t s = seed * 2654435761u + 7;
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        r.leaves[i] = pool[np++] = i < 3 ? hp_param(g, name, HP_SHAPE(8, 16)) : hp_input(g, name, HP_DTYPE_F32, HP_SHAPE(8, 16));
    }
    for (int k = 0; k < n_ops && np < 250; k++) {
        uint64_t v = rng_next(&s);
        /* operands: half the time among the 4 newest, else anywhere (long lifetimes) */
        hp_tid a = pool[(v >> 8) & 1 ? np - 1 - (int)((v >> 12) % (np < 4 ? np : 4)) : (int)((v >> 16) % np)];
        hp_tid b = pool[(int)((v >> 24) % np)];
        hp_tid y;
        switch ((v >> 32) % 10) {
        case 0: y = hp_add(g, a, b); break;
        case 1: y = hp_sub(g, a, b); break;
        case 2: y = hp_mul(g, hp_scale(g, a, 0.5f), b); break;
        case 3: y = hp_scale(g, a, -0.75f); break;
        case 4: y = hp_add(g, b, hp_sum(g, a, 0)); break; /* (16) broadcast over rows */
        case 5: y = hp_add(g, b, hp_reshape(g, hp_mean(g, a, 1), HP_SHAPE(8, 1))); break;
        case 6: y = hp_mul(g, b, hp_mean(g, a, -1)); break; /* scalar broadcast */
        case 7: y = hp_reshape(g, hp_scale(g, hp_reshape(g, a, HP_SHAPE(4, 32)), 2.f), HP_SHAPE(8, 16)); break;
        case 8: y = hp_add(g, a, hp_fill(g, HP_SHAPE(8, 16), 0.25f)); break;
        default: y = hp_copy(g, a); break;
        }
        pool[np++] = y;
        if (r.n_keep < 6 && (v >> 40) % 13 == 0) r.keep[r.n_keep++] = y;
    }
    hp_tid loss = hp_sum(g, hp_add(g, pool[np - 1], pool[np - 2]), -1);
    r.keep[r.n_keep++] = loss;
    return r;
}

typedef struct {
    int n;
    void *v[8];
    size_t bytes[8];
} snapshot;

static void run_and_snapshot(rand_graph *r, hp_program_opts o, int runs, snapshot *out, hp_program_stats *st) {
    hp_program *p;
    o.keep = r->keep;
    o.n_keep = r->n_keep;
    assert_ok(hp_program_new(r->g, &o, &p));
    for (int i = 0; i < 4; i++) {
        float buf[128];
        hp_test_fill_uniform(buf, 128, 11 + (uint64_t)i, -1, 1);
        assert_ok(hp_program_set_input(p, r->leaves[i], buf, sizeof buf));
    }
    for (int k = 0; k < runs; k++) assert_ok(hp_program_run(p));
    if (o.plan_memory) check_no_overlap(p, r->g);
    out->n = r->n_keep;
    for (int k = 0; k < r->n_keep; k++) {
        const hp_tensor *t = hp_graph_tensor(r->g, r->keep[k]);
        out->bytes[k] = (size_t)hp_shape_numel(&t->shape) * 4;
        out->v[k] = malloc(out->bytes[k]);
        assert_non_null(hp_program_data(p, r->keep[k]));
        assert_ok(hp_program_get_output(p, r->keep[k], out->v[k], out->bytes[k]));
    }
    hp_program_get_stats(p, st);
    hp_program_free(p);
}

static void assert_same(const snapshot *a, const snapshot *b, uint64_t seed) {
    assert_int_equal(a->n, b->n);
    for (int k = 0; k < a->n; k++)
        if (a->bytes[k] != b->bytes[k] || memcmp(a->v[k], b->v[k], a->bytes[k]) != 0)
            fail_msg("seed %llu: kept tensor %d differs between plan and reference", (unsigned long long)seed, k);
}

static void free_snapshot(snapshot *s) {
    for (int k = 0; k < s->n; k++) free(s->v[k]);
}

static void test_plan_matches_reference(void **state) {
    (void)state;
    size_t tot_naive = 0, tot_arena = 0, tot_arena_noview = 0, tot_peak = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        rand_graph r = build_random(seed, 40 + 5 * (int)seed);
        assert_ok(hp_graph_status(r.g));
        hp_program_opts ref = HP_PROGRAM_OPTS_DEFAULT, plan = HP_PROGRAM_OPTS_DEFAULT, noview = HP_PROGRAM_OPTS_DEFAULT;
        ref.plan_memory = false;
        noview.view_reshape = false;
        snapshot s_ref, s_plan, s_noview, s_twice;
        hp_program_stats st_ref, st_plan, st_noview, st_twice;
        run_and_snapshot(&r, ref, 1, &s_ref, &st_ref);
        run_and_snapshot(&r, plan, 1, &s_plan, &st_plan);
        run_and_snapshot(&r, noview, 1, &s_noview, &st_noview);
        run_and_snapshot(&r, plan, 3, &s_twice, &st_twice); /* no state leaks between steps */
        assert_same(&s_ref, &s_plan, seed);
        assert_same(&s_ref, &s_noview, seed);
        assert_same(&s_ref, &s_twice, seed);
        assert_int_equal(st_ref.naive_bytes, st_plan.naive_bytes);
        assert_true(st_plan.arena_bytes < st_plan.naive_bytes);
        assert_true(st_plan.arena_bytes >= st_plan.peak_live_bytes);
        assert_true(st_plan.arena_bytes <= st_noview.arena_bytes + 4096);
        assert_int_equal(st_plan.n_nodes + st_plan.n_views, st_ref.n_nodes);
        tot_naive += st_plan.naive_bytes;
        tot_arena += st_plan.arena_bytes;
        tot_peak += st_plan.peak_live_bytes;
        tot_arena_noview += st_noview.arena_bytes;
        free_snapshot(&s_ref);
        free_snapshot(&s_plan);
        free_snapshot(&s_noview);
        free_snapshot(&s_twice);
        hp_graph_free(r.g);
    }
    print_message("random graphs: naive %zu bytes, arena %zu (reshape views) / %zu (copies), peak live %zu\n",
                  tot_naive, tot_arena, tot_arena_noview, tot_peak);
}

/* ---------------------------------------------------------------- a GPT training step */

typedef struct {
    float loss[2], grad_sq[2];
    float *params; /* every parameter after two steps, concatenated */
    size_t n;
    hp_program_stats st;
} gpt_result;

static void run_gpt(hp_graph *g, const hp_gpt *m, const hp_train_step *ts, hp_program_opts o, gpt_result *r) {
    hp_tid keep[2] = {ts->loss, ts->grad_sq};
    o.keep = keep;
    o.n_keep = 2;
    hp_program *p;
    assert_ok(hp_program_new(g, &o, &p));
    if (o.plan_memory) check_no_overlap(p, g);
    r->n = 0;
    for (int i = 0; i < ts->n_params; i++) {
        const hp_tensor *t = hp_graph_tensor(g, ts->params[i]);
        int64_t n = hp_shape_numel(&t->shape);
        assert_ok(hp_gpt_init_param(&m->cfg, t->name, 42, 0, n, hp_program_data(p, ts->params[i])));
        r->n += (size_t)n;
    }
    size_t nt = (size_t)hp_shape_numel(&hp_graph_tensor(g, m->tokens)->shape);
    int32_t *tok = malloc(nt * sizeof *tok), *tgt = malloc(nt * sizeof *tgt);
    assert_non_null(tok);
    assert_non_null(tgt);
    for (size_t i = 0; i < nt; i++) {
        tok[i] = (int32_t)((i * 7 + 3) % (size_t)m->cfg.vocab);
        tgt[i] = (int32_t)((i * 5 + 1) % (size_t)m->cfg.vocab);
    }
    assert_ok(hp_program_set_input(p, m->tokens, tok, nt * sizeof *tok));
    assert_ok(hp_program_set_input(p, m->targets, tgt, nt * sizeof *tgt));
    free(tok);
    free(tgt);
    float lr = 1e-3f;
    assert_ok(hp_program_set_input(p, ts->lr, &lr, sizeof lr));
    for (int k = 0; k < 2; k++) {
        float step = (float)(k + 1);
        assert_ok(hp_program_set_input(p, ts->step, &step, sizeof step));
        /* Poison every activation (NaN bytes) before the step: a kernel that reads an output
         * before writing it, or accumulates into it without clearing, shows up as a mismatch. */
        for (hp_tid t = 0; t < hp_graph_n_tensors(g); t++) {
            void *d = hp_program_data(p, t);
            const hp_tensor *x = hp_graph_tensor(g, t);
            if (d && x->kind == HP_TENSOR_KIND_ACTIVATION)
                memset(d, 0xff, (size_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype));
        }
        assert_ok(hp_program_run(p));
        assert_ok(hp_program_get_output(p, ts->loss, &r->loss[k], sizeof(float)));
        assert_ok(hp_program_get_output(p, ts->grad_sq, &r->grad_sq[k], sizeof(float)));
    }
    r->params = malloc(r->n * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < ts->n_params; i++) {
        size_t n = (size_t)hp_shape_numel(&hp_graph_tensor(g, ts->params[i])->shape);
        assert_ok(hp_program_get_output(p, ts->params[i], r->params + at, n * sizeof(float)));
        at += n;
    }
    hp_program_get_stats(p, &r->st);
    hp_program_free(p);
}

static void test_gpt_step_plan_matches_reference(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_gpt_config c = {.vocab = 64, .context = 16, .layers = 2, .heads = 2, .width = 32, .tied_head = true};
    hp_gpt m;
    hp_status st = hp_gpt_build(g, &c, 2, 16, true, &m);
    hp_train_step ts;
    hp_optim_config oc = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
    if (st == HP_STATUS_OK) st = hp_train_step_build(g, m.loss, &oc, &ts);
    if (st == HP_STATUS_UNSUPPORTED) { /* an operator still being written */
        hp_graph_free(g);
        skip();
    }
    assert_ok(st);
    hp_program_opts ref = HP_PROGRAM_OPTS_DEFAULT, plan = HP_PROGRAM_OPTS_DEFAULT;
    ref.plan_memory = false;
    gpt_result a, b;
    run_gpt(g, &m, &ts, ref, &a);
    run_gpt(g, &m, &ts, plan, &b);
    for (int k = 0; k < 2; k++) {
        assert_memory_equal(&a.loss[k], &b.loss[k], sizeof(float));
        assert_memory_equal(&a.grad_sq[k], &b.grad_sq[k], sizeof(float));
    }
    assert_true(a.loss[1] < a.loss[0]);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.params, b.params, a.n * sizeof(float));
    assert_true(b.st.arena_bytes < b.st.naive_bytes / 2);
    assert_true(b.st.arena_bytes >= b.st.peak_live_bytes);
    print_message("GPT L2 C32 B2 T16 step (%d nodes, %d activations): naive %zu bytes, arena %zu (%.1f%%), "
                  "peak live %zu, persistent %zu, %d reshape views\n",
                  b.st.n_nodes, b.st.n_planned, b.st.naive_bytes, b.st.arena_bytes,
                  100.0 * (double)b.st.arena_bytes / (double)b.st.naive_bytes, b.st.peak_live_bytes,
                  b.st.persistent_bytes, b.st.n_views);
    free(a.params);
    free(b.params);
    hp_graph_free(g);
}

/* The CPU backend runs a program's nodes in one thread team (src/backend/cpu/team.h) unless
 * opts.node_by_node: both must give bitwise the same losses, gradient norms and parameters (the
 * GEMM row split depends on the shape only), on a model large enough for GEMMs to be split. */
static void test_team_matches_node_by_node(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_gpt_config c = {.vocab = 64, .context = 64, .layers = 2, .heads = 2, .width = 128, .tied_head = false};
    hp_gpt m;
    hp_train_step ts;
    hp_optim_config oc = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
    assert_ok(hp_gpt_build(g, &c, 4, 64, true, &m));
    assert_ok(hp_train_step_build(g, m.loss, &oc, &ts));
    hp_program_opts one = HP_PROGRAM_OPTS_DEFAULT, team = HP_PROGRAM_OPTS_DEFAULT;
    one.node_by_node = true;
    gpt_result a, b, b2;
    run_gpt(g, &m, &ts, one, &a);
    run_gpt(g, &m, &ts, team, &b);
    run_gpt(g, &m, &ts, team, &b2);
    for (int k = 0; k < 2; k++) {
        assert_memory_equal(&a.loss[k], &b.loss[k], sizeof(float));
        assert_memory_equal(&a.grad_sq[k], &b.grad_sq[k], sizeof(float));
        assert_memory_equal(&b.loss[k], &b2.loss[k], sizeof(float));
    }
    assert_true(b.loss[1] < b.loss[0]);
    assert_memory_equal(a.params, b.params, a.n * sizeof(float));
    assert_memory_equal(b.params, b2.params, b.n * sizeof(float));
    free(a.params);
    free(b.params);
    free(b2.params);
    hp_graph_free(g);
}

/* A kernel error inside the team (ADAMW, a team kernel, with step 0; and a non-team kernel
 * after it) stops the run and names the node, as the node-by-node path does. */
static void test_team_error_names_node(void **state) {
    (void)state;
    for (int by_node = 0; by_node < 2; by_node++) {
        hp_graph *g = hp_graph_new();
        hp_tid w = hp_param(g, "w", HP_SHAPE(4096)), gr = hp_param(g, "g", HP_SHAPE(4096));
        hp_tid m = hp_param(g, "m", HP_SHAPE(4096)), v = hp_param(g, "v", HP_SHAPE(4096));
        hp_tid lr = hp_input(g, "lr", HP_DTYPE_F32, HP_SHAPE(1)), step = hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE(1));
        hp_tid y = hp_scale(g, w, 2.0f);
        hp_tid in[6] = {w, gr, m, v, lr, step};
        hp_attrs at = {0};
        at.f[0] = 0.9f;
        at.f[1] = 0.95f;
        at.f[2] = 1e-8f;
        at.f[3] = 0.1f;
        hp_graph_add_node(g, HP_OP_ADAMW, in, 6, &at);
        assert_ok(hp_graph_status(g));
        hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
        o.keep = &y;
        o.n_keep = 1;
        o.node_by_node = by_node;
        hp_program *p;
        assert_ok(hp_program_new(g, &o, &p));
        float one = 1.0f, zero = 0.0f;
        assert_ok(hp_program_set_input(p, lr, &one, sizeof one));
        assert_ok(hp_program_set_input(p, step, &zero, sizeof zero));
        assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
        hp_test_assert_error_contains("adamw");
        hp_test_assert_error_contains("step must be >= 1");
        assert_ok(hp_program_set_input(p, step, &one, sizeof one));
        assert_ok(hp_program_run(p)); /* the program still runs after an error */
        hp_program_free(p);
        hp_graph_free(g);
    }
}

/* ---------------------------------------------------------------- API and errors */

static void test_program_api(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(4, 8));
    hp_tid w = hp_param(g, "w", HP_SHAPE(8));
    hp_tid h = hp_mul(g, x, w);
    hp_tid y = hp_add(g, hp_scale(g, h, 2.f), x);
    hp_tid m = hp_mean(g, y, -1);
    assert_ok(hp_graph_status(g));
    hp_program *p;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &m;
    o.n_keep = 1;
    o.profile = true;
    assert_ok(hp_program_new(g, &o, &p));
    float xv[32], wv[8];
    for (int i = 0; i < 32; i++) xv[i] = (float)i;
    for (int i = 0; i < 8; i++) wv[i] = 1.f;
    assert_ok(hp_program_set_input(p, x, xv, sizeof xv));
    assert_ok(hp_program_set_input(p, w, wv, sizeof wv));
    assert_ok(hp_program_run(p));
    float mv = 0;
    assert_ok(hp_program_get_output(p, m, &mv, sizeof mv));
    assert_close(mv, 3 * 15.5, 1e-6, 1e-6);
    assert_close(*(float *)hp_program_data(p, m), mv, 0, 0);
    assert_null(hp_program_data(p, h)); /* planned: storage reused */
    assert_null(hp_program_data(p, 12345));
    size_t off;
    assert_true(hp_program_arena_offset(p, h, &off));
    assert_false(hp_program_arena_offset(p, m, &off));

    assert_int_equal(hp_program_set_input(p, x, xv, 16), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("16 bytes");
    hp_test_assert_error_contains("128");
    assert_int_equal(hp_program_set_input(p, h, xv, sizeof xv), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("opts.keep");
    assert_int_equal(hp_program_get_output(p, -3, &mv, 4), HP_STATUS_INVALID_ARGUMENT);

    hp_program_stats s;
    hp_program_get_stats(p, &s);
    assert_int_equal(s.n_runs, 1);
    assert_int_equal(s.op_calls[HP_OP_MUL], 1);
    assert_true(s.op_flops[HP_OP_ADD] > 0);
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_ok(hp_program_profile_report(p, f));
    char text[4096] = {0};
    rewind(f);
    size_t nr = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    assert_true(nr > 0);
    assert_non_null(strstr(text, "GFLOP/s"));
    assert_non_null(strstr(text, "mul "));
    assert_non_null(strstr(text, "memory: arena"));
    hp_program_free(p);

    /* reference mode keeps every activation readable */
    o.plan_memory = false;
    o.profile = false;
    assert_ok(hp_program_new(g, &o, &p));
    assert_non_null(hp_program_data(p, h));
    hp_program_free(p);
    hp_graph_free(g);
}

static void test_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid a = hp_param(g, "a", HP_SHAPE(3, 4));
    hp_tid b = hp_param(g, "b", HP_SHAPE(5));
    assert_int_equal(hp_add(g, a, b), HP_TID_NONE);
    hp_program *p = (hp_program *)&p;
    assert_int_equal(hp_program_new(g, NULL, &p), HP_STATUS_SHAPE);
    assert_null(p);
    hp_test_assert_error_contains("[3, 4]");
    hp_graph_free(g);

    g = hp_graph_new();
    a = hp_param(g, "a", HP_SHAPE(3));
    hp_tid y = hp_scale(g, a, 2.f);
    (void)y;
    hp_tid bad[2] = {y, 77};
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = bad;
    o.n_keep = 2;
    assert_int_equal(hp_program_new(g, &o, &p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("keep[1] = 77");
    hp_graph_free(g);
}

/* HP_PROGRESS: a known name is taken, anything else is an error naming it (never a silent auto). */
static void test_progress_env(void **state) {
    (void)state;
    hp_progress pr;
    setenv("HP_PROGRESS", "sleep", 1);
    assert_ok(hp_progress_auto(&pr));
    assert_int_equal(pr, HP_PROGRESS_SLEEP);
    setenv("HP_PROGRESS", "yeild", 1);
    assert_int_equal(hp_progress_auto(&pr), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("HP_PROGRESS='yeild'");
    hp_graph *g = hp_graph_new();
    hp_tid y = hp_scale(g, hp_param(g, "a", HP_SHAPE(3)), 2.f);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &y;
    o.n_keep = 1;
    hp_program *p = (hp_program *)&p;
    assert_int_equal(hp_program_new(g, &o, &p), HP_STATUS_INVALID_ARGUMENT);
    assert_null(p);
    unsetenv("HP_PROGRESS");
    assert_ok(hp_progress_auto(&pr));
    assert_true(pr != HP_PROGRESS_AUTO);
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_liveness_hand_built),
        cmocka_unit_test(test_memplan_random_intervals),
        cmocka_unit_test(test_chain_arena_smaller),
        cmocka_unit_test(test_plan_matches_reference),
        cmocka_unit_test(test_gpt_step_plan_matches_reference),
        cmocka_unit_test(test_team_matches_node_by_node),
        cmocka_unit_test(test_team_error_names_node),
        cmocka_unit_test(test_program_api),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_progress_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
