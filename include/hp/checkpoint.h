/*
 * hp/checkpoint.h — training checkpoints: safetensors weights and optimizer state plus a JSON
 * state file, written atomically into a run directory.
 *
 *     hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
 *     a.dir = cfg.train.checkpoint_dir; a.step = step; a.seed = (uint64_t)cfg.train.seed;
 *     a.config = &cfg; a.model = params; a.n_model = n; a.optim = moments; a.n_optim = 2 * n;
 *     HP_CHECK(hp_checkpoint_save(&a, NULL, 0));
 *     ...
 *     char step_dir[4096];
 *     HP_CHECK(hp_checkpoint_resolve("runs/kjv", step_dir, sizeof step_dir));  // via `latest`
 *     HP_CHECK(hp_checkpoint_load_model(step_dir, params, n));                 // fills buffers by name
 *
 * Layout (format_version 1):
 *
 *     <dir>/latest                    text: the newest step directory's name + "\n"
 *     <dir>/step_00000200/
 *         model.safetensors           weights by hierarchical name ("blocks.3.attn.q.weight");
 *                                     metadata {"format": "pt", "step": "200"}
 *         optim.safetensors           AdamW moments "exp_avg.<param>" and "exp_avg_sq.<param>"
 *         state.json                  {"format": "hyperparallel-checkpoint", "format_version": 1,
 *                                      "step": 200, "seed": "1" (a decimal string: exact for any
 *                                      uint64), "config": {...hp_run_config_to_json...},
 *                                      "extra": {...caller's JSON object...}}
 *
 * Resuming needs only this: data batches are a pure function of (seed, step) (hp/data.h), and
 * learning-rate schedules are functions of the step. A later format (sharded checkpoints with an
 * index) will raise format_version; readers reject versions newer than they know.
 *
 * Atomicity: a save writes everything into <dir>/.tmp-step_<N>-<pid>/, fsyncs each file and the
 * directory, renames it to step_<N> (an existing step_<N> is replaced), fsyncs <dir>, then replaces
 * `latest` by writing a temp file and renaming it over. If any step fails (disk full, file-size
 * limit, unwritable directory) the temp directory is removed and the previous checkpoints and
 * `latest` are untouched. Not safe against two processes saving into one run directory at once.
 */
#ifndef HP_CHECKPOINT_H
#define HP_CHECKPOINT_H

#include "hp/config.h"
#include "hp/core.h"
#include "hp/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HP_CHECKPOINT_FORMAT_VERSION 1
#define HP_CHECKPOINT_MODEL_FILE "model.safetensors"
#define HP_CHECKPOINT_OPTIM_FILE "optim.safetensors"
#define HP_CHECKPOINT_STATE_FILE "state.json"

typedef struct hp_checkpoint_save_args {
    const char *dir;              /* run directory; created (with parents) if missing */
    int64_t step;                 /* >= 0; names the step directory step_%08lld */
    uint64_t seed;                /* the run's seed */
    const hp_run_config *config;  /* copied into state.json; may be NULL */
    const hp_named_tensor *model; /* weights; n_model may be 0 */
    size_t n_model;
    const hp_named_tensor *optim; /* optimizer state; optim.safetensors is written even when empty */
    size_t n_optim;
    const char *extra_json;       /* optional JSON object text stored under "extra"; NULL for none */
} hp_checkpoint_save_args;

/* All fields zero/NULL. */
hp_checkpoint_save_args hp_checkpoint_save_args_default(void);

/*
 * Saves a checkpoint (see atomicity above). On success writes the step directory's path into
 * step_dir_out (when not NULL; truncated to n bytes). Errors: HP_STATUS_INVALID_ARGUMENT for a
 * NULL dir, a negative step, bad tensors or extra_json that is not a JSON object;
 * HP_STATUS_IO naming the path that failed (with strerror); HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_checkpoint_save(const hp_checkpoint_save_args *a, char *step_dir_out, size_t n);

/*
 * Resolves `path` to a step directory: a run directory containing `latest` resolves to the step
 * directory it names; a directory containing state.json is itself a step directory. Writes the
 * result into out (n bytes). HP_STATUS_NOT_FOUND naming the path when it is neither;
 * HP_STATUS_CORRUPT when `latest` is empty or names a missing directory; HP_STATUS_INVALID_ARGUMENT
 * when out is too small.
 */
hp_status hp_checkpoint_resolve(const char *path, char *out, size_t n);

/* The contents of state.json. */
typedef struct hp_checkpoint_state {
    int format_version;
    int64_t step;
    uint64_t seed;
    bool has_config;       /* false when the checkpoint was saved without a config */
    hp_run_config config;  /* rebuilt from the saved copy; free with hp_checkpoint_state_free */
    char *extra_json;      /* compact JSON of "extra", or NULL; malloc'd, freed by _free */
} hp_checkpoint_state;

/*
 * Reads <step_dir>/state.json. Errors name the file: HP_STATUS_IO (unreadable), HP_STATUS_CORRUPT
 * (bad JSON, missing or mistyped step/seed/format_version), HP_STATUS_UNSUPPORTED (a
 * format_version newer than HP_CHECKPOINT_FORMAT_VERSION), HP_STATUS_CONFIG (the saved config does
 * not validate). The caller frees *out with hp_checkpoint_state_free.
 */
hp_status hp_checkpoint_read_state(const char *step_dir, hp_checkpoint_state *out);
void hp_checkpoint_state_free(hp_checkpoint_state *s);

/*
 * Fill the caller's buffers, by name, from <step_dir>/model.safetensors or optim.safetensors
 * (hp_safetensors_load_into): HP_STATUS_NOT_FOUND for a missing tensor, HP_STATUS_SHAPE for a
 * shape mismatch (naming the tensor, expected and found shapes), HP_STATUS_INVALID_ARGUMENT for a
 * dtype mismatch, HP_STATUS_CORRUPT for a damaged file, HP_STATUS_IO; all name the file.
 */
hp_status hp_checkpoint_load_model(const char *step_dir, hp_named_tensor *tensors, size_t n);
hp_status hp_checkpoint_load_optim(const char *step_dir, hp_named_tensor *tensors, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* HP_CHECKPOINT_H */
