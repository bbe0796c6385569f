/* HyperOffload's automatic mode: the residency planner, the inserted operators, the runtime with
 * slow-tier homes, bitwise equality of training with and without offload, faults, the config. */
#include "testutil.h"

#include "hp/nn.h"
#include "hp/offload_plan.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/train.h"
#include "hp/yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- a GPT training step */

typedef struct {
    hp_graph *g;
    hp_gpt m;
    hp_train_step ts;
    hp_tid keep[2];
} gpt;

#define MAX_ROWS 16
static int g_rows = 2;       /* batch rows of gpt_build and run_steps (16 positions each) */
static bool g_abandon;       /* run_steps_ranged: each step first runs its first half and abandons it */

static void gpt_build(gpt *x, int layers) {
    x->g = hp_graph_new();
    hp_gpt_config c = {.vocab = 64, .context = 16, .layers = layers, .heads = 2, .width = 32, .tied_head = true};
    assert_ok(hp_gpt_build(x->g, &c, g_rows, 16, true, &x->m));
    hp_optim_config oc = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
    assert_ok(hp_train_step_build(x->g, x->m.loss, &oc, &x->ts));
    x->keep[0] = x->ts.loss;
    x->keep[1] = x->ts.grad_sq;
}

typedef struct {
    float loss[3];
    float *params;
    size_t n;
    hp_program_stats st;
} result;

/* Three steps; parameters initialised and read through set_input / get_output (they may be on disk).
 * range > 0: each step runs as consecutive node ranges of `range` nodes (hp_program_run_nodes). */
static hp_status run_steps_ranged(gpt *x, hp_program_opts o, result *r, int steps, int range) {
    o.keep = x->keep;
    o.n_keep = 2;
    hp_program *p;
    HP_CHECK(hp_program_new(x->g, &o, &p));
    hp_status st = HP_STATUS_OK;
    r->n = 0;
    for (int i = 0; i < x->ts.n_params; i++) r->n += (size_t)hp_shape_numel(&hp_graph_tensor(x->g, x->ts.params[i])->shape);
    r->params = malloc(r->n * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < x->ts.n_params && st == HP_STATUS_OK; i++) {
        const hp_tensor *t = hp_graph_tensor(x->g, x->ts.params[i]);
        int64_t n = hp_shape_numel(&t->shape);
        st = hp_gpt_init_param(&x->m.cfg, t->name, 42, 0, n, r->params + at);
        if (st == HP_STATUS_OK) st = hp_program_set_input(p, x->ts.params[i], r->params + at, (size_t)n * sizeof(float));
        at += (size_t)n;
    }
    int32_t tok[MAX_ROWS * 16], tgt[MAX_ROWS * 16];
    size_t n_tok = (size_t)g_rows * 16;
    for (size_t i = 0; i < n_tok; i++) {
        tok[i] = (int32_t)((i * 7 + 3) % 64);
        tgt[i] = (int32_t)((i * 5 + 1) % 64);
    }
    float lr = 1e-3f;
    if (st == HP_STATUS_OK) st = hp_program_set_input(p, x->m.tokens, tok, n_tok * sizeof *tok);
    if (st == HP_STATUS_OK) st = hp_program_set_input(p, x->m.targets, tgt, n_tok * sizeof *tgt);
    if (st == HP_STATUS_OK) st = hp_program_set_input(p, x->ts.lr, &lr, sizeof lr);
    for (int k = 0; k < steps && st == HP_STATUS_OK; k++) {
        float step = (float)(k + 1);
        st = hp_program_set_input(p, x->ts.step, &step, sizeof step);
        int nn = hp_graph_n_nodes(x->g);
        if (st == HP_STATUS_OK && g_abandon) st = hp_program_run_nodes(p, 0, nn / 2);
        if (st == HP_STATUS_OK && range <= 0) st = hp_program_run(p);
        for (int first = 0; st == HP_STATUS_OK && range > 0 && first < nn; first += range)
            st = hp_program_run_nodes(p, first, first + range < nn ? first + range : nn);
        if (st == HP_STATUS_OK) st = hp_program_get_output(p, x->ts.loss, &r->loss[k], sizeof(float));
    }
    at = 0;
    for (int i = 0; i < x->ts.n_params && st == HP_STATUS_OK; i++) {
        size_t n = (size_t)hp_shape_numel(&hp_graph_tensor(x->g, x->ts.params[i])->shape);
        st = hp_program_get_output(p, x->ts.params[i], r->params + at, n * sizeof(float));
        at += n;
    }
    hp_program_get_stats(p, &r->st);
    hp_program_free(p);
    return st;
}

static hp_status run_steps(gpt *x, hp_program_opts o, result *r, int steps) { return run_steps_ranged(x, o, r, steps, 0); }

static size_t no_offload_peak(gpt *x) {
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    hp_offload_plan *p;
    assert_ok(hp_offload_plan_new(x->g, x->keep, 2, &c, &p));
    hp_offload_plan_stats s;
    hp_offload_plan_get_stats(p, &s);
    hp_offload_plan_free(p);
    return s.peak_before;
}

static void check_structure(hp_graph *g, const hp_offload_state *s);

static const char *disk_dir(void) {
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

/* A plan config with the disk tier at `frac` of `peak`: 1 GB/s disk, 4 KiB chunks (several per tensor). */
static hp_offload_plan_config disk_config(double frac, size_t peak) {
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    c.device_budget = (size_t)(frac * (double)peak);
    c.bandwidth[HP_TIER_DISK] = 1e9;
    c.chunk_bytes = 4096;
    c.disk_dir = disk_dir();
    return c;
}

/* The 2-layer GPT's three steps without offload (*ref) and its no-offload peak. */
static size_t reference_run(result *ref) {
    gpt x;
    gpt_build(&x, 2);
    assert_ok(run_steps(&x, HP_PROGRAM_OPTS_DEFAULT, ref, 3));
    size_t peak = no_offload_peak(&x);
    hp_graph_free(x.g);
    return peak;
}

/* Three steps of x under o (offload applied) within `budget`: losses and parameters bitwise ref's. */
static void assert_bitwise(const result *ref, gpt *x, hp_program_opts o, size_t budget) {
    result r;
    assert_ok(run_steps(x, o, &r, 3));
    assert_true(r.st.device_bytes <= budget);
    assert_memory_equal(ref->loss, r.loss, sizeof ref->loss);
    assert_int_equal(ref->n, r.n);
    assert_memory_equal(ref->params, r.params, ref->n * sizeof(float));
    free(r.params);
}

static void test_gpt_bitwise_every_policy(void **state) {
    (void)state;
    result a;
    size_t peak = reference_run(&a);
    assert_true(a.loss[2] < a.loss[0]);
    /* policies: bit c set = class c offloaded; the last ones send params and states to disk */
    static const struct { unsigned mask; bool disk; } pol[] = {
        {1u << HP_OFFLOAD_CLASS_PARAMS, false}, {1u << HP_OFFLOAD_CLASS_GRADS, false},
        {1u << HP_OFFLOAD_CLASS_OPTIMIZER, false}, {1u << HP_OFFLOAD_CLASS_ACTIVATIONS, false},
        {(1u << HP_OFFLOAD_CLASS_PARAMS) | (1u << HP_OFFLOAD_CLASS_OPTIMIZER), false},
        {(1u << HP_OFFLOAD_CLASS_GRADS) | (1u << HP_OFFLOAD_CLASS_ACTIVATIONS), false},
        {15u, false}, {15u, true}, {(1u << HP_OFFLOAD_CLASS_OPTIMIZER), true},
    };
    /* 50% and 25% of the no-offload peak; a class alone may not reach them (then the planner says
     * so), and is tried at 75%, 90% and 99.9% too so that every policy runs at least once: the
     * peak of this small model is at the start of backward, where gradients alone free little. */
    static const double frac[] = {0.5, 0.25, 0.75, 0.9, 0.999};
    int ran = 0, impossible = 0;
    for (size_t k = 0; k < sizeof pol / sizeof pol[0]; k++) {
        int ran_k = 0;
        for (size_t b = 0; b < 5; b++) {
            if (b >= 2 && ran_k > 0) break;
            hp_offload_plan_config c = disk_config(frac[b], peak);
            if (!pol[k].disk) c.disk_dir = NULL;
            for (int cl = 0; cl < HP_OFFLOAD_CLASS_COUNT; cl++)
                c.policy[cl] = !(pol[k].mask & (1u << cl)) ? HP_TIER_DEVICE
                               : pol[k].disk && cl != HP_OFFLOAD_CLASS_ACTIVATIONS && cl != HP_OFFLOAD_CLASS_GRADS
                                   ? HP_TIER_DISK
                                   : HP_TIER_HOST;
            gpt x;
            gpt_build(&x, 2);
            hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
            o.keep = x.keep;
            o.n_keep = 2;
            hp_offload_state *s = NULL;
            hp_status st = hp_offload_apply_config(&c, x.g, &o, &s);
            if (st == HP_STATUS_OUT_OF_MEMORY && pol[k].mask != 15u) { /* one class alone may not be enough */
                if (getenv("HP_TEST_VERBOSE")) print_message("policy %u budget %.3f: %s\n", pol[k].mask, frac[b], hp_error_message());
                impossible++;
                hp_graph_free(x.g);
                continue;
            }
            if (st != HP_STATUS_OK) fail_msg("policy %u disk %d budget %.2f: %s", pol[k].mask, pol[k].disk, frac[b],
                                             hp_error_message());
            hp_offload_plan_stats ps;
            hp_offload_plan_get_stats(hp_offload_state_plan(s), &ps);
            assert_true(ps.peak_after <= c.device_budget);
            check_structure(x.g, s);
            for (int i = 0; i < hp_graph_n_nodes(x.g); i++)
                assert_true(hp_offload_plan_resident_at(hp_offload_state_plan(s), i) <= c.device_budget);
            assert_bitwise(&a, &x, o, c.device_budget);
            hp_offload_state_free(s);
            hp_graph_free(x.g);
            ran++;
            ran_k++;
        }
        /* Gradients alone cannot lower this model's peak (at the start of backward, before most
         * gradients exist); they run in the combinations. Every other policy must run. */
        if (ran_k == 0 && pol[k].mask != (1u << HP_OFFLOAD_CLASS_GRADS))
            fail_msg("policy %u (disk %d) ran at no budget", pol[k].mask, pol[k].disk);
    }
    print_message("no-offload peak %zu bytes; %d policy/budget runs bitwise equal, %d budgets impossible for a "
                  "single class\n", peak, ran, impossible);
    assert_true(ran >= 10); /* every policy but gradients alone; everything (host, disk) at 50% and 25% */
    free(a.params);
}

/* ---------------------------------------------------------------- node ranges with a disk tier */

/* How many transfers (OFFLOAD, PREFETCH, early reads) have a cut between node ranges of `range`
 * nodes between them and their OFFLOAD_WAIT: transfers in flight at the end of a range. */
static int cuts_in_flight(const hp_graph *g, int range) {
    int nn = hp_graph_n_nodes(g), cuts = 0;
    for (int w = 0; w < nn; w++) {
        const hp_node *wn = hp_graph_node(g, w);
        if (wn->op != HP_OP_OFFLOAD_WAIT || !wn->extra) continue;
        for (int i = w - 1; i >= 0; i--) {
            const hp_node *n = hp_graph_node(g, i);
            if (n->extra != wn->extra || (n->op != HP_OP_OFFLOAD && n->op != HP_OP_PREFETCH)) continue;
            if (i / range != w / range) cuts++;
            break;
        }
    }
    return cuts;
}

/*
 * A disk-tier program run as node ranges (a pipeline stage's F, B and W phases run that way,
 * hp/pipeline.h): a range's end leaves its disk reads and writes in flight (after_range), each
 * waited for by its OFFLOAD_WAIT in a later range, so any cut, including one between a transfer
 * and its wait, gives the whole run's results bitwise; so does a step whose first half was run and
 * abandoned before it (the next run from node 0 drains what the half left). Activations alone on
 * disk, and everything on disk without deferred updates (early reads and their write-backs); with
 * deferred updates (they span steps) a range is refused. Each run gets a fresh program and offload
 * state (the optimizer states' homes live in the state).
 */
static void test_disk_node_ranges(void **state) {
    (void)state;
    g_rows = MAX_ROWS; /* activations weigh more than the parameters and states */
    result a;
    size_t peak = reference_run(&a);
    static const double frac[] = {0.5, 0.75, 0.9, 0.999};
    /* -1: in thirds (like F, B, W); the last: ranges of 7 after a half step abandoned every step */
    static const int ranges[] = {1, 7, 50, -1, 7};
    for (int policy = 0; policy < 3; policy++) {
        double fb = -1;
        for (size_t k = 0; k < 5; k++) {
            g_abandon = k == 4;
            for (size_t b = 0; b < 4; b++) {
                if (fb >= 0 && frac[b] != fb) continue;
                hp_offload_plan_config c = disk_config(frac[b], peak);
                for (int cl = 0; cl < HP_OFFLOAD_CLASS_COUNT; cl++)
                    c.policy[cl] = policy == 0 && cl != HP_OFFLOAD_CLASS_ACTIVATIONS ? HP_TIER_DEVICE : HP_TIER_DISK;
                c.async_update = policy == 2;
                gpt x;
                gpt_build(&x, 2);
                hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
                o.keep = x.keep;
                o.n_keep = 2;
                hp_offload_state *s = NULL;
                hp_status st = hp_offload_apply_config(&c, x.g, &o, &s);
                if (st == HP_STATUS_OUT_OF_MEMORY && fb < 0) {
                    hp_graph_free(x.g);
                    continue;
                }
                assert_ok(st);
                fb = frac[b];
                hp_offload_plan_stats ps;
                hp_offload_plan_get_stats(hp_offload_state_plan(s), &ps);
                assert_true(ps.home_bytes[HP_TIER_DISK] > 0);
                int nn = hp_graph_n_nodes(x.g), range = ranges[k] > 0 ? ranges[k] : (nn + 2) / 3;
                result r;
                if (policy == 2) { /* deferred updates: whole steps only */
                    assert_true(ps.n_deferred > 0);
                    assert_int_equal(run_steps_ranged(&x, o, &r, 1, range), HP_STATUS_INVALID_ARGUMENT);
                    hp_test_assert_error_contains("node range");
                } else {
                    assert_int_equal(ps.n_deferred, 0);
                    assert_ok(run_steps_ranged(&x, o, &r, 3, range));
                    assert_memory_equal(a.loss, r.loss, sizeof a.loss);
                    assert_int_equal(a.n, r.n);
                    assert_memory_equal(a.params, r.params, a.n * sizeof(float));
                    hp_copy_stats cs;
                    hp_offload_state_copy_stats(s, &cs);
                    assert_true(cs.bytes[HP_TIER_DEVICE][HP_TIER_DISK] > 0);
                    int cuts = cuts_in_flight(x.g, range);
                    if (range == 7) assert_true(cuts > 0);
                    print_message("disk policy %d budget %.2f, ranges of %d nodes%s: bitwise equal, %d transfers in "
                                  "flight at a range's end\n", policy, fb, range, g_abandon ? " (half steps abandoned)" : "",
                                  cuts);
                }
                free(r.params);
                hp_offload_state_free(s);
                hp_graph_free(x.g);
                break;
            }
            if (fb < 0) fail_msg("disk policy %d ran at no budget", policy);
            if (policy == 2) break;
        }
    }
    free(a.params);
    g_rows = 2;
    g_abandon = false;
}

/* ---------------------------------------------------------------- synthetic graphs */

/* Forward: h_{i+1} = gelu(h_i @ w_i), every h saved; "backward": a chain that reads them in reverse. */
static hp_graph *chain_graph(int n, int width, hp_tid *out) {
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(64, width));
    hp_tid h[64];
    h[0] = x;
    for (int i = 0; i < n; i++) {
        hp_graph_push_scopef(g, "layer%d", i);
        hp_tid w = hp_param(g, "w", HP_SHAPE(width, width));
        hp_graph_pop_scope(g);
        h[i + 1] = hp_gelu(g, hp_matmul(g, h[i], w, false, false));
    }
    hp_tid acc = h[n];
    for (int i = n - 1; i >= 1; i--) acc = hp_add(g, hp_mul(g, acc, h[i]), h[i]);
    *out = hp_sum(g, acc, -1);
    return g;
}

static void check_structure(hp_graph *g, const hp_offload_state *s) {
    (void)s;
    int nn = hp_graph_n_nodes(g);
    for (int i = 0; i < nn; i++) {
        const hp_node *n = hp_graph_node(g, i);
        if (n->op == HP_OP_PREFETCH || n->op == HP_OP_OFFLOAD || n->op == HP_OP_OFFLOAD_WAIT) continue;
        for (int k = 0; k < n->n_in; k++) {
            hp_tid t = n->in[k];
            if (t == HP_TID_NONE) continue;
            const hp_tensor *x = hp_graph_tensor(g, t);
            assert_true(x->producer < 0 || hp_graph_node(g, x->producer)->op != HP_OP_OFFLOAD ||
                        n->op == HP_OP_ADAMW_STREAM); /* slow copies are only read by transfers */
            if (x->producer < 0 || hp_graph_node(g, x->producer)->op != HP_OP_PREFETCH) continue;
            bool waited = false; /* a wait on t between the prefetch and this use */
            for (int j = x->producer + 1; j < i; j++) {
                const hp_node *w = hp_graph_node(g, j);
                waited |= w->op == HP_OP_OFFLOAD_WAIT && w->in[0] == t;
            }
            if (!waited) fail_msg("node %d (%s) reads prefetched %%%d before its wait", i, hp_op_name(n->op), t);
        }
    }
}

static void test_chain_budget_and_order(void **state) {
    (void)state;
    hp_tid loss;
    hp_graph *g0 = chain_graph(8, 64, &loss);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &loss;
    o.n_keep = 1;
    hp_program *p;
    assert_ok(hp_program_new(g0, &o, &p));
    float x[64 * 64], ref;
    hp_test_fill_uniform(x, 64 * 64, 1, -1, 1);
    hp_tid params[8];
    int np = hp_graph_params(g0, params, 8);
    float *w = malloc(64 * 64 * sizeof(float));
    for (int i = 0; i < np; i++) {
        hp_test_fill_uniform(w, 64 * 64, 10 + (uint64_t)i, -0.2f, 0.2f);
        assert_ok(hp_program_set_input(p, params[i], w, 64 * 64 * sizeof(float)));
    }
    assert_ok(hp_program_set_input(p, hp_graph_find(g0, "x"), x, sizeof x));
    assert_ok(hp_program_run(p));
    assert_ok(hp_program_get_output(p, loss, &ref, sizeof ref));
    hp_program_free(p);

    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    hp_offload_plan *plan;
    assert_ok(hp_offload_plan_new(g0, &loss, 1, &c, &plan));
    hp_offload_plan_stats s0;
    hp_offload_plan_get_stats(plan, &s0);
    hp_offload_plan_free(plan);
    hp_graph_free(g0);

    for (int f = 0; f < 2; f++) {
        hp_graph *g = chain_graph(8, 64, &loss);
        c.device_budget = s0.peak_before * (f ? 6 : 4) / 10;
        c.machine = (hp_machine_model){.flops_per_s = 1e9, .bytes_per_s = 1e9}; /* slow compute: transfers hide */
        hp_program_opts oo = HP_PROGRAM_OPTS_DEFAULT;
        oo.keep = &loss;
        oo.n_keep = 1;
        hp_offload_state *s;
        assert_ok(hp_offload_apply_config(&c, g, &oo, &s));
        const hp_offload_plan *pl = hp_offload_state_plan(s);
        hp_offload_plan_stats ps;
        hp_offload_plan_get_stats(pl, &ps);
        assert_true(ps.n_prefetch > 0);
        assert_true(ps.peak_after <= c.device_budget);
        assert_true(ps.peak_live_after <= c.device_budget);
        for (int i = 0; i < 200; i++) assert_true(hp_offload_plan_resident_at(pl, i) <= c.device_budget);
        check_structure(g, s);
        char *buf = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&buf, &len);
        hp_offload_plan_print(pl, g, mf);
        fclose(mf);
        assert_non_null(strstr(buf, "prefetch before node"));
        if (getenv("HP_TEST_VERBOSE")) print_message("%s", buf);
        free(buf);
        assert_ok(hp_program_new(g, &oo, &p));
        for (int i = 0; i < np; i++) {
            hp_test_fill_uniform(w, 64 * 64, 10 + (uint64_t)i, -0.2f, 0.2f);
            assert_ok(hp_program_set_input(p, params[i], w, 64 * 64 * sizeof(float)));
        }
        assert_ok(hp_program_set_input(p, hp_graph_find(g, "x"), x, sizeof x));
        float got;
        assert_ok(hp_program_run(p));
        assert_ok(hp_program_get_output(p, loss, &got, sizeof got));
        assert_memory_equal(&ref, &got, sizeof got);
        hp_program_stats st;
        hp_program_get_stats(p, &st);
        assert_true(st.device_bytes <= c.device_budget);
        mf = open_memstream(&buf, &len);
        hp_program_report_memory(p, mf);
        fclose(mf);
        assert_non_null(strstr(buf, "budget"));
        assert_non_null(strstr(buf, "copy: host -> device"));
        assert_non_null(strstr(buf, "hidden behind compute"));
        if (getenv("HP_TEST_VERBOSE")) print_message("%s", buf);
        free(buf);
        hp_program_free(p);
        hp_offload_state_free(s);
        hp_graph_free(g);
    }
    free(w);
}

static void test_impossible_budget(void **state) {
    (void)state;
    hp_tid loss;
    hp_graph *g = chain_graph(4, 256, &loss);
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    /* one matmul reads 64x256 and 256x256 floats and writes 64x256: far more than 64 KiB */
    c.device_budget = 64 * 1024;
    hp_offload_plan *p;
    hp_status st = hp_offload_plan_new(g, &loss, 1, &c, &p);
    assert_int_equal(st, HP_STATUS_OUT_OF_MEMORY);
    hp_test_assert_error_contains("cannot hold node");
    hp_test_assert_error_contains("bytes resident");
    print_message("impossible budget: %s\n", hp_error_message());
    hp_graph_free(g);
}

/* ---------------------------------------------------------------- faults through the runtime */

static void fault_case(int which) {
    gpt x;
    gpt_build(&x, 1);
    size_t peak = no_offload_peak(&x);
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    c.device_budget = peak / 2;
    c.disk_dir = disk_dir();
    c.policy[HP_OFFLOAD_CLASS_PARAMS] = c.policy[HP_OFFLOAD_CLASS_OPTIMIZER] = HP_TIER_DISK;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = x.keep;
    o.n_keep = 2;
    hp_offload_state *s;
    assert_ok(hp_offload_apply_config(&c, x.g, &o, &s));
    hp_disk *d = hp_offload_state_disk(s);
    assert_non_null(d);
    char path[512];
    snprintf(path, sizeof path, "%s", hp_disk_path(d));
    hp_program *p;
    assert_ok(hp_program_new(x.g, &o, &p));
    float lr = 1e-3f, step = 1;
    assert_ok(hp_program_set_input(p, x.ts.lr, &lr, sizeof lr));
    assert_ok(hp_program_set_input(p, x.ts.step, &step, sizeof step));
    assert_ok(hp_program_run(p));
    if (which == 0) hp_disk_inject_fault(d, EIO, 3);
    else if (which == 1) hp_disk_inject_fault(d, ENOSPC, 0);
    else assert_int_equal(unlink(path), 0);
    hp_status st = hp_program_run(p);
    if (st == HP_STATUS_OK) st = hp_program_sync(p); /* a failure in a deferred update surfaces here */
    assert_int_equal(st, HP_STATUS_IO);
    hp_test_assert_error_contains(path);
    hp_offload_plan_stats ps;
    hp_offload_plan_get_stats(hp_offload_state_plan(s), &ps);
    print_message("fault %d (%d deferred updates): %s\n", which, ps.n_deferred, hp_error_message());
    hp_program_free(p);
    hp_offload_state_free(s);
    hp_graph_free(x.g);
}

static void test_disk_faults(void **state) {
    (void)state;
    fault_case(0); /* an I/O error mid-run */
    fault_case(1); /* the disk full mid-run */
    fault_case(2); /* the store file removed */
}

/* ---------------------------------------------------------------- config */

static void test_config(void **state) {
    (void)state;
    const char *text = "offload:\n  device_budget: 64MiB\n  host_budget: 8GiB\n  disk_dir: /tmp\n"
                       "  disk_budget: 1GB\n  policy: {params: disk, grads: true, optimizer: host, activations: false}\n"
                       "  bandwidth: {host: measure, disk: 2.5e9}\n  read_ahead: false\n";
    hp_run_config rc;
    assert_ok(hp_run_config_load_string(text, strlen(text), "run.yaml", &rc));
    hp_offload_plan_config c;
    hp_offload_plan_config_from(&rc.offload, &c);
    assert_int_equal(c.device_budget, 64u << 20);
    assert_int_equal(c.host_budget, 8ull << 30);
    assert_int_equal(c.disk_budget, 1000000000u);
    assert_string_equal(c.disk_dir, "/tmp");
    assert_int_equal(c.policy[HP_OFFLOAD_CLASS_PARAMS], HP_TIER_DISK);
    assert_int_equal(c.policy[HP_OFFLOAD_CLASS_GRADS], HP_TIER_HOST);
    assert_int_equal(c.policy[HP_OFFLOAD_CLASS_ACTIVATIONS], HP_TIER_DEVICE);
    assert_true(c.bandwidth[HP_TIER_HOST] == 0 && c.bandwidth[HP_TIER_DISK] == 2.5e9);
    assert_false(c.read_ahead);
    hp_run_config_free(&rc);

    const char *bad[] = {"offload:\n  device_budget: 64MiB\n  colour: red\n",
                         "offload:\n  device_budget: 64 parsecs\n",
                         "offload:\n  policy: {params: maybe}\n",
                         "offload:\n  policy: {weights: true}\n"};
    const char *needle[] = {"colour", "parsecs", "maybe", "weights"};
    for (int k = 0; k < 4; k++) {
        /* The section is checked when the run config loads, before any graph exists. */
        hp_status st = hp_run_config_load_string(bad[k], strlen(bad[k]), "run.yaml", &rc);
        assert_int_equal(st, HP_STATUS_CONFIG);
        hp_test_assert_error_contains(needle[k]);
        hp_test_assert_error_contains("run.yaml:");
    }
    /* NULL section: a no-op */
    gpt x;
    gpt_build(&x, 1);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    hp_offload_state *s = (hp_offload_state *)&o;
    int nn = hp_graph_n_nodes(x.g);
    assert_ok(hp_offload_apply(NULL, x.g, &o, &s));
    assert_null(s);
    assert_int_equal(nn, hp_graph_n_nodes(x.g));
    hp_graph_free(x.g);
}

/* ---------------------------------------------------------------- early reads for AdamW */

/*
 * Optimizer states and parameters on disk: the planner reads AdamW operands whole into the fast tier
 * before their update (during the backward pass where the budget leaves room) instead of streaming
 * them at the end. Checks: some state reads are issued before the first AdamW node; every early copy
 * is read by an AdamW node after its wait, and written operands have a write-back wait after the
 * update; the budget holds at every program point with the early copies counted and in the packed
 * arena; training is bitwise that of the run without offload; read_ahead = false streams everything.
 * Also the choice of what goes to disk: optimizer states before parameters and gradients.
 */
static void test_early_reads(void **state) {
    (void)state;
    result a;
    size_t peak = reference_run(&a);
    static const double frac[] = {0.5, 0.6, 0.75, 0.9};
    int early_runs = 0;
    for (int ra = 1; ra >= 0; ra--)
        for (size_t b = 0; b < sizeof frac / sizeof frac[0]; b++) {
            hp_offload_plan_config c = disk_config(frac[b], peak);
            c.read_ahead = ra == 1;
            c.policy[HP_OFFLOAD_CLASS_PARAMS] = c.policy[HP_OFFLOAD_CLASS_OPTIMIZER] = HP_TIER_DISK;
            c.policy[HP_OFFLOAD_CLASS_GRADS] = HP_TIER_DISK;
            gpt x;
            gpt_build(&x, 2);
            hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
            o.keep = x.keep;
            o.n_keep = 2;
            hp_offload_state *s = NULL;
            assert_ok(hp_offload_apply_config(&c, x.g, &o, &s));
            const hp_offload_plan *pl = hp_offload_state_plan(s);
            hp_offload_plan_stats ps;
            hp_offload_plan_get_stats(pl, &ps);
            if (!ra) assert_int_equal(ps.n_early, 0);
            /* Moves are chosen by transfer seconds per byte freed: m and v (one read and one write per
             * step) and activations to the host go before parameters (also read for the forward and
             * backward passes) and gradients (written, read for the norm, read for the update). */
            assert_int_equal(ps.n_offloaded[HP_OFFLOAD_CLASS_PARAMS], 0);
            assert_int_equal(ps.n_offloaded[HP_OFFLOAD_CLASS_GRADS], 0);
            assert_true(ps.n_offloaded[HP_OFFLOAD_CLASS_OPTIMIZER] > 0);
            assert_true(ps.peak_after <= c.device_budget);
            for (int i = 0; hp_offload_plan_resident_at(pl, i) > 0; i++)
                if (hp_offload_plan_resident_at(pl, i) > c.device_budget)
                    fail_msg("budget %.2f: %zu bytes resident at node %d, budget %zu", frac[b],
                             hp_offload_plan_resident_at(pl, i), i, c.device_budget);
            check_structure(x.g, s);
            /* the rewritten graph: early copies (PREFETCH outputs read by an AdamW node) */
            int nn = hp_graph_n_nodes(x.g), first_adamw = nn, n_copies = 0, n_state_before = 0;
            for (int i = 0; i < nn; i++) {
                hp_op op = hp_graph_node(x.g, i)->op;
                if ((op == HP_OP_ADAMW || op == HP_OP_ADAMW_STREAM) && i < first_adamw) first_adamw = i;
            }
            for (int i = 0; i < nn; i++) {
                const hp_node *pf = hp_graph_node(x.g, i);
                if (pf->op != HP_OP_PREFETCH) continue;
                hp_tid copy = pf->out[0];
                int user = -1, wb_wait = -1;
                for (int j = i + 1; j < nn; j++) {
                    const hp_node *n = hp_graph_node(x.g, j);
                    for (int k = 0; k < n->n_in; k++) {
                        if (n->in[k] != copy) continue;
                        if (n->op == HP_OP_ADAMW_STREAM) user = j;
                        if (n->op == HP_OP_OFFLOAD_WAIT && user >= 0) wb_wait = j;
                    }
                }
                if (user < 0) continue;
                n_copies++;
                const hp_node *u = hp_graph_node(x.g, user);
                bool written = u->in[0] == copy || u->in[2] == copy || u->in[3] == copy;
                if (written && wb_wait < 0) fail_msg("early copy %%%d updated at node %d is never written back", copy, user);
                const hp_tensor *home = hp_graph_tensor(x.g, pf->in[0]);
                if (home->kind == HP_TENSOR_KIND_OPT_STATE && i < first_adamw) n_state_before++;
            }
            assert_int_equal(n_copies, ps.n_early);
            if (ps.n_early > 0) {
                assert_true(n_state_before > 0); /* state reads start before the first update */
                early_runs++;
            }
            assert_bitwise(&a, &x, o, c.device_budget);
            if (getenv("HP_TEST_VERBOSE"))
                print_message("read_ahead %d budget %.2f: %d early reads, %d of states before the first update; "
                              "offloaded params %d grads %d optimizer %d activations %d\n", ra, frac[b], ps.n_early,
                              n_state_before, ps.n_offloaded[0], ps.n_offloaded[1], ps.n_offloaded[2], ps.n_offloaded[3]);
            hp_offload_state_free(s);
            hp_graph_free(x.g);
        }
    assert_true(early_runs > 0);
    free(a.params);
}

/* ---------------------------------------------------------------- deferred updates */

/* In the compiled program, every deferred update's wait (the OFFLOAD_WAIT sharing its record) comes
 * before its AdamW node, and no node before the wait (which runs in the next step while the update
 * may still be in flight) touches its parameter or state, or writes arena bytes its held operands
 * (gradient, early-read copies) occupy. Returns the number of deferred updates. */
static int check_deferred(hp_graph *g, hp_program *p) {
    int nn = hp_graph_n_nodes(g), n_def = 0;
    for (int a = 0; a < nn; a++) {
        const hp_node *n = hp_graph_node(g, a);
        if (n->op != HP_OP_ADAMW_STREAM || n->attr.i[0] != 1) continue;
        n_def++;
        int w = -1;
        for (int j = 0; j < nn && w < 0; j++)
            if (hp_graph_node(g, j)->op == HP_OP_OFFLOAD_WAIT && hp_graph_node(g, j)->extra == n->extra) w = j;
        if (w < 0 || w > a) fail_msg("deferred update at node %d: its wait is at node %d", a, w);
        for (int j = a + 1; j < nn; j++) { /* nothing after it in the step reads what it updates */
            const hp_node *m = hp_graph_node(g, j);
            if (m->op == HP_OP_OFFLOAD_WAIT) continue; /* holds */
            for (int q = 0; q < m->n_in; q++)
                for (int k = 0; k < 4; k++)
                    if (m->in[q] == n->in[k])
                        fail_msg("node %d (%s) reads %%%d after the deferred update at %d", j, hp_op_name(m->op),
                                 n->in[k], a);
        }
        for (int k = 0; k < 4; k++) {
            hp_tid t = n->in[k];
            const hp_tensor *x = hp_graph_tensor(g, t);
            size_t off, bytes = (size_t)hp_shape_numel(&x->shape) * sizeof(float);
            bool arena = hp_program_arena_offset(p, t, &off);
            for (int j = 0; j < w; j++) {
                const hp_node *m = hp_graph_node(g, j);
                for (int q = 0; q < m->n_in && !arena; q++)
                    if (m->in[q] == t) fail_msg("node %d reads %%%d before the wait (node %d) for the update at %d", j, t, w, a);
                for (int q = 0; q < m->n_out && !arena; q++)
                    if (m->out[q] == t) fail_msg("node %d writes %%%d before the wait (node %d) for the update at %d", j, t, w, a);
                for (int q = 0; q < m->n_out && arena; q++) {
                    size_t o;
                    const hp_tensor *y = hp_graph_tensor(g, m->out[q]);
                    size_t yb = (size_t)hp_shape_numel(&y->shape) * hp_dtype_size(y->dtype);
                    if (hp_program_arena_offset(p, m->out[q], &o) && o < off + bytes && off < o + yb)
                        fail_msg("node %d writes bytes of %%%d before the wait (node %d) for the update at %d", j, t, w, a);
                }
            }
        }
    }
    return n_def;
}

static void test_deferred_updates(void **state) {
    (void)state;
    result a;
    size_t peak = reference_run(&a);
    static const double frac[] = {0.5, 0.6, 0.75, 0.25};
    int deferred_runs = 0, disk_grad_runs = 0;
    for (int policy = 0; policy < 3; policy++)
        for (int au = 1; au >= 0; au--)
            for (size_t b = 0; b < sizeof frac / sizeof frac[0]; b++) {
                hp_offload_plan_config c = disk_config(frac[b], peak);
                c.async_update = au == 1;
                c.policy[HP_OFFLOAD_CLASS_OPTIMIZER] = HP_TIER_DISK;
                if (policy >= 1) c.policy[HP_OFFLOAD_CLASS_PARAMS] = HP_TIER_DISK; /* params on disk too */
                if (policy == 2) c.policy[HP_OFFLOAD_CLASS_GRADS] = HP_TIER_DISK;  /* and gradients */
                gpt x;
                gpt_build(&x, 2);
                hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
                o.keep = x.keep;
                o.n_keep = 2;
                hp_offload_state *s = NULL;
                hp_status st = hp_offload_apply_config(&c, x.g, &o, &s);
                if (st == HP_STATUS_OUT_OF_MEMORY && frac[b] < 0.5) { /* not every policy reaches 25% */
                    hp_graph_free(x.g);
                    continue;
                }
                assert_ok(st);
                hp_offload_plan_stats ps;
                hp_offload_plan_get_stats(hp_offload_state_plan(s), &ps);
                if (!au) assert_int_equal(ps.n_deferred, 0);
                for (int i = 0; i < hp_graph_n_nodes(x.g); i++) { /* a deferred update streaming a disk gradient */
                    const hp_node *n = hp_graph_node(x.g, i);
                    if (n->op != HP_OP_ADAMW_STREAM || n->attr.i[0] != 1) continue;
                    const hp_tensor *gr = hp_graph_tensor(x.g, n->in[1]);
                    const hp_node *pr = gr->producer >= 0 ? hp_graph_node(x.g, gr->producer) : NULL;
                    if (pr && pr->op == HP_OP_OFFLOAD && pr->attr.i[0] == HP_TIER_DISK) {
                        disk_grad_runs++;
                        break;
                    }
                }
                check_structure(x.g, s);
                hp_program *p;
                assert_ok(hp_program_new(x.g, &o, &p));
                assert_int_equal(check_deferred(x.g, p), ps.n_deferred);
                hp_program_free(p);
                assert_bitwise(&a, &x, o, c.device_budget);
                deferred_runs += ps.n_deferred > 0;
                if (getenv("HP_TEST_VERBOSE"))
                    print_message("policy %d async %d budget %.2f: %d streamed, %d early, %d deferred\n", policy, au,
                                  frac[b], ps.n_streamed, ps.n_early, ps.n_deferred);
                hp_offload_state_free(s);
                hp_graph_free(x.g);
            }
    /* A parameter read again after the optimizer (here: the parameters' norm, kept) is never updated late. */
    {
        gpt x;
        gpt_build(&x, 2);
        hp_tid sq = HP_TID_NONE; /* every parameter's norm: no update can be deferred */
        for (int i = 0; i < x.ts.n_params; i += 8) {
            hp_tid q = hp_sumsq(x.g, x.ts.params + i, x.ts.n_params - i < 8 ? x.ts.n_params - i : 8);
            sq = sq == HP_TID_NONE ? q : hp_add(x.g, sq, q);
        }
        hp_tid keep[3] = {x.keep[0], x.keep[1], sq};
        hp_offload_plan_config c = disk_config(0.5, peak);
        c.policy[HP_OFFLOAD_CLASS_OPTIMIZER] = HP_TIER_DISK;
        hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
        o.keep = keep;
        o.n_keep = 3;
        hp_offload_state *s = NULL;
        assert_ok(hp_offload_apply_config(&c, x.g, &o, &s));
        hp_program *p;
        assert_ok(hp_program_new(x.g, &o, &p));
        int n_def = check_deferred(x.g, p); /* fails on a deferred update of one of those parameters */
        assert_int_equal(n_def, 0);
        hp_program_free(p);
        hp_offload_state_free(s);
        hp_graph_free(x.g);
    }
    print_message("%d plans with deferred updates (%d streaming a gradient from disk), bitwise equal to the run "
                  "without offload\n", deferred_runs, disk_grad_runs);
    assert_true(deferred_runs >= 3);
    assert_true(disk_grad_runs >= 1);
    free(a.params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_chain_budget_and_order),
        cmocka_unit_test(test_impossible_budget),
        cmocka_unit_test(test_gpt_bitwise_every_policy),
        cmocka_unit_test(test_disk_faults),
        cmocka_unit_test(test_early_reads),
        cmocka_unit_test(test_deferred_updates),
        cmocka_unit_test(test_disk_node_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
