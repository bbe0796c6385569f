/*
 * hp/shard.h — HyperShard's SPMD partitioner: from a logical (single-device) graph and the layouts
 * of its leaves to the graph one rank runs.
 *
 * Every node of the logical graph is visited in program order. Its operator's sharding rule (one
 * per operator, in src/ops/) reads the layouts its inputs have and says which layouts it needs
 * and which its outputs get; where an input's layout differs from the need, a REDISTRIBUTE node
 * is inserted, planned by the redistribution planner (hp/redistribute.h) with the fewest bytes.
 * Conflicts are never errors: the cheaper side is redistributed (user annotations on leaves are
 * kept as given). Data parallelism, Megatron tensor parallelism, sequence parallelism, ZeRO and
 * FSDP all come out of this one mechanism from the layouts of parameters, inputs and optimizer
 * states (GSPMD, Xu et al. 2021; the HyperParallel paper's Layout(device_matrix, alias_name,
 * tensor_map)).
 *
 *     hp_layout *lay = calloc(hp_graph_n_tensors(g), sizeof *lay);   // ndim -1: replicated
 *     ... set lay[param] from the strategy ...
 *     hp_partition *p;
 *     HP_CHECK(hp_partition_new(g, mesh, lay, &loss, 1, &p));
 *     hp_graph *local = hp_partition_graph(p);      // compile with hp_program_new
 */
#ifndef HP_SHARD_H
#define HP_SHARD_H

#include "hp/ir.h"
#include "hp/mesh.h"
#include "hp/redistribute.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_partition hp_partition;

/* One inserted redistribution (for reports and benchmarks). */
typedef struct hp_collective_info {
    const char *tensor;  /* logical tensor name ("grad.blocks.0.mlp.fc.weight"), or "%<id>" */
    hp_redistribute_plan plan; /* steps, kinds, bytes per rank */
    int local_node;      /* index of the REDISTRIBUTE node in the per-rank graph */
    uint32_t flags;      /* HP_NODE_FLAG_* of the consumer: forward, backward or optimizer */
} hp_collective_info;

/*
 * Partitions `logical` for this process's rank in `mesh` (which must be attached to a
 * communicator before the per-rank program runs, not before this call). `leaf_layouts` has one
 * entry per logical tensor; entries for leaves are used (ndim -1 means replicated), others are
 * ignored. `resolve` lists logical tensors (e.g. the loss) that must also be available
 * replicated at the end of the step (hp_partition_resolved). The per-rank graph keeps the names
 * of leaves, so checkpoints and strategies find parameters by name.
 * Errors: an invalid leaf layout (naming the tensor), a rule that cannot be satisfied (naming the
 * node), allocation failures.
 */
hp_status hp_partition_new(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                           const hp_tid *resolve, int n_resolve, hp_partition **out);
/*
 * The same for mesh index `index`, with no communicator needed (planning tools such as `hp plan`
 * partition for a rank they are not). The per-rank graph can be inspected but runs only on an
 * attached mesh whose index is `index`.
 */
hp_status hp_partition_new_at(const hp_graph *logical, hp_mesh *mesh, int index, const hp_layout *leaf_layouts,
                              const hp_tid *resolve, int n_resolve, hp_partition **out);
void hp_partition_free(hp_partition *p);

/* The per-rank graph (owned by the partition). */
hp_graph *hp_partition_graph(const hp_partition *p);
/* The per-rank tensor holding logical tensor t in the layout its producer made (HP_TID_NONE if
 * the node producing it was not partitioned). */
hp_tid hp_partition_local(const hp_partition *p, hp_tid t);
/* The layout logical tensor t has in the per-rank graph. */
const hp_layout *hp_partition_layout(const hp_partition *p, hp_tid t);
/* Replicated per-rank copy of resolve[i]. */
hp_tid hp_partition_resolved(const hp_partition *p, int i);
/* Inserted redistributions in program order. */
int hp_partition_n_collectives(const hp_partition *p);
const hp_collective_info *hp_partition_collective(const hp_partition *p, int i);
/* Bytes this rank receives per step over all inserted redistributions. */
int64_t hp_partition_bytes(const hp_partition *p);

#ifdef __cplusplus
}
#endif
#endif
