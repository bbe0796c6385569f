/*
 * The timeline recorder (hp/trace.h): per-track preallocated span buffers filled without locks, an
 * intern table for names, clock alignment over a communicator, and the Chrome trace-event writer
 * (one cJSON object per span printed into a reused buffer, so writing needs no tree of the whole
 * trace).
 */
#include "hp/trace.h"

#include "hp/comm.h"
#include "hp/ir.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TRACKS 64
#define DEFAULT_CAPACITY ((size_t)1 << 18)
#define SYNC_ROUNDS 16  /* ping-pongs per rank when aligning clocks */
#define TAG_SYNC 0x7ac0 /* message tags of hp_trace_sync and hp_trace_write */
#define TAG_LEN 0x7ac1
#define TAG_TEXT 0x7ac2

typedef struct span_rec {
    double t0, t1;
    hp_trace_span s;
} span_rec;

typedef struct track {
    char name[64];
    int sort;
    span_rec *ev;
    size_t cap;
    _Atomic size_t n;         /* slots reserved (may exceed cap: those spans were dropped) */
} track;

struct hp_trace {
    int rank;
    size_t capacity;
    pthread_mutex_t mu;       /* guards tracks[] growth and the intern table */
    track *tracks[MAX_TRACKS];
    _Atomic int n_tracks;
    _Atomic int64_t step;
    char **str;               /* interned strings by id */
    int32_t n_str, cap_str;
    int32_t *hash;            /* open addressing: id + 1, 0 empty; hash_cap a power of two */
    int32_t hash_cap;
    double origin;            /* local seconds of the common origin */
    double offset;            /* seconds to add to local times to get rank 0's clock */
};

const char *hp_trace_kind_name(hp_trace_kind k) {
    static const char *names[] = {"compute", "comm", "p2p", "copy", "wait", "step"};
    return (int)k >= 0 && k < HP_TRACE_KIND_COUNT ? names[k] : "?";
}

const char *hp_trace_phase_name(hp_trace_phase p) {
    static const char *names[] = {"", "F", "B", "W", "opt"};
    return (int)p >= 0 && p < HP_TRACE_PHASE_COUNT ? names[p] : "?";
}

hp_status hp_trace_new(const hp_trace_opts *opts, hp_trace **out) {
    *out = NULL;
    hp_trace_opts o = opts ? *opts : HP_TRACE_OPTS_DEFAULT;
    if (o.rank < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_trace_new: rank %d is negative", o.rank);
    hp_trace *tr = calloc(1, sizeof *tr);
    if (!tr) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_trace_new: out of memory");
    tr->rank = o.rank;
    tr->capacity = o.capacity ? o.capacity : DEFAULT_CAPACITY;
    pthread_mutex_init(&tr->mu, NULL);
    atomic_init(&tr->n_tracks, 0);
    atomic_init(&tr->step, -1);
    tr->origin = hp_now_seconds();
    *out = tr;
    return HP_STATUS_OK;
}

void hp_trace_free(hp_trace *tr) {
    if (!tr) return;
    for (int k = 0; k < MAX_TRACKS; k++) {
        if (!tr->tracks[k]) continue;
        free(tr->tracks[k]->ev);
        free(tr->tracks[k]);
    }
    for (int32_t i = 0; i < tr->n_str; i++) free(tr->str[i]);
    free(tr->str);
    free(tr->hash);
    pthread_mutex_destroy(&tr->mu);
    free(tr);
}

hp_status hp_trace_track(hp_trace *tr, const char *name, int sort, int *out) {
    *out = -1;
    pthread_mutex_lock(&tr->mu);
    int n = atomic_load(&tr->n_tracks);
    for (int k = 0; k < n; k++)
        if (!strncmp(tr->tracks[k]->name, name, sizeof tr->tracks[k]->name - 1)) {
            pthread_mutex_unlock(&tr->mu);
            *out = k;
            return HP_STATUS_OK;
        }
    hp_status st = HP_STATUS_OK;
    if (n == MAX_TRACKS) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_trace_track: more than %d tracks (adding '%s')", MAX_TRACKS, name);
        goto done;
    }
    track *t = calloc(1, sizeof *t);
    if (t) t->ev = malloc(tr->capacity * sizeof *t->ev);
    if (!t || !t->ev) {
        if (t) free(t);
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_trace_track: %zu spans for track '%s'", tr->capacity, name);
        goto done;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    t->sort = sort;
    t->cap = tr->capacity;
    atomic_init(&t->n, 0);
    tr->tracks[n] = t;
    atomic_store(&tr->n_tracks, n + 1);
    *out = n;
done:
    pthread_mutex_unlock(&tr->mu);
    return st;
}

static uint32_t str_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Rebuilds the hash table with room for twice the strings (caller holds the lock). */
static bool rehash(hp_trace *tr) {
    int32_t cap = tr->hash_cap ? tr->hash_cap * 2 : 256;
    int32_t *h = calloc((size_t)cap, sizeof *h);
    if (!h) return false;
    for (int32_t i = 0; i < tr->n_str; i++) {
        uint32_t k = str_hash(tr->str[i]) & (uint32_t)(cap - 1);
        while (h[k]) k = (k + 1) & (uint32_t)(cap - 1);
        h[k] = i + 1;
    }
    free(tr->hash);
    tr->hash = h;
    tr->hash_cap = cap;
    return true;
}

int32_t hp_trace_intern(hp_trace *tr, const char *s) {
    if (!tr || !s) return -1;
    int32_t id = -1;
    pthread_mutex_lock(&tr->mu);
    if ((tr->n_str + 1) * 2 > tr->hash_cap && !rehash(tr)) goto done;
    uint32_t k = str_hash(s) & (uint32_t)(tr->hash_cap - 1);
    for (; tr->hash[k]; k = (k + 1) & (uint32_t)(tr->hash_cap - 1))
        if (!strcmp(tr->str[tr->hash[k] - 1], s)) {
            id = tr->hash[k] - 1;
            goto done;
        }
    if (tr->n_str == tr->cap_str) {
        int32_t cap = tr->cap_str ? tr->cap_str * 2 : 256;
        char **p = realloc(tr->str, (size_t)cap * sizeof *p);
        if (!p) goto done;
        tr->str = p;
        tr->cap_str = cap;
    }
    char *copy = strdup(s);
    if (!copy) goto done;
    id = tr->n_str++;
    tr->str[id] = copy;
    tr->hash[k] = id + 1;
done:
    pthread_mutex_unlock(&tr->mu);
    return id;
}

double hp_trace_begin(const hp_trace *tr) { return tr ? hp_now_seconds() : 0.0; }

void hp_trace_record(hp_trace *tr, int track_id, double t0, double t1, const hp_trace_span *span) {
    if (!tr || track_id < 0 || track_id >= atomic_load_explicit(&tr->n_tracks, memory_order_acquire)) return;
    track *t = tr->tracks[track_id];
    size_t k = atomic_fetch_add_explicit(&t->n, 1, memory_order_relaxed);
    if (k >= t->cap) return; /* full: counted as dropped (n - cap) */
    span_rec *r = &t->ev[k];
    r->t0 = t0;
    r->t1 = t1 < t0 ? t0 : t1;
    r->s = *span;
    if (r->s.step < 0) r->s.step = (int32_t)atomic_load_explicit(&tr->step, memory_order_relaxed);
}

void hp_trace_end(hp_trace *tr, int track_id, double t0, const hp_trace_span *span) {
    if (tr) hp_trace_record(tr, track_id, t0, hp_now_seconds(), span);
}

void hp_trace_set_step(hp_trace *tr, int64_t step) {
    if (tr) atomic_store_explicit(&tr->step, step, memory_order_relaxed);
}

int hp_trace_rank(const hp_trace *tr) { return tr->rank; }

static size_t kept(const track *t) {
    size_t n = atomic_load(&t->n);
    return n < t->cap ? n : t->cap;
}

uint64_t hp_trace_count(const hp_trace *tr) {
    uint64_t c = 0;
    for (int k = 0; k < atomic_load(&tr->n_tracks); k++) c += kept(tr->tracks[k]);
    return c;
}

uint64_t hp_trace_dropped(const hp_trace *tr) {
    uint64_t c = 0;
    for (int k = 0; k < atomic_load(&tr->n_tracks); k++) c += atomic_load(&tr->tracks[k]->n) - kept(tr->tracks[k]);
    return c;
}

/* ---------------------------------------------------------------- clocks */

/* A double as two I32 elements (the communicators move i32 and f32 only). */
static hp_status send_f64(hp_comm *c, double v, int peer, int tag) { return hp_comm_send(c, &v, 2, HP_DTYPE_I32, peer, tag); }
static hp_status recv_f64(hp_comm *c, double *v, int peer, int tag) { return hp_comm_recv(c, v, 2, HP_DTYPE_I32, peer, tag); }

hp_status hp_trace_sync(hp_trace *tr, hp_comm *comm) {
    tr->offset = 0;
    if (!comm || hp_comm_size(comm) == 1) {
        tr->origin = hp_now_seconds();
        return HP_STATUS_OK;
    }
    int me = hp_comm_rank(comm), n = hp_comm_size(comm);
    HP_CHECK(hp_comm_barrier(comm));
    /* Rank 0 answers each rank in turn; a rank keeps the round trip with the least delay. */
    for (int r = 1; r < n; r++) {
        if (me != 0 && me != r) continue;
        double best = INFINITY;
        for (int k = 0; k < SYNC_ROUNDS; k++) {
            if (me == 0) {
                double ping;
                HP_CHECK(recv_f64(comm, &ping, r, TAG_SYNC));
                HP_CHECK(send_f64(comm, hp_now_seconds(), r, TAG_SYNC));
            } else {
                double t1 = hp_now_seconds(), t_root;
                HP_CHECK(send_f64(comm, t1, 0, TAG_SYNC));
                HP_CHECK(recv_f64(comm, &t_root, 0, TAG_SYNC));
                double t2 = hp_now_seconds();
                if (t2 - t1 < best) {
                    best = t2 - t1;
                    tr->offset = t_root - 0.5 * (t1 + t2);
                }
            }
        }
    }
    HP_CHECK(hp_comm_barrier(comm));
    double origin = hp_now_seconds(); /* rank 0's clock is the common one */
    HP_CHECK(hp_comm_broadcast(comm, &origin, 2, HP_DTYPE_I32, 0));
    tr->origin = origin - tr->offset; /* on this rank's clock */
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- writing */

/* A growing text buffer. */
typedef struct text {
    char *p;
    size_t n, cap;
    bool oom;
} text;

static void put(text *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

/* Appends `o` (then deletes it), preceded by a separator unless it is the first event. */
static void put_json(text *b, cJSON *o, char *scratch, size_t scratch_n) {
    if (!o) {
        b->oom = true;
        return;
    }
    if (b->n) put(b, ",\n", 2);
    if (cJSON_PrintPreallocated(o, scratch, (int)scratch_n, false)) {
        put(b, scratch, strlen(scratch));
    } else {
        char *s = cJSON_PrintUnformatted(o);
        if (s) put(b, s, strlen(s));
        else b->oom = true;
        free(s);
    }
    cJSON_Delete(o);
}

/* Microseconds from the origin, rounded to nanoseconds. */
static long long to_ns(const hp_trace *tr, double t) { return llround((t - tr->origin) * 1e9); }

static cJSON *meta(const char *what, int pid, int tid, const char *key, const char *sval, double nval) {
    cJSON *o = cJSON_CreateObject();
    cJSON *args = cJSON_CreateObject();
    if (!o || !args) {
        cJSON_Delete(o);
        cJSON_Delete(args);
        return NULL;
    }
    cJSON_AddStringToObject(o, "name", what);
    cJSON_AddStringToObject(o, "ph", "M");
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddNumberToObject(o, "tid", tid);
    if (sval) cJSON_AddStringToObject(args, key, sval);
    else cJSON_AddNumberToObject(args, key, nval);
    cJSON_AddItemToObject(o, "args", args);
    return o;
}

static cJSON *span_json(const hp_trace *tr, int tid, const span_rec *r) {
    const hp_trace_span *s = &r->s;
    cJSON *o = cJSON_CreateObject();
    cJSON *args = cJSON_CreateObject();
    if (!o || !args) {
        cJSON_Delete(o);
        cJSON_Delete(args);
        return NULL;
    }
    long long a = to_ns(tr, r->t0), b = to_ns(tr, r->t1);
    const char *name = s->name >= 0 && s->name < tr->n_str ? tr->str[s->name] : hp_trace_kind_name(s->kind);
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "cat", hp_trace_kind_name(s->kind));
    cJSON_AddStringToObject(o, "ph", "X");
    cJSON_AddNumberToObject(o, "ts", (double)a / 1000.0);
    cJSON_AddNumberToObject(o, "dur", (double)(b - a) / 1000.0);
    cJSON_AddNumberToObject(o, "pid", tr->rank);
    cJSON_AddNumberToObject(o, "tid", tid);
    if (s->op >= 0) cJSON_AddStringToObject(args, "op", hp_op_name((hp_op)s->op));
    if (s->detail >= 0 && s->detail < tr->n_str) cJSON_AddStringToObject(args, "detail", tr->str[s->detail]);
    if (s->node >= 0) cJSON_AddNumberToObject(args, "node", s->node);
    if (s->step >= 0) cJSON_AddNumberToObject(args, "step", s->step);
    if (s->stage >= 0) cJSON_AddNumberToObject(args, "stage", s->stage);
    if (s->microbatch >= 0) cJSON_AddNumberToObject(args, "microbatch", s->microbatch);
    if (s->phase != HP_TRACE_PHASE_NONE) cJSON_AddStringToObject(args, "phase", hp_trace_phase_name(s->phase));
    if (s->bytes >= 0) cJSON_AddNumberToObject(args, "bytes", s->bytes);
    cJSON_AddItemToObject(o, "args", args);
    return o;
}

/* This rank's events (metadata first, then each track's spans) as comma-separated JSON objects. */
static void serialize(const hp_trace *tr, text *b) {
    char scratch[4096];
    char pname[32];
    snprintf(pname, sizeof pname, "rank %d", tr->rank);
    put_json(b, meta("process_name", tr->rank, 0, "name", pname, 0), scratch, sizeof scratch);
    put_json(b, meta("process_sort_index", tr->rank, 0, "sort_index", NULL, tr->rank), scratch, sizeof scratch);
    int n = atomic_load(&tr->n_tracks);
    for (int k = 0; k < n; k++) {
        const track *t = tr->tracks[k];
        put_json(b, meta("thread_name", tr->rank, k, "name", t->name, 0), scratch, sizeof scratch);
        put_json(b, meta("thread_sort_index", tr->rank, k, "sort_index", NULL, t->sort), scratch, sizeof scratch);
    }
    for (int k = 0; k < n && !b->oom; k++) {
        const track *t = tr->tracks[k];
        for (size_t i = 0; i < kept(t) && !b->oom; i++) put_json(b, span_json(tr, k, &t->ev[i]), scratch, sizeof scratch);
    }
}

/* A byte string as I32 elements (padded to a multiple of 4 bytes by the buffer's room). */
static size_t words(size_t bytes) { return (bytes + 3) / 4; }

hp_status hp_trace_write(hp_trace *tr, hp_comm *comm, const char *path) {
    int me = comm ? hp_comm_rank(comm) : 0, n = comm ? hp_comm_size(comm) : 1;
    text b = {0};
    serialize(tr, &b);
    put(&b, "\0\0\0\0", 4); /* room for the I32 padding */
    if (b.oom) {
        free(b.p);
        b = (text){0}; /* send nothing rather than a truncated text */
    } else {
        b.n -= 4;
    }
    uint64_t dropped = hp_trace_dropped(tr);
    double info[2] = {(double)dropped, tr->offset * 1e6};
    if (me != 0) {
        double len = (double)b.n;
        hp_status st = send_f64(comm, len, 0, TAG_LEN);
        if (st == HP_STATUS_OK) st = hp_comm_send(comm, info, 4, HP_DTYPE_I32, 0, TAG_LEN);
        if (st == HP_STATUS_OK && b.n) st = hp_comm_send(comm, b.p, words(b.n), HP_DTYPE_I32, 0, TAG_TEXT);
        free(b.p);
        return st;
    }
    bool oom = !b.p && atomic_load(&tr->n_tracks) > 0;
    FILE *f = fopen(path, "w");
    bool ok = f != NULL;
    if (ok) ok = fputs("{\"traceEvents\": [\n", f) >= 0 && (!b.n || fwrite(b.p, 1, b.n, f) == b.n);
    free(b.p);
    cJSON *other = cJSON_CreateObject();
    cJSON *drop = cJSON_CreateArray(), *offs = cJSON_CreateArray();
    cJSON_AddItemToArray(drop, cJSON_CreateNumber(info[0]));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber(info[1]));
    bool any = b.n > 0;
    hp_status st = HP_STATUS_OK;
    for (int r = 1; r < n && st == HP_STATUS_OK; r++) {
        double len, rinfo[2];
        st = recv_f64(comm, &len, r, TAG_LEN);
        if (st == HP_STATUS_OK) st = hp_comm_recv(comm, rinfo, 4, HP_DTYPE_I32, r, TAG_LEN);
        if (st != HP_STATUS_OK) break;
        size_t rn = (size_t)len;
        oom |= rn == 0;
        cJSON_AddItemToArray(drop, cJSON_CreateNumber(rinfo[0]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber(rinfo[1]));
        if (!rn) continue;
        char *rb = malloc(words(rn) * 4);
        if (!rb) { /* the sender is left waiting: the caller fails (under MPI the CLI aborts the job) */
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_trace_write: %zu bytes of rank %d's trace", rn, r);
            break;
        }
        st = hp_comm_recv(comm, rb, words(rn), HP_DTYPE_I32, r, TAG_TEXT);
        if (st == HP_STATUS_OK && ok) ok = (!any || fputs(",\n", f) >= 0) && fwrite(rb, 1, rn, f) == rn;
        any = true;
        free(rb);
    }
    cJSON_AddNumberToObject(other, "ranks", n);
    cJSON_AddItemToObject(other, "dropped_spans", drop);
    cJSON_AddItemToObject(other, "clock_offset_us", offs);
    cJSON_AddStringToObject(other, "time_unit", "us from rank 0's clock at hp_trace_sync");
    char *os = cJSON_PrintUnformatted(other);
    cJSON_Delete(other);
    if (ok) ok = fprintf(f, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": %s}\n", os ? os : "{}") > 0;
    free(os);
    if (f && fclose(f) != 0) ok = false;
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "hp_trace_write: gathering the ranks' spans: ");
    if (oom) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_trace_write: out of memory serializing a rank's spans");
    if (!ok) return hp_error(HP_STATUS_IO, "hp_trace_write: cannot write '%s'", path);
    return HP_STATUS_OK;
}
