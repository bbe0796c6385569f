/*
 * hp/trace.h — the timeline recorder: spans on tracks, written as Chrome trace-event JSON (the
 * format chrome://tracing and Perfetto's JSON importer read; `hp trace-view` draws it as an SVG).
 *
 *     hp_trace *tr;
 *     HP_CHECK(hp_trace_new(NULL, &tr));                   // one rank, default capacity
 *     int compute;
 *     HP_CHECK(hp_trace_track(tr, "compute", 0, &compute));
 *     hp_trace_span s = HP_TRACE_SPAN_INIT;
 *     s.name = hp_trace_intern(tr, "blocks.0.attn.q/linear");
 *     s.kind = HP_TRACE_KIND_COMPUTE;
 *     double t0 = hp_trace_begin(tr);                       // 0, and nothing recorded, when tr is NULL
 *     run_kernel();
 *     hp_trace_end(tr, compute, t0, &s);                    // the span [t0, now) on track `compute`
 *     HP_CHECK(hp_trace_write(tr, NULL, "trace.json"));
 *     hp_trace_free(tr);
 *
 * Model. One recorder per rank (pid = rank in the file). A track is one stream of work (tid in the
 * file, named by a thread_name metadata event): the compute thread, each communication queue, the
 * point-to-point queue, each copy engine. A span is a complete event ("ph": "X") with a name, a kind
 * (the "cat" field), and optional arguments: operator, node index, step, pipeline stage,
 * micro-batch, F/B/W phase, bytes moved. Spans on one track are recorded by one thread at a time and
 * nest or follow each other (a step span contains its nodes' spans).
 *
 * Cost. Off, the instrumented code does a NULL check. On, hp_trace_end reads the clock and fills
 * one slot of the track's preallocated buffer (an atomic increment reserves it; no lock, no
 * allocation, no string copy: names are interned ids made before the hot path). A full track drops
 * further spans and counts them (hp_trace_dropped; the file says how many).
 *
 * Time. Timestamps are CLOCK_MONOTONIC seconds (hp_now_seconds) while recording. hp_trace_sync
 * aligns the ranks: after a barrier each rank estimates its clock's offset to rank 0 by
 * ping-pong (Cristian's algorithm: the round trip with the shortest delay, offset = rank 0's time
 * minus the midpoint), and rank 0's clock after a second barrier is the common origin. The file's
 * "ts" and "dur" are microseconds from that origin (without hp_trace_sync: from hp_trace_new).
 *
 * Several ranks. Each rank records locally; hp_trace_write is collective: every rank serializes its
 * own events and sends them to rank 0, which writes one file with every rank's events (one pass,
 * one rank's text in memory at a time). Nothing is written by the other ranks.
 *
 * Thread-safety: hp_trace_track and hp_trace_intern take a lock (call them before the hot path);
 * hp_trace_end/hp_trace_record may be called from any thread without a lock, one thread per track
 * at a time; hp_trace_write and hp_trace_free must not run while anything records.
 */
#ifndef HP_TRACE_H
#define HP_TRACE_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_trace hp_trace;
struct hp_comm;

/* What a span is: its "cat" in the file ("compute", "comm", "p2p", "copy", "wait", "step"), and
 * its colour in `hp trace-view`. */
typedef enum hp_trace_kind {
    HP_TRACE_KIND_COMPUTE = 0, /* a kernel, or host work on a copy engine */
    HP_TRACE_KIND_COMM,        /* a collective (all-reduce, all-gather, reduce-scatter, ...) */
    HP_TRACE_KIND_P2P,         /* a point-to-point send or receive */
    HP_TRACE_KIND_COPY,        /* a tier copy (prefetch, offload, streamed chunks) */
    HP_TRACE_KIND_WAIT,        /* the compute thread blocked on a queue or a copy */
    HP_TRACE_KIND_STEP,        /* a region of the caller: a training step, an evaluation, a checkpoint */
    HP_TRACE_KIND_COUNT
} hp_trace_kind;

/* The part of the training step a span belongs to (args.phase: "F", "B", "W", "opt"). B is the
 * input-gradient part of the backward pass and W the weight-gradient part when a pipeline schedule
 * splits them; an unsplit backward is B. */
typedef enum hp_trace_phase {
    HP_TRACE_PHASE_NONE = 0,
    HP_TRACE_PHASE_F,
    HP_TRACE_PHASE_B,
    HP_TRACE_PHASE_W,
    HP_TRACE_PHASE_OPT,
    HP_TRACE_PHASE_COUNT
} hp_trace_phase;

/* "compute", "comm", "p2p", "copy", "wait", "step"; "?" otherwise. */
const char *hp_trace_kind_name(hp_trace_kind k);
/* "", "F", "B", "W", "opt"; "?" otherwise. */
const char *hp_trace_phase_name(hp_trace_phase p);

/*
 * What a span says besides its times. Fields below 0 (names, op, node, step, stage, micro-batch,
 * bytes) are absent and not written; start from HP_TRACE_SPAN_INIT so new fields stay absent.
 */
typedef struct hp_trace_span {
    int32_t name;       /* interned id (hp_trace_intern); absent: the kind's name */
    int32_t detail;     /* interned id of a second line (scope, tiers); written as args.detail */
    int32_t op;         /* hp_op of the node; written as args.op by name */
    int32_t node;       /* node index in its graph (args.node) */
    int32_t step;       /* training step (args.step); absent: the recorder's current step */
    int16_t stage;      /* pipeline stage (args.stage) */
    int16_t microbatch; /* micro-batch (args.microbatch) */
    uint8_t kind;       /* hp_trace_kind */
    uint8_t phase;      /* hp_trace_phase (HP_TRACE_PHASE_NONE: not written) */
    double bytes;       /* bytes moved (collectives: received per rank; copies: copied) */
} hp_trace_span;
#define HP_TRACE_SPAN_INIT                                                                         \
    ((hp_trace_span){.name = -1, .detail = -1, .op = -1, .node = -1, .step = -1, .stage = -1,      \
                     .microbatch = -1, .kind = HP_TRACE_KIND_COMPUTE, .phase = HP_TRACE_PHASE_NONE,  \
                     .bytes = -1})

/* Tags a program applies to every span it records (hp/runtime.h, hp_program_opts.trace_tags): the
 * pipeline stage and micro-batch it runs (-1: none), and a phase that overrides the one derived from
 * each node's flags (NONE: derive; forward nodes F, backward B, optimizer opt). */
typedef struct hp_trace_tags {
    int stage;
    int microbatch;
    hp_trace_phase phase;
} hp_trace_tags;
#define HP_TRACE_TAGS_NONE ((hp_trace_tags){.stage = -1, .microbatch = -1, .phase = HP_TRACE_PHASE_NONE})

typedef struct hp_trace_opts {
    int rank;              /* this process's rank: the "pid" of its events */
    size_t capacity;       /* spans per track, preallocated (56 bytes each); 0: 262144 */
} hp_trace_opts;
#define HP_TRACE_OPTS_DEFAULT ((hp_trace_opts){.rank = 0, .capacity = 0})

/* A recorder (opts NULL: HP_TRACE_OPTS_DEFAULT). Its clock origin is now until hp_trace_sync.
 * Errors: HP_STATUS_INVALID_ARGUMENT for a negative rank, HP_STATUS_OUT_OF_MEMORY. */
hp_status hp_trace_new(const hp_trace_opts *opts, hp_trace **out);
/* Frees the recorder and its tracks. NULL is allowed. Nothing may record into it any more. */
void hp_trace_free(hp_trace *tr);

/*
 * The track called `name` (at most 63 bytes kept), created with an event buffer of opts.capacity
 * spans on first use; `sort` orders the tracks of a rank in viewers (thread_sort_index; the first
 * caller's value stays). *track receives its index (the "tid"). Tracks are looked up by name, so two
 * objects that never run at once (the training and the evaluation program's compute thread) may
 * share one. Errors: HP_STATUS_OUT_OF_MEMORY, HP_STATUS_INVALID_ARGUMENT past 64 tracks.
 */
hp_status hp_trace_track(hp_trace *tr, const char *name, int sort, int *track);

/* The id of string `s` (copied once; the same id for equal strings), or -1 when out of memory.
 * Spans refer to names by id so that recording copies no string. */
int32_t hp_trace_intern(hp_trace *tr, const char *s);

/* The current time in seconds on the recorder's clock (hp_now_seconds), or 0 when tr is NULL. */
double hp_trace_begin(const hp_trace *tr);

/* Records the span [t0, now) on `track`. Does nothing when tr is NULL. */
void hp_trace_end(hp_trace *tr, int track, double t0, const hp_trace_span *span);
/* Records the span [t0, t1) (seconds of hp_now_seconds; t1 >= t0) on `track`. NULL tr: nothing. */
void hp_trace_record(hp_trace *tr, int track, double t0, double t1, const hp_trace_span *span);

/* The step spans recorded from now on carry when their span.step is absent (any thread may read
 * it; the caller sets it between steps). */
void hp_trace_set_step(hp_trace *tr, int64_t step);

/*
 * Collective over `comm` (NULL or one rank: only sets the origin to now): aligns this rank's clock
 * with rank 0's (see Time above) and sets the common origin. Call it once, before recording, while
 * no other traffic uses `comm`. Errors: the communicator's.
 */
hp_status hp_trace_sync(hp_trace *tr, struct hp_comm *comm);

/*
 * Collective over `comm` (NULL: this rank alone): rank 0 writes every rank's spans to `path` as
 * {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: per rank a process_name
 * ("rank R") and process_sort_index metadata event, per track a thread_name and thread_sort_index
 * event, then one "X" event per span with name, cat, ts and dur (microseconds from the common
 * origin), pid (rank), tid (track) and args. otherData gives the ranks, the spans dropped per rank
 * and each rank's clock offset. Other ranks write nothing (`path` is read on rank 0 only). Call it
 * when nothing records. Errors (on rank 0; other ranks see only communication errors):
 * HP_STATUS_IO naming the path, HP_STATUS_OUT_OF_MEMORY, the communicator's.
 */
hp_status hp_trace_write(hp_trace *tr, struct hp_comm *comm, const char *path);

/* Spans recorded (kept) and dropped (their track was full) on this rank so far. */
uint64_t hp_trace_count(const hp_trace *tr);
uint64_t hp_trace_dropped(const hp_trace *tr);
/* This rank's rank (opts.rank). */
int hp_trace_rank(const hp_trace *tr);

#ifdef __cplusplus
}
#endif
#endif /* HP_TRACE_H */
