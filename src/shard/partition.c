/*
 * The SPMD partitioner (see hp/shard.h): walks the logical graph in program order, asks each
 * operator's sharding rule for the layouts it needs, inserts planned redistributions, and emits
 * the per-rank node with local shapes.
 */
#include "hp/shard.h"

#include "ops/op.h"
#include "shard/partition_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A per-rank version of a logical tensor: the produced one, or a redistributed copy. */
#define PHASE_ANY UINT32_MAX /* a kernel's own output that a rule published in another layout */
typedef struct version {
    hp_layout layout;
    hp_tid local;
    uint32_t phase;
    struct version *next;
} version;

struct hp_partition {
    const hp_graph *lg;
    hp_graph *g; /* per-rank graph */
    hp_mesh *mesh;
    int index;
    version **ver;      /* per logical tensor: first = produced version */
    hp_layout *hints;   /* per logical tensor: preferred resolved layout (ndim -1: none) */
    hp_tid *resolved;
    int n_resolved;
    hp_collective_info *coll;
    int n_coll, cap_coll;
    int64_t bytes;
    int64_t p2p_bytes; /* bytes this rank receives point to point (ring attention) */
    bool ring;         /* hp_partition_opts.context_parallel == HP_CP_RING */
    hp_bucket_info *buckets;
    int n_buckets;
    const uint8_t *stationary; /* per logical tensor (NULL: none): see hp_shard_ctx.stationary */
    uint8_t *conflict;         /* per logical tensor, filled by the rules (NULL: not recorded) */
    uint32_t phase;            /* of the node being partitioned */
    uint8_t *stationary_set;   /* owned: the search's choice (NULL: none) */
    int n_stationary;
};

hp_graph *hp_partition_graph(const hp_partition *p) { return p->g; }
int hp_partition_n_collectives(const hp_partition *p) { return p->n_coll; }
const hp_collective_info *hp_partition_collective(const hp_partition *p, int i) { return &p->coll[i]; }
int64_t hp_partition_bytes(const hp_partition *p) { return p->bytes; }
int64_t hp_partition_p2p_bytes(const hp_partition *p) { return p->p2p_bytes; }
int hp_partition_n_buckets(const hp_partition *p) { return p->n_buckets; }
int hp_partition_n_stationary(const hp_partition *p) { return p->n_stationary; }
bool hp_partition_is_stationary(const hp_partition *p, hp_tid t) {
    return p->stationary_set && t >= 0 && t < hp_graph_n_tensors(p->lg) && p->stationary_set[t];
}
const hp_bucket_info *hp_partition_bucket(const hp_partition *p, int i) { return &p->buckets[i]; }
hp_tid hp_partition_resolved(const hp_partition *p, int i) { return p->resolved[i]; }

hp_tid hp_partition_local(const hp_partition *p, hp_tid t) {
    return (t >= 0 && t < hp_graph_n_tensors(p->lg) && p->ver[t]) ? p->ver[t]->local : HP_TID_NONE;
}

const hp_layout *hp_partition_layout(const hp_partition *p, hp_tid t) {
    return (t >= 0 && t < hp_graph_n_tensors(p->lg) && p->ver[t]) ? &p->ver[t]->layout : NULL;
}

void hp_partition_free(hp_partition *p) {
    if (!p) return;
    hp_graph_free(p->g);
    free(p->ver);
    free(p->hints);
    free(p->resolved);
    free(p->coll);
    free(p->buckets);
    free(p->stationary_set);
    free(p);
}

static const char *lname(const hp_graph *g, hp_tid t, char *buf, size_t n) {
    const hp_tensor *x = hp_graph_tensor(g, t);
    if (x->name) return x->name;
    snprintf(buf, n, "%%%d", t);
    return buf;
}

static hp_status add_version(hp_partition *p, hp_tid lt, const hp_layout *l, hp_tid local, uint32_t phase) {
    version *v = hp_arena_alloc(hp_graph_arena(p->g), sizeof *v, 8);
    if (!v) return hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory");
    v->layout = *l;
    v->local = local;
    v->phase = phase;
    if (!p->ver[lt]) {
        p->ver[lt] = v;
    } else {
        v->next = p->ver[lt]->next;
        p->ver[lt]->next = v;
    }
    return HP_STATUS_OK;
}

/*
 * Appends a REDISTRIBUTE of per-rank tensor `src` (logical tensor lt, laid out as `from`) to
 * layout `want`, recording the collective. *out receives the new per-rank tensor.
 */
static hp_status add_redistribute(hp_partition *p, hp_tid lt, const hp_layout *from, hp_tid src,
                                  const hp_layout *want, uint32_t phase, hp_tid *out) {
    const hp_tensor *x = hp_graph_tensor(p->lg, lt);
    char nb[32];
    hp__redist_extra *ex = hp_arena_alloc(hp_graph_arena(p->g), sizeof *ex, 16);
    if (!ex) return hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory");
    hp_status st = hp_redistribute_plan_make(p->mesh, from, want, &x->shape, x->dtype, &ex->plan);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "redistributing '%s': ", lname(p->lg, lt, nb, sizeof nb));
    ex->mesh = p->mesh;
    ex->n_groups = 0;
    hp_attrs at = {0};
    HP_CHECK(hp_layout_local_shape(want, p->mesh, &x->shape, p->index, &at.shape));
    hp_tid ins[2] = {src, HP_TID_NONE};
    const hp_layout *rag = from->ragged ? from : want->ragged ? want : NULL;
    if (rag) { /* a ragged exchange reads the counts: the produced version, each rank's own addend */
        hp_tid ct = rag->ragged_by;
        if (ct < 0 || ct >= hp_graph_n_tensors(p->lg) || !p->ver[ct])
            return hp_error(HP_STATUS_INTERNAL, "redistributing '%s': ragged counts %%%d are not defined yet",
                            lname(p->lg, lt, nb, sizeof nb), (int)ct);
        const hp_tensor *ctt = hp_graph_tensor(p->lg, ct);
        if (ctt->dtype != HP_DTYPE_I32 || ctt->shape.ndim != 1)
            return hp_error(HP_STATUS_INTERNAL, "redistributing '%s': ragged counts %%%d must be i32 (E)",
                            lname(p->lg, lt, nb, sizeof nb), (int)ct);
        ins[1] = p->ver[ct]->local;
        ex->n_groups = ctt->shape.dim[0];
    }
    hp_tid r = hp_graph_add_node(p->g, HP_OP_REDISTRIBUTE, ins, rag ? 2 : 1, &at);
    HP_CHECK(hp_graph_status(p->g));
    int ni = hp_graph_n_nodes(p->g) - 1;
    hp_graph_node(p->g, ni)->extra = ex;
    if (p->n_coll == p->cap_coll) {
        int cap = p->cap_coll ? 2 * p->cap_coll : 64;
        hp_collective_info *c = realloc(p->coll, sizeof *c * (size_t)cap);
        if (!c) return hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory");
        p->coll = c;
        p->cap_coll = cap;
    }
    hp_collective_info *ci = &p->coll[p->n_coll++];
    ci->tensor = x->name ? x->name : hp_arena_printf(hp_graph_arena(p->g), "%%%d", lt);
    ci->plan = ex->plan;
    ci->local_node = ni;
    ci->flags = phase;
    p->bytes += ex->plan.bytes;
    *out = r;
    return HP_STATUS_OK;
}

/*
 * The per-rank tensor holding logical tensor lt in layout `want`: the produced version, a cached
 * redistribution made for the same phase, or a new REDISTRIBUTE node. `fresh` skips the cache
 * (the consumer writes it in place).
 */
static hp_status get_local(hp_partition *p, hp_tid lt, const hp_layout *want, uint32_t phase, bool fresh,
                           bool any_phase, hp_tid *out) {
    version *base = p->ver[lt];
    if (!base) return hp_error(HP_STATUS_INTERNAL, "partition: tensor %d used before it is defined", lt);
    if (hp_layout_equal(&base->layout, want) && !fresh) {
        *out = base->local;
        return HP_STATUS_OK;
    }
    if (!fresh)
        for (version *v = base->next; v; v = v->next)
            if ((v->phase == phase || v->phase == PHASE_ANY || any_phase) && hp_layout_equal(&v->layout, want)) {
                *out = v->local;
                return HP_STATUS_OK;
            }
    HP_CHECK(add_redistribute(p, lt, &base->layout, base->local, want, phase, out));
    if (!fresh) HP_CHECK(add_version(p, lt, want, *out, phase));
    return HP_STATUS_OK;
}

static hp_status make_leaf(hp_partition *p, hp_tid lt, const hp_layout *given) {
    const hp_tensor *x = hp_graph_tensor(p->lg, lt);
    hp_layout l = (given && given->ndim >= 0) ? *given : hp__lay_replicated(x->shape.ndim);
    char nb[32];
    if (l.ndim != x->shape.ndim)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout for '%s' has %d dims, the tensor %s has %d",
                        lname(p->lg, lt, nb, sizeof nb), l.ndim, hp__shape_s(&x->shape), x->shape.ndim);
    hp_status st = hp_layout_validate(&l, p->mesh, &x->shape);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "layout of '%s': ", lname(p->lg, lt, nb, sizeof nb));
    hp_shape ls;
    HP_CHECK(hp_layout_local_shape(&l, p->mesh, &x->shape, p->index, &ls));
    hp_tid t = hp_leaf(p->g, NULL, x->kind, x->dtype, ls);
    if (t == HP_TID_NONE) return hp_graph_status(p->g);
    hp_tensor *y = hp_graph_tensor(p->g, t);
    y->requires_grad = x->requires_grad;
    y->no_weight_decay = x->no_weight_decay;
    if (x->name) hp_graph_set_abs_name(p->g, t, x->name);
    HP_CHECK(hp_graph_status(p->g));
    return add_version(p, lt, &l, t, 0);
}

/*
 * A rule published output lt in layout `want` (hp_shard_ctx.publish): the kernel's output (the
 * tensor's only version so far) is redistributed there, the copy becomes the version consumers
 * see, and the kernel's output stays behind it, reusable in every phase.
 */
static hp_status publish_output(hp_partition *p, hp_tid lt, const hp_layout *want, uint32_t phase) {
    version *kernel = p->ver[lt];
    char lb[256], nb[32];
    hp_status st = hp_layout_validate(want, p->mesh, &hp_graph_tensor(p->lg, lt)->shape);
    if (st != HP_STATUS_OK)
        return hp_error_prefix(HP_STATUS_INTERNAL, "published layout %s of '%s': ",
                               hp_layout_format(want, p->mesh, lb, sizeof lb), lname(p->lg, lt, nb, sizeof nb));
    hp_tid copy;
    HP_CHECK(add_redistribute(p, lt, &kernel->layout, kernel->local, want, phase, &copy));
    version *v = hp_arena_alloc(hp_graph_arena(p->g), sizeof *v, 8);
    if (!v) return hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory");
    v->layout = *want;
    v->local = copy;
    v->phase = phase;
    v->next = kernel;
    kernel->phase = PHASE_ANY;
    p->ver[lt] = v;
    return HP_STATUS_OK;
}

/* hp_shard_ctx.has_copy: whether get_local would find lt in `want` without a new redistribution. */
static bool has_copy(void *user, hp_tid lt, const hp_layout *want, bool any_phase) {
    const hp_partition *p = user;
    const version *base = p->ver[lt];
    if (!base) return false;
    if (hp_layout_equal(&base->layout, want)) return true;
    for (const version *v = base->next; v; v = v->next)
        if ((v->phase == p->phase || v->phase == PHASE_ANY || any_phase) && hp_layout_equal(&v->layout, want))
            return true;
    return false;
}

/* The rule used when an operator has none: everything replicated. */
static void default_rule(const hp_graph *g, const hp_node *n, hp_layout *req, hp_layout *out) {
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] != HP_TID_NONE) req[i] = hp__lay_replicated(hp_graph_tensor(g, n->in[i])->shape.ndim);
    for (int j = 0; j < n->n_out; j++) out[j] = hp__lay_replicated(hp_graph_tensor(g, n->out[j])->shape.ndim);
}

/* Hints: a gradient consumed by an in-place optimizer update prefers that update's layout. */
static void compute_hints(hp_partition *p, const hp_layout *leaf) {
    int nt = hp_graph_n_tensors(p->lg);
    for (int t = 0; t < nt; t++) p->hints[t].ndim = -1;
    for (int i = 0; i < hp_graph_n_nodes(p->lg); i++) {
        const hp_node *n = hp_graph_node(p->lg, i);
        if (n->op != HP_OP_ADAMW) continue;
        hp_tid m = n->in[2], grad = n->in[1];
        if (m != HP_TID_NONE && leaf[m].ndim >= 0) p->hints[grad] = leaf[m];
        else if (m != HP_TID_NONE) p->hints[grad] = hp__lay_replicated(hp_graph_tensor(p->lg, m)->shape.ndim);
    }
}

/* The sharding rules' cost of a layout change: the redistribution planner's bytes per rank on the
 * mesh `user` (the rules themselves never call the planner). */
static int64_t planner_cost(void *user, const hp_layout *a, const hp_layout *b, const hp_shape *shape, hp_dtype dt) {
    hp_redistribute_plan plan;
    if (hp_redistribute_plan_make(user, a, b, shape, dt, &plan) != HP_STATUS_OK) return INT64_MAX / 4;
    return plan.bytes;
}

static hp_status partition_node(hp_partition *p, int i) {
    const hp_graph *lg = p->lg;
    const hp_node *n = hp_graph_node(lg, i);
    const hp_op_def *d = hp__op_def(n->op);
    hp_layout in[HP_MAX_NODE_INPUTS], req[HP_MAX_NODE_INPUTS], out[HP_MAX_NODE_OUTPUTS], hint[HP_MAX_NODE_INPUTS];
    hp_layout publish[HP_MAX_NODE_OUTPUTS];
    bool drop[HP_MAX_NODE_INPUTS] = {0};
    for (int k = 0; k < HP_MAX_NODE_INPUTS; k++) {
        hint[k].ndim = -1;
        if (k < n->n_in && n->in[k] != HP_TID_NONE) {
            if (!p->ver[n->in[k]]) return hp_error(HP_STATUS_INTERNAL, "partition: input %d of node %d undefined", k, i);
            in[k] = p->ver[n->in[k]]->layout;
            hint[k] = p->hints[n->in[k]];
        } else {
            in[k] = hp__lay_replicated(0);
        }
        req[k] = in[k];
    }
    for (int j = 0; j < n->n_out; j++) {
        out[j] = hp__lay_replicated(hp_graph_tensor(lg, n->out[j])->shape.ndim);
        publish[j].ndim = -1;
    }
    hp_attrs local = n->attr;
    bool saved[HP_MAX_NODE_INPUTS] = {0};
    p->phase = n->flags & (HP_NODE_FLAG_BACKWARD | HP_NODE_FLAG_OPTIMIZER);
    hp_shard_ctx ctx = {
        .g = lg, .mesh = p->mesh, .index = p->index, .hint = hint, .cost = planner_cost, .cost_user = p->mesh,
        .publish = publish, .stationary = p->stationary, .conflict = p->conflict, .has_copy = has_copy,
        .copy_user = p, .saved = saved, .ring = p->ring,
    };
    if (d->shard) {
        hp_status st = d->shard(&ctx, n, in, req, out, &local, drop);
        if (st != HP_STATUS_OK)
            return hp_error_prefix(st, "sharding rule of %s (node %d in '%s'): ", d->name, i, n->scope ? n->scope : "");
    } else {
        default_rule(lg, n, req, out);
    }
    uint32_t phase = n->flags & (HP_NODE_FLAG_BACKWARD | HP_NODE_FLAG_OPTIMIZER);
    hp_graph_set_node_flags(p->g, n->flags);
    hp_tid lin[HP_MAX_NODE_INPUTS];
    char lb[256], nb[32];
    for (int k = 0; k < n->n_in; k++) {
        lin[k] = HP_TID_NONE;
        /* A dropped input is still brought to its layout: whether a collective runs must never
         * depend on the rank, or the ranks' collective sequences diverge (it is dropped below). */
        if (n->in[k] == HP_TID_NONE) continue;
        const hp_tensor *x = hp_graph_tensor(lg, n->in[k]);
        hp_status st = hp_layout_validate(&req[k], p->mesh, &x->shape);
        if (st != HP_STATUS_OK)
            return hp_error_prefix(HP_STATUS_INTERNAL, "%s (node %d) asks for input %d '%s' in layout %s: ", d->name, i,
                                   k, lname(lg, n->in[k], nb, sizeof nb),
                                   hp_layout_format(&req[k], p->mesh, lb, sizeof lb));
        bool inplace = (d->inplace_inputs >> k) & 1u;
        HP_CHECK(get_local(p, n->in[k], &req[k], phase, inplace && !hp_layout_equal(&req[k], &in[k]),
                           ((d->saved_inputs >> k) & 1u) || saved[k], &lin[k]));
        if (drop[k]) lin[k] = HP_TID_NONE;
    }
    hp_tid louts[HP_MAX_NODE_OUTPUTS];
    bool expanded = false;
    if (d->expand) { /* a rule that expands into a sub-graph (ring attention's steps) */
        int first = hp_graph_n_nodes(p->g);
        hp_expand_ctx ec = {.shard = &ctx, .g = p->g, .in = req, .out = out};
        hp_status st = d->expand(&ec, n, lin, &local, louts, &expanded);
        if (st == HP_STATUS_OK) st = hp_graph_status(p->g);
        if (st != HP_STATUS_OK)
            return hp_error_prefix(st, "expanding %s (node %d in '%s'): ", d->name, i, n->scope ? n->scope : "");
        if (expanded) HP_CHECK(hp__p2p_attach_range(p->g, p->mesh, first, hp_graph_n_nodes(p->g), &p->p2p_bytes));
    }
    if (!expanded) {
        hp_graph_add_node(p->g, n->op, lin, n->n_in, &local);
        HP_CHECK(hp_graph_status(p->g));
        const hp_node *ln = hp_graph_node(p->g, hp_graph_n_nodes(p->g) - 1);
        for (int j = 0; j < n->n_out; j++) louts[j] = ln->out[j];
    }
    for (int j = 0; j < n->n_out; j++) {
        const hp_tensor *x = hp_graph_tensor(lg, n->out[j]);
        hp_shape want;
        hp_status st = hp_layout_validate(&out[j], p->mesh, &x->shape);
        if (st == HP_STATUS_OK) st = hp_layout_local_shape(&out[j], p->mesh, &x->shape, p->index, &want);
        if (st != HP_STATUS_OK)
            return hp_error_prefix(HP_STATUS_INTERNAL, "%s (node %d) output %d layout: ", d->name, i, j);
        const hp_shape *got = &hp_graph_tensor(p->g, louts[j])->shape;
        if (!hp_shape_equal(&want, got))
            return hp_error(HP_STATUS_INTERNAL, "%s (node %d in '%s'): local output %d is %s, layout %s says %s", d->name,
                            i, n->scope ? n->scope : "", j, hp__shape_s(got),
                            hp_layout_format(&out[j], p->mesh, lb, sizeof lb), hp__shape_s(&want));
        if (x->name) hp_graph_set_abs_name(p->g, louts[j], x->name);
        HP_CHECK(add_version(p, n->out[j], &out[j], louts[j], phase));
        if (publish[j].ndim >= 0 && !hp_layout_equal(&publish[j], &out[j]))
            HP_CHECK(publish_output(p, n->out[j], &publish[j], phase));
    }
    /* In-place inputs updated on a redistributed copy are written back to the original. */
    for (int k = 0; k < n->n_in; k++) {
        if (!((d->inplace_inputs >> k) & 1u) || n->in[k] == HP_TID_NONE || lin[k] == HP_TID_NONE) continue;
        version *base = p->ver[n->in[k]];
        if (lin[k] == base->local) continue;
        hp_tid back; /* the updated copy (layout req[k]) brought back to the original's layout */
        HP_CHECK(add_redistribute(p, n->in[k], &req[k], lin[k], &base->layout, phase, &back));
        hp_tid asg[2] = {base->local, back};
        hp_graph_add_node(p->g, HP_OP_ASSIGN, asg, 2, NULL);
        HP_CHECK(hp_graph_status(p->g));
        base->next = NULL; /* cached copies are stale now */
    }
    hp_graph_set_node_flags(p->g, 0);
    return HP_STATUS_OK;
}

/* How far ahead of its use a parameter's collective (an FSDP all-gather) may be issued, in
 * nodes: enough to hide it behind the previous operators, bounded so the gathered copies of a
 * whole model are never live at once. */
#define PREFETCH_WINDOW 24

/* A plan with any collective step — even one that moves no bytes (an all-to-allv in which this
 * tensor's empty blocks are exchanged) — synchronises the ranks, so it must run on the
 * communication stream with every other collective, never concurrently from the compute thread. */
static bool plan_communicates(const hp_redistribute_plan *p) {
    for (int k = 0; k < p->nsteps; k++)
        if (p->steps[k].kind != HP_REDIST_LOCAL_SLICE && p->steps[k].kind != HP_REDIST_LOCAL_PARTIAL) return true;
    return false;
}

typedef struct sched_key {
    int slot, kind, index;
} sched_key;

static int cmp_key(const void *a, const void *b) {
    const sched_key *x = a, *y = b;
    if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
    if (x->kind != y->kind) return x->kind - y->kind;
    return x->index - y->index;
}

/*
 * Communication scheduling: each REDISTRIBUTE with a collective step is issued as early as its input
 * allows — right after the input's last writer (its producer, or an in-place update), a parameter
 * at most PREFETCH_WINDOW nodes ahead of its use — and flagged HP_NODE_FLAG_ASYNC, so the runtime
 * runs it on the communication stream while the compute in between proceeds (a data-parallel
 * gradient's all-reduce overlaps the rest of the backward pass, as in PyTorch DDP; an FSDP
 * all-gather is prefetched). The order depends only on the graph, so every rank issues the same
 * collectives in the same order.
 */
static hp_status schedule_comm(hp_partition *p) {
    hp_graph *g = p->g;
    int nn = hp_graph_n_nodes(g), nt = hp_graph_n_tensors(g);
    sched_key *key = malloc(sizeof *key * (size_t)(nn ? nn : 1));
    int *last_write = malloc(sizeof *last_write * (size_t)(nt ? nt : 1));
    int *order = malloc(sizeof *order * (size_t)(nn ? nn : 1));
    int *pos = malloc(sizeof *pos * (size_t)(nn ? nn : 1)); /* new position of each old node */
    hp_status st = HP_STATUS_OK;
    if (!key || !last_write || !order || !pos) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory scheduling %d nodes", nn);
        goto out;
    }
    for (int t = 0; t < nt; t++) last_write[t] = -1;
    for (int i = 0; i < nn; i++) {
        hp_node *n = hp_graph_node(g, i);
        key[i] = (sched_key){i, 0, i};
        hp__redist_extra *x = n->extra;
        if (n->op == HP_OP_REDISTRIBUTE && x) { /* every REDISTRIBUTE (buckets too) gets its instruction */
            hp__redist_instr_init(x);
            n->flags |= HP_NODE_FLAG_INSTR;
        }
        if (n->op == HP_OP_REDISTRIBUTE && x && plan_communicates(&x->plan)) {
            hp_tid in = n->in[0];
            bool leaf = hp_graph_tensor(g, in)->producer < 0;
            int earliest = last_write[in];
            if (n->n_in > 1 && n->in[1] != HP_TID_NONE && last_write[n->in[1]] > earliest)
                earliest = last_write[n->in[1]]; /* a ragged exchange's counts */
            if (leaf && i - PREFETCH_WINDOW > earliest) earliest = i - PREFETCH_WINDOW;
            key[i] = (sched_key){earliest, 1, i};
            n->flags |= HP_NODE_FLAG_ASYNC;
        }
        for (int j = 0; j < n->n_out; j++) last_write[n->out[j]] = i;
        uint32_t inplace = hp__op_def(n->op)->inplace_inputs;
        for (int k = 0; k < n->n_in; k++)
            if (((inplace >> k) & 1u) && n->in[k] != HP_TID_NONE) last_write[n->in[k]] = i;
    }
    qsort(key, (size_t)nn, sizeof *key, cmp_key);
    for (int i = 0; i < nn; i++) order[i] = key[i].index;
    /* the collectives' records follow their nodes */
    for (int i = 0; i < nn; i++) pos[order[i]] = i;
    for (int c = 0; c < p->n_coll; c++) p->coll[c].local_node = pos[p->coll[c].local_node];
    st = hp_graph_permute_nodes(g, order);
out:
    free(key);
    free(last_write);
    free(order);
    free(pos);
    return st;
}

hp_status hp_partition_new(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                           const hp_tid *resolve, int n_resolve, hp_partition **out) {
    return hp_partition_new_opts(logical, mesh, leaf_layouts, resolve, n_resolve, NULL, out);
}

hp_status hp_partition_new_at(const hp_graph *logical, hp_mesh *mesh, int index, const hp_layout *leaf_layouts,
                              const hp_tid *resolve, int n_resolve, hp_partition **out) {
    hp_partition_opts o = HP_PARTITION_OPTS_DEFAULT;
    o.index = index;
    if (index < 0) {
        *out = NULL;
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "partition: mesh index %d is outside [0, %d)", index,
                        hp_mesh_size(mesh));
    }
    return hp_partition_new_opts(logical, mesh, leaf_layouts, resolve, n_resolve, &o, out);
}

/*
 * One partition of `logical` at mesh index `index` with the given weight-stationary set (NULL: none),
 * recording conflicts (NULL: not). `full`: also bucket the gradients and schedule the collectives
 * (the search's cost oracle skips both: they do not change the bytes).
 */
static hp_status partition_run(const hp_graph *logical, hp_mesh *mesh, int index, const hp_layout *leaf_layouts,
                               const hp_tid *resolve, int n_resolve, const hp_layout *resolve_layouts,
                               int64_t bucket_size, bool ring,
                               const uint8_t *stationary, uint8_t *conflict, bool full, hp_partition **out) {
    *out = NULL;
    hp_partition *p = calloc(1, sizeof *p);
    int nt = hp_graph_n_tensors(logical);
    if (!p) return hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory");
    p->lg = logical;
    p->mesh = mesh;
    p->index = index;
    p->ring = ring;
    p->stationary = stationary;
    p->conflict = conflict;
    p->g = hp_graph_new();
    p->ver = calloc((size_t)nt, sizeof *p->ver);
    p->hints = calloc((size_t)nt, sizeof *p->hints);
    p->resolved = calloc((size_t)(n_resolve > 0 ? n_resolve : 1), sizeof *p->resolved);
    hp_status st = HP_STATUS_OK;
    if (!p->g || !p->ver || !p->hints || !p->resolved) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory for %d tensors", nt);
        goto fail;
    }
    compute_hints(p, leaf_layouts);
    for (int t = 0; t < nt && st == HP_STATUS_OK; t++)
        if (hp_graph_tensor(logical, t)->producer < 0) st = make_leaf(p, t, &leaf_layouts[t]);
    for (int i = 0; i < hp_graph_n_nodes(logical) && st == HP_STATUS_OK; i++) st = partition_node(p, i);
    for (int r = 0; r < n_resolve && st == HP_STATUS_OK; r++) {
        hp_layout want = hp__lay_replicated(hp_graph_tensor(logical, resolve[r])->shape.ndim);
        if (resolve_layouts && resolve_layouts[r].ndim >= 0) want = resolve_layouts[r]; /* checked by the caller */
        st = get_local(p, resolve[r], &want, HP_NODE_FLAG_OPTIMIZER, false, false, &p->resolved[r]);
    }
    if (full) {
        if (st == HP_STATUS_OK)
            st = hp__bucket_gradients(p->g, mesh, bucket_size, p->coll, &p->n_coll, &p->bytes, &p->buckets,
                                      &p->n_buckets);
        if (st == HP_STATUS_OK) st = schedule_comm(p);
        for (int b = 0; b < p->n_buckets && st == HP_STATUS_OK; b++)
            p->buckets[b].local_node = p->coll[p->buckets[b].collective].local_node;
        if (st == HP_STATUS_OK) st = hp_graph_verify(p->g);
    }
    if (st != HP_STATUS_OK) goto fail;
    p->stationary = NULL; /* the caller owns the set */
    p->conflict = NULL;
    *out = p;
    return HP_STATUS_OK;
fail:
    hp_partition_free(p);
    return st;
}

hp_status hp__partition_oracle(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                               const hp_tid *resolve, int n_resolve, const hp_layout *resolve_layouts, bool ring,
                               const uint8_t *stationary, uint8_t *conflict, int64_t *bytes) {
    hp_partition *p;
    HP_CHECK(partition_run(logical, mesh, 0, leaf_layouts, resolve, n_resolve, resolve_layouts, 0, ring, stationary,
                           conflict, false, &p));
    *bytes = p->bytes + p->p2p_bytes;
    hp_partition_free(p);
    return HP_STATUS_OK;
}

hp_status hp_partition_new_opts(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                                const hp_tid *resolve, int n_resolve, const hp_partition_opts *opts,
                                hp_partition **out) {
    *out = NULL;
    hp_partition_opts o = opts ? *opts : HP_PARTITION_OPTS_DEFAULT;
    int index = o.index;
    if (index < 0) {
        index = hp_mesh_my_index(mesh);
        if (index < 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "partition: this process is not in the mesh (attach it first)");
    }
    if (o.bucket_size < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "partition: bucket_size %lld is negative (0 turns bucketing off)",
                        (long long)o.bucket_size);
    HP_CHECK(hp_graph_verify(logical));
    if (index < 0 || index >= hp_mesh_size(mesh))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "partition: mesh index %d is outside [0, %d)", index,
                        hp_mesh_size(mesh));
    for (int r = 0; o.resolve_layouts && r < n_resolve; r++) { /* once here, not in each search's partition */
        const hp_layout *want = &o.resolve_layouts[r];
        const hp_tensor *x = hp_graph_tensor(logical, resolve[r]);
        char nb[32];
        if (want->ndim < 0) continue; /* a replica */
        if (want->ndim != x->shape.ndim)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "partition: resolve layout %d for '%s' has %d dims, the tensor "
                            "%s has %d", r, lname(logical, resolve[r], nb, sizeof nb), want->ndim,
                            hp__shape_s(&x->shape), x->shape.ndim);
        hp_status vs = hp_layout_validate(want, mesh, &x->shape);
        if (vs != HP_STATUS_OK)
            return hp_error_prefix(vs, "partition: resolve layout %d for '%s': ", r,
                                   lname(logical, resolve[r], nb, sizeof nb));
    }
    uint8_t *stationary = NULL;
    int n_stationary = 0;
    const bool ring = o.context_parallel == HP_CP_RING;
    if (o.search)
        HP_CHECK(hp__partition_search(logical, mesh, leaf_layouts, resolve, n_resolve, o.resolve_layouts, ring,
                                      &stationary, &n_stationary));
    hp_status st = partition_run(logical, mesh, index, leaf_layouts, resolve, n_resolve, o.resolve_layouts,
                                 o.bucket_size, ring,
                                 stationary, NULL, true, out);
    if (st == HP_STATUS_OK) {
        (*out)->stationary_set = stationary;
        (*out)->n_stationary = n_stationary;
    } else {
        free(stationary);
    }
    return st;
}
