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
 *                                     metadata {"format": "pt", "step": "200", "role": "model",
 *                                     "rank": "0", "world_size": "1", "model": "vocab=256 context=64
 *                                     layers=4 heads=4 width=128 tied_head=false" and "hp.model": the
 *                                     config's model section as JSON ({"vocab":256,"context":64,...})
 *                                     (both when saved with a config), plus the checksums of
 *                                     hp/safetensors.h}
 *         optim.safetensors           AdamW moments "exp_avg.<param>" and "exp_avg_sq.<param>"
 *                                     (metadata as above, "role": "optim"); no tensors at all in a
 *                                     model-only checkpoint (hp_checkpoint_has_optim)
 *         state.json                  {"format": "hyperparallel-checkpoint", "format_version": 1,
 *                                      "step": 200, "seed": "1" (a decimal string: exact for any
 *                                      uint64), "config": {...hp_run_config_to_json...},
 *                                      "extra": {...caller's JSON object...}}
 *
 * Resuming needs only this: data batches are a pure function of (seed, step) (hp/data.h), and
 * learning-rate schedules are functions of the step. Readers reject versions newer than they know.
 *
 * Sharded layout (format_version 2, hp_checkpoint_save_sharded): each rank writes the blocks it is
 * the first owner of (the lowest mesh index holding that exact slice, so a replicated tensor is
 * stored once), under the tensor's own name, in its own files; rank 0 writes an index:
 *
 *     <dir>/step_00000200/
 *         model-r00000.safetensors    rank 0's blocks of the weights ("wte.weight" = its slice);
 *                                     metadata as above with "rank", "world_size" (the mesh size),
 *                                     "mesh": "device_matrix [2, 2] alias_name [dp, tp]" and, per
 *                                     block, "block.wte.weight": "layout [dp, tp] start [0, 0]
 *                                     len [3, 2]"
 *         model-r00001.safetensors    ... one per rank (possibly holding no tensor)
 *         optim-r00000.safetensors    rank 0's blocks of the optimizer state, ...
 *         index.json                  {"format": "hyperparallel-checkpoint-index", "format_version": 2,
 *                                      "step": 200,
 *                                      "mesh": {"device_matrix": [2, 2], "alias_name": ["dp", "tp"]},
 *                                      "model": {"wte.weight": {"dtype": "F32", "shape": [5, 3],
 *                                                "layout": "[dp, tp]",
 *                                                "blocks": [{"file": "model-r00000.safetensors",
 *                                                            "key": "wte.weight",
 *                                                            "start": [0, 0], "len": [3, 2]}, ...]},
 *                                                ...},
 *                                      "optim": {...same form...},
 *                                      "files": [{"file": "model-r00000.safetensors", "role": "model",
 *                                                 "rank": 0}, ... every rank's model and optim file]}
 *         state.json                  as above, "format_version": 2, "index_file": "index.json"
 *
 * A block's "start"/"len" are its box in the global tensor (elements); its file entry is that box,
 * row-major. The blocks of a tensor are disjoint and tile it. Loading needs only the index and the
 * files (no mesh, no communicator): every loader intersects its own slice with the blocks, so a
 * checkpoint saved under one strategy and rank count loads under any other, and a single-device
 * step directory (format_version 1) loads through the same path as one full block per tensor.
 * Each file is a plain safetensors file (its blocks open in the Python ecosystem).
 *
 * Integrity (docs/reliability.md, "Checkpoint integrity"). Every tensor file is written with
 * hp_safetensors_write_checked: a CRC-32 per tensor, computed as its bytes are written, and one of
 * the header. Its metadata binds it to the checkpoint: the step, the role, the rank that wrote it,
 * the world size, the mesh and each block's layout and box; index.json lists every rank's files.
 * Every load checks, for each file it opens and each tensor (block) it reads: the header checksum,
 * the binding against state.json's step and index.json (a file swapped between ranks or copied from
 * another step names itself and what it records), the tensor's checksum and that every F32/BF16
 * value is finite. A tensor file without checksums is refused when it carries metadata of ours (a
 * checkpoint saved before checksums were recorded, or whose checksums were stripped); a single-
 * device model.safetensors or optim.safetensors with no metadata of ours (one imported from
 * another tool) loads unverified, still checked for finite values. hp_checkpoint_check_config
 * checks the saved config against the tensors (resume and generation call it);
 * hp_checkpoint_verify checks all of the above without loading (`hp ckpt verify`).
 *
 * Atomicity: a save writes everything into <dir>/.tmp-step_<N>-<pid>/, fsyncs each file and the
 * directory, renames it to step_<N> (an existing step_<N> is replaced), fsyncs <dir>, then replaces
 * `latest` by writing a temp file and renaming it over. If any step fails (disk full, file-size
 * limit, unwritable directory) the temp directory is removed and the previous checkpoints and
 * `latest` are untouched. Not safe against two processes saving into one run directory at once.
 * `latest` never moves backwards: a save of step N into a directory whose `latest` names a later
 * step fails before writing anything (HP_STATUS_INVALID_ARGUMENT naming both steps); see
 * hp_run_dir_prepare for how a run starts over.
 */
#ifndef HP_CHECKPOINT_H
#define HP_CHECKPOINT_H

#include "hp/comm.h"
#include "hp/config.h"
#include "hp/core.h"
#include "hp/mesh.h"
#include "hp/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest format this build reads; sharded checkpoints write it. */
#define HP_CHECKPOINT_FORMAT_VERSION 2
/* The format hp_checkpoint_save (single device) writes. */
#define HP_CHECKPOINT_FORMAT_VERSION_SINGLE 1
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
 * (bad JSON, missing or mistyped step/seed/format_version, a step that is not a whole number in
 * [0, 2^53), a "format" other than "hyperparallel-checkpoint"), HP_STATUS_UNSUPPORTED (a
 * format_version that is not a whole number from 1 to HP_CHECKPOINT_FORMAT_VERSION),
 * HP_STATUS_CONFIG (the saved config does not validate). A missing config is not an error here
 * (has_config false); hp_checkpoint_check_config and hp_checkpoint_verify refuse it. The caller
 * frees *out with hp_checkpoint_state_free.
 */
hp_status hp_checkpoint_read_state(const char *step_dir, hp_checkpoint_state *out);
void hp_checkpoint_state_free(hp_checkpoint_state *s);

/*
 * Fill the caller's buffers, by name, from <step_dir>/model.safetensors or optim.safetensors,
 * or from a sharded step directory (index.json): the full tensors, through
 * hp_checkpoint_load_sharded on a one-device mesh, with its checks and errors: HP_STATUS_NOT_FOUND
 * for a missing tensor, HP_STATUS_SHAPE for a shape mismatch (naming the tensor, expected and found
 * shapes), HP_STATUS_INVALID_ARGUMENT for a dtype mismatch, HP_STATUS_CORRUPT for a damaged or
 * unverifiable file, a checksum mismatch, a binding mismatch or a non-finite value, HP_STATUS_IO;
 * all name the file.
 */
hp_status hp_checkpoint_load_model(const char *step_dir, hp_named_tensor *tensors, size_t n);
hp_status hp_checkpoint_load_optim(const char *step_dir, hp_named_tensor *tensors, size_t n);

/*
 * Whether a step directory (either format) holds optimizer state: false for a model-only
 * checkpoint, whose optimizer part has no tensors (hp_checkpoint_save with n_optim 0, as `hp convert
 * --from-hf` writes). hp_checkpoint_check_config accepts such a checkpoint, and hp_trainer_resume
 * starts AdamW's moments at zero from it. Errors: those of opening the optimizer part (HP_STATUS_IO
 * for a missing file, HP_STATUS_CORRUPT), naming the file.
 */
hp_status hp_checkpoint_has_optim(const char *step_dir, bool *has);

/* ---------------------------------------------------------------- sharded checkpoints */

/*
 * A tensor as one rank holds it: the global shape, the layout on the mesh, and this rank's local
 * block `local` (row-major, shape hp_layout_local_shape of its mesh index). Partial layouts are not
 * allowed (reduce first). The struct borrows name and local.
 */
typedef struct hp_sharded_tensor {
    const char *name;
    hp_dtype dtype;
    hp_shape shape;   /* global */
    hp_layout layout; /* on the mesh passed with it */
    void *local;      /* may be NULL only when the local block is empty */
} hp_sharded_tensor;

/*
 * Saves a sharded checkpoint (layout above). Collective over `comm`: every rank of the mesh calls
 * it with the same args, mesh and tensor lists (names, dtypes, shapes, layouts; a mismatch is
 * detected by a hash and reported as HP_STATUS_INVALID_ARGUMENT), where comm's rank r is mesh
 * index r and comm's size is the mesh size. Only dir, step, seed, config and extra_json of `a` are
 * used (model/optim fields are ignored). Each rank writes model-r<RRRRR>.safetensors and
 * optim-r<RRRRR>.safetensors holding the blocks it first owns; rank 0 writes index.json and
 * state.json.
 *
 * Atomic like hp_checkpoint_save: rank 0 creates <dir>/.tmp-step_<N>-sharded/, every rank writes
 * into it, the ranks agree on success (an all-reduce of a status flag), then rank 0 fsyncs and
 * renames it into place (replacing an existing step_<N>) and replaces `latest`. When any rank fails
 * the temp directory is removed, the previous checkpoints and `latest` are untouched, and every rank
 * returns an error: the failing rank its own status and message, the others the same status with
 * "rank R failed" (the lowest failing rank). On success step_dir_out (when not NULL; n bytes)
 * receives the step directory's path on every rank.
 * Errors: as hp_checkpoint_save; HP_STATUS_INVALID_ARGUMENT for comm/mesh size or rank mismatch,
 * a layout invalid on the mesh or partial, a NULL local block that is not empty, duplicate names;
 * HP_STATUS_COMM when the communicator fails.
 */
hp_status hp_checkpoint_save_sharded(const hp_checkpoint_save_args *a, hp_comm *comm, const hp_mesh *mesh,
                                     const hp_sharded_tensor *model, size_t n_model,
                                     const hp_sharded_tensor *optim, size_t n_optim, char *step_dir_out,
                                     size_t n);

/*
 * Fills each tensor's local block for mesh index `index` under its layout on `mesh` (which may
 * differ entirely from the saved strategy and rank count) from the model (optim false) or optimizer
 * (optim true) tensors of `step_dir`: a sharded step directory (index.json) or a single-device one
 * (model.safetensors / optim.safetensors holding full tensors). Pure file reads, no communication:
 * each needed file is mapped once and the intersections of the slice with the saved blocks are
 * copied (hp_copy_box). Before a saved block is used, its file is checked once (header checksum;
 * "role", "step" against state.json, "rank" against index.json's "files", "world_size" and "mesh"
 * against index.json's mesh) and so is the block (its "block.<name>" metadata against the index's
 * layout and box, its checksum, every F32/BF16 value finite); index.json's step must be
 * state.json's. Errors: HP_STATUS_NOT_FOUND for a tensor the checkpoint lacks; HP_STATUS_SHAPE
 * for a global shape mismatch (the tensor, the saved and the requested shapes);
 * HP_STATUS_INVALID_ARGUMENT for a dtype mismatch, an invalid or partial layout, an index outside
 * the mesh, a NULL non-empty local block; HP_STATUS_CORRUPT for a slice the saved blocks do not
 * cover (the tensor and the uncovered box), overlapping blocks, a malformed index.json or
 * state.json, a file whose entry does not match the index, a file without checksums (see
 * Integrity above), a checksum mismatch (the file, the tensor, both CRCs), a binding mismatch (the
 * file, the key, what it records and what the index or state.json says) or a non-finite value (the
 * tensor, the value, its element in the block and the file); HP_STATUS_IO for a file that cannot
 * be read (naming it). Local blocks of tensors before the failing one may already be written.
 */
hp_status hp_checkpoint_load_sharded(const char *step_dir, bool optim, const hp_mesh *mesh, int index,
                                     hp_sharded_tensor *tensors, size_t n);

/* ---------------------------------------------------------------- integrity */

/*
 * Checks that the config in a step directory's state.json (s, from hp_checkpoint_read_state)
 * describes its tensors, without loading them: the model metadata the tensor files were saved with
 * against s's model section (vocab, context, layers, heads, width, tied_head; names the first field
 * that differs; and, when the file records "hp.model", each of its keys), then the GPT that section
 * builds (hp_gpt_build): every parameter present with its shape and dtype among the model tensors
 * and as exp_avg.<name> and exp_avg_sq.<name> among the optimizer tensors (unless the optimizer
 * part holds no tensor at all: a model-only checkpoint), and no other tensor. hp_trainer_resume and hp_generate_from_checkpoint call
 * it; the plain loaders (hp_checkpoint_load_*) load any tensors and do not. Errors:
 * HP_STATUS_CORRUPT naming the step directory and the field or tensor that disagrees (and both
 * values), or that s has no config; the errors of hp_checkpoint_load_sharded opening the files.
 */
hp_status hp_checkpoint_check_config(const char *step_dir, const hp_checkpoint_state *s);

/* One file that hp_checkpoint_verify checked. */
typedef struct hp_checkpoint_file_report {
    char name[64];    /* file name within the step directory (truncated if longer) */
    char role[8];     /* "state", "index", "model" or "optim" */
    int rank;         /* the rank that wrote it; -1 for state.json and index.json */
    int64_t tensors;  /* tensors (blocks) it holds; 0 for the JSON files */
    int64_t bytes;    /* its size */
    bool checksummed; /* it records checksums and every one matched (false for the JSON files and for an
                       * imported single-device file without checksums) */
} hp_checkpoint_file_report;

/* What hp_checkpoint_verify found; free with hp_checkpoint_report_free. */
typedef struct hp_checkpoint_report {
    int format_version; /* 0 until state.json was read */
    int64_t step;       /* -1 until state.json was read */
    int world_size;     /* ranks that wrote the tensor files (1: single-device format) */
    bool has_config;
    char model[256];    /* the config's model section, "vocab=256 context=64 ..." */
    bool incomplete;    /* the fault is a missing file (state.json, index.json or a tensor file) */
    int n_files;
    hp_checkpoint_file_report *files; /* the files checked and found good, in order (malloc'd) */
    int64_t n_tensors, n_bytes;       /* over the good tensor files */
} hp_checkpoint_report;

/*
 * Checks a step directory of either format without loading it into a model: state.json (readable,
 * a whole step, a config); index.json (its step, mesh and files); every tensor file of every rank:
 * present, structure, header checksum, bound to this step, role, rank, world size and mesh, every
 * tensor listed in the index at the block its metadata names, every tensor's checksum, every
 * F32/BF16 value finite; every tensor's blocks disjoint and covering it; and the config against the
 * tensors (hp_checkpoint_check_config). Stops at the first fault and returns it (the message names
 * the file and, where there is one, the tensor); *r holds what was checked before it (r->files)
 * and whether the fault is a missing file (r->incomplete). Errors: HP_STATUS_IO (a missing or
 * unreadable file), HP_STATUS_CORRUPT, HP_STATUS_UNSUPPORTED (a newer format),
 * HP_STATUS_OUT_OF_MEMORY. Free *r with hp_checkpoint_report_free whatever it returns.
 */
hp_status hp_checkpoint_verify(const char *step_dir, hp_checkpoint_report *r);
void hp_checkpoint_report_free(hp_checkpoint_report *r);

/* The health of one step directory (hp_checkpoint_list). */
typedef enum hp_checkpoint_health {
    HP_CHECKPOINT_HEALTH_OK = 0,    /* hp_checkpoint_verify passed */
    HP_CHECKPOINT_HEALTH_CORRUPT,   /* it failed on what the files hold */
    HP_CHECKPOINT_HEALTH_INCOMPLETE /* a file is missing, or it is a save that did not finish */
} hp_checkpoint_health;

typedef struct hp_checkpoint_listing {
    char name[256];  /* "step_00000200", or a leftover ".tmp-step_00000300-<tag>" / ".old-step_..." */
    int64_t step;    /* from the name; -1 when it names none */
    hp_checkpoint_health health;
    bool latest;     /* `latest` names it */
    char *fault;     /* why it is not ok (malloc'd); NULL when ok */
} hp_checkpoint_listing;

/*
 * Lists the checkpoints of a run directory, sorted by step: every step_<N> directory verified
 * (hp_checkpoint_verify; every file is read, so this costs a read of the whole run directory), every
 * temporary or moved-aside step directory a crashed save left (incomplete), and the name `latest`
 * holds when no such directory exists (incomplete, latest). *out (n entries) is freed with
 * hp_checkpoint_listing_free. Errors: HP_STATUS_IO naming run_dir when it cannot be listed;
 * HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_checkpoint_list(const char *run_dir, hp_checkpoint_listing **out, int *n);
void hp_checkpoint_listing_free(hp_checkpoint_listing *l, int n);

/* ---------------------------------------------------------------- run directories */

/* What a run directory holds (hp_run_dir_inspect). */
typedef struct hp_run_dir_info {
    bool has_latest;     /* a `latest` file exists */
    int64_t latest_step; /* the step `latest` names (step_<N>); -1 when none or unreadable */
    int64_t newest_step; /* the highest step_<N> directory; -1 when none */
    int n_steps;         /* step_<N> directories */
} hp_run_dir_info;

/*
 * Looks at `dir` without changing it. A directory that does not exist holds nothing (OK).
 * HP_STATUS_IO naming dir when it exists but cannot be listed; HP_STATUS_INVALID_ARGUMENT for NULL.
 */
hp_status hp_run_dir_inspect(const char *dir, hp_run_dir_info *out);

/* What a training run may do with a run directory that already holds checkpoints. */
typedef enum hp_run_dir_mode {
    HP_RUN_DIR_MODE_FRESH = 0, /* a new run: the directory must hold no checkpoint */
    HP_RUN_DIR_MODE_RESUME,    /* a resumed run: it may hold checkpoints up to the resumed step */
    HP_RUN_DIR_MODE_OVERWRITE, /* start over: the old checkpoints are deleted */
} hp_run_dir_mode;

/*
 * The run-directory guard, called once a run knows its mode and before it computes a step
 * (`hp train` does; trainers in tests need not). With N the newest step the directory holds
 * (max of `latest` and the step_<N> directories):
 *   FRESH:     OK when it holds no checkpoint; otherwise HP_STATUS_INVALID_ARGUMENT naming the
 *              directory, its step directories and latest step, and the two ways out (--resume,
 *              --overwrite) or a new train.checkpoint_dir.
 *   RESUME:    OK when N <= resume_step (the step the run resumed from); otherwise
 *              HP_STATUS_INVALID_ARGUMENT: the run's saves would move `latest` backwards.
 *   OVERWRITE: deletes `latest` and every step_<N> directory: `latest` is first moved into
 *              <dir>/.overwritten-<pid>/, then each step directory, the run directory is fsynced,
 *              then that folder is deleted (with any left by an earlier crashed overwrite). A crash
 *              midway leaves no `latest` naming a missing step: at worst some step directories
 *              without `latest` (refused by FRESH, finished by the next OVERWRITE) and a hidden
 *              .overwritten-* folder. Other files in dir (metrics, notes) are kept.
 * HP_STATUS_IO naming the path when listing, moving or syncing fails.
 */
hp_status hp_run_dir_prepare(const char *dir, hp_run_dir_mode mode, int64_t resume_step);

#ifdef __cplusplus
}
#endif
#endif /* HP_CHECKPOINT_H */
