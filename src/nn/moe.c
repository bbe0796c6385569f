/* The Mixture-of-Experts layer on the IR (see hp/moe.h for the architecture and parameter names). */
#include "hp/moe.h"

#include "hp/ops.h"

#include <math.h>
#include <string.h>

hp_status hp_moe_config_check(const hp_moe_config *c, int layers) {
    if (c->experts == 0) return HP_STATUS_OK;
    if (c->experts < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.experts must be >= 1, got %d", c->experts);
    if (c->top_k < 1 || c->top_k > c->experts)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.top_k %d must be in [1, model.moe.experts %d]", c->top_k,
                        c->experts);
    if (c->expert_width < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.expert_width must be >= 1, got %d", c->expert_width);
    if (c->shared_experts < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.shared_experts must be >= 0, got %d", c->shared_experts);
    if (c->expert != HP_MOE_EXPERT_GELU && c->expert != HP_MOE_EXPERT_SWIGLU)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe expert kind %d is not gelu or swiglu", (int)c->expert);
    if (c->router != HP_MOE_ROUTER_SOFTMAX && c->router != HP_MOE_ROUTER_SIGMOID_BIAS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.router %d is not softmax or sigmoid_bias", (int)c->router);
    if (!(c->balance_loss >= 0.0f && c->balance_loss < INFINITY))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.balance_loss must be finite and >= 0, got %g",
                        (double)c->balance_loss);
    if (!(c->bias_update_rate > 0.0f && c->bias_update_rate < INFINITY))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.bias_update_rate must be finite and > 0, got %g",
                        (double)c->bias_update_rate);
    if (c->every < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.every must be >= 0, got %d", c->every);
    if (c->chunks < 0 || c->chunks > HP_MOE_MAX_CHUNKS) /* 0: 1 (a config made without HP_MOE_CONFIG_INIT) */
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.chunks must be in [1, %d], got %d", HP_MOE_MAX_CHUNKS,
                        c->chunks);
    if (c->every == 0) {
        if (c->n_layers < 1 || c->n_layers > HP_MOE_MAX_LAYERS)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.layers must list 1 to %d layers (or set every), got %d",
                            HP_MOE_MAX_LAYERS, c->n_layers);
        for (int i = 0; i < c->n_layers; i++) {
            if (c->layers[i] < 0 || c->layers[i] >= layers)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.layers[%d] = %d is outside [0, model.layers %d)", i,
                                c->layers[i], layers);
            for (int j = 0; j < i; j++)
                if (c->layers[j] == c->layers[i])
                    return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.moe.layers lists layer %d twice", c->layers[i]);
        }
    }
    return HP_STATUS_OK;
}

bool hp_moe_config_layer(const hp_moe_config *c, int l) {
    if (c->experts < 1) return false;
    if (c->every > 0) return l % c->every == c->every - 1;
    for (int i = 0; i < c->n_layers && i < HP_MOE_MAX_LAYERS; i++)
        if (c->layers[i] == l) return true;
    return false;
}

/* Weights of one expert MLP of width F on C: GELU fc + proj, SwiGLU gate + up + down. */
static int64_t expert_params(const hp_moe_config *c, int64_t C) {
    return (c->expert == HP_MOE_EXPERT_SWIGLU ? 3 : 2) * (int64_t)c->expert_width * C;
}

int64_t hp_moe_n_params(const hp_moe_config *c, int64_t C) {
    int64_t E = c->experts, S = c->shared_experts;
    return E * C + (c->router == HP_MOE_ROUTER_SIGMOID_BIAS ? E : 0) + (E + S) * expert_params(c, C);
}

int64_t hp_moe_active_params(const hp_moe_config *c, int64_t C) {
    int64_t E = c->experts, S = c->shared_experts, k = c->top_k;
    return E * C + (k + S) * expert_params(c, C);
}

/* A weight-only dense layer x (..., in) -> (..., out) named `name` in the current scope. */
static hp_tid dense(hp_graph *g, const char *name, hp_tid x, int64_t in, int64_t out) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(out, in));
    hp_graph_pop_scope(g);
    return hp_linear(g, x, w, HP_TID_NONE);
}

/* The stacked expert weights: GELU fc (E, F, C) and proj (E, C, F), or SwiGLU gate_proj and
 * up_proj (E, F, C) and down_proj (E, C, F), in the current scope. */
typedef struct expert_weights {
    hp_tid w[3];
} expert_weights;

static expert_weights declare_experts(hp_graph *g, const hp_moe_config *c, int64_t C) {
    const int64_t E = c->experts, F = c->expert_width;
    expert_weights ew = {{HP_TID_NONE, HP_TID_NONE, HP_TID_NONE}};
    if (c->expert == HP_MOE_EXPERT_SWIGLU) {
        ew.w[0] = hp_param(g, "gate_proj.weight", HP_SHAPE(E, F, C));
        ew.w[1] = hp_param(g, "up_proj.weight", HP_SHAPE(E, F, C));
        ew.w[2] = hp_param(g, "down_proj.weight", HP_SHAPE(E, C, F));
    } else {
        ew.w[0] = hp_param(g, "fc.weight", HP_SHAPE(E, F, C));
        ew.w[2] = hp_param(g, "proj.weight", HP_SHAPE(E, C, F));
    }
    return ew;
}

/* The experts on rows xd (R, C) grouped by `counts`: (R, C). */
static hp_tid run_experts(hp_graph *g, const hp_moe_config *c, const expert_weights *ew, hp_tid xd, hp_tid counts) {
    hp_tid h = c->expert == HP_MOE_EXPERT_SWIGLU
                   ? hp_swiglu(g, hp_moe_gemm(g, xd, ew->w[0], counts, true), hp_moe_gemm(g, xd, ew->w[1], counts, true))
                   : hp_gelu(g, hp_moe_gemm(g, xd, ew->w[0], counts, true)); /* (R, F) */
    return hp_moe_gemm(g, h, ew->w[2], counts, true);
}

/* The rows of the (lead, T, W) view of t (N, W) for positions [t0, t0 + tc): (lead * tc, W). */
static hp_tid chunk_rows(hp_graph *g, hp_tid t, int64_t lead, int64_t T, int64_t t0, int64_t tc) {
    int64_t W = hp_graph_tensor(g, t)->shape.dim[1];
    hp_tid v = hp_slice(g, hp_reshape(g, t, HP_SHAPE(lead, T, W)), 1, t0, tc);
    return hp_reshape(g, v, HP_SHAPE(lead * tc, W));
}

/*
 * The experts over c chunks of positions (hp_moe_config.chunks): every chunk's dispatch first (so an
 * expert-parallel all-to-all-v of chunk i+1 can run while the experts compute chunk i), then each
 * chunk's GEMMs and combine, the outputs concatenated back. counts[i] receives chunk i's counts.
 */
static hp_status chunk_experts(hp_graph *g, hp_tid x2, const hp_shape *xs, const hp_moe_config *c, hp_moe_layer *out,
                               hp_tid *counts) {
    const int nc = c->chunks;
    const int64_t C = xs->dim[xs->ndim - 1];
    const int64_t T = xs->ndim >= 3 ? xs->dim[xs->ndim - 2] : 0;
    if (T < 1 || T % nc)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe layer: chunks %d must divide the positions (the dim before "
                        "the channels) of x %s", nc, hp_shape_str(xs, (char[96]){0}, 96));
    const int64_t lead = hp_shape_numel(xs) / (T * C), tc = T / nc;
    hp_tid xd[HP_MOE_MAX_CHUNKS], pos[HP_MOE_MAX_CHUNKS], gates[HP_MOE_MAX_CHUNKS], y[HP_MOE_MAX_CHUNKS];
    for (int i = 0; i < nc; i++) { /* all the dispatches first */
        hp_tid xi = chunk_rows(g, x2, lead, T, i * tc, tc), ii = chunk_rows(g, out->idx, lead, T, i * tc, tc);
        gates[i] = chunk_rows(g, out->gates, lead, T, i * tc, tc);
        xd[i] = hp_moe_dispatch(g, xi, ii, c->experts);
        HP_CHECK(hp_graph_status(g));
        const hp_node *dn = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
        counts[i] = dn->out[1];
        pos[i] = dn->out[2];
    }
    out->counts = counts[0];
    const expert_weights ew = declare_experts(g, c, C);
    for (int i = 0; i < nc; i++) {
        hp_tid ys = run_experts(g, c, &ew, xd[i], counts[i]);
        y[i] = hp_reshape(g, hp_moe_combine(g, ys, pos[i], gates[i]), HP_SHAPE(lead, tc, C));
    }
    out->y = hp_reshape(g, hp_concat(g, y, nc, 1), HP_SHAPE(lead * T, C));
    return hp_graph_status(g);
}

hp_status hp_moe_build(hp_graph *g, hp_tid x, const hp_moe_config *c, const char *prefix, hp_moe_layer *out) {
    HP_CHECK(hp_graph_status(g));
    memset(out, 0, sizeof *out);
    out->y = out->aux_loss = out->counts = out->gates = out->idx = HP_TID_NONE;
    if (c->experts < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe layer: experts must be >= 1, got %d", c->experts);
    HP_CHECK(hp_moe_config_check(c, 1 << 30)); /* the layer list is the model's to check */
    const hp_tensor *xt = hp_graph_tensor(g, x);
    if (xt->dtype != HP_DTYPE_F32 || xt->shape.ndim < 2)
        return hp_error(HP_STATUS_SHAPE, "moe layer: x must be f32 (..., C) with at least 2 dims, is %s %s",
                        hp_dtype_name(xt->dtype), hp_shape_str(&xt->shape, (char[96]){0}, 96));
    const hp_shape xs = xt->shape;
    const int64_t C = xs.dim[xs.ndim - 1], N = hp_shape_numel(&xs) / (C ? C : 1);
    const int64_t E = c->experts, F = c->expert_width, S = c->shared_experts;
    bool scoped = prefix && *prefix;
    if (scoped) hp_graph_push_scope(g, prefix);
    hp_tid x2 = xs.ndim == 2 ? x : hp_reshape(g, x, HP_SHAPE(N, C));

    hp_graph_push_scope(g, "router");
    hp_tid wr = hp_param(g, "weight", HP_SHAPE(E, C));
    hp_tid bias = HP_TID_NONE;
    if (c->router == HP_MOE_ROUTER_SIGMOID_BIAS) {
        bias = hp_param(g, "bias", HP_SHAPE(E));
        if (bias != HP_TID_NONE) hp_graph_tensor(g, bias)->no_weight_decay = true;
    }
    hp_tid logits = hp_linear(g, x2, wr, HP_TID_NONE); /* (N, E) */
    out->gates = hp_moe_route(g, logits, bias, c->top_k, c->router);
    hp_graph_pop_scope(g);
    if (hp_graph_status(g) != HP_STATUS_OK) goto done;
    const hp_node *rn = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    out->idx = rn->out[1];
    hp_tid probs = rn->out[2];

    hp_graph_push_scope(g, "experts");
    hp_tid counts[HP_MOE_MAX_CHUNKS] = {HP_TID_NONE};
    const int nc = c->chunks > 1 ? c->chunks : 1;
    if (nc == 1) {
        hp_tid xd = hp_moe_dispatch(g, x2, out->idx, (int)E); /* (N*k, C), grouped by expert */
        const expert_weights ew = declare_experts(g, c, C);
        if (hp_graph_status(g) == HP_STATUS_OK) {
            const hp_node *dn = hp_graph_node(g, hp_graph_tensor(g, xd)->producer);
            counts[0] = out->counts = dn->out[1];
            hp_tid pos = dn->out[2];
            hp_tid ys = run_experts(g, c, &ew, xd, out->counts); /* (N*k, C) */
            out->y = hp_moe_combine(g, ys, pos, out->gates);    /* (N, C) */
        }
    } else {
        hp_status cst = chunk_experts(g, x2, &xs, c, out, counts);
        if (cst != HP_STATUS_OK) {
            hp_graph_pop_scope(g);
            if (scoped) hp_graph_pop_scope(g);
            return cst;
        }
    }
    hp_graph_pop_scope(g);
    if (S > 0) {
        hp_graph_push_scope(g, "shared");
        hp_tid sy;
        if (c->expert == HP_MOE_EXPERT_SWIGLU)
            sy = dense(g, "down_proj", hp_swiglu(g, dense(g, "gate_proj", x2, C, S * F), dense(g, "up_proj", x2, C, S * F)),
                       S * F, C);
        else
            sy = dense(g, "proj", hp_gelu(g, dense(g, "fc", x2, C, S * F)), S * F, C);
        out->y = hp_add(g, out->y, sy);
        hp_graph_pop_scope(g);
    }
    if (c->training && c->balance_loss > 0.0f) /* linear in the counts: the chunks' losses add up */
        for (int i = 0; i < nc; i++) {
            hp_tid l = hp_moe_balance_loss(g, probs, counts[i], c->top_k);
            out->aux_loss = i ? hp_add(g, out->aux_loss, l) : l;
        }
    if (c->training && bias != HP_TID_NONE) hp_moe_bias_update_n(g, bias, counts, nc, c->bias_update_rate);
    if (xs.ndim != 2) out->y = hp_reshape(g, out->y, xs);
done:
    if (scoped) hp_graph_pop_scope(g);
    return hp_graph_status(g);
}
