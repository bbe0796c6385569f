/*
 * How a thread waits for a transfer (hp/comm.h: hp_comm_set_thread_wait, hp_comm_set_timeout):
 * a hot phase (tests in a tight loop, tests with sched_yield, or short sleeps) while a prompt peer
 * is expected, then sleeps that grow with the time waited up to 1 ms, so a rank waiting for a
 * stopped peer uses a small fraction of a core; after the communicator's timeout, the error names
 * the operation, the group and the ranks that did not arrive.
 *
 * Who did not arrive: a rank that has waited in collective number k of a communicator for a while
 * (the notice delay, min(timeout / 8, 1 s)) announces it to the other members (hp_comm_i.arrive;
 * the MPI communicator sends zero-byte messages on a duplicate communicator). When the timeout
 * passes, the waiting rank waits the notice delay and a little more for the others' notices, then
 * asks which members announced collective k or later (hp_comm_i.arrivals): the rest did not
 * arrive. A collective that completes within the notice delay costs nothing of this. Point-to-point
 * transfers name their peer.
 */
#include "comm/comm_internal.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The hot phase: a peer that arrives within it is met at full speed, as a blocking call would. */
#define HOT_NS 2000000LL
/* After the hot phase a sleep is waited/16 (bounding the delay it adds to a late completion to
 * about 6%), between these. */
#define SLEEP_MIN_NS 2000LL
#define SLEEP_MAX_NS 1000000LL
/* A wait asks whether a rank of the job failed or is gone this often (hp_comm_i.fault). */
#define FAULT_EVERY_NS 10000000LL
/* Notices travel this long at most before a timeout's report counts them. */
#define NOTICE_SLACK_NS 250000000LL

static _Thread_local hp_comm_wait_mode tl_wait = HP_COMM_WAIT_BLOCK;

void hp_comm_set_thread_wait(hp_comm_wait_mode m) { tl_wait = m; }
hp_comm_wait_mode hp_comm_thread_wait(void) { return tl_wait; }

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(long long ns) { nanosleep(&(struct timespec){(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)}, NULL); }

hp__comm_family *hp__comm_family_new(void) {
    hp__comm_family *f = calloc(1, sizeof *f);
    if (f) atomic_init(&f->refs, 1);
    return f;
}

void hp__comm_family_unref(hp__comm_family *f) {
    if (f && atomic_fetch_sub(&f->refs, 1) == 1) {
        for (int r = 0; r < f->n_names; r++) free(f->names[r]);
        free(f->names);
        free(f);
    }
}

const char *hp__comm_rank_label(const hp__comm_family *f, int world_rank, char *buf, size_t n) {
    buf[0] = '\0';
    if (world_rank >= 0 && world_rank < f->n_names && f->names[world_rank])
        snprintf(buf, n, " (%s)", f->names[world_rank]);
    return buf;
}

static const char *op_name(hp__comm_op op) {
    static const char *const names[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                        "broadcast",  "barrier",    "send",           "recv"};
    return names[op];
}

/* Appends to buf (capacity n, NUL-terminated) without overflowing. */
static void add(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

/* The world rank of member r, or r itself when the implementation does not say. */
static int world_of(const hp_comm *c, int r) { return c->iface->world_rank ? c->iface->world_rank(c->ctx, r) : r; }

/* Appends the ranks r with pick[r] (all when pick is NULL) as runs ("0-3, 6"), in world numbering
 * when `world`. */
static void add_ranks(char *buf, size_t n, const hp_comm *c, const bool *pick, bool world) {
    bool first = true;
    for (int r = 0; r < c->size;) {
        if (pick && !pick[r]) {
            r++;
            continue;
        }
        int lo = world ? world_of(c, r) : r, e = r;
        while (e + 1 < c->size && (!pick || pick[e + 1]) && (world ? world_of(c, e + 1) : e + 1) == lo + (e + 1 - r)) e++;
        int hi = lo + (e - r);
        if (lo == hi) add(buf, n, "%s%d", first ? "" : ", ", lo);
        else add(buf, n, "%s%d-%d", first ? "" : ", ", lo, hi);
        first = false;
        r = e + 1;
    }
}

/* "all-reduce of 4096 bytes (collective #12 on this group)", "recv of 64 bytes from rank 1 (world
 * rank 1), tag 3" */
static void describe(char *buf, size_t n, const hp_comm_request *r) {
    const hp_comm *c = r->comm;
    buf[0] = '\0';
    add(buf, n, "%s", op_name(r->op));
    if (r->op == HP__COMM_OP_BARRIER) add(buf, n, " (collective #%llu on this group)", (unsigned long long)r->seq);
    else if (r->op == HP__COMM_OP_SEND || r->op == HP__COMM_OP_RECV)
        add(buf, n, " of %zu bytes %s rank %d (world rank %d), tag %d", r->bytes, r->op == HP__COMM_OP_SEND ? "to" : "from",
            r->peer, world_of(c, r->peer), r->tag);
    else {
        add(buf, n, " of %zu bytes", r->bytes);
        if (r->op == HP__COMM_OP_BROADCAST) add(buf, n, " from root rank %d", r->peer);
        add(buf, n, " (collective #%llu on this group)", (unsigned long long)r->seq);
    }
}

/* "group of 2 ranks (world ranks 0-1), this is rank 0 (world rank 0)" */
static void add_group(char *buf, size_t n, const hp_comm *c) {
    add(buf, n, "group of %d rank%s (world rank%s ", c->size, c->size == 1 ? "" : "s", c->size == 1 ? "" : "s");
    add_ranks(buf, n, c, NULL, true);
    add(buf, n, "), this is rank %d (world rank %d)", c->rank, world_of(c, c->rank));
}

/* Keeps r (its buffers may still be written) until hp_comm_free. */
static void abandon(hp_comm_request *r) {
    hp_comm *c = r->comm;
    r->next = c->abandoned;
    c->abandoned = r;
}

/* Tests each request of *list once; frees the completed ones (and any the implementation failed),
 * keeping the rest on the list. */
static void test_list(hp_comm *c, hp_comm_request **list) {
    for (hp_comm_request **p = list; *p;) {
        hp_comm_request *r = *p;
        bool done = false;
        hp_status st = c->iface->test(c->ctx, r->impl, &done); /* releases impl when done or failed */
        if (st != HP_STATUS_OK || done) {
            *p = r->next;
            free(r->tmp);
            free(r);
        } else {
            p = &r->next;
        }
    }
}

void hp__comm_abandoned_free(hp_comm *c, long long grace_ns) {
    hp_comm_request *pending = c->abandoned;
    c->abandoned = NULL;
    if (!pending) return;
    test_list(c, &pending);
    /* A receive is cancelled: its buffer is not written once it has completed (cancelled, or
     * matched just before). */
    if (c->iface->cancel)
        for (hp_comm_request *r = pending; r; r = r->next)
            if (r->op == HP__COMM_OP_RECV) c->iface->cancel(c->ctx, r->impl);
    /* Sends and collectives cannot be cancelled: a member that stops after a peer's failure
     * usually reaches them within milliseconds (a member that gave a collective up has sent its
     * part), so they are tested a while before the rest is handed to the implementation. */
    long long grace = grace_ns, t0 = now_ns(), sleep = SLEEP_MIN_NS;
    if (c->timeout_s > 0 && c->timeout_s * 1e9 < (double)grace) grace = (long long)(c->timeout_s * 1e9);
    for (;;) {
        test_list(c, &pending);
        if (!pending || now_ns() - t0 >= grace) break;
        sleep_ns(sleep);
        if (sleep < SLEEP_MAX_NS) sleep *= 2;
    }
    while (pending) {
        hp_comm_request *r = pending;
        pending = r->next;
        if (c->iface->forget) { /* it keeps the operation (and its send copy) until it can no longer run */
            c->iface->forget(c->ctx, r->impl, r->tmp);
            free(r);
        } /* else leaked on purpose: the implementation may still read or write its buffers */
    }
}

/* "; world rank 3 is rank 1 of group 'stage1'" for the peer of a send or recv, or for every member
 * of the group when it has labels (hp_comm_set_rank_names): which groups a stall is between. */
static void add_labels(char *msg, size_t n, const hp_comm_request *r) {
    const hp_comm *c = r->comm;
    const hp__comm_family *f = c->family;
    if (!f->n_names) return;
    bool p2p = r->op == HP__COMM_OP_SEND || r->op == HP__COMM_OP_RECV;
    for (int k = 0; k < c->size; k++) {
        if (p2p && k != r->peer) continue;
        int w = world_of(c, k);
        if (w >= 0 && w < f->n_names && f->names[w]) add(msg, n, "; world rank %d is %s", w, f->names[w]);
    }
}

/* The timeout's error: the operation, how long, the group, who did not arrive. */
static hp_status timed_out(hp_comm_request *r, long long waited) {
    hp_comm *c = r->comm;
    char msg[1024], what[256];
    describe(what, sizeof what, r);
    msg[0] = '\0';
    add(msg, sizeof msg, "%s did not complete within the communicator's timeout of %g s (waited %.1f s); ", what,
        c->timeout_s, (double)waited * 1e-9);
    add_group(msg, sizeof msg, c);
    if (r->op == HP__COMM_OP_SEND || r->op == HP__COMM_OP_RECV) {
        add(msg, sizeof msg, "; rank %d (world rank %d) did not %s it", r->peer, world_of(c, r->peer),
            r->op == HP__COMM_OP_SEND ? "receive" : "send");
    } else if (!c->iface->arrivals) {
        add(msg, sizeof msg, "; which ranks did not arrive is unknown (the %s communicator does not report arrivals)",
            c->iface->name);
    } else {
        bool *here = calloc((size_t)c->size, sizeof *here), *missing = calloc((size_t)c->size, sizeof *missing);
        if (here && missing) {
            c->iface->arrivals(c->ctx, r->seq, here);
            int n = 0;
            for (int k = 0; k < c->size; k++) n += missing[k] = !here[k] && k != c->rank;
            if (n == 0) {
                add(msg, sizeof msg, "; every rank arrived, yet it did not complete (a rank stopped inside it, or the "
                    "network failed)");
            } else {
                add(msg, sizeof msg, "; did not arrive: rank%s ", n == 1 ? "" : "s");
                add_ranks(msg, sizeof msg, c, missing, false);
                add(msg, sizeof msg, " (world rank%s ", n == 1 ? "" : "s");
                add_ranks(msg, sizeof msg, c, missing, true);
                add(msg, sizeof msg, ")");
            }
        }
        free(here);
        free(missing);
    }
    hp__comm_family *f = c->family;
    add_labels(msg, sizeof msg, r);
    int expect = 0;
    if (atomic_compare_exchange_strong(&f->stalled, &expect, 1)) {
        snprintf(f->msg, sizeof f->msg, "%s", msg);
        atomic_store(&f->stalled, 2);
    }
    abandon(r);
    return hp_error(HP_STATUS_TIMEOUT, "%s", msg);
}

/* A wait given up because another transfer of the family timed out first, or a rank failed. */
static hp_status gave_up(hp_comm_request *r) {
    hp_comm *c = r->comm;
    char what[256];
    describe(what, sizeof what, r);
    abandon(r);
    bool ready = atomic_load(&c->family->stalled) == 2;
    if (atomic_load(&c->family->peer_failed))
        return hp_error(HP_STATUS_COMM, "%s abandoned: %s", what, ready ? c->family->msg : "a rank of the job failed");
    if (ready) return hp_error(HP_STATUS_TIMEOUT, "%s abandoned: an earlier transfer timed out: %s", what, c->family->msg);
    return hp_error(HP_STATUS_TIMEOUT, "%s abandoned: an earlier transfer timed out", what);
}

/* A wait given up because world rank `who` failed or is gone (hp_comm_i.fault said `how`). */
static hp_status peer_fault(hp_comm_request *r, int who, const char *how) {
    hp_comm *c = r->comm;
    hp__comm_family *f = c->family;
    char what[256], label[160], msg[1024];
    describe(what, sizeof what, r);
    msg[0] = '\0';
    add(msg, sizeof msg, "world rank %d%s %s", who, hp__comm_rank_label(f, who, label, sizeof label), how);
    hp__comm_family_fail(f, msg);
    char group[256] = "";
    add_group(group, sizeof group, c);
    abandon(r);
    return hp_error(HP_STATUS_COMM, "%s abandoned: %s; %s", what, msg, group);
}

hp_status hp__comm_poll_wait(hp_comm_request *r) {
    hp_comm *c = r->comm;
    hp_comm_wait_mode mode = tl_wait;
    long long t0 = 0, sleep = SLEEP_MIN_NS, notice = -1, deadline = -1, next_fault = HOT_NS;
    bool announced = false;
    for (long long spins = 0;; spins++) {
        bool done = false;
        hp_status st = c->iface->test(c->ctx, r->impl, &done); /* releases impl when done */
        if (st != HP_STATUS_OK || done) {
            if (st == HP_STATUS_OK) hp__comm_req_complete(r);
            free(r->tmp);
            free(r);
            return st;
        }
        if (spins == 0) { /* not complete at once: from here on the clock matters */
            t0 = now_ns();
            if (c->timeout_s > 0) {
                long long to = (long long)(c->timeout_s * 1e9);
                notice = to / 8 < 1000000000LL ? to / 8 : 1000000000LL;
                bool ask = r->seq && c->iface->arrivals;
                deadline = to + (ask ? notice + NOTICE_SLACK_NS : 0);
            }
            continue;
        }
        long long waited = now_ns() - t0;
        if (waited < HOT_NS) {
            if (mode == HP_COMM_WAIT_YIELD) sched_yield();
            else if (mode == HP_COMM_WAIT_SLEEP) {
                sleep_ns(sleep);
                if (sleep < 256000) sleep *= 2;
            }
            continue;
        }
        if (atomic_load_explicit(&c->family->stalled, memory_order_relaxed)) return gave_up(r);
        if (c->iface->fault && waited >= next_fault) { /* a rank of the job failed or is gone */
            char how[1024];
            int who = c->iface->fault(c->ctx, how, sizeof how);
            if (who >= 0) return peer_fault(r, who, how);
            next_fault = waited + FAULT_EVERY_NS;
        }
        if (notice >= 0) {
            if (!announced && r->seq && waited >= notice && c->iface->arrive) {
                c->iface->arrive(c->ctx, r->seq);
                announced = true;
            }
            if (waited >= deadline) return timed_out(r, waited);
        }
        long long s = waited / 16;
        if (s < sleep) s = sleep;
        if (s > SLEEP_MAX_NS) s = SLEEP_MAX_NS;
        sleep_ns(s);
    }
}
