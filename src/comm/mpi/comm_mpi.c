/* The MPI communicator: hp_comm_i over an MPI_Comm (blocking and MPI_I* non-blocking calls). */
#include "hp/comm_mpi.h"

#include "comm/mpi/comm_mpi_internal.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* comm carries the transfers; notes (a duplicate) the arrival notices of waiting members: a
 * zero-byte message whose tag is the collective's number modulo NOTE_TAGS (hp_comm_i.arrive). */
typedef struct mpi_ctx {
    MPI_Comm comm, notes;
    int rank, size;
    int *world;      /* world rank of each member */
    uint64_t *heard; /* per member: the latest collective number it announced (0: none) */
    int n_forgotten; /* requests handed over by hp_comm_i.forget: the communicators outlive m_free */
} mpi_ctx;

#define NOTE_TAGS 32768 /* MPI guarantees tags up to 32767 */

/* A pending MPI request plus the int count arrays all_to_allv needs until completion. */
typedef struct mpi_req {
    MPI_Request req;
    int *counts;
} mpi_req;

/*
 * What outlives hp_comm_free until MPI_Finalize: the operations abandoned and still pending when
 * their communicator was freed (hp_comm_i.forget), and the MPI communicators they run on. Such a
 * communicator is not freed: Open MPI's libnbc progresses a pending nonblocking collective whose
 * other members arrive late (in MPI_Finalize at the latest) on its communicator even after
 * MPI_Comm_free, and crashes on the freed one; left alone, MPI_Finalize tears it down safely.
 */
typedef struct parked {
    struct parked *next;
    mpi_req *req;    /* or NULL */
    void *keep;      /* a buffer the operation may read, or NULL */
    MPI_Comm comm;   /* or MPI_COMM_NULL */
} parked;

static parked *g_parked;
static pthread_mutex_t g_parked_mu = PTHREAD_MUTEX_INITIALIZER;

static void park(mpi_req *req, void *keep, MPI_Comm comm) {
    parked *p = calloc(1, sizeof *p);
    if (!p) return; /* leaked: the operation may still run */
    p->req = req, p->keep = keep, p->comm = comm;
    pthread_mutex_lock(&g_parked_mu);
    p->next = g_parked;
    g_parked = p;
    pthread_mutex_unlock(&g_parked_mu);
}

/* After MPI_Finalize: nothing runs any more. */
static void parked_release(void) {
    pthread_mutex_lock(&g_parked_mu);
    parked *p = g_parked;
    g_parked = NULL;
    pthread_mutex_unlock(&g_parked_mu);
    while (p) {
        parked *next = p->next;
        if (p->req) free(p->req->counts);
        free(p->req);
        free(p->keep);
        free(p);
        p = next;
    }
}

static bool g_we_initialised;
static MPI_Op g_bf16_ops[HP_REDUCE_COUNT];
static bool g_bf16_ops_made;

static hp_status mpi_fail(int rc, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return hp_error(HP_STATUS_COMM, "%s failed: %s", what, text);
}

#define MPI_TRY(call, what)                                                                        \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what);                                        \
    } while (0)

static void bf16_op(void *in, void *inout, int *len, MPI_Datatype *dt, hp_reduce_op op) {
    (void)dt;
    hp__reduce_apply(inout, in, (size_t)*len, HP_DTYPE_BF16, op);
}
static void bf16_sum(void *a, void *b, int *n, MPI_Datatype *t) { bf16_op(a, b, n, t, HP_REDUCE_SUM); }
static void bf16_max(void *a, void *b, int *n, MPI_Datatype *t) { bf16_op(a, b, n, t, HP_REDUCE_MAX); }
static void bf16_min(void *a, void *b, int *n, MPI_Datatype *t) { bf16_op(a, b, n, t, HP_REDUCE_MIN); }

static MPI_Datatype mpi_type(hp_dtype dt) {
    switch (dt) {
    case HP_DTYPE_F32: return MPI_FLOAT;
    case HP_DTYPE_I32: return MPI_INT32_T;
    default: return MPI_UINT16_T;
    }
}

static MPI_Op mpi_op(hp_dtype dt, hp_reduce_op op) {
    if (dt == HP_DTYPE_BF16) return g_bf16_ops[op];
    return op == HP_REDUCE_MAX ? MPI_MAX : op == HP_REDUCE_MIN ? MPI_MIN : MPI_SUM;
}

static hp_status check_count(size_t n, const char *what) {
    if (n > INT_MAX)
        return hp_error(HP_STATUS_UNSUPPORTED, "%s of %zu elements exceeds the MPI int count limit", what, n);
    return HP_STATUS_OK;
}

/* Allocates the request record for a non-blocking call; returns where MPI writes its request. */
static hp_status begin(void **req, mpi_req **r) {
    *r = NULL;
    if (!req) return HP_STATUS_OK;
    *r = calloc(1, sizeof **r);
    if (!*r) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate an MPI request");
    *req = *r;
    return HP_STATUS_OK;
}

static hp_status end(int rc, const char *what, void **req, mpi_req *r) {
    if (rc != MPI_SUCCESS) {
        if (r) {
            free(r->counts);
            free(r);
            *req = NULL;
        }
        return mpi_fail(rc, what);
    }
    return HP_STATUS_OK;
}

static hp_status m_all_reduce(void *vctx, const void *sb, void *rb, size_t n, hp_dtype dt,
                              hp_reduce_op op, void **req) {
    mpi_ctx *c = vctx;
    mpi_req *r;
    HP_CHECK(check_count(n, "all_reduce"));
    HP_CHECK(begin(req, &r));
    const void *s = sb == rb ? MPI_IN_PLACE : sb;
    int rc = r ? MPI_Iallreduce(s, rb, (int)n, mpi_type(dt), mpi_op(dt, op), c->comm, &r->req)
               : MPI_Allreduce(s, rb, (int)n, mpi_type(dt), mpi_op(dt, op), c->comm);
    return end(rc, "MPI_Allreduce", req, r);
}

static hp_status m_all_gather(void *vctx, const void *sb, void *rb, size_t n, hp_dtype dt, void **req) {
    mpi_ctx *c = vctx;
    mpi_req *r;
    HP_CHECK(check_count(n, "all_gather"));
    HP_CHECK(begin(req, &r));
    MPI_Datatype t = mpi_type(dt);
    int rc = r ? MPI_Iallgather(sb, (int)n, t, rb, (int)n, t, c->comm, &r->req)
               : MPI_Allgather(sb, (int)n, t, rb, (int)n, t, c->comm);
    return end(rc, "MPI_Allgather", req, r);
}

static hp_status m_reduce_scatter(void *vctx, const void *sb, void *rb, size_t n, hp_dtype dt,
                                  hp_reduce_op op, void **req) {
    mpi_ctx *c = vctx;
    mpi_req *r;
    HP_CHECK(check_count(n, "reduce_scatter"));
    HP_CHECK(begin(req, &r));
    int rc = r ? MPI_Ireduce_scatter_block(sb, rb, (int)n, mpi_type(dt), mpi_op(dt, op), c->comm, &r->req)
               : MPI_Reduce_scatter_block(sb, rb, (int)n, mpi_type(dt), mpi_op(dt, op), c->comm);
    return end(rc, "MPI_Reduce_scatter_block", req, r);
}

static hp_status m_all_to_allv(void *vctx, const void *sb, const size_t *sc, const size_t *sd,
                               void *rb, const size_t *rc_, const size_t *rd, hp_dtype dt, void **req) {
    mpi_ctx *c = vctx;
    int size;
    MPI_Comm_size(c->comm, &size);
    int *a = malloc(4 * (size_t)size * sizeof *a);
    if (!a) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate all_to_allv counts");
    for (int i = 0; i < size; i++) {
        if (sc[i] > INT_MAX || sd[i] > INT_MAX || rc_[i] > INT_MAX || rd[i] > INT_MAX) {
            free(a);
            return hp_error(HP_STATUS_UNSUPPORTED, "all_to_allv count or displacement for rank %d exceeds INT_MAX", i);
        }
        a[i] = (int)sc[i];
        a[size + i] = (int)sd[i];
        a[2 * size + i] = (int)rc_[i];
        a[3 * size + i] = (int)rd[i];
    }
    mpi_req *r;
    hp_status st = begin(req, &r);
    if (st != HP_STATUS_OK) {
        free(a);
        return st;
    }
    MPI_Datatype t = mpi_type(dt);
    int rc;
    if (r) {
        r->counts = a;
        rc = MPI_Ialltoallv(sb, a, a + size, t, rb, a + 2 * size, a + 3 * size, t, c->comm, &r->req);
    } else {
        rc = MPI_Alltoallv(sb, a, a + size, t, rb, a + 2 * size, a + 3 * size, t, c->comm);
        free(a);
    }
    return end(rc, "MPI_Alltoallv", req, r);
}

static hp_status m_broadcast(void *vctx, void *buf, size_t n, hp_dtype dt, int root, void **req) {
    mpi_ctx *c = vctx;
    mpi_req *r;
    HP_CHECK(check_count(n, "broadcast"));
    HP_CHECK(begin(req, &r));
    int rc = r ? MPI_Ibcast(buf, (int)n, mpi_type(dt), root, c->comm, &r->req)
               : MPI_Bcast(buf, (int)n, mpi_type(dt), root, c->comm);
    return end(rc, "MPI_Bcast", req, r);
}

static hp_status m_send(void *vctx, const void *buf, size_t n, hp_dtype dt, int peer, int tag, void **req) {
    mpi_ctx *c = vctx;
    mpi_req *r;
    HP_CHECK(check_count(n, "send"));
    HP_CHECK(begin(req, &r));
    int rc = r ? MPI_Isend(buf, (int)n, mpi_type(dt), peer, tag, c->comm, &r->req)
               : MPI_Send(buf, (int)n, mpi_type(dt), peer, tag, c->comm);
    return end(rc, "MPI_Send", req, r);
}

static hp_status m_recv(void *vctx, void *buf, size_t n, hp_dtype dt, int peer, int tag, void **req) {
    mpi_ctx *c = vctx;
    mpi_req *r;
    HP_CHECK(check_count(n, "recv"));
    HP_CHECK(begin(req, &r));
    int rc = r ? MPI_Irecv(buf, (int)n, mpi_type(dt), peer, tag, c->comm, &r->req)
               : MPI_Recv(buf, (int)n, mpi_type(dt), peer, tag, c->comm, MPI_STATUS_IGNORE);
    return end(rc, "MPI_Recv", req, r);
}

static hp_status m_barrier(void *vctx, void **req) {
    mpi_ctx *c = vctx;
    mpi_req *r;
    HP_CHECK(begin(req, &r));
    int rc = r ? MPI_Ibarrier(c->comm, &r->req) : MPI_Barrier(c->comm);
    return end(rc, "MPI_Barrier", req, r);
}

static hp_status m_wait(void *vctx, void *req) {
    (void)vctx;
    mpi_req *r = req;
    int rc = MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    free(r->counts);
    free(r);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Wait");
    return HP_STATUS_OK;
}

static hp_status m_test(void *vctx, void *req, bool *done) {
    (void)vctx;
    mpi_req *r = req;
    int flag = 0;
    int rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    *done = flag != 0 || rc != MPI_SUCCESS;
    if (*done) {
        free(r->counts);
        free(r);
    }
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Test");
    return HP_STATUS_OK;
}

/* MPI can cancel a receive, not a collective (nor, in Open MPI, a send). */
static hp_status m_cancel(void *vctx, void *req) {
    (void)vctx;
    MPI_TRY(MPI_Cancel(&((mpi_req *)req)->req), "MPI_Cancel");
    return HP_STATUS_OK;
}

static void m_forget(void *vctx, void *req, void *keep) {
    mpi_ctx *c = vctx;
    c->n_forgotten++;
    park(req, keep, MPI_COMM_NULL);
}

static void m_free(void *vctx) {
    mpi_ctx *c = vctx;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && c->n_forgotten) { /* MPI_Finalize frees them, after the operations (see parked) */
        park(NULL, NULL, c->comm);
        park(NULL, NULL, c->notes);
    } else if (!fin) {
        MPI_Comm_free(&c->comm);
        MPI_Comm_free(&c->notes);
    }
    free(c->world);
    free(c->heard);
    free(c);
}

static int m_world_rank(void *vctx, int r) { return ((mpi_ctx *)vctx)->world[r]; }

/* Receives the notices that have come, keeping each member's latest collective number; a tag is
 * read as the number nearest to seq with that residue (members are within a few collectives of
 * each other: none can be past a collective this rank has not finished by more than one). */
static void drain_notes(mpi_ctx *c, uint64_t seq) {
    for (;;) {
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->notes, &flag, &m, &st) != MPI_SUCCESS || !flag) return;
        MPI_Mrecv(NULL, 0, MPI_BYTE, &m, MPI_STATUS_IGNORE);
        int64_t d = ((int64_t)st.MPI_TAG - (int64_t)(seq % NOTE_TAGS) + NOTE_TAGS) % NOTE_TAGS;
        if (d >= NOTE_TAGS / 2) d -= NOTE_TAGS;
        uint64_t s = (uint64_t)((int64_t)seq + d);
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < c->size && s > c->heard[st.MPI_SOURCE]) c->heard[st.MPI_SOURCE] = s;
    }
}

static void m_arrive(void *vctx, uint64_t seq) {
    mpi_ctx *c = vctx;
    drain_notes(c, seq); /* also keeps old notices from piling up */
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        MPI_Request q;
        if (MPI_Isend(NULL, 0, MPI_BYTE, r, (int)(seq % NOTE_TAGS), c->notes, &q) == MPI_SUCCESS) MPI_Request_free(&q);
    }
}

static void m_arrivals(void *vctx, uint64_t seq, bool *arrived) {
    mpi_ctx *c = vctx;
    drain_notes(c, seq);
    for (int r = 0; r < c->size; r++) arrived[r] = r == c->rank || c->heard[r] >= seq;
}

static int m_fault(void *vctx, char *msg, size_t n) {
    (void)vctx;
    return hp__mpi_fault(msg, n);
}

static void m_report_fault(void *vctx, const char *msg) {
    (void)vctx;
    hp__mpi_report_fault(msg);
}

static hp_status wrap(MPI_Comm comm, hp_comm **out);

static hp_status m_split(void *vctx, int color, int key, hp_comm **out) {
    mpi_ctx *c = vctx;
    MPI_Comm nc;
    MPI_TRY(MPI_Comm_split(c->comm, color == HP_COMM_COLOR_NONE ? MPI_UNDEFINED : color, key, &nc),
            "MPI_Comm_split");
    *out = NULL;
    if (nc == MPI_COMM_NULL) return HP_STATUS_OK;
    return wrap(nc, out);
}

static const hp_comm_i mpi_iface = {
    /* .name           = */ "mpi",
    /* .all_reduce     = */ m_all_reduce,
    /* .all_gather     = */ m_all_gather,
    /* .reduce_scatter = */ m_reduce_scatter,
    /* .all_to_allv    = */ m_all_to_allv,
    /* .broadcast      = */ m_broadcast,
    /* .send           = */ m_send,
    /* .recv           = */ m_recv,
    /* .barrier        = */ m_barrier,
    /* .wait           = */ m_wait,
    /* .test           = */ m_test,
    /* .split          = */ m_split,
    /* .free           = */ m_free,
    /* .world_rank     = */ m_world_rank,
    /* .arrive         = */ m_arrive,
    /* .arrivals       = */ m_arrivals,
    /* .fault          = */ m_fault,
    /* .report_fault   = */ m_report_fault,
    /* .cancel         = */ m_cancel,
    /* .forget         = */ m_forget,
};

/* Wraps comm (owned from here on) with its notices' duplicate and the world ranks. Collective. */
static hp_status wrap(MPI_Comm comm, hp_comm **out) {
    int rank, size;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    mpi_ctx *c = calloc(1, sizeof *c);
    int *mine = malloc((size_t)size * sizeof *mine);
    if (c) {
        c->comm = comm;
        c->notes = MPI_COMM_NULL;
        c->rank = rank;
        c->size = size;
        c->world = malloc((size_t)size * sizeof *c->world);
        c->heard = calloc((size_t)size, sizeof *c->heard);
    }
    int rc = MPI_Comm_dup(comm, c ? &c->notes : &(MPI_Comm){MPI_COMM_NULL}); /* collective: every rank calls it */
    if (!c || !mine || !c->world || !c->heard || rc != MPI_SUCCESS) {
        free(mine);
        if (c) {
            if (c->notes != MPI_COMM_NULL) MPI_Comm_free(&c->notes);
            free(c->world);
            free(c->heard);
            free(c);
        }
        MPI_Comm_free(&comm);
        return rc != MPI_SUCCESS ? mpi_fail(rc, "MPI_Comm_dup")
                                 : hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate an MPI communicator of %d ranks", size);
    }
    MPI_Group g, wg;
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int r = 0; r < size; r++) mine[r] = r;
    if (MPI_Group_translate_ranks(g, size, mine, wg, c->world) != MPI_SUCCESS)
        for (int r = 0; r < size; r++) c->world[r] = r;
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(mine);
    *out = hp_comm_new(&mpi_iface, c, rank, size);
    return *out ? HP_STATUS_OK : HP_STATUS_OUT_OF_MEMORY;
}

hp_status hp_comm_mpi_init(int *argc, char ***argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        MPI_TRY(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
        g_we_initialised = true; /* hp_comm_mpi_finalize finalises it even after the error below */
        if (provided < MPI_THREAD_MULTIPLE)
            return hp_error(HP_STATUS_COMM,
                            "MPI provides thread level %d, not MPI_THREAD_MULTIPLE (%d): the runtime runs each "
                            "communicator group's collectives and the point-to-point transfers on queues of their own "
                            "threads; use an MPI built with thread support",
                            provided, MPI_THREAD_MULTIPLE);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (!g_bf16_ops_made) {
        MPI_TRY(MPI_Op_create(bf16_sum, 1, &g_bf16_ops[HP_REDUCE_SUM]), "MPI_Op_create");
        MPI_TRY(MPI_Op_create(bf16_max, 1, &g_bf16_ops[HP_REDUCE_MAX]), "MPI_Op_create");
        MPI_TRY(MPI_Op_create(bf16_min, 1, &g_bf16_ops[HP_REDUCE_MIN]), "MPI_Op_create");
        g_bf16_ops[HP_REDUCE_AVG] = g_bf16_ops[HP_REDUCE_SUM];
        g_bf16_ops_made = true;
    }
    return HP_STATUS_OK;
}

hp_status hp_comm_mpi_world(hp_comm **out) {
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return hp_error(HP_STATUS_INVALID_ARGUMENT, "MPI is not initialised: call hp_comm_mpi_init first");
    HP_CHECK(hp__mpi_fault_init());
    MPI_Comm dup;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    return wrap(dup, out);
}

hp_status hp_comm_mpi_finalize(void) {
    if (g_bf16_ops_made) {
        MPI_Op_free(&g_bf16_ops[HP_REDUCE_SUM]);
        MPI_Op_free(&g_bf16_ops[HP_REDUCE_MAX]);
        MPI_Op_free(&g_bf16_ops[HP_REDUCE_MIN]);
        g_bf16_ops_made = false;
    }
    hp__mpi_fault_fini();
    if (g_we_initialised) {
        g_we_initialised = false;
        MPI_TRY(MPI_Finalize(), "MPI_Finalize");
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) parked_release();
    return HP_STATUS_OK;
}

void hp_comm_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
