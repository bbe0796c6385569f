/*
 * hp/pipeline.h — HyperMPMD pipeline parallelism: one rank's stages of a GPT, run micro-batch by
 * micro-batch in the order of a schedule (hp/schedule.h), with gradient accumulation, the global
 * gradient-norm clip across every stage and one AdamW step per training step.
 *
 *     hp_schedule s;
 *     HP_CHECK(hp_schedule_build(HP_SCHED_KIND_1F1B, 2, 4, 0, &s));   // 2 pipeline ranks, m = 4
 *     hp_pipeline_opts o = HP_PIPELINE_OPTS_INIT;
 *     o.model = &gpt_cfg; o.batch = 8; o.seq = 64; o.schedule = &s; o.optim = &optim; o.comm = world;
 *     hp_pipeline *pp;
 *     HP_CHECK(hp_pipeline_new(&o, &pp));                             // this rank's stages
 *     HP_CHECK(hp_pipeline_init_params(pp, seed));                    // GPT-2 init, as one device
 *     float loss;
 *     HP_CHECK(hp_pipeline_step(pp, tokens, targets, lr, &loss));     // the whole (8, 64) batch
 *
 * How a stage is built. Virtual stage k holds blocks [first_layer, last_layer) (the embeddings on
 * stage 0, the final LayerNorm, head and loss on the last; hp_gpt_build_stage) for one micro-batch
 * of batch/m rows. Its backward is the autodiff of a surrogate scalar: on the last stage the loss
 * divided by m (the step's loss is the mean of the micro-batches' means), elsewhere
 * sum(y * dy) with dy the output gradient received from the next stage (its gradient with respect
 * to y is exactly dy). The nodes are then ordered by phase: F (forward), B (the backward nodes the
 * input gradient depends on: what the previous stage waits for; on the first stage, which has no
 * input gradient, the gradient of the embeddings' output: its chain of activation gradients) and
 * W (the other backward nodes,
 * the weight gradients, and their accumulation into "grad_acc.<param>"), Zero Bubble's split (Qi et
 * al., ICLR 2024): W depends on B, never the other way, so the order is valid and hp_program_run_nodes
 * runs each phase when the schedule says. A full backward (B with HP_SCHED_FLAG_FULL_BACKWARD) runs
 * B and W together.
 *
 * Micro-batches in flight. A stage program's arena holds one micro-batch's activations, so each
 * chunk has as many program instances ("slots") as the schedule keeps micro-batches in flight on
 * it (F done, W not yet): GPipe m, 1F1B p - r (hp_schedule_peak_formula). With several chunks per
 * rank each chunk keeps its own peak's worth (a program's arena is its stage's), which can be up to
 * p - 1 more than the rank's peak over all chunks (interleaved 1F1B; tests/mpi/test_pipeline.c). The instances bind their parameters and gradient
 * accumulators by name to one state store per rank (hp/store.h), so weights are held once and the
 * accumulators are shared; chunks of one rank that hold the same parameter (the tied embedding and
 * head of a V schedule's rank 0) share it too.
 *
 * Transfers. Activations and input gradients move with non-blocking point-to-point calls
 * (hp_comm_isend / hp_comm_irecv) tagged by (kind, stage, micro-batch), so their order across
 * ranks never matters; a receive is posted as soon as its slot is free, ahead of its place in the
 * list, and completed only when a compute action reads it, so transfers overlap compute. Stages of
 * one rank hand over by copy. There is no barrier in the step.
 *
 * Optimizer. After the last action: a tied head on another rank than the embedding sums the two
 * gradient copies (one exchange between those two ranks), each rank computes the squared norm of
 * the accumulators it owns (a tied copy counted once), one all-reduce gives the global norm, and
 * each rank runs clipping and AdamW over its parameters, then zeroes the accumulators.
 *
 * Stage groups. Each schedule rank may be a group of processes (hp_pipeline_opts.group_size), the
 * data-parallel replicas of its stages: replica j of a group of d takes rows [j R/d, (j+1) R/d) of
 * every micro-batch of R rows (the first R % d one more), an activation moves between two groups
 * as the blocks of rows each pair of ranks shares (so groups of unequal sizes work, e.g. 3 stages
 * on 1, 2 and 1 ranks), each rank's loss is scaled by its share of the rows, and the gradients are
 * summed over the group (one all-reduce per tensor) before the update.
 *
 * Tensor parallelism inside a stage (hp_pipeline_opts.group_strategy). A group's mesh may have
 * model-parallel axes besides the data-parallel ones: process (j, i) of a group is data-parallel
 * replica j and model-parallel rank i. Its stage graph (forward, surrogate backward, accumulation)
 * is partitioned over the mesh with the group's parameter rules, the accumulators laid out as
 * their parameters, the stage's input, output, input gradient and loss replicated over the
 * model-parallel axes (the partitioner's resolved copies), and the phases ordered again over the
 * per-rank graph. Each process holds a block of its replica's rows of the stage's output and
 * input gradient (the whole rows unless the group hands by blocks, FSDP below); an activation
 * goes from each sending process to the next group's processes whose blocks overlap its own, the
 * overlap only, and of the sending processes holding the same rows (copies) the receiver of
 * model-parallel index i' takes them from the (i' mod their number)-th: for whole rows, rank i' mod
 * t of the sending group (t its model-parallel size). So groups of different shapes hand over. The gradient norm counts a
 * replicated parameter on model-parallel rank 0 only and a split one's blocks on every rank; the
 * loss is counted by model-parallel rank 0. The store is over the group's mesh (entries declared
 * with their logical shapes and layouts), so hp_store_view gives a full copy of a split entry.
 *
 * Dropout (model.dropout > 0): each DROPOUT node of a stage takes its rows' first index in the
 * global batch as the run-time input "stage.row0" (hp_dropout_set_row_input) and the step as
 * "opt.step", both set by each F action, so every micro-batch drops the elements the single-device
 * batch drops at those rows.
 *
 * ZeRO-1 inside a stage: with optimizer.shard in a group's strategy, the update graph (clip, AdamW,
 * zeroing) is built over the parameters' logical shapes and partitioned over the group's mesh, so
 * each replica updates its block of every parameter and the partitioner gathers the new values.
 *
 * FSDP inside a stage: axes that split the stage inputs' rows (inputs rules) and the parameters
 * (params rules) make the partitioner gather each parameter before its use and reduce-scatter its
 * gradient into the accumulator's block every micro-batch. Such a stage's output and input
 * gradient are resolved to each rank's block of rows (the layout its input gets;
 * hp_partition_opts.resolve_layouts), so no all-gather of them is inserted, and each rank sends
 * its block to the next group's ranks holding those rows and receives its block straight into its
 * program. With sequence parallelism in the group as well (positions split too) they are resolved
 * to the replica's whole rows (an all-gather) and each rank copies its block of what it receives
 * into its program (pp_slot's receive buffers).
 *
 * Offload inside a stage (hp_pipeline_opts.offload): every slot has its own graph, rewritten by
 * HyperOffload's planner under the slot's share of the budget after the phase order was fixed; the
 * nodes carry their phase (HP_NODE_PHASE), so the F, B and W ranges of the rewritten graph are found
 * again (an inserted copy runs in the phase of the node before it). With the disk tier each slot
 * has its own store file, and the disk transfers a phase leaves in flight keep going into the
 * slot's next phase (hp_program_ext.after_range).
 */
#ifndef HP_PIPELINE_H
#define HP_PIPELINE_H

#include "hp/comm.h"
#include "hp/config.h"
#include "hp/liveness.h"
#include "hp/nn.h"
#include "hp/offload_plan.h"
#include "hp/schedule.h"
#include "hp/shard.h"
#include "hp/store.h"
#include "hp/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_pipeline hp_pipeline;

typedef struct hp_pipeline_opts {
    const hp_gpt_config *model;     /* the whole model (borrowed for the call) */
    int batch, seq;                 /* the global batch: (batch, seq) tokens per step */
    const hp_schedule *schedule;    /* p ranks, m micro-batches, n_stages (borrowed; must outlive the pipeline) */
    /* Layer ranges per virtual stage: first_layer[k] for k < n_stages (the last stage ends at
     * model->layers); NULL: layers split as evenly as possible, the earlier stages one more. */
    const int *first_layer;
    const hp_optim_config *optim;   /* AdamW and clipping (borrowed for the call) */
    /* The processes: comm holds every rank of every stage group (borrowed). The schedule's rank r
     * is a group of group_size[r] processes (NULL: one each), the comm ranks
     * group_ranks[off_r .. off_r + group_size[r]) with off_r the sizes before r (NULL: 0, 1, ...
     * in order). The processes of a group are data-parallel replicas of its stages: each takes an
     * even share of every micro-batch's rows, and their gradients are summed before the update. */
    hp_comm *comm;
    const int *group_size;
    const int *group_ranks;
    /* Each group's strategy (NULL: none anywhere; else p entries, one per schedule rank, an entry
     * not present: none): its mesh (groups.NAME.mesh) over the group's processes, mesh index i the
     * i-th of group_ranks' entries for the group, and its rules (groups.NAME.strategy). The mesh
     * axes a params rule names (tensor parallelism, FSDP) or an inputs rule splits the rows of
     * (`inputs: {tokens: [fsdp, none], targets: [fsdp, none]}`) are the partitioner's: the stage
     * graph is partitioned over them by HyperShard (hp/shard.h), which inserts their collectives;
     * the other axes are the pipeline's own replicas, each taking a share of every micro-batch's
     * rows, their gradients all-reduced once per step. optimizer.shard (ZeRO-1) splits AdamW's
     * states over the named axes (the update graph is partitioned over the group's mesh,
     * pipeline_optim.c). Refused (HP_STATUS_UNSUPPORTED): inputs rules other than tokens and
     * targets or splitting another dim than the rows. Borrowed for the call. */
    const hp_strategy_config *group_strategy;
    /* HyperOffload inside the stages (NULL, or a device_budget of 0: none): the activations of the
     * micro-batches in flight leave the fast tier between their forward and backward uses. Each
     * program instance (slot) is planned alone (hp/offload_plan.h) with only the activations class
     * enabled, under device_budget / (the rank's slots) bytes of activations and workspace (plus
     * the parameters and accumulators it reads, which live in the store, once per rank, outside
     * this budget). The activations go to the host tier (spilling to disk when host_budget is full
     * and disk_dir is set), or to the disk tier with policy[HP_OFFLOAD_CLASS_ACTIVATIONS] ==
     * HP_TIER_DISK (disk_dir required: HP_STATUS_INVALID_ARGUMENT); host_budget and disk_budget
     * are per rank, split over the slots like device_budget. Each instance has its own disk store
     * file (its slots never share disk bytes). Its host-tier copies drain at the end of each phase;
     * its disk reads and writes go on into the instance's next phase while the rank runs other
     * phases (hp_program_ext.after_range), each waited for before the micro-batch's last phase
     * ends. The other classes stay in the fast tier. Borrowed for the call. */
    const hp_offload_plan_config *offload;
} hp_pipeline_opts;

#define HP_PIPELINE_OPTS_INIT ((hp_pipeline_opts){.batch = 0})

/*
 * Builds this rank's stage programs (one per chunk and slot), the optimizer programs and the
 * state store. Collective over opts->comm: it ends with one all-reduce in which the ranks agree
 * that every rank built its stages, so a rank whose own build failed (its offload budget, memory)
 * fails every rank's call instead of leaving them to wait for its sends; on a rank that built its
 * own, such a failure elsewhere returns HP_STATUS_COMM naming the lowest failed rank of opts->comm.
 * Errors (HP_STATUS_INVALID_ARGUMENT naming the
 * value): a batch not divisible by the schedule's m, a communicator whose size is not the
 * schedule's p, a stage with no layer, embedding or head, layer ranges out of order;
 * the schedule's own problems (hp_schedule_validate); the model builder's and autodiff's errors;
 * HP_STATUS_OUT_OF_MEMORY. On failure *out is NULL.
 */
hp_status hp_pipeline_new(const hp_pipeline_opts *opts, hp_pipeline **out);
void hp_pipeline_free(hp_pipeline *pp);

/* Initialises every parameter this rank holds with hp_gpt_init_param(seed) (the values the
 * single-device model gets), the accumulators and AdamW states with zeros. */
hp_status hp_pipeline_init_params(hp_pipeline *pp, uint64_t seed);

/*
 * One training step over the global batch: tokens and targets (batch, seq) i32, the same on every
 * rank (each reads the rows of its micro-batches); lr the learning rate for this step. Runs this
 * rank's schedule, then the optimizer. *loss (may be NULL) gets the step's mean loss on every rank,
 * *grad_norm (may be NULL) the global gradient norm before clipping. Collective over opts.comm.
 * Errors: kernel and communicator errors, naming the action (op, stage, micro-batch) that failed.
 */
hp_status hp_pipeline_step(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float lr, float *loss,
                           float *grad_norm);

/*
 * The two halves of hp_pipeline_step. forward_backward runs this rank's schedule and leaves the
 * step's gradients in the store's "grad_acc.<name>" entries (a tied embedding's two copies already
 * summed); *loss (may be NULL) gets the step's mean loss on every rank. update takes the global
 * gradient norm (one all-reduce), clips, runs AdamW with step count + 1 and zeroes the
 * accumulators; *grad_norm (may be NULL) gets the norm before clipping. A NaN or Inf norm (or, in
 * hp_pipeline_step, loss) skips the update: weights, AdamW states and the step count stay as they
 * were, the accumulators are zeroed, and the call returns HP_STATUS_OK (the caller decides). Both are collective over
 * opts.comm. Errors: as hp_pipeline_step.
 */
hp_status hp_pipeline_forward_backward(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float *loss);
hp_status hp_pipeline_update(hp_pipeline *pp, float lr, float *grad_norm);

/*
 * Post-validated steps (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 5:
 * optimizer post-validation). hp_pipeline_step_post runs one step like hp_pipeline_step but does
 * not wait for the step's loss and gradient norm: it starts their all-reduce, keeps a copy of this
 * rank's store (parameters, accumulators, AdamW states: their bytes again in host memory), and
 * updates at once as if the norm were under the clip and everything finite. So a rank that ends
 * its schedule early starts the next step's at once (under ZB-V the first stage's rank runs the
 * next step's first forwards while the next rank finishes its W's). The check lands during the
 * next call, after its schedule: when it fails (a NaN or Inf loss or gradient, or a norm
 * optim.grad_clip scales) every rank restores its copy, redoes the update as hp_pipeline_step would
 * have (clipped, or skipped leaving the accumulators zeroed) and runs that next step's schedule
 * again. Losses, norms and parameters are those of hp_pipeline_step, step by step (bitwise when
 * no check fails; the redone update uses the squared norm of a 2-float all-reduce, which equals
 * hp_pipeline_step's 1-float one wherever the reduction order does). *prev (may be NULL) gets
 * the previous post-validated step's result, settled (prev->valid false on the first call).
 * Call hp_pipeline_settle after the last step and before anything that reads or writes the store
 * (a checkpoint, evaluation) or hp_pipeline_step / forward_backward / update (which refuse with
 * HP_STATUS_INVALID_ARGUMENT while a check is pending; so does hp_pipeline_init_params).
 * hp_pipeline_free waits for a pending check's all-reduce (collective: settle first). Each failed
 * check costs one more run of a schedule (a clip under 1e-6 fails every check). Collective over
 * opts.comm, like hp_pipeline_step. On an error *prev is not written. A step whose schedule fails
 * settles the previous step's check when its all-reduce has landed (as every rank does), else
 * gives it up with the step's transfers (that update then stays, unchecked); a failed update
 * leaves nothing of the step behind (the copy restored). Errors: hp_pipeline_step's;
 * HP_STATUS_OUT_OF_MEMORY for the copy; HP_STATUS_UNSUPPORTED when a store entry is not in device
 * memory; HP_STATUS_INVALID_ARGUMENT for an entry without storage (parameters not initialised).
 */
typedef struct hp_pipeline_settled {
    bool valid;          /* a post-validated step was settled */
    float loss;          /* its mean loss (as hp_pipeline_step's *loss) */
    float grad_norm;     /* its global gradient norm before clipping (NaN for a NaN or Inf loss) */
    bool rolled_back;    /* its check failed: the update was redone and the next step's schedule run again */
    bool skipped;        /* of those, a NaN or Inf loss or norm: no update, as hp_pipeline_step */
} hp_pipeline_settled;

hp_status hp_pipeline_step_post(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float lr,
                                hp_pipeline_settled *prev);
/* Waits for the pending post-validated step's check and settles it into *last (may be NULL;
 * last->valid false when none was pending): on a failed check the update is redone (or skipped).
 * Collective over opts.comm. Errors: the communicator's and the update's. */
hp_status hp_pipeline_settle(hp_pipeline *pp, hp_pipeline_settled *last);
/* Takes back the pending post-validated step whatever its check says (none pending: nothing to
 * do): the store restored from the step's copy (parameters, optimizer state, step count as before
 * its update), its gradient accumulators zeroed, and its check's all-reduce waited for and dropped.
 * For a caller that stops at the previous step (a non-finite step past train.skip_nonfinite,
 * settled during this one): the store is left as that step left it, with nothing unchecked applied.
 * Collective over opts.comm (every rank takes the step back). Errors: the communicator's (the
 * store is restored either way); HP_STATUS_INTERNAL when the store changed since the copy. */
hp_status hp_pipeline_discard(hp_pipeline *pp);

/*
 * Records this rank's schedule into `tr` from now on (hp/trace.h; NULL: stops): each F, B and W
 * action's nodes on the track "compute" tagged with the action's stage, micro-batch and phase (F,
 * B, W; a full backward is B), each send as a "send F" / "send B" span (kind p2p: the non-blocking
 * send's issue, with its bytes) and each receive the compute thread waits for as "recv F" /
 * "recv B" (kind p2p, the time blocked, with the bytes), the step's all-reduces (the gradient
 * accumulators over the stage's group and the tied copies, the loss, the squared gradient norm;
 * kind comm), the optimizer's programs with phase opt, and a post-validated step's store copy and
 * restore ("post-validation copy" / "post-validation restore", kind copy, phase opt). Call it
 * between steps; `tr` (borrowed) must outlive the pipeline or a later call with NULL.
 * Errors: the recorder's.
 */
hp_status hp_pipeline_set_trace(hp_pipeline *pp, hp_trace *tr);

/*
 * The shape of a stage group of n processes under its strategy `sc` (NULL or not present: none):
 * *dp data-parallel replicas (the product of the mesh axes no params rule names) times *tp
 * model-parallel ranks (the product of the others); dp * tp == n for a mesh of n devices.
 */
void hp_pipeline_group_shape(const hp_strategy_config *sc, int n, int *dp, int *tp);

/* The mesh of this rank's stage group when it has model-parallel axes (the store's mesh, attached to
 * the group), else NULL (the store is one device's). Owned by the pipeline. */
hp_mesh *hp_pipeline_mesh(hp_pipeline *pp);

/* The state store of this rank: parameters by their whole-model names, "grad_acc.<name>" (zero
 * between steps), "exp_avg.<name>", "exp_avg_sq.<name>". Owned by the pipeline. */
hp_store *hp_pipeline_store(hp_pipeline *pp);

/* Sets the optimizer steps taken (AdamW's bias correction counts from it): after loading a
 * checkpoint of `step` steps into the store. */
void hp_pipeline_set_step(hp_pipeline *pp, int64_t step);

/*
 * The schedule of a run config with `groups:` (cfg->groups.n_stages ranks) and `pipeline:`:
 * hp_schedule_build of the named kind with micro_batches and chunks, or the table file loaded
 * (hp_schedule_load) and checked against them (HP_STATUS_CONFIG naming the file). Free *out with
 * hp_schedule_free.
 */
hp_status hp_pipeline_schedule_from_config(const hp_run_config *cfg, hp_schedule *out);

/* The first block of every virtual stage of `s` (n_stages ints, malloc'ed into *out: free it), from
 * the groups' modules; hp_pipeline_opts.first_layer takes it. HP_STATUS_OUT_OF_MEMORY. */
hp_status hp_pipeline_first_layers(const hp_run_config *cfg, const hp_schedule *s, int **out);

/* What one stage costs per micro-batch, for planning (hp plan) and the schedule simulator. */
typedef struct hp_pipeline_stage_plan {
    double f_seconds, b_seconds, w_seconds; /* the F, B and W phases under the machine model */
    size_t activation_bytes;       /* one micro-batch in flight, the backward whole (GPipe, 1F1B, interleaved
                                    * 1F1B: the nodes in autodiff order): arena + workspace (hp_program_plan) */
    size_t activation_bytes_split; /* the same with B and W apart (ZB-H1, ZB-V, DualPipeV: the activation
                                    * gradients W reads live from B to W): usually more */
    size_t persistent_bytes;                /* parameters, gradient accumulators, inputs and kept tensors */
    size_t param_bytes;                     /* of persistent_bytes, the parameters' (each once: a tied
                                             * embedding and head share one); one process's blocks for a
                                             * partitioned group (hp_pipeline_plan_stage_group: mesh index
                                             * 0's, the largest block where splits are uneven) */
    size_t moment_bytes;                    /* AdamW's two moments of those parameters, not in
                                             * persistent_bytes: 2 x param_bytes, and for a partitioned group
                                             * each parameter's split further over the optimizer.shard axes
                                             * its layout does not use (as the runtime lays them out); an
                                             * unpartitioned stage's ZeRO split is the caller's to apply */
    size_t embedding_bytes;                 /* of persistent_bytes + moment_bytes, the token embedding's
                                             * (parameter, accumulator, moments) when the stage holds it (the
                                             * first stage; the last too with a tied head): a rank holding both
                                             * stores it once */
} hp_pipeline_stage_plan;

/* The activation bytes of one micro-batch in flight in the order the runtime runs the stage: B and W
 * apart when the schedule splits them (hp_schedule.split_backward), else the backward whole. */
size_t hp_pipeline_stage_activations(const hp_pipeline_stage_plan *sp, bool split_backward);

/*
 * Builds the stage graph the pipeline would (hp_pipeline_new) for `part` with micro-batches of
 * `rows` rows of `seq` tokens (m of them), without allocating: the seconds of each phase by
 * hp_predict_nodes over its node range under `mm` and the bytes by hp_program_plan. Errors: the model builder's,
 * autodiff's and the planner's.
 */
hp_status hp_pipeline_plan_stage(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                                 const hp_machine_model *mm, hp_pipeline_stage_plan *out);

/*
 * hp_pipeline_plan_stage for a stage group whose strategy `sc` (its mesh of n_ranks devices and its
 * rules; NULL or not present: hp_pipeline_plan_stage) partitions the stage (tensor parallelism,
 * FSDP, rows split by an inputs rule): the stage graph for one replica's `rows` (a micro-batch's
 * rows divided among the group's data-parallel replicas, hp_pipeline_group_shape) partitioned over
 * the group's mesh as hp_pipeline_new does, for mesh index 0. The phases' seconds are those of the
 * per-rank graph with its collectives (hp_predict_nodes: each on its queue, overlapping compute
 * where the graph lets it); the bytes are one process's. Errors: hp_pipeline_plan_stage's, the
 * strategy's (hp_strategy_new, hp_strategy_annotate) and the partitioner's.
 */
hp_status hp_pipeline_plan_stage_group(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                                       const hp_strategy_config *sc, int n_ranks, const hp_machine_model *mm,
                                       hp_pipeline_stage_plan *out);

/*
 * HyperOffload inside one stage, planned as the runtime plans it: `cfg` is the rank's offload
 * config (hp_pipeline_opts.offload: its budgets are the rank's, split evenly over the `slots`
 * micro-batches in flight the rank keeps; only the activations class leaves the device, to the host
 * or, by the policy, to disk), the stage graph is the one a rank of an unpartitioned group runs
 * (rows rows of m micro-batches; split_backward: ordered B | W as under a zero-bubble schedule,
 * else the backward whole) and the budget also covers the parameters and accumulators it reads, as
 * in the runtime. `out`: the planner's figures for one micro-batch (hp_offload_plan_stats: peak
 * before and after, bytes offloaded and read back per tier, predicted stall). Errors: the
 * planner's (HP_STATUS_OUT_OF_MEMORY naming the node whose working set does not fit), a disk
 * policy without disk_dir (HP_STATUS_INVALID_ARGUMENT), the stage builder's.
 */
hp_status hp_pipeline_plan_stage_offload(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                                         bool split_backward, const hp_offload_plan_config *cfg, int slots,
                                         hp_offload_plan_stats *out);

/*
 * hp_pipeline_plan_stage_offload for a stage group whose strategy `sc` (its mesh of n_ranks devices;
 * NULL or not present: hp_pipeline_plan_stage_offload, n_ranks ignored) partitions the stage: the
 * per-process graph of mesh index 0 (hp_pipeline_plan_stage_group's; `rows` is one replica's rows of
 * a micro-batch) planned under the slot's budget, which also covers this process's parameter blocks
 * and accumulators the graph reads; `out`'s figures are one process's bytes and seconds. `sc` is
 * borrowed, not kept; *out is zeroed first (also on an error). Errors: hp_pipeline_plan_stage_offload's;
 * HP_STATUS_INVALID_ARGUMENT for a mesh whose size is not n_ranks; HP_STATUS_UNSUPPORTED for an
 * inputs rule other than tokens' or targets' dims 0 and 1; hp_strategy_new's and the partitioner's.
 */
hp_status hp_pipeline_plan_stage_offload_group(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq,
                                               int m, bool split_backward, const hp_offload_plan_config *cfg, int slots,
                                               const hp_strategy_config *sc, int n_ranks, hp_offload_plan_stats *out);

/* What this rank did over the steps since the pipeline was made (or the stats reset). */
typedef struct hp_pipeline_stats {
    int64_t steps;             /* schedules run (hp_pipeline_forward_backward calls; a post-validated step's
                                * rerun after a failed check counts again, as do its F, B and W) */
    double step_seconds;       /* their wall time, the optimizer's excluded */
    double busy_seconds;       /* in F, B and W programs (the rest of step_seconds is the bubble,
                                * waits and copies) */
    double f_seconds, b_seconds, w_seconds; /* per phase, summed over this rank's chunks */
    int64_t n_f, n_b, n_w;     /* actions run (a full backward counts as one B, its time in b_seconds) */
    int64_t bytes_sent;        /* activations and gradients sent to other ranks */
    int64_t bytes_offloaded;   /* with offload: activation bytes copied out of the fast tier (to the
                                * host or disk tier), since the pipeline was built (not reset by
                                * hp_pipeline_reset_stats) */
    int64_t bytes_to_disk;     /* the part of bytes_offloaded written to the disk tier */
    int64_t bytes_from_disk;   /* activation bytes read back from the disk tier (prefetches), since
                                * the pipeline was built */
    double update_seconds;     /* in the norm and update programs, and a post-validated step's backup,
                                * rollback and redo (hp_pipeline_step_post) */
    int64_t rollbacks;         /* post-validated steps whose check failed and were redone */
} hp_pipeline_stats;

void hp_pipeline_get_stats(const hp_pipeline *pp, hp_pipeline_stats *out);
void hp_pipeline_reset_stats(hp_pipeline *pp);

/*
 * The cost-model stage split (`pipeline.split: auto`): cuts the model's blocks into n_stages
 * contiguous virtual stages (the embedding on the first, the head on the last) minimising the
 * slowest stage's F + B + W seconds for micro-batches of `rows` rows under `mm`, the costs taken
 * from the stage graphs themselves (hp_pipeline_plan_stage of one block, and what the embedding and
 * the head add), by min-max partition (dynamic programming over the cut points). first_layer
 * receives n_stages entries; *max_seconds (may be NULL) the slowest stage's seconds. It is
 * hp_pipeline_split (hp/pipeline_plan.h) with one process per stage and no memory budget. Errors:
 * HP_STATUS_INVALID_ARGUMENT when the layers cannot fill the stages (every stage but the first and
 * the last needs a block); the planner's errors.
 */
hp_status hp_pipeline_auto_split(const hp_gpt_config *model, int n_stages, int rows, int seq, int m,
                                 const hp_machine_model *mm, int *first_layer, double *max_seconds);

/* The virtual stages this rank holds, and stage k's layer range and parts. */
int hp_pipeline_n_chunks(const hp_pipeline *pp);
hp_status hp_pipeline_stage_info(const hp_pipeline *pp, int chunk, int *stage, hp_gpt_stage *info, int *n_slots);
/*
 * The partition of chunk `chunk`'s stage graph over this rank's group mesh (hp/shard.h: its
 * collectives, hp_partition_collective, and bytes), owned by the pipeline; NULL when the group's
 * stages are not partitioned (no model-parallel or partitioned-row axes) or `chunk` is outside
 * [0, hp_pipeline_n_chunks). A group that splits the rows and not the sequence (FSDP) resolves
 * the stage's output and input gradient to its block of rows (no all-gather of them is listed).
 */
const hp_partition *hp_pipeline_stage_partition(const hp_pipeline *pp, int chunk);

#ifdef __cplusplus
}
#endif
#endif /* HP_PIPELINE_H */
