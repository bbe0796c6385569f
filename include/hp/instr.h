/*
 * hp/instr.h — runtime instructions: what a pass attaches to a transfer node so that the runtime and
 * the backends run it without knowing the pass (IR level: it needs only hp/ir.h).
 *
 * Collectives (HyperShard's REDISTRIBUTE), point-to-point transfers (SEND, RECV) and tier copies
 * (HyperOffload's PREFETCH, OFFLOAD, OFFLOAD_WAIT) are instructions: the pass's record for the node
 * begins with an hp_instr, node->extra points at it and the node carries HP_NODE_FLAG_INSTR. The
 * runtime issues asynchronous ones (HP_NODE_FLAG_ASYNC) on the ordered queue `queue` names and
 * calls `execute` there; a backend kernel for such an operator only calls `execute`.
 *
 *     typedef struct my_allreduce { hp_instr instr; hp_comm *comm; } my_allreduce;
 *     static hp_status run(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
 *         my_allreduce *x = (my_allreduce *)self;
 *         return hp_comm_all_reduce(x->comm, a->in[0], a->out[0], n, HP_DTYPE_F32, HP_REDUCE_SUM);
 *     }
 *     x->instr = (hp_instr){.queue = HP_QUEUE_COLLECTIVE, .group = x->comm, .execute = run};
 *     node->extra = x;
 *     node->flags |= HP_NODE_FLAG_INSTR | HP_NODE_FLAG_ASYNC;
 */
#ifndef HP_INSTR_H
#define HP_INSTR_H

#include "hp/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Storage of one node, bound by the runtime: backend pointers to the data of each input (NULL for
 * an absent optional input) and output, and the node's scratch (sized by the operator's workspace
 * rule, 64-byte aligned). Nodes flagged HP_NODE_FLAG_INPLACE write through their input pointers.
 */
typedef struct hp_node_args {
    const hp_graph *g;
    const hp_node *node;
    void *in[HP_MAX_NODE_INPUTS];
    void *out[HP_MAX_NODE_OUTPUTS];
    void *workspace;
    size_t workspace_bytes;
} hp_node_args;

/*
 * Where the runtime issues an instruction. Each queue is ordered: its instructions start in program
 * order, one at a time, on its own worker (hp/worker.h). The invariant that keeps ranks from
 * deadlocking is per queue, not global:
 *   HP_QUEUE_COLLECTIVE  one queue per communicator group (instructions whose (group, axes) overlap
 *                        share a queue): every member of the group issues the group's collectives in
 *                        the same order, because the program order of those nodes is the same on
 *                        every rank. Two groups' queues are independent, so the relative order of
 *                        their collectives may differ between ranks.
 *   HP_QUEUE_P2P         one queue for point-to-point transfers: sends and receives are matched by
 *                        (peer, tag) in issue order (MPI's non-overtaking rule); a send never waits
 *                        behind a collective.
 *   HP_QUEUE_COPY        tier copies, issued in program order on the compute stream onto the pass's
 *                        copy streams (which are asynchronous by themselves).
 *   HP_QUEUE_COMPUTE     run in program order on the compute stream.
 */
typedef enum hp_queue_kind {
    HP_QUEUE_COMPUTE = 0,
    HP_QUEUE_COLLECTIVE,
    HP_QUEUE_P2P,
    HP_QUEUE_COPY,
    HP_QUEUE_KIND_COUNT
} hp_queue_kind;

/*
 * The compute-side services the backend lends an instruction: a chunk update run by every thread of
 * the compute team (HyperOffload's streamed AdamW), and the same update for one thread elsewhere.
 */
typedef struct hp_exec_ctx {
    /* Runs the update on one chunk (bufs: the operands at the chunk's first element; count
     * elements), shared by the whole compute team; returns when every share is done. Call from
     * the thread that runs execute. */
    hp_status (*team_update)(void *user, void *const *bufs, size_t count);
    void *user;
    /* The same update on the calling thread only (any thread), with coefficients `coef`. */
    void (*update)(const void *coef, void *const *bufs, size_t count);
    const void *coef;  /* this node's coefficients (copied by an instruction that defers work) */
    size_t coef_bytes;
} hp_exec_ctx;

/*
 * What a transfer instruction moves, for the cost model (hp/costmodel.h): one communicator operation
 * on a group of `group` ranks, with the bytes the busiest member receives (for SEND_RECV the message).
 */
typedef enum hp_xfer_kind {
    HP_XFER_ALL_REDUCE = 0,
    HP_XFER_ALL_GATHER,
    HP_XFER_REDUCE_SCATTER,
    HP_XFER_ALL_TO_ALL,
    HP_XFER_SEND_RECV,
    HP_XFER_KIND_COUNT
} hp_xfer_kind;

typedef struct hp_xfer {
    hp_xfer_kind kind;
    int group;    /* ranks taking part (2 for SEND_RECV) */
    double bytes; /* bytes */
} hp_xfer;

/* "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"; "?" out of range. */
const char *hp_xfer_kind_name(hp_xfer_kind k);

/*
 * A runtime instruction: what a pass attaches to a transfer node (node->extra, with
 * HP_NODE_FLAG_INSTR) so that neither the backend nor the runtime needs the pass's internals. The
 * pass's own record begins with this struct. Collectives, point-to-point transfers and tier copies
 * are instructions; the runtime issues HP_NODE_FLAG_ASYNC ones on the queue `queue` names and the
 * others in program order; a backend kernel for such an operator only calls execute.
 */
typedef struct hp_instr hp_instr;
struct hp_comm_request;
struct hp_instr {
    hp_queue_kind queue;
    const void *group;   /* COLLECTIVE: the communicator family (e.g. the mesh) */
    uint32_t axes;       /* COLLECTIVE: mesh axes the collectives use (bit a: axis a; 0: all) */
    bool team_serial;    /* run by one thread of the compute team; the others skip the node */
    double bytes;        /* bytes received (the cost model's network traffic) */
    /* Runs the instruction on the node's bound storage (a->in, a->out); ctx may be NULL outside a
     * kernel. Called on the queue's worker for asynchronous nodes. */
    hp_status (*execute)(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx);
    /* Optional: called once on the compute thread, in program order, before the program's first run
     * (e.g. creating sub-communicators: collective, and every rank prepares the same instructions
     * in the same order), so that queues running concurrently never create communicators. */
    hp_status (*prepare)(hp_instr *self);
    /* Optional: completes what execute started and left in flight (a non-blocking send), on the
     * compute thread, where the runtime waits for the node (its output's first use, an in-place
     * writer, the end of the run). */
    hp_status (*complete)(hp_instr *self);
    /* Optional: starts the transfer non-blocking on the calling thread (one collective) and stores
     * in *req the request the runtime completes with hp_comm_test / hp_comm_wait (NULL: already
     * complete); set only by instructions of one-output nodes that are one non-blocking call.
     * Used by the compute-driven progress strategy (HP_PROGRESS_COMPUTE, hp/runtime.h). */
    hp_status (*start)(hp_instr *self, const hp_node_args *a, struct hp_comm_request **req);
    /* Optional, for traces and reports (hp/trace.h): what the instruction does ("all_reduce",
     * "all_gather+all_to_all") and, for COLLECTIVE, the name of its group ("dp", "dp,tp"); storage
     * owned by the pass, living as long as the instruction. NULL: the operator's name / none. */
    const char *label;
    const char *group_name;
    /* Optional: the communicator operations one run makes, in order, for the cost model: writes
     * up to `max` of them to out and returns how many there are (which may exceed max). NULL: the
     * model times `bytes` at its flat network rate. */
    int (*xfers)(const hp_instr *self, hp_xfer *out, int max);
};

/* The instruction of node n, or NULL when it has none. */
static inline hp_instr *hp_node_instr(const hp_node *n) {
    return (n->flags & HP_NODE_FLAG_INSTR) ? (hp_instr *)n->extra : NULL;
}

#ifdef __cplusplus
}
#endif
#endif /* HP_INSTR_H */
