/*
 * Internal: the CPU backend's thread team for a whole node sequence (hp_backend_i.run_nodes).
 *
 * Without it every kernel opens its own OpenMP parallel region: about 240 per training step of
 * bench_train's config A. Between regions libgomp parks the idle threads; under
 * OMP_WAIT_POLICY=PASSIVE (the setting that keeps a shared machine usable) a parked thread sleeps
 * on a futex at once, and on a virtual machine waking its vCPU for the next region costs 25-120 us
 * (bench/bench_kernels omp_region; an ACTIVE, spinning team costs 6-12 us but steals the cores
 * from every other process). The team instead opens ONE region for the sequence: its threads run
 * the nodes in order and meet at a barrier after each node (spin briefly, then sched_yield, and
 * only after about a millisecond sleep on a futex: a busy machine still gets its cores back, a
 * quiet one pays about a microsecond per node). "One pool, kept busy": OpenBLAS's OpenMP build sees the region and runs
 * each GEMM single-threaded; the kernels split GEMMs by rows themselves (k_matmul.c).
 *
 * Kernels are of two kinds (the table g_team in team.c):
 *   - team kernels: every thread of the team calls the kernel, which shares out its work with
 *     orphaned `omp for ... nowait` loops and static splits; they wrap their parallel body in
 *     HP_TEAM_RUN so that outside a team (a kernel called on its own) they open their own region;
 *   - the others run on thread 0 alone while the rest wait at the barrier; their own
 *     `omp parallel` regions are nested inside the team's and so run single-threaded.
 * A team kernel's body must be safe to run on every thread: no unshared side effect outside its
 * work-shared loops (write outputs only inside them).
 */
#ifndef HP_BACKEND_CPU_TEAM_H
#define HP_BACKEND_CPU_TEAM_H

#include "hp/backend.h"
#include "hp/ir.h"

#include <omp.h>
#include <stdbool.h>

/* True while the calling thread runs a team kernel together with every thread of its team. */
bool hp__team_all(void);

/* Whether the calling thread should do a kernel's unshared work (a memset of an output, a scalar
 * result): thread 0 of a team kernel, or any thread outside one. */
bool hp__team_leader(void);

/* Waits until every thread of the kernel's team gets here: inside a team kernel the team's
 * barrier, otherwise `omp barrier` of the enclosing region (nothing outside one). For kernels with
 * dependent phases (a reduction summed by hp__team_leader() after every share is written). */
void hp__team_sync(void);

/* Doubles of scratch every thread of a team sees (for partial sums between hp__team_sync calls). */
#define HP_TEAM_SHARED_DOUBLES 64

/* Inside a team kernel: HP_TEAM_SHARED_DOUBLES doubles shared by the team; NULL otherwise. */
double *hp__team_shared(void);

/* Runs one node's CPU kernel (the backend's run_node). */
hp_status hp__cpu_run_args(const hp_node_args *a);

/* The CPU backend's run_nodes (hp/backend.h): one team for nodes a[0..n). Falls back to running
 * them one by one (each kernel with its own regions) with one thread or when OpenMP nesting is
 * enabled (a nested kernel region would then start new threads). */
hp_status hp__cpu_run_nodes(hp_backend_t b, const hp_node_args *a, int n, double *seconds, int *failed);

/*
 * Runs the statement (the variadic arguments: a block containing orphaned `omp for nowait` loops) on every thread of the
 * current team when the kernel is running as a team kernel; inside some other parallel region (a
 * non-team kernel on thread 0 of a team) on a nested team of one thread; otherwise in a new
 * parallel region when `par` (the work is worth the threads' wake-up), else on the calling thread.
 */
#define HP_TEAM_RUN(par, ...)                                                                      \
    do {                                                                                           \
        if (hp__team_all()) {                                                                      \
            __VA_ARGS__;                                                                           \
        } else if (omp_in_parallel() || !(par)) {                                                  \
            _Pragma("omp parallel num_threads(1)") { __VA_ARGS__; }                                \
        } else {                                                                                   \
            _Pragma("omp parallel") { __VA_ARGS__; }                                               \
        }                                                                                          \
    } while (0)

#endif /* HP_BACKEND_CPU_TEAM_H */
