/* The copy stream: every tier pair bit-exact, events, overlap, chunked streaming, sticky faults. */
#include "testutil.h"

#include "hp/copy_engine.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

static void test_every_tier_pair_bit_exact(void **state) {
    (void)state;
    hp_copy_engine *ce;
    assert_ok(hp_copy_engine_new(&ce));
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    const size_t n = 5 * 1000 * 1000 + 123; /* > one 4 MiB disk request, odd length */
    hp_copy_stats s;
    for (int st = 0; st < HP_TIER_COUNT; st++) {
        for (int dt = 0; dt < HP_TIER_COUNT; dt++) {
            unsigned char *src = malloc(n), *out = malloc(n);
            fill(src, n, (unsigned)(st * 3 + dt));
            memset(out, 0, n);
            /* Stage the source into its tier, copy src tier -> dst tier, bring the result back. */
            hp_loc s_loc = hp_loc_mem((hp_tier)st, src), d_loc;
            uint64_t so = 0, dof = 0;
            unsigned char *dmem = NULL;
            if (st == HP_TIER_DISK) {
                assert_ok(hp_disk_alloc(d, n, &so));
                assert_ok(hp_disk_write(d, so, src, n));
                s_loc = hp_loc_disk(d, so);
            }
            if (dt == HP_TIER_DISK) {
                assert_ok(hp_disk_alloc(d, n, &dof));
                d_loc = hp_loc_disk(d, dof);
            } else {
                dmem = malloc(n);
                d_loc = hp_loc_mem((hp_tier)dt, dmem);
            }
            hp_copy_engine_reset_stats(ce);
            hp_event *ev;
            assert_ok(hp_event_new(&ev));
            assert_ok(hp_copy_async(ce, d_loc, s_loc, n));
            assert_ok(hp_event_record(ev, ce));
            assert_ok(hp_event_wait(ev));
            bool done = false;
            assert_ok(hp_event_query(ev, &done));
            assert_true(done);
            hp_event_free(ev);
            if (dt == HP_TIER_DISK) assert_ok(hp_disk_read(d, dof, out, n));
            else memcpy(out, dmem, n);
            if (memcmp(src, out, n) != 0) fail_msg("copy %s -> %s is not bit-exact", hp_tier_name(st), hp_tier_name(dt));
            hp_copy_engine_get_stats(ce, &s);
            assert_int_equal(s.bytes[st][dt], n);
            assert_int_equal(s.copies[st][dt], 1);
            assert_int_equal(s.failed, 0);
            if (st == HP_TIER_DISK) assert_ok(hp_disk_free(d, so));
            if (dt == HP_TIER_DISK) assert_ok(hp_disk_free(d, dof));
            free(dmem);
            free(src);
            free(out);
        }
    }
    hp_disk_close(d);
    hp_copy_engine_free(ce);
}

typedef struct gate {
    atomic_int open, entered;
} gate;

static void gate_fn(void *user) {
    gate *g = user;
    atomic_store(&g->entered, 1);
    while (!atomic_load(&g->open)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static void test_events_are_asynchronous(void **state) {
    (void)state;
    hp_copy_engine *ce;
    assert_ok(hp_copy_engine_new(&ce));
    hp_event *ev;
    assert_ok(hp_event_new(&ev));
    bool done = false;
    assert_ok(hp_event_query(ev, &done)); /* never recorded: complete */
    assert_true(done);
    /* The worker blocks in a host function until this thread opens the gate: the copy queued
     * behind it cannot have run yet, so the event must be pending while we "compute". */
    gate g = {0, 0};
    char a[256], b[256];
    memset(a, 9, sizeof a);
    memset(b, 0, sizeof b);
    assert_ok(hp_copy_host_fn(ce, gate_fn, &g));
    assert_ok(hp_copy_async(ce, hp_loc_mem(HP_TIER_HOST, b), hp_loc_mem(HP_TIER_DEVICE, a), sizeof a));
    assert_ok(hp_event_record(ev, ce));
    assert_ok(hp_event_query(ev, &done));
    assert_false(done);
    double t0 = now_s();
    while (!atomic_load(&g.entered) && now_s() - t0 < 5) {
    }
    assert_true(atomic_load(&g.entered));
    atomic_store(&g.open, 1);
    assert_ok(hp_event_wait(ev));
    assert_memory_equal(a, b, sizeof a);
    assert_ok(hp_copy_engine_synchronize(ce));
    /* Invalid locations are refused at submission, naming the value. */
    assert_int_equal(hp_copy_async(ce, hp_loc_mem(HP_TIER_HOST, NULL), hp_loc_mem(HP_TIER_HOST, a), 4),
                     HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("NULL");
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    assert_int_equal(hp_copy_async(ce, hp_loc_disk(d, 100), hp_loc_mem(HP_TIER_HOST, a), 4),
                     HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("100");
    hp_disk_close(d);
    hp_event_free(ev);
    hp_copy_engine_free(ce);
}

/* ---- chunked streaming: an AdamW-like update over disk-resident states */

enum { NUMEL = 10 * 1024 + 300, CHUNK = 1024 };

typedef struct upd {
    hp_copy_engine *ce;
    size_t nchunks;
    int overlapped;  /* chunks whose next prefetch completed while this callback ran */
    size_t calls;
} upd;

static void adam_like(float *p, const float *g, float *m, float *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        m[i] = 0.9f * m[i] + 0.1f * g[i];
        v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
        p[i] -= 0.01f * (m[i] / (sqrtf(v[i]) + 1e-8f) + 0.1f * p[i]);
    }
}

static hp_status chunk_fn(void *user, size_t chunk, size_t first, size_t count, void *const *bufs) {
    upd *u = user;
    (void)first;
    if (chunk != u->calls) return hp_error(HP_STATUS_INTERNAL, "chunk %zu out of order", chunk);
    u->calls++;
    adam_like(bufs[0], bufs[1], bufs[2], bufs[3], count);
    if (chunk + 1 < u->nchunks) {
        /* Overlap, checked by accounting rather than timing: the three disk reads of chunk + 1 were
         * queued before this callback; wait (bounded) until the copy stream has completed them while
         * we are still inside the callback. A stream that only copied between callbacks would never
         * get there. */
        double t0 = now_s();
        hp_copy_stats s;
        uint64_t reads = 0;
        do {
            hp_copy_engine_get_stats(u->ce, &s);
            reads = s.copies[HP_TIER_DISK][HP_TIER_HOST] + s.copies[HP_TIER_DISK][HP_TIER_DEVICE];
        } while (reads < 3 * (chunk + 2) && now_s() - t0 < 5);
        if (reads >= 3 * (chunk + 2)) u->overlapped++;
    }
    return HP_STATUS_OK;
}

static void test_stream_chunks_update_matches_reference(void **state) {
    (void)state;
    hp_copy_engine *ce;
    assert_ok(hp_copy_engine_new(&ce));
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    const size_t bytes = NUMEL * sizeof(float);
    float *p = malloc(bytes), *g = malloc(bytes), *m = malloc(bytes), *v = malloc(bytes);
    hp_test_fill_uniform(p, NUMEL, 1, -1, 1);
    hp_test_fill_uniform(g, NUMEL, 2, -1, 1);
    hp_test_fill_uniform(m, NUMEL, 3, -0.1f, 0.1f);
    hp_test_fill_uniform(v, NUMEL, 4, 0, 0.1f);
    uint64_t op, om, ov;
    assert_ok(hp_disk_alloc(d, bytes, &op));
    assert_ok(hp_disk_alloc(d, bytes, &om));
    assert_ok(hp_disk_alloc(d, bytes, &ov));
    assert_ok(hp_disk_write(d, op, p, bytes));
    assert_ok(hp_disk_write(d, om, m, bytes));
    assert_ok(hp_disk_write(d, ov, v, bytes));
    adam_like(p, g, m, v, NUMEL); /* the reference, in memory */

    hp_stream_buffer bufs[4] = {
        {hp_loc_disk(d, op), sizeof(float), true},
        {hp_loc_mem(HP_TIER_HOST, g), sizeof(float), false}, /* host: used in place */
        {hp_loc_disk(d, om), sizeof(float), true},
        {hp_loc_disk(d, ov), sizeof(float), true},
    };
    upd u = {ce, (NUMEL + CHUNK - 1) / CHUNK, 0, 0};
    hp_copy_engine_reset_stats(ce);
    size_t host_before = hp_mem_in_use(HP_TIER_HOST);
    double t0 = now_s();
    assert_ok(hp_copy_stream_chunks(ce, bufs, 4, NUMEL, CHUNK, HP_TIER_HOST, chunk_fn, &u));
    double wall = now_s() - t0;
    assert_int_equal(hp_mem_in_use(HP_TIER_HOST), host_before); /* staging freed */
    assert_int_equal(u.calls, u.nchunks);
    assert_int_equal(u.overlapped, (int)u.nchunks - 1);

    float *q = malloc(bytes);
    assert_ok(hp_disk_read(d, op, q, bytes));
    assert_memory_equal(q, p, bytes); /* same float ops in the same order: bit-exact */
    assert_ok(hp_disk_read(d, om, q, bytes));
    assert_memory_equal(q, m, bytes);
    assert_ok(hp_disk_read(d, ov, q, bytes));
    assert_memory_equal(q, v, bytes);

    /* Accounting is consistent: bytes per direction, busy time summed per direction, busy time
     * within the wall time, the hidden fraction in [0, 1]. */
    hp_copy_stats s;
    hp_copy_engine_get_stats(ce, &s);
    assert_int_equal(s.bytes[HP_TIER_DISK][HP_TIER_HOST], 3 * bytes);
    assert_int_equal(s.bytes[HP_TIER_HOST][HP_TIER_DISK], 3 * bytes);
    assert_int_equal(s.copies[HP_TIER_DISK][HP_TIER_HOST], 3 * u.nchunks);
    double sum = 0;
    for (int a = 0; a < HP_TIER_COUNT; a++)
        for (int b = 0; b < HP_TIER_COUNT; b++) sum += s.busy_s[a][b];
    assert_close(sum, s.busy_total_s, 1e-9, 1e-12);
    assert_true(s.busy_total_s > 0 && s.busy_total_s <= wall);
    assert_true(s.wait_s >= 0 && s.wait_s <= wall);
    double h = hp_copy_stats_hidden_fraction(&s);
    assert_true(h >= 0 && h <= 1);

    /* Disk chunks must be whole 4096-byte blocks. */
    assert_int_equal(hp_copy_stream_chunks(ce, bufs, 4, NUMEL, 1000, HP_TIER_HOST, chunk_fn, &u),
                     HP_STATUS_INVALID_ARGUMENT); /* 4000-byte disk chunks are not aligned */
    hp_test_assert_error_contains("4000");

    /* With staging on DEVICE (the GPU arrangement) the host gradient is staged as well: a second
     * update step streamed that way matches a second reference step. */
    size_t dev_before = hp_mem_in_use(HP_TIER_DEVICE);
    hp_copy_engine_reset_stats(ce);
    u.calls = 0;
    u.overlapped = 0;
    assert_ok(hp_copy_stream_chunks(ce, bufs, 4, NUMEL, CHUNK, HP_TIER_DEVICE, chunk_fn, &u));
    adam_like(p, g, m, v, NUMEL);
    assert_int_equal(u.overlapped, (int)u.nchunks - 1);
    hp_copy_engine_get_stats(ce, &s);
    assert_int_equal(s.bytes[HP_TIER_HOST][HP_TIER_DEVICE], bytes); /* the gradient, staged */
    assert_int_equal(s.bytes[HP_TIER_DISK][HP_TIER_DEVICE], 3 * bytes);
    assert_int_equal(s.bytes[HP_TIER_DEVICE][HP_TIER_DISK], 3 * bytes);
    assert_int_equal(s.bytes[HP_TIER_DEVICE][HP_TIER_HOST], 0); /* read-only: not written back */
    assert_int_equal(hp_mem_in_use(HP_TIER_DEVICE), dev_before);
    assert_ok(hp_disk_read(d, op, q, bytes));
    assert_memory_equal(q, p, bytes);
    assert_ok(hp_disk_read(d, ov, q, bytes));
    assert_memory_equal(q, v, bytes);
    free(q);
    free(p);
    free(g);
    free(m);
    free(v);
    hp_disk_close(d);
    hp_copy_engine_free(ce);
}

static hp_status sum_fn(void *user, size_t chunk, size_t first, size_t count, void *const *bufs) {
    (void)chunk;
    (void)first;
    double *acc = user;
    const float *x = bufs[0];
    for (size_t i = 0; i < count; i++) *acc += x[i];
    return HP_STATUS_OK;
}

static void test_faults_are_sticky_and_name_the_path(void **state) {
    (void)state;
    hp_copy_engine *ce;
    assert_ok(hp_copy_engine_new(&ce));
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    float x[2048];
    for (int i = 0; i < 2048; i++) x[i] = 1.0f;
    uint64_t off;
    assert_ok(hp_disk_alloc(d, sizeof x, &off));
    hp_disk_inject_fault(d, ENOSPC, 0);
    hp_event *ev;
    assert_ok(hp_event_new(&ev));
    assert_ok(hp_copy_async(ce, hp_loc_disk(d, off), hp_loc_mem(HP_TIER_HOST, x), sizeof x));
    assert_ok(hp_event_record(ev, ce));
    assert_int_equal(hp_event_wait(ev), HP_STATUS_IO);
    hp_test_assert_error_contains(hp_disk_path(d));
    hp_test_assert_error_contains(strerror(ENOSPC));
    hp_test_assert_error_contains("host -> disk");
    /* Sticky: the next copy is skipped and reports the same error. */
    assert_ok(hp_copy_async(ce, hp_loc_disk(d, off), hp_loc_mem(HP_TIER_HOST, x), sizeof x));
    assert_int_equal(hp_copy_engine_synchronize(ce), HP_STATUS_IO);
    hp_copy_stats s;
    hp_copy_engine_get_stats(ce, &s);
    assert_int_equal(s.failed, 2);
    hp_copy_engine_clear_error(ce);
    assert_ok(hp_copy_async(ce, hp_loc_disk(d, off), hp_loc_mem(HP_TIER_HOST, x), sizeof x));
    assert_ok(hp_copy_engine_synchronize(ce));

    /* The streaming helper returns a read failure with the path, and drains before returning. */
    hp_stream_buffer b = {hp_loc_disk(d, off), sizeof(float), false};
    double acc = 0;
    assert_ok(hp_copy_stream_chunks(ce, &b, 1, 2048, 1024, HP_TIER_HOST, sum_fn, &acc));
    assert_close(acc, 2048.0, 0, 0);
    hp_disk_inject_fault(d, EIO, 1); /* the second chunk's read fails */
    assert_int_equal(hp_copy_stream_chunks(ce, &b, 1, 2048, 1024, HP_TIER_HOST, sum_fn, &acc),
                     HP_STATUS_IO);
    hp_test_assert_error_contains(hp_disk_path(d));
    hp_test_assert_error_contains(strerror(EIO));
    hp_event_free(ev);
    hp_disk_close(d);
    hp_copy_engine_free(ce);
}

/* A host task runs in stream order after the copies before it, and is skipped after a failure. */
static void count_fn(void *user) {
    int *n = user;
    (*n)++;
}

static void test_host_task_in_order_and_skipped_after_failure(void **state) {
    (void)state;
    hp_copy_engine *ce;
    assert_ok(hp_copy_engine_new(&ce));
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    static float x[4096], y[4096];
    for (int i = 0; i < 4096; i++) x[i] = (float)i;
    uint64_t off;
    assert_ok(hp_disk_alloc(d, sizeof x, &off));
    int runs = 0;
    /* write, read back, then a task that sees the data read */
    assert_ok(hp_copy_async(ce, hp_loc_disk(d, off), hp_loc_mem(HP_TIER_HOST, x), sizeof x));
    assert_ok(hp_copy_async(ce, hp_loc_mem(HP_TIER_HOST, y), hp_loc_disk(d, off), sizeof y));
    assert_ok(hp_copy_host_task(ce, count_fn, &runs));
    assert_ok(hp_copy_engine_synchronize(ce));
    assert_int_equal(runs, 1);
    assert_memory_equal(x, y, sizeof x);
    hp_disk_inject_fault(d, EIO, 0);
    assert_ok(hp_copy_async(ce, hp_loc_mem(HP_TIER_HOST, y), hp_loc_disk(d, off), sizeof y));
    assert_ok(hp_copy_host_task(ce, count_fn, &runs));
    assert_ok(hp_copy_host_fn(ce, count_fn, &runs)); /* a plain host function still runs */
    assert_int_equal(hp_copy_engine_synchronize(ce), HP_STATUS_IO);
    assert_int_equal(runs, 2);
    assert_int_equal(hp_copy_host_task(ce, NULL, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_disk_close(d);
    hp_copy_engine_free(ce);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_tier_pair_bit_exact),
        cmocka_unit_test(test_events_are_asynchronous),
        cmocka_unit_test(test_stream_chunks_update_matches_reference),
        cmocka_unit_test(test_faults_are_sticky_and_name_the_path),
        cmocka_unit_test(test_host_task_in_order_and_skipped_after_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
