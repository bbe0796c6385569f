/* The timeline recorder (hp/trace.h): spans, names, capacity, threads, the Chrome trace-event file,
 * several ranks over the simulated communicator, and a program's spans (hp_program_set_trace). */
#include "testutil.h"

#include "hp/comm.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/trace.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    return b;
}

/* The parsed file (fails the test when it is not {"traceEvents": [...]}). */
static cJSON *load(const char *path) {
    char *text = slurp(path);
    assert_non_null(text);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(doc, "traceEvents")));
    return doc;
}

/* The n-th event (0-based) with ph and name (NULL: any name), or NULL. */
static const cJSON *find(const cJSON *doc, const char *ph, const char *name, int n) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents")) {
        if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, ph)) continue;
        if (name && strcmp(cJSON_GetObjectItem(e, "name")->valuestring, name)) continue;
        if (n-- == 0) return e;
    }
    return NULL;
}

static int count(const cJSON *doc, const char *ph) {
    int n = 0;
    while (find(doc, ph, NULL, n)) n++;
    return n;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItem(o, k);
    assert_true(cJSON_IsNumber(x));
    return x->valuedouble;
}

static const char *arg_str(const cJSON *e, const char *k) {
    const cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static bool has_arg(const cJSON *e, const char *k) { return cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), k) != NULL; }

static const char *tmp_path(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "/tmp/hp_test_trace_%d_%s", (int)getpid(), name);
    return buf;
}

/* Spans with explicit times land in the file with their names, args and microseconds from the
 * origin; interned names are shared; absent fields are not written. */
static void test_spans_and_file(void **state) {
    (void)state;
    hp_trace *tr;
    assert_ok(hp_trace_new(NULL, &tr));
    assert_ok(hp_trace_sync(tr, NULL)); /* one rank: the origin is now */
    double o = hp_trace_begin(tr);
    int compute, comm, again;
    assert_ok(hp_trace_track(tr, "compute", 0, &compute));
    assert_ok(hp_trace_track(tr, "comm 0 (dp)", 10, &comm));
    assert_ok(hp_trace_track(tr, "compute", 5, &again));
    assert_int_equal(again, compute);
    int32_t a = hp_trace_intern(tr, "matmul"), b = hp_trace_intern(tr, "all_reduce");
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(hp_trace_intern(tr, "matmul"), a);

    hp_trace_set_step(tr, 7);
    hp_trace_span step = HP_TRACE_SPAN_INIT;
    step.kind = HP_TRACE_KIND_STEP;
    hp_trace_record(tr, compute, o + 0.001, o + 0.005, &step); /* [1000, 5000) us */
    hp_trace_span mm = HP_TRACE_SPAN_INIT;
    mm.name = a;
    mm.op = HP_OP_MATMUL;
    mm.node = 12;
    mm.stage = 1;
    mm.microbatch = 3;
    mm.phase = HP_TRACE_PHASE_W;
    hp_trace_record(tr, compute, o + 0.002, o + 0.0025, &mm);
    hp_trace_span ar = HP_TRACE_SPAN_INIT;
    ar.name = b;
    ar.kind = HP_TRACE_KIND_COMM;
    ar.bytes = 4096;
    ar.step = 6; /* given: not the current step */
    hp_trace_record(tr, comm, o + 0.003, o + 0.004, &ar);
    assert_int_equal(hp_trace_count(tr), 3);
    assert_int_equal(hp_trace_dropped(tr), 0);

    const char *path = tmp_path("spans.json");
    assert_ok(hp_trace_write(tr, NULL, path));
    hp_trace_free(tr);
    cJSON *doc = load(path);
    unlink(path);
    assert_int_equal(count(doc, "X"), 3);
    const cJSON *pn = find(doc, "M", "process_name", 0);
    assert_non_null(pn);
    assert_string_equal(arg_str(pn, "name"), "rank 0");
    assert_string_equal(arg_str(find(doc, "M", "thread_name", 0), "name"), "compute");
    assert_string_equal(arg_str(find(doc, "M", "thread_name", 1), "name"), "comm 0 (dp)");
    assert_null(find(doc, "M", "thread_name", 2));
    assert_int_equal((int)num(cJSON_GetObjectItem(find(doc, "M", "thread_sort_index", 1), "args"), "sort_index"), 10);

    const cJSON *s = find(doc, "X", "step", 0);
    assert_non_null(s);
    assert_string_equal(cJSON_GetObjectItem(s, "cat")->valuestring, "step");
    assert_true(num(s, "ts") >= 1000.0 && num(s, "ts") < 1100.0); /* the origin was taken just before o */
    assert_close(num(s, "dur"), 4000.0, 0, 0.002);
    assert_int_equal((int)num(cJSON_GetObjectItem(s, "args"), "step"), 7);
    assert_false(has_arg(s, "stage") || has_arg(s, "phase") || has_arg(s, "bytes") || has_arg(s, "op"));

    const cJSON *m = find(doc, "X", "matmul", 0);
    assert_non_null(m);
    assert_int_equal((int)num(m, "pid"), 0);
    assert_int_equal((int)num(m, "tid"), compute);
    assert_string_equal(cJSON_GetObjectItem(m, "cat")->valuestring, "compute");
    assert_close(num(m, "dur"), 500.0, 0, 0.002);
    assert_close(num(m, "ts") - num(s, "ts"), 1000.0, 0, 0.002);
    assert_string_equal(arg_str(m, "op"), "matmul");
    assert_string_equal(arg_str(m, "phase"), "W");
    const cJSON *ma = cJSON_GetObjectItem(m, "args");
    assert_int_equal((int)num(ma, "node"), 12);
    assert_int_equal((int)num(ma, "stage"), 1);
    assert_int_equal((int)num(ma, "microbatch"), 3);

    const cJSON *c = find(doc, "X", "all_reduce", 0);
    assert_non_null(c);
    assert_int_equal((int)num(c, "tid"), comm);
    assert_string_equal(cJSON_GetObjectItem(c, "cat")->valuestring, "comm");
    assert_int_equal((int)num(cJSON_GetObjectItem(c, "args"), "bytes"), 4096);
    assert_int_equal((int)num(cJSON_GetObjectItem(c, "args"), "step"), 6);
    const cJSON *other = cJSON_GetObjectItem(doc, "otherData");
    assert_int_equal((int)num(other, "ranks"), 1);
    cJSON_Delete(doc);
}

/* Off costs a NULL check: every call accepts a NULL recorder; a bad track is ignored. */
static void test_off(void **state) {
    (void)state;
    hp_trace_span s = HP_TRACE_SPAN_INIT;
    assert_true(hp_trace_begin(NULL) == 0.0);
    hp_trace_end(NULL, 0, 0, &s);
    hp_trace_record(NULL, 0, 0, 1, &s);
    hp_trace_set_step(NULL, 3);
    assert_int_equal(hp_trace_intern(NULL, "x"), -1);
    hp_trace_free(NULL);
    hp_trace *tr;
    assert_ok(hp_trace_new(NULL, &tr));
    hp_trace_record(tr, 0, 0, 1, &s);  /* no track 0 yet */
    hp_trace_record(tr, -1, 0, 1, &s);
    assert_int_equal(hp_trace_count(tr), 0);
    hp_trace_opts bad = HP_TRACE_OPTS_DEFAULT;
    bad.rank = -1;
    hp_trace *t2;
    assert_int_equal(hp_trace_new(&bad, &t2), HP_STATUS_INVALID_ARGUMENT);
    assert_null(t2);
    assert_int_equal(hp_trace_write(tr, NULL, "/nonexistent-dir/x.json"), HP_STATUS_IO);
    hp_test_assert_error_contains("/nonexistent-dir/x.json");
    hp_trace_free(tr);
}

/* A full track drops spans and counts them; the file says how many. Past 64 tracks is an error. */
static void test_capacity_and_tracks(void **state) {
    (void)state;
    hp_trace_opts o = HP_TRACE_OPTS_DEFAULT;
    o.capacity = 4;
    hp_trace *tr;
    assert_ok(hp_trace_new(&o, &tr));
    int t;
    assert_ok(hp_trace_track(tr, "compute", 0, &t));
    hp_trace_span s = HP_TRACE_SPAN_INIT;
    for (int i = 0; i < 10; i++) hp_trace_record(tr, t, i * 1e-3, i * 1e-3 + 1e-4, &s);
    assert_int_equal(hp_trace_count(tr), 4);
    assert_int_equal(hp_trace_dropped(tr), 6);
    const char *path = tmp_path("drop.json");
    assert_ok(hp_trace_write(tr, NULL, path));
    cJSON *doc = load(path);
    unlink(path);
    assert_int_equal(count(doc, "X"), 4);
    const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "otherData"), "dropped_spans");
    assert_int_equal(cJSON_GetArraySize(d), 1);
    assert_int_equal((int)cJSON_GetArrayItem(d, 0)->valuedouble, 6);
    cJSON_Delete(doc);
    for (int k = 1; k < 64; k++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", k);
        assert_ok(hp_trace_track(tr, name, k, &t));
        assert_int_equal(t, k);
    }
    assert_int_equal(hp_trace_track(tr, "one too many", 0, &t), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("one too many");
    hp_trace_free(tr);
}

typedef struct rec_arg {
    hp_trace *tr;
    int track, n;
} rec_arg;

static void *recorder(void *user) {
    rec_arg *a = user;
    hp_trace_span s = HP_TRACE_SPAN_INIT;
    for (int i = 0; i < a->n; i++) {
        double t0 = hp_trace_begin(a->tr);
        hp_trace_end(a->tr, a->track, t0, &s);
    }
    return NULL;
}

/* Threads record concurrently without a lock, on their own tracks and on a shared one. */
static void test_threads(void **state) {
    (void)state;
    hp_trace *tr;
    assert_ok(hp_trace_new(NULL, &tr));
    pthread_t th[4];
    rec_arg args[4];
    int own0, own1, shared;
    assert_ok(hp_trace_track(tr, "own 0", 0, &own0));
    assert_ok(hp_trace_track(tr, "own 1", 1, &own1));
    assert_ok(hp_trace_track(tr, "shared", 2, &shared));
    int tracks[4] = {own0, own1, shared, shared};
    for (int k = 0; k < 4; k++) {
        args[k] = (rec_arg){tr, tracks[k], 20000};
        assert_int_equal(pthread_create(&th[k], NULL, recorder, &args[k]), 0);
    }
    for (int k = 0; k < 4; k++) pthread_join(th[k], NULL);
    assert_int_equal(hp_trace_count(tr), 80000);
    assert_int_equal(hp_trace_dropped(tr), 0);
    hp_trace_free(tr);
}

typedef struct sim_arg {
    char path[256];
} sim_arg;

/* One rank of the simulated job: align clocks, record a step with a node on two tracks, write. */
static hp_status sim_rank(hp_comm *comm, int rank, void *user) {
    sim_arg *a = user;
    hp_trace_opts o = HP_TRACE_OPTS_DEFAULT;
    o.rank = rank;
    hp_trace *tr;
    HP_CHECK(hp_trace_new(&o, &tr));
    hp_status st = hp_trace_sync(tr, comm);
    int compute = -1, comm_track = -1;
    if (st == HP_STATUS_OK) st = hp_trace_track(tr, "compute", 0, &compute);
    if (st == HP_STATUS_OK) st = hp_trace_track(tr, "comm 0 (dp)", 10, &comm_track);
    if (st == HP_STATUS_OK) {
        hp_trace_set_step(tr, 1);
        hp_trace_span step = HP_TRACE_SPAN_INIT, ar = HP_TRACE_SPAN_INIT;
        step.kind = HP_TRACE_KIND_STEP;
        ar.kind = HP_TRACE_KIND_COMM;
        ar.bytes = 8 * (rank + 1);
        double t0 = hp_trace_begin(tr);
        for (int i = 0; i <= rank; i++) hp_trace_record(tr, comm_track, t0, t0 + 1e-5, &ar);
        hp_trace_end(tr, compute, t0, &step);
        st = hp_trace_write(tr, comm, rank == 0 ? a->path : "/nonexistent-dir/not-rank-0.json");
    }
    hp_trace_free(tr);
    return st;
}

/* Three ranks: rank 0 writes one file with every rank's spans as pid 0..2, the clock offsets of
 * ranks in one process are tiny, and nothing is written by the other ranks. */
static void test_ranks(void **state) {
    (void)state;
    sim_arg a;
    snprintf(a.path, sizeof a.path, "%s", tmp_path("ranks.json"));
    assert_ok(hp_comm_sim_run(3, sim_rank, &a));
    cJSON *doc = load(a.path);
    unlink(a.path);
    assert_int_equal(count(doc, "X"), 3 + 1 + 2 + 3); /* a step per rank, rank + 1 all-reduces each */
    for (int r = 0; r < 3; r++) {
        int n_comm = 0, n_names = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents")) {
            if ((int)num(e, "pid") != r) continue;
            const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
            n_names += !strcmp(name, "thread_name");
            if (!strcmp(name, "comm")) {
                n_comm++;
                assert_int_equal((int)num(cJSON_GetObjectItem(e, "args"), "bytes"), 8 * (r + 1));
                assert_true(num(e, "ts") >= -1e3 && num(e, "ts") < 60e6);
            }
        }
        assert_int_equal(n_comm, r + 1);
        assert_int_equal(n_names, 2);
    }
    const cJSON *other = cJSON_GetObjectItem(doc, "otherData");
    assert_int_equal((int)num(other, "ranks"), 3);
    const cJSON *offs = cJSON_GetObjectItem(other, "clock_offset_us");
    assert_int_equal(cJSON_GetArraySize(offs), 3);
    for (int r = 0; r < 3; r++) { /* one process, one clock: only the ping-pong's asymmetry */
        double us = cJSON_GetArrayItem(offs, r)->valuedouble;
        assert_true(us > -5e3 && us < 5e3);
    }
    cJSON_Delete(doc);
}

/* A program records one span per node and run with its tags, phases from the node flags, plus one
 * "trace record" span for the recorder's own time after each batch, and stops when detached. */
static void test_program(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(4, 8));
    hp_tid w = hp_param(g, "fc.weight", HP_SHAPE(6, 8));
    hp_tid y = hp_linear(g, x, w, HP_TID_NONE);
    hp_tid l = hp_mean(g, hp_mul(g, y, y), -1);
    hp_tid grad;
    assert_ok(hp_autodiff(g, l, &w, 1, &grad));
    hp_tid keep[2] = {l, grad};
    hp_trace *tr;
    assert_ok(hp_trace_new(NULL, &tr));
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = 2;
    o.trace = tr;
    o.trace_tags = (hp_trace_tags){.stage = 2, .microbatch = -1, .phase = HP_TRACE_PHASE_NONE};
    hp_program *p;
    assert_ok(hp_program_new(g, &o, &p));
    hp_program_stats st;
    hp_program_get_stats(p, &st);
    assert_ok(hp_program_run(p));
    hp_trace_tags tags = {.stage = 2, .microbatch = 5, .phase = HP_TRACE_PHASE_NONE};
    assert_ok(hp_program_set_trace(p, tr, &tags));
    assert_ok(hp_program_run(p));
    /* each run: its nodes, and the recorder's own time after them ("trace record") */
    assert_int_equal(hp_trace_count(tr), 2 * ((uint64_t)st.n_nodes + 1));
    assert_ok(hp_program_set_trace(p, NULL, NULL));
    assert_ok(hp_program_run(p));
    assert_int_equal(hp_trace_count(tr), 2 * ((uint64_t)st.n_nodes + 1));
    const char *path = tmp_path("program.json");
    assert_ok(hp_trace_write(tr, NULL, path));
    hp_program_free(p);
    hp_trace_free(tr);
    hp_graph_free(g);
    cJSON *doc = load(path);
    unlink(path);
    const cJSON *lin = find(doc, "X", "linear", 0);
    assert_non_null(lin);
    assert_string_equal(arg_str(lin, "phase"), "F");
    assert_string_equal(arg_str(lin, "detail"), "fc.weight");
    assert_int_equal((int)num(cJSON_GetObjectItem(lin, "args"), "stage"), 2);
    assert_false(has_arg(lin, "microbatch"));
    const cJSON *lin2 = find(doc, "X", "linear", 1);
    assert_int_equal((int)num(cJSON_GetObjectItem(lin2, "args"), "microbatch"), 5);
    int backward = 0;
    for (int i = 0; find(doc, "X", NULL, i); i++) {
        const char *ph = arg_str(find(doc, "X", NULL, i), "phase");
        backward += ph && !strcmp(ph, "B");
    }
    assert_true(backward >= 2);
    /* the recording after the first run's nodes, tagged as its last node, after every node span */
    const cJSON *rec = find(doc, "X", "trace record", 0);
    assert_non_null(rec);
    assert_int_equal((int)num(cJSON_GetObjectItem(rec, "args"), "stage"), 2);
    assert_true(num(rec, "ts") >= num(lin, "ts") + num(lin, "dur"));
    cJSON_Delete(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spans_and_file),
        cmocka_unit_test(test_off),
        cmocka_unit_test(test_capacity_and_tracks),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_program),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
