/* Internal: trainer state shared by trainer.c, trainer_dist.c and trainer_ckpt.c. */
#ifndef HP_TRAIN_TRAINER_INTERNAL_H
#define HP_TRAIN_TRAINER_INTERNAL_H

#include "hp/comm.h"
#include "hp/compile.h"
#include "hp/data.h"
#include "hp/nn.h"
#include "hp/offload_plan.h"
#include "hp/runtime.h"
#include "hp/shard.h"
#include "hp/store.h"
#include "hp/strategy.h"
#include "hp/train.h"
#include "hp/shards.h"
#include "hp/tokenizer.h"

/* A logical graph partitioned for this rank and compiled. */
typedef struct hp_trainer_prog {
    hp_graph *lg;          /* the logical (single-device) graph */
    hp_gpt gpt;
    hp_train_step step;    /* the training program only */
    hp_partition *part;
    hp_program *p;
    hp_tid loss;           /* per-rank tensor: the replicated loss */
    hp_tid grad_sq;        /* per-rank tensor: the replicated squared gradient norm (training only) */
    hp_offload_state *offload; /* HyperOffload's plan for this program (training only), or NULL */
    hp_compiled *compiled; /* owns part, p and offload (the compile driver's result) */
} hp_trainer_prog;

/* A single-device forward graph for sampling, bound to the store's full (replicated) parameters. */
typedef struct hp_trainer_fwd {
    hp_graph *g;
    hp_program *p;
    hp_gpt gpt;
} hp_trainer_fwd;

struct hp_trainer {
    hp_run_config cfg;
    hp_gpt_config gcfg;
    hp_comm *world;        /* borrowed, or owned when own_world */
    bool own_world;
    hp_strategy *strategy; /* owns the mesh */
    hp_mesh *mesh;
    int index;             /* this rank's mesh index */
    hp_corpus *corpus;     /* data.corpus, or NULL with data.shards */
    hp_shard_set *set;     /* data.shards (hp/shards.h), or NULL */
    hp_tokenizer *tok;     /* the shard set's tokenizer (sampling), or NULL: bytes */
    hp_loader *loader;     /* rank 0 of 1: every rank reads the whole batch and slices it */
    int32_t *tok_buf, *tgt_buf; /* (B, T) staging */
    int cp_balance;        /* ring attention's causal load balancing over this many ranks (0: none) */
    int32_t *pos;          /* cp_balance: hp_ring_balance_positions(T, cp_balance); the batch is
                            * scattered in that order and fed as the input "positions" */
    hp_store *store;       /* parameters and optimizer states, shared by train, eval and sample */
    hp_trainer_prog train, eval;
    hp_trainer_fwd sample;
    int64_t steps_done;
    double unigram;
    double val_bytes;      /* bytes of the text of hp_trainer_eval's targets (all its batches); 0 before
                            * its first call */
    hp_trace *trace;       /* hp_trainer_set_trace; NULL: off */
    int trace_track;       /* the compute thread's track */
    hp_trace_span trace_step, trace_eval, trace_save; /* the trainer's own spans */
    /* pipeline mode (groups: and pipeline: in the config; trainer_pipe.c): the training step is
     * `pipe` over `pipe_comm` (rank = stage); `train` then holds only the logical step graph (no
     * program), whose names the full copy of the model in `store` (one device, `self`) follows */
    struct hp_pipeline *pipe;
    struct hp_schedule *sched;
    hp_comm *pipe_comm;
    hp_comm *self;
    /* pipeline.post_validate (hp_trainer_step_post): `pending` while a launched step's check is in
     * flight, `launched` holding what its launch knows (step, lr, seconds); a step settled outside
     * a step call (hp__pipe_gather: evaluation, sampling, a save) waits in `held` for the next one */
    bool pending, has_held;
    hp_step_metrics launched, held;
    int64_t nonfinite_in_row;  /* non-finite steps in a row so far */
    int64_t skipped_total;     /* non-finite steps skipped */
    int64_t last_applied;      /* the last step whose update was applied (or the resumed step; 0: none) */
    char last_ckpt[4096];      /* the last checkpoint saved or resumed from ("" when none) */
    int prev_threads;          /* compute threads before train.threads set them (0: not set) */
};

/* Test hook: when set, hp_trainer_step asks it before each step (1-based optimizer step) for the
 * name of a parameter whose first element of this rank's block is made NaN for that step's run
 * and restored afterwards (NULL: none). Forces a non-finite step without touching the data. */
extern const char *(*hp__trainer_poison)(int64_t step);

/* HP_STATUS_NONFINITE for optimizer step `step` (trainer_guard.c: the message of hp_trainer_step). */
hp_status hp__trainer_nonfinite_error(hp_trainer *t, int64_t step, double loss, double grad_norm);
/* The test hook around one step's run: *name receives the poisoned parameter (NULL: none) and
 * *saved its first element, which restore puts back. */
hp_status hp__trainer_poison_apply(hp_trainer *t, int64_t step, const char **name, float *saved);
hp_status hp__trainer_poison_restore(hp_trainer *t, const char *name, float saved);

/* After a step's run (m filled, t->steps_done not yet moved): counts a non-finite step as skipped
 * or stops with hp__trainer_nonfinite_error past train.skip_nonfinite in a row; then moves
 * steps_done. Shared by the SPMD and the pipeline step. */
hp_status hp__trainer_account(hp_trainer *t, hp_step_metrics *m);
/* hp__trainer_account's judgement of step m->step alone (steps_done not moved): a post-validated
 * step is judged when it settles, after steps_done counted its launch. */
hp_status hp__trainer_judge(hp_trainer *t, hp_step_metrics *m);
/* Whether hp__trainer_judge stops the run at a step of this loss and gradient norm (non-finite,
 * past train.skip_nonfinite in a row). */
bool hp__trainer_stops(const hp_trainer *t, double loss, double grad_norm);

hp_gpt_config hp__gpt_config_from(const hp_model_config *m);

/* trainer_ckpt.c: a checkpoint path is a directory and its step directory (NULL: not checked yet)
 * holds only regular files (stat before open); HP_STATUS_INVALID_ARGUMENT / HP_STATUS_CORRUPT. */
hp_status hp__ckpt_check_paths(const char *path, const char *step_dir);

/* Samples one token id from logits (V) with temperature and top-k; deterministic in (key, counter). */
hp_status hp__sample_logits(const float *logits, int V, float temp, int top_k, uint64_t key, uint64_t counter,
                            int *out);

/* Autoregressive sampling with a forward program built for batch 1 and seq = context. */
/* tok: the tokenizer that encodes the prompt and decodes the sample (ids sampled below its
 * vocabulary); NULL: bytes, each sampled id's low byte appended. */
hp_status hp__generate(const hp_graph *g, hp_program *p, const hp_gpt *gpt, const hp_tokenizer *tok, const char *prompt,
                       int n_tokens, float temp, int top_k, uint64_t seed, char **text_out);
/* trainer_data.c: sampling with a tokenizer (hp__generate's tok != NULL). */
hp_status hp__generate_tokens(hp_program *p, const hp_gpt *gpt, const hp_tokenizer *tok, const char *prompt, int n_tokens,
                              float temp, int top_k, uint64_t seed, char **text_out);
/* trainer_data.c: the data of cfg (corpus or shard set), t->loader, t->tok and t->unigram. */
hp_status hp__trainer_data_new(hp_trainer *t);
void hp__trainer_data_free(hp_trainer *t);
/* The run directory's copy of the shard set's tokenizer (rank 0 before a save; nothing for bytes). */
hp_status hp__trainer_copy_tokenizer(const hp_trainer *t);
/* The tokenizer a checkpoint's run keeps (its run dir's tokenizer.json or encoder.json + vocab.bpe),
 * or *out NULL for bytes. `step_dir` is a resolved step directory. */
hp_status hp__checkpoint_tokenizer(const char *step_dir, hp_tokenizer **out);

/* trainer_pipe.c: the pipeline mode's set-up, step, the full model gathered into t->store (with
 * optim: the AdamW states too; collective over the pipeline) and a resumed t->store scattered
 * back to the stages. */
hp_status hp__pipe_new(hp_trainer *t);
void hp__pipe_free(hp_trainer *t);
hp_status hp__pipe_step(hp_trainer *t, hp_step_metrics *m);
/* pipeline.post_validate: hp_trainer_step_post's pipeline step; and a pending step settled into
 * t->held (a no-op when none is pending), collective over the pipeline. */
hp_status hp__pipe_step_post(hp_trainer *t, bool settle, hp_step_metrics out[2], int *n);
hp_status hp__pipe_settle(hp_trainer *t);
hp_status hp__pipe_gather(hp_trainer *t, bool optim);
hp_status hp__pipe_scatter(hp_trainer *t);
void hp__pipe_report_memory(const hp_trainer *t, FILE *f);

/* The per-rank storage of logical tensor t of a program. */
void *hp__prog_data(const hp_trainer_prog *pr, hp_tid t);

/* (Parameters and optimizer states are read and written through the state store, t->store.) */

/* Records the trainer's span s [t0, now) on the compute track (nothing when not tracing). */
void hp__trainer_trace(hp_trainer *t, const hp_trace_span *s, double t0);

/* This rank's slice of logical tensor t: start and len per dim. */
void hp__prog_slice(const hp_trainer *t, const hp_trainer_prog *pr, hp_tid lt, int64_t *start, int64_t *len);

#endif
