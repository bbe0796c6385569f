/* The multimodal captioning model on the IR: two ViT encoders and a prefix-fused decoder
 * (hp/multimodal.h for the architecture and the parameter names). */
#include "hp/multimodal.h"

#include "hp/ops.h"
#include "hp/rng.h"

#include <stdio.h>
#include <string.h>

hp_mm_config hp_mm_config_from_run(const hp_run_config *cfg) {
    const hp_multimodal_config *m = &cfg->model.multimodal;
    hp_mm_config c = {.heads = (int)cfg->model.heads, .dec_layers = (int)cfg->model.layers,
                      .width = (int)cfg->model.width, .image_rows = 28, .image_cols = 28};
    c.enc[0] = (hp_mm_encoder_config){(int)m->patch_a, (int)m->layers_a, (int)m->width_a};
    c.enc[1] = (hp_mm_encoder_config){(int)m->patch_b, (int)m->layers_b, (int)m->width_b};
    return c;
}

hp_status hp_mm_config_check(const hp_mm_config *c) {
    if (c->heads < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal heads %d must be >= 1", c->heads);
    if (c->dec_layers < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal decoder layers %d must be >= 1", c->dec_layers);
    if (c->width < 1 || c->width % c->heads)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal decoder width %d is not a positive multiple of heads %d",
                        c->width, c->heads);
    for (int e = 0; e < 2; e++) {
        const hp_mm_encoder_config *x = &c->enc[e];
        const char *n = e ? "b" : "a";
        if (x->patch < 1 || c->image_rows % x->patch || c->image_cols % x->patch)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.multimodal.patch_%s %d does not divide the %dx%d images", n,
                            x->patch, c->image_rows, c->image_cols);
        if (x->layers < 1)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.multimodal.layers_%s %d must be >= 1", n, x->layers);
        if (x->width < 1 || x->width % c->heads)
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "model.multimodal.width_%s %d is not a positive multiple of model.heads %d", n, x->width,
                            c->heads);
    }
    return HP_STATUS_OK;
}

int hp_mm_tokens(const hp_mm_config *c, int e) {
    return (c->image_rows / c->enc[e].patch) * (c->image_cols / c->enc[e].patch);
}

int hp_mm_seq(const hp_mm_config *c) { return hp_mm_tokens(c, 0) + hp_mm_tokens(c, 1) + HP_MM_CAPTION; }

static hp_tid linear_layer(hp_graph *g, const char *name, hp_tid x, int64_t in, int64_t out) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(out, in));
    hp_tid b = hp_param(g, "bias", HP_SHAPE(out));
    if (b != HP_TID_NONE) hp_graph_tensor(g, b)->no_weight_decay = true;
    hp_graph_pop_scope(g);
    return hp_linear(g, x, w, b);
}

static hp_tid layernorm_layer(hp_graph *g, const char *name, hp_tid x, int64_t c) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(c));
    hp_tid b = hp_param(g, "bias", HP_SHAPE(c));
    if (w != HP_TID_NONE) hp_graph_tensor(g, w)->no_weight_decay = true;
    if (b != HP_TID_NONE) hp_graph_tensor(g, b)->no_weight_decay = true;
    hp_graph_pop_scope(g);
    return hp_layernorm(g, x, w, b, 1e-5f);
}

/* GPT-2's pre-LayerNorm block over x (B, T, C), named blocks.L in the current scope. */
static hp_tid block(hp_graph *g, int l, hp_tid x, int64_t C, int heads, bool causal) {
    hp_graph_push_scopef(g, "blocks.%d", l);
    hp_tid h = layernorm_layer(g, "ln1", x, C);
    hp_graph_push_scope(g, "attn");
    hp_tid q = linear_layer(g, "q", h, C, C), k = linear_layer(g, "k", h, C, C), v = linear_layer(g, "v", h, C, C);
    x = hp_add(g, x, linear_layer(g, "proj", hp_attention(g, q, k, v, heads, causal), C, C));
    hp_graph_pop_scope(g);
    h = layernorm_layer(g, "ln2", x, C);
    hp_graph_push_scope(g, "mlp");
    x = hp_add(g, x, linear_layer(g, "proj", hp_gelu(g, linear_layer(g, "fc", h, C, 4 * C)), 4 * C, C));
    hp_graph_pop_scope(g);
    hp_graph_pop_scope(g);
    return x;
}

hp_status hp_mm_build_encoder(hp_graph *g, const hp_mm_config *c, int e, int batch, hp_mm_encoder *out) {
    HP_CHECK(hp_mm_config_check(c));
    if (e < 0 || e > 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "encoder index %d is not 0 (a) or 1 (b)", e);
    if (batch < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "batch %d must be >= 1", batch);
    const hp_mm_encoder_config *x = &c->enc[e];
    int64_t N = hp_mm_tokens(c, e), P = (int64_t)x->patch * x->patch, W = x->width;
    hp_graph_push_scope(g, e ? "enc_b" : "enc_a");
    out->patches = hp_input(g, "patches", HP_DTYPE_F32, HP_SHAPE(batch, N, P));
    hp_tid h = linear_layer(g, "patch", out->patches, P, W);
    hp_graph_push_scope(g, "pos");
    hp_tid pos = hp_param(g, "weight", HP_SHAPE(N, W));
    hp_graph_pop_scope(g);
    h = hp_add(g, h, pos);
    for (int l = 0; l < x->layers; l++) h = block(g, l, h, W, c->heads, false);
    h = layernorm_layer(g, "ln_f", h, W);
    out->out = linear_layer(g, "out", h, W, c->width);
    hp_graph_pop_scope(g);
    return hp_graph_status(g);
}

hp_status hp_mm_build_decoder(hp_graph *g, const hp_mm_config *c, int batch, const hp_tid prefix[2], bool with_loss,
                              hp_mm_decoder *out) {
    HP_CHECK(hp_mm_config_check(c));
    if (batch < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "batch %d must be >= 1", batch);
    const int64_t C = c->width, T = HP_MM_CAPTION, S = hp_mm_seq(c);
    for (int e = 0; e < 2; e++) {
        out->prefix[e] = prefix && prefix[e] != HP_TID_NONE
                             ? prefix[e]
                             : hp_input(g, e ? "dec.prefix_b" : "dec.prefix_a", HP_DTYPE_F32,
                                        HP_SHAPE(batch, hp_mm_tokens(c, e), C));
    }
    hp_graph_push_scope(g, "dec");
    out->tokens = hp_input(g, "tokens", HP_DTYPE_I32, HP_SHAPE(batch, T));
    hp_graph_set_abs_name(g, out->tokens, "tokens");
    out->targets = HP_TID_NONE;
    if (with_loss) {
        out->targets = hp_input(g, "targets", HP_DTYPE_I32, HP_SHAPE(batch, T));
        hp_graph_set_abs_name(g, out->targets, "targets");
    }
    hp_graph_push_scope(g, "wte");
    hp_tid wte = hp_param(g, "weight", HP_SHAPE(HP_MM_VOCAB, C));
    hp_graph_pop_scope(g);
    hp_graph_push_scope(g, "wpe");
    hp_tid wpe = hp_param(g, "weight", HP_SHAPE(S, C));
    hp_graph_pop_scope(g);
    hp_tid parts[3] = {out->prefix[0], out->prefix[1], hp_embedding(g, wte, out->tokens)};
    hp_tid x = hp_add(g, hp_concat(g, parts, 3, 1), wpe); /* (B, S, C) + (S, C) */
    for (int l = 0; l < c->dec_layers; l++) x = block(g, l, x, C, c->heads, true);
    x = layernorm_layer(g, "ln_f", hp_slice(g, x, 1, S - T, T), C); /* the caption positions only */
    hp_graph_push_scope(g, "lm_head");
    hp_tid head = hp_param(g, "weight", HP_SHAPE(HP_MM_VOCAB, C));
    hp_graph_pop_scope(g);
    out->logits = hp_linear(g, x, head, HP_TID_NONE);
    out->loss = with_loss ? hp_cross_entropy(g, out->logits, out->targets) : HP_TID_NONE;
    hp_graph_pop_scope(g);
    if (out->loss != HP_TID_NONE) hp_graph_set_abs_name(g, out->loss, "loss");
    return hp_graph_status(g);
}

hp_status hp_mm_build(hp_graph *g, const hp_mm_config *c, int batch, bool with_loss, hp_mm_model *out) {
    HP_CHECK(hp_mm_build_encoder(g, c, 0, batch, &out->enc[0]));
    HP_CHECK(hp_mm_build_encoder(g, c, 1, batch, &out->enc[1]));
    hp_tid prefix[2] = {out->enc[0].out, out->enc[1].out};
    return hp_mm_build_decoder(g, c, batch, prefix, with_loss, &out->dec);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

hp_status hp_mm_init_param(const char *name, uint64_t seed, int64_t first, int64_t n, float *data) {
    bool norm = strstr(name, ".ln") != NULL;
    if (ends_with(name, ".bias") || (norm && ends_with(name, ".weight"))) {
        float v = norm && ends_with(name, ".weight") ? 1.0f : 0.0f;
        for (int64_t i = 0; i < n; i++) data[i] = v;
        return HP_STATUS_OK;
    }
    if (!ends_with(name, ".weight") || (strncmp(name, "enc_a.", 6) && strncmp(name, "enc_b.", 6) && strncmp(name, "dec.", 4)))
        return hp_error(HP_STATUS_NOT_FOUND, "'%s' is not a multimodal model parameter", name);
    uint64_t key = hp_rng_hash(name) ^ (seed * 0x9e3779b97f4a7c15ull);
    for (int64_t i = 0; i < n; i++) data[i] = 0.02f * hp_rng_normal(key, (uint64_t)(first + i));
    return HP_STATUS_OK;
}
