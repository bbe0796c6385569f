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
 *
 * Gradient bucketing (PyTorch DDP's Reducer, Li et al. VLDB 2020; Megatron-LM's distributed
 * optimizer buffers): after partitioning, the gradients' pending-sum collectives of one group (same
 * collective kind — all-reduce or reduce-scatter — on the same mesh axis, same dtype and partial
 * axes) are coalesced, in the order the backward pass produces the gradients, into buckets of at
 * most hp_partition_opts.bucket_size bytes per rank (the first bucket of each group at most
 * HP_BUCKET_FIRST_SIZE, as DDP's first bucket, so communication starts early). The rewrite uses
 * only IR operators: each gradient is RESHAPEd to a flat view (an (n, numel/n) view for a
 * reduce-scatter over n ranks, so each rank's shard is a contiguous column block), CONCAT builds
 * the bucket (a tree of CONCATs of at most HP_MAX_NODE_INPUTS inputs, each issued as soon as its
 * last input exists), one REDISTRIBUTE reduces the bucket, and SLICE + RESHAPE give each gradient
 * back where its own collective used to be. The bucket's REDISTRIBUTE is issued right after its
 * last gradient's producer (and the CONCATs) and waited for where the first gradient is read.
 * Membership depends only on the logical shapes and layouts, never on the rank. Gradients whose
 * shards are uneven (their local shape differs between ranks, or, for a reduce-scatter, their
 * local dim 0 does not divide evenly or the scatter is not on dim 0) and plans with more than one
 * step (HSDP's reduce-scatter + all-reduce) keep their own collective. No padding: the bytes moved
 * are the sum of the members' bytes.
 */
#ifndef HP_SHARD_H
#define HP_SHARD_H

#include "hp/config.h"
#include "hp/ir.h"
#include "hp/mesh.h"
#include "hp/redistribute.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_partition hp_partition;

/* Default bucket size in bytes per rank: 25 MiB, PyTorch DDP's bucket_cap_mb. */
#define HP_BUCKET_SIZE_DEFAULT ((int64_t)25 << 20)
/* The first bucket of each group is at most this many bytes (DDP's first bucket): the first
 * collective of the backward pass starts after a few gradients, not after 25 MiB of them. */
#define HP_BUCKET_FIRST_SIZE ((int64_t)1 << 20)

/* Partitioner options; start from HP_PARTITION_OPTS_DEFAULT so new fields keep their defaults. */
typedef struct hp_partition_opts {
    /* Mesh index to partition for; -1: this process's index (hp_mesh_my_index, mesh attached). */
    int index;
    /* Most bytes per rank of gradients coalesced into one collective; 0 turns bucketing off. */
    int64_t bucket_size;
    /* Weight-stationary search (src/shard/partition_search.c): where a contraction rule gathered a
     * split parameter although it could have kept it in place and redistributed the other operand
     * (Megatron-SP's gather of the activation), try keeping each group of such parameters in place
     * and keep the choice when the step's planned bytes per rank drop. One extra partition when no
     * rule had that choice; one per group otherwise. false: the rules' local choices only. */
    bool search;
    /* Attention under a sequence split (strategy.context_parallel): HP_CP_ULYSSES (default) moves
     * the sequence axes to the heads by all-to-all; HP_CP_RING keeps the sequence split on its
     * (single) mesh axis and expands attention and its backward into ring steps (K/V passed point
     * to point, src/ops/attention_ring.c). A sequence split over two axes takes Ulysses either way. */
    hp_cp_algo context_parallel;
    /* The layouts the `resolve` tensors are resolved to, one per entry (n_resolve of them; the
     * caller owns the array, read during the call only). NULL, or an entry with ndim -1: that
     * tensor replicated (the default). A split layout (e.g. a pipeline stage's output with its rows
     * split over the row axes, handed to the next stage block by block) avoids the all-gather a
     * replicated copy costs. Each entry must be valid for the tensor's shape on the mesh
     * (hp_layout_validate; its dims the tensor's); errors name the entry and the tensor. */
    const hp_layout *resolve_layouts;
} hp_partition_opts;

#define HP_PARTITION_OPTS_DEFAULT \
    ((hp_partition_opts){.index = -1, .bucket_size = HP_BUCKET_SIZE_DEFAULT, .search = true})

/* One inserted redistribution (for reports and benchmarks). */
typedef struct hp_collective_info {
    const char *tensor;  /* logical tensor name ("grad.blocks.0.mlp.fc.weight"), or "%<id>" */
    hp_redistribute_plan plan; /* steps, kinds, bytes per rank */
    int local_node;      /* index of the REDISTRIBUTE node in the per-rank graph */
    uint32_t flags;      /* HP_NODE_FLAG_* of the consumer: forward, backward or optimizer */
} hp_collective_info;

/* One gradient bucket: several gradients' collectives coalesced into one (see the top of this file). */
typedef struct hp_bucket_info {
    hp_redist_kind kind;  /* HP_REDIST_ALL_REDUCE or HP_REDIST_REDUCE_SCATTER */
    int axis;             /* the mesh axis of the collective */
    hp_dtype dtype;
    int n_tensors;        /* gradients in the bucket (>= 2) */
    const hp_tid *tensors; /* the per-rank gradient tensors, in bucket (production) order; owned by the partition */
    int64_t bytes;        /* bytes of the gradients' local blocks packed into the bucket (per rank, before the collective) */
    int local_node;       /* the bucket's REDISTRIBUTE node in the per-rank graph */
    int collective;       /* its record: hp_partition_collective(p, collective) */
} hp_bucket_info;

/*
 * Partitions `logical` for this process's rank in `mesh` (which must be attached to a
 * communicator before the per-rank program runs, not before this call). `leaf_layouts` has one
 * entry per logical tensor; entries for leaves are used (ndim -1 means replicated), others are
 * ignored. `resolve` lists logical tensors (e.g. the loss) that must also be available
 * replicated (or, hp_partition_new_opts, in a given layout) at the end of the step
 * (hp_partition_resolved). The per-rank graph keeps the names
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
/*
 * hp_partition_new / hp_partition_new_at with options (NULL: HP_PARTITION_OPTS_DEFAULT): the mesh
 * index (opts->index, -1 for this process's), the gradient bucket size (opts->bucket_size bytes
 * per rank, 0: one collective per gradient) and the layouts to resolve to
 * (opts->resolve_layouts). hp_partition_new and hp_partition_new_at bucket with
 * HP_BUCKET_SIZE_DEFAULT. Errors: as hp_partition_new_at; a negative bucket_size
 * (HP_STATUS_INVALID_ARGUMENT naming it); a resolve layout of the wrong rank or invalid for the
 * tensor's shape (HP_STATUS_INVALID_ARGUMENT naming the entry and the tensor).
 */
hp_status hp_partition_new_opts(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                                const hp_tid *resolve, int n_resolve, const hp_partition_opts *opts,
                                hp_partition **out);
void hp_partition_free(hp_partition *p);

/* The per-rank graph (owned by the partition). */
hp_graph *hp_partition_graph(const hp_partition *p);
/* The per-rank tensor holding logical tensor t in the layout its producer made (HP_TID_NONE if
 * the node producing it was not partitioned). */
hp_tid hp_partition_local(const hp_partition *p, hp_tid t);
/* The layout logical tensor t has in the per-rank graph. */
const hp_layout *hp_partition_layout(const hp_partition *p, hp_tid t);
/* Per-rank copy of resolve[i]: replicated, or in hp_partition_opts.resolve_layouts[i] when given. */
hp_tid hp_partition_resolved(const hp_partition *p, int i);
/* Inserted redistributions in program order. */
int hp_partition_n_collectives(const hp_partition *p);
const hp_collective_info *hp_partition_collective(const hp_partition *p, int i);
/* Bytes this rank receives per step over all inserted redistributions. */
int64_t hp_partition_bytes(const hp_partition *p);
/* Bytes this rank receives point to point per run (ring attention's K/V blocks and dK/dV
 * accumulators; not in hp_partition_bytes). */
int64_t hp_partition_p2p_bytes(const hp_partition *p);
/* Gradient buckets, in issue order (0 when bucketing is off or nothing could be coalesced). A
 * bucket is one collective record; its members have none of their own. */
int hp_partition_n_buckets(const hp_partition *p);
/* Parameters the weight-stationary search kept in their own layouts (hp_partition_opts.search), and
 * whether logical tensor t is one of them. */
int hp_partition_n_stationary(const hp_partition *p);
bool hp_partition_is_stationary(const hp_partition *p, hp_tid t);
const hp_bucket_info *hp_partition_bucket(const hp_partition *p, int i);

#ifdef __cplusplus
}
#endif
#endif
