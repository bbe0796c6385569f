/*
 * The CPU backend's streams and events (hp/backend.h): a stream is a worker thread (hp/worker.h),
 * an event the sequence number of the last task on its stream when recorded, as on CUDA. The NULL
 * stream is the compute stream: a copy on it runs at once on the caller and an event recorded on it
 * is complete.
 *
 * Lifetimes follow CUDA's: a stream may be freed while events recorded on it, or waits queued on
 * other streams for it, are still around. A stream is reference-counted (its handle, each event
 * recorded on it, each queued wait for it); hp_backend_stream_free drains its work and drops the
 * handle's reference, and the worker goes when the last reference does.
 */
#include "backend/cpu/cpu.h"
#include "hp/backend.h"
#include "backend/cpu/streams.h"
#include "hp/worker.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct hp_backend_stream {
    hp_worker *w;
    atomic_int refs;
};

struct hp_backend_event {
    hp_backend_stream_t s; /* a reference; NULL: never recorded, or recorded on the compute stream */
    uint64_t seq;
};

static hp_backend_stream_t stream_ref(hp_backend_stream_t s) {
    if (s) atomic_fetch_add(&s->refs, 1);
    return s;
}

/* Drops one reference; the last one frees the worker (whose work was drained by then). */
static void stream_unref(hp_backend_stream_t s) {
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
        hp_worker_free(s->w);
        free(s);
    }
}

typedef struct copy_task {
    void *dst;
    const void *src;
    size_t bytes;
} copy_task;

static hp_status copy_run(void *user, bool failed) {
    copy_task *t = user;
    if (!failed) memcpy(t->dst, t->src, t->bytes);
    free(t);
    return HP_STATUS_OK;
}

typedef struct wait_task {
    hp_backend_stream_t s; /* a reference */
    uint64_t seq;
} wait_task;

/* Waits on the stream's worker for another stream's mark; its error becomes this stream's. */
static hp_status wait_run(void *user, bool failed) {
    wait_task t = *(wait_task *)user;
    free(user);
    hp_status st = failed ? HP_STATUS_OK : hp_worker_wait(t.s->w, t.seq);
    stream_unref(t.s);
    return st;
}

hp_status hp__cpu_stream_new(hp_backend_t b, hp_backend_stream_t *out) {
    (void)b;
    *out = NULL;
    hp_backend_stream_t s = calloc(1, sizeof *s);
    if (!s) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cpu backend: out of memory for a stream");
    hp_status st = hp_worker_new(&s->w);
    if (st != HP_STATUS_OK) {
        free(s);
        return st;
    }
    atomic_init(&s->refs, 1);
    *out = s;
    return HP_STATUS_OK;
}

void hp__cpu_stream_free(hp_backend_t b, hp_backend_stream_t s) {
    (void)b;
    if (!s) return;
    (void)hp_worker_wait(s->w, hp_worker_submitted(s->w)); /* its error stays for its events */
    stream_unref(s);
}

hp_status hp__cpu_event_new(hp_backend_t b, hp_backend_event_t *out) {
    (void)b;
    *out = calloc(1, sizeof **out);
    if (!*out) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cpu backend: out of memory for an event");
    return HP_STATUS_OK;
}

void hp__cpu_event_free(hp_backend_t b, hp_backend_event_t e) {
    (void)b;
    if (!e) return;
    stream_unref(e->s);
    free(e);
}

hp_status hp__cpu_event_record(hp_backend_t b, hp_backend_event_t e, hp_backend_stream_t s) {
    (void)b;
    hp_backend_stream_t old = e->s;
    e->s = stream_ref(s);
    e->seq = s ? hp_worker_submitted(s->w) : 0;
    stream_unref(old);
    return HP_STATUS_OK;
}

hp_status hp__cpu_stream_wait_event(hp_backend_t b, hp_backend_stream_t s, hp_backend_event_t e) {
    if (!e->s || e->s == s) return HP_STATUS_OK; /* complete, or ordered by the stream itself */
    if (!s) return hp__cpu_event_synchronize(b, e); /* the compute stream waits here */
    wait_task *t = malloc(sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cpu backend: out of memory for a stream wait");
    *t = (wait_task){.s = stream_ref(e->s), .seq = e->seq};
    hp_status st = hp_worker_submit(s->w, wait_run, t, NULL);
    if (st != HP_STATUS_OK) {
        stream_unref(t->s);
        free(t);
    }
    return st;
}

hp_status hp__cpu_event_synchronize(hp_backend_t b, hp_backend_event_t e) {
    (void)b;
    return e->s ? hp_worker_wait(e->s->w, e->seq) : HP_STATUS_OK;
}

hp_status hp__cpu_memcpy_async(hp_backend_t b, void *dst, const void *src, size_t bytes, hp_copy_dir dir,
                               hp_backend_stream_t s) {
    (void)b, (void)dir; /* host memory everywhere */
    if (!s) {
        memcpy(dst, src, bytes);
        return HP_STATUS_OK;
    }
    copy_task *t = malloc(sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cpu backend: out of memory for a copy of %zu bytes", bytes);
    *t = (copy_task){.dst = dst, .src = src, .bytes = bytes};
    hp_status st = hp_worker_submit(s->w, copy_run, t, NULL);
    if (st != HP_STATUS_OK) free(t);
    return st;
}

size_t hp__cpu_workspace_bytes(hp_backend_t b, const hp_graph *g, const hp_node *n) {
    (void)b;
    return hp_op_workspace(g, n);
}
