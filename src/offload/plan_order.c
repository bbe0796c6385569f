/*
 * The program order a residency plan gives (PREFETCH / OFFLOAD / OFFLOAD_WAIT items around the
 * nodes, shared by the planner's exact packing check and the graph rewrite) and that packing check:
 * the fast-tier arena laid out over the rewritten order.
 */
#include "offload/planner_internal.h"

#include "ir/op.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Buckets of (cand, gap) pairs per node, by counting sort. */
typedef struct bucket {
    int32_t *start; /* n + 1 */
    int32_t *ci, *gap;
} bucket;

static void bucket_free(bucket *b) {
    free(b->start);
    free(b->ci);
    free(b->gap);
}

/* what: 0 prefetch (by pre), 1 prefetch wait (by fu), 2 offload (by def), 3 offload wait (by wait),
 * 4 early read for AdamW (by spre), 5 its wait (by the AdamW node), 6 write-back wait (by swait). */
static bool bucket_build(const hp_offload_plan *p, int what, bucket *b) {
    int nn = p->n_nodes;
    b->start = calloc((size_t)nn + 2, sizeof *b->start);
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int i = 0; i < nn; i++) b->start[i + 1] += b->start[i];
            b->ci = malloc((total + 1) * sizeof *b->ci);
            b->gap = malloc((total + 1) * sizeof *b->gap);
            if (!b->ci || !b->gap) return false;
        }
        int32_t *fill = pass == 1 ? calloc((size_t)nn + 1, sizeof *fill) : NULL;
        if (!b->start || (pass == 1 && !fill)) {
            free(fill);
            return false;
        }
        for (int ci = 0; ci < p->n_cand; ci++) {
            const hp__ofl_cand *c = &p->cand[ci];
            if (!c->slow) continue;
            int lo = 0, hi = 1;
            if (what <= 1) hi = c->n_fu;
            else if (what <= 3 && c->persistent) continue;
            else if (what >= 4 && (c->spre < 0 || (what == 6 && (!c->written || p->defer_wait[c->su[0]] >= 0))))
                continue;
            for (int j = lo; j < hi; j++) {
                if (what <= 1 && !hp__ofl_gap_starts(c, j)) continue;
                int32_t at = what == 0   ? c->pre[j]
                             : what == 1 ? c->fu[j]
                             : what == 2 ? c->def
                             : what == 3 ? c->wait
                             : what == 4 ? c->spre
                             : what == 5 ? c->su[0]
                                         : c->swait;
                if (pass == 0) {
                    b->start[at + 1]++;
                    total++;
                } else {
                    int32_t k = b->start[at] + fill[at]++;
                    b->ci[k] = ci;
                    b->gap[k] = j;
                }
            }
        }
        free(fill);
    }
    return true;
}

hp_status hp__ofl_emit_order(const hp_offload_plan *p, hp__ofl_item **items, int *n_items) {
    enum { NB = 7 };
    bucket b[NB];
    memset(b, 0, sizeof b);
    bool ok = true;
    for (int k = 0; k < NB; k++) ok &= bucket_build(p, k, &b[k]);
    size_t n = (size_t)p->n_nodes + 2 * (size_t)p->n_deferred;
    for (int k = 0; k < NB && ok; k++) n += (size_t)b[k].start[p->n_nodes];
    hp__ofl_item *it = ok ? malloc((n + 1) * sizeof *it) : NULL;
    if (!it) {
        for (int k = 0; k < NB; k++) bucket_free(&b[k]);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory ordering %zu nodes", n);
    }
    static const hp__ofl_item_kind kinds[NB] = {HP__OFL_PREFETCH, HP__OFL_PWAIT,     HP__OFL_OFFLOAD, HP__OFL_OWAIT,
                                                HP__OFL_EPREFETCH, HP__OFL_EPWAIT, HP__OFL_WBWAIT};
    /* before a node: waits for deferred updates of the previous step, prefetches, early reads, then
     * their waits; after it: offloads, their waits, write-back waits (a write-back is queued by the
     * AdamW node itself); after the last node: the holds of deferred updates */
    static const int before[] = {0, 4, 1, 5}, after[] = {2, 3, 6};
    /* deferred updates by deadline node (counting sort): dw[dw_at[i] .. dw_at[i + 1]) wait before i */
    int32_t *dw_at = p->n_deferred > 0 ? calloc((size_t)p->n_nodes + 2, sizeof *dw_at) : NULL;
    int32_t *dw = p->n_deferred > 0 ? malloc((size_t)p->n_deferred * sizeof *dw) : NULL;
    if (p->n_deferred > 0 && (!dw_at || !dw)) {
        free(dw_at);
        free(dw);
        free(it);
        for (int k = 0; k < NB; k++) bucket_free(&b[k]);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory ordering %zu nodes", n);
    }
    for (int a = 0; a < p->n_nodes && dw; a++)
        if (p->defer_wait[a] >= 0) dw_at[p->defer_wait[a] + 1]++;
    for (int i = 0; i < p->n_nodes && dw; i++) dw_at[i + 1] += dw_at[i];
    for (int a = 0; a < p->n_nodes && dw; a++) /* dw_at[d] counts up to d's end while filling */
        if (p->defer_wait[a] >= 0) dw[dw_at[p->defer_wait[a]]++] = a;
    for (int i = p->n_nodes; i > 0 && dw; i--) dw_at[i] = dw_at[i - 1]; /* back to the starts */
    if (dw) dw_at[0] = 0;
    int m = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        for (int32_t q = dw ? dw_at[i] : 0; dw && q < dw_at[i + 1]; q++)
            it[m++] = (hp__ofl_item){HP__OFL_DWAIT, i, -1, dw[q]};
        for (int kk = 0; kk < 4; kk++) {
            int k = before[kk];
            for (int32_t q = b[k].start[i]; q < b[k].start[i + 1]; q++)
                it[m++] = (hp__ofl_item){kinds[k], i, b[k].ci[q], b[k].gap[q]};
        }
        it[m++] = (hp__ofl_item){HP__OFL_NODE, i, -1, -1};
        for (int kk = 0; kk < 3; kk++) {
            int k = after[kk];
            for (int32_t q = b[k].start[i]; q < b[k].start[i + 1]; q++)
                it[m++] = (hp__ofl_item){kinds[k], i, b[k].ci[q], b[k].gap[q]};
        }
    }
    for (int a = 0; a < p->n_nodes && p->n_deferred > 0; a++)
        if (p->defer_wait[a] >= 0) it[m++] = (hp__ofl_item){HP__OFL_HOLD, p->n_nodes - 1, -1, a};
    for (int k = 0; k < NB; k++) bucket_free(&b[k]);
    free(dw_at);
    free(dw);
    *items = it;
    *n_items = m;
    return HP_STATUS_OK;
}

/* Index of the first gap of each candidate in a flat per-gap array. */
size_t *hp__ofl_gap_base(const hp_offload_plan *p, size_t *total) {
    size_t *base = malloc(((size_t)p->n_cand + 1) * sizeof *base);
    if (!base) return NULL;
    size_t at = 0;
    for (int ci = 0; ci < p->n_cand; ci++) {
        base[ci] = at;
        at += (size_t)p->cand[ci].n_fu;
    }
    *total = at;
    return base;
}

/* The last fast use of the run of resident gaps that starts at gap j. */
static int32_t run_end(const hp__ofl_cand *c, int j) {
    int r = j;
    while (r + 1 < c->n_fu && !hp__ofl_gap_starts(c, r + 1)) r++;
    return c->fu[r];
}

void hp__ofl_layout_free(hp__ofl_layout *l) {
    if (!l) return;
    free(l->items);
    free(l->blocks);
    free(l->what);
    memset(l, 0, sizeof *l);
}

/* Exactly the arena the program will plan for the rewritten graph: the same blocks, in the same
 * order (tensor ids, then the prefetched copies in creation order), the same positions. */
hp_status hp__ofl_pack_layout(const hp_offload_plan *p, const hp_graph *g, size_t *device_bytes,
                              hp__ofl_layout *layout) {
    hp__ofl_item *it = NULL;
    int n_it = 0;
    HP_CHECK(hp__ofl_emit_order(p, &it, &n_it));
    size_t n_gaps = 0;
    size_t *base = hp__ofl_gap_base(p, &n_gaps);
    int32_t *pos = malloc(((size_t)p->n_nodes + 1) * sizeof *pos);
    int32_t *hold_pos = malloc(((size_t)p->n_nodes + 1) * sizeof *hold_pos);
    int32_t *pre_pos = malloc((n_gaps + 1) * sizeof *pre_pos);
    int32_t *ow_pos = malloc(((size_t)p->n_cand + 1) * sizeof *ow_pos);
    int32_t *ep_pos = malloc(((size_t)p->n_cand + 1) * sizeof *ep_pos);
    int32_t *wb_pos = malloc(((size_t)p->n_cand + 1) * sizeof *wb_pos);
    size_t max_blocks = (size_t)p->n_tensors + n_gaps + (size_t)p->n_cand + 1;
    hp_mem_interval *blocks = malloc(max_blocks * sizeof *blocks);
    int32_t *what = malloc(max_blocks * sizeof *what);
    hp_status st = HP_STATUS_OK;
    if (!base || !pos || !hold_pos || !pre_pos || !ow_pos || !ep_pos || !wb_pos || !blocks || !what) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory packing the arena");
        goto done;
    }
    for (int k = 0; k < n_it; k++) {
        const hp__ofl_item *x = &it[k];
        if (x->kind == HP__OFL_NODE) pos[x->node] = k;
        else if (x->kind == HP__OFL_PREFETCH) pre_pos[base[x->cand] + (size_t)x->gap] = k;
        else if (x->kind == HP__OFL_OWAIT) ow_pos[x->cand] = k;
        else if (x->kind == HP__OFL_EPREFETCH) ep_pos[x->cand] = k;
        else if (x->kind == HP__OFL_WBWAIT) wb_pos[x->cand] = k;
        else if (x->kind == HP__OFL_HOLD) hold_pos[x->gap] = k;
    }
    int nb = 0;
    size_t persistent = p->fixed_persistent;
    for (int t = 0; t < p->n_tensors; t++) {
        const hp_tensor_liveness *l = &p->lv.t[t];
        int ci = p->cand_of[t];
        size_t bytes = (size_t)hp_shape_numel(&hp_graph_tensor(g, t)->shape) * hp_dtype_size(hp_graph_tensor(g, t)->dtype);
        if (ci < 0 || !p->cand[ci].slow) {
            if (ci >= 0 && p->cand[ci].persistent) persistent += bytes;
            if (!l->live || l->persistent || hp_graph_tensor(g, t)->kind != HP_TENSOR_KIND_ACTIVATION) continue;
            int32_t end = p->hold_node[t] >= 0 ? hold_pos[p->hold_node[t]] : pos[l->end];
            what[nb] = t;
            blocks[nb++] = (hp_mem_interval){bytes, pos[l->start], end, 0};
            continue;
        }
        const hp__ofl_cand *c = &p->cand[ci];
        if (c->persistent) continue;
        int32_t end = ow_pos[ci];
        if (c->n_fu > 0 && !hp__ofl_gap_starts(c, 0) && pos[run_end(c, 0)] > end) end = pos[run_end(c, 0)];
        what[nb] = t;
        blocks[nb++] = (hp_mem_interval){bytes, pos[c->def], end, 0};
    }
    for (int ci = 0; ci < p->n_cand; ci++) {
        const hp__ofl_cand *c = &p->cand[ci];
        if (!c->slow) continue;
        for (int j = 0; j < c->n_fu; j++)
            if (hp__ofl_gap_starts(c, j)) {
                what[nb] = -1;
                blocks[nb++] = (hp_mem_interval){c->bytes, pre_pos[base[ci] + (size_t)j], pos[run_end(c, j)], 0};
            }
        if (c->spre >= 0) { /* the early-read copy: created after the gap copies, as in the rewrite */
            int32_t a = c->su[0];
            int32_t end = p->defer_wait[a] >= 0 ? hold_pos[a] : c->written ? wb_pos[ci] : pos[a];
            what[nb] = -2 - ci;
            blocks[nb++] = (hp_mem_interval){c->bytes, ep_pos[ci], end, 0};
        }
    }
    size_t arena = 0;
    HP_CHECK_GOTO(hp_memplan_assign(blocks, nb, 64, &arena), st, done);
    *device_bytes = persistent + arena + p->ws_max;
    if (layout) {
        *layout = (hp__ofl_layout){it, n_it, blocks, what, nb};
        it = NULL;
        blocks = NULL;
        what = NULL;
    }
done:
    free(it);
    free(base);
    free(pos);
    free(hold_pos);
    free(pre_pos);
    free(ow_pos);
    free(ep_pos);
    free(wb_pos);
    free(blocks);
    free(what);
    return st;
}

hp_status hp__ofl_pack(const hp_offload_plan *p, const hp_graph *g, size_t *device_bytes) {
    return hp__ofl_pack_layout(p, g, device_bytes, NULL);
}

