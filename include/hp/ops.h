/*
 * hp/ops.h — typed graph builders, one per operator, in single-device terms.
 *
 * Every builder appends one node to the graph and returns its (first) output tensor id, or
 * HP_TID_NONE after a sticky error (see hp/ir.h). Shapes below are written as in llm.c:
 * (B, T, C) is batch, time, channels; (...) is any number of leading dimensions.
 * All floating-point tensors are f32 (bf16 is designed in but not yet computed); ids are i32.
 *
 *     hp_tid h = hp_layernorm(g, x, ln_w, ln_b, 1e-5f);       // (B, T, C)
 *     hp_tid q = hp_linear(g, h, wq, bq);                      // (B, T, C)
 *     hp_tid o = hp_attention(g, q, k, v, n_head, true);       // (B, T, C)
 */
#ifndef HP_OPS_H
#define HP_OPS_H

#include "hp/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- elementwise (elementwise.c) */

/* a + b, a - b, a * b with numpy broadcasting (trailing dims aligned; 1 broadcasts). */
hp_tid hp_add(hp_graph *g, hp_tid a, hp_tid b);
hp_tid hp_sub(hp_graph *g, hp_tid a, hp_tid b);
hp_tid hp_mul(hp_graph *g, hp_tid a, hp_tid b);
/* s * a. */
hp_tid hp_scale(hp_graph *g, hp_tid a, float s);
/* A new f32 tensor of `shape` with every element `value`. */
hp_tid hp_fill(hp_graph *g, hp_shape shape, float value);
/* A copy of a (same shape and dtype). Passes use COPY nodes as the carrier of moves. */
hp_tid hp_copy(hp_graph *g, hp_tid a);

/* ---------------------------------------------------------------- reductions (reduce.c, optim.c) */

/* a summed down to the shape of `like` (the adjoint of broadcasting a `like`-shaped tensor). */
hp_tid hp_sum_to(hp_graph *g, hp_tid a, hp_tid like);
/* Sum / mean over `axis` (the axis is removed); axis -1 reduces everything to a scalar. */
hp_tid hp_sum(hp_graph *g, hp_tid a, int axis);
hp_tid hp_mean(hp_graph *g, hp_tid a, int axis);
/* Scalar sum of squares of all elements of all n tensors (global gradient norm). n <= 8.
 * Accumulated in double over fixed chunks: the result does not depend on the thread count. */
hp_tid hp_sumsq(hp_graph *g, const hp_tid *xs, int n);
/* Scalar min(1, max_norm / (sqrt(sumsq) + 1e-6)): the global-norm clipping factor. It is NaN
 * when sumsq is not finite (a NaN scale makes ADAMW skip its update: see hp_adamw). max_norm may be
 * INFINITY: no clipping, the factor is 1 for a finite sumsq. */
hp_tid hp_clip_scale(hp_graph *g, hp_tid sumsq, float max_norm);
/* The same with a second scalar input, the loss: the factor is NaN when the loss is not finite
 * either. The training step's guard (hp_train_step_build): a step whose loss or gradient norm is
 * NaN or Inf applies no update at all. Sharding rule: both inputs replicated. */
hp_tid hp_clip_scale_guarded(hp_graph *g, hp_tid sumsq, hp_tid loss, float max_norm);

/* ---------------------------------------------------------------- data movement (shape_ops.c) */

/* Same elements in row-major order, new shape (numel must match). */
hp_tid hp_reshape(hp_graph *g, hp_tid a, hp_shape shape);
/* Swaps axes d0 and d1 (negative axes count from the end). */
hp_tid hp_transpose(hp_graph *g, hp_tid a, int d0, int d1);
/* a[..., start:start+len, ...] along `axis`. */
hp_tid hp_slice(hp_graph *g, hp_tid a, int axis, int64_t start, int64_t len);
/* Zero-pads a along `axis` to length `full`, with a placed at offset `start` (SLICE's adjoint). */
hp_tid hp_pad(hp_graph *g, hp_tid a, int axis, int64_t start, int64_t full);
/* Concatenation of n (<= 8) tensors along `axis`; other dims must match. */
hp_tid hp_concat(hp_graph *g, const hp_tid *xs, int n, int axis);

/* ---------------------------------------------------------------- GEMM (matmul.c) */

/*
 * Batched matrix product: a (..., M, K) @ b (..., K, N) -> (..., M, N), with op(a) = a^T on the
 * last two axes when trans_a (likewise b). b may have fewer leading dims than a (broadcast, e.g.
 * a (B, T, K) @ b (K, N)); leading dims otherwise must be equal.
 */
hp_tid hp_matmul(hp_graph *g, hp_tid a, hp_tid b, bool trans_a, bool trans_b);
/* x (..., K), w (N, K), bias (N) or HP_TID_NONE -> (..., N): y = x w^T + bias (PyTorch's Linear). */
hp_tid hp_linear(hp_graph *g, hp_tid x, hp_tid w, hp_tid bias);

/* ---------------------------------------------------------------- nn (one file each) */

/*
 * table (V, C), ids (...) i32 -> (..., C). An id outside [0, V) is a kernel error
 * (HP_STATUS_INVALID_ARGUMENT) naming the id and its position. The table's gradient is
 * EMBEDDING_BACKWARD(dy, ids, table), a deterministic scatter-add; ids get no gradient.
 */
hp_tid hp_embedding(hp_graph *g, hp_tid table, hp_tid ids);
/* GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2). */
hp_tid hp_gelu(hp_graph *g, hp_tid x);
/*
 * LayerNorm over the last axis: x (..., C), gamma (C), beta (C) -> (..., C) (Ba et al. 2016).
 * The node's outputs 1 and 2 are mean and rstd (...), saved for the backward; gradients flow only
 * through y (autodiff reports HP_STATUS_UNSUPPORTED if the loss depends on mean or rstd).
 */
hp_tid hp_layernorm(hp_graph *g, hp_tid x, hp_tid gamma, hp_tid beta, float eps);
/*
 * RMSNorm over the last axis (Zhang & Sennrich 2019; Llama): x (..., C), weight (C) -> (..., C),
 * y = x / sqrt(mean(x^2) + eps) * weight (eps > 0). The node's output 1 is rstd (...), saved for the
 * backward; gradients flow only through y. Sharding rule: rows split any way (DP, SP), C whole,
 * weight replicated (its gradient a pending sum over the row-splitting axes).
 */
hp_tid hp_rmsnorm(hp_graph *g, hp_tid x, hp_tid weight, float eps);
/*
 * Rotary position embedding (Su et al. 2021), Hugging Face Llama's rotate_half form:
 * x (B, T, n_head*D) with heads interleaved as (H, D), D even -> y of the same shape; the token at
 * time t is at position pos_offset + t and pair (j, j + D/2) of every head is rotated by
 * (pos_offset + t) / base^(2j/D). base > 1 (Llama: 10000), pos_offset >= 0 (generation with a cache;
 * 0 for training). The gradient is the inverse rotation. Sharding rule: batch and sequence split any
 * way (a split sequence rotates each rank's rows by their global positions: the per-rank node's
 * offset is pos_offset plus the first row of the rank's block), channels split on head boundaries
 * only.
 */
hp_tid hp_rope(hp_graph *g, hp_tid x, int n_head, float base, int64_t pos_offset);
/*
 * ROPE with a position per row (batched generation, each sequence at its own length): x (B, T,
 * n_head*D), positions (B, T) i32 -> y like x, row (b, t) rotated for position positions[b, t]
 * (a negative position, a padding row, is taken as 0). Sharding rule: hp_rope's, positions split
 * like x's batch and sequence (a split sequence reads each row's own position: no offset).
 */
hp_tid hp_rope_at(hp_graph *g, hp_tid x, hp_tid positions, int n_head, float base);
/*
 * SwiGLU's gate (Shazeer 2020): silu(gate) * up for gate and up of the same shape (...), with
 * silu(g) = g / (1 + exp(-g)). Elementwise (any layout; both operands in gate's).
 */
hp_tid hp_swiglu(hp_graph *g, hp_tid gate, hp_tid up);
/* Softmax over the last axis. */
hp_tid hp_softmax(hp_graph *g, hp_tid x);
/*
 * logits (..., V) f32, targets (...) i32 -> scalar mean of -log softmax(logits)[target]. A target
 * outside [0, V) is a kernel error naming it. The backward recomputes the softmax from the logits.
 */
hp_tid hp_cross_entropy(hp_graph *g, hp_tid logits, hp_tid targets);
/*
 * GRPO's loss (Group Relative Policy Optimization, Shao et al. 2024, DeepSeekMath eq. 3-4) over the
 * tokens of sampled completions: logits (R..., V) f32 (row r predicts tokens[r]); tokens (R...) i32;
 * old_logp, ref_logp, adv, weight (R...) f32: the token's log-prob under the policy that sampled it
 * and under the frozen reference policy, the advantage of the token's sample (group-relative:
 * (reward - mean of its group) / std of its group, the caller's), and the token's weight (0 off the
 * completion; DeepSeekMath's 1 / (G |o_i|) on it). Returns the scalar
 *   -sum_r weight[r] (min(ratio A, clip(ratio, 1 - eps, 1 + eps) A) - beta k3),
 * ratio = exp(logp - old_logp), k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1 (Schulman's
 * unbiased KL estimator). eps, beta >= 0. The gradient flows to the logits only. A token outside
 * [0, V) is a kernel error naming it. Sharding rule: rows split any way, the loss a pending sum.
 */
hp_tid hp_grpo_loss(hp_graph *g, hp_tid logits, hp_tid tokens, hp_tid old_logp, hp_tid ref_logp, hp_tid adv,
                    hp_tid weight, float eps, float beta);
/*
 * Multi-head self-attention core, fused: q, k, v (B, T, H*D) with heads interleaved as (H, D) in the
 * last axis -> o (B, T, H*D) = softmax(q k^T / sqrt(D) [+ causal mask]) v per head. The softmax
 * statistics (log-sum-exp per row, (B, H, T)) are the node's second output; backward recomputes
 * the scores from them instead of keeping a (T, T) matrix per head (FlashAttention, Dao et al. 2022).
 * Sharding rule: heads split on head boundaries (Megatron TP); mesh axes that split the sequence are
 * moved to the heads for the kernel and back for o (and dq, dk, dv), each one all-to-all (Ulysses
 * context parallelism, Jacobs et al. 2023); where the heads do not divide over those axes the
 * sequence is gathered instead.
 */
hp_tid hp_attention(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, bool causal);
/*
 * Grouped-query attention (Ainslie et al. 2023, "GQA"): the same fused operator with k, v
 * (B, T, kv_heads*D) where kv_heads divides n_head and query head h attends with key/value head
 * h / (n_head / kv_heads) (Hugging Face's repeat_kv); kv_heads = 1 is multi-query attention,
 * kv_heads = n_head is hp_attention. Sharding rule: heads split over a tensor-parallel axis (and
 * Ulysses' sequence axes, as hp_attention's) when the axes' sizes divide both n_head and kv_heads,
 * else the sequence is gathered, and where the tensor-parallel axis alone does not divide them,
 * attention runs replicated.
 */
hp_tid hp_attention_gqa(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, int kv_heads, bool causal);
/*
 * Causal attention over a sequence in load-balanced ring order (strategy.ring_load_balance): the
 * rows of q, k, v are the sequence permuted by hp_ring_balance_positions(T, n_ranks), so that the
 * block layout over a ring axis of n_ranks ranks gives rank r the chunks r and 2 n_ranks - 1 - r of
 * the sequence and every rank computes the same share of the causal score matrix. Row i sees key j
 * when the global position of j is at most that of i. Runs only as ring attention (the sequence
 * split over one axis of n_ranks ranks with context_parallel: ring; the partitioner's expansion
 * splits each block into its chunks); the CPU kernel refuses it. n_ranks >= 2; otherwise as
 * hp_attention_gqa (HP_STATUS_INVALID_ARGUMENT for n_ranks < 2).
 */
hp_tid hp_attention_balanced(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, int kv_heads, int n_ranks);
/*
 * The load-balanced ring order of a sequence of T rows over n ranks (Brandon et al. 2023, "Striped
 * Attention"; the "zigzag" layout of ring-flash-attention): the sequence is cut into 2n chunks,
 * rank r's block of the permuted sequence (hp_block_range(T, n, r) rows) holds chunk r (its first
 * ceil(rows / 2) rows) followed by chunk 2n - 1 - r (the rest); chunk k < n has the first-half size
 * of block k, chunk k >= n the second-half size of block 2n - 1 - k, and the chunks lie in the
 * sequence in order 0 .. 2n - 1. Writes pos[p] = the global position (0-based) of permuted row p,
 * p < T: a permutation of 0 .. T - 1. The loader applies it to the tokens and targets (permuted row
 * p holds token pos[p]), the model reads its positions from it. Errors: HP_STATUS_INVALID_ARGUMENT
 * for T < 1, n < 1, T > 2^31 - 1 or pos NULL. n = 1 is the identity.
 */
hp_status hp_ring_balance_positions(int64_t T, int n, int32_t *pos);
/*
 * One block pair of ring attention (the ATTENTION operator on a rectangle): q (B, Tq, n_head*D)
 * against a key/value block k, v (B, Tk, kv_heads*D); with `causal`, query row i sees key j when
 * j <= i + offset (offset = the global position of q's first row minus that of k's first row;
 * 0 is ordinary causal self-attention). Returns o (B, Tq, n_head*D), softmax-normalized over this
 * block's keys, and in *lse (may be NULL) the block's log-sum-exp (B, n_head, Tq) f32; a row that
 * sees no key has o = 0 and lse = -inf. Its gradient rule is ATTENTION_BACKWARD with the same
 * attrs (dk, dv shaped like k). ATTENTION_BACKWARD given the o and lse of the whole attention (the
 * merge of every block) instead of the block's gives exactly this block's share of dq and its dk,
 * dv (FlashAttention-2's recomputation, Dao 2023): the ring's backward. Errors as hp_attention_gqa.
 */
hp_tid hp_attention_block(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, int n_head, int kv_heads, bool causal,
                          int64_t offset, hp_tid *lse);
/*
 * The FlashAttention recurrence across key blocks (ring attention's merge): from the (o, lse) of
 * attention over two disjoint key sets, those over their union: lse = logaddexp(lse_a, lse_b),
 * o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b. o_a, o_b (B, T, n_head*D) f32; lse_a, lse_b
 * (B, n_head, T) f32 (-inf: no key seen on that side). Returns o; *lse (may be NULL) receives the
 * merged lse. Not differentiable (ring attention's backward uses ATTENTION_BACKWARD per block).
 * Errors: HP_STATUS_SHAPE naming the input whose shape or dtype differs.
 */
hp_tid hp_attention_merge(hp_graph *g, hp_tid o_a, hp_tid lse_a, hp_tid o_b, hp_tid lse_b, int n_head, hp_tid *lse);
/*
 * Attention with a key/value cache (incremental decoding; an inference operator, no gradient):
 * q (S, T, n_head*D), k and v (S, T, kv_heads*D), k_cache and v_cache (S, kv_heads, T_max, D) (STATE
 * tensors, written in place), positions (S, T) i32 -> o (S, T, n_head*D). S slots (one sequence
 * each), T new tokens per slot. Row (s, t) at position p = positions[s, t] in [0, T_max) first stores
 * its key and value heads at cache[s, :, p, :], then attends causally over cache positions [0, p]
 * of its slot (softmax(q K^T / sqrt(D)) V, grouped-query as hp_attention_gqa); p = -1 marks a
 * padding row (no write, zero output). A position outside [-1, T_max) is a kernel error naming it.
 * Sharding rule: heads split for tensor parallelism (the caches' kv-head dim with them), slots split
 * any way. src/ops/attention_cache.c has the cost and the source.
 */
hp_tid hp_attention_cache(hp_graph *g, hp_tid q, hp_tid k, hp_tid v, hp_tid k_cache, hp_tid v_cache,
                          hp_tid positions, int n_head, int kv_heads);
/*
 * Inverted dropout (Srivastava et al. 2014; scaled at training time as in GPT-2/PyTorch):
 * x (...) f32, step () f32 -> y (...), y[e] = x[e] / (1 - p) where the element is kept, 0 where it
 * is dropped. Element e is dropped when hp_rng_uniform(hp_rng_u64(key, step), e) < p, with e the
 * element's flat row-major index in the GLOBAL (single-device) tensor: the mask is a pure function
 * of (key, step, element), so a sharded run drops the same elements as the single-device run and a
 * resumed run the same as an uninterrupted one. `key` names the tensor (derive it from a name and
 * the run seed with hp_rng_hash); `step` is a scalar input holding the (1-based) optimizer step,
 * truncated to an integer by the kernel. p in [0, 1) (else a sticky HP_STATUS_INVALID_ARGUMENT);
 * p = 0 appends no node and returns x. At most 5 dimensions. The gradient is the same operator
 * applied to dy (the mask is regenerated, never stored). Attributes: i[0] = key, f[0] = p,
 * shape = the global shape, i[1 + d] = the first global index of this rank's block along dim d
 * (zero in a logical graph; set per rank by the sharding rule).
 */
hp_tid hp_dropout(hp_graph *g, hp_tid x, hp_tid step, float p, uint64_t key);

/*
 * Makes DROPOUT node `node` (of hp_dropout, before autodiff, which carries it to the backward) a
 * block of `rows` global rows along dim 0 starting at the run-time row `row0` (an i32 scalar
 * tensor of g, typically an input): its mask is then the one the (rows, ...) tensor of the
 * single-device run has at those rows. A pipeline stage runs one micro-batch of the global batch
 * per run (hp/pipeline.h). The kernel fails (HP_STATUS_INVALID_ARGUMENT naming the offset) when
 * row0 puts the block outside [0, rows). Errors: HP_STATUS_INVALID_ARGUMENT for a node that is not
 * a DROPOUT; HP_STATUS_SHAPE for a row0 that is not an i32 scalar or rows below the block's.
 */
hp_status hp_dropout_set_row_input(hp_graph *g, int node, hp_tid row0, int64_t rows);

/* ---------------------------------------------------------------- optimizer (optim.c) */

/* AdamW hyper-parameters (Loshchilov & Hutter 2019, decoupled weight decay). */
typedef struct hp_adamw_params {
    float beta1, beta2, eps, weight_decay;
} hp_adamw_params;
#define HP_ADAMW_PARAMS_DEFAULT                                                                    \
    ((hp_adamw_params){.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f})

/*
 * In place: m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
 * + wd p), where g' = grad * scale. lr and step are scalar f32 INPUT tensors fed every step (step
 * t counts from 1); scale is a scalar (the clipping factor) or HP_TID_NONE for 1; a NaN scale
 * means "skip this step": param, m and v are left exactly as they are (hp_clip_scale_guarded makes
 * it NaN for a non-finite loss or gradient norm), an infinite scale or lr is a kernel error. m and v are
 * OPT_STATE tensors shaped like param. A param whose tensor has no_weight_decay set is updated with
 * weight_decay 0. The ADAMW node has no outputs and carries HP_NODE_FLAG_INPLACE. A step value
 * below 1 is a kernel error. Returns HP_STATUS_OK or the graph's sticky error status.
 */
hp_status hp_adamw(hp_graph *g, hp_tid param, hp_tid grad, hp_tid m, hp_tid v, hp_tid lr,
                   hp_tid step, hp_tid scale, const hp_adamw_params *p);

/* ---------------------------------------------------------------- point-to-point (p2p.c) */

/*
 * SEND of tensor x to rank `peer` with `tag` (>= 0), and RECV of a `dtype` tensor of `shape` from
 * rank `peer` with `tag`: the hand-off between pipeline stages. The runtime runs them on its
 * point-to-point queue through hp_comm_isend / hp_comm_irecv (hp/runtime.h: hp_p2p_instr); a SEND
 * and the RECV it meets are matched by (peer, tag) in issue order. No gradient rule: a schedule
 * places the reverse transfer of the gradient itself. Sharding rule: none (replicated).
 * hp_send returns the node's index, hp_recv the received tensor; errors are sticky on the graph
 * (HP_STATUS_INVALID_ARGUMENT for a negative peer or tag: hp_send returns -1, hp_recv HP_TID_NONE).
 */
int hp_send(hp_graph *g, hp_tid x, int peer, int tag);
hp_tid hp_recv(hp_graph *g, hp_dtype dtype, hp_shape shape, int peer, int tag);
/*
 * One point-to-point exchange (MPI_Sendrecv): sends x to rank send_peer and returns y (recv_shape,
 * x's dtype) received from rank recv_peer, both with `tag`; ring attention passes its K/V blocks
 * so. Like SEND and RECV it runs only with a runtime instruction a pass attaches (the partitioner,
 * for a ring's expansion: hp/shard.h); the send is non-blocking and completes with the receive,
 * so x lives only until y is read. Errors: HP_STATUS_INVALID_ARGUMENT for a negative peer or tag.
 */
hp_tid hp_sendrecv(hp_graph *g, hp_tid x, int send_peer, int recv_peer, int tag, hp_shape recv_shape);

/* ---------------------------------------------------------------- cost model */

/*
 * Which rate of a calibrated machine model (hp/costmodel.h) times a node: its operator's cost rule
 * says what kind of kernel runs it, so the model needs no switch on operator kind.
 *   HP_COST_MEMORY     bound by memory traffic (elementwise, LayerNorm, softmax, reductions, AdamW,
 *                      ...): timed from bytes read + written with the operator's measured curve;
 *   HP_COST_GEMM       BLAS matrix products: `batch` products of op(A) (m x k) times (k x n), timed
 *                      by the GEMM rate of that shape class; trans_a says op(A) = A^T (the weight
 *                      gradient's dY^T X);
 *   HP_COST_ATTENTION  the fused attention kernels: `batch` = batch x heads score matrices of m
 *                      query rows by n key rows, head dimension k;
 *   HP_COST_VIEW       usually no kernel at all: the runtime makes the output a view of the input
 *                      (RESHAPE of a planned activation), so the model gives it no time.
 */
typedef enum hp_cost_kind {
    HP_COST_MEMORY = 0,
    HP_COST_GEMM,
    HP_COST_ATTENTION,
    HP_COST_VIEW,
    HP_COST_KIND_COUNT
} hp_cost_kind;

/* Work of one node: floating-point operations and bytes of tensor data read and written, and the
 * kernel class with its shape (zero where the rule sets none: HP_COST_MEMORY, no shape). */
typedef struct hp_op_cost {
    double flops;
    double bytes_read;    /* bytes */
    double bytes_written; /* bytes */
    hp_cost_kind kind;
    int64_t m, n, k;      /* GEMM: one product's dims; ATTENTION: query rows, key rows, head dim */
    int64_t batch;        /* GEMM: products; ATTENTION: batch x heads (0 taken as 1) */
    bool trans_a;         /* GEMM: op(A) = A^T */
} hp_op_cost;

/* Scratch bytes node n's kernel needs from the operator's workspace rule (0 without one). */
size_t hp_op_workspace(const hp_graph *g, const hp_node *n);

/* Cost of node `i` from the operator's cost rule (zero for operators without one). */
hp_op_cost hp_node_cost(const hp_graph *g, int i);

#ifdef __cplusplus
}
#endif
#endif /* HP_OPS_H */
