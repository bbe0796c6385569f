/*
 * The predicted step of a pipeline (hp/pipeline_plan.h, hp_pipeline_predict): per-stage F, B and W
 * from the stage graphs, the schedule simulated with them and the point-to-point time, then the
 * optimizer's programs as hp_pipeline_new builds them.
 */
#include "mpmd/pipeline_plan_internal.h"

#include "hp/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hp_pipeline_prediction_free(hp_pipeline_prediction *p) {
    if (!p) return;
    free(p->f), free(p->b), free(p->w), free(p->activation_bytes), free(p->state_bytes), free(p->slots);
    free(p->offload), free(p->rank_slots);
    free(p->rank_bytes), free(p->optimizer_seconds);
    hp_sched_timeline_free(&p->tl);
    memset(p, 0, sizeof *p);
}

/* Adds the parameters of `part` to `og` (update) and `ng` (norm) as build_optimizer does, each name
 * once; *bytes gets the bytes added. */
static hp_status add_params(const hp_pipeline_plan_opts *o, const hp_gpt_stage *part, hp_graph *ng, hp_graph *og,
                            hp_tid lr, hp_tid step, hp_tid scale, hp_tid *acc, int *n_acc, int cap, double *bytes) {
    hp_graph *g = hp_graph_new();
    if (!g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline plan: a graph");
    hp_gpt gpt;
    hp_status st = hp_gpt_build_stage(g, o->model, part, 1, 1, part->head, &gpt);
    int np = st == HP_STATUS_OK ? hp_graph_params(g, NULL, 0) : 0;
    hp_tid *ids = np > 0 ? malloc(sizeof *ids * (size_t)np) : NULL;
    if (np > 0 && !ids) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline plan: %d parameters", np);
    if (ids) hp_graph_params(g, ids, np);
    hp_adamw_params ap = HP_ADAMW_PARAMS_DEFAULT;
    for (int i = 0; st == HP_STATUS_OK && i < np; i++) {
        const hp_tensor *pt = hp_graph_tensor(g, ids[i]);
        if (hp_graph_find(og, pt->name) != HP_TID_NONE) continue; /* another chunk's copy */
        if (*n_acc >= cap) break;
        char name[600];
        snprintf(name, sizeof name, "grad_acc.%s", pt->name);
        hp_tid sq = hp_leaf(ng, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        hp_tid a = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        hp_tid param = hp_leaf(og, pt->name, HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, pt->shape);
        snprintf(name, sizeof name, "exp_avg.%s", pt->name);
        hp_tid m = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        snprintf(name, sizeof name, "exp_avg_sq.%s", pt->name);
        hp_tid v = hp_leaf(og, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, pt->shape);
        st = hp_adamw(og, param, a, m, v, lr, step, scale, &ap);
        acc[(*n_acc)++] = a;
        acc[cap + *n_acc - 1] = sq; /* the norm graph's copy, after the update graph's */
        *bytes += (double)hp_shape_numel(&pt->shape) * (double)hp_dtype_size(pt->dtype);
    }
    free(ids);
    hp_graph_free(g);
    return st;
}

/* Rank r's optimizer: the norm program, the gradient all-reduce over its dp replicas, the update. */
static hp_status optimizer_seconds(const hp_pipeline_plan_opts *o, const int *first, int r, double *out) {
    const hp_schedule *s = o->schedule;
    int n = s->n_stages, L = o->model->layers, cap = 4096;
    hp_graph *ng = hp_graph_new(), *og = hp_graph_new();
    hp_tid *acc = malloc(sizeof *acc * 2 * (size_t)cap);
    hp_status st = ng && og && acc ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline plan: the optimizer");
    double bytes = 0;
    int n_acc = 0;
    if (st == HP_STATUS_OK) {
        hp_tid lr = hp_input(og, "opt.lr", HP_DTYPE_F32, HP_SHAPE_SCALAR);
        hp_tid step = hp_input(og, "opt.step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
        hp_tid gsq = hp_input(og, "opt.grad_sq", HP_DTYPE_F32, HP_SHAPE_SCALAR);
        double clip = o->optim ? o->optim->grad_clip : 1.0;
        hp_tid scale = clip > 0 ? hp_clip_scale(og, gsq, (float)clip) : HP_TID_NONE;
        hp_graph_set_node_flags(og, HP_NODE_FLAG_OPTIMIZER);
        for (int k = 0; st == HP_STATUS_OK && k < n; k++) {
            if (s->stage_rank[k] != r) continue;
            hp_gpt_stage part = {first[k], k + 1 < n ? first[k + 1] : L, k == 0, k == n - 1};
            st = add_params(o, &part, ng, og, lr, step, scale, acc, &n_acc, cap, &bytes);
        }
        for (int i = 0; st == HP_STATUS_OK && i < n_acc; i++) {
            hp_tid in[2] = {acc[i], hp_fill(og, hp_graph_tensor(og, acc[i])->shape, 0.0f)};
            hp_graph_add_node(og, HP_OP_ASSIGN, in, 2, NULL);
            st = hp_graph_status(og);
        }
        hp_graph_set_node_flags(og, 0);
        hp_tid total = n_acc ? HP_TID_NONE : hp_fill(ng, HP_SHAPE_SCALAR, 0.0f);
        for (int i = 0; st == HP_STATUS_OK && i < n_acc; i++) {
            hp_tid one = hp_sumsq(ng, &acc[cap + i], 1);
            total = total == HP_TID_NONE ? one : hp_add(ng, total, one);
        }
        if (st == HP_STATUS_OK) st = hp_graph_status(ng);
        if (st == HP_STATUS_OK) st = hp_graph_status(og);
    }
    hp_step_prediction pn, pu;
    if (st == HP_STATUS_OK) st = hp_predict_nodes(ng, NULL, 0, hp_graph_n_nodes(ng), o->mm, &pn);
    if (st == HP_STATUS_OK) st = hp_predict_nodes(og, NULL, 0, hp_graph_n_nodes(og), o->mm, &pu);
    if (st == HP_STATUS_OK) {
        int dp = o->dp ? o->dp[r] : 1, tp = o->tp ? o->tp[r] : 1;
        double ar = 0;
        if (dp > 1) { /* one all-reduce per accumulator over the group's replicas */
            hp_xfer x = {.kind = HP_XFER_ALL_REDUCE, .group = dp, .bytes = bytes / tp / n_acc};
            ar = n_acc * hp_xfer_seconds(o->mm, &x);
        }
        int zero = o->zero ? o->zero[r] : 1;
        *out = pn.total_s / tp + pu.total_s / (tp * zero) + ar;
    }
    free(acc);
    hp_graph_free(ng), hp_graph_free(og);
    return st;
}

hp_status hp_pipeline_predict(const hp_pipeline_plan_opts *o, const int *first, hp_pipeline_prediction *out) {
    memset(out, 0, sizeof *out);
    const hp_schedule *s = o->schedule;
    int n = s->n_stages, p = s->p, L = o->model->layers;
    out->n_stages = n, out->p = p, out->calibrated = o->mm->cal != NULL;
    out->f = calloc((size_t)n, sizeof *out->f), out->b = calloc((size_t)n, sizeof *out->b);
    out->w = calloc((size_t)n, sizeof *out->w);
    out->activation_bytes = calloc((size_t)n, sizeof *out->activation_bytes);
    out->state_bytes = calloc((size_t)n, sizeof *out->state_bytes);
    out->slots = calloc((size_t)n, sizeof *out->slots);
    out->rank_bytes = calloc((size_t)p, sizeof *out->rank_bytes);
    out->rank_slots = calloc((size_t)p, sizeof *out->rank_slots);
    out->optimizer_seconds = calloc((size_t)p, sizeof *out->optimizer_seconds);
    if (!out->f || !out->b || !out->w || !out->activation_bytes || !out->state_bytes || !out->slots || !out->rank_bytes ||
        !out->rank_slots || !out->optimizer_seconds)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline plan: %d stages", n);
    HP_CHECK(hp_pipeline_stage_slots(s, out->slots));
    double act_max = 0;
    for (int k = 0; k < n; k++) {
        int r = s->stage_rank[k];
        int dp = o->dp ? o->dp[r] : 1;
        int share = (o->rows + dp - 1) / dp;
        hp_gpt_stage part = {first[k], k + 1 < n ? first[k + 1] : L, k == 0, k == n - 1};
        pp_stage_cost sc; /* a partitioned group's per-process graph, its collectives counted */
        HP_CHECK(hp__pp_stage_cost(o, r, &part, &sc));
        out->f[k] = sc.plan.f_seconds, out->b[k] = sc.plan.b_seconds, out->w[k] = sc.plan.w_seconds;
        size_t act = sc.act;
        out->activation_bytes[k] = act;
        out->state_bytes[k] = sc.state;
        out->rank_bytes[r] += (double)out->state_bytes[k] + (double)out->slots[k] * (double)act;
        if (k == n - 1 && k > 0 && o->model->tied_head && s->stage_rank[0] == r) /* V schedules: one copy */
            out->rank_bytes[r] -= (double)sc.embedding_state;
        out->rank_slots[r] += out->slots[k];
        double a = (double)share * o->seq * o->model->width * 4.0; /* one micro-batch's hidden state, f32 */
        if (a > act_max) act_max = a;
    }
    if (o->offload) { /* each stage's activations under its rank's budget, split over the rank's slots */
        out->offload = calloc((size_t)n, sizeof *out->offload);
        if (!out->offload) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline plan: %d stages", n);
        for (int k = 0; k < n; k++) {
            int r = s->stage_rank[k], slots = out->rank_slots[r], dp = o->dp ? o->dp[r] : 1, tp = o->tp ? o->tp[r] : 1;
            hp_gpt_stage part = {first[k], k + 1 < n ? first[k + 1] : L, k == 0, k == n - 1};
            const hp_strategy_config *gs = tp > 1 && o->strategy ? &o->strategy[r] : NULL; /* partitioned: one process's */
            hp_status st = hp_pipeline_plan_stage_offload_group(o->model, &part, (o->rows + dp - 1) / dp, o->seq, s->m,
                                                                s->split_backward, &o->offload_cfg, slots, gs, dp * tp,
                                                                &out->offload[k]);
            if (st != HP_STATUS_OK)
                return hp_error_prefix(st, "pipeline plan: stage %d (rank %d, %d micro-batch%s in flight) cannot run "
                                       "under its offload budget: ", k, r, slots, slots == 1 ? "" : "es");
            out->b[k] += out->offload[k].stall_s; /* the prefetches wait in the backward */
            /* the rank's memory: each slot's activations less what the plan moved out of the device */
            const hp_offload_plan_stats *os = &out->offload[k];
            double moved = os->peak_before > os->peak_after ? (double)(os->peak_before - os->peak_after) : 0.0;
            out->rank_bytes[r] -= (double)out->slots[k] * fmin(moved, (double)out->activation_bytes[k]);
        }
    }
    hp_xfer x = {.kind = HP_XFER_SEND_RECV, .group = 2, .bytes = act_max};
    out->p2p_seconds = p > 1 ? hp_xfer_seconds(o->mm, &x) : 0;
    hp_sched_costs costs = HP_SCHED_COSTS_INIT;
    costs.f_stage = out->f, costs.b_stage = out->b, costs.w_stage = out->w;
    costs.p2p_latency = out->p2p_seconds;
    HP_CHECK(hp_schedule_simulate(s, &costs, &out->tl));
    out->schedule_seconds = out->tl.step_time;
    double opt = 0;
    for (int r = 0; r < p; r++) {
        HP_CHECK(optimizer_seconds(o, first, r, &out->optimizer_seconds[r]));
        if (out->optimizer_seconds[r] > opt) opt = out->optimizer_seconds[r];
    }
    int world = o->world;
    if (world <= 0)
        for (int r = 0; r < p; r++) world += (o->dp ? o->dp[r] : 1) * (o->tp ? o->tp[r] : 1);
    hp_xfer small = {.kind = HP_XFER_ALL_REDUCE, .group = world, .bytes = 4};
    out->reduce_seconds = world > 1 ? 2 * hp_xfer_seconds(o->mm, &small) : 0;
    out->step_seconds = out->schedule_seconds + opt + out->reduce_seconds;
    return HP_STATUS_OK;
}
