/*
 * The GRPO job of hp/rl.h: roles and communicators from the groups, the supervised start and the
 * reference policy on the controller, the learner's compiled step, the actor's generator, and the
 * weight sync from the learner's layout to the actor's (rl_step.c runs the steps).
 */
#include "rl/rl_internal.h"

#include "hp/ops.h"
#include "hp/redistribute.h"
#include "hp/train.h"

#include <stdlib.h>
#include <string.h>

#define OOM(what) hp_error(HP_STATUS_OUT_OF_MEMORY, "rl: out of memory for %s", what)

void *hp__rl_ldata(hp_rl *rl, hp_tid t) {
    hp_partition *part = hp_compiled_partition(rl->lc);
    return hp_program_data(hp_compiled_program(rl->lc), part ? hp_partition_local(part, t) : t);
}

static hp_layout replicated(int ndim) {
    hp_layout l;
    hp_layout_init(&l, ndim);
    return l;
}

/* The ranks of each role: the groups' lists, or every rank of world for both. */
static hp_status roles(hp_rl *rl) {
    const hp_groups_config *gs = &rl->cfg.groups;
    const hp_group_config *a = NULL, *l = NULL;
    for (int i = 0; gs->present && i < gs->n_groups; i++) {
        if (gs->groups[i].kind == HP_GROUP_KIND_ACTOR) a = &gs->groups[i];
        if (gs->groups[i].kind == HP_GROUP_KIND_LEARNER) l = &gs->groups[i];
    }
    if (gs->present && (!a || !l))
        return hp_error(HP_STATUS_CONFIG, "%s:%d: hp rl needs groups of kind actor and learner (the groups here are "
                        "not an RL job's)", gs->file, gs->line);
    if (gs->present) HP_CHECK(hp_groups_config_check_world(gs, rl->size));
    if (gs->present) HP_CHECK(hp_groups_name_ranks(rl->world, gs)); /* faults name the group */
    rl->n_actors = a ? a->n_ranks : rl->size;
    rl->n_learners = l ? l->n_ranks : rl->size;
    rl->actors = malloc(sizeof(int) * (size_t)rl->n_actors);
    rl->learners = malloc(sizeof(int) * (size_t)rl->n_learners);
    if (!rl->actors || !rl->learners) return OOM("the groups");
    for (int i = 0; i < rl->n_actors; i++) rl->actors[i] = a ? a->ranks[i] : i;
    for (int i = 0; i < rl->n_learners; i++) rl->learners[i] = l ? l->ranks[i] : i;
    rl->colocated = !a || a->ranks[0] == l->ranks[0];
    rl->controller = rl->learners[0];
    rl->is_ctrl = rl->rank == rl->controller;
    rl->actor_index = -1;
    for (int i = 0; i < rl->n_actors; i++)
        if (rl->actors[i] == rl->rank) rl->actor_index = i;
    rl->is_actor = rl->actor_index >= 0;
    for (int i = 0; i < rl->n_learners; i++) rl->is_learner |= rl->learners[i] == rl->rank;
    return HP_STATUS_OK;
}

/* A mesh with the learner strategy's axes (or one axis "dp") over the given world ranks. */
static hp_status world_mesh(const hp_mesh *like, const int *ranks, int n, hp_mesh **out) {
    int dims[HP_MESH_MAX_AXES], na = like ? hp_mesh_naxes(like) : 1;
    const char *names[HP_MESH_MAX_AXES];
    for (int i = 0; i < na; i++) {
        dims[i] = like ? hp_mesh_dim(like, i) : n;
        names[i] = like ? hp_mesh_axis_name(like, i) : "dp";
    }
    return hp_mesh_new(na, dims, names, ranks, n, out);
}

/* The rows "prompt answer \n" of prompt indices [first, first + rows) as (tokens, targets), (rows, T). */
static void worked_rows(const hp_rl *rl, uint64_t seed, int64_t first, int rows, int32_t *tok, int32_t *tgt) {
    int32_t x[40];
    for (int j = 0; j < rows; j++) {
        memset(x, 0, sizeof x);
        int n = hp_rl_prompt(&rl->r, seed, first + j, x);
        hp_rl_answer(&rl->r, x, n, x + n);
        for (int t = 0; t < rl->T; t++) {
            tok[j * rl->T + t] = x[t];
            tgt[j * rl->T + t] = x[t + 1];
        }
    }
}

/* Per-rank storage of logical t in compiled c. */
static void *cdata(hp_compiled *c, hp_tid t) {
    hp_partition *part = hp_compiled_partition(c);
    return hp_program_data(hp_compiled_program(c), part ? hp_partition_local(part, t) : t);
}

/* The controller's supervised start in rl->rstore (GPT-2 init of train.seed, then rl.sft_steps
 * AdamW steps at the constant rl.sft_lr), then the reference forward program over the same store. */
static hp_status controller_init(hp_rl *rl) {
    HP_CHECK(hp_store_new(NULL, NULL, &rl->rstore));
    hp_graph *g = hp_graph_new();
    if (!g) return OOM("a graph");
    int rows = (int)rl->r.sft_batch;
    hp_gpt gpt;
    hp_compiled *c = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)rows * (size_t)rl->T);
    int32_t *tgt = malloc(sizeof(int32_t) * (size_t)rows * (size_t)rl->T);
    hp_optim_config o = rl->cfg.optim;
    o.lr = o.min_lr = rl->r.sft_lr;
    o.warmup = 0;
    hp_status st = tok && tgt ? HP_STATUS_OK : OOM("the supervised batch");
    HP_CHECK_GOTO(st, st, done);
    HP_CHECK_GOTO(hp_gpt_build(g, &rl->gc, rows, rl->T, true, &gpt), st, done);
    hp_compile_opts co = HP_COMPILE_OPTS_INIT;
    co.loss = gpt.loss;
    co.train = true;
    co.optim = &o;
    co.program.store = rl->rstore;
    HP_CHECK_GOTO(hp_compile(g, &co, &c), st, done);
    const hp_train_step *s = hp_compiled_step(c);
    for (int i = 0; i < s->n_params; i++) {
        const hp_tensor *x = hp_graph_tensor(g, s->params[i]);
        float *d = hp_store_data(rl->rstore, x->name);
        HP_CHECK_GOTO(hp_gpt_init_param(&rl->gc, x->name, (uint64_t)rl->cfg.train.seed, 0, hp_shape_numel(&x->shape), d),
                      st, done);
        HP_CHECK_GOTO(hp_store_touch(rl->rstore, x->name), st, done);
    }
    uint64_t seed = (uint64_t)rl->cfg.train.seed ^ 0x5f75f7ULL;
    for (int64_t k = 0; k < rl->r.sft_steps; k++) {
        worked_rows(rl, seed, k * rows, rows, tok, tgt);
        memcpy(cdata(c, gpt.tokens), tok, sizeof(int32_t) * (size_t)rows * (size_t)rl->T);
        memcpy(cdata(c, gpt.targets), tgt, sizeof(int32_t) * (size_t)rows * (size_t)rl->T);
        *(float *)cdata(c, s->lr) = (float)rl->r.sft_lr;
        *(float *)cdata(c, s->step) = (float)(k + 1);
        HP_CHECK_GOTO(hp_program_run(hp_compiled_program(c)), st, done);
    }
    /* the reference policy: a forward pass over the batch, bound to the same (now frozen) weights */
    rl->rg = hp_graph_new();
    if (!rl->rg) {
        st = OOM("a graph");
        goto done;
    }
    HP_CHECK_GOTO(hp_gpt_build(rl->rg, &rl->gc, rl->B, rl->T, false, &rl->rgpt), st, done);
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = &rl->rgpt.logits;
    po.n_keep = 1;
    po.store = rl->rstore;
    HP_CHECK_GOTO(hp_program_new(rl->rg, &po, &rl->rp), st, done);
done:
    hp_compiled_free(c);
    hp_graph_free(g);
    free(tok);
    free(tgt);
    return st;
}

/* The learner's step: GPT (B, T) + GRPO loss + AdamW under the learner's strategy, bound to lstore. */
static hp_status learner_init(hp_rl *rl) {
    rl->lg = hp_graph_new();
    if (!rl->lg) return OOM("a graph");
    hp_graph *g = rl->lg;
    HP_CHECK(hp_gpt_build(g, &rl->gc, rl->B, rl->T, false, &rl->lgpt));
    hp_shape rs = HP_SHAPE(rl->B, rl->T);
    rl->in[0] = rl->lgpt.tokens;
    rl->in[1] = hp_input(g, "targets", HP_DTYPE_I32, rs);
    rl->in[2] = hp_input(g, "rl.old_logp", HP_DTYPE_F32, rs);
    rl->in[3] = hp_input(g, "rl.ref_logp", HP_DTYPE_F32, rs);
    rl->in[4] = hp_input(g, "rl.adv", HP_DTYPE_F32, rs);
    rl->in[5] = hp_input(g, "rl.weight", HP_DTYPE_F32, rs);
    hp_tid loss = hp_grpo_loss(g, rl->lgpt.logits, rl->in[1], rl->in[2], rl->in[3], rl->in[4], rl->in[5],
                               (float)rl->r.clip_eps, (float)rl->r.kl_beta);
    HP_CHECK(hp_graph_status(g));
    hp_compile_opts co = HP_COMPILE_OPTS_INIT;
    co.loss = loss;
    co.train = true;
    co.optim = &rl->cfg.optim;
    co.strategy = rl->strategy;
    co.comm = rl->lcomm;
    co.program.store = rl->lstore;
    HP_CHECK(hp_compile(g, &co, &rl->lc));
    rl->step = *hp_compiled_step(rl->lc);
    hp_partition *part = hp_compiled_partition(rl->lc);
    rl->n_params = rl->step.n_params;
    rl->pname = calloc((size_t)rl->n_params, sizeof *rl->pname);
    rl->pshape = calloc((size_t)rl->n_params, sizeof *rl->pshape);
    rl->play = calloc((size_t)rl->n_params, sizeof *rl->play);
    if (!rl->pname || !rl->pshape || !rl->play) return OOM("the parameter list");
    /* every parameter and AdamW state gets its logical shape and layout in the store (views need them) */
    for (int i = 0; i < 3 * rl->n_params; i++) {
        int k = i % rl->n_params, which = i / rl->n_params;
        hp_tid id = which == 0 ? rl->step.params[k] : which == 1 ? rl->step.m[k] : rl->step.v[k];
        const hp_tensor *x = hp_graph_tensor(g, id);
        hp_layout rep = replicated(x->shape.ndim);
        const hp_layout *l = part ? hp_partition_layout(part, id) : &rep;
        HP_CHECK(hp_store_declare(rl->lstore, x->name, x->dtype, &x->shape, l));
        if (which == 0) {
            rl->pname[k] = x->name;
            rl->pshape[k] = x->shape;
            rl->play[k] = *l;
            rl->any_sharded |= !hp_layout_equal(l, &rep);
        }
    }
    return HP_STATUS_OK;
}

/* The actor's generator: over the learner's store when co-located (views in the actor's layout of
 * the parameters the learner lays out otherwise made first, so the generator binds to them), else
 * over a store of its own (on the actor's mesh with tp). A tp actor's generator is compiled under
 * the actor's strategy over all the actor ranks; the rules split the heads over the mesh's last
 * axis (tp) and leave a first axis (dp) unused, so the dp replicas never communicate and each
 * feeds its own share of the batch (the ranks of one replica feed the same). */
static hp_status actor_init(hp_rl *rl) {
    int64_t s0, n;
    hp_block_range(rl->B, rl->n_rep, rl->actor_index / rl->tp, &s0, &n); /* this rank's replica's share */
    rl->share0 = (int)s0, rl->share = (int)n;
    rl->my_comp = malloc(sizeof(int32_t) * (size_t)n * (size_t)rl->M);
    rl->my_logp = malloc(sizeof(float) * (size_t)n * (size_t)rl->M);
    rl->gen_logits = malloc(sizeof(float) * (size_t)n * (size_t)rl->M * (size_t)rl->V);
    if (!rl->my_comp || !rl->my_logp || !rl->gen_logits) return OOM("the actor's buffers");
    hp_mesh *am = rl->tp_actor ? hp_strategy_mesh(rl->astrategy) : NULL;
    if (am) HP_CHECK(hp_mesh_attach(am, rl->acomm));
    if (rl->colocated) rl->astore = rl->lstore;
    else {
        HP_CHECK(hp_store_new(am, NULL, &rl->astore_own));
        rl->astore = rl->astore_own;
    }
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    int64_t most;
    hp_block_range(rl->B, rl->n_rep, 0, &s0, &most);
    go.slots = (int)most;
    go.strategy = rl->tp_actor ? rl->astrategy : NULL; /* heads split over tp; a dp axis holds replicas */
    return hp_generator_new(&rl->gc, rl->astore, &go, &rl->gen);
}

/*
 * The actor's layout of every parameter, on every rank without communication: the layouts the
 * actor's strategy gives the parameters of a decode graph (hp_strategy_annotate: the generator's
 * programs take exactly these), replicated where no rule matches or without tp. A co-located
 * learner's mesh has the actor's one axis over the same ranks (hp__config_check_rl), so the same
 * layout values mean the same blocks on the learner's store.
 */
static hp_status actor_layouts(hp_rl *rl) {
    rl->alay = calloc((size_t)rl->n_params, sizeof *rl->alay);
    if (!rl->alay) return OOM("the actor's layouts");
    for (int p = 0; p < rl->n_params; p++) rl->alay[p] = replicated(rl->pshape[p].ndim);
    if (!rl->tp_actor) return HP_STATUS_OK;
    hp_graph *g = hp_graph_new();
    hp_layout *lay = NULL;
    hp_gpt_decode d;
    hp_status st = g ? hp_gpt_build_decode(g, &rl->gc, 1, 1, rl->gc.context, &d) : OOM("a graph");
    if (st == HP_STATUS_OK) {
        lay = calloc((size_t)hp_graph_n_tensors(g), sizeof *lay);
        st = lay ? hp_strategy_annotate_part(rl->astrategy, g, lay) : OOM("the actor's layouts");
    }
    for (int p = 0; st == HP_STATUS_OK && p < rl->n_params; p++) {
        hp_tid t = hp_graph_find(g, rl->pname[p]);
        if (t == HP_TID_NONE)
            st = hp_error(HP_STATUS_INTERNAL, "rl: parameter '%s' is not in the decode graph", rl->pname[p]);
        else if (lay[t].ndim >= 0) rl->alay[p] = lay[t];
    }
    free(lay);
    hp_graph_free(g);
    return st;
}

/* Co-located: the views of the parameters whose learner layout is not the actor's (replicated, or
 * the tp actor's), refreshed where the entry moved (collective over the learner mesh). */
static hp_status refresh_views(hp_rl *rl, int64_t *bytes) {
    hp_store_stats a, b;
    hp_store_get_stats(rl->lstore, &a);
    for (int p = 0; p < rl->n_params; p++) { /* the actor's layout: replicated, or tp's */
        void *d;
        if (!hp_layout_equal(&rl->play[p], &rl->alay[p]))
            HP_CHECK(hp_store_view(rl->lstore, rl->pname[p], &rl->alay[p], &d));
    }
    hp_store_get_stats(rl->lstore, &b);
    if (bytes) *bytes += b.refresh_bytes - a.refresh_bytes;
    return HP_STATUS_OK;
}

/* The actor's copy of parameter p on this rank (NULL when not an actor). */
static hp_status actor_param(hp_rl *rl, int p, void **out) {
    *out = NULL;
    if (!rl->colocated) {
        if (rl->is_actor) *out = hp_store_data(rl->astore, rl->pname[p]);
        return HP_STATUS_OK;
    }
    if (hp_layout_equal(&rl->play[p], &rl->alay[p])) *out = hp_store_data(rl->lstore, rl->pname[p]);
    else HP_CHECK(hp_store_view(rl->lstore, rl->pname[p], &rl->alay[p], out)); /* fresh after a sync: no transfer */
    return HP_STATUS_OK;
}

/* The start weights (the controller's reference store) into the learner's layout and the actor's. */
static hp_status first_sync(hp_rl *rl) {
    for (int p = 0; p < rl->n_params; p++) {
        hp_layout rep = replicated(rl->pshape[p].ndim);
        const void *src = rl->is_ctrl ? hp_store_data(rl->rstore, rl->pname[p]) : NULL;
        void *dst = rl->is_learner ? hp_store_data(rl->lstore, rl->pname[p]) : NULL;
        HP_CHECK(hp_redistribute_cross(rl->world, rl->cmesh_w, &rep, src, rl->lmesh_w, &rl->play[p], dst, &rl->pshape[p],
                                       HP_DTYPE_F32, NULL));
        if (rl->is_learner) HP_CHECK(hp_store_touch(rl->lstore, rl->pname[p]));
    }
    return hp__rl_sync(rl, NULL);
}

/*
 * The check of parameter p: the controller sends the learner's gathered values `full` to every
 * other actor rank; every actor rank (the controller too when co-located) cuts its own
 * block under the actor's layout and compares it byte for byte with its copy `mine` (so replicated
 * parameters are checked on every rank too); the verdicts go back to the controller.
 */
static hp_status verify_shards(hp_rl *rl, int p, const float *full, const void *mine, hp_rl_step_metrics *m) {
    size_t n = (size_t)hp_shape_numel(&rl->pshape[p]);
    int32_t bad = 0, any = 0;
    if (rl->is_ctrl)
        for (int a = 0; a < rl->n_actors; a++)
            if (rl->actors[a] != rl->rank) HP_CHECK(hp_comm_send(rl->world, full, n, HP_DTYPE_F32, rl->actors[a], 8));
    if (rl->is_actor) {
        int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
        HP_CHECK(hp_layout_slice_of(&rl->alay[p], rl->amesh_w, &rl->pshape[p], rl->actor_index, start, len));
        hp_shape local = rl->pshape[p];
        int64_t ln = 1;
        for (int d = 0; d < local.ndim; d++) local.dim[d] = len[d], ln *= len[d];
        float *whole = rl->is_ctrl ? NULL : malloc(n * sizeof(float));
        float *block = malloc((size_t)(ln ? ln : 1) * sizeof(float));
        hp_status st = (whole || rl->is_ctrl) && block ? HP_STATUS_OK : OOM("a verified parameter");
        if (st == HP_STATUS_OK && !rl->is_ctrl) st = hp_comm_recv(rl->world, whole, n, HP_DTYPE_F32, rl->controller, 8);
        bad = 1;
        if (st == HP_STATUS_OK) {
            hp_copy_box(block, &local, zero, rl->is_ctrl ? full : whole, &rl->pshape[p], start, len, sizeof(float));
            bad = memcmp(block, mine, (size_t)ln * sizeof(float)) != 0;
            if (!rl->is_ctrl) st = hp_comm_send(rl->world, &bad, 1, HP_DTYPE_I32, rl->controller, 9);
        }
        free(whole);
        free(block);
        HP_CHECK(st);
    }
    if (rl->is_ctrl) {
        any = rl->is_actor ? bad : 0;
        for (int a = 0; a < rl->n_actors; a++) {
            if (rl->actors[a] == rl->rank) continue;
            HP_CHECK(hp_comm_recv(rl->world, &bad, 1, HP_DTYPE_I32, rl->actors[a], 9));
            any |= bad;
        }
        m->sync_checked++;
        m->sync_mismatch += any != 0;
    }
    return HP_STATUS_OK;
}

/* With verify_sync: the learner's parameter p gathered on the controller, checked against every
 * actor rank's copy (verify_shards). */
static hp_status verify(hp_rl *rl, int p, hp_rl_step_metrics *m) {
    hp_layout rep = replicated(rl->pshape[p].ndim);
    size_t bytes = (size_t)hp_shape_numel(&rl->pshape[p]) * sizeof(float);
    float *full = rl->is_ctrl ? malloc(bytes) : NULL;
    hp_status st = !rl->is_ctrl || full ? HP_STATUS_OK : OOM("a verified parameter");
    void *mine = NULL;
    HP_CHECK_GOTO(st, st, done);
    const void *lb = rl->is_learner ? hp_store_data(rl->lstore, rl->pname[p]) : NULL;
    HP_CHECK_GOTO(hp_redistribute_cross(rl->world, rl->lmesh_w, &rl->play[p], lb, rl->cmesh_w, &rep, full, &rl->pshape[p],
                                        HP_DTYPE_F32, NULL), st, done);
    HP_CHECK_GOTO(actor_param(rl, p, &mine), st, done);
    st = verify_shards(rl, p, full, mine, m);
done:
    free(full);
    return st;
}

hp_status hp__rl_sync(hp_rl *rl, hp_rl_step_metrics *m) {
    double t0 = hp_now_seconds();
    rl->actor_updates = rl->steps_done;
    int64_t bytes = 0;
    if (rl->colocated) {
        if (rl->any_sharded || rl->tp_actor) HP_CHECK(refresh_views(rl, &bytes));
    } else {
        for (int p = 0; p < rl->n_params; p++) {
            const void *src = rl->is_learner ? hp_store_data(rl->lstore, rl->pname[p]) : NULL;
            void *dst = rl->is_actor ? hp_store_data(rl->astore, rl->pname[p]) : NULL;
            int64_t b = 0;
            HP_CHECK(hp_redistribute_cross(rl->world, rl->lmesh_w, &rl->play[p], src, rl->amesh_w, &rl->alay[p], dst,
                                           &rl->pshape[p], HP_DTYPE_F32, &b));
            if (rl->is_actor) HP_CHECK(hp_store_touch(rl->astore, rl->pname[p]));
            bytes += b;
        }
    }
    if (!m) return HP_STATUS_OK;
    m->sync_seconds += hp_now_seconds() - t0;
    m->sync_bytes += bytes;
    for (int p = 0; rl->opts.verify_sync && p < rl->n_params; p++) HP_CHECK(verify(rl, p, m));
    return HP_STATUS_OK;
}

static hp_status rl_init(hp_rl *rl) {
    /* every transfer waits at most train.comm_timeout for the other ranks (as the trainer's) */
    if (rl->world != rl->world_own) HP_CHECK(hp_comm_set_timeout(rl->world, rl->cfg.train.comm_timeout));
    HP_CHECK(roles(rl));
    rl->gc = hp_gpt_config_from_model(&rl->cfg.model);
    rl->M = hp_rl_prompt_max(&rl->r);
    rl->T = 2 * rl->M - 1;
    rl->V = rl->gc.vocab;
    rl->B = (int)(rl->r.prompts * rl->r.group_size);
    /* the learner's communicator (rank 0: the controller) and strategy */
    int key = rl->rank;
    for (int i = 0; i < rl->n_learners; i++)
        if (rl->learners[i] == rl->rank) key = i;
    HP_CHECK(hp_comm_split(rl->world, rl->is_learner ? 1 : 0, key, &rl->lcomm));
    if (!rl->is_learner) {
        hp_comm_free(rl->lcomm);
        rl->lcomm = NULL;
    }
    const hp_strategy_config *sc = NULL;
    for (int i = 0; i < rl->cfg.groups.n_groups; i++)
        if (rl->cfg.groups.present && rl->cfg.groups.groups[i].kind == HP_GROUP_KIND_LEARNER)
            sc = &rl->cfg.groups.groups[i].strategy;
    if (!rl->cfg.groups.present) sc = &rl->cfg.strategy;
    HP_CHECK(hp_strategy_new(sc && sc->present ? sc : NULL, rl->n_learners, &rl->strategy));
    hp_mesh *lm = hp_strategy_mesh(rl->strategy);
    HP_CHECK(world_mesh(lm, rl->learners, rl->n_learners, &rl->lmesh_w));
    /* a tensor-parallel actor: its strategy on every rank (its mesh numbers the syncs' destinations)
     * and a communicator of the actor ranks for its generator */
    const hp_strategy_config *as = NULL;
    for (int i = 0; rl->cfg.groups.present && i < rl->cfg.groups.n_groups; i++)
        if (rl->cfg.groups.groups[i].kind == HP_GROUP_KIND_ACTOR) as = &rl->cfg.groups.groups[i].strategy;
    rl->tp_actor = as && as->present && as->n_params > 0;
    rl->tp = rl->tp_actor ? as->device_matrix[as->n_axes - 1] : 1;
    rl->n_rep = rl->n_actors / rl->tp;
    if (rl->tp_actor) {
        HP_CHECK(hp_strategy_new(as, rl->n_actors, &rl->astrategy));
        HP_CHECK(hp_comm_split(rl->world, rl->is_actor ? 1 : 0, rl->is_actor ? rl->actor_index : rl->rank, &rl->acomm));
        if (!rl->is_actor) {
            hp_comm_free(rl->acomm);
            rl->acomm = NULL;
        }
    }
    HP_CHECK(world_mesh(rl->tp_actor ? hp_strategy_mesh(rl->astrategy) : NULL, rl->actors, rl->n_actors, &rl->amesh_w));
    HP_CHECK(world_mesh(NULL, &rl->controller, 1, &rl->cmesh_w));
    size_t bt = (size_t)rl->B * (size_t)rl->T, bm = (size_t)rl->B * (size_t)rl->M;
    rl->tok = malloc(bt * sizeof(int32_t)), rl->tgt = malloc(bt * sizeof(int32_t));
    rl->old = malloc(bt * sizeof(float)), rl->ref = malloc(bt * sizeof(float));
    rl->adv = malloc(bt * sizeof(float)), rl->w = malloc(bt * sizeof(float));
    rl->comp = malloc(bm * sizeof(int32_t)), rl->comp_logp = malloc(bm * sizeof(float));
    if (!rl->tok || !rl->tgt || !rl->old || !rl->ref || !rl->adv || !rl->w || !rl->comp || !rl->comp_logp)
        return OOM("the batch");
    if (rl->is_ctrl) HP_CHECK(controller_init(rl));
    if (rl->is_learner) {
        HP_CHECK(hp_mesh_attach(lm, rl->lcomm));
        HP_CHECK(hp_store_new(lm, NULL, &rl->lstore));
        hp_store_set_redistribute(rl->lstore, hp_redistribute_tensor);
        HP_CHECK(learner_init(rl));
    }
    /* every rank needs the parameter list for the syncs: the actors-only ranks build it from a
     * logical graph of their own (same names, shapes; layouts sent by the controller) */
    if (!rl->is_learner) {
        rl->lg = hp_graph_new();
        if (!rl->lg) return OOM("a graph");
        HP_CHECK(hp_gpt_build(rl->lg, &rl->gc, 1, rl->T, true, &rl->lgpt));
        HP_CHECK(hp_train_step_build(rl->lg, rl->lgpt.loss, &rl->cfg.optim, &rl->step));
        rl->n_params = rl->step.n_params;
        rl->pname = calloc((size_t)rl->n_params, sizeof *rl->pname);
        rl->pshape = calloc((size_t)rl->n_params, sizeof *rl->pshape);
        rl->play = calloc((size_t)rl->n_params, sizeof *rl->play);
        if (!rl->pname || !rl->pshape || !rl->play) return OOM("the parameter list");
        for (int k = 0; k < rl->n_params; k++) {
            const hp_tensor *x = hp_graph_tensor(rl->lg, rl->step.params[k]);
            rl->pname[k] = x->name;
            rl->pshape[k] = x->shape;
        }
    }
    /* the learner layouts, from the controller to every rank (the actors need them for the syncs) */
    HP_CHECK(hp_comm_broadcast(rl->world, rl->play, (size_t)rl->n_params * sizeof(hp_layout) / sizeof(int32_t),
                               HP_DTYPE_I32, rl->controller));
    int32_t sharded = rl->any_sharded;
    HP_CHECK(hp_comm_broadcast(rl->world, &sharded, 1, HP_DTYPE_I32, rl->controller));
    rl->any_sharded = sharded != 0;
    HP_CHECK(actor_layouts(rl));
    if (rl->colocated && (rl->any_sharded || rl->tp_actor))
        HP_CHECK(refresh_views(rl, NULL)); /* before the generator binds */
    if (rl->is_actor) HP_CHECK(actor_init(rl));
    return first_sync(rl);
}

hp_status hp_rl_new(const hp_run_config *cfg, hp_comm *world, const hp_rl_opts *opts, hp_rl **out) {
    *out = NULL;
    hp_rl *rl = calloc(1, sizeof *rl);
    if (!rl) return OOM("the job");
    rl->cfg = *cfg;
    rl->r = cfg->rl;
    rl->opts = opts ? *opts : HP_RL_OPTS_DEFAULT;
    if (!world) world = rl->world_own = hp_comm_self_new();
    rl->world = world;
    rl->rank = hp_comm_rank(world), rl->size = hp_comm_size(world);
    hp_status st = rl_init(rl);
    if (st != HP_STATUS_OK) {
        hp_rl_free(rl);
        return st;
    }
    *out = rl;
    return HP_STATUS_OK;
}

void hp_rl_free(hp_rl *rl) {
    if (!rl) return;
    hp_generator_free(rl->gen);
    hp_program_free(rl->rp);
    hp_graph_free(rl->rg);
    hp_compiled_free(rl->lc);
    hp_graph_free(rl->lg);
    hp_store_free(rl->astore_own);
    hp_store_free(rl->lstore);
    hp_store_free(rl->rstore);
    hp_strategy_free(rl->strategy);
    hp_strategy_free(rl->astrategy);
    hp_comm_free(rl->acomm);
    hp_mesh_free(rl->lmesh_w);
    hp_mesh_free(rl->amesh_w);
    hp_mesh_free(rl->cmesh_w);
    hp_comm_free(rl->lcomm);
    hp_comm_free(rl->world_own);
    free(rl->actors), free(rl->learners), free(rl->pname), free(rl->pshape), free(rl->play), free(rl->alay);
    free(rl->my_comp), free(rl->my_logp), free(rl->gen_logits);
    free(rl->tok), free(rl->tgt), free(rl->old), free(rl->ref), free(rl->adv), free(rl->w);
    free(rl->comp), free(rl->comp_logp);
    free(rl);
}

bool hp_rl_is_controller(const hp_rl *rl) { return rl->is_ctrl; }
const char *hp_rl_mode(const hp_rl *rl) { return rl->colocated ? "co-located" : "disjoint"; }
