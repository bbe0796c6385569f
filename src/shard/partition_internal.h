/* Internal: data the partitioner attaches to per-rank nodes. */
#ifndef HP_SHARD_PARTITION_INTERNAL_H
#define HP_SHARD_PARTITION_INTERNAL_H

#include "hp/instr.h"
#include "hp/mesh.h"
#include "hp/redistribute.h"
#include "hp/shard.h"

/* node->extra of a REDISTRIBUTE node (in the per-rank graph's arena): its runtime instruction
 * first (a collective on the queue of the mesh axes the plan uses), then the plan and mesh. */
typedef struct hp__redist_extra {
    hp_instr instr;
    hp_redistribute_plan plan;
    hp_mesh *mesh;
    char label[64];      /* instr.label: the plan's collectives, "all_reduce" */
    char group_name[48]; /* instr.group_name: the mesh axes they use, "dp" */
    int64_t n_groups;    /* a ragged plan: the length of its counts (the node's input 1) */
} hp__redist_extra;

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

/*
 * The search's cost oracle (partition.c): partitions `logical` at mesh index 0 (so that every rank
 * reaches the same choice) with weight-stationary set `stationary` (NULL: none), recording in
 * `conflict` (NULL: not) the parameters a contraction could have kept in place, and returns the
 * bytes per rank per step it plans (collectives and ring attention's point-to-point; `ring`:
 * hp_partition_opts.context_parallel is HP_CP_RING; `resolve_layouts`: hp_partition_opts'). Errors: the partitioner's.
 */
hp_status hp__partition_oracle(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                               const hp_tid *resolve, int n_resolve, const hp_layout *resolve_layouts, bool ring,
                               const uint8_t *stationary, uint8_t *conflict, int64_t *bytes);

/*
 * The weight-stationary search (partition_search.c): *stationary (malloc'ed, one byte per logical
 * tensor; NULL when the search keeps none) and *n the parameters it keeps in their own layouts.
 * Errors: out of memory, the baseline partition's errors.
 */
hp_status hp__partition_search(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                               const hp_tid *resolve, int n_resolve, const hp_layout *resolve_layouts, bool ring,
                               uint8_t **stationary, int *n);

/*
 * Attaches the runtime instruction of each SENDRECV, SEND and RECV node in [first, last) of
 * per-rank graph g that an expansion emitted (attr i[3] = mesh axis + 1, peers i[0] (and i[4]) =
 * coordinates on that axis, ring_p2p.c): asynchronous, on the point-to-point queue, over the axis's communicator (created
 * in the instruction's prepare). Adds the bytes each SENDRECV or RECV brings to *bytes. Errors: out of memory,
 * an axis or peer outside the mesh.
 */
hp_status hp__p2p_attach_range(hp_graph *g, hp_mesh *mesh, int first, int last, int64_t *bytes);

/* Fills x->instr from x->plan and x->mesh (redist_instr.c). */
void hp__redist_instr_init(hp__redist_extra *x);

#endif
