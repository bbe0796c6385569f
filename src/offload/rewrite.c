/*
 * Applying a residency plan: the graph rewrite that inserts PREFETCH / OFFLOAD / OFFLOAD_WAIT and
 * ADAMW_STREAM in the order plan_order.c gives, and hp_offload_apply / hp_offload_apply_config, which
 * plan, rewrite and attach the runtime state (state.c).
 */
#include "offload/planner_internal.h"

#include "ir/op.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


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
    size_t *base = hp__ofl_gap_base(p, &n_gaps);
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
            if (!hp__ofl_gap_starts(c, j)) continue;
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
            while (j > 0 && !hp__ofl_gap_starts(c, j)) j--;
            n->in[k] = hp__ofl_gap_starts(c, j) ? copy[base[ci] + (size_t)j] : t;
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
        if (c->slow && c->persistent) HP_CHECK_GOTO(hp__ofl_alloc_home(s, c->t, c->tier, c->bytes), st, done);
        /* a copy a deferred update streams from gets its own home: the region's next user could
         * overwrite a shared slot before the update has read it */
        bool own = c->slow && !c->persistent && c->n_su > 0 && c->spre < 0 && p->defer_wait[c->su[0]] >= 0;
        if (own) HP_CHECK_GOTO(hp__ofl_alloc_home(s, y[ci], c->tier, c->bytes), st, done);
        else if (c->slow && !c->persistent) s->in_region[y[ci]] = true;
        if (c->slow && c->spre >= 0 && c->written) s->write_back[ecopy[ci]] = wb_rec[ci];
    }
    HP_CHECK_GOTO(hp__ofl_plan_regions(s, g), st, done);
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
    hp__ofl_set_ext(s, cfg->device_budget);
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
