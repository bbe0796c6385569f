/* The operator registry, generated from HP_OP_LIST, and the ir-level helpers declared in ir/op.h. */
#include "ir/op.h"
#include "hp/instr.h"

#include <stdio.h>
#include <string.h>

static const hp_op_def *const g_defs[HP_OP_COUNT] = {
#define HP_OP_ENTRY_(name, lower) [HP_OP_##name] = &hp__op_def_##lower,
    HP_OP_LIST(HP_OP_ENTRY_)
#undef HP_OP_ENTRY_
};

const hp_op_def *hp__op_def(hp_op op) {
    HP_ASSERT(op >= 0 && op < HP_OP_COUNT);
    return g_defs[op];
}

const char *hp_op_name(hp_op op) {
    if ((int)op < 0 || op >= HP_OP_COUNT) return "?";
    return g_defs[op]->name;
}

static hp_status nop_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)g, (void)n, (void)dt, (void)s;
    return HP_STATUS_OK;
}

const hp_op_def hp__op_def_nop = {
    .name = "nop", .min_in = 0, .max_in = HP_MAX_NODE_INPUTS, .n_out = 0, .infer = nop_infer,
};

const char *hp__shape_s(const hp_shape *s) {
    static char bufs[8][96];
    static int next;
    char *b = bufs[next++ & 7];
    return hp_shape_str(s, b, sizeof bufs[0]);
}

static double tensor_bytes(const hp_graph *g, hp_tid t) {
    const hp_tensor *x = hp_graph_tensor(g, t);
    return (double)hp_shape_numel(&x->shape) * (double)hp_dtype_size(x->dtype);
}

void hp__cost_default(const hp_graph *g, const hp_node *n, double flops_per_out, hp_op_cost *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] != HP_TID_NONE) c->bytes_read += tensor_bytes(g, n->in[i]);
    for (int j = 0; j < n->n_out; j++) c->bytes_written += tensor_bytes(g, n->out[j]);
    if (n->n_out > 0)
        c->flops = flops_per_out * (double)hp_shape_numel(&hp_graph_tensor(g, n->out[0])->shape);
}

hp_op_cost hp_node_cost(const hp_graph *g, int i) {
    const hp_node *n = hp_graph_node(g, i);
    hp_op_cost c;
    memset(&c, 0, sizeof c); /* rules that set only some fields leave the rest zero */
    const hp_op_def *d = hp__op_def(n->op);
    if (d->cost)
        d->cost(g, n, &c);
    else
        hp__cost_default(g, n, 0.0, &c);
    return c;
}

const char *hp_xfer_kind_name(hp_xfer_kind k) {
    static const char *names[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"};
    return (int)k >= 0 && k < HP_XFER_KIND_COUNT ? names[k] : "?";
}

size_t hp_op_workspace(const hp_graph *g, const hp_node *n) {
    const hp_op_def *d = hp__op_def(n->op);
    return d->workspace ? d->workspace(g, n) : 0;
}
