/*
 * HyperOffload's operators: OFFLOAD (fast tier -> slower tier), PREFETCH (slower -> fast),
 * OFFLOAD_WAIT (completion of one transfer) and ADAMW_STREAM (AdamW over states on slower tiers).
 *
 * The offload planner (src/offload/planner*.c) inserts them; model code never does. A transfer node's
 * `extra` is the planner's transfer record, which begins with its runtime instruction (hp/instr.h;
 * src/offload/exec.c runs the copies on the copy stream). They are asynchronous, so their cost on
 * the compute stream is zero: the planner accounts for their time on the copy stream itself.
 */
#include "ops/op.h"

static hp_status same_as_input(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_tensor *x = hp_graph_tensor(g, n->in[0]);
    int tier = (int)n->attr.i[0];
    if (tier != HP_TIER_HOST && tier != HP_TIER_DISK)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "slow tier is %d, must be host (%d) or disk (%d)", tier,
                        HP_TIER_HOST, HP_TIER_DISK);
    dt[0] = x->dtype;
    s[0] = x->shape;
    return HP_STATUS_OK;
}

static hp_status wait_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)g, (void)n, (void)dt, (void)s;
    return HP_STATUS_OK;
}

/* Transfers run on the copy stream: nothing on the compute stream. */
static void async_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    (void)g, (void)n;
    c->flops = c->bytes_read = c->bytes_written = 0.0;
}

const hp_op_def hp__op_def_offload = {
    .name = "offload", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_as_input, .cost = async_cost,
};

const hp_op_def hp__op_def_prefetch = {
    .name = "prefetch", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_as_input, .cost = async_cost,
};

/* Inputs: the tensors whose storage must stay allocated until the transfer completes (none for the
 * next step's wait for a deferred update; up to four held operands for its hold). */
const hp_op_def hp__op_def_offload_wait = {
    .name = "offload_wait", .min_in = 0, .max_in = 4, .n_out = 0, .infer = wait_infer, .cost = async_cost,
};

/* ADAMW_STREAM has ADAMW's inputs, attributes, shapes and cost; only where the data lives differs. */
static hp_status adamw_stream_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    return hp__op_def_adamw.infer(g, n, dt, s);
}

static void adamw_stream_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    hp__op_def_adamw.cost(g, n, c);
}

const hp_op_def hp__op_def_adamw_stream = {
    .name = "adamw_stream",
    .min_in = 6,
    .max_in = 7,
    .n_out = 0,
    .infer = adamw_stream_infer,
    .cost = adamw_stream_cost,
    .inplace_inputs = (1u << 0) | (1u << 2) | (1u << 3), /* param, m, v */
};
