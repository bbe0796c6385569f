/*
 * The `offload:` section of the run config read into hp_offload_run_config, and the size strings
 * ("64MiB") that it and strategy.bucket_size take. Meaning of each key: include/hp/offload_plan.h.
 */
#include "io/config_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Largest size accepted: 2^62 bytes (4 EiB), so that every size fits int64_t and a sum of a few
 * still does. */
#define SIZE_MAX_BYTES 4611686018427387904.0

hp_status hp_config_parse_size(const char *text, size_t *out) {
    /* Decimal digits only: strtod would also take hex ("0x10"), "inf", "nan" and a sign. */
    char *end;
    double v = strtod(text, &end);
    bool decimal = (text[0] >= '0' && text[0] <= '9') || (text[0] == '.' && text[1] >= '0' && text[1] <= '9');
    for (const char *c = text; decimal && c < end; c++) decimal = strchr("0123456789.eE+-", *c) != NULL;
    if (!decimal)
        return hp_error(HP_STATUS_CONFIG, "size '%s' is not a number of bytes (decimal digits, then a unit)", text);
    while (*end == ' ') end++;
    static const struct { const char *s; double m; } units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0},
    };
    if (end == text || !(v >= 0) || !isfinite(v)) return hp_error(HP_STATUS_CONFIG, "size '%s' is not a number of bytes", text);
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
        if (strcmp(end, units[k].s) == 0) {
            double b = v * units[k].m;
            if (b > SIZE_MAX_BYTES)
                return hp_error(HP_STATUS_CONFIG, "size '%s' is too large (at most 2^62 bytes = 4 EiB)", text);
            *out = (size_t)b;
            return HP_STATUS_OK;
        }
    return hp_error(HP_STATUS_CONFIG, "size '%s' has an unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                    text);
}

hp_status hp__config_read_size(const hp_yaml_node *n, const char *what, size_t *out) {
    if (!n || hp_yaml_is_null(n)) return HP_STATUS_OK;
    const char *s;
    HP_CHECK(hp_yaml_as_string(n, what, &s));
    hp_status st = hp_config_parse_size(s, out);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "%s:%d:%d: %s: ", n->file, n->line, n->column, what);
    return HP_STATUS_OK;
}

#define DISK_ALIGN 4096 /* HP_DISK_ALIGN (hp/disk.h): chunks are whole disk blocks */

static const char *const k_classes[] = {"params", "grads", "optimizer", "activations"};
static const char *const k_tier_names[] = {"device", "host", "disk"};

hp_status hp__config_read_offload(const hp_yaml_node *node, hp_offload_run_config *out) {
    if (hp_yaml_is_null(node)) return HP_STATUS_OK;
    static const char *const keys[] = {"device_budget", "host_budget", "disk_dir", "disk_budget", "policy",
                                       "bandwidth",     "machine",     "chunk",    "read_ahead",  "async_update"};
    HP_CHECK(hp_yaml_check_keys(node, keys, sizeof keys / sizeof keys[0], "offload"));
    out->present = true;
    const hp_yaml_node *db = hp_yaml_map_get(node, "device_budget");
    HP_CHECK(hp__config_read_size(db, "offload.device_budget", &out->device_budget));
    /* A fast tier of 0 bytes holds nothing: refused (no device budget is the key's absence). host_budget
     * and disk_budget keep their documented 0 (unbounded, the disk store's default): configs saved in
     * checkpoints before this check write them as 0. */
    if (db && !hp_yaml_is_null(db) && out->device_budget == 0)
        return hp__config_error(db, "offload.device_budget is 0 bytes, which can hold nothing: give a positive size, or "
                                "leave the key out for no device budget (no offload)");
    HP_CHECK(hp__config_read_size(hp_yaml_map_get(node, "host_budget"), "offload.host_budget", &out->host_budget));
    HP_CHECK(hp__config_read_size(hp_yaml_map_get(node, "disk_budget"), "offload.disk_budget", &out->disk_budget));
    HP_CHECK(hp__config_read_size(hp_yaml_map_get(node, "chunk"), "offload.chunk", &out->chunk));
    const hp_yaml_node *n = hp_yaml_map_get(node, "disk_dir");
    if (n && !hp_yaml_is_null(n)) {
        const char *dir;
        HP_CHECK(hp_yaml_as_string(n, "offload.disk_dir", &dir));
        if (strlen(dir) >= sizeof out->disk_dir)
            return hp__config_error(n, "offload.disk_dir is longer than %zu bytes", sizeof out->disk_dir - 1);
        memcpy(out->disk_dir, dir, strlen(dir) + 1);
    }
    n = hp_yaml_map_get(node, "read_ahead");
    if (n && !hp_yaml_is_null(n)) HP_CHECK(hp_yaml_as_bool(n, "offload.read_ahead", &out->read_ahead));
    n = hp_yaml_map_get(node, "async_update");
    if (n && !hp_yaml_is_null(n)) HP_CHECK(hp_yaml_as_bool(n, "offload.async_update", &out->async_update));
    if (out->chunk == 0 || out->chunk % DISK_ALIGN != 0)
        return hp__config_error(hp_yaml_map_get(node, "chunk"), "offload.chunk must be a positive multiple of %d bytes, is %zu",
                                DISK_ALIGN, out->chunk);
    const hp_yaml_node *pol = hp_yaml_map_get(node, "policy");
    HP_CHECK(hp_yaml_check_keys(pol, k_classes, 4, "offload.policy"));
    for (int c = 0; c < 4 && pol && !hp_yaml_is_null(pol); c++) {
        n = hp_yaml_map_get(pol, k_classes[c]);
        if (!n) continue;
        char what[64];
        snprintf(what, sizeof what, "offload.policy.%s", k_classes[c]);
        const char *s = n->kind == HP_YAML_KIND_SCALAR ? n->scalar : "";
        if (strcasecmp(s, "host") == 0) out->policy[c] = HP_CONFIG_TIER_HOST;
        else if (strcasecmp(s, "disk") == 0) out->policy[c] = HP_CONFIG_TIER_DISK;
        else if (strcasecmp(s, "device") == 0) out->policy[c] = HP_CONFIG_TIER_DEVICE;
        else {
            bool b;
            if (hp_yaml_as_bool(n, what, &b) != HP_STATUS_OK)
                return hp__config_error(n, "%s expects true, false, host, disk or device, got '%s'", what,
                                        n->kind == HP_YAML_KIND_SCALAR ? s : hp__config_node_text(n));
            out->policy[c] = b ? HP_CONFIG_TIER_HOST : HP_CONFIG_TIER_DEVICE;
        }
        if (out->policy[c] == HP_CONFIG_TIER_DISK && !out->disk_dir[0])
            return hp__config_error(n, "%s is disk but offload.disk_dir is not set", what);
    }
    const hp_yaml_node *bw = hp_yaml_map_get(node, "bandwidth");
    static const char *const tiers[] = {"host", "disk"};
    HP_CHECK(hp_yaml_check_keys(bw, tiers, 2, "offload.bandwidth"));
    for (int k = 0; k < 2 && bw && !hp_yaml_is_null(bw); k++) {
        n = hp_yaml_map_get(bw, tiers[k]);
        if (!n) continue;
        double *dst = k == 0 ? &out->bandwidth_host : &out->bandwidth_disk;
        char what[64];
        snprintf(what, sizeof what, "offload.bandwidth.%s", tiers[k]);
        if (n->kind == HP_YAML_KIND_SCALAR && strcmp(n->scalar, "measure") == 0) {
            *dst = 0;
            continue;
        }
        HP_CHECK(hp_yaml_as_double(n, what, dst));
        if (!(*dst > 0)) return hp__config_error(n, "%s must be positive bytes/s or 'measure', is %g", what, *dst);
    }
    const hp_yaml_node *mm = hp_yaml_map_get(node, "machine");
    static const char *const mkeys[] = {"flops", "bytes"};
    HP_CHECK(hp_yaml_check_keys(mm, mkeys, 2, "offload.machine"));
    double *rate[] = {&out->machine_flops, &out->machine_bytes};
    for (int k = 0; k < 2; k++) {
        if (!(n = hp_yaml_map_get(mm, mkeys[k])) || hp_yaml_is_null(n)) continue;
        char what[64];
        snprintf(what, sizeof what, "offload.machine.%s", mkeys[k]);
        HP_CHECK(hp_yaml_as_double(n, what, rate[k]));
        if (!(*rate[k] > 0)) return hp__config_error(n, "offload.machine rates must be positive (%s %g)", mkeys[k], *rate[k]);
    }
    return HP_STATUS_OK;
}

cJSON *hp__config_offload_json(const hp_offload_run_config *o) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    /* No device budget (0) is written as null: an explicit 0 would not load back. */
    bool ok = (o->device_budget ? cJSON_AddItemToObject(root, "device_budget", hp__config_json_number((double)o->device_budget))
                                : cJSON_AddNullToObject(root, "device_budget") != NULL) &&
              cJSON_AddItemToObject(root, "host_budget", hp__config_json_number((double)o->host_budget)) &&
              cJSON_AddStringToObject(root, "disk_dir", o->disk_dir) &&
              cJSON_AddItemToObject(root, "disk_budget", hp__config_json_number((double)o->disk_budget));
    cJSON *pol = ok ? cJSON_AddObjectToObject(root, "policy") : NULL;
    for (int c = 0; pol && c < 4; c++) ok = ok && cJSON_AddStringToObject(pol, k_classes[c], k_tier_names[o->policy[c]]);
    cJSON *bw = ok && pol ? cJSON_AddObjectToObject(root, "bandwidth") : NULL;
    ok = ok && bw;
    /* 0 is written as "measure": a 0 would not load back (rates must be positive). */
    const double bws[2] = {o->bandwidth_host, o->bandwidth_disk};
    static const char *const tiers[] = {"host", "disk"};
    for (int k = 0; ok && k < 2; k++)
        ok = bws[k] > 0 ? cJSON_AddItemToObject(bw, tiers[k], hp__config_json_number(bws[k]))
                        : cJSON_AddStringToObject(bw, tiers[k], "measure") != NULL;
    if (ok && (o->machine_flops > 0 || o->machine_bytes > 0)) {
        cJSON *mm = cJSON_AddObjectToObject(root, "machine");
        ok = mm &&
             (!(o->machine_flops > 0) || cJSON_AddItemToObject(mm, "flops", hp__config_json_number(o->machine_flops))) &&
             (!(o->machine_bytes > 0) || cJSON_AddItemToObject(mm, "bytes", hp__config_json_number(o->machine_bytes)));
    }
    ok = ok && cJSON_AddItemToObject(root, "chunk", hp__config_json_number((double)o->chunk)) &&
         cJSON_AddBoolToObject(root, "read_ahead", o->read_ahead) &&
         cJSON_AddBoolToObject(root, "async_update", o->async_update);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
