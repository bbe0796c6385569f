/* ranks: 2 4 8 */
/* Redistribution under MPI: exhaustive layout pairs on 1-D and 2-D meshes (multi-axis entries,
 * partial, uneven sizes), cross-mesh hand-offs, the standard transitions' bytes, DTensor. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hp/comm_mpi.h"
#include "hp/dtensor.h"
#include "redist_check.h"

static hp_comm *g_world;

static void check_stats(hp_status st, const rc_stats *s) {
    assert_ok(st);
    if (s->failures) fail_msg("%d of %d pairs wrong; first: %s", s->failures, s->pairs, s->first);
    assert_true(s->pairs > 0);
    if (hp_comm_rank(g_world) == 0) print_message("  %d layout pairs checked, %lld plan bytes in total\n", s->pairs, (long long)s->bytes);
}

/* Mesh shapes for n ranks: 1-D [n] and 2-D [2, n/2]. */
static void exhaustive(int naxes, const int *dims, hp_shape shape, int stride) {
    hp_mesh *m;
    const char *names[] = {"a", "b", "c"};
    assert_ok(hp_mesh_new(naxes, dims, names, NULL, 0, &m));
    assert_ok(hp_mesh_attach(m, g_world));
    static const hp_reduce_op ops[] = {HP_REDUCE_SUM, HP_REDUCE_MAX, HP_REDUCE_AVG, HP_REDUCE_MIN};
    hp_layout *ls = malloc(4096 * sizeof *ls);
    int nl = rc_enumerate(m, shape.ndim, ops, naxes == 1 ? 4 : 2, ls, 4096);
    rc_stats s = {0};
    hp_status st = rc_check_all(m, &shape, ls, nl, stride, &s);
    free(ls);
    hp_mesh_free(m);
    check_stats(st, &s);
}

static void test_exhaustive_1d(void **state) {
    (void)state;
    int n = hp_comm_size(g_world);
    exhaustive(1, (int[]){n}, HP_SHAPE(2 * n, 3), 1);
    exhaustive(1, (int[]){n}, HP_SHAPE(n + 1, n - 1 + 2), 1); /* uneven */
}

static void test_exhaustive_2d(void **state) {
    (void)state;
    int n = hp_comm_size(g_world);
    if (n < 4) skip();
    exhaustive(2, (int[]){2, n / 2}, HP_SHAPE(n, 6), n == 8 ? 2 : 1);
    exhaustive(2, (int[]){n / 2, 2}, HP_SHAPE(5, 3), n == 8 ? 3 : 1); /* uneven, empty shards */
    if (n == 8) exhaustive(3, (int[]){2, 2, 2}, HP_SHAPE(4, 6), 13);
}

static void test_cross_mesh(void **state) {
    (void)state;
    int n = hp_comm_size(g_world);
    /* first half -> all ranks reversed (training -> inference), and all -> last n-1 (pipeline) */
    int *half = malloc((size_t)n * sizeof *half), *rev = malloc((size_t)n * sizeof *rev), *tail = malloc((size_t)n * sizeof *tail);
    for (int i = 0; i < n; i++) {
        half[i] = i;
        rev[i] = n - 1 - i;
        tail[i] = i + 1;
    }
    hp_mesh *a, *b, *c;
    assert_ok(hp_mesh_new(1, (int[]){n / 2}, (const char *[]){"pp"}, half, n / 2, &a));
    if (n >= 4)
        assert_ok(hp_mesh_new(2, (int[]){2, n / 2}, (const char *[]){"dp", "tp"}, rev, n, &b));
    else
        assert_ok(hp_mesh_new(1, (int[]){n}, (const char *[]){"tp"}, rev, n, &b));
    assert_ok(hp_mesh_new(1, (int[]){n - 1}, (const char *[]){"x"}, tail, n - 1, &c));
    static const hp_reduce_op ops[] = {HP_REDUCE_SUM};
    hp_layout la[64], lb[64], lc[64];
    hp_shape shape = HP_SHAPE(7, 5);
    int na = rc_enumerate(a, 2, ops, 1, la, 64), nb = rc_enumerate(b, 2, ops, 1, lb, 64), nc = rc_enumerate(c, 2, ops, 1, lc, 64);
    rc_stats s = {0};
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < na && st == HP_STATUS_OK; i++)
        for (int j = 0; j < nb && st == HP_STATUS_OK; j++) {
            if (la[i].partial) continue;
            st = rc_check_cross(g_world, a, &la[i], b, &lb[j], &shape, &s);
            if (st == HP_STATUS_OK && !lb[j].partial) st = rc_check_cross(g_world, b, &lb[j], c, &lc[j % nc], &shape, &s);
        }
    check_stats(st, &s);
    free(half);
    free(rev);
    free(tail);
    hp_mesh_free(a);
    hp_mesh_free(b);
    hp_mesh_free(c);
}

static void test_standard_bytes_and_dtensor(void **state) {
    (void)state;
    int n = hp_comm_size(g_world);
    hp_mesh *m;
    assert_ok(hp_mesh_new(1, (int[]){n}, (const char *[]){"x"}, NULL, 0, &m));
    assert_ok(hp_mesh_attach(m, g_world));
    hp_shape shape = HP_SHAPE(2 * n, 2 * n);
    int64_t numel = 4 * n * n;
    float *g = malloc((size_t)numel * sizeof *g), *full = malloc((size_t)numel * sizeof *full);
    for (int64_t i = 0; i < numel; i++) g[i] = (float)i;
    hp_layout s0, s1, r, p;
    assert_ok(hp_layout_parse("[x, none]", m, &s0));
    assert_ok(hp_layout_parse("[none, x]", m, &s1));
    assert_ok(hp_layout_parse("[none, none]", m, &r));
    assert_ok(hp_layout_parse("[none, none] partial=sum(x)", m, &p));
    hp_dtensor *t0, *t1, *t2, *t3;
    assert_ok(hp_dtensor_distribute(m, &s0, &shape, HP_DTYPE_F32, g, &t0));
    hp_shape ls = hp_dtensor_local_shape(t0);
    assert_int_equal(ls.dim[0], 2);
    int64_t shard = numel / n * 4, whole = numel * 4;
    assert_ok(hp_dtensor_redistribute(t0, &s1, &t1)); /* all-to-all */
    assert_int_equal(hp_dtensor_bytes_moved(t1), hp_redistribute_min_bytes(HP_REDIST_ALL_TO_ALL, shard, n));
    assert_ok(hp_dtensor_redistribute(t1, &r, &t2)); /* all-gather */
    assert_int_equal(hp_dtensor_bytes_moved(t2), hp_redistribute_min_bytes(HP_REDIST_ALL_GATHER, shard, n));
    assert_memory_equal(hp_dtensor_to_local(t2, NULL), g, (size_t)numel * sizeof *g);
    hp_dtensor_free(t2);
    hp_dtensor_free(t1);
    assert_ok(hp_dtensor_distribute(m, &p, &shape, HP_DTYPE_F32, g, &t1));
    assert_ok(hp_dtensor_redistribute(t1, &s0, &t3)); /* reduce-scatter */
    assert_int_equal(hp_dtensor_bytes_moved(t3), hp_redistribute_min_bytes(HP_REDIST_REDUCE_SCATTER, whole, n));
    assert_memory_equal(hp_dtensor_to_local(t3, NULL), hp_dtensor_to_local(t0, NULL), (size_t)shard);
    assert_ok(hp_dtensor_full_tensor(t1, full));
    assert_memory_equal(full, g, (size_t)numel * sizeof *g);
    hp_dtensor *t4;
    assert_ok(hp_dtensor_from_local(m, &s0, &shape, HP_DTYPE_F32, hp_dtensor_to_local(t0, NULL), &t4));
    memset(full, 0, (size_t)numel * sizeof *full);
    assert_ok(hp_dtensor_full_tensor(t4, full));
    assert_memory_equal(full, g, (size_t)numel * sizeof *g);
    hp_dtensor_free(t0);
    hp_dtensor_free(t1);
    hp_dtensor_free(t3);
    hp_dtensor_free(t4);
    free(g);
    free(full);
    hp_mesh_free(m);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&g_world) != HP_STATUS_OK) {
        fprintf(stderr, "MPI init failed: %s\n", hp_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustive_1d),
        cmocka_unit_test(test_exhaustive_2d),
        cmocka_unit_test(test_cross_mesh),
        cmocka_unit_test(test_standard_bytes_and_dtensor),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hp_comm_free(g_world);
    hp_comm_mpi_finalize();
    return failed;
}
