/* The worker primitive: one thread, a growable ring of (fn, user), sequence numbers, a sticky error. */
#include "hp/worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct task {
    hp_worker_fn fn;
    void *user;
} task;

struct hp_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    task *ring;
    size_t cap;               /* a power of two */
    uint64_t submitted, done; /* task k lives at ring[(k - 1) & (cap - 1)] while done < k <= submitted */
    bool stop;
    hp_status err;
    uint64_t err_seq;
    char err_msg[1024];
    double busy_s, wait_s;
};

static void *worker_main(void *arg) {
    hp_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->done == w->submitted) pthread_cond_wait(&w->cv_work, &w->mu);
        if (w->done == w->submitted) break; /* stop, and nothing left */
        task t = w->ring[w->done & (w->cap - 1)];
        bool failed = w->err != HP_STATUS_OK;
        pthread_mutex_unlock(&w->mu);
        double t0 = hp_now_seconds();
        hp_status st = t.fn(t.user, failed);
        double dt = hp_now_seconds() - t0;
        pthread_mutex_lock(&w->mu);
        w->done++;
        if (!failed && st != HP_STATUS_OK && w->err == HP_STATUS_OK) {
            w->err = st;
            w->err_seq = w->done;
            snprintf(w->err_msg, sizeof w->err_msg, "%s", hp_error_message());
        }
        w->busy_s += dt;
        pthread_cond_broadcast(&w->cv_done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

hp_status hp_worker_new(hp_worker **out) {
    *out = NULL;
    hp_worker *w = calloc(1, sizeof *w);
    if (w) {
        w->cap = 64;
        w->ring = malloc(w->cap * sizeof *w->ring);
    }
    if (!w || !w->ring) {
        free(w);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "worker: out of memory");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv_work, NULL);
    pthread_cond_init(&w->cv_done, NULL);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        pthread_cond_destroy(&w->cv_work);
        pthread_cond_destroy(&w->cv_done);
        pthread_mutex_destroy(&w->mu);
        free(w->ring);
        free(w);
        return hp_error(HP_STATUS_INTERNAL, "worker: cannot start the thread: %s", strerror(rc));
    }
    *out = w;
    return HP_STATUS_OK;
}

void hp_worker_free(hp_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv_work);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv_work);
    pthread_cond_destroy(&w->cv_done);
    pthread_mutex_destroy(&w->mu);
    free(w->ring);
    free(w);
}

/* Doubles the ring (caller holds the lock), keeping the pending tasks at their sequence slots. */
static bool grow(hp_worker *w) {
    size_t cap = w->cap * 2;
    task *r = malloc(cap * sizeof *r);
    if (!r) return false;
    for (uint64_t k = w->done; k < w->submitted; k++) r[k & (cap - 1)] = w->ring[k & (w->cap - 1)];
    free(w->ring);
    w->ring = r;
    w->cap = cap;
    return true;
}

hp_status hp_worker_submit(hp_worker *w, hp_worker_fn fn, void *user, uint64_t *seq) {
    if (!fn) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_worker_submit: fn is NULL");
    pthread_mutex_lock(&w->mu);
    if (w->submitted - w->done >= w->cap && !grow(w)) {
        pthread_mutex_unlock(&w->mu);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_worker_submit: cannot grow the queue past %zu tasks", w->cap);
    }
    w->ring[w->submitted & (w->cap - 1)] = (task){.fn = fn, .user = user};
    uint64_t s = ++w->submitted;
    pthread_cond_signal(&w->cv_work);
    pthread_mutex_unlock(&w->mu);
    if (seq) *seq = s;
    return HP_STATUS_OK;
}

/* The status a waiter of task seq sees (caller holds the lock; the task has run). */
static hp_status status_for(hp_worker *w, uint64_t seq) {
    if (w->err != HP_STATUS_OK && w->err_seq <= seq) return hp_error(w->err, "%s", w->err_msg);
    return HP_STATUS_OK;
}

hp_status hp_worker_wait(hp_worker *w, uint64_t seq) {
    pthread_mutex_lock(&w->mu);
    if (seq > w->submitted) seq = w->submitted;
    if (w->done < seq) {
        double t0 = hp_now_seconds();
        while (w->done < seq) pthread_cond_wait(&w->cv_done, &w->mu);
        w->wait_s += hp_now_seconds() - t0;
    }
    hp_status st = status_for(w, seq);
    pthread_mutex_unlock(&w->mu);
    return st;
}

hp_status hp_worker_synchronize(hp_worker *w) { return hp_worker_wait(w, hp_worker_submitted(w)); }

hp_status hp_worker_query(hp_worker *w, uint64_t seq, bool *done) {
    pthread_mutex_lock(&w->mu);
    *done = w->done >= seq;
    hp_status st = *done ? status_for(w, seq) : HP_STATUS_OK;
    pthread_mutex_unlock(&w->mu);
    return st;
}

uint64_t hp_worker_submitted(hp_worker *w) {
    pthread_mutex_lock(&w->mu);
    uint64_t s = w->submitted;
    pthread_mutex_unlock(&w->mu);
    return s;
}

uint64_t hp_worker_done(hp_worker *w) {
    pthread_mutex_lock(&w->mu);
    uint64_t d = w->done;
    pthread_mutex_unlock(&w->mu);
    return d;
}

void hp_worker_clear_error(hp_worker *w) {
    pthread_mutex_lock(&w->mu);
    w->err = HP_STATUS_OK;
    w->err_seq = 0;
    w->err_msg[0] = '\0';
    pthread_mutex_unlock(&w->mu);
}

void hp_worker_times(hp_worker *w, double *busy_s, double *wait_s) {
    pthread_mutex_lock(&w->mu);
    if (busy_s) *busy_s = w->busy_s;
    if (wait_s) *wait_s = w->wait_s;
    pthread_mutex_unlock(&w->mu);
}

void hp_worker_reset_times(hp_worker *w) {
    pthread_mutex_lock(&w->mu);
    w->busy_s = w->wait_s = 0;
    pthread_mutex_unlock(&w->mu);
}
