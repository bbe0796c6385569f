/*
 * SEND and RECV: point-to-point transfers between ranks (pipeline stages); SENDRECV: one exchange
 * (send to one peer, receive from another: MPI_Sendrecv), ring attention's K/V passing. The runtime issues them
 * on its point-to-point queue (hp/runtime.h, hp_p2p_instr); the operators here only define shapes
 * and cost. No gradient rule (a pipeline schedule places the reverse transfer of the gradient
 * itself); no sharding rule (replicated: a stage's tensors move whole).
 */
#include "ops/op.h"

int hp_send(hp_graph *g, hp_tid x, int peer, int tag) {
    if (peer < 0 || tag < 0) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "send: peer %d and tag %d must be >= 0", peer, tag);
        return -1;
    }
    hp_attrs at = {0};
    at.i[0] = peer;
    at.i[1] = tag;
    int before = hp_graph_n_nodes(g);
    (void)hp_graph_add_node(g, HP_OP_SEND, &x, 1, &at);
    return hp_graph_n_nodes(g) > before ? before : -1;
}

hp_tid hp_recv(hp_graph *g, hp_dtype dtype, hp_shape shape, int peer, int tag) {
    if (peer < 0 || tag < 0) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "recv: peer %d and tag %d must be >= 0", peer, tag);
        return HP_TID_NONE;
    }
    hp_attrs at = {0};
    at.i[0] = peer;
    at.i[1] = tag;
    at.i[2] = dtype;
    at.shape = shape;
    return hp_graph_add_node(g, HP_OP_RECV, NULL, 0, &at);
}

hp_tid hp_sendrecv(hp_graph *g, hp_tid x, int send_peer, int recv_peer, int tag, hp_shape recv_shape) {
    if (send_peer < 0 || recv_peer < 0 || tag < 0) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "sendrecv: peers %d, %d and tag %d must be >= 0", send_peer,
                      recv_peer, tag);
        return HP_TID_NONE;
    }
    hp_attrs at = {0};
    at.i[0] = send_peer;
    at.i[1] = tag;
    at.i[4] = recv_peer;
    at.shape = recv_shape;
    return hp_graph_add_node(g, HP_OP_SENDRECV, &x, 1, &at);
}

static hp_status sendrecv_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    if (n->attr.i[0] < 0 || n->attr.i[1] < 0 || n->attr.i[4] < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "sendrecv: peers %lld, %lld and tag %lld must be >= 0",
                        (long long)n->attr.i[0], (long long)n->attr.i[4], (long long)n->attr.i[1]);
    for (int d = 0; d < n->attr.shape.ndim; d++)
        if (n->attr.shape.dim[d] < 0) return hp_error(HP_STATUS_SHAPE, "sendrecv shape %s", hp__shape_s(&n->attr.shape));
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = n->attr.shape;
    return HP_STATUS_OK;
}

static hp_status send_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)g, (void)dt, (void)s;
    if (n->attr.i[0] < 0 || n->attr.i[1] < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "send: peer %lld and tag %lld must be >= 0",
                        (long long)n->attr.i[0], (long long)n->attr.i[1]);
    return HP_STATUS_OK;
}

static hp_status recv_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)g;
    if (n->attr.i[0] < 0 || n->attr.i[1] < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "recv: peer %lld and tag %lld must be >= 0",
                        (long long)n->attr.i[0], (long long)n->attr.i[1]);
    if (n->attr.i[2] < 0 || n->attr.i[2] >= HP_DTYPE_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "recv: dtype %lld is not a dtype", (long long)n->attr.i[2]);
    for (int d = 0; d < n->attr.shape.ndim; d++)
        if (n->attr.shape.dim[d] < 0) return hp_error(HP_STATUS_SHAPE, "recv shape %s", hp__shape_s(&n->attr.shape));
    dt[0] = (hp_dtype)n->attr.i[2];
    s[0] = n->attr.shape;
    return HP_STATUS_OK;
}

/* The bytes cross the network, not the compute stream's memory: counted as read by the receiver. */
static void send_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    (void)g, (void)n;
    c->flops = c->bytes_read = c->bytes_written = 0.0;
}

static void recv_cost(const hp_graph *g, const hp_node *n, hp_op_cost *c) {
    const hp_tensor *y = hp_graph_tensor(g, n->out[0]);
    c->flops = 0.0;
    c->bytes_read = (double)hp_shape_numel(&y->shape) * (double)hp_dtype_size(y->dtype);
    c->bytes_written = 0.0;
}

const hp_op_def hp__op_def_send = {
    .name = "send", .min_in = 1, .max_in = 1, .n_out = 0, .infer = send_infer, .cost = send_cost,
};

const hp_op_def hp__op_def_recv = {
    .name = "recv", .min_in = 0, .max_in = 0, .n_out = 1, .infer = recv_infer, .cost = recv_cost,
};

const hp_op_def hp__op_def_sendrecv = {
    .name = "sendrecv", .min_in = 1, .max_in = 1, .n_out = 1, .infer = sendrecv_infer, .cost = recv_cost,
};
