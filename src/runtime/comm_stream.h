/*
 * Internal: the communication stream of a program. One worker thread runs asynchronous nodes
 * (REDISTRIBUTE nodes flagged HP_NODE_FLAG_ASYNC) in submission order, so every rank issues its
 * collectives in the same order; the compute thread waits for a submission only where its result
 * is first needed. Errors are sticky (as on a CUDA stream) and reported by the next wait.
 */
#ifndef HP_RUNTIME_COMM_STREAM_H
#define HP_RUNTIME_COMM_STREAM_H

#include "hp/backend.h"

typedef struct hp__comm_stream hp__comm_stream;

hp_status hp__comm_stream_new(hp_backend_t be, hp__comm_stream **out);
/* Waits for outstanding work, then joins the thread. NULL is allowed. */
void hp__comm_stream_free(hp__comm_stream *s);
/* Queues `a` (borrowed until done); returns its sequence number (1, 2, ...). */
uint64_t hp__comm_stream_submit(hp__comm_stream *s, const hp_node_args *a);
/* Blocks until submission `seq` (and all before it) finished; the first error of any, sticky. */
hp_status hp__comm_stream_wait(hp__comm_stream *s, uint64_t seq);
/* Waits for everything submitted. */
hp_status hp__comm_stream_wait_all(hp__comm_stream *s);
/* Sequence number of the last finished submission. */
uint64_t hp__comm_stream_done(hp__comm_stream *s);
/* Seconds the worker spent running nodes, and the compute thread spent blocked in waits. */
void hp__comm_stream_times(hp__comm_stream *s, double *busy_s, double *wait_s);

#endif
