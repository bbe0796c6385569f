/*
 * Def-use chains and liveness (hp/liveness.h): one backward sweep for dead-code elimination, one
 * forward sweep to count and record uses. The interval planner lives in memplan.c.
 */
#include "hp/liveness.h"

#include <stdlib.h>
#include <string.h>

void hp_liveness_free(hp_liveness *lv) {
    if (!lv) return;
    free(lv->node_live);
    free(lv->t);
    free(lv->use_buf);
    memset(lv, 0, sizeof *lv);
}

/* The distinct tensors node n uses (reads, or writes in place), in input order; returns the count. */
static int node_uses(const hp_node *n, hp_tid *out) {
    int k = 0;
    for (int i = 0; i < n->n_in; i++) {
        hp_tid t = n->in[i];
        if (t == HP_TID_NONE) continue;
        bool dup = false;
        for (int j = 0; j < k; j++) dup |= out[j] == t;
        if (!dup) out[k++] = t;
    }
    return k;
}

hp_status hp_liveness_compute(const hp_graph *g, const hp_tid *keep, int n_keep, hp_liveness *out) {
    memset(out, 0, sizeof *out);
    if (hp_graph_status(g) != HP_STATUS_OK)
        return hp_error(hp_graph_status(g), "%s", hp_graph_error(g));
    int nt = hp_graph_n_tensors(g), nn = hp_graph_n_nodes(g);
    if (n_keep < 0 || (n_keep > 0 && !keep))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "liveness: n_keep %d with keep %p", n_keep, (const void *)keep);
    for (int k = 0; k < n_keep; k++)
        if (keep[k] < 0 || keep[k] >= nt)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "liveness: keep[%d] = %d is not a tensor id (graph has %d)",
                            k, keep[k], nt);
    out->n_tensors = nt;
    out->n_nodes = nn;
    out->node_live = calloc((size_t)nn + 1, sizeof *out->node_live);
    out->t = calloc((size_t)nt + 1, sizeof *out->t);
    bool *needed = calloc((size_t)nt + 1, 1);
    if (!out->node_live || !out->t || !needed) {
        free(needed);
        hp_liveness_free(out);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "liveness: out of memory for %d tensors, %d nodes", nt, nn);
    }
    for (int k = 0; k < n_keep; k++) {
        needed[keep[k]] = true;
        out->t[keep[k]].kept = true;
    }
    /* Dead-code elimination, walking program order backwards. */
    for (int i = nn - 1; i >= 0; i--) {
        const hp_node *n = hp_graph_node(g, i);
        /* A collective (HP_NODE_FLAG_ASYNC) is never eliminated, even when this rank does not use
         * its result: every rank must take part, or the ranks' collective sequences diverge. */
        bool live = (n->flags & (HP_NODE_FLAG_INPLACE | HP_NODE_FLAG_ASYNC)) || n->n_out == 0;
        for (int j = 0; j < n->n_out; j++) live |= needed[n->out[j]];
        out->node_live[i] = live;
        if (!live) continue;
        out->n_live_nodes++;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] != HP_TID_NONE) needed[n->in[k]] = true;
    }
    free(needed);
    /* Count uses, then lay the use lists out back to back. */
    size_t total = 0;
    hp_tid u[HP_MAX_NODE_INPUTS];
    for (int i = 0; i < nn; i++) {
        if (!out->node_live[i]) continue;
        int k = node_uses(hp_graph_node(g, i), u);
        for (int j = 0; j < k; j++) out->t[u[j]].n_uses++;
        total += (size_t)k;
    }
    out->use_buf = malloc((total + 1) * sizeof *out->use_buf);
    if (!out->use_buf) {
        hp_liveness_free(out);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "liveness: out of memory for %zu uses", total);
    }
    size_t pos = 0;
    for (int t = 0; t < nt; t++) {
        hp_tensor_liveness *l = &out->t[t];
        const hp_tensor *x = hp_graph_tensor(g, t);
        l->uses = out->use_buf + pos;
        pos += (size_t)l->n_uses;
        l->n_uses = 0; /* refilled below */
        l->def = x->producer;
        l->first_use = l->last_use = -1;
        l->persistent = x->kind != HP_TENSOR_KIND_ACTIVATION || x->producer < 0 || l->kept;
    }
    for (int i = 0; i < nn; i++) {
        if (!out->node_live[i]) continue;
        int k = node_uses(hp_graph_node(g, i), u);
        for (int j = 0; j < k; j++) {
            hp_tensor_liveness *l = &out->t[u[j]];
            out->use_buf[l->uses - out->use_buf + l->n_uses++] = i;
        }
    }
    for (int t = 0; t < nt; t++) {
        hp_tensor_liveness *l = &out->t[t];
        if (l->n_uses > 0) {
            l->first_use = l->uses[0];
            l->last_use = l->uses[l->n_uses - 1];
        }
        bool def_live = l->def >= 0 && out->node_live[l->def];
        l->live = def_live || l->n_uses > 0 || (l->kept && l->def < 0);
        if (!l->live) {
            l->start = l->end = -1;
            continue;
        }
        l->start = def_live ? l->def : (l->first_use >= 0 ? l->first_use : 0);
        l->end = l->last_use > l->start ? l->last_use : l->start;
        if (l->kept && nn > 0) l->end = nn - 1; /* read by the caller after the last node */
    }
    /* An asynchronous node (HP_NODE_FLAG_ASYNC) reads its inputs until the runtime waits for it,
     * which is where one of its outputs is first used (or the end of the step): its inputs stay
     * live until then, so the arena does not hand their bytes to another tensor too early. */
    for (int i = 0; i < nn; i++) {
        const hp_node *n = hp_graph_node(g, i);
        if (!out->node_live[i] || !(n->flags & HP_NODE_FLAG_ASYNC)) continue;
        int wait = nn - 1;
        for (int j = 0; j < n->n_out; j++) {
            const hp_tensor_liveness *o = &out->t[n->out[j]];
            if (o->first_use >= 0 && !o->kept && o->first_use < wait) wait = o->first_use;
        }
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] == HP_TID_NONE) continue;
            hp_tensor_liveness *l = &out->t[n->in[k]];
            if (l->live && l->end < wait) l->end = wait;
        }
    }
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- timeline */

#include "hp/ops.h"

double hp_node_seconds(const hp_graph *g, int i, const hp_machine_model *m) {
    if (!(m->flops_per_s > 0) || !(m->bytes_per_s > 0)) return 0.0;
    hp_op_cost c = hp_node_cost(g, i);
    double tf = c.flops / m->flops_per_s, tb = (c.bytes_read + c.bytes_written) / m->bytes_per_s;
    return tf > tb ? tf : tb;
}

hp_status hp_timeline_compute(const hp_graph *g, const hp_liveness *lv, const hp_machine_model *m, hp_timeline *out) {
    memset(out, 0, sizeof *out);
    if (lv->n_nodes != hp_graph_n_nodes(g))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "timeline: liveness has %d nodes, graph %d", lv->n_nodes,
                        hp_graph_n_nodes(g));
    out->at = calloc((size_t)lv->n_nodes + 1, sizeof *out->at);
    if (!out->at) return hp_error(HP_STATUS_OUT_OF_MEMORY, "timeline: out of memory for %d nodes", lv->n_nodes);
    out->n_nodes = lv->n_nodes;
    for (int i = 0; i < lv->n_nodes; i++)
        out->at[i + 1] = out->at[i] + (lv->node_live[i] ? hp_node_seconds(g, i, m) : 0.0);
    return HP_STATUS_OK;
}

void hp_timeline_free(hp_timeline *tl) {
    if (!tl) return;
    free(tl->at);
    memset(tl, 0, sizeof *tl);
}

double hp_liveness_gap_seconds(const hp_liveness *lv, const hp_timeline *tl, hp_tid t, int k) {
    if (t < 0 || t >= lv->n_tensors) return 0.0;
    const hp_tensor_liveness *l = &lv->t[t];
    if (k < 0 || k + 1 >= l->n_uses) return 0.0;
    return hp_timeline_between(tl, l->uses[k], l->uses[k + 1]);
}
