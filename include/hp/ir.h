/*
 * hp/ir.h — tensors, nodes and graphs: the one IR every pass reads and writes.
 *
 * A graph is an append-only list of nodes in program order (a valid topological order by
 * construction) over a table of tensors. Tensors and nodes are addressed by integer ids, so passes
 * can keep side tables indexed by id. Model code builds graphs in single-device terms with the
 * builder functions of hp/ops.h:
 *
 *     hp_graph *g = hp_graph_new();
 *     hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(8, 16));
 *     hp_graph_push_scope(g, "fc");
 *     hp_tid w = hp_param(g, "weight", HP_SHAPE(32, 16));   // named "fc.weight"
 *     hp_graph_pop_scope(g);
 *     hp_tid y = hp_linear(g, x, w, HP_TID_NONE);           // (8, 32)
 *     if (hp_graph_status(g) != HP_STATUS_OK) ... hp_error_message() says what went wrong
 *
 * Builder errors are sticky (as in cairo): the first failure is recorded on the graph, later builder
 * calls return HP_TID_NONE, and hp_graph_status() reports the first error's status. This keeps model
 * code free of error plumbing while every bad shape still gets a message that names the tensors.
 */
#ifndef HP_IR_H
#define HP_IR_H

#include "hp/core.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor id within one graph; HP_TID_NONE for "no tensor" (an absent optional input). */
typedef int32_t hp_tid;
#define HP_TID_NONE ((hp_tid)-1)

#define HP_MAX_NODE_INPUTS 8
#define HP_MAX_NODE_OUTPUTS 4

/*
 * The operator list, one X(NAME, lowercase_name) per operator. Each operator's definition (shape
 * inference, gradient, cost, and later its sharding rule) lives in one file of src/ops/; each
 * backend has a kernel per operator. This list is the only place that enumerates operators.
 */
#define HP_OP_LIST(X)                                                                              \
    X(NOP, nop)                                                                                    \
    X(ADD, add)                     /* y = a + b, numpy broadcasting */                            \
    X(SUB, sub)                     /* y = a - b, broadcasting */                                  \
    X(MUL, mul)                     /* y = a * b, broadcasting */                                  \
    X(SCALE, scale)                 /* y = f[0] * a */                                             \
    X(SUM_TO, sum_to)               /* y = a summed down to the shape of b (broadcast's adjoint) */\
    X(SUM, sum)                     /* y = sum over axis i[0] (i[0] = -1: all, scalar result) */   \
    X(MEAN, mean)                   /* like SUM, divided by the count */                           \
    X(RESHAPE, reshape)             /* same elements, new shape (attr shape) */                    \
    X(TRANSPOSE, transpose)         /* swap axes i[0], i[1] */                                     \
    X(SLICE, slice)                 /* along axis i[0], start i[1], length i[2] */                 \
    X(PAD, pad)                     /* SLICE's adjoint: zero-pad axis i[0] to i[2], offset i[1] */ \
    X(CONCAT, concat)               /* along axis i[0], n inputs */                                \
    X(MATMUL, matmul)               /* batched a @ b; i[0] = transpose a, i[1] = transpose b */    \
    X(LINEAR, linear)               /* y = x @ w^T + bias; x (..., K), w (N, K), bias (N) */       \
    X(EMBEDDING, embedding)         /* y[..., :] = table[ids[...], :] */                           \
    X(EMBEDDING_BACKWARD, embedding_backward) /* dtable = scatter-add of dy rows at ids */          \
    X(GELU, gelu)                   /* tanh approximation (GPT-2) */                               \
    X(GELU_BACKWARD, gelu_backward) /* dx = dy * gelu'(x) */                                       \
    X(LAYERNORM, layernorm)         /* over the last axis; outputs y, mean, rstd */                \
    X(LAYERNORM_BACKWARD, layernorm_backward) /* outputs dx, dgamma, dbeta */                      \
    X(SOFTMAX, softmax)             /* over the last axis */                                       \
    X(SOFTMAX_BACKWARD, softmax_backward) /* dx = y * (dy - sum(dy * y)) */                        \
    X(CROSS_ENTROPY, cross_entropy) /* mean over rows of -log softmax(logits)[target] */           \
    X(CROSS_ENTROPY_BACKWARD, cross_entropy_backward)                                              \
    X(GRPO_LOSS, grpo_loss)         /* GRPO's clipped surrogate + k3 KL, weighted sum over rows */  \
    X(GRPO_LOSS_BACKWARD, grpo_loss_backward)                                                      \
    X(ATTENTION, attention)         /* fused causal self-attention; outputs o, lse */              \
    X(ATTENTION_BACKWARD, attention_backward) /* outputs dq, dk, dv */                             \
    X(ATTENTION_MERGE, attention_merge) /* (o, lse) pairs of two key blocks -> o, lse of both (ring) */ \
    X(DROPOUT, dropout)             /* inverted dropout; mask from (i[0] key, in[1] step, element) */\
    X(RMSNORM, rmsnorm)             /* over the last axis, eps f[0]; outputs y, rstd */             \
    X(RMSNORM_BACKWARD, rmsnorm_backward) /* outputs dx, dweight */                                \
    X(ROPE, rope)                   /* rotary embedding: i[0] heads, i[1] position offset, i[2] inverse, f[0] base */\
    X(SWIGLU, swiglu)               /* y = silu(gate) * up */                                      \
    X(SWIGLU_BACKWARD, swiglu_backward) /* outputs dgate, dup */                                   \
    X(SUMSQ, sumsq)                 /* scalar sum of squares of all inputs */                      \
    X(CLIP_SCALE, clip_scale)       /* scalar min(1, f[0] / (sqrt(a) + 1e-6)) */                   \
    X(ADAMW, adamw)                 /* in place: param, m, v updated from grad */                  \
    X(FILL, fill)                   /* y = f[0] everywhere (seeds the loss gradient) */            \
    X(COPY, copy)                   /* y = a; also the hook for prefetch/offload/redistribute */    \
    X(REDISTRIBUTE, redistribute)   /* per-rank graphs: change of layout (collectives); extra = plan */\
    X(ASSIGN, assign)               /* in place: in[0] = in[1] (write-back after in-place updates) */ \
    X(OFFLOAD, offload)             /* y = copy of a in slower tier i[0] (async, copy stream) */    \
    X(PREFETCH, prefetch)           /* y = copy of a (slower tier i[0]) in the fast tier (async) */ \
    X(OFFLOAD_WAIT, offload_wait)   /* waits for the transfer that made or reads in[0] (no output) */\
    X(ADAMW_STREAM, adamw_stream)   /* ADAMW where param/grad/m/v may live on slower tiers: chunked */\
    X(SEND, send)                   /* point-to-point: in[0] to rank i[0] with tag i[1] (no output) */ \
    X(RECV, recv)                   /* point-to-point: y (attr.shape, dtype i[2]) from rank i[0], tag i[1] */ \
    X(SENDRECV, sendrecv)           /* exchange: in[0] to rank i[0], y (attr.shape) from rank i[4], tag i[1] */ \
    X(ATTENTION_CACHE, attention_cache) /* inference: append k, v to a KV cache in place, attend; i[0] heads, i[2] kv heads */ \
    X(MOE_ROUTE, moe_route)         /* MoE router: logits (N, E) [, bias (E)] -> gates, idx (N, k), probs (N, E) */ \
    X(MOE_ROUTE_BACKWARD, moe_route_backward) /* dgates, dprobs, logits, idx -> dlogits */              \
    X(MOE_BIAS_UPDATE, moe_bias_update) /* in place: bias (E) += f[0] sign(mean(counts) - counts) */     \
    X(MOE_DISPATCH, moe_dispatch)   /* x (N, C), idx (N, k) -> xs (N*k, C) by expert, counts (E), pos (N, k) */ \
    X(MOE_COMBINE, moe_combine)     /* ys (N*k, C), pos (N, k) [, gates (N, k)] -> y (N, C) */         \
    X(MOE_COMBINE_BACKWARD, moe_combine_backward) /* dy, pos, gates, ys -> dys (N*k, C), dgates (N, k) */ \
    X(MOE_GEMM, moe_gemm)           /* grouped GEMM: rows of expert e times w[e] (E, N, K) */        \
    X(MOE_GEMM_DW, moe_gemm_dw)     /* grouped weight gradient dw[e] = dy_e^T x_e (E, N, K) */       \
    X(MOE_BALANCE_LOSS, moe_balance_loss) /* Switch/GShard E sum_e f_e P_e from probs, counts */   \
    X(MOE_BALANCE_LOSS_BACKWARD, moe_balance_loss_backward) /* dl, probs, counts -> dprobs */

typedef enum hp_op {
#define HP_OP_ENUM_(name, lower) HP_OP_##name,
    HP_OP_LIST(HP_OP_ENUM_)
#undef HP_OP_ENUM_
    HP_OP_COUNT
} hp_op;

/* "matmul", "layernorm", ... ; "?" for an invalid op. */
const char *hp_op_name(hp_op op);

/* What a tensor is, which decides where it lives and who owns its memory. */
typedef enum hp_tensor_kind {
    HP_TENSOR_KIND_ACTIVATION = 0, /* produced by a node; planned memory, dies after its last use */
    HP_TENSOR_KIND_PARAM,          /* trainable weight; persistent across steps */
    HP_TENSOR_KIND_INPUT,          /* fed from outside every step (tokens, targets, lr) */
    HP_TENSOR_KIND_OPT_STATE,      /* optimizer state (AdamW m, v); persistent */
    HP_TENSOR_KIND_CONST,          /* constant fixed at build time; persistent */
    HP_TENSOR_KIND_STATE,          /* non-trainable persistent state written by the program (a KV
                                    * cache); bound to the state store by name like PARAM */
    HP_TENSOR_KIND_COUNT
} hp_tensor_kind;

const char *hp_tensor_kind_name(hp_tensor_kind k);

/*
 * Tensor metadata: a plain struct (ggml's ggml_tensor). The graph owns it; pointers stay valid only
 * until the next tensor is added (the table may grow), so hold ids, not pointers, across builds.
 */
typedef struct hp_tensor {
    const char *name;     /* hierarchical ("blocks.3.attn.q.weight"), arena-owned; NULL if anonymous */
    hp_dtype dtype;
    hp_shape shape;
    hp_tensor_kind kind;
    int32_t producer;     /* index of the node that writes it; -1 for leaves */
    int32_t grad_of;      /* for a gradient made by autodiff: the tensor it is the gradient of; else -1 */
    bool requires_grad;   /* params: true by default; activations: true if any input requires it */
    bool no_weight_decay; /* params: excluded from AdamW decay (biases, norms); set by the model */
    void *extra;          /* pass-owned side data (layouts, residency); never freed by the graph */
} hp_tensor;

/*
 * Operator attributes. Each operator's header comment in HP_OP_LIST says what i[] and f[] mean;
 * `shape` is used by RESHAPE. Unused fields are zero.
 */
typedef struct hp_attrs {
    int64_t i[6];
    float f[6];
    hp_shape shape;
} hp_attrs;

/* Node flags: what part of the training step a node belongs to (for passes and reports). */
enum {
    HP_NODE_FLAG_BACKWARD = 1u << 0,  /* made by autodiff */
    HP_NODE_FLAG_OPTIMIZER = 1u << 1, /* gradient clipping and the optimizer update */
    HP_NODE_FLAG_INPLACE = 1u << 2,   /* writes some of its inputs in place (ADAMW) */
    HP_NODE_FLAG_ASYNC = 1u << 3,     /* runs on a communication queue (a REDISTRIBUTE that moves
                                         bytes): the runtime waits for it only where its output is
                                         first used, and its inputs stay live until then */
    HP_NODE_FLAG_INSTR = 1u << 4,     /* node->extra is a runtime instruction (hp_instr, hp/instr.h) or
                                         a pass's struct that begins with one */
    /* Bits 5-6: a pipeline stage's phase of the node (HP_NODE_PHASE(flags)): 1 forward (F), 2 input
     * gradient (B), 3 weight gradient (W); 0 for a node no phase was given (one a later pass
     * inserted). Set by the pipeline (hp/pipeline.h) so its phase boundaries survive a rewrite. */
    HP_NODE_FLAG_PHASE_SHIFT = 5,
    HP_NODE_FLAG_PHASE_MASK = 3u << 5,
};
#define HP_NODE_PHASE(flags) ((int)(((flags) & HP_NODE_FLAG_PHASE_MASK) >> HP_NODE_FLAG_PHASE_SHIFT))

typedef struct hp_node {
    hp_op op;
    int n_in, n_out;
    hp_tid in[HP_MAX_NODE_INPUTS];   /* HP_TID_NONE for an absent optional input */
    hp_tid out[HP_MAX_NODE_OUTPUTS];
    hp_attrs attr;
    const char *scope; /* name scope when built ("blocks.3.attn"), arena-owned; may be "" */
    uint32_t flags;
    void *extra;       /* pass-owned data in the graph's arena (a REDISTRIBUTE node's plan) */
} hp_node;

typedef struct hp_graph hp_graph;

/* New empty graph. NULL when out of memory. */
hp_graph *hp_graph_new(void);
/* Frees the graph, its tensors, nodes and names. NULL is allowed. */
void hp_graph_free(hp_graph *g);

/* The first builder error (sticky), or HP_STATUS_OK. The message is in hp_graph_error(). */
hp_status hp_graph_status(const hp_graph *g);
const char *hp_graph_error(const hp_graph *g);
/* Records a builder error on the graph (first one wins) and in the thread's error message; returns code. */
hp_status hp_graph_fail(hp_graph *g, hp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int hp_graph_n_tensors(const hp_graph *g);
int hp_graph_n_nodes(const hp_graph *g);
/* Metadata of tensor `t` / node `i`. Asserts the id is in range. */
hp_tensor *hp_graph_tensor(const hp_graph *g, hp_tid t);
hp_node *hp_graph_node(const hp_graph *g, int i);
/* The graph's metadata arena (names, pass side tables that die with the graph). */
hp_arena *hp_graph_arena(hp_graph *g);

/* Tensor by full name, or HP_TID_NONE. O(1) average (hash table). */
hp_tid hp_graph_find(const hp_graph *g, const char *name);

/*
 * Name scopes: push "blocks.3" then "attn", and a param named "weight" becomes
 * "blocks.3.attn.weight". Scopes nest up to 16 deep.
 */
void hp_graph_push_scope(hp_graph *g, const char *name);
void hp_graph_push_scopef(hp_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hp_graph_pop_scope(hp_graph *g);

/*
 * Leaf tensors. `name` is joined to the current scope; a duplicate full name is a sticky
 * HP_STATUS_INVALID_ARGUMENT; a negative dimension is a sticky HP_STATUS_SHAPE (zero is allowed:
 * a rank's shard of an unevenly split tensor may be empty). hp_param makes an f32 PARAM with
 * requires_grad.
 */
hp_tid hp_param(hp_graph *g, const char *name, hp_shape shape);
hp_tid hp_input(hp_graph *g, const char *name, hp_dtype dtype, hp_shape shape);
hp_tid hp_leaf(hp_graph *g, const char *name, hp_tensor_kind kind, hp_dtype dtype, hp_shape shape);

/*
 * Appends a node: checks the inputs (ids in range, count within the operator's limits), runs the
 * operator's shape inference, creates the output tensors (anonymous activations) and returns the
 * first output's id (the others are in hp_graph_node(g, hp_graph_n_nodes(g) - 1)->out). On a shape
 * error, records a sticky error naming the operator, scope and shapes and returns HP_TID_NONE.
 * `attrs` may be NULL (all zero). Model code uses the typed builders of hp/ops.h instead.
 */
hp_tid hp_graph_add_node(hp_graph *g, hp_op op, const hp_tid *inputs, int n_in, const hp_attrs *attrs);

/* Flags applied to every node added from now on (autodiff sets HP_NODE_FLAG_BACKWARD). */
void hp_graph_set_node_flags(hp_graph *g, uint32_t flags);

/* Gives an anonymous tensor a (scoped) name. */
void hp_graph_set_name(hp_graph *g, hp_tid t, const char *name);

/* Graph rewriting, for passes (partitioner, bucketing, autodiff) rather than model code. */

/* Names tensor t with `name` exactly as given (no scope prefix): a pass carrying a tensor's name
 * from one graph to another. Records the sticky error naming the name when another tensor has it. */
void hp_graph_set_abs_name(hp_graph *g, hp_tid t, const char *name);

/*
 * Reorders the nodes: position i gets the node that was at order[i] (`order` holds a permutation
 * of 0..n_nodes-1, n_nodes elements, borrowed); producers are renumbered, tensor ids do not change.
 * The caller guarantees that every input is still defined before use and that no node moves across
 * an in-place writer of what it reads; hp_graph_verify checks the first. Errors:
 * HP_STATUS_INVALID_ARGUMENT when `order` is not a permutation (the graph is unchanged),
 * HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_graph_permute_nodes(hp_graph *g, const int *order);

/*
 * Checks structural invariants: every input id is defined before use (program order), output
 * shapes agree with shape inference, names are unique, dtypes match what each operator accepts.
 * Returns HP_STATUS_INTERNAL with a message naming the node on the first violation.
 */
hp_status hp_graph_verify(const hp_graph *g);

/*
 * Writes a readable listing: one line per tensor leaf and per node
 * ("%12 = matmul(%3 [8, 16], %5 [16, 32]) -> [8, 32]  # blocks.0.attn"). The caller owns `f`.
 */
void hp_graph_dump(const hp_graph *g, FILE *f);

/* Parameters in creation order. Returns the count; fills up to `cap` ids into `out` (may be NULL). */
int hp_graph_params(const hp_graph *g, hp_tid *out, int cap);

/* ---------------------------------------------------------------- autodiff */

/*
 * Reverse-mode autodiff (the standard tape walk over program order, Griewank & Walther,
 * "Evaluating Derivatives", ch. 3): appends the backward graph to `g` so that for each tensor in
 * wrt[0..n) grads[i] holds d(loss)/d(wrt[i]) (HP_TID_NONE if wrt[i] does not influence the loss).
 * `loss` must be a scalar (ndim 0 or numel 1) f32 tensor. Gradients are named "grad.<name>" for
 * named tensors. New nodes carry HP_NODE_FLAG_BACKWARD. Errors: HP_STATUS_INVALID_ARGUMENT for a
 * non-scalar loss; HP_STATUS_UNSUPPORTED naming the operator that has no gradient rule.
 */
hp_status hp_autodiff(hp_graph *g, hp_tid loss, const hp_tid *wrt, int n, hp_tid *grads);

#ifdef __cplusplus
}
#endif
#endif /* HP_IR_H */
