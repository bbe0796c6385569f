/*
 * hp/runtime.h — compile a graph into a per-rank program and run it.
 *
 * A program binds storage to every tensor of a graph and runs its nodes in program order with the
 * backend's kernels. Persistent tensors (params, optimizer state, inputs, constants, and any
 * tensor listed in opts.keep) get their own buffers that live as long as the program; every other
 * tensor (activations, gradients) lives in one arena at an offset planned from liveness, so the
 * steady-state step allocates nothing (ggml's gallocr: reserve, then assign offsets).
 *
 *     hp_program *p;
 *     hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
 *     o.keep = &loss; o.n_keep = 1;
 *     HP_CHECK(hp_program_new(g, &o, &p));
 *     HP_CHECK(hp_program_set_input(p, tokens, batch, bytes));
 *     HP_CHECK(hp_program_run(p));
 *     float l;
 *     HP_CHECK(hp_program_get_output(p, loss, &l, sizeof l));
 *
 * hp_program_data gives the storage pointer itself; it is host memory on the CPU backend only, so
 * code that may run on another backend copies with hp_program_set_input / hp_program_get_output.
 */
#ifndef HP_RUNTIME_H
#define HP_RUNTIME_H

#include "hp/backend.h"
#include "hp/comm.h"
#include "hp/ir.h"
#include "hp/liveness.h"
#include "hp/trace.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_program hp_program;
typedef struct hp_store hp_store; /* the state store, hp/store.h */

/*
 * Storage a pass provides for some tensors (HyperOffload: tensors whose home is a slower tier, see
 * hp/offload_plan.h). The program allocates nothing for them and never plans them in the arena;
 * their data pointer is `data[t]` (host memory on HOST, NULL on DISK), which the pass's kernels
 * (prefetch, offload, streamed AdamW) interpret. set_input / get_output on them go through
 * read/write. The struct and everything it points to must outlive the program.
 */
typedef struct hp_program_ext {
    int n_tensors;          /* entries in tier[] and data[]; tensors beyond are ordinary */
    const uint8_t *tier;    /* per tensor: HP_TIER_DEVICE (ordinary) or the tier the caller owns it on */
    void *const *data;      /* per tensor with tier != DEVICE: host address, or NULL (disk) */
    size_t device_budget;   /* bytes; 0: none. hp_program_new fails with HP_STATUS_OUT_OF_MEMORY when
                               persistent + arena + workspace bytes exceed it */
    hp_status (*write)(void *user, hp_tid t, const void *src, size_t bytes); /* host -> home */
    hp_status (*read)(void *user, hp_tid t, void *dst, size_t bytes);        /* home -> host */
    hp_status (*before_run)(void *user); /* optional: checks at the start of hp_program_run */
    hp_status (*after_run)(void *user);  /* optional: waits for the copy stream at the end */
    void (*report)(void *user, FILE *f); /* optional: extra lines for hp_program_report_memory */
    void *user;
    /* optional: waits for work a run left in flight that may write tensor t (t < 0: any), e.g.
     * HyperOffload's deferred optimizer updates; returns that work's error */
    hp_status (*sync)(void *user, hp_tid t);
    /* optional: records the pass's copy streams into `tr` from now on (NULL: stops; waits for the
     * streams first), as tracks of their own (hp/trace.h) */
    hp_status (*set_trace)(void *user, hp_trace *tr);
    /* true: before_run and after_run may bracket each node range of hp_program_run_nodes (the pass
     * leaves nothing in flight across ranges that a later range's hook would miss); false: the
     * program runs only whole */
    bool per_range;
    /* optional, with per_range: called instead of after_run at the end of a node range that does
     * not reach the program's end. It may leave transfers in flight that nodes of a later range of
     * the same step wait for (HyperOffload's disk reads and writes), so the pass's work overlaps
     * whatever the caller runs between the ranges. Such transfers touch only the pass's homes and
     * arena bytes no caller reaches between ranges (inputs and kept tensors are never shared arena
     * bytes; read and write wait for them). A run that starts again at node 0 after such a range
     * (a step abandoned mid-way) calls after_run first, so it drains; so do a failed range,
     * hp_program_sync and hp_program_free. */
    hp_status (*after_range)(void *user);
} hp_program_ext;

/*
 * How the communication queues make progress (measured in docs/benchmarks.md, 2 ranks x 1 thread on
 * 2 cores):
 *   HP_PROGRESS_BLOCK    queue threads block in the library's calls (Open MPI polls: a busy core
 *                        per queue while a collective is pending);
 *   HP_PROGRESS_YIELD    queue threads test non-blocking calls and sched_yield() in between;
 *   HP_PROGRESS_SLEEP    queue threads test and sleep in between (2 us growing to 256 us);
 *   HP_PROGRESS_INORDER  no queues: transfers run in program order on the compute thread (as
 *                        sync_comm);
 *   HP_PROGRESS_COMPUTE  no queues: the compute thread starts each asynchronous transfer
 *                        non-blocking (hp_instr.start) in program order, tests the transfers in
 *                        flight after every node and waits where a result is read; a program with
 *                        an asynchronous transfer that cannot start so (a multi-step
 *                        redistribution) uses HP_PROGRESS_YIELD instead;
 *   HP_PROGRESS_AUTO     BLOCK when the cores leave one free for communication (local ranks x
 *                        (OpenMP threads + 1) <= online CPUs; local ranks from the launcher's
 *                        OMPI_COMM_WORLD_LOCAL_SIZE, else 1), else HP_PROGRESS_YIELD;
 *                        the environment variable HP_PROGRESS (block, yield, sleep, inorder,
 *                        compute) overrides it.
 */
typedef enum hp_progress {
    HP_PROGRESS_AUTO = 0,
    HP_PROGRESS_BLOCK,
    HP_PROGRESS_YIELD,
    HP_PROGRESS_SLEEP,
    HP_PROGRESS_INORDER,
    HP_PROGRESS_COMPUTE,
    HP_PROGRESS_COUNT
} hp_progress;

/* "auto", "block", "yield", "sleep", "inorder", "compute"; "?" otherwise. */
const char *hp_progress_name(hp_progress p);
/* The strategy AUTO chooses on this machine for this process into *out: HP_PROGRESS when set, else
 * from the cores, ranks per node and threads. HP_STATUS_INVALID_ARGUMENT naming the value when
 * HP_PROGRESS holds none of the names above (auto included). */
hp_status hp_progress_auto(hp_progress *out);

typedef struct hp_program_opts {
    const hp_tid *keep; /* activations whose values must be readable after hp_program_run */
    int n_keep;
    bool plan_memory;   /* true: activations share one liveness-planned arena; false: one buffer each */
    bool profile;       /* time every node (seconds per operator kind in the stats) */
    bool view_reshape;  /* with plan_memory: a RESHAPE output shares its input's storage (no copy)
                           when both are planned activations that no node writes in place */
    hp_backend_t backend; /* where data lives and nodes run; NULL: a CPU backend owned by the program.
                             A caller's backend is borrowed and must outlive the program. */
    const hp_program_ext *ext; /* tensors stored by a pass (HyperOffload); NULL: none */
    bool sync_comm;     /* run HP_NODE_FLAG_ASYNC nodes (collectives) in program order on the
                           compute thread instead of the communication queues (no overlap) */
    bool node_by_node;  /* dispatch nodes one at a time even where the backend can run the whole
                           program as one batch (hp_backend_run_nodes: on the CPU one thread team
                           for the step instead of a parallel region per kernel). Batching is used
                           only when no node is asynchronous. */
    hp_store *store;    /* the state store (hp/store.h) the program's named PARAM and OPT_STATE tensors
                           bind to instead of buffers of their own; NULL: none. Borrowed; it must
                           outlive the program. */
    hp_progress progress; /* how asynchronous transfers make progress (HP_PROGRESS_AUTO: chosen from the
                             cores; see hp_progress) */
    hp_trace *trace;    /* the timeline recorder (hp/trace.h) every run records into; NULL: off (a NULL
                           check per node). Borrowed; see hp_program_set_trace for what is recorded. */
    hp_trace_tags trace_tags; /* pipeline stage, micro-batch and phase override of the spans */
} hp_program_opts;
#define HP_PROGRAM_OPTS_DEFAULT                                                                    \
    ((hp_program_opts){.keep = NULL, .n_keep = 0, .plan_memory = true, .profile = false,            \
                       .view_reshape = true, .backend = NULL, .ext = NULL, .sync_comm = false,      \
                       .node_by_node = false, .store = NULL, .progress = HP_PROGRESS_AUTO,          \
                       .trace = NULL, .trace_tags = HP_TRACE_TAGS_NONE})

/*
 * Compiles `g` (which must verify) into a program: computes liveness (hp/liveness.h) after
 * dead-code elimination, plans the activation arena (64-byte aligned offsets, greedy by size with
 * best fit; tensors whose lifetimes overlap never share bytes, so no node's output aliases its
 * inputs), allocates persistent buffers (zeroed), the arena and the largest kernel workspace, and
 * binds every node's pointers, so hp_program_run allocates nothing. Every persistent tensor gets
 * storage, used or not. The graph must outlive the program and must not change after this call.
 * With opts.store, named PARAM and OPT_STATE tensors bind to the store by name (the rules are in
 * hp/store.h): they use the entry's (or a view's) storage, or, where the entry lives on a slower
 * tier in another program's offload home, a buffer of the program's own that each run refreshes
 * from the home when the entry's version moved. A program that writes a bound tensor in place
 * bumps the entry's version at the start of every run.
 * Errors: the graph's sticky error; HP_STATUS_INVALID_ARGUMENT naming a bad keep id;
 * HP_STATUS_UNSUPPORTED naming a node the backend cannot run; HP_STATUS_OUT_OF_MEMORY naming the
 * bytes requested; the store's binding errors (HP_STATUS_SHAPE naming the tensor and both shapes or
 * dtypes).
 */
hp_status hp_program_new(const hp_graph *g, const hp_program_opts *opts, hp_program **out);
/* Frees all buffers. NULL is allowed. Entries of opts.store that the program's offload pass held on a
 * slower tier get their values copied into store memory first (they outlive the program). */
void hp_program_free(hp_program *p);


/*
 * Waits for work the last hp_program_run left in flight (opts.ext's sync: deferred optimizer updates
 * that finish during the next run). hp_program_data, set_input and get_output wait for what writes
 * their tensor, and hp_program_free waits for all, so callers need this only to time a run fully or
 * to see an error of that work early. Errors: the first error of that work (a disk I/O error names
 * the path). NULL is allowed.
 */
hp_status hp_program_sync(hp_program *p);

/*
 * Storage of tensor t (backend memory; host memory on the CPU backend): valid for persistent and
 * kept tensors for the program's lifetime; NULL for planned activations (their storage is reused;
 * with plan_memory false every live activation has its own buffer and it is returned), for dead
 * tensors and for ids out of range. Waits first for deferred work that writes t (hp_program_sync).
 * A tensor bound to opts.store returns the store's storage (the same pointer in every program
 * bound to that entry; a write through it is followed by hp_store_touch), or for a copy of a
 * slow-tier entry the program's own copy as of its last run.
 */
void *hp_program_data(hp_program *p, hp_tid t);

/*
 * Copies `bytes` from host memory `src` into tensor t's storage (through the backend). For a
 * tensor bound to opts.store it writes the entry and bumps its version.
 * Errors: HP_STATUS_INVALID_ARGUMENT when t is out of range or has no storage of its own (a planned
 * activation), when `bytes` differs from the tensor's size (both sizes are named), or when t is
 * bound read-only to the store (a view, or a copy of a slow-tier entry).
 */
hp_status hp_program_set_input(hp_program *p, hp_tid t, const void *src, size_t bytes);
/* Copies tensor t's storage into host memory `dst`; the same checks as hp_program_set_input. */
hp_status hp_program_get_output(hp_program *p, hp_tid t, void *dst, size_t bytes);

/*
 * Runs every live node once in program order and waits for the backend. Allocates nothing.
 * Errors: the first kernel error, prefixed with the node index, operator and scope.
 */
hp_status hp_program_run(hp_program *p);

/*
 * Records every later run into `tr` (NULL: stops recording), with `tags` (NULL: HP_TRACE_TAGS_NONE)
 * on every span; the same as opts.trace and opts.trace_tags at hp_program_new. Each run records on
 * the track "compute" one span per node the compute thread runs (name: the operator, or the
 * instruction's label such as "all_reduce"; args: op, node, detail (the parameter it reads or the
 * tensor a transfer moves, and a collective's group), phase from the node's flags or tags.phase,
 * stage and micro-batch from tags, bytes of transfer instructions), an "issue <label>" span where
 * it hands a transfer to a queue and a "wait" span where it blocks on one; each communication
 * queue records its collectives on a track of its own ("comm N (axes)"), the point-to-point queue
 * on "p2p", and a pass's copy streams (opts.ext's set_trace: HyperOffload) their copies with bytes.
 * A program whose nodes the backend runs as one batch gets each node's time from the batch
 * (spans from the batch's start, the batch's untimed time spread evenly between them so they fill
 * its wall time), then one "trace record" span for the recorder's own time, tagged as the batch's
 * last node (busy time, not idle, for a bubble read off the trace). hp_program_run_nodes records the same for its
 * range. Call it between runs; `tr` must outlive the program
 * or a later call with NULL (which waits for the copy streams). A pipeline runtime calls it before
 * each micro-batch's run to change the tags (cheap: no interning after the first call).
 * Errors: the recorder's (HP_STATUS_OUT_OF_MEMORY, more than 64 tracks).
 */
hp_status hp_program_set_trace(hp_program *p, hp_trace *tr, const hp_trace_tags *tags);

/*
 * Runs the live nodes with index in [first, last) of the program's graph, in program order, and
 * waits for them (their transfers included): one phase of a program whose nodes were ordered by
 * phase, such as a pipeline stage's forward (F), input-gradient (B) and weight-gradient (W) nodes
 * (hp/pipeline.h). Running the phases of a program in order, with any gaps between them, equals
 * hp_program_run: the arena plan covers the whole node list, so what a later phase reads stays
 * put in between (another program's runs may come between them; they own their arenas). Errors:
 * HP_STATUS_INVALID_ARGUMENT for a range outside [0, n_nodes] or first > last, or a program with
 * an offload pass whose hooks run per whole step (hp_program_ext.per_range false: a disk tier or
 * deferred updates); then hp_program_run's errors. With per_range, each range runs the pass's
 * before_run and after_run (its copies drain at the end of each range), or, for a range that does
 * not reach the end, after_range when the pass has one (HyperOffload's disk transfers keep going
 * into the next range; every transfer is waited for inside the step).
 */
hp_status hp_program_run_nodes(hp_program *p, int first, int last);

/* The program's def-use chains and liveness (owned by the program; valid for its lifetime). */
const hp_liveness *hp_program_liveness(const hp_program *p);

/*
 * Where planned activation t lives: true and its byte offset in the arena, or false when t is not
 * planned (persistent, kept, dead, or plan_memory is false). For tests and memory reports.
 */
bool hp_program_arena_offset(const hp_program *p, hp_tid t, size_t *offset);

/*
 * For diagnostics only: the arena bytes of planned activation t as the last run left them (after
 * hp_program_sync), or NULL when t is not planned. Once t died in that run its bytes may hold a
 * later tensor's (the plan reuses them), so a reader must treat what it finds as a hint: the
 * trainer names the first non-finite gradient of a failed step this way.
 */
void *hp_program_arena_peek(hp_program *p, hp_tid t);

typedef struct hp_program_stats {
    size_t persistent_bytes; /* params, optimizer state, inputs, kept tensors: the program's own buffers
                                (tensors bound to opts.store are in store_bytes instead) */
    size_t store_bytes;      /* bytes of tensors that use the state store's storage (an entry or a
                                view): counted by the store (hp_store_get_stats), not here */
    size_t arena_bytes;      /* the planned activation arena */
    size_t workspace_bytes;  /* the largest kernel scratch */
    size_t naive_bytes;      /* what the activations would take with one buffer each */
    size_t peak_live_bytes;  /* the most planned bytes live at one node: a lower bound for arena_bytes */
    int n_nodes;             /* nodes run per step (after dead-code elimination) */
    double op_seconds[HP_OP_COUNT]; /* with opts.profile: accumulated time per operator kind */
    int op_calls[HP_OP_COUNT];
    double op_flops[HP_OP_COUNT];   /* with opts.profile: accumulated flops (hp_node_cost) */
    int n_runs;                     /* hp_program_run calls that succeeded */
    int n_planned;                  /* activations placed in the arena */
    int n_views;                    /* RESHAPE outputs sharing their input's storage (not run) */
    size_t ext_bytes[HP_TIER_COUNT]; /* bytes of tensors stored by opts.ext, per tier */
    size_t device_bytes;            /* persistent + arena + workspace: the program's fast-tier footprint
                                       (the offload budget is checked against this + store_bytes) */
    double comm_busy_s;             /* the communication queues' time running transfers (all runs,
                                       summed over the queues) */
    double comm_wait_s;             /* the compute thread's time blocked waiting for them: the exposed
                                       part; 1 - wait/busy is the fraction hidden behind compute */
    int n_queues;                   /* communication queues: one per collective group, one for
                                       point-to-point (0: nothing asynchronous) */
} hp_program_stats;

void hp_program_get_stats(const hp_program *p, hp_program_stats *s);

/*
 * With opts.profile: node `node`'s time in the last run (*last) and its fastest run (*best), in
 * seconds (either pointer may be NULL); in a batched run a node's time includes the team's barrier
 * after it. False (nothing written) when the node is not run (dead, a RESHAPE view) or no profiled
 * run has completed. The calibration probe (hp/calibrate.h) reads per-node times through it.
 */
bool hp_program_node_seconds(const hp_program *p, int node, double *last, double *best);

/*
 * What hp_program_new would build, without allocating any data: the same liveness, arena plan
 * and workspace rule, so `stats` (persistent_bytes, arena_bytes, workspace_bytes, naive_bytes,
 * peak_live_bytes, n_nodes, device_bytes) are the numbers a real program of `g` would have. For
 * planning tools (`hp plan`). Errors: as hp_program_new (including an offload budget overrun).
 */
hp_status hp_program_plan(const hp_graph *g, const hp_program_opts *opts, hp_program_stats *stats);

/*
 * Writes the profile (opts.profile) to `f`, one line per operator kind by decreasing time: calls,
 * total and per-call milliseconds, GFLOP/s from the operators' cost rules, share of the total, and
 * the "best" figures: the sum over that kind's nodes of each node's fastest run (ms per run) and the
 * GFLOP/s it gives, a figure robust to other processes sharing the cores; then the memory plan
 * (arena vs naive bytes). Without profiling it writes the memory lines only.
 * The caller owns `f`. Errors: HP_STATUS_IO when writing fails.
 */
hp_status hp_program_profile_report(const hp_program *p, FILE *f);

/*
 * Writes the memory report: the program's fast-tier bytes (persistent, arena, workspace; the
 * budget when opts.ext sets one), bytes in use and peak per tier (hp_mem_peak), and the lines of
 * opts.ext's report (copy throughput per tier pair, hidden copy fraction, disk store). Write errors
 * are ignored (the caller owns `f`).
 */
void hp_program_report_memory(const hp_program *p, FILE *f);

/* ---------------------------------------------------------------- point-to-point instructions */

/*
 * The runtime instruction of a SEND or RECV node (hp/ops.h: hp_send, hp_recv) over communicator
 * `comm`, whose rank numbers the node's peer. Asynchronous nodes run on the program's
 * point-to-point queue, in program order, so a SEND and the RECV it meets are matched by (peer,
 * tag) in issue order; collectives on other queues never delay them. A SEND starts a non-blocking
 * send (hp_comm_isend) and the runtime completes it at the end of the run (or before an in-place
 * writer), keeping its input alive until then; a RECV receives before the queue goes on (the
 * compute thread waits for it only where its output is first read). Without HP_NODE_FLAG_ASYNC (or
 * with opts.sync_comm) they run in program order on the compute thread.
 */
typedef struct hp_p2p_instr {
    hp_instr instr;
    hp_comm *comm;        /* borrowed */
    hp_comm_request *req; /* a send in flight, or NULL */
    double msg_bytes;     /* the message (the tensor sent or received), bytes: the cost model's */
} hp_p2p_instr;

/*
 * Attaches `x` (caller-owned storage that must outlive every program of g) to SEND, RECV or
 * SENDRECV node `node` of g (a SENDRECV sends non-blocking, receives, then completes its send, all
 * in its execute) and flags it HP_NODE_FLAG_INSTR, plus HP_NODE_FLAG_ASYNC when `async`. Errors:
 * HP_STATUS_INVALID_ARGUMENT for a node out of range or not a SEND/RECV/SENDRECV (naming it), a
 * NULL comm, or a peer (or SENDRECV's source) not in comm.
 */
hp_status hp_p2p_attach(hp_graph *g, int node, hp_comm *comm, bool async, hp_p2p_instr *x);

#ifdef __cplusplus
}
#endif
#endif /* HP_RUNTIME_H */
