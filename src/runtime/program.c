/*
 * Programs: storage binding and in-order execution of a graph with the CPU kernels.
 * First version: one buffer per tensor (the liveness-planned arena replaces this).
 */
#include "hp/runtime.h"

#include "backend/cpu/cpu.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hp_program {
    const hp_graph *g;
    hp_program_opts opts;
    void **data;     /* per tensor */
    size_t *bytes;   /* per tensor allocation size (0 for none) */
    bool *live;      /* node is needed */
    void *workspace;
    hp_program_stats stats;
};

static size_t tensor_bytes(const hp_tensor *t) {
    return (size_t)hp_shape_numel(&t->shape) * hp_dtype_size(t->dtype);
}

void hp_program_free(hp_program *p) {
    if (!p) return;
    int nt = hp_graph_n_tensors(p->g);
    for (int t = 0; t < nt; t++) hp_mem_free(HP_TIER_DEVICE, p->data[t], p->bytes[t]);
    hp_mem_free(HP_TIER_DEVICE, p->workspace, p->stats.workspace_bytes);
    free(p->data);
    free(p->bytes);
    free(p->live);
    free(p);
}

hp_status hp_program_new(const hp_graph *g, const hp_program_opts *opts, hp_program **out) {
    *out = NULL;
    HP_CHECK(hp_graph_verify(g));
    hp_program *p = calloc(1, sizeof *p);
    int nt = hp_graph_n_tensors(g), nn = hp_graph_n_nodes(g);
    if (!p) return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory");
    p->g = g;
    p->opts = opts ? *opts : HP_PROGRAM_OPTS_DEFAULT;
    p->data = calloc((size_t)nt, sizeof *p->data);
    p->bytes = calloc((size_t)nt, sizeof *p->bytes);
    p->live = calloc((size_t)nn + 1, sizeof *p->live);
    if (!p->data || !p->bytes || !p->live) {
        hp_program_free(p);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for %d tensors", nt);
    }
    /* Dead-code elimination: a node is live if it writes in place, or some live node or the
     * caller (keep) uses one of its outputs. */
    bool *used = calloc((size_t)nt, 1);
    if (!used) {
        hp_program_free(p);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory");
    }
    for (int k = 0; k < p->opts.n_keep; k++) used[p->opts.keep[k]] = true;
    for (int i = nn - 1; i >= 0; i--) {
        const hp_node *n = hp_graph_node(g, i);
        bool live = (n->flags & HP_NODE_FLAG_INPLACE) || n->n_out == 0;
        for (int j = 0; j < n->n_out; j++) live |= used[n->out[j]];
        p->live[i] = live;
        if (live)
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] != HP_TID_NONE) used[n->in[k]] = true;
    }
    hp_status st = HP_STATUS_OK;
    for (int t = 0; t < nt; t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        bool persistent = x->kind != HP_TENSOR_KIND_ACTIVATION;
        if (!persistent && !used[t] && !(x->producer >= 0 && p->live[x->producer])) continue;
        size_t b = tensor_bytes(x);
        p->data[t] = hp_mem_alloc(HP_TIER_DEVICE, b);
        if (!p->data[t]) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: cannot allocate %zu bytes for tensor %d", b, t);
            break;
        }
        p->bytes[t] = b;
        memset(p->data[t], 0, b);
        if (persistent) p->stats.persistent_bytes += b;
        else p->stats.naive_bytes += b;
    }
    free(used);
    size_t ws = 0;
    for (int i = 0; i < nn && st == HP_STATUS_OK; i++) {
        const hp_node *n = hp_graph_node(g, i);
        const hp_op_def *d = hp__op_def(n->op);
        if (p->live[i] && d->workspace) {
            size_t w = d->workspace(g, n);
            if (w > ws) ws = w;
        }
        if (p->live[i]) p->stats.n_nodes++;
    }
    if (st == HP_STATUS_OK && ws) {
        p->workspace = hp_mem_alloc(HP_TIER_DEVICE, ws);
        if (!p->workspace) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: cannot allocate %zu bytes of workspace", ws);
        else p->stats.workspace_bytes = ws;
    }
    p->stats.arena_bytes = p->stats.naive_bytes;
    if (st != HP_STATUS_OK) {
        hp_program_free(p);
        return st;
    }
    *out = p;
    return HP_STATUS_OK;
}

void *hp_program_data(hp_program *p, hp_tid t) {
    if (t < 0 || t >= hp_graph_n_tensors(p->g)) return NULL;
    return p->data[t];
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

hp_status hp_program_run(hp_program *p) {
    const hp_graph *g = p->g;
    int nn = hp_graph_n_nodes(g);
    for (int i = 0; i < nn; i++) {
        if (!p->live[i]) continue;
        const hp_node *n = hp_graph_node(g, i);
        hp_kernel_args a;
        memset(&a, 0, sizeof a);
        a.g = g;
        a.node = n;
        for (int k = 0; k < n->n_in; k++) a.in[k] = n->in[k] == HP_TID_NONE ? NULL : p->data[n->in[k]];
        for (int j = 0; j < n->n_out; j++) a.out[j] = p->data[n->out[j]];
        a.workspace = p->workspace;
        a.workspace_bytes = p->stats.workspace_bytes;
        double t0 = p->opts.profile ? now_s() : 0;
        hp_status st = hp__cpu_kernel(n->op)(&a);
        if (st != HP_STATUS_OK)
            return hp_error_prefix(st, "node %d (%s in '%s'): ", i, hp_op_name(n->op), n->scope ? n->scope : "");
        if (p->opts.profile) {
            p->stats.op_seconds[n->op] += now_s() - t0;
            p->stats.op_calls[n->op]++;
        }
    }
    return HP_STATUS_OK;
}

void hp_program_get_stats(const hp_program *p, hp_program_stats *s) { *s = p->stats; }
