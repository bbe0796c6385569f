/*
 * The pipeline's optimizer (hp/pipeline.h): the squared norm of the gradient accumulators this rank
 * owns, and the update program (clip, AdamW, zeroing the accumulators) over every parameter of its
 * chunks. With a group mesh (model-parallel axes or ZeRO) the update graph is built over the
 * parameters' logical shapes and partitioned over the group's mesh with its strategy: the
 * accumulators laid out as their parameters, AdamW's states as the strategy says (optimizer.shard:
 * ZeRO-1, each data-parallel replica updating its block and the partitioner gathering the new
 * parameter back, as in the SPMD trainer).
 */
#include "mpmd/pipeline_internal.h"

#include "hp/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM(what) hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory for %s", what)

/* Whether this rank is the first holder of its block of a stored entry: its coordinate is 0 on every
 * mesh axis the entry's layout does not split (the ranks that differ only there hold copies). Without
 * a group mesh: replica 0 (the replicas hold the same reduced gradients). */
static bool first_holder(const hp_pipeline *pp, const char *name) {
    hp_store_entry_info e;
    if (!pp->mesh) return pp->replica == 0;
    if (hp_store_info(pp->store, name, &e) != HP_STATUS_OK) return false;
    int coords[HP_MESH_MAX_AXES];
    hp_mesh_coords(pp->mesh, hp_mesh_my_index(pp->mesh), coords);
    for (int a = 0; a < hp_mesh_naxes(pp->mesh); a++) {
        bool used = false;
        for (int d = 0; d < e.layout.ndim; d++)
            for (int k = 0; k < e.layout.nmap[d]; k++) used |= e.layout.map[d][k] == a;
        if (!used && coords[a] != 0) return false;
    }
    return true;
}

/* A name this rank's optimizer owns: each block of each parameter once; a tied embedding's copy on
 * the last stage is left to the norm of the ranks holding stage 0 (it is summed into both copies). */
static bool counts_in_norm(const hp_pipeline *pp, const char *name) {
    if (!first_holder(pp, name)) return false;
    return !(pp->tied_exchange && pp->sched->stage_rank[0] != pp->rank &&
             !strcmp(name, hp_gpt_embedding_name(&pp->model)));
}

/* Partitions the update graph over the group's mesh (see the top of this file) and declares the
 * logical shape and layout of every state it binds. */
static hp_status shard_update(hp_pipeline *pp) {
    hp_graph *og = pp->opt_g;
    int nt = hp_graph_n_tensors(og);
    hp_layout *lay = NULL;
    hp_status st = hp__pp_leaf_layouts(pp, og, &lay);
    hp_partition_opts po = HP_PARTITION_OPTS_DEFAULT;
    if (st == HP_STATUS_OK) st = hp_partition_new_opts(og, pp->mesh, lay, NULL, 0, &po, &pp->opt_part);
    free(lay);
    HP_CHECK(st);
    pp->opt_lg = og;
    pp->opt_g = hp_partition_graph(pp->opt_part);
    pp->opt_lr = hp_partition_local(pp->opt_part, pp->opt_lr);
    pp->opt_step = hp_partition_local(pp->opt_part, pp->opt_step);
    pp->opt_grad_sq = hp_partition_local(pp->opt_part, pp->opt_grad_sq);
    for (int t = 0; t < nt; t++) {
        const hp_tensor *x = hp_graph_tensor(og, t);
        if (x->kind != HP_TENSOR_KIND_PARAM && x->kind != HP_TENSOR_KIND_OPT_STATE) continue;
        hp_shape shape = x->shape;
        HP_CHECK(hp_store_declare(pp->store, x->name, x->dtype, &shape, hp_partition_layout(pp->opt_part, t)));
    }
    return HP_STATUS_OK;
}

/* Adds the update of one parameter (logical tensor `pt`) to the update graph, and its accumulator's
 * squared norm to the norm graph when this rank counts it (`local`: its per-rank shape). */
static hp_status add_param(hp_pipeline *pp, const hp_tensor *pt, const hp_shape *local, hp_tid scale, hp_tid *sq,
                           int *n_sq, hp_tid *acc_out) {
    hp_graph *ng = pp->norm_g, *og = pp->opt_g;
    hp_shape shape = pt->shape;
    bool nwd = pt->no_weight_decay;
    char name[600];
    snprintf(name, sizeof name, "grad_acc.%s", pt->name);
    if (counts_in_norm(pp, pt->name)) sq[(*n_sq)++] = hp_leaf(ng, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, *local);
    hp_tid acc = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, shape);
    hp_tid param = hp_leaf(og, pt->name, HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, shape);
    hp_graph_tensor(og, param)->no_weight_decay = nwd;
    snprintf(name, sizeof name, "exp_avg.%s", pt->name);
    hp_tid mm = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, shape);
    snprintf(name, sizeof name, "exp_avg_sq.%s", pt->name);
    hp_tid vv = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, shape);
    hp_adamw_params ap = {.beta1 = (float)pp->optim.beta1, .beta2 = (float)pp->optim.beta2, .eps = (float)pp->optim.eps,
                          .weight_decay = nwd ? 0.0f : (float)pp->optim.weight_decay};
    *acc_out = acc;
    return hp_adamw(og, param, acc, mm, vv, pp->opt_lr, pp->opt_step, scale, &ap);
}

hp_status hp__pp_build_optimizer(hp_pipeline *pp) {
    pp->norm_g = hp_graph_new();
    pp->opt_g = hp_graph_new();
    if (!pp->norm_g || !pp->opt_g) return OOM("the optimizer graphs");
    hp_graph *ng = pp->norm_g, *og = pp->opt_g;
    int cap = 0;
    for (int c = 0; c < pp->n_chunks; c++) cap += hp_graph_params(pp->chunks[c].g, NULL, 0);
    hp_tid *sq = malloc(sizeof *sq * (size_t)(cap + 1)), *ids = malloc(sizeof *ids * (size_t)(cap + 1));
    hp_tid *accs = malloc(sizeof *accs * (size_t)(cap + 1));
    if (!sq || !ids || !accs) {
        free(sq), free(ids), free(accs);
        return OOM("the optimizer");
    }
    int n_sq = 0, n_acc = 0;
    pp->opt_lr = hp_input(og, "opt.lr", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    pp->opt_step = hp_input(og, "opt.step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    pp->opt_grad_sq = hp_input(og, "opt.grad_sq", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    hp_tid scale = pp->optim.grad_clip > 0 ? hp_clip_scale(og, pp->opt_grad_sq, (float)pp->optim.grad_clip) : HP_TID_NONE;
    hp_status st = HP_STATUS_OK;
    hp_graph_set_node_flags(og, HP_NODE_FLAG_OPTIMIZER);
    for (int c = 0; c < pp->n_chunks && st == HP_STATUS_OK; c++) {
        const pp_chunk *ch = &pp->chunks[c];
        hp_graph *g = ch->lg ? ch->lg : ch->g; /* the update is built over logical shapes */
        int np = hp_graph_params(g, ids, cap);
        for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
            const hp_tensor *pt = hp_graph_tensor(g, ids[i]);
            if (hp_graph_find(og, pt->name) != HP_TID_NONE) continue; /* another chunk's copy */
            hp_tid lt = ch->lg ? hp_graph_find(ch->g, pt->name) : ids[i];
            if (lt == HP_TID_NONE) {
                st = hp_error(HP_STATUS_INTERNAL, "pipeline: '%s' is not in stage %d's per-rank graph", pt->name, ch->stage);
                break;
            }
            hp_shape local = hp_graph_tensor(ch->g, lt)->shape;
            if (!pp->mesh) pt = hp_graph_tensor(ch->g, lt);
            st = add_param(pp, pt, &local, scale, sq, &n_sq, &accs[n_acc]);
            n_acc++;
        }
    }
    for (int i = 0; i < n_acc && st == HP_STATUS_OK; i++) { /* after every update has read its gradient */
        hp_tid in[2] = {accs[i], hp_fill(og, hp_graph_tensor(og, accs[i])->shape, 0.0f)};
        hp_graph_add_node(og, HP_OP_ASSIGN, in, 2, NULL);
        st = hp_graph_status(og);
    }
    hp_graph_set_node_flags(og, 0);
    if (st == HP_STATUS_OK) {
        /* one sum of squares per gradient, then a chain of scalar adds (as hp_train_step_build) */
        hp_tid total = n_sq ? HP_TID_NONE : hp_fill(ng, HP_SHAPE_SCALAR, 0.0f);
        for (int i = 0; i < n_sq; i++) {
            hp_tid one = hp_sumsq(ng, &sq[i], 1);
            total = total == HP_TID_NONE ? one : hp_add(ng, total, one);
        }
        pp->norm_out = total;
        st = hp_graph_status(ng);
    }
    free(sq), free(ids), free(accs);
    HP_CHECK(st);
    if (pp->mesh) HP_CHECK(shard_update(pp));
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.store = pp->store;
    po.keep = &pp->norm_out;
    po.n_keep = 1;
    HP_CHECK(hp_program_new(ng, &po, &pp->norm_p));
    po.keep = NULL;
    po.n_keep = 0;
    return hp_program_new(pp->opt_g, &po, &pp->opt_p);
}
