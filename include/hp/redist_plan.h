/*
 * hp/redist_plan.h — a redistribution plan as data: the steps (collectives) that change a tensor
 * from one layout to another on one mesh, with the bytes each step moves.
 *
 *     const hp_redistribute_plan *p = ...;   // made by hp_redistribute_plan_make (hp/redistribute.h)
 *     for (int i = 0; i < p->nsteps; i++)
 *         printf("%s %lld\n", hp_redist_kind_name(p->steps[i].kind), (long long)p->steps[i].bytes);
 *
 * This header belongs to the layout layer (src/layout/): operators, the IR and backends read plans
 * (the REDISTRIBUTE node carries one) without depending on the planner, which lives in HyperShard
 * (src/shard/, declared in hp/redistribute.h, where the step kinds are explained).
 */
#ifndef HP_REDIST_PLAN_H
#define HP_REDIST_PLAN_H

#include "hp/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kinds of steps; hp/redistribute.h explains what each does to the layout. */
typedef enum hp_redist_kind {
    HP_REDIST_LOCAL_SLICE = 0,
    HP_REDIST_LOCAL_PARTIAL,
    HP_REDIST_ALL_GATHER,
    HP_REDIST_ALL_TO_ALL,
    HP_REDIST_REDUCE_SCATTER,
    HP_REDIST_ALL_REDUCE,
    HP_REDIST_ALL_TO_ALLV,
    HP_REDIST_SEND_RECV,
    HP_REDIST_RAGGED_ALL_TO_ALLV, /* to or from a ragged split of dim 0 (hp_layout.ragged): rows by group owner */
    HP_REDIST_KIND_COUNT
} hp_redist_kind;

/* "local_slice", "all_gather", ...; "?" for a value outside the enum. The string is static. */
const char *hp_redist_kind_name(hp_redist_kind k);

typedef struct hp_redist_step {
    hp_redist_kind kind;
    int axis;           /* the mesh axis of the group collective; -1 for ALL_TO_ALLV */
    int dim_from;       /* ALL_GATHER, ALL_TO_ALL: the dim losing `axis`; else -1 */
    int dim_to;         /* LOCAL_SLICE, ALL_TO_ALL, REDUCE_SCATTER: the dim gaining it; else -1 */
    hp_layout before, after;
    int64_t bytes;      /* the most bytes any rank receives in this step */
} hp_redist_step;

#define HP_REDIST_MAX_STEPS 32

typedef struct hp_redistribute_plan {
    hp_shape shape;     /* global shape */
    hp_dtype dtype;
    hp_layout src, dst;
    int nsteps;
    hp_redist_step steps[HP_REDIST_MAX_STEPS];
    int64_t bytes;      /* sum of the steps' bytes (per rank) */
} hp_redistribute_plan;

#ifdef __cplusplus
}
#endif

#endif
