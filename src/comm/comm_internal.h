/*
 * Internal to src/comm/: the communicator and request records shared by the public wrappers
 * (comm.c) and the wait loop with its timeout and stall report (comm_wait.c).
 */
#ifndef HP_COMM_INTERNAL_H
#define HP_COMM_INTERNAL_H

#include "hp/comm.h"

#include <stdatomic.h>

/* What a request does, for a timeout's message. */
typedef enum hp__comm_op {
    HP__COMM_OP_ALL_REDUCE = 0,
    HP__COMM_OP_ALL_GATHER,
    HP__COMM_OP_REDUCE_SCATTER,
    HP__COMM_OP_ALL_TO_ALL,
    HP__COMM_OP_BROADCAST,
    HP__COMM_OP_BARRIER,
    HP__COMM_OP_SEND,
    HP__COMM_OP_RECV,
} hp__comm_op;

/*
 * What a communicator shares with every communicator split from it (and they from it): after one
 * of their transfers timed out, the others stop waiting (a stalled rank stalls them all, and the
 * caller must learn of the first timeout, not wait a second one out). Reference counted.
 */
typedef struct hp__comm_family {
    atomic_int refs;
    atomic_int stalled; /* 0: no timeout; 1: being recorded; 2: msg holds the first timeout's message */
    atomic_int peer_failed; /* stalled came from a member that failed or is gone, not from a timeout */
    char msg[1024];
    char **names;       /* hp_comm_set_rank_names: n_names labels indexed by world rank, or NULL */
    int n_names;
} hp__comm_family;

struct hp_comm {
    const hp_comm_i *iface;
    void *ctx;
    int rank, size;
    double timeout_s;          /* hp_comm_set_timeout; 0: no limit */
    uint64_t n_coll;           /* collectives issued on this communicator (every member counts alike) */
    hp__comm_family *family;
    hp_comm_request *abandoned; /* requests given up after a timeout, linked by next */
};

/* A request: the implementation's handle plus what must happen at completion. */
struct hp_comm_request {
    hp_comm *comm;
    void *impl;
    void *tmp;            /* temporary send copy (a staged collective: its send data and result), freed at
                           * completion */
    void *out;            /* a staged collective: the caller's result buffer, which gets out_bytes from
                           * tmp + out_off at completion (NULL: not staged) */
    size_t out_off, out_bytes;
    void *avg_buf;        /* divide avg_count elements by comm size at completion */
    size_t avg_count;
    hp_dtype avg_dt;
    /* for a timeout's message */
    hp__comm_op op;
    int peer;             /* send/recv: the peer; broadcast: the root; else -1 */
    int tag;              /* send/recv */
    size_t bytes;         /* this rank's payload: sent, received or reduced */
    uint64_t seq;         /* collectives: hp_comm.n_coll at issue (1-based); 0 for point-to-point */
    hp_comm_request *next; /* in hp_comm.abandoned */
};

/* Divides by the communicator size where AVG asked for it and frees the send copy (not r). */
void hp__comm_req_complete(hp_comm_request *r);

/* Completes r (which has an implementation request) by testing it, spinning first, then sleeping
 * with a growing sleep (hp_comm_set_thread_wait), and frees it. After the communicator's timeout
 * HP_STATUS_TIMEOUT naming the operation, the group and the ranks that did not arrive; r is then
 * kept on the communicator's abandoned list (its buffers may still be written), and so after an
 * earlier timeout in the family. */
hp_status hp__comm_poll_wait(hp_comm_request *r);

/* hp_comm_free tests the abandoned sends and collectives this long at most (or the timeout if
 * shorter) before it hands the pending ones to the implementation (hp_comm_i.forget);
 * hp_comm_release_abandoned, called on a failure path where a rank may be dead and the job about
 * to be aborted (its message must come first), only briefly. */
#define HP__COMM_FREE_GRACE_NS 1000000000LL
#define HP__COMM_RELEASE_GRACE_NS 50000000LL

/* Releases the abandoned requests of c: cancels the receives (hp_comm_i.cancel), tests the rest for
 * up to grace_ns (a member that stopped after a failure usually reaches them), and hands those
 * still pending to the implementation (hp_comm_i.forget), or leaks them where it has no such method
 * (their memory may still be written by the implementation). */
void hp__comm_abandoned_free(hp_comm *c, long long grace_ns);

/* " (LABEL)" for world rank r when hp_comm_set_rank_names gave it one, else "". */
const char *hp__comm_rank_label(const hp__comm_family *f, int world_rank, char *buf, size_t n);

/* A new family (refs 1), or NULL when out of memory; hp__comm_family_unref frees it at 0. */
hp__comm_family *hp__comm_family_new(void);
void hp__comm_family_unref(hp__comm_family *f);
/* Records the family's first failure: a member failed or is gone (peer_failed), or this rank
 * gave up (hp_comm_give_up); `msg` is what later waits report. No-op when one is recorded. */
void hp__comm_family_fail(hp__comm_family *f, const char *msg);

#endif
