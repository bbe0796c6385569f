/*
 * The multimodal model's sub-models on their own groups (hp/multimodal.h): this rank's sub-model
 * (encoder a, encoder b or the decoder) as one training graph with a surrogate backward (the
 * pipeline's: root = sum(y * dy) so d root / d y = dy exactly), one program instance per
 * micro-batch bound to the rank's state store, gradient accumulators, and the optimizer (global norm
 * over the groups, clip, AdamW). Hand-offs are point-to-point transfers on the world communicator;
 * the order of each group's passes comes from hp_mm_schedule_make over the measured pass times.
 */
#include "train/mm_internal.h"

#include "hp/costmodel.h"
#include "hp/ops.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM(what) hp_error(HP_STATUS_OUT_OF_MEMORY, "multimodal: out of memory for %s", what)

/* Transfer tags: micro-batch * 8 + kind. */
enum { T_OUT_A = 0, T_OUT_B, T_DX_A, T_DX_B, T_CHAIN_OUT_A, T_CHAIN_DX_A };
static int tag(int mb, int kind) { return mb * 8 + kind; }

static size_t prefix_elems(const hp_mm_runner *r, int e) {
    return (size_t)r->rows * hp_mm_tokens(&r->mc, e) * r->mc.width;
}
static size_t patch_elems(const hp_mm_runner *r, int e) {
    return (size_t)r->rows * hp_mm_tokens(&r->mc, e) * r->mc.enc[e].patch * r->mc.enc[e].patch;
}

/* Places the groups: encoders a and b in file order, the fusion group the decoder; each group's ranks
 * split every micro-batch's rows in order. */
static hp_status place(hp_mm_runner *r) {
    const hp_groups_config *gs = &r->cfg->groups;
    int ne = 0, me = hp_comm_rank(r->world);
    if (hp_comm_size(r->world) != gs->n_ranks)
        return hp_error(HP_STATUS_CONFIG, "multimodal: the groups take %d ranks, the job has %d", gs->n_ranks,
                        hp_comm_size(r->world));
    for (int i = 0; i < gs->n_groups; i++) {
        const hp_group_config *g = &gs->groups[i];
        int role = g->kind == HP_GROUP_KIND_FUSION ? HP_MM_ROLE_DEC : ne++;
        if (role > HP_MM_ROLE_DEC || (g->kind != HP_GROUP_KIND_FUSION && g->kind != HP_GROUP_KIND_ENCODER))
            return hp_error(HP_STATUS_CONFIG, "groups.%s: multimodal groups are two encoders and one fusion", g->name);
        if (r->rows % g->n_ranks)
            return hp_error(HP_STATUS_CONFIG, "groups.%s: its %d ranks do not divide the %d rows of a micro-batch "
                            "(train.batch / pipeline.micro_batches)", g->name, g->n_ranks, r->rows);
        const hp_strategy_config *sc = &g->strategy;
        if (sc->present && (sc->n_axes != 1 || sc->n_params > 0 || sc->n_inputs > 0 || sc->n_opt_shard > 0))
            return hp_error(HP_STATUS_UNSUPPORTED, "groups.%s: a multimodal group's mesh is one data-parallel axis "
                            "(its ranks split the rows); strategy rules inside it are not built yet", g->name);
        if (r->mode == HP_MM_MODE_CHAIN && g->n_ranks > 1)
            return hp_error(HP_STATUS_UNSUPPORTED, "groups.%s has %d ranks: the linear-pipeline baseline runs one rank "
                            "per group", g->name, g->n_ranks);
        r->ranks_of[role] = g->ranks;
        r->ksize[role] = g->n_ranks;
        for (int k = 0; k < g->n_ranks; k++)
            if (g->ranks[k] == me) r->role = role, r->gi = k;
    }
    if (r->role < 0) return hp_error(HP_STATUS_CONFIG, "multimodal: rank %d is in no group", me);
    if (r->m > 64) return hp_error(HP_STATUS_UNSUPPORTED, "pipeline.micro_batches %d > 64", r->m);
    r->lrows = r->rows / r->ksize[r->role];
    hp_comm *gc = NULL; /* collective over the world: every rank splits */
    HP_CHECK(hp_comm_split(r->world, r->role, r->gi, &gc));
    if (r->ksize[r->role] > 1) r->group_comm = gc;
    else hp_comm_free(gc);
    return HP_STATUS_OK;
}

/* The sub-model's graph: forward, surrogate root, backward, gradient accumulation. */
hp_status hp__mm_sub_build(const hp_mm_config *mc, int role, int rows, float loss_scale, hp_mm_sub *r) {
    memset(r, 0, sizeof *r);
    hp_graph *g = r->g = hp_graph_new();
    if (!g) return OOM("the graph");
    hp_tid root;
    int nx = 0;
    hp_tid xs[2];
    if (role != HP_MM_ROLE_DEC) {
        hp_mm_encoder enc;
        HP_CHECK(hp_mm_build_encoder(g, mc, role, rows, &enc));
        r->x_in = enc.patches;
        r->y_out = enc.out;
        r->f_end = hp_graph_n_nodes(g);
        r->dy = hp_input(g, "enc.dy", HP_DTYPE_F32, hp_graph_tensor(g, enc.out)->shape);
        hp_graph_set_node_flags(g, HP_NODE_FLAG_BACKWARD); /* the root runs in B (the trace's phase) */
        root = hp_sum(g, hp_mul(g, enc.out, r->dy), -1);
        hp_graph_set_node_flags(g, 0);
    } else {
        hp_mm_decoder dec;
        HP_CHECK(hp_mm_build_decoder(g, mc, rows, NULL, true, &dec));
        r->pre[0] = xs[0] = dec.prefix[0];
        r->pre[1] = xs[1] = dec.prefix[1];
        nx = 2;
        r->tokens = dec.tokens;
        r->targets = dec.targets;
        r->loss = dec.loss;
        root = hp_scale(g, dec.loss, loss_scale); /* this rank's share of the step's mean loss */
        r->f_end = hp_graph_n_nodes(g);
    }
    HP_CHECK(hp_graph_status(g));
    int np = hp_graph_params(g, NULL, 0);
    hp_tid *wrt = malloc(sizeof *wrt * (size_t)(np + nx + 1)), *grads = malloc(sizeof *grads * (size_t)(np + nx + 1));
    if (!wrt || !grads) {
        free(wrt), free(grads);
        return OOM("the gradients");
    }
    hp_graph_params(g, wrt, np);
    for (int k = 0; k < nx; k++) wrt[np + k] = xs[k];
    hp_status st = hp_autodiff(g, root, wrt, np + nx, grads);
    for (int k = 0; k < nx && st == HP_STATUS_OK; k++) r->dpre[k] = grads[np + k];
    hp_graph_set_node_flags(g, HP_NODE_FLAG_BACKWARD);
    for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
        const hp_tensor *pt = hp_graph_tensor(g, wrt[i]);
        if (grads[i] == HP_TID_NONE) {
            st = hp_error(HP_STATUS_INTERNAL, "multimodal: parameter '%s' does not influence the loss", pt->name);
            break;
        }
        char name[600];
        snprintf(name, sizeof name, "grad_acc.%s", pt->name);
        hp_tid acc = hp_leaf(g, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        hp_tid in[2] = {acc, hp_add(g, acc, grads[i])};
        hp_graph_add_node(g, HP_OP_ASSIGN, in, 2, NULL);
        st = hp_graph_status(g);
    }
    hp_graph_set_node_flags(g, 0);
    free(wrt), free(grads);
    HP_CHECK(st);
    r->n_nodes = hp_graph_n_nodes(g);
    return hp_graph_verify(g);
}

/* The norm program (this rank's accumulators' sum of squares) and the update program (clip by the
 * global norm, AdamW, zero the accumulators), as the pipeline's optimizer. */
static hp_status build_optimizer(hp_mm_runner *r) {
    hp_graph *ng = r->ng = hp_graph_new(), *og = r->og = hp_graph_new();
    if (!ng || !og) return OOM("the optimizer graphs");
    const hp_optim_config *o = &r->cfg->optim;
    int np = hp_graph_params(r->sub.g, NULL, 0);
    hp_tid *ids = malloc(sizeof *ids * (size_t)(np + 1)), *accs = malloc(sizeof *accs * (size_t)(np + 1));
    if (!ids || !accs) {
        free(ids), free(accs);
        return OOM("the optimizer");
    }
    hp_graph_params(r->sub.g, ids, np);
    r->opt_lr = hp_input(og, "opt.lr", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    r->opt_step = hp_input(og, "opt.step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    r->opt_grad_sq = hp_input(og, "opt.grad_sq", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    hp_tid scale = o->grad_clip > 0 ? hp_clip_scale(og, r->opt_grad_sq, (float)o->grad_clip) : HP_TID_NONE;
    hp_tid total = HP_TID_NONE;
    hp_status st = HP_STATUS_OK;
    hp_graph_set_node_flags(og, HP_NODE_FLAG_OPTIMIZER);
    for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
        const hp_tensor *pt = hp_graph_tensor(r->sub.g, ids[i]);
        char name[600];
        snprintf(name, sizeof name, "grad_acc.%s", pt->name);
        hp_tid sq = hp_leaf(ng, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        hp_tid one = hp_sumsq(ng, &sq, 1);
        total = total == HP_TID_NONE ? one : hp_add(ng, total, one);
        hp_tid acc = accs[i] = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        hp_tid param = hp_leaf(og, pt->name, HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, pt->shape);
        hp_graph_tensor(og, param)->no_weight_decay = pt->no_weight_decay;
        snprintf(name, sizeof name, "exp_avg.%s", pt->name);
        hp_tid mm = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        snprintf(name, sizeof name, "exp_avg_sq.%s", pt->name);
        hp_tid vv = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        hp_adamw_params ap = {.beta1 = (float)o->beta1, .beta2 = (float)o->beta2, .eps = (float)o->eps,
                              .weight_decay = pt->no_weight_decay ? 0.0f : (float)o->weight_decay};
        st = hp_adamw(og, param, acc, mm, vv, r->opt_lr, r->opt_step, scale, &ap);
    }
    for (int i = 0; i < np && st == HP_STATUS_OK; i++) { /* after every update has read its gradient */
        hp_tid in[2] = {accs[i], hp_fill(og, hp_graph_tensor(og, accs[i])->shape, 0.0f)};
        hp_graph_add_node(og, HP_OP_ASSIGN, in, 2, NULL);
        st = hp_graph_status(og);
    }
    hp_graph_set_node_flags(og, 0);
    free(ids), free(accs);
    HP_CHECK(st);
    r->norm_out = total;
    HP_CHECK(hp_graph_status(ng));
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.store = r->store;
    po.keep = &r->norm_out;
    po.n_keep = 1;
    HP_CHECK(hp_program_new(ng, &po, &r->norm_p));
    po.keep = NULL;
    po.n_keep = 0;
    return hp_program_new(og, &po, &r->opt_p);
}

hp_status hp__mm_groups_new(hp_mm_runner *r) {
    if (!r->world) return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal: groups need a world communicator");
    HP_CHECK(hp_groups_name_ranks(r->world, &r->cfg->groups)); /* faults name the group */
    HP_CHECK(place(r));
    HP_CHECK(hp__mm_sub_build(&r->mc, r->role, r->lrows, 1.0f / (float)(r->m * r->ksize[r->role]), &r->sub));
    r->slot = calloc((size_t)r->m, sizeof *r->slot);
    size_t nbuf = 0;
    for (int e = 0; e < 2; e++) nbuf += 2 * prefix_elems(r, e) + patch_elems(r, e);
    r->buf = malloc(sizeof(float) * nbuf * (size_t)r->m);
    r->cap_reqs = 8 * r->m;
    r->reqs = calloc((size_t)r->cap_reqs, sizeof *r->reqs);
    if (!r->slot || !r->buf || !r->reqs) return OOM("the micro-batch programs");
    hp_tid keep[3];
    int nk = 0;
    if (r->role != HP_MM_ROLE_DEC) keep[nk++] = r->sub.y_out;
    else keep[nk++] = r->sub.dpre[0], keep[nk++] = r->sub.dpre[1], keep[nk++] = r->sub.loss;
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = keep;
    po.n_keep = nk;
    po.store = r->store;
    for (int i = 0; i < r->m; i++) HP_CHECK(hp_program_new(r->sub.g, &po, &r->slot[i]));
    HP_CHECK(build_optimizer(r));
    return hp__mm_init_store(r, r->sub.g);
}

void hp__mm_groups_free(hp_mm_runner *r) {
    for (int i = 0; r->slot && i < r->m; i++) hp_program_free(r->slot[i]);
    free(r->slot);
    hp_program_free(r->norm_p);
    hp_program_free(r->opt_p);
    hp_graph_free(r->sub.g);
    hp_graph_free(r->ng);
    hp_graph_free(r->og);
    hp_comm_free(r->group_comm);
    r->group_comm = NULL;
    free(r->buf);
    free(r->reqs);
    r->slot = NULL;
}

/* Buffer k of micro-batch mb: 0/1 prefixes a/b, 2/3 their gradients, 4/5 patches a/b. */
static float *bufp(hp_mm_runner *r, int mb, int k) {
    size_t sizes[6] = {prefix_elems(r, 0), prefix_elems(r, 1), prefix_elems(r, 0), prefix_elems(r, 1),
                       patch_elems(r, 0), patch_elems(r, 1)};
    size_t per = 0, off = 0;
    for (int i = 0; i < 6; i++) per += sizes[i];
    for (int i = 0; i < k; i++) off += sizes[i];
    return r->buf + (size_t)mb * per + off;
}

static hp_status isend(hp_mm_runner *r, const float *p, size_t n, int peer, int t) {
    if (r->n_reqs >= r->cap_reqs) return hp_error(HP_STATUS_INTERNAL, "multimodal: too many sends in flight");
    return hp_comm_isend(r->world, p, n, HP_DTYPE_F32, peer, t, &r->reqs[r->n_reqs++]);
}
static hp_status recv(hp_mm_runner *r, float *p, size_t n, int peer, int t) {
    return hp_comm_recv(r->world, p, n, HP_DTYPE_F32, peer, t);
}
/* The first rank of a group (the one rank of the linear pipeline's groups). */
static int rank0(const hp_mm_runner *r, int role) { return r->ranks_of[role][0]; }

/* Sends this rank's rows of a micro-batch (`buf`, epr elements per row) to the ranks of group `to`
 * whose rows overlap them, each its part. */
static hp_status rows_out(hp_mm_runner *r, int to, const float *buf, size_t epr, int t) {
    int lo = r->gi * r->lrows, hi = lo + r->lrows, ld = r->rows / r->ksize[to];
    for (int j = 0; j < r->ksize[to]; j++) {
        int a = lo > j * ld ? lo : j * ld, b = hi < (j + 1) * ld ? hi : (j + 1) * ld;
        if (a < b) HP_CHECK(isend(r, buf + (size_t)(a - lo) * epr, (size_t)(b - a) * epr, r->ranks_of[to][j], t));
    }
    return HP_STATUS_OK;
}
/* Receives this rank's rows of a micro-batch into `buf` from the ranks of group `from` that hold them. */
static hp_status rows_in(hp_mm_runner *r, int from, float *buf, size_t epr, int t) {
    int lo = r->gi * r->lrows, hi = lo + r->lrows, ls = r->rows / r->ksize[from];
    for (int i = 0; i < r->ksize[from]; i++) {
        int a = lo > i * ls ? lo : i * ls, b = hi < (i + 1) * ls ? hi : (i + 1) * ls;
        if (a < b) HP_CHECK(recv(r, buf + (size_t)(a - lo) * epr, (size_t)(b - a) * epr, r->ranks_of[from][i], t));
    }
    return HP_STATUS_OK;
}

/* One pass of an encoder (F or B of micro-batch mb); *sec gets its compute seconds. */
static hp_status enc_pass(hp_mm_runner *r, const hp_mm_op *op, double *sec) {
    int e = r->role, mb = op->mb;
    hp_program *p = r->slot[mb];
    bool chain = r->mode == HP_MM_MODE_CHAIN;
    size_t epr = (size_t)hp_mm_tokens(&r->mc, e) * r->mc.width, ny = epr * r->lrows, na = prefix_elems(r, 0);
    if (!op->backward) {
        float *x = bufp(r, mb, 4 + e), *y = bufp(r, mb, e);
        size_t nx = patch_elems(r, e) / r->ksize[e];
        HP_CHECK(hp__mm_patches(r, e, mb * r->rows + r->gi * r->lrows, r->lrows, x));
        if (chain && e == 1) HP_CHECK(recv(r, bufp(r, mb, 0), na, rank0(r, HP_MM_ROLE_ENC_A), tag(mb, T_CHAIN_OUT_A)));
        double t0 = hp_now_seconds();
        HP_CHECK(hp_program_set_input(p, r->sub.x_in, x, nx * sizeof(float)));
        HP_CHECK(hp_program_run_nodes(p, 0, r->sub.f_end));
        HP_CHECK(hp_program_get_output(p, r->sub.y_out, y, ny * sizeof(float)));
        *sec = hp_now_seconds() - t0;
        if (chain && e == 0) return isend(r, y, ny, rank0(r, HP_MM_ROLE_ENC_B), tag(mb, T_CHAIN_OUT_A));
        if (chain) HP_CHECK(isend(r, bufp(r, mb, 0), na, rank0(r, HP_MM_ROLE_DEC), tag(mb, T_OUT_A)));
        return rows_out(r, HP_MM_ROLE_DEC, y, epr, tag(mb, e ? T_OUT_B : T_OUT_A));
    }
    float *dy = bufp(r, mb, 2 + e);
    if (chain && e == 0) HP_CHECK(recv(r, dy, ny, rank0(r, HP_MM_ROLE_ENC_B), tag(mb, T_CHAIN_DX_A)));
    else HP_CHECK(rows_in(r, HP_MM_ROLE_DEC, dy, epr, tag(mb, e ? T_DX_B : T_DX_A)));
    if (chain && e == 1) { /* pass encoder a's gradient along */
        HP_CHECK(recv(r, bufp(r, mb, 2), na, rank0(r, HP_MM_ROLE_DEC), tag(mb, T_DX_A)));
        HP_CHECK(isend(r, bufp(r, mb, 2), na, rank0(r, HP_MM_ROLE_ENC_A), tag(mb, T_CHAIN_DX_A)));
    }
    double t0 = hp_now_seconds();
    HP_CHECK(hp_program_set_input(p, r->sub.dy, dy, ny * sizeof(float)));
    HP_CHECK(hp_program_run_nodes(p, r->sub.f_end, r->sub.n_nodes));
    *sec = hp_now_seconds() - t0;
    return HP_STATUS_OK;
}

/* The decoder's pass of micro-batch mb (forward and backward); adds its loss share to *loss. */
static hp_status dec_pass(hp_mm_runner *r, int mb, float *loss, double *sec) {
    hp_program *p = r->slot[mb];
    bool chain = r->mode == HP_MM_MODE_CHAIN;
    size_t e0 = (size_t)hp_mm_tokens(&r->mc, 0) * r->mc.width, e1 = (size_t)hp_mm_tokens(&r->mc, 1) * r->mc.width;
    size_t n0 = e0 * r->lrows, n1 = e1 * r->lrows, nt = (size_t)r->lrows * HP_MM_CAPTION;
    if (chain) {
        HP_CHECK(recv(r, bufp(r, mb, 0), n0, rank0(r, HP_MM_ROLE_ENC_B), tag(mb, T_OUT_A)));
        HP_CHECK(recv(r, bufp(r, mb, 1), n1, rank0(r, HP_MM_ROLE_ENC_B), tag(mb, T_OUT_B)));
    } else {
        HP_CHECK(rows_in(r, HP_MM_ROLE_ENC_A, bufp(r, mb, 0), e0, tag(mb, T_OUT_A)));
        HP_CHECK(rows_in(r, HP_MM_ROLE_ENC_B, bufp(r, mb, 1), e1, tag(mb, T_OUT_B)));
    }
    int32_t *tt = malloc(sizeof *tt * 2 * nt);
    if (!tt) return OOM("captions");
    hp_status st = hp__mm_captions(r, mb * r->rows + r->gi * r->lrows, r->lrows, tt, tt + nt);
    double t0 = hp_now_seconds();
    if (st == HP_STATUS_OK) st = hp_program_set_input(p, r->sub.tokens, tt, nt * sizeof *tt);
    if (st == HP_STATUS_OK) st = hp_program_set_input(p, r->sub.targets, tt + nt, nt * sizeof *tt);
    free(tt);
    HP_CHECK(st);
    HP_CHECK(hp_program_set_input(p, r->sub.pre[0], bufp(r, mb, 0), n0 * sizeof(float)));
    HP_CHECK(hp_program_set_input(p, r->sub.pre[1], bufp(r, mb, 1), n1 * sizeof(float)));
    HP_CHECK(hp_program_run(p));
    float l;
    HP_CHECK(hp_program_get_output(p, r->sub.loss, &l, sizeof l));
    *loss += l / (float)(r->m * r->ksize[HP_MM_ROLE_DEC]);
    HP_CHECK(hp_program_get_output(p, r->sub.dpre[0], bufp(r, mb, 2), n0 * sizeof(float)));
    HP_CHECK(hp_program_get_output(p, r->sub.dpre[1], bufp(r, mb, 3), n1 * sizeof(float)));
    *sec = hp_now_seconds() - t0;
    if (chain) {
        HP_CHECK(isend(r, bufp(r, mb, 2), n0, rank0(r, HP_MM_ROLE_ENC_B), tag(mb, T_DX_A)));
        return isend(r, bufp(r, mb, 3), n1, rank0(r, HP_MM_ROLE_ENC_B), tag(mb, T_DX_B));
    }
    HP_CHECK(rows_out(r, HP_MM_ROLE_ENC_A, bufp(r, mb, 2), e0, tag(mb, T_DX_A)));
    return rows_out(r, HP_MM_ROLE_ENC_B, bufp(r, mb, 3), e1, tag(mb, T_DX_B));
}

/* Sums the group's gradient accumulators (its ranks computed disjoint rows). */
static hp_status group_reduce(hp_mm_runner *r) {
    if (!r->group_comm) return HP_STATUS_OK;
    int np = hp_graph_params(r->sub.g, NULL, 0);
    hp_tid *ids = malloc(sizeof *ids * (size_t)(np + 1));
    if (!ids) return OOM("the parameter list");
    hp_graph_params(r->sub.g, ids, np);
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
        const hp_tensor *t = hp_graph_tensor(r->sub.g, ids[i]);
        char name[600];
        snprintf(name, sizeof name, "grad_acc.%s", t->name);
        float *d = hp_store_data(r->store, name);
        size_t n = (size_t)hp_shape_numel(&t->shape);
        st = d ? hp_comm_all_reduce(r->group_comm, d, d, n, HP_DTYPE_F32, HP_REDUCE_SUM)
               : hp_error(HP_STATUS_NOT_FOUND, "multimodal: '%s' is not in the store", name);
        if (st == HP_STATUS_OK) st = hp_store_touch(r->store, name);
    }
    free(ids);
    return st;
}

hp_status hp__mm_groups_step(hp_mm_runner *r, hp_mm_step_stats *out) {
    hp_mm_schedule sc;
    HP_CHECK(hp_mm_schedule_make(r->mode, r->m, r->t_f, r->t_b, 0.0, &sc));
    out->predicted = sc.makespan;
    out->inflight = sc.inflight[r->mode == HP_MM_MODE_CHAIN ? HP_MM_ROLE_ENC_A : HP_MM_ROLE_ENC_B];
    float loss = 0;
    double tf = 0, tb = 0;
    r->n_reqs = 0;
    hp_status st = HP_STATUS_OK;
    /* A group waiting for another's hand-off sleeps between tests instead of spinning, so it leaves
     * the core to the groups computing (three ranks on fewer cores); restored at the end. */
    hp_comm_wait_mode wait_mode = hp_comm_thread_wait();
    hp_comm_set_thread_wait(HP_COMM_WAIT_SLEEP);
    for (int k = 0; k < sc.n_ops[r->role] && st == HP_STATUS_OK; k++) {
        const hp_mm_op *op = &sc.ops[r->role][k];
        double sec = 0;
        st = r->role == HP_MM_ROLE_DEC ? dec_pass(r, op->mb, &loss, &sec) : enc_pass(r, op, &sec);
        if (op->backward) tb += sec;
        else tf += sec;
    }
    hp_status ws = r->n_reqs ? hp_comm_wait_all(r->n_reqs, r->reqs) : HP_STATUS_OK;
    hp_comm_set_thread_wait(wait_mode);
    HP_CHECK(st);
    HP_CHECK(ws);
    HP_CHECK(group_reduce(r));
    /* global gradient norm (each group's first rank counts its reduced gradients), then the update */
    float sq = 0, vec[2 + 2 * HP_MM_ROLES] = {0}, sum[2 + 2 * HP_MM_ROLES];
    HP_CHECK(hp_program_run(r->norm_p));
    HP_CHECK(hp_program_get_output(r->norm_p, r->norm_out, &sq, sizeof sq));
    vec[1] = loss;
    if (r->gi == 0) {
        vec[0] = sq;
        vec[2 + r->role] = (float)(tf / r->m);
        vec[2 + HP_MM_ROLES + r->role] = (float)(tb / r->m);
    }
    HP_CHECK(hp_comm_all_reduce(r->world, vec, sum, 2 + 2 * HP_MM_ROLES, HP_DTYPE_F32, HP_REDUCE_SUM));
    float lr = (float)hp_lr_at(&r->cfg->optim, r->step + 1, r->cfg->train.steps), stp = (float)(r->step + 1);
    HP_CHECK(hp_program_set_input(r->opt_p, r->opt_lr, &lr, sizeof lr));
    HP_CHECK(hp_program_set_input(r->opt_p, r->opt_step, &stp, sizeof stp));
    HP_CHECK(hp_program_set_input(r->opt_p, r->opt_grad_sq, &sum[0], sizeof sum[0]));
    HP_CHECK(hp_program_run(r->opt_p));
    out->loss = sum[1];
    out->grad_norm = sqrtf(sum[0]);
    for (int k = 0; k < HP_MM_ROLES; k++) { /* the scheduler's input for the next step */
        r->t_f[k] = sum[2 + k];
        r->t_b[k] = sum[2 + HP_MM_ROLES + k];
        out->busy[k] = r->m * (r->t_f[k] + r->t_b[k]);
    }
    if (!isfinite(out->loss)) return hp_error(HP_STATUS_NONFINITE, "multimodal: step %lld's loss is %g",
                                              (long long)r->step + 1, (double)out->loss);
    return HP_STATUS_OK;
}

hp_status hp__mm_groups_gather(hp_mm_runner *r) {
    if (r->gi > 0) return HP_STATUS_OK; /* each group's first rank holds its replica */
    if (r->role == HP_MM_ROLE_DEC) { /* receive each encoder's parameters, in their graph order */
        hp_graph *g[2] = {hp_graph_new(), hp_graph_new()};
        hp_status st = g[0] && g[1] ? HP_STATUS_OK : OOM("a graph");
        for (int e = 0; e < 2 && st == HP_STATUS_OK; e++) {
            hp_mm_encoder enc;
            st = hp_mm_build_encoder(g[e], &r->mc, e, 1, &enc);
            int np = st == HP_STATUS_OK ? hp_graph_params(g[e], NULL, 0) : 0;
            hp_tid *ids = malloc(sizeof *ids * (size_t)(np + 1));
            if (!ids && st == HP_STATUS_OK) st = OOM("the parameter list");
            if (ids) hp_graph_params(g[e], ids, np);
            for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
                const hp_tensor *t = hp_graph_tensor(g[e], ids[i]);
                float *d = hp_store_data(r->store, t->name);
                if (!d) st = hp_error(HP_STATUS_NOT_FOUND, "multimodal: '%s' is not in the decoder's store", t->name);
                if (st == HP_STATUS_OK) st = recv(r, d, (size_t)hp_shape_numel(&t->shape), rank0(r, e), 1000000 + i);
                if (st == HP_STATUS_OK) st = hp_store_touch(r->store, t->name);
            }
            free(ids);
        }
        hp_graph_free(g[0]), hp_graph_free(g[1]);
        return st;
    }
    int np = hp_graph_params(r->sub.g, NULL, 0);
    hp_tid *ids = malloc(sizeof *ids * (size_t)(np + 1));
    if (!ids) return OOM("the parameter list");
    hp_graph_params(r->sub.g, ids, np);
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
        const hp_tensor *t = hp_graph_tensor(r->sub.g, ids[i]);
        const float *d = hp_store_data(r->store, t->name);
        st = d ? hp_comm_send(r->world, d, (size_t)hp_shape_numel(&t->shape), HP_DTYPE_F32, rank0(r, HP_MM_ROLE_DEC),
                              1000000 + i)
               : hp_error(HP_STATUS_NOT_FOUND, "multimodal: '%s' is not in the store", t->name);
    }
    free(ids);
    return st;
}

hp_status hp_mm_predict_passes(const hp_mm_config *c, int rows, int m, const hp_machine_model *mm,
                               double t_f[HP_MM_ROLES], double t_b[HP_MM_ROLES]) {
    if (rows < 1 || m < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal prediction: rows %d and micro-batches %d must be >= 1",
                        rows, m);
    for (int role = 0; role < HP_MM_ROLES; role++) {
        hp_mm_sub sub;
        hp_status st = hp__mm_sub_build(c, role, rows, 1.0f / (float)m, &sub);
        double f = -1, b = -1;
        if (st == HP_STATUS_OK) {
            f = hp_predict_seconds(sub.g, NULL, 0, role == HP_MM_ROLE_DEC ? sub.n_nodes : sub.f_end, mm);
            b = role == HP_MM_ROLE_DEC ? 0 : hp_predict_seconds(sub.g, NULL, sub.f_end, sub.n_nodes, mm);
            if (f < 0 || b < 0) st = HP_STATUS_INVALID_ARGUMENT; /* the message is the predictor's */
        }
        hp_graph_free(sub.g);
        HP_CHECK(st);
        t_f[role] = f;
        t_b[role] = b;
    }
    return HP_STATUS_OK;
}

hp_status hp_mm_suggest_split(const double t_f[HP_MM_ROLES], const double t_b[HP_MM_ROLES], int m, int ranks,
                              int best[HP_MM_ROLES], double *makespan) {
    if (ranks < HP_MM_ROLES || ranks > 1024)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal split: %d ranks is outside [3, 1024]", ranks);
    double best_t = INFINITY;
    for (int a = 1; a <= ranks - 2; a++)
        for (int b = 1; a + b <= ranks - 1; b++) {
            int k[HP_MM_ROLES] = {a, b, ranks - a - b};
            double f[HP_MM_ROLES], bw[HP_MM_ROLES];
            for (int r = 0; r < HP_MM_ROLES; r++) f[r] = t_f[r] / k[r], bw[r] = t_b[r] / k[r];
            hp_mm_schedule s;
            HP_CHECK(hp_mm_schedule_make(HP_MM_MODE_CONCURRENT, m, f, bw, 0.0, &s));
            if (s.makespan < best_t * (1 - 1e-9)) {
                best_t = s.makespan;
                memcpy(best, k, sizeof k);
            }
        }
    *makespan = best_t;
    return HP_STATUS_OK;
}
