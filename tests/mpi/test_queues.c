/* ranks: 2 4 */
/*
 * Communication queues: ranks issue point-to-point transfers and the collectives of two groups
 * (two different sub-communicators) in DIFFERENT relative orders, which a single FIFO
 * communication stream would deadlock on (rank 0 all-reduces group A before its send; rank 1
 * waits in the receive before its all-reduce of group A). With one queue per group and one for
 * point-to-point the program finishes (an alarm fails the test otherwise) with the right values,
 * and each queue ran its own instructions in program order on one thread.
 */
#include "testutil.h"

#include "hp/comm_mpi.h"
#include "hp/ops.h"
#include "hp/runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 4096 /* elements: large enough for MPI's rendezvous protocol on the sends */

static hp_comm *g_world;

/* A test collective: out = all-reduce (sum) of in over `comm`, logging where and when it ran. */
typedef struct allreduce_instr {
    hp_instr instr;
    hp_comm *comm;
    int id;
    int *log, *n_log;       /* ids in the order they ran (shared by all instructions) */
    pthread_t *threads;     /* the thread each id ran on */
    pthread_mutex_t *mu;
} allreduce_instr;

static hp_status allreduce_run(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
    (void)ctx;
    allreduce_instr *x = (allreduce_instr *)(void *)self;
    pthread_mutex_lock(x->mu);
    x->log[(*x->n_log)++] = x->id;
    x->threads[x->id] = pthread_self();
    pthread_mutex_unlock(x->mu);
    return hp_comm_all_reduce(x->comm, a->in[0], a->out[0], N, HP_DTYPE_F32, HP_REDUCE_SUM);
}

/* Appends a collective over `comm` of x (a REDISTRIBUTE node carrying the test's instruction). */
static hp_tid add_allreduce(hp_graph *g, hp_tid x, allreduce_instr *ins, hp_comm *comm, int id, void *shared[4]) {
    hp_attrs at = {0};
    at.shape = hp_shape_make(1, (int64_t[]){N});
    hp_tid y = hp_graph_add_node(g, HP_OP_REDISTRIBUTE, &x, 1, &at);
    *ins = (allreduce_instr){
        .instr = {.queue = HP_QUEUE_COLLECTIVE, .group = comm, .execute = allreduce_run},
        .comm = comm, .id = id, .log = shared[0], .n_log = shared[1], .threads = shared[2], .mu = shared[3],
    };
    hp_node *n = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    n->extra = ins;
    n->flags |= HP_NODE_FLAG_INSTR | HP_NODE_FLAG_ASYNC;
    return y;
}

static void queues_different_orders(hp_progress progress) {
    alarm(120); /* a deadlock fails the test instead of hanging it */
    int r = hp_comm_rank(g_world), w = hp_comm_size(g_world);
    hp_comm *ga, *gb; /* A: every rank; B: pairs {0,1}, {2,3} */
    assert_ok(hp_comm_split(g_world, 0, r, &ga));
    assert_ok(hp_comm_split(g_world, r / 2, r, &gb));
    int next = (r + 1) % w, prev = (r + w - 1) % w;

    int log[16], n_log = 0;
    pthread_t threads[16];
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    void *shared[4] = {log, &n_log, threads, &mu};
    allreduce_instr a1, a2, b1, b2;
    hp_p2p_instr ps, pr;

    hp_graph *g = hp_graph_new();
    hp_shape sh = hp_shape_make(1, (int64_t[]){N});
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, sh);
    hp_tid ya1, ya2, yb1, yb2, yr;
    int send_node, recv_node;
    /* Ids: A1 = 0, A2 = 1, B1 = 2, B2 = 3. Even ranks: A1, send, B1, A2, recv, B2. Odd ranks: recv,
     * B1, B2, A1, send, A2: group A's collectives and the send/recv pair are issued in opposite
     * relative orders on the two ranks of every pair, and B's interleave differently again. */
    if (r % 2 == 0) {
        ya1 = add_allreduce(g, x, &a1, ga, 0, shared);
        send_node = hp_send(g, x, next, 7);
        yb1 = add_allreduce(g, x, &b1, gb, 2, shared);
        ya2 = add_allreduce(g, ya1, &a2, ga, 1, shared);
        yr = hp_recv(g, HP_DTYPE_F32, sh, prev, 7);
        recv_node = hp_graph_n_nodes(g) - 1;
        yb2 = add_allreduce(g, yb1, &b2, gb, 3, shared);
    } else {
        yr = hp_recv(g, HP_DTYPE_F32, sh, prev, 7);
        recv_node = hp_graph_n_nodes(g) - 1;
        yb1 = add_allreduce(g, x, &b1, gb, 2, shared);
        yb2 = add_allreduce(g, yb1, &b2, gb, 3, shared);
        ya1 = add_allreduce(g, x, &a1, ga, 0, shared);
        send_node = hp_send(g, x, next, 7);
        ya2 = add_allreduce(g, ya1, &a2, ga, 1, shared);
    }
    assert_ok(hp_p2p_attach(g, send_node, g_world, true, &ps));
    assert_ok(hp_p2p_attach(g, recv_node, g_world, true, &pr));
    hp_tid out = hp_add(g, hp_add(g, ya2, yb2), yr); /* compute reads every transfer's result */
    assert_ok(hp_graph_status(g));

    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.progress = progress;
    hp_tid keep[] = {out, ya1, yb1, yr};
    o.keep = keep;
    o.n_keep = 4;
    hp_program *p;
    assert_ok(hp_program_new(g, &o, &p));
    hp_program_stats st;
    hp_program_get_stats(p, &st);
    assert_int_equal(st.n_queues, 3); /* group A, group B, point-to-point */

    float *xv = malloc(N * sizeof *xv), *got = malloc(N * sizeof *got);
    for (int run = 0; run < 3; run++) {
        for (int i = 0; i < N; i++) xv[i] = (float)(r + 1) + (float)run + 0.001f * (float)i;
        assert_ok(hp_program_set_input(p, x, xv, N * sizeof *xv));
        n_log = 0;
        assert_ok(hp_program_run(p));
        /* Per-queue invariant: A1 before A2 and B1 before B2, each group on one thread of its own. */
        int pos[4] = {-1, -1, -1, -1};
        for (int k = 0; k < n_log; k++) pos[log[k]] = k;
        assert_int_equal(n_log, 4);
        assert_true(pos[0] < pos[1]);
        assert_true(pos[2] < pos[3]);
        assert_true(pthread_equal(threads[0], threads[1]));
        assert_true(pthread_equal(threads[2], threads[3]));
        assert_false(pthread_equal(threads[0], threads[2]));
        assert_false(pthread_equal(threads[0], pthread_self()));
        /* Values: sums over the groups, the previous rank's input, and their sum. */
        int nb = hp_comm_size(gb);
        double sum_all = 0, sum_b = 0;
        for (int q = 0; q < w; q++) sum_all += q + 1;
        for (int q = (r / 2) * 2; q < (r / 2) * 2 + nb; q++) sum_b += q + 1;
        for (int i = 0; i < N; i += 511) {
            double base = (double)run + 0.001 * (double)i;
            double a1v = sum_all + w * base, b1v = sum_b + nb * base;
            float rv = (float)(prev + 1) + (float)run + 0.001f * (float)i; /* bitwise the peer's input */
            assert_ok(hp_program_get_output(p, ya1, got, N * sizeof *got));
            assert_close(got[i], a1v, 1e-5, 1e-3);
            assert_ok(hp_program_get_output(p, yb1, got, N * sizeof *got));
            assert_close(got[i], b1v, 1e-5, 1e-3);
            assert_ok(hp_program_get_output(p, yr, got, N * sizeof *got));
            assert_close(got[i], rv, 0, 0);
            assert_ok(hp_program_get_output(p, out, got, N * sizeof *got));
            assert_close(got[i], w * a1v + nb * b1v + rv, 1e-5, 1e-2);
        }
    }
    free(xv);
    free(got);
    hp_program_free(p);
    hp_graph_free(g);
    hp_comm_free(ga);
    hp_comm_free(gb);
    alarm(0);
}

/* Each way the queues' threads can wait (hp_progress); in order there are no queues to test. */
static void test_queues_block(void **state) {
    (void)state;
    queues_different_orders(HP_PROGRESS_BLOCK);
}
static void test_queues_yield(void **state) {
    (void)state;
    queues_different_orders(HP_PROGRESS_YIELD);
}
static void test_queues_sleep(void **state) {
    (void)state;
    queues_different_orders(HP_PROGRESS_SLEEP);
}
/* The test's instructions cannot start non-blocking: compute-driven progress falls back to yield. */
static void test_queues_compute_falls_back(void **state) {
    (void)state;
    queues_different_orders(HP_PROGRESS_COMPUTE);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&g_world) != HP_STATUS_OK) {
        fprintf(stderr, "MPI init failed: %s\n", hp_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queues_block),
        cmocka_unit_test(test_queues_yield),
        cmocka_unit_test(test_queues_sleep),
        cmocka_unit_test(test_queues_compute_falls_back),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hp_comm_free(g_world);
    hp_comm_mpi_finalize();
    return failed;
}
