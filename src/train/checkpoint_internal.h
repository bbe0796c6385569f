/* Helpers shared by the single-device (checkpoint.c) and sharded (checkpoint_sharded.c) checkpoints. */
#ifndef HP_TRAIN_CHECKPOINT_INTERNAL_H
#define HP_TRAIN_CHECKPOINT_INTERNAL_H

#include "hp/checkpoint.h"

#define HP__CKPT_PATH_BYTES 4096
#define HP__CKPT_INDEX_FILE "index.json"

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

/* Loads full tensors (a one-device mesh, replicated layouts) from a sharded step directory. */
hp_status hp__ckpt_load_full(const char *step_dir, bool optim, hp_named_tensor *tensors, size_t n);

/* Test hook: when set, every rank of hp_checkpoint_save_sharded calls it with the temp directory and
 * its rank after the temp directory exists and before writing its files. NULL by default. */
extern void (*hp__ckpt_sharded_before_write)(const char *tmp_dir, int rank);

#endif
