/*
 * The `strategy:` section of the run config read into hp_strategy_config: every check that does
 * not need the job's world size (hp_strategy_new in src/shard does that one). Format and rules:
 * include/hp/strategy.h.
 */
#include "io/config_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define OOM() hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory")

static bool is_none(const hp_yaml_node *n) {
    return hp_yaml_is_null(n) || (n->kind == HP_YAML_KIND_SCALAR && strcmp(n->scalar, "none") == 0);
}

static void axes_list(const hp_strategy_config *s, char *buf, size_t size) {
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < s->n_axes && k < size; a++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", a ? ", " : "", s->alias_name[a]);
}

/* Alias at node n (a scalar) to an axis index; `*used` catches an alias used twice. */
static hp_status parse_alias(const hp_yaml_node *n, const hp_strategy_config *s, const char *what, uint32_t *used,
                             int *axis) {
    bool scalar = n && n->kind == HP_YAML_KIND_SCALAR;
    if (!scalar || !*n->scalar || strcmp(n->scalar, "none") == 0)
        return hp__config_error(n, "%s expects a mesh alias, got %s%s%s", what, scalar ? "'" : "",
                                hp__config_node_text(n), scalar ? "'" : "");
    for (int a = 0; a < s->n_axes; a++) {
        if (strcmp(s->alias_name[a], n->scalar) != 0) continue;
        if (*used & (1u << a))
            return hp__config_error(n, "%s: alias '%s' is used twice (a mesh axis may split a tensor only once)", what,
                                    n->scalar);
        *used |= 1u << a;
        *axis = a;
        return HP_STATUS_OK;
    }
    char axes[512];
    axes_list(s, axes, sizeof axes);
    return hp__config_error(n, "%s: unknown alias '%s' (the mesh's aliases are: %s)", what, n->scalar, axes);
}

/* A tensor_map: a sequence of entries alias | none | [alias, ...]. */
static hp_status parse_tmap(const hp_yaml_node *n, const hp_strategy_config *s, const char *what,
                            hp_tensor_map_config *out) {
    memset(out, 0, sizeof *out);
    if (!n || n->kind != HP_YAML_KIND_SEQ) {
        bool scalar = n && n->kind == HP_YAML_KIND_SCALAR;
        return hp__config_error(n, "%s expects a tensor_map: a sequence with, per tensor dimension, an alias, none or "
                                "a list of aliases (e.g. [dp, none]), got %s%s%s",
                                what, scalar ? "'" : "", hp__config_node_text(n), scalar ? "'" : "");
    }
    if (n->count > HP_MAX_DIMS)
        return hp__config_error(n, "%s has %zu entries, more than the %d dimensions a tensor can have", what, n->count,
                                HP_MAX_DIMS);
    uint32_t used = 0;
    out->n = (int)n->count;
    for (int d = 0; d < out->n; d++) {
        const hp_yaml_node *e = n->items[d];
        char ewhat[320];
        snprintf(ewhat, sizeof ewhat, "%s[%d]", what, d);
        if (is_none(e)) continue;
        if (e->kind == HP_YAML_KIND_MAP)
            return hp__config_error(e, "%s expects an alias, none or a list of aliases, got a map", ewhat);
        if (e->kind == HP_YAML_KIND_SCALAR) {
            HP_CHECK(parse_alias(e, s, ewhat, &used, &out->map[d][0]));
            out->nmap[d] = 1;
            continue;
        }
        if (e->count > (size_t)s->n_axes)
            return hp__config_error(e, "%s lists %zu aliases but the mesh has %d axes", ewhat, e->count, s->n_axes);
        for (size_t k = 0; k < e->count; k++) {
            char kwhat[352];
            snprintf(kwhat, sizeof kwhat, "%s[%zu]", ewhat, k);
            HP_CHECK(parse_alias(e->items[k], s, kwhat, &used, &out->map[d][k]));
        }
        out->nmap[d] = (int)e->count;
    }
    return HP_STATUS_OK;
}

/* The mesh map `mesh` (not NULL); `mw` names it in messages ("strategy.mesh"). `allow_ranks`: the
 * mesh may list its devices' world ranks (a group's mesh is ordered by the group's ranks instead). */
static hp_status parse_mesh(const hp_yaml_node *mesh, const char *mw, bool allow_ranks, hp_arena *arena,
                            hp_strategy_config *s) {
    static const char *const keys[] = {"device_matrix", "alias_name", "ranks"};
    HP_CHECK(hp_yaml_check_keys(mesh, keys, allow_ranks ? 3 : 2, mw));
    if (mesh->kind != HP_YAML_KIND_MAP)
        return hp__config_error(mesh, "%s expects a map with device_matrix and alias_name, got %s", mw,
                                hp__config_node_text(mesh));
    const hp_yaml_node *dm = hp_yaml_map_get(mesh, "device_matrix");
    const hp_yaml_node *an = hp_yaml_map_get(mesh, "alias_name");
    const hp_yaml_node *rk = hp_yaml_map_get(mesh, "ranks");
    if (!dm) return hp__config_error(mesh, "%s: missing key 'device_matrix' (the mesh shape, e.g. [2, 2])", mw);
    if (!an)
        return hp__config_error(mesh, "%s: missing key 'alias_name' (one name per mesh axis, e.g. [dp, tp])", mw);
    if (dm->kind != HP_YAML_KIND_SEQ || dm->count < 1 || dm->count > HP_CONFIG_MAX_AXES)
        return hp__config_error(dm, "%s.device_matrix expects a sequence of 1 to %d axis sizes, got %s%s", mw,
                                HP_CONFIG_MAX_AXES, hp__config_node_text(dm),
                                dm->kind == HP_YAML_KIND_SEQ ? (dm->count ? " that is too long" : " that is empty") : "");
    if (an->kind != HP_YAML_KIND_SEQ || an->count != dm->count)
        return hp__config_error(an, "%s.alias_name expects a sequence of %zu names (one per device_matrix "
                                "axis), got %s%s", mw, dm->count, an->kind == HP_YAML_KIND_SEQ ? "" : hp__config_node_text(an),
                                an->kind == HP_YAML_KIND_SEQ ? (an->count == 1 ? "1 name" : "a different number of names")
                                                             : "");
    s->n_axes = (int)dm->count;
    s->mesh_line = dm->line;
    s->mesh_column = dm->column;
    int64_t size = 1;
    for (int a = 0; a < s->n_axes; a++) {
        char what[320];
        snprintf(what, sizeof what, "%s.device_matrix[%d]", mw, a);
        int64_t v;
        HP_CHECK(hp_yaml_as_int(dm->items[a], what, &v));
        if (v < 1) return hp__config_error(dm->items[a], "%s must be an axis size >= 1, got %lld", what, (long long)v);
        if (v > (1 << 20))
            return hp__config_error(dm->items[a], "%s must be an axis size <= %d, got %lld", what, 1 << 20, (long long)v);
        s->device_matrix[a] = (int)v;
        size *= v;
        if (size > (int64_t)1 << 30)
            return hp__config_error(dm, "%s.device_matrix has too many devices (more than 2^30)", mw);
        snprintf(what, sizeof what, "%s.alias_name[%d]", mw, a);
        const char *name;
        HP_CHECK(hp_yaml_as_string(an->items[a], what, &name));
        if (!*name || strcmp(name, "none") == 0 || strlen(name) >= HP_CONFIG_MAX_NAME)
            return hp__config_error(an->items[a], "%s: '%s' is not a valid axis name (expected 1 to %d characters, not "
                                    "'none')", what, name, HP_CONFIG_MAX_NAME - 1);
        for (int b = 0; b < a; b++)
            if (strcmp(name, s->alias_name[b]) == 0)
                return hp__config_error(an->items[a], "%s: axis name '%s' is used twice", what, name);
        memcpy(s->alias_name[a], name, strlen(name) + 1);
    }
    if (!rk || hp_yaml_is_null(rk)) return HP_STATUS_OK;
    if (rk->kind != HP_YAML_KIND_SEQ || rk->count != (size_t)size)
        return hp__config_error(rk, "%s.ranks expects a sequence of %lld world ranks (one per device of the "
                                "mesh), got %s%s", mw, (long long)size, rk->kind == HP_YAML_KIND_SEQ ? "" : hp__config_node_text(rk),
                                rk->kind == HP_YAML_KIND_SEQ ? "a sequence of a different length" : "");
    s->ranks = hp_arena_alloc(arena, (size_t)size * sizeof *s->ranks, _Alignof(int));
    if (!s->ranks) return OOM();
    s->ranks_line = rk->line;
    s->ranks_column = rk->column;
    for (int64_t i = 0; i < size; i++) {
        char what[320];
        snprintf(what, sizeof what, "%s.ranks[%lld]", mw, (long long)i);
        int64_t v;
        HP_CHECK(hp_yaml_as_int(rk->items[i], what, &v));
        /* The job runs on exactly as many ranks as the mesh has devices (hp_strategy_new). */
        if (v < 0 || v >= size)
            return hp__config_error(rk->items[i], "%s: rank %lld is out of range (the job's ranks are 0..%lld)", what,
                                    (long long)v, (long long)size - 1);
        for (int64_t j = 0; j < i; j++)
            if (s->ranks[j] == v)
                return hp__config_error(rk->items[i], "%s: rank %lld is listed twice", what, (long long)v);
        s->ranks[i] = (int)v;
    }
    return HP_STATUS_OK;
}

static hp_status parse_inputs(const hp_yaml_node *inputs, const char *sec, hp_arena *arena, hp_strategy_config *s) {
    if (hp_yaml_is_null(inputs)) return HP_STATUS_OK;
    if (inputs->kind != HP_YAML_KIND_MAP)
        return hp__config_error(inputs, "%s.inputs expects a map from input name to tensor_map (e.g. tokens: "
                                "[dp, none]), got %s", sec, hp__config_node_text(inputs));
    s->inputs = hp_arena_alloc(arena, (inputs->count ? inputs->count : 1) * sizeof *s->inputs, _Alignof(hp_strategy_rule));
    if (!s->inputs) return OOM();
    for (size_t i = 0; i < inputs->count; i++) {
        hp_strategy_rule *r = &s->inputs[s->n_inputs++];
        char what[512];
        snprintf(what, sizeof what, "%s.inputs.%s", sec, inputs->keys[i]);
        HP_CHECK(parse_tmap(inputs->items[i], s, what, &r->tensor_map));
        r->match = hp_arena_strdup(arena, inputs->keys[i]);
        r->line = inputs->items[i]->line;
        if (!r->match) return OOM();
    }
    return HP_STATUS_OK;
}

/* NULL when `p` is a well-formed fnmatch(3) pattern, else what is wrong with it. */
static const char *glob_problem(const char *p) {
    for (; *p; p++) {
        if (*p == '\\') {
            if (!p[1]) return "it ends in a lone '\\'";
            p++;
        } else if (*p == '[') {
            const char *q = p + 1;
            if (*q == '!' || *q == '^') q++;
            if (*q == ']') q++; /* a leading ']' is literal */
            while (*q && *q != ']') q++;
            if (!*q) return "a '[' is never closed by ']'";
            p = q;
        }
    }
    return NULL;
}

static hp_status parse_params(const hp_yaml_node *params, const char *sec, hp_arena *arena, hp_strategy_config *s) {
    if (hp_yaml_is_null(params)) return HP_STATUS_OK;
    if (params->kind != HP_YAML_KIND_SEQ)
        return hp__config_error(params, "%s.params expects a sequence of rules ({match: PATTERN, tensor_map: "
                                "[...]}), got %s", sec, hp__config_node_text(params));
    s->params = hp_arena_alloc(arena, (params->count ? params->count : 1) * sizeof *s->params, _Alignof(hp_strategy_rule));
    if (!s->params) return OOM();
    for (size_t i = 0; i < params->count; i++) {
        const hp_yaml_node *r = params->items[i];
        char what[320];
        snprintf(what, sizeof what, "%s.params[%zu]", sec, i);
        if (r->kind != HP_YAML_KIND_MAP)
            return hp__config_error(r, "%s expects a rule {match: PATTERN, tensor_map: [...]}, got %s", what,
                                    hp__config_node_text(r));
        const hp_yaml_node *partial = hp_yaml_map_get(r, "partial");
        if (partial)
            return hp__config_error(partial, "%s: 'partial' cannot be set: partial axes are derived by the partitioner "
                                    "(expected only match and tensor_map)", what);
        static const char *const keys[] = {"match", "tensor_map"};
        HP_CHECK(hp_yaml_check_keys(r, keys, 2, what));
        const hp_yaml_node *match = hp_yaml_map_get(r, "match"), *tm = hp_yaml_map_get(r, "tensor_map");
        if (!match)
            return hp__config_error(r, "%s: missing key 'match' (a glob over parameter names, e.g. "
                                    "\"blocks.*.attn.q.weight\")", what);
        if (!tm) return hp__config_error(r, "%s: missing key 'tensor_map' (e.g. [tp, none])", what);
        char mwhat[352];
        snprintf(mwhat, sizeof mwhat, "%s.match", what);
        const char *pattern;
        HP_CHECK(hp_yaml_as_string(match, mwhat, &pattern));
        if (!*pattern) return hp__config_error(match, "%s expects a non-empty glob pattern", mwhat);
        const char *bad = glob_problem(pattern);
        if (bad) return hp__config_error(match, "%s: bad glob pattern \"%s\": %s", mwhat, pattern, bad);
        hp_strategy_rule *out = &s->params[s->n_params++];
        char twhat[1024];
        snprintf(twhat, sizeof twhat, "%s.tensor_map (match \"%s\")", what, pattern);
        HP_CHECK(parse_tmap(tm, s, twhat, &out->tensor_map));
        out->match = hp_arena_strdup(arena, pattern);
        out->line = match->line;
        if (!out->match) return OOM();
    }
    return HP_STATUS_OK;
}

static hp_status parse_optimizer(const hp_yaml_node *opt, const char *sec, hp_strategy_config *s) {
    if (hp_yaml_is_null(opt)) return HP_STATUS_OK;
    static const char *const keys[] = {"shard"};
    char what[320];
    snprintf(what, sizeof what, "%s.optimizer", sec);
    HP_CHECK(hp_yaml_check_keys(opt, keys, 1, what));
    snprintf(what, sizeof what, "%s.optimizer.shard", sec);
    const hp_yaml_node *shard = hp_yaml_map_get(opt, "shard");
    if (is_none(shard)) return HP_STATUS_OK;
    uint32_t used = 0;
    if (shard->kind == HP_YAML_KIND_SCALAR) { /* shard: dp */
        HP_CHECK(parse_alias(shard, s, what, &used, &s->opt_shard[0]));
        s->n_opt_shard = 1;
        return HP_STATUS_OK;
    }
    if (shard->kind != HP_YAML_KIND_SEQ || shard->count > (size_t)s->n_axes)
        return hp__config_error(shard, "%s expects a list of at most %d mesh aliases (e.g. [dp]) "
                                "or none, got %s", what, s->n_axes,
                                shard->kind == HP_YAML_KIND_SEQ ? "a longer list" : hp__config_node_text(shard));
    for (size_t k = 0; k < shard->count; k++) {
        char kwhat[352];
        snprintf(kwhat, sizeof kwhat, "%s[%zu]", what, k);
        HP_CHECK(parse_alias(shard->items[k], s, kwhat, &used, &s->opt_shard[k]));
    }
    s->n_opt_shard = (int)shard->count;
    return HP_STATUS_OK;
}

/* The rules (inputs, params, optimizer, bucket_size, context_parallel, ring_load_balance) of map `rules` (NULL or null: none); `sec` names
 * the map in messages. The mesh is already in *s. */
static hp_status parse_rules(const hp_yaml_node *rules, const char *sec, hp_arena *arena, hp_strategy_config *s) {
    if (hp_yaml_is_null(rules)) return HP_STATUS_OK;
    HP_CHECK(parse_inputs(hp_yaml_map_get(rules, "inputs"), sec, arena, s));
    HP_CHECK(parse_params(hp_yaml_map_get(rules, "params"), sec, arena, s));
    HP_CHECK(parse_optimizer(hp_yaml_map_get(rules, "optimizer"), sec, s));
    const hp_yaml_node *cp = hp_yaml_map_get(rules, "context_parallel");
    if (cp && !hp_yaml_is_null(cp)) {
        if (cp->kind == HP_YAML_KIND_SCALAR && !strcmp(cp->scalar, "ring")) s->context_parallel = HP_CP_RING;
        else if (cp->kind == HP_YAML_KIND_SCALAR && !strcmp(cp->scalar, "ulysses")) s->context_parallel = HP_CP_ULYSSES;
        else
            return hp__config_error(cp, "%s.context_parallel: %s is not an algorithm (expected ulysses or ring)", sec,
                                    hp__config_node_text(cp));
    }
    if (cp && !hp_yaml_is_null(cp)) s->ring_load_balance_line = cp->line;
    const hp_yaml_node *lb = hp_yaml_map_get(rules, "ring_load_balance");
    if (lb && !hp_yaml_is_null(lb)) {
        char w[320];
        snprintf(w, sizeof w, "%s.ring_load_balance", sec);
        bool on;
        if (hp_yaml_as_bool(lb, w, &on) != HP_STATUS_OK)
            return hp__config_error(lb, "%s: %s is not true or false", w, hp__config_node_text(lb));
        s->ring_load_balance = on ? 1 : -1;
        s->ring_load_balance_line = lb->line;
    }
    char what[320];
    snprintf(what, sizeof what, "%s.bucket_size", sec);
    return hp__config_read_size(hp_yaml_map_get(rules, "bucket_size"), what, &s->bucket_size);
}

/* HP_STATUS_CONFIG for a 'partial' key in map n (NULL when there is none). */
static hp_status refuse_partial(const hp_yaml_node *n, const char *sec, const char *known) {
    const hp_yaml_node *p = n && n->kind == HP_YAML_KIND_MAP ? hp_yaml_map_get(n, "partial") : NULL;
    if (!p) return HP_STATUS_OK;
    return hp__config_error(p, "%s: 'partial' cannot be set: partial axes are derived by the partitioner (known keys: "
                            "%s)", sec, known);
}

hp_status hp__config_read_strategy(const hp_yaml_node *node, hp_arena *arena, hp_strategy_config *s) {
    if (hp_yaml_is_null(node)) return HP_STATUS_OK;
    static const char *const keys[] = {"mesh",        "inputs",           "params",           "optimizer",
                                       "bucket_size", "context_parallel", "ring_load_balance"};
    HP_CHECK(refuse_partial(node, "strategy",
                            "mesh, inputs, params, optimizer, bucket_size, context_parallel, ring_load_balance"));
    HP_CHECK(hp_yaml_check_keys(node, keys, sizeof keys / sizeof keys[0], "strategy"));
    s->present = true;
    s->file = hp_arena_strdup(arena, node->file ? node->file : "<string>");
    if (!s->file) return OOM();
    const hp_yaml_node *mesh = hp_yaml_map_get(node, "mesh");
    if (!mesh)
        return hp__config_error(node, "strategy: missing key 'mesh' (expected mesh: {device_matrix: [...], "
                                "alias_name: [...]})");
    HP_CHECK(parse_mesh(mesh, "strategy.mesh", true, arena, s));
    return parse_rules(node, "strategy", arena, s);
}

hp_status hp__config_read_group_strategy(const hp_yaml_node *mesh, const hp_yaml_node *rules, const char *name,
                                         hp_arena *arena, hp_strategy_config *s) {
    char mw[256], sec[256];
    snprintf(mw, sizeof mw, "groups.%s.mesh", name);
    snprintf(sec, sizeof sec, "groups.%s.strategy", name);
    static const char *const keys[] = {"inputs", "params", "optimizer", "bucket_size", "context_parallel",
                                       "ring_load_balance"};
    HP_CHECK(refuse_partial(rules, sec, "inputs, params, optimizer, bucket_size, context_parallel, ring_load_balance"));
    const hp_yaml_node *inner = rules && rules->kind == HP_YAML_KIND_MAP ? hp_yaml_map_get(rules, "mesh") : NULL;
    if (inner)
        return hp__config_error(inner, "%s: the group's mesh is its own key %s, not part of its strategy", sec, mw);
    HP_CHECK(hp_yaml_check_keys(rules, keys, sizeof keys / sizeof keys[0], sec));
    if (hp_yaml_is_null(mesh)) {
        if (!hp_yaml_is_null(rules))
            return hp__config_error(rules, "%s needs the group's mesh (its tensor_maps name the axes of %s: "
                                    "{device_matrix: [...], alias_name: [...]})", sec, mw);
        return HP_STATUS_OK;
    }
    if (mesh->kind == HP_YAML_KIND_MAP && hp_yaml_map_get(mesh, "ranks"))
        return hp__config_error(hp_yaml_map_get(mesh, "ranks"), "%s: 'ranks' cannot be set: the group's mesh numbers "
                                "its devices in the order of groups.%s.ranks (row-major)", mw, name);
    s->present = true;
    s->file = hp_arena_strdup(arena, mesh->file ? mesh->file : "<string>");
    if (!s->file) return OOM();
    HP_CHECK(parse_mesh(mesh, mw, false, arena, s));
    return parse_rules(rules, sec, arena, s);
}

/* Writes the mesh and rules as JSON into `group` (a group's object: mesh, strategy keys). */
bool hp__config_group_strategy_json(const hp_strategy_config *s, cJSON *group) {
    if (!s->present) return true;
    cJSON *all = hp__config_strategy_json(s);
    if (!all) return false;
    cJSON *mesh = cJSON_DetachItemFromObject(all, "mesh");
    cJSON_DeleteItemFromObject(mesh, "ranks");
    bool ok = mesh && cJSON_AddItemToObject(group, "mesh", mesh);
    if (!ok) cJSON_Delete(mesh);
    ok = ok && cJSON_AddItemToObject(group, "strategy", all);
    if (!ok) cJSON_Delete(all);
    return ok;
}

/* ---------------------------------------------------------------- writing */

static cJSON *tmap_json(const hp_strategy_config *s, const hp_tensor_map_config *tm) {
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; a && d < tm->n; d++) {
        cJSON *e;
        if (tm->nmap[d] == 0) {
            e = cJSON_CreateString("none");
        } else if (tm->nmap[d] == 1) {
            e = cJSON_CreateString(s->alias_name[tm->map[d][0]]);
        } else {
            e = cJSON_CreateArray();
            for (int k = 0; e && k < tm->nmap[d]; k++)
                if (!cJSON_AddItemToArray(e, cJSON_CreateString(s->alias_name[tm->map[d][k]]))) {
                    cJSON_Delete(e);
                    e = NULL;
                }
        }
        if (!e || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* Adds `v` to object `o` under `key`; deletes v and returns false on failure. */
static bool add(cJSON *o, const char *key, cJSON *v) {
    if (v && cJSON_AddItemToObject(o, key, v)) return true;
    cJSON_Delete(v);
    return false;
}

cJSON *hp__config_strategy_json(const hp_strategy_config *s) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *mesh = cJSON_CreateObject();
    bool ok = add(root, "mesh", mesh);
    cJSON *dm = cJSON_CreateArray(), *an = cJSON_CreateArray();
    ok = add(mesh, "device_matrix", dm) && ok;
    ok = add(mesh, "alias_name", an) && ok;
    int64_t size = 1;
    for (int a = 0; ok && a < s->n_axes; a++) {
        ok = cJSON_AddItemToArray(dm, cJSON_CreateNumber(s->device_matrix[a])) &&
             cJSON_AddItemToArray(an, cJSON_CreateString(s->alias_name[a]));
        size *= s->device_matrix[a];
    }
    if (ok && s->ranks) {
        cJSON *rk = cJSON_CreateArray();
        ok = add(mesh, "ranks", rk);
        for (int64_t i = 0; ok && i < size; i++) ok = cJSON_AddItemToArray(rk, cJSON_CreateNumber(s->ranks[i]));
    }
    cJSON *inputs = cJSON_CreateObject();
    ok = add(root, "inputs", inputs) && ok;
    for (int i = 0; ok && i < s->n_inputs; i++) ok = add(inputs, s->inputs[i].match, tmap_json(s, &s->inputs[i].tensor_map));
    cJSON *params = cJSON_CreateArray();
    ok = add(root, "params", params) && ok;
    for (int i = 0; ok && i < s->n_params; i++) {
        cJSON *r = cJSON_CreateObject();
        ok = r && cJSON_AddItemToArray(params, r);
        if (!ok) cJSON_Delete(r);
        ok = ok && add(r, "match", cJSON_CreateString(s->params[i].match)) &&
             add(r, "tensor_map", tmap_json(s, &s->params[i].tensor_map));
    }
    cJSON *opt = cJSON_CreateObject(), *shard = cJSON_CreateArray();
    ok = add(root, "optimizer", opt) && ok;
    ok = ok && add(opt, "shard", shard);
    for (int k = 0; ok && k < s->n_opt_shard; k++)
        ok = cJSON_AddItemToArray(shard, cJSON_CreateString(s->alias_name[s->opt_shard[k]]));
    ok = ok && add(root, "bucket_size", hp__config_json_number((double)s->bucket_size));
    ok = ok && add(root, "context_parallel", cJSON_CreateString(s->context_parallel == HP_CP_RING ? "ring" : "ulysses"));
    if (s->ring_load_balance) ok = ok && add(root, "ring_load_balance", cJSON_CreateBool(s->ring_load_balance > 0));
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
