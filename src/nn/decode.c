/*
 * The decoder of hp/nn.h for incremental decoding with a KV cache (hp_gpt_build_decode): the same
 * parameters (names, shapes, computation) as hp_gpt_build, with each layer's attention replaced by
 * ATTENTION_CACHE over the STATE tensors kv.L.k / kv.L.v and positions taken from an input, so one
 * builder makes both the prefill program (seq = the prompt length) and the decode program (seq = 1).
 */
#include "nn/nn_internal.h"

#include "hp/ops.h"

#include <stdio.h>
#include <string.h>

static int kv_heads_of(const hp_gpt_config *c) {
    return c->family == HP_MODEL_FAMILY_LLAMA && c->kv_heads ? c->kv_heads : c->heads;
}

/* x W^T (+ b) with `name`.weight (out, in) and, when `bias`, `name`.bias (out). */
static hp_tid linear(hp_graph *g, const char *name, hp_tid x, int64_t in, int64_t out, bool bias) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(out, in));
    hp_tid b = bias ? hp_param(g, "bias", HP_SHAPE(out)) : HP_TID_NONE;
    hp_graph_pop_scope(g);
    return hp_linear(g, x, w, b);
}

static hp_tid norm(hp_graph *g, const hp_gpt_config *c, const char *name, hp_tid x) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(c->width));
    hp_tid y;
    if (c->family == HP_MODEL_FAMILY_LLAMA) {
        y = hp_rmsnorm(g, x, w, c->norm_eps != 0.0f ? c->norm_eps : 1e-5f);
    } else {
        hp_tid b = hp_param(g, "bias", HP_SHAPE(c->width));
        y = hp_layernorm(g, x, w, b, 1e-5f);
    }
    hp_graph_pop_scope(g);
    return y;
}

/* The cache pair of layer l (global names, outside any scope). */
static void cache_of(hp_graph *g, const hp_gpt_decode *m, int l, hp_tid *kc, hp_tid *vc) {
    const hp_gpt_config *c = &m->cfg;
    int64_t KV = kv_heads_of(c), D = c->width / c->heads;
    hp_shape s = HP_SHAPE(m->slots, KV, m->t_max, D);
    char name[64];
    snprintf(name, sizeof name, "kv.%d.k", l);
    *kc = hp_leaf(g, name, HP_TENSOR_KIND_STATE, HP_DTYPE_F32, s);
    snprintf(name, sizeof name, "kv.%d.v", l);
    *vc = hp_leaf(g, name, HP_TENSOR_KIND_STATE, HP_DTYPE_F32, s);
}

static hp_tid gpt2_layer(hp_graph *g, const hp_gpt_decode *m, int l, hp_tid x) {
    const int64_t C = m->cfg.width;
    hp_tid kc, vc;
    cache_of(g, m, l, &kc, &vc);
    hp_graph_push_scopef(g, "blocks.%d", l);
    hp_tid h = norm(g, &m->cfg, "ln1", x);
    hp_graph_push_scope(g, "attn");
    hp_tid q = linear(g, "q", h, C, C, true);
    hp_tid k = linear(g, "k", h, C, C, true);
    hp_tid v = linear(g, "v", h, C, C, true);
    hp_tid a = hp_attention_cache(g, q, k, v, kc, vc, m->positions, m->cfg.heads, m->cfg.heads);
    x = hp_add(g, x, linear(g, "proj", a, C, C, true));
    hp_graph_pop_scope(g);
    h = norm(g, &m->cfg, "ln2", x);
    hp_graph_push_scope(g, "mlp");
    if (hp_moe_config_layer(&m->cfg.moe, l)) { /* a Mixture-of-Experts MLP (hp/moe.h), as hp_gpt_build */
        hp_moe_config mc = m->cfg.moe;
        mc.training = false; /* no balancing loss, no router bias update when generating */
        hp_moe_layer ml;
        h = hp_moe_build(g, h, &mc, NULL, &ml) == HP_STATUS_OK ? ml.y : HP_TID_NONE;
    } else {
        h = linear(g, "proj", hp_gelu(g, linear(g, "fc", h, C, 4 * C, true)), 4 * C, C, true);
    }
    x = hp_add(g, x, h);
    hp_graph_pop_scope(g);
    hp_graph_pop_scope(g);
    return x;
}

static hp_tid llama_layer(hp_graph *g, const hp_gpt_decode *m, int l, hp_tid x) {
    const hp_gpt_config *c = &m->cfg;
    const int64_t C = c->width, H = c->heads, KV = kv_heads_of(c), D = C / H;
    const int64_t F = c->ffn_width ? c->ffn_width : hp_llama_default_ffn_width(c->width);
    const float base = c->rope_base != 0.0f ? c->rope_base : 10000.0f;
    hp_tid kc, vc;
    cache_of(g, m, l, &kc, &vc);
    hp_graph_push_scopef(g, "model.layers.%d", l);
    hp_tid h = norm(g, c, "input_layernorm", x);
    hp_graph_push_scope(g, "self_attn");
    hp_tid q = hp_rope_at(g, linear(g, "q_proj", h, C, H * D, false), m->positions, (int)H, base);
    hp_tid k = hp_rope_at(g, linear(g, "k_proj", h, C, KV * D, false), m->positions, (int)KV, base);
    hp_tid v = linear(g, "v_proj", h, C, KV * D, false);
    hp_tid a = hp_attention_cache(g, q, k, v, kc, vc, m->positions, (int)H, (int)KV);
    x = hp_add(g, x, linear(g, "o_proj", a, H * D, C, false));
    hp_graph_pop_scope(g);
    h = norm(g, c, "post_attention_layernorm", x);
    hp_graph_push_scope(g, "mlp");
    if (hp_moe_config_layer(&c->moe, l)) { /* SwiGLU experts, as the training graph's (src/nn/llama.c) */
        hp_moe_config mc = c->moe;
        mc.expert = HP_MOE_EXPERT_SWIGLU;
        mc.training = false;
        hp_moe_layer ml;
        x = hp_add(g, x, hp_moe_build(g, h, &mc, NULL, &ml) == HP_STATUS_OK ? ml.y : HP_TID_NONE);
    } else {
        hp_tid sw = hp_swiglu(g, linear(g, "gate_proj", h, C, F, false), linear(g, "up_proj", h, C, F, false));
        x = hp_add(g, x, linear(g, "down_proj", sw, F, C, false));
    }
    hp_graph_pop_scope(g);
    hp_graph_pop_scope(g);
    return x;
}

hp_status hp_gpt_build_decode(hp_graph *g, const hp_gpt_config *c, int slots, int seq, int t_max, hp_gpt_decode *out) {
    HP_CHECK(hp_gpt_config_check(c));
    if (slots < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "decode: slots must be >= 1, got %d", slots);
    if (t_max < 1 || t_max > c->context)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "decode: cache length %d is outside [1, context %d]", t_max,
                        c->context);
    if (seq < 1 || seq > t_max)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "decode: %d tokens per run is outside [1, cache length %d]", seq,
                        t_max);
    if (c->dropout != 0.0f)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "decode: dropout %g in a generation graph (set it to 0)",
                        (double)c->dropout);
    memset(out, 0, sizeof *out);
    out->cfg = *c;
    out->slots = slots;
    out->seq = seq;
    out->t_max = t_max;
    const int64_t C = c->width, V = c->vocab;
    bool llama = c->family == HP_MODEL_FAMILY_LLAMA;
    out->tokens = hp_input(g, "tokens", HP_DTYPE_I32, HP_SHAPE(slots, seq));
    out->positions = hp_input(g, "positions", HP_DTYPE_I32, HP_SHAPE(slots, seq));
    out->position_ids = llama ? HP_TID_NONE : hp_input(g, "position_ids", HP_DTYPE_I32, HP_SHAPE(slots, seq));
    hp_tid emb = hp_param(g, hp_gpt_embedding_name(c), HP_SHAPE(V, C)), x = hp_embedding(g, emb, out->tokens);
    if (!llama) {
        hp_tid wpe = hp_param(g, "wpe.weight", HP_SHAPE(c->context, C));
        x = hp_add(g, x, hp_embedding(g, wpe, out->position_ids)); /* (S, T, C) + (S, T, C) */
    }
    for (int l = 0; l < c->layers; l++) x = llama ? llama_layer(g, out, l, x) : gpt2_layer(g, out, l, x);
    x = norm(g, c, llama ? "model.norm" : "ln_f", x);
    hp_tid head = c->tied_head ? emb : hp_param(g, "lm_head.weight", HP_SHAPE(V, C));
    out->logits = hp_linear(g, x, head, HP_TID_NONE);
    return hp_graph_status(g);
}
