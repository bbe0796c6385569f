/*
 * Internal to src/runtime: the program's state, shared by program.c (build and run),
 * program_report.c (statistics and reports) and program_trace.c (the timeline recorder's hooks).
 */
#ifndef HP_RUNTIME_PROGRAM_INTERNAL_H
#define HP_RUNTIME_PROGRAM_INTERNAL_H

#include "hp/runtime.h"

#include "runtime/queues.h"
#include "runtime/store_internal.h"

#define HP_ARENA_ALIGN 64

struct hp_program {
    const hp_graph *g;
    hp_program_opts opts;
    hp_backend_t be;
    bool own_be;
    hp_liveness lv;
    void **data;         /* per tensor: its storage, or NULL when dead */
    size_t *bytes;       /* per tensor: its size in bytes */
    bool *own;           /* per tensor: has a buffer of its own (persistent, or reference mode) */
    size_t *offset;      /* per tensor: arena offset, SIZE_MAX when not planned */
    bool *ext;           /* per tensor: stored by opts.ext (a slower tier), not by the program */
    void *arena;
    size_t arena_alloc;  /* bytes requested for the arena */
    void *workspace;
    int n_exec;
    hp_node_args *exec;  /* bound arguments of the nodes to run, in program order */
    int32_t *exec_node;  /* their node indices */
    double *exec_flops;  /* their flops (hp_node_cost), for the profile */
    double *exec_best;   /* with opts.profile: their fastest time over the runs (s), 0 before a run */
    double *exec_seconds; /* with opts.profile: their times in the last batched run (s) */
    uint8_t *exec_kind;  /* EXEC_* below */
    hp__queues *q;       /* when some node runs asynchronously: the communication queues */
    int *queue_of;       /* per exec entry: its queue, or -1 */
    int n_flight;        /* asynchronous outputs not yet waited for: */
    const char **flight_ptr;
    size_t *flight_bytes;
    uint64_t *flight_seq;
    hp_tid *flight_tid;     /* [n_exec] the tensor each flight writes (a reader of a 0-byte output waits too) */
    int *flight_queue;   /* the producing queue, or -1 for a request started here (flight_req) */
    hp_comm_request **flight_req;
    bool compute_progress; /* HP_PROGRESS_COMPUTE in effect: asynchronous nodes start here */
    int n_complete;      /* exec entries whose instruction has a complete hook (non-blocking sends) */
    int *complete;
    bool prepared;       /* the instructions' prepare hooks have run */
    bool range_open;     /* the last run was a node range that did not reach the end and ended with
                            the pass's after_range hook: its transfers may still be in flight */
    hp_program_stats stats;
    bool dry;            /* hp_program_plan: plan and count, allocate no data */
    bool built;          /* program_build succeeded */
    hp__store_binding *binds; /* tensors bound to opts.store (store_bind) */
    int n_binds;
    int *bind_of;        /* per tensor: its index in binds, or -1 */
    bool *written;       /* while building with a store: per tensor, written in place by a live node */
    hp_trace *trace;     /* the timeline recorder (opts.trace, hp_program_set_trace); NULL: off */
    hp_trace_tags trace_tags;
    int trace_track;     /* the compute thread's track */
    hp_trace_span *trace_span; /* per exec entry: its span's fields (names interned at attach) */
    hp_trace_span trace_wait; /* the compute thread's wait spans */
    int32_t trace_record_name; /* "trace record": the recorder's own time after a batch (hp__program_trace_batch) */
    int32_t *trace_issue; /* per exec entry on a queue: the name of its issue span ("issue all_reduce") */
};

enum { EXEC_COMPUTE = 0, EXEC_ASYNC = 1, EXEC_INPLACE = 2, EXEC_VIEW = 3 };

/* Attaches `tr` (NULL: detaches; waits for the copy streams first) with `tags`: interns the nodes'
 * names, registers the compute, queue and copy tracks. Errors: the recorder's (out of memory). */
hp_status hp__program_trace_attach(hp_program *p, hp_trace *tr, const hp_trace_tags *tags);
/* Records the spans of exec entries [e0, e1) run as one batch from time t0 until now, each taking
 * exec_seconds[e], the batch's untimed time spread evenly between them. */
void hp__program_trace_batch(hp_program *p, double t0, int e0, int e1);
/* Records exec entry e's span [t0, now) on the compute track, when it ran there. */
void hp__program_trace_node(hp_program *p, int e, double t0);
/* Records the issue of queued entry e [t0, now) on the compute track (the transfer's own span is on
 * its queue's track). */
void hp__program_trace_issue(hp_program *p, int e, double t0);
/* Records a wait span [t0, now) on the compute track when it lasted 1 us or more (a wait that found
 * the work done is not worth a span). */
void hp__program_trace_wait(hp_program *p, double t0);

#endif
