/* A small YAML tree over libyaml's event parser (see hp/yaml.h). */
#include "hp/yaml.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "io/yaml_internal.h"

struct hp_yaml_doc {
    hp_arena *arena;
    const char *file;
    hp_yaml_node *root;
};

typedef struct parse_ctx {
    yaml_parser_t parser;
    hp_yaml_doc *doc;
    int depth;
} parse_ctx;

#define MAX_DEPTH 64

static hp_status parser_error(parse_ctx *p) {
    yaml_parser_t *y = &p->parser;
    yaml_mark_t m = y->problem_mark;
    if (y->error == YAML_MEMORY_ERROR) return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory parsing YAML", p->doc->file);
    return hp_error(HP_STATUS_CONFIG, "%s:%zu:%zu: malformed YAML: %s%s%s", p->doc->file, m.line + 1, m.column + 1,
                    y->problem ? y->problem : "parse error", y->context ? " " : "", y->context ? y->context : "");
}

static hp_status next_event(parse_ctx *p, yaml_event_t *ev) {
    if (!yaml_parser_parse(&p->parser, ev)) return parser_error(p);
    return HP_STATUS_OK;
}

static hp_yaml_node *new_node(parse_ctx *p, hp_yaml_kind kind, const yaml_event_t *ev) {
    hp_yaml_node *n = hp_arena_alloc(p->doc->arena, sizeof *n, _Alignof(hp_yaml_node));
    if (!n) return NULL;
    n->kind = kind;
    n->line = (int)ev->start_mark.line + 1;
    n->column = (int)ev->start_mark.column + 1;
    n->file = p->doc->file;
    return n;
}

static hp_status parse_node(parse_ctx *p, yaml_event_t *ev, hp_yaml_node **out);

/* Parses the children of a map or sequence until its end event; `n` already made. */
static hp_status parse_children(parse_ctx *p, hp_yaml_node *n) {
    bool is_map = n->kind == HP_YAML_KIND_MAP;
    size_t cap = 0;
    hp_yaml_node **items = NULL;
    const char **keys = NULL;
    hp_status st = HP_STATUS_OK;
    if (++p->depth > MAX_DEPTH) {
        st = hp_error(HP_STATUS_CONFIG, "%s:%d:%d: nesting deeper than %d levels", n->file, n->line, n->column, MAX_DEPTH);
        goto done;
    }
    for (;;) {
        yaml_event_t ev;
        HP_CHECK_GOTO(next_event(p, &ev), st, done);
        if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        const char *key = NULL;
        int kline = (int)ev.start_mark.line + 1, kcol = (int)ev.start_mark.column + 1;
        if (is_map) {
            if (ev.type != YAML_SCALAR_EVENT) {
                yaml_event_delete(&ev);
                st = hp_error(HP_STATUS_CONFIG, "%s:%d:%d: map keys must be scalars", n->file, kline, kcol);
                goto done;
            }
            key = hp_arena_strdup(p->doc->arena, (const char *)ev.data.scalar.value);
            yaml_event_delete(&ev);
            if (!key) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", n->file);
                goto done;
            }
            for (size_t i = 0; i < n->count; i++)
                if (strcmp(keys[i], key) == 0) {
                    st = hp_error(HP_STATUS_CONFIG, "%s:%d:%d: duplicate key '%s'", n->file, kline, kcol, key);
                    goto done;
                }
            HP_CHECK_GOTO(next_event(p, &ev), st, done);
        }
        if (n->count == cap) {
            cap = cap ? 2 * cap : 8;
            hp_yaml_node **ni = realloc(items, cap * sizeof *ni);
            if (ni) items = ni;
            const char **nk = ni ? realloc(keys, cap * sizeof *nk) : NULL;
            if (nk) keys = nk;
            if (!ni || !nk) {
                yaml_event_delete(&ev);
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", n->file);
                goto done;
            }
        }
        hp_yaml_node *child = NULL;
        HP_CHECK_GOTO(parse_node(p, &ev, &child), st, done);
        keys[n->count] = key;
        items[n->count] = child;
        n->count++;
    }
    if (n->count) {
        n->items = hp_arena_alloc(p->doc->arena, n->count * sizeof *n->items, _Alignof(hp_yaml_node *));
        if (is_map) n->keys = hp_arena_alloc(p->doc->arena, n->count * sizeof *n->keys, _Alignof(char *));
        if (!n->items || (is_map && !n->keys)) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", n->file);
            goto done;
        }
        memcpy(n->items, items, n->count * sizeof *items);
        if (is_map) memcpy(n->keys, keys, n->count * sizeof *keys);
    }
done:
    p->depth--;
    free(items);
    free(keys);
    return st;
}

/* Consumes `ev` (deleting it) and, for collections, the events up to the matching end. */
static hp_status parse_node(parse_ctx *p, yaml_event_t *ev, hp_yaml_node **out) {
    hp_yaml_node *n = NULL;
    hp_status st = HP_STATUS_OK;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        n = new_node(p, HP_YAML_KIND_SCALAR, ev);
        if (n) {
            n->scalar = hp_arena_strdup(p->doc->arena, (const char *)ev->data.scalar.value);
            n->quoted = ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                        ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ||
                        ev->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
                        ev->data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
            if (!n->scalar) n = NULL;
        }
        break;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        n = new_node(p, ev->type == YAML_MAPPING_START_EVENT ? HP_YAML_KIND_MAP : HP_YAML_KIND_SEQ, ev);
        break;
    case YAML_ALIAS_EVENT:
        st = hp_error(HP_STATUS_CONFIG, "%s:%zu:%zu: YAML aliases (*%s) are not supported", p->doc->file,
                      ev->start_mark.line + 1, ev->start_mark.column + 1, (const char *)ev->data.alias.anchor);
        break;
    default:
        st = hp_error(HP_STATUS_CONFIG, "%s:%zu:%zu: unexpected YAML event %d", p->doc->file, ev->start_mark.line + 1,
                      ev->start_mark.column + 1, (int)ev->type);
        break;
    }
    yaml_event_delete(ev);
    if (st != HP_STATUS_OK) return st;
    if (!n) return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", p->doc->file);
    if (n->kind != HP_YAML_KIND_SCALAR) HP_CHECK(parse_children(p, n));
    *out = n;
    return HP_STATUS_OK;
}

static hp_status parse_stream(parse_ctx *p) {
    yaml_event_t ev;
    HP_CHECK(next_event(p, &ev)); /* STREAM-START */
    yaml_event_delete(&ev);
    HP_CHECK(next_event(p, &ev));
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return HP_STATUS_OK; /* empty document */
    }
    yaml_event_delete(&ev); /* DOCUMENT-START */
    HP_CHECK(next_event(p, &ev));
    HP_CHECK(parse_node(p, &ev, &p->doc->root));
    HP_CHECK(next_event(p, &ev)); /* DOCUMENT-END */
    yaml_event_delete(&ev);
    HP_CHECK(next_event(p, &ev));
    bool more = ev.type != YAML_STREAM_END_EVENT;
    int line = (int)ev.start_mark.line + 1;
    yaml_event_delete(&ev);
    if (more) return hp_error(HP_STATUS_CONFIG, "%s:%d:1: only one YAML document is allowed", p->doc->file, line);
    return HP_STATUS_OK;
}

hp_status hp_yaml_parse_string(const char *text, size_t len, const char *name, hp_yaml_doc **out) {
    *out = NULL;
    hp_yaml_doc *doc = calloc(1, sizeof *doc);
    hp_arena *arena = hp_arena_new(0);
    if (!doc || !arena) {
        free(doc);
        hp_arena_free(arena);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory parsing %s", name ? name : "<string>");
    }
    doc->arena = arena;
    doc->file = hp_arena_strdup(arena, name ? name : "<string>");
    parse_ctx p = {.doc = doc};
    if (!doc->file || !yaml_parser_initialize(&p.parser)) {
        hp_yaml_doc_free(doc);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory parsing %s", name ? name : "<string>");
    }
    yaml_parser_set_input_string(&p.parser, (const unsigned char *)text, len);
    hp_status st = parse_stream(&p);
    yaml_parser_delete(&p.parser);
    if (st != HP_STATUS_OK) {
        hp_yaml_doc_free(doc);
        return st;
    }
    *out = doc;
    return HP_STATUS_OK;
}

hp_status hp_yaml_parse_file(const char *path, hp_yaml_doc **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = !buf || ferror(f);
    int err = errno;
    fclose(f);
    if (bad) {
        free(buf);
        return buf ? hp_error(HP_STATUS_IO, "cannot read '%s': %s", path, strerror(err))
                   : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory reading '%s'", path);
    }
    hp_status st = hp_yaml_parse_string(buf, len, path, out);
    free(buf);
    return st;
}

void hp_yaml_doc_free(hp_yaml_doc *doc) {
    if (!doc) return;
    hp_arena_free(doc->arena);
    free(doc);
}

const hp_yaml_node *hp_yaml_doc_root(const hp_yaml_doc *doc) { return doc->root; }

const hp_yaml_node *hp_yaml_map_get(const hp_yaml_node *map, const char *key) {
    if (!map || map->kind != HP_YAML_KIND_MAP) return NULL;
    for (size_t i = 0; i < map->count; i++)
        if (strcmp(map->keys[i], key) == 0) return map->items[i];
    return NULL;
}

const hp_yaml_node *hp_yaml_seq_at(const hp_yaml_node *seq, size_t i) {
    if (!seq || seq->kind != HP_YAML_KIND_SEQ || i >= seq->count) return NULL;
    return seq->items[i];
}

bool hp_yaml_is_null(const hp_yaml_node *n) {
    if (!n) return true;
    if (n->kind != HP_YAML_KIND_SCALAR || n->quoted) return false;
    const char *s = n->scalar;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

hp_status hp_yaml_check_keys(const hp_yaml_node *map, const char *const *allowed, size_t n, const char *section) {
    if (hp_yaml_is_null(map)) return HP_STATUS_OK;
    if (map->kind != HP_YAML_KIND_MAP)
        return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: section '%s' must be a map", map->file, map->line, map->column,
                        section);
    for (size_t i = 0; i < map->count; i++) {
        bool ok = false;
        for (size_t j = 0; j < n && !ok; j++) ok = strcmp(map->keys[i], allowed[j]) == 0;
        if (ok) continue;
        char known[512] = "";
        size_t used = 0;
        for (size_t j = 0; j < n && used < sizeof known; j++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "", allowed[j]);
        const hp_yaml_node *v = map->items[i];
        /* The value's position is the best we have; the key sits on the same line. */
        return hp_error(HP_STATUS_CONFIG, "%s:%d: unknown key '%s' in section '%s' (known keys: %s)", map->file,
                        v->line, map->keys[i], section, known);
    }
    return HP_STATUS_OK;
}

static hp_status type_error(const hp_yaml_node *n, const char *what, const char *type) {
    if (!n) return hp_error(HP_STATUS_CONFIG, "%s expects %s, got nothing", what, type);
    const char *got = n->kind == HP_YAML_KIND_MAP ? "a map" : n->kind == HP_YAML_KIND_SEQ ? "a sequence" : NULL;
    if (got) return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s expects %s, got %s", n->file, n->line, n->column, what, type, got);
    return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s expects %s, got %s'%s'", n->file, n->line, n->column, what, type,
                    n->quoted ? "the quoted string " : "", n->scalar);
}

static bool plain_scalar(const hp_yaml_node *n) { return n && n->kind == HP_YAML_KIND_SCALAR && !n->quoted && *n->scalar; }

static bool parse_int(const char *s, int64_t *out) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (!*p) return false;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9') return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out) {
    /* Digits, sign, '.', exponent only: no hex, inf or nan. */
    bool digit = false;
    for (const char *q = s; *q; q++) {
        if (*q >= '0' && *q <= '9') digit = true;
        else if (!strchr("+-.eE", *q)) return false;
    }
    if (!digit) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

hp_status hp_yaml_as_int(const hp_yaml_node *n, const char *what, int64_t *out) {
    if (!plain_scalar(n) || !parse_int(n->scalar, out)) return type_error(n, what, "an integer");
    return HP_STATUS_OK;
}

hp_status hp_yaml_as_double(const hp_yaml_node *n, const char *what, double *out) {
    if (!plain_scalar(n) || !parse_double(n->scalar, out)) return type_error(n, what, "a number");
    return HP_STATUS_OK;
}

static int parse_bool(const char *s) {
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return 1;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return 0;
    return -1;
}

hp_status hp_yaml_as_bool(const hp_yaml_node *n, const char *what, bool *out) {
    int b = plain_scalar(n) ? parse_bool(n->scalar) : -1;
    if (b < 0) return type_error(n, what, "true or false");
    *out = b == 1;
    return HP_STATUS_OK;
}

hp_status hp_yaml_as_string(const hp_yaml_node *n, const char *what, const char **out) {
    if (!n || n->kind != HP_YAML_KIND_SCALAR) return type_error(n, what, "a string");
    *out = n->scalar;
    return HP_STATUS_OK;
}

cJSON *hp__yaml_to_cjson(const hp_yaml_node *n) {
    if (hp_yaml_is_null(n)) return cJSON_CreateNull();
    if (n->kind == HP_YAML_KIND_SCALAR) {
        int64_t i;
        double d;
        int b;
        if (!n->quoted && parse_int(n->scalar, &i)) return cJSON_CreateNumber((double)i);
        if (!n->quoted && parse_double(n->scalar, &d)) return cJSON_CreateNumber(d);
        if (!n->quoted && (b = parse_bool(n->scalar)) >= 0) return cJSON_CreateBool(b);
        return cJSON_CreateString(n->scalar);
    }
    cJSON *j = n->kind == HP_YAML_KIND_MAP ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!j) return NULL;
    for (size_t i = 0; i < n->count; i++) {
        cJSON *c = hp__yaml_to_cjson(n->items[i]);
        bool ok = c && (n->kind == HP_YAML_KIND_MAP ? cJSON_AddItemToObject(j, n->keys[i], c) : cJSON_AddItemToArray(j, c));
        if (!ok) {
            cJSON_Delete(c);
            cJSON_Delete(j);
            return NULL;
        }
    }
    return j;
}

char *hp_yaml_to_json(const hp_yaml_node *n) {
    cJSON *j = hp__yaml_to_cjson(n);
    if (!j) return NULL;
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}
