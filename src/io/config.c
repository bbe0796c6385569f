/* The run configuration: table-driven YAML reading, validation and writing (see hp/config.h). */
#include "hp/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/yaml_internal.h"

typedef enum field_type { F_INT, F_DOUBLE, F_BOOL, F_STR } field_type;

typedef struct field {
    const char *key;
    field_type type;
    size_t offset; /* into the section struct */
} field;

#define FLD(sec, key, type) {#key, type, offsetof(sec, key)}

static const field model_fields[] = {
    FLD(hp_model_config, vocab, F_INT),      FLD(hp_model_config, context, F_INT), FLD(hp_model_config, layers, F_INT),
    FLD(hp_model_config, heads, F_INT),      FLD(hp_model_config, width, F_INT),   FLD(hp_model_config, tied_head, F_BOOL),
    FLD(hp_model_config, dropout, F_DOUBLE),
};
static const field data_fields[] = {FLD(hp_data_config, corpus, F_STR), FLD(hp_data_config, val_fraction, F_DOUBLE)};
static const field train_fields[] = {
    FLD(hp_train_config, steps, F_INT),          FLD(hp_train_config, batch, F_INT),
    FLD(hp_train_config, seed, F_INT),           FLD(hp_train_config, log_every, F_INT),
    FLD(hp_train_config, eval_every, F_INT),     FLD(hp_train_config, eval_batches, F_INT),
    FLD(hp_train_config, checkpoint_dir, F_STR), FLD(hp_train_config, checkpoint_every, F_INT),
    FLD(hp_train_config, sample_every, F_INT),   FLD(hp_train_config, sample_tokens, F_INT),
    FLD(hp_train_config, sample_prompt, F_STR),  FLD(hp_train_config, threads, F_INT),
};
static const field optim_fields[] = {
    FLD(hp_optim_config, lr, F_DOUBLE),    FLD(hp_optim_config, min_lr, F_DOUBLE),       FLD(hp_optim_config, warmup, F_INT),
    FLD(hp_optim_config, weight_decay, F_DOUBLE), FLD(hp_optim_config, beta1, F_DOUBLE), FLD(hp_optim_config, beta2, F_DOUBLE),
    FLD(hp_optim_config, eps, F_DOUBLE),   FLD(hp_optim_config, grad_clip, F_DOUBLE),
};

typedef struct section {
    const char *name;
    const field *fields;
    size_t n;
    size_t offset; /* of the section in hp_run_config */
} section;

#define N(a) (sizeof(a) / sizeof((a)[0]))
static const section sections[] = {
    {"model", model_fields, N(model_fields), offsetof(hp_run_config, model)},
    {"data", data_fields, N(data_fields), offsetof(hp_run_config, data)},
    {"train", train_fields, N(train_fields), offsetof(hp_run_config, train)},
    {"optim", optim_fields, N(optim_fields), offsetof(hp_run_config, optim)},
};
static const char *const opaque_sections[] = {"strategy", "offload", "mpmd"};

hp_run_config hp_run_config_defaults(void) {
    hp_run_config c;
    memset(&c, 0, sizeof c);
    c.model = (hp_model_config){.vocab = 256, .context = 256, .layers = 4, .heads = 4, .width = 256,
                                .tied_head = false, .dropout = 0.0};
    snprintf(c.data.corpus, sizeof c.data.corpus, "data/kjv.txt");
    c.data.val_fraction = 0.05;
    hp_train_config *t = &c.train;
    t->steps = 1000;
    t->batch = 8;
    t->seed = 1;
    t->log_every = 10;
    t->eval_every = 100;
    t->eval_batches = 8;
    snprintf(t->checkpoint_dir, sizeof t->checkpoint_dir, "runs/kjv");
    t->checkpoint_every = 200;
    t->sample_every = 0;
    t->sample_tokens = 200;
    snprintf(t->sample_prompt, sizeof t->sample_prompt, "And God said");
    t->threads = 0;
    c.optim = (hp_optim_config){.lr = 3.0e-3, .min_lr = 3.0e-4, .warmup = 50, .weight_decay = 0.1,
                                .beta1 = 0.9, .beta2 = 0.95, .eps = 1.0e-8, .grad_clip = 1.0};
    return c;
}

void hp_run_config_free(hp_run_config *cfg) {
    hp_yaml_doc_free(cfg->doc);
    cfg->doc = NULL;
    cfg->strategy = cfg->offload = cfg->mpmd = NULL;
}

static hp_status read_field(const section *sec, const field *f, const hp_yaml_node *v, char *base) {
    char what[128];
    snprintf(what, sizeof what, "%s.%s", sec->name, f->key);
    void *p = base + f->offset;
    switch (f->type) {
    case F_INT: return hp_yaml_as_int(v, what, (int64_t *)p);
    case F_DOUBLE: return hp_yaml_as_double(v, what, (double *)p);
    case F_BOOL: return hp_yaml_as_bool(v, what, (bool *)p);
    case F_STR: {
        const char *s;
        HP_CHECK(hp_yaml_as_string(v, what, &s));
        if (strlen(s) >= HP_CONFIG_STR_MAX)
            return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s is longer than %d bytes", v->file, v->line, v->column, what,
                            HP_CONFIG_STR_MAX - 1);
        memcpy(p, s, strlen(s) + 1);
        return HP_STATUS_OK;
    }
    }
    return hp_error(HP_STATUS_INTERNAL, "bad field type");
}

static hp_status read_section(const section *sec, const hp_yaml_node *map, hp_run_config *cfg) {
    const char *keys[16];
    for (size_t i = 0; i < sec->n; i++) keys[i] = sec->fields[i].key;
    HP_CHECK(hp_yaml_check_keys(map, keys, sec->n, sec->name));
    if (hp_yaml_is_null(map)) return HP_STATUS_OK;
    for (size_t i = 0; i < sec->n; i++) {
        const hp_yaml_node *v = hp_yaml_map_get(map, sec->fields[i].key);
        if (v) HP_CHECK(read_field(sec, &sec->fields[i], v, (char *)cfg + sec->offset));
    }
    return HP_STATUS_OK;
}

static hp_status read_root(const hp_yaml_node *root, hp_run_config *cfg) {
    if (hp_yaml_is_null(root)) return HP_STATUS_OK;
    const char *known[N(sections) + N(opaque_sections)];
    size_t n = 0;
    for (size_t i = 0; i < N(sections); i++) known[n++] = sections[i].name;
    for (size_t i = 0; i < N(opaque_sections); i++) known[n++] = opaque_sections[i];
    if (root->kind != HP_YAML_KIND_MAP)
        return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: a run config must be a map of sections", root->file, root->line,
                        root->column);
    HP_CHECK(hp_yaml_check_keys(root, known, n, "<top level>"));
    for (size_t i = 0; i < N(sections); i++) HP_CHECK(read_section(&sections[i], hp_yaml_map_get(root, sections[i].name), cfg));
    cfg->strategy = hp_yaml_map_get(root, "strategy");
    cfg->offload = hp_yaml_map_get(root, "offload");
    cfg->mpmd = hp_yaml_map_get(root, "mpmd");
    return HP_STATUS_OK;
}

#define BAD(...) return hp_error(HP_STATUS_CONFIG, __VA_ARGS__)

hp_status hp_run_config_validate(const hp_run_config *cfg) {
    const char *f = cfg->source[0] ? cfg->source : "<config>";
    const hp_model_config *m = &cfg->model;
    const hp_train_config *t = &cfg->train;
    const hp_optim_config *o = &cfg->optim;
    if (m->vocab < 256) BAD("%s: model.vocab %lld must be >= 256 (the byte tokenizer's vocabulary)", f, (long long)m->vocab);
    if (m->context < 1) BAD("%s: model.context %lld must be >= 1", f, (long long)m->context);
    if (m->layers < 1) BAD("%s: model.layers %lld must be >= 1", f, (long long)m->layers);
    if (m->heads < 1) BAD("%s: model.heads %lld must be >= 1", f, (long long)m->heads);
    if (m->width < 1) BAD("%s: model.width %lld must be >= 1", f, (long long)m->width);
    if (m->width % m->heads)
        BAD("%s: model.width %lld is not divisible by model.heads %lld", f, (long long)m->width, (long long)m->heads);
    if (!(m->dropout >= 0.0 && m->dropout < 1.0)) BAD("%s: model.dropout %g must be in [0, 1)", f, m->dropout);
    if (!cfg->data.corpus[0]) BAD("%s: data.corpus must name a file", f);
    if (!(cfg->data.val_fraction > 0.0 && cfg->data.val_fraction < 1.0))
        BAD("%s: data.val_fraction %g must be in (0, 1)", f, cfg->data.val_fraction);
    if (t->steps < 1) BAD("%s: train.steps %lld must be >= 1", f, (long long)t->steps);
    if (t->batch < 1) BAD("%s: train.batch %lld must be >= 1", f, (long long)t->batch);
    const struct { const char *k; int64_t v; } nonneg[] = {
        {"seed", t->seed}, {"log_every", t->log_every}, {"eval_every", t->eval_every},
        {"checkpoint_every", t->checkpoint_every}, {"sample_every", t->sample_every},
        {"sample_tokens", t->sample_tokens}, {"threads", t->threads}};
    for (size_t i = 0; i < N(nonneg); i++)
        if (nonneg[i].v < 0) BAD("%s: train.%s %lld must be >= 0", f, nonneg[i].k, (long long)nonneg[i].v);
    if (t->eval_batches < 1) BAD("%s: train.eval_batches %lld must be >= 1", f, (long long)t->eval_batches);
    if (!t->checkpoint_dir[0]) BAD("%s: train.checkpoint_dir must name a directory", f);
    if (!(o->lr > 0.0)) BAD("%s: optim.lr %g must be > 0", f, o->lr);
    if (!(o->min_lr >= 0.0 && o->min_lr <= o->lr)) BAD("%s: optim.min_lr %g must be in [0, optim.lr %g]", f, o->min_lr, o->lr);
    if (o->warmup < 0) BAD("%s: optim.warmup %lld must be >= 0", f, (long long)o->warmup);
    if (!(o->weight_decay >= 0.0)) BAD("%s: optim.weight_decay %g must be >= 0", f, o->weight_decay);
    if (!(o->beta1 >= 0.0 && o->beta1 < 1.0)) BAD("%s: optim.beta1 %g must be in [0, 1)", f, o->beta1);
    if (!(o->beta2 >= 0.0 && o->beta2 < 1.0)) BAD("%s: optim.beta2 %g must be in [0, 1)", f, o->beta2);
    if (!(o->eps > 0.0)) BAD("%s: optim.eps %g must be > 0", f, o->eps);
    if (!(o->grad_clip >= 0.0)) BAD("%s: optim.grad_clip %g must be >= 0", f, o->grad_clip);
    return HP_STATUS_OK;
}

static hp_status load_doc(hp_yaml_doc *doc, const char *name, hp_run_config *cfg) {
    *cfg = hp_run_config_defaults();
    snprintf(cfg->source, sizeof cfg->source, "%s", name);
    hp_status st = read_root(hp_yaml_doc_root(doc), cfg);
    if (st == HP_STATUS_OK) st = hp_run_config_validate(cfg);
    if (st != HP_STATUS_OK) {
        hp_yaml_doc_free(doc);
        *cfg = hp_run_config_defaults();
        return st;
    }
    cfg->doc = doc;
    return HP_STATUS_OK;
}

hp_status hp_run_config_load(const char *path, hp_run_config *cfg) {
    *cfg = hp_run_config_defaults();
    hp_yaml_doc *doc;
    HP_CHECK(hp_yaml_parse_file(path, &doc));
    return load_doc(doc, path, cfg);
}

hp_status hp_run_config_load_string(const char *text, size_t len, const char *name, hp_run_config *cfg) {
    *cfg = hp_run_config_defaults();
    if (!name) name = "<string>";
    hp_yaml_doc *doc;
    HP_CHECK(hp_yaml_parse_string(text, len, name, &doc));
    return load_doc(doc, name, cfg);
}

/* ---------------------------------------------------------------- writing */

static cJSON *to_cjson(const hp_run_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    for (size_t s = 0; ok && s < N(sections); s++) {
        cJSON *sec = cJSON_AddObjectToObject(root, sections[s].name);
        const char *base = (const char *)cfg + sections[s].offset;
        ok = sec != NULL;
        for (size_t i = 0; ok && i < sections[s].n; i++) {
            const field *f = &sections[s].fields[i];
            const void *p = base + f->offset;
            cJSON *v = f->type == F_INT      ? cJSON_CreateNumber((double)*(const int64_t *)p)
                       : f->type == F_DOUBLE ? cJSON_CreateNumber(*(const double *)p)
                       : f->type == F_BOOL   ? cJSON_CreateBool(*(const bool *)p)
                                             : cJSON_CreateString((const char *)p);
            ok = v && cJSON_AddItemToObject(sec, f->key, v);
            if (!ok) cJSON_Delete(v);
        }
    }
    const hp_yaml_node *opaque[] = {cfg->strategy, cfg->offload, cfg->mpmd};
    for (size_t i = 0; ok && i < N(opaque_sections); i++) {
        if (!opaque[i]) continue;
        cJSON *v = hp__yaml_to_cjson(opaque[i]);
        ok = v && cJSON_AddItemToObject(root, opaque_sections[i], v);
        if (!ok) cJSON_Delete(v);
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

char *hp_run_config_to_json(const hp_run_config *cfg) {
    cJSON *j = to_cjson(cfg);
    if (!j) return NULL;
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

/* A growable string. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = true; return; }
        if (b->s && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        size_t cap = (b->cap ? b->cap : 256);
        while (cap <= b->len + (size_t)n) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) { b->oom = true; return; }
        b->s = ns;
        b->cap = cap;
    }
}

char *hp_run_config_to_yaml(const hp_run_config *cfg) {
    sbuf b = {0};
    sb_printf(&b, "# hyperparallel run config\n");
    for (size_t s = 0; s < N(sections); s++) {
        sb_printf(&b, "%s:\n", sections[s].name);
        const char *base = (const char *)cfg + sections[s].offset;
        for (size_t i = 0; i < sections[s].n; i++) {
            const field *f = &sections[s].fields[i];
            const void *p = base + f->offset;
            switch (f->type) {
            case F_INT: sb_printf(&b, "  %s: %lld\n", f->key, (long long)*(const int64_t *)p); break;
            case F_DOUBLE: {
                char num[64];
                double d = *(const double *)p;
                snprintf(num, sizeof num, "%.15g", d);
                if (strtod(num, NULL) != d) snprintf(num, sizeof num, "%.17g", d);
                if (!strpbrk(num, ".eE")) strcat(num, ".0"); /* keep it a float to the eye */
                sb_printf(&b, "  %s: %s\n", f->key, num);
                break;
            }
            case F_BOOL: sb_printf(&b, "  %s: %s\n", f->key, *(const bool *)p ? "true" : "false"); break;
            case F_STR: {
                /* A JSON string is a valid YAML double-quoted scalar. */
                cJSON *js = cJSON_CreateString((const char *)p);
                char *q = js ? cJSON_PrintUnformatted(js) : NULL;
                if (q) sb_printf(&b, "  %s: %s\n", f->key, q);
                else b.oom = true;
                free(q);
                cJSON_Delete(js);
                break;
            }
            }
        }
    }
    const hp_yaml_node *opaque[] = {cfg->strategy, cfg->offload, cfg->mpmd};
    for (size_t i = 0; i < N(opaque_sections); i++) {
        if (!opaque[i]) continue;
        char *j = hp_yaml_to_json(opaque[i]);
        if (j) sb_printf(&b, "%s: %s\n", opaque_sections[i], j);
        else b.oom = true;
        free(j);
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

hp_status hp_run_config_write_yaml(const hp_run_config *cfg, const char *path) {
    char *text = hp_run_config_to_yaml(cfg);
    if (!text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory writing config '%s'", path);
    FILE *fp = fopen(path, "w");
    if (!fp) {
        free(text);
        return hp_error(HP_STATUS_IO, "cannot create config '%s': %s", path, strerror(errno));
    }
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, fp) == len;
    ok = (fclose(fp) == 0) && ok;
    free(text);
    if (!ok) return hp_error(HP_STATUS_IO, "cannot write config '%s': %s", path, strerror(errno));
    return HP_STATUS_OK;
}
