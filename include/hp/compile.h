/*
 * hp/compile.h — the one compile driver: from a logical graph with its loss, a strategy, an offload
 * budget and a world (communicator, rank) to this rank's program, through a named list of passes.
 * The trainer, `hp plan`, the benchmarks and the tests all compile through it; nothing else strings
 * the passes together.
 *
 *     hp_graph *g = hp_graph_new();
 *     hp_tid loss = my_model(g);                       // any model: GPT, an MLP, ...
 *     hp_compile_opts o = HP_COMPILE_OPTS_INIT;
 *     o.loss = loss;
 *     o.train = true;                                  // append backward, clip, AdamW
 *     o.optim = &cfg.optim;
 *     o.strategy = strategy;                           // or NULL: one device
 *     o.comm = world;                                  // or NULL: a one-rank `self` communicator
 *     hp_compiled *c;
 *     HP_CHECK(hp_compile(g, &o, &c));
 *     hp_program *p = hp_compiled_program(c);          // run it; read hp_compiled_loss(c)
 *     hp_compile_report_print(hp_compiled_report(c), stderr);
 *     hp_compiled_free(c);
 *     hp_graph_free(g);
 *
 * The passes, in order (hp_pass; each one reads and writes the IR only, and is timed):
 *   autodiff  backward + global-norm clipping + AdamW appended to the logical graph
 *             (hp_train_step_build; runs only when opts.train);
 *   shard     leaf layouts from the strategy (hp_strategy_annotate) or the caller's callback, SPMD
 *             partition for this rank with collectives inserted and scheduled (hp/shard.h); without
 *             a strategy the mesh has one device and the per-rank graph equals the logical one;
 *   (mpmd)    HyperMPMD's stage split and micro-batch schedule will go here, between shard and
 *             offload, producing one program per stage; it is not built and has no hp_pass value;
 *   offload   HyperOffload's residency plan applied to the per-rank graph (hp/offload_plan.h;
 *             runs only with an offload config whose device_budget is set);
 *   memplan   liveness, the arena plan and the bound program (hp_program_new), or with
 *             opts.plan_only the same plan without allocating data (hp_program_plan).
 */
#ifndef HP_COMPILE_H
#define HP_COMPILE_H

#include <stdio.h>

#include "hp/comm.h"
#include "hp/config.h"
#include "hp/ir.h"
#include "hp/mesh.h"
#include "hp/nn.h"
#include "hp/offload_plan.h"
#include "hp/runtime.h"
#include "hp/shard.h"
#include "hp/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- the autodiff + optimizer pass */

/* Tensors of the training-step graph. Arrays are owned by the graph's arena. */
typedef struct hp_train_step {
    hp_tid loss;     /* scalar */
    hp_tid lr;       /* input scalar: fed hp_lr_at() each step */
    hp_tid step;     /* input scalar "opt.step": the 1-based optimizer step (AdamW bias correction,
                      * and the dropout masks when the forward graph made it: hp_gpt.step) */
    hp_tid grad_sq;  /* scalar: squared global gradient norm (before clipping) */
    int n_params;
    hp_tid *params, *grads, *m, *v; /* per parameter, in creation order; m, v are OPT_STATE */
} hp_train_step;

/*
 * Appends backward, clipping (when o->grad_clip > 0) and AdamW to a forward graph whose scalar
 * loss is `loss`. A guard (hp_clip_scale_guarded, always present) feeds every AdamW update: a step
 * whose loss or gradient norm is NaN or Inf changes no parameter and no optimizer state, and the
 * caller sees the non-finite loss / grad_sq (the trainer stops or skips: hp_trainer_step). Optimizer states are named "exp_avg.<param>" and "exp_avg_sq.<param>". Weight
 * decay applies to parameters without the no_weight_decay flag. The driver's autodiff pass; call
 * it directly only to test the step graph alone. The step input is the graph's "opt.step" when the
 * forward graph already has one (dropout reads it), else a new input. Errors: autodiff's errors; a
 * parameter with no gradient path, or an "opt.step" that is not an f32 scalar input, is
 * HP_STATUS_INVALID_ARGUMENT naming it.
 */
hp_status hp_train_step_build(hp_graph *g, hp_tid loss, const hp_optim_config *o, hp_train_step *out);

/* ---------------------------------------------------------------- passes */

typedef enum hp_pass {
    HP_PASS_NONE = -1,   /* no pass (dump_after: dump nothing) */
    HP_PASS_AUTODIFF = 0,
    HP_PASS_SHARD,
    HP_PASS_OFFLOAD,
    HP_PASS_MEMPLAN,
    HP_PASS_COUNT
} hp_pass;

/* "autodiff", "shard", "offload", "memplan"; "?" out of range. */
const char *hp_pass_name(hp_pass p);
/* The pass named `name`. HP_STATUS_INVALID_ARGUMENT naming it and listing the known passes. */
hp_status hp_pass_parse(const char *name, hp_pass *out);

/* Supplies leaf layouts when no strategy is given: sets layouts[t] for the leaves of the logical
 * graph `g` (after the autodiff pass) on `mesh`; the array (hp_graph_n_tensors(g) entries) arrives
 * with every ndim -1 (replicated). An error is returned by hp_compile as is. */
typedef hp_status (*hp_compile_annotate_fn)(void *user, const hp_graph *g, const hp_mesh *mesh, hp_layout *layouts);

/* What to compile and how. Start from HP_COMPILE_OPTS_INIT; every pointer is borrowed and must
 * outlive the call (mesh, strategy and comm: the compiled object too). */
typedef struct hp_compile_opts {
    hp_tid loss;                     /* scalar loss of the logical graph (resolved replicated, kept) */
    bool train;                      /* run the autodiff pass (needs optim) */
    const hp_optim_config *optim;    /* clipping and AdamW hyper-parameters */
    /* Strategy: the mesh and the leaf layouts. strategy (its mesh, hp_strategy_annotate) wins;
     * else mesh with annotate (NULL: everything replicated); neither: a one-device mesh. */
    hp_strategy *strategy;
    hp_mesh *mesh;
    hp_compile_annotate_fn annotate;
    void *annotate_user;
    /* Gradient buckets (hp_partition_opts.bucket_size), bytes per rank: < 0 takes the strategy's
     * strategy.bucket_size (HP_BUCKET_SIZE_DEFAULT without a strategy); 0 turns bucketing off. */
    int64_t bucket_size;
    /* true: no weight-stationary search (hp_partition_opts.search): the sharding rules' local
     * choices only (for comparisons). */
    bool no_search;
    /* Attention under a sequence split without a strategy (with one: its context_parallel key):
     * HP_CP_ULYSSES (default) or HP_CP_RING (hp_partition_opts.context_parallel). */
    hp_cp_algo context_parallel;
    /* HyperOffload budgets (NULL or device_budget 0: the offload pass changes nothing). */
    const hp_offload_plan_config *offload;
    /* Extra logical tensors to make available replicated and keep readable after a run
     * (gradients, parameters for a check); hp_compiled_kept gives their per-rank ids. */
    const hp_tid *keep;
    int n_keep;
    hp_program_opts program;         /* keep, n_keep and ext are set by the driver */
    /* The world: the communicator the mesh is attached to (attached by the driver when it is not
     * yet; NULL: a one-rank `self` communicator owned by the compiled object, only for a mesh the
     * driver made: a caller's unattached mesh without comm is an error). */
    hp_comm *comm;
    /* Planning without a communicator (`hp plan`): the mesh index to compile for when the mesh is
     * not attached and plan_only is set; the mesh size for hp_compile_run's strategy (0: the
     * strategy's own device count). */
    int plan_index;
    int plan_world_size;
    bool plan_only;                  /* memplan plans memory (hp_program_plan) instead of building */
    hp_pass stop_after;              /* the last pass to run */
    hp_pass dump_after;              /* write the IR (hp_graph_dump) to `dump` after this pass */
    FILE *dump;
} hp_compile_opts;

#define HP_COMPILE_OPTS_INIT                                                                       \
    ((hp_compile_opts){.loss = HP_TID_NONE, .program = HP_PROGRAM_OPTS_DEFAULT, .bucket_size = -1, \
                       .stop_after = HP_PASS_MEMPLAN, .dump_after = HP_PASS_NONE})

/* Per-pass figures of one compile. */
typedef struct hp_compile_report {
    bool ran[HP_PASS_COUNT];         /* false: skipped (autodiff without train, offload without a
                                        budget) or after stop_after */
    double seconds[HP_PASS_COUNT];   /* wall time of each pass that ran; seconds */
    hp_pass last;                    /* the last pass reached (run or skipped) */
    int strategy_warnings;           /* strategy rules that matched nothing (hp_strategy_annotate) */
} hp_compile_report;

/* One line per pass: "  autodiff   0.012 s" or "  offload    skipped"; then the total. */
void hp_compile_report_print(const hp_compile_report *r, FILE *f);

/* ---------------------------------------------------------------- the driver */

typedef struct hp_compiled hp_compiled;

/*
 * Runs the passes over `logical` (borrowed: it must outlive *out; the autodiff pass appends to it)
 * up to opts->stop_after. Collective over the mesh when the shard pass attaches a mesh or a
 * program runs collectives: every rank calls it with the same graph and options.
 * Errors: HP_STATUS_INVALID_ARGUMENT for a missing loss, train without optim, a plan_index outside
 * the mesh, a rank outside the mesh, a caller's unattached mesh (opts->mesh or opts->strategy's)
 * without opts->comm; then each pass's own errors (autodiff, strategy annotation,
 * partition, offload plan, program). On failure *out is NULL and everything made is freed.
 */
hp_status hp_compile(hp_graph *logical, const hp_compile_opts *opts, hp_compiled **out);

/*
 * The GPT of a run config (model, train.batch, optim; strategy and offload through
 * hp_compile_config_objects), built and owned by the compiled object. opts->loss, optim, strategy,
 * mesh and offload are ignored (taken from cfg); the world size is hp_comm_size(opts->comm), or
 * opts->plan_world_size with plan_only and no comm. cfg must outlive *out (offload strings).
 * Errors: the model's, the strategy's and the offload section's config errors (and
 * hp_compile_config_objects' refusal of groups), then hp_compile's.
 */
hp_status hp_compile_run(const hp_run_config *cfg, const hp_compile_opts *opts, hp_compiled **out);

/*
 * The one place a run config's strategy and offload sections become objects: *strategy (when
 * strategy is not NULL; the caller owns it, hp_strategy_free) for `world_size` ranks (0: the
 * mesh's own count; see hp_strategy_new), and *offload (defaults and no budget when the section
 * is absent; its strings point into cfg's). The sections were checked when the config loaded, so
 * the only errors are hp_strategy_new's (the device count against world_size, naming file:line),
 * and HP_STATUS_UNSUPPORTED (naming file:line) for a config with HyperMPMD groups: those are
 * several programs, which hp_trainer_new builds and runs (src/mpmd), not one SPMD program.
 */
hp_status hp_compile_config_objects(const hp_run_config *cfg, int world_size, hp_strategy **strategy,
                                    hp_offload_plan_config *offload);

/* Frees the program, offload state, partition and whatever the driver made (mesh, communicator,
 * strategy and graph of hp_compile_run); never a borrowed object. NULL is allowed. */
void hp_compiled_free(hp_compiled *c);

/* The per-pass times. */
const hp_compile_report *hp_compiled_report(const hp_compiled *c);
/* The logical graph (after the autodiff pass when it ran). */
hp_graph *hp_compiled_logical(const hp_compiled *c);
/* The step's tensors (logical ids) when the autodiff pass ran, else NULL. */
const hp_train_step *hp_compiled_step(const hp_compiled *c);
/* The GPT's tensors (logical ids) for hp_compile_run, else NULL. */
const hp_gpt *hp_compiled_gpt(const hp_compiled *c);
/* The mesh and this rank's index in it (after the shard pass; else NULL and -1). */
hp_mesh *hp_compiled_mesh(const hp_compiled *c);
int hp_compiled_index(const hp_compiled *c);
/* The strategy of hp_compile_run (owned), or opts->strategy; NULL without one. */
hp_strategy *hp_compiled_strategy(const hp_compiled *c);
/* After the shard pass: the partition and the per-rank graph (later passes rewrite it); else NULL. */
hp_partition *hp_compiled_partition(const hp_compiled *c);
hp_graph *hp_compiled_graph(const hp_compiled *c);
/* HyperOffload's state when the offload pass planned something, else NULL. */
hp_offload_state *hp_compiled_offload(const hp_compiled *c);
/* After memplan: the program (NULL with plan_only) and its memory figures. */
hp_program *hp_compiled_program(const hp_compiled *c);
const hp_program_stats *hp_compiled_memory(const hp_compiled *c);
/* Per-rank ids (after the shard pass; HP_TID_NONE before): the replicated loss, the replicated
 * squared gradient norm (training only) and keep[i] replicated. */
hp_tid hp_compiled_loss(const hp_compiled *c);
hp_tid hp_compiled_grad_sq(const hp_compiled *c);
hp_tid hp_compiled_kept(const hp_compiled *c, int i);
struct hp_step_prediction; /* hp/costmodel.h */
/*
 * The predicted time of this rank's step (hp_predict_nodes, hp/costmodel.h) over the per-rank graph
 * after the last pass that ran, with the liveness the program has (or would have: the loss, the
 * gradient norm and the kept tensors kept). `hp plan` and bench_costmodel call it. Errors:
 * HP_STATUS_INVALID_ARGUMENT before the shard pass; liveness and prediction errors.
 */
hp_status hp_compiled_predict(const hp_compiled *c, const hp_machine_model *m, struct hp_step_prediction *out);
/* Writes the IR at the stage reached ("== IR after PASS" then hp_graph_dump of the logical graph
 * before the shard pass, the per-rank graph after it). */
void hp_compiled_dump(const hp_compiled *c, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* HP_COMPILE_H */
