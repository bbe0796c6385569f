/* Public communicator wrappers: argument checks, AVG, in-place rules, requests. */
#include "comm/comm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hp_reduce_op_name(hp_reduce_op op) {
    switch (op) {
    case HP_REDUCE_SUM: return "sum";
    case HP_REDUCE_AVG: return "avg";
    case HP_REDUCE_MAX: return "max";
    case HP_REDUCE_MIN: return "min";
    default: return "?";
    }
}

hp_status hp_reduce_op_parse(const char *s, hp_reduce_op *out) {
    for (int i = 0; i < HP_REDUCE_COUNT; i++) {
        if (s && strcmp(s, hp_reduce_op_name((hp_reduce_op)i)) == 0) {
            *out = (hp_reduce_op)i;
            return HP_STATUS_OK;
        }
    }
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "unknown reduction op '%s' (expected sum, avg, max or min)",
                    s ? s : "(null)");
}

hp_comm *hp_comm_new(const hp_comm_i *iface, void *ctx, int rank, int size) {
    hp_comm *c = calloc(1, sizeof *c);
    if (!c) {
        if (iface && iface->free) iface->free(ctx);
        hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate a communicator");
        return NULL;
    }
    c->iface = iface;
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    c->timeout_s = HP_COMM_TIMEOUT_DEFAULT;
    c->family = hp__comm_family_new();
    if (!c->family) {
        hp_comm_free(c);
        hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate a communicator");
        return NULL;
    }
    return c;
}

int hp_comm_rank(const hp_comm *c) { return c->rank; }
int hp_comm_size(const hp_comm *c) { return c->size; }
const char *hp_comm_name(const hp_comm *c) { return c->iface->name; }

void hp_comm_free(hp_comm *c) {
    if (!c) return;
    hp__comm_abandoned_free(c, HP__COMM_FREE_GRACE_NS);
    if (c->iface->free) c->iface->free(c->ctx);
    hp__comm_family_unref(c->family);
    free(c);
}

hp_status hp_comm_split(hp_comm *c, int color, int key, hp_comm **out) {
    *out = NULL;
    if (color < 0 && color != HP_COMM_COLOR_NONE)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "split color %d is negative", color);
    HP_CHECK(c->iface->split(c->ctx, color, key, out));
    if (*out) { /* the new communicator joins c's family and takes its timeout */
        hp__comm_family_unref((*out)->family);
        (*out)->family = c->family;
        atomic_fetch_add(&c->family->refs, 1);
        (*out)->timeout_s = c->timeout_s;
    }
    return HP_STATUS_OK;
}

hp_status hp_comm_set_timeout(hp_comm *c, double seconds) {
    if (!(seconds >= 0 && seconds <= HP_COMM_TIMEOUT_MAX))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "communicator timeout %g s is not in [0, %g] seconds", seconds,
                        HP_COMM_TIMEOUT_MAX);
    c->timeout_s = seconds;
    return HP_STATUS_OK;
}

double hp_comm_timeout(const hp_comm *c) { return c->timeout_s; }

bool hp_comm_stalled(const hp_comm *c) { return atomic_load(&c->family->stalled) != 0; }

bool hp_comm_peer_failed(const hp_comm *c) { return atomic_load(&c->family->peer_failed) != 0; }

hp_status hp_comm_set_rank_names(hp_comm *c, int n, const char *const *names) {
    if (n < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank name count %d is negative", n);
    char **copy = n ? calloc((size_t)n, sizeof *copy) : NULL;
    if (n && !copy) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate %d rank names", n);
    for (int r = 0; r < n; r++) {
        if (!names[r]) continue;
        copy[r] = strdup(names[r]);
        if (!copy[r]) {
            for (int k = 0; k < r; k++) free(copy[k]);
            free(copy);
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot copy the name of rank %d", r);
        }
    }
    hp__comm_family *f = c->family;
    for (int r = 0; r < f->n_names; r++) free(f->names[r]);
    free(f->names);
    f->names = copy;
    f->n_names = n;
    return HP_STATUS_OK;
}

void hp_comm_report_failure(hp_comm *c, const char *msg) {
    if (!c || !c->iface->report_fault || atomic_load(&c->family->peer_failed)) return;
    c->iface->report_fault(c->ctx, msg ? msg : "");
}

void hp__comm_family_fail(hp__comm_family *f, const char *msg) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&f->stalled, &expect, 1)) {
        atomic_store(&f->peer_failed, 1);
        snprintf(f->msg, sizeof f->msg, "%s", msg);
        atomic_store(&f->stalled, 2);
    }
}

void hp_comm_release_abandoned(hp_comm *c) {
    if (c) hp__comm_abandoned_free(c, HP__COMM_RELEASE_GRACE_NS);
}

void hp_comm_give_up(hp_comm *c, const char *msg) {
    if (!c) return;
    char m[1024];
    snprintf(m, sizeof m, "this rank failed: %s", msg ? msg : "");
    hp__comm_family_fail(c->family, m);
}

/* ---------------------------------------------------------------- helpers */

void hp__reduce_apply(void *dst, const void *src, size_t n, hp_dtype dt, hp_reduce_op op) {
    switch (dt) {
    case HP_DTYPE_F32: {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = op == HP_REDUCE_MAX ? (s[i] > d[i] ? s[i] : d[i])
                 : op == HP_REDUCE_MIN ? (s[i] < d[i] ? s[i] : d[i])
                                       : d[i] + s[i];
        break;
    }
    case HP_DTYPE_I32: {
        int32_t *d = dst;
        const int32_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = op == HP_REDUCE_MAX ? (s[i] > d[i] ? s[i] : d[i])
                 : op == HP_REDUCE_MIN ? (s[i] < d[i] ? s[i] : d[i])
                                       : (int32_t)((uint32_t)d[i] + (uint32_t)s[i]);
        break;
    }
    case HP_DTYPE_BF16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) {
            float a = hp_bf16_to_f32(d[i]), b = hp_bf16_to_f32(s[i]);
            float r = op == HP_REDUCE_MAX ? (b > a ? b : a) : op == HP_REDUCE_MIN ? (b < a ? b : a) : a + b;
            d[i] = hp_f32_to_bf16(r);
        }
        break;
    }
    default: HP_ASSERT(0);
    }
}

static void divide(void *buf, size_t n, hp_dtype dt, int by) {
    if (dt == HP_DTYPE_F32) {
        float *x = buf;
        for (size_t i = 0; i < n; i++) x[i] /= (float)by;
    } else if (dt == HP_DTYPE_I32) {
        int32_t *x = buf;
        for (size_t i = 0; i < n; i++) x[i] /= by;
    } else {
        uint16_t *x = buf;
        for (size_t i = 0; i < n; i++) x[i] = hp_f32_to_bf16(hp_bf16_to_f32(x[i]) / (float)by);
    }
}

static hp_status check_dtype(hp_dtype dt) {
    if ((int)dt < 0 || dt >= HP_DTYPE_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid dtype %d for a collective", (int)dt);
    return HP_STATUS_OK;
}

static hp_status check_op(hp_reduce_op op) {
    if ((int)op < 0 || op >= HP_REDUCE_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid reduction op %d", (int)op);
    return HP_STATUS_OK;
}

static hp_status check_peer(const hp_comm *c, int peer, const char *what) {
    if (peer < 0 || peer >= c->size)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s %d is outside the communicator of %d ranks",
                        what, peer, c->size);
    return HP_STATUS_OK;
}

static bool overlap(const void *a, size_t na, const void *b, size_t nb) {
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

/* Prepares a request record (for non-blocking calls) or uses a stack one (blocking). */
static hp_status req_begin(hp_comm *c, hp_comm_request **req, hp_comm_request **r, hp_comm_request *stack,
                           hp__comm_op op, size_t bytes) {
    if (req) {
        *req = NULL;
        *r = calloc(1, sizeof **r);
        if (!*r) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate a request");
    } else {
        memset(stack, 0, sizeof *stack);
        *r = stack;
    }
    (*r)->comm = c;
    (*r)->op = op;
    (*r)->bytes = bytes;
    (*r)->peer = -1;
    if (op != HP__COMM_OP_SEND && op != HP__COMM_OP_RECV) (*r)->seq = ++c->n_coll;
    return HP_STATUS_OK;
}

void hp__comm_req_complete(hp_comm_request *r) {
    if (r->out) memcpy(r->out, (char *)r->tmp + r->out_off, r->out_bytes);
    if (r->avg_buf) divide(r->avg_buf, r->avg_count, r->avg_dt, r->comm->size);
    free(r->tmp);
    r->tmp = NULL;
}

static hp_status req_complete(hp_comm_request *r) {
    hp__comm_req_complete(r);
    return HP_STATUS_OK;
}

/* After the implementation call: blocking completes now; non-blocking hands the request out. */
static hp_status req_end(hp_status st, hp_comm_request **req, hp_comm_request *r) {
    if (st != HP_STATUS_OK) {
        free(r->tmp);
        if (req) free(r);
        return st;
    }
    if (!req) return req_complete(r);
    *req = r;
    return HP_STATUS_OK;
}

static void *dup_buf(const void *p, size_t bytes) {
    void *t = malloc(bytes ? bytes : 1);
    if (t) memcpy(t, p, bytes);
    else hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes for a collective", bytes);
    return t;
}

/* ---------------------------------------------------------------- collectives */

/*
 * A non-blocking collective of at most STAGE_BYTES (its send data and result together) runs on a
 * copy the request owns (r->tmp: the send data, then room for the result), copied out to the
 * caller's buffer at completion. One given up (a timeout, a rank's failure: comm_wait.c) may still
 * complete later, inside any MPI call or MPI_Finalize; it then writes into that copy, which
 * outlives it with the request (hp_comm_i.forget's keep), and not into the caller's buffer, which
 * is often a local variable long gone (hp_comm_agree's verdict, a step's loss). Larger buffers are
 * written where they are: a caller that gives one up keeps it until the job ends (hp/comm.h).
 */
#define STAGE_BYTES 65536

/* Stages r when send + recv bytes fit: *sb and *rb then point into r->tmp (the send data copied
 * from *sb; the result copied to the old *rb at completion). False on allocation failure (error set). */
static bool stage(hp_comm_request *r, const void **sb, size_t sbytes, void **rb, size_t rbytes) {
    if (sbytes + rbytes > STAGE_BYTES) return true;
    char *t = malloc(sbytes + rbytes ? sbytes + rbytes : 1);
    if (!t) {
        hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes for a collective", sbytes + rbytes);
        return false;
    }
    if (sbytes) memcpy(t, *sb, sbytes);
    free(r->tmp);
    r->tmp = t;
    r->out = *rb, r->out_off = sbytes, r->out_bytes = rbytes;
    *sb = t;
    *rb = t + sbytes;
    return true;
}

static hp_status all_reduce(hp_comm *c, const void *sb, void *rb, size_t count, hp_dtype dt,
                            hp_reduce_op op, hp_comm_request **req) {
    HP_CHECK(check_dtype(dt));
    HP_CHECK(check_op(op));
    hp_comm_request stack, *r;
    HP_CHECK(req_begin(c, req, &r, &stack, HP__COMM_OP_ALL_REDUCE, count * hp_dtype_size(dt)));
    size_t bytes = count * hp_dtype_size(dt);
    void *out = rb;
    bool in_place = sb == rb; /* kept in place on the copy: MPI picks its algorithm (and sum order) by it */
    if (req && !stage(r, &sb, in_place ? 0 : bytes, &rb, bytes)) return req_end(HP_STATUS_OUT_OF_MEMORY, req, r);
    if (in_place && r->out) memcpy(rb, out, bytes); /* sb == rb: both the copy */
    if (op == HP_REDUCE_AVG) {
        r->avg_buf = out; /* divided after the copy-out */
        r->avg_count = count;
        r->avg_dt = dt;
        op = HP_REDUCE_SUM;
    }
    return req_end(c->iface->all_reduce(c->ctx, sb, rb, count, dt, op, req ? &r->impl : NULL), req, r);
}

static hp_status all_gather(hp_comm *c, const void *sb, void *rb, size_t count, hp_dtype dt,
                            hp_comm_request **req) {
    HP_CHECK(check_dtype(dt));
    size_t es = hp_dtype_size(dt);
    hp_comm_request stack, *r;
    HP_CHECK(req_begin(c, req, &r, &stack, HP__COMM_OP_ALL_GATHER, count * es));
    if (req && !stage(r, &sb, count * es, &rb, count * es * (size_t)c->size)) return req_end(HP_STATUS_OUT_OF_MEMORY, req, r);
    if (!r->out && overlap(sb, count * es, rb, count * es * (size_t)c->size)) {
        r->tmp = dup_buf(sb, count * es);
        if (!r->tmp) return req_end(HP_STATUS_OUT_OF_MEMORY, req, r);
        sb = r->tmp;
    }
    return req_end(c->iface->all_gather(c->ctx, sb, rb, count, dt, req ? &r->impl : NULL), req, r);
}

static hp_status reduce_scatter(hp_comm *c, const void *sb, void *rb, size_t count, hp_dtype dt,
                                hp_reduce_op op, hp_comm_request **req) {
    HP_CHECK(check_dtype(dt));
    HP_CHECK(check_op(op));
    size_t es = hp_dtype_size(dt);
    hp_comm_request stack, *r;
    HP_CHECK(req_begin(c, req, &r, &stack, HP__COMM_OP_REDUCE_SCATTER, count * es));
    void *out = rb;
    if (req && !stage(r, &sb, count * es * (size_t)c->size, &rb, count * es)) return req_end(HP_STATUS_OUT_OF_MEMORY, req, r);
    if (!r->out && overlap(sb, count * es * (size_t)c->size, rb, count * es)) {
        r->tmp = dup_buf(sb, count * es * (size_t)c->size);
        if (!r->tmp) return req_end(HP_STATUS_OUT_OF_MEMORY, req, r);
        sb = r->tmp;
    }
    if (op == HP_REDUCE_AVG) {
        r->avg_buf = out;
        r->avg_count = count;
        r->avg_dt = dt;
        op = HP_REDUCE_SUM;
    }
    return req_end(c->iface->reduce_scatter(c->ctx, sb, rb, count, dt, op, req ? &r->impl : NULL),
                   req, r);
}

static hp_status all_to_allv(hp_comm *c, const void *sb, const size_t *sc, const size_t *sd,
                             void *rb, const size_t *rc, const size_t *rd, hp_dtype dt,
                             hp_comm_request **req) {
    HP_CHECK(check_dtype(dt));
    size_t es = hp_dtype_size(dt), send_end = 0, recv_end = 0, sent = 0;
    for (int i = 0; i < c->size; i++) {
        if (sc[i] && sd[i] + sc[i] > send_end) send_end = sd[i] + sc[i];
        if (rc[i] && rd[i] + rc[i] > recv_end) recv_end = rd[i] + rc[i];
        sent += sc[i];
    }
    if (overlap(sb, send_end * es, rb, recv_end * es))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "all_to_all send and receive buffers overlap");
    hp_comm_request stack, *r;
    HP_CHECK(req_begin(c, req, &r, &stack, HP__COMM_OP_ALL_TO_ALL, sent * es));
    return req_end(c->iface->all_to_allv(c->ctx, sb, sc, sd, rb, rc, rd, dt, req ? &r->impl : NULL),
                   req, r);
}

static hp_status all_to_all(hp_comm *c, const void *sb, void *rb, size_t count, hp_dtype dt,
                            hp_comm_request **req) {
    size_t n = (size_t)c->size;
    size_t *a = malloc(2 * n * sizeof *a);
    if (!a) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate all_to_all counts");
    for (size_t i = 0; i < n; i++) {
        a[i] = count;
        a[n + i] = i * count;
    }
    hp_status st = all_to_allv(c, sb, a, a + n, rb, a, a + n, dt, req);
    free(a);
    return st;
}

static hp_status broadcast(hp_comm *c, void *buf, size_t count, hp_dtype dt, int root,
                           hp_comm_request **req) {
    HP_CHECK(check_dtype(dt));
    HP_CHECK(check_peer(c, root, "broadcast root"));
    hp_comm_request stack, *r;
    HP_CHECK(req_begin(c, req, &r, &stack, HP__COMM_OP_BROADCAST, count * hp_dtype_size(dt)));
    r->peer = root;
    size_t bytes = count * hp_dtype_size(dt);
    const void *in = buf; /* the root's data; a copy of what the others' buffers hold, overwritten */
    void *b = buf;
    if (req && bytes <= STAGE_BYTES) { /* one buffer: staged with no separate send part */
        if (!stage(r, &in, 0, &b, bytes)) return req_end(HP_STATUS_OUT_OF_MEMORY, req, r);
        memcpy(b, buf, bytes);
    }
    return req_end(c->iface->broadcast(c->ctx, b, count, dt, root, req ? &r->impl : NULL), req, r);
}

static hp_status p2p(hp_comm *c, bool is_send, void *buf, size_t count, hp_dtype dt, int peer,
                     int tag, hp_comm_request **req) {
    HP_CHECK(check_dtype(dt));
    HP_CHECK(check_peer(c, peer, is_send ? "send destination" : "recv source"));
    if (tag < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "message tag %d is negative", tag);
    hp_comm_request stack, *r;
    HP_CHECK(req_begin(c, req, &r, &stack, is_send ? HP__COMM_OP_SEND : HP__COMM_OP_RECV, count * hp_dtype_size(dt)));
    r->peer = peer;
    r->tag = tag;
    void **impl = req ? &r->impl : NULL;
    hp_status st = is_send ? c->iface->send(c->ctx, buf, count, dt, peer, tag, impl)
                           : c->iface->recv(c->ctx, buf, count, dt, peer, tag, impl);
    return req_end(st, req, r);
}

static hp_status barrier(hp_comm *c, hp_comm_request **req) {
    hp_comm_request stack, *r;
    HP_CHECK(req_begin(c, req, &r, &stack, HP__COMM_OP_BARRIER, 0));
    return req_end(c->iface->barrier(c->ctx, req ? &r->impl : NULL), req, r);
}

/* ---------------------------------------------------------------- public entry points */

/* A blocking call is started non-blocking, then completed by the wait loop (comm_wait.c: spin,
 * then sleep; the communicator's timeout). A communicator of one rank waits for no peer: its
 * implementation's blocking call reports a receive that nothing was sent to at once. */
static hp_status start_wait(hp_status started, hp_comm_request **r) {
    HP_CHECK(started);
    return *r ? hp_comm_wait(*r) : HP_STATUS_OK; /* *r read after the call that set it */
}
#define BLOCKING(c, call_req, call_noreq) ((c)->size == 1 ? (call_noreq) : start_wait((call_req), &r))

hp_status hp_comm_all_reduce(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt, hp_reduce_op op) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, all_reduce(c, sb, rb, n, dt, op, &r), all_reduce(c, sb, rb, n, dt, op, NULL));
}
hp_status hp_comm_agree(hp_comm *c, hp_status st, const char *what) {
    int me = hp_comm_rank(c), n = hp_comm_size(c);
    int key = st != HP_STATUS_OK ? n - me : 0, worst = 0; /* MAX of n - rank: the lowest failed rank */
    hp_status ast = hp_comm_all_reduce(c, &key, &worst, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (st != HP_STATUS_OK) return st;
    if (ast != HP_STATUS_OK) return ast;
    if (worst > 0)
        return hp_error(HP_STATUS_COMM, "%s: rank %d of the communicator failed (its own error says why); rank %d "
                        "succeeded", what, n - worst, me);
    return HP_STATUS_OK;
}
hp_status hp_comm_all_gather(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, all_gather(c, sb, rb, n, dt, &r), all_gather(c, sb, rb, n, dt, NULL));
}
hp_status hp_comm_reduce_scatter(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt,
                                 hp_reduce_op op) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, reduce_scatter(c, sb, rb, n, dt, op, &r), reduce_scatter(c, sb, rb, n, dt, op, NULL));
}
hp_status hp_comm_all_to_all(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, all_to_all(c, sb, rb, n, dt, &r), all_to_all(c, sb, rb, n, dt, NULL));
}
hp_status hp_comm_all_to_allv(hp_comm *c, const void *sb, const size_t *sc, const size_t *sd, void *rb,
                              const size_t *rc, const size_t *rd, hp_dtype dt) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, all_to_allv(c, sb, sc, sd, rb, rc, rd, dt, &r), all_to_allv(c, sb, sc, sd, rb, rc, rd, dt, NULL));
}
hp_status hp_comm_broadcast(hp_comm *c, void *buf, size_t n, hp_dtype dt, int root) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, broadcast(c, buf, n, dt, root, &r), broadcast(c, buf, n, dt, root, NULL));
}
hp_status hp_comm_send(hp_comm *c, const void *buf, size_t n, hp_dtype dt, int peer, int tag) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, p2p(c, true, (void *)buf, n, dt, peer, tag, &r), p2p(c, true, (void *)buf, n, dt, peer, tag, NULL));
}
hp_status hp_comm_recv(hp_comm *c, void *buf, size_t n, hp_dtype dt, int peer, int tag) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, p2p(c, false, buf, n, dt, peer, tag, &r), p2p(c, false, buf, n, dt, peer, tag, NULL));
}
hp_status hp_comm_barrier(hp_comm *c) {
    hp_comm_request *r = NULL;
    return BLOCKING(c, barrier(c, &r), barrier(c, NULL));
}

hp_status hp_comm_iall_reduce(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt,
                              hp_reduce_op op, hp_comm_request **req) {
    return all_reduce(c, sb, rb, n, dt, op, req);
}
hp_status hp_comm_iall_gather(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt,
                              hp_comm_request **req) {
    return all_gather(c, sb, rb, n, dt, req);
}
hp_status hp_comm_ireduce_scatter(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt,
                                  hp_reduce_op op, hp_comm_request **req) {
    return reduce_scatter(c, sb, rb, n, dt, op, req);
}
hp_status hp_comm_iall_to_all(hp_comm *c, const void *sb, void *rb, size_t n, hp_dtype dt,
                              hp_comm_request **req) {
    return all_to_all(c, sb, rb, n, dt, req);
}
hp_status hp_comm_iall_to_allv(hp_comm *c, const void *sb, const size_t *sc, const size_t *sd, void *rb,
                               const size_t *rc, const size_t *rd, hp_dtype dt, hp_comm_request **req) {
    return all_to_allv(c, sb, sc, sd, rb, rc, rd, dt, req);
}
hp_status hp_comm_ibroadcast(hp_comm *c, void *buf, size_t n, hp_dtype dt, int root,
                             hp_comm_request **req) {
    return broadcast(c, buf, n, dt, root, req);
}
hp_status hp_comm_isend(hp_comm *c, const void *buf, size_t n, hp_dtype dt, int peer, int tag,
                        hp_comm_request **req) {
    return p2p(c, true, (void *)buf, n, dt, peer, tag, req);
}
hp_status hp_comm_irecv(hp_comm *c, void *buf, size_t n, hp_dtype dt, int peer, int tag,
                        hp_comm_request **req) {
    return p2p(c, false, buf, n, dt, peer, tag, req);
}
hp_status hp_comm_ibarrier(hp_comm *c, hp_comm_request **req) { return barrier(c, req); }

/* ---------------------------------------------------------------- waiting */

hp_status hp_comm_wait(hp_comm_request *r) {
    if (!r) return HP_STATUS_OK;
    if (r->impl && r->comm->size > 1) return hp__comm_poll_wait(r);
    hp_status st = HP_STATUS_OK; /* one rank: the implementation's own wait (no peer to time out) */
    if (r->impl) st = r->comm->iface->wait(r->comm->ctx, r->impl);
    if (st == HP_STATUS_OK) req_complete(r);
    free(r->tmp);
    free(r);
    return st;
}

hp_status hp_comm_wait_all(int n, hp_comm_request **reqs) {
    hp_status first = HP_STATUS_OK;
    for (int i = 0; i < n; i++) {
        hp_status st = hp_comm_wait(reqs[i]);
        reqs[i] = NULL;
        if (st != HP_STATUS_OK && first == HP_STATUS_OK) first = st;
    }
    return first;
}

hp_status hp_comm_test(hp_comm_request *r, bool *done) {
    *done = true;
    if (!r) return HP_STATUS_OK;
    if (r->impl) {
        hp_status st = r->comm->iface->test(r->comm->ctx, r->impl, done);
        if (st != HP_STATUS_OK) {
            free(r->tmp);
            free(r);
            *done = true;
            return st;
        }
        if (!*done) return HP_STATUS_OK;
    }
    req_complete(r);
    free(r);
    return HP_STATUS_OK;
}
