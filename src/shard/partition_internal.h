/* Internal: data the partitioner attaches to per-rank nodes. */
#ifndef HP_SHARD_PARTITION_INTERNAL_H
#define HP_SHARD_PARTITION_INTERNAL_H

#include "hp/instr.h"
#include "hp/mesh.h"
#include "hp/redistribute.h"

/* node->extra of a REDISTRIBUTE node (in the per-rank graph's arena): its runtime instruction
 * first (a collective on the queue of the mesh axes the plan uses), then the plan and mesh. */
typedef struct hp__redist_extra {
    hp_instr instr;
    hp_redistribute_plan plan;
    hp_mesh *mesh;
} hp__redist_extra;

/* Fills x->instr from x->plan and x->mesh (redist_instr.c). */
void hp__redist_instr_init(hp__redist_extra *x);

#endif
