/* ranks: 2 4 8 */
/* The MPI communicator: every collective, blocking and non-blocking, send/recv, split, bf16/i32. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hp/comm_mpi.h"

static hp_comm *g_world;

static void test_all_reduce(void **state) {
    (void)state;
    int r = hp_comm_rank(g_world), n = hp_comm_size(g_world);
    float x[5], y[5];
    for (int i = 0; i < 5; i++) x[i] = (float)(r + i);
    assert_ok(hp_comm_all_reduce(g_world, x, y, 5, HP_DTYPE_F32, HP_REDUCE_SUM));
    for (int i = 0; i < 5; i++) assert_close(y[i], n * (n - 1) / 2.0 + n * i, 0, 0);
    assert_ok(hp_comm_all_reduce(g_world, x, x, 5, HP_DTYPE_F32, HP_REDUCE_AVG)); /* in place */
    for (int i = 0; i < 5; i++) assert_close(x[i], (n - 1) / 2.0 + i, 1e-6, 0);
    int32_t v = r, mx, mn;
    assert_ok(hp_comm_all_reduce(g_world, &v, &mx, 1, HP_DTYPE_I32, HP_REDUCE_MAX));
    assert_ok(hp_comm_all_reduce(g_world, &v, &mn, 1, HP_DTYPE_I32, HP_REDUCE_MIN));
    assert_int_equal(mx, n - 1);
    assert_int_equal(mn, 0);
    uint16_t b = hp_f32_to_bf16((float)(r + 1)), bs;
    assert_ok(hp_comm_all_reduce(g_world, &b, &bs, 1, HP_DTYPE_BF16, HP_REDUCE_SUM));
    assert_close(hp_bf16_to_f32(bs), n * (n + 1) / 2.0, 0, 0);
    hp_comm_request *req;
    float z = 1.0f, zs = 0;
    assert_ok(hp_comm_iall_reduce(g_world, &z, &zs, 1, HP_DTYPE_F32, HP_REDUCE_AVG, &req));
    assert_ok(hp_comm_wait(req));
    assert_close(zs, 1.0, 0, 0);
    assert_int_equal(hp_comm_all_reduce(g_world, x, y, 1, HP_DTYPE_F32, (hp_reduce_op)9), HP_STATUS_INVALID_ARGUMENT);
}

static void test_gather_scatter_alltoall(void **state) {
    (void)state;
    int r = hp_comm_rank(g_world), n = hp_comm_size(g_world);
    float *buf = calloc((size_t)n * 2, sizeof *buf), mine[2] = {(float)r, (float)(10 * r)};
    assert_ok(hp_comm_all_gather(g_world, mine, buf, 2, HP_DTYPE_F32));
    for (int i = 0; i < n; i++) assert_close(buf[2 * i + 1], 10 * i, 0, 0);
    /* in place: my block already in place */
    memset(buf, 0, (size_t)n * 2 * sizeof *buf);
    buf[2 * r] = (float)r;
    buf[2 * r + 1] = (float)(10 * r);
    hp_comm_request *req;
    assert_ok(hp_comm_iall_gather(g_world, buf + 2 * r, buf, 2, HP_DTYPE_F32, &req));
    bool done = false;
    while (!done) assert_ok(hp_comm_test(req, &done));
    for (int i = 0; i < n; i++) assert_close(buf[2 * i], i, 0, 0);
    /* reduce-scatter: block j of every rank holds j + rank */
    float *src = malloc((size_t)n * sizeof *src), out;
    for (int j = 0; j < n; j++) src[j] = (float)(j + r);
    assert_ok(hp_comm_reduce_scatter(g_world, src, &out, 1, HP_DTYPE_F32, HP_REDUCE_SUM));
    assert_close(out, n * r + n * (n - 1) / 2.0, 0, 0);
    assert_ok(hp_comm_ireduce_scatter(g_world, src, &out, 1, HP_DTYPE_F32, HP_REDUCE_MAX, &req));
    assert_ok(hp_comm_wait(req));
    assert_close(out, r + n - 1, 0, 0);
    /* all-to-all: send j*100 + r to rank j */
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    for (int j = 0; j < n; j++) a[j] = (float)(j * 100 + r);
    assert_ok(hp_comm_all_to_all(g_world, a, b, 1, HP_DTYPE_F32));
    for (int i = 0; i < n; i++) assert_close(b[i], r * 100 + i, 0, 0);
    assert_ok(hp_comm_iall_to_all(g_world, a, b, 1, HP_DTYPE_F32, &req));
    assert_ok(hp_comm_wait(req));
    for (int i = 0; i < n; i++) assert_close(b[i], r * 100 + i, 0, 0);
    /* all-to-allv: rank r sends j+1 copies of r to rank j (in reverse displacement order) */
    size_t *sc = calloc(4 * (size_t)n, sizeof *sc), *sd = sc + n, *rc = sc + 2 * n, *rd = sc + 3 * n;
    size_t stot = 0, rtot = 0;
    for (int j = n - 1; j >= 0; j--) {
        sc[j] = (size_t)j + 1;
        sd[j] = stot;
        stot += sc[j];
    }
    for (int i = 0; i < n; i++) {
        rc[i] = (size_t)r + 1;
        rd[i] = rtot;
        rtot += rc[i];
    }
    float *vs = malloc(stot * sizeof *vs), *vr = malloc(rtot * sizeof *vr);
    for (size_t k = 0; k < stot; k++) vs[k] = (float)r;
    assert_ok(hp_comm_iall_to_allv(g_world, vs, sc, sd, vr, rc, rd, HP_DTYPE_F32, &req));
    free(sc); /* the counts may be freed at once */
    assert_ok(hp_comm_wait(req));
    for (int i = 0; i < n; i++)
        for (int k = 0; k <= r; k++) assert_close(vr[i * (r + 1) + k], i, 0, 0);
    free(vs);
    free(vr);
    free(a);
    free(b);
    free(src);
    free(buf);
}

static void test_p2p_bcast_barrier_split(void **state) {
    (void)state;
    int r = hp_comm_rank(g_world), n = hp_comm_size(g_world);
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    int32_t out = r, in = -1;
    hp_comm_request *reqs[2];
    assert_ok(hp_comm_irecv(g_world, &in, 1, HP_DTYPE_I32, prev, 3, &reqs[0]));
    assert_ok(hp_comm_isend(g_world, &out, 1, HP_DTYPE_I32, next, 3, &reqs[1]));
    assert_ok(hp_comm_wait_all(2, reqs));
    assert_int_equal(in, prev);
    if (r == 0) assert_ok(hp_comm_send(g_world, &out, 1, HP_DTYPE_I32, n - 1, 4));
    if (r == n - 1) {
        assert_ok(hp_comm_recv(g_world, &in, 1, HP_DTYPE_I32, 0, 4));
        assert_int_equal(in, 0);
    }
    float v = r == 1 ? 42.0f : 0.0f;
    assert_ok(hp_comm_broadcast(g_world, &v, 1, HP_DTYPE_F32, 1));
    assert_close(v, 42, 0, 0);
    hp_comm_request *req;
    assert_ok(hp_comm_ibroadcast(g_world, &v, 1, HP_DTYPE_F32, 0, &req));
    assert_ok(hp_comm_wait(req));
    assert_ok(hp_comm_barrier(g_world));
    assert_ok(hp_comm_ibarrier(g_world, &req));
    assert_ok(hp_comm_wait(req));
    assert_int_equal(hp_comm_send(g_world, &out, 1, HP_DTYPE_I32, n, 0), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("send destination");
    /* split into even/odd, ordered by descending rank; rank 0 opts out */
    hp_comm *sub;
    assert_ok(hp_comm_split(g_world, r == 0 ? HP_COMM_COLOR_NONE : r % 2, -r, &sub));
    if (r == 0) {
        assert_null(sub);
    } else {
        int members = 0;
        for (int i = 1; i < n; i++) members += i % 2 == r % 2;
        assert_int_equal(hp_comm_size(sub), members);
        int32_t s = r, tot;
        assert_ok(hp_comm_all_reduce(sub, &s, &tot, 1, HP_DTYPE_I32, HP_REDUCE_SUM));
        int want = 0;
        for (int i = 1; i < n; i++) want += i % 2 == r % 2 ? i : 0;
        assert_int_equal(tot, want);
        int higher = 0;
        for (int i = r + 1; i < n; i++) higher += i % 2 == r % 2;
        assert_int_equal(hp_comm_rank(sub), higher);
        assert_string_equal(hp_comm_name(sub), "mpi");
        hp_comm_free(sub);
    }
}

static void test_self_comm(void **state) {
    (void)state;
    hp_comm *c = hp_comm_self_new();
    assert_int_equal(hp_comm_size(c), 1);
    float x = 3, y = 0;
    assert_ok(hp_comm_all_reduce(c, &x, &y, 1, HP_DTYPE_F32, HP_REDUCE_AVG));
    assert_close(y, 3, 0, 0);
    hp_comm_request *req;
    assert_ok(hp_comm_irecv(c, &y, 1, HP_DTYPE_F32, 0, 1, &req));
    x = 7;
    assert_ok(hp_comm_send(c, &x, 1, HP_DTYPE_F32, 0, 1));
    assert_ok(hp_comm_wait(req));
    assert_close(y, 7, 0, 0);
    assert_int_equal(hp_comm_recv(c, &y, 1, HP_DTYPE_F32, 0, 2), HP_STATUS_COMM);
    hp_comm_free(c);
}

/* hp_comm_agree: all succeed -> OK everywhere; the last rank fails -> it keeps its own status and
 * message, every other rank gets HP_STATUS_COMM naming it (the lowest failed rank when several). */
static void test_agree(void **state) {
    (void)state;
    int me = hp_comm_rank(g_world), n = hp_comm_size(g_world);
    assert_int_equal(hp_comm_agree(g_world, HP_STATUS_OK, "all"), HP_STATUS_OK);
    hp_status mine = me == n - 1 ? hp_error(HP_STATUS_OUT_OF_MEMORY, "my own budget") : HP_STATUS_OK;
    hp_status st = hp_comm_agree(g_world, mine, "building");
    if (n == 1 || me == n - 1) {
        assert_int_equal(st, HP_STATUS_OUT_OF_MEMORY);
        assert_non_null(strstr(hp_error_message(), "my own budget"));
    } else {
        char want[64];
        snprintf(want, sizeof want, "building: rank %d of the communicator failed", n - 1);
        assert_int_equal(st, HP_STATUS_COMM);
        assert_non_null(strstr(hp_error_message(), want));
    }
    mine = me >= n / 2 ? hp_error(HP_STATUS_IO, "disk") : HP_STATUS_OK; /* ranks n/2.. fail: the lowest is named */
    st = hp_comm_agree(g_world, mine, "two");
    if (me < n / 2) {
        char want[64];
        snprintf(want, sizeof want, "two: rank %d of", n / 2);
        assert_int_equal(st, HP_STATUS_COMM);
        assert_non_null(strstr(hp_error_message(), want));
    } else {
        assert_int_equal(st, HP_STATUS_IO);
    }
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&g_world) != HP_STATUS_OK) {
        fprintf(stderr, "MPI init failed: %s\n", hp_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_reduce),
        cmocka_unit_test(test_gather_scatter_alltoall),
        cmocka_unit_test(test_p2p_bcast_barrier_split),
        cmocka_unit_test(test_self_comm),
        cmocka_unit_test(test_agree),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hp_comm_free(g_world);
    hp_comm_mpi_finalize();
    return failed;
}
