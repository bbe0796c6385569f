/*
 * hp/calibrate.h — the calibration probe: measures this machine's rates for the cost model
 * (hp/costmodel.h) with the backend's own kernels, in the setting a run will have (the same OpenMP
 * thread count, and under mpirun the same ranks sharing the cores, every rank probing at once).
 *
 *     hp_calibration *cal = malloc(sizeof *cal);
 *     hp_calibrate_opts o = HP_CALIBRATE_OPTS_DEFAULT;
 *     HP_CHECK(hp_calibrate(world, &o, cal));            // world: NULL for one rank
 *     if (hp_comm_rank(world) == 0) HP_CHECK(hp_calibration_save(path, cal));
 *
 * What it runs (each part is a small graph compiled into an hp_program, run once to warm up and then
 * `reps` times with profiling — where the ranks' threads outnumber the cores, each timed run
 * repeats the program for 30 ms so that the scheduler shares the cores out as in a step, and the
 * wall time is shared out over the nodes in proportion to their profiled times (time a rank spends
 * descheduled counts); a node's time is its median (or fastest, opts.stat) over the timed runs,
 * averaged over the ranks;
 * with more than one rank the programs run node by node, as a program with collectives does, else
 * as one batch in the backend's thread team):
 *   - GEMM: for every (m, n, k) of the grid {32, 128, 512, 2048}^3 with m*n*k <= max_gemm (larger
 *     products are interpolated from their neighbours), LINEAR nodes (op(A) = A) and transposed
 *     MATMUL nodes (op(A) = A^T, the weight gradient), enough of them to time reliably;
 *   - memory-bound operators: a synthetic training step (embedding, LayerNorm, GELU, broadcast
 *     add, multiply, softmax, scale, residual adds, concat and slice, cross-entropy, then
 *     hp_train_step_build's backward, global-norm clipping and AdamW) at 13 activation sizes from
 *     128 to 1M elements, denser around the kernels' thresholds for using their threads: one curve
 *     per operator of seconds against bytes moved; the same step run in the other mode gives the
 *     dispatch cost of that mode;
 *   - attention forward and backward at 12 (batch x heads, T, head dim) shapes;
 *   - with a world of more than one rank: all-reduce, all-gather, reduce-scatter and all-to-all on
 *     groups of 2, 4, ... ranks (every group of the world at once, as a mesh axis runs them) and
 *     send/recv between pairs, at 7 sizes from 32 bytes to 4 MiB, fitted to alpha + beta * bytes.
 * It takes 10 to 60 seconds on a 2-core machine. Library code: it prints nothing; `progress`
 * reports each part.
 */
#ifndef HP_CALIBRATE_H
#define HP_CALIBRATE_H

#include "hp/comm.h"
#include "hp/costmodel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which figure of a node's timed runs the probe keeps. */
typedef enum hp_calibrate_stat {
    HP_CALIBRATE_STAT_MEDIAN = 0, /* the typical run, load included */
    HP_CALIBRATE_STAT_MIN,        /* the fastest run: what a quiet machine gives, robust to other
                                     processes sharing the cores while the probe runs */
} hp_calibrate_stat;

typedef struct hp_calibrate_opts {
    int reps;            /* timed runs per probe (>= 1) */
    hp_calibrate_stat stat; /* which figure of the runs a node's time is */
    double max_gemm;     /* the largest m*n*k probed (> 0) */
    double gemm_flops;   /* FLOPs per GEMM probe program (> 0): that many products of the shape, up to
                            256, each with operands of its own within 64 MiB (a step's GEMMs read
                            matrices other nodes wrote, not the same cache-hot ones) */
    bool gemm, memory, attention, comm; /* which parts run (comm only with more than one rank) */
    /* Called on rank 0 before each part with a short description (may be NULL). */
    void (*progress)(void *user, const char *what);
    void *user;
} hp_calibrate_opts;
#define HP_CALIBRATE_OPTS_DEFAULT                                                                  \
    ((hp_calibrate_opts){.reps = 5, .stat = HP_CALIBRATE_STAT_MEDIAN, .max_gemm = 1073741824.0,         \
                         .gemm_flops = 512e6,                                                         \
                         .gemm = true, .memory = true,                                                \
                         .attention = true, .comm = true, .progress = NULL, .user = NULL})

/*
 * Runs the probe and fills *out (hp_calibration_init first; the key from hp_machine_key_local with
 * this process's threads and ranks per node). Collective over `world` (NULL or one rank: no
 * communication part): every rank calls it with the same options and receives the same calibration
 * (compute times averaged over the ranks, collective times the slowest rank's). The
 * comm_compute_share assumption is set to 1 when the ranks' compute threads leave no core for the
 * communication progress threads (ranks_per_node x (threads + 1) > cores), else 0.
 * Errors: HP_STATUS_INVALID_ARGUMENT naming a bad option; graph, program and communicator errors.
 */
hp_status hp_calibrate(hp_comm *world, const hp_calibrate_opts *opts, hp_calibration *out);

#ifdef __cplusplus
}
#endif
#endif /* HP_CALIBRATE_H */
