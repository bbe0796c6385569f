/* Helpers shared by the single-device (checkpoint.c) and sharded (checkpoint_sharded.c) checkpoints. */
#ifndef HP_TRAIN_CHECKPOINT_INTERNAL_H
#define HP_TRAIN_CHECKPOINT_INTERNAL_H

#include "hp/checkpoint.h"

#include <cjson/cJSON.h>

#define HP__CKPT_PATH_BYTES 4096
#define HP__CKPT_INDEX_FILE "index.json"

/*
 * What binds a tensor file to its checkpoint (string pairs in its safetensors __metadata__, next to
 * the checksums): the step, the role ("model" or "optim"), the rank that wrote it and the world
 * size, the mesh (sharded files), the model section of the config ("vocab=256 context=64 ...",
 * when saved with one) and, per stored block, its layout and box ("block.<tensor>").
 */
#define HP__CKPT_META_STEP "step"
#define HP__CKPT_META_ROLE "role"
#define HP__CKPT_META_RANK "rank"
#define HP__CKPT_META_WORLD "world_size"
#define HP__CKPT_META_MESH "mesh"
#define HP__CKPT_META_MODEL "model"
#define HP__CKPT_META_BLOCK "block."
/* The model section of the config as compact JSON ({"vocab":256,"context":64,...}: every key the
 * build's config has, so families with more keys are described in full); written beside "model". */
#define HP__CKPT_META_MODEL_JSON "hp.model"

/* HP_STATUS_IO "checkpoint: cannot <what> '<path>': <strerror(e)>". */
hp_status hp__ckpt_io_error(const char *what, const char *path, int e);
/* out (HP__CKPT_PATH_BYTES) = a "/" b; INVALID_ARGUMENT when too long. */
hp_status hp__ckpt_join(char *out, const char *a, const char *b);
/* mkdir -p. */
hp_status hp__ckpt_mkdir_p(const char *dir);
/* fsync a file or directory by path. */
hp_status hp__ckpt_fsync_path(const char *path);
/* Writes text to path (replacing it) and fsyncs; removes the partial file on failure. */
hp_status hp__ckpt_write_file_sync(const char *path, const char *text);
/* Removes a directory, its plain files and empty subdirectories (checkpoint directories are flat). */
void hp__ckpt_remove_dir(const char *dir);
/* The state.json text (malloc'd; NULL when out of memory) with this format_version; `sharded` adds
 * "index_file" instead of "model_file"/"optim_file". */
char *hp__ckpt_state_json(const hp_checkpoint_save_args *a, int format_version, bool sharded);
/* Validates dir, step and extra_json of a save. */
hp_status hp__ckpt_check_args(const hp_checkpoint_save_args *a);
/* Step directory name "step_%08lld" and the paths of the temp dir <dir>/.tmp-<name>-<tag>, the final
 * dir <dir>/<name> and the move-aside dir <dir>/.old-<name>-<tag> (each HP__CKPT_PATH_BYTES). */
hp_status hp__ckpt_paths(const hp_checkpoint_save_args *a, const char *tag, char *name, size_t n_name, char *tmp,
                         char *final, char *old);
/* Renames tmp (fully written) to final (replacing an existing one via old), fsyncs dir and points
 * `latest` at name. On failure tmp is removed and a previous final is restored. */
hp_status hp__ckpt_commit(const char *dir, const char *name, const char *tmp, const char *final, const char *old);
/* Reads a whole file into a malloc'd NUL-terminated buffer. */
hp_status hp__ckpt_read_text(const char *path, char **out);
bool hp__ckpt_is_file(const char *p);

/* Loads full tensors (a one-device mesh, replicated layouts) from a step directory of either format. */
hp_status hp__ckpt_load_full(const char *step_dir, bool optim, hp_named_tensor *tensors, size_t n);

/* "vocab=V context=T layers=L heads=H width=C tied_head=true|false": the model metadata. */
void hp__ckpt_model_summary(const hp_model_config *m, char *buf, size_t n);
/* The config's model section as compact JSON (HP__CKPT_META_MODEL_JSON); malloc'd, NULL when out of
 * memory. */
char *hp__ckpt_model_json(const hp_run_config *cfg);
/* The first field of two model summaries ("k=v k=v ...", keys in the same order) that differs:
 * its key and both values (n bytes each); false when they are equal. */
bool hp__ckpt_model_diff(const char *a, const char *b, char *key, char *va, char *vb, size_t n);
/* "device_matrix [2, 2] alias_name [dp, tp]": the mesh metadata. */
void hp__ckpt_mesh_str(int naxes, const int64_t *dims, const char *const *names, char *buf, size_t n);
/* "layout [dp, tp] start [0, 3] len [4, 3]": a block's metadata. */
void hp__ckpt_block_str(const char *layout, int nd, const int64_t *start, const int64_t *len, char *buf, size_t n);

/* ---------------------------------------------------------------- the saved checkpoint, read */

/* One saved block: a box of the global tensor stored as `key` in `file` (a name in the step dir). */
typedef struct hp__ckpt_block {
    const char *file, *key;
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
} hp__ckpt_block;

/* One tensor of the checkpoint (model or optimizer state): global dtype and shape, its blocks. */
typedef struct hp__ckpt_entry {
    const char *name;
    hp_dtype dtype;
    hp_shape shape;
    const char *layout; /* the saved layout ("[dp, tp]"); "" in a single-device checkpoint */
    int nblocks;
    hp__ckpt_block *blocks;
} hp__ckpt_entry;

/* A tensor file of the checkpoint: listed (name and rank), opened on first use. */
typedef struct hp__ckpt_file {
    const char *name;
    int rank;
    hp_safetensors *f;     /* NULL until opened */
    unsigned char *done;   /* per entry of f: checksum and finiteness checked */
} hp__ckpt_file;

/* The model (optim false) or optimizer (optim true) part of a step directory, either format. */
typedef struct hp__ckpt_saved {
    const char *dir;
    bool optim, sharded;
    char source[HP__CKPT_PATH_BYTES]; /* index.json or the single-device file, for messages */
    cJSON *json;                      /* owns the strings of a sharded index */
    int64_t step;                     /* state.json's */
    int world;                        /* ranks that wrote it (1 for a single-device checkpoint) */
    char mesh[512];                   /* the saved mesh (hp__ckpt_mesh_str); "" for single-device */
    int nent;
    hp__ckpt_entry *ent;              /* sorted by name */
    int nfiles;
    hp__ckpt_file *files;             /* the role's files, by rank */
} hp__ckpt_saved;

/*
 * Reads state.json (its step) and index.json (its step, mesh, files and blocks), or opens the
 * single-device file; hp__ckpt_saved_file opens the other files as they are needed. Errors name
 * the file: HP_STATUS_IO (missing, unreadable), HP_STATUS_CORRUPT, HP_STATUS_UNSUPPORTED.
 * Free with hp__ckpt_saved_free (also after a failure).
 */
hp_status hp__ckpt_saved_open(hp__ckpt_saved *s, const char *step_dir, bool optim);
void hp__ckpt_saved_free(hp__ckpt_saved *s);
/* The listed file `name`, opened (structure and header checksum) and checked against its binding
 * metadata (role, step, rank, world size, mesh) on first use. */
hp_status hp__ckpt_saved_file(hp__ckpt_saved *s, const char *name, hp__ckpt_file **out);
/* Checks entry x of file fl, holding (a block of) checkpoint tensor `tensor`: its checksum and that
 * every F32/BF16 value is finite; once per entry. */
hp_status hp__ckpt_check_entry(hp__ckpt_saved *s, hp__ckpt_file *fl, const hp_safetensors_entry *x, const char *tensor);
/* Checks that file fl's metadata places entry x where block k of tensor e says (sharded only). */
hp_status hp__ckpt_check_block(const hp__ckpt_saved *s, const hp__ckpt_file *fl, const hp_safetensors_entry *x,
                               const hp__ckpt_entry *e, const hp__ckpt_block *k);
/* The entry named `name`, or NULL. */
hp__ckpt_entry *hp__ckpt_saved_find(const hp__ckpt_saved *s, const char *name);

/* Test hook: when set, every rank of hp_checkpoint_save_sharded calls it with the temp directory and
 * its rank after the temp directory exists and before writing its files. NULL by default. */
extern void (*hp__ckpt_sharded_before_write)(const char *tmp_dir, int rank);

#endif
