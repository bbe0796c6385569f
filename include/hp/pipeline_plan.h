/*
 * hp/pipeline_plan.h — planning a HyperMPMD pipeline without running it: the cost-model stage split
 * under each stage group's memory budget (`pipeline.split: auto`), the program instances a schedule
 * keeps per stage, and the predicted step time (`hp plan` for a config with `groups:`).
 *
 *     hp_calibration *cal = malloc(sizeof *cal);
 *     hp_machine_model mm;
 *     hp_pipeline_machine_model(NULL, n_ranks, cal, &mm);      // the cache's entry, else the flat model
 *     hp_pipeline_plan_opts o;
 *     HP_CHECK(hp_pipeline_plan_opts_from_config(cfg, &s, &mm, &o));
 *     int *first = malloc(sizeof *first * s.n_stages);
 *     HP_CHECK(hp_pipeline_split(&o, first, NULL));             // blocks per virtual stage
 *     hp_pipeline_prediction pr;
 *     HP_CHECK(hp_pipeline_predict(&o, first, &pr));            // stage times, simulated schedule
 *     printf("%.3f s\n", pr.step_seconds);
 *     hp_pipeline_prediction_free(&pr);
 *     hp_pipeline_plan_opts_free(&o);
 *
 * The memory of a stage (one process of its group) is its parameters, gradient accumulators and
 * inputs (hp_pipeline_stage_plan.persistent_bytes), AdamW's two moments (moment_bytes) and one
 * micro-batch's activations (arena + kernel workspace: activation_bytes) times the program
 * instances the schedule keeps for the stage (hp_pipeline_stage_slots: the micro-batches in flight,
 * hp_schedule_peak_formula for one chunk per rank). With optimizer.shard (ZeRO-1) over a group's
 * replicas the two moments and the update's compute are divided by the ranks they are split over
 * (the gathers after the update not counted). Under partitioned ranks (tensor parallelism, FSDP)
 * with the groups' strategies (hp_pipeline_plan_opts.strategy, filled from a config) a stage's
 * figures are one process's partitioned graph's (hp_pipeline_plan_stage_group, in the prediction
 * and the split alike): its arena, its parameter blocks and accumulators, their moments split as
 * the runtime splits them, and its time with its collectives (TP's activation all-reduces, FSDP's
 * parameter all-gathers and gradient reduce-scatters, the all-gather of the stage's output and
 * input gradient to the replica's rows), each on its queue as the runtime issues them. Without the
 * strategies the stage is planned whole, its compute divided by the partitioned ranks, its memory
 * unsplit (an upper bound), collectives not counted.
 */
#ifndef HP_PIPELINE_PLAN_H
#define HP_PIPELINE_PLAN_H

#include "hp/config.h"
#include "hp/costmodel.h"
#include "hp/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The machine model a pipeline plan uses: the calibration of this machine for `ranks_per_node`
 * ranks (any OpenMP thread count unless OMP_NUM_THREADS is set, as `hp plan` looks it up) read from
 * `path` (NULL: hp_calibration_default_path) into *cal (caller-owned storage) and *mm pointing at
 * it; when there is none, *mm is HP_MACHINE_MODEL_DEFAULT (the flat model) and the function still
 * returns HP_STATUS_OK. Returns true in *calibrated when the calibration was found; `why` (may be
 * NULL, n bytes) receives the reason for the flat model ("" when calibrated).
 */
hp_status hp_pipeline_machine_model(const char *path, int ranks_per_node, hp_calibration *cal, hp_machine_model *mm,
                                    bool *calibrated, char *why, size_t n);

/* What the split and the prediction need, per schedule rank r (a stage group). */
typedef struct hp_pipeline_plan_opts {
    const hp_gpt_config *model;      /* borrowed; context is the sequence length planned */
    const hp_schedule *schedule;     /* borrowed */
    int rows;                        /* rows of one micro-batch (batch / m), before the groups' dp split */
    int seq;                         /* tokens per row */
    const hp_machine_model *mm;      /* borrowed */
    /* [p] each, or NULL: one process per group, no budget, no name */
    const int *dp, *tp;             /* the group's data-parallel replicas and model-parallel ranks */
    const size_t *memory_budget;    /* bytes per process; 0: none */
    const hp_strategy_config *strategy; /* [p] or NULL: each group's strategy (mesh and rules; borrowed); a
                                       group with tp > 1 is planned partitioned, its collectives counted
                                       (hp_pipeline_plan_stage_group) */
    const int *zero;                /* ranks AdamW's states and update are split over beyond the
                                       parameters' layouts (optimizer.shard: the product of the sizes of
                                       its axes no params rule names); NULL or 1: not split. A group planned partitioned
                                       (tp > 1 with its strategy) reads its strategy's optimizer.shard per
                                       parameter instead (hp_pipeline_stage_plan.moment_bytes) */
    const char *const *group_name;  /* for messages ("groups.NAME.memory_budget") */
    const int *budget_line;         /* the budget's line in the config, 0: unknown */
    const char *file;               /* the config file, for messages; may be NULL */
    const hp_optim_config *optim;   /* for the optimizer's graphs (NULL: AdamW defaults, clip 1) */
    int world;                      /* processes in the job (the norm's all-reduce); 0: sum of dp*tp */
    bool offload;                   /* HyperOffload inside the stages, under offload_cfg (as the runtime's
                                       hp_pipeline_opts.offload: each rank's config, split over its slots) */
    hp_offload_plan_config offload_cfg; /* its disk_dir points into the run config */
    bool own;                       /* the arrays were allocated by hp_pipeline_plan_opts_from_config */
    hp_gpt_config model_storage;    /* hp_pipeline_plan_opts_from_config's copy, which model points at */
} hp_pipeline_plan_opts;

/*
 * Fills *o from a run config with `groups:` and its schedule `s`: rows = train.batch / s->m, seq =
 * model.context, each stage group's shape (hp_pipeline_group_shape), budget, name and line. The
 * model is read from cfg (hp_gpt_config_from_model) into storage *o owns. Free with
 * hp_pipeline_plan_opts_free. Errors: HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_pipeline_plan_opts_from_config(const hp_run_config *cfg, const hp_schedule *s, const hp_machine_model *mm,
                                            hp_pipeline_plan_opts *o);
void hp_pipeline_plan_opts_free(hp_pipeline_plan_opts *o);

/*
 * The program instances (micro-batches in flight) the runtime keeps for each virtual stage of `s`:
 * walking each rank's list, the first action of (stage, micro-batch) takes the lowest free slot and
 * the last one (its W or full B, the send of its gradient, or a local hand-over that reads it) frees
 * it, as hp_pipeline_new assigns them. slots receives s->n_stages counts (at least 1). For one
 * chunk per rank this is hp_schedule_peak_formula. Errors: HP_STATUS_INVALID_ARGUMENT for an action
 * outside the stages; HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_pipeline_stage_slots(const hp_schedule *s, int *slots);

/*
 * The cost-model stage split (`pipeline.split: auto`) under memory budgets: cuts the model's blocks
 * into the schedule's virtual stages (contiguous, the embedding on the first, the head on the last)
 * minimising the slowest stage's F + B + W seconds per micro-batch, such that every stage fits its
 * group's memory_budget (the memory model at the top of this header). Each stage's time and memory
 * depend only on its block count and parts (the blocks are alike): they are measured from the stage
 * graphs (hp_pipeline_plan_stage, or hp_pipeline_plan_stage_group for a partitioned group with its
 * strategy; blocks 0..k-1 stand for any k blocks, so per-block parameter rules are assumed alike
 * across blocks) for every block count, once per group shape (its rows, tp, ZeRO and strategy) and
 * parts (with the embedding, the head, or neither): at most 3 (L + 1) stage plans per shape. The
 * activation arena is not additive per block (the embedding's and head's backward transients
 * overlap the blocks' saved activations), so nothing is extrapolated. The search is a min-max
 * partition by dynamic programming over the cut points, O(n L^2). With several
 * chunks per rank the budget is shared evenly among them (each chunk must fit budget / chunks), so
 * the split is feasible but may be conservative. first_layer receives n_stages entries;
 * *max_seconds (may be NULL) the slowest stage's seconds; stage_bytes (may be NULL, n_stages) each
 * stage's modelled bytes per process.
 * Errors: HP_STATUS_INVALID_ARGUMENT when the layers cannot fill the stages (every stage but the
 * first and the last needs a block); HP_STATUS_CONFIG when no split fits the budgets, naming the
 * group (groups.NAME.memory_budget, file:line when known), its budget and the least its stages
 * need; the planner's errors.
 */
hp_status hp_pipeline_split(const hp_pipeline_plan_opts *o, int *first_layer, double *max_seconds, double *stage_bytes);

/*
 * `split: auto` for a run: the machine model (hp_pipeline_machine_model with `calibration`, NULL:
 * the default cache, and the config's rank count as ranks per node), the plan options of the config
 * and hp_pipeline_split into first_layer (s->n_stages entries). *calibrated (may be NULL) says
 * whether a calibration was used. Errors: hp_pipeline_split's.
 */
hp_status hp_pipeline_split_from_config(const hp_run_config *cfg, const hp_schedule *s, const char *calibration,
                                        int *first_layer, bool *calibrated);

/* The predicted step of a pipeline (hp_pipeline_predict). Arrays are owned by the struct. */
typedef struct hp_pipeline_prediction {
    int n_stages, p;
    double *f, *b, *w;          /* [n_stages] seconds per micro-batch of each phase */
    size_t *activation_bytes;   /* [n_stages] one micro-batch in flight */
    size_t *state_bytes;        /* [n_stages] parameters, accumulators, inputs and AdamW moments */
    int *slots;                 /* [n_stages] micro-batches in flight (hp_pipeline_stage_slots) */
    double *rank_bytes;         /* [p] per process of the group: its stages' state + slots x activations */
    int *rank_slots;            /* [p] micro-batches in flight per process, over all its stages */
    double *optimizer_seconds;  /* [p] the norm program, the groups' gradient all-reduce and the update */
    double p2p_seconds;         /* one activation (or its gradient) sent between stages */
    double reduce_seconds;      /* the step's small all-reduces (loss, squared norm) over the world */
    hp_sched_timeline tl;       /* the schedule simulated with f, b, w and p2p_seconds */
    double schedule_seconds;    /* tl.step_time */
    double step_seconds;        /* schedule + the slowest rank's optimizer + reduce_seconds */
    bool calibrated;            /* the machine model had a calibration */
    hp_offload_plan_stats *offload; /* [n_stages] with o->offload: each stage's offload plan for one micro-batch
                                       (hp_pipeline_plan_stage_offload_group; its stall_s is in b); else NULL */
} hp_pipeline_prediction;

/*
 * Predicts one training step for the split first_layer (n_stages entries): each stage's F, B and W
 * from its graph (hp_pipeline_plan_stage with the group's rows share, divided by tp; for a group
 * with tp > 1 and its strategy in o->strategy, hp_pipeline_plan_stage_group: the partitioned
 * graph's times with its collectives, and its memory one process's), the point-to-
 * point time of one micro-batch's activation (hp_xfer_seconds, SEND_RECV), the schedule simulated
 * (hp_schedule_simulate), and after it the optimizer as the runtime runs it: per rank the squared
 * norm of its accumulators, the gradient all-reduce over its group's replicas, the norm's
 * all-reduce, clipping and AdamW (graphs built as hp_pipeline_new builds them, hp_predict_nodes).
 * With o->offload each stage's activations are also planned under its rank's budget
 * (hp_pipeline_plan_stage_offload_group, partitioned as the stage; out->offload) and the predicted stall of one micro-batch is added
 * to its B (the prefetches wait in the backward) and what it moves out of the device taken off its
 * rank's rank_bytes (activation_bytes stays the unoffloaded figure); a budget a stage cannot run under is an error
 * naming the stage, its rank and the planner's node.
 * Errors: the planner's and simulator's; HP_STATUS_OUT_OF_MEMORY. Free with
 * hp_pipeline_prediction_free (also after a failure).
 */
hp_status hp_pipeline_predict(const hp_pipeline_plan_opts *o, const int *first_layer, hp_pipeline_prediction *out);
void hp_pipeline_prediction_free(hp_pipeline_prediction *p);

#ifdef __cplusplus
}
#endif
#endif /* HP_PIPELINE_PLAN_H */
