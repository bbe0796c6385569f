/*
 * Internal: what operator files (src/ops/, one per family) share. The operator table itself (hp_op_def,
 * hp_shard_ctx, the registry) is ir-level, in ir/op.h; the pure layout algebra the sharding rules
 * use is in layout/layout_algebra.h. Both are included here, so an operator file includes only this.
 */
#ifndef HP_OPS_OP_H
#define HP_OPS_OP_H

#include "ir/op.h"
#include "layout/layout_algebra.h"

/* ---- helpers shared by operator files ---- */

/* Shape of tensor t. */
static inline const hp_shape *hp__shp(const hp_graph *g, hp_tid t) { return &hp_graph_tensor(g, t)->shape; }
/* numpy broadcast of a and b into out; HP_STATUS_SHAPE naming both shapes when incompatible. */
hp_status hp__broadcast_shape(const hp_shape *a, const hp_shape *b, hp_shape *out);
/* Normalizes a possibly negative axis; returns -1 when out of range. */
int hp__axis(int axis, int ndim);
/* ---- helpers for sharding rules ---- */

/* The pure layout algebra (hp__lay_dim_axes, hp__lay_drop_axes, hp__lay_broadcast_operand, ...):
 * layout/layout_algebra.h, included above. The helpers below read the sharding context (shard_ctx.c). */

/* Bytes per rank to redistribute a tensor (global shape, dtype) from `a` to `b`: 0 when equal,
 * else c->cost's answer (a large number when the planner finds no way), 1 when c->cost is NULL. */
int64_t hp__lay_cost(const hp_shard_ctx *c, const hp_layout *a, const hp_layout *b, const hp_shape *shape,
                     hp_dtype dt);
/* hp__lay_cost of bringing input k of node n from layout `from` to `to`, or 0 when the partitioner
 * already holds a copy of it in `to` that the node may read (any_phase: a saved input). */
int64_t hp__lay_cost_in(const hp_shard_ctx *c, const hp_node *n, int k, const hp_layout *from, const hp_layout *to,
                        bool any_phase);
/* A layout whose partial axes are resolved the cheap way: hint if given (and compatible), else
 * each partial axis becomes a split of the largest dim it divides evenly and that is unsplit,
 * else replicated. */
hp_layout hp__lay_resolve(const hp_shard_ctx *c, const hp_layout *in, const hp_layout *hint, const hp_shape *shape);

#endif
