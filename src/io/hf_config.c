/* Hugging Face config.json for GPT-2, the Llama family and Mixtral: parsed and checked into an hp_hf_arch,
 * and written back (see hp/hf.h for the keys and what is refused). */
#include "hp/hf.h"
#include "io/hf_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hp_hf_family_name(hp_hf_family f) { return f == HP_HF_FAMILY_LLAMA ? "llama" : "gpt2"; }

#define INT_MAX_HF 2147483647.0

/* Our GPT's LayerNorm epsilon (src/nn/gpt.c) and the activations whose formula ours computes. */
#define GPT_LN_EPS 1e-5
static const char *const k_gelu_tanh[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

typedef struct ctx {
    const char *name; /* the file, for messages */
    const cJSON *root;
} ctx;

static const cJSON *item(const ctx *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    return cJSON_IsNull(v) ? NULL : v;
}

/* A size key: a whole number in [1, 2^31-1]. `alt` (may be NULL) is an older name for it. */
static hp_status size_key(const ctx *c, const char *key, const char *alt, bool required, int64_t dflt, int64_t *out) {
    const cJSON *v = item(c, key);
    const char *used = key;
    if (!v && alt) v = item(c, alt), used = alt;
    if (!v) {
        if (!required) {
            *out = dflt;
            return HP_STATUS_OK;
        }
        return hp_error(HP_STATUS_CORRUPT, "'%s': missing key '%s'%s%s%s", c->name, key, alt ? " (or '" : "",
                        alt ? alt : "", alt ? "')" : "");
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > INT_MAX_HF) {
        char *t = cJSON_PrintUnformatted(v);
        hp_status st = hp_error(HP_STATUS_CORRUPT, "'%s': '%s' must be a whole number in [1, 2147483647], got %s",
                                c->name, used, t ? t : "?");
        free(t);
        return st;
    }
    *out = (int64_t)v->valuedouble;
    return HP_STATUS_OK;
}

static hp_status num_key(const ctx *c, const char *key, double dflt, double lo, double hi, double *out) {
    const cJSON *v = item(c, key);
    if (!v) {
        *out = dflt;
        return HP_STATUS_OK;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        char *t = cJSON_PrintUnformatted(v);
        hp_status st = hp_error(HP_STATUS_CORRUPT, "'%s': '%s' must be a number in [%g, %g], got %s", c->name, key, lo,
                                hi, t ? t : "?");
        free(t);
        return st;
    }
    *out = v->valuedouble;
    return HP_STATUS_OK;
}

static hp_status bool_key(const ctx *c, const char *key, bool dflt, bool *out) {
    const cJSON *v = item(c, key);
    if (!v) {
        *out = dflt;
        return HP_STATUS_OK;
    }
    if (!cJSON_IsBool(v)) return hp_error(HP_STATUS_CORRUPT, "'%s': '%s' must be true or false", c->name, key);
    *out = cJSON_IsTrue(v);
    return HP_STATUS_OK;
}

static hp_status str_key(const ctx *c, const char *key, const char *dflt, const char **out) {
    const cJSON *v = item(c, key);
    if (!v) {
        *out = dflt;
        return HP_STATUS_OK;
    }
    if (!cJSON_IsString(v)) return hp_error(HP_STATUS_CORRUPT, "'%s': '%s' must be a string", c->name, key);
    *out = v->valuestring;
    return HP_STATUS_OK;
}

/* A boolean setting ours does not have: refused when it is set to `bad`. */
static hp_status refuse_bool(const ctx *c, const char *key, bool dflt, bool bad, const char *why) {
    bool v = dflt;
    HP_CHECK(bool_key(c, key, dflt, &v));
    if (v == bad)
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': '%s' is %s, which hp convert does not support (%s)", c->name, key,
                        bad ? "true" : "false", why);
    return HP_STATUS_OK;
}

static hp_status parse_gpt2(const ctx *c, hp_hf_arch *a) {
    a->family = HP_HF_FAMILY_GPT2;
    HP_CHECK(size_key(c, "n_embd", NULL, true, 0, &a->width));
    HP_CHECK(size_key(c, "n_head", NULL, true, 0, &a->heads));
    HP_CHECK(size_key(c, "n_layer", NULL, true, 0, &a->layers));
    HP_CHECK(size_key(c, "n_positions", "n_ctx", true, 0, &a->context));
    HP_CHECK(size_key(c, "vocab_size", "n_vocab", true, 0, &a->vocab));
    int64_t nv;
    if (item(c, "vocab_size") && item(c, "n_vocab") && size_key(c, "n_vocab", NULL, true, 0, &nv) == HP_STATUS_OK &&
        nv != a->vocab)
        return hp_error(HP_STATUS_CORRUPT, "'%s': 'vocab_size' %lld and 'n_vocab' %lld disagree", c->name,
                        (long long)a->vocab, (long long)nv);
    a->kv_heads = a->heads;
    HP_CHECK(size_key(c, "n_inner", NULL, false, 4 * a->width, &a->ffn_width));
    if (a->ffn_width != 4 * a->width)
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'n_inner' is %lld; our GPT's MLP is 4 x n_embd = %lld wide", c->name,
                        (long long)a->ffn_width, (long long)(4 * a->width));
    HP_CHECK(num_key(c, "layer_norm_epsilon", GPT_LN_EPS, 0.0, 1.0, &a->norm_eps));
    if (fabs(a->norm_eps - GPT_LN_EPS) > 1e-12)
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'layer_norm_epsilon' is %g; our GPT's LayerNorm uses %g", c->name,
                        a->norm_eps, GPT_LN_EPS);
    a->norm_eps = GPT_LN_EPS;
    const char *act = NULL;
    HP_CHECK(str_key(c, "activation_function", "gelu_new", &act));
    bool ok = false;
    for (size_t i = 0; i < sizeof k_gelu_tanh / sizeof *k_gelu_tanh; i++) ok = ok || !strcmp(act, k_gelu_tanh[i]);
    if (!ok)
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'activation_function' is '%s'; our GPT computes GELU's tanh "
                        "approximation (gelu_new, gelu_pytorch_tanh, gelu_fast), not '%s'", c->name, act, act);
    HP_CHECK(bool_key(c, "tie_word_embeddings", true, &a->tied_head));
    HP_CHECK(num_key(c, "resid_pdrop", 0.0, 0.0, 0.999, &a->dropout));
    HP_CHECK(refuse_bool(c, "scale_attn_weights", true, false, "ours scales attention scores by 1/sqrt(head size)"));
    HP_CHECK(refuse_bool(c, "scale_attn_by_inverse_layer_idx", false, true, "ours scales every layer alike"));
    HP_CHECK(refuse_bool(c, "add_cross_attention", false, true, "ours is a decoder without cross-attention"));
    a->rope_base = 0.0;
    return HP_STATUS_OK;
}

static hp_status parse_llama(const ctx *c, hp_hf_arch *a) {
    a->family = HP_HF_FAMILY_LLAMA;
    HP_CHECK(size_key(c, "hidden_size", NULL, true, 0, &a->width));
    HP_CHECK(size_key(c, "intermediate_size", NULL, true, 0, &a->ffn_width));
    HP_CHECK(size_key(c, "num_hidden_layers", NULL, true, 0, &a->layers));
    HP_CHECK(size_key(c, "num_attention_heads", NULL, true, 0, &a->heads));
    HP_CHECK(size_key(c, "num_key_value_heads", NULL, false, a->heads, &a->kv_heads));
    HP_CHECK(size_key(c, "max_position_embeddings", NULL, true, 0, &a->context));
    HP_CHECK(size_key(c, "vocab_size", NULL, true, 0, &a->vocab));
    HP_CHECK(num_key(c, "rms_norm_eps", 1e-6, 1e-12, 1.0, &a->norm_eps));
    HP_CHECK(num_key(c, "rope_theta", 10000.0, 1.0, 1e12, &a->rope_base));
    HP_CHECK(bool_key(c, "tie_word_embeddings", false, &a->tied_head));
    const char *act = NULL;
    HP_CHECK(str_key(c, "hidden_act", "silu", &act));
    if (strcmp(act, "silu") != 0)
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'hidden_act' is '%s'; the Llama family's MLP is SwiGLU (silu)",
                        c->name, act);
    const cJSON *rs = item(c, "rope_scaling");
    if (rs) {
        char *t = cJSON_PrintUnformatted(rs);
        hp_status st = hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'rope_scaling' is %s; hp convert supports plain RoPE "
                                "(rope_scaling null) only", c->name, t ? t : "set");
        free(t);
        return st;
    }
    HP_CHECK(refuse_bool(c, "attention_bias", false, true, "the Llama family here has no projection biases"));
    HP_CHECK(refuse_bool(c, "mlp_bias", false, true, "the Llama family here has no MLP biases"));
    HP_CHECK(refuse_bool(c, "use_sliding_window", false, true, "attention here is full causal attention"));
    if (a->width % a->heads)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s': 'hidden_size' %lld is not divisible by 'num_attention_heads' "
                        "%lld", c->name, (long long)a->width, (long long)a->heads);
    int64_t hd;
    HP_CHECK(size_key(c, "head_dim", NULL, false, a->width / a->heads, &hd));
    if (hd != a->width / a->heads)
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'head_dim' is %lld; the Llama family here has head size "
                        "hidden_size / num_attention_heads = %lld", c->name, (long long)hd, (long long)(a->width / a->heads));
    if (a->heads % a->kv_heads)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s': 'num_attention_heads' %lld is not divisible by "
                        "'num_key_value_heads' %lld", c->name, (long long)a->heads, (long long)a->kv_heads);
    a->dropout = 0.0;
    return HP_STATUS_OK;
}

/* Mixtral: a Llama whose every MLP is a MoE layer of num_local_experts SwiGLU experts. */
static hp_status parse_mixtral(const ctx *c, hp_hf_arch *a) {
    HP_CHECK(parse_llama(c, a));
    HP_CHECK(size_key(c, "num_local_experts", NULL, true, 0, &a->experts));
    HP_CHECK(size_key(c, "num_experts_per_tok", NULL, false, 2, &a->top_k));
    if (a->top_k > a->experts)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s': 'num_experts_per_tok' %lld is larger than "
                        "'num_local_experts' %lld", c->name, (long long)a->top_k, (long long)a->experts);
    if (a->experts > 65536)
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'num_local_experts' %lld is more than the 65536 experts hp "
                        "convert maps", c->name, (long long)a->experts);
    HP_CHECK(num_key(c, "router_aux_loss_coef", 0.001, 0.0, 1e6, &a->aux_loss_coef));
    const cJSON *sw = item(c, "sliding_window");
    if (sw) {
        char *t = cJSON_PrintUnformatted(sw);
        hp_status st = hp_error(HP_STATUS_UNSUPPORTED, "'%s': 'sliding_window' is %s; attention here is full causal "
                                "attention (sliding_window null)", c->name, t ? t : "set");
        free(t);
        return st;
    }
    return HP_STATUS_OK;
}

hp_status hp_hf_config_parse(const char *text, const char *name, hp_hf_arch *out) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hp_error(HP_STATUS_CORRUPT, "'%s' is not a JSON object (malformed config.json)", name);
    }
    ctx c = {name, root};
    const char *mt = NULL;
    hp_status st = str_key(&c, "model_type", NULL, &mt);
    if (st == HP_STATUS_OK && !mt) st = hp_error(HP_STATUS_CORRUPT, "'%s': missing key 'model_type'", name);
    if (st == HP_STATUS_OK) {
        snprintf(out->model_type, sizeof out->model_type, "%s", mt);
        if (!strcmp(mt, "gpt2"))
            st = parse_gpt2(&c, out);
        else if (!strcmp(mt, "llama") || !strcmp(mt, "qwen2"))
            st = parse_llama(&c, out);
        else if (!strcmp(mt, "mixtral"))
            st = parse_mixtral(&c, out);
        else
            st = hp_error(HP_STATUS_UNSUPPORTED, "'%s': model_type '%s' is not supported (hp convert reads gpt2, llama, "
                          "qwen2 and mixtral)", name, mt);
    }
    if (st == HP_STATUS_OK && out->family == HP_HF_FAMILY_GPT2 && out->width % out->heads)
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s': 'n_embd' %lld is not divisible by 'n_head' %lld", name,
                      (long long)out->width, (long long)out->heads);
    cJSON_Delete(root);
    return st;
}

hp_status hp_hf_config_read(const char *dir, hp_hf_arch *out) {
    char path[HP_HF_PATH_MAX];
    HP_CHECK(hp_hf_join(path, dir, "config.json"));
    char *text = NULL;
    HP_CHECK(hp_hf_read_text(path, &text));
    hp_status st = hp_hf_config_parse(text, path, out);
    free(text);
    return st;
}

/* Removes every item named key (a JSON object may repeat a key; readers take the first). */
static void drop(cJSON *o, const char *key) {
    while (cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_DeleteItemFromObjectCaseSensitive(o, key);
}

static bool set_num(cJSON *o, const char *key, double v) {
    drop(o, key);
    return cJSON_AddNumberToObject(o, key, v) != NULL;
}

static bool set_str(cJSON *o, const char *key, const char *v) {
    drop(o, key);
    return cJSON_AddStringToObject(o, key, v) != NULL;
}

static bool set_bool(cJSON *o, const char *key, bool v) {
    drop(o, key);
    return cJSON_AddBoolToObject(o, key, v) != NULL;
}

static bool set_null(cJSON *o, const char *key) {
    drop(o, key);
    return cJSON_AddNullToObject(o, key) != NULL;
}

/* Keys sorted, as transformers writes config.json. */
static void sort_keys(cJSON *o) {
    cJSON *items = NULL;
    int n = cJSON_GetArraySize(o);
    cJSON **v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v) return;
    int k = 0;
    for (cJSON *it = o->child; it; it = it->next) v[k++] = it;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(v[j - 1]->string, v[j]->string) > 0; j--) {
            cJSON *t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        v[i]->prev = i ? v[i - 1] : v[n - 1];
        v[i]->next = i + 1 < n ? v[i + 1] : NULL;
    }
    items = n ? v[0] : NULL;
    o->child = items;
    free(v);
}

char *hp_hf_config_json(const hp_hf_arch *a, const char *base) {
    cJSON *o = base ? cJSON_Parse(base) : NULL;
    if (o && !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = NULL;
    }
    if (!o) o = cJSON_CreateObject();
    if (!o) return NULL;
    bool ok = true;
    const bool moe = a->family == HP_HF_FAMILY_LLAMA && a->experts > 0;
    const char *arch_name = a->family == HP_HF_FAMILY_GPT2 ? "GPT2LMHeadModel"
                            : moe                          ? "MixtralForCausalLM"
                                                           : "LlamaForCausalLM";
    drop(o, "architectures");
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    cJSON *an = cJSON_CreateString(arch_name);
    ok = archs && an && cJSON_AddItemToArray(archs, an);
    ok = ok && set_num(o, "vocab_size", (double)a->vocab) && set_bool(o, "tie_word_embeddings", a->tied_head) &&
         set_str(o, "torch_dtype", "float32");
    if (a->family == HP_HF_FAMILY_GPT2) {
        static const char *const stale[] = {"n_vocab"};
        for (size_t i = 0; i < sizeof stale / sizeof *stale; i++) drop(o, stale[i]);
        ok = ok && set_str(o, "model_type", "gpt2") && set_num(o, "n_embd", (double)a->width) &&
             set_num(o, "n_head", (double)a->heads) && set_num(o, "n_layer", (double)a->layers) &&
             set_num(o, "n_positions", (double)a->context) && set_num(o, "n_ctx", (double)a->context) &&
             set_null(o, "n_inner") && set_num(o, "layer_norm_epsilon", a->norm_eps) &&
             set_str(o, "activation_function", "gelu_new") && set_num(o, "resid_pdrop", a->dropout) &&
             set_num(o, "embd_pdrop", a->dropout) && set_num(o, "attn_pdrop", 0.0) &&
             set_bool(o, "scale_attn_weights", true) && set_bool(o, "scale_attn_by_inverse_layer_idx", false);
    } else {
        /* a Qwen2 without biases is a Llama: written as one */
        drop(o, "use_sliding_window");
        drop(o, "sliding_window");
        drop(o, "max_window_layers");
        static const char *const moe_keys[] = {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                                               "output_router_logits", "router_jitter_noise", "sliding_window"};
        for (size_t i = 0; i < sizeof moe_keys / sizeof *moe_keys; i++) drop(o, moe_keys[i]);
        if (moe) { /* Mixtral's config has no bias switches */
            drop(o, "attention_bias");
            drop(o, "mlp_bias");
            ok = ok && set_num(o, "num_local_experts", (double)a->experts) &&
                 set_num(o, "num_experts_per_tok", (double)a->top_k) &&
                 set_num(o, "router_aux_loss_coef", a->aux_loss_coef) && set_bool(o, "output_router_logits", false) &&
                 set_num(o, "router_jitter_noise", 0.0) && set_null(o, "sliding_window");
        } else {
            ok = ok && set_bool(o, "attention_bias", false) && set_bool(o, "mlp_bias", false);
        }
        ok = ok && set_str(o, "model_type", moe ? "mixtral" : "llama") && set_num(o, "hidden_size", (double)a->width) &&
             set_num(o, "intermediate_size", (double)a->ffn_width) && set_num(o, "num_hidden_layers", (double)a->layers) &&
             set_num(o, "num_attention_heads", (double)a->heads) &&
             set_num(o, "num_key_value_heads", (double)a->kv_heads) &&
             set_num(o, "max_position_embeddings", (double)a->context) && set_num(o, "rms_norm_eps", a->norm_eps) &&
             set_num(o, "rope_theta", a->rope_base) && set_str(o, "hidden_act", "silu") && set_null(o, "rope_scaling") &&
             set_num(o, "head_dim", (double)(a->width / a->heads));
    }
    char *s = NULL;
    if (ok) {
        sort_keys(o);
        s = cJSON_Print(o);
    }
    cJSON_Delete(o);
    if (!s) return NULL;
    /* cJSON indents with tabs; a trailing newline like transformers' files */
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return NULL;
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    return t;
}
