/* The copy stream: copy tasks on a worker (hp/worker.h), events, stats, chunked streaming. */
#include "hp/copy_engine.h"
#include "hp/worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIECE ((size_t)4 << 20) /* bytes per disk request */
#define WINDOW 16               /* disk requests in flight per copy */

typedef struct task {
    hp_copy_engine *ce;
    hp_loc dst, src;
    size_t bytes;
    void (*fn)(void *);
    void *user;
} task;

/* The copy stream is a worker (hp/worker.h) plus the copy statistics. */
struct hp_copy_engine {
    hp_worker *w;
    pthread_mutex_t mu; /* guards stats */
    hp_copy_stats stats;
    _Atomic(hp_trace *) trace; /* NULL: not recording (hp_copy_engine_set_trace) */
    int track;
    hp_trace_span span[HP_TIER_COUNT][HP_TIER_COUNT]; /* [src][dst]: a copy's span fields */
    hp_trace_span update; /* a host task's */
};

struct hp_event {
    hp_copy_engine *ce; /* NULL: never recorded */
    uint64_t seq;
};

/* ---------------------------------------------------------------- copies (worker side) */

/* Memory <-> disk in PIECE-sized requests, WINDOW of them in flight. */
static hp_status copy_mem_disk(hp_disk *d, uint64_t off, unsigned char *mem, size_t bytes, bool write) {
    uint64_t ids[WINDOW];
    size_t npieces = (bytes + PIECE - 1) / PIECE;
    size_t head = 0, tail = 0; /* pieces submitted / waited */
    hp_status st = HP_STATUS_OK;
    while (tail < npieces) {
        while (st == HP_STATUS_OK && head < npieces && head - tail < WINDOW) {
            size_t o = head * PIECE, n = bytes - o < PIECE ? bytes - o : PIECE;
            st = write ? hp_disk_write_async(d, off + o, mem + o, n, &ids[head % WINDOW])
                       : hp_disk_read_async(d, off + o, mem + o, n, &ids[head % WINDOW]);
            if (st == HP_STATUS_OK) head++;
        }
        if (tail == head) break; /* submission failed with nothing in flight */
        hp_status s2 = hp_disk_wait(d, ids[tail % WINDOW]);
        if (st == HP_STATUS_OK) st = s2;
        tail++;
        if (st != HP_STATUS_OK && tail == head) break;
    }
    return st;
}

static hp_status run_copy(const task *t) {
    const hp_loc *dst = &t->dst, *src = &t->src;
    if (src->tier != HP_TIER_DISK && dst->tier != HP_TIER_DISK) {
        memcpy(dst->ptr, src->ptr, t->bytes);
        return HP_STATUS_OK;
    }
    if (src->tier != HP_TIER_DISK) return copy_mem_disk(dst->disk, dst->offset, src->ptr, t->bytes, true);
    if (dst->tier != HP_TIER_DISK) return copy_mem_disk(src->disk, src->offset, dst->ptr, t->bytes, false);
    /* Disk to disk through a staging buffer on the host tier. */
    size_t stage = t->bytes < PIECE ? t->bytes : PIECE;
    size_t stage_alloc = ((stage + HP_DISK_ALIGN - 1) & ~(size_t)(HP_DISK_ALIGN - 1)) + HP_DISK_ALIGN;
    unsigned char *raw = hp_mem_alloc(HP_TIER_HOST, stage_alloc);
    if (!raw) return HP_STATUS_OUT_OF_MEMORY;
    unsigned char *buf =
        (unsigned char *)(((uintptr_t)raw + HP_DISK_ALIGN - 1) & ~(uintptr_t)(HP_DISK_ALIGN - 1));
    hp_status st = HP_STATUS_OK;
    for (size_t o = 0; o < t->bytes && st == HP_STATUS_OK; o += PIECE) {
        size_t n = t->bytes - o < PIECE ? t->bytes - o : PIECE;
        st = hp_disk_read(src->disk, src->offset + o, buf, n);
        if (st == HP_STATUS_OK) st = hp_disk_write(dst->disk, dst->offset + o, buf, n);
    }
    hp_mem_free(HP_TIER_HOST, raw, stage_alloc);
    return st;
}

/* A copy task on the worker: skipped (counted as failed) after an earlier failure. */
static hp_status copy_task(void *user, bool failed) {
    task *t = user;
    hp_copy_engine *ce = t->ce;
    hp_status st = HP_STATUS_OK;
    double t0 = hp_now_seconds();
    if (!failed) st = run_copy(t);
    double dt = hp_now_seconds() - t0;
    int s = t->src.tier, d = t->dst.tier;
    hp_trace *tr = atomic_load_explicit(&ce->trace, memory_order_acquire);
    if (tr && !failed) {
        hp_trace_span sp = ce->span[s][d];
        sp.bytes = (double)t->bytes;
        hp_trace_record(tr, ce->track, t0, t0 + dt, &sp);
    }
    pthread_mutex_lock(&ce->mu);
    ce->stats.copies[s][d]++;
    ce->stats.busy_s[s][d] += dt;
    ce->stats.busy_total_s += dt;
    if (failed || st != HP_STATUS_OK) ce->stats.failed++;
    else ce->stats.bytes[s][d] += t->bytes;
    ce->stats.tasks_done++;
    pthread_mutex_unlock(&ce->mu);
    if (st != HP_STATUS_OK)
        st = hp_error_prefix(st, "copy %s -> %s of %zu bytes: ", hp_tier_name(t->src.tier), hp_tier_name(t->dst.tier),
                             t->bytes);
    free(t);
    return st;
}

/* A host function: runs even after a failure (it releases buffers). */
static hp_status host_fn_task(void *user, bool failed) {
    (void)failed;
    task *t = user;
    t->fn(t->user);
    pthread_mutex_lock(&t->ce->mu);
    t->ce->stats.tasks_done++;
    pthread_mutex_unlock(&t->ce->mu);
    free(t);
    return HP_STATUS_OK;
}

/* Work for the worker: skipped after a failure, timed as busy. */
static hp_status host_work_task(void *user, bool failed) {
    task *t = user;
    double t0 = hp_now_seconds();
    if (!failed) t->fn(t->user);
    double dt = hp_now_seconds() - t0;
    hp_trace *tr = atomic_load_explicit(&t->ce->trace, memory_order_acquire);
    if (tr && !failed) hp_trace_record(tr, t->ce->track, t0, t0 + dt, &t->ce->update);
    pthread_mutex_lock(&t->ce->mu);
    t->ce->stats.busy_total_s += dt;
    t->ce->stats.tasks_done++;
    pthread_mutex_unlock(&t->ce->mu);
    free(t);
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- engine */

hp_status hp_copy_engine_new(hp_copy_engine **out) {
    *out = NULL;
    hp_copy_engine *ce = calloc(1, sizeof *ce);
    if (!ce) return hp_error(HP_STATUS_OUT_OF_MEMORY, "copy engine: cannot allocate");
    hp_status st = hp_worker_new(&ce->w);
    if (st != HP_STATUS_OK) {
        free(ce);
        return hp_error_prefix(st, "copy engine: ");
    }
    pthread_mutex_init(&ce->mu, NULL);
    *out = ce;
    return HP_STATUS_OK;
}

void hp_copy_engine_free(hp_copy_engine *ce) {
    if (!ce) return;
    hp_worker_free(ce->w); /* runs what is queued first */
    pthread_mutex_destroy(&ce->mu);
    free(ce);
}

static hp_status enqueue(hp_copy_engine *ce, task *t, hp_worker_fn fn) {
    t->ce = ce;
    hp_status st = hp_worker_submit(ce->w, fn, t, NULL);
    if (st != HP_STATUS_OK) free(t);
    return st;
}

static hp_status check_loc(const hp_loc *l, const char *which) {
    if ((int)l->tier < 0 || l->tier >= HP_TIER_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_async: %s tier %d is not a tier", which,
                        (int)l->tier);
    if (l->tier == HP_TIER_DISK) {
        if (!l->disk)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_async: %s is on disk with no store", which);
        if (l->offset % HP_DISK_ALIGN != 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "hp_copy_async: %s disk offset %llu is not a multiple of %u", which,
                            (unsigned long long)l->offset, HP_DISK_ALIGN);
    } else if (!l->ptr) {
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_async: %s %s pointer is NULL", which,
                        hp_tier_name(l->tier));
    }
    return HP_STATUS_OK;
}

hp_status hp_copy_async(hp_copy_engine *ce, hp_loc dst, hp_loc src, size_t bytes) {
    HP_CHECK(check_loc(&dst, "destination"));
    HP_CHECK(check_loc(&src, "source"));
    if (bytes == 0) return HP_STATUS_OK;
    task *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_copy_async: cannot allocate a task");
    t->dst = dst;
    t->src = src;
    t->bytes = bytes;
    return enqueue(ce, t, copy_task);
}

hp_status hp_copy_host_fn(hp_copy_engine *ce, void (*fn)(void *user), void *user) {
    if (!fn) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_host_fn: fn is NULL");
    task *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_copy_host_fn: cannot allocate a task");
    t->fn = fn;
    t->user = user;
    return enqueue(ce, t, host_fn_task);
}

hp_status hp_copy_host_task(hp_copy_engine *ce, void (*fn)(void *user), void *user) {
    if (!fn) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_host_task: fn is NULL");
    task *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_copy_host_task: cannot allocate a task");
    t->fn = fn;
    t->user = user;
    return enqueue(ce, t, host_work_task);
}

hp_status hp_copy_engine_synchronize(hp_copy_engine *ce) { return hp_worker_synchronize(ce->w); }

hp_status hp_copy_engine_set_trace(hp_copy_engine *ce, hp_trace *tr, int track) {
    (void)hp_worker_synchronize(ce->w); /* a copy's error stays sticky for its waiter */
    if (tr) {
        for (int s = 0; s < HP_TIER_COUNT; s++)
            for (int d = 0; d < HP_TIER_COUNT; d++) {
                char name[48];
                snprintf(name, sizeof name, "%s->%s", hp_tier_name((hp_tier)s), hp_tier_name((hp_tier)d));
                hp_trace_span *sp = &ce->span[s][d];
                *sp = HP_TRACE_SPAN_INIT;
                sp->kind = HP_TRACE_KIND_COPY;
                sp->name = hp_trace_intern(tr, name);
                if (sp->name < 0) return hp_error(HP_STATUS_OUT_OF_MEMORY, "copy engine: out of memory for trace names");
            }
        ce->update = HP_TRACE_SPAN_INIT;
        ce->update.name = hp_trace_intern(tr, "update");
        ce->update.phase = HP_TRACE_PHASE_OPT;
        ce->track = track;
    }
    atomic_store_explicit(&ce->trace, tr, memory_order_release);
    return HP_STATUS_OK;
}

void hp_copy_engine_clear_error(hp_copy_engine *ce) { hp_worker_clear_error(ce->w); }

/* ---------------------------------------------------------------- events */

hp_status hp_event_new(hp_event **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_event_new: cannot allocate an event");
    return HP_STATUS_OK;
}

void hp_event_free(hp_event *ev) { free(ev); }

hp_status hp_event_record(hp_event *ev, hp_copy_engine *ce) {
    if (!ev || !ce) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_event_record: NULL event or engine");
    ev->ce = ce;
    ev->seq = hp_worker_submitted(ce->w);
    return HP_STATUS_OK;
}

hp_status hp_event_wait(hp_event *ev) {
    if (!ev || !ev->ce) return HP_STATUS_OK;
    return hp_worker_wait(ev->ce->w, ev->seq);
}

hp_status hp_event_query(hp_event *ev, bool *done) {
    *done = true;
    if (!ev || !ev->ce) return HP_STATUS_OK;
    return hp_worker_query(ev->ce->w, ev->seq, done);
}

/* ---------------------------------------------------------------- statistics */

void hp_copy_engine_get_stats(hp_copy_engine *ce, hp_copy_stats *out) {
    pthread_mutex_lock(&ce->mu);
    *out = ce->stats;
    pthread_mutex_unlock(&ce->mu);
    hp_worker_times(ce->w, NULL, &out->wait_s);
}

void hp_copy_engine_reset_stats(hp_copy_engine *ce) {
    pthread_mutex_lock(&ce->mu);
    memset(&ce->stats, 0, sizeof ce->stats);
    pthread_mutex_unlock(&ce->mu);
    hp_worker_reset_times(ce->w);
}

double hp_copy_stats_hidden_fraction(const hp_copy_stats *s) {
    if (s->busy_total_s <= 0) return 1.0;
    double f = 1.0 - s->wait_s / s->busy_total_s;
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

/* ---------------------------------------------------------------- chunked streaming */

#define MAX_STREAM_BUFS 64

hp_status hp_copy_stream_chunks(hp_copy_engine *ce, const hp_stream_buffer *bufs, int nbufs,
                                size_t numel, size_t chunk_elems, hp_tier staging_tier,
                                hp_stream_chunk_fn fn, void *user) {
    if (nbufs < 1 || nbufs > MAX_STREAM_BUFS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_stream_chunks: nbufs %d is not in [1, %d]",
                        nbufs, MAX_STREAM_BUFS);
    if (chunk_elems == 0 || !fn)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "hp_copy_stream_chunks: chunk_elems %zu must be > 0 and fn non-NULL", chunk_elems);
    if (staging_tier != HP_TIER_DEVICE && staging_tier != HP_TIER_HOST)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "hp_copy_stream_chunks: staging tier %s is not a memory tier",
                        hp_tier_name(staging_tier));
    if (numel == 0) return HP_STATUS_OK;
    bool staged[MAX_STREAM_BUFS];
    size_t slot_bytes[MAX_STREAM_BUFS];
    size_t total_stage = 0;
    for (int b = 0; b < nbufs; b++) {
        const hp_stream_buffer *sb = &bufs[b];
        if (sb->elem_size == 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_stream_chunks: buffer %d has elem_size 0", b);
        HP_CHECK(check_loc(&sb->home, "stream buffer"));
        staged[b] = sb->home.tier > staging_tier;
        size_t cb = chunk_elems * sb->elem_size;
        if (staged[b] && sb->home.tier == HP_TIER_DISK && cb % HP_DISK_ALIGN != 0 && chunk_elems < numel)
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "hp_copy_stream_chunks: buffer %d is on disk and its chunk of %zu bytes is "
                            "not a multiple of %u",
                            b, cb, HP_DISK_ALIGN);
        if (chunk_elems > numel) cb = numel * sb->elem_size;
        slot_bytes[b] = (cb + HP_DISK_ALIGN - 1) & ~(size_t)(HP_DISK_ALIGN - 1);
        if (staged[b]) total_stage += 2 * slot_bytes[b];
    }
    unsigned char *raw = NULL, *stage = NULL;
    size_t raw_bytes = 0;
    if (total_stage > 0) {
        raw_bytes = total_stage + HP_DISK_ALIGN;
        raw = hp_mem_alloc(staging_tier, raw_bytes);
        if (!raw)
            return hp_error_prefix(HP_STATUS_OUT_OF_MEMORY, "hp_copy_stream_chunks: staging: ");
        stage = (unsigned char *)(((uintptr_t)raw + HP_DISK_ALIGN - 1) & ~(uintptr_t)(HP_DISK_ALIGN - 1));
    }
    /* slot[s][b]: staging memory of buffer b in slot s. */
    unsigned char *slot[2][MAX_STREAM_BUFS];
    size_t pos = 0;
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < nbufs; b++) {
            slot[s][b] = staged[b] ? stage + pos : NULL;
            if (staged[b]) pos += slot_bytes[b];
        }
    hp_event *ready[2] = {NULL, NULL};
    hp_status st = HP_STATUS_OK;
    HP_CHECK_GOTO(hp_event_new(&ready[0]), st, done);
    HP_CHECK_GOTO(hp_event_new(&ready[1]), st, done);

    size_t nchunks = (numel + chunk_elems - 1) / chunk_elems;
    /* Queues the prefetch of chunk c into slot c % 2 and records its event. */
#define PREFETCH(c)                                                                                \
    do {                                                                                           \
        size_t first_ = (c) * chunk_elems;                                                         \
        size_t cnt_ = numel - first_ < chunk_elems ? numel - first_ : chunk_elems;                 \
        for (int b_ = 0; b_ < nbufs && st == HP_STATUS_OK; b_++) {                                 \
            if (!staged[b_]) continue;                                                             \
            hp_loc src_ = hp_loc_at(bufs[b_].home, first_ * bufs[b_].elem_size);                   \
            st = hp_copy_async(ce, hp_loc_mem(staging_tier, slot[(c) % 2][b_]), src_,              \
                               cnt_ * bufs[b_].elem_size);                                         \
        }                                                                                          \
        if (st == HP_STATUS_OK) st = hp_event_record(ready[(c) % 2], ce);                          \
    } while (0)

    PREFETCH((size_t)0);
    for (size_t c = 0; c < nchunks && st == HP_STATUS_OK; c++) {
        if (c + 1 < nchunks) PREFETCH(c + 1);
        if (st != HP_STATUS_OK) break;
        st = hp_event_wait(ready[c % 2]);
        if (st != HP_STATUS_OK) break;
        size_t first = c * chunk_elems;
        size_t cnt = numel - first < chunk_elems ? numel - first : chunk_elems;
        void *ptrs[MAX_STREAM_BUFS];
        for (int b = 0; b < nbufs; b++)
            ptrs[b] = staged[b] ? (void *)slot[c % 2][b]
                                : (void *)((unsigned char *)bufs[b].home.ptr + first * bufs[b].elem_size);
        st = fn(user, c, first, cnt, ptrs);
        if (st != HP_STATUS_OK) break;
        for (int b = 0; b < nbufs && st == HP_STATUS_OK; b++) {
            if (!staged[b] || !bufs[b].write_back) continue;
            st = hp_copy_async(ce, hp_loc_at(bufs[b].home, first * bufs[b].elem_size),
                               hp_loc_mem(staging_tier, slot[c % 2][b]), cnt * bufs[b].elem_size);
        }
    }
#undef PREFETCH
    {
        /* Every queued copy must run before the staging memory is freed. */
        hp_first_error fe = {HP_STATUS_OK, ""};
        hp_first_error_add(&fe, st);
        hp_event *fin = NULL;
        hp_status s2 = hp_event_new(&fin);
        if (s2 == HP_STATUS_OK) s2 = hp_event_record(fin, ce);
        if (hp_first_error_add(&fe, s2) == HP_STATUS_OK) hp_first_error_add(&fe, hp_event_wait(fin));
        else hp_copy_engine_synchronize(ce); /* fall back to a full drain */
        hp_event_free(fin);
        st = hp_first_error_status(&fe);
    }
done:
    hp_event_free(ready[0]);
    hp_event_free(ready[1]);
    if (raw) hp_mem_free(staging_tier, raw, raw_bytes);
    return st;
}
