/*
 * hp/copy_engine.h — the copy stream of HyperOffload: asynchronous copies between tiers, events,
 * statistics, and a chunked streaming helper for the optimizer step over offloaded states.
 *
 * The runtime has three streams per rank: compute, communication, copy (ARCHITECTURE.md). On CPU
 * the copy stream is one worker thread (a plain pthread, not an OpenMP thread: OpenMP is the compute
 * pool) that runs copy tasks in FIFO order; on CUDA it will be a cudaStream_t with cudaEvent_t.
 * Events follow CUDA's model: recording an event marks the current end of the stream; the event
 * completes when every task submitted before it has run. Prefetch while computing, then wait on the
 * event right before the data is needed (HyperParallel paper, section 3.2 "multi-level cache pipeline
 * scheduling"; ZeRO-Offload and ZeRO-Infinity overlap copies with compute the same way).
 *
 *     hp_copy_engine *ce;
 *     HP_CHECK(hp_copy_engine_new(&ce));
 *     hp_event *ev;
 *     HP_CHECK(hp_event_new(&ev));
 *     HP_CHECK(hp_copy_async(ce, hp_loc_mem(HP_TIER_DEVICE, dev), hp_loc_disk(disk, off), bytes));
 *     HP_CHECK(hp_event_record(ev, ce));
 *     compute_something_else();               // the copy runs meanwhile
 *     HP_CHECK(hp_event_wait(ev));            // HP_STATUS_IO if the read failed
 *     hp_event_free(ev);
 *     hp_copy_engine_free(ce);
 *
 * Errors are sticky, as on a CUDA stream: when a copy fails, the engine keeps its status and message
 * and skips later copies (host functions still run, so cleanups happen) until
 * hp_copy_engine_clear_error. hp_event_wait and hp_copy_engine_synchronize return the error (and set
 * the calling thread's hp_error message) when the failed copy was submitted before the event.
 *
 * Thread-safety: every function may be called from any thread. Tasks run one at a time, in
 * submission order.
 */
#ifndef HP_COPY_ENGINE_H
#define HP_COPY_ENGINE_H

#include "hp/core.h"
#include "hp/disk.h"
#include "hp/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A place where bytes live: an address on a memory tier, or an offset in a disk store. */
typedef struct hp_loc {
    hp_tier tier;    /* HP_TIER_DEVICE, HP_TIER_HOST or HP_TIER_DISK */
    void *ptr;       /* DEVICE/HOST: the address */
    hp_disk *disk;   /* DISK: the store */
    uint64_t offset; /* DISK: file offset in bytes, a multiple of HP_DISK_ALIGN */
} hp_loc;

static inline hp_loc hp_loc_mem(hp_tier tier, void *ptr) {
    hp_loc l = {tier, ptr, NULL, 0};
    return l;
}
static inline hp_loc hp_loc_disk(hp_disk *disk, uint64_t offset) {
    hp_loc l = {HP_TIER_DISK, NULL, disk, offset};
    return l;
}
/* The location `bytes` further into the same buffer or file. */
static inline hp_loc hp_loc_at(hp_loc l, size_t bytes) {
    if (l.tier == HP_TIER_DISK) l.offset += bytes;
    else l.ptr = (unsigned char *)l.ptr + bytes;
    return l;
}

typedef struct hp_copy_engine hp_copy_engine;
typedef struct hp_event hp_event;

/* Starts the copy stream's worker thread. Errors: HP_STATUS_OUT_OF_MEMORY, HP_STATUS_INTERNAL. */
hp_status hp_copy_engine_new(hp_copy_engine **out);
/* Runs every queued task, stops the worker and frees the engine. Events recorded on it must not be
 * waited on afterwards. NULL is allowed. */
void hp_copy_engine_free(hp_copy_engine *ce);

/*
 * Queues a copy of `bytes` from `src` to `dst` and returns at once. Memory to memory is a memcpy;
 * memory to/from disk is direct I/O split into 4 MiB requests kept in flight together; disk to disk
 * goes through a host staging buffer. Both ranges must stay valid, and `src` unchanged, until an
 * event recorded after this call completes. Ranges must not overlap. Disk offsets must be multiples
 * of HP_DISK_ALIGN (see hp/disk.h for lengths). Errors found at submission:
 * HP_STATUS_INVALID_ARGUMENT (NULL pointer or store, bad tier, misaligned disk offset); I/O errors
 * surface later through events.
 */
hp_status hp_copy_async(hp_copy_engine *ce, hp_loc dst, hp_loc src, size_t bytes);

/*
 * Queues a host function: `fn(user)` runs on the copy worker after every task submitted before it
 * (cudaLaunchHostFunc). It must not call back into this engine's waiting functions. Used to release
 * a source buffer once its copy is done.
 */
hp_status hp_copy_host_fn(hp_copy_engine *ce, void (*fn)(void *user), void *user);

/*
 * Queues work for the copy worker: `fn(user)` runs after every task submitted before it, like a
 * copy it is skipped once an earlier task has failed (so it never computes on data a failed read
 * left behind), and its time counts as busy time (busy_total_s). Used for an update computed
 * where the data streams (HyperOffload's deferred AdamW updates). Errors: HP_STATUS_INVALID_ARGUMENT
 * (NULL fn), HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_copy_host_task(hp_copy_engine *ce, void (*fn)(void *user), void *user);

/* Blocks until every task submitted so far has run; returns the sticky error if any. */
hp_status hp_copy_engine_synchronize(hp_copy_engine *ce);
/* Clears the sticky error so later copies run again. */
void hp_copy_engine_clear_error(hp_copy_engine *ce);

/*
 * Records every later task on track `track` of `tr` (hp/trace.h; NULL tr: stops): a copy as a span
 * named "<src tier>-><dst tier>" (kind copy, with its bytes), work queued by hp_copy_host_task as
 * "update" (kind compute); host functions are not recorded. Waits for the tasks already queued
 * first, so no span is cut in two. Errors: HP_STATUS_OUT_OF_MEMORY (interning the names).
 */
hp_status hp_copy_engine_set_trace(hp_copy_engine *ce, hp_trace *tr, int track);

/* ---------------------------------------------------------------- events */

/* A new event, not yet recorded (a wait on it returns at once). Free with hp_event_free. */
hp_status hp_event_new(hp_event **out);
/* NULL is allowed. The event must not be waited on concurrently. */
void hp_event_free(hp_event *ev);
/* Marks the current end of `ce`'s stream; re-recording moves the mark. */
hp_status hp_event_record(hp_event *ev, hp_copy_engine *ce);
/* Blocks until the event completes. Returns the engine's sticky error when the failed copy was
 * submitted before the mark (the message names the path for disk errors). Time spent blocked is
 * added to the engine's wait_s statistic. */
hp_status hp_event_wait(hp_event *ev);
/* Sets *done to whether the event has completed (true when never recorded); never blocks. Returns
 * the sticky error like hp_event_wait once done. */
hp_status hp_event_query(hp_event *ev, bool *done);

/* ---------------------------------------------------------------- statistics */

typedef struct hp_copy_stats {
    uint64_t bytes[HP_TIER_COUNT][HP_TIER_COUNT];  /* [src][dst], bytes copied successfully */
    uint64_t copies[HP_TIER_COUNT][HP_TIER_COUNT]; /* [src][dst], copy tasks run */
    double busy_s[HP_TIER_COUNT][HP_TIER_COUNT];   /* [src][dst], seconds the worker spent copying */
    double busy_total_s;  /* seconds copying, the sum of busy_s */
    double wait_s;        /* seconds callers spent blocked in hp_event_wait / synchronize */
    uint64_t tasks_done;  /* tasks run (copies, skipped copies and host functions) */
    uint64_t failed;      /* copies that failed or were skipped after a failure */
} hp_copy_stats;

/* A consistent snapshot (taken under the engine's lock). */
void hp_copy_engine_get_stats(hp_copy_engine *ce, hp_copy_stats *out);
void hp_copy_engine_reset_stats(hp_copy_engine *ce);

/*
 * Fraction of copy time hidden behind compute: 1 - wait_s / busy_total_s, clamped to [0, 1]
 * (1 when nothing was copied). A caller that blocks on an event is exposed to the copy; copy time
 * not waited for ran concurrently with the caller's work.
 */
double hp_copy_stats_hidden_fraction(const hp_copy_stats *s);

/* ---------------------------------------------------------------- chunked streaming */

/* One buffer of a streamed update (e.g. a parameter, its gradient, Adam's m and v). */
typedef struct hp_stream_buffer {
    hp_loc home;       /* where the buffer lives; numel * elem_size bytes from there */
    size_t elem_size;  /* bytes per element */
    bool write_back;   /* copy each chunk back home after the callback (false: read-only) */
} hp_stream_buffer;

/*
 * Called once per chunk, in order, on the calling thread: elements [first, first + count) of every
 * buffer, bufs[b] pointing at element `first` of buffer b in fast memory. Return HP_STATUS_OK, or an
 * error to stop the stream (it is returned by hp_copy_stream_chunks).
 */
typedef hp_status (*hp_stream_chunk_fn)(void *user, size_t chunk, size_t first, size_t count,
                                        void *const *bufs);

/*
 * Streams `nbufs` buffers of `numel` elements each through `fn` in chunks of `chunk_elems`
 * elements: the optimizer step "where the states are" of ZeRO-Offload, and ZeRO-Infinity's streaming
 * of NVMe-resident states through a bounded staging area.
 *
 * Buffers whose home tier is `staging_tier` or faster (DEVICE < HOST < DISK) are given to `fn` in
 * place. Slower buffers are staged: two staging slots per buffer of chunk_elems * elem_size bytes
 * (allocated on `staging_tier` through hp_mem_alloc, 4096-aligned, freed before return). Pipeline:
 * prefetch chunk 0; for each chunk i: queue the prefetch of chunk i+1 into the other slot, wait for
 * chunk i, run fn on chunk i, queue the write-back of chunk i (write_back buffers only). The FIFO
 * stream orders the write-back of chunk i before the prefetch of chunk i+2 into the same slot.
 * With staging_tier = HOST only disk buffers are staged (CPU optimizer over NVMe states); with
 * staging_tier = DEVICE host buffers are staged too (the GPU arrangement).
 *
 * Requirements: nbufs in [1, 64]; chunk_elems > 0; for staged disk buffers chunk_elems * elem_size
 * must be a multiple of HP_DISK_ALIGN (only the last chunk may be shorter). Returns the first error
 * of fn or of a copy; before returning, every queued copy has run. Errors:
 * HP_STATUS_INVALID_ARGUMENT naming the buffer, HP_STATUS_OUT_OF_MEMORY (staging), copy errors
 * (HP_STATUS_IO naming the path; the engine's error is then sticky), or fn's status.
 */
hp_status hp_copy_stream_chunks(hp_copy_engine *ce, const hp_stream_buffer *bufs, int nbufs,
                                size_t numel, size_t chunk_elems, hp_tier staging_tier,
                                hp_stream_chunk_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif /* HP_COPY_ENGINE_H */
