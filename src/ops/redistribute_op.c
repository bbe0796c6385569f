/*
 * REDISTRIBUTE and ASSIGN: the two operators only per-rank graphs contain. The partitioner
 * inserts REDISTRIBUTE where a consumer needs another layout than its producer made (its runtime
 * instruction, hp/instr.h, with the plan and mesh rides in node->extra), and ASSIGN to write an
 * in-place update made on a redistributed copy back into the original tensor (a logical graph may
 * hold ASSIGN too: a pipeline stage's gradient accumulation acc <- acc + grad). A REDISTRIBUTE to or
 * from a ragged split (MoE expert parallelism) has a second input: the counts its exchange reads.
 */
#include "ops/op.h"
#include "hp/instr.h"

static hp_status redistribute_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = n->attr.shape; /* the local shape under the destination layout */
    return HP_STATUS_OK;
}

static void redistribute_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__cost_default(g, n, 0.0, c);
    const hp_instr *x = hp_node_instr(n);
    if (x) c->bytes_read += x->bytes; /* bytes received over the network */
}

static hp_status assign_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)dt, (void)s;
    const hp_tensor *a = hp_graph_tensor(g, n->in[0]), *b = hp_graph_tensor(g, n->in[1]);
    if (a->dtype != b->dtype || !hp_shape_equal(&a->shape, &b->shape))
        return hp_error(HP_STATUS_SHAPE, "assign of %s %s into %s %s", hp_dtype_name(b->dtype), hp__shape_s(&b->shape),
                        hp_dtype_name(a->dtype), hp__shape_s(&a->shape));
    return HP_STATUS_OK;
}

/* ASSIGN dst <- src: the destination stays in its own layout (it is written in place) and the
 * source is brought to it. Without this rule the default (everything replicated) gathered an
 * FSDP-sharded accumulator and its addend whole, added them on every rank and sliced the sum back,
 * two all-gathers of each parameter's size per micro-batch for a local add. */
static hp_status assign_shard(const hp_shard_ctx *c, const hp_node *n, const hp_layout *in, hp_layout *req,
                              hp_layout *out, hp_attrs *local, bool *drop) {
    (void)c, (void)n, (void)out, (void)local, (void)drop;
    req[0] = in[0];
    req[1] = in[0];
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_redistribute = {
    .name = "redistribute", .min_in = 1, .max_in = 2, .n_out = 1, .infer = redistribute_infer,
    .cost = redistribute_cost,
};

const hp_op_def hp__op_def_assign = {
    .name = "assign", .min_in = 2, .max_in = 2, .n_out = 0, .infer = assign_infer, .inplace_inputs = 1u,
    .shard = assign_shard,
};
