/*
 * hp/yaml.h — a small read-only YAML tree (maps, sequences, scalars with line numbers), parsed
 * with libyaml, plus lookup and typed-conversion helpers whose errors name the file, line, column
 * and key. The run config (hp/config.h) reads every section, strategy and offload included, into
 * typed structs with it:
 *
 *     const hp_yaml_node *mesh = hp_yaml_map_get(hp_yaml_map_get(hp_yaml_doc_root(doc), "strategy"), "mesh");
 *     static const char *const keys[] = {"device_matrix", "alias_name", "ranks"};
 *     HP_CHECK(hp_yaml_check_keys(mesh, keys, 3, "strategy.mesh"));
 *     int64_t dp;
 *     HP_CHECK(hp_yaml_as_int(hp_yaml_seq_at(hp_yaml_map_get(mesh, "device_matrix"), 0),
 *                             "strategy.mesh.device_matrix[0]", &dp));
 *
 * Supported: one document of block or flow maps/sequences and scalars (JSON text parses too).
 * Not supported: anchors and aliases (HP_STATUS_CONFIG), several documents, tags (ignored).
 * Every error is HP_STATUS_CONFIG with a message starting "FILE:LINE:COL: ".
 */
#ifndef HP_YAML_H
#define HP_YAML_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hp_yaml_kind {
    HP_YAML_KIND_SCALAR = 0,
    HP_YAML_KIND_MAP,
    HP_YAML_KIND_SEQ,
} hp_yaml_kind;

/* A node of the tree. All memory belongs to the hp_yaml_doc it came from. */
typedef struct hp_yaml_node {
    hp_yaml_kind kind;
    int line, column;            /* 1-based position where the node starts */
    const char *file;            /* the file (or name) the document was parsed from */
    const char *scalar;          /* SCALAR: the text ("" for an empty value); NULL otherwise */
    bool quoted;                 /* SCALAR: written in quotes, so "1" is a string, not a number */
    size_t count;                /* MAP: number of pairs; SEQ: number of items; SCALAR: 0 */
    const char **keys;           /* MAP: the keys, in file order (unique) */
    struct hp_yaml_node **items; /* MAP: the values, parallel to keys; SEQ: the items */
} hp_yaml_node;

/* A parsed document: owns every node. Opaque. */
typedef struct hp_yaml_doc hp_yaml_doc;

/*
 * Parses the file at `path`. HP_STATUS_IO (naming the path) if it cannot be read; HP_STATUS_CONFIG
 * "path:line:col: <libyaml's problem>" for malformed YAML, aliases, several documents or
 * duplicate keys. The caller frees *out with hp_yaml_doc_free.
 */
hp_status hp_yaml_parse_file(const char *path, hp_yaml_doc **out);
/* Parses `len` bytes of `text`; `name` (may be NULL: "<string>") stands for the file in errors. */
hp_status hp_yaml_parse_string(const char *text, size_t len, const char *name, hp_yaml_doc **out);
/* NULL is allowed. */
void hp_yaml_doc_free(hp_yaml_doc *doc);
/* The root node; NULL for an empty document. */
const hp_yaml_node *hp_yaml_doc_root(const hp_yaml_doc *doc);

/* The value of `key` in map `map`; NULL when map is NULL, not a map, or lacks the key. */
const hp_yaml_node *hp_yaml_map_get(const hp_yaml_node *map, const char *key);
/* Item i of sequence `seq`; NULL when seq is NULL, not a sequence, or i is out of range. */
const hp_yaml_node *hp_yaml_seq_at(const hp_yaml_node *seq, size_t i);
/* True for NULL, and for an unquoted scalar that is empty, "~", "null", "Null" or "NULL". */
bool hp_yaml_is_null(const hp_yaml_node *n);

/*
 * Fails with HP_STATUS_CONFIG "file:line:col: unknown key 'K' in section 'SECTION' (known keys:
 * ...)" if map `map` holds a key not in allowed[0..n). Also fails if `map` is neither NULL/null
 * nor a map ("section 'SECTION' must be a map").
 */
hp_status hp_yaml_check_keys(const hp_yaml_node *map, const char *const *allowed, size_t n, const char *section);

/*
 * Typed reads of a scalar. `what` names the value in errors ("model.width"). Each fails with
 * HP_STATUS_CONFIG "file:line:col: WHAT expects <type>, got 'TEXT'" for a non-scalar, a quoted
 * scalar (numbers and booleans must be plain), or text that does not parse.
 *   int:    decimal integer fitting int64 ("1000", "-3", "+7"; not "1e3" or "1.0")
 *   double: a finite decimal or exponent number ("3.0e-3", "1", ".5")
 *   bool:   true/false (also True/TRUE/False/FALSE)
 *   string: any scalar text, quoted or not; valid until the doc is freed
 */
hp_status hp_yaml_as_int(const hp_yaml_node *n, const char *what, int64_t *out);
hp_status hp_yaml_as_double(const hp_yaml_node *n, const char *what, double *out);
hp_status hp_yaml_as_bool(const hp_yaml_node *n, const char *what, bool *out);
hp_status hp_yaml_as_string(const hp_yaml_node *n, const char *what, const char **out);

/*
 * The subtree as compact JSON text (malloc'd; caller frees with free()). Plain scalars that read
 * as integers, numbers, booleans or null become JSON numbers, booleans and null; other scalars
 * become strings. NULL `n` gives "null". Returns NULL when out of memory.
 */
char *hp_yaml_to_json(const hp_yaml_node *n);

#ifdef __cplusplus
}
#endif
#endif /* HP_YAML_H */
