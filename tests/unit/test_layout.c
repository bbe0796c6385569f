/* Mesh, layout, placement, planner and (on simulated ranks) redistribution tests. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hp/comm.h"
#include "hp/dtensor.h"
#include "hp/mesh.h"
#include "hp/redistribute.h"
#include "redist_check.h"

static hp_mesh *mesh2(int a, int b) {
    hp_mesh *m;
    const char *names[] = {"dp", "tp"};
    assert_ok(hp_mesh_new(2, (int[]){a, b}, names, NULL, 0, &m));
    return m;
}

static void test_mesh_and_validation(void **state) {
    (void)state;
    hp_mesh *m = mesh2(2, 4);
    int c[2];
    hp_mesh_coords(m, 5, c);
    assert_int_equal(c[0], 1); /* row-major: last axis fastest */
    assert_int_equal(c[1], 1);
    assert_int_equal(hp_mesh_index(m, c), 5);
    hp_mesh *bad;
    assert_int_equal(hp_mesh_new(2, (int[]){2, 4}, (const char *[]){"dp", "tp"}, (int[]){0, 1, 2, 3, 4, 5}, 6, &bad),
                     HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("8 devices but 6 ranks");
    assert_int_equal(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "dp"}, NULL, 0, &bad), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("'dp'");

    hp_layout l;
    assert_int_equal(hp_layout_parse("[dp, dp]", m, &l), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("alias 'dp' appears twice");
    assert_int_equal(hp_layout_parse("[[tp, tp], none]", m, &l), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("'tp'");
    assert_int_equal(hp_layout_parse("[sp, none]", m, &l), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("unknown mesh alias 'sp'");
    assert_int_equal(hp_layout_parse("[dp, none] partial=sum(dp)", m, &l), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("partial on alias 'dp', which shards dim 0");
    assert_int_equal(hp_layout_parse("[dp, none] partial=mean(tp)", m, &l), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("mean");
    /* a hand-built layout with partial on a sharding axis */
    hp_layout_init(&l, 2);
    l.nmap[0] = 1;
    l.map[0][0] = 1;
    l.partial = 2;
    assert_int_equal(hp_layout_validate(&l, m, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("'tp'");

    const char *texts[] = {"[dp, tp]", "[[tp, dp], none]", "[none, none] partial=max(dp, tp)", "[none, tp] partial=avg(dp)", "[]"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char buf[128];
        assert_ok(hp_layout_parse(texts[i], m, &l));
        assert_string_equal(hp_layout_format(&l, m, buf, sizeof buf), texts[i]);
        hp_placement p[2];
        hp_layout back;
        assert_ok(hp_layout_to_placements(&l, m, p));
        assert_ok(hp_layout_from_placements(p, m, l.ndim, &back));
        assert_true(hp_layout_equal(&l, &back));
    }
    /* placements: PyTorch order by default */
    hp_placement p[2] = {{HP_PLACEMENT_SHARD, 0, -1, 0}, {HP_PLACEMENT_SHARD, 0, -1, 0}};
    assert_ok(hp_layout_from_placements(p, m, 1, &l));
    assert_int_equal(l.nmap[0], 2);
    assert_int_equal(l.map[0][0], 0);
    char buf[64];
    assert_ok(hp_layout_parse("[tp, none] partial=sum(dp)", m, &l));
    assert_ok(hp_layout_to_placements(&l, m, p));
    assert_string_equal(hp_placements_str(p, 2, buf, sizeof buf), "P(sum), S(0)");
    hp_mesh_free(m);
}

static void test_uneven_slices(void **state) {
    (void)state;
    hp_mesh *m = mesh2(2, 4);
    hp_layout l;
    assert_ok(hp_layout_parse("[[dp, tp], none]", m, &l));
    hp_shape s = HP_SHAPE(10, 3);
    /* 10 over 8 shards: b = 2, shards 0..4 hold 2, shard 4 holds [8,10), 5..7 are empty */
    int64_t st[2], ln[2];
    int64_t want_start[8] = {0, 2, 4, 6, 8, 10, 10, 10}, want_len[8] = {2, 2, 2, 2, 2, 0, 0, 0};
    for (int i = 0; i < 8; i++) {
        assert_ok(hp_layout_slice_of(&l, m, &s, i, st, ln));
        assert_int_equal(st[0], want_start[i]);
        assert_int_equal(ln[0], want_len[i]);
        assert_int_equal(ln[1], 3);
    }
    /* [tp, dp] order: shard index = tp * 2 + dp; mesh index 1 = (dp 0, tp 1) -> shard 2 */
    assert_ok(hp_layout_parse("[[tp, dp], none]", m, &l));
    assert_ok(hp_layout_slice_of(&l, m, &s, 1, st, ln));
    assert_int_equal(st[0], 4);
    hp_mesh_free(m);
}

static void test_planner_bytes(void **state) {
    (void)state;
    hp_mesh *m;
    assert_ok(hp_mesh_new(1, (int[]){4}, (const char *[]){"x"}, NULL, 0, &m));
    hp_shape s = HP_SHAPE(8, 16);
    hp_layout s0, s1, r, p;
    assert_ok(hp_layout_parse("[x, none]", m, &s0));
    assert_ok(hp_layout_parse("[none, x]", m, &s1));
    assert_ok(hp_layout_parse("[none, none]", m, &r));
    assert_ok(hp_layout_parse("[none, none] partial=sum(x)", m, &p));
    int64_t shard = 8 * 16 / 4 * 4, full = 8 * 16 * 4;
    struct { hp_layout *a, *b; hp_redist_kind kind; int64_t local; } cases[] = {
        {&s0, &r, HP_REDIST_ALL_GATHER, shard},
        {&p, &s0, HP_REDIST_REDUCE_SCATTER, full},
        {&s0, &s1, HP_REDIST_ALL_TO_ALL, shard},
        {&p, &r, HP_REDIST_ALL_REDUCE, full},
        {&r, &s1, HP_REDIST_LOCAL_SLICE, full},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hp_redistribute_plan plan;
        assert_ok(hp_redistribute_plan_make(m, cases[i].a, cases[i].b, &s, HP_DTYPE_F32, &plan));
        assert_int_equal(plan.nsteps, 1);
        assert_int_equal(plan.steps[0].kind, cases[i].kind);
        assert_int_equal(plan.bytes, hp_redistribute_min_bytes(cases[i].kind, cases[i].local, 4));
    }
    hp_mesh_free(m);
    /* 2-D: [[dp, tp], none] -> [none, none] is two all-gathers, tp first */
    m = mesh2(2, 2);
    hp_layout a, b;
    assert_ok(hp_layout_parse("[[dp, tp], none]", m, &a));
    assert_ok(hp_layout_parse("[none, none]", m, &b));
    hp_redistribute_plan plan;
    assert_ok(hp_redistribute_plan_make(m, &a, &b, &s, HP_DTYPE_F32, &plan));
    char buf[1024];
    assert_int_equal(plan.bytes, 3 * 8 * 16 * 4 / 4);
    assert_true(plan.nsteps >= 1);
    assert_non_null(hp_redistribute_plan_str(&plan, m, buf, sizeof buf));
    /* partial(dp) -> [dp, tp]: slice over tp first (free), then reduce-scatter the half over dp */
    assert_ok(hp_layout_parse("[none, none] partial=sum(dp)", m, &a));
    assert_ok(hp_layout_parse("[dp, tp]", m, &b));
    assert_ok(hp_redistribute_plan_make(m, &a, &b, &s, HP_DTYPE_F32, &plan));
    assert_int_equal(plan.nsteps, 2);
    assert_int_equal(plan.steps[0].kind, HP_REDIST_LOCAL_SLICE);
    assert_int_equal(plan.steps[1].kind, HP_REDIST_REDUCE_SCATTER);
    assert_int_equal(plan.bytes, hp_redistribute_min_bytes(HP_REDIST_REDUCE_SCATTER, full / 2, 2));
    /* S(0) -> S(1) on a 2-D mesh along dp with tp replicated: one all-to-all over dp */
    assert_ok(hp_layout_parse("[dp, none]", m, &a));
    assert_ok(hp_layout_parse("[none, dp]", m, &b));
    assert_ok(hp_redistribute_plan_make(m, &a, &b, &s, HP_DTYPE_F32, &plan));
    assert_int_equal(plan.nsteps, 1);
    assert_int_equal(plan.steps[0].kind, HP_REDIST_ALL_TO_ALL);
    assert_int_equal(plan.bytes, hp_redistribute_min_bytes(HP_REDIST_ALL_TO_ALL, full / 2, 2));
    hp_mesh_free(m);
}

/* ---------------------------------------------------------------- simulated ranks */

typedef struct sim_case {
    int naxes, dims[3];
    hp_shape shape;
    int stride;
    rc_stats stats[8];
} sim_case;

static hp_status run_exhaustive(hp_comm *world, int rank, void *user) {
    sim_case *c = user;
    hp_mesh *m;
    const char *names[] = {"a", "b", "c"};
    HP_CHECK(hp_mesh_new(c->naxes, c->dims, names, NULL, 0, &m));
    hp_status st = hp_mesh_attach(m, world);
    static const hp_reduce_op ops[] = {HP_REDUCE_SUM, HP_REDUCE_MAX, HP_REDUCE_AVG, HP_REDUCE_MIN};
    int cap = 4096;
    hp_layout *ls = malloc((size_t)cap * sizeof *ls);
    int nl = rc_enumerate(m, c->shape.ndim, ops, c->naxes == 1 ? 4 : 2, ls, cap);
    if (st == HP_STATUS_OK) st = rc_check_all(m, &c->shape, ls, nl, c->stride, &c->stats[rank]);
    free(ls);
    hp_mesh_free(m);
    if (st == HP_STATUS_OK && c->stats[rank].failures)
        st = hp_error(HP_STATUS_INTERNAL, "%d of %d pairs wrong; first: %s", c->stats[rank].failures,
                      c->stats[rank].pairs, c->stats[rank].first);
    return st;
}

static void exhaustive(int naxes, const int *dims, hp_shape shape, int stride) {
    sim_case c = {.naxes = naxes, .shape = shape, .stride = stride};
    int n = 1;
    for (int a = 0; a < naxes; a++) n *= c.dims[a] = dims[a];
    assert_ok(hp_comm_sim_run(n, run_exhaustive, &c));
    assert_true(c.stats[0].pairs > 0);
}

static void test_sim_exhaustive_1d(void **state) {
    (void)state;
    exhaustive(1, (int[]){4}, HP_SHAPE(8, 4), 1);
    exhaustive(1, (int[]){3}, HP_SHAPE(5, 7), 1);    /* uneven, incl. empty shards */
    exhaustive(1, (int[]){4}, HP_SHAPE(2, 3, 5), 1); /* more shards than rows */
    exhaustive(1, (int[]){2}, HP_SHAPE_SCALAR, 1);
}

static void test_sim_exhaustive_2d(void **state) {
    (void)state;
    exhaustive(2, (int[]){2, 2}, HP_SHAPE(4, 6), 1);
    exhaustive(2, (int[]){2, 3}, HP_SHAPE(7, 5), 1);  /* uneven on both */
    exhaustive(2, (int[]){2, 2}, HP_SHAPE(9), 1);
    exhaustive(3, (int[]){2, 2, 2}, HP_SHAPE(4, 10), 7); /* a sample of the 3-axis pairs */
}

static hp_status run_cross(hp_comm *world, int rank, void *user) {
    rc_stats *stats = (rc_stats *)user + rank;
    hp_mesh *sm, *dm1, *dm2;
    HP_CHECK(hp_mesh_new(1, (int[]){2}, (const char *[]){"pp"}, (int[]){0, 1}, 2, &sm));
    HP_CHECK(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, (int[]){3, 2, 1, 0}, 4, &dm1));
    HP_CHECK(hp_mesh_new(1, (int[]){3}, (const char *[]){"tp"}, (int[]){1, 2, 3}, 3, &dm2));
    static const hp_reduce_op ops[] = {HP_REDUCE_SUM, HP_REDUCE_MAX};
    hp_layout src[64], dst[64];
    hp_shape shape = HP_SHAPE(5, 6);
    int ns = rc_enumerate(sm, 2, ops, 0, src, 64);
    hp_status st = HP_STATUS_OK;
    const hp_mesh *dms[] = {dm1, dm2};
    for (int k = 0; k < 2 && st == HP_STATUS_OK; k++) {
        int nd = rc_enumerate(dms[k], 2, ops, 2, dst, 64);
        for (int i = 0; i < ns && st == HP_STATUS_OK; i++) {
            if (src[i].partial) continue;
            for (int j = 0; j < nd && st == HP_STATUS_OK; j++) {
                st = rc_check_cross(world, sm, &src[i], dms[k], &dst[j], &shape, stats);
                /* and back: the destination (without partial) to the source mesh */
                if (st == HP_STATUS_OK && !dst[j].partial) st = rc_check_cross(world, dms[k], &dst[j], sm, &src[i], &shape, stats);
            }
        }
    }
    hp_mesh_free(sm);
    hp_mesh_free(dm1);
    hp_mesh_free(dm2);
    if (st == HP_STATUS_OK && stats->failures) st = hp_error(HP_STATUS_INTERNAL, "%d wrong; first: %s", stats->failures, stats->first);
    return st;
}

static void test_sim_cross_mesh(void **state) {
    (void)state;
    rc_stats stats[4] = {0};
    assert_ok(hp_comm_sim_run(4, run_cross, stats));
    assert_true(stats[0].pairs > 50);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_and_validation),
        cmocka_unit_test(test_uneven_slices),
        cmocka_unit_test(test_planner_bytes),
        cmocka_unit_test(test_sim_exhaustive_1d),
        cmocka_unit_test(test_sim_exhaustive_2d),
        cmocka_unit_test(test_sim_cross_mesh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
