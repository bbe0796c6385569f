/* GPT-2-style decoder built on the IR (see hp/nn.h for the architecture and parameter names). */
#include "nn/nn_internal.h"

#include "hp/config.h"
#include "hp/ops.h"
#include "hp/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *hp_model_family_name(hp_model_family f) {
    return f == HP_MODEL_FAMILY_GPT2 ? "gpt2" : f == HP_MODEL_FAMILY_LLAMA ? "llama" : "?";
}

hp_gpt_config hp_gpt_config_from_model(const hp_model_config *m) {
    bool llama = strcmp(m->family, "llama") == 0;
    hp_gpt_config c = {.family = llama ? HP_MODEL_FAMILY_LLAMA : HP_MODEL_FAMILY_GPT2, .vocab = (int)m->vocab,
                       .context = (int)m->context, .layers = (int)m->layers, .heads = (int)m->heads,
                       .width = (int)m->width, .tied_head = m->tied_head, .moe = m->moe};
    if (llama) {
        c.kv_heads = (int)m->kv_heads;
        c.ffn_width = (int)m->ffn_width;
        c.rope_base = (float)m->rope_base;
        c.norm_eps = (float)m->norm_eps;
    }
    return c;
}

const char *hp_gpt_embedding_name(const hp_gpt_config *c) {
    return c->family == HP_MODEL_FAMILY_LLAMA ? "model.embed_tokens.weight" : "wte.weight";
}

hp_status hp_gpt_config_check(const hp_gpt_config *c) {
    if (c->cp_balance < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "cp_balance must be >= 0 (ranks of the load-balanced ring), got %d",
                        c->cp_balance);
    if (c->family == HP_MODEL_FAMILY_LLAMA) return hp__llama_config_check(c);
    if (c->family != HP_MODEL_FAMILY_GPT2)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model family %d is not gpt2 or llama", (int)c->family);
    if (c->vocab < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.vocab must be >= 1, got %d", c->vocab);
    if (c->context < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.context must be >= 1, got %d", c->context);
    if (c->layers < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.layers must be >= 1, got %d", c->layers);
    if (c->heads < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.heads must be >= 1, got %d", c->heads);
    if (c->width < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.width must be >= 1, got %d", c->width);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.dropout must be in [0, 1), got %g", (double)c->dropout);
    if (c->width % c->heads)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "model.width %d is not divisible by model.heads %d", c->width,
                        c->heads);
    return hp_moe_config_check(&c->moe, c->layers);
}

static hp_tid linear_layer(hp_graph *g, const char *name, hp_tid x, int64_t in, int64_t out) {
    hp_graph_push_scope(g, name);
    hp_tid w = hp_param(g, "weight", HP_SHAPE(out, in));
    hp_tid b = hp_param(g, "bias", HP_SHAPE(out));
    if (b != HP_TID_NONE) hp_graph_tensor(g, b)->no_weight_decay = true;
    hp_graph_pop_scope(g);
    return hp_linear(g, x, w, b);
}

/* Dropout at the site named by the current scope joined with `site` (a no-op without dropout). */
static hp_tid dropout_layer(hp_graph *g, const hp_gpt *m, const char *scope, const char *site, hp_tid x) {
    if (m->step == HP_TID_NONE) return x;
    char name[128];
    snprintf(name, sizeof name, "%s%s%s", scope, *scope ? "." : "", site);
    uint64_t key = hp_rng_hash(name) ^ (m->cfg.seed * 0x9e3779b97f4a7c15ull);
    return hp_dropout(g, x, m->step, m->cfg.dropout, key);
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

hp_status hp_gpt_build(hp_graph *g, const hp_gpt_config *c, int batch, int seq, bool with_loss, hp_gpt *out) {
    hp_gpt_stage whole = {.first_layer = 0, .last_layer = c->layers, .embedding = true, .head = true};
    return hp_gpt_build_stage(g, c, &whole, batch, seq, with_loss, out);
}

hp_status hp_gpt_build_stage(hp_graph *g, const hp_gpt_config *c, const hp_gpt_stage *s, int batch, int seq,
                             bool with_loss, hp_gpt *out) {
    if (c->family == HP_MODEL_FAMILY_LLAMA) return hp__llama_build_stage(g, c, s, batch, seq, with_loss, out);
    HP_CHECK(hp_gpt_config_check(c));
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
    out->positions = HP_TID_NONE;
    const int64_t C = c->width, V = c->vocab;
    out->tokens = s->embedding ? hp_input(g, "tokens", HP_DTYPE_I32, HP_SHAPE(batch, seq)) : HP_TID_NONE;
    out->targets = s->head && with_loss ? hp_input(g, "targets", HP_DTYPE_I32, HP_SHAPE(batch, seq)) : HP_TID_NONE;
    out->step = c->dropout > 0.0f ? hp_input(g, "opt.step", HP_DTYPE_F32, HP_SHAPE_SCALAR) : HP_TID_NONE;
    hp_tid x, wte = HP_TID_NONE;
    if (s->embedding) {
        wte = hp_param(g, "wte.weight", HP_SHAPE(V, C));
        hp_tid wpe = hp_param(g, "wpe.weight", HP_SHAPE(c->context, C));
        hp_tid pos;
        if (c->cp_balance > 1) { /* rows in the load-balanced order: wpe gathered by position */
            out->positions = hp_input(g, "positions", HP_DTYPE_I32, HP_SHAPE(batch, seq));
            pos = hp_embedding(g, wpe, out->positions); /* (B, T, C) */
        } else {
            pos = seq == c->context ? wpe : hp_slice(g, wpe, 0, 0, seq);
        }
        x = hp_add(g, hp_embedding(g, wte, out->tokens), pos); /* (B, T, C) + (T, C) or (B, T, C) */
        x = out->x_embed = dropout_layer(g, out, "", "drop", x);
    } else {
        x = out->x_in = hp_input(g, "stage.x", HP_DTYPE_F32, HP_SHAPE(batch, seq, C));
    }
    hp_tid aux = HP_TID_NONE; /* the sum of the MoE layers' balancing losses (training graphs) */
    for (int l = s->first_layer; l < s->last_layer; l++) {
        char blk[32];
        snprintf(blk, sizeof blk, "blocks.%d", l);
        hp_graph_push_scope(g, blk);
        hp_tid h = layernorm_layer(g, "ln1", x, C);
        hp_graph_push_scope(g, "attn");
        hp_tid q = linear_layer(g, "q", h, C, C);
        hp_tid k = linear_layer(g, "k", h, C, C);
        hp_tid v = linear_layer(g, "v", h, C, C);
        hp_tid a = c->cp_balance > 1 ? hp_attention_balanced(g, q, k, v, c->heads, c->heads, c->cp_balance)
                                     : hp_attention(g, q, k, v, c->heads, true);
        x = hp_add(g, x, dropout_layer(g, out, blk, "attn.dropout", linear_layer(g, "proj", a, C, C)));
        hp_graph_pop_scope(g);
        h = layernorm_layer(g, "ln2", x, C);
        hp_graph_push_scope(g, "mlp");
        if (hp_moe_config_layer(&c->moe, l)) { /* a Mixture-of-Experts MLP (hp/moe.h) */
            hp_moe_layer ml;
            if (hp_moe_build(g, h, &c->moe, NULL, &ml) == HP_STATUS_OK && ml.aux_loss != HP_TID_NONE)
                aux = aux == HP_TID_NONE ? ml.aux_loss : hp_add(g, aux, ml.aux_loss);
            h = ml.y;
        } else {
            h = linear_layer(g, "proj", hp_gelu(g, linear_layer(g, "fc", h, C, 4 * C)), 4 * C, C);
        }
        x = hp_add(g, x, dropout_layer(g, out, blk, "mlp.dropout", h));
        hp_graph_pop_scope(g);
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
    x = layernorm_layer(g, "ln_f", x, C);
    hp_tid head;
    if (c->tied_head)
        head = wte != HP_TID_NONE ? wte : hp_param(g, "wte.weight", HP_SHAPE(V, C)); /* a copy on the last stage */
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

hp_status hp_gpt_init_param(const hp_gpt_config *c, const char *name, uint64_t seed, int64_t first, int64_t n,
                            float *data) {
    if (c->family == HP_MODEL_FAMILY_LLAMA) return hp__llama_init_param(c, name, seed, first, n, data);
    float value = 0.0f, std = 0.0f;
    bool normal;
    if (strstr(name, "ln") && (ends_with(name, ".weight") || ends_with(name, ".bias"))) {
        normal = false;
        value = ends_with(name, ".weight") ? 1.0f : 0.0f;
    } else if (ends_with(name, ".bias")) {
        normal = false;
    } else if (ends_with(name, "proj.weight")) {
        normal = true;
        std = 0.02f / sqrtf(2.0f * (float)c->layers);
    } else if (ends_with(name, ".weight")) {
        normal = true;
        std = 0.02f;
    } else {
        return hp_error(HP_STATUS_NOT_FOUND, "'%s' is not a GPT parameter", name);
    }
    if (!normal) {
        for (int64_t i = 0; i < n; i++) data[i] = value;
        return HP_STATUS_OK;
    }
    uint64_t key = hp_rng_hash(name) ^ (seed * 0x9e3779b97f4a7c15ull);
    for (int64_t i = 0; i < n; i++) data[i] = std * hp_rng_normal(key, (uint64_t)(first + i));
    return HP_STATUS_OK;
}

hp_status hp_gpt_init_block(const hp_gpt_config *c, const char *name, uint64_t seed, const hp_shape *shape,
                            const int64_t *start, const int64_t *len, float *data) {
    int nd = shape->ndim;
    int64_t gstride[HP_MAX_DIMS], idx[HP_MAX_DIMS] = {0};
    hp_shape_strides(shape, gstride);
    int64_t rows = 1, inner = nd ? len[nd - 1] : 1;
    for (int d = 0; d < nd - 1; d++) rows *= len[d];
    for (int64_t r = 0; r < rows && inner > 0; r++) { /* one run of the innermost dim at a time */
        int64_t flat = nd ? start[nd - 1] : 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            idx[d] = rem % len[d];
            rem /= len[d];
        }
        for (int d = 0; d < nd - 1; d++) flat += (start[d] + idx[d]) * gstride[d];
        HP_CHECK(hp_gpt_init_param(c, name, seed, flat, inner, data + r * inner));
    }
    return HP_STATUS_OK;
}

int64_t hp_gpt_n_params(const hp_gpt_config *c) {
    if (c->family == HP_MODEL_FAMILY_LLAMA) return hp__llama_n_params(c);
    int64_t C = c->width, V = c->vocab, L = c->layers;
    int64_t block = 2 * C + 4 * (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
    int64_t moe = 0; /* MoE layers: the experts' parameters instead of the dense MLP's */
    for (int l = 0; l < c->layers; l++)
        if (hp_moe_config_layer(&c->moe, l)) moe += hp_moe_n_params(&c->moe, C) - (4 * C * C + 4 * C) - (4 * C * C + C);
    return V * C + (int64_t)c->context * C + L * block + moe + 2 * C + (c->tied_head ? 0 : V * C);
}

double hp_gpt_train_flops_per_token(const hp_gpt_config *c, int seq) {
    if (c->family == HP_MODEL_FAMILY_LLAMA) return hp__llama_train_flops_per_token(c, seq);
    /* parameters that take part in matrix products: not the position table, and not the token
     * table when it is only looked up (untied head) */
    double n = (double)(hp_gpt_n_params(c) - (int64_t)c->context * c->width -
                        (c->tied_head ? 0 : (int64_t)c->vocab * c->width));
    for (int l = 0; l < c->layers; l++) /* a MoE layer: only the parameters one token uses */
        if (hp_moe_config_layer(&c->moe, l))
            n -= (double)(hp_moe_n_params(&c->moe, c->width) - hp_moe_active_params(&c->moe, c->width));
    return 6.0 * n + 12.0 * c->layers * (double)c->width * seq;
}
