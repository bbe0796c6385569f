/* ranks: 2 3 */
/*
 * A rank that fails tells the others (docs/reliability.md, Faults; hp/comm.h:
 * hp_comm_report_failure, hp_comm_set_rank_names). The last rank reports a failure instead of
 * sending what the others wait for; with a 60 s timeout, every other rank's recv fails within 2 s
 * with HP_STATUS_COMM naming the operation, the failed rank with its label (a group) and its
 * message, and the family then counts as failed (hp_comm_peer_failed, hp_comm_stalled). The failed
 * rank itself has heard of no fault. The last rank then sends what was waited for, so the abandoned
 * receives complete and every process ends cleanly; the verdict is reduced with MPI itself, since
 * this process's communicators stay failed. (A rank whose process dies is tested by tests/fault.sh.)
 * Before that, on a communicator family of its own: a receive that times out names the peer's label.
 */
#include "hp/comm_mpi.h"

#include "mpi_check.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_size;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A timeout between labelled ranks names the peer's group too (a communicator family of its own,
 * so the failure below is not mixed up with this stall). */
static void test_timeout_label(void) {
    hp_comm *w = NULL;
    OK(hp_comm_mpi_world(&w));
    int last = g_size - 1;
    const char *use[3] = {"rank 0 of group 'a'", g_size == 3 ? "rank 1 of group 'a'" : "rank 0 of group 'b'",
                          "rank 0 of group 'b'"};
    OK(hp_comm_set_rank_names(w, g_size, use));
    OK(hp_comm_set_timeout(w, 1));
    static float y; /* completed after the timeout, when this function has returned */
    if (g_rank == last) {
        nanosleep(&(struct timespec){2, 500000000L}, NULL);
        for (int r = 0; r < last; r++) {
            float one = 1;
            OK(hp_comm_send(w, &one, 1, HP_DTYPE_F32, r, 9));
        }
    } else {
        hp_status st = hp_comm_recv(w, &y, 1, HP_DTYPE_F32, last, 9);
        char want[128];
        snprintf(want, sizeof want, "; world rank %d is rank 0 of group 'b'", last);
        CHECK(st == HP_STATUS_TIMEOUT && strstr(hp_error_message(), want), "timeout %s: '%s' not in '%s'",
              hp_status_str(st), want, hp_error_message());
    }
    MPI_Barrier(MPI_COMM_WORLD); /* the late send has been received (MPI orders it before the barrier's) */
    hp_comm_free(w);
}

static void test_report(hp_comm *world) {
    int last = g_size - 1;
    OK(hp_comm_set_timeout(world, 60));
    /* world rank r is "rank k of group 'gG'": group 0 holds every rank but the last, group 1 the last */
    const char *names[3] = {"rank 0 of group 'g0'", "rank 1 of group 'g0'", "rank 0 of group 'g1'"};
    const char *use[3] = {names[0], g_size == 3 ? names[1] : names[2], names[2]};
    OK(hp_comm_set_rank_names(world, g_size, use));
    CHECK(hp_comm_set_rank_names(world, -1, use) == HP_STATUS_INVALID_ARGUMENT, "a negative count was accepted");
    static float x; /* the abandoned receive completes after this function returns: not on its stack */
    if (g_rank == last) {
        nanosleep(&(struct timespec){0, 200000000L}, NULL); /* the others are waiting by now */
        hp_comm_report_failure(world, "boom: the last rank cannot build its stage");
        hp_comm_report_failure(world, "a second report (not sent)");
        CHECK(!hp_comm_peer_failed(world) && !hp_comm_stalled(world), "the failed rank heard of a fault itself");
        nanosleep(&(struct timespec){1, 0}, NULL);
        for (int r = 0; r < last; r++) {
            float one = 1;
            OK(hp_comm_send(world, &one, 1, HP_DTYPE_F32, r, 5)); /* completes the abandoned receives */
        }
        return;
    }
    double t0 = now_s();
    hp_status st = hp_comm_recv(world, &x, 1, HP_DTYPE_F32, last, 5);
    double wall = now_s() - t0;
    const char *msg = hp_error_message();
    CHECK(st == HP_STATUS_COMM, "status %s, expected a communication error (%s)", hp_status_str(st), msg);
    CHECK(wall < 2.0, "the recv failed after %.2f s, expected within 2 s of the report", wall);
    char want[256];
    snprintf(want, sizeof want, "world rank %d (rank 0 of group 'g1') failed: boom: the last rank cannot build its stage",
             last);
    CHECK(strstr(msg, want) != NULL, "'%s' not in '%s'", want, msg);
    snprintf(want, sizeof want, "recv of 4 bytes from rank %d (world rank %d), tag 5 abandoned", last, last);
    CHECK(strstr(msg, want) != NULL, "'%s' not in '%s'", want, msg);
    CHECK(strstr(msg, "a second report") == NULL, "the second report travelled: %s", msg);
    CHECK(hp_comm_peer_failed(world) && hp_comm_stalled(world), "the family does not count as failed");
}

int main(int argc, char **argv) {
    hp_comm *world;
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&world) != HP_STATUS_OK) {
        fprintf(stderr, "MPI init failed: %s\n", hp_error_message());
        return 1;
    }
    g_rank = hp_comm_rank(world);
    g_size = hp_comm_size(world);
    if (g_size < 2 || g_size > 3) {
        fprintf(stderr, "run with 2 or 3 ranks\n");
        return 1;
    }
    test_timeout_label();
    test_report(world);
    int failed = g_failed;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    if (g_rank == 0) fprintf(stderr, "%s\n", failed ? "FAILED" : "all checks passed");
    return failed;
}
