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
 * HP_STATUS_OUT_OF_MEMORY for temporaries.
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
 * first. Sub-communicators obtained by split are independent and freed separately. */
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

/* Blocks until the request completes, then frees it. NULL is allowed (returns OK). */
hp_status hp_comm_wait(hp_comm_request *req);
/* Waits for n requests (NULL entries skipped); every request is released even if one fails, and
 * the first failure is returned. */
hp_status hp_comm_wait_all(int n, hp_comm_request **reqs);
/* *done = true (and the request freed) when it has completed; otherwise false and still pending. */
hp_status hp_comm_test(hp_comm_request *req, bool *done);

/* ---------------------------------------------------------------- how a thread waits */

/*
 * How blocking calls (and hp_comm_wait) made by the calling thread wait for completion:
 *   HP_COMM_WAIT_BLOCK  the implementation's own blocking call (the default; Open MPI polls the
 *                       network in a loop, keeping a core busy);
 *   HP_COMM_WAIT_YIELD  start the non-blocking variant, then test it, sched_yield() between tests;
 *   HP_COMM_WAIT_SLEEP  the same with a sleep between tests, growing from 2 us to 256 us.
 * YIELD and SLEEP give the core to compute threads where a communication thread would otherwise
 * take one (more threads than cores); progress then happens only in the tests. A per-thread
 * setting: the runtime's communication queues set it on their own threads (hp_program_opts.progress).
 */
typedef enum hp_comm_wait_mode {
    HP_COMM_WAIT_BLOCK = 0,
    HP_COMM_WAIT_YIELD,
    HP_COMM_WAIT_SLEEP,
} hp_comm_wait_mode;

void hp_comm_set_thread_wait(hp_comm_wait_mode m);
hp_comm_wait_mode hp_comm_thread_wait(void);

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
    hp_status (*wait)(void *ctx, void *req);              /* completes and releases req */
    hp_status (*test)(void *ctx, void *req, bool *done);  /* releases req when done */
    /* Collective split; the implementation builds *out with hp_comm_new (NULL for COLOR_NONE). */
    hp_status (*split)(void *ctx, int color, int key, hp_comm **out);
    void (*free)(void *ctx);
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
