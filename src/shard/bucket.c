/*
 * Gradient bucketing (see hp/shard.h): coalesces the gradients' pending-sum collectives of a
 * per-rank graph into buckets, as PyTorch DDP's Reducer does (Li et al., "PyTorch Distributed:
 * Experiences on Accelerating Data Parallel Training", VLDB 2020), with IR operators only:
 *
 *     g_i --RESHAPE--> flat_i --CONCAT (tree)--> bucket --REDISTRIBUTE--> reduced
 *     reduced --SLICE--> piece_i --RESHAPE--> y_i   (y_i: what g_i's own REDISTRIBUTE made)
 *
 * An all-reduce bucket is 1-D. A reduce-scatter over n ranks packs each gradient as an
 * (n, numel/n) view and concatenates along dim 1, so rank k's shard of every gradient is a
 * contiguous column block of the scattered (1, M) row. Runs before communication scheduling,
 * which then issues the bucket's REDISTRIBUTE right after its CONCAT.
 */
#include "ops/op.h"
#include "shard/partition_internal.h"

#include <stdlib.h>
#include <string.h>

/* A gradient collective that may join a bucket. */
typedef struct cand {
    int node;      /* its REDISTRIBUTE node (before the rewrite) */
    int prod;      /* the node that last wrote its input before it */
    int coll;      /* its collective record */
    int group;
    int64_t numel; /* of the local gradient */
    int64_t bytes;
} cand;

/* What makes two collectives one group: the same collective, communicator and reduction. */
typedef struct group_key {
    hp_redist_kind kind;
    int axis;
    hp_dtype dtype;
    uint32_t src_partial, dst_partial;
    hp_reduce_op op;
} group_key;

/* An open bucket of one group. */
typedef struct open_bucket {
    group_key key;
    int *members; /* indices into the candidate array */
    int n, cap;
    int64_t bytes;
    int min_consumer; /* the earliest member's REDISTRIBUTE node */
    int formed;       /* buckets started for this group so far */
} open_bucket;

/* A node added by the rewrite and where it goes: after node `slot` (sub 2) or before it (sub 0). */
typedef struct placed {
    int slot, sub;
} placed;

typedef struct rewriter {
    hp_graph *g;
    hp_mesh *mesh;
    int n0; /* nodes before the rewrite */
    placed *where;
    int n_where, cap_where;
    hp_collective_info *coll;
    int64_t *bytes;
    hp_bucket_info *buckets;
    int n_buckets, cap_buckets;
} rewriter;

static hp_status oom(void) { return hp_error(HP_STATUS_OUT_OF_MEMORY, "partition: out of memory bucketing gradients"); }

/*
 * Whether REDISTRIBUTE node i (input written last by node `prod`) is a gradient collective that can
 * be bucketed, and its group key. Rank-independent: it reads the plan, which every rank shares, and
 * requires even shards, so the local gradient has the same shape on every rank.
 */
static bool bucketable(const hp_graph *g, const hp_mesh *mesh, int i, int prod, group_key *key) {
    const hp_node *n = hp_graph_node(g, i);
    const hp__redist_extra *x = n->extra;
    if (n->op != HP_OP_REDISTRIBUTE || !x || !(n->flags & HP_NODE_FLAG_OPTIMIZER) || prod < 0) return false;
    /* a gradient: made by the backward pass, resolved for the optimizer */
    uint32_t pf = hp_graph_node(g, prod)->flags;
    if (!(pf & HP_NODE_FLAG_BACKWARD) || (pf & HP_NODE_FLAG_OPTIMIZER)) return false;
    const hp_redistribute_plan *p = &x->plan;
    if (p->nsteps != 1) return false;
    const hp_redist_step *s = &p->steps[0];
    if (s->kind != HP_REDIST_ALL_REDUCE && s->kind != HP_REDIST_REDUCE_SCATTER) return false;
    if (p->shape.ndim < 1 || hp_shape_numel(&p->shape) <= 0) return false;
    for (int d = 0; d < p->shape.ndim; d++)
        if (p->shape.dim[d] % hp_layout_shards(&p->src, mesh, d) != 0) return false;
    if (s->kind == HP_REDIST_REDUCE_SCATTER) {
        int64_t rows = p->shape.dim[0] / hp_layout_shards(&p->src, mesh, 0);
        if (s->dim_to != 0 || rows % hp_mesh_dim(mesh, s->axis) != 0) return false;
    }
    *key = (group_key){.kind = s->kind, .axis = s->axis, .dtype = p->dtype, .src_partial = p->src.partial,
                       .dst_partial = p->dst.partial, .op = p->src.partial_op};
    return true;
}

static bool key_equal(const group_key *a, const group_key *b) {
    return a->kind == b->kind && a->axis == b->axis && a->dtype == b->dtype && a->src_partial == b->src_partial &&
           a->dst_partial == b->dst_partial && a->op == b->op;
}

/* Adds a node to the graph and records where the permutation puts it. */
static hp_status add(rewriter *w, hp_op op, const hp_tid *in, int n_in, const hp_attrs *at, int slot, int sub,
                     hp_tid *out) {
    if (w->n_where == w->cap_where) {
        int cap = w->cap_where ? 2 * w->cap_where : 64;
        placed *p = realloc(w->where, sizeof *p * (size_t)cap);
        if (!p) return oom();
        w->where = p;
        w->cap_where = cap;
    }
    *out = hp_graph_add_node(w->g, op, in, n_in, at);
    HP_CHECK(hp_graph_status(w->g));
    w->where[w->n_where++] = (placed){slot, sub};
    return HP_STATUS_OK;
}

/* The bucket's plan: a 1-D [N] (all-reduce) or (n, M) (reduce-scatter) tensor reduced like the
 * members. false when the planner would not make it one step of the same collective. */
static bool bucket_plan(const rewriter *w, const group_key *k, int64_t total, hp_redistribute_plan *plan) {
    hp_layout src, dst;
    hp_shape shape;
    if (k->kind == HP_REDIST_ALL_REDUCE) {
        hp_layout_init(&src, 1);
        hp_layout_init(&dst, 1);
        shape = hp_shape_make(1, (int64_t[]){total});
    } else {
        int64_t n = hp_mesh_dim(w->mesh, k->axis);
        hp_layout_init(&src, 2);
        hp_layout_init(&dst, 2);
        dst.nmap[0] = 1;
        dst.map[0][0] = k->axis;
        shape = hp_shape_make(2, (int64_t[]){n, total / n});
    }
    src.partial = k->src_partial;
    dst.partial = k->dst_partial;
    src.partial_op = dst.partial_op = k->op;
    if (hp_redistribute_plan_make(w->mesh, &src, &dst, &shape, k->dtype, plan) != HP_STATUS_OK) {
        hp_error_clear();
        return false;
    }
    return plan->nsteps == 1 && plan->steps[0].kind == k->kind && plan->steps[0].axis == k->axis;
}

/* Rewrites one bucket (members in production order; at least two). */
static hp_status emit(rewriter *w, const group_key *k, const cand *c, const int *m, int nm) {
    hp_graph *g = w->g;
    bool rs = k->kind == HP_REDIST_REDUCE_SCATTER;
    int64_t n = rs ? hp_mesh_dim(w->mesh, k->axis) : 1, total = 0;
    for (int j = 0; j < nm; j++) total += c[m[j]].numel;
    hp_redistribute_plan plan;
    if (!bucket_plan(w, k, total, &plan)) return HP_STATUS_OK; /* the members keep their own collectives */
    int axis = rs ? 1 : 0, last = c[m[nm - 1]].prod;
    hp_tid *level = malloc(sizeof *level * (size_t)nm);
    int *slot = malloc(sizeof *slot * (size_t)nm);
    hp_tid *members = hp_arena_alloc(hp_graph_arena(g), sizeof *members * (size_t)nm, _Alignof(hp_tid));
    hp__redist_extra *ex = hp_arena_alloc(hp_graph_arena(g), sizeof *ex, 16);
    hp_status st = HP_STATUS_OK;
    if (!level || !slot || !members || !ex) {
        st = oom();
        goto out;
    }
    /* flat views, right after each gradient's last writer */
    hp_graph_set_node_flags(g, HP_NODE_FLAG_BACKWARD);
    for (int j = 0; j < nm; j++) {
        const cand *x = &c[m[j]];
        hp_tid in = hp_graph_node(g, x->node)->in[0];
        members[j] = in;
        hp_attrs at = {.shape = rs ? hp_shape_make(2, (int64_t[]){n, x->numel / n}) : hp_shape_make(1, (int64_t[]){x->numel})};
        HP_CHECK_GOTO(add(w, HP_OP_RESHAPE, &in, 1, &at, x->prod, 2, &level[j]), st, out);
        slot[j] = x->prod;
    }
    /* the bucket: a tree of CONCATs, each issued when its last input exists */
    int len = nm;
    while (len > 1) {
        int out_len = 0;
        for (int a = 0; a < len; a += HP_MAX_NODE_INPUTS) {
            int k2 = len - a < HP_MAX_NODE_INPUTS ? len - a : HP_MAX_NODE_INPUTS;
            if (k2 == 1) {
                level[out_len] = level[a];
                slot[out_len++] = slot[a];
                continue;
            }
            hp_attrs at = {.i = {axis}};
            HP_CHECK_GOTO(add(w, HP_OP_CONCAT, &level[a], k2, &at, slot[a + k2 - 1], 2, &level[out_len]), st, out);
            slot[out_len++] = slot[a + k2 - 1];
        }
        len = out_len;
    }
    /* one collective for the bucket */
    hp_graph_set_node_flags(g, HP_NODE_FLAG_OPTIMIZER);
    ex->plan = plan;
    ex->mesh = w->mesh;
    hp_attrs rat = {.shape = rs ? hp_shape_make(2, (int64_t[]){1, total / n}) : hp_shape_make(1, (int64_t[]){total})};
    hp_tid reduced = HP_TID_NONE;
    HP_CHECK_GOTO(add(w, HP_OP_REDISTRIBUTE, &level[0], 1, &rat, last, 2, &reduced), st, out);
    int rnode = hp_graph_n_nodes(g) - 1;
    hp_graph_node(g, rnode)->extra = ex;
    /* each gradient back where its own collective was: that node becomes a RESHAPE of its slice */
    int64_t off = 0, member_bytes = 0;
    for (int j = 0; j < nm; j++) {
        const cand *x = &c[m[j]];
        int64_t cols = x->numel / n;
        hp_attrs at = {.i = {axis, off, cols}};
        hp_tid piece = HP_TID_NONE;
        HP_CHECK_GOTO(add(w, HP_OP_SLICE, &reduced, 1, &at, x->node, 0, &piece), st, out);
        off += cols;
        hp_node *old = hp_graph_node(g, x->node);
        hp_tensor *y = hp_graph_tensor(g, old->out[0]);
        if (hp_shape_numel(&y->shape) != cols) {
            st = hp_error(HP_STATUS_INTERNAL, "bucket: gradient %d has %lld elements per rank, its collective made %lld",
                          old->in[0], (long long)cols, (long long)hp_shape_numel(&y->shape));
            goto out;
        }
        old->op = HP_OP_RESHAPE;
        old->in[0] = piece;
        old->attr = (hp_attrs){.shape = y->shape};
        old->extra = NULL;
        member_bytes += w->coll[x->coll].plan.bytes;
        w->coll[x->coll].local_node = -1; /* dropped below */
    }
    hp_graph_set_node_flags(g, 0);
    /* the bucket's record takes the first member's place */
    hp_collective_info *ci = &w->coll[c[m[0]].coll];
    uint32_t flags = ci->flags;
    *ci = (hp_collective_info){.tensor = hp_arena_printf(hp_graph_arena(g), "bucket.%d (%d tensors)", w->n_buckets, nm),
                               .plan = plan, .local_node = rnode, .flags = flags};
    if (!ci->tensor) {
        st = oom();
        goto out;
    }
    *w->bytes += plan.bytes - member_bytes;
    if (w->n_buckets == w->cap_buckets) {
        int cap = w->cap_buckets ? 2 * w->cap_buckets : 16;
        hp_bucket_info *b = realloc(w->buckets, sizeof *b * (size_t)cap);
        if (!b) {
            st = oom();
            goto out;
        }
        w->buckets = b;
        w->cap_buckets = cap;
    }
    w->buckets[w->n_buckets++] = (hp_bucket_info){.kind = k->kind, .axis = k->axis, .dtype = k->dtype,
                                                  .n_tensors = nm, .tensors = members,
                                                  .bytes = total * (int64_t)hp_dtype_size(k->dtype),
                                                  .local_node = rnode, .collective = c[m[0]].coll};
out:
    hp_graph_set_node_flags(g, 0);
    free(level);
    free(slot);
    return st;
}

static int cmp_prod(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->prod != y->prod) return x->prod < y->prod ? -1 : 1;
    return x->node - y->node;
}

typedef struct sort_key {
    int slot, sub, index;
} sort_key;

static int cmp_key(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
    if (x->sub != y->sub) return x->sub - y->sub;
    return x->index - y->index;
}

/* Puts the added nodes where they belong, drops the members' records, renumbers the rest. */
static hp_status place(rewriter *w, int *n_coll) {
    int nn = hp_graph_n_nodes(w->g);
    sort_key *key = malloc(sizeof *key * (size_t)nn);
    int *order = malloc(sizeof *order * (size_t)nn), *pos = malloc(sizeof *pos * (size_t)nn);
    hp_status st = HP_STATUS_OK;
    if (!key || !order || !pos) {
        st = oom();
        goto out;
    }
    for (int i = 0; i < nn; i++)
        key[i] = i < w->n0 ? (sort_key){i, 1, i} : (sort_key){w->where[i - w->n0].slot, w->where[i - w->n0].sub, i};
    qsort(key, (size_t)nn, sizeof *key, cmp_key);
    for (int i = 0; i < nn; i++) {
        order[i] = key[i].index;
        pos[order[i]] = i;
    }
    int kept = 0;
    for (int c = 0; c < *n_coll; c++) {
        if (w->coll[c].local_node < 0) continue;
        for (int b = 0; b < w->n_buckets; b++)
            if (w->buckets[b].collective == c) w->buckets[b].collective = kept;
        w->coll[kept] = w->coll[c];
        w->coll[kept++].local_node = pos[w->coll[c].local_node];
    }
    *n_coll = kept;
    for (int b = 0; b < w->n_buckets; b++) w->buckets[b].local_node = pos[w->buckets[b].local_node];
    st = hp_graph_permute_nodes(w->g, order);
out:
    free(key);
    free(order);
    free(pos);
    return st;
}

hp_status hp__bucket_gradients(hp_graph *g, hp_mesh *mesh, int64_t bucket_size, hp_collective_info *coll, int *n_coll,
                               int64_t *bytes, hp_bucket_info **buckets, int *n_buckets) {
    *buckets = NULL;
    *n_buckets = 0;
    if (bucket_size <= 0) return HP_STATUS_OK;
    int nn = hp_graph_n_nodes(g), nt = hp_graph_n_tensors(g);
    rewriter w = {.g = g, .mesh = mesh, .n0 = nn, .coll = coll, .bytes = bytes};
    int *last_write = malloc(sizeof *last_write * (size_t)(nt ? nt : 1));
    int *coll_of = malloc(sizeof *coll_of * (size_t)(nn ? nn : 1));
    cand *c = malloc(sizeof *c * (size_t)(*n_coll ? *n_coll : 1));
    open_bucket *open = calloc((size_t)(*n_coll ? *n_coll : 1), sizeof *open);
    int nc = 0, ng = 0;
    hp_status st = HP_STATUS_OK;
    if (!last_write || !coll_of || !c || !open) {
        st = oom();
        goto out;
    }
    for (int i = 0; i < nn; i++) coll_of[i] = -1;
    for (int k = 0; k < *n_coll; k++) coll_of[coll[k].local_node] = k;
    for (int t = 0; t < nt; t++) last_write[t] = -1;
    /* candidates, with the node that last wrote each one's gradient (as communication scheduling sees it) */
    for (int i = 0; i < nn; i++) {
        const hp_node *n = hp_graph_node(g, i);
        group_key key;
        if (coll_of[i] >= 0 && bucketable(g, mesh, i, last_write[n->in[0]], &key)) {
            int gi = 0;
            while (gi < ng && !key_equal(&open[gi].key, &key)) gi++;
            if (gi == ng) open[ng++].key = key;
            const hp_tensor *x = hp_graph_tensor(g, n->in[0]);
            int64_t numel = hp_shape_numel(&x->shape);
            c[nc++] = (cand){.node = i, .prod = last_write[n->in[0]], .coll = coll_of[i], .group = gi, .numel = numel,
                             .bytes = numel * (int64_t)hp_dtype_size(x->dtype)};
        }
        for (int j = 0; j < n->n_out; j++) last_write[n->out[j]] = i;
        uint32_t inplace = hp__op_def(n->op)->inplace_inputs;
        for (int k = 0; k < n->n_in; k++)
            if (((inplace >> k) & 1u) && n->in[k] != HP_TID_NONE) last_write[n->in[k]] = i;
    }
    /* buckets in production order (backward order, as DDP's); a bucket closes when the next
     * gradient would overflow it or would be produced after a member is already needed */
    qsort(c, (size_t)nc, sizeof *c, cmp_prod);
    for (int j = 0; j <= nc && st == HP_STATUS_OK; j++) {
        for (int gi = 0; gi < ng && st == HP_STATUS_OK; gi++) {
            open_bucket *b = &open[gi];
            if (j < nc && c[j].group != gi) continue;
            int64_t cap = b->formed == 1 && bucket_size > HP_BUCKET_FIRST_SIZE ? HP_BUCKET_FIRST_SIZE : bucket_size;
            bool close = j == nc || (b->n > 0 && (b->bytes + c[j].bytes > cap || c[j].prod >= b->min_consumer));
            if (close && b->n > 0) {
                if (b->n >= 2) st = emit(&w, &b->key, c, b->members, b->n);
                b->n = 0;
                b->bytes = 0;
            }
            if (j == nc || st != HP_STATUS_OK) continue;
            if (b->n == b->cap) {
                int cap2 = b->cap ? 2 * b->cap : 16;
                int *mm = realloc(b->members, sizeof *mm * (size_t)cap2);
                if (!mm) {
                    st = oom();
                    break;
                }
                b->members = mm;
                b->cap = cap2;
            }
            if (b->n == 0) {
                b->formed++;
                b->min_consumer = c[j].node;
            }
            b->members[b->n++] = j;
            b->bytes += c[j].bytes;
            if (c[j].node < b->min_consumer) b->min_consumer = c[j].node;
        }
    }
    if (st == HP_STATUS_OK && w.n_buckets) st = place(&w, n_coll);
out:
    for (int gi = 0; gi < ng; gi++) free(open[gi].members);
    free(open);
    free(c);
    free(coll_of);
    free(last_write);
    free(w.where);
    if (st != HP_STATUS_OK) {
        free(w.buckets);
        return st;
    }
    *buckets = w.buckets;
    *n_buckets = w.n_buckets;
    return HP_STATUS_OK;
}
