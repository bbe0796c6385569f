/* The `offload:` section of a run config (hp_offload_config_parse). */
#include "hp/offload_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void hp_offload_plan_config_init(hp_offload_plan_config *c) {
    memset(c, 0, sizeof *c);
    for (int k = 0; k < HP_OFFLOAD_CLASS_COUNT; k++) c->policy[k] = HP_TIER_HOST;
    c->bandwidth[HP_TIER_HOST] = 10e9;
    c->bandwidth[HP_TIER_DISK] = 1e9;
    c->machine = HP_MACHINE_MODEL_DEFAULT;
    c->chunk_bytes = 1u << 20;
    c->read_ahead = true;
    c->async_update = true;
}

hp_status hp_offload_parse_size(const char *text, size_t *out) {
    char *end;
    double v = strtod(text, &end);
    while (*end == ' ') end++;
    static const struct { const char *s; double m; } units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0},
    };
    if (end == text || !(v >= 0) || !isfinite(v)) return hp_error(HP_STATUS_CONFIG, "size '%s' is not a number of bytes", text);
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
        if (strcmp(end, units[k].s) == 0) {
            double b = v * units[k].m;
            if (b > 1.8e19) return hp_error(HP_STATUS_CONFIG, "size '%s' is too large", text);
            *out = (size_t)b;
            return HP_STATUS_OK;
        }
    return hp_error(HP_STATUS_CONFIG, "size '%s' has an unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                    text);
}

static hp_status size_at(const hp_yaml_node *map, const char *key, const char *what, size_t *out) {
    const hp_yaml_node *n = hp_yaml_map_get(map, key);
    if (!n || hp_yaml_is_null(n)) return HP_STATUS_OK;
    const char *s;
    HP_CHECK(hp_yaml_as_string(n, what, &s));
    hp_status st = hp_offload_parse_size(s, out);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "%s:%d:%d: %s: ", n->file, n->line, n->column, what);
    return HP_STATUS_OK;
}

hp_status hp_offload_config_parse(const hp_yaml_node *node, hp_offload_plan_config *out) {
    hp_offload_plan_config_init(out);
    if (!node || hp_yaml_is_null(node)) return HP_STATUS_OK;
    static const char *const keys[] = {"device_budget", "host_budget", "disk_dir", "disk_budget",
                                       "policy", "bandwidth", "machine", "chunk", "read_ahead", "async_update"};
    HP_CHECK(hp_yaml_check_keys(node, keys, sizeof keys / sizeof keys[0], "offload"));
    HP_CHECK(size_at(node, "device_budget", "offload.device_budget", &out->device_budget));
    HP_CHECK(size_at(node, "host_budget", "offload.host_budget", &out->host_budget));
    HP_CHECK(size_at(node, "disk_budget", "offload.disk_budget", &out->disk_budget));
    HP_CHECK(size_at(node, "chunk", "offload.chunk", &out->chunk_bytes));
    const hp_yaml_node *n = hp_yaml_map_get(node, "disk_dir");
    if (n && !hp_yaml_is_null(n)) HP_CHECK(hp_yaml_as_string(n, "offload.disk_dir", &out->disk_dir));
    n = hp_yaml_map_get(node, "read_ahead");
    if (n && !hp_yaml_is_null(n)) HP_CHECK(hp_yaml_as_bool(n, "offload.read_ahead", &out->read_ahead));
    n = hp_yaml_map_get(node, "async_update");
    if (n && !hp_yaml_is_null(n)) HP_CHECK(hp_yaml_as_bool(n, "offload.async_update", &out->async_update));
    if (out->chunk_bytes == 0 || out->chunk_bytes % HP_DISK_ALIGN != 0) {
        n = hp_yaml_map_get(node, "chunk");
        return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: offload.chunk must be a positive multiple of %u bytes, is %zu",
                        n->file, n->line, n->column, HP_DISK_ALIGN, out->chunk_bytes);
    }
    const hp_yaml_node *pol = hp_yaml_map_get(node, "policy");
    static const char *const classes[] = {"params", "grads", "optimizer", "activations"};
    HP_CHECK(hp_yaml_check_keys(pol, classes, 4, "offload.policy"));
    for (int c = 0; c < HP_OFFLOAD_CLASS_COUNT && pol && !hp_yaml_is_null(pol); c++) {
        n = hp_yaml_map_get(pol, classes[c]);
        if (!n) continue;
        char what[64];
        snprintf(what, sizeof what, "offload.policy.%s", classes[c]);
        const char *s = n->kind == HP_YAML_KIND_SCALAR ? n->scalar : "";
        if (strcasecmp(s, "host") == 0) out->policy[c] = HP_TIER_HOST;
        else if (strcasecmp(s, "disk") == 0) out->policy[c] = HP_TIER_DISK;
        else if (strcasecmp(s, "device") == 0) out->policy[c] = HP_TIER_DEVICE;
        else {
            bool b;
            hp_status st = hp_yaml_as_bool(n, what, &b);
            if (st != HP_STATUS_OK)
                return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s expects true, false, host, disk or device, got '%s'",
                                n->file, n->line, n->column, what, s);
            out->policy[c] = b ? HP_TIER_HOST : HP_TIER_DEVICE;
        }
        if (out->policy[c] == HP_TIER_DISK && !out->disk_dir)
            return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s is disk but offload.disk_dir is not set", n->file, n->line,
                            n->column, what);
    }
    const hp_yaml_node *bw = hp_yaml_map_get(node, "bandwidth");
    static const char *const tiers[] = {"host", "disk"};
    HP_CHECK(hp_yaml_check_keys(bw, tiers, 2, "offload.bandwidth"));
    for (int k = 0; k < 2 && bw && !hp_yaml_is_null(bw); k++) {
        n = hp_yaml_map_get(bw, tiers[k]);
        if (!n) continue;
        hp_tier t = k == 0 ? HP_TIER_HOST : HP_TIER_DISK;
        char what[64];
        snprintf(what, sizeof what, "offload.bandwidth.%s", tiers[k]);
        if (n->kind == HP_YAML_KIND_SCALAR && strcmp(n->scalar, "measure") == 0) {
            out->bandwidth[t] = 0;
            continue;
        }
        HP_CHECK(hp_yaml_as_double(n, what, &out->bandwidth[t]));
        if (!(out->bandwidth[t] > 0))
            return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s must be positive bytes/s or 'measure', is %g", n->file,
                            n->line, n->column, what, out->bandwidth[t]);
    }
    const hp_yaml_node *mm = hp_yaml_map_get(node, "machine");
    static const char *const mkeys[] = {"flops", "bytes"};
    HP_CHECK(hp_yaml_check_keys(mm, mkeys, 2, "offload.machine"));
    if ((n = hp_yaml_map_get(mm, "flops"))) HP_CHECK(hp_yaml_as_double(n, "offload.machine.flops", &out->machine.flops_per_s));
    if ((n = hp_yaml_map_get(mm, "bytes"))) HP_CHECK(hp_yaml_as_double(n, "offload.machine.bytes", &out->machine.bytes_per_s));
    if (!(out->machine.flops_per_s > 0) || !(out->machine.bytes_per_s > 0))
        return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: offload.machine rates must be positive (flops %g, bytes %g)",
                        mm ? mm->file : node->file, mm ? mm->line : node->line, mm ? mm->column : node->column,
                        out->machine.flops_per_s, out->machine.bytes_per_s);
    return HP_STATUS_OK;
}
