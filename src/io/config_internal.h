/* Internal to src/io: the typed strategy, offload, groups and pipeline sections of the run config
 * (config.c calls these; config_strategy.c, config_offload.c and config_groups*.c define them). */
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
/* Reads a group's mesh (`mesh`, its device order being the group's ranks: no `ranks` key) and its
 * rules (`rules`: inputs, params, optimizer, bucket_size; no mesh) into *s; messages name them
 * groups.NAME.mesh and groups.NAME.strategy. Both NULL/null: *s stays absent. Rules without a mesh
 * are an error. */
hp_status hp__config_read_group_strategy(const hp_yaml_node *mesh, const hp_yaml_node *rules, const char *name,
                                         hp_arena *arena, hp_strategy_config *s);
/* Reads and checks the `offload:` value `node` (NULL or null: absent) into *out. */
hp_status hp__config_read_offload(const hp_yaml_node *node, hp_offload_run_config *out);

/* A JSON number that reads back as exactly `v` (cJSON_CreateNumber writes 15 significant digits when
 * they read back within a relative 2^-52, which loses the last bit); null for a non-finite v. NULL
 * when out of memory. */
cJSON *hp__config_json_number(double v);

/* The sections as cJSON objects, in the input syntax (NULL when out of memory). */
cJSON *hp__config_strategy_json(const hp_strategy_config *s);
cJSON *hp__config_offload_json(const hp_offload_run_config *o);
/* Adds a group's strategy to the group's JSON object as its "mesh" and "strategy" keys (nothing when
 * absent); false when out of memory. */
bool hp__config_group_strategy_json(const hp_strategy_config *s, cJSON *group);

/* Reads the `model.moe:` value (NULL or null: MoE off, HP_MOE_CONFIG_INIT) into *out; checks each value
 * and top_k <= experts with file:line (config_moe.c). */
hp_status hp__config_read_moe(const hp_yaml_node *n, hp_moe_config *out);
/* The checks of model.moe against the rest of the model (its layer list against model.layers); `moe` is
 * the document's node (NULL: messages name only `file`). */
hp_status hp__config_check_moe(const hp_moe_config *m, int64_t layers, const hp_yaml_node *moe, const char *file);
/* model.moe as a JSON object in the input syntax (NULL when out of memory). */
cJSON *hp__config_moe_json(const hp_moe_config *m);
/* model.multimodal (config_mm.c): defaults, reading with file:line, the checks against the rest of the
 * config (`node` the section's value or NULL), and the JSON object in the input syntax. */
void hp__config_mm_defaults(hp_multimodal_config *m);
hp_status hp__config_read_mm(const hp_yaml_node *n, hp_multimodal_config *out);
hp_status hp__config_check_mm(const hp_run_config *cfg, const hp_yaml_node *node, const char *file);
cJSON *hp__config_mm_json(const hp_multimodal_config *m);

/* Reads the `pipeline:` value (NULL or null: absent) into *out (config_groups.c). */
hp_status hp__config_read_pipeline(const hp_yaml_node *node, hp_pipeline_config *out);
/* Reads the `groups:` value (NULL or null: absent) into cfg->groups, after cfg->pipeline and
 * cfg->model are read (module chunks follow pipeline.chunks; split: auto fills the layer ranges from
 * model.layers). Allocates in cfg->arena. */
hp_status hp__config_read_groups(const hp_yaml_node *node, hp_run_config *cfg);
/* The checks across groups, stages and sections (config_groups_check.c); part of
 * hp_run_config_validate. */
hp_status hp__config_check_groups(const hp_run_config *cfg);
/* pipeline.chunks against the schedule (1 for gpipe, 1f1b, zb-h1; >= 2 for interleaved; 2 for zb-v
 * and dualpipev), in [1, HP_CONFIG_MAX_CHUNKS]; `f` names the file. */
hp_status hp__config_check_chunks(const hp_pipeline_config *p, const char *f);
/* The virtual stage (place in the pipeline) of chunk c of stage `stage` of p: c*p + stage, or for the
 * V schedules (zb-v, dualpipev) stage for chunk 0 and 2p-1-stage for chunk 1. */
int hp__config_virtual_stage(hp_pipeline_schedule schedule, int p, int stage, int c);
/* The sections as cJSON, in the input syntax (NULL when out of memory). */
cJSON *hp__config_groups_json(const hp_groups_config *g);
cJSON *hp__config_pipeline_json(const hp_pipeline_config *p);

/* The `rl:` section (config_rl.c): read with its defaults (also when absent), as JSON, and the checks
 * of the RL groups and rl against the model (part of hp_run_config_validate, through
 * hp__config_check_groups). */
hp_status hp__config_read_rl(const hp_yaml_node *node, hp_rl_config *out);
cJSON *hp__config_rl_json(const hp_rl_config *r);
hp_status hp__config_check_rl(const hp_run_config *cfg);

#endif
