/* The CPU backend's thread team for a node sequence (team.h). */
#include "backend/cpu/team.h"

#include "backend/cpu/cpu.h"

#include <limits.h>
#include <linux/futex.h>
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Polls of the barrier flag before each sched_yield: long enough for the other thread to finish a
 * node of similar length, short enough not to matter when the core is wanted elsewhere. */
#define SPIN_POLLS 2000
/* Poll-and-yield rounds (about 20 us each) before a waiter sleeps on a futex: a node that runs on
 * thread 0 alone for more than about a millisecond (a streamed optimizer update, a long serial
 * kernel) then leaves the core to the copy and communication threads. */
#define YIELD_ROUNDS 50
/* A sleeping waiter wakes at least this often (ns) even without a futex wake-up. */
#define SLEEP_NS 1000000

/* Sense-reversing central barrier (Mellor-Crummey and Scott, ACM TOCS 9(1), 1991, the
 * "centralized barrier"). Waiters spin, then yield, then sleep on the sense word (futex); the last
 * arriver flips the sense and wakes sleepers. The sleepers count and the sense are sequentially
 * consistent, so a waiter either sees the flip or is counted before the waker looks. */
typedef struct team {
    _Atomic int arrived;
    _Atomic int sense;
    _Atomic int sleepers;
    int size;
    int polls, yield_rounds; /* SPIN_POLLS, YIELD_ROUNDS; fewer when threads outnumber the CPUs */
    _Atomic int fail_at; /* index of the first failing node, or n */
    double shared[HP_TEAM_SHARED_DOUBLES]; /* hp__team_shared */
} team;

static _Thread_local bool tl_all;  /* running a team kernel with the whole team */
static _Thread_local team *tl_team; /* the team this thread belongs to, inside hp__cpu_run_nodes */
static _Thread_local int tl_sense; /* this thread's barrier sense */

bool hp__team_all(void) { return tl_all; }

bool hp__team_leader(void) { return !tl_all || omp_get_thread_num() == 0; }

static void barrier(team *t);

double *hp__team_shared(void) { return tl_all ? tl_team->shared : NULL; }

void hp__team_sync(void) {
    if (tl_all) {
        barrier(tl_team);
        return;
    }
#pragma omp barrier
}

static void barrier(team *t) {
    int s = tl_sense = !tl_sense;
    if (atomic_fetch_add_explicit(&t->arrived, 1, memory_order_acq_rel) == t->size - 1) {
        atomic_store_explicit(&t->arrived, 0, memory_order_relaxed);
        atomic_store(&t->sense, s);
        if (atomic_load(&t->sleepers) > 0)
            syscall(SYS_futex, (int *)&t->sense, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        return;
    }
    for (int round = 0;; round++) {
        for (int k = 0; k < t->polls; k++) {
            if (atomic_load_explicit(&t->sense, memory_order_acquire) == s) return;
            CPU_RELAX();
        }
        if (round < t->yield_rounds) {
            sched_yield();
            continue;
        }
        atomic_fetch_add(&t->sleepers, 1);
        if (atomic_load(&t->sense) != s) {
            struct timespec ts = {0, SLEEP_NS};
            syscall(SYS_futex, (int *)&t->sense, FUTEX_WAIT_PRIVATE, !s, &ts, NULL, 0);
        }
        atomic_fetch_sub(&t->sleepers, 1);
    }
}

/* Team kernels: every thread calls them (their loops are work-shared). The rest run on thread 0. */
static const bool g_team[HP_OP_COUNT] = {
    [HP_OP_MATMUL] = true,    [HP_OP_LINEAR] = true,     [HP_OP_ATTENTION] = true, [HP_OP_ATTENTION_BACKWARD] = true,
    [HP_OP_GELU] = true,      [HP_OP_GELU_BACKWARD] = true, [HP_OP_ADD] = true,    [HP_OP_SUB] = true,
    [HP_OP_MUL] = true,       [HP_OP_SUM_TO] = true,     [HP_OP_LAYERNORM] = true, [HP_OP_LAYERNORM_BACKWARD] = true,
    [HP_OP_ADAMW] = true,     [HP_OP_SUMSQ] = true,      [HP_OP_CROSS_ENTROPY] = true, [HP_OP_CROSS_ENTROPY_BACKWARD] = true,
    [HP_OP_ADAMW_STREAM] = true, [HP_OP_DROPOUT] = true,
    [HP_OP_RMSNORM] = true,   [HP_OP_RMSNORM_BACKWARD] = true, [HP_OP_ROPE] = true, [HP_OP_SWIGLU] = true,
    [HP_OP_SWIGLU_BACKWARD] = true, [HP_OP_ATTENTION_CACHE] = true,
};

hp_status hp__cpu_run_nodes(hp_backend_t b, const hp_node_args *a, int n, double *seconds, int *failed) {
    *failed = -1;
    int nt = omp_get_max_threads();
    if (nt <= 1 || omp_in_parallel() || omp_get_max_active_levels() > 1) return hp_backend_run_each(b, a, n, seconds, failed);
    team t;
    atomic_init(&t.arrived, 0);
    atomic_init(&t.sense, 0);
    atomic_init(&t.sleepers, 0);
    /* More threads than CPUs: a waiter that spins keeps a thread it waits for off a CPU, and one
     * that sleeps pays a futex wake-up per node; yielding at once hands the CPU over (test_train
     * with 3-4 threads on 2 CPUs: 2.9 s with the full spin, 3.3-4.9 s sleeping at once, 0.5 s
     * yielding; 1.0-1.2 s before the team). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    bool over = ncpu > 0 && nt > ncpu;
    t.polls = over ? 16 : SPIN_POLLS;
    t.yield_rounds = over ? 200 : YIELD_ROUNDS;
    atomic_init(&t.fail_at, n);
    hp_status status = HP_STATUS_OK;
    char msg[1024] = "";
#pragma omp parallel num_threads(nt)
    {
        int id = omp_get_thread_num();
#pragma omp single
        t.size = omp_get_num_threads(); /* the implicit barrier publishes it */
        tl_sense = 0;
        tl_team = &t;
        for (int i = 0; i < n; i++) {
            double t0 = id == 0 && seconds ? hp_now_seconds() : 0;
            bool all = g_team[a[i].node->op];
            if (all || id == 0) {
                tl_all = all;
                hp_status st = hp__cpu_run_args(&a[i]);
                tl_all = false;
                /* Team kernels validate identically on every thread: thread 0's result speaks. */
                if (id == 0 && st != HP_STATUS_OK) {
                    status = st;
                    snprintf(msg, sizeof msg, "%s", hp_error_message());
                    atomic_store_explicit(&t.fail_at, i, memory_order_relaxed);
                }
            }
            barrier(&t);
            if (id == 0 && seconds) seconds[i] = hp_now_seconds() - t0;
            /* fail_at is written before barrier i only for node i, so every thread sees the same. */
            if (atomic_load_explicit(&t.fail_at, memory_order_relaxed) <= i) break;
        }
        tl_team = NULL;
    }
    int f = atomic_load(&t.fail_at);
    if (f < n) {
        *failed = f;
        return hp_error(status, "%s", msg);
    }
    return HP_STATUS_OK;
}
