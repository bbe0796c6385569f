/* The run configuration: table-driven YAML reading, validation and writing (see hp/config.h). */
#include "hp/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config_internal.h"

#include <limits.h>
#include <stdarg.h>

typedef enum field_type { F_INT, F_DOUBLE, F_BOOL, F_STR, F_MOE, F_MM } field_type; /* F_MM: model.multimodal (config_mm.c) */
/* F_MOE: model.moe (config_moe.c) */

typedef struct field {
    const char *key;
    field_type type;
    size_t offset;    /* into the section struct */
    int64_t min, max; /* F_INT: the documented range, checked before any narrowing */
} field;

#define I32 ((int64_t)INT_MAX)
/* 10^15 - 1: a config must survive JSON (state.json keeps it as JSON), and cJSON writes a number
 * with 15 significant digits whenever that reads back within a relative 2^-52: 9007199254740991
 * would be written 9.00719925474099e+15, which is not an integer. Below 10^15 every integer is exact. */
#define BIG ((int64_t)999999999999999)
#define FLD(sec, key, type) {#key, type, offsetof(sec, key), 0, 0}
#define INT(sec, key, lo, hi) {#key, F_INT, offsetof(sec, key), lo, hi}

static const field model_fields[] = {
    INT(hp_model_config, vocab, 256, I32), INT(hp_model_config, context, 1, I32), INT(hp_model_config, layers, 1, I32),
    INT(hp_model_config, heads, 1, I32),   INT(hp_model_config, width, 1, I32),   FLD(hp_model_config, tied_head, F_BOOL),
    FLD(hp_model_config, dropout, F_DOUBLE), FLD(hp_model_config, family, F_STR),
    INT(hp_model_config, kv_heads, 0, I32),  INT(hp_model_config, ffn_width, 0, I32),
    FLD(hp_model_config, rope_base, F_DOUBLE), FLD(hp_model_config, norm_eps, F_DOUBLE), FLD(hp_model_config, moe, F_MOE),
    FLD(hp_model_config, multimodal, F_MM),
};
static const field data_fields[] = {FLD(hp_data_config, corpus, F_STR), FLD(hp_data_config, val_fraction, F_DOUBLE),
                                    FLD(hp_data_config, shards, F_STR)};
static const field train_fields[] = {
    INT(hp_train_config, steps, 1, BIG),         INT(hp_train_config, batch, 1, I32),
    INT(hp_train_config, seed, 0, BIG),          INT(hp_train_config, log_every, 0, BIG),
    INT(hp_train_config, eval_every, 0, BIG),    INT(hp_train_config, eval_batches, 1, I32),
    FLD(hp_train_config, checkpoint_dir, F_STR), INT(hp_train_config, checkpoint_every, 0, BIG),
    INT(hp_train_config, sample_every, 0, BIG),  INT(hp_train_config, sample_tokens, 0, I32),
    FLD(hp_train_config, sample_prompt, F_STR),  INT(hp_train_config, threads, 0, 4096),
    INT(hp_train_config, skip_nonfinite, 0, BIG), FLD(hp_train_config, comm_timeout, F_DOUBLE),
};
static const field optim_fields[] = {
    FLD(hp_optim_config, lr, F_DOUBLE),    FLD(hp_optim_config, min_lr, F_DOUBLE),       INT(hp_optim_config, warmup, 0, BIG),
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
/* The typed sections read by config_strategy.c, config_offload.c and config_groups.c. */
static const char *const typed_sections[] = {"strategy", "offload", "groups", "pipeline", "rl"};

hp_status hp__config_error(const hp_yaml_node *n, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!n) return hp_error(HP_STATUS_CONFIG, "%s", msg);
    return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s", n->file ? n->file : "<string>", n->line, n->column, msg);
}

const char *hp__config_node_text(const hp_yaml_node *n) {
    if (!n) return "nothing";
    if (n->kind == HP_YAML_KIND_MAP) return "a map";
    if (n->kind == HP_YAML_KIND_SEQ) return "a sequence";
    return n->scalar;
}

hp_run_config hp_run_config_defaults(void) {
    hp_run_config c;
    memset(&c, 0, sizeof c);
    c.model = (hp_model_config){.vocab = 256, .context = 256, .layers = 4, .heads = 4, .width = 256,
                                .tied_head = false, .dropout = 0.0, .rope_base = 10000.0, .norm_eps = 1e-5};
    snprintf(c.model.family, sizeof c.model.family, "gpt2");
    c.model.moe = HP_MOE_CONFIG_INIT;
    hp__config_mm_defaults(&c.model.multimodal);
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
    t->skip_nonfinite = 0;
    t->comm_timeout = 600.0; /* HP_COMM_TIMEOUT_DEFAULT (hp/comm.h), PyTorch's process-group default */
    c.optim = (hp_optim_config){.lr = 3.0e-3, .min_lr = 3.0e-4, .warmup = 50, .weight_decay = 0.1,
                                .beta1 = 0.9, .beta2 = 0.95, .eps = 1.0e-8, .grad_clip = 1.0};
    c.strategy.bucket_size = (size_t)25 << 20;
    c.offload = (hp_offload_run_config){
        .policy = {HP_CONFIG_TIER_HOST, HP_CONFIG_TIER_HOST, HP_CONFIG_TIER_HOST, HP_CONFIG_TIER_HOST},
        .bandwidth_host = 10e9, .bandwidth_disk = 1e9, .chunk = (size_t)1 << 20, .read_ahead = true,
        .async_update = true};
    c.pipeline.schedule = HP_PIPELINE_SCHEDULE_1F1B;
    c.pipeline.micro_batches = 1;
    c.pipeline.chunks = 1;
    return c;
}

void hp_run_config_free(hp_run_config *cfg) {
    hp_arena_free(cfg->arena);
    cfg->arena = NULL;
    size_t bucket = cfg->strategy.bucket_size;
    hp_cp_algo cp = cfg->strategy.context_parallel;
    int lb = cfg->strategy.ring_load_balance;
    memset(&cfg->strategy, 0, sizeof cfg->strategy);
    cfg->strategy.bucket_size = bucket;
    cfg->strategy.context_parallel = cp;
    cfg->strategy.ring_load_balance = lb;
    memset(&cfg->groups, 0, sizeof cfg->groups);
}

static hp_status read_field(const section *sec, const field *f, const hp_yaml_node *v, char *base) {
    char what[128];
    snprintf(what, sizeof what, "%s.%s", sec->name, f->key);
    void *p = base + f->offset;
    switch (f->type) {
    case F_INT: return hp_yaml_as_int(v, what, (int64_t *)p);
    case F_DOUBLE: return hp_yaml_as_double(v, what, (double *)p);
    case F_BOOL: return hp_yaml_as_bool(v, what, (bool *)p);
    case F_MOE: return hp__config_read_moe(v, (hp_moe_config *)p);
    case F_MM: return hp__config_read_mm(v, (hp_multimodal_config *)p);
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
    if (root->kind != HP_YAML_KIND_MAP)
        return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: a run config must be a map of sections", root->file, root->line,
                        root->column);
    const hp_yaml_node *mpmd = hp_yaml_map_get(root, "mpmd");
    if (mpmd)
        return hp_error(HP_STATUS_CONFIG, "%s:%d: section 'mpmd': HyperMPMD (pipeline groups) is not built yet as an "
                        "'mpmd:' section: rank groups go under 'groups:' and the schedule under 'pipeline:' (the known "
                        "sections are: model, data, train, optim, strategy, offload, groups, pipeline)", mpmd->file,
                        mpmd->line);
    for (size_t i = 0; i < root->count; i++) {
        bool ok = false;
        for (size_t k = 0; k < N(sections) && !ok; k++) ok = strcmp(root->keys[i], sections[k].name) == 0;
        for (size_t k = 0; k < N(typed_sections) && !ok; k++) ok = strcmp(root->keys[i], typed_sections[k]) == 0;
        if (!ok)
            return hp_error(HP_STATUS_CONFIG, "%s:%d: unknown key '%s' in section '<top level>' (known keys: model, data, "
                            "train, optim, strategy, offload) or the HyperMPMD sections (groups, pipeline, rl)", root->file,
                            root->items[i]->line, root->keys[i]);
    }
    for (size_t i = 0; i < N(sections); i++) HP_CHECK(read_section(&sections[i], hp_yaml_map_get(root, sections[i].name), cfg));
    HP_CHECK(hp__config_read_strategy(hp_yaml_map_get(root, "strategy"), cfg->arena, &cfg->strategy));
    HP_CHECK(hp__config_read_offload(hp_yaml_map_get(root, "offload"), &cfg->offload));
    /* The stages' modules follow pipeline.chunks and an auto split model.layers: read those first. */
    HP_CHECK(hp__config_read_pipeline(hp_yaml_map_get(root, "pipeline"), &cfg->pipeline));
    HP_CHECK(hp__config_read_rl(hp_yaml_map_get(root, "rl"), &cfg->rl));
    return hp__config_read_groups(hp_yaml_map_get(root, "groups"), cfg);
}

/* The value of section.key in the document (NULL when there is no document or no such key). */
static const hp_yaml_node *value_at(const hp_yaml_node *root, const char *sec, const char *key) {
    return hp_yaml_map_get(hp_yaml_map_get(root, sec), key);
}

/* HP_STATUS_CONFIG naming the file and, where the value came from the document, its line and column. */
static hp_status __attribute__((format(printf, 5, 6)))
bad(const char *file, const hp_yaml_node *root, const char *sec, const char *key, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const hp_yaml_node *v = value_at(root, sec, key);
    if (!v) v = hp_yaml_map_get(root, sec);
    if (v) return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s", file, v->line, v->column, msg);
    return hp_error(HP_STATUS_CONFIG, "%s: %s", file, msg);
}

#define BAD(sec, key, ...) return bad(f, root, sec, key, __VA_ARGS__)
#define TENSOR_MAX ((int64_t)1 << 48) /* elements of any one tensor of the model */

/* a*b, or TENSOR_MAX + 1 when it exceeds TENSOR_MAX (both >= 0). */
static int64_t mul(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || r > TENSOR_MAX) return TENSOR_MAX + 1;
    return r;
}

/* Every check of the typed values; root (may be NULL) is the document, for file:line in messages. */
static hp_status check(const hp_run_config *cfg, const hp_yaml_node *root) {
    const char *f = cfg->source[0] ? cfg->source : "<config>";
    const hp_model_config *m = &cfg->model;
    const hp_train_config *t = &cfg->train;
    const hp_optim_config *o = &cfg->optim;
    /* Integer ranges first, in 64 bits: nothing below narrows a value that is out of range. */
    for (size_t s = 0; s < N(sections); s++)
        for (size_t i = 0; i < sections[s].n; i++) {
            const field *fl = &sections[s].fields[i];
            if (fl->type != F_INT) continue;
            int64_t v = *(const int64_t *)((const char *)cfg + sections[s].offset + fl->offset);
            const char *sn = sections[s].name, *k = fl->key;
            bool vocab = strcmp(k, "vocab") == 0;
            if (v < fl->min)
                BAD(sn, k, "%s.%s %lld must be >= %lld%s", sn, k, (long long)v, (long long)fl->min,
                    vocab ? " (the byte tokenizer's vocabulary)" : "");
            if (v > fl->max) BAD(sn, k, "%s.%s %lld must be <= %lld", sn, k, (long long)v, (long long)fl->max);
        }
    if (m->width % m->heads)
        BAD("model", "width", "model.width %lld is not divisible by model.heads %lld", (long long)m->width,
            (long long)m->heads);
    /* The largest tensors of the model and its training step stay countable in int64 bytes. */
    const struct { const char *what, *sec, *key; int64_t n; } sizes[] = {
        {"model.vocab * model.width (the token embedding)", "model", "vocab", mul(m->vocab, m->width)},
        {"model.context * model.width (the position embedding)", "model", "context", mul(m->context, m->width)},
        {"4 * model.width^2 (an MLP weight)", "model", "width", mul(4, mul(m->width, m->width))},
        {"train.batch * model.context * model.vocab (the logits)", "train", "batch",
         mul(t->batch, mul(m->context, m->vocab))},
        {"train.batch * model.context * 4 * model.width (an MLP activation)", "train", "batch",
         mul(t->batch, mul(m->context, mul(4, m->width)))},
        {"train.batch * model.heads * model.context^2 (the attention scores)", "model", "context",
         mul(t->batch, mul(m->heads, mul(m->context, m->context)))},
    };
    for (size_t i = 0; i < N(sizes); i++)
        if (sizes[i].n > TENSOR_MAX)
            BAD(sizes[i].sec, sizes[i].key, "%s is more than 2^48 elements: model.vocab %lld, context %lld, heads %lld, "
                "width %lld, train.batch %lld", sizes[i].what, (long long)m->vocab, (long long)m->context,
                (long long)m->heads, (long long)m->width, (long long)t->batch);
    if (!(m->dropout >= 0.0 && m->dropout < 1.0)) BAD("model", "dropout", "model.dropout %g must be in [0, 1)", m->dropout);
    bool llama = strcmp(m->family, "llama") == 0, mm = strcmp(m->family, "multimodal") == 0;
    if (!llama && !mm && strcmp(m->family, "gpt2") != 0)
        BAD("model", "family", "model.family '%s' is not a known family (gpt2, llama, multimodal)", m->family);
    if (mm) HP_CHECK(hp__config_check_mm(cfg, value_at(root, "model", "multimodal"), f));
    else if (value_at(root, "model", "multimodal"))
        BAD("model", "multimodal", "model.multimodal is read only with model.family: multimodal (family is '%s')",
            m->family);
    if (llama) {
        if (m->kv_heads && m->heads % m->kv_heads)
            BAD("model", "kv_heads", "model.kv_heads %lld does not divide model.heads %lld", (long long)m->kv_heads,
                (long long)m->heads);
        if ((m->width / m->heads) % 2)
            BAD("model", "heads", "model.width %lld / model.heads %lld is an odd head dim; llama's RoPE needs it even",
                (long long)m->width, (long long)m->heads);
        if (!(m->rope_base > 1.0)) BAD("model", "rope_base", "model.rope_base %g must be > 1", m->rope_base);
        if (!(m->norm_eps > 0.0)) BAD("model", "norm_eps", "model.norm_eps %g must be > 0", m->norm_eps);
        if (m->dropout != 0.0) BAD("model", "dropout", "model.dropout %g: the llama family has no dropout", m->dropout);
        if (mul(3, mul(m->width, m->ffn_width)) > TENSOR_MAX)
            BAD("model", "ffn_width", "model.ffn_width %lld * model.width %lld is more than 2^48 elements",
                (long long)m->ffn_width, (long long)m->width);
    }
    HP_CHECK(hp__config_check_moe(&m->moe, m->layers, value_at(root, "model", "moe"), f));
    if (!cfg->data.corpus[0]) BAD("data", "corpus", "data.corpus must name a file");
    if (!(cfg->data.val_fraction > 0.0 && cfg->data.val_fraction < 1.0))
        BAD("data", "val_fraction", "data.val_fraction %g must be in (0, 1)", cfg->data.val_fraction);
    if (!t->checkpoint_dir[0]) BAD("train", "checkpoint_dir", "train.checkpoint_dir must name a directory");
    if (!(t->comm_timeout >= 0.0 && t->comm_timeout <= 31536000.0)) /* HP_COMM_TIMEOUT_MAX: a year */
        BAD("train", "comm_timeout", "train.comm_timeout %g must be in [0, 31536000] seconds (0: no limit)",
            t->comm_timeout);
    if (!(o->lr > 0.0)) BAD("optim", "lr", "optim.lr %g must be > 0", o->lr);
    if (!(o->min_lr >= 0.0 && o->min_lr <= o->lr))
        BAD("optim", "min_lr", "optim.min_lr %g must be in [0, optim.lr %g]", o->min_lr, o->lr);
    if (!(o->weight_decay >= 0.0)) BAD("optim", "weight_decay", "optim.weight_decay %g must be >= 0", o->weight_decay);
    if (!(o->beta1 >= 0.0 && o->beta1 < 1.0)) BAD("optim", "beta1", "optim.beta1 %g must be in [0, 1)", o->beta1);
    if (!(o->beta2 >= 0.0 && o->beta2 < 1.0)) BAD("optim", "beta2", "optim.beta2 %g must be in [0, 1)", o->beta2);
    if (!(o->eps > 0.0)) BAD("optim", "eps", "optim.eps %g must be > 0", o->eps);
    if (!(o->grad_clip >= 0.0)) BAD("optim", "grad_clip", "optim.grad_clip %g must be >= 0", o->grad_clip);
    return hp__config_check_groups(cfg);
}

hp_status hp_run_config_validate(const hp_run_config *cfg) { return check(cfg, NULL); }

/* Reads the document over the defaults and checks it; the document is freed in every case (the
 * config keeps copies of what it needs, in its arena). */
static hp_status load_doc(hp_yaml_doc *doc, const char *name, hp_run_config *cfg) {
    *cfg = hp_run_config_defaults();
    snprintf(cfg->source, sizeof cfg->source, "%s", name);
    cfg->arena = hp_arena_new(0);
    hp_status st = cfg->arena ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory loading '%s'", name);
    if (st == HP_STATUS_OK) st = read_root(hp_yaml_doc_root(doc), cfg);
    if (st == HP_STATUS_OK) st = check(cfg, hp_yaml_doc_root(doc));
    hp_yaml_doc_free(doc);
    if (st != HP_STATUS_OK) {
        hp_run_config_free(cfg);
        *cfg = hp_run_config_defaults();
        return st;
    }
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

/* The shortest of %.15g, %.16g, %.17g that reads back as exactly d (as the YAML writer below). */
static void exact_double(char *buf, size_t n, double d) {
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, d);
        if (strtod(buf, NULL) == d) return;
    }
}

cJSON *hp__config_json_number(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char num[64];
    exact_double(num, sizeof num, v);
    return cJSON_CreateRaw(num);
}

/* An int64 as an exact JSON number (a double would round it above 2^53). */
static cJSON *json_int(int64_t v) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)v);
    return cJSON_CreateRaw(num);
}

static cJSON k_absent; /* typed_json's "section not present" */

/* The typed section i of typed_sections as JSON; &k_absent when the section is absent, NULL on OOM. */
static cJSON *typed_json(const hp_run_config *cfg, size_t i) {
    if (i == 0) return cfg->strategy.present ? hp__config_strategy_json(&cfg->strategy) : &k_absent;
    if (i == 1) return cfg->offload.present ? hp__config_offload_json(&cfg->offload) : &k_absent;
    if (i == 2) return cfg->groups.present ? hp__config_groups_json(&cfg->groups) : &k_absent;
    if (i == 4) return cfg->rl.present ? hp__config_rl_json(&cfg->rl) : &k_absent;
    return cfg->pipeline.present ? hp__config_pipeline_json(&cfg->pipeline) : &k_absent;
}

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
            if (f->type == F_MOE && ((const hp_moe_config *)p)->experts < 1) continue; /* MoE off: not written */
            if (f->type == F_MM && strcmp(cfg->model.family, "multimodal") != 0) continue; /* not used: not written */
            cJSON *v = f->type == F_MM       ? hp__config_mm_json((const hp_multimodal_config *)p)
                       : f->type == F_MOE      ? hp__config_moe_json((const hp_moe_config *)p)
                       : f->type == F_INT      ? json_int(*(const int64_t *)p)
                       : f->type == F_DOUBLE ? hp__config_json_number(*(const double *)p)
                       : f->type == F_BOOL   ? cJSON_CreateBool(*(const bool *)p)
                                             : cJSON_CreateString((const char *)p);
            ok = v && cJSON_AddItemToObject(sec, f->key, v);
            if (!ok) cJSON_Delete(v);
        }
    }
    for (size_t i = 0; ok && i < N(typed_sections); i++) {
        cJSON *v = typed_json(cfg, i);
        if (v == &k_absent) continue;
        ok = v && cJSON_AddItemToObject(root, typed_sections[i], v);
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
                exact_double(num, sizeof num, *(const double *)p);
                if (!strpbrk(num, ".eEn")) strcat(num, ".0"); /* keep it a float to the eye (not nan/inf) */
                sb_printf(&b, "  %s: %s\n", f->key, num);
                break;
            }
            case F_BOOL: sb_printf(&b, "  %s: %s\n", f->key, *(const bool *)p ? "true" : "false"); break;
            case F_MM: {
                if (strcmp(cfg->model.family, "multimodal") != 0) break;
                cJSON *js = hp__config_mm_json((const hp_multimodal_config *)p);
                char *q = js ? cJSON_PrintUnformatted(js) : NULL;
                if (q) sb_printf(&b, "  %s: %s\n", f->key, q);
                else b.oom = true;
                free(q);
                cJSON_Delete(js);
                break;
            }
            case F_MOE: { /* a JSON object is a valid YAML flow mapping */
                if (((const hp_moe_config *)p)->experts < 1) break;
                cJSON *js = hp__config_moe_json((const hp_moe_config *)p);
                char *q = js ? cJSON_PrintUnformatted(js) : NULL;
                if (q) sb_printf(&b, "  %s: %s\n", f->key, q);
                else b.oom = true;
                free(q);
                cJSON_Delete(js);
                break;
            }
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
    for (size_t i = 0; i < N(typed_sections); i++) {
        cJSON *v = typed_json(cfg, i);
        if (v == &k_absent) continue;
        char *j = v ? cJSON_PrintUnformatted(v) : NULL;
        if (j) sb_printf(&b, "%s: %s\n", typed_sections[i], j);
        else b.oom = true;
        free(j);
        cJSON_Delete(v);
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
