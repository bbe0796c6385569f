/*
 * The runtime instruction of the SENDRECV (and SEND, RECV) nodes an expansion emits (ring
 * attention's K/V and dK/dV passing, src/ops/attention_ring.c): point-to-point over the
 * communicator of one mesh axis, asynchronous on the runtime's point-to-point queue (hp/instr.h).
 * A SENDRECV starts its send non-blocking, receives, and completes the send, all on the queue; the
 * compute thread waits for it where its output is first read (the next ring step), so the transfer
 * runs behind the step's block compute and the sent block lives only until then. A lone SEND is
 * non-blocking, completed at the end of the run. Every rank of the ring issues the same transfers
 * in the same order (the expansion's contract), so matching by (peer, tag) in issue order holds.
 */
#include "shard/partition_internal.h"

#include "hp/comm.h"
#include "hp/runtime.h"

typedef struct ring_p2p {
    hp_instr instr;
    hp_mesh *mesh;
    int axis;
    hp_comm_request *req; /* a send in flight, or NULL */
    double msg_bytes;
} ring_p2p;

static hp_status ring_prepare(hp_instr *self) {
    ring_p2p *x = (ring_p2p *)(void *)self;
    hp_comm *c;
    return hp_mesh_axes_comm(x->mesh, 1, &x->axis, &c);
}

static hp_status ring_execute(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
    (void)ctx;
    ring_p2p *x = (ring_p2p *)(void *)self;
    const hp_node *n = a->node;
    int peer = (int)n->attr.i[0], tag = (int)n->attr.i[1];
    hp_comm *c;
    HP_CHECK(hp_mesh_axes_comm(x->mesh, 1, &x->axis, &c));
    if (n->op == HP_OP_SEND) {
        const hp_tensor *t = hp_graph_tensor(a->g, n->in[0]);
        if (x->req) HP_CHECK(hp_comm_wait(x->req)); /* a send of an earlier run not completed */
        x->req = NULL;
        return hp_comm_isend(c, a->in[0], (size_t)hp_shape_numel(&t->shape), t->dtype, peer, tag, &x->req);
    }
    const hp_tensor *t = hp_graph_tensor(a->g, n->out[0]);
    if (n->op == HP_OP_RECV) return hp_comm_recv(c, a->out[0], (size_t)hp_shape_numel(&t->shape), t->dtype, peer, tag);
    const hp_tensor *x0 = hp_graph_tensor(a->g, n->in[0]);
    hp_comm_request *req = NULL;
    HP_CHECK(hp_comm_isend(c, a->in[0], (size_t)hp_shape_numel(&x0->shape), x0->dtype, peer, tag, &req));
    hp_status st = hp_comm_recv(c, a->out[0], (size_t)hp_shape_numel(&t->shape), t->dtype, (int)n->attr.i[4], tag);
    hp_status sw = hp_comm_wait(req);
    return st != HP_STATUS_OK ? st : sw;
}

static hp_status ring_complete(hp_instr *self) {
    ring_p2p *x = (ring_p2p *)(void *)self;
    hp_comm_request *r = x->req;
    x->req = NULL;
    return hp_comm_wait(r);
}

static int ring_xfers(const hp_instr *self, hp_xfer *out, int max) {
    const ring_p2p *x = (const ring_p2p *)(const void *)self;
    if (max > 0) out[0] = (hp_xfer){.kind = HP_XFER_SEND_RECV, .group = 2, .bytes = x->msg_bytes};
    return 1;
}

hp_status hp__p2p_attach_range(hp_graph *g, hp_mesh *mesh, int first, int last, int64_t *bytes) {
    for (int i = first; i < last; i++) {
        hp_node *n = hp_graph_node(g, i);
        bool sr = n->op == HP_OP_SENDRECV;
        if ((n->op != HP_OP_SEND && n->op != HP_OP_RECV && !sr) || n->attr.i[3] <= 0) continue;
        int axis = (int)n->attr.i[3] - 1;
        if (axis >= hp_mesh_naxes(mesh) || n->attr.i[0] < 0 || n->attr.i[0] >= hp_mesh_dim(mesh, axis) ||
            (sr && (n->attr.i[4] < 0 || n->attr.i[4] >= hp_mesh_dim(mesh, axis))))
            return hp_error(HP_STATUS_INTERNAL, "ring p2p: node %d names axis %d peer %lld outside the mesh", i, axis,
                            (long long)n->attr.i[0]);
        ring_p2p *x = hp_arena_alloc(hp_graph_arena(g), sizeof *x, 16);
        if (!x) return hp_error(HP_STATUS_OUT_OF_MEMORY, "ring p2p: out of memory");
        const hp_tensor *t = hp_graph_tensor(g, n->op == HP_OP_SEND ? n->in[0] : n->out[0]);
        *x = (ring_p2p){
            .instr = {.queue = HP_QUEUE_P2P, .group = mesh, .execute = ring_execute, .prepare = ring_prepare,
                      .complete = n->op == HP_OP_SEND ? ring_complete : NULL, .xfers = ring_xfers,
                      .label = sr ? "ring_sendrecv" : n->op == HP_OP_SEND ? "ring_send" : "ring_recv", .group_name = hp_mesh_axis_name(mesh, axis)},
            .mesh = mesh,
            .axis = axis,
            .msg_bytes = (double)hp_shape_numel(&t->shape) * (double)hp_dtype_size(t->dtype),
        };
        if (n->op != HP_OP_SEND) {
            x->instr.bytes = x->msg_bytes;
            *bytes += (int64_t)x->msg_bytes;
        }
        n->extra = x;
        n->flags |= HP_NODE_FLAG_INSTR | HP_NODE_FLAG_ASYNC;
    }
    return HP_STATUS_OK;
}
