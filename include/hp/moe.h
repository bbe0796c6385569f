/*
 * hp/moe.h — Mixture-of-Experts layers: the router, dispatch, grouped GEMM, combine and balancing
 * operators, and the layer built from them, in single-device terms.
 *
 * A MoE layer replaces a transformer block's MLP (Shazeer et al. 2017; GShard, Lepikhin et al.
 * 2020; Switch, Fedus et al. 2021; Mixtral; DeepSeek-V3). For x (B, T, C) with N = B*T tokens:
 *
 *     logits = x W_r^T                                  (N, E)    LINEAR
 *     gates, idx, probs = route(logits [, bias])         (N, k)    MOE_ROUTE: top-k experts per token
 *     xs, counts, pos = dispatch(x, idx)                 (N*k, C)  MOE_DISPATCH: rows grouped by expert
 *     h  = gelu(grouped_gemm(xs, W_fc, counts))          (N*k, F)  MOE_GEMM: rows of expert e times W_fc[e]^T
 *     ys = grouped_gemm(h, W_proj, counts)               (N*k, C)
 *     y  = combine(ys, pos, gates) [+ shared MLP(x)]     (N, C)    MOE_COMBINE: un-permute, weight, sum
 *
 * Routing is dropless: every token reaches its k experts and counts (tokens per expert) change from
 * step to step; the tensor shapes do not (N*k rows in all), only how the rows split among experts.
 *
 *     hp_moe_config mc = HP_MOE_CONFIG_INIT;
 *     mc.experts = 8; mc.top_k = 2; mc.expert_width = 256;
 *     hp_moe_layer ml;
 *     hp_moe_build(g, h, &mc, "mlp", &ml);     // ml.y (B, T, C); ml.aux_loss scalar or HP_TID_NONE
 *
 * Parameter names, under the current scope joined with `prefix`:
 *   router.weight (E, C)            router.bias (E)        (sigmoid_bias only; not trained, see below)
 *   experts.fc.weight (E, F, C)     experts.proj.weight (E, C, F)
 *   shared.fc.weight (S*F, C)       shared.proj.weight (C, S*F)      (S = shared_experts > 0 only)
 * with GELU experts (expert = HP_MOE_EXPERT_GELU: fc, gelu, proj, the GPT family's MLP), or with
 * SwiGLU experts (HP_MOE_EXPERT_SWIGLU, the Llama family's MLP: down(silu(gate x) * up x); Mixtral,
 * Qwen-MoE, DeepSeek-V3):
 *   experts.gate_proj.weight (E, F, C)   experts.up_proj.weight (E, F, C)   experts.down_proj.weight (E, C, F)
 *   shared.gate_proj.weight (S*F, C)     shared.up_proj.weight (S*F, C)     shared.down_proj.weight (C, S*F)
 * The experts of expert e are stacked on dim 0 (one tensor per kind, so the experts dim can carry a
 * layout), where Hugging Face's Mixtral/Qwen-MoE files keep one tensor per expert. The experts have
 * no biases (as Mixtral, Qwen-MoE and DeepSeek-V3). The model family picks the expert kind: gpt2
 * GELU, llama SwiGLU.
 *
 * Sharding rules (data parallelism): tokens may be split over any mesh axes (the rows of x); the
 * router, dispatch, grouped GEMMs and combine then run per rank on the rank's tokens. Dispatch's
 * outputs under such a split are the per-rank grouping (the global xs is the concatenation of the
 * ranks' expert-sorted blocks, an equally valid permutation), and counts is a pending sum over the
 * token axes (each rank's addend is its own tokens' loads): the grouped GEMMs use it as it is, the
 * balance loss and the bias update resolve it (an all-reduce) to the global loads. Expert weights
 * are replicated; their gradients are pending sums over the token axes.
 *
 * Expert parallelism (docs/design.md, "Expert parallelism as a layout"): when the expert weights'
 * experts dim is split over a mesh axis ep that also splits the tokens (the last of their axes),
 * the grouped GEMMs ask for their rows ragged over ep (hp_layout.ragged: each rank the rows of its
 * experts from every rank of its ep group, expert-major) and the partitioner moves them by an
 * all-to-all-v whose counts are exchanged at run time (RAGGED_ALL_TO_ALLV, hp/redistribute.h);
 * combine's rule brings them back the same way. The GEMMs' counts are then each local expert's rows
 * (split over ep like the experts), the weight gradients stay on their ranks, pending only over the
 * other token axes. Experts split over an axis that does not split the tokens are gathered.
 */
#ifndef HP_MOE_H
#define HP_MOE_H

#include "hp/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the router scores and selects experts. */
typedef enum hp_moe_router {
    /* probs = softmax(logits); the top-k probs, renormalised to sum to 1, are the gates (Mixtral,
     * Qwen-MoE). */
    HP_MOE_ROUTER_SOFTMAX = 0,
    /* DeepSeek-V3 (Liu et al. 2024, sec. 2.1.2): scores s = sigmoid(logits); experts are selected
     * by the top-k of s + bias, where bias (E) is used for selection only; the gates are the
     * selected s, renormalised. The bias is not trained: after each training forward pass it moves
     * toward balance, bias_e += u * sign(mean_load - load_e), with load_e the tokens routed to
     * expert e in the step (all ranks) and u = bias_update_rate ("auxiliary-loss-free balancing"). */
    HP_MOE_ROUTER_SIGMOID_BIAS = 1,
} hp_moe_router;

/* The expert MLP (and the shared experts'). */
typedef enum hp_moe_expert {
    HP_MOE_EXPERT_GELU = 0,   /* proj(gelu_tanh(fc x)): GPT-2's MLP */
    HP_MOE_EXPERT_SWIGLU = 1, /* down(silu(gate x) * up x): Llama's MLP (Shazeer 2020, "GLU Variants") */
} hp_moe_expert;

#define HP_MOE_MAX_LAYERS 64 /* entries of an explicit layer list */
#define HP_MOE_MAX_CHUNKS 7  /* hp_moe_config.chunks (a CONCAT and a bias update take them all) */

typedef struct hp_moe_config {
    int experts;        /* E >= 1; 0: no MoE layer anywhere (the model's dense MLP) */
    int top_k;          /* k in [1, E] */
    int expert_width;   /* F >= 1: each expert's hidden width */
    int shared_experts; /* S >= 0: a dense MLP of width S*F every token passes through, added */
    hp_moe_router router;
    hp_moe_expert expert; /* the experts' MLP; set from the model family (gpt2: GELU, llama: SwiGLU) */
    float balance_loss; /* >= 0: coefficient of the Switch/GShard balancing loss added to the
                         * model loss in training graphs (0: none) */
    float bias_update_rate; /* u > 0 of the sigmoid_bias router (DeepSeek-V3 uses 1e-3) */
    int every;          /* > 0: layers l with l % every == every - 1 are MoE; 0: use `layers` */
    int n_layers;       /* with every == 0: the MoE layers are layers[0..n_layers) */
    int layers[HP_MOE_MAX_LAYERS];
    /* Set only for a training graph (like GPT's dropout): the balancing loss joins the model loss
     * and the sigmoid_bias router's bias is updated. Evaluation and generation build without. */
    bool training;
    /* c >= 1: the tokens' positions (the second-to-last dim of x) are cut into c chunks, each with
     * its own dispatch, expert GEMMs and combine; every chunk is dispatched before any expert runs,
     * so under expert parallelism chunk i+1's all-to-all-v runs while the experts compute chunk i
     * (and chunk i's combine while chunk i+1 computes). Same values as c = 1 (each token is routed
     * once, over all of them). x needs >= 3 dims and that dim divisible by c; 1..HP_MOE_MAX_CHUNKS. */
    int chunks;
} hp_moe_config;

#define HP_MOE_CONFIG_INIT                                                                         \
    ((hp_moe_config){.experts = 0, .top_k = 2, .expert_width = 0, .shared_experts = 0,             \
                     .router = HP_MOE_ROUTER_SOFTMAX, .expert = HP_MOE_EXPERT_GELU,                 \
                     .balance_loss = 0.0f, .bias_update_rate = 1e-3f, .every = 1, .n_layers = 0,    \
                     .training = false, .chunks = 1})

/* "softmax", "sigmoid_bias" ("?" otherwise). */
const char *hp_moe_router_name(hp_moe_router r);

/* Checks the values against a model of `layers` layers and width C (layers, C > 0):
 * HP_STATUS_INVALID_ARGUMENT naming the bad value (top_k larger than the experts, a layer index
 * outside [0, layers), ...). A config with experts == 0 is valid (MoE off). */
hp_status hp_moe_config_check(const hp_moe_config *c, int layers);

/* Whether layer `l` is a MoE layer. */
bool hp_moe_config_layer(const hp_moe_config *c, int l);

/* The tensors of one built MoE layer. */
typedef struct hp_moe_layer {
    hp_tid y;        /* (..., C), the shape of x */
    hp_tid aux_loss; /* scalar balancing loss E sum_e f_e P_e (unscaled), or HP_TID_NONE when
                      * c->balance_loss is 0 or the graph is not a training graph */
    hp_tid counts;   /* (E) i32 tokens per expert of this step (a pending sum under data parallelism) */
    hp_tid gates, idx; /* (N, k) f32 gates and i32 expert ids */
} hp_moe_layer;

/*
 * Appends a MoE layer on x (..., C) (at least 2 dims; all leading dims are tokens). `prefix` is a
 * scope pushed around the layer's parameters (NULL or "": the current scope). Errors: the config
 * check's, the graph's sticky error.
 */
hp_status hp_moe_build(hp_graph *g, hp_tid x, const hp_moe_config *c, const char *prefix, hp_moe_layer *out);

/* Parameters of one MoE layer of width C (elements): all of them / those one token uses (the router,
 * k experts and the shared experts); a GELU expert has 2 F C weights, a SwiGLU expert 3 F C. */
int64_t hp_moe_n_params(const hp_moe_config *c, int64_t C);
int64_t hp_moe_active_params(const hp_moe_config *c, int64_t C);

/* ---------------------------------------------------------------- operators (src/ops/moe_*.c) */

/*
 * MOE_ROUTE: logits (N, E) f32 [, bias (E) f32, sigmoid_bias only] -> gates (N, k) f32,
 * idx (N, k) i32, probs (N, E) f32. Per token the k selected experts in decreasing order of score
 * (ties: lower expert id first); see hp_moe_router for the scores and gates. probs is softmax(logits)
 * (softmax router) or s / sum_e s (sigmoid_bias), the P_e of the balancing loss. Gradients reach
 * the logits through the gates and probs (MOE_ROUTE_BACKWARD recomputes from the logits and idx);
 * the bias gets a zero gradient (it is updated by hp_moe_bias_update, not by the optimizer).
 * Returns gates; idx and probs are the node's outputs 1 and 2 (hp_graph_node(g, n-1)->out).
 * Errors (sticky): k outside [1, E], a bias with the softmax router or none with sigmoid_bias.
 */
hp_tid hp_moe_route(hp_graph *g, hp_tid logits, hp_tid bias, int k, hp_moe_router router);

/*
 * MOE_BIAS_UPDATE, in place: bias (E) += rate * sign(mean(counts) - counts), counts (E) i32 (the
 * global loads: its sharding rule resolves a pending sum). No output, no gradient; HP_NODE_FLAG_INPLACE.
 * hp_moe_bias_update_n: the loads are the sum of n (1..7) counts tensors (a chunked layer's).
 */
hp_status hp_moe_bias_update(hp_graph *g, hp_tid bias, hp_tid counts, float rate);
hp_status hp_moe_bias_update_n(hp_graph *g, hp_tid bias, const hp_tid *counts, int n, float rate);

/*
 * MOE_DISPATCH: x (N, C) f32, idx (N, k) i32 in [0, E) -> xs (N*k, C), counts (E) i32,
 * pos (N, k) i32. A stable counting sort of the N*k (token, slot) pairs by expert: the rows of
 * expert 0 first, then expert 1, ..., each in token order; xs[pos[n, j]] = x[n]. An id outside
 * [0, E) is a kernel error naming it. Gradient: dx = MOE_COMBINE(dxs, pos) (no gates).
 * Returns xs; counts and pos are outputs 1 and 2.
 */
hp_tid hp_moe_dispatch(hp_graph *g, hp_tid x, hp_tid idx, int experts);

/*
 * MOE_COMBINE: ys (R, C), pos (N, k) i32 [, gates (N, k) f32] -> y (N, C),
 * y[n] = sum_j gates[n, j] ys[pos[n, j]] (gates 1 when absent). Gradient: MOE_COMBINE_BACKWARD
 * (dys[pos[n, j]] = gates[n, j] dy[n]; dgates[n, j] = dy[n] . ys[pos[n, j]]).
 */
hp_tid hp_moe_combine(hp_graph *g, hp_tid ys, hp_tid pos, hp_tid gates);

/*
 * MOE_GEMM, the grouped GEMM: x (R, K) f32 whose rows are grouped by expert as counts (E) i32 says
 * (sum counts = R), w (E, N, K) -> y (R, N), y_e = x_e w[e]^T for expert e's rows x_e (as LINEAR
 * per expert). With trans_w false, w is (E, K, N) and y_e = x_e w[e] (the input gradient's form).
 * Counts that are negative or do not sum to R are a kernel error (attribute i[1] = 1, set by the
 * expert-parallel sharding rule on the per-rank node: R is a capacity, the counts may sum to less,
 * the rows past them are zero in y). Gradients: dx = MOE_GEMM(dy, w, trans_w false),
 * dw = MOE_GEMM_DW(dy, x, counts, w) (E, N, K; w is not read, its layout places the experts).
 */
hp_tid hp_moe_gemm(hp_graph *g, hp_tid x, hp_tid w, hp_tid counts, bool trans_w);

/*
 * MOE_BALANCE_LOSS: probs (N, E) f32, counts (E) i32 -> scalar E sum_e f_e P_e with
 * f_e = counts_e / (N k) (the fraction of the N*k assignments that went to e) and P_e = mean over
 * tokens of probs[:, e] (Switch Transformer eq. 4, GShard; 1 at perfect balance). f is not
 * differentiable; the gradient reaches probs (MOE_BALANCE_LOSS_BACKWARD). Attributes: i[0] = k,
 * i[1] = N (the logical token count, kept when the rows are split).
 */
hp_tid hp_moe_balance_loss(hp_graph *g, hp_tid probs, hp_tid counts, int k);

#ifdef __cplusplus
}
#endif
#endif /* HP_MOE_H */
