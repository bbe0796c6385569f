/* ranks: 2 4 */
/*
 * Abandoned transfers do not outlive their communicator in a way that breaks MPI_Finalize
 * (hp/comm.h: hp_comm_set_timeout, hp_comm_free; docs/design.md, "In-flight requests after a
 * give-up"):
 * - a receive nobody sends to times out; hp_comm_release_abandoned cancels it, its buffer (heap) is
 *   freed, and the message sent afterwards never lands there: the sanitizer pass would see the
 *   write, or the request leaked;
 * - an all-reduce the last rank joins only after the others timed out and freed their
 *   communicator: the others' hp_comm_free hands it to the MPI communicator (which outlives it
 *   until MPI_Finalize), the late rank's all-reduce completes while they progress in a barrier of
 *   another communicator, and every process then finalizes without a crash (Open MPI's libnbc
 *   crashed when the collective ran on after MPI_Comm_free);
 * - a small all-reduce given up and completed late writes the copy it was staged on, not the
 *   caller's buffer.
 */
#include "hp/comm_mpi.h"

#include "mpi_check.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TIMEOUT_S 0.3

static int g_size;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) { nanosleep(&(struct timespec){(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}, NULL); }

/* Rank 0 receives from rank 1, which sends only after rank 0 released the receive and freed its
 * buffer (hp_comm_release_abandoned, as a pipeline does after a failed step): the message must not
 * land in the freed buffer (the sanitizer pass would see the write). */
static void check_recv(void) {
    hp_comm *w = NULL, *after = NULL;
    OK(hp_comm_mpi_world(&w));
    OK(hp_comm_mpi_world(&after)); /* another family: its barriers are not given up */
    OK(hp_comm_set_timeout(w, TIMEOUT_S));
    static float late[256];
    if (g_rank == 0) {
        float *buf = malloc(1024 * sizeof *buf);
        hp_status st = hp_comm_recv(w, buf, 1024, HP_DTYPE_F32, 1, 7);
        CHECK(st == HP_STATUS_TIMEOUT, "recv nobody sends: %s (%s)", hp_status_str(st), hp_error_message());
        double t0 = now_s();
        hp_comm_release_abandoned(w); /* cancels the receive */
        double wall = now_s() - t0;
        CHECK(wall < 0.2, "releasing a cancelled receive took %.2f s", wall);
        free(buf);
    }
    CHECK(hp_comm_barrier(after) == HP_STATUS_OK, "barrier: %s", hp_error_message());
    if (g_rank == 1) /* 1 KiB: sent eagerly, complete at once */
        CHECK(hp_comm_send(w, late, 256, HP_DTYPE_F32, 0, 7) == HP_STATUS_OK, "late send: %s", hp_error_message());
    CHECK(hp_comm_barrier(after) == HP_STATUS_OK, "barrier: %s", hp_error_message());
    sleep_s(0.1); /* rank 0 progresses the late message in its barrier and here in hp_comm_free */
    hp_comm_free(w);
    hp_comm_free(after);
}

/* The last rank joins the all-reduce after the others freed their communicator. */
static void check_late_collective(void) {
    hp_comm *w = NULL, *after = NULL;
    OK(hp_comm_mpi_world(&w));
    OK(hp_comm_mpi_world(&after)); /* another family: the barrier below is not given up */
    OK(hp_comm_set_timeout(w, TIMEOUT_S));
    static float x[256]; /* static: the abandoned all-reduce may still write it */
    for (int i = 0; i < 256; i++) x[i] = 1.0f;
    int last = g_size - 1;
    if (g_rank == last) {
        sleep_s(4 * TIMEOUT_S + 0.5); /* past the others' timeout and their hp_comm_free */
        hp_status st = hp_comm_all_reduce(w, x, x, 256, HP_DTYPE_F32, HP_REDUCE_SUM);
        CHECK(st == HP_STATUS_OK && x[0] == (float)g_size && x[255] == (float)g_size,
              "late all-reduce: %s, x = %g (%s)", hp_status_str(st), (double)x[0], hp_error_message());
        hp_comm_free(w);
    } else {
        hp_status st = hp_comm_all_reduce(w, x, x, 256, HP_DTYPE_F32, HP_REDUCE_SUM);
        CHECK(st == HP_STATUS_TIMEOUT, "all-reduce the last rank is late for: %s (%s)", hp_status_str(st),
              hp_error_message());
        double t0 = now_s();
        hp_comm_free(w); /* tests it for the timeout (0.3 s), then hands it to the MPI communicator */
        double wall = now_s() - t0;
        CHECK(wall < TIMEOUT_S + 0.5, "freeing a communicator with an abandoned all-reduce took %.2f s", wall);
    }
    OK(hp_comm_set_timeout(after, 30));
    CHECK(hp_comm_barrier(after) == HP_STATUS_OK, "barrier after: %s", hp_error_message());
    hp_comm_free(after);
}

/* The same late all-reduce, of 4 floats: the others keep their buffer and write it after giving the
 * all-reduce up; when the last rank joins, the collective completes into the copy it was staged on,
 * not into that buffer (before, it wrote there: a local variable of a returned function, such as
 * hp_comm_agree's verdict, took a stack write at a random later time). */
static void check_late_small(void) {
    hp_comm *w = NULL, *after = NULL;
    OK(hp_comm_mpi_world(&w));
    OK(hp_comm_mpi_world(&after));
    OK(hp_comm_set_timeout(w, TIMEOUT_S));
    float *y = malloc(4 * sizeof *y);
    if (!y) return;
    for (int i = 0; i < 4; i++) y[i] = 1.0f;
    int last = g_size - 1;
    if (g_rank == last) {
        sleep_s(4 * TIMEOUT_S + 0.5);
        hp_status st = hp_comm_all_reduce(w, y, y, 4, HP_DTYPE_F32, HP_REDUCE_SUM);
        CHECK(st == HP_STATUS_OK && y[0] == (float)g_size, "late small all-reduce: %s, y = %g (%s)", hp_status_str(st),
              (double)y[0], hp_error_message());
        hp_comm_free(w);
    } else {
        hp_status st = hp_comm_all_reduce(w, y, y, 4, HP_DTYPE_F32, HP_REDUCE_SUM);
        CHECK(st == HP_STATUS_TIMEOUT, "small all-reduce the last rank is late for: %s", hp_status_str(st));
        for (int i = 0; i < 4; i++) y[i] = -7.0f; /* the caller's buffer, in use again */
        hp_comm_free(w);
    }
    OK(hp_comm_set_timeout(after, 30));
    CHECK(hp_comm_barrier(after) == HP_STATUS_OK, "barrier after: %s", hp_error_message());
    sleep_s(0.1);
    CHECK(hp_comm_barrier(after) == HP_STATUS_OK, "barrier after: %s", hp_error_message());
    if (g_rank != last)
        CHECK(y[0] == -7.0f && y[3] == -7.0f, "the given-up all-reduce wrote the caller's buffer: y = %g", (double)y[0]);
    free(y);
    hp_comm_free(after);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    g_size = hp_comm_size(world);
    check_recv();
    check_late_collective();
    check_late_small();
    int failed = g_failed, any = 0;
    if (hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX) != HP_STATUS_OK) any = 1;
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "abandoned transfers: cancelled, or kept until MPI_Finalize");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any || failed ? 1 : 0;
}
