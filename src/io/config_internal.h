/* Internal to src/io: the typed strategy and offload sections of the run config (config.c calls
 * these; config_strategy.c and config_offload.c define them). */
#ifndef HP_IO_CONFIG_INTERNAL_H
#define HP_IO_CONFIG_INTERNAL_H

#include <cjson/cJSON.h>

#include "hp/config.h"
#include "hp/yaml.h"

/* HP_STATUS_CONFIG "file:line:col: <message>" at node n (just the message when n is NULL). */
hp_status hp__config_error(const hp_yaml_node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A short rendering of a node for messages: the scalar text, or "a map" / "a sequence". */
const char *hp__config_node_text(const hp_yaml_node *n);

/* A size value (plain bytes or "25MiB"); `what` names the key. Leaves *out alone for NULL/null. */
hp_status hp__config_read_size(const hp_yaml_node *n, const char *what, size_t *out);

/* Reads and checks the `strategy:` value `node` (NULL or null: absent) into *out, allocating rules,
 * ranks and the file name in `arena`. */
hp_status hp__config_read_strategy(const hp_yaml_node *node, hp_arena *arena, hp_strategy_config *out);
/* Reads and checks the `offload:` value `node` (NULL or null: absent) into *out. */
hp_status hp__config_read_offload(const hp_yaml_node *node, hp_offload_run_config *out);

/* A JSON number that reads back as exactly `v` (cJSON_CreateNumber writes 15 significant digits when
 * they read back within a relative 2^-52, which loses the last bit); null for a non-finite v. NULL
 * when out of memory. */
cJSON *hp__config_json_number(double v);

/* The sections as cJSON objects, in the input syntax (NULL when out of memory). */
cJSON *hp__config_strategy_json(const hp_strategy_config *s);
cJSON *hp__config_offload_json(const hp_offload_run_config *o);

#endif
