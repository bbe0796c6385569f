/*
 * Applying a residency plan: the rewritten program order (shared with the planner's exact packing
 * check), the graph rewrite that inserts PREFETCH / OFFLOAD / OFFLOAD_WAIT and ADAMW_STREAM, and the
 * runtime state (slow-tier homes, copy stream, disk store) behind the program's opts.ext.
 */
#include "offload/planner_internal.h"

#include "ir/op.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool gap_starts(const hp__ofl_cand *c, int j) { return c->off[j] || (c->persistent && j == 0); }

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
                if (what <= 1 && !gap_starts(c, j)) continue;
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
static size_t *gap_base(const hp_offload_plan *p, size_t *total) {
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
    while (r + 1 < c->n_fu && !gap_starts(c, r + 1)) r++;
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
    size_t *base = gap_base(p, &n_gaps);
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
        if (c->n_fu > 0 && !gap_starts(c, 0) && pos[run_end(c, 0)] > end) end = pos[run_end(c, 0)];
        what[nb] = t;
        blocks[nb++] = (hp_mem_interval){bytes, pos[c->def], end, 0};
    }
    for (int ci = 0; ci < p->n_cand; ci++) {
        const hp__ofl_cand *c = &p->cand[ci];
        if (!c->slow) continue;
        for (int j = 0; j < c->n_fu; j++)
            if (gap_starts(c, j)) {
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

/* ---------------------------------------------------------------- runtime state */

hp_loc hp__ofl_loc(const hp_offload_state *s, hp_tid t, void *fast) {
    if (t < 0 || t >= s->n_tensors || s->tier[t] == HP_TIER_DEVICE) return hp_loc_mem(HP_TIER_DEVICE, fast);
    if (s->tier[t] == HP_TIER_HOST) return hp_loc_mem(HP_TIER_HOST, s->data[t]);
    return hp_loc_disk(s->disk, s->disk_off[t]);
}

void hp_offload_state_free(hp_offload_state *s) {
    if (!s) return;
    if (s->ce) hp_copy_engine_synchronize(s->ce);
    if (s->ce_disk) hp_copy_engine_synchronize(s->ce_disk);
    for (int t = 0; t < s->n_tensors; t++) {
        if (!s->tier || (s->in_region && s->in_region[t])) continue;
        if (s->tier[t] == HP_TIER_HOST && s->data[t]) hp_mem_free(HP_TIER_HOST, s->data[t], s->bytes[t]);
        if (s->tier[t] == HP_TIER_DISK && s->disk) hp_disk_free(s->disk, s->disk_off[t]);
    }
    if (s->host_region) hp_mem_free(HP_TIER_HOST, s->host_region, s->region_bytes[HP_TIER_HOST]);
    if (s->disk && s->region_bytes[HP_TIER_DISK]) hp_disk_free(s->disk, s->disk_region);
    free(s->in_region);
    for (int k = 0; k < s->n_xfers; k++) hp_event_free(s->xfers[k].ev);
    for (int k = 0; s->async && s->plan && k < s->plan->n_deferred; k++) {
        hp__ofl_async *r = &s->async[k];
        hp_event_free(r->x.ev);
        free(r->chunk);
    }
    for (int q = 0; q < 4; q++)
        if (s->async_stage_raw[q]) hp_mem_free(HP_TIER_HOST, s->async_stage_raw[q], s->async_stage_bytes);
    free(s->async);
    free(s->async_order);
    free(s->touched);
    hp_copy_engine_free(s->ce_disk);
    hp_copy_engine_free(s->ce);
    hp_disk_close(s->disk);
    hp_offload_plan_free(s->plan);
    free(s->tier);
    free(s->data);
    free(s->disk_off);
    free(s->bytes);
    free(s->xfers);
    free(s->write_back);
    free(s);
}

const hp_offload_plan *hp_offload_state_plan(const hp_offload_state *s) { return s ? s->plan : NULL; }
hp_copy_engine *hp_offload_state_copy_engine(hp_offload_state *s) { return s ? s->ce : NULL; }
hp_disk *hp_offload_state_disk(hp_offload_state *s) { return s ? s->disk : NULL; }

void hp_offload_state_copy_stats(hp_offload_state *s, hp_copy_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    hp_copy_engine_get_stats(s->ce, out);
    if (!s->ce_disk) return;
    hp_copy_stats b;
    hp_copy_engine_get_stats(s->ce_disk, &b);
    for (int x = 0; x < HP_TIER_COUNT; x++)
        for (int y = 0; y < HP_TIER_COUNT; y++) {
            out->bytes[x][y] += b.bytes[x][y];
            out->copies[x][y] += b.copies[x][y];
            out->busy_s[x][y] += b.busy_s[x][y];
        }
    out->busy_total_s += b.busy_total_s;
    out->wait_s += b.wait_s;
    out->tasks_done += b.tasks_done;
    out->failed += b.failed;
}

void hp_offload_state_reset_copy_stats(hp_offload_state *s) {
    if (!s) return;
    hp_copy_engine_reset_stats(s->ce);
    if (s->ce_disk) hp_copy_engine_reset_stats(s->ce_disk);
}

/* Waits for both copy streams. */
static hp_status sync_all(hp_offload_state *s) {
    hp_first_error fe = {HP_STATUS_OK, ""};
    hp_first_error_add(&fe, hp_copy_engine_synchronize(s->ce));
    if (s->ce_disk) hp_first_error_add(&fe, hp_copy_engine_synchronize(s->ce_disk));
    return hp_first_error_status(&fe);
}

/* t < 0: everything in flight (before the program's memory goes away); else what may write t. */
static hp_status ext_sync(void *user, hp_tid t) {
    hp_offload_state *s = user;
    if (t < 0) return sync_all(s);
    if (!s->ce_disk || t >= s->n_tensors || !s->touched[t]) return HP_STATUS_OK;
    return hp_copy_engine_synchronize(s->ce_disk);
}

static hp_status ext_write(void *user, hp_tid t, const void *src, size_t bytes) {
    hp_offload_state *s = user;
    HP_CHECK(sync_all(s));
    if (s->tier[t] == HP_TIER_HOST) {
        memcpy(s->data[t], src, bytes);
        return HP_STATUS_OK;
    }
    return hp_disk_write(s->disk, s->disk_off[t], src, bytes);
}

static hp_status ext_read(void *user, hp_tid t, void *dst, size_t bytes) {
    hp_offload_state *s = user;
    HP_CHECK(sync_all(s));
    if (s->tier[t] == HP_TIER_HOST) {
        memcpy(dst, s->data[t], bytes);
        return HP_STATUS_OK;
    }
    return hp_disk_read(s->disk, s->disk_off[t], dst, bytes);
}

/* The store keeps working on an unlinked file (Linux), but the data would be lost at the end of
 * the run, and a removed file means someone else is managing that directory: fail loudly. */
static hp_status ext_before_run(void *user) {
    hp_offload_state *s = user;
    for (int k = 0; k < s->n_async; k++) s->async[k].pending = false; /* a failed flush's leftovers */
    if (!s->disk) return HP_STATUS_OK;
    struct stat sb;
    const char *path = hp_disk_path(s->disk);
    if (stat(path, &sb) != 0)
        return hp_error(HP_STATUS_IO, "offload: disk store file '%s' was removed (%s)", path, strerror(errno));
    return HP_STATUS_OK;
}

/* A step leaves nothing in flight but its deferred updates (waited for in the next step or by
 * ext_sync): the host stream drains, and on the disk stream every other transfer's event is waited
 * for (done already after a step that succeeded), so after a failed step nothing of it still
 * reads or writes the arena. Updates a failed step recorded but did not queue are queued. */
static hp_status ext_after_run(void *user) {
    hp_offload_state *s = user;
    hp_first_error fe = {HP_STATUS_OK, ""};
    hp_first_error_add(&fe, hp_copy_engine_synchronize(s->ce));
    if (!s->ce_disk) return hp_first_error_status(&fe);
    for (int k = 0; k < s->n_xfers; k++)
        if (s->xfers[k].ce == s->ce_disk && hp_first_error_add(&fe, hp_event_wait(s->xfers[k].ev)) != HP_STATUS_OK)
            break;
    hp_first_error_add(&fe, hp__ofl_async_flush(s, INT32_MAX));
    return hp_first_error_status(&fe);
}

static void ext_report(void *user, FILE *f) {
    hp_offload_state *s = user;
    hp_copy_stats cs;
    hp_offload_state_copy_stats(s, &cs);
    for (int a = 0; a < HP_TIER_COUNT; a++)
        for (int b = 0; b < HP_TIER_COUNT; b++)
            if (cs.copies[a][b])
                fprintf(f, "copy: %s -> %s: %llu copies, %.1f MiB, %.1f MiB/s\n", hp_tier_name((hp_tier)a),
                        hp_tier_name((hp_tier)b), (unsigned long long)cs.copies[a][b], (double)cs.bytes[a][b] / 1048576.0,
                        cs.busy_s[a][b] > 0 ? (double)cs.bytes[a][b] / 1048576.0 / cs.busy_s[a][b] : 0.0);
    fprintf(f, "copy: busy %.3f s, compute waited %.3f s, %.1f%% of copy time hidden behind compute%s\n",
            cs.busy_total_s, cs.wait_s, 100.0 * hp_copy_stats_hidden_fraction(&cs),
            s->ce_disk ? " (host and disk streams; deferred updates included)" : "");
    for (int t = HP_TIER_HOST; t < HP_TIER_COUNT; t++)
        if (s->region_naive[t])
            fprintf(f, "offload: %s region for activation copies %zu bytes (one home each: %zu)\n",
                    hp_tier_name((hp_tier)t), s->region_bytes[t], s->region_naive[t]);
    if (s->disk) {
        hp_disk_stats ds;
        hp_disk_get_stats(s->disk, &ds);
        fprintf(f, "disk: %s (%s, %s): %zu bytes in use, peak %zu, read %.1f MiB, written %.1f MiB\n", ds.path,
                ds.direct ? "O_DIRECT" : "buffered", ds.uring ? "io_uring" : "pread/pwrite", ds.in_use, ds.peak,
                (double)ds.bytes_read / 1048576.0, (double)ds.bytes_written / 1048576.0);
    }
}

static hp_status alloc_home(hp_offload_state *s, hp_tid t, hp_tier tier, size_t bytes) {
    s->tier[t] = (uint8_t)tier;
    s->bytes[t] = bytes;
    if (tier == HP_TIER_HOST) {
        s->data[t] = hp_mem_alloc(HP_TIER_HOST, bytes);
        if (!s->data[t]) return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: %zu host bytes for tensor %d", bytes, t);
        memset(s->data[t], 0, bytes);
        return HP_STATUS_OK;
    }
    hp_status st = hp_disk_alloc(s->disk, bytes, &s->disk_off[t]);
    if (st != HP_STATUS_OK) s->tier[t] = HP_TIER_DEVICE;
    return st;
}

/*
 * The slow-tier copies of activations (OFFLOAD outputs) live from their OFFLOAD node to their last
 * reader (a PREFETCH or a streamed AdamW) in the rewritten program order; copies whose lifetimes do
 * not overlap share bytes. The copy stream is FIFO, so a slot's next offload is queued after its
 * previous prefetch, and streamed AdamW reads it on the compute thread before the next offload is
 * issued: program order is the order the bytes are touched.
 */
static hp_status plan_regions(hp_offload_state *s, const hp_graph *g) {
    int nn = hp_graph_n_nodes(g), nt = s->n_tensors;
    hp_mem_interval *blocks = malloc(((size_t)nt + 1) * sizeof *blocks);
    int32_t *block_of = malloc(((size_t)nt + 1) * sizeof *block_of);
    hp_status st = HP_STATUS_OK;
    if (!blocks || !block_of) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory planning slow-tier regions");
        goto done;
    }
    for (int tier = HP_TIER_HOST; tier < HP_TIER_COUNT; tier++) {
        int nb = 0;
        for (hp_tid t = 0; t < nt; t++) {
            block_of[t] = -1;
            if (!s->in_region[t] || hp_graph_tensor(g, t)->producer < 0) continue;
            const hp_node *off = hp_graph_node(g, hp_graph_tensor(g, t)->producer);
            if (off->attr.i[0] != tier) continue;
            const hp_tensor *x = hp_graph_tensor(g, t);
            size_t bytes = (size_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype);
            block_of[t] = nb;
            blocks[nb++] = (hp_mem_interval){bytes, x->producer, x->producer, 0};
            s->region_naive[tier] += bytes;
        }
        if (nb == 0) continue;
        for (int i = 0; i < nn; i++) {
            const hp_node *n = hp_graph_node(g, i);
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0 && n->in[k] < nt && block_of[n->in[k]] >= 0 && blocks[block_of[n->in[k]]].end < i)
                    blocks[block_of[n->in[k]]].end = i;
        }
        size_t align = tier == HP_TIER_DISK ? HP_DISK_ALIGN : 64, total = 0;
        HP_CHECK_GOTO(hp_memplan_assign(blocks, nb, align, &total), st, done);
        s->region_bytes[tier] = total;
        char *base = NULL;
        if (tier == HP_TIER_HOST) {
            base = s->host_region = hp_mem_alloc(HP_TIER_HOST, total);
            if (!base) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: host region of %zu bytes for activation copies", total);
                goto done;
            }
        } else {
            HP_CHECK_GOTO(hp_disk_alloc(s->disk, total, &s->disk_region), st, done);
        }
        for (hp_tid t = 0; t < nt; t++) {
            if (block_of[t] < 0) continue;
            s->tier[t] = (uint8_t)tier;
            s->bytes[t] = blocks[block_of[t]].bytes;
            if (tier == HP_TIER_HOST) s->data[t] = base + blocks[block_of[t]].offset;
            else s->disk_off[t] = s->disk_region + blocks[block_of[t]].offset;
        }
    }
done:
    free(blocks);
    free(block_of);
    return st;
}

/* ---------------------------------------------------------------- rewrite */

/* A deferred update's record for AdamW node n (operands already rewired): its event and chunks. */
static hp_status async_record(hp_offload_state *s, const hp_graph *g, const hp_node *n, hp__ofl_async *r) {
    HP_CHECK(hp_event_new(&r->x.ev));
    r->x.st = s;
    r->x.slow = n->in[0];
    memcpy(r->in, n->in, sizeof r->in);
    r->numel = (size_t)hp_shape_numel(&hp_graph_tensor(g, n->in[0])->shape);
    size_t chunk = s->chunk_bytes / sizeof(float);
    r->n_chunks = (r->numel + chunk - 1) / chunk;
    r->chunk = calloc(r->n_chunks + 1, sizeof *r->chunk);
    if (!r->chunk) return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory for %zu chunks", r->n_chunks);
    for (size_t c = 0; c < r->n_chunks; c++) {
        size_t first = c * chunk;
        r->chunk[c] = (hp__ofl_chunk){r, first, r->numel - first < chunk ? r->numel - first : chunk};
    }
    return HP_STATUS_OK;
}

/* Once the homes are known: HOST staging (one chunk, shared by all records) for each operand whose
 * home is on disk; a record with one runs the update itself on the disk stream (job). */
static hp_status async_staging(hp_offload_state *s) {
    for (int i = 0; i < s->n_async; i++) {
        hp__ofl_async *r = &s->async[i];
        for (int k = 0; k < 4; k++) {
            if (s->tier[r->in[k]] != HP_TIER_DISK) continue;
            if (!s->async_stage_raw[k]) {
                s->async_stage_bytes = s->chunk_bytes + HP_DISK_ALIGN;
                s->async_stage_raw[k] = hp_mem_alloc(HP_TIER_HOST, s->async_stage_bytes);
                if (!s->async_stage_raw[k])
                    return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: %zu bytes of staging for deferred updates",
                                    s->async_stage_bytes);
            }
            r->stage[k] =
                (void *)(((uintptr_t)s->async_stage_raw[k] + HP_DISK_ALIGN - 1) & ~(uintptr_t)(HP_DISK_ALIGN - 1));
            r->job = true;
        }
    }
    return HP_STATUS_OK;
}

static hp_status rewrite(hp_offload_state *s, hp_graph *g) {
    hp_offload_plan *p = s->plan;
    size_t n_gaps = 0;
    size_t *base = gap_base(p, &n_gaps);
    hp_tid *y = malloc(((size_t)p->n_cand + 1) * sizeof *y);
    int32_t *of_node = malloc(((size_t)p->n_cand + 1) * sizeof *of_node);
    int32_t *ow_node = malloc(((size_t)p->n_cand + 1) * sizeof *ow_node);
    hp_tid *copy = malloc((n_gaps + 1) * sizeof *copy);
    int32_t *pf_node = malloc((n_gaps + 1) * sizeof *pf_node);
    int32_t *pw_node = malloc((n_gaps + 1) * sizeof *pw_node);
    /* early reads for AdamW: the copy, its PREFETCH and wait, the write-back's wait and record */
    hp_tid *ecopy = malloc(((size_t)p->n_cand + 1) * sizeof *ecopy);
    int32_t *ep_node = malloc(((size_t)p->n_cand + 1) * sizeof *ep_node);
    int32_t *epw_node = malloc(((size_t)p->n_cand + 1) * sizeof *epw_node);
    int32_t *wbw_node = malloc(((size_t)p->n_cand + 1) * sizeof *wbw_node);
    hp__ofl_xfer **wb_rec = calloc((size_t)p->n_cand + 1, sizeof *wb_rec);
    /* deferred updates: per original node, the record index, its wait node and hold node */
    int32_t *rec_of = malloc(((size_t)p->n_nodes + 1) * sizeof *rec_of);
    int32_t *dw_node = malloc(((size_t)p->n_deferred + 1) * sizeof *dw_node);
    int32_t *hd_node = malloc(((size_t)p->n_deferred + 1) * sizeof *hd_node);
    s->async = calloc((size_t)p->n_deferred + 1, sizeof *s->async);
    s->xfers = calloc((size_t)p->stats.n_prefetch + (size_t)p->stats.n_offload + (size_t)p->stats.n_early + 1,
                      sizeof *s->xfers);
    hp__ofl_item *it = NULL;
    hp_node *tmp = NULL;
    int32_t *order = NULL;
    int n_it = 0;
    hp_status st = HP_STATUS_OK;
    if (!base || !y || !of_node || !ow_node || !copy || !pf_node || !pw_node || !ecopy || !ep_node || !epw_node ||
        !wbw_node || !wb_rec || !s->xfers || !rec_of || !dw_node || !hd_node || !s->async) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory rewriting the graph");
        goto done;
    }
    HP_CHECK_GOTO(hp__ofl_emit_order(p, &it, &n_it), st, done);
    hp_graph_set_node_flags(g, 0);
    for (int ci = 0; ci < p->n_cand; ci++) {
        const hp__ofl_cand *c = &p->cand[ci];
        if (!c->slow) continue;
        hp_attrs at;
        memset(&at, 0, sizeof at);
        at.i[0] = c->tier;
        hp_tid src = c->t;
        char name[600];
        const char *tn = hp_graph_tensor(g, c->t)->name;
        hp_copy_engine *eng = c->tier == HP_TIER_DISK && s->ce_disk ? s->ce_disk : s->ce; /* one stream per tier */
        if (!c->persistent) {
            hp__ofl_xfer *x = &s->xfers[s->n_xfers++];
            HP_CHECK_GOTO(hp_event_new(&x->ev), st, done);
            y[ci] = hp_graph_add_node(g, HP_OP_OFFLOAD, &c->t, 1, &at);
            of_node[ci] = hp_graph_n_nodes(g) - 1;
            hp_tid win[2] = {c->t, y[ci]};
            hp_graph_add_node(g, HP_OP_OFFLOAD_WAIT, win, 2, NULL);
            ow_node[ci] = hp_graph_n_nodes(g) - 1;
            if (hp_graph_status(g) != HP_STATUS_OK) {
                st = hp_graph_status(g);
                goto done;
            }
            *x = hp__ofl_xfer_make(s, y[ci], c->bytes, x->ev, eng);
            hp_graph_node(g, of_node[ci])->extra = x;
            hp_graph_node(g, ow_node[ci])->extra = x;
            if (tn) {
                snprintf(name, sizeof name, "offload.%s", tn);
                hp_graph_set_name(g, y[ci], name);
            }
            src = y[ci];
        }
        for (int j = 0; j < c->n_fu; j++) {
            if (!gap_starts(c, j)) continue;
            size_t k = base[ci] + (size_t)j;
            hp__ofl_xfer *x = &s->xfers[s->n_xfers++];
            HP_CHECK_GOTO(hp_event_new(&x->ev), st, done);
            *x = hp__ofl_xfer_make(s, src, c->bytes, x->ev, eng);
            copy[k] = hp_graph_add_node(g, HP_OP_PREFETCH, &src, 1, &at);
            pf_node[k] = hp_graph_n_nodes(g) - 1;
            hp_graph_add_node(g, HP_OP_OFFLOAD_WAIT, &copy[k], 1, NULL);
            pw_node[k] = hp_graph_n_nodes(g) - 1;
            if (hp_graph_status(g) != HP_STATUS_OK) {
                st = hp_graph_status(g);
                goto done;
            }
            hp_graph_node(g, pf_node[k])->extra = x;
            hp_graph_node(g, pw_node[k])->extra = x;
            hp_graph_node(g, pf_node[k])->scope = p->node_scope[c->fu[j]];
            hp_graph_node(g, pw_node[k])->scope = p->node_scope[c->fu[j]];
            if (tn) {
                snprintf(name, sizeof name, "prefetch%d.%s", j, tn);
                hp_graph_set_name(g, copy[k], name);
            }
        }
        if (c->spre >= 0) { /* early read for AdamW; written operands are written back by the update */
            hp__ofl_xfer *x = &s->xfers[s->n_xfers++];
            HP_CHECK_GOTO(hp_event_new(&x->ev), st, done);
            *x = hp__ofl_xfer_make(s, src, c->bytes, x->ev, eng);
            ecopy[ci] = hp_graph_add_node(g, HP_OP_PREFETCH, &src, 1, &at);
            ep_node[ci] = hp_graph_n_nodes(g) - 1;
            hp_graph_add_node(g, HP_OP_OFFLOAD_WAIT, &ecopy[ci], 1, NULL);
            epw_node[ci] = hp_graph_n_nodes(g) - 1;
            bool wb_wait = c->written && p->defer_wait[c->su[0]] < 0; /* deferred: the update's record */
            if (c->written) {
                hp__ofl_xfer *w = &s->xfers[s->n_xfers++];
                HP_CHECK_GOTO(hp_event_new(&w->ev), st, done);
                *w = hp__ofl_xfer_make(s, c->t, c->bytes, w->ev, eng);
                wb_rec[ci] = w;
            }
            if (wb_wait) {
                hp_graph_add_node(g, HP_OP_OFFLOAD_WAIT, &ecopy[ci], 1, NULL);
                wbw_node[ci] = hp_graph_n_nodes(g) - 1;
            }
            if (hp_graph_status(g) != HP_STATUS_OK) {
                st = hp_graph_status(g);
                goto done;
            }
            hp_graph_node(g, ep_node[ci])->extra = x;
            hp_graph_node(g, epw_node[ci])->extra = x;
            hp_graph_node(g, ep_node[ci])->scope = p->node_scope[c->su[0]];
            hp_graph_node(g, epw_node[ci])->scope = p->node_scope[c->su[0]];
            if (wb_wait) {
                hp_graph_node(g, wbw_node[ci])->extra = wb_rec[ci];
                hp_graph_node(g, wbw_node[ci])->scope = p->node_scope[c->su[0]];
            }
            if (tn) {
                snprintf(name, sizeof name, "early.%s", tn);
                hp_graph_set_name(g, ecopy[ci], name);
            }
        }
    }
    /* Rewire the uses. */
    for (int i = 0; i < p->n_nodes; i++) {
        if (!p->lv.node_live[i]) continue;
        hp_node *n = hp_graph_node(g, i);
        bool adamw = n->op == HP_OP_ADAMW, stream = false;
        for (int k = 0; k < n->n_in; k++) {
            hp_tid t = n->in[k];
            if (t == HP_TID_NONE || t >= p->n_tensors || p->cand_of[t] < 0) continue;
            int ci = p->cand_of[t];
            const hp__ofl_cand *c = &p->cand[ci];
            if (!c->slow) continue;
            if (adamw && k < 4) {
                stream = true;
                n->in[k] = c->spre >= 0 ? ecopy[ci] : c->persistent ? t : y[ci];
                continue;
            }
            int q = 0;
            while (q < c->n_fu && c->fu[q] != i) q++;
            HP_ASSERT(q < c->n_fu);
            int j = q;
            while (j > 0 && !gap_starts(c, j)) j--;
            n->in[k] = gap_starts(c, j) ? copy[base[ci] + (size_t)j] : t;
        }
        if (stream) {
            n->op = HP_OP_ADAMW_STREAM;
            n->extra = s;
        }
    }
    /* Deferred updates: the record, the next step's wait and the hold of the fast operands. */
    s->touched = calloc((size_t)hp_graph_n_tensors(g) + 1, sizeof *s->touched);
    if (!s->touched) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory for %d tensors", hp_graph_n_tensors(g));
        goto done;
    }
    for (int i = 0; i < p->n_nodes; i++) {
        rec_of[i] = -1;
        if (p->defer_wait[i] < 0) continue;
        hp_node *n = hp_graph_node(g, i);
        HP_ASSERT(n->op == HP_OP_ADAMW_STREAM);
        int k = s->n_async++;
        rec_of[i] = k;
        HP_CHECK_GOTO(async_record(s, g, n, &s->async[k]), st, done);
        s->async[k].node = i;
        n->extra = &s->async[k];
        n->attr.i[0] = 1;
        hp_tid held[4];
        int nh = 0;
        for (int q = 0; q < 4; q++) {
            hp_tid t = n->in[q];
            const hp_tensor *x = hp_graph_tensor(g, t);
            bool slow_copy = x->producer >= 0 && hp_graph_node(g, x->producer)->op == HP_OP_OFFLOAD;
            bool fast = t >= p->n_tensors ? !slow_copy : p->cand_of[t] < 0 || !p->cand[p->cand_of[t]].slow;
            if (fast && (t >= p->n_tensors || !p->lv.t[t].persistent)) held[nh++] = t;
        }
        hp_graph_add_node(g, HP_OP_OFFLOAD_WAIT, NULL, 0, NULL); /* holds no bytes */
        dw_node[k] = hp_graph_n_nodes(g) - 1;
        hp_graph_add_node(g, HP_OP_OFFLOAD_WAIT, held, nh, NULL);
        hd_node[k] = hp_graph_n_nodes(g) - 1;
        if (hp_graph_status(g) != HP_STATUS_OK) {
            st = hp_graph_status(g);
            goto done;
        }
        n = hp_graph_node(g, i); /* adding nodes may have moved the node array */
        for (int q = 0; q < 4; q++) s->touched[n->in[q]] = true;
        for (int ci = 0; ci < p->n_cand; ci++) /* the homes behind early-read copies */
            if (p->cand[ci].slow && p->cand[ci].spre >= 0 && p->cand[ci].su[0] == i) s->touched[p->cand[ci].t] = true;
        hp_node *dw = hp_graph_node(g, dw_node[k]), *hd = hp_graph_node(g, hd_node[k]);
        dw->extra = &s->async[k].x;
        dw->scope = p->node_scope[p->defer_wait[i]];
        hd->extra = &s->hold;
        hd->scope = p->node_scope[i];
    }
    /* The disk stream runs the updates earliest deadline first (hp__ofl_async_flush). */
    s->async_order = malloc(((size_t)s->n_async + 1) * sizeof *s->async_order);
    if (!s->async_order) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory for %d deferred updates", s->n_async);
        goto done;
    }
    int32_t later = INT32_MAX;
    for (int k = s->n_async - 1; k >= 0; k--) {
        s->async[k].deadline = p->defer_wait[s->async[k].node];
        s->async[k].later_min = later;
        if (s->async[k].deadline < later) later = s->async[k].deadline;
    }
    for (int k = 0; k < s->n_async; k++) {
        int j = k; /* insertion sort by (deadline, node) */
        while (j > 0 && s->async[s->async_order[j - 1]].deadline > s->async[k].deadline) {
            s->async_order[j] = s->async_order[j - 1];
            j--;
        }
        s->async_order[j] = k;
    }
    /* Reorder. */
    int nn = hp_graph_n_nodes(g);
    HP_ASSERT(nn == n_it);
    tmp = malloc((size_t)nn * sizeof *tmp);
    order = malloc((size_t)nn * sizeof *order);
    if (!tmp || !order) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory reordering %d nodes", nn);
        goto done;
    }
    for (int k = 0; k < n_it; k++) {
        const hp__ofl_item *x = &it[k];
        size_t gk = x->cand >= 0 ? base[x->cand] + (size_t)(x->gap > 0 ? x->gap : 0) : 0;
        switch (x->kind) {
        case HP__OFL_NODE: order[k] = x->node; break;
        case HP__OFL_PREFETCH: order[k] = pf_node[gk]; break;
        case HP__OFL_PWAIT: order[k] = pw_node[gk]; break;
        case HP__OFL_OFFLOAD: order[k] = of_node[x->cand]; break;
        case HP__OFL_OWAIT: order[k] = ow_node[x->cand]; break;
        case HP__OFL_EPREFETCH: order[k] = ep_node[x->cand]; break;
        case HP__OFL_EPWAIT: order[k] = epw_node[x->cand]; break;
        case HP__OFL_WBWAIT: order[k] = wbw_node[x->cand]; break;
        case HP__OFL_DWAIT: order[k] = dw_node[rec_of[x->gap]]; break;
        case HP__OFL_HOLD: order[k] = hd_node[rec_of[x->gap]]; break;
        }
    }
    for (int i = 0; i < nn; i++) tmp[i] = *hp_graph_node(g, i);
    for (int i = 0; i < nn; i++) {
        hp_node *n = hp_graph_node(g, i);
        *n = tmp[order[i]];
        for (int j = 0; j < n->n_out; j++) hp_graph_tensor(g, n->out[j])->producer = i;
    }
    /* Homes. */
    s->n_tensors = hp_graph_n_tensors(g);
    s->tier = calloc((size_t)s->n_tensors + 1, sizeof *s->tier);
    s->data = calloc((size_t)s->n_tensors + 1, sizeof *s->data);
    s->disk_off = calloc((size_t)s->n_tensors + 1, sizeof *s->disk_off);
    s->bytes = calloc((size_t)s->n_tensors + 1, sizeof *s->bytes);
    if (!s->tier || !s->data || !s->disk_off || !s->bytes) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory for %d tensors", s->n_tensors);
        goto done;
    }
    s->in_region = calloc((size_t)s->n_tensors + 1, sizeof *s->in_region);
    s->write_back = calloc((size_t)s->n_tensors + 1, sizeof *s->write_back);
    if (!s->in_region || !s->write_back) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory for %d tensors", s->n_tensors);
        goto done;
    }
    for (int ci = 0; ci < p->n_cand; ci++) {
        const hp__ofl_cand *c = &p->cand[ci];
        if (c->slow && c->persistent) HP_CHECK_GOTO(alloc_home(s, c->t, c->tier, c->bytes), st, done);
        /* a copy a deferred update streams from gets its own home: the region's next user could
         * overwrite a shared slot before the update has read it */
        bool own = c->slow && !c->persistent && c->n_su > 0 && c->spre < 0 && p->defer_wait[c->su[0]] >= 0;
        if (own) HP_CHECK_GOTO(alloc_home(s, y[ci], c->tier, c->bytes), st, done);
        else if (c->slow && !c->persistent) s->in_region[y[ci]] = true;
        if (c->slow && c->spre >= 0 && c->written) s->write_back[ecopy[ci]] = wb_rec[ci];
    }
    HP_CHECK_GOTO(plan_regions(s, g), st, done);
    HP_CHECK_GOTO(async_staging(s), st, done);
done:
    free(base);
    free(y);
    free(of_node);
    free(ow_node);
    free(copy);
    free(pf_node);
    free(pw_node);
    free(ecopy);
    free(ep_node);
    free(epw_node);
    free(wbw_node);
    free(wb_rec);
    free(rec_of);
    free(dw_node);
    free(hd_node);
    free(it);
    free(tmp);
    free(order);
    return st;
}

hp_status hp_offload_apply_config(const hp_offload_plan_config *cfg, hp_graph *g, hp_program_opts *opts,
                                  hp_offload_state **state) {
    *state = NULL;
    if (cfg->device_budget == 0) return HP_STATUS_OK;
    HP_CHECK(hp_graph_verify(g));
    hp_offload_state *s = calloc(1, sizeof *s);
    if (!s) return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory");
    hp_status st = HP_STATUS_OK;
    s->chunk_bytes = cfg->chunk_bytes ? cfg->chunk_bytes : (1u << 20);
    HP_CHECK_GOTO(hp_offload_plan_new(g, opts->keep, opts->n_keep, cfg, &s->plan), st, fail);
    HP_CHECK_GOTO(hp_copy_engine_new(&s->ce), st, fail);
    if (s->plan->stats.home_bytes[HP_TIER_DISK] > 0) {
        hp_disk_config dc = HP_DISK_CONFIG_INIT;
        dc.dir = cfg->disk_dir;
        dc.capacity = cfg->disk_budget;
        HP_CHECK_GOTO(hp_disk_open(&dc, &s->disk), st, fail);
    }
    if (s->plan->stats.home_bytes[HP_TIER_DISK] > 0) {
        HP_CHECK_GOTO(hp_copy_engine_new(&s->ce_disk), st, fail);
    }
    HP_CHECK_GOTO(rewrite(s, g), st, fail);
    hp__ofl_mark_instrs(s, g);
    HP_CHECK_GOTO(hp_graph_verify(g), st, fail);
    s->ext = (hp_program_ext){s->n_tensors, s->tier, s->data, cfg->device_budget, ext_write, ext_read,
                              ext_before_run, ext_after_run, ext_report, s, ext_sync, hp__ofl_set_trace};
    opts->ext = &s->ext;
    opts->view_reshape = false;
    opts->plan_memory = true;
    *state = s;
    return HP_STATUS_OK;
fail:
    hp_offload_state_free(s);
    return st;
}

hp_status hp_offload_apply(const hp_offload_run_config *offload_cfg, hp_graph *g, hp_program_opts *opts,
                           hp_offload_state **state) {
    *state = NULL;
    if (!offload_cfg || !offload_cfg->present) return HP_STATUS_OK;
    hp_offload_plan_config cfg;
    hp_offload_plan_config_from(offload_cfg, &cfg);
    return hp_offload_apply_config(&cfg, g, opts, state);
}
