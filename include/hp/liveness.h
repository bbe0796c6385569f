/*
 * hp/liveness.h — the analysis layer (src/analysis/): def-use chains and liveness over a graph, an
 * interval memory planner and the compute timeline.
 *
 * Both the runtime's static memory plan and the HyperOffload residency planner start from the same
 * facts: which node defines each tensor, which nodes use it (in program order), and hence the
 * interval of program points over which its storage must exist. hp_liveness_compute derives them
 * once (after dead-code elimination); hp_memplan_assign packs lifetime intervals into one arena.
 *
 *     hp_liveness lv;
 *     HP_CHECK(hp_liveness_compute(g, keep, n_keep, &lv));
 *     for (hp_tid t = 0; t < lv.n_tensors; t++)
 *         if (lv.t[t].live && !lv.t[t].persistent)
 *             ... storage needed from lv.t[t].start to lv.t[t].end (node indices, inclusive)
 *     hp_liveness_free(&lv);
 */
#ifndef HP_LIVENESS_H
#define HP_LIVENESS_H

#include "hp/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Def-use facts of one tensor. Node indices are positions in the graph's program order. */
typedef struct hp_tensor_liveness {
    int32_t def;        /* the node that writes it; -1 for leaves (params, inputs, constants) */
    int32_t n_uses;     /* live nodes that read it or write it in place (HP_NODE_FLAG_INPLACE) */
    const int32_t *uses; /* their indices, strictly increasing (a node using it twice counts once) */
    int32_t first_use;  /* uses[0], or -1 when unused */
    int32_t last_use;   /* uses[n_uses - 1], or -1 when unused */
    int32_t start, end; /* storage interval [start, end], inclusive: def (or first use for a leaf)
                           to max(def, last_use), or to the last node for a kept tensor (the
                           caller reads it after the run); both -1 when the tensor is not live */
    bool live;          /* a live node defines or uses it, or it is persistent and kept */
    bool persistent;    /* not planned: kind != ACTIVATION, a leaf, or listed in keep */
    bool kept;          /* listed in keep */
} hp_tensor_liveness;

typedef struct hp_liveness {
    int n_tensors, n_nodes;
    int n_live_nodes;
    bool *node_live;       /* per node: survives dead-code elimination */
    hp_tensor_liveness *t; /* per tensor id */
    int32_t *use_buf;      /* backing store of every uses[] list */
} hp_liveness;

/*
 * Computes def-use chains and liveness of `g` after dead-code elimination: a node is live when it
 * writes in place (HP_NODE_FLAG_INPLACE), is a collective (HP_NODE_FLAG_ASYNC: every rank must
 * take part), has no outputs, or some live node or `keep` uses one of its outputs. In-place writes count as uses of the written inputs, so a tensor stays live until
 * its last in-place update. keep[0..n_keep) may be NULL when n_keep is 0.
 * Errors: the graph's sticky error; HP_STATUS_INVALID_ARGUMENT naming a keep id out of range;
 * HP_STATUS_OUT_OF_MEMORY. On success free `out` with hp_liveness_free.
 */
hp_status hp_liveness_compute(const hp_graph *g, const hp_tid *keep, int n_keep, hp_liveness *out);
/* Frees the tables; zeroes *lv. NULL or an already freed value is allowed. */
void hp_liveness_free(hp_liveness *lv);

/* One block to place in an arena: live over node indices [start, end] (inclusive). */
typedef struct hp_mem_interval {
    size_t bytes;  /* requested size; 0 is allowed (placed at offset 0, overlapping nothing) */
    int32_t start, end;
    size_t offset; /* out: byte offset in the arena, a multiple of the alignment */
} hp_mem_interval;

/*
 * Static arena planning, greedy by size with best fit (the "greedy by size" strategy of
 * TensorFlow Lite's ArenaPlanner / SimpleMemoryArena, Pisarchyk & Lee, "Efficient Memory Management
 * for Deep Neural Net Inference", 2020; ggml's gallocr does the same online, with a free list):
 * blocks are placed in order of decreasing size (ties: earlier start, then lower index); each goes
 * into the smallest gap between already placed blocks whose intervals overlap its own, or above
 * them all. Blocks whose intervals intersect never share bytes. `align` is a power of two; sizes
 * are rounded up to it. Writes every offset and the arena size in *arena_bytes.
 * O(n^2) time. Errors: HP_STATUS_INVALID_ARGUMENT (bad align or interval), HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_memplan_assign(hp_mem_interval *blocks, int n, size_t align, size_t *arena_bytes);


/* ---------------------------------------------------------------- compute time between uses */

struct hp_calibration; /* hp/costmodel.h */

/*
 * A machine model for the cost rules (hp_node_cost). Flat (cal NULL): a node takes
 * max(flops / flops_per_s, (bytes read + written) / bytes_per_s) seconds (the roofline model,
 * Williams et al., CACM 2009). The default, 100 GFLOP/s and 10 GB/s, is a modest CPU; HyperOffload
 * uses the model to decide how early a prefetch must start so that it finishes before the tensor's
 * next use. Calibrated (cal set): the rates measured on this machine per kernel class and shape, and
 * per collective and group size (hp/costmodel.h); the flat rates remain the fallback for whatever
 * the calibration did not measure.
 */
typedef struct hp_machine_model {
    double flops_per_s; /* FLOP/s, > 0 */
    double bytes_per_s; /* bytes/s, > 0; also the network rate of collectives without a calibration */
    const struct hp_calibration *cal; /* borrowed; NULL: the flat model */
} hp_machine_model;
#define HP_MACHINE_MODEL_DEFAULT ((hp_machine_model){.flops_per_s = 100e9, .bytes_per_s = 10e9, .cal = NULL})

/*
 * Predicted seconds of node i on the compute stream under model m (0 for a flat model with a
 * non-positive rate). A collective or point-to-point node (HP_NODE_FLAG_ASYNC) costs its bytes moved
 * at bytes_per_s here under the flat model and its alpha-beta time under a calibrated one
 * (hp_node_comm_seconds in hp/costmodel.h separates the two streams).
 */
double hp_node_seconds(const hp_graph *g, int i, const hp_machine_model *m);

/*
 * Compute time along program order: at[i] is the predicted seconds of the live nodes before node i,
 * at[n_nodes] the whole program's. The compute time of the nodes strictly between uses a < b of a
 * tensor is at[b] - at[a + 1] (hp_timeline_between); HyperOffload's prefetch distance comes from it.
 */
typedef struct hp_timeline {
    int n_nodes;
    double *at; /* n_nodes + 1 entries, seconds */
} hp_timeline;

/* Errors: HP_STATUS_INVALID_ARGUMENT (lv not of g), HP_STATUS_OUT_OF_MEMORY. Free with hp_timeline_free. */
hp_status hp_timeline_compute(const hp_graph *g, const hp_liveness *lv, const hp_machine_model *m, hp_timeline *out);
void hp_timeline_free(hp_timeline *tl);

/* Seconds of the live nodes strictly between nodes a and b (0 when b <= a + 1). a may be -1. */
static inline double hp_timeline_between(const hp_timeline *tl, int a, int b) {
    if (b <= a + 1) return 0.0;
    return tl->at[b] - tl->at[a + 1];
}

/*
 * How early a transfer of `seconds` must start to finish before node `use` reads its result: the
 * latest node p in [lo, use] with at[use] - at[p] >= seconds (the compute time of nodes p .. use-1
 * hides it), or lo when even lo is too late. Binary search over the prefix sums, O(log(use - lo)).
 * HyperOffload issues a prefetch at p. Requires 0 <= lo <= use <= n_nodes; no errors.
 */
int32_t hp_timeline_start_before(const hp_timeline *tl, int32_t lo, int32_t use, double seconds);

/*
 * How late a transfer of `seconds` issued after node `def` may be waited for without exposing it:
 * the earliest node w in [def, cap] with at[w + 1] - at[def + 1] >= seconds (the compute time of
 * nodes def+1 .. w hides it); cap when none is late enough, def when cap <= def. Binary search,
 * O(log(cap - def)). HyperOffload waits for an offload at w. Requires -1 <= def and
 * cap < n_nodes; no errors.
 */
int32_t hp_timeline_end_after(const hp_timeline *tl, int32_t def, int32_t cap, double seconds);

/*
 * Gap k (0 <= k < n_uses - 1) of tensor t: the compute seconds of the nodes strictly between its
 * uses uses[k] and uses[k + 1]; 0 for k out of range.
 */
double hp_liveness_gap_seconds(const hp_liveness *lv, const hp_timeline *tl, hp_tid t, int k);

#ifdef __cplusplus
}
#endif
#endif /* HP_LIVENESS_H */
