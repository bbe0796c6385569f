/* Llama-family decoder built on the IR (see hp/nn.h for the architecture and parameter names). */
#include "nn/nn_internal.h"

#include "hp/moe.h"
#include "hp/ops.h"
#include "hp/rng.h"

#include <stdio.h>
#include <string.h>

int hp_llama_default_ffn_width(int width) {
    int64_t f = (8 * (int64_t)width + 2) / 3; /* ceil(8 C / 3) */
    f = (f + 255) / 256 * 256;
    return f > 2147483647 ? 2147483647 : (int)f;
}

static int kv_heads_of(const hp_gpt_config *c) { return c->kv_heads ? c->kv_heads : c->heads; }
static int ffn_of(const hp_gpt_config *c) { return c->ffn_width ? c->ffn_width : hp_llama_default_ffn_width(c->width); }
static float base_of(const hp_gpt_config *c) { return c->rope_base != 0.0f ? c->rope_base : 10000.0f; }
static float eps_of(const hp_gpt_config *c) { return c->norm_eps != 0.0f ? c->norm_eps : 1e-5f; }
/* The family's MoE layers have SwiGLU experts (Mixtral, Qwen-MoE). */
static hp_moe_config moe_of(const hp_gpt_config *c) {
    hp_moe_config m = c->moe;
    m.expert = HP_MOE_EXPERT_SWIGLU;
    return m;
}

hp_status hp__llama_config_check(const hp_gpt_config *c) {
    if (c->vocab < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.vocab must be >= 1, got %d", c->vocab);
    if (c->context < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.context must be >= 1, got %d", c->context);
    if (c->layers < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.layers must be >= 1, got %d", c->layers);
    if (c->heads < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.heads must be >= 1, got %d", c->heads);
    if (c->width < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.width must be >= 1, got %d", c->width);
    if (c->width % c->heads || (c->width / c->heads) % 2)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "model.width %d must be model.heads %d times an even head dim (RoPE rotates pairs)", c->width,
                        c->heads);
    if (c->kv_heads < 0 || c->heads % kv_heads_of(c))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.kv_heads %d does not divide model.heads %d", c->kv_heads,
                        c->heads);
    if (c->ffn_width < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.ffn_width must be >= 0, got %d", c->ffn_width);
    if (!(base_of(c) > 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.rope_base must be > 1, got %g", (double)c->rope_base);
    if (!(eps_of(c) > 0.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.norm_eps must be > 0, got %g", (double)c->norm_eps);
    if (c->dropout != 0.0f)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.dropout %g: the llama family has no dropout",
                        (double)c->dropout);
    hp_moe_config m = moe_of(c);
    return hp_moe_config_check(&m, c->layers);
}

/* y = x W^T with W = `name`.weight (out, in), no bias. */
static hp_tid proj(hp_graph *g, const char *name, hp_tid x, int64_t in, int64_t out) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(out, in));
    hp_graph_pop_scope(g);
    return hp_linear(g, x, w, HP_TID_NONE);
}

static hp_tid rmsnorm_layer(hp_graph *g, const char *name, hp_tid x, int64_t c, float eps) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(c));
    if (w != HP_TID_NONE) hp_graph_tensor(g, w)->no_weight_decay = true;
    hp_graph_pop_scope(g);
    return hp_rmsnorm(g, x, w, eps);
}

/* One decoder layer l, in scope model.layers.L; a MoE layer adds its balancing loss to *aux. With
 * positions (the load-balanced ring order), RoPE rotates each row by its global position. */
static hp_tid layer(hp_graph *g, const hp_gpt_config *c, int l, hp_tid x, hp_tid positions, hp_tid *aux) {
    const int64_t C = c->width, H = c->heads, KV = kv_heads_of(c), D = C / H, F = ffn_of(c);
    const float eps = eps_of(c);
    hp_tid h = rmsnorm_layer(g, "input_layernorm", x, C, eps);
    hp_graph_push_scope(g, "self_attn");
    hp_tid q = proj(g, "q_proj", h, C, H * D), k = proj(g, "k_proj", h, C, KV * D);
    if (positions != HP_TID_NONE) { /* the load-balanced order: each row at its global position */
        q = hp_rope_at(g, q, positions, (int)H, base_of(c));
        k = hp_rope_at(g, k, positions, (int)KV, base_of(c));
    } else {
        q = hp_rope(g, q, (int)H, base_of(c), 0);
        k = hp_rope(g, k, (int)KV, base_of(c), 0);
    }
    hp_tid v = proj(g, "v_proj", h, C, KV * D);
    hp_tid a = positions != HP_TID_NONE ? hp_attention_balanced(g, q, k, v, (int)H, (int)KV, c->cp_balance)
                                        : hp_attention_gqa(g, q, k, v, (int)H, (int)KV, true);
    x = hp_add(g, x, proj(g, "o_proj", a, H * D, C));
    hp_graph_pop_scope(g);
    h = rmsnorm_layer(g, "post_attention_layernorm", x, C, eps);
    hp_graph_push_scope(g, "mlp");
    if (hp_moe_config_layer(&c->moe, l)) { /* a Mixture-of-Experts MLP with SwiGLU experts (hp/moe.h) */
        hp_moe_config mc = moe_of(c);
        hp_moe_layer ml;
        if (hp_moe_build(g, h, &mc, NULL, &ml) == HP_STATUS_OK && ml.aux_loss != HP_TID_NONE)
            *aux = *aux == HP_TID_NONE ? ml.aux_loss : hp_add(g, *aux, ml.aux_loss);
        x = hp_add(g, x, ml.y);
    } else {
        hp_tid m = hp_swiglu(g, proj(g, "gate_proj", h, C, F), proj(g, "up_proj", h, C, F));
        x = hp_add(g, x, proj(g, "down_proj", m, F, C));
    }
    hp_graph_pop_scope(g);
    return x;
}

hp_status hp__llama_build_stage(hp_graph *g, const hp_gpt_config *c, const hp_gpt_stage *s, int batch, int seq,
                                bool with_loss, hp_gpt *out) {
    HP_CHECK(hp__llama_config_check(c));
    if (batch < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "batch must be >= 1, got %d", batch);
    if (seq < 1 || seq > c->context)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "sequence length %d is outside [1, context %d]", seq, c->context);
    if (s->first_layer < 0 || s->last_layer > c->layers || s->first_layer > s->last_layer)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "stage layers [%d, %d) are outside the model's [0, %d)",
                        s->first_layer, s->last_layer, c->layers);
    if (!s->embedding && !s->head && s->first_layer == s->last_layer)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "stage has no layers, no embedding and no head");
    memset(out, 0, sizeof *out);
    out->cfg = *c;
    out->batch = batch;
    out->seq = seq;
    out->x_in = out->x_out = out->x_embed = HP_TID_NONE;
    out->step = HP_TID_NONE;
    const int64_t C = c->width, V = c->vocab;
    out->tokens = s->embedding ? hp_input(g, "tokens", HP_DTYPE_I32, HP_SHAPE(batch, seq)) : HP_TID_NONE;
    out->targets = s->head && with_loss ? hp_input(g, "targets", HP_DTYPE_I32, HP_SHAPE(batch, seq)) : HP_TID_NONE;
    out->positions = c->cp_balance > 1 && s->first_layer < s->last_layer
                         ? hp_input(g, "positions", HP_DTYPE_I32, HP_SHAPE(batch, seq))
                         : HP_TID_NONE;
    hp_tid x, emb = HP_TID_NONE;
    if (s->embedding) {
        emb = hp_param(g, "model.embed_tokens.weight", HP_SHAPE(V, C));
        x = out->x_embed = hp_embedding(g, emb, out->tokens);
    } else {
        x = out->x_in = hp_input(g, "stage.x", HP_DTYPE_F32, HP_SHAPE(batch, seq, C));
    }
    hp_tid aux = HP_TID_NONE; /* the sum of the MoE layers' balancing losses (training graphs) */
    for (int l = s->first_layer; l < s->last_layer; l++) {
        hp_graph_push_scopef(g, "model.layers.%d", l);
        x = layer(g, c, l, x, out->positions, &aux);
        hp_graph_pop_scope(g);
    }
    if (aux != HP_TID_NONE && !(s->head && with_loss))
        return hp_error(HP_STATUS_UNSUPPORTED, "model.moe.balance_loss needs the loss in the same program as the MoE "
                        "layers (a pipeline stage without the head is not supported yet)");
    if (!s->head) {
        out->x_out = x;
        out->logits = out->loss = HP_TID_NONE;
        return hp_graph_status(g);
    }
    x = rmsnorm_layer(g, "model.norm", x, C, eps_of(c));
    hp_tid head;
    if (c->tied_head) /* a last stage without the embedding has its own copy (see hp_gpt_build_stage) */
        head = emb != HP_TID_NONE ? emb : hp_param(g, "model.embed_tokens.weight", HP_SHAPE(V, C));
    else
        head = hp_param(g, "lm_head.weight", HP_SHAPE(V, C));
    out->logits = hp_linear(g, x, head, HP_TID_NONE);
    out->loss = with_loss ? hp_cross_entropy(g, out->logits, out->targets) : HP_TID_NONE;
    if (out->loss != HP_TID_NONE && aux != HP_TID_NONE) /* Switch/GShard: loss + alpha * sum of the layers' aux */
        out->loss = hp_add(g, out->loss, hp_scale(g, aux, c->moe.balance_loss));
    if (out->loss != HP_TID_NONE) hp_graph_set_name(g, out->loss, "loss");
    return hp_graph_status(g);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

hp_status hp__llama_init_param(const hp_gpt_config *c, const char *name, uint64_t seed, int64_t first, int64_t n,
                               float *data) {
    (void)c;
    if (ends_with(name, "layernorm.weight") || strcmp(name, "model.norm.weight") == 0) {
        for (int64_t i = 0; i < n; i++) data[i] = 1.0f;
        return HP_STATUS_OK;
    }
    bool layer_param = strncmp(name, "model.layers.", 13) == 0;
    if (layer_param && ends_with(name, ".mlp.router.bias")) { /* sigmoid_bias router: starts unbiased */
        for (int64_t i = 0; i < n; i++) data[i] = 0.0f;
        return HP_STATUS_OK;
    }
    bool matrix = strcmp(name, "model.embed_tokens.weight") == 0 || strcmp(name, "lm_head.weight") == 0 ||
                  (layer_param && (ends_with(name, "proj.weight") || ends_with(name, ".mlp.router.weight")));
    if (!matrix) return hp_error(HP_STATUS_NOT_FOUND, "'%s' is not a llama parameter", name);
    uint64_t key = hp_rng_hash(name) ^ (seed * 0x9e3779b97f4a7c15ull);
    for (int64_t i = 0; i < n; i++) data[i] = 0.02f * hp_rng_normal(key, (uint64_t)(first + i));
    return HP_STATUS_OK;
}

int64_t hp__llama_n_params(const hp_gpt_config *c) {
    int64_t C = c->width, V = c->vocab, L = c->layers, H = c->heads, KV = kv_heads_of(c), D = C / H, F = ffn_of(c);
    int64_t block = 2 * C + C * (2 * H * D + 2 * KV * D) + 3 * C * F;
    hp_moe_config m = moe_of(c);
    int64_t moe = 0; /* MoE layers: the experts' parameters instead of the dense MLP's */
    for (int l = 0; l < c->layers; l++)
        if (hp_moe_config_layer(&m, l)) moe += hp_moe_n_params(&m, C) - 3 * C * F;
    return V * C * (c->tied_head ? 1 : 2) + C + L * block + moe;
}

double hp__llama_train_flops_per_token(const hp_gpt_config *c, int seq) {
    /* the embedding table takes part in a product only as a tied head; the norms are negligible */
    double n = (double)(hp__llama_n_params(c) - (c->tied_head ? 0 : (int64_t)c->vocab * c->width));
    hp_moe_config m = moe_of(c);
    for (int l = 0; l < c->layers; l++) /* a MoE layer: only the parameters one token uses */
        if (hp_moe_config_layer(&m, l))
            n -= (double)(hp_moe_n_params(&m, c->width) - hp_moe_active_params(&m, c->width));
    return 6.0 * n + 12.0 * c->layers * (double)(c->width / c->heads * c->heads) * seq;
}
