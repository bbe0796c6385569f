/*
 * Internal: the definition of an operator (the operator table). Each operator has exactly one
 * hp_op_def, defined in its family's file in src/ops/ as `const hp_op_def hp__op_def_<lowercase
 * name>` next to its builder. The registry (src/ir/registry.c) collects them through HP_OP_LIST;
 * nothing else switches on op kind. Operator files include ops/op.h, which adds their helpers.
 */
#ifndef HP_IR_OP_H
#define HP_IR_OP_H

#include "hp/ir.h"
#include "hp/mesh.h"
#include "hp/ops.h"

/*
 * The cost of a layout change: bytes per rank to move a tensor of global `shape` and `dt` from
 * layout a to layout b on the context's mesh; 0 when a equals b, a large number (INT64_MAX / 4)
 * when there is no way. Operators and the layout layer never call the redistribution planner: the
 * partitioner (src/shard/partition.c) passes one that does, with the mesh as `user`.
 */
typedef int64_t (*hp_layout_cost_fn)(void *user, const hp_layout *a, const hp_layout *b, const hp_shape *shape,
                                     hp_dtype dt);

/* What a sharding rule knows besides the node: the logical graph, the mesh, this rank, and how
 * much a layout change costs. */
typedef struct hp_shard_ctx {
    const hp_graph *g;     /* the logical (single-device) graph: shapes are global */
    const hp_mesh *mesh;
    int index;             /* this rank's mesh index */
    const hp_layout *hint; /* per input: the layout its consumers prefer when a partial input must
                            * be resolved (e.g. the optimizer-state layout for a gradient), or a
                            * layout with ndim -1 when there is no preference */
    hp_layout_cost_fn cost; /* bytes of a layout change (the partitioner gives the redistribution
                             * planner's); NULL: every change costs 1 */
    void *cost_user;        /* passed to cost as `user` */
    hp_layout *publish;     /* per output, pre-filled with ndim -1: a rule may set publish[j] to the
                             * layout its consumers get output j in. The partitioner redistributes
                             * the kernel's output there right after the node (Ulysses' all-to-all
                             * from head-split back to sequence-split); the kernel's own output
                             * stays available to later readers in its layout, in every phase
                             * (the attention backward reads it without a second collective). */
    /* Weight-stationary contractions (chosen by the partitioner's search, src/shard/partition_search.c):
     * per logical tensor, nonzero: a contraction keeps this parameter in its own layout and
     * redistributes the other operand instead (Megatron-SP's gather of the activation rather than
     * of the weight). NULL: none. */
    const uint8_t *stationary;
    /* Recorded by contraction rules (NULL: not recorded): conflict[t] = 1 when parameter t could
     * have stayed in its own layout but the rule chose to redistribute it (the search's candidates). */
    uint8_t *conflict;
    /* Whether logical tensor t already has a per-rank copy in layout l that this node may read (a
     * redistribution an earlier consumer made in the node's phase, or in any phase with any_phase):
     * reading it costs nothing. NULL: never. */
    bool (*has_copy)(void *user, hp_tid t, const hp_layout *l, bool any_phase);
    void *copy_user;
    /* Per input, pre-filled false: a rule may set saved[k] so that input k's copy made in any phase
     * (the forward pass's redistribution) is reused, as hp_op_def.saved_inputs does per operator. */
    bool *saved;
    bool ring;              /* context parallelism by ring attention (strategy.context_parallel:
                             * ring): attention keeps the sequence split and expands into ring
                             * steps (hp_op_def.expand) instead of Ulysses' all-to-alls */
} hp_shard_ctx;

/*
 * What an expansion (hp_op_def.expand) works with: the rule's context and the per-rank graph with
 * the layouts the rule chose. Point-to-point nodes an expansion emits (SENDRECV; SEND, RECV) carry
 * attr i[3] = mesh axis + 1 and name their peers by their coordinates on that axis (i[0], and i[4]
 * for SENDRECV's source); the partitioner attaches their instruction (the axis communicator, on the
 * point-to-point queue, asynchronous).
 */
typedef struct hp_expand_ctx {
    const hp_shard_ctx *shard; /* the logical graph, mesh, this rank's index, options */
    hp_graph *g;               /* the per-rank graph: the expansion appends its nodes here */
    const hp_layout *in;       /* per input: the layout the rule required (the local inputs') */
    const hp_layout *out;      /* per output: the layout the rule gave it */
} hp_expand_ctx;

typedef struct hp_op_def {
    const char *name;
    int min_in, max_in; /* accepted input count (optional inputs may be HP_TID_NONE) */
    int n_out;          /* output count (0 for in-place updaters such as ADAMW) */

    /*
     * Shape inference: from the node's inputs and attrs, fill dtype and shape of each output.
     * On bad shapes return hp_error(HP_STATUS_SHAPE, ...) naming the shapes (the graph adds the
     * operator, scope and tensor names around the message).
     */
    hp_status (*infer)(const hp_graph *g, const hp_node *n, hp_dtype *out_dtype, hp_shape *out_shape);

    /*
     * Gradient rule: given dout[j] (the loss gradient w.r.t. output j, or HP_TID_NONE where none
     * flows), append nodes computing din[i] for each input i (leave HP_TID_NONE where the input is
     * not differentiable). need[i] is false where no gradient is wanted for input i: the rule
     * should skip building it (saves work). `node` is the node's index; re-fetch it with
     * hp_graph_node() after adding nodes (the node table may move). NULL: not differentiable.
     */
    hp_status (*grad)(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din);

    /* Cost: flops and bytes moved. NULL: zero flops, bytes = inputs + outputs. */
    void (*cost)(const hp_graph *g, const hp_node *n, hp_op_cost *c);

    /* Scratch bytes the kernel needs for this node (per call, all threads). NULL: none. */
    size_t (*workspace)(const hp_graph *g, const hp_node *n);

    /*
     * Sharding rule (HyperShard). in[i] is the layout input i has now. The rule fills req[i], the
     * layout input i must have (pre-filled with in[i]; the partitioner inserts the redistribution),
     * and out[j], each output's layout (pre-filled replicated). `local` holds the attrs of the
     * per-rank node (pre-filled with the logical node's; ATTENTION sets its local head count);
     * drop[i] = true omits input i on this rank (the bias of a row-parallel LINEAR is added by one
     * rank of the partial group only). Layout rules: a mesh axis splits at most one dim of a
     * tensor; an axis that is partial splits no dim. NULL: every input replicated, outputs
     * replicated (always correct, never fast). Errors: HP_STATUS_UNSUPPORTED naming the layouts.
     */
    hp_status (*shard)(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                       hp_layout *out, hp_attrs *local, bool *drop);

    /*
     * Optional expansion into a per-rank sub-graph (ring attention's steps). Called by the
     * partitioner after the sharding rule, with the local inputs `lin` in the rule's layouts and
     * the local attrs; sets *done = false to emit the one per-rank node as usual, or appends nodes
     * to c->g computing the outputs, stores their local tensors in lout[j] (shapes as the rule's
     * out layouts say) and sets *done = true. Everything an expansion emits must be the same
     * sequence of collectives and point-to-point transfers on every rank of a group (compute may
     * differ: a causal ring skips the blocks a rank does not see).
     */
    hp_status (*expand)(const hp_expand_ctx *c, const hp_node *n, const hp_tid *lin, const hp_attrs *local,
                        hp_tid *lout, bool *done);

    /* Bit i set: the kernel writes input i in place (ADAMW: param, m, v; ASSIGN: the target). */
    uint32_t inplace_inputs;

    /* Bit i set: input i is an activation the forward pass saved for this (backward) node; a copy
     * redistributed for the forward pass is reused instead of a second collective (ATTENTION_BACKWARD
     * reads the head-split q, k, v that Ulysses' forward all-to-all made, as DeepSpeed-Ulysses
     * saves them). Without it, copies are cached per phase (forward, backward, optimizer). */
    uint32_t saved_inputs;
} hp_op_def;

/* The definition of `op` (asserts op is valid). */
const hp_op_def *hp__op_def(hp_op op);

/* Declarations of every operator's definition, generated from HP_OP_LIST. */
#define HP_OP_DECL_(name, lower) extern const hp_op_def hp__op_def_##lower;
HP_OP_LIST(HP_OP_DECL_)
#undef HP_OP_DECL_

/* Short "[2, 3]" for messages, in a rotating static buffer (8 slots; not thread-safe). */
const char *hp__shape_s(const hp_shape *s);
/* Adds g1 + g2 where either may be HP_TID_NONE (gradient accumulation; autodiff.c). */
hp_tid hp__grad_add(hp_graph *g, hp_tid g1, hp_tid g2);
/* Default cost: bytes of all inputs read and all outputs written, `flops_per_out` * numel(out0). */
void hp__cost_default(const hp_graph *g, const hp_node *n, double flops_per_out, hp_op_cost *c);

#endif
