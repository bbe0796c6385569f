/*
 * hp/offload_plan.h — HyperOffload's automatic mode: a residency planner over the whole training
 * step, the prefetch/offload operators it inserts, and the run-config section that drives it.
 *
 * The fast tier (HBM on GPUs; on the CPU backend, the DRAM the kernels compute from) is treated as a
 * cache over host DRAM and an SSD file (the HyperParallel paper, section 3.2; ZeRO-Offload, Ren et
 * al., ATC 2021; ZeRO-Infinity, Rajbhandari et al., SC 2021). From def-use chains (hp/liveness.h)
 * and the compute time between uses (the cost model under a machine model), the planner decides for
 * every tensor of an enabled class (parameters, gradients, optimizer states, activations) whether
 * it stays resident between two uses or leaves the fast tier, so that the bytes resident in the fast
 * tier never exceed its budget at any program point. A tensor that leaves is copied back by a
 * PREFETCH issued early enough (the prefetch distance) to be complete before its next use whenever
 * the bandwidth allows, and waited for (OFFLOAD_WAIT) right before it. Parameters and optimizer
 * states whose home is a slower tier take fast memory only while resident; AdamW then updates them
 * where they are, streamed in chunks (ADAMW_STREAM), overlapping the copies with the update; or,
 * for disk homes where the budget leaves room, on a whole copy read early, during the backward pass,
 * and written back after the update (read_ahead below).
 *
 * Greedy eviction in the spirit of Belady's rule (evict what is needed furthest away; Belady 1966):
 * while the resident bytes at the fullest program point exceed the budget, take the move (one gap
 * of one tensor leaves the fast tier) that frees that point: hidden moves (no predicted stall)
 * before exposed ones (least stall first); among hidden ones, the fewest transfer seconds per byte
 * freed (the copy stream is shared), then the most bytes. Then the fast-tier arena is packed
 * (hp_memplan_assign); fragmentation beyond the budget lowers the target and the greedy continues.
 *
 *     hp_offload_state *ofl = NULL;
 *     hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
 *     HP_CHECK(hp_offload_apply(&cfg.offload, g, &o, &ofl));  // plans, rewrites g, sets o.ext
 *     HP_CHECK(hp_program_new(g, &o, &p));
 *     ... hp_program_run(p) ...; hp_program_report_memory(p, stderr);
 *     hp_program_free(p);
 *     hp_offload_state_free(ofl);
 *
 * Deferred updates (async_update below): an update with a disk-tier operand needs the global norm,
 * so it cannot start before the end of the backward pass; instead of finishing it there, it runs on
 * the disk stream and finishes during the next step's forward pass, which waits for it right before
 * the first node that touches what it writes (see hp_program_sync for callers outside the program).
 * Transfers run on two copy streams, one per slow tier (host, disk), as a GPU has several copy
 * engines.
 *
 * Values never change: the inserted operators copy bytes, and ADAMW_STREAM computes AdamW's exact
 * per-element formula, so losses and parameters are bitwise those of the run without offload.
 */
#ifndef HP_OFFLOAD_PLAN_H
#define HP_OFFLOAD_PLAN_H

#include "hp/copy_engine.h"
#include "hp/disk.h"
#include "hp/ir.h"
#include "hp/liveness.h"
#include "hp/runtime.h"
#include "hp/config.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a tensor is to the policy. */
typedef enum hp_offload_class {
    HP_OFFLOAD_CLASS_PARAMS = 0,  /* PARAM tensors */
    HP_OFFLOAD_CLASS_GRADS,       /* parameter gradients (grad_of a parameter) */
    HP_OFFLOAD_CLASS_OPTIMIZER,   /* OPT_STATE tensors (AdamW m, v) */
    HP_OFFLOAD_CLASS_ACTIVATIONS, /* every other activation (those saved for backward above all) */
    HP_OFFLOAD_CLASS_COUNT
} hp_offload_class;

const char *hp_offload_class_name(hp_offload_class c);

/*
 * The `offload:` section of a run config:
 *
 *     offload:
 *       device_budget: 64MiB       # fast tier; sizes: B/KiB/MiB/GiB (or KB/MB/GB) or plain bytes
 *       host_budget: 8GiB          # 0 or absent: unbounded
 *       disk_dir: /tmp/hp-offload  # optional; enables the disk tier
 *       disk_budget: 32GiB
 *       policy: {params: true, grads: true, optimizer: disk, activations: false}
 *       bandwidth: {host: measure, disk: 2.0e9}   # bytes/s, or measure (hp_tier_probe)
 *       machine: {flops: 1.0e11, bytes: 1.0e10}   # the cost model's FLOP/s and bytes/s
 *       chunk: 1MiB                # AdamW streaming chunk over slow-tier states
 *       read_ahead: true           # early reads of AdamW operands (see below); default true
 *       async_update: true         # AdamW over disk operands finishes in the next step; default true
 *
 * Sizes are plain bytes or a number with a unit (hp_config_parse_size in hp/config.h). Every key
 * is read and checked by hp_run_config_load into hp_offload_run_config.
 * A policy value true sends the class to the host tier (spilling to disk when the host budget is
 * full and a disk tier exists); host or disk names the tier; false keeps it in the fast tier.
 */
typedef struct hp_offload_plan_config {
    size_t device_budget;                  /* bytes; 0: unlimited (the planner changes nothing) */
    size_t host_budget;                    /* bytes; 0: unbounded */
    const char *disk_dir;                  /* NULL: no disk tier */
    size_t disk_budget;                    /* bytes; 0: see hp_disk_config */
    hp_tier policy[HP_OFFLOAD_CLASS_COUNT]; /* HP_TIER_DEVICE: stays; HOST or DISK: where it goes */
    double bandwidth[HP_TIER_COUNT];       /* bytes/s between the fast tier and HOST / DISK; 0: measure */
    hp_machine_model machine;
    size_t chunk_bytes;                    /* ADAMW_STREAM chunk, a multiple of HP_DISK_ALIGN */
    /* Early reads: once the budget is met, every disk-tier operand of an AdamW update (param, grad,
     * m, v) is read whole into the fast tier as early as the budget left over allows (during the
     * backward pass), the update runs on that copy and writes it back, instead of streaming it in
     * chunks at the end of the step where nothing hides the reads. Operands with no room stream. */
    bool read_ahead;
    /* Deferred updates: an AdamW update with a disk-tier operand runs on a second copy stream after
     * the norm is known and finishes during the next step's forward pass; the next step waits for it
     * right before the first node that touches its parameter or reuses its operands' fast-tier bytes.
     * Until then, hp_program_data / get_output / set_input on a tensor it writes wait for it
     * (hp_program_ext.sync). */
    bool async_update;
} hp_offload_plan_config;

/* Defaults: no budget, every class enabled to the host tier, bandwidths 10 GB/s host and 1 GB/s disk,
 * HP_MACHINE_MODEL_DEFAULT, 1 MiB chunks, read_ahead and async_update on. */
void hp_offload_plan_config_init(hp_offload_plan_config *c);

/*
 * The planner's config from the run config's typed `offload:` section (hp_run_config_load read and
 * checked it: unknown keys, sizes, policy values, rates, the chunk alignment, disk without disk_dir).
 * NULL or not present: the defaults. disk_dir points into *rc, which must outlive `out`. Never fails.
 */
void hp_offload_plan_config_from(const hp_offload_run_config *rc, hp_offload_plan_config *out);

typedef struct hp_offload_plan hp_offload_plan;

/*
 * Plans residency for graph `g` (unchanged by this call): keep[0..n_keep) are the tensors the caller
 * reads after the run (never offloaded). Bandwidths of 0 in cfg are measured (hp_tier_probe).
 * Errors: HP_STATUS_OUT_OF_MEMORY when the budget cannot be met even with every enabled tensor off
 * the fast tier between uses: the message names the node (index, operator, scope) whose working set
 * does not fit and the bytes it needs; or when the host budget is exceeded with no disk tier.
 */
hp_status hp_offload_plan_new(const hp_graph *g, const hp_tid *keep, int n_keep, const hp_offload_plan_config *cfg,
                              hp_offload_plan **out);
void hp_offload_plan_free(hp_offload_plan *p);

/* Figures of a plan. Bytes per step; seconds are the cost model's predictions. */
typedef struct hp_offload_plan_stats {
    size_t budget;               /* the device budget */
    size_t peak_before;          /* fast-tier bytes without offload (persistent + arena + workspace) */
    size_t peak_after;           /* with the plan (the same packing the program will do) */
    size_t peak_live_after;      /* the most bytes resident at one program point */
    size_t home_bytes[HP_TIER_COUNT]; /* slow-tier homes: persistent tensors and activation copies */
    size_t bytes_in[HP_TIER_COUNT];   /* per step: prefetched from the tier (streamed AdamW included) */
    size_t bytes_out[HP_TIER_COUNT];  /* per step: offloaded to the tier (streamed AdamW write-back included) */
    int n_offloaded[HP_OFFLOAD_CLASS_COUNT]; /* tensors whose home leaves the fast tier, per class */
    int n_prefetch, n_offload, n_wait, n_streamed; /* operators inserted / AdamW nodes over slow-tier operands */
    int n_early;                 /* AdamW operands read early (whole, before the update; in n_prefetch) */
    int n_deferred;              /* AdamW updates deferred into the next step (async_update) */
    double compute_s;            /* predicted compute time of one step */
    double stall_s;              /* predicted time the compute stream waits for copies */
} hp_offload_plan_stats;

void hp_offload_plan_get_stats(const hp_offload_plan *p, hp_offload_plan_stats *s);

/*
 * Resident fast-tier bytes at node i of the planned graph's original program order (persistent
 * device tensors, resident activations and copies, workspace), for tests; 0 out of range. The
 * operands a deferred update holds are counted to the end of the step, not in the next step before
 * its deadline; there the packed arena (stats.peak_after) is what bounds them: the deadline is the
 * first node whose blocks share their bytes.
 */
size_t hp_offload_plan_resident_at(const hp_offload_plan *p, int node);

/*
 * Writes the residency plan: budget and peaks, bytes per step per tier, predicted stall, then one
 * line per offloaded tensor (class, bytes, home tier) with each move ("prefetch before node 120
 * (matmul in 'blocks.1.mlp') for use at 131, 0.40 ms ahead, hidden"). `g` is the graph the plan was
 * made from (node references are to its original program order). The caller owns `f`.
 */
void hp_offload_plan_print(const hp_offload_plan *p, const hp_graph *g, FILE *f);

/* ---------------------------------------------------------------- apply: rewrite + runtime state */

/* The runtime side of an applied plan: slow-tier homes, copy stream, disk store, events. Opaque. */
typedef struct hp_offload_state hp_offload_state;

/*
 * Plans `g` under the typed `offload:` section `offload_cfg` (NULL, not present or no device_budget: a no-op with
 * *state = NULL), then rewrites `g` in place: inserts PREFETCH / OFFLOAD / OFFLOAD_WAIT nodes,
 * rewires uses to the prefetched copies, turns AdamW nodes over slow-tier tensors into ADAMW_STREAM,
 * and sets opts->ext (slow-tier storage, the device budget) and opts->view_reshape = false (the plan
 * counts every RESHAPE output). Tensor ids of `g` stay valid; node indices change. opts->keep must
 * be set before the call. Parameters and optimizer states on the disk tier have no host address:
 * write and read them with hp_program_set_input / hp_program_get_output. The state must outlive the
 * program and the graph must not be used with another program after the state is freed.
 * Errors: hp_offload_plan_new's, HP_STATUS_IO (disk store).
 */
hp_status hp_offload_apply(const hp_offload_run_config *offload_cfg, hp_graph *g, hp_program_opts *opts,
                           hp_offload_state **state);
/* The same from a parsed config (tests, benchmarks). */
hp_status hp_offload_apply_config(const hp_offload_plan_config *cfg, hp_graph *g, hp_program_opts *opts,
                                  hp_offload_state **state);
/* Waits for the copy stream, frees homes, events, the disk store (its file is removed). NULL allowed. */
void hp_offload_state_free(hp_offload_state *s);

const hp_offload_plan *hp_offload_state_plan(const hp_offload_state *s);
hp_copy_engine *hp_offload_state_copy_engine(hp_offload_state *s);
/* Copy statistics of both copy streams summed (the main one and the async one that runs deferred
 * updates, hp_offload_plan_config.async_update); all zero for NULL. */
void hp_offload_state_copy_stats(hp_offload_state *s, hp_copy_stats *out);
void hp_offload_state_reset_copy_stats(hp_offload_state *s);
/* The disk store, or NULL without a disk tier. */
hp_disk *hp_offload_state_disk(hp_offload_state *s);

#ifdef __cplusplus
}
#endif
#endif /* HP_OFFLOAD_PLAN_H */
