/*
 * Internal: the communication queues of a program (hp/instr.h states the invariants). Each queue
 * is a worker (hp/worker.h) that runs its asynchronous instructions in program order:
 *   - one queue per communicator group: COLLECTIVE instructions with the same `group` whose axis
 *     sets overlap (axes 0 = all axes) share a queue (union-find at build time), so a communicator
 *     is only ever used by one queue; every rank builds the same queues from the same program, and
 *     every member of a group issues the group's collectives in the same order;
 *   - one queue for point-to-point instructions (SEND, RECV), matched by (peer, tag) in issue
 *     order; a send never waits behind a collective of another queue.
 * The compute thread waits for an instruction only where its output is first read. Errors are
 * sticky per queue (the worker's) and reported by the next wait on that queue. How a queue's thread
 * waits inside a transfer (blocking in the library, or testing and yielding or sleeping) is the
 * program's progress strategy (hp_progress).
 */
#ifndef HP_RUNTIME_QUEUES_H
#define HP_RUNTIME_QUEUES_H

#include "hp/backend.h"
#include "hp/comm.h"
#include "hp/trace.h"

typedef struct hp__queues hp__queues;

/*
 * Builds the queues of the n bound nodes a[0..n) whose async[e] is set (each must carry an
 * instruction of queue COLLECTIVE or P2P). queue_of[e] receives entry e's queue index, -1 for the
 * others. *out is NULL when no entry is asynchronous. Errors: HP_STATUS_INVALID_ARGUMENT for an
 * asynchronous node without such an instruction (naming it), out of memory, thread start failures.
 */
hp_status hp__queues_new(const hp_node_args *a, const bool *async, int n, int *queue_of, hp__queues **out);
/* How the queues' threads wait in blocking communicator calls (hp_comm_set_thread_wait). */
void hp__queues_set_wait(hp__queues *q, hp_comm_wait_mode mode);
/* Waits for outstanding work, then joins the threads. NULL is allowed. */
void hp__queues_free(hp__queues *q);
/* Number of queues (collective groups + the point-to-point queue when used). */
int hp__queues_count(const hp__queues *q);
/* Whether queue k is the point-to-point queue. */
bool hp__queues_is_p2p(const hp__queues *q, int k);
/* Queues `a` (borrowed until done) on queue k; *seq receives its sequence number on that queue. */
hp_status hp__queues_submit(hp__queues *q, int k, const hp_node_args *a, uint64_t *seq);
/* Blocks until submission seq of queue k (and all before it) ran; the queue's sticky error. */
hp_status hp__queues_wait(hp__queues *q, int k, uint64_t seq);
/* Waits for everything submitted on every queue; the first error. */
hp_status hp__queues_wait_all(hp__queues *q);
/* After a failed run has drained every queue: later runs issue their transfers again (each queue's
 * error is sticky until cleared, so without this one failure would skip every later collective). */
void hp__queues_clear_errors(hp__queues *q);
/* Records every instruction the queues run from now on into `tr` (NULL: stops), on a track per
 * queue ("comm K (group)", "p2p"), with span[e] (borrowed, per entry of hp__queues_new's a) as the
 * span's fields. Call between runs. NULL q is allowed. Errors: the recorder's. */
hp_status hp__queues_set_trace(hp__queues *q, hp_trace *tr, const hp_trace_span *span);
/* Seconds the queues' workers spent running (summed) and the compute thread spent waiting. */
void hp__queues_times(hp__queues *q, double *busy_s, double *wait_s);

#endif
