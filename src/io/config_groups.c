/*
 * The HyperMPMD sections of the run config: `pipeline:` (schedule, micro-batches, chunks, split) and
 * `groups:` (named rank groups, each with its ranks, module, mesh, strategy and memory budget) read
 * into hp_pipeline_config and hp_groups_config, and written back as JSON. The checks that need
 * several groups or other sections are in config_groups_check.c. Format: include/hp/config.h.
 */
#include "io/config_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM() hp_error(HP_STATUS_OUT_OF_MEMORY, "groups: out of memory")
#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char *const k_schedules[HP_PIPELINE_SCHEDULE_COUNT] = {
    "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "table"};
static const char *const k_kinds[HP_GROUP_KIND_COUNT] = {
    "stage", "encoder", "fusion", "actor", "learner", "critic", "reward", "reference"};

const char *hp_pipeline_schedule_name(hp_pipeline_schedule s) {
    return (unsigned)s < HP_PIPELINE_SCHEDULE_COUNT ? k_schedules[s] : "?";
}

const char *hp_group_kind_name(hp_group_kind k) { return (unsigned)k < HP_GROUP_KIND_COUNT ? k_kinds[k] : "?"; }

/* ---------------------------------------------------------------- pipeline: */

hp_status hp__config_read_pipeline(const hp_yaml_node *node, hp_pipeline_config *p) {
    static const char *const keys[] = {"schedule", "micro_batches", "chunks", "split", "post_validate"};
    HP_CHECK(hp_yaml_check_keys(node, keys, N(keys), "pipeline"));
    if (hp_yaml_is_null(node)) return HP_STATUS_OK;
    p->present = true;
    p->line = node->line;
    p->column = node->column;
    const hp_yaml_node *n = hp_yaml_map_get(node, "schedule");
    if (n && !hp_yaml_is_null(n)) {
        const char *s;
        HP_CHECK(hp_yaml_as_string(n, "pipeline.schedule", &s));
        p->schedule_line = n->line;
        p->schedule_column = n->column;
        int found = -1;
        for (int k = 0; k < HP_PIPELINE_SCHEDULE_TABLE && found < 0; k++)
            if (strcmp(s, k_schedules[k]) == 0) found = k;
        if (found >= 0) {
            p->schedule = (hp_pipeline_schedule)found;
        } else if (strchr(s, '/') || strchr(s, '.')) {
            if (strlen(s) >= sizeof p->table)
                return hp__config_error(n, "pipeline.schedule: the table path is longer than %zu bytes", sizeof p->table - 1);
            p->schedule = HP_PIPELINE_SCHEDULE_TABLE;
            memcpy(p->table, s, strlen(s) + 1);
        } else {
            return hp__config_error(n, "pipeline.schedule: unknown schedule '%s' (known: gpipe, 1f1b, interleaved, "
                                    "zb-h1, zb-v, dualpipev; or the path of a schedule table file, with a '/' or '.')", s);
        }
    }
    n = hp_yaml_map_get(node, "micro_batches");
    if (n && !hp_yaml_is_null(n)) {
        HP_CHECK(hp_yaml_as_int(n, "pipeline.micro_batches", &p->micro_batches));
        p->micro_batches_line = n->line;
        p->micro_batches_column = n->column;
    }
    /* Without chunks, the schedules that need several per stage get 2. */
    bool multi = p->schedule == HP_PIPELINE_SCHEDULE_INTERLEAVED || p->schedule == HP_PIPELINE_SCHEDULE_ZB_V ||
                 p->schedule == HP_PIPELINE_SCHEDULE_DUALPIPEV;
    p->chunks = multi ? 2 : 1;
    n = hp_yaml_map_get(node, "chunks");
    if (n && !hp_yaml_is_null(n)) {
        HP_CHECK(hp_yaml_as_int(n, "pipeline.chunks", &p->chunks));
        p->chunks_line = n->line;
        p->chunks_column = n->column;
    }
    n = hp_yaml_map_get(node, "split");
    if (n && !hp_yaml_is_null(n)) {
        const char *s;
        HP_CHECK(hp_yaml_as_string(n, "pipeline.split", &s));
        p->split_line = n->line;
        p->split_column = n->column;
        if (strcmp(s, "auto") == 0) p->split_auto = true;
        else if (strcmp(s, "manual") == 0) p->split_auto = false;
        else return hp__config_error(n, "pipeline.split expects manual or auto, got '%s'", s);
    }
    n = hp_yaml_map_get(node, "post_validate");
    if (n && !hp_yaml_is_null(n)) HP_CHECK(hp_yaml_as_bool(n, "pipeline.post_validate", &p->post_validate));
    /* Before the groups: their modules have pipeline.chunks chunks. */
    return hp__config_check_chunks(p, node->file ? node->file : "<string>");
}

/* ---------------------------------------------------------------- groups: */

/* Parses "blocks.A" or "blocks.A-B" (A <= B, both included) into [*first, *last); false if malformed. */
static bool parse_blocks(const char *s, int64_t *first, int64_t *last) {
    if (strncmp(s, "blocks.", 7) != 0) return false;
    const char *p = s + 7;
    int64_t v[2] = {0, 0};
    int nv = 0;
    for (;;) {
        if (*p < '0' || *p > '9') return false;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || x > INT32_MAX) return false;
        v[nv++] = x;
        p = end;
        if (*p == 0) break;
        if (*p != '-' || nv == 2) return false;
        p++;
    }
    if (nv == 1) v[1] = v[0];
    if (v[1] < v[0]) return false;
    *first = v[0];
    *last = v[1] + 1;
    return true;
}

/* One chunk's module: a scalar or a sequence of scalars, embedding, blocks ranges, head, in order. */
static hp_status parse_chunk(const hp_yaml_node *n, const char *what, hp_module_chunk *c) {
    memset(c, 0, sizeof *c);
    c->line = n->line;
    c->column = n->column;
    size_t count = n->kind == HP_YAML_KIND_SEQ ? n->count : 1;
    if (n->kind == HP_YAML_KIND_MAP || count == 0)
        return hp__config_error(n, "%s expects embedding, blocks.A-B and head (or a list of them), got %s", what,
                                n->kind == HP_YAML_KIND_MAP ? "a map" : "an empty list");
    bool blocks = false;
    for (size_t i = 0; i < count; i++) {
        const hp_yaml_node *e = n->kind == HP_YAML_KIND_SEQ ? n->items[i] : n;
        if (e->kind != HP_YAML_KIND_SCALAR)
            return hp__config_error(e, "%s: a chunk's module is embedding, blocks.A-B or head, got %s (with "
                                    "pipeline.chunks 1 a stage's module is one list)", what, hp__config_node_text(e));
        const char *s = e->scalar;
        int64_t a, b;
        if (strcmp(s, "embedding") == 0) {
            if (c->embedding || blocks || c->head)
                return hp__config_error(e, "%s: 'embedding' must come first in a module, once", what);
            c->embedding = true;
        } else if (strcmp(s, "head") == 0) {
            if (c->head) return hp__config_error(e, "%s: 'head' is listed twice", what);
            c->head = true;
        } else if (parse_blocks(s, &a, &b)) {
            if (c->head) return hp__config_error(e, "%s: '%s' comes after 'head' (the head runs last)", what, s);
            if (blocks && a != c->last)
                return hp__config_error(e, "%s: '%s' does not continue blocks.%d-%d (a module runs one contiguous "
                                        "range of blocks; pipeline.chunks gives a stage several)", what, s, c->first,
                                        c->last - 1);
            if (!blocks) c->first = (int)a;
            c->last = (int)b;
            blocks = true;
        } else if (strcmp(s, "auto") == 0) {
            return hp__config_error(e, "%s: 'auto' is the whole module (module: auto), not a part of it", what);
        } else {
            return hp__config_error(e, "%s: unknown module '%s' (expected embedding, blocks.A, blocks.A-B with A <= B, "
                                    "or head)", what, s);
        }
    }
    return HP_STATUS_OK;
}

/* groups.NAME.module of a stage with v chunks. */
static hp_status parse_module(const hp_yaml_node *n, const char *name, int v, hp_group_config *g) {
    char what[160];
    snprintf(what, sizeof what, "groups.%s.module", name);
    g->n_chunks = v;
    if (n) {
        g->module_line = n->line;
        g->module_column = n->column;
    }
    if (hp_yaml_is_null(n) || (n->kind == HP_YAML_KIND_SCALAR && strcmp(n->scalar, "auto") == 0)) {
        g->module_auto = true;
        return HP_STATUS_OK;
    }
    if (v == 1) return parse_chunk(n, what, &g->chunks[0]);
    if (n->kind != HP_YAML_KIND_SEQ || n->count != (size_t)v)
        return hp__config_error(n, "%s expects a list of %d modules, one per model chunk (pipeline.chunks %d), e.g. "
                                "[[embedding, blocks.0], blocks.4], got %s", what, v, v,
                                n->kind == HP_YAML_KIND_SEQ ? "a list of a different length" : hp__config_node_text(n));
    for (int c = 0; c < v; c++) {
        char cwhat[192];
        snprintf(cwhat, sizeof cwhat, "%s[%d]", what, c);
        HP_CHECK(parse_chunk(n->items[c], cwhat, &g->chunks[c]));
    }
    return HP_STATUS_OK;
}

/* groups.NAME.ranks: a list of world ranks or a count from `*next` (the rank after the highest so far). */
static hp_status parse_ranks(const hp_yaml_node *n, const hp_yaml_node *group, const char *name, int *next,
                             hp_arena *arena, hp_group_config *g) {
    char what[160];
    snprintf(what, sizeof what, "groups.%s.ranks", name);
    if (hp_yaml_is_null(n))
        return hp__config_error(n ? n : group, "groups.%s: missing key 'ranks' (a list of world ranks, e.g. [0, 1], "
                                "or a count)", name);
    g->ranks_line = n->line;
    g->ranks_column = n->column;
    if (n->kind == HP_YAML_KIND_SCALAR) {
        int64_t count;
        HP_CHECK(hp_yaml_as_int(n, what, &count));
        if (count < 1 || count > HP_CONFIG_MAX_RANKS - *next)
            return hp__config_error(n, "%s: a count of %lld ranks must be in [1, %d] (from rank %d)", what,
                                    (long long)count, HP_CONFIG_MAX_RANKS - *next, *next);
        g->n_ranks = (int)count;
        g->ranks = hp_arena_alloc(arena, (size_t)count * sizeof *g->ranks, _Alignof(int));
        if (!g->ranks) return OOM();
        for (int i = 0; i < g->n_ranks; i++) g->ranks[i] = *next + i;
        *next += g->n_ranks;
        return HP_STATUS_OK;
    }
    if (n->kind != HP_YAML_KIND_SEQ || n->count == 0 || n->count > HP_CONFIG_MAX_RANKS)
        return hp__config_error(n, "%s expects a non-empty list of world ranks or a count, got %s", what,
                                n->kind == HP_YAML_KIND_SEQ ? "an empty list" : hp__config_node_text(n));
    g->n_ranks = (int)n->count;
    g->ranks = hp_arena_alloc(arena, n->count * sizeof *g->ranks, _Alignof(int));
    if (!g->ranks) return OOM();
    for (int i = 0; i < g->n_ranks; i++) {
        char iwhat[192];
        snprintf(iwhat, sizeof iwhat, "%s[%d]", what, i);
        int64_t r;
        HP_CHECK(hp_yaml_as_int(n->items[i], iwhat, &r));
        if (r < 0 || r >= HP_CONFIG_MAX_RANKS)
            return hp__config_error(n->items[i], "%s: rank %lld must be in [0, %d)", iwhat, (long long)r, HP_CONFIG_MAX_RANKS);
        for (int j = 0; j < i; j++)
            if (g->ranks[j] == r) return hp__config_error(n->items[i], "%s: rank %lld is listed twice", iwhat, (long long)r);
        g->ranks[i] = (int)r;
        if (r + 1 > *next) *next = (int)r + 1;
    }
    return HP_STATUS_OK;
}

static hp_status parse_group(const hp_yaml_node *n, const char *name, int *next, hp_run_config *cfg,
                             hp_group_config *g) {
    char sec[160];
    snprintf(sec, sizeof sec, "groups.%s", name);
    if (!*name || strlen(name) >= HP_CONFIG_MAX_GROUP_NAME)
        return hp__config_error(n, "groups: a group name must have 1 to %d characters, got '%s'",
                                HP_CONFIG_MAX_GROUP_NAME - 1, name);
    if (n->kind != HP_YAML_KIND_MAP)
        return hp__config_error(n, "%s expects a map (kind, ranks, module, mesh, strategy, memory_budget), got %s", sec,
                                hp__config_node_text(n));
    static const char *const keys[] = {"kind", "ranks", "module", "mesh", "strategy", "memory_budget"};
    HP_CHECK(hp_yaml_check_keys(n, keys, N(keys), sec));
    g->name = hp_arena_strdup(cfg->arena, name);
    if (!g->name) return OOM();
    g->line = n->line;
    g->column = n->column;
    g->stage = -1;
    const hp_yaml_node *k = hp_yaml_map_get(n, "kind");
    if (k && !hp_yaml_is_null(k)) {
        char what[192];
        snprintf(what, sizeof what, "%s.kind", sec);
        const char *s;
        HP_CHECK(hp_yaml_as_string(k, what, &s));
        int found = -1;
        for (int i = 0; i < HP_GROUP_KIND_COUNT && found < 0; i++)
            if (strcmp(s, k_kinds[i]) == 0) found = i;
        if (found < 0)
            return hp__config_error(k, "%s: unknown kind '%s' (known: stage, encoder, fusion, actor, learner, critic, "
                                    "reward, reference)", what, s);
        g->kind = (hp_group_kind)found;
        bool mm = strcmp(cfg->model.family, "multimodal") == 0; /* hp/multimodal.h: two encoders + a fusion */
        bool mm_kind = mm && (g->kind == HP_GROUP_KIND_ENCODER || g->kind == HP_GROUP_KIND_FUSION);
        if (g->kind != HP_GROUP_KIND_STAGE && g->kind != HP_GROUP_KIND_ACTOR && g->kind != HP_GROUP_KIND_LEARNER &&
            !mm_kind)
            return hp__config_error(k, "%s: kind '%s' is not built yet; kind: stage (a pipeline stage), actor and "
                                    "learner (hp rl), and encoder and fusion (model.family: multimodal) run today",
                                    what, s);
    }
    HP_CHECK(parse_ranks(hp_yaml_map_get(n, "ranks"), n, name, next, cfg->arena, g));
    const hp_yaml_node *mod = hp_yaml_map_get(n, "module");
    if (g->kind != HP_GROUP_KIND_STAGE) { /* actor, learner: the whole model; encoder, fusion: by kind and order */
        if (mod && !hp_yaml_is_null(mod))
            return hp__config_error(mod, "%s.module: a group of kind %s runs %s; module: is for stages", sec,
                                    hp_group_kind_name(g->kind),
                                    g->kind == HP_GROUP_KIND_ACTOR || g->kind == HP_GROUP_KIND_LEARNER
                                        ? "the whole model"
                                        : "the sub-model its kind and order give");
    } else
        HP_CHECK(parse_module(mod, name, (int)cfg->pipeline.chunks, g));
    g->strategy.bucket_size = (size_t)25 << 20; /* the strategy section's default */
    HP_CHECK(hp__config_read_group_strategy(hp_yaml_map_get(n, "mesh"), hp_yaml_map_get(n, "strategy"), name,
                                            cfg->arena, &g->strategy));
    const hp_yaml_node *mb = hp_yaml_map_get(n, "memory_budget");
    if (mb && !hp_yaml_is_null(mb)) {
        char what[192];
        snprintf(what, sizeof what, "%s.memory_budget", sec);
        HP_CHECK(hp__config_read_size(mb, what, &g->memory_budget));
        g->memory_budget_line = mb->line;
        g->memory_budget_column = mb->column;
    }
    return HP_STATUS_OK;
}

/* split: auto: blocks evenly over the virtual stages (the first ones one more), embedding on the
 * first and head on the last; the cost-model split replaces this. */
static hp_status fill_auto(hp_run_config *cfg) {
    hp_groups_config *gs = &cfg->groups;
    int p = gs->n_stages, v = (int)cfg->pipeline.chunks;
    int64_t nv = (int64_t)p * v, L = cfg->model.layers;
    if (nv > L) {
        const hp_pipeline_config *pl = &cfg->pipeline;
        return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: pipeline.split auto: model.layers %lld cannot fill %d stages x %d "
                        "chunks (every virtual stage needs a block)", gs->file, pl->split_line, pl->split_column,
                        (long long)L, p, v);
    }
    for (int i = 0; i < gs->n_groups; i++) {
        hp_group_config *g = &gs->groups[i];
        if (g->stage < 0 || !g->module_auto) continue;
        for (int c = 0; c < v; c++) {
            hp_module_chunk *ch = &g->chunks[c];
            int64_t s = hp__config_virtual_stage(cfg->pipeline.schedule, p, g->stage, c);
            int64_t base = L / nv, extra = L % nv;
            ch->first = (int)(s * base + (s < extra ? s : extra));
            ch->last = ch->first + (int)(base + (s < extra ? 1 : 0));
            ch->embedding = s == 0;
            ch->head = s == nv - 1;
            ch->line = g->module_line ? g->module_line : g->line;
            ch->column = g->module_line ? g->module_column : g->column;
        }
    }
    return HP_STATUS_OK;
}

hp_status hp__config_read_groups(const hp_yaml_node *node, hp_run_config *cfg) {
    if (hp_yaml_is_null(node)) return HP_STATUS_OK;
    hp_groups_config *gs = &cfg->groups;
    if (node->kind != HP_YAML_KIND_MAP || node->count == 0)
        return hp__config_error(node, "groups expects a map from group name to group ({ranks: [...], module: [...], "
                                "mesh: {...}, strategy: {...}}), got %s",
                                node->kind == HP_YAML_KIND_MAP ? "an empty map" : hp__config_node_text(node));
    gs->present = true;
    gs->file = hp_arena_strdup(cfg->arena, node->file ? node->file : "<string>");
    gs->groups = hp_arena_alloc(cfg->arena, node->count * sizeof *gs->groups, _Alignof(hp_group_config));
    if (!gs->file || !gs->groups) return OOM();
    memset(gs->groups, 0, node->count * sizeof *gs->groups);
    gs->line = node->line;
    gs->column = node->column;
    int next = 0;
    for (size_t i = 0; i < node->count; i++) {
        hp_group_config *g = &gs->groups[gs->n_groups++];
        HP_CHECK(parse_group(node->items[i], node->keys[i], &next, cfg, g));
        if (g->kind == HP_GROUP_KIND_STAGE) g->stage = gs->n_stages++;
    }
    gs->n_ranks = next;
    for (int i = 0; i < gs->n_groups; i++) {
        hp_group_config *g = &gs->groups[i];
        for (int c = 0; g->stage >= 0 && c < g->n_chunks; c++)
            g->chunks[c].virtual_stage = hp__config_virtual_stage(cfg->pipeline.schedule, gs->n_stages, g->stage, c);
    }
    if (cfg->pipeline.split_auto) HP_CHECK(fill_auto(cfg));
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- writing */

/* Adds `v` to array or object `o` (key NULL: array); deletes v and returns false on failure. */
static bool put(cJSON *o, const char *key, cJSON *v) {
    bool ok = v && (key ? cJSON_AddItemToObject(o, key, v) : cJSON_AddItemToArray(o, v));
    if (!ok) cJSON_Delete(v);
    return ok;
}

static cJSON *chunk_json(const hp_module_chunk *c) {
    cJSON *a = cJSON_CreateArray();
    bool ok = a != NULL;
    if (ok && c->embedding) ok = put(a, NULL, cJSON_CreateString("embedding"));
    if (ok && c->last > c->first) {
        char s[64];
        if (c->last == c->first + 1) snprintf(s, sizeof s, "blocks.%d", c->first);
        else snprintf(s, sizeof s, "blocks.%d-%d", c->first, c->last - 1);
        ok = put(a, NULL, cJSON_CreateString(s));
    }
    if (ok && c->head) ok = put(a, NULL, cJSON_CreateString("head"));
    if (!ok) {
        cJSON_Delete(a);
        return NULL;
    }
    return a;
}

static cJSON *group_json(const hp_group_config *g) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o && put(o, "kind", cJSON_CreateString(hp_group_kind_name(g->kind)));
    cJSON *rk = ok ? cJSON_CreateArray() : NULL;
    ok = ok && put(o, "ranks", rk);
    for (int i = 0; ok && i < g->n_ranks; i++) ok = put(rk, NULL, cJSON_CreateNumber(g->ranks[i]));
    if (ok && g->module_auto) {
        ok = put(o, "module", cJSON_CreateString("auto"));
    } else if (ok && g->n_chunks == 1) {
        ok = put(o, "module", chunk_json(&g->chunks[0]));
    } else if (ok && g->n_chunks > 1) {
        cJSON *m = cJSON_CreateArray();
        ok = put(o, "module", m);
        for (int c = 0; ok && c < g->n_chunks; c++) ok = put(m, NULL, chunk_json(&g->chunks[c]));
    }
    ok = ok && hp__config_group_strategy_json(&g->strategy, o);
    ok = ok && put(o, "memory_budget", cJSON_CreateNumber((double)g->memory_budget));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *hp__config_groups_json(const hp_groups_config *g) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    for (int i = 0; ok && i < g->n_groups; i++) ok = put(root, g->groups[i].name, group_json(&g->groups[i]));
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

cJSON *hp__config_pipeline_json(const hp_pipeline_config *p) {
    cJSON *root = cJSON_CreateObject();
    const char *sched = p->schedule == HP_PIPELINE_SCHEDULE_TABLE ? p->table : hp_pipeline_schedule_name(p->schedule);
    bool ok = root && put(root, "schedule", cJSON_CreateString(sched)) &&
              put(root, "micro_batches", cJSON_CreateNumber((double)p->micro_batches)) &&
              put(root, "chunks", cJSON_CreateNumber((double)p->chunks)) &&
              put(root, "split", cJSON_CreateString(p->split_auto ? "auto" : "manual")) &&
              put(root, "post_validate", cJSON_CreateBool(p->post_validate));
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
