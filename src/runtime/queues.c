/* The communication queues: one worker per collective group, one for point-to-point. */
#include "runtime/queues.h"

#include "hp/worker.h"

#include <stdio.h>
#include <stdlib.h>

/* One asynchronous entry: what its worker runs. */
typedef struct qtask {
    hp__queues *q;
    const hp_node_args *a;
    int e, k; /* entry index, queue */
} qtask;

struct hp__queues {
    hp_comm_wait_mode wait; /* how the workers' threads wait in communicator calls */
    int n;
    hp_worker **w;
    bool *p2p;
    int *first;             /* per queue: its first entry */
    const hp_node_args *base; /* the entries (hp__queues_new's a) */
    qtask *task;            /* per entry */
    hp_trace *trace;        /* NULL: not recording */
    const hp_trace_span *span; /* per entry */
    int *track;             /* per queue: its track in `trace` */
};

/* One instruction on its queue's worker; skipped after an earlier failure of that queue. */
static hp_status run_task(void *user, bool failed) {
    const qtask *t = user;
    const hp_node_args *a = t->a;
    if (failed) return HP_STATUS_OK;
    hp_instr *x = hp_node_instr(a->node);
    hp_trace *tr = t->q->trace;
    double t0 = hp_trace_begin(tr);
    hp_status st = x->execute(x, a, NULL);
    if (tr) hp_trace_end(tr, t->q->track[t->k], t0, &t->q->span[t->e]);
    if (st == HP_STATUS_OK) return st;
    const hp_tensor *in = a->node->n_in ? hp_graph_tensor(a->g, a->node->in[0]) : NULL;
    return hp_error_prefix(st, "%s queue (%s of %s%s%s): ", x->queue == HP_QUEUE_P2P ? "point-to-point" : "collective",
                           hp_op_name(a->node->op), in && in->name ? "'" : "", in && in->name ? in->name : "input",
                           in && in->name ? "'" : "");
}

static int find(int *parent, int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
}

/* Whether two collective instructions share a communicator: the same group, overlapping axes. */
static bool overlap(const hp_instr *x, const hp_instr *y) {
    if (x->group != y->group) return false;
    return x->axes == 0 || y->axes == 0 || (x->axes & y->axes) != 0;
}

hp_status hp__queues_new(const hp_node_args *a, const bool *async, int n, int *queue_of, hp__queues **out) {
    *out = NULL;
    int n_async = 0;
    for (int e = 0; e < n; e++) {
        queue_of[e] = -1;
        if (!async[e]) continue;
        const hp_instr *x = hp_node_instr(a[e].node);
        if (!x || !x->execute || (x->queue != HP_QUEUE_COLLECTIVE && x->queue != HP_QUEUE_P2P))
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "program: asynchronous %s node without a collective or point-to-point instruction",
                            hp_op_name(a[e].node->op));
        n_async++;
    }
    if (!n_async) return HP_STATUS_OK;
    /* Union-find over the asynchronous entries: collectives that share a communicator, and every
     * point-to-point transfer, end in one set each. Entries are few (one per collective). */
    int *parent = malloc((size_t)n * sizeof *parent);
    int *root_queue = malloc((size_t)n * sizeof *root_queue);
    hp__queues *q = calloc(1, sizeof *q);
    hp_status st = HP_STATUS_OK;
    if (!parent || !root_queue || !q) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for the communication queues");
        goto fail;
    }
    for (int e = 0; e < n; e++) {
        parent[e] = e;
        root_queue[e] = -1;
    }
    int first_p2p = -1;
    for (int e = 0; e < n; e++) {
        if (!async[e]) continue;
        const hp_instr *x = hp_node_instr(a[e].node);
        if (x->queue == HP_QUEUE_P2P) {
            if (first_p2p < 0) first_p2p = e;
            else parent[find(parent, e)] = find(parent, first_p2p);
            continue;
        }
        for (int f = 0; f < e; f++) {
            if (!async[f]) continue;
            const hp_instr *y = hp_node_instr(a[f].node);
            if (y->queue == HP_QUEUE_COLLECTIVE && find(parent, f) != find(parent, e) && overlap(x, y))
                parent[find(parent, e)] = find(parent, f);
        }
    }
    q->w = calloc((size_t)n_async, sizeof *q->w);
    q->p2p = calloc((size_t)n_async, sizeof *q->p2p);
    q->first = calloc((size_t)n_async, sizeof *q->first);
    q->track = calloc((size_t)n_async, sizeof *q->track);
    q->task = calloc((size_t)n, sizeof *q->task);
    q->base = a;
    if (!q->w || !q->p2p || !q->first || !q->track || !q->task) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for the communication queues");
        goto fail;
    }
    for (int e = 0; e < n; e++) {
        if (!async[e]) continue;
        int r = find(parent, e);
        if (root_queue[r] < 0) {
            root_queue[r] = q->n;
            q->p2p[q->n] = hp_node_instr(a[e].node)->queue == HP_QUEUE_P2P;
            q->first[q->n] = e;
            HP_CHECK_GOTO(hp_worker_new(&q->w[q->n]), st, fail);
            q->n++;
        }
        queue_of[e] = root_queue[r];
        q->task[e] = (qtask){q, &a[e], e, root_queue[r]};
    }
    free(parent);
    free(root_queue);
    *out = q;
    return HP_STATUS_OK;
fail:
    free(parent);
    free(root_queue);
    hp__queues_free(q);
    return st;
}

/* Sets the worker thread's wait mode (a thread-local of the communicator layer). */
static hp_status set_wait_task(void *user, bool failed) {
    (void)failed;
    hp_comm_set_thread_wait(((const hp__queues *)user)->wait);
    return HP_STATUS_OK;
}

void hp__queues_set_wait(hp__queues *q, hp_comm_wait_mode mode) {
    if (!q || q->wait == mode) return;
    q->wait = mode;
    for (int k = 0; k < q->n; k++) (void)hp_worker_submit(q->w[k], set_wait_task, q, NULL);
}

void hp__queues_free(hp__queues *q) {
    if (!q) return;
    for (int k = 0; k < q->n; k++) hp_worker_free(q->w[k]);
    free(q->w);
    free(q->p2p);
    free(q->first);
    free(q->track);
    free(q->task);
    free(q);
}

int hp__queues_count(const hp__queues *q) { return q ? q->n : 0; }

bool hp__queues_is_p2p(const hp__queues *q, int k) { return q->p2p[k]; }

hp_status hp__queues_submit(hp__queues *q, int k, const hp_node_args *a, uint64_t *seq) {
    qtask *t = &q->task[a - q->base];
    HP_ASSERT(t->a == a && t->k == k);
    return hp_worker_submit(q->w[k], run_task, t, seq);
}

hp_status hp__queues_set_trace(hp__queues *q, hp_trace *tr, const hp_trace_span *span) {
    if (!q) return HP_STATUS_OK;
    for (int k = 0; k < q->n && tr; k++) {
        const hp_instr *x = hp_node_instr(q->base[q->first[k]].node);
        char name[64];
        if (q->p2p[k]) snprintf(name, sizeof name, "p2p");
        else if (x->group_name) snprintf(name, sizeof name, "comm %d (%s)", k, x->group_name);
        else snprintf(name, sizeof name, "comm %d", k);
        HP_CHECK(hp_trace_track(tr, name, q->p2p[k] ? 30 : 10 + k, &q->track[k]));
    }
    q->trace = tr;
    q->span = span;
    return HP_STATUS_OK;
}

hp_status hp__queues_wait(hp__queues *q, int k, uint64_t seq) { return hp_worker_wait(q->w[k], seq); }

hp_status hp__queues_wait_all(hp__queues *q) {
    hp_first_error fe = {HP_STATUS_OK, ""};
    for (int k = 0; k < q->n; k++) hp_first_error_add(&fe, hp_worker_synchronize(q->w[k]));
    return hp_first_error_status(&fe);
}

void hp__queues_clear_errors(hp__queues *q) {
    for (int k = 0; q && k < q->n; k++) hp_worker_clear_error(q->w[k]);
}

void hp__queues_times(hp__queues *q, double *busy_s, double *wait_s) {
    *busy_s = *wait_s = 0;
    for (int k = 0; k < q->n; k++) {
        double b, w;
        hp_worker_times(q->w[k], &b, &w);
        *busy_s += b;
        *wait_s += w;
    }
}
