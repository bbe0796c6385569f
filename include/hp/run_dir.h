/*
 * hp/run_dir.h — who owns a run directory, and output paths checked before the first step.
 *
 * One run per directory: `hp train` takes an exclusive lock on <checkpoint_dir>/.lock (flock(2))
 * for its whole life. The kernel releases the lock when the process ends in any way (exit, crash,
 * kill -9), so a dead run never leaves a stale lock behind; a second run on the same directory
 * stops at once, and its message names the holder's pid and host (the holder writes them into the
 * lock file). The holder then removes the temporary step directories (.tmp-step_*) that writers
 * which are gone left behind: while it holds the lock no other run writes there.
 *
 *     hp_run_dir_lock *lock;
 *     HP_CHECK(hp_run_dir_lock_acquire(cfg.train.checkpoint_dir, world, &lock));  // collective
 *     ... train, save checkpoints ...
 *     hp_run_dir_lock_release(lock);
 *
 * The lock file stays after the run (removing it would race with a run opening it); its content
 * only means something while a process holds the lock. flock locks are advisory and local to one
 * machine on some network file systems (older NFS): ranks on several hosts are fine because only
 * rank 0 takes the lock, two jobs on two hosts sharing an NFS run directory may not see each other.
 *
 * The output-path checks create what a run will write into and prove it writable before any step is
 * computed, so a bad path costs seconds instead of the steps before the first checkpoint. Their
 * errors name the setting (`what`, e.g. "train.checkpoint_dir") and the offending path component.
 */
#ifndef HP_RUN_DIR_H
#define HP_RUN_DIR_H

#include "hp/comm.h"
#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The lock file's name inside a run directory. */
#define HP_RUN_DIR_LOCK_FILE ".lock"

typedef struct hp_run_dir_lock hp_run_dir_lock;

/*
 * Creates `dir` when missing (hp_output_dir_prepare, as "train.checkpoint_dir"), takes the lock
 * on dir/.lock without waiting, writes "<pid> <host>" into it, and removes every `.tmp-step_*`
 * directory in dir (debris of saves that died midway; hp_run_dir_lock_removed counts them).
 *
 * Collective over `comm` when it is not NULL: rank 0 alone does all of the above, then broadcasts
 * its status and message, so every rank returns the same status (the other ranks' messages say
 * "rank 0: ..."); on success only rank 0's handle holds the lock. With comm NULL the caller locks.
 *
 * Errors: HP_STATUS_INVALID_ARGUMENT for a NULL dir or out, or when another process holds the lock
 * ("run directory 'D' is in use by another run: pid P on host H holds D/.lock ..."); HP_STATUS_IO
 * naming the path when the directory cannot be created or written, or the lock file cannot be
 * opened, locked or written; HP_STATUS_COMM when the broadcast fails. On error *out is NULL and
 * nothing is held.
 */
hp_status hp_run_dir_lock_acquire(const char *dir, hp_comm *comm, hp_run_dir_lock **out);

/* Releases the lock (closes the file; the file itself stays) and frees the handle. NULL is allowed. */
void hp_run_dir_lock_release(hp_run_dir_lock *l);

/* Whether this handle holds the lock (false on ranks other than 0 of a collective acquire). */
bool hp_run_dir_lock_held(const hp_run_dir_lock *l);

/* The number of .tmp-step_* directories the acquire removed (0 on ranks that do not hold it). */
int hp_run_dir_lock_removed(const hp_run_dir_lock *l);

/*
 * Removes every `.tmp-step_*` directory directly in `dir` (flat: their files, then themselves) and
 * sets *removed (may be NULL) to how many went. Only safe while no process writes into dir (the
 * lock's holder calls it). A directory that does not exist holds none. HP_STATUS_IO naming dir when
 * it cannot be listed.
 */
hp_status hp_run_dir_remove_temp(const char *dir, int *removed);

/*
 * Creates directory `dir` and its parents (mkdir -p) and checks that this process can create files
 * in it. `what` names the setting in messages (e.g. "offload.disk_dir"). Errors:
 * HP_STATUS_INVALID_ARGUMENT for NULL or empty arguments; HP_STATUS_IO when a component of the
 * path exists but is not a directory ("'a/b' is a regular file, not a directory"), a component
 * cannot be created (with the reason), or the directory is not writable.
 */
hp_status hp_output_dir_prepare(const char *what, const char *dir);

/*
 * Checks that `path` can be opened for writing without blocking or truncating anything: an
 * existing path must be a regular file or a character device (/dev/null, /dev/full) that this
 * process may write, a new one needs an existing, writable parent directory (it is not created).
 * Creates nothing. Errors: HP_STATUS_INVALID_ARGUMENT for NULL or empty arguments; HP_STATUS_IO
 * naming `what` and the path for a directory, FIFO or socket, a missing or non-directory parent,
 * or missing write permission.
 */
hp_status hp_output_file_check(const char *what, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* HP_RUN_DIR_H */
