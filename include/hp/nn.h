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
 */
#ifndef HP_NN_H
#define HP_NN_H

#include "hp/ir.h"
#include "hp/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_gpt_config {
    int vocab;      /* V: token vocabulary size */
    int context;    /* maximum sequence length (rows of wpe) */
    int layers;     /* L */
    int heads;      /* H; width must be divisible by it */
    int width;      /* C */
    bool tied_head; /* lm_head shares wte.weight */
    /* Dropout probability in [0, 1) where GPT-2 drops (see hp_gpt_build); 0: none. Set it only for
     * a training graph: evaluation and generation graphs are built with 0. */
    float dropout;
    uint64_t seed;  /* run seed keying the dropout masks (unused without dropout) */
    /* Mixture-of-Experts MLPs in the layers moe names (experts 0: none; hp/moe.h): in such a layer
     * blocks.L.mlp is hp_moe_build's layer (blocks.L.mlp.router.weight, .experts.fc.weight, ...)
     * instead of fc/proj. With moe.training (set it for a training graph only, like dropout) the
     * balancing losses, times moe.balance_loss, join the loss. */
    hp_moe_config moe;
} hp_gpt_config;

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

/*
 * GPT-2 initialisation of one parameter by name: weights ~ N(0, 0.02) with residual output
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

/* Parameter count (elements), with the tied head counted once. */
int64_t hp_gpt_n_params(const hp_gpt_config *c);

/*
 * Training FLOPs per token, nanoGPT's estimate_mfu (Karpathy; PaLM paper appendix B):
 * 6 N + 12 L C T, with N the parameters that take part in matrix products (all but the position
 * table, and but the token table when the head is untied, as it is then only looked up). The attention term
 * counts the full (unmasked) T x T products, as PyTorch's and nanoGPT's reports do.
 */
double hp_gpt_train_flops_per_token(const hp_gpt_config *c, int seq);

#ifdef __cplusplus
}
#endif
#endif
