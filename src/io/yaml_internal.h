/* Internal helpers shared by src/io/yaml.c and src/io/config.c. */
#ifndef HP_IO_YAML_INTERNAL_H
#define HP_IO_YAML_INTERNAL_H

#include <cjson/cJSON.h>

#include "hp/yaml.h"

/* The subtree as a cJSON value (see hp_yaml_to_json for the typing); NULL when out of memory. */
cJSON *hp__yaml_to_cjson(const hp_yaml_node *n);

#endif
