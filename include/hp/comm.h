/*
 * hp/comm.h — the communicator interface: collectives, point-to-point, sub-communicators.
 *
 * A communicator is a group of `size` ranks numbered 0..size-1. Implementations (MPI in
 * hp/comm_mpi.h, the single-rank `self` communicator and the in-process simulated communicator
 * below) fill a struct of function pointers plus a context, like ggml's ggml_backend_i; the public
 * wrappers here validate arguments, implement HP_REDUCE_AVG (as a sum followed by a division) and
 * the in-place rules, so implementations stay small.
 *
 *     hp_comm *c = hp_comm_self_new();           // or hp_comm_mpi_world(&c) under mpirun
 *     float x[4] = {1, 2, 3, 4};
 *     HP_CHECK(hp_comm_all_reduce(c, x, x, 4, HP_DTYPE_F32, HP_REDUCE_SUM));   // in place
 *     hp_comm_free(c);
 *
 * Collectives are shaped like NCCL's: (sendbuf, recvbuf, count in elements, dtype, op, comm).
 * Every rank of the communicator must call the same collectives in the same order (MPI rule).
 *
 * In-place rule (as in NCCL):
 *   all_reduce      in place when sendbuf == recvbuf.
 *   all_gather      in place when sendbuf == recvbuf + rank * sendcount elements.
 *   reduce_scatter  in place when recvbuf == sendbuf + rank * recvcount elements.
 *   all_to_all(v)   sendbuf and recvbuf must not overlap (HP_STATUS_INVALID_ARGUMENT).
 * Any other overlap of send and receive buffers is undefined.
 *
 * Non-blocking variants (hp_comm_i*) return a request; the buffers must stay valid and untouched
 * until hp_comm_wait() returns or hp_comm_test() reports completion. Both release the request.
 * Errors: HP_STATUS_INVALID_ARGUMENT for bad counts, dtypes, ops or ranks (the message names the
 * value); HP_STATUS_COMM when the underlying library fails (the message carries its text);
 * HP_STATUS_OUT_OF_MEMORY for temporaries; HP_STATUS_TIMEOUT when a blocking call or
 * hp_comm_wait waited longer than the communicator's timeout (hp_comm_set_timeout: 10 minutes
 * unless set; the message names the operation, the group and the ranks that did not arrive).
 */
#ifndef HP_COMM_H
#define HP_COMM_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reduction operators. AVG is the sum divided by the number of ranks (integer division for i32). */
typedef enum hp_reduce_op {
    HP_REDUCE_SUM = 0,
    HP_REDUCE_AVG,
    HP_REDUCE_MAX,
    HP_REDUCE_MIN,
    HP_REDUCE_COUNT
} hp_reduce_op;

/* "sum", "avg", "max", "min"; "?" otherwise. */
const char *hp_reduce_op_name(hp_reduce_op op);
/* Parses the names above. HP_STATUS_INVALID_ARGUMENT names the string. */
hp_status hp_reduce_op_parse(const char *s, hp_reduce_op *out);

/* Opaque communicator and request handles. */
typedef struct hp_comm hp_comm;
typedef struct hp_comm_request hp_comm_request;

/* Colour for hp_comm_split: the caller joins no new communicator and gets *out = NULL. */
#define HP_COMM_COLOR_NONE (-1)

/* ---------------------------------------------------------------- queries and lifetime */

/* This process's rank in `c`, in [0, size). */
int hp_comm_rank(const hp_comm *c);
/* Number of ranks in `c` (>= 1). */
int hp_comm_size(const hp_comm *c);
/* The implementation's name: "self", "mpi", "sim". */
const char *hp_comm_name(const hp_comm *c);
/* Frees the communicator (not collective). NULL is allowed. Outstanding requests must be waited on
 * first. Sub-communicators obtained by split are independent and freed separately. Requests that
 * were abandoned (a timeout, a fault, hp_comm_give_up: see hp_comm_set_timeout) are released here:
 * receives are cancelled; sends and collectives are tested for up to 1 s (or the timeout, if
 * shorter), and those still pending are kept by the implementation until they can no longer run
 * (MPI: until MPI_Finalize, with their communicator; implementations without hp_comm_i.forget leak
 * them). So freeing takes up to a second more after a failure, and MPI_Finalize stays safe. A
 * collective whose send data and result together are at most 64 KiB runs on a copy its request
 * owns, so one given up and completed later writes that copy, not the caller's buffer; a larger
 * one's buffers must live until the job ends once it is given up. */
void hp_comm_free(hp_comm *c);

/* A communicator of one rank, needing no MPI runtime. Every collective is a copy (or no-op);
 * send/recv to self match in FIFO order per tag. NULL when out of memory. */
hp_comm *hp_comm_self_new(void);

/*
 * Splits `c` into disjoint sub-communicators, like MPI_Comm_split: ranks passing the same `color`
 * (>= 0) form one new communicator, ordered by (key, rank in c). Collective over `c`. Ranks passing
 * HP_COMM_COLOR_NONE get *out = NULL. The new communicator is owned by the caller.
 */
hp_status hp_comm_split(hp_comm *c, int color, int key, hp_comm **out);

/* ---------------------------------------------------------------- blocking collectives */

/* recvbuf[i] = op over ranks of sendbuf[i], for i < count elements. Both buffers hold count. */
hp_status hp_comm_all_reduce(hp_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                             hp_dtype dt, hp_reduce_op op);
/*
 * Agreement on a status: every rank of `c` passes its own `st` and learns whether every rank
 * succeeded (one all-reduce of one int; collective over `c`). Returns `st` itself on a rank that
 * failed (its message intact), HP_STATUS_OK when every rank succeeded, else HP_STATUS_COMM with
 * "<what>: rank R of the communicator failed (its own error says why); rank S succeeded", R the
 * lowest failed rank; or the all-reduce's own error. For a build step whose failure can be one
 * rank's alone (its offload budget, its group's model, memory): no rank then goes on to wait for
 * a peer that gave up.
 */
hp_status hp_comm_agree(hp_comm *c, hp_status st, const char *what);
/* recvbuf (size * sendcount elements) = concatenation of every rank's sendbuf, in rank order. */
hp_status hp_comm_all_gather(hp_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount,
                             hp_dtype dt);
/* sendbuf holds size * recvcount elements; rank r receives op over ranks of block r. */
hp_status hp_comm_reduce_scatter(hp_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                                 hp_dtype dt, hp_reduce_op op);
/* Block j (count elements) of sendbuf goes to rank j; block i of recvbuf comes from rank i. */
hp_status hp_comm_all_to_all(hp_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                             hp_dtype dt);
/* Variable all-to-all: sendcounts[j] elements from sendbuf + sdispls[j] go to rank j, recvcounts[i]
 * elements from rank i land at recvbuf + rdispls[i]. Counts and displacements are in elements and
 * each array has size entries; the arrays may be freed as soon as the call returns. */
hp_status hp_comm_all_to_allv(hp_comm *c, const void *sendbuf, const size_t *sendcounts,
                              const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                              const size_t *rdispls, hp_dtype dt);
/* buf (count elements) on `root` is copied to every rank's buf. */
hp_status hp_comm_broadcast(hp_comm *c, void *buf, size_t count, hp_dtype dt, int root);
/* count elements to rank `peer` with a tag >= 0. */
hp_status hp_comm_send(hp_comm *c, const void *buf, size_t count, hp_dtype dt, int peer, int tag);
/* count elements from rank `peer` with the given tag; the message must hold exactly count. */
hp_status hp_comm_recv(hp_comm *c, void *buf, size_t count, hp_dtype dt, int peer, int tag);
hp_status hp_comm_barrier(hp_comm *c);

/* ---------------------------------------------------------------- non-blocking collectives */

/* Same semantics as the blocking calls; *req receives a request to pass to hp_comm_wait/test. */
hp_status hp_comm_iall_reduce(hp_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                              hp_dtype dt, hp_reduce_op op, hp_comm_request **req);
hp_status hp_comm_iall_gather(hp_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount,
                              hp_dtype dt, hp_comm_request **req);
hp_status hp_comm_ireduce_scatter(hp_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                                  hp_dtype dt, hp_reduce_op op, hp_comm_request **req);
hp_status hp_comm_iall_to_all(hp_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                              hp_dtype dt, hp_comm_request **req);
hp_status hp_comm_iall_to_allv(hp_comm *c, const void *sendbuf, const size_t *sendcounts,
                               const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls, hp_dtype dt, hp_comm_request **req);
hp_status hp_comm_ibroadcast(hp_comm *c, void *buf, size_t count, hp_dtype dt, int root,
                             hp_comm_request **req);
hp_status hp_comm_isend(hp_comm *c, const void *buf, size_t count, hp_dtype dt, int peer, int tag,
                        hp_comm_request **req);
hp_status hp_comm_irecv(hp_comm *c, void *buf, size_t count, hp_dtype dt, int peer, int tag,
                        hp_comm_request **req);
hp_status hp_comm_ibarrier(hp_comm *c, hp_comm_request **req);

/* Blocks until the request completes, then frees it. NULL is allowed (returns OK). Waits as the
 * thread's wait mode says, and at most the communicator's timeout (HP_STATUS_TIMEOUT; the request
 * is then abandoned: see hp_comm_set_timeout). */
hp_status hp_comm_wait(hp_comm_request *req);
/* Waits for n requests (NULL entries skipped); every request is released even if one fails, and
 * the first failure is returned. */
hp_status hp_comm_wait_all(int n, hp_comm_request **reqs);
/* *done = true (and the request freed) when it has completed; otherwise false and still pending. */
hp_status hp_comm_test(hp_comm_request *req, bool *done);

/* ---------------------------------------------------------------- how a thread waits */

/*
 * Every blocking call (and hp_comm_wait) starts the non-blocking variant and tests it until it
 * completes. How the calling thread waits while a prompt peer is expected (the first 2 ms):
 *   HP_COMM_WAIT_BLOCK  tests in a tight loop (the default; as fast as the implementation's own
 *                       blocking call, which polls too, and it keeps a core busy);
 *   HP_COMM_WAIT_YIELD  tests with sched_yield() between them;
 *   HP_COMM_WAIT_SLEEP  tests with a sleep between them, growing from 2 us to 256 us.
 * YIELD and SLEEP give the core to compute threads where a communication thread would otherwise
 * take one (more threads than cores); progress then happens only in the tests. After the first
 * 2 ms every mode sleeps between tests, each sleep 1/16 of the time waited so far (at least the
 * last one, at most 1 ms): a rank waiting for a stopped peer uses about 1% of a core, and a late
 * completion is seen at most about 6% late. A per-thread setting: the runtime's communication
 * queues set it on their own threads (hp_program_opts.progress).
 */
typedef enum hp_comm_wait_mode {
    HP_COMM_WAIT_BLOCK = 0,
    HP_COMM_WAIT_YIELD,
    HP_COMM_WAIT_SLEEP,
} hp_comm_wait_mode;

void hp_comm_set_thread_wait(hp_comm_wait_mode m);
hp_comm_wait_mode hp_comm_thread_wait(void);

/* ---------------------------------------------------------------- timeouts: stalled ranks */

/* Seconds a new communicator's transfers may wait (PyTorch's process-group default: 10 minutes). */
#define HP_COMM_TIMEOUT_DEFAULT 600.0
/* The largest timeout hp_comm_set_timeout accepts, in seconds (a year). */
#define HP_COMM_TIMEOUT_MAX 31536000.0

/*
 * How long a wait for one transfer of `c` (a blocking call, hp_comm_wait) may last before it fails
 * with HP_STATUS_TIMEOUT, in seconds; 0: no limit. Applies to c and to the communicators split
 * from it afterwards (they inherit it); a new communicator starts with HP_COMM_TIMEOUT_DEFAULT.
 * Not collective; set it alike on every rank. HP_STATUS_INVALID_ARGUMENT for a negative or NaN
 * value or one above HP_COMM_TIMEOUT_MAX, naming it.
 *
 * The timeout's message names the operation and its bytes, the collective's number on the
 * communicator, the group (its size and world ranks, this rank), and the ranks that did not
 * arrive: for a send or recv, the peer; for a collective, the members that did not announce that
 * they were waiting in it (a member that waits longer than min(timeout / 8, 1 s) announces it to
 * the others; implementations without the hp_comm_i.arrive/arrivals methods say the ranks are
 * unknown). A collective's report comes that delay + 0.25 s after the timeout, so that members
 * which arrived just before it are counted.
 *
 * A timed-out operation is abandoned, not cancelled (MPI cannot cancel a collective): its buffers
 * must stay allocated, since a peer that resumes may still complete it, until the communicator is
 * freed (hp_comm_free then cancels an abandoned receive, and gives a send or collective a second to
 * complete; one still pending after that may still read its send buffer, and a collective write its
 * receive buffer, if a member joins it before hp_comm_mpi_finalize); usually the job then ends
 * (hp_comm_mpi_abort). After one timeout, every other wait on c and on the communicators split
 * from it or it from (its family) that lasts beyond its first 2 ms also fails with
 * HP_STATUS_TIMEOUT ("abandoned: an earlier transfer timed out: ..."), so the caller hears of the
 * first stall at once and not after a second timeout; a transfer that completes within that time
 * still succeeds. hp_comm_mpi_world makes a communicator of a new family.
 */
hp_status hp_comm_set_timeout(hp_comm *c, double seconds);
/* The timeout of c in seconds (0: no limit). */
double hp_comm_timeout(const hp_comm *c);
/* Whether a transfer of c's family (see hp_comm_set_timeout) has timed out, or was given up
 * because a rank of the job failed or is gone (hp_comm_peer_failed). */
bool hp_comm_stalled(const hp_comm *c);

/* ---------------------------------------------------------------- faults: failed and dead ranks */

/*
 * A rank of the job that fails (its caller reports it: hp_comm_report_failure) or whose process is
 * gone (it exited or was killed, SIGKILL included) must not leave the others waiting for the
 * timeout. Every wait that lasts beyond its first 2 ms asks the implementation every 10 ms whether
 * a rank of the job failed (hp_comm_i.fault); when one did, the wait is given up with
 * HP_STATUS_COMM naming the operation, the failed rank (world rank and, with hp_comm_set_rank_names,
 * its label, e.g. its group) and what happened to it ("its process 1234 on host h is gone
 * (exited or killed)", "it failed: <its message>"), and so is every later wait of c's family that
 * lasts beyond its first 2 ms (as after a timeout; hp_comm_stalled and hp_comm_peer_failed then
 * say so). Implementations without the method (self, sim) never report a fault. The MPI
 * communicator's rules (which deaths it sees) are in hp/comm_mpi.h.
 */

/* Labels world rank r as names[r] (r < n) in the fault and timeout messages of c's family, e.g.
 * "rank 0 of group 'stage1'" gives "world rank 3 (rank 0 of group 'stage1')" in a fault's message
 * and "; world rank 3 is rank 0 of group 'stage1'" after a timeout's (the peer of a send or recv,
 * every member of a collective's group). Copies the strings;
 * NULL entries (or n = 0) leave ranks unlabelled. Not collective; call it before transfers start
 * (not concurrently with waits). HP_STATUS_INVALID_ARGUMENT for n < 0, HP_STATUS_OUT_OF_MEMORY. */
hp_status hp_comm_set_rank_names(hp_comm *c, int n, const char *const *names);

/* Tells every other rank of the job (not only c's members) that this rank failed, with `msg` (at
 * most 900 bytes are sent): their waits then fail at once with "world rank R (label) failed: msg"
 * instead of waiting for the timeout. Does not wait; a no-op when the implementation cannot send
 * it or when c's family has already given up because of another rank's fault (the first message
 * is the one that travels). Call it when this rank is about to stop while others may wait for it
 * (e.g. before ending the job); the receivers' communicators are unusable afterwards. This rank's
 * own communicators stay usable (hp_comm_give_up ends them too). */
void hp_comm_report_failure(hp_comm *c, const char *msg);

/* Marks c's family failed on this rank, as a peer's fault would: its waits that last beyond their
 * first 2 ms fail at once with HP_STATUS_COMM ("... abandoned: this rank failed: msg"), and
 * hp_comm_peer_failed / hp_comm_stalled say so. For a rank that failed mid-step and must drain
 * transfers its stopping peers will never match (hp/pipeline.h); their buffers must stay allocated
 * until the communicator is freed, as after a timeout. No-op when the family already gave up. */
void hp_comm_give_up(hp_comm *c, const char *msg);

/* Releases c's abandoned requests now, as hp_comm_free does (receives cancelled; sends and
 * collectives tested, here for up to 50 ms only, since a peer may be dead and the caller's error
 * must come before the job is ended, and the ones still pending handed to the implementation), so that the caller may free the buffers of the abandoned receives, and of
 * the sends and collectives that completed. For an owner of buffers that gave up and outlives the
 * drain but not the communicator (hp_pipeline after a failed step: its receive buffers are freed
 * with it, the caller's communicator later). c stays as it was (its family still given up). NULL is
 * allowed. Not thread-safe with other calls on c. */
void hp_comm_release_abandoned(hp_comm *c);

/* Whether c's family gave up a wait because a rank of the job failed or is gone. */
bool hp_comm_peer_failed(const hp_comm *c);

/* ---------------------------------------------------------------- simulated communicator */

/*
 * Runs fn(comm, rank, user) on `nranks` threads of this process, each with its own rank of one
 * in-process communicator (name "sim"), and joins them. Every collective, split and send/recv works
 * as under MPI (sends are buffered; collectives block until all ranks arrive), so multi-rank code
 * can be tested exhaustively without an MPI runtime. Returns the first non-OK status of the ranks
 * with the message "rank R: ..."; HP_STATUS_INVALID_ARGUMENT when nranks < 1.
 * fn must not use cmocka assertions (they are not thread-safe): return a status instead.
 */
typedef hp_status (*hp_comm_sim_fn)(hp_comm *comm, int rank, void *user);
hp_status hp_comm_sim_run(int nranks, hp_comm_sim_fn fn, void *user);

/* ---------------------------------------------------------------- implementing a communicator */

/*
 * The interface an implementation fills. `req` arguments: NULL means blocking; otherwise the call
 * starts the operation and stores an implementation request in *req (NULL when already complete),
 * later passed to wait/test. Implementations receive only SUM, MAX and MIN (the wrapper turns AVG
 * into SUM plus a division), never overlapping all-gather/reduce-scatter buffers (the wrapper
 * copies), count arrays they must not keep after returning, and valid peers and roots.
 */
typedef struct hp_comm_i {
    const char *name;
    hp_status (*all_reduce)(void *ctx, const void *sendbuf, void *recvbuf, size_t count,
                            hp_dtype dt, hp_reduce_op op, void **req);
    hp_status (*all_gather)(void *ctx, const void *sendbuf, void *recvbuf, size_t sendcount,
                            hp_dtype dt, void **req);
    hp_status (*reduce_scatter)(void *ctx, const void *sendbuf, void *recvbuf, size_t recvcount,
                                hp_dtype dt, hp_reduce_op op, void **req);
    hp_status (*all_to_allv)(void *ctx, const void *sendbuf, const size_t *sendcounts,
                             const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                             const size_t *rdispls, hp_dtype dt, void **req);
    hp_status (*broadcast)(void *ctx, void *buf, size_t count, hp_dtype dt, int root, void **req);
    hp_status (*send)(void *ctx, const void *buf, size_t count, hp_dtype dt, int peer, int tag,
                      void **req);
    hp_status (*recv)(void *ctx, void *buf, size_t count, hp_dtype dt, int peer, int tag,
                      void **req);
    hp_status (*barrier)(void *ctx, void **req);
    hp_status (*wait)(void *ctx, void *req);              /* completes and releases req (the wrappers
                                                             test instead, to sleep and time out) */
    hp_status (*test)(void *ctx, void *req, bool *done);  /* releases req when done */
    /* Collective split; the implementation builds *out with hp_comm_new (NULL for COLOR_NONE). */
    hp_status (*split)(void *ctx, int color, int key, hp_comm **out);
    void (*free)(void *ctx);
    /* Optional (NULL: not provided), for a timeout's message (hp_comm_set_timeout). */
    int (*world_rank)(void *ctx, int rank); /* member `rank`'s rank in the whole job */
    /* This rank has been waiting in collective number seq (1-based, counted per communicator)
     * for a while: tell the other members, cheaply and without waiting for them. */
    void (*arrive)(void *ctx, uint64_t seq);
    /* arrived[r] (size entries) = whether member r announced collective seq or a later one. */
    void (*arrivals)(void *ctx, uint64_t seq, bool *arrived);
    /* Optional, for faults (see hp_comm_report_failure). Whether a rank of the job failed or is
     * gone: its world rank, with what happened in msg (capacity n: "its process 1234 on host h is
     * gone (exited or killed)", "it failed: ..."); -1 when none. Called from any thread, every
     * 10 ms by each waiting thread: it must be cheap and thread-safe. */
    int (*fault)(void *ctx, char *msg, size_t n);
    /* Sends msg to every other rank of the job without waiting (see hp_comm_report_failure). */
    void (*report_fault)(void *ctx, const char *msg);
    /* Optional, for abandoned requests at hp_comm_free (see hp_comm_set_timeout). Cancels a
     * pending receive and releases req once it is complete (cancelled, or matched before the
     * cancel took), so its buffer is no longer written. */
    hp_status (*cancel)(void *ctx, void *req);
    /* The caller will never test req again (a send or collective still pending when its
     * communicator is freed): the implementation keeps what the operation needs, `keep` (a buffer
     * it may still read, or NULL; ownership passes) included, until it can no longer run (MPI:
     * the communicator stays unfreed and both are released after MPI_Finalize). */
    void (*forget)(void *ctx, void *req, void *keep);
} hp_comm_i;

/* Wraps an implementation. The communicator owns ctx (freed through iface->free). NULL when out of
 * memory (iface->free is then called on ctx). `iface` must outlive the communicator. */
hp_comm *hp_comm_new(const hp_comm_i *iface, void *ctx, int rank, int size);

/* Applies dst[i] = dst[i] op src[i] for n elements (SUM, MAX, MIN; bf16 computed in f32). */
void hp__reduce_apply(void *dst, const void *src, size_t n, hp_dtype dt, hp_reduce_op op);

#ifdef __cplusplus
}
#endif
#endif /* HP_COMM_H */
