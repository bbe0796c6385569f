/*
 * The `model.multimodal:` sub-section of the run config (hp_multimodal_config, hp/config.h), read for
 * model.family multimodal (hp/multimodal.h):
 *
 *   model:
 *     family: multimodal
 *     multimodal: {data_dir: /usr/share/datasets/fashion-mnist, patch_a: 7, layers_a: 1, width_a: 32,
 *                  patch_b: 4, layers_b: 2, width_b: 32, train_images: 0, test_images: 1000}
 */
#include "io/config_internal.h"

#include <stdio.h>
#include <string.h>

static const char *const k_keys[] = {"data_dir", "patch_a", "layers_a", "width_a",      "patch_b",
                                     "layers_b", "width_b", "train_images", "test_images"};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

void hp__config_mm_defaults(hp_multimodal_config *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->data_dir, sizeof m->data_dir, "/usr/share/datasets/fashion-mnist");
    m->patch_a = 7, m->layers_a = 1, m->width_a = 32;
    m->patch_b = 4, m->layers_b = 2, m->width_b = 32;
    m->train_images = 0;
    m->test_images = 1000;
}

static hp_status get_int(const hp_yaml_node *m, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const hp_yaml_node *v = hp_yaml_map_get(m, key);
    if (!v) return HP_STATUS_OK;
    char what[64];
    snprintf(what, sizeof what, "model.multimodal.%s", key);
    int64_t x;
    HP_CHECK(hp_yaml_as_int(v, what, &x));
    if (x < lo || x > hi)
        return hp__config_error(v, "%s %lld must be in [%lld, %lld]", what, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return HP_STATUS_OK;
}

hp_status hp__config_read_mm(const hp_yaml_node *n, hp_multimodal_config *out) {
    hp__config_mm_defaults(out);
    if (!n || hp_yaml_is_null(n)) return HP_STATUS_OK;
    if (n->kind != HP_YAML_KIND_MAP)
        return hp__config_error(n, "model.multimodal expects a map {data_dir: DIR, patch_a: P, ...}, got '%s'",
                                hp__config_node_text(n));
    HP_CHECK(hp_yaml_check_keys(n, k_keys, N_KEYS, "model.multimodal"));
    const hp_yaml_node *d = hp_yaml_map_get(n, "data_dir");
    if (d) {
        const char *s;
        HP_CHECK(hp_yaml_as_string(d, "model.multimodal.data_dir", &s));
        if (!s[0] || strlen(s) >= sizeof out->data_dir)
            return hp__config_error(d, "model.multimodal.data_dir must be a folder name of 1 to %d bytes",
                                    (int)sizeof out->data_dir - 1);
        snprintf(out->data_dir, sizeof out->data_dir, "%s", s);
    }
    int64_t *ints[] = {&out->patch_a, &out->layers_a, &out->width_a, &out->patch_b, &out->layers_b, &out->width_b};
    const int64_t hi[] = {28, 1 << 16, 1 << 16, 28, 1 << 16, 1 << 16};
    for (int i = 0; i < 6; i++) HP_CHECK(get_int(n, k_keys[1 + i], 1, hi[i], ints[i]));
    HP_CHECK(get_int(n, "train_images", 0, (int64_t)1 << 31, &out->train_images));
    HP_CHECK(get_int(n, "test_images", 1, (int64_t)1 << 31, &out->test_images));
    for (int e = 0; e < 2; e++) {
        int64_t p = e ? out->patch_b : out->patch_a;
        if (28 % p) {
            const hp_yaml_node *v = hp_yaml_map_get(n, e ? "patch_b" : "patch_a");
            return hp__config_error(v ? v : n, "model.multimodal.patch_%s %lld does not divide the 28x28 images",
                                    e ? "b" : "a", (long long)p);
        }
    }
    return HP_STATUS_OK;
}

hp_status hp__config_check_mm(const hp_run_config *cfg, const hp_yaml_node *node, const char *file) {
    const hp_multimodal_config *m = &cfg->model.multimodal;
    const int64_t heads = cfg->model.heads;
    const char *keys[3] = {"width_a", "width_b", NULL};
    const int64_t widths[2] = {m->width_a, m->width_b};
    for (int e = 0; e < 2; e++)
        if (widths[e] % heads) {
            const hp_yaml_node *v = hp_yaml_map_get(node, keys[e]);
            if (v)
                return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: model.multimodal.%s %lld is not divisible by model.heads "
                                "%lld", file, v->line, v->column, keys[e], (long long)widths[e], (long long)heads);
            return hp_error(HP_STATUS_CONFIG, "%s: model.multimodal.%s %lld is not divisible by model.heads %lld", file,
                            keys[e], (long long)widths[e], (long long)heads);
        }
    return HP_STATUS_OK;
}

cJSON *hp__config_mm_json(const hp_multimodal_config *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    bool ok = cJSON_AddStringToObject(o, "data_dir", m->data_dir) != NULL;
    const int64_t v[] = {m->patch_a, m->layers_a, m->width_a, m->patch_b,
                         m->layers_b, m->width_b, m->train_images, m->test_images};
    for (int i = 0; ok && i < 8; i++) ok = cJSON_AddNumberToObject(o, k_keys[1 + i], (double)v[i]) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
