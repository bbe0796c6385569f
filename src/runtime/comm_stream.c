/* The communication stream: a worker thread, a FIFO ring of node arguments, sequence numbers. */
#include "runtime/comm_stream.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 1024

struct hp__comm_stream {
    hp_backend_t be;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    const hp_node_args *ring[RING];
    uint64_t submitted, done;
    bool stop;
    hp_status error;
    char message[1024];
    double busy_s, wait_s;
};

static void *worker(void *arg) {
    hp__comm_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->done == s->submitted) pthread_cond_wait(&s->cv_work, &s->mu);
        if (s->done == s->submitted && s->stop) break;
        const hp_node_args *a = s->ring[s->done % RING];
        bool skip = s->error != HP_STATUS_OK;
        pthread_mutex_unlock(&s->mu);
        double t0 = hp_now_seconds();
        hp_status st = skip ? HP_STATUS_OK : hp_backend_run_node(s->be, a);
        double dt = hp_now_seconds() - t0;
        pthread_mutex_lock(&s->mu);
        if (st != HP_STATUS_OK && s->error == HP_STATUS_OK) {
            s->error = st;
            const hp_tensor *x = a->node->n_in ? hp_graph_tensor(a->g, a->node->in[0]) : NULL;
            snprintf(s->message, sizeof s->message, "communication stream (%s of %s%%%d%s): %s", hp_op_name(a->node->op),
                     x && x->name ? "'" : "", a->node->n_in ? a->node->in[0] : -1, x && x->name ? x->name : "",
                     hp_error_message());
        }
        s->busy_s += dt;
        s->done++;
        pthread_cond_broadcast(&s->cv_done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

hp_status hp__comm_stream_new(hp_backend_t be, hp__comm_stream **out) {
    *out = NULL;
    hp__comm_stream *s = calloc(1, sizeof *s);
    if (!s) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the communication stream");
    s->be = be;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    if (pthread_create(&s->thread, NULL, worker, s) != 0) {
        free(s);
        return hp_error(HP_STATUS_INTERNAL, "cannot start the communication stream's thread");
    }
    *out = s;
    return HP_STATUS_OK;
}

void hp__comm_stream_free(hp__comm_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    free(s);
}

uint64_t hp__comm_stream_submit(hp__comm_stream *s, const hp_node_args *a) {
    pthread_mutex_lock(&s->mu);
    while (s->submitted - s->done >= RING) pthread_cond_wait(&s->cv_done, &s->mu);
    s->ring[s->submitted % RING] = a;
    uint64_t seq = ++s->submitted;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    return seq;
}

hp_status hp__comm_stream_wait(hp__comm_stream *s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    if (s->done < seq) {
        double t0 = hp_now_seconds();
        while (s->done < seq) pthread_cond_wait(&s->cv_done, &s->mu);
        s->wait_s += hp_now_seconds() - t0;
    }
    hp_status st = s->error;
    if (st != HP_STATUS_OK) hp_error(st, "%s", s->message);
    pthread_mutex_unlock(&s->mu);
    return st;
}

hp_status hp__comm_stream_wait_all(hp__comm_stream *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return hp__comm_stream_wait(s, seq);
}

uint64_t hp__comm_stream_done(hp__comm_stream *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t d = s->done;
    pthread_mutex_unlock(&s->mu);
    return d;
}

void hp__comm_stream_times(hp__comm_stream *s, double *busy_s, double *wait_s) {
    pthread_mutex_lock(&s->mu);
    *busy_s = s->busy_s;
    *wait_s = s->wait_s;
    pthread_mutex_unlock(&s->mu);
}
