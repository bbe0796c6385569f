/* The copy stream: one worker thread, a FIFO of copy tasks, events, stats, chunked streaming. */
#include "hp/copy_engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIECE ((size_t)4 << 20) /* bytes per disk request */
#define WINDOW 16               /* disk requests in flight per copy */

typedef struct task {
    struct task *next;
    uint64_t seq;
    bool is_fn;
    bool is_work; /* with is_fn: skipped after a failure, timed as busy */
    hp_loc dst, src;
    size_t bytes;
    void (*fn)(void *);
    void *user;
} task;

struct hp_copy_engine {
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    task *head, *tail;
    uint64_t submitted, completed;
    bool stop;
    hp_status err;     /* sticky */
    uint64_t err_seq;  /* task that failed first */
    char err_msg[1024];
    hp_copy_stats stats;
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

static void *worker_main(void *arg) {
    hp_copy_engine *ce = arg;
    pthread_mutex_lock(&ce->mu);
    for (;;) {
        while (!ce->head && !ce->stop) pthread_cond_wait(&ce->work_cv, &ce->mu);
        if (!ce->head && ce->stop) break;
        task *t = ce->head;
        ce->head = t->next;
        if (!ce->head) ce->tail = NULL;
        bool skip = (!t->is_fn || t->is_work) && ce->err != HP_STATUS_OK;
        pthread_mutex_unlock(&ce->mu);

        hp_status st = HP_STATUS_OK;
        double dt = 0;
        if (t->is_fn && t->is_work) {
            double t0 = hp_now_seconds();
            if (!skip) t->fn(t->user);
            dt = hp_now_seconds() - t0;
        } else if (t->is_fn) {
            t->fn(t->user);
        } else if (!skip) {
            double t0 = hp_now_seconds();
            st = run_copy(t);
            dt = hp_now_seconds() - t0;
        }

        pthread_mutex_lock(&ce->mu);
        if (t->is_work) ce->stats.busy_total_s += dt;
        if (!t->is_fn) {
            int s = t->src.tier, d = t->dst.tier;
            ce->stats.copies[s][d]++;
            ce->stats.busy_s[s][d] += dt;
            ce->stats.busy_total_s += dt;
            if (skip || st != HP_STATUS_OK) ce->stats.failed++;
            else ce->stats.bytes[s][d] += t->bytes;
            if (st != HP_STATUS_OK && ce->err == HP_STATUS_OK) {
                ce->err = st;
                ce->err_seq = t->seq;
                snprintf(ce->err_msg, sizeof ce->err_msg, "copy %s -> %s of %zu bytes: %s",
                         hp_tier_name(t->src.tier), hp_tier_name(t->dst.tier), t->bytes,
                         hp_error_message());
            }
        }
        ce->stats.tasks_done++;
        ce->completed = t->seq;
        free(t);
        pthread_cond_broadcast(&ce->done_cv);
    }
    pthread_mutex_unlock(&ce->mu);
    return NULL;
}

/* ---------------------------------------------------------------- engine */

hp_status hp_copy_engine_new(hp_copy_engine **out) {
    *out = NULL;
    hp_copy_engine *ce = calloc(1, sizeof *ce);
    if (!ce) return hp_error(HP_STATUS_OUT_OF_MEMORY, "copy engine: cannot allocate");
    pthread_mutex_init(&ce->mu, NULL);
    pthread_cond_init(&ce->work_cv, NULL);
    pthread_cond_init(&ce->done_cv, NULL);
    int rc = pthread_create(&ce->worker, NULL, worker_main, ce);
    if (rc != 0) {
        pthread_cond_destroy(&ce->work_cv);
        pthread_cond_destroy(&ce->done_cv);
        pthread_mutex_destroy(&ce->mu);
        free(ce);
        return hp_error(HP_STATUS_INTERNAL, "copy engine: cannot start the worker thread: %s",
                        strerror(rc));
    }
    *out = ce;
    return HP_STATUS_OK;
}

void hp_copy_engine_free(hp_copy_engine *ce) {
    if (!ce) return;
    pthread_mutex_lock(&ce->mu);
    ce->stop = true;
    pthread_cond_signal(&ce->work_cv);
    pthread_mutex_unlock(&ce->mu);
    pthread_join(ce->worker, NULL);
    pthread_cond_destroy(&ce->work_cv);
    pthread_cond_destroy(&ce->done_cv);
    pthread_mutex_destroy(&ce->mu);
    free(ce);
}

static hp_status enqueue(hp_copy_engine *ce, task *t) {
    pthread_mutex_lock(&ce->mu);
    t->seq = ++ce->submitted;
    if (ce->tail) ce->tail->next = t;
    else ce->head = t;
    ce->tail = t;
    pthread_cond_signal(&ce->work_cv);
    pthread_mutex_unlock(&ce->mu);
    return HP_STATUS_OK;
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
    return enqueue(ce, t);
}

hp_status hp_copy_host_fn(hp_copy_engine *ce, void (*fn)(void *user), void *user) {
    if (!fn) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_host_fn: fn is NULL");
    task *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_copy_host_fn: cannot allocate a task");
    t->is_fn = true;
    t->fn = fn;
    t->user = user;
    return enqueue(ce, t);
}

hp_status hp_copy_host_task(hp_copy_engine *ce, void (*fn)(void *user), void *user) {
    if (!fn) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_copy_host_task: fn is NULL");
    task *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_copy_host_task: cannot allocate a task");
    t->is_fn = t->is_work = true;
    t->fn = fn;
    t->user = user;
    return enqueue(ce, t);
}

/* Waits (caller holds the lock) until task `seq` has run; returns the sticky error if it applies. */
static hp_status wait_seq_locked(hp_copy_engine *ce, uint64_t seq) {
    if (ce->completed < seq) {
        double t0 = hp_now_seconds();
        while (ce->completed < seq) pthread_cond_wait(&ce->done_cv, &ce->mu);
        ce->stats.wait_s += hp_now_seconds() - t0;
    }
    if (ce->err != HP_STATUS_OK && ce->err_seq <= seq) return hp_error(ce->err, "%s", ce->err_msg);
    return HP_STATUS_OK;
}

hp_status hp_copy_engine_synchronize(hp_copy_engine *ce) {
    pthread_mutex_lock(&ce->mu);
    hp_status st = wait_seq_locked(ce, ce->submitted);
    pthread_mutex_unlock(&ce->mu);
    return st;
}

void hp_copy_engine_clear_error(hp_copy_engine *ce) {
    pthread_mutex_lock(&ce->mu);
    ce->err = HP_STATUS_OK;
    ce->err_seq = 0;
    ce->err_msg[0] = '\0';
    pthread_mutex_unlock(&ce->mu);
}

/* ---------------------------------------------------------------- events */

hp_status hp_event_new(hp_event **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_event_new: cannot allocate an event");
    return HP_STATUS_OK;
}

void hp_event_free(hp_event *ev) { free(ev); }

hp_status hp_event_record(hp_event *ev, hp_copy_engine *ce) {
    if (!ev || !ce) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_event_record: NULL event or engine");
    pthread_mutex_lock(&ce->mu);
    ev->ce = ce;
    ev->seq = ce->submitted;
    pthread_mutex_unlock(&ce->mu);
    return HP_STATUS_OK;
}

hp_status hp_event_wait(hp_event *ev) {
    if (!ev || !ev->ce) return HP_STATUS_OK;
    hp_copy_engine *ce = ev->ce;
    pthread_mutex_lock(&ce->mu);
    hp_status st = wait_seq_locked(ce, ev->seq);
    pthread_mutex_unlock(&ce->mu);
    return st;
}

hp_status hp_event_query(hp_event *ev, bool *done) {
    *done = true;
    if (!ev || !ev->ce) return HP_STATUS_OK;
    hp_copy_engine *ce = ev->ce;
    pthread_mutex_lock(&ce->mu);
    hp_status st = HP_STATUS_OK;
    *done = ce->completed >= ev->seq;
    if (*done && ce->err != HP_STATUS_OK && ce->err_seq <= ev->seq) st = hp_error(ce->err, "%s", ce->err_msg);
    pthread_mutex_unlock(&ce->mu);
    return st;
}

/* ---------------------------------------------------------------- statistics */

void hp_copy_engine_get_stats(hp_copy_engine *ce, hp_copy_stats *out) {
    pthread_mutex_lock(&ce->mu);
    *out = ce->stats;
    pthread_mutex_unlock(&ce->mu);
}

void hp_copy_engine_reset_stats(hp_copy_engine *ce) {
    pthread_mutex_lock(&ce->mu);
    memset(&ce->stats, 0, sizeof ce->stats);
    pthread_mutex_unlock(&ce->mu);
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
