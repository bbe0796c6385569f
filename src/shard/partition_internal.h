/* Internal: data the partitioner attaches to per-rank nodes. */
#ifndef HP_SHARD_PARTITION_INTERNAL_H
#define HP_SHARD_PARTITION_INTERNAL_H

#include "hp/mesh.h"
#include "hp/redistribute.h"
#include "hp/shard.h"
#include "ops/redistribute_op.h"

/* hp__redist_extra, the payload of a REDISTRIBUTE node: ops/redistribute_op.h. */

/*
 * Gradient bucketing (bucket.c) on per-rank graph g, after partitioning and before communication
 * scheduling: coalesces the gradients' collectives into buckets of at most bucket_size bytes per
 * rank (0: nothing to do). coll[0..*n_coll) are the partition's records: each bucket's record takes
 * its first member's place, the other members' records are dropped, every local_node follows the
 * node permutation; *bytes is adjusted to the bucket plans. *buckets (malloc'ed, *n_buckets of them;
 * NULL when none) receives the buckets in issue order. Errors: out of memory, graph errors.
 */
hp_status hp__bucket_gradients(hp_graph *g, hp_mesh *mesh, int64_t bucket_size, hp_collective_info *coll, int *n_coll,
                               int64_t *bytes, hp_bucket_info **buckets, int *n_buckets);

#endif
