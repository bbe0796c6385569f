/*
 * Faults of an MPI job (hp/comm.h: hp_comm_report_failure, hp_comm_i.fault): one channel per
 * process, shared by every communicator of the job, since a failed rank breaks the job whichever
 * group it is in.
 *
 * - The channel is a duplicate of MPI_COMM_WORLD made by the first hp_comm_mpi_world (collective),
 *   with each world rank's process id and host name (one MPI_Allgather).
 * - A rank that fails sends its message to every other rank on the channel (MPI_Isend +
 *   MPI_Request_free: nothing to wait for; a message this small goes eagerly).
 * - A waiting rank asks, at most every 10 ms per waiting thread: has a notice come
 *   (MPI_Improbe/MPI_Mrecv), and, at most every 50 ms per process, is the process of every rank on
 *   this host still there (kill(pid, 0), and /proc/PID/stat not a zombie: a killed rank's process is
 *   gone or a zombie until its launcher reaps it). The first fault found is kept and reported to
 *   every later caller.
 * Ranks on other hosts are seen only through their notices (their death ends the job through the
 * launcher: Open MPI's mpirun kills the other processes, SIGTERM then SIGKILL, about a second after it
 * notices). A stopped (SIGSTOP) process is alive: that is a stall, found by the timeout.
 */
#include "comm/mpi/comm_mpi_internal.h"

#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define FAULT_TAG 1
#define FAULT_MSG_MAX 900   /* bytes of a failure message that travel */
#define HOST_MAX 64         /* bytes of a host name kept (with its NUL) */
#define SCAN_EVERY_NS 50000000LL

static struct {
    bool made;
    MPI_Comm comm;
    int me, size;
    int *pid;          /* per world rank */
    char *host;        /* per world rank, HOST_MAX bytes each */
    bool *local;       /* on this host (same host name), not this rank */
    atomic_llong last_scan;
    atomic_int found;  /* 0: none; 1: being recorded; 2: who and msg hold the first fault */
    int who;
    char msg[1024];
    atomic_int reported; /* this rank's failure was sent (once) */
    char sent[FAULT_MSG_MAX + 1]; /* its text: MPI reads it until the sends complete, so it lives on */
} g;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

hp_status hp__mpi_fault_init(void) {
    if (g.made) return HP_STATUS_OK;
    MPI_Comm comm;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rc != MPI_SUCCESS) return hp_error(HP_STATUS_COMM, "MPI_Comm_dup of the fault channel failed (code %d)", rc);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int me, size;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &size);
    /* each rank's record: pid, then its host name */
    size_t rec = sizeof(int) + HOST_MAX;
    char *mine = calloc(1, rec), *all = calloc((size_t)size, rec);
    g.pid = calloc((size_t)size, sizeof *g.pid);
    g.host = calloc((size_t)size, HOST_MAX);
    g.local = calloc((size_t)size, sizeof *g.local);
    if (!mine || !all || !g.pid || !g.host || !g.local) {
        free(mine), free(all), free(g.pid), free(g.host), free(g.local);
        g.pid = NULL, g.host = NULL, g.local = NULL;
        MPI_Comm_free(&comm);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate the fault channel's table of %d ranks", size);
    }
    int pid = (int)getpid();
    memcpy(mine, &pid, sizeof pid);
    if (gethostname(mine + sizeof(int), HOST_MAX - 1) != 0) snprintf(mine + sizeof(int), HOST_MAX, "?");
    mine[rec - 1] = '\0';
    rc = MPI_Allgather(mine, (int)rec, MPI_BYTE, all, (int)rec, MPI_BYTE, comm);
    if (rc != MPI_SUCCESS) {
        free(mine), free(all), free(g.pid), free(g.host), free(g.local);
        g.pid = NULL, g.host = NULL, g.local = NULL;
        MPI_Comm_free(&comm);
        return hp_error(HP_STATUS_COMM, "MPI_Allgather of the fault channel's table failed (code %d)", rc);
    }
    for (int r = 0; r < size; r++) {
        memcpy(&g.pid[r], all + (size_t)r * rec, sizeof(int));
        memcpy(g.host + (size_t)r * HOST_MAX, all + (size_t)r * rec + sizeof(int), HOST_MAX);
        g.host[(size_t)r * HOST_MAX + HOST_MAX - 1] = '\0';
        g.local[r] = r != me && strcmp(g.host + (size_t)r * HOST_MAX, mine + sizeof(int)) == 0;
    }
    free(mine);
    free(all);
    g.comm = comm;
    g.me = me;
    g.size = size;
    atomic_store(&g.last_scan, 0);
    atomic_store(&g.found, 0);
    atomic_store(&g.reported, 0);
    g.made = true;
    return HP_STATUS_OK;
}

void hp__mpi_fault_fini(void) {
    if (!g.made) return;
    /* notices nobody received are dropped with the channel */
    for (;;) {
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, FAULT_TAG, g.comm, &flag, &m, &st) != MPI_SUCCESS || !flag) break;
        int n = 0;
        MPI_Get_count(&st, MPI_CHAR, &n);
        char *buf = malloc(n > 0 ? (size_t)n : 1);
        MPI_Mrecv(buf, n, MPI_CHAR, &m, MPI_STATUS_IGNORE);
        free(buf);
    }
    MPI_Comm_free(&g.comm);
    free(g.pid);
    free(g.host);
    free(g.local);
    g.pid = NULL, g.host = NULL, g.local = NULL;
    g.made = false;
}

/* Keeps the first fault (later ones are consequences). */
static void record(int who, const char *fmt, const char *text, int pid, const char *host) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g.found, &expect, 1)) return;
    g.who = who;
    if (text) snprintf(g.msg, sizeof g.msg, fmt, text);
    else snprintf(g.msg, sizeof g.msg, fmt, pid, host);
    atomic_store(&g.found, 2);
}

/* Whether process pid is gone or a zombie (exited or killed, not yet reaped). */
static bool process_gone(int pid) {
    if (pid <= 0) return false;
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false; /* no /proc: alive as far as kill says */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close = strrchr(buf, ')'); /* the state follows the command name in parentheses */
    return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

int hp__mpi_fault(char *msg, size_t n) {
    if (!g.made) return -1;
    if (atomic_load(&g.found) != 2) {
        /* a notice from a rank that failed */
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, FAULT_TAG, g.comm, &flag, &m, &st) == MPI_SUCCESS && flag) {
            int count = 0;
            MPI_Get_count(&st, MPI_CHAR, &count);
            char text[FAULT_MSG_MAX + 1];
            if (count < 0 || count > FAULT_MSG_MAX) count = FAULT_MSG_MAX;
            MPI_Mrecv(text, count, MPI_CHAR, &m, MPI_STATUS_IGNORE);
            text[count] = '\0';
            record(st.MPI_SOURCE, "failed: %s", text, 0, NULL);
        }
    }
    if (atomic_load(&g.found) != 2) {
        /* the processes of this host's ranks, one scan per process at most every SCAN_EVERY_NS */
        long long t = now_ns(), last = atomic_load(&g.last_scan);
        if (t - last >= SCAN_EVERY_NS && atomic_compare_exchange_strong(&g.last_scan, &last, t)) {
            for (int r = 0; r < g.size; r++) {
                if (g.local[r] && process_gone(g.pid[r])) {
                    record(r, "is gone: its process %d on host %s ended (it exited or was killed) while the job ran",
                           NULL, g.pid[r], g.host + (size_t)r * HOST_MAX);
                    break;
                }
            }
        }
    }
    if (atomic_load(&g.found) != 2) return -1;
    snprintf(msg, n, "%s", g.msg);
    return g.who;
}

void hp__mpi_report_fault(const char *msg) {
    int expect = 0;
    if (!g.made || atomic_load(&g.found) != 0 || !atomic_compare_exchange_strong(&g.reported, &expect, 1)) return;
    size_t len = strlen(msg);
    if (len > FAULT_MSG_MAX) len = FAULT_MSG_MAX;
    memcpy(g.sent, msg, len);
    g.sent[len] = '\0';
    for (int r = 0; r < g.size; r++) {
        if (r == g.me) continue;
        MPI_Request q;
        if (MPI_Isend(g.sent, (int)len, MPI_CHAR, r, FAULT_TAG, g.comm, &q) == MPI_SUCCESS) MPI_Request_free(&q);
    }
}
