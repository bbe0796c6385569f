/* SEND and RECV (hp/ops.h) with their point-to-point instructions (hp/runtime.h), on simulated ranks:
 * a ring hand-off run on the point-to-point queue and in program order, both giving the peer's
 * bytes; the operators' shapes, cost and argument errors. */
#include "testutil.h"

#include "hp/ops.h"
#include "hp/runtime.h"

#include <string.h>

#define N 1000

typedef struct ring_arg {
    hp_progress progress;
    bool async;
} ring_arg;

#define TRY(x)                                                                                     \
    do {                                                                                           \
        hp_status st_ = (x);                                                                       \
        if (st_ != HP_STATUS_OK) return st_;                                                       \
    } while (0)

/* Each rank sends its x to the next rank and receives the previous rank's, then y = recv * 2. */
static hp_status ring(hp_comm *comm, int rank, void *user) {
    const ring_arg *ra = user;
    int w = hp_comm_size(comm), next = (rank + 1) % w, prev = (rank + w - 1) % w;
    hp_graph *g = hp_graph_new();
    hp_shape sh = HP_SHAPE(N);
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, sh);
    /* Odd ranks receive first: with blocking, unordered transfers in one stream this would
     * still work (sends are non-blocking); the check is the values. */
    int sn = -1, rn;
    hp_tid r;
    if (rank % 2) {
        r = hp_recv(g, HP_DTYPE_F32, sh, prev, 3);
        rn = hp_graph_n_nodes(g) - 1;
        sn = hp_send(g, x, next, 3);
    } else {
        sn = hp_send(g, x, next, 3);
        r = hp_recv(g, HP_DTYPE_F32, sh, prev, 3);
        rn = hp_graph_n_nodes(g) - 1;
    }
    hp_tid y = hp_scale(g, r, 2.0f);
    TRY(hp_graph_status(g));
    hp_p2p_instr s, rv;
    TRY(hp_p2p_attach(g, sn, comm, ra->async, &s));
    TRY(hp_p2p_attach(g, rn, comm, ra->async, &rv));
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.progress = ra->progress;
    o.keep = &y;
    o.n_keep = 1;
    hp_program *p;
    TRY(hp_program_new(g, &o, &p));
    hp_program_stats stats;
    hp_program_get_stats(p, &stats);
    hp_status st = HP_STATUS_OK;
    int want_queues = ra->async && ra->progress != HP_PROGRESS_INORDER ? 1 : 0;
    if (stats.n_queues != want_queues)
        st = hp_error(HP_STATUS_INTERNAL, "%d queues, want %d", stats.n_queues, want_queues);
    float xv[N], yv[N];
    for (int run = 0; run < 2 && st == HP_STATUS_OK; run++) {
        for (int i = 0; i < N; i++) xv[i] = (float)(rank * 1000 + i + run);
        st = hp_program_set_input(p, x, xv, sizeof xv);
        if (st == HP_STATUS_OK) st = hp_program_run(p);
        if (st == HP_STATUS_OK) st = hp_program_get_output(p, y, yv, sizeof yv);
        for (int i = 0; i < N && st == HP_STATUS_OK; i++)
            if (yv[i] != 2.0f * (float)(prev * 1000 + i + run))
                st = hp_error(HP_STATUS_INTERNAL, "run %d: y[%d] = %g, want %g", run, i, (double)yv[i],
                              2.0 * (prev * 1000 + i + run));
    }
    hp_program_free(p);
    hp_graph_free(g);
    return st;
}

static void test_ring_on_queue_and_in_order(void **state) {
    (void)state;
    const ring_arg args[] = {
        {HP_PROGRESS_BLOCK, true}, {HP_PROGRESS_YIELD, true}, {HP_PROGRESS_SLEEP, true},
        {HP_PROGRESS_INORDER, true}, {HP_PROGRESS_BLOCK, false},
    };
    for (size_t k = 0; k < sizeof args / sizeof args[0]; k++) {
        assert_ok(hp_comm_sim_run(2, ring, (void *)&args[k]));
        assert_ok(hp_comm_sim_run(3, ring, (void *)&args[k]));
    }
}

static void test_ops_and_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(4, 5));
    int sn = hp_send(g, x, 1, 0);
    assert_int_equal(sn, 0);
    hp_tid r = hp_recv(g, HP_DTYPE_F32, HP_SHAPE(3, 2), 1, 0);
    assert_ok(hp_graph_status(g));
    const hp_tensor *rt = hp_graph_tensor(g, r);
    assert_int_equal(rt->dtype, HP_DTYPE_F32);
    assert_int_equal(rt->shape.ndim, 2);
    assert_int_equal(rt->shape.dim[0], 3);
    assert_int_equal(hp_graph_node(g, sn)->n_out, 0);
    assert_true(hp_node_cost(g, 1).bytes_read == 24.0); /* the received bytes */
    hp_comm *self = hp_comm_self_new();
    hp_p2p_instr pi;
    assert_int_equal(hp_p2p_attach(g, 0, self, true, &pi), HP_STATUS_INVALID_ARGUMENT); /* peer 1 of 1 */
    assert_int_equal(hp_p2p_attach(g, 7, self, true, &pi), HP_STATUS_INVALID_ARGUMENT); /* no node 7 */
    assert_int_equal(hp_p2p_attach(g, 0, NULL, true, &pi), HP_STATUS_INVALID_ARGUMENT);
    /* A program with an asynchronous SEND lacking its instruction names it. */
    hp_graph_node(g, sn)->flags |= HP_NODE_FLAG_ASYNC;
    hp_program *p;
    assert_int_equal(hp_program_new(g, NULL, &p), HP_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(hp_error_message(), "send"));
    hp_comm_free(self);
    hp_graph_free(g);
    hp_graph *g2 = hp_graph_new();
    hp_tid x2 = hp_input(g2, "x", HP_DTYPE_F32, HP_SHAPE(4));
    assert_int_equal(hp_send(g2, x2, -1, 0), -1);
    assert_int_equal(hp_graph_status(g2), HP_STATUS_INVALID_ARGUMENT);
    hp_graph_free(g2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_on_queue_and_in_order),
        cmocka_unit_test(test_ops_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
