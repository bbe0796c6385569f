/* ranks: 2 3 */
/*
 * Stalled ranks (docs/reliability.md, Stalls; hp/comm.h: hp_comm_set_timeout). The last rank stops
 * taking part for a while (it sleeps outside MPI, as a stopped process would); with a 2 s timeout
 * every other rank's call fails within a few seconds with HP_STATUS_TIMEOUT and a message naming
 * the operation, its bytes, the group and the rank that did not arrive (and, with 3 ranks, not
 * the one that did), and its CPU time while it waited is a small fraction of the wall time, in the
 * default wait mode and in the yield mode. The late rank then joins, so the abandoned operations
 * complete and every process ends cleanly. Also: a wait on a communicator split from the stalled
 * one gives up at once; a point-to-point recv names its peer; timeouts are range-checked.
 */
#include "hp/comm_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int g_rank, g_size, g_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_failed = 1;                                                                          \
        }                                                                                          \
    } while (0)

#define TIMEOUT_S 2.0
#define LATE_S 5.0 /* the stalled rank's absence: well past the timeout and its report */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds (user + system) of the whole process, every thread (MPI's included). */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static void sleep_s(double s) { nanosleep(&(struct timespec){(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}, NULL); }

/* Checks a waiting rank's failed call: status, time, CPU share, the words of its message. */
static void check_timeout(const char *what, hp_status st, double wall, double cpu, const char *const *words) {
    const char *msg = hp_error_message();
    CHECK(st == HP_STATUS_TIMEOUT, "%s: status %s, expected timed out (%s)", what, hp_status_str(st), msg);
    CHECK(wall >= TIMEOUT_S && wall < TIMEOUT_S + 2.0, "%s: failed after %.2f s, expected within [%g, %g) s", what, wall,
          TIMEOUT_S, TIMEOUT_S + 2.0);
    CHECK(cpu < 0.25 * wall, "%s: %.3f s of CPU in %.2f s of waiting (%.1f%%), expected < 25%%", what, cpu, wall,
          100.0 * cpu / wall);
    for (int i = 0; words[i]; i++) CHECK(strstr(msg, words[i]), "%s: message lacks '%s': %s", what, words[i], msg);
    if (g_rank == 0)
        fprintf(stderr, "%s: failed after %.2f s with %.3f s of CPU (%.1f%%): %s\n", what, wall, cpu, 100.0 * cpu / wall,
                msg);
}

/* An all-reduce that the last rank joins LATE_S late; then a barrier on a communicator split from
 * the stalled one, which the waiting ranks give up at once. */
static void test_collective(hp_comm_wait_mode mode, const char *name) {
    hp_comm *w, *sub;
    if (hp_comm_mpi_world(&w) != HP_STATUS_OK) {
        CHECK(0, "%s: world: %s", name, hp_error_message());
        return;
    }
    CHECK(hp_comm_timeout(w) == HP_COMM_TIMEOUT_DEFAULT, "default timeout %g", hp_comm_timeout(w));
    CHECK(hp_comm_set_timeout(w, TIMEOUT_S) == HP_STATUS_OK, "set timeout: %s", hp_error_message());
    if (hp_comm_split(w, 0, g_rank, &sub) != HP_STATUS_OK) {
        CHECK(0, "%s: split: %s", name, hp_error_message());
        hp_comm_free(w);
        return;
    }
    CHECK(hp_comm_timeout(sub) == TIMEOUT_S, "a split communicator's timeout %g, expected %g", hp_comm_timeout(sub),
          TIMEOUT_S);
    static float x[1024]; /* static: an abandoned operation may be completed later */
    int last = g_size - 1;
    if (g_rank == last) {
        sleep_s(LATE_S);
        CHECK(hp_comm_all_reduce(w, x, x, 1024, HP_DTYPE_F32, HP_REDUCE_SUM) == HP_STATUS_OK, "late all-reduce: %s",
              hp_error_message());
        CHECK(hp_comm_barrier(sub) == HP_STATUS_OK, "late barrier: %s", hp_error_message());
        CHECK(!hp_comm_stalled(w), "the late rank saw no timeout");
    } else {
        hp_comm_set_thread_wait(mode);
        double t0 = now_s(), c0 = cpu_s();
        hp_status st = hp_comm_all_reduce(w, x, x, 1024, HP_DTYPE_F32, HP_REDUCE_SUM);
        double wall = now_s() - t0, cpu = cpu_s() - c0;
        char missing[96], group[64];
        snprintf(missing, sizeof missing, "did not arrive: rank %d (world rank %d)", last, last);
        snprintf(group, sizeof group, "group of %d ranks (world ranks 0-%d)", g_size, last);
        const char *words[] = {"all-reduce of 4096 bytes", "collective #1 on this group", "timeout of 2 s", group,
                               missing, NULL};
        check_timeout(name, st, wall, cpu, words);
        CHECK(hp_comm_stalled(w) && hp_comm_stalled(sub), "the family is not marked stalled");
        /* the split communicator gives up at once (after the 2 ms hot phase), naming the first stall */
        t0 = now_s();
        st = hp_comm_barrier(sub);
        wall = now_s() - t0;
        CHECK(st == HP_STATUS_TIMEOUT && strstr(hp_error_message(), "barrier (collective #1 on this group) abandoned: "
                                                                     "an earlier transfer timed out: all-reduce"),
              "%s: barrier after the stall: %s: %s", name, hp_status_str(st), hp_error_message());
        CHECK(wall < 0.5, "%s: the abandoned barrier took %.2f s", name, wall);
        hp_comm_set_thread_wait(HP_COMM_WAIT_BLOCK);
    }
    hp_comm *again; /* a new family: every rank meets here once the late one has caught up */
    CHECK(hp_comm_mpi_world(&again) == HP_STATUS_OK && hp_comm_barrier(again) == HP_STATUS_OK, "after: %s",
          hp_error_message());
    hp_comm_free(again);
    hp_comm_free(sub);
    hp_comm_free(w);
}

/* A recv from rank 1 that rank 1 sends LATE_S late: the message names the peer. */
static void test_recv(void) {
    hp_comm *w;
    if (hp_comm_mpi_world(&w) != HP_STATUS_OK) {
        CHECK(0, "world: %s", hp_error_message());
        return;
    }
    CHECK(hp_comm_set_timeout(w, TIMEOUT_S) == HP_STATUS_OK, "set timeout: %s", hp_error_message());
    static float buf[16];
    if (g_rank == 1) {
        sleep_s(LATE_S);
        CHECK(hp_comm_send(w, buf, 16, HP_DTYPE_F32, 0, 5) == HP_STATUS_OK, "late send: %s", hp_error_message());
    } else if (g_rank == 0) {
        double t0 = now_s(), c0 = cpu_s();
        hp_status st = hp_comm_recv(w, buf, 16, HP_DTYPE_F32, 1, 5);
        double wall = now_s() - t0, cpu = cpu_s() - c0;
        const char *words[] = {"recv of 64 bytes from rank 1 (world rank 1), tag 5", "rank 1 (world rank 1) did not send it",
                               NULL};
        check_timeout("recv", st, wall, cpu, words);
    }
    hp_comm *again;
    CHECK(hp_comm_mpi_world(&again) == HP_STATUS_OK && hp_comm_barrier(again) == HP_STATUS_OK, "after: %s",
          hp_error_message());
    hp_comm_free(again);
    hp_comm_free(w);
}

/* Timeouts are range-checked; 0 is no limit. */
static void test_values(hp_comm *world) {
    CHECK(hp_comm_set_timeout(world, -1) == HP_STATUS_INVALID_ARGUMENT && strstr(hp_error_message(), "-1"),
          "negative timeout: %s", hp_error_message());
    CHECK(hp_comm_set_timeout(world, NAN) == HP_STATUS_INVALID_ARGUMENT, "NaN timeout accepted");
    CHECK(hp_comm_set_timeout(world, 1e9) == HP_STATUS_INVALID_ARGUMENT, "1e9 s accepted");
    CHECK(hp_comm_set_timeout(world, 0) == HP_STATUS_OK && hp_comm_timeout(world) == 0, "0: %s", hp_error_message());
    float x = 1;
    CHECK(hp_comm_all_reduce(world, &x, &x, 1, HP_DTYPE_F32, HP_REDUCE_SUM) == HP_STATUS_OK && x == (float)g_size,
          "all-reduce without limit: %s", hp_error_message());
}

int main(int argc, char **argv) {
    hp_comm *world;
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&world) != HP_STATUS_OK) {
        fprintf(stderr, "MPI init failed: %s\n", hp_error_message());
        return 1;
    }
    g_rank = hp_comm_rank(world);
    g_size = hp_comm_size(world);
    test_values(world);
    test_collective(HP_COMM_WAIT_BLOCK, "all-reduce, block");
    test_collective(HP_COMM_WAIT_YIELD, "all-reduce, yield");
    test_recv();
    int failed = g_failed;
    hp_comm_all_reduce(world, &failed, &failed, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    if (g_rank == 0) fprintf(stderr, "%s\n", failed ? "FAILED" : "all checks passed");
    return failed;
}
