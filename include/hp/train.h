/*
 * hp/train.h — the training step as one graph, the learning-rate schedule, and the trainer that
 * runs a whole job from a run config (hp/config.h).
 *
 * The step graph is forward + autodiff backward + global-norm clipping + AdamW, all in the IR, so
 * that every later pass (sharding, offload, pipeline) sees the whole step:
 *
 *     loss ─► autodiff ─► grads ─► sumsq ─► clip_scale ─┐
 *                           └────────────────────────────┴─► adamw(param, grad, m, v, lr, step, scale)
 */
#ifndef HP_TRAIN_H
#define HP_TRAIN_H

#include <stdio.h>

#include "hp/comm.h"
#include "hp/compile.h"
#include "hp/config.h"
#include "hp/ir.h"
#include "hp/mesh.h"
#include "hp/shard.h"
#include "hp/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Learning rate at optimizer step `step` (1-based) of `total`: linear warmup from lr/warmup to lr
 * over `warmup` steps, then cosine decay to min_lr at step `total` (SGDR, Loshchilov & Hutter 2017,
 * without restarts; the GPT-2/nanoGPT schedule).
 */
double hp_lr_at(const hp_optim_config *o, int64_t step, int64_t total);

/* hp_train_step and hp_train_step_build (the autodiff + optimizer pass) are in hp/compile.h. */

/* Per-step figures reported by the trainer. */
typedef struct hp_step_metrics {
    int64_t step;       /* the step just completed (1-based) */
    double loss;        /* training loss of the step's batch */
    double lr;          /* learning rate used */
    double grad_norm;   /* global gradient norm before clipping */
    double seconds;     /* wall time of the step */
    double tokens_per_s;
    bool skipped;       /* the loss or gradient norm was NaN/Inf: no update was applied (train.skip_nonfinite) */
    int64_t skipped_in_row; /* non-finite steps in a row, this one included (0 when this one was finite) */
    int64_t skipped_total;  /* steps skipped so far by this trainer */
    bool redone;        /* a post-validated step (hp_trainer_step_post) whose check failed: its update was
                         * redone as hp_trainer_step's (clipped, or skipped) and the next step's schedule
                         * run again */
} hp_step_metrics;

typedef struct hp_trainer hp_trainer;

/*
 * A trainer for the run config `cfg` (copied shallowly: cfg must not be freed while the trainer
 * lives, its arena holds the strategy rules the checkpoints write out): loads the corpus,
 * builds the step graph and an evaluation graph, compiles programs, initialises parameters from
 * train.seed (GPT-2 init). With train.threads > 0 it sets the calling thread's compute threads
 * (hp_backend_cpu_set_threads) before building, and hp_trainer_free restores the previous count.
 * With HyperMPMD `groups:` and `pipeline:` the step is a pipeline (hp/pipeline.h) over the stage
 * groups (each one rank or data-parallel replicas); evaluation, sampling and checkpoints use a
 * full copy of the model gathered on every rank. Errors: config, data and allocation errors with
 * their messages; HP_STATUS_UNSUPPORTED naming the group for what a pipeline does not do yet
 * (tensor parallelism or FSDP inside a stage, a non-stage group kind, offload, dropout).
 */
hp_status hp_trainer_new(const hp_run_config *cfg, hp_trainer **out);

/*
 * The same over the ranks of `world` (borrowed; NULL means a one-rank communicator): the
 * strategy section of cfg gives the mesh (its device count must equal the world size) and the
 * layouts; the step graph is partitioned for this rank (hp/shard.h). Collective: every rank
 * calls it, and every later call on the trainer, in the same order. It sets world's timeout to
 * train.comm_timeout (hp_comm_set_timeout) before splitting any communicator from it, so every
 * transfer of the trainer waits at most that long for the other ranks.
 */
hp_status hp_trainer_new_dist(const hp_run_config *cfg, hp_comm *world, hp_trainer **out);
void hp_trainer_free(hp_trainer *t);

/*
 * Labels every world rank that a group of `g` lists as "rank K of group 'NAME'" in the
 * communicator's fault and timeout messages (hp_comm_set_rank_names): "world rank 3 (rank 1 of
 * group 'stage1') is gone: ...". The pipeline trainer, the multimodal runner (hp/multimodal.h) and
 * the RL job (hp/rl.h) call it on their world. Nothing happens without groups or on one rank; a
 * rank listed twice keeps its first label. Errors: HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_groups_name_ranks(hp_comm *world, const hp_groups_config *g);

/*
 * Records the trainer's programs into `tr` from now on (hp/trace.h; NULL: stops, after waiting for
 * the copy streams): the training, evaluation and sampling programs' nodes and transfers
 * (hp_program_set_trace), plus on the "compute" track one span per training step ("step", with
 * args.step), evaluation ("eval") and checkpoint ("checkpoint"). Spans carry the step being run.
 * `tr` (borrowed) must outlive the trainer or a later call with NULL. Errors: the recorder's.
 */
hp_status hp_trainer_set_trace(hp_trainer *t, hp_trace *tr);

/* This process's rank in the world communicator. */
int hp_trainer_rank(const hp_trainer *t);
/* The strategy's mesh and the training step's partition (layouts, collectives, bytes). */
const hp_mesh *hp_trainer_mesh(const hp_trainer *t);
const hp_partition *hp_trainer_partition(const hp_trainer *t);

/*
 * Runs one optimizer step on the next batch. On error the parameters are unchanged.
 *
 * Non-finite steps: when the step's loss or global gradient norm is NaN or Inf, the step's guard
 * (hp_train_step_build) has applied no update: every parameter and optimizer state is as it was.
 * Up to train.skip_nonfinite such steps in a row are skipped: HP_STATUS_OK with m->skipped set
 * (the batch is consumed and the step counts toward train.steps). The next one in a row (the first
 * when skip_nonfinite is 0) is HP_STATUS_NONFINITE naming the step, the loss and gradient norm,
 * the first tensor found non-finite (a parameter, else the gradient the backward pass computed
 * first, by name; this rank's block), and the last good checkpoint (the last one this trainer
 * saved or resumed from, or that there is none); the step is then not counted as done.
 *
 * Stalls: a transfer that waits longer than train.comm_timeout for another rank fails the step
 * with HP_STATUS_TIMEOUT naming the operation, its bytes, the communicator group (size and world
 * ranks) and the ranks that did not arrive (hp_comm_set_timeout). The trainer cannot go on after
 * it: the abandoned transfer may still write into the program's buffers, so the caller ends the
 * job (`hp train` calls hp_comm_mpi_abort without freeing the trainer).
 */
hp_status hp_trainer_step(hp_trainer *t, hp_step_metrics *m);
/*
 * The post-validated form of hp_trainer_step, for a pipeline with pipeline.post_validate: true
 * (any other trainer runs hp_trainer_step and returns its metrics as m[0], *n = 1). Runs step
 * steps_done + 1 by hp_pipeline_step_post (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR
 * 2024, section 5): its loss and gradient-norm check is left in flight and lands during the next
 * call's schedule, so no rank waits for the others between steps. m[0 .. *n) receives the
 * metrics of the steps settled since the last call, oldest first (*n is 0, 1 or 2): the previous
 * step's, and with `settle` this step's too. Pass settle = true for a step after which the caller
 * stops or reads the model; hp_trainer_eval, hp_trainer_save and sampling settle a pending step
 * themselves and keep its metrics for the next call (or hp_trainer_settle). A settled step's loss,
 * gradient norm and update are hp_trainer_step's (bitwise where its check passes; where it fails,
 * a NaN or Inf or a norm optim.grad_clip scales, m->redone is set: the update was redone, clipped
 * or skipped, and the next step's schedule run again). m->seconds is the wall time of the call
 * that launched the step (with `settle`, its settling too). steps_done counts launched steps.
 * Errors: hp_trainer_step's. A non-finite step past train.skip_nonfinite is reported when it
 * settles, during the next call: that call's step, already applied unchecked, is then taken back
 * (hp_pipeline_discard), so the parameters and optimizer state are those the message names, as
 * hp_trainer_step leaves them, and steps_done counts the steps before the non-finite one.
 */
hp_status hp_trainer_step_post(hp_trainer *t, bool settle, hp_step_metrics m[2], int *n);
/* Settles a pending post-validated step (collective over the pipeline) and returns the metrics
 * not yet returned in m[0] (*n = 1; 0 when there are none). Errors: the pipeline's settle's,
 * HP_STATUS_NONFINITE as hp_trainer_step_post. */
hp_status hp_trainer_settle(hp_trainer *t, hp_step_metrics m[1], int *n);
/* Mean loss over train.eval_batches validation batches (the same batches every call). */
hp_status hp_trainer_eval(hp_trainer *t, double *val_loss);

/* How much of the validation split hp_trainer_eval covers. */
typedef struct hp_val_coverage {
    int64_t windows; /* distinct windows: eval_batches x batch, at most the split's W (batches wrap) */
    int64_t tokens;  /* their targets: windows x context */
    double fraction; /* tokens / the split's targets (its tokens - 1), in (0, 1]; `hp eval` scores all */
    double bytes_per_token; /* bytes of the text of hp_trainer_eval's targets per target (1 for the byte
                             * tokenizer; a BPE's mean token length), so its loss in bits per byte is
                             * val_loss / (ln 2 * bytes_per_token); 0 before the first hp_trainer_eval */
} hp_val_coverage;
void hp_trainer_val_coverage(const hp_trainer *t, hp_val_coverage *c);
/* Steps completed so far. */
int64_t hp_trainer_steps_done(const hp_trainer *t);
/* Unigram entropy of the training split in nats per token (the bar a model must beat). */
double hp_trainer_unigram_entropy(const hp_trainer *t);

/*
 * Writes a checkpoint of the current state under train.checkpoint_dir (atomically; see
 * hp/checkpoint.h). `path_out` (may be NULL) receives the step directory, `cap` bytes. Waits for
 * deferred optimizer updates first; if one failed (a disk error), returns its error and writes
 * nothing, so the last checkpoint stays the last good state.
 */
hp_status hp_trainer_save(hp_trainer *t, char *path_out, size_t cap);
/*
 * Restores parameters, optimizer state and the step counter from a checkpoint (run dir or step dir),
 * checked as hp/checkpoint.h describes: the path must be a directory and every file of the step
 * directory a regular file (checked with stat before anything is opened, so a FIFO there fails at
 * once); the saved config against the saved tensors (hp_checkpoint_check_config; a checkpoint
 * without a config is refused), every block's checksum, binding and finite values, then the run's
 * model section against the saved one (vocab, context, layers, heads, width, tied_head). Errors:
 * the checkpoint errors, naming the file and the tensor or field; HP_STATUS_SHAPE for a tensor whose
 * shape differs from the run's; HP_STATUS_INVALID_ARGUMENT for a model that differs only where the
 * shapes cannot tell (heads, a tied head) or a step beyond train.steps. On an error the step
 * counter is unchanged, though some parameters may already hold the checkpoint's values. A
 * model-only checkpoint (no optimizer tensors: hp_checkpoint_has_optim, e.g. one `hp convert
 * --from-hf` wrote) resumes with AdamW's moments at zero, as a fresh run's.
 */
hp_status hp_trainer_resume(hp_trainer *t, const char *path);

/*
 * Collective (parameters are gathered to every rank). Samples `n_tokens` bytes after `prompt` with temperature `temp` (0: greedy) and top-k `top_k`
 * (0: off), deterministic for `seed`. *text_out is malloc'd (caller frees): prompt + continuation.
 */
hp_status hp_trainer_sample(hp_trainer *t, const char *prompt, int n_tokens, float temp, int top_k,
                            uint64_t seed, char **text_out);

/*
 * Rebuilds the model from a checkpoint's saved config and weights (path: a run dir or a step dir;
 * the path checks of hp_trainer_resume, the config checked against the tensors, the weights loaded
 * with their checksums, bindings and finite values checked, as hp/checkpoint.h describes) and
 * samples as hp_trainer_sample does. Errors: checkpoint errors naming the file and the tensor or
 * field.
 */
hp_status hp_generate_from_checkpoint(const char *path, const char *prompt, int n_tokens, float temp, int top_k,
                                      uint64_t seed, char **text_out);

/* Writes the training program's memory report (fast-tier bytes against the offload budget,
 * per-tier peaks, copy throughput and the hidden fraction) to f. */
void hp_trainer_report_memory(const hp_trainer *t, FILE *f);

/* This rank's block of a parameter or optimizer state by name (NULL if unknown, if HyperOffload
 * keeps it on disk, or if a deferred optimizer update writing it failed: then hp_error_message says
 * why); `numel` receives its element count. Waits for deferred updates first (hp_program_sync). */
const float *hp_trainer_param(hp_trainer *t, const char *name, int64_t *numel);

#ifdef __cplusplus
}
#endif
#endif
