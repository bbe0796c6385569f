/*
 * The compile driver (hp/compile.h): pass names, per-pass times, the IR dumped after each pass, the
 * unknown-pass error, and a model that is not the GPT (a two-layer MLP) compiled and trained one
 * step through the driver giving bitwise the result of the passes strung by hand: one rank (with and
 * without offload) and two simulated ranks under data parallelism.
 */
#include "testutil.h"

#include "hp/compile.h"
#include "hp/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 8  /* batch rows */
#define D 16 /* input features */
#define H 32 /* hidden units */
#define C 8  /* classes */

static const hp_optim_config OPT = {.lr = 1e-2, .min_lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                                    .eps = 1e-8, .grad_clip = 1.0};

/* x (B, D) -> linear -> gelu -> linear -> cross-entropy with y (B). */
typedef struct mlp {
    hp_graph *g;
    hp_tid x, y, loss;
} mlp;

static void mlp_build(mlp *m) {
    hp_graph *g = m->g = hp_graph_new();
    assert_non_null(g);
    m->x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(B, D));
    m->y = hp_input(g, "y", HP_DTYPE_I32, HP_SHAPE(B));
    hp_tid w1 = hp_param(g, "fc1.weight", HP_SHAPE(H, D)), b1 = hp_param(g, "fc1.bias", HP_SHAPE(H));
    hp_tid w2 = hp_param(g, "fc2.weight", HP_SHAPE(C, H)), b2 = hp_param(g, "fc2.bias", HP_SHAPE(C));
    hp_tid h = hp_gelu(g, hp_linear(g, m->x, w1, b1));
    m->loss = hp_cross_entropy(g, hp_linear(g, h, w2, b2), m->y);
    assert_ok(hp_graph_status(g));
}

/* One step's results: loss, squared gradient norm, every parameter after the update. */
typedef struct result {
    float loss, grad_sq;
    float params[H * D + H + C * H + C];
} result;

static float init_value(int p, int64_t i) { return 0.3f * (float)((i * 7919 + p * 104729) % 1000) / 1000.0f - 0.15f; }

/* The rows [start, start+len) of the global x and y that `index` holds under the partition. */
static void rows_of(const hp_partition *part, const hp_mesh *mesh, const hp_graph *lg, hp_tid t, int index,
                    int64_t *start, int64_t *len) {
    if (!part) { /* the logical graph: everything */
        *start = 0;
        *len = B;
        return;
    }
    int64_t s[HP_MAX_DIMS], l[HP_MAX_DIMS];
    assert_ok(hp_layout_slice_of(hp_partition_layout(part, t), mesh, &hp_graph_tensor(lg, t)->shape, index, s, l));
    *start = s[0];
    *len = l[0];
}

/* Sets parameters, inputs, lr and step, runs one step, reads the results. `part` NULL: the program
 * runs the logical graph itself. Parameters are replicated in every case tested here. */
static void run_step(hp_program *p, const hp_partition *part, const hp_mesh *mesh, int index, const hp_graph *lg,
                     const mlp *m, const hp_train_step *ts, hp_tid loss, hp_tid grad_sq, result *r) {
#define LOCAL(t) (part ? hp_partition_local(part, (t)) : (t))
    for (int i = 0; i < ts->n_params; i++) {
        int64_t n = hp_shape_numel(&hp_graph_tensor(lg, ts->params[i])->shape);
        float *v = malloc((size_t)n * sizeof *v);
        for (int64_t e = 0; e < n; e++) v[e] = init_value(i, e);
        assert_ok(hp_program_set_input(p, LOCAL(ts->params[i]), v, (size_t)n * sizeof *v));
        free(v);
    }
    float x[B * D];
    int32_t y[B];
    for (int i = 0; i < B * D; i++) x[i] = 0.5f * (float)((i * 37) % 23) / 23.0f - 0.25f;
    for (int i = 0; i < B; i++) y[i] = (i * 5 + 3) % C;
    int64_t start, len;
    rows_of(part, mesh, lg, m->x, index, &start, &len);
    assert_ok(hp_program_set_input(p, LOCAL(m->x), x + start * D, (size_t)(len * D) * sizeof(float)));
    rows_of(part, mesh, lg, m->y, index, &start, &len);
    assert_ok(hp_program_set_input(p, LOCAL(m->y), y + start, (size_t)len * sizeof(int32_t)));
    float lr = 1e-2f, step = 1.0f;
    assert_ok(hp_program_set_input(p, LOCAL(ts->lr), &lr, sizeof lr));
    assert_ok(hp_program_set_input(p, LOCAL(ts->step), &step, sizeof step));
    assert_ok(hp_program_run(p));
    assert_ok(hp_program_get_output(p, loss, &r->loss, sizeof r->loss));
    assert_ok(hp_program_get_output(p, grad_sq, &r->grad_sq, sizeof r->grad_sq));
    size_t at = 0;
    for (int i = 0; i < ts->n_params; i++) {
        size_t n = (size_t)hp_shape_numel(&hp_graph_tensor(lg, ts->params[i])->shape);
        assert_ok(hp_program_get_output(p, LOCAL(ts->params[i]), r->params + at, n * sizeof(float)));
        at += n;
    }
    assert_int_equal(at, sizeof r->params / sizeof(float));
#undef LOCAL
}

/* ---------------------------------------------------------------- names, times, errors */

static void test_pass_names(void **state) {
    (void)state;
    static const char *const names[] = {"autodiff", "shard", "offload", "memplan"};
    assert_int_equal(HP_PASS_COUNT, 4);
    for (int p = 0; p < HP_PASS_COUNT; p++) {
        assert_string_equal(hp_pass_name((hp_pass)p), names[p]);
        hp_pass q = HP_PASS_NONE;
        assert_ok(hp_pass_parse(names[p], &q));
        assert_int_equal(q, p);
    }
    hp_pass q;
    assert_int_equal(hp_pass_parse("mpmd", &q), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("unknown pass 'mpmd' (known passes: autodiff, shard, offload, memplan)");
    assert_int_equal(hp_pass_parse("Shard", &q), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("'Shard'");
}

static void test_bad_options(void **state) {
    (void)state;
    mlp m;
    mlp_build(&m);
    hp_compiled *c = (hp_compiled *)1;
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    assert_int_equal(hp_compile(m.g, &o, &c), HP_STATUS_INVALID_ARGUMENT); /* no loss */
    hp_test_assert_error_contains("loss -1");
    assert_null(c);
    o.loss = m.loss;
    o.train = true;
    assert_int_equal(hp_compile(m.g, &o, &c), HP_STATUS_INVALID_ARGUMENT); /* train without optim */
    hp_test_assert_error_contains("no optimizer config");
    o.optim = &OPT;
    o.plan_only = true;
    o.plan_index = 3;
    assert_int_equal(hp_compile(m.g, &o, &c), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("plan index 3 is outside the mesh of 1 devices");
    hp_graph_free(m.g);
}

static void test_pass_times(void **state) {
    (void)state;
    mlp m;
    mlp_build(&m);
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = m.loss;
    o.train = true;
    o.optim = &OPT;
    hp_compiled *c;
    assert_ok(hp_compile(m.g, &o, &c));
    const hp_compile_report *r = hp_compiled_report(c);
    assert_int_equal(r->last, HP_PASS_MEMPLAN);
    assert_true(r->ran[HP_PASS_AUTODIFF] && r->ran[HP_PASS_SHARD] && r->ran[HP_PASS_MEMPLAN]);
    assert_false(r->ran[HP_PASS_OFFLOAD]); /* no offload config */
    for (int p = 0; p < HP_PASS_COUNT; p++) assert_true(r->seconds[p] >= 0 && r->seconds[p] < 60);
    assert_true(r->seconds[HP_PASS_SHARD] > 0 && r->seconds[HP_PASS_MEMPLAN] > 0);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    hp_compile_report_print(r, f);
    fclose(f);
    assert_non_null(strstr(text, "autodiff"));
    const char *line = strstr(text, "  offload ");
    assert_non_null(line);
    assert_true(strstr(line, "skipped") && strstr(line, "skipped") < strchr(line, '\n'));
    assert_non_null(strstr(text, "total"));
    free(text);
    assert_non_null(hp_compiled_program(c));
    assert_non_null(hp_compiled_step(c));
    assert_null(hp_compiled_gpt(c));
    assert_int_equal(hp_compiled_index(c), 0);
    assert_true(hp_compiled_memory(c)->device_bytes > 0);
    hp_compiled_free(c);

    /* stop after shard: no program; the per-rank ids are resolved */
    hp_graph_free(m.g);
    mlp_build(&m);
    o.loss = m.loss;
    o.stop_after = HP_PASS_SHARD;
    assert_ok(hp_compile(m.g, &o, &c));
    assert_int_equal(hp_compiled_report(c)->last, HP_PASS_SHARD);
    assert_false(hp_compiled_report(c)->ran[HP_PASS_MEMPLAN]);
    assert_null(hp_compiled_program(c));
    assert_non_null(hp_compiled_partition(c));
    assert_true(hp_compiled_loss(c) != HP_TID_NONE && hp_compiled_grad_sq(c) != HP_TID_NONE);
    hp_compiled_free(c);
    hp_graph_free(m.g);
}

/* ---------------------------------------------------------------- dump after each pass */

static hp_offload_plan_config host_offload(size_t budget) {
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    c.device_budget = budget;
    c.bandwidth[HP_TIER_HOST] = 1e10;
    c.bandwidth[HP_TIER_DISK] = 1e9;
    return c;
}

/* The fast-tier bytes of the MLP's step without offload. */
static size_t mlp_peak(void) {
    mlp m;
    mlp_build(&m);
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = m.loss;
    o.train = true;
    o.optim = &OPT;
    o.plan_only = true;
    hp_compiled *c;
    assert_ok(hp_compile(m.g, &o, &c));
    size_t peak = hp_compiled_memory(c)->device_bytes;
    assert_null(hp_compiled_program(c)); /* plan_only allocates no program */
    hp_compiled_free(c);
    hp_graph_free(m.g);
    return peak;
}

static char *dump_text(void (*dump)(const void *, FILE *), const void *x) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    dump(x, f);
    fclose(f);
    return text;
}
static void dump_graph(const void *g, FILE *f) { hp_graph_dump(g, f); }

/* The driver's dump after pass p: its header, then exactly hp_graph_dump of that stage's graph. */
static void test_dump_after_each_pass(void **state) {
    (void)state;
    hp_offload_plan_config oc = host_offload(mlp_peak() * 3 / 4);
    char *prev = NULL;
    for (int p = 0; p < HP_PASS_COUNT; p++) {
        mlp m;
        mlp_build(&m);
        hp_compile_opts o = HP_COMPILE_OPTS_INIT;
        o.loss = m.loss;
        o.train = true;
        o.optim = &OPT;
        o.offload = &oc;
        o.plan_only = true;
        o.stop_after = o.dump_after = (hp_pass)p;
        char *text = NULL;
        size_t n = 0;
        o.dump = open_memstream(&text, &n);
        hp_compiled *c;
        assert_ok(hp_compile(m.g, &o, &c));
        fclose(o.dump);
        char header[64];
        snprintf(header, sizeof header, "== IR after %s (", hp_pass_name((hp_pass)p));
        assert_true(!strncmp(text, header, strlen(header)));
        const char *body = strchr(text, '\n') + 1;
        const hp_graph *stage = p == HP_PASS_AUTODIFF ? hp_compiled_logical(c) : hp_compiled_graph(c);
        assert_non_null(stage);
        char *want = dump_text(dump_graph, stage);
        assert_string_equal(body, want);
        /* what each pass adds shows in its dump */
        if (p == HP_PASS_AUTODIFF) {
            assert_null(hp_compiled_partition(c));
            assert_non_null(strstr(body, "adamw"));
            assert_non_null(strstr(text, "logical graph"));
        } else
            assert_non_null(strstr(text, "per-rank graph"));
        if (p == HP_PASS_OFFLOAD) {
            assert_non_null(hp_compiled_offload(c));
            /* at 3/4 of the peak the optimizer states leave for the host: AdamW streams them */
            assert_non_null(strstr(body, "adamw_stream("));
            assert_true(strcmp(body, prev) != 0); /* the offload pass rewrote the per-rank graph */
        }
        if (p == HP_PASS_MEMPLAN) assert_string_equal(body, prev); /* memplan does not change the IR */
        free(prev);
        prev = strdup(body);
        free(want);
        free(text);
        hp_compiled_free(c);
        hp_graph_free(m.g);
    }
    free(prev);
}

/* ---------------------------------------------------------------- MLP: driver == by hand, one rank */

/* By hand: autodiff + optimizer, (offload), program, on the logical graph itself. */
static void mlp_by_hand(const hp_offload_plan_config *oc, result *r) {
    mlp m;
    mlp_build(&m);
    hp_train_step ts;
    assert_ok(hp_train_step_build(m.g, m.loss, &OPT, &ts));
    hp_tid keep[2] = {ts.loss, ts.grad_sq};
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = keep;
    po.n_keep = 2;
    hp_offload_state *s = NULL;
    if (oc) assert_ok(hp_offload_apply_config(oc, m.g, &po, &s));
    hp_program *p;
    assert_ok(hp_program_new(m.g, &po, &p));
    run_step(p, NULL, NULL, 0, m.g, &m, &ts, ts.loss, ts.grad_sq, r);
    hp_program_free(p);
    hp_offload_state_free(s);
    hp_graph_free(m.g);
}

static void mlp_by_driver(const hp_offload_plan_config *oc, result *r) {
    mlp m;
    mlp_build(&m);
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = m.loss;
    o.train = true;
    o.optim = &OPT;
    o.offload = oc;
    hp_compiled *c;
    assert_ok(hp_compile(m.g, &o, &c));
    assert_true(hp_compiled_report(c)->ran[HP_PASS_OFFLOAD] == (oc != NULL));
    if (oc) assert_non_null(hp_compiled_offload(c));
    run_step(hp_compiled_program(c), hp_compiled_partition(c), hp_compiled_mesh(c), hp_compiled_index(c), m.g, &m,
             hp_compiled_step(c), hp_compiled_loss(c), hp_compiled_grad_sq(c), r);
    hp_compiled_free(c);
    hp_graph_free(m.g);
}

static void test_mlp_matches_by_hand(void **state) {
    (void)state;
    static result hand, drv, hand_ofl, drv_ofl;
    mlp_by_hand(NULL, &hand);
    mlp_by_driver(NULL, &drv);
    assert_true(hand.loss > 0 && hand.grad_sq > 0);
    assert_memory_equal(&hand, &drv, sizeof hand);
    hp_offload_plan_config oc = host_offload(mlp_peak() * 3 / 4);
    mlp_by_hand(&oc, &hand_ofl);
    mlp_by_driver(&oc, &drv_ofl);
    assert_memory_equal(&hand_ofl, &drv_ofl, sizeof hand);
    assert_memory_equal(&hand, &drv_ofl, sizeof hand); /* offload changes no value */
}

/* ---------------------------------------------------------------- MLP: two simulated ranks, DP */

static hp_status annotate_dp(void *user, const hp_graph *g, const hp_mesh *mesh, hp_layout *lay) {
    const mlp *m = user;
    HP_CHECK(hp_layout_parse("[dp, none]", mesh, &lay[m->x]));
    HP_CHECK(hp_layout_parse("[dp]", mesh, &lay[m->y]));
    (void)g;
    return HP_STATUS_OK;
}

typedef struct dp_job {
    result hand[2], drv[2];
    int collectives[2];
} dp_job;

static hp_status dp_rank(hp_comm *comm, int rank, void *user) {
    dp_job *j = user;
    const int two = 2;
    const char *dp = "dp";
    /* by hand: autodiff + optimizer, annotate, partition, program */
    mlp m;
    mlp_build(&m);
    hp_train_step ts;
    hp_mesh *mesh;
    HP_CHECK(hp_train_step_build(m.g, m.loss, &OPT, &ts));
    HP_CHECK(hp_mesh_new(1, &two, &dp, NULL, 0, &mesh));
    HP_CHECK(hp_mesh_attach(mesh, comm));
    int nt = hp_graph_n_tensors(m.g);
    hp_layout *lay = calloc((size_t)nt, sizeof *lay);
    for (int t = 0; t < nt; t++) lay[t].ndim = -1;
    HP_CHECK(annotate_dp(&m, m.g, mesh, lay));
    hp_partition *part;
    hp_tid resolve[2] = {ts.loss, ts.grad_sq};
    HP_CHECK(hp_partition_new(m.g, mesh, lay, resolve, 2, &part));
    free(lay);
    hp_tid keep[2] = {hp_partition_resolved(part, 0), hp_partition_resolved(part, 1)};
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = keep;
    po.n_keep = 2;
    hp_program *p;
    HP_CHECK(hp_program_new(hp_partition_graph(part), &po, &p));
    run_step(p, part, mesh, hp_mesh_my_index(mesh), m.g, &m, &ts, keep[0], keep[1], &j->hand[rank]);
    hp_program_free(p);
    hp_partition_free(part);
    hp_mesh_free(mesh);
    hp_graph_free(m.g);

    /* through the driver: the mesh attached by it to the world */
    mlp_build(&m);
    HP_CHECK(hp_mesh_new(1, &two, &dp, NULL, 0, &mesh));
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = m.loss;
    o.train = true;
    o.optim = &OPT;
    o.mesh = mesh;
    o.annotate = annotate_dp;
    o.annotate_user = &m;
    o.comm = comm;
    hp_compiled *c;
    HP_CHECK(hp_compile(m.g, &o, &c));
    j->collectives[rank] = hp_partition_n_collectives(hp_compiled_partition(c));
    run_step(hp_compiled_program(c), hp_compiled_partition(c), mesh, hp_compiled_index(c), m.g, &m,
             hp_compiled_step(c), hp_compiled_loss(c), hp_compiled_grad_sq(c), &j->drv[rank]);
    hp_compiled_free(c);
    hp_mesh_free(mesh);
    hp_graph_free(m.g);
    return HP_STATUS_OK;
}

static void test_mlp_two_ranks_matches_by_hand(void **state) {
    (void)state;
    static dp_job j;
    assert_ok(hp_comm_sim_run(2, dp_rank, &j));
    for (int r = 0; r < 2; r++) {
        assert_true(j.collectives[r] > 0); /* the gradients are all-reduced */
        assert_memory_equal(&j.hand[r], &j.drv[r], sizeof j.hand[r]);
    }
    assert_memory_equal(&j.drv[0], &j.drv[1], sizeof j.drv[0]); /* replicated results agree */
    /* and equal the single device within float-reduction tolerance */
    static result one;
    mlp_by_driver(NULL, &one);
    assert_close(j.drv[0].loss, one.loss, 1e-5, 1e-6);
    assert_close(j.drv[0].grad_sq, one.grad_sq, 1e-4, 1e-7);
    for (size_t e = 0; e < sizeof one.params / sizeof(float); e++)
        assert_close(j.drv[0].params[e], one.params[e], 1e-4, 1e-5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_names),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_pass_times),
        cmocka_unit_test(test_dump_after_each_pass),
        cmocka_unit_test(test_mlp_matches_by_hand),
        cmocka_unit_test(test_mlp_two_ranks_matches_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
