/*
 * The in-process communicator: every rank is a thread of this process and collectives exchange
 * pointers through a shared group (post, barrier, read, barrier). Sends are buffered in the
 * receiver's inbox, so a send never blocks. The single-rank `self` communicator is a group of one.
 */
#include "hp/comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_msg {
    struct sim_msg *next;
    int src, tag;
    size_t bytes;
    char data[];
} sim_msg;

typedef struct sim_slot {
    const void *buf;
    const size_t *counts, *displs;
    int color, key;
} sim_slot;

typedef struct sim_group sim_group;
struct sim_group {
    int size;
    atomic_int refs;
    pthread_barrier_t bar;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sim_slot *slots;
    sim_msg **inbox;       /* per destination rank, FIFO */
    sim_group **split_out; /* per rank, written by each new group's lowest rank */
};

typedef struct sim_ctx {
    sim_group *g;
    int rank;
} sim_ctx;

typedef struct sim_recv_req {
    void *buf;
    size_t bytes;
    int src, tag;
} sim_recv_req;

static sim_group *group_new(int size) {
    sim_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->size = size;
    g->slots = calloc((size_t)size, sizeof *g->slots);
    g->inbox = calloc((size_t)size, sizeof *g->inbox);
    g->split_out = calloc((size_t)size, sizeof *g->split_out);
    if (!g->slots || !g->inbox || !g->split_out) {
        free(g->slots);
        free(g->inbox);
        free(g->split_out);
        free(g);
        return NULL;
    }
    atomic_init(&g->refs, size);
    pthread_barrier_init(&g->bar, NULL, (unsigned)size);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return g;
}

static void group_unref(sim_group *g) {
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (int r = 0; r < g->size; r++) {
        for (sim_msg *m = g->inbox[r], *n; m; m = n) {
            n = m->next;
            free(m);
        }
    }
    pthread_barrier_destroy(&g->bar);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->slots);
    free(g->inbox);
    free(g->split_out);
    free(g);
}

static void sync_all(sim_group *g) {
    if (g->size > 1) pthread_barrier_wait(&g->bar);
}

static void *copy_of(const void *p, size_t bytes) {
    void *t = malloc(bytes ? bytes : 1);
    if (t && bytes) memcpy(t, p, bytes);
    return t;
}

/* Every collective copies its send data first, so in-place calls and aliasing are safe. */
static hp_status sim_all_reduce(void *vctx, const void *sb, void *rb, size_t n, hp_dtype dt,
                                hp_reduce_op op, void **req) {
    sim_ctx *c = vctx;
    sim_group *g = c->g;
    size_t bytes = n * hp_dtype_size(dt);
    void *tmp = copy_of(sb, bytes);
    if (req) *req = NULL;
    g->slots[c->rank].buf = tmp;
    sync_all(g);
    if (tmp) {
        memcpy(rb, g->slots[0].buf, bytes);
        for (int r = 1; r < g->size; r++) hp__reduce_apply(rb, g->slots[r].buf, n, dt, op);
    }
    sync_all(g);
    free(tmp);
    return tmp ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "sim all_reduce: %zu bytes", bytes);
}

static hp_status sim_all_gather(void *vctx, const void *sb, void *rb, size_t n, hp_dtype dt, void **req) {
    sim_ctx *c = vctx;
    sim_group *g = c->g;
    size_t bytes = n * hp_dtype_size(dt);
    if (req) *req = NULL;
    g->slots[c->rank].buf = sb;
    sync_all(g);
    for (int r = 0; r < g->size; r++) memcpy((char *)rb + (size_t)r * bytes, g->slots[r].buf, bytes);
    sync_all(g);
    return HP_STATUS_OK;
}

static hp_status sim_reduce_scatter(void *vctx, const void *sb, void *rb, size_t n, hp_dtype dt,
                                    hp_reduce_op op, void **req) {
    sim_ctx *c = vctx;
    sim_group *g = c->g;
    size_t bytes = n * hp_dtype_size(dt), off = (size_t)c->rank * bytes;
    if (req) *req = NULL;
    g->slots[c->rank].buf = sb;
    sync_all(g);
    memcpy(rb, (const char *)g->slots[0].buf + off, bytes);
    for (int r = 1; r < g->size; r++)
        hp__reduce_apply(rb, (const char *)g->slots[r].buf + off, n, dt, op);
    sync_all(g);
    return HP_STATUS_OK;
}

static hp_status sim_all_to_allv(void *vctx, const void *sb, const size_t *sc, const size_t *sd,
                                 void *rb, const size_t *rc, const size_t *rd, hp_dtype dt, void **req) {
    sim_ctx *c = vctx;
    sim_group *g = c->g;
    size_t es = hp_dtype_size(dt);
    hp_status st = HP_STATUS_OK;
    if (req) *req = NULL;
    g->slots[c->rank] = (sim_slot){.buf = sb, .counts = sc, .displs = sd};
    sync_all(g);
    for (int r = 0; r < g->size; r++) {
        const sim_slot *s = &g->slots[r];
        if (s->counts[c->rank] != rc[r]) {
            if (st == HP_STATUS_OK)
                st = hp_error(HP_STATUS_COMM, "all_to_allv: rank %d sends %zu elements to rank %d, which expects %zu",
                              r, s->counts[c->rank], c->rank, rc[r]);
            continue;
        }
        memcpy((char *)rb + rd[r] * es, (const char *)s->buf + s->displs[c->rank] * es, rc[r] * es);
    }
    sync_all(g);
    return st;
}

static hp_status sim_broadcast(void *vctx, void *buf, size_t n, hp_dtype dt, int root, void **req) {
    sim_ctx *c = vctx;
    sim_group *g = c->g;
    if (req) *req = NULL;
    g->slots[c->rank].buf = buf;
    sync_all(g);
    if (c->rank != root) memcpy(buf, g->slots[root].buf, n * hp_dtype_size(dt));
    sync_all(g);
    return HP_STATUS_OK;
}

static hp_status sim_barrier(void *vctx, void **req) {
    sim_ctx *c = vctx;
    if (req) *req = NULL;
    sync_all(c->g);
    return HP_STATUS_OK;
}

static hp_status sim_send(void *vctx, const void *buf, size_t n, hp_dtype dt, int peer, int tag, void **req) {
    sim_ctx *c = vctx;
    sim_group *g = c->g;
    size_t bytes = n * hp_dtype_size(dt);
    if (req) *req = NULL;
    sim_msg *m = malloc(sizeof *m + bytes);
    if (!m) return hp_error(HP_STATUS_OUT_OF_MEMORY, "sim send of %zu bytes", bytes);
    m->next = NULL;
    m->src = c->rank;
    m->tag = tag;
    m->bytes = bytes;
    if (bytes) memcpy(m->data, buf, bytes);
    pthread_mutex_lock(&g->mu);
    sim_msg **p = &g->inbox[peer];
    while (*p) p = &(*p)->next;
    *p = m;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return HP_STATUS_OK;
}

/* Takes the first message from (src, tag) out of the inbox; blocks when `block`. */
static hp_status take(sim_ctx *c, void *buf, size_t bytes, int src, int tag, bool block, bool *got) {
    sim_group *g = c->g;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        for (sim_msg **p = &g->inbox[c->rank]; *p; p = &(*p)->next) {
            sim_msg *m = *p;
            if (m->src != src || m->tag != tag) continue;
            *p = m->next;
            pthread_mutex_unlock(&g->mu);
            *got = true;
            hp_status st = HP_STATUS_OK;
            if (m->bytes != bytes)
                st = hp_error(HP_STATUS_COMM, "recv from rank %d tag %d: message of %zu bytes, expected %zu",
                              src, tag, m->bytes, bytes);
            else if (bytes)
                memcpy(buf, m->data, bytes);
            free(m);
            return st;
        }
        if (!block || g->size == 1) break;
        pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    *got = false;
    if (block)
        return hp_error(HP_STATUS_COMM, "recv from rank %d tag %d on a single-rank communicator: no message was sent",
                        src, tag);
    return HP_STATUS_OK;
}

static hp_status sim_recv(void *vctx, void *buf, size_t n, hp_dtype dt, int peer, int tag, void **req) {
    sim_ctx *c = vctx;
    size_t bytes = n * hp_dtype_size(dt);
    if (req) {
        sim_recv_req *r = malloc(sizeof *r);
        if (!r) return hp_error(HP_STATUS_OUT_OF_MEMORY, "sim irecv request");
        *r = (sim_recv_req){.buf = buf, .bytes = bytes, .src = peer, .tag = tag};
        *req = r;
        return HP_STATUS_OK;
    }
    bool got;
    return take(c, buf, bytes, peer, tag, true, &got);
}

static hp_status sim_wait(void *vctx, void *req) {
    sim_recv_req *r = req;
    bool got;
    hp_status st = take(vctx, r->buf, r->bytes, r->src, r->tag, true, &got);
    free(r);
    return st;
}

static hp_status sim_test(void *vctx, void *req, bool *done) {
    sim_recv_req *r = req;
    hp_status st = take(vctx, r->buf, r->bytes, r->src, r->tag, false, done);
    if (*done || st != HP_STATUS_OK) free(r);
    return st;
}

static void sim_free(void *vctx) {
    sim_ctx *c = vctx;
    group_unref(c->g);
    free(c);
}

static hp_status sim_split(void *vctx, int color, int key, hp_comm **out);

static const hp_comm_i sim_iface = {
    /* .name           = */ "sim",
    /* .all_reduce     = */ sim_all_reduce,
    /* .all_gather     = */ sim_all_gather,
    /* .reduce_scatter = */ sim_reduce_scatter,
    /* .all_to_allv    = */ sim_all_to_allv,
    /* .broadcast      = */ sim_broadcast,
    /* .send           = */ sim_send,
    /* .recv           = */ sim_recv,
    /* .barrier        = */ sim_barrier,
    /* .wait           = */ sim_wait,
    /* .test           = */ sim_test,
    /* .split          = */ sim_split,
    /* .free           = */ sim_free,
    /* .world_rank     = */ NULL, /* the sim's ranks are threads of one process: no world numbering */
    /* .arrive         = */ NULL,
    /* .arrivals       = */ NULL,
    /* .fault          = */ NULL,
    /* .report_fault   = */ NULL,
    /* .cancel         = */ NULL, /* abandoned requests are leaked (hp__comm_abandoned_free) */
    /* .forget         = */ NULL,
};

static const hp_comm_i self_iface = {
    "self", sim_all_reduce, sim_all_gather, sim_reduce_scatter, sim_all_to_allv, sim_broadcast,
    sim_send, sim_recv, sim_barrier, sim_wait, sim_test, sim_split, sim_free, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
};

static hp_comm *comm_for(sim_group *g, int rank) {
    sim_ctx *c = malloc(sizeof *c);
    if (!c) {
        group_unref(g);
        hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate a communicator");
        return NULL;
    }
    c->g = g;
    c->rank = rank;
    return hp_comm_new(g->size == 1 ? &self_iface : &sim_iface, c, rank, g->size);
}

static hp_status sim_split(void *vctx, int color, int key, hp_comm **out) {
    sim_ctx *c = vctx;
    sim_group *g = c->g;
    hp_status st = HP_STATUS_OK;
    g->slots[c->rank].color = color;
    g->slots[c->rank].key = key;
    sync_all(g);
    /* Members of my colour in (key, rank) order; the lowest rank builds the group. */
    int n = 0, pos = 0, lowest = -1;
    if (color != HP_COMM_COLOR_NONE) {
        for (int r = 0; r < g->size; r++) {
            const sim_slot *s = &g->slots[r];
            if (s->color != color) continue;
            if (lowest < 0) lowest = r;
            n++;
            if (s->key < key || (s->key == key && r < c->rank)) pos++;
        }
        if (lowest == c->rank) {
            sim_group *ng = group_new(n);
            for (int r = 0; r < g->size; r++)
                if (g->slots[r].color == color) g->split_out[r] = ng;
        }
    }
    sync_all(g);
    *out = NULL;
    if (color != HP_COMM_COLOR_NONE) {
        sim_group *ng = g->split_out[c->rank];
        if (!ng) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate a split communicator");
        else if (!(*out = comm_for(ng, pos))) st = HP_STATUS_OUT_OF_MEMORY;
    }
    sync_all(g);
    return st;
}

hp_comm *hp_comm_self_new(void) {
    sim_group *g = group_new(1);
    if (!g) {
        hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate a communicator");
        return NULL;
    }
    return comm_for(g, 0);
}

/* ---------------------------------------------------------------- threads */

typedef struct sim_thread {
    pthread_t th;
    hp_comm *comm;
    int rank;
    hp_comm_sim_fn fn;
    void *user;
    hp_status st;
    char msg[1024];
} sim_thread;

static void *thread_main(void *p) {
    sim_thread *t = p;
    hp_error_clear();
    t->st = t->fn(t->comm, t->rank, t->user);
    if (t->st != HP_STATUS_OK) snprintf(t->msg, sizeof t->msg, "%s", hp_error_message());
    return NULL;
}

hp_status hp_comm_sim_run(int nranks, hp_comm_sim_fn fn, void *user) {
    if (nranks < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "sim communicator needs >= 1 rank, got %d", nranks);
    sim_group *g = group_new(nranks);
    sim_thread *t = calloc((size_t)nranks, sizeof *t);
    if (!g || !t) {
        free(t);
        if (g) {
            atomic_store(&g->refs, 1);
            group_unref(g);
        }
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate %d simulated ranks", nranks);
    }
    int made = 0;
    for (int r = 0; r < nranks; r++) {
        sim_ctx *c = malloc(sizeof *c);
        if (c) {
            c->g = g;
            c->rank = r;
            t[r].comm = hp_comm_new(&sim_iface, c, r, nranks);
        }
        if (!t[r].comm) break;
        made++;
    }
    if (made < nranks) {
        for (int r = 0; r < made; r++) hp_comm_free(t[r].comm);
        for (int r = made; r < nranks; r++) group_unref(g);
        free(t);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate %d simulated ranks", nranks);
    }
    for (int r = 0; r < nranks; r++) {
        t[r].rank = r;
        t[r].fn = fn;
        t[r].user = user;
        pthread_create(&t[r].th, NULL, thread_main, &t[r]);
    }
    hp_status st = HP_STATUS_OK;
    int bad = -1;
    for (int r = 0; r < nranks; r++) {
        pthread_join(t[r].th, NULL);
        if (t[r].st != HP_STATUS_OK && bad < 0) bad = r;
    }
    if (bad >= 0) st = hp_error(t[bad].st, "rank %d: %s", bad, t[bad].msg);
    for (int r = 0; r < nranks; r++) hp_comm_free(t[r].comm);
    free(t);
    return st;
}
