/*
 * The `strategy:` section of a run config: mesh, input tensor_maps, ordered parameter rules and
 * optimizer-state sharding (ZeRO), turned into one hp_layout per leaf tensor of a graph.
 * The format and its rules are documented in include/hp/strategy.h.
 */
#include "hp/strategy.h"

#include "hp/offload_plan.h" /* hp_offload_parse_size: one size syntax for every budget in a run config */
#include "hp/shard.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor_map as written: n leading dims, each split over nmap[d] mesh axes (indices). */
typedef struct tmap {
    int n;
    int nmap[HP_MAX_DIMS];
    int map[HP_MAX_DIMS][HP_MESH_MAX_AXES];
} tmap;

/* One params rule or inputs entry. */
typedef struct rule {
    const char *pattern; /* glob (params) or exact name (inputs); arena-owned */
    tmap tm;
    int line;
} rule;

struct hp_strategy {
    hp_arena *arena;
    hp_mesh *mesh;
    const char *file; /* the config file the section came from ("" for none); arena-owned */
    rule *inputs;
    int n_inputs;
    rule *params;
    int n_params;
    int n_opt_shard;
    int opt_shard[HP_MESH_MAX_AXES]; /* optimizer.shard axes, in the order given */
    int64_t bucket_size;             /* gradient bucket bytes per rank; 0: off */
};

/* ---------------------------------------------------------------- errors */

/* HP_STATUS_CONFIG "file:line:col: <message>" at node n. */
static hp_status __attribute__((format(printf, 2, 3))) cfg_err(const hp_yaml_node *n, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!n) return hp_error(HP_STATUS_CONFIG, "%s", msg);
    return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s", n->file ? n->file : "<string>", n->line, n->column, msg);
}

/* A short rendering of a node for messages: the scalar text, or "a map" / "a sequence". */
static const char *node_text(const hp_yaml_node *n) {
    if (!n) return "nothing";
    if (n->kind == HP_YAML_KIND_MAP) return "a map";
    if (n->kind == HP_YAML_KIND_SEQ) return "a sequence";
    return n->scalar;
}

static void axes_list(const hp_mesh *m, char *buf, size_t size) {
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < hp_mesh_naxes(m) && k < size; a++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", a ? ", " : "", hp_mesh_axis_name(m, a));
}

/* ---------------------------------------------------------------- parsing */

static bool is_none(const hp_yaml_node *n) {
    return hp_yaml_is_null(n) || (n->kind == HP_YAML_KIND_SCALAR && strcmp(n->scalar, "none") == 0);
}

/* Alias at node n (a scalar) to an axis index; `*used` catches an alias used twice. */
static hp_status parse_alias(const hp_yaml_node *n, const hp_mesh *m, const char *what, uint32_t *used, int *axis) {
    if (!n || n->kind != HP_YAML_KIND_SCALAR || !*n->scalar || strcmp(n->scalar, "none") == 0)
        return cfg_err(n, "%s expects a mesh alias, got %s%s%s", what, n && n->kind == HP_YAML_KIND_SCALAR ? "'" : "",
                       n && n->kind == HP_YAML_KIND_SCALAR ? n->scalar : node_text(n),
                       n && n->kind == HP_YAML_KIND_SCALAR ? "'" : "");
    for (int a = 0; a < hp_mesh_naxes(m); a++) {
        if (strcmp(hp_mesh_axis_name(m, a), n->scalar) != 0) continue;
        if (*used & (1u << a))
            return cfg_err(n, "%s: alias '%s' is used twice (a mesh axis may split a tensor only once)", what, n->scalar);
        *used |= 1u << a;
        *axis = a;
        return HP_STATUS_OK;
    }
    char axes[256];
    axes_list(m, axes, sizeof axes);
    return cfg_err(n, "%s: unknown alias '%s' (the mesh's aliases are: %s)", what, n->scalar, axes);
}

/* A tensor_map: a sequence of entries alias | none | [alias, ...]. */
static hp_status parse_tmap(const hp_yaml_node *n, const hp_mesh *m, const char *what, tmap *out) {
    memset(out, 0, sizeof *out);
    if (!n || n->kind != HP_YAML_KIND_SEQ)
        return cfg_err(n, "%s expects a tensor_map: a sequence with, per tensor dimension, an alias, none or a list "
                       "of aliases (e.g. [dp, none]), got %s%s%s",
                       what, n && n->kind == HP_YAML_KIND_SCALAR ? "'" : "", node_text(n),
                       n && n->kind == HP_YAML_KIND_SCALAR ? "'" : "");
    if (n->count > HP_MAX_DIMS)
        return cfg_err(n, "%s has %zu entries, more than the %d dimensions a tensor can have", what, n->count,
                       HP_MAX_DIMS);
    uint32_t used = 0;
    out->n = (int)n->count;
    for (int d = 0; d < out->n; d++) {
        const hp_yaml_node *e = n->items[d];
        char ewhat[320];
        snprintf(ewhat, sizeof ewhat, "%s[%d]", what, d);
        if (is_none(e)) continue;
        if (e->kind == HP_YAML_KIND_MAP) return cfg_err(e, "%s expects an alias, none or a list of aliases, got a map", ewhat);
        if (e->kind == HP_YAML_KIND_SCALAR) {
            HP_CHECK(parse_alias(e, m, ewhat, &used, &out->map[d][0]));
            out->nmap[d] = 1;
            continue;
        }
        if (e->count > (size_t)hp_mesh_naxes(m))
            return cfg_err(e, "%s lists %zu aliases but the mesh has %d axes", ewhat, e->count, hp_mesh_naxes(m));
        for (size_t k = 0; k < e->count; k++) {
            char kwhat[352];
            snprintf(kwhat, sizeof kwhat, "%s[%zu]", ewhat, k);
            HP_CHECK(parse_alias(e->items[k], m, kwhat, &used, &out->map[d][k]));
        }
        out->nmap[d] = (int)e->count;
    }
    return HP_STATUS_OK;
}

static hp_status parse_mesh(hp_strategy *s, const hp_yaml_node *mesh, const hp_yaml_node *section, int world_size) {
    if (!mesh)
        return cfg_err(section, "strategy: missing key 'mesh' (expected mesh: {device_matrix: [...], alias_name: [...]})");
    static const char *const keys[] = {"device_matrix", "alias_name", "ranks"};
    HP_CHECK(hp_yaml_check_keys(mesh, keys, 3, "strategy.mesh"));
    if (mesh->kind != HP_YAML_KIND_MAP)
        return cfg_err(mesh, "strategy.mesh expects a map with device_matrix and alias_name, got %s", node_text(mesh));
    const hp_yaml_node *dm = hp_yaml_map_get(mesh, "device_matrix");
    const hp_yaml_node *an = hp_yaml_map_get(mesh, "alias_name");
    const hp_yaml_node *rk = hp_yaml_map_get(mesh, "ranks");
    if (!dm) return cfg_err(mesh, "strategy.mesh: missing key 'device_matrix' (the mesh shape, e.g. [2, 2])");
    if (!an) return cfg_err(mesh, "strategy.mesh: missing key 'alias_name' (one name per mesh axis, e.g. [dp, tp])");
    if (dm->kind != HP_YAML_KIND_SEQ || dm->count < 1 || dm->count > HP_MESH_MAX_AXES)
        return cfg_err(dm, "strategy.mesh.device_matrix expects a sequence of 1 to %d axis sizes, got %s%s", HP_MESH_MAX_AXES,
                       node_text(dm), dm->kind == HP_YAML_KIND_SEQ ? (dm->count ? " that is too long" : " that is empty") : "");
    if (an->kind != HP_YAML_KIND_SEQ || an->count != dm->count)
        return cfg_err(an, "strategy.mesh.alias_name expects a sequence of %zu names (one per device_matrix axis), got %s%s",
                       dm->count, an->kind == HP_YAML_KIND_SEQ ? "" : node_text(an),
                       an->kind == HP_YAML_KIND_SEQ ? (an->count == 1 ? "1 name" : "a different number of names") : "");
    int naxes = (int)dm->count, dims[HP_MESH_MAX_AXES];
    const char *names[HP_MESH_MAX_AXES];
    int64_t size = 1;
    char shape[128];
    size_t k = 0;
    k += (size_t)snprintf(shape + k, sizeof shape - k, "[");
    for (int a = 0; a < naxes; a++) {
        char what[64];
        snprintf(what, sizeof what, "strategy.mesh.device_matrix[%d]", a);
        int64_t v;
        HP_CHECK(hp_yaml_as_int(dm->items[a], what, &v));
        if (v < 1 || v > (1 << 20))
            return cfg_err(dm->items[a], "%s must be an axis size >= 1, got %lld", what, (long long)v);
        dims[a] = (int)v;
        size *= v;
        if (k < sizeof shape) k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%d", a ? ", " : "", dims[a]);
        snprintf(what, sizeof what, "strategy.mesh.alias_name[%d]", a);
        HP_CHECK(hp_yaml_as_string(an->items[a], what, &names[a]));
        if (!*names[a] || strcmp(names[a], "none") == 0 || strlen(names[a]) >= HP_MESH_MAX_NAME)
            return cfg_err(an->items[a], "%s: '%s' is not a valid axis name (expected 1 to %d characters, not 'none')", what,
                           names[a], HP_MESH_MAX_NAME - 1);
        for (int b = 0; b < a; b++)
            if (strcmp(names[a], names[b]) == 0)
                return cfg_err(an->items[a], "%s: axis name '%s' is used twice", what, names[a]);
        if (size > (int64_t)1 << 30) return cfg_err(dm, "strategy.mesh.device_matrix has too many devices");
    }
    if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
    if (world_size == 0) world_size = (int)size; /* no job yet: the mesh says how many ranks */
    if (size != world_size)
        return cfg_err(dm, "strategy mesh %s has %lld devices but the job runs on %d rank%s", shape, (long long)size,
                       world_size, world_size == 1 ? "" : "s");
    int *ranks = NULL;
    if (rk && !hp_yaml_is_null(rk)) {
        if (rk->kind != HP_YAML_KIND_SEQ || rk->count != (size_t)size)
            return cfg_err(rk, "strategy.mesh.ranks expects a sequence of %lld world ranks (one per device of mesh %s), got %s%s",
                           (long long)size, shape, rk->kind == HP_YAML_KIND_SEQ ? "" : node_text(rk),
                           rk->kind == HP_YAML_KIND_SEQ ? "a sequence of a different length" : "");
        ranks = hp_arena_alloc(s->arena, (size_t)size * sizeof *ranks, _Alignof(int));
        if (!ranks) return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
        for (int64_t i = 0; i < size; i++) {
            char what[64];
            snprintf(what, sizeof what, "strategy.mesh.ranks[%lld]", (long long)i);
            int64_t v;
            HP_CHECK(hp_yaml_as_int(rk->items[i], what, &v));
            if (v < 0 || v >= world_size)
                return cfg_err(rk->items[i], "%s: rank %lld is out of range (the job's ranks are 0..%d)", what, (long long)v,
                               world_size - 1);
            for (int64_t j = 0; j < i; j++)
                if (ranks[j] == v) return cfg_err(rk->items[i], "%s: rank %lld is listed twice", what, (long long)v);
            ranks[i] = (int)v;
        }
    }
    hp_status st = hp_mesh_new(naxes, dims, names, ranks, (int)size, &s->mesh);
    if (st != HP_STATUS_OK)
        return hp_error_prefix(HP_STATUS_CONFIG, "%s:%d:%d: strategy.mesh: ", mesh->file, mesh->line, mesh->column);
    return HP_STATUS_OK;
}

static hp_status parse_inputs(hp_strategy *s, const hp_yaml_node *inputs) {
    if (hp_yaml_is_null(inputs)) return HP_STATUS_OK;
    if (inputs->kind != HP_YAML_KIND_MAP)
        return cfg_err(inputs, "strategy.inputs expects a map from input name to tensor_map (e.g. tokens: [dp, none]), got %s",
                       node_text(inputs));
    s->inputs = hp_arena_alloc(s->arena, (inputs->count ? inputs->count : 1) * sizeof *s->inputs, _Alignof(rule));
    if (!s->inputs) return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    for (size_t i = 0; i < inputs->count; i++) {
        rule *r = &s->inputs[s->n_inputs++];
        char what[320];
        snprintf(what, sizeof what, "strategy.inputs.%s", inputs->keys[i]);
        HP_CHECK(parse_tmap(inputs->items[i], s->mesh, what, &r->tm));
        r->pattern = hp_arena_strdup(s->arena, inputs->keys[i]);
        r->line = inputs->items[i]->line;
        if (!r->pattern) return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    }
    return HP_STATUS_OK;
}

static hp_status parse_params(hp_strategy *s, const hp_yaml_node *params) {
    if (hp_yaml_is_null(params)) return HP_STATUS_OK;
    if (params->kind != HP_YAML_KIND_SEQ)
        return cfg_err(params, "strategy.params expects a sequence of rules ({match: PATTERN, tensor_map: [...]}), got %s",
                       node_text(params));
    s->params = hp_arena_alloc(s->arena, (params->count ? params->count : 1) * sizeof *s->params, _Alignof(rule));
    if (!s->params) return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    for (size_t i = 0; i < params->count; i++) {
        const hp_yaml_node *r = params->items[i];
        char what[64];
        snprintf(what, sizeof what, "strategy.params[%zu]", i);
        if (r->kind != HP_YAML_KIND_MAP)
            return cfg_err(r, "%s expects a rule {match: PATTERN, tensor_map: [...]}, got %s", what, node_text(r));
        const hp_yaml_node *partial = hp_yaml_map_get(r, "partial");
        if (partial)
            return cfg_err(partial, "%s: 'partial' cannot be set: partial axes are derived by the partitioner (expected "
                           "only match and tensor_map)", what);
        static const char *const keys[] = {"match", "tensor_map"};
        HP_CHECK(hp_yaml_check_keys(r, keys, 2, what));
        const hp_yaml_node *match = hp_yaml_map_get(r, "match"), *tm = hp_yaml_map_get(r, "tensor_map");
        if (!match) return cfg_err(r, "%s: missing key 'match' (a glob over parameter names, e.g. \"blocks.*.attn.q.weight\")", what);
        if (!tm) return cfg_err(r, "%s: missing key 'tensor_map' (e.g. [tp, none])", what);
        char mwhat[80];
        snprintf(mwhat, sizeof mwhat, "%s.match", what);
        const char *pattern;
        HP_CHECK(hp_yaml_as_string(match, mwhat, &pattern));
        if (!*pattern) return cfg_err(match, "%s expects a non-empty glob pattern", mwhat);
        rule *out = &s->params[s->n_params++];
        char twhat[600];
        snprintf(twhat, sizeof twhat, "%s.tensor_map (match \"%s\")", what, pattern);
        HP_CHECK(parse_tmap(tm, s->mesh, twhat, &out->tm));
        out->pattern = hp_arena_strdup(s->arena, pattern);
        out->line = match->line;
        if (!out->pattern) return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    }
    return HP_STATUS_OK;
}

static hp_status parse_optimizer(hp_strategy *s, const hp_yaml_node *opt) {
    if (hp_yaml_is_null(opt)) return HP_STATUS_OK;
    static const char *const keys[] = {"shard"};
    HP_CHECK(hp_yaml_check_keys(opt, keys, 1, "strategy.optimizer"));
    const hp_yaml_node *shard = hp_yaml_map_get(opt, "shard");
    if (is_none(shard)) return HP_STATUS_OK;
    uint32_t used = 0;
    if (shard->kind == HP_YAML_KIND_SCALAR) { /* shard: dp */
        HP_CHECK(parse_alias(shard, s->mesh, "strategy.optimizer.shard", &used, &s->opt_shard[0]));
        s->n_opt_shard = 1;
        return HP_STATUS_OK;
    }
    if (shard->kind != HP_YAML_KIND_SEQ || shard->count > (size_t)hp_mesh_naxes(s->mesh))
        return cfg_err(shard, "strategy.optimizer.shard expects a list of at most %d mesh aliases (e.g. [dp]) or none, got %s",
                       hp_mesh_naxes(s->mesh), shard->kind == HP_YAML_KIND_SEQ ? "a longer list" : node_text(shard));
    for (size_t k = 0; k < shard->count; k++) {
        char what[64];
        snprintf(what, sizeof what, "strategy.optimizer.shard[%zu]", k);
        HP_CHECK(parse_alias(shard->items[k], s->mesh, what, &used, &s->opt_shard[k]));
    }
    s->n_opt_shard = (int)shard->count;
    return HP_STATUS_OK;
}

static hp_status parse_bucket_size(hp_strategy *s, const hp_yaml_node *n) {
    if (!n || hp_yaml_is_null(n)) return HP_STATUS_OK;
    const char *text;
    HP_CHECK(hp_yaml_as_string(n, "strategy.bucket_size", &text));
    size_t v;
    hp_status st = hp_offload_parse_size(text, &v);
    if (st == HP_STATUS_OK && v > (size_t)INT64_MAX) st = hp_error(HP_STATUS_CONFIG, "size '%s' is too large", text);
    if (st != HP_STATUS_OK)
        return hp_error_prefix(st, "%s:%d:%d: strategy.bucket_size (bytes per gradient bucket, e.g. 25MiB; 0: off): ",
                               n->file ? n->file : "<string>", n->line, n->column);
    s->bucket_size = (int64_t)v;
    return HP_STATUS_OK;
}

hp_status hp_strategy_parse(const hp_yaml_node *node, int world_size, hp_strategy **out) {
    if (!out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_strategy_parse: out is NULL");
    *out = NULL;
    if (world_size < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_strategy_parse: world_size %d < 0", world_size);
    hp_strategy *s = calloc(1, sizeof *s);
    if (s) s->arena = hp_arena_new(0);
    if (!s || !s->arena) {
        free(s);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    }
    hp_status st = HP_STATUS_OK;
    s->bucket_size = HP_BUCKET_SIZE_DEFAULT;
    if (hp_yaml_is_null(node)) {
        s->file = "";
        if (world_size > 1) {
            st = hp_error(HP_STATUS_CONFIG, "the run config has no strategy section, so it runs on 1 device, but the job "
                          "runs on %d ranks (add strategy.mesh with %d devices)", world_size, world_size);
            goto fail;
        }
        HP_CHECK_GOTO(hp_mesh_new(1, (int[]){1}, (const char *[]){"dp"}, NULL, 1, &s->mesh), st, fail);
        *out = s;
        return HP_STATUS_OK;
    }
    s->file = hp_arena_strdup(s->arena, node->file ? node->file : "<string>");
    if (!s->file) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
        goto fail;
    }
    static const char *const keys[] = {"mesh", "inputs", "params", "optimizer", "bucket_size"};
    if (node->kind == HP_YAML_KIND_MAP && hp_yaml_map_get(node, "partial")) {
        st = cfg_err(hp_yaml_map_get(node, "partial"), "strategy: 'partial' cannot be set: partial axes are derived by the "
                     "partitioner (known keys: mesh, inputs, params, optimizer, bucket_size)");
        goto fail;
    }
    HP_CHECK_GOTO(hp_yaml_check_keys(node, keys, 5, "strategy"), st, fail);
    HP_CHECK_GOTO(parse_mesh(s, hp_yaml_map_get(node, "mesh"), node, world_size), st, fail);
    HP_CHECK_GOTO(parse_inputs(s, hp_yaml_map_get(node, "inputs")), st, fail);
    HP_CHECK_GOTO(parse_params(s, hp_yaml_map_get(node, "params")), st, fail);
    HP_CHECK_GOTO(parse_optimizer(s, hp_yaml_map_get(node, "optimizer")), st, fail);
    HP_CHECK_GOTO(parse_bucket_size(s, hp_yaml_map_get(node, "bucket_size")), st, fail);
    *out = s;
    return HP_STATUS_OK;
fail:
    hp_strategy_free(s);
    return st;
}

void hp_strategy_free(hp_strategy *s) {
    if (!s) return;
    hp_mesh_free(s->mesh);
    hp_arena_free(s->arena);
    free(s);
}

hp_mesh *hp_strategy_mesh(hp_strategy *s) { return s ? s->mesh : NULL; }

int64_t hp_strategy_bucket_size(const hp_strategy *s) { return s ? s->bucket_size : HP_BUCKET_SIZE_DEFAULT; }

/* ---------------------------------------------------------------- annotation */

static void tmap_layout(const tmap *tm, int ndim, hp_layout *l) {
    hp_layout_init(l, ndim);
    for (int d = 0; d < tm->n && d < ndim; d++) {
        l->nmap[d] = tm->nmap[d];
        memcpy(l->map[d], tm->map[d], (size_t)tm->nmap[d] * sizeof tm->map[d][0]);
    }
}

static void tmap_str(const hp_strategy *s, const tmap *tm, char *buf, size_t n) {
    hp_layout l;
    tmap_layout(tm, tm->n, &l);
    hp_layout_format(&l, s->mesh, buf, n);
}

/* The layout of tensor x (named `name`) from a tensor_map; errors when the map is longer than the rank. */
static hp_status rule_layout(const hp_strategy *s, const rule *r, const char *kind, const hp_tensor *x, hp_layout *l) {
    if (r->tm.n > x->shape.ndim) {
        char tm[256], shape[128];
        tmap_str(s, &r->tm, tm, sizeof tm);
        hp_shape_str(&x->shape, shape, sizeof shape);
        return hp_error(HP_STATUS_CONFIG, "%s:%d: strategy.%s '%s': tensor_map %s has %d entries but %s '%s' has rank %d "
                        "(shape %s)", s->file, r->line, kind, r->pattern, tm, r->tm.n,
                        x->kind == HP_TENSOR_KIND_PARAM ? "parameter" : "input", x->name, x->shape.ndim, shape);
    }
    tmap_layout(&r->tm, x->shape.ndim, l);
    return HP_STATUS_OK;
}

static hp_status check_layout(const hp_strategy *s, const hp_tensor *x, const hp_layout *l) {
    hp_status st = hp_layout_validate(l, s->mesh, &x->shape);
    if (st != HP_STATUS_OK) return hp_error_prefix(HP_STATUS_CONFIG, "%s: layout of '%s': ", s->file, x->name);
    return HP_STATUS_OK;
}

/* "exp_avg.X" / "exp_avg_sq.X" -> X, else NULL. */
static const char *opt_state_param(const char *name) {
    static const char *const prefixes[] = {"exp_avg.", "exp_avg_sq."};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(name, prefixes[i], n) == 0 && name[n]) return name + n;
    }
    return NULL;
}

hp_status hp_strategy_annotate(const hp_strategy *s, const hp_graph *g, hp_layout *layouts, int *n_warnings) {
    if (!s || !g || !layouts)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_strategy_annotate: %s is NULL", !s ? "s" : !g ? "g" : "layouts");
    if (n_warnings) *n_warnings = 0;
    int nt = hp_graph_n_tensors(g);
    for (int t = 0; t < nt; t++) {
        hp_layout_init(&layouts[t], 0);
        layouts[t].ndim = -1;
    }
    int warnings = 0;

    /* Parameters: the first matching rule wins; a later match must agree. */
    int *hits = NULL; /* parameters matched per rule */
    if (s->n_params && !(hits = calloc((size_t)s->n_params, sizeof *hits)))
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    hp_status st = HP_STATUS_OK;
    for (int t = 0; t < nt && st == HP_STATUS_OK; t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->kind != HP_TENSOR_KIND_PARAM || !x->name) continue;
        int won = -1;
        for (int i = 0; i < s->n_params; i++) {
            const rule *r = &s->params[i];
            if (fnmatch(r->pattern, x->name, 0) != 0) continue;
            hits[i]++;
            hp_layout l;
            HP_CHECK_GOTO(rule_layout(s, r, "params rule", x, &l), st, done);
            if (won < 0) {
                won = i;
                layouts[t] = l;
                HP_CHECK_GOTO(check_layout(s, x, &l), st, done);
            } else if (!hp_layout_equal(&l, &layouts[t])) {
                char a[256], b[256];
                hp_layout_format(&layouts[t], s->mesh, a, sizeof a);
                hp_layout_format(&l, s->mesh, b, sizeof b);
                st = hp_error(HP_STATUS_CONFIG, "%s: parameter '%s' is matched by rule \"%s\" (line %d) with layout %s and by "
                              "rule \"%s\" (line %d) with a different layout %s; make the patterns disjoint or the "
                              "layouts equal", s->file, x->name, s->params[won].pattern, s->params[won].line, a,
                              r->pattern, r->line, b);
                goto done;
            }
        }
    }
    for (int i = 0; i < s->n_params; i++) {
        if (hits[i]) continue;
        warnings++;
        hp_log(HP_LOG_LEVEL_WARN, "%s:%d: strategy.params rule \"%s\" matches no parameter", s->file, s->params[i].line,
               s->params[i].pattern);
    }

    /* Inputs: by exact name. */
    for (int i = 0; i < s->n_inputs; i++) {
        const rule *r = &s->inputs[i];
        hp_tid t = hp_graph_find(g, r->pattern);
        if (t == HP_TID_NONE) {
            warnings++;
            hp_log(HP_LOG_LEVEL_WARN, "%s:%d: strategy.inputs names '%s', which is not an input of the model", s->file,
                   r->line, r->pattern);
            continue;
        }
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->kind != HP_TENSOR_KIND_INPUT) {
            st = hp_error(HP_STATUS_CONFIG, "%s:%d: strategy.inputs names '%s', which is a %s tensor, not an input%s",
                          s->file, r->line, r->pattern, hp_tensor_kind_name(x->kind),
                          x->kind == HP_TENSOR_KIND_PARAM ? " (give parameters' layouts under params)" : "");
            goto done;
        }
        HP_CHECK_GOTO(rule_layout(s, r, "inputs entry", x, &layouts[t]), st, done);
        HP_CHECK_GOTO(check_layout(s, x, &layouts[t]), st, done);
    }

    /* Optimizer states: the parameter's layout plus the ZeRO axes on dim 0. */
    for (int t = 0; t < nt; t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->kind != HP_TENSOR_KIND_OPT_STATE || !x->name) continue;
        const char *pname = opt_state_param(x->name);
        hp_tid p = pname ? hp_graph_find(g, pname) : HP_TID_NONE;
        if (p == HP_TID_NONE || hp_graph_tensor(g, p)->kind != HP_TENSOR_KIND_PARAM) continue;
        const hp_layout *pl = &layouts[p];
        if (pl->ndim >= 0 && pl->ndim != x->shape.ndim) {
            st = hp_error(HP_STATUS_INTERNAL, "optimizer state '%s' has rank %d but its parameter '%s' has rank %d", x->name,
                          x->shape.ndim, pname, pl->ndim);
            goto done;
        }
        if (pl->ndim < 0 && s->n_opt_shard == 0) continue;
        hp_layout l;
        if (pl->ndim >= 0) l = *pl;
        else hp_layout_init(&l, x->shape.ndim);
        if (l.ndim > 0) {
            uint32_t used = hp_layout_sharded_axes(&l);
            for (int k = 0; k < s->n_opt_shard; k++)
                if (!(used & (1u << s->opt_shard[k]))) l.map[0][l.nmap[0]++] = s->opt_shard[k];
        }
        layouts[t] = l;
        HP_CHECK_GOTO(check_layout(s, x, &l), st, done);
    }
    if (n_warnings) *n_warnings = warnings;
done:
    free(hits);
    return st;
}

/* ---------------------------------------------------------------- description */

void hp_strategy_describe(const hp_strategy *s, FILE *f) {
    if (!s || !f) return;
    char buf[512];
    const hp_mesh *m = s->mesh;
    fprintf(f, "mesh %s: %d device%s%s%s\n", hp_mesh_str(m, buf, sizeof buf), hp_mesh_size(m),
            hp_mesh_size(m) == 1 ? "" : "s", *s->file ? " from " : "", s->file);
    for (int a = 0; a < hp_mesh_naxes(m); a++)
        fprintf(f, "  axis %d %-8s size %d\n", a, hp_mesh_axis_name(m, a), hp_mesh_dim(m, a));
    fprintf(f, "  ranks (row-major, last axis fastest):");
    for (int i = 0; i < hp_mesh_size(m); i++) {
        if (i == 64) {
            fprintf(f, " ... (%d more)", hp_mesh_size(m) - 64);
            break;
        }
        fprintf(f, " %d", hp_mesh_rank(m, i));
    }
    fprintf(f, "\n");
    fprintf(f, "inputs (unlisted inputs replicated):%s\n", s->n_inputs ? "" : " none listed");
    for (int i = 0; i < s->n_inputs; i++) {
        tmap_str(s, &s->inputs[i].tm, buf, sizeof buf);
        fprintf(f, "  %-32s %-24s line %d\n", s->inputs[i].pattern, buf, s->inputs[i].line);
    }
    fprintf(f, "params (first matching rule wins; unmatched parameters replicated):%s\n", s->n_params ? "" : " no rules");
    for (int i = 0; i < s->n_params; i++) {
        tmap_str(s, &s->params[i].tm, buf, sizeof buf);
        fprintf(f, "  %-32s %-24s line %d\n", s->params[i].pattern, buf, s->params[i].line);
    }
    if (s->n_opt_shard == 0) {
        fprintf(f, "optimizer states: laid out as their parameters\n");
    } else {
        size_t k = 0;
        for (int i = 0; i < s->n_opt_shard && k < sizeof buf; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", hp_mesh_axis_name(m, s->opt_shard[i]));
        fprintf(f, "optimizer states: as their parameters, dim 0 also split over [%s] (ZeRO)\n", buf);
    }
    if (s->bucket_size == 0)
        fprintf(f, "gradient buckets: off (one collective per gradient)\n");
    else
        fprintf(f, "gradient buckets: up to %lld bytes (%.2f MiB) per rank\n", (long long)s->bucket_size,
                (double)s->bucket_size / (1024.0 * 1024.0));
}
