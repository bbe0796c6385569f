/*
 * Building one rank's pipeline (hp/pipeline.h): the stage graphs with their surrogate backward and
 * phase order (F, B, W), the program instances per micro-batch in flight, and the optimizer
 * programs, all bound to one state store.
 */
#include "mpmd/pipeline_internal.h"

#include "hp/costmodel.h"
#include "hp/liveness.h"
#include "hp/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM(what) hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory for %s", what)

/* The parts of virtual stage k: its layers, the embedding on the first, the head on the last. */
static hp_status stage_part(const hp_pipeline_opts *o, int k, hp_gpt_stage *out) {
    int n = o->schedule->n_stages, L = o->model->layers;
    int first, last;
    if (o->first_layer) {
        first = o->first_layer[k];
        last = k + 1 < n ? o->first_layer[k + 1] : L;
    } else { /* as even as possible, the earlier stages one more */
        first = k * (L / n) + (k < L % n ? k : L % n);
        last = (k + 1) * (L / n) + (k + 1 < L % n ? k + 1 : L % n);
    }
    if (first < 0 || last > L || first > last)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: stage %d's layers [%d, %d) are not within [0, %d) in order",
                        k, first, last, L);
    *out = (hp_gpt_stage){.first_layer = first, .last_layer = last, .embedding = k == 0, .head = k == n - 1};
    if (first == last && !out->embedding && !out->head)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "pipeline: stage %d has no layer (%d layers over %d stages), no embedding and no head", k, L, n);
    return HP_STATUS_OK;
}

/* Phase of every node: F (forward, not reading the output gradient), B (the backward nodes the
 * input gradient depends on; on the first stage, which has none, the gradient of the embeddings'
 * output: the chain of activation gradients through its blocks, as Qi et al.'s B), W (the rest: the
 * weight gradients and their accumulation); then the nodes reordered F, B, W. */
static hp_status order_phases(pp_chunk *c) {
    hp_graph *g = c->g;
    int nn = hp_graph_n_nodes(g), nt = hp_graph_n_tensors(g);
    bool *taint = calloc((size_t)nt + 1, 1), *need = calloc((size_t)nt + 1, 1);
    int8_t *phase = malloc((size_t)nn + 1);
    int *order = malloc(sizeof *order * ((size_t)nn + 1));
    if (!taint || !need || !phase || !order) {
        free(taint), free(need), free(phase), free(order);
        return OOM("the phase order");
    }
    if (c->dy != HP_TID_NONE) taint[c->dy] = true;
    for (int i = 0; i < nn; i++) {
        const hp_node *n = hp_graph_node(g, i);
        bool t = (n->flags & HP_NODE_FLAG_BACKWARD) != 0;
        for (int k = 0; k < n->n_in && !t; k++) t = n->in[k] != HP_TID_NONE && taint[n->in[k]];
        for (int j = 0; j < n->n_out; j++) taint[n->out[j]] = t;
        phase[i] = t ? 2 : 0; /* backward: W until shown to feed dx */
    }
    if (c->dx_b != HP_TID_NONE) need[c->dx_b] = true;
    for (int i = nn - 1; i >= 0; i--) {
        const hp_node *n = hp_graph_node(g, i);
        bool feeds = false;
        for (int j = 0; j < n->n_out; j++) feeds |= need[n->out[j]];
        if (phase[i] == 2 && c->whole_backward) phase[i] = 1; /* no W: the backward in autodiff order */
        if (!feeds || phase[i] == 0) continue;
        phase[i] = 1;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] != HP_TID_NONE) need[n->in[k]] = true;
    }
    int at = 0;
    for (int ph = 0; ph < 3; ph++) {
        for (int i = 0; i < nn; i++)
            if (phase[i] == ph) order[at++] = i;
        if (ph == 0) c->f_end = at;
        if (ph == 1) c->b_end = at;
    }
    c->n_nodes = nn;
    hp_status st = hp_graph_permute_nodes(g, order);
    if (st == HP_STATUS_OK) st = hp_graph_verify(g);
    for (int i = 0; st == HP_STATUS_OK && i < nn; i++) { /* the phase in the node: a rewrite keeps it */
        hp_node *n = hp_graph_node(g, i);
        uint32_t ph = i < c->f_end ? 1u : i < c->b_end ? 2u : 3u;
        n->flags = (n->flags & ~(uint32_t)HP_NODE_FLAG_PHASE_MASK) | (ph << HP_NODE_FLAG_PHASE_SHIFT);
    }
    free(taint), free(need), free(phase), free(order);
    return st;
}

/* The stage graph for one micro-batch of `rows` rows (of m): forward, surrogate backward, gradient
 * accumulation, nodes in phase order. */
static hp_status stage_graph(const hp_gpt_config *model, int rows, int seq, int batch, float loss_scale, pp_chunk *c) {
    c->g = hp_graph_new();
    if (!c->g) return OOM("a graph");
    hp_graph *g = c->g;
    HP_CHECK(hp_gpt_build_stage(g, model, &c->part, rows, seq, c->part.head, &c->gpt));
    c->row0 = HP_TID_NONE;
    if (model->dropout > 0.0f) { /* each run's rows are a block of the batch: the single-device masks */
        int nn = hp_graph_n_nodes(g);
        c->row0 = hp_input(g, "stage.row0", HP_DTYPE_I32, HP_SHAPE_SCALAR);
        for (int i = 0; i < nn; i++)
            if (hp_graph_node(g, i)->op == HP_OP_DROPOUT) HP_CHECK(hp_dropout_set_row_input(g, i, c->row0, batch));
    }
    const hp_gpt *m = &c->gpt;
    c->dy = HP_TID_NONE;
    c->act_bytes = (size_t)rows * (size_t)seq * (size_t)model->width * sizeof(float);
    hp_tid root;
    if (c->part.head) {
        root = hp_scale(g, m->loss, loss_scale); /* this rank's share of the step's mean loss */
    } else {
        c->dy = hp_input(g, "stage.dy", HP_DTYPE_F32, HP_SHAPE(rows, seq, model->width));
        root = hp_sum(g, hp_mul(g, m->x_out, c->dy), -1); /* d root / d x_out = dy exactly */
    }
    HP_CHECK(hp_graph_status(g));
    hp_tid first = m->x_in != HP_TID_NONE ? m->x_in : m->x_embed; /* the activation entering the blocks */
    int np = hp_graph_params(g, NULL, 0), nw = np + (first != HP_TID_NONE);
    hp_tid *wrt = malloc(sizeof *wrt * (size_t)(nw + 1)), *grads = malloc(sizeof *grads * (size_t)(nw + 1));
    if (!wrt || !grads) {
        free(wrt), free(grads);
        return OOM("the gradients");
    }
    hp_graph_params(g, wrt, np);
    if (first != HP_TID_NONE) wrt[np] = first;
    hp_status st = hp_autodiff(g, root, wrt, nw, grads);
    c->dx_b = st == HP_STATUS_OK && first != HP_TID_NONE ? grads[np] : HP_TID_NONE;
    c->dx = m->x_in != HP_TID_NONE ? c->dx_b : HP_TID_NONE;
    if (st == HP_STATUS_OK && m->x_in != HP_TID_NONE && c->dx == HP_TID_NONE)
        st = hp_error(HP_STATUS_INTERNAL, "pipeline: stage %d's input does not influence its output", c->stage);
    hp_graph_set_node_flags(g, HP_NODE_FLAG_BACKWARD);
    for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
        const hp_tensor *pt = hp_graph_tensor(g, wrt[i]);
        if (grads[i] == HP_TID_NONE) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: parameter '%s' does not influence stage %d's loss",
                          pt->name, c->stage);
            break;
        }
        char name[600];
        snprintf(name, sizeof name, "grad_acc.%s", pt->name);
        hp_shape shape = pt->shape;
        hp_tid acc = hp_leaf(g, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, shape);
        hp_tid in[2] = {acc, hp_add(g, acc, grads[i])};
        hp_graph_add_node(g, HP_OP_ASSIGN, in, 2, NULL);
        st = hp_graph_status(g);
    }
    hp_graph_set_node_flags(g, 0);
    free(wrt), free(grads);
    HP_CHECK(st);
    return order_phases(c);
}

/* The kept tensors of a stage program: its output, its input gradient, its loss. */
static int stage_keep(const pp_chunk *c, hp_tid *keep) {
    int nk = 0;
    if (c->gpt.x_out != HP_TID_NONE) keep[nk++] = c->gpt.x_out;
    if (c->dx != HP_TID_NONE) keep[nk++] = c->dx;
    if (c->gpt.loss != HP_TID_NONE) keep[nk++] = c->gpt.loss;
    return nk;
}

/* The step's loss is the mean over the m micro-batches of their means over rows_mb rows; this
 * rank's rows carry rows / rows_mb of its micro-batch's mean. */
static float pp_loss_scale(const hp_pipeline *pp) { return (float)((double)pp->rows / pp->rows_mb / pp->m); }

hp_status hp__pp_leaf_layouts(const hp_pipeline *pp, const hp_graph *g, hp_layout **out) {
    return hp__pp_leaf_layouts_of(pp->strategy, g, out);
}

hp_status hp__pp_leaf_layouts_of(const hp_strategy *strategy, const hp_graph *g, hp_layout **out) {
    int nt = hp_graph_n_tensors(g);
    hp_layout *lay = *out = malloc(sizeof *lay * (size_t)(nt + 1));
    if (!lay) return OOM("the layouts");
    for (int t = 0; t < nt; t++) lay[t].ndim = -1;
    HP_CHECK(hp_strategy_annotate_part(strategy, g, lay));
    for (int t = 0; t < nt; t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->kind != HP_TENSOR_KIND_OPT_STATE || strncmp(x->name, "grad_acc.", 9)) continue;
        hp_tid param = hp_graph_find(g, x->name + 9);
        if (param == HP_TID_NONE) return hp_error(HP_STATUS_INTERNAL, "pipeline: '%s' has no parameter", x->name);
        lay[t] = lay[param];
    }
    return HP_STATUS_OK;
}

/* The partition of shard_stage for mesh index `index` (-1: this process's), the chunk's tensor ids
 * moved to the per-rank graph and its phases ordered again; *logical_in: the logical rows input. */
static hp_status partition_chunk(const hp_strategy *strategy, hp_mesh *mesh, const int *row_axes, int n_row_axes,
                                 const int *seq_axes, int n_seq_axes, int index, pp_chunk *c, hp_tid *logical_in) {
    hp_graph *lg = c->g;
    hp_layout *lay = NULL;
    hp_status st = hp__pp_leaf_layouts_of(strategy, lg, &lay);
    /* the stage's inputs: rows split over the partitioned-row axes, positions over the sequence
     * axes (sequence parallelism), the rest replicated */
    hp_tid rows_in[4] = {c->gpt.tokens, c->gpt.targets, c->gpt.x_in, c->dy};
    for (int k = 0; st == HP_STATUS_OK && k < 4; k++) {
        if (rows_in[k] == HP_TID_NONE) continue;
        hp_layout *l = &lay[rows_in[k]];
        hp_layout_init(l, hp_graph_tensor(lg, rows_in[k])->shape.ndim);
        l->nmap[0] = n_row_axes;
        for (int a = 0; a < n_row_axes; a++) l->map[0][a] = row_axes[a];
        l->nmap[1] = n_seq_axes;
        for (int a = 0; a < n_seq_axes; a++) l->map[1][a] = seq_axes[a];
    }
    /* the output and input gradient: with rows split and the sequence not, in the rows' layout (each
     * rank hands its block to the next group, no all-gather); else replicated, as the loss */
    hp_tid resolve[3];
    hp_layout rlay[3];
    int nr = 0, at_out = -1, at_dx = -1, at_loss = -1;
    bool blocks = n_row_axes > 0 && n_seq_axes == 0;
    if (c->gpt.x_out != HP_TID_NONE) at_out = nr, resolve[nr++] = c->gpt.x_out;
    if (c->dx != HP_TID_NONE) at_dx = nr, resolve[nr++] = c->dx;
    if (c->gpt.loss != HP_TID_NONE) at_loss = nr, resolve[nr++] = c->gpt.loss;
    for (int k = 0; k < nr; k++) {
        rlay[k].ndim = -1; /* replicated */
        if (!blocks || k == at_loss) continue;
        hp_layout_init(&rlay[k], hp_graph_tensor(lg, resolve[k])->shape.ndim);
        rlay[k].nmap[0] = n_row_axes;
        for (int a = 0; a < n_row_axes; a++) rlay[k].map[0][a] = row_axes[a];
    }
    hp_partition_opts po = HP_PARTITION_OPTS_DEFAULT;
    po.bucket_size = 0; /* one collective per gradient: the accumulation reads each one alone */
    po.index = index;
    po.resolve_layouts = rlay;
    if (st == HP_STATUS_OK) st = hp_partition_new_opts(lg, mesh, lay, resolve, nr, &po, &c->partition);
    free(lay);
    HP_CHECK(st);
    c->lg = lg;
    c->g = hp_partition_graph(c->partition);
    hp_gpt *m = &c->gpt;
    hp_tid logical = m->tokens != HP_TID_NONE ? m->tokens : m->x_in; /* rows in: the block's layout */
    m->tokens = m->tokens != HP_TID_NONE ? hp_partition_local(c->partition, m->tokens) : HP_TID_NONE;
    m->targets = m->targets != HP_TID_NONE ? hp_partition_local(c->partition, m->targets) : HP_TID_NONE;
    m->x_in = m->x_in != HP_TID_NONE ? hp_partition_local(c->partition, m->x_in) : HP_TID_NONE;
    c->dy = c->dy != HP_TID_NONE ? hp_partition_local(c->partition, c->dy) : HP_TID_NONE;
    c->row0 = c->row0 != HP_TID_NONE ? hp_partition_local(c->partition, c->row0) : HP_TID_NONE;
    m->step = m->step != HP_TID_NONE ? hp_partition_local(c->partition, m->step) : HP_TID_NONE;
    m->x_out = at_out >= 0 ? hp_partition_resolved(c->partition, at_out) : HP_TID_NONE;
    c->dx = at_dx >= 0 ? hp_partition_resolved(c->partition, at_dx) : HP_TID_NONE;
    c->dx_b = c->dx != HP_TID_NONE ? c->dx
              : c->dx_b != HP_TID_NONE ? hp_partition_local(c->partition, c->dx_b) : HP_TID_NONE;
    m->loss = at_loss >= 0 ? hp_partition_resolved(c->partition, at_loss) : HP_TID_NONE;
    *logical_in = logical;
    return order_phases(c);
}

/* With model-parallel axes: partitions the chunk's logical graph over the group's mesh (the
 * strategy's parameter layouts, each accumulator laid out as its parameter, everything else
 * replicated), the stage's loss resolved to a replicated copy and its output and input gradient
 * to this rank's block of rows (rows split, sequence not: pp->hand_blocks) or a replicated copy;
 * the programs then run the per-rank graph with its phases ordered again. */
static hp_status shard_stage(hp_pipeline *pp, pp_chunk *c) {
    hp_tid logical_in;
    HP_CHECK(partition_chunk(pp->strategy, pp->mesh, pp->row_axes, pp->n_row_axes, pp->seq_axes, pp->n_seq_axes, -1, c,
                             &logical_in));
    hp_graph *lg = c->lg;
    int nt = hp_graph_n_tensors(lg);
    /* this rank's block of the replica's rows, and of their positions */
    c->blk0 = 0, c->blkn = pp->rows, c->sq0 = 0, c->sqn = pp->seq;
    if (logical_in != HP_TID_NONE) {
        int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
        hp_shape shape = hp_graph_tensor(lg, logical_in)->shape;
        HP_CHECK(hp_layout_slice_of(hp_partition_layout(c->partition, logical_in), pp->mesh, &shape,
                                    hp_mesh_my_index(pp->mesh), start, len));
        c->blk0 = (int)start[0], c->blkn = (int)len[0];
        c->sq0 = (int)start[1], c->sqn = (int)len[1];
    }
    int at = pp->grp_off[pp->rank] + pp->replica * pp->grp_pn[pp->rank] + pp->pi;
    if (pp->hand_blocks && (c->blk0 != pp->grp_b0[at] || c->blkn != pp->grp_bn[at]))
        return hp_error(HP_STATUS_INTERNAL, "pipeline: stage %d's rows [%d, +%d) are not its hand-off block [%d, +%d)",
                        c->stage, c->blk0, c->blkn, pp->grp_b0[at], pp->grp_bn[at]);
    /* the store learns each parameter's and accumulator's logical shape and layout */
    for (int t = 0; t < nt; t++) {
        const hp_tensor *x = hp_graph_tensor(lg, t);
        if (x->kind != HP_TENSOR_KIND_PARAM && (x->kind != HP_TENSOR_KIND_OPT_STATE || strncmp(x->name, "grad_acc.", 9)))
            continue;
        hp_shape shape = x->shape;
        HP_CHECK(hp_store_declare(pp->store, x->name, x->dtype, &shape, hp_partition_layout(c->partition, t)));
    }
    return HP_STATUS_OK;
}

/* The phase boundaries of a slot's graph from its nodes' phase bits (after an offload rewrite, whose
 * nodes have none: they run in the phase of the node before them). */
static hp_status slot_phases(const pp_chunk *c, pp_slot *sl) {
    int nn = hp_graph_n_nodes(sl->g), last = 1;
    sl->n_nodes = nn;
    sl->f_end = sl->b_end = nn;
    for (int i = 0; i < nn; i++) {
        int ph = HP_NODE_PHASE(hp_graph_node(sl->g, i)->flags);
        if (ph == 0) continue;
        if (ph < last)
            return hp_error(HP_STATUS_INTERNAL, "pipeline: stage %d's rewritten graph has node %d of phase %d after "
                            "phase %d", c->stage, i, ph, last);
        if (ph >= 2 && last < 2) sl->f_end = i;
        if (ph == 3 && last < 3) sl->b_end = i;
        last = ph;
    }
    if (sl->b_end < sl->f_end) sl->b_end = sl->f_end;
    return HP_STATUS_OK;
}

/* A slot's own graph (with HyperOffload every slot has one: the pass rewrites its graph and keeps
 * per-node transfer records): the chunk's built again, partitioned as the chunk's was. */
static hp_status slot_graph(hp_pipeline *pp, const pp_chunk *c, pp_slot *sl) {
    pp_chunk t = {.stage = c->stage, .part = c->part, .whole_backward = c->whole_backward};
    hp_status st = stage_graph(&pp->model, pp->rows, pp->seq, pp->rows_mb * pp->m, pp_loss_scale(pp), &t);
    if (st == HP_STATUS_OK && c->partition) st = shard_stage(pp, &t);
    sl->g = t.g, sl->lg = t.lg, sl->partition = t.partition; /* owned by the slot from here */
    HP_CHECK(st);
    if (t.gpt.x_out != c->gpt.x_out || t.dx != c->dx || t.dy != c->dy || t.gpt.x_in != c->gpt.x_in ||
        t.gpt.loss != c->gpt.loss || t.gpt.tokens != c->gpt.tokens || t.row0 != c->row0)
        return hp_error(HP_STATUS_INTERNAL, "pipeline: stage %d's graph built twice differs", c->stage);
    return HP_STATUS_OK;
}

/* Bytes of the parameters and accumulators a stage graph reads: the store's, held once per rank. */
static size_t store_bytes(const hp_graph *g) {
    size_t total = 0;
    for (int t = 0; t < hp_graph_n_tensors(g); t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->producer < 0 && (x->kind == HP_TENSOR_KIND_PARAM || x->kind == HP_TENSOR_KIND_OPT_STATE))
            total += (size_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype);
    }
    return total;
}

static hp_status build_stage(hp_pipeline *pp, pp_chunk *c) {
    HP_CHECK(stage_graph(&pp->model, pp->rows, pp->seq, pp->rows_mb * pp->m, pp_loss_scale(pp), c));
    hp_tid keep[3];
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = keep;
    po.n_keep = stage_keep(c, keep);
    po.store = pp->store;
    c->blk0 = 0, c->blkn = pp->rows, c->sq0 = 0, c->sqn = pp->seq;
    if (pp->mesh && pp->grp_pn[pp->rank] > 1) { /* the chunk owns its graphs whether or not this fails */
        HP_CHECK(shard_stage(pp, c));
        po.n_keep = stage_keep(c, keep);
    }
    for (int s = 0; s < c->n_slots; s++) {
        pp_slot *sl = &c->slots[s];
        hp_program_opts so = po;
        if (pp->offload) { /* the slot's micro-batch's activations under its share of the budget */
            HP_CHECK(slot_graph(pp, c, sl));
            hp_offload_plan_config oc = pp->offload_cfg;
            oc.device_budget += store_bytes(sl->g); /* the planner counts the store's tensors it reads */
            HP_CHECK(hp_offload_apply_config(&oc, sl->g, &so, &sl->ofl));
        } else {
            sl->g = c->g; /* shared: the chunk owns it */
        }
        HP_CHECK(slot_phases(c, sl));
        HP_CHECK(hp_program_new(sl->g, &so, &sl->p));
        if (pp->hand_blocks || (c->blkn == pp->rows && c->sqn == pp->seq)) continue; /* received in place */
        if (c->gpt.x_in != HP_TID_NONE && !(sl->xin = malloc(c->act_bytes))) return OOM("a receive buffer");
        if (c->dy != HP_TID_NONE && !(sl->dyin = malloc(c->act_bytes))) return OOM("a receive buffer");
    }
    return HP_STATUS_OK;
}

/* A group's partition for planning (NULL strategy: the stage unpartitioned). */
typedef struct plan_group {
    hp_strategy *strategy;
    int row_axes[HP_CONFIG_MAX_AXES], seq_axes[HP_CONFIG_MAX_AXES];
    int n_row_axes, n_seq_axes;
    int n_opt_shard, opt_shard[HP_CONFIG_MAX_AXES], opt_size[HP_CONFIG_MAX_AXES]; /* optimizer.shard's axes */
} plan_group;

/* Bytes of AdamW's two moments of a parameter whose per-rank block is `local` bytes in layout l: as
 * the optimizer lays them out (hp_strategy_annotate_part), the parameter's layout plus every
 * optimizer.shard axis it does not use, on dim 0. */
static size_t moment_bytes(const plan_group *pg, const hp_layout *l, size_t local) {
    size_t split = 1;
    for (int i = 0; pg && l && l->ndim > 0 && i < pg->n_opt_shard; i++) {
        bool used = false;
        for (int d = 0; d < l->ndim; d++)
            for (int k = 0; k < l->nmap[d]; k++) used |= l->map[d][k] == pg->opt_shard[i];
        if (!used) split *= (size_t)pg->opt_size[i];
    }
    return 2 * local / split;
}

/* Builds the stage graph (partitioned over pg's mesh when pg has a strategy), in the phase order
 * `whole` chooses; with `times` the F, B and W phases under mm into out; its arena + workspace into
 * *act_bytes, and out->persistent_bytes. */
static hp_status plan_order(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                            const plan_group *pg, bool whole, bool times, const hp_machine_model *mm,
                            hp_pipeline_stage_plan *out, size_t *act_bytes) {
    pp_chunk c = {.part = *part, .whole_backward = whole};
    hp_tid logical_in;
    hp_status st = stage_graph(model, rows, seq, rows * m, 1.0f / (float)m, &c);
    if (st == HP_STATUS_OK && pg)
        st = partition_chunk(pg->strategy, hp_strategy_mesh(pg->strategy), pg->row_axes, pg->n_row_axes, pg->seq_axes,
                             pg->n_seq_axes, 0, &c, &logical_in);
    /* each phase as the runtime runs it (hp_program_run_nodes over its range); with a calibration
     * this also counts the dispatch of the program's mode (hp_predict_nodes) */
    int lo[3] = {0, c.f_end, c.b_end}, hi[3] = {c.f_end, c.b_end, c.n_nodes};
    double *phase[3] = {&out->f_seconds, &out->b_seconds, &out->w_seconds};
    for (int k = 0; times && st == HP_STATUS_OK && k < 3; k++) {
        hp_step_prediction pr;
        st = hp_predict_nodes(c.g, NULL, lo[k], hi[k], mm, &pr);
        if (st == HP_STATUS_OK) *phase[k] = pr.total_s;
    }
    hp_tid keep[3];
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = keep;
    po.n_keep = st == HP_STATUS_OK ? stage_keep(&c, keep) : 0;
    hp_program_stats ps;
    if (st == HP_STATUS_OK) st = hp_program_plan(c.g, &po, &ps);
    if (st == HP_STATUS_OK) {
        *act_bytes = ps.arena_bytes + ps.workspace_bytes;
        out->persistent_bytes = ps.persistent_bytes;
        out->param_bytes = out->moment_bytes = out->embedding_bytes = 0;
        const hp_graph *lg = c.partition ? c.lg : c.g;
        for (int t = 0; t < hp_graph_n_tensors(lg); t++) { /* this process's blocks when partitioned */
            if (hp_graph_tensor(lg, t)->kind != HP_TENSOR_KIND_PARAM) continue;
            hp_tid lt = c.partition ? hp_partition_local(c.partition, t) : t;
            const hp_tensor *x = hp_graph_tensor(c.g, lt != HP_TID_NONE ? lt : t);
            size_t local = (size_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype);
            size_t mom = moment_bytes(pg, c.partition ? hp_partition_layout(c.partition, t) : NULL, local);
            out->param_bytes += local;
            out->moment_bytes += mom;
            if (!strcmp(hp_graph_tensor(lg, t)->name, hp_gpt_embedding_name(model)))
                out->embedding_bytes = 2 * local + mom; /* + its accumulator */
        }
    }
    if (c.partition) hp_partition_free(c.partition); /* owns c.g */
    hp_graph_free(c.partition ? c.lg : c.g);
    return st;
}

/* The times with B and W apart, the activations in both orders. */
static hp_status plan_both(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                           const plan_group *pg, const hp_machine_model *mm, hp_pipeline_stage_plan *out) {
    memset(out, 0, sizeof *out);
    HP_CHECK(plan_order(model, part, rows, seq, m, pg, false, true, mm, out, &out->activation_bytes_split));
    return plan_order(model, part, rows, seq, m, pg, true, false, mm, out, &out->activation_bytes);
}

size_t hp_pipeline_stage_activations(const hp_pipeline_stage_plan *sp, bool split_backward) {
    return split_backward ? sp->activation_bytes_split : sp->activation_bytes;
}

hp_status hp_pipeline_plan_stage(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                                 const hp_machine_model *mm, hp_pipeline_stage_plan *out) {
    return plan_both(model, part, rows, seq, m, NULL, mm, out);
}

static hp_status check_group_strategy(const hp_strategy_config *sc, int r, int n);
static int axes_of_dim(const hp_strategy_config *sc, int d, int *axes);

/* The partition a group of n_ranks processes under strategy sc gives a stage, for planning. */
static hp_status plan_group_new(const hp_strategy_config *sc, int n_ranks, plan_group *pg) {
    *pg = (plan_group){0};
    HP_CHECK(check_group_strategy(sc, 0, n_ranks));
    HP_CHECK(hp_strategy_new(sc, n_ranks, &pg->strategy));
    pg->n_row_axes = axes_of_dim(sc, 0, pg->row_axes), pg->n_seq_axes = axes_of_dim(sc, 1, pg->seq_axes);
    pg->n_opt_shard = sc->n_opt_shard;
    for (int i = 0; i < sc->n_opt_shard; i++)
        pg->opt_shard[i] = sc->opt_shard[i], pg->opt_size[i] = sc->device_matrix[sc->opt_shard[i]];
    return HP_STATUS_OK;
}

hp_status hp_pipeline_plan_stage_group(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                                       const hp_strategy_config *sc, int n_ranks, const hp_machine_model *mm,
                                       hp_pipeline_stage_plan *out) {
    if (!sc || !sc->present) return hp_pipeline_plan_stage(model, part, rows, seq, m, mm, out);
    memset(out, 0, sizeof *out);
    plan_group pg;
    HP_CHECK(plan_group_new(sc, n_ranks, &pg));
    hp_status st = plan_both(model, part, rows, seq, m, &pg, mm, out);
    hp_strategy_free(pg.strategy);
    return st;
}

/* Process q of a group of n processes under strategy `sc` (NULL or not present: none): its
 * replica *j of *dp (the pipeline's own row split) and index *i of the *tp ranks the partitioner
 * spans within a replica. The mesh index q is split into coordinates (row-major, the last axis
 * fastest); the axes a params rule names (model-parallel; FSDP) or an inputs rule splits dim 0 of
 * (rows split by the partitioner) are the partitioner's, the others the pipeline's replicas, each
 * set read as one mixed-radix number. */
static void group_coords(const hp_strategy_config *sc, int n, int q, int *dp, int *tp, int *j, int *i) {
    *dp = n, *tp = 1, *j = q, *i = 0;
    if (!sc || !sc->present) return;
    bool part[HP_CONFIG_MAX_AXES] = {false};
    for (int r = 0; r < sc->n_params; r++)
        for (int d = 0; d < sc->params[r].tensor_map.n; d++)
            for (int k = 0; k < sc->params[r].tensor_map.nmap[d]; k++) part[sc->params[r].tensor_map.map[d][k]] = true;
    for (int r = 0; r < sc->n_inputs; r++) /* rows (or, sequence parallelism, positions) split by the partitioner */
        for (int d = 0; d < 2 && d < sc->inputs[r].tensor_map.n; d++)
            for (int k = 0; k < sc->inputs[r].tensor_map.nmap[d]; k++) part[sc->inputs[r].tensor_map.map[d][k]] = true;
    int rem = q, jj = 0, ii = 0, dpm = 1, tpm = 1;
    for (int a = sc->n_axes - 1; a >= 0; a--) {
        int size = sc->device_matrix[a], c = rem % size;
        rem /= size;
        if (part[a]) ii += c * tpm, tpm *= size;
        else jj += c * dpm, dpm *= size;
    }
    *dp = dpm, *tp = tpm, *j = jj, *i = ii;
}

void hp_pipeline_group_shape(const hp_strategy_config *sc, int n, int *dp, int *tp) {
    int j, i;
    group_coords(sc, n, 0, dp, tp, &j, &i);
}

/* Checks group r's strategy: a mesh of the group's size, input rules that split rows only. */
static hp_status check_group_strategy(const hp_strategy_config *sc, int r, int n) {
    if (!sc || !sc->present) return HP_STATUS_OK;
    int64_t devices = 1;
    for (int a = 0; a < sc->n_axes; a++) devices *= sc->device_matrix[a];
    if (devices != n)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: group %d's mesh has %lld devices for its %d ranks", r,
                        (long long)devices, n);
    for (int k = 0; k < sc->n_inputs; k++) {
        const hp_strategy_rule *in = &sc->inputs[k];
        bool rows_seq = true;
        for (int d = 2; d < in->tensor_map.n; d++) rows_seq &= in->tensor_map.nmap[d] == 0;
        if ((strcmp(in->match, "tokens") && strcmp(in->match, "targets")) || !rows_seq)
            return hp_error(HP_STATUS_UNSUPPORTED, "pipeline: group %d's strategy input '%s': a stage's inputs can "
                            "only split the rows (dim 0) and the sequence (dim 1, sequence parallelism) of tokens "
                            "and targets (the stage's activations follow)", r, in->match);
    }
    return HP_STATUS_OK;
}

/* The axes the inputs rules split dim `d` of (0: the rows, the partitioner's row axes; 1: the
 * sequence, sequence parallelism), each once. */
static int axes_of_dim(const hp_strategy_config *sc, int d, int *axes) {
    int n = 0;
    for (int k = 0; k < sc->n_inputs && sc->inputs[k].tensor_map.n > d; k++)
        for (int a = 0; a < sc->inputs[k].tensor_map.nmap[d]; a++) {
            int ax = sc->inputs[k].tensor_map.map[d][a];
            bool seen = false;
            for (int b = 0; b < n; b++) seen |= axes[b] == ax;
            if (!seen) axes[n++] = ax;
        }
    return n;
}

/* Every group's hand-off blocks (pp->grp_b0, grp_bn, indexed as grp_ranks): the rows of its
 * replica's rows that each process's stage output and input gradient hold, and that it receives
 * into. A group whose partitioner splits the rows and not the sequence (FSDP, no sequence
 * parallelism) resolves them to the block its x_in gets: dim 0 over the row axes, the slice
 * hp_layout_slice_of gives on the group's mesh (built here, not attached); every process of
 * another group holds its replica's whole rows. Processes of a replica with one block are copies. */
static hp_status hand_blocks(hp_pipeline *pp, const hp_pipeline_opts *o) {
    int total = hp_comm_size(o->comm);
    pp->grp_b0 = malloc(sizeof(int) * (size_t)total);
    pp->grp_bn = malloc(sizeof(int) * (size_t)total);
    if (!pp->grp_b0 || !pp->grp_bn) return OOM("the hand-off blocks");
    for (int r = 0; r < pp->p; r++) {
        const hp_strategy_config *sc = o->group_strategy ? &o->group_strategy[r] : NULL;
        int n = pp->grp_size[r], t = pp->grp_pn[r], row_axes[HP_CONFIG_MAX_AXES], seq_axes[HP_CONFIG_MAX_AXES];
        bool present = sc && sc->present;
        int nra = present ? axes_of_dim(sc, 0, row_axes) : 0, nsa = present ? axes_of_dim(sc, 1, seq_axes) : 0;
        bool blocks = t > 1 && nra > 0 && nsa == 0;
        if (r == pp->rank) pp->hand_blocks = blocks;
        hp_strategy *strategy = NULL;
        if (blocks) HP_CHECK(hp_strategy_new(sc, n, &strategy));
        hp_status st = HP_STATUS_OK;
        for (int q = 0; q < n && st == HP_STATUS_OK; q++) {
            int dp, tp, j, i, a0, a1;
            group_coords(sc, n, q, &dp, &tp, &j, &i);
            hp__pp_rows(pp->rows_mb, dp, j, &a0, &a1);
            int at = pp->grp_off[r] + j * t + i;
            pp->grp_b0[at] = 0, pp->grp_bn[at] = a1 - a0;
            if (!blocks) continue;
            hp_layout l;
            hp_layout_init(&l, 3);
            l.nmap[0] = nra;
            for (int a = 0; a < nra; a++) l.map[0][a] = row_axes[a];
            hp_shape shape = HP_SHAPE(a1 - a0, pp->seq, pp->model.width);
            int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
            st = hp_layout_slice_of(&l, hp_strategy_mesh(strategy), &shape, q, start, len);
            pp->grp_b0[at] = (int)start[0], pp->grp_bn[at] = (int)len[0];
        }
        hp_strategy_free(strategy);
        HP_CHECK(st);
    }
    return HP_STATUS_OK;
}

/* Which group (pipeline rank) this process is, its replica and model-parallel index and rows, and
 * the group's communicators (collective over comm). */
static hp_status setup_groups(hp_pipeline *pp, const hp_pipeline_opts *o) {
    int p = pp->p, total = hp_comm_size(o->comm);
    pp->me = hp_comm_rank(o->comm);
    pp->grp_size = malloc(sizeof(int) * (size_t)p);
    pp->grp_off = malloc(sizeof(int) * (size_t)p);
    pp->grp_dp = malloc(sizeof(int) * (size_t)p);
    pp->grp_pn = malloc(sizeof(int) * (size_t)p);
    pp->grp_ranks = malloc(sizeof(int) * (size_t)total);
    if (!pp->grp_size || !pp->grp_off || !pp->grp_dp || !pp->grp_pn || !pp->grp_ranks) return OOM("the groups");
    int at = 0, maxd = 1, pos = -1;
    pp->rank = -1;
    for (int r = 0; r < p; r++) {
        const hp_strategy_config *sc = o->group_strategy ? &o->group_strategy[r] : NULL;
        pp->grp_size[r] = o->group_size ? o->group_size[r] : 1;
        pp->grp_off[r] = at;
        HP_CHECK(check_group_strategy(sc, r, pp->grp_size[r]));
        if (pp->grp_size[r] > maxd) maxd = pp->grp_size[r];
        for (int q = 0; q < pp->grp_size[r]; q++) {
            int w = o->group_ranks ? o->group_ranks[at + q] : at + q, j, i;
            if (w < 0 || w >= total)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: group %d's rank %d is outside the communicator's %d",
                                r, w, total);
            group_coords(sc, pp->grp_size[r], q, &pp->grp_dp[r], &pp->grp_pn[r], &j, &i);
            pp->grp_ranks[at + j * pp->grp_pn[r] + i] = w;
            if (w == pp->me) pp->rank = r, pp->replica = j, pp->pi = i, pos = q;
        }
        at += pp->grp_size[r];
    }
    if (pp->rank < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: rank %d is in no stage group", pp->me);
    for (int r = 0; r < p; r++)
        if (pp->grp_dp[r] > pp->rows_mb)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: group %d has %d data-parallel replicas for micro-batches "
                            "of %d rows", r, pp->grp_dp[r], pp->rows_mb);
    HP_CHECK(hand_blocks(pp, o));
    int r1;
    hp__pp_rows(pp->rows_mb, pp->grp_dp[pp->rank], pp->replica, &pp->row0, &r1);
    pp->rows = r1 - pp->row0;
    pp->max_group = maxd;
    /* every process splits (collective); communicators of one process are not kept */
    hp_comm *sc = NULL, *gc = NULL;
    HP_CHECK(hp_comm_split(o->comm, pp->rank * total + pp->pi, pp->replica, &sc));
    if (pp->grp_dp[pp->rank] > 1) pp->stage_comm = sc;
    else hp_comm_free(sc);
    HP_CHECK(hp_comm_split(o->comm, pp->rank, pos, &gc));
    const hp_strategy_config *mine = o->group_strategy ? &o->group_strategy[pp->rank] : NULL;
    if (pp->grp_pn[pp->rank] == 1 && !(mine && mine->present && mine->n_opt_shard > 0)) { /* no group mesh */
        hp_comm_free(gc);
        return HP_STATUS_OK;
    }
    pp->group_comm = gc;
    pp->n_row_axes = axes_of_dim(mine, 0, pp->row_axes);
    pp->n_seq_axes = axes_of_dim(mine, 1, pp->seq_axes);
    HP_CHECK(hp_strategy_new(mine, pp->grp_size[pp->rank], &pp->strategy));
    pp->mesh = hp_strategy_mesh(pp->strategy);
    return hp_mesh_attach(pp->mesh, gc); /* collective over the group */
}

/* The stages' offload plan config: activations only, to the host tier (spilling to disk when a host
 * budget is full and disk_dir is set) or to the disk tier (policy activations: disk), every budget
 * split over the rank's slots (hp_pipeline_opts.offload). Each slot's offload state opens its own
 * disk store file, so the slots of a rank never share disk bytes. */
/* One slot's offload config from the rank's: only the activations class leaves the device (to the
 * host, or to disk by the policy), and the rank's budgets are split evenly over its `slots`. */
static hp_status slot_offload_config(const hp_offload_plan_config *cfg, int slots, hp_offload_plan_config *out) {
    hp_tier act = cfg->policy[HP_OFFLOAD_CLASS_ACTIVATIONS] == HP_TIER_DISK ? HP_TIER_DISK : HP_TIER_HOST;
    if (act == HP_TIER_DISK && !cfg->disk_dir)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: offload policy activations: disk without a disk_dir");
    size_t n = (size_t)(slots > 0 ? slots : 1);
    *out = *cfg;
    for (int k = 0; k < HP_OFFLOAD_CLASS_COUNT; k++) out->policy[k] = HP_TIER_DEVICE;
    out->policy[HP_OFFLOAD_CLASS_ACTIVATIONS] = act;
    out->device_budget = cfg->device_budget / n;
    if (cfg->host_budget) out->host_budget = cfg->host_budget / n > 0 ? cfg->host_budget / n : 1;
    if (cfg->disk_budget) out->disk_budget = cfg->disk_budget / n > 0 ? cfg->disk_budget / n : 1;
    return HP_STATUS_OK;
}

static hp_status offload_config(hp_pipeline *pp, const hp_offload_plan_config *cfg) {
    int slots = 0;
    for (int c = 0; c < pp->n_chunks; c++) slots += pp->chunks[c].n_slots;
    HP_CHECK(slot_offload_config(cfg, slots, &pp->offload_cfg));
    pp->offload = true;
    return HP_STATUS_OK;
}

/* The offload plan of one slot of the stage (partitioned over pg's mesh when pg has a strategy, as
 * plan_order builds it): hp_pipeline_plan_stage_offload and its group form. */
static hp_status plan_offload(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                              bool split_backward, const hp_offload_plan_config *cfg, int slots, const plan_group *pg,
                              hp_offload_plan_stats *out) {
    memset(out, 0, sizeof *out);
    hp_offload_plan_config oc;
    HP_CHECK(slot_offload_config(cfg, slots, &oc));
    pp_chunk c = {.part = *part, .whole_backward = !split_backward};
    hp_tid logical_in;
    hp_status st = stage_graph(model, rows, seq, rows * m, 1.0f / (float)m, &c);
    if (st == HP_STATUS_OK && pg)
        st = partition_chunk(pg->strategy, hp_strategy_mesh(pg->strategy), pg->row_axes, pg->n_row_axes, pg->seq_axes,
                             pg->n_seq_axes, 0, &c, &logical_in);
    hp_tid keep[3];
    int nk = st == HP_STATUS_OK ? stage_keep(&c, keep) : 0;
    if (st == HP_STATUS_OK && oc.device_budget) oc.device_budget += store_bytes(c.g); /* as the runtime: the store's tensors it reads */
    hp_offload_plan *plan = NULL;
    if (st == HP_STATUS_OK) st = hp_offload_plan_new(c.g, keep, nk, &oc, &plan);
    if (st == HP_STATUS_OK) hp_offload_plan_get_stats(plan, out);
    hp_offload_plan_free(plan);
    if (c.partition) hp_partition_free(c.partition); /* owns c.g */
    hp_graph_free(c.partition ? c.lg : c.g);
    return st;
}

hp_status hp_pipeline_plan_stage_offload(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq, int m,
                                         bool split_backward, const hp_offload_plan_config *cfg, int slots,
                                         hp_offload_plan_stats *out) {
    return plan_offload(model, part, rows, seq, m, split_backward, cfg, slots, NULL, out);
}

hp_status hp_pipeline_plan_stage_offload_group(const hp_gpt_config *model, const hp_gpt_stage *part, int rows, int seq,
                                               int m, bool split_backward, const hp_offload_plan_config *cfg, int slots,
                                               const hp_strategy_config *sc, int n_ranks, hp_offload_plan_stats *out) {
    if (!sc || !sc->present) return plan_offload(model, part, rows, seq, m, split_backward, cfg, slots, NULL, out);
    memset(out, 0, sizeof *out);
    plan_group pg;
    HP_CHECK(plan_group_new(sc, n_ranks, &pg));
    hp_status st = plan_offload(model, part, rows, seq, m, split_backward, cfg, slots, &pg, out);
    hp_strategy_free(pg.strategy);
    return st;
}

hp_status hp_pipeline_new(const hp_pipeline_opts *o, hp_pipeline **out) {
    *out = NULL;
    const hp_schedule *s = o->schedule;
    if (!o->model || !s || !o->optim || !o->comm)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: model, schedule, optim and comm are required");
    HP_CHECK(hp_gpt_config_check(o->model));
    int total = 0;
    for (int r = 0; r < s->p; r++) {
        int d = o->group_size ? o->group_size[r] : 1;
        if (d < 1)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: group %d has %d ranks", r, d);
        total += d;
    }
    if (hp_comm_size(o->comm) != total)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: the communicator has %d ranks, the %d stage groups %d",
                        hp_comm_size(o->comm), s->p, total);
    if (o->batch < 1 || o->batch % s->m)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: batch %d is not a positive multiple of the %d micro-batches",
                        o->batch, s->m);
    if (s->n_stages > o->model->layers + 2)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: %d stages for %d layers", s->n_stages, o->model->layers);
    hp_sched_check_opts co = HP_SCHED_CHECK_OPTS_INIT;
    HP_CHECK(hp_schedule_validate(s, &co, NULL, NULL));
    hp_pipeline *pp = calloc(1, sizeof *pp);
    if (!pp) return OOM("the pipeline");
    pp->model = *o->model;
    pp->optim = *o->optim;
    pp->sched = s;
    pp->comm = o->comm;
    pp->p = s->p;
    pp->m = s->m;
    pp->rows_mb = o->batch / s->m;
    pp->seq = o->seq;
    hp_status st = setup_groups(pp, o);
    if (st == HP_STATUS_OK) st = hp_store_new(pp->mesh, NULL, &pp->store);
    pp->chunk_of_stage = malloc(sizeof(int) * (size_t)s->n_stages);
    if (st == HP_STATUS_OK && !pp->chunk_of_stage) st = OOM("the stage map");
    for (int k = 0; st == HP_STATUS_OK && k < s->n_stages; k++) {
        pp->chunk_of_stage[k] = -1;
        if (s->stage_rank[k] == pp->rank) pp->n_chunks++;
    }
    if (st == HP_STATUS_OK && !(pp->chunks = calloc((size_t)pp->n_chunks + 1, sizeof *pp->chunks))) st = OOM("the chunks");
    for (int k = 0; st == HP_STATUS_OK && k < s->n_stages; k++) {
        if (s->stage_rank[k] != pp->rank) continue;
        int c = s->stage_chunk[k];
        if (c < 0 || c >= pp->n_chunks || pp->chunks[c].g) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: stage %d has chunk %d on rank %d", k, c, pp->rank);
            break;
        }
        pp->chunk_of_stage[k] = c;
        pp->chunks[c].stage = k;
        pp->chunks[c].whole_backward = !s->split_backward;
        st = stage_part(o, k, &pp->chunks[c].part);
    }
    /* a rank whose stages' parts failed must not leave the others in the collective split below */
    if (pp->model.tied_head && s->stage_rank[0] != s->stage_rank[s->n_stages - 1])
        st = hp_comm_agree(pp->comm, st, "pipeline: the stages' layer ranges");
    if (st == HP_STATUS_OK) { /* a tied head on another group than the embedding: their gradients summed */
        int first = s->stage_rank[0], last = s->stage_rank[s->n_stages - 1];
        bool in = pp->rank == first || pp->rank == last;
        pp->tied_exchange = pp->model.tied_head && first != last && in;
        if (pp->model.tied_head && first != last && pp->grp_pn[first] != pp->grp_pn[last])
            st = hp_error(HP_STATUS_UNSUPPORTED, "pipeline: a tied head on a group of model-parallel size %d and the "
                          "embedding on one of %d: the two copies must be split alike", pp->grp_pn[last], pp->grp_pn[first]);
        else if (pp->model.tied_head && first != last) /* collective over comm; one per model-parallel index */
            st = hp_comm_split(pp->comm, in ? 1 + pp->pi : 0, pp->me, &pp->tied_comm);
    }
    if (st == HP_STATUS_OK) st = hp__pp_plan_actions(pp);
    if (st == HP_STATUS_OK && o->offload && o->offload->device_budget > 0) st = offload_config(pp, o->offload);
    for (int c = 0; st == HP_STATUS_OK && c < pp->n_chunks; c++) st = build_stage(pp, &pp->chunks[c]);
    if (st == HP_STATUS_OK) st = hp__pp_build_optimizer(pp);
    /* every rank learns whether every rank built its stages: one whose build alone failed (its
     * offload budget, memory) must not leave the others waiting for its sends until the timeout */
    st = hp_comm_agree(pp->comm, st, "pipeline: building the stages");
    if (st != HP_STATUS_OK) {
        hp_pipeline_free(pp);
        return st;
    }
    *out = pp;
    return HP_STATUS_OK;
}

void hp_pipeline_free(hp_pipeline *pp) {
    if (!pp) return;
    hp__pp_post_free(pp);
    hp_store_closing(pp->store);
    for (int c = 0; c < pp->n_chunks; c++) {
        pp_chunk *ch = &pp->chunks[c];
        for (int s = 0; s < ch->n_slots && ch->slots; s++) {
            pp_slot *sl = &ch->slots[s];
            (void)hp__pp_reqs_wait(&sl->recv);
            (void)hp__pp_reqs_wait(&sl->send_f);
            (void)hp__pp_reqs_wait(&sl->send_b);
            free(sl->recv.r), free(sl->send_f.r), free(sl->send_b.r);
            free(sl->xin), free(sl->dyin);
            hp_program_free(sl->p);
            hp_offload_state_free(sl->ofl);
            if (sl->partition) {
                hp_partition_free(sl->partition); /* owns sl->g */
                hp_graph_free(sl->lg);
            } else if (sl->g != ch->g) {
                hp_graph_free(sl->g);
            }
        }
        free(ch->slots);
        if (ch->partition) {
            hp_partition_free(ch->partition); /* owns ch->g */
            hp_graph_free(ch->lg);
        } else {
            hp_graph_free(ch->g);
        }
    }
    hp_program_free(pp->norm_p);
    hp_program_free(pp->opt_p);
    hp_graph_free(pp->norm_g);
    if (pp->opt_part) {
        hp_partition_free(pp->opt_part); /* owns opt_g */
        hp_graph_free(pp->opt_lg);
    } else {
        hp_graph_free(pp->opt_g);
    }
    hp_store_free(pp->store);
    hp_strategy_free(pp->strategy); /* and its mesh, attached to group_comm */
    hp_comm_free(pp->group_comm);
    hp_comm_free(pp->stage_comm);
    hp_comm_free(pp->tied_comm);
    free(pp->grp_size);
    free(pp->grp_off);
    free(pp->grp_dp);
    free(pp->grp_pn);
    free(pp->grp_ranks);
    free(pp->grp_b0);
    free(pp->grp_bn);
    free(pp->chunks);
    free(pp->chunk_of_stage);
    free(pp->plan);
    free(pp->posted);
    free(pp);
}

hp_status hp_pipeline_init_params(hp_pipeline *pp, uint64_t seed) {
    HP_CHECK(hp__pp_post_idle(pp));
    for (int i = 0; i < hp_store_n_entries(pp->store); i++) {
        const char *name = hp_store_name(pp->store, i);
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(pp->store, name, &e));
        float *d = hp_store_data(pp->store, name);
        if (!d) return hp_error(HP_STATUS_INTERNAL, "pipeline: store entry '%s' has no data", name);
        int64_t n = hp_shape_numel(&e.local_shape);
        bool param = strncmp(name, "grad_acc.", 9) && strncmp(name, "exp_avg.", 8) && strncmp(name, "exp_avg_sq.", 11);
        if (param) { /* this rank's block of the whole-model values */
            int64_t start[HP_MAX_DIMS] = {0}, len[HP_MAX_DIMS];
            for (int k = 0; k < e.shape.ndim; k++) len[k] = e.shape.dim[k];
            if (pp->mesh)
                HP_CHECK(hp_layout_slice_of(&e.layout, pp->mesh, &e.shape, hp_mesh_my_index(pp->mesh), start, len));
            HP_CHECK(hp_gpt_init_block(&pp->model, name, seed, &e.shape, start, len, d));
        } else
            memset(d, 0, (size_t)n * sizeof *d);
        HP_CHECK(hp_store_touch(pp->store, name));
    }
    pp->step = 0;
    return HP_STATUS_OK;
}

hp_store *hp_pipeline_store(hp_pipeline *pp) { return pp->store; }

hp_mesh *hp_pipeline_mesh(hp_pipeline *pp) { return pp->mesh; }

hp_status hp_pipeline_set_trace(hp_pipeline *pp, hp_trace *tr) {
    if (tr) {
        HP_CHECK(hp_trace_track(tr, "compute", 0, &pp->trace_track));
        const char *names[9] = {"send F", "send B", "recv F", "recv B", "all_reduce loss", "all_reduce grad_sq",
                                "all_reduce grad", "post-validation copy", "post-validation restore"};
        for (int k = 0; k < 9; k++)
            if ((pp->trace_name[k] = hp_trace_intern(tr, names[k])) < 0)
                return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory for trace names");
    }
    for (int c = 0; c < pp->n_chunks; c++) /* the tags are set per action (pipeline_run.c) */
        for (int k = 0; k < pp->chunks[c].n_slots; k++) HP_CHECK(hp_program_set_trace(pp->chunks[c].slots[k].p, tr, NULL));
    hp_trace_tags opt = HP_TRACE_TAGS_NONE;
    opt.phase = HP_TRACE_PHASE_OPT;
    HP_CHECK(hp_program_set_trace(pp->norm_p, tr, &opt));
    HP_CHECK(hp_program_set_trace(pp->opt_p, tr, &opt));
    pp->trace = tr;
    return HP_STATUS_OK;
}

void hp_pipeline_set_step(hp_pipeline *pp, int64_t step) { pp->step = step; }

int hp_pipeline_n_chunks(const hp_pipeline *pp) { return pp->n_chunks; }

hp_status hp_pipeline_stage_info(const hp_pipeline *pp, int chunk, int *stage, hp_gpt_stage *info, int *n_slots) {
    if (chunk < 0 || chunk >= pp->n_chunks)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: chunk %d is outside [0, %d)", chunk, pp->n_chunks);
    const pp_chunk *c = &pp->chunks[chunk];
    if (stage) *stage = c->stage;
    if (info) *info = c->part;
    if (n_slots) *n_slots = c->n_slots;
    return HP_STATUS_OK;
}

const hp_partition *hp_pipeline_stage_partition(const hp_pipeline *pp, int chunk) {
    return chunk >= 0 && chunk < pp->n_chunks ? pp->chunks[chunk].partition : NULL;
}
