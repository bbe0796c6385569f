/* Shared between the redistribution planner and executor. */
#ifndef HP_SHARD_REDIST_INTERNAL_H
#define HP_SHARD_REDIST_INTERNAL_H

#include "hp/redistribute.h"

/*
 * The geometry of a group step (ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER, LOCAL_SLICE) over mesh
 * axis `axis` seen from mesh index `me`: the group's members ordered by their coordinate on the
 * axis, each member's slice before and after, and the padded block shape every pair's piece fits.
 */
typedef struct hp__group {
    int n;                    /* group size */
    int pos;                  /* my position in the group */
    int *members;             /* mesh indices, n */
    int64_t (*bs)[HP_MAX_DIMS], (*bl)[HP_MAX_DIMS];   /* before slices, n */
    int64_t (*as)[HP_MAX_DIMS], (*al)[HP_MAX_DIMS];   /* after slices, n */
    int64_t pad[HP_MAX_DIMS]; /* padded block shape */
    int64_t pad_numel;
} hp__group;

/* Fills g for `me`; valid is false when the step cannot be done inside the group (blocks do not
 * tile the target). Free with hp__group_free. */
hp_status hp__group_make(const hp_mesh *m, const hp_redist_step *s, const hp_shape *shape, int me,
                         hp__group *g, bool *valid);
void hp__group_free(hp__group *g);

int64_t hp__numel(int ndim, const int64_t *len);

/* Runs one RAGGED_ALL_TO_ALLV step (redist_ragged.c): `counts` (E i32) are this rank's rows per
 * group, in the order its block rows are grouped. Collective over the step's axis. */
hp_status hp__redist_ragged(hp_mesh *m, const hp_redist_step *s, const hp_shape *shape, hp_dtype dt, const void *in,
                            const int32_t *counts, int64_t E, void *out);

#endif
