/* Internal: data the partitioner attaches to per-rank nodes. */
#ifndef HP_SHARD_PARTITION_INTERNAL_H
#define HP_SHARD_PARTITION_INTERNAL_H

#include "hp/mesh.h"
#include "hp/redistribute.h"

/* node->extra of a REDISTRIBUTE node (in the per-rank graph's arena). */
typedef struct hp__redist_extra {
    hp_redistribute_plan plan;
    hp_mesh *mesh;
} hp__redist_extra;

#endif
