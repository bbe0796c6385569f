/*
 * The `strategy:` section of a run config: mesh, input tensor_maps, ordered parameter rules and
 * optimizer-state sharding (ZeRO), turned into one hp_layout per leaf tensor of a graph.
 * The format and its rules are documented in include/hp/strategy.h.
 */
#include "hp/strategy.h"

#include "hp/config.h"
#include "hp/shard.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor_map as written (hp/config.h); axis indices are the mesh's (the same order as alias_name). */
typedef hp_tensor_map_config tmap;

_Static_assert(HP_CONFIG_MAX_AXES == HP_MESH_MAX_AXES, "config and mesh axis limits differ");
_Static_assert(HP_CONFIG_MAX_NAME == HP_MESH_MAX_NAME, "config and mesh axis name limits differ");

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
    hp_cp_algo context_parallel;     /* strategy.context_parallel */
    int ring_load_balance, ring_load_balance_line; /* hp_strategy_config's */
};

/* ---------------------------------------------------------------- from the typed config */

/* Copies n rules into the arena. */
static hp_status copy_rules(hp_arena *arena, const hp_strategy_rule *in, int n, rule **out) {
    *out = NULL;
    if (n == 0) return HP_STATUS_OK;
    rule *r = hp_arena_alloc(arena, (size_t)n * sizeof *r, _Alignof(rule));
    if (!r) return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    for (int i = 0; i < n; i++) {
        r[i] = (rule){.pattern = hp_arena_strdup(arena, in[i].match), .tm = in[i].tensor_map, .line = in[i].line};
        if (!r[i].pattern) return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    }
    *out = r;
    return HP_STATUS_OK;
}

static hp_status from_config(hp_strategy *s, const hp_strategy_config *c, int world_size) {
    int64_t size = 1;
    char shape[128];
    size_t k = (size_t)snprintf(shape, sizeof shape, "[");
    const char *names[HP_MESH_MAX_AXES];
    for (int a = 0; a < c->n_axes; a++) {
        size *= c->device_matrix[a];
        names[a] = c->alias_name[a];
        if (k < sizeof shape) k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%d", a ? ", " : "", c->device_matrix[a]);
    }
    if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
    if (world_size == 0) world_size = (int)size; /* no job yet: the mesh says how many ranks */
    if (size != world_size)
        return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: strategy mesh %s has %lld devices but the job runs on %d rank%s",
                        s->file, c->mesh_line, c->mesh_column, shape, (long long)size, world_size,
                        world_size == 1 ? "" : "s");
    if (hp_mesh_new(c->n_axes, c->device_matrix, names, c->ranks, (int)size, &s->mesh) != HP_STATUS_OK)
        return hp_error_prefix(HP_STATUS_CONFIG, "%s:%d:%d: strategy.mesh: ", s->file, c->mesh_line, c->mesh_column);
    HP_CHECK(copy_rules(s->arena, c->inputs, c->n_inputs, &s->inputs));
    s->n_inputs = c->n_inputs;
    HP_CHECK(copy_rules(s->arena, c->params, c->n_params, &s->params));
    s->n_params = c->n_params;
    s->n_opt_shard = c->n_opt_shard;
    memcpy(s->opt_shard, c->opt_shard, sizeof s->opt_shard);
    return HP_STATUS_OK;
}

hp_status hp_strategy_new(const hp_strategy_config *cfg, int world_size, hp_strategy **out) {
    if (!out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_strategy_new: out is NULL");
    *out = NULL;
    if (world_size < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_strategy_new: world_size %d < 0", world_size);
    hp_strategy *s = calloc(1, sizeof *s);
    if (s) s->arena = hp_arena_new(0);
    if (!s || !s->arena) {
        free(s);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
    }
    hp_status st = HP_STATUS_OK;
    s->bucket_size = cfg ? (int64_t)cfg->bucket_size : HP_BUCKET_SIZE_DEFAULT;
    s->context_parallel = cfg ? cfg->context_parallel : HP_CP_ULYSSES;
    s->ring_load_balance = cfg ? cfg->ring_load_balance : 0;
    s->ring_load_balance_line = cfg ? cfg->ring_load_balance_line : 0;
    if (!cfg || !cfg->present) {
        s->bucket_size = HP_BUCKET_SIZE_DEFAULT;
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
    s->file = hp_arena_strdup(s->arena, cfg->file ? cfg->file : "<string>");
    if (!s->file) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "strategy: out of memory");
        goto fail;
    }
    HP_CHECK_GOTO(from_config(s, cfg, world_size), st, fail);
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
hp_cp_algo hp_strategy_context_parallel(const hp_strategy *s) { return s ? s->context_parallel : HP_CP_ULYSSES; }

hp_status hp_strategy_ring_balance(const hp_strategy *s, int64_t seq, int *n_out) {
    if (!n_out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_strategy_ring_balance: n_out is NULL");
    *n_out = 0;
    if (!s || s->context_parallel != HP_CP_RING || s->ring_load_balance < 0) return HP_STATUS_OK;
    const rule *tok = NULL;
    for (int i = 0; i < s->n_inputs; i++)
        if (!strcmp(s->inputs[i].pattern, "tokens")) tok = &s->inputs[i];
    /* one axis on the sequence: ring attention's (a split over two axes takes Ulysses) */
    if (!tok || tok->tm.n < 2 || tok->tm.nmap[1] != 1) return HP_STATUS_OK;
    int axis = tok->tm.map[1][0], n = hp_mesh_dim(s->mesh, axis);
    if (n < 2) return HP_STATUS_OK;
    if (seq < 2 * (int64_t)n)
        return hp_error(HP_STATUS_CONFIG, "%s:%d: strategy.ring_load_balance: a sequence of %lld tokens does not split "
                        "into the 2 x %d chunks causal load balancing over axis '%s' needs (one token each at least); "
                        "set ring_load_balance: false or a longer model.context", s->file, s->ring_load_balance_line,
                        (long long)seq, n, hp_mesh_axis_name(s->mesh, axis));
    *n_out = n;
    return HP_STATUS_OK;
}

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

/* hp_strategy_annotate, logging its warnings unless `part` (g is a part of the model). */
static hp_status annotate(const hp_strategy *s, const hp_graph *g, hp_layout *layouts, int *n_warnings, bool part) {
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
        if (!part)
            hp_log(HP_LOG_LEVEL_WARN, "%s:%d: strategy.params rule \"%s\" matches no parameter", s->file,
                   s->params[i].line, s->params[i].pattern);
    }

    /* Inputs: by exact name. */
    for (int i = 0; i < s->n_inputs; i++) {
        const rule *r = &s->inputs[i];
        hp_tid t = hp_graph_find(g, r->pattern);
        if (t == HP_TID_NONE) {
            warnings++;
            if (!part)
                hp_log(HP_LOG_LEVEL_WARN, "%s:%d: strategy.inputs names '%s', which is not an input of the model",
                       s->file, r->line, r->pattern);
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

    /* The load-balanced ring order's "positions" (B, T), unlisted: the layout of "tokens" (B, T). */
    hp_tid tpos = hp_graph_find(g, "positions"), ttok = hp_graph_find(g, "tokens");
    if (tpos != HP_TID_NONE && ttok != HP_TID_NONE && layouts[tpos].ndim < 0 && layouts[ttok].ndim >= 0 &&
        hp_graph_tensor(g, tpos)->kind == HP_TENSOR_KIND_INPUT &&
        hp_shape_equal(&hp_graph_tensor(g, tpos)->shape, &hp_graph_tensor(g, ttok)->shape))
        layouts[tpos] = layouts[ttok];

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

hp_status hp_strategy_annotate(const hp_strategy *s, const hp_graph *g, hp_layout *layouts, int *n_warnings) {
    return annotate(s, g, layouts, n_warnings, false);
}

hp_status hp_strategy_annotate_part(const hp_strategy *s, const hp_graph *g, hp_layout *layouts) {
    return annotate(s, g, layouts, NULL, true);
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
