/*
 * Internal: the definition of an operator. Each operator has exactly one hp_op_def, defined in its
 * family's file in src/ops/ as `const hp_op_def hp__op_def_<lowercase name>` next to its builder.
 * The registry (registry.c) collects them through HP_OP_LIST; nothing else switches on op kind.
 */
#ifndef HP_OPS_OP_H
#define HP_OPS_OP_H

#include "hp/ir.h"
#include "hp/ops.h"

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
} hp_op_def;

/* The definition of `op` (asserts op is valid). */
const hp_op_def *hp__op_def(hp_op op);

/* Declarations of every operator's definition, generated from HP_OP_LIST. */
#define HP_OP_DECL_(name, lower) extern const hp_op_def hp__op_def_##lower;
HP_OP_LIST(HP_OP_DECL_)
#undef HP_OP_DECL_

/* ---- helpers shared by operator files ---- */

/* Short "[2, 3]" for messages, in a rotating static buffer (8 slots; not thread-safe). */
const char *hp__shape_s(const hp_shape *s);
/* Shape of tensor t. */
static inline const hp_shape *hp__shp(const hp_graph *g, hp_tid t) { return &hp_graph_tensor(g, t)->shape; }
/* numpy broadcast of a and b into out; HP_STATUS_SHAPE naming both shapes when incompatible. */
hp_status hp__broadcast_shape(const hp_shape *a, const hp_shape *b, hp_shape *out);
/* Normalizes a possibly negative axis; returns -1 when out of range. */
int hp__axis(int axis, int ndim);
/* Adds g1 + g2 where either may be HP_TID_NONE (gradient accumulation). */
hp_tid hp__grad_add(hp_graph *g, hp_tid g1, hp_tid g2);
/* Default cost: bytes of all inputs read and all outputs written, `flops_per_out` * numel(out0). */
void hp__cost_default(const hp_graph *g, const hp_node *n, double flops_per_out, hp_op_cost *c);

#endif
