/*
 * hp/worker.h — an ordered queue of tasks run by one thread: the one worker-thread primitive under
 * the runtime's queues (the communication queues of a program, HyperOffload's copy streams, the
 * CPU backend's streams).
 *
 *     hp_worker *w;
 *     HP_CHECK(hp_worker_new(&w));
 *     uint64_t seq;
 *     HP_CHECK(hp_worker_submit(w, fn, user, &seq));   // fn(user, false) runs on the worker
 *     do_something_else();                             // meanwhile
 *     HP_CHECK(hp_worker_wait(w, seq));                // fn's status (or an earlier task's)
 *     hp_worker_free(w);
 *
 * Order: tasks run one at a time, in submission order; task k has sequence number k (1, 2, ...),
 * so waiting for k waits for every task submitted before it too (a CUDA stream's semantics).
 *
 * Errors are sticky, as on a CUDA stream: the first task that returns an error keeps its status and
 * message (the thread's hp_error message when the task returned; a task names itself with
 * hp_error_prefix). Later tasks are still called, with `failed` = true, so they can release what
 * they own or count themselves as skipped; they must not do their work then, and what they return
 * is ignored. hp_worker_wait(seq) and hp_worker_query report the error only to waiters of that task
 * or a later one. hp_worker_clear_error makes later tasks run normally again.
 *
 * Thread-safety: every function may be called from any thread, except that a task must not wait on
 * its own worker (it would wait for itself).
 */
#ifndef HP_WORKER_H
#define HP_WORKER_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_worker hp_worker;

/* A task. `failed`: an earlier task of this worker failed (do no work; release resources). */
typedef hp_status (*hp_worker_fn)(void *user, bool failed);

/* Starts the worker's thread (a plain pthread, not an OpenMP thread). Errors:
 * HP_STATUS_OUT_OF_MEMORY, HP_STATUS_INTERNAL when the thread cannot start. */
hp_status hp_worker_new(hp_worker **out);
/* Runs every task already submitted, stops the thread and frees the worker. NULL is allowed. */
void hp_worker_free(hp_worker *w);

/*
 * Queues fn(user, failed) and returns at once; *seq (may be NULL) receives its sequence number.
 * The queue grows as needed (amortized: no allocation once it has reached its working size).
 * Errors: HP_STATUS_INVALID_ARGUMENT (NULL fn), HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_worker_submit(hp_worker *w, hp_worker_fn fn, void *user, uint64_t *seq);

/* Blocks until task `seq` (and every earlier one) has run. Returns the sticky error (and makes its
 * message the calling thread's) when the failing task is `seq` or earlier; else HP_STATUS_OK.
 * seq = 0 returns at once. Time blocked counts as wait time. */
hp_status hp_worker_wait(hp_worker *w, uint64_t seq);
/* hp_worker_wait for the last task submitted. */
hp_status hp_worker_synchronize(hp_worker *w);
/* *done = whether task `seq` has run; never blocks. Returns the error like hp_worker_wait once done. */
hp_status hp_worker_query(hp_worker *w, uint64_t seq, bool *done);

/* The sequence number of the last task submitted / the last task that has run. */
uint64_t hp_worker_submitted(hp_worker *w);
uint64_t hp_worker_done(hp_worker *w);

/* Clears the sticky error: tasks submitted after this call run normally. */
void hp_worker_clear_error(hp_worker *w);

/* Seconds the thread spent in tasks (busy) and callers spent blocked in wait/synchronize (wait),
 * since the start or the last reset. */
void hp_worker_times(hp_worker *w, double *busy_s, double *wait_s);
void hp_worker_reset_times(hp_worker *w);

#ifdef __cplusplus
}
#endif
#endif /* HP_WORKER_H */
