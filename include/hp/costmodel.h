/*
 * hp/costmodel.h — a calibrated machine model: how long each node of a graph takes on this machine,
 * and how long a step (or a range of its nodes) takes with its collectives.
 *
 * A calibration (hp_calibration) holds what a probe measured on one machine, with one OpenMP thread
 * count per rank and one number of ranks sharing the node (hp/calibrate.h runs the probe;
 * hp_calibration_save / hp_calibration_load cache it in a JSON file keyed by hp_machine_key):
 *   - GEMM rates on a grid of shapes, m, n and k each in {32, 128, 512, 2048}, for op(A) = A and
 *     op(A) = A^T: a product's rate is interpolated in log space between the grid points around its
 *     shape (clamped at the grid's edges), so skinny shapes (a tensor-parallel shard, the weight
 *     gradient of a small model) get the rate measured for skinny shapes;
 *   - per memory-bound operator kind (elementwise, LayerNorm, softmax, GELU, AdamW, ...), the seconds
 *     one node takes as a function of the bytes it moves: a piecewise-linear curve through measured
 *     sizes, since caches make bandwidth depend on size;
 *   - attention forward and backward rates (FLOP/s) at a few (batch x heads, T, head dim) points;
 *   - the dispatch cost of a node: inside the CPU backend's thread team (a program without
 *     collectives runs as one batch) and on its own (a program with collectives runs node by node);
 *     the kernels themselves are timed in the mode a run on this many ranks uses (by_node), and a
 *     program run in the other mode gets the difference of the two dispatch costs per node;
 *   - per communicator operation and group size, alpha (seconds) and beta (seconds per byte received
 *     by the busiest rank), least-squares fits of timed operations of several sizes
 *     (hp_comm_fit_alpha_beta).
 * An hp_machine_model (hp/liveness.h) points at a calibration through its `cal` field; with none,
 * every function here falls back to the flat roofline of flops_per_s and bytes_per_s.
 *
 *     hp_calibration *cal = malloc(sizeof *cal);
 *     hp_machine_key key;
 *     HP_CHECK(hp_machine_key_local(0, 0, &key));
 *     hp_machine_model m = HP_MACHINE_MODEL_DEFAULT;
 *     if (hp_calibration_load(path, &key, 0, cal) == HP_STATUS_OK) m.cal = cal;
 *     else fprintf(stderr, "flat model: %s\n", hp_error_message());
 *     hp_step_prediction p;
 *     HP_CHECK(hp_predict_nodes(g, lv, 0, hp_graph_n_nodes(g), &m, &p));
 *     printf("%.3f s (compute %.3f s, exposed communication %.3f s)\n", p.total_s, p.compute_s,
 *            p.exposed_comm_s);
 *
 * The step prediction (hp_predict_nodes) simulates two kinds of streams, as the runtime runs them
 * (hp/runtime.h): the compute stream runs the live nodes in program order; each collective is issued,
 * in program order, on its group's queue once the compute stream reaches it and its input is ready,
 * runs for its alpha-beta time after the queue's previous collective, and the first node that reads
 * its result waits for it. Assumptions, stated where they are used: communication overlaps compute
 * except for the fraction `comm_compute_share` of its time, which also occupies the compute cores (a
 * machine with no spare core for the progress thread); transfers of different queues do not slow
 * each other.
 */
#ifndef HP_COSTMODEL_H
#define HP_COSTMODEL_H

#include "hp/instr.h"
#include "hp/ir.h"
#include "hp/liveness.h"
#include "hp/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HP_CAL_FORMAT "hyperparallel-calibration"
#define HP_CAL_VERSION 1
#define HP_CAL_GEMM_DIMS 4    /* grid points per GEMM dimension (hp_cal_gemm_dim) */
#define HP_CAL_MAX_POINTS 24  /* points of one operator's time curve */
#define HP_CAL_MAX_ATTENTION 32
#define HP_CAL_MAX_COMM 64    /* (operation, group size) fits */

/* The GEMM grid's i-th dimension: 32, 128, 512, 2048 (i in [0, HP_CAL_GEMM_DIMS)). */
int64_t hp_cal_gemm_dim(int i);

/* What a calibration is valid for: rates depend on the CPU, on the threads each rank runs and on
 * how many ranks share the cores. */
typedef struct hp_machine_key {
    char cpu[96];       /* the CPU model name (/proc/cpuinfo "model name"), or "unknown" */
    int cores;          /* online CPUs */
    int threads;        /* OpenMP threads per rank */
    int ranks_per_node; /* ranks sharing the node's cores */
} hp_machine_key;

/*
 * This machine's key: the CPU model and core count; `threads` (0: omp_get_max_threads()) and
 * `ranks_per_node` (0: the launcher's OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or
 * SLURM_NTASKS_PER_NODE, else 1). Errors: HP_STATUS_INVALID_ARGUMENT for a negative count.
 */
hp_status hp_machine_key_local(int threads, int ranks_per_node, hp_machine_key *out);
/* True when every field matches. */
bool hp_machine_key_equal(const hp_machine_key *a, const hp_machine_key *b);
/* "AMD EPYC, 2 cores, 2 threads x 1 rank per node" into buf (n bytes); returns buf. */
char *hp_machine_key_str(const hp_machine_key *k, char *buf, size_t n);

/* Seconds one node of an operator takes against the bytes it moves (hp_op_cost read + written):
 * n points, bytes strictly increasing. */
typedef struct hp_cal_curve {
    int n;
    double bytes[HP_CAL_MAX_POINTS];   /* bytes */
    double seconds[HP_CAL_MAX_POINTS]; /* seconds per node */
} hp_cal_curve;

/* One measured attention shape (hp_op_cost's ATTENTION fields) of operator `op`. */
typedef struct hp_cal_attention {
    hp_op op;            /* HP_OP_ATTENTION or HP_OP_ATTENTION_BACKWARD */
    int64_t batch, t, d; /* batch x heads, sequence length, head dimension */
    double flops_per_s;  /* FLOP/s (hp_op_cost.flops / seconds) */
} hp_cal_attention;

#define HP_CAL_COMM_POINTS 12 /* measured sizes kept per communication fit */

/*
 * alpha + beta * bytes for one communicator operation on groups of `group` ranks, and the
 * measurements it was fitted to. One line rarely fits every size (a transport switches protocol
 * between small and large messages), so hp_xfer_seconds interpolates between the kept measurements
 * inside their range and uses the fit's slope beyond the largest.
 */
typedef struct hp_comm_fit {
    hp_xfer_kind kind;
    int group;
    double alpha;        /* seconds */
    double beta;         /* seconds per byte (bytes received by the busiest rank) */
    int n_points;        /* measurements fitted */
    double max_rel_err;  /* the worst |fit - measured| / measured over them */
    int n_kept;          /* measurements kept (at most HP_CAL_COMM_POINTS; 0: the fit alone) */
    double bytes[HP_CAL_COMM_POINTS];   /* bytes, strictly increasing */
    double seconds[HP_CAL_COMM_POINTS]; /* seconds */
} hp_comm_fit;

/* A machine's measured rates. A plain struct: hp_calibration_init, then fill (the probe, or a test). */
typedef struct hp_calibration {
    hp_machine_key key;
    int version;                 /* HP_CAL_VERSION */
    double created;              /* seconds since the Unix epoch */
    double probe_seconds;        /* how long the probe ran (seconds) */
    double node_seconds;         /* dispatch of one node in the backend's team (a batched program) */
    double region_seconds;       /* dispatch of one node run on its own (a program with collectives) */
    bool fastest;                /* times are the fastest of the probe's runs (a quiet machine), else
                                    the median runs */
    bool by_node;                /* the kernels were timed node by node (as a program with collectives
                                    runs; the probe's choice with more than one rank), else in a team */
    /* FLOP/s of one (m, n, k) product on the grid: [trans_a][m][n][k]; 0 where not measured. */
    double gemm[2][HP_CAL_GEMM_DIMS][HP_CAL_GEMM_DIMS][HP_CAL_GEMM_DIMS];
    int n_attention;
    hp_cal_attention attention[HP_CAL_MAX_ATTENTION];
    hp_cal_curve op_curve[HP_OP_COUNT]; /* memory-bound operators; n = 0: not measured */
    double memory_bytes_per_s;   /* bytes/s of a memory-bound operator without a curve (0: flat) */
    int n_comm;
    hp_comm_fit comm[HP_CAL_MAX_COMM];
    double comm_compute_share;   /* in [0, 1]: the fraction of a collective's time that also occupies
                                    the compute cores (hp_predict_nodes) */
} hp_calibration;

/* Zeroes *c and sets its version. */
void hp_calibration_init(hp_calibration *c);

/*
 * Least-squares fit of seconds = alpha + beta * bytes over n >= 2 measurements, weighted by
 * 1 / seconds^2 (relative error: latency-bound small messages count as much as large ones). A
 * negative alpha or beta from the fit is clamped to 0 and the other refitted. *max_rel_err (may be
 * NULL) gets the worst relative error of the fit. Errors: HP_STATUS_INVALID_ARGUMENT naming n < 2, a
 * non-positive time, a negative size, or sizes that are all equal.
 */
hp_status hp_comm_fit_alpha_beta(const double *bytes, const double *seconds, int n, double *alpha, double *beta,
                                 double *max_rel_err);

/* Adds (or replaces) the fit of (kind, group) in c. HP_STATUS_OUT_OF_MEMORY when c is full. */
hp_status hp_calibration_set_comm(hp_calibration *c, const hp_comm_fit *f);
/* The fit of (kind, group), or when that group size was not measured the fit of the nearest
 * measured group size of that kind (ties: the larger); NULL when the kind was not measured. */
const hp_comm_fit *hp_calibration_comm(const hp_calibration *c, hp_xfer_kind kind, int group);

/* FLOP/s of one (m, n, k) product (trans_a: op(A) = A^T) from the grid, interpolated in log2 of each
 * dimension and of the rate, clamped to the grid; falls back to the other trans_a grid, then 0 (not
 * calibrated). */
double hp_calibration_gemm_rate(const hp_calibration *c, int64_t m, int64_t n, int64_t k, bool trans_a);

/* Seconds of a node of `op` moving `bytes` from its curve (linear between points, proportional below
 * the first point down to the dispatch cost, the last segment's slope above the last, or for a
 * one-point curve memory_bytes_per_s above it); negative when op has no curve. */
double hp_calibration_curve_seconds(const hp_calibration *c, hp_op op, double bytes);

/* Seconds of one communicator operation under m: from the calibration's fit of its kind and group
 * size (the kept measurements interpolated linearly inside their range, the first one's time below
 * it, the last one's plus beta per byte above it; alpha + beta * bytes without measurements), else
 * bytes / m->bytes_per_s (0 for a non-positive rate). */
double hp_xfer_seconds(const hp_machine_model *m, const hp_xfer *x);

/*
 * Seconds node i spends on a communication queue under m: the sum of its instruction's transfers
 * (hp_instr.xfers; without them its bytes at the flat rate); 0 for a node that is not asynchronous.
 */
double hp_node_comm_seconds(const hp_graph *g, int i, const hp_machine_model *m);

/* The predicted time of a node range, and where it goes (seconds). */
typedef struct hp_step_prediction {
    double total_s;        /* until the compute stream and every queue are done */
    double compute_s;      /* the kernels' time on the compute stream (the sum of the classes below) */
    double gemm_s, attention_s, memory_s; /* compute by kernel class */
    double dispatch_s;     /* the per-node dispatch the calibration's kernel times do not include (the
                              program runs in the other mode than the probe did); may be negative */
    double comm_s;         /* the queues' busy time (every collective's alpha-beta time) */
    double comm_compute_s; /* the part of comm_s that also took the compute cores (comm_compute_share) */
    double exposed_comm_s; /* total_s - compute_s - comm_compute_s: the compute stream waiting for
                              communication */
    int n_nodes;           /* live nodes in the range */
    int n_comm;            /* asynchronous (queue) nodes among them */
    bool calibrated;       /* the model had a calibration */
    bool by_node;          /* the program runs node by node (it has collectives), so the node
                              dispatch cost is region_seconds rather than node_seconds */
} hp_step_prediction;

/*
 * Predicts nodes [first, last) of g under m, simulating the compute stream and one queue per
 * collective group (instructions with the same group and overlapping axes share one, as in the
 * runtime) as described at the top of this header. lv (may be NULL: every node is live) must be g's
 * liveness; the program runs node by node when g has any live asynchronous node. For a pipeline
 * stage, the F, B and W node ranges of its graph give the times its schedule simulator takes.
 * Errors: HP_STATUS_INVALID_ARGUMENT naming a range outside [0, n_nodes] or a liveness of another
 * graph; HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_predict_nodes(const hp_graph *g, const hp_liveness *lv, int first, int last, const hp_machine_model *m,
                           hp_step_prediction *out);

/* Predicted seconds of nodes [first, last) (hp_predict_nodes' total_s), or a negative value on error
 * (the message in hp_error_message()). */
double hp_predict_seconds(const hp_graph *g, const hp_liveness *lv, int first, int last, const hp_machine_model *m);

/* ---------------------------------------------------------------- the cache file */

/*
 * Writes c into the JSON file `path` (cJSON), replacing an entry with the same machine key and
 * keeping the others (a file holds one entry per key: 1 thread x 2 ranks and 2 threads x 1 rank are
 * different entries); creates the parent directories; writes a temporary file and renames it.
 * Errors: HP_STATUS_IO naming the path; HP_STATUS_CORRUPT when an existing file is not a calibration
 * file (it is not overwritten).
 */
hp_status hp_calibration_save(const char *path, const hp_calibration *c);

/*
 * Reads the entry of `key` from `path` into *out (key->threads 0 matches any thread count: the
 * first entry with the other fields equal). Errors, each with a message naming the file and
 * what does not match: HP_STATUS_IO (no file), HP_STATUS_CORRUPT (not JSON or not a calibration file),
 * HP_STATUS_NOT_FOUND (no entry for this key: the message lists the keys present and what differs;
 * or the only entries are of another format version: stale), HP_STATUS_INVALID_ARGUMENT (a field out
 * of range, named). max_age_s > 0 also rejects (HP_STATUS_NOT_FOUND, "stale") an entry older than
 * that many seconds.
 */
hp_status hp_calibration_load(const char *path, const hp_machine_key *key, double max_age_s, hp_calibration *out);

/* The default cache path into buf: $HP_CALIBRATION, else $XDG_CACHE_HOME/hyperparallel/calibration.json,
 * else $HOME/.cache/hyperparallel/calibration.json. HP_STATUS_INVALID_ARGUMENT when none is set or
 * buf (n bytes) is too small. */
hp_status hp_calibration_default_path(char *buf, size_t n);

/* A short report: the key, the GEMM grid's range of rates, each curve's bandwidth, attention rates,
 * each alpha-beta fit. Write errors are ignored. */
void hp_calibration_print(const hp_calibration *c, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* HP_COSTMODEL_H */
