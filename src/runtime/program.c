/*
 * Programs: storage binding from a static memory plan, and in-order execution through a backend.
 *
 * hp_program_new does all the work that can be done once (ggml's gallocr reserve + alloc_graph):
 * liveness and dead-code elimination (liveness.c), the arena plan (memplan.c), buffers, and every
 * live node's argument block with its data pointers bound. hp_program_run then only walks the
 * bound nodes and calls the backend: no allocation, no lookups.
 */
#include "runtime/program_internal.h"

#include "hp/ops.h"
#include "ir/op.h"

#include <stdlib.h>
#include <string.h>

static size_t tensor_bytes(const hp_tensor *t) {
    return (size_t)hp_shape_numel(&t->shape) * hp_dtype_size(t->dtype);
}

void hp_program_free(hp_program *p) {
    if (!p) return;
    (void)hp_program_sync(p); /* nothing may still read or write the program's memory */
    if (p->trace) (void)hp__program_trace_attach(p, NULL, NULL); /* the pass's streams stop recording */
    if (p->binds) hp__store_unbind(p->opts.store, p->binds, p->n_binds, p->built);
    free(p->binds);
    free(p->bind_of);
    free(p->written);
    hp__queues_free(p->q);
    free(p->queue_of);
    free(p->flight_queue);
    free(p->flight_req);
    free(p->complete);
    free(p->exec_kind);
    free(p->flight_ptr);
    free(p->flight_bytes);
    free(p->flight_tid);
    free(p->flight_seq);
    if (p->data) {
        for (int t = 0; t < p->lv.n_tensors; t++)
            if (p->own[t]) hp_backend_buffer_free(p->be, p->data[t], p->bytes[t]);
    }
    if (p->be) {
        hp_backend_buffer_free(p->be, p->arena, p->arena_alloc);
        hp_backend_buffer_free(p->be, p->workspace, p->stats.workspace_bytes);
        if (p->own_be) hp_backend_free(p->be);
    }
    hp_liveness_free(&p->lv);
    free(p->data);
    free(p->bytes);
    free(p->own);
    free(p->offset);
    free(p->ext);
    free(p->exec);
    free(p->exec_node);
    free(p->exec_flops);
    free(p->exec_best);
    free(p->exec_seconds);
    free(p->trace_span);
    free(p->trace_issue);
    free(p);
}

/* Union-find root of a RESHAPE view chain (views[t] is the tensor whose storage t shares, or t). */
static hp_tid view_root(const hp_tid *views, hp_tid t) {
    while (views[t] != t) t = views[t];
    return t;
}

static bool written_in_place(const hp_graph *g, const hp_tensor_liveness *l) {
    for (int k = 0; k < l->n_uses; k++)
        if (hp_graph_node(g, l->uses[k])->flags & HP_NODE_FLAG_INPLACE) return true;
    return false;
}

/*
 * Plans the arena: every live, non-persistent activation is one block over its lifetime; a RESHAPE
 * output (opts.view_reshape) joins its input's block, whose lifetime grows to cover both. The
 * kernel-level guarantee that a node's outputs never alias its inputs follows from the intervals:
 * a node's outputs start at the node, and its inputs are live through it.
 */
static hp_status plan_arena(hp_program *p) {
    const hp_graph *g = p->g;
    const hp_liveness *lv = &p->lv;
    int nt = lv->n_tensors;
    hp_status st = HP_STATUS_OK;
    hp_tid *views = malloc(((size_t)nt + 1) * sizeof *views);
    int *block_of = malloc(((size_t)nt + 1) * sizeof *block_of);
    hp_mem_interval *blocks = calloc((size_t)nt + 1, sizeof *blocks);
    if (!views || !block_of || !blocks) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory planning %d tensors", nt);
        goto done;
    }
    for (int t = 0; t < nt; t++) {
        views[t] = t;
        block_of[t] = -1;
    }
    if (p->opts.view_reshape) {
        for (int i = 0; i < lv->n_nodes; i++) {
            const hp_node *n = hp_graph_node(g, i);
            if (!lv->node_live[i] || n->op != HP_OP_RESHAPE) continue;
            hp_tid x = n->in[0], y = n->out[0];
            const hp_tensor_liveness *lx = &lv->t[x], *ly = &lv->t[y];
            if (lx->persistent || ly->persistent || p->bytes[x] != p->bytes[y] || p->ext[x] || p->ext[y]) continue;
            if (written_in_place(g, lx) || written_in_place(g, ly)) continue;
            views[y] = view_root(views, x);
            p->stats.n_views++;
        }
    }
    int nb = 0;
    for (int t = 0; t < nt; t++) {
        const hp_tensor_liveness *l = &lv->t[t];
        if (!l->live || l->persistent || p->ext[t]) continue;
        hp_tid r = view_root(views, t);
        if (block_of[r] < 0) {
            block_of[r] = nb;
            blocks[nb] = (hp_mem_interval){p->bytes[r], lv->t[r].start, lv->t[r].end, 0};
            nb++;
        }
        hp_mem_interval *b = &blocks[block_of[r]];
        if (l->start < b->start) b->start = l->start;
        if (l->end > b->end) b->end = l->end;
        p->stats.naive_bytes += p->bytes[t];
        p->stats.n_planned++;
    }
    HP_CHECK_GOTO(hp_memplan_assign(blocks, nb, HP_ARENA_ALIGN, &p->stats.arena_bytes), st, done);
    /* The lower bound: the largest sum of (aligned) block sizes live at one node, from a
     * difference array over program points. */
    size_t *delta = calloc((size_t)lv->n_nodes + 2, sizeof *delta);
    size_t *undo = calloc((size_t)lv->n_nodes + 2, sizeof *undo);
    if (!delta || !undo) {
        free(delta);
        free(undo);
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for %d nodes", lv->n_nodes);
        goto done;
    }
    for (int k = 0; k < nb; k++) {
        size_t sz = (blocks[k].bytes + HP_ARENA_ALIGN - 1) & ~(size_t)(HP_ARENA_ALIGN - 1);
        delta[blocks[k].start] += sz;
        undo[blocks[k].end + 1] += sz;
    }
    size_t live = 0;
    for (int i = 0; i <= lv->n_nodes; i++) {
        live = live + delta[i] - undo[i];
        if (live > p->stats.peak_live_bytes) p->stats.peak_live_bytes = live;
    }
    free(delta);
    free(undo);
    for (int t = 0; t < nt; t++) {
        const hp_tensor_liveness *l = &lv->t[t];
        if (l->live && !l->persistent && !p->ext[t]) p->offset[t] = blocks[block_of[view_root(views, t)]].offset;
    }
done:
    free(views);
    free(block_of);
    free(blocks);
    return st;
}

/* ---------------------------------------------------------------- state store binding */

/* Before binding with opts.store: which tensors live nodes write in place (an operator's
 * inplace_inputs). The offload pass writes the homes it holds through its own nodes, so in a
 * program that writes anything in place, every tensor it stores on a slower tier counts too. */
static hp_status store_prepare(hp_program *p) {
    if (!p->opts.store) return HP_STATUS_OK;
    int nt = p->lv.n_tensors;
    p->written = calloc((size_t)nt + 1, sizeof *p->written);
    p->bind_of = malloc(((size_t)nt + 1) * sizeof *p->bind_of);
    p->binds = p->dry ? NULL : calloc((size_t)nt + 1, sizeof *p->binds);
    if (!p->written || !p->bind_of || (!p->dry && !p->binds))
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory binding %d tensors to the store", nt);
    bool any = false;
    for (int t = 0; t < nt; t++) p->bind_of[t] = -1;
    for (int i = 0; i < p->lv.n_nodes; i++) {
        const hp_node *n = hp_graph_node(p->g, i);
        uint32_t w = hp__op_def(n->op)->inplace_inputs;
        if (!p->lv.node_live[i] || !w) continue;
        for (int k = 0; k < n->n_in; k++)
            if (((w >> k) & 1u) && n->in[k] != HP_TID_NONE) p->written[n->in[k]] = any = true;
    }
    for (int t = 0; t < nt && any; t++)
        if (p->ext[t]) p->written[t] = true;
    return HP_STATUS_OK;
}

/* Binds tensor t to opts.store when it is a named PARAM, OPT_STATE or STATE (hp/store.h). *done when the
 * program needs no buffer of its own for it (it uses an entry's or a view's storage). */
static hp_status store_bind(hp_program *p, hp_tid t, bool *done) {
    *done = false;
    const hp_tensor *x = hp_graph_tensor(p->g, t);
    if (!p->opts.store || !x->name || (x->kind != HP_TENSOR_KIND_PARAM && x->kind != HP_TENSOR_KIND_OPT_STATE &&
                                      x->kind != HP_TENSOR_KIND_STATE))
        return HP_STATUS_OK;
    hp_tier tier = p->ext[t] ? (hp_tier)p->opts.ext->tier[t] : HP_TIER_DEVICE;
    hp__store_binding b;
    void *data;
    HP_CHECK(hp__store_bind(p->opts.store, x->name, x->dtype, &x->shape, tier, p->opts.ext, t, p->written[t], p->dry,
                            &b, &data));
    if (b.kind == HP__STORE_DIRECT || b.kind == HP__STORE_VIEW) {
        p->data[t] = data;
        p->stats.store_bytes += p->bytes[t];
        *done = true;
    }
    if (!p->dry) {
        p->bind_of[t] = p->n_binds;
        p->binds[p->n_binds++] = b;
    }
    return HP_STATUS_OK;
}

/* After bind_storage: the copy-path bindings learn their buffers. */
static void store_finish(hp_program *p) {
    for (int k = 0; k < p->n_binds; k++)
        if (p->binds[k].kind == HP__STORE_COPY) p->binds[k].dst = p->data[p->binds[k].t];
    free(p->written);
    p->written = NULL;
}

/* The bound kind of tensor t, or -1 when it is not bound to the store. */
static int store_kind(const hp_program *p, hp_tid t) {
    int k = p->bind_of && t >= 0 && t < p->lv.n_tensors ? p->bind_of[t] : -1;
    return k >= 0 ? (int)p->binds[k].kind : -1;
}

/* Tensor t uses the store's storage (an entry's or a view's buffer). */
static bool store_shared(const hp_program *p, hp_tid t) {
    int k = store_kind(p, t);
    return k == HP__STORE_DIRECT || k == HP__STORE_VIEW;
}

/* Allocates buffers: own ones for persistent tensors (all of them, used or not) and, in reference
 * mode, for live activations; one arena for the planned activations. */
static hp_status bind_storage(hp_program *p) {
    const hp_liveness *lv = &p->lv;
    for (int t = 0; t < lv->n_tensors; t++) {
        const hp_tensor_liveness *l = &lv->t[t];
        const hp_tensor *x = hp_graph_tensor(p->g, t);
        bool in_store;
        HP_CHECK(store_bind(p, t, &in_store));
        if (in_store) continue;
        if (p->ext[t]) {
            p->data[t] = p->opts.ext->data[t];
            p->stats.ext_bytes[p->opts.ext->tier[t]] += p->bytes[t];
            continue;
        }
        bool persistent = x->kind != HP_TENSOR_KIND_ACTIVATION || l->persistent;
        if (!persistent && !l->live) continue;
        if (!persistent && p->opts.plan_memory) continue;
        hp_status st = p->dry ? HP_STATUS_OK : hp_backend_alloc(p->be, p->bytes[t], &p->data[t]);
        if (st != HP_STATUS_OK)
            return hp_error_prefix(st, "program: %zu bytes for tensor %d ('%s'): ", p->bytes[t], t,
                                   x->name ? x->name : "");
        p->own[t] = !p->dry;
        if (persistent) p->stats.persistent_bytes += p->bytes[t];
        else p->stats.naive_bytes += p->bytes[t];
    }
    if (!p->opts.plan_memory) {
        p->stats.arena_bytes = p->stats.naive_bytes;
        return HP_STATUS_OK;
    }
    HP_CHECK(plan_arena(p));
    if (p->dry) return HP_STATUS_OK;
    p->arena_alloc = p->stats.arena_bytes;
    hp_status st = hp_backend_alloc(p->be, p->arena_alloc, &p->arena);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "program: activation arena of %zu bytes: ", p->arena_alloc);
    for (int t = 0; t < lv->n_tensors; t++)
        if (p->offset[t] != SIZE_MAX) p->data[t] = (char *)p->arena + p->offset[t];
    return HP_STATUS_OK;
}

/* Binds the argument block of every node to run; sizes the shared workspace. */
static hp_status bind_nodes(hp_program *p) {
    const hp_graph *g = p->g;
    int nn = p->lv.n_nodes;
    p->exec = calloc((size_t)nn + 1, sizeof *p->exec);
    p->exec_node = calloc((size_t)nn + 1, sizeof *p->exec_node);
    p->exec_flops = calloc((size_t)nn + 1, sizeof *p->exec_flops);
    p->exec_best = calloc((size_t)nn + 1, sizeof *p->exec_best);
    p->exec_seconds = calloc((size_t)nn + 1, sizeof *p->exec_seconds);
    p->exec_kind = calloc((size_t)nn + 1, sizeof *p->exec_kind);
    p->flight_ptr = calloc((size_t)nn + 1, sizeof *p->flight_ptr);
    p->flight_bytes = calloc((size_t)nn + 1, sizeof *p->flight_bytes);
    p->flight_tid = calloc((size_t)nn + 1, sizeof *p->flight_tid);
    p->flight_seq = calloc((size_t)nn + 1, sizeof *p->flight_seq);
    p->flight_queue = calloc((size_t)nn + 1, sizeof *p->flight_queue);
    p->flight_req = calloc((size_t)nn + 1, sizeof *p->flight_req);
    p->queue_of = calloc((size_t)nn + 1, sizeof *p->queue_of);
    p->complete = calloc((size_t)nn + 1, sizeof *p->complete);
    if (!p->exec || !p->exec_node || !p->exec_flops || !p->exec_best || !p->exec_seconds || !p->exec_kind ||
        !p->flight_ptr || !p->flight_bytes || !p->flight_tid || !p->flight_seq || !p->flight_queue || !p->flight_req || !p->queue_of || !p->complete)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for %d nodes", nn);
    size_t ws = 0;
    bool async = false;
    for (int i = 0; i < nn && !p->opts.sync_comm; i++)
        async |= p->lv.node_live[i] && (hp_graph_node(g, i)->flags & HP_NODE_FLAG_ASYNC);
    for (int i = 0; i < nn; i++) {
        if (!p->lv.node_live[i]) continue;
        const hp_node *n = hp_graph_node(g, i);
        /* A RESHAPE whose output shares its input's storage has nothing to do, except where
         * transfers may be in flight: liveness ends a transfer's input where the transfer's output
         * is first used, so a view of that output is where the runtime waits (EXEC_VIEW). */
        bool view = n->op == HP_OP_RESHAPE && p->data[n->in[0]] == p->data[n->out[0]] && p->bytes[n->out[0]] > 0;
        if (view && !async) continue;
        if (!hp_backend_supports_op(p->be, g, n))
            return hp_error(HP_STATUS_UNSUPPORTED, "program: backend %s cannot run node %d (%s in '%s')",
                            hp_backend_name(p->be), i, hp_op_name(n->op), n->scope ? n->scope : "");
        const hp_op_def *d = hp__op_def(n->op);
        size_t w = hp_backend_workspace_bytes(p->be, g, n);
        if (w > ws) ws = w;
        hp_node_args *a = &p->exec[p->n_exec];
        a->g = g;
        a->node = n;
        for (int k = 0; k < n->n_in; k++) a->in[k] = n->in[k] == HP_TID_NONE ? NULL : p->data[n->in[k]];
        for (int j = 0; j < n->n_out; j++) a->out[j] = p->data[n->out[j]];
        p->exec_node[p->n_exec] = i;
        p->exec_flops[p->n_exec] = hp_node_cost(g, i).flops;
        p->exec_kind[p->n_exec] = view                                                   ? EXEC_VIEW
                                  : ((n->flags & HP_NODE_FLAG_ASYNC) && !p->opts.sync_comm) ? EXEC_ASYNC
                                  : ((n->flags & HP_NODE_FLAG_INPLACE) || d->inplace_inputs) ? EXEC_INPLACE
                                                                                            : EXEC_COMPUTE;
        const hp_instr *x = hp_node_instr(n);
        if (x && x->complete) p->complete[p->n_complete++] = p->n_exec;
        p->n_exec++;
    }
    p->stats.n_nodes = p->n_exec;
    if (ws && p->dry) p->stats.workspace_bytes = ws;
    if (ws && !p->dry) {
        hp_status st = hp_backend_alloc(p->be, ws, &p->workspace);
        if (st != HP_STATUS_OK) return hp_error_prefix(st, "program: workspace of %zu bytes: ", ws);
        p->stats.workspace_bytes = ws;
    }
    for (int e = 0; e < p->n_exec; e++) {
        p->exec[e].workspace = p->workspace;
        p->exec[e].workspace_bytes = ws;
    }
    return HP_STATUS_OK;
}

/* Builds a program; with `dry`, plans and counts everything but allocates no data buffers. */
static hp_status program_build(const hp_graph *g, const hp_program_opts *opts, bool dry, hp_program **out) {
    *out = NULL;
    HP_CHECK(hp_graph_verify(g));
    hp_program *p = calloc(1, sizeof *p);
    if (!p) return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory");
    p->dry = dry;
    p->g = g;
    p->opts = opts ? *opts : HP_PROGRAM_OPTS_DEFAULT;
    hp_status st = HP_STATUS_OK;
    if (p->opts.progress == HP_PROGRESS_AUTO && (st = hp_progress_auto(&p->opts.progress)) != HP_STATUS_OK) {
        free(p);
        return st;
    }
    if (p->opts.progress == HP_PROGRESS_INORDER) p->opts.sync_comm = true;
    if (p->opts.backend) {
        p->be = p->opts.backend;
    } else {
        HP_CHECK_GOTO(hp_backend_cpu_new(&p->be), st, fail);
        p->own_be = true;
    }
    HP_CHECK_GOTO(hp_liveness_compute(g, p->opts.keep, p->opts.n_keep, &p->lv), st, fail);
    int nt = p->lv.n_tensors;
    p->data = calloc((size_t)nt + 1, sizeof *p->data);
    p->bytes = calloc((size_t)nt + 1, sizeof *p->bytes);
    p->own = calloc((size_t)nt + 1, sizeof *p->own);
    p->offset = malloc(((size_t)nt + 1) * sizeof *p->offset);
    p->ext = calloc((size_t)nt + 1, sizeof *p->ext);
    if (!p->data || !p->bytes || !p->own || !p->offset || !p->ext) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for %d tensors", nt);
        goto fail;
    }
    for (int t = 0; t < nt; t++) {
        p->bytes[t] = tensor_bytes(hp_graph_tensor(g, t));
        p->offset[t] = SIZE_MAX;
        const hp_program_ext *e = p->opts.ext;
        p->ext[t] = e && t < e->n_tensors && e->tier[t] != HP_TIER_DEVICE && e->tier[t] < HP_TIER_COUNT;
    }
    HP_CHECK_GOTO(store_prepare(p), st, fail);
    HP_CHECK_GOTO(bind_storage(p), st, fail);
    store_finish(p);
    HP_CHECK_GOTO(bind_nodes(p), st, fail);
    if (p->opts.progress == HP_PROGRESS_COMPUTE) { /* every asynchronous node must start non-blocking */
        p->compute_progress = true;
        for (int e = 0; e < p->n_exec; e++) {
            const hp_instr *x = hp_node_instr(p->exec[e].node);
            if (p->exec_kind[e] == EXEC_ASYNC && !(x && x->start)) p->compute_progress = false;
        }
        if (!p->compute_progress) p->opts.progress = HP_PROGRESS_YIELD;
    }
    if (!dry && !p->compute_progress) {
        bool *async = calloc((size_t)p->n_exec + 1, sizeof *async);
        if (!async) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for %d nodes", p->n_exec);
            goto fail;
        }
        for (int e = 0; e < p->n_exec; e++) async[e] = p->exec_kind[e] == EXEC_ASYNC;
        st = hp__queues_new(p->exec, async, p->n_exec, p->queue_of, &p->q);
        free(async);
        if (st != HP_STATUS_OK) goto fail;
        p->stats.n_queues = hp__queues_count(p->q);
        hp__queues_set_wait(p->q, p->opts.progress == HP_PROGRESS_YIELD   ? HP_COMM_WAIT_YIELD
                                  : p->opts.progress == HP_PROGRESS_SLEEP ? HP_COMM_WAIT_SLEEP
                                                                          : HP_COMM_WAIT_BLOCK);
    }
    p->stats.device_bytes = p->stats.persistent_bytes + p->stats.arena_bytes + p->stats.workspace_bytes;
    size_t fast = p->stats.device_bytes + p->stats.store_bytes;
    if (p->opts.ext && p->opts.ext->device_budget > 0 && fast > p->opts.ext->device_budget) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY,
                      "program: fast-tier budget of %zu bytes exceeded: %zu persistent + %zu in the store + %zu "
                      "arena + %zu workspace = %zu bytes",
                      p->opts.ext->device_budget, p->stats.persistent_bytes, p->stats.store_bytes,
                      p->stats.arena_bytes, p->stats.workspace_bytes, fast);
        goto fail;
    }
    if (!dry && p->opts.trace) HP_CHECK_GOTO(hp__program_trace_attach(p, p->opts.trace, &p->opts.trace_tags), st, fail);
    p->built = true;
    *out = p;
    return HP_STATUS_OK;
fail:
    hp_program_free(p);
    return st;
}

static hp_status ext_sync(hp_program *p, hp_tid t) {
    const hp_program_ext *e = p->opts.ext;
    return e && e->sync ? e->sync(e->user, t) : HP_STATUS_OK;
}

hp_status hp_program_sync(hp_program *p) { return p ? ext_sync(p, -1) : HP_STATUS_OK; }

void *hp_program_data(hp_program *p, hp_tid t) {
    bool shared = store_shared(p, t);
    if (shared) (void)hp__store_sync(p->binds[p->bind_of[t]].e); /* another program's deferred writes */
    if (t >= 0 && t < p->lv.n_tensors && (p->own[t] || p->ext[t] || shared)) (void)ext_sync(p, t);
    if (t >= 0 && t < p->lv.n_tensors && (p->ext[t] || shared)) return p->data[t];
    if (t < 0 || t >= p->lv.n_tensors || !p->own[t]) return NULL;
    return p->data[t];
}

static hp_status check_io(const hp_program *p, hp_tid t, size_t bytes, const char *what) {
    if (t < 0 || t >= p->lv.n_tensors)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: tensor id %d out of range (graph has %d)", what, t,
                        p->lv.n_tensors);
    const hp_tensor *x = hp_graph_tensor(p->g, t);
    if (!p->own[t] && !p->ext[t] && !store_shared(p, t))
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "%s: tensor %d ('%s') has no storage of its own (a planned or dead activation; "
                        "list it in opts.keep)", what, t, x->name ? x->name : "");
    if (bytes != p->bytes[t])
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: %zu bytes given for tensor %d ('%s'), which holds %zu",
                        what, bytes, t, x->name ? x->name : "", p->bytes[t]);
    return HP_STATUS_OK;
}

hp_status hp_program_set_input(hp_program *p, hp_tid t, const void *src, size_t bytes) {
    HP_CHECK(check_io(p, t, bytes, "hp_program_set_input"));
    int kind = store_kind(p, t);
    if (kind == HP__STORE_VIEW || kind == HP__STORE_COPY)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "hp_program_set_input: tensor %d ('%s') is a read-only %s of a state store entry", t,
                        hp_graph_tensor(p->g, t)->name, kind == HP__STORE_VIEW ? "view" : "copy");
    HP_CHECK(ext_sync(p, t));
    if (kind >= 0) hp__store_bump(p->binds[p->bind_of[t]].e);
    if (p->ext[t]) return p->opts.ext->write(p->opts.ext->user, t, src, bytes);
    return hp_backend_set(p->be, p->data[t], src, bytes);
}

hp_status hp_program_get_output(hp_program *p, hp_tid t, void *dst, size_t bytes) {
    HP_CHECK(check_io(p, t, bytes, "hp_program_get_output"));
    HP_CHECK(ext_sync(p, t));
    if (p->ext[t]) return p->opts.ext->read(p->opts.ext->user, t, dst, bytes);
    HP_CHECK(hp_backend_get(p->be, dst, p->data[t], bytes));
    return hp_backend_synchronize(p->be);
}

/* Completes what instructions left in flight (non-blocking sends), after their queues ran them. */
static hp_status complete_all(hp_program *p) {
    hp_first_error fe = {HP_STATUS_OK, ""};
    for (int c = 0; c < p->n_complete; c++) {
        hp_instr *x = hp_node_instr(p->exec[p->complete[c]].node);
        hp_first_error_add(&fe, x->complete(x));
    }
    return hp_first_error_status(&fe);
}

/* Waits for every queue, then completes what is in flight: nothing asynchronous is left. */
static hp_status wait_all(hp_program *p) {
    hp_first_error fe = {HP_STATUS_OK, ""};
    for (int f = 0; f < p->n_flight; f++) {
        hp_first_error_add(&fe, hp_comm_wait(p->flight_req[f]));
        p->flight_req[f] = NULL;
    }
    p->n_flight = 0;
    if (p->q) hp_first_error_add(&fe, hp__queues_wait_all(p->q));
    hp_first_error_add(&fe, complete_all(p));
    return hp_first_error_status(&fe);
}

/* Drops the flights that are done: requests completed (NULL) and queue submissions up to need[]. */
static void compact_flights(hp_program *p, const uint64_t *need) {
    int w = 0;
    for (int f = 0; f < p->n_flight; f++) {
        int qk = p->flight_queue[f];
        if (qk < 0 && !p->flight_req[f]) continue;
        if (qk >= 0 && qk < 64 && need[qk] && p->flight_seq[f] <= need[qk]) continue;
        p->flight_ptr[w] = p->flight_ptr[f];
        p->flight_bytes[w] = p->flight_bytes[f];
        p->flight_tid[w] = p->flight_tid[f];
        p->flight_seq[w] = p->flight_seq[f];
        p->flight_req[w] = p->flight_req[f];
        p->flight_queue[w++] = qk;
    }
    p->n_flight = w;
}

/* Compute-driven progress: tests every request in flight once (between nodes). */
static hp_status test_flights(hp_program *p) {
    bool any = false;
    for (int f = 0; f < p->n_flight; f++) {
        if (!p->flight_req[f]) continue;
        bool done;
        hp_status st = hp_comm_test(p->flight_req[f], &done);
        if (done) p->flight_req[f] = NULL; /* released by the test, also on an error */
        HP_CHECK(st);
        any |= done;
    }
    if (any) {
        uint64_t none[64] = {0};
        compact_flights(p, none);
    }
    return HP_STATUS_OK;
}

/* Waits for the asynchronous outputs that node `e` reads (all of them before an in-place
 * writer, which may overwrite what a transfer in flight still reads). Each queue is waited for up
 * to the latest submission whose output the node reads. */
static hp_status wait_inputs(hp_program *p, int e) {
    if (p->exec_kind[e] == EXEC_INPLACE && (p->n_flight || p->n_complete)) return wait_all(p);
    if (!p->n_flight) return HP_STATUS_OK;
    const hp_node_args *a = &p->exec[e];
    int nq = hp__queues_count(p->q);
    /* Every reader waits, an asynchronous node on the producer's own queue too: the queue would run
     * them in order, but liveness ends the producer's inputs at this first reader, so the compute
     * thread must not run past it (and reuse those bytes) while the producer may still read them. */
    uint64_t need[64] = {0};
    bool any = false;
    for (int k = 0; k < a->node->n_in; k++) {
        const hp_tid t = a->node->in[k];
        if (t == HP_TID_NONE) continue;
        const char *x = a->in[k];
        size_t xb = x ? p->bytes[t] : 0;
        for (int f = 0; f < p->n_flight; f++) {
            int qk = p->flight_queue[f];
            /* by bytes, and by tensor: an empty output (a rank's empty block of an uneven split)
             * overlaps nothing, yet its reader is where liveness ended the producer's inputs */
            if (t == p->flight_tid[f] || (x && x < p->flight_ptr[f] + p->flight_bytes[f] && p->flight_ptr[f] < x + xb)) {
                if (qk < 0) { /* a request started here: complete it now */
                    hp_comm_request *r = p->flight_req[f];
                    p->flight_req[f] = NULL;
                    HP_CHECK(hp_comm_wait(r));
                    continue;
                }
                if (qk >= 64) return wait_all(p); /* more queues than tracked: wait for all */
                if (p->flight_seq[f] > need[qk]) need[qk] = p->flight_seq[f];
                any = true;
            }
        }
    }
    for (int qk = 0; qk < nq && qk < 64; qk++)
        if (need[qk]) HP_CHECK(hp__queues_wait(p->q, qk, need[qk]));
    if (any || p->compute_progress) compact_flights(p, need);
    return HP_STATUS_OK;
}

/* Runs node e: an asynchronous instruction on its queue; a transfer instruction (collective,
 * point-to-point, copy) here through its own execute; anything else through the backend. */
static hp_status run_exec(hp_program *p, int e) {
    double t0 = 0;
    if (p->trace) { /* a wait span when something in flight may block this node */
        bool may_wait = p->n_flight || (p->exec_kind[e] == EXEC_INPLACE && p->n_complete);
        t0 = hp_trace_begin(p->trace);
        HP_CHECK(wait_inputs(p, e));
        if (may_wait) {
            hp__program_trace_wait(p, t0);
            t0 = hp_trace_begin(p->trace);
        }
    } else {
        HP_CHECK(wait_inputs(p, e));
    }
    const hp_node_args *a = &p->exec[e];
    if (p->exec_kind[e] == EXEC_VIEW) return HP_STATUS_OK; /* storage shared: only the wait */
    if (p->exec_kind[e] != EXEC_ASYNC) {
        hp_instr *x = hp_node_instr(a->node);
        hp_status st = x && x->queue != HP_QUEUE_COMPUTE && x->execute ? x->execute(x, a, NULL)
                                                                        : hp_backend_run_node(p->be, a);
        if (p->trace && st == HP_STATUS_OK) hp__program_trace_node(p, e, t0);
        return st;
    }
    int qk = p->queue_of[e];
    uint64_t seq = 0;
    hp_comm_request *req = NULL;
    if (p->compute_progress) {
        hp_instr *x = hp_node_instr(a->node);
        HP_CHECK(x->start(x, a, &req));
        if (p->trace) hp__program_trace_node(p, e, t0); /* the start; it completes in the background */
        if (!req) return HP_STATUS_OK; /* already complete */
        qk = -1;
    } else {
        HP_CHECK(hp__queues_submit(p->q, qk, a, &seq));
        if (p->trace) hp__program_trace_issue(p, e, t0);
    }
    for (int j = 0; j < a->node->n_out; j++) {
        p->flight_ptr[p->n_flight] = a->out[j];
        p->flight_bytes[p->n_flight] = p->bytes[a->node->out[j]];
        p->flight_tid[p->n_flight] = a->node->out[j];
        p->flight_seq[p->n_flight] = seq;
        p->flight_req[p->n_flight] = j == 0 ? req : NULL;
        p->flight_queue[p->n_flight++] = qk;
    }
    return HP_STATUS_OK;
}

/* Runs the instructions' prepare hooks once, in program order, on this thread (creating
 * communicators is collective: every rank does it in the same order, before queues run). */
static hp_status prepare_instrs(hp_program *p) {
    if (p->prepared) return HP_STATUS_OK;
    for (int e = 0; e < p->n_exec; e++) {
        hp_instr *x = hp_node_instr(p->exec[e].node);
        if (x && x->prepare) HP_CHECK(x->prepare(x));
    }
    p->prepared = true;
    return HP_STATUS_OK;
}

/* The profile's bookkeeping for exec entry e, which took dt seconds. */
static void profile_node(hp_program *p, int e, double dt) {
    hp_op op = p->exec[e].node->op;
    if (p->exec_best[e] == 0 || dt < p->exec_best[e]) p->exec_best[e] = dt;
    p->exec_seconds[e] = dt;
    p->stats.op_seconds[op] += dt;
    p->stats.op_calls[op]++;
    p->stats.op_flops[op] += p->exec_flops[e];
}

/* After exec entry e failed with st (e < 0: not attributable to a node): let collectives in flight
 * and the pass's copies finish before their buffers can be reused, keep the first error, and name
 * the node. */
static hp_status node_failed(hp_program *p, int e, hp_status st) {
    const hp_program_ext *ext = p->opts.ext;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hp_error_message());
    (void)wait_all(p);
    hp__queues_clear_errors(p->q); /* the step failed as a whole; a later run starts clean */
    if (ext && ext->after_run) (void)ext->after_run(ext->user); /* drains the copy stream */
    p->range_open = false;
    hp_error(st, "%s", msg);
    if (e < 0) return st;
    const hp_node *n = p->exec[e].node;
    return hp_error_prefix(st, "node %d (%s in '%s'): ", p->exec_node[e], hp_op_name(n->op), n->scope ? n->scope : "");
}

/* Runs exec entries [e0, e1) and waits for everything they started. */
static hp_status run_execs(hp_program *p, int e0, int e1) {
    bool prof = p->opts.profile;
    const hp_program_ext *ext = p->opts.ext;
    if (p->n_binds) HP_CHECK(hp__store_before_run(p->opts.store, p->binds, p->n_binds, p->be));
    HP_CHECK(prepare_instrs(p));
    /* A run from the start after a range that left transfers in flight (a step abandoned mid-way):
     * they finish before this run reuses the arena. range_open stays set until a hook drained. */
    if (p->range_open && e0 == 0) {
        if (ext && ext->after_run) HP_CHECK(ext->after_run(ext->user));
        p->range_open = false;
    }
    if (ext && ext->before_run) HP_CHECK(ext->before_run(ext->user));
    if (!p->q && !p->compute_progress && !p->opts.node_by_node) {
        /* No node is asynchronous, so nothing waits between nodes: the backend runs the program as
         * one batch (hp_backend_run_nodes; on the CPU one thread team for the whole step). */
        int failed = -1;
        double t0 = hp_trace_begin(p->trace);
        hp_status st = hp_backend_run_nodes(p->be, p->exec + e0, e1 - e0, prof || p->trace ? p->exec_seconds + e0 : NULL,
                                            &failed);
        if (p->trace) hp__program_trace_batch(p, t0, e0, st == HP_STATUS_OK ? e1 : e0 + (failed < 0 ? 0 : failed));
        if (st != HP_STATUS_OK) return node_failed(p, failed < 0 ? -1 : e0 + failed, st);
        for (int e = e0; e < e1 && prof; e++) profile_node(p, e, p->exec_seconds[e]);
    } else {
        for (int e = e0; e < e1; e++) {
            double t0 = prof ? hp_now_seconds() : 0;
            hp_status st = run_exec(p, e);
            if (st == HP_STATUS_OK && p->compute_progress && p->n_flight) st = test_flights(p);
            if (st == HP_STATUS_OK && prof) st = hp_backend_synchronize(p->be);
            if (st != HP_STATUS_OK) return node_failed(p, e, st);
            if (prof) profile_node(p, e, hp_now_seconds() - t0);
        }
    }
    double tw = hp_trace_begin(p->trace);
    hp_status wst = wait_all(p);
    if (p->trace && (p->q || p->compute_progress)) hp__program_trace_wait(p, tw);
    if (wst != HP_STATUS_OK) return node_failed(p, -1, wst);
    if (p->q) hp__queues_times(p->q, &p->stats.comm_busy_s, &p->stats.comm_wait_s);
    HP_CHECK(hp_backend_synchronize(p->be));
    if (e1 < p->n_exec && ext && ext->after_range) { /* a later range waits for what it leaves in flight */
        p->range_open = true;
        HP_CHECK(ext->after_range(ext->user));
    } else if (ext && ext->after_run) {
        HP_CHECK(ext->after_run(ext->user));
        p->range_open = false;
    }
    if (e1 == p->n_exec) p->stats.n_runs++;
    return HP_STATUS_OK;
}

hp_status hp_program_run(hp_program *p) { return run_execs(p, 0, p->n_exec); }

hp_status hp_program_run_nodes(hp_program *p, int first, int last) {
    int nn = hp_graph_n_nodes(p->g);
    if (first < 0 || last > nn || first > last)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "program: node range [%d, %d) is outside [0, %d]", first, last, nn);
    if (p->opts.ext && !p->opts.ext->per_range && (first > 0 || last < nn))
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "program: a node range [%d, %d) of a program with an offload pass (its hooks run per step)",
                        first, last);
    int e0 = 0, e1;
    while (e0 < p->n_exec && p->exec_node[e0] < first) e0++;
    for (e1 = e0; e1 < p->n_exec && p->exec_node[e1] < last;) e1++;
    return run_execs(p, e0, e1);
}

const hp_liveness *hp_program_liveness(const hp_program *p) { return &p->lv; }

bool hp_program_arena_offset(const hp_program *p, hp_tid t, size_t *offset) {
    if (t < 0 || t >= p->lv.n_tensors || p->offset[t] == SIZE_MAX) return false;
    *offset = p->offset[t];
    return true;
}

void *hp_program_arena_peek(hp_program *p, hp_tid t) {
    if (!p || !p->arena || t < 0 || t >= p->lv.n_tensors || p->offset[t] == SIZE_MAX) return NULL;
    (void)ext_sync(p, -1);
    return (char *)p->arena + p->offset[t];
}

bool hp_program_node_seconds(const hp_program *p, int node, double *last, double *best) {
    if (!p->opts.profile || p->stats.n_runs == 0) return false;
    int a = 0, b = p->n_exec - 1; /* exec_node is increasing */
    while (a <= b) {
        int m = a + (b - a) / 2;
        if (p->exec_node[m] < node) a = m + 1;
        else if (p->exec_node[m] > node) b = m - 1;
        else {
            if (last) *last = p->exec_seconds[m];
            if (best) *best = p->exec_best[m];
            return true;
        }
    }
    return false;
}

hp_status hp_program_new(const hp_graph *g, const hp_program_opts *opts, hp_program **out) {
    return program_build(g, opts, false, out);
}

hp_status hp_program_plan(const hp_graph *g, const hp_program_opts *opts, hp_program_stats *stats) {
    hp_program *p;
    HP_CHECK(program_build(g, opts, true, &p));
    *stats = p->stats;
    hp_program_free(p);
    return HP_STATUS_OK;
}
