/*
 * Internal: the payload of a REDISTRIBUTE node (node->extra, in the per-rank graph's arena). The
 * partitioner (src/shard/) fills it; the operator's cost (redistribute_op.c) and the backends'
 * kernels read it. The plan is data (hp/redist_plan.h): nothing here calls the planner.
 */
#ifndef HP_OPS_REDISTRIBUTE_OP_H
#define HP_OPS_REDISTRIBUTE_OP_H

#include "hp/redist_plan.h"

typedef struct hp__redist_extra {
    hp_redistribute_plan plan;
    hp_mesh *mesh;
} hp__redist_extra;

#endif
