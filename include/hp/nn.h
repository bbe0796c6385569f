/*
 * hp/nn.h — models built on the IR in single-device terms.
 *
 * GPT: a GPT-2-style decoder (Radford et al. 2019): learned token and position embeddings,
 * pre-LayerNorm blocks x += proj(attn(ln1(x))); x += mlp.proj(gelu(mlp.fc(ln2(x)))), a final
 * LayerNorm and a linear head (tied to the token embedding or separate). Attention uses separate
 * q, k, v projections so that tensor parallelism can split heads by splitting the output dim.
 *
 * Parameter names (strategies, checkpoints and offload policies address tensors by them):
 *   wte.weight (V, C)                      wpe.weight (context, C)
 *   blocks.L.ln1.weight / .bias (C)        blocks.L.attn.{q,k,v,proj}.weight (C, C) / .bias (C)
 *   blocks.L.ln2.weight / .bias (C)        blocks.L.mlp.fc.weight (4C, C) / .bias (4C)
 *   blocks.L.mlp.proj.weight (C, 4C) / .bias (C)
 *   ln_f.weight / .bias (C)                lm_head.weight (V, C)  (absent when tied)
 *
 * Llama (Touvron et al. 2023; Hugging Face's LlamaForCausalLM, also Qwen2 without biases): token
 * embedding, pre-RMSNorm blocks x += o_proj(attn(rope(q_proj(h)), rope(k_proj(h)), v_proj(h)))
 * with h = input_layernorm(x) and grouped-query attention (kv_heads dividing heads, 1: multi-query),
 * then x += down_proj(silu(gate_proj(h)) * up_proj(h)) with h = post_attention_layernorm(x) (SwiGLU),
 * a final RMSNorm and a linear head, tied or not. No biases, no position table (RoPE), no dropout.
 * With D = C / heads (even) and F = ffn_width, the parameter names are Hugging Face's, so such a
 * checkpoint maps one to one (HF's Linear weights are (out, in), as ours):
 *   model.embed_tokens.weight (V, C)
 *   model.layers.L.input_layernorm.weight (C)          model.layers.L.post_attention_layernorm.weight (C)
 *   model.layers.L.self_attn.q_proj.weight (heads*D, C) model.layers.L.self_attn.o_proj.weight (C, heads*D)
 *   model.layers.L.self_attn.k_proj.weight (kv_heads*D, C) and .v_proj.weight (kv_heads*D, C)
 *   model.layers.L.mlp.gate_proj.weight (F, C)  .up_proj.weight (F, C)  .down_proj.weight (C, F)
 *   model.norm.weight (C)                               lm_head.weight (V, C)  (absent when tied)
 *
 * One interface for both families: hp_gpt_config carries `family` (and Llama's keys), and every
 * hp_gpt_* function below (build, build_stage, init_param, n_params, train_flops_per_token,
 * config_check) dispatches on it, so the trainer, pipeline, compile driver, checkpoints and
 * benchmarks have no per-family branch. hp_gpt_config_from_model() makes it from the run config.
 */
#ifndef HP_NN_H
#define HP_NN_H

#include "hp/ir.h"
#include "hp/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The decoder families (model.family in the run config). */
typedef enum hp_model_family {
    HP_MODEL_FAMILY_GPT2 = 0, /* the default: zero-initialized configs are GPT-2 */
    HP_MODEL_FAMILY_LLAMA,
    HP_MODEL_FAMILY_COUNT
} hp_model_family;

/* "gpt2", "llama"; "?" otherwise. */
const char *hp_model_family_name(hp_model_family f);

/* The decoder configuration of every family (named for its first one). Zero-initialized fields
 * not used by GPT-2 keep a GPT-2 config as it was. */
typedef struct hp_gpt_config {
    hp_model_family family;
    int vocab;      /* V: token vocabulary size */
    int context;    /* maximum sequence length (rows of wpe; llama: positions RoPE is used at) */
    int layers;     /* L */
    int heads;      /* H; width must be divisible by it */
    int width;      /* C */
    bool tied_head; /* lm_head shares wte.weight */
    /* Dropout probability in [0, 1) where GPT-2 drops (see hp_gpt_build); 0: none. Set it only for
     * a training graph: evaluation and generation graphs are built with 0. */
    float dropout;
    uint64_t seed;  /* run seed keying the dropout masks (unused without dropout) */
    /* llama only (ignored by gpt2): */
    int kv_heads;    /* key/value heads, dividing heads; 0: heads (multi-head attention) */
    int ffn_width;   /* F, the SwiGLU hidden width; 0: hp_llama_default_ffn_width(width) */
    float rope_base; /* RoPE base theta (> 1); 0: 10000 */
    float norm_eps;  /* RMSNorm epsilon (> 0); 0: 1e-5 */
    /* Mixture-of-Experts MLPs in the layers moe names (experts 0: none; hp/moe.h): in such a layer
     * blocks.L.mlp is hp_moe_build's layer (blocks.L.mlp.router.weight, .experts.fc.weight, ...)
     * instead of fc/proj. With moe.training (set it for a training graph only, like dropout) the
     * balancing losses, times moe.balance_loss, join the loss. */
    hp_moe_config moe;
    /* Causal load balancing for ring attention over cp_balance ranks (strategy.ring_load_balance;
     * 0 or 1: none): the graph's sequence is in hp_ring_balance_positions(seq, cp_balance) order
     * (the caller permutes the tokens and targets the same way), each row's global position comes
     * from the input "positions" (hp_gpt.positions: gpt2's wpe rows are gathered by it, llama's
     * RoPE rotates by it) and attention is hp_attention_balanced. The loss, a mean over tokens, is
     * the natural order's. Such a graph runs only partitioned with ring attention over that many
     * ranks. */
    int cp_balance;
} hp_gpt_config;

/* The model part of a run config as a decoder config (no dropout: hp_gpt_build's callers set it
 * in a training graph). Family names other than "llama" give GPT-2 (the config loader refuses
 * them before). */
struct hp_model_config; /* hp/config.h */
hp_gpt_config hp_gpt_config_from_model(const struct hp_model_config *m);

/* Llama's SwiGLU width when none is given: 8/3 C rounded up to a multiple of 256 (Meta's Llama
 * reference code, multiple_of = 256). */
int hp_llama_default_ffn_width(int width);

/* The name of the token embedding (the parameter a tied head shares): "wte.weight" or
 * "model.embed_tokens.weight". */
const char *hp_gpt_embedding_name(const hp_gpt_config *c);

/* Checks the shape parameters; HP_STATUS_INVALID_ARGUMENT naming the bad value. */
hp_status hp_gpt_config_check(const hp_gpt_config *c);

/* The tensors of a built GPT graph. */
typedef struct hp_gpt {
    hp_gpt_config cfg;
    int batch, seq;
    hp_tid tokens;  /* input (batch, seq) i32 */
    hp_tid targets; /* input (batch, seq) i32, or HP_TID_NONE without loss */
    hp_tid logits;  /* (batch, seq, V) */
    hp_tid loss;    /* scalar mean cross-entropy, or HP_TID_NONE without loss */
    hp_tid step;    /* input "opt.step" () f32, the 1-based optimizer step keying the dropout
                     * masks (hp_train_step_build feeds the same input to AdamW); HP_TID_NONE
                     * without dropout */
    hp_tid x_in;    /* a pipeline stage without the embedding: input "stage.x" (batch, seq, C) f32,
                     * the previous stage's output; else HP_TID_NONE */
    hp_tid x_out;   /* a stage without the head: its output (batch, seq, C); else HP_TID_NONE */
    hp_tid x_embed; /* a graph with the embedding: the embeddings' output entering the first block (or
                     * the head), (batch, seq, C) f32; else HP_TID_NONE */
    hp_tid positions; /* cfg.cp_balance > 1: input "positions" (batch, seq) i32, the global position of
                       * each row (hp_ring_balance_positions); else HP_TID_NONE */
} hp_gpt;

/* The part of the model one pipeline stage computes: blocks [first_layer, last_layer), with the
 * embeddings in front (the first stage) and the final LayerNorm, head and loss behind (the last). */
typedef struct hp_gpt_stage {
    int first_layer, last_layer;
    bool embedding, head;
} hp_gpt_stage;

/*
 * Builds the forward graph for (batch, seq) tokens, seq <= context, appending to `g` (normally
 * empty). With `with_loss`, adds the targets input and the loss. With c->dropout > 0, adds the
 * `step` input and inverted dropout (hp_dropout) where GPT-2 applies it outside attention: on the
 * embedding sum ("drop") and on the attention and MLP output projections before their residual
 * adds ("blocks.L.attn.dropout", "blocks.L.mlp.dropout"); each site's mask key is
 * hp_rng_hash(site name) mixed with c->seed. Dropout on the attention probabilities is not applied:
 * the fused attention kernel never forms them. Errors: bad config or seq; the graph's sticky error.
 */
hp_status hp_gpt_build(hp_graph *g, const hp_gpt_config *c, int batch, int seq, bool with_loss, hp_gpt *out);

/*
 * Builds one pipeline stage of the model (hp_gpt_build is the stage with every layer, the
 * embedding and the head). A stage without the embedding reads input "stage.x" (batch, seq, C);
 * one without the head leaves its activation in out->x_out (logits and loss HP_TID_NONE). With a
 * tied head, a last stage without the embedding has its own parameter "wte.weight" (the pipeline
 * keeps the two copies equal by summing their gradients, Megatron's shared embedding). Parameter
 * names are the whole model's (blocks.L with the global L), so checkpoints and strategies match.
 * Errors: hp_gpt_build's; HP_STATUS_INVALID_ARGUMENT for a layer range outside [0, layers) or an
 * empty stage.
 */
hp_status hp_gpt_build_stage(hp_graph *g, const hp_gpt_config *c, const hp_gpt_stage *s, int batch, int seq,
                             bool with_loss, hp_gpt *out);

/* The tensors of a decoder graph built for generation with a KV cache (hp_gpt_build_decode). */
typedef struct hp_gpt_decode {
    hp_gpt_config cfg;
    int slots, seq, t_max;
    hp_tid tokens;       /* input "tokens" (slots, seq) i32 */
    hp_tid positions;    /* input "positions" (slots, seq) i32: each row's position in its sequence,
                          * -1 for a padding row (see hp_attention_cache) */
    hp_tid position_ids; /* gpt2: input "position_ids" (slots, seq) i32, the rows of wpe.weight to add
                          * (positions with padding rows set to 0); llama: HP_TID_NONE (RoPE reads
                          * positions) */
    hp_tid logits;       /* (slots, seq, V) */
} hp_gpt_decode;

/*
 * Builds the model of `c` (either family, the parameters of hp_gpt_build by name and shape) for
 * incremental decoding with a KV cache: `slots` sequences, `seq` new tokens per sequence per run
 * (the prompt for the prefill program, 1 for the decode program), a cache of t_max positions per
 * sequence. Every layer L reads and appends to the STATE tensors "kv.L.k" and "kv.L.v", each
 * (slots, kv_heads, t_max, D) f32 (kv_heads = heads for gpt2), through hp_attention_cache; a program
 * built with a state store binds them by name, so a prefill and a decode program over the same
 * store share one cache (and the weights). Learned positions (gpt2) are looked up at position_ids,
 * RoPE (llama) is applied at `positions` (hp_rope_at). No dropout, no loss.
 * Errors: hp_gpt_config_check's; HP_STATUS_INVALID_ARGUMENT for slots < 1, t_max outside
 * [1, context], seq outside [1, t_max] or a dropout > 0 (each named); the graph's sticky error.
 */
hp_status hp_gpt_build_decode(hp_graph *g, const hp_gpt_config *c, int slots, int seq, int t_max, hp_gpt_decode *out);

/*
 * Initialisation of one parameter by name. Llama: every matrix ~ N(0, 0.02) (Hugging Face's
 * initializer_range; no residual scaling), RMSNorm weights 1.
 * GPT-2: weights ~ N(0, 0.02) with residual output
 * projections (attn.proj, mlp.proj) ~ N(0, 0.02 / sqrt(2 L)), LayerNorm weights 1, biases 0.
 * Values are a pure function of (seed, name, element index), so a shard can be initialised alone:
 * `first` is the flat index of data[0] within the full tensor and `n` the element count.
 * Errors: HP_STATUS_NOT_FOUND for a name that is not a GPT parameter.
 */
hp_status hp_gpt_init_param(const hp_gpt_config *c, const char *name, uint64_t seed, int64_t first,
                            int64_t n, float *data);

/*
 * hp_gpt_init_param for the box [start, start + len) of a parameter of logical `shape` (a sharded
 * parameter's block, hp_layout_slice_of): `data` receives prod(len) values, row-major over the box,
 * each the value the whole tensor has at that index. Errors: hp_gpt_init_param's.
 */
hp_status hp_gpt_init_block(const hp_gpt_config *c, const char *name, uint64_t seed, const hp_shape *shape,
                            const int64_t *start, const int64_t *len, float *data);

/* Parameter count (elements), with the tied head counted once. Llama: V C (1 + !tied) + C +
 * L (2 C + C (2 H D + 2 KV D) + 3 C F). */
int64_t hp_gpt_n_params(const hp_gpt_config *c);

/*
 * Training FLOPs per token, nanoGPT's estimate_mfu (Karpathy; PaLM paper appendix B):
 * 6 N + 12 L C T, with N the parameters that take part in matrix products (all but the position
 * table, and but the token table when the head is untied, as it is then only looked up). The attention term
 * counts the full (unmasked) T x T products, as PyTorch's and nanoGPT's reports do. Llama: the
 * same with N all parameters but an untied embedding table and 12 L (heads D) T for attention.
 */
double hp_gpt_train_flops_per_token(const hp_gpt_config *c, int seq);

#ifdef __cplusplus
}
#endif
#endif
