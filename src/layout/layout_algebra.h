/*
 * Internal: layout algebra helpers for the operators' sharding rules (src/ops/) and the
 * partitioner (src/shard/). Pure functions of layouts and shapes (rule_util.c): no graph, no
 * planner, no communication. Helpers that read the sharding context (costs, partial resolution)
 * are in src/ops/op.h.
 */
#ifndef HP_LAYOUT_LAYOUT_ALGEBRA_H
#define HP_LAYOUT_LAYOUT_ALGEBRA_H

#include "hp/mesh.h"

/* Mesh axes (bitmask) splitting dim d / any dim. */
uint32_t hp__lay_dim_axes(const hp_layout *l, int d);
uint32_t hp__lay_all_axes(const hp_layout *l);
/* Removes every listed axis from every dim (their shards are gathered). */
void hp__lay_drop_axes(hp_layout *l, uint32_t axes);
/* Drops pending reductions (the partial axes become replicated: an all-reduce when resolved). */
void hp__lay_clear_partial(hp_layout *l);
/* Makes dim d unsplit. */
void hp__lay_unshard_dim(hp_layout *l, int d);
/* Copies dim sd of src onto dim dd of dst (replacing dst's axes there). */
void hp__lay_copy_dim(hp_layout *dst, int dd, const hp_layout *src, int sd);
/* Marks axes partial with op (they must split no dim). */
void hp__lay_set_partial(hp_layout *l, uint32_t axes, hp_reduce_op op);
/* The layout of a tensor shaped `in_shape` that broadcasts into `out_shape` laid out as `out`:
 * trailing dims aligned, broadcast (size-1) dims unsplit, no partial. */
hp_layout hp__lay_broadcast_operand(const hp_layout *out, const hp_shape *out_shape, const hp_shape *in_shape);
/* The replicated layout of an ndim tensor. */
hp_layout hp__lay_replicated(int ndim);

#endif
