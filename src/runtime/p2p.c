/* The point-to-point instructions of SEND, RECV and SENDRECV nodes (hp/runtime.h: hp_p2p_instr). */
#include "hp/runtime.h"

static size_t count_of(const hp_tensor *t) { return (size_t)hp_shape_numel(&t->shape); }

static hp_status p2p_execute(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
    (void)ctx;
    hp_p2p_instr *x = (hp_p2p_instr *)(void *)self;
    const hp_node *n = a->node;
    int peer = (int)n->attr.i[0], tag = (int)n->attr.i[1];
    if (n->op == HP_OP_SEND) {
        const hp_tensor *t = hp_graph_tensor(a->g, n->in[0]);
        if (x->req) HP_CHECK(hp_comm_wait(x->req)); /* a send of an earlier run not completed */
        x->req = NULL;
        return hp_comm_isend(x->comm, a->in[0], count_of(t), t->dtype, peer, tag, &x->req);
    }
    const hp_tensor *t = hp_graph_tensor(a->g, n->out[0]);
    if (n->op == HP_OP_RECV) return hp_comm_recv(x->comm, a->out[0], count_of(t), t->dtype, peer, tag);
    /* SENDRECV: the send non-blocking, the receive, then the send completed */
    const hp_tensor *s = hp_graph_tensor(a->g, n->in[0]);
    hp_comm_request *req = NULL;
    HP_CHECK(hp_comm_isend(x->comm, a->in[0], count_of(s), s->dtype, peer, tag, &req));
    hp_status st = hp_comm_recv(x->comm, a->out[0], count_of(t), t->dtype, (int)n->attr.i[4], tag);
    hp_status sw = hp_comm_wait(req);
    return st != HP_STATUS_OK ? st : sw;
}

static hp_status p2p_complete(hp_instr *self) {
    hp_p2p_instr *x = (hp_p2p_instr *)(void *)self;
    hp_comm_request *r = x->req;
    x->req = NULL;
    return hp_comm_wait(r); /* NULL: nothing in flight */
}

/* One message to or from the peer: the tensor sent or received. */
static int p2p_xfers(const hp_instr *self, hp_xfer *out, int max) {
    const hp_p2p_instr *x = (const hp_p2p_instr *)(const void *)self;
    if (max > 0) out[0] = (hp_xfer){.kind = HP_XFER_SEND_RECV, .group = 2, .bytes = x->msg_bytes};
    return 1;
}

hp_status hp_p2p_attach(hp_graph *g, int node, hp_comm *comm, bool async, hp_p2p_instr *x) {
    if (node < 0 || node >= hp_graph_n_nodes(g))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_p2p_attach: node %d out of range (graph has %d)", node,
                        hp_graph_n_nodes(g));
    hp_node *n = hp_graph_node(g, node);
    if (n->op != HP_OP_SEND && n->op != HP_OP_RECV && n->op != HP_OP_SENDRECV)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_p2p_attach: node %d is %s, not send, recv or sendrecv", node,
                        hp_op_name(n->op));
    if (n->op == HP_OP_SENDRECV && n->attr.i[4] >= hp_comm_size(comm))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_p2p_attach: source %lld of node %d is not in a communicator of %d",
                        (long long)n->attr.i[4], node, hp_comm_size(comm));
    if (!comm) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_p2p_attach: NULL communicator");
    if (n->attr.i[0] >= hp_comm_size(comm))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_p2p_attach: peer %lld of node %d is not in a communicator of %d",
                        (long long)n->attr.i[0], node, hp_comm_size(comm));
    *x = (hp_p2p_instr){
        .instr = {.queue = HP_QUEUE_P2P, .group = comm, .execute = p2p_execute,
                  .complete = n->op == HP_OP_SEND ? p2p_complete : NULL},
        .comm = comm,
    };
    x->instr.xfers = p2p_xfers;
    const hp_tensor *t = hp_graph_tensor(g, n->op == HP_OP_SEND ? n->in[0] : n->out[0]);
    x->msg_bytes = (double)count_of(t) * (double)hp_dtype_size(t->dtype);
    if (n->op != HP_OP_SEND) x->instr.bytes = x->msg_bytes;
    n->extra = x;
    n->flags |= HP_NODE_FLAG_INSTR | (async ? HP_NODE_FLAG_ASYNC : 0u);
    return HP_STATUS_OK;
}
