/*
 * The compile driver's "autodiff" pass: the training step as one graph (autodiff, global-norm
 * clipping, AdamW appended to a forward graph).
 */
#include "hp/compile.h"
#include "hp/ops.h"

#include <math.h>
#include <stdio.h>

hp_status hp_train_step_build(hp_graph *g, hp_tid loss, const hp_optim_config *o, hp_train_step *out) {
    HP_CHECK(hp_graph_status(g));
    hp_arena *a = hp_graph_arena(g);
    int n = hp_graph_params(g, NULL, 0);
    out->loss = loss;
    out->n_params = n;
    out->params = hp_arena_alloc(a, sizeof(hp_tid) * (size_t)(n ? n : 1), 8);
    out->grads = hp_arena_alloc(a, sizeof(hp_tid) * (size_t)(n ? n : 1), 8);
    out->m = hp_arena_alloc(a, sizeof(hp_tid) * (size_t)(n ? n : 1), 8);
    out->v = hp_arena_alloc(a, sizeof(hp_tid) * (size_t)(n ? n : 1), 8);
    if (!out->params || !out->grads || !out->m || !out->v)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "train step: out of memory for %d parameters", n);
    hp_graph_params(g, out->params, n);
    HP_CHECK(hp_autodiff(g, loss, out->params, n, out->grads));
    for (int i = 0; i < n; i++)
        if (out->grads[i] == HP_TID_NONE)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "parameter '%s' does not influence the loss",
                            hp_graph_tensor(g, out->params[i])->name);

    hp_graph_set_node_flags(g, HP_NODE_FLAG_OPTIMIZER);
    out->lr = hp_input(g, "opt.lr", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    /* The forward pass may read the step already (GPT's dropout masks are keyed by it): one input. */
    out->step = hp_graph_find(g, "opt.step");
    if (out->step == HP_TID_NONE) {
        out->step = hp_input(g, "opt.step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    } else {
        const hp_tensor *st = hp_graph_tensor(g, out->step);
        if (st->kind != HP_TENSOR_KIND_INPUT || st->dtype != HP_DTYPE_F32 || hp_shape_numel(&st->shape) != 1) {
            hp_graph_set_node_flags(g, 0);
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "train step: 'opt.step' exists but is not an f32 scalar input");
        }
    }
    /* Global norm: one sum of squares per gradient (each may be split its own way under a
     * strategy, and its partial sum is then exact), then a chain of scalar adds. */
    hp_tid total = HP_TID_NONE;
    for (int i = 0; i < n; i++) {
        hp_tid sq = hp_sumsq(g, out->grads + i, 1);
        total = total == HP_TID_NONE ? sq : hp_add(g, total, sq);
    }
    out->grad_sq = total;
    if (total != HP_TID_NONE) hp_graph_set_name(g, total, "opt.grad_sq");
    /* The step's guard and clipping factor: NaN when the loss or the gradient norm is not finite,
     * which makes every AdamW update skip (the step changes nothing); without clipping it is 1. */
    hp_tid scale = total == HP_TID_NONE ? HP_TID_NONE
                   : hp_clip_scale_guarded(g, total, loss, o->grad_clip > 0 ? (float)o->grad_clip : INFINITY);
    for (int i = 0; i < n; i++) {
        const hp_tensor *p = hp_graph_tensor(g, out->params[i]);
        char name[600];
        snprintf(name, sizeof name, "exp_avg.%s", p->name);
        out->m[i] = hp_leaf(g, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, p->shape);
        p = hp_graph_tensor(g, out->params[i]);
        snprintf(name, sizeof name, "exp_avg_sq.%s", p->name);
        out->v[i] = hp_leaf(g, name, HP_TENSOR_KIND_OPT_STATE, HP_DTYPE_F32, p->shape);
        p = hp_graph_tensor(g, out->params[i]);
        hp_adamw_params ap = {.beta1 = (float)o->beta1, .beta2 = (float)o->beta2, .eps = (float)o->eps,
                              .weight_decay = p->no_weight_decay ? 0.0f : (float)o->weight_decay};
        hp_status st = hp_adamw(g, out->params[i], out->grads[i], out->m[i], out->v[i], out->lr, out->step, scale, &ap);
        if (st != HP_STATUS_OK) break;
    }
    hp_graph_set_node_flags(g, 0);
    return hp_graph_status(g);
}
