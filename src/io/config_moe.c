/*
 * The `model.moe:` sub-section of the run config (hp_moe_config, hp/moe.h):
 *
 *   model:
 *     moe: {experts: 8, top_k: 2, expert_width: 256, shared_experts: 0, every: 2,   # or layers: [1, 3]
 *           router: softmax, balance_loss: 0.01, bias_update_rate: 0.001, chunks: 1}
 *
 * experts and expert_width are required; top_k defaults to 2, every to 1 (every layer), router to
 * softmax (or sigmoid_bias: DeepSeek-V3's bias balancing), balance_loss to 0 (none).
 */
#include "io/config_internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static const char *const k_keys[] = {"experts",  "top_k",        "expert_width",    "shared_experts", "every",
                                     "layers",   "router",       "balance_loss",    "bias_update_rate", "chunks"};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

/* An int in [lo, hi] at key `key` of map m (absent: *out unchanged). */
static hp_status get_int(const hp_yaml_node *m, const char *key, int64_t lo, int64_t hi, int *out) {
    const hp_yaml_node *v = hp_yaml_map_get(m, key);
    if (!v) return HP_STATUS_OK;
    char what[64];
    snprintf(what, sizeof what, "model.moe.%s", key);
    int64_t x;
    HP_CHECK(hp_yaml_as_int(v, what, &x));
    if (x < lo || x > hi)
        return hp__config_error(v, "%s %lld must be in [%lld, %lld]", what, (long long)x, (long long)lo, (long long)hi);
    *out = (int)x;
    return HP_STATUS_OK;
}

static hp_status get_float(const hp_yaml_node *m, const char *key, bool positive, float *out) {
    const hp_yaml_node *v = hp_yaml_map_get(m, key);
    if (!v) return HP_STATUS_OK;
    char what[64];
    snprintf(what, sizeof what, "model.moe.%s", key);
    double x;
    HP_CHECK(hp_yaml_as_double(v, what, &x));
    if (!(positive ? x > 0.0 : x >= 0.0) || !(x < 1e30))
        return hp__config_error(v, "%s %g must be %s and finite", what, x, positive ? "> 0" : ">= 0");
    *out = (float)x;
    return HP_STATUS_OK;
}

hp_status hp__config_read_moe(const hp_yaml_node *n, hp_moe_config *out) {
    *out = HP_MOE_CONFIG_INIT;
    if (!n || hp_yaml_is_null(n)) return HP_STATUS_OK;
    if (n->kind != HP_YAML_KIND_MAP)
        return hp__config_error(n, "model.moe expects a map {experts: E, top_k: k, expert_width: F, ...}, got '%s'",
                                hp__config_node_text(n));
    HP_CHECK(hp_yaml_check_keys(n, k_keys, N_KEYS, "model.moe"));
    const hp_yaml_node *ex = hp_yaml_map_get(n, "experts"), *fw = hp_yaml_map_get(n, "expert_width");
    if (!ex) return hp__config_error(n, "model.moe needs 'experts' (the number of experts)");
    if (!fw) return hp__config_error(n, "model.moe needs 'expert_width' (each expert's hidden width)");
    HP_CHECK(get_int(n, "experts", 1, 1 << 16, &out->experts));
    HP_CHECK(get_int(n, "top_k", 1, 1 << 16, &out->top_k));
    HP_CHECK(get_int(n, "expert_width", 1, INT_MAX, &out->expert_width));
    HP_CHECK(get_int(n, "shared_experts", 0, 1 << 16, &out->shared_experts));
    HP_CHECK(get_float(n, "balance_loss", false, &out->balance_loss));
    HP_CHECK(get_float(n, "bias_update_rate", true, &out->bias_update_rate));
    HP_CHECK(get_int(n, "chunks", 1, HP_MOE_MAX_CHUNKS, &out->chunks));
    if (out->top_k > out->experts) {
        const hp_yaml_node *v = hp_yaml_map_get(n, "top_k");
        return hp__config_error(v ? v : n, "model.moe.top_k %d is larger than model.moe.experts %d", out->top_k,
                                out->experts);
    }
    const hp_yaml_node *r = hp_yaml_map_get(n, "router");
    if (r) {
        const char *s;
        HP_CHECK(hp_yaml_as_string(r, "model.moe.router", &s));
        if (strcmp(s, "softmax") == 0) out->router = HP_MOE_ROUTER_SOFTMAX;
        else if (strcmp(s, "sigmoid_bias") == 0) out->router = HP_MOE_ROUTER_SIGMOID_BIAS;
        else return hp__config_error(r, "model.moe.router '%s' is not softmax or sigmoid_bias", s);
    }
    const hp_yaml_node *ev = hp_yaml_map_get(n, "every"), *ls = hp_yaml_map_get(n, "layers");
    if (ev && ls) return hp__config_error(ls, "model.moe: give either 'every' or 'layers', not both");
    HP_CHECK(get_int(n, "every", 1, INT_MAX, &out->every));
    if (ls) {
        if (ls->kind != HP_YAML_KIND_SEQ || ls->count < 1 || ls->count > HP_MOE_MAX_LAYERS)
            return hp__config_error(ls, "model.moe.layers expects a list of 1 to %d layer indices, got %s",
                                    HP_MOE_MAX_LAYERS, hp__config_node_text(ls));
        out->every = 0;
        out->n_layers = (int)ls->count;
        for (size_t i = 0; i < ls->count; i++) {
            int64_t x;
            HP_CHECK(hp_yaml_as_int(hp_yaml_seq_at(ls, i), "model.moe.layers[]", &x));
            if (x < 0 || x > INT_MAX)
                return hp__config_error(hp_yaml_seq_at(ls, i), "model.moe.layers[%zu] %lld must be >= 0", i, (long long)x);
            out->layers[i] = (int)x;
        }
    }
    return HP_STATUS_OK;
}

hp_status hp__config_check_moe(const hp_moe_config *m, int64_t layers, const hp_yaml_node *moe, const char *file) {
    if (m->experts < 1) return HP_STATUS_OK;
    const hp_yaml_node *ls = moe ? hp_yaml_map_get(moe, "layers") : NULL;
    for (int i = 0; m->every == 0 && i < m->n_layers; i++) {
        const hp_yaml_node *v = ls ? hp_yaml_seq_at(ls, (size_t)i) : NULL;
        if (m->layers[i] >= layers) {
            if (v) return hp__config_error(v, "model.moe.layers[%d] = %d is outside [0, model.layers %lld)", i, m->layers[i], (long long)layers);
            return hp_error(HP_STATUS_CONFIG, "%s: model.moe.layers[%d] = %d is outside [0, model.layers %lld)", file, i,
                            m->layers[i], (long long)layers);
        }
        for (int j = 0; j < i; j++)
            if (m->layers[j] == m->layers[i]) {
                if (v) return hp__config_error(v, "model.moe.layers lists layer %d twice", m->layers[i]);
                return hp_error(HP_STATUS_CONFIG, "%s: model.moe.layers lists layer %d twice", file, m->layers[i]);
            }
    }
    if (m->top_k < 1 || m->top_k > m->experts || m->expert_width < 1 || m->shared_experts < 0)
        return hp_error(HP_STATUS_CONFIG, "%s: model.moe: top_k %d must be in [1, experts %d], expert_width %d >= 1", file,
                        m->top_k, m->experts, m->expert_width);
    return HP_STATUS_OK;
}

cJSON *hp__config_moe_json(const hp_moe_config *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    bool ok = cJSON_AddNumberToObject(o, "experts", m->experts) && cJSON_AddNumberToObject(o, "top_k", m->top_k) &&
              cJSON_AddNumberToObject(o, "expert_width", m->expert_width) &&
              cJSON_AddNumberToObject(o, "shared_experts", m->shared_experts) &&
              cJSON_AddStringToObject(o, "router", m->router == HP_MOE_ROUTER_SIGMOID_BIAS ? "sigmoid_bias" : "softmax");
    cJSON *bl = hp__config_json_number(m->balance_loss), *br = hp__config_json_number(m->bias_update_rate);
    ok = ok && bl && cJSON_AddItemToObject(o, "balance_loss", bl);
    if (!ok) cJSON_Delete(bl);
    ok = ok && br && cJSON_AddItemToObject(o, "bias_update_rate", br);
    if (!ok) cJSON_Delete(br);
    if (ok && m->chunks > 1) ok = cJSON_AddNumberToObject(o, "chunks", m->chunks) != NULL;
    if (ok && m->every > 0) {
        ok = cJSON_AddNumberToObject(o, "every", m->every) != NULL;
    } else if (ok) {
        cJSON *a = cJSON_AddArrayToObject(o, "layers");
        ok = a != NULL;
        for (int i = 0; ok && i < m->n_layers; i++) {
            cJSON *v = cJSON_CreateNumber(m->layers[i]);
            ok = v && cJSON_AddItemToArray(a, v);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
