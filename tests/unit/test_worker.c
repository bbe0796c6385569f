/* The worker primitive (hp/worker.h): order, waits by sequence number, sticky first error, growth,
 * times. */
#include "testutil.h"

#include "hp/worker.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

typedef struct log_t {
    int order[4096];
    atomic_int n;
    atomic_int called_failed; /* tasks called with failed = true */
} log_t;

typedef struct item {
    log_t *log;
    int id;
    int fail;    /* return an error */
    int sleep_us;
} item;

static hp_status record(void *user, bool failed) {
    item *it = user;
    if (failed) {
        atomic_fetch_add(&it->log->called_failed, 1);
        return HP_STATUS_IO; /* ignored by the worker */
    }
    if (it->sleep_us) nanosleep(&(struct timespec){0, it->sleep_us * 1000L}, NULL);
    it->log->order[atomic_fetch_add(&it->log->n, 1)] = it->id;
    if (it->fail) return hp_error(HP_STATUS_IO, "task %d failed on purpose", it->id);
    return HP_STATUS_OK;
}

/* Tasks run in submission order, sequence numbers count from 1, and a wait for k means 1..k ran. */
static void test_order_and_wait(void **state) {
    (void)state;
    hp_worker *w;
    assert_ok(hp_worker_new(&w));
    static log_t log;
    memset(&log, 0, sizeof log);
    static item items[3000]; /* more than the initial ring: it grows while tasks are pending */
    uint64_t seq[3000];
    for (int i = 0; i < 3000; i++) {
        items[i] = (item){.log = &log, .id = i, .sleep_us = i == 0 ? 20000 : 0};
        assert_ok(hp_worker_submit(w, record, &items[i], &seq[i]));
        assert_int_equal(seq[i], (uint64_t)i + 1);
    }
    assert_int_equal(hp_worker_submitted(w), 3000);
    assert_ok(hp_worker_wait(w, seq[1500]));
    assert_true(hp_worker_done(w) >= 1501);
    assert_true(atomic_load(&log.n) >= 1501);
    assert_ok(hp_worker_synchronize(w));
    assert_int_equal(atomic_load(&log.n), 3000);
    for (int i = 0; i < 3000; i++) assert_int_equal(log.order[i], i);
    double busy, wait;
    hp_worker_times(w, &busy, &wait);
    assert_true(busy >= 0.015); /* the first task slept 20 ms */
    assert_true(wait > 0.0);
    hp_worker_reset_times(w);
    hp_worker_times(w, &busy, &wait);
    assert_true(busy == 0.0 && wait == 0.0);
    assert_int_equal(hp_worker_submit(w, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_worker_free(w);
}

/* The first error is sticky: waiters of earlier tasks see OK, of it and later ones its status and
 * message; later tasks are called with failed = true; clear_error lets new tasks run. */
static void test_sticky_first_error(void **state) {
    (void)state;
    hp_worker *w;
    assert_ok(hp_worker_new(&w));
    static log_t log;
    memset(&log, 0, sizeof log);
    static item it[6];
    uint64_t s[6];
    for (int i = 0; i < 5; i++) {
        it[i] = (item){.log = &log, .id = i, .fail = i == 2 || i == 3};
        assert_ok(hp_worker_submit(w, record, &it[i], &s[i]));
    }
    assert_ok(hp_worker_wait(w, s[1]));
    assert_int_equal(hp_worker_wait(w, s[2]), HP_STATUS_IO);
    assert_non_null(strstr(hp_error_message(), "task 2 failed"));
    assert_int_equal(hp_worker_synchronize(w), HP_STATUS_IO);
    assert_non_null(strstr(hp_error_message(), "task 2 failed")); /* the first, not task 3 */
    assert_int_equal(atomic_load(&log.n), 3);                    /* 0, 1, 2 ran; 3 and 4 did not */
    assert_int_equal(atomic_load(&log.called_failed), 2);
    bool done = false;
    assert_int_equal(hp_worker_query(w, s[4], &done), HP_STATUS_IO);
    assert_true(done);
    assert_ok(hp_worker_query(w, s[0], &done));
    hp_worker_clear_error(w);
    it[5] = (item){.log = &log, .id = 5};
    assert_ok(hp_worker_submit(w, record, &it[5], &s[5]));
    assert_ok(hp_worker_wait(w, s[5]));
    assert_int_equal(atomic_load(&log.n), 4);
    assert_int_equal(log.order[3], 5);
    hp_worker_free(w);
}

/* Freeing runs what is queued first. */
static void test_free_drains(void **state) {
    (void)state;
    hp_worker *w;
    assert_ok(hp_worker_new(&w));
    static log_t log;
    memset(&log, 0, sizeof log);
    static item it[8];
    for (int i = 0; i < 8; i++) {
        it[i] = (item){.log = &log, .id = i, .sleep_us = 1000};
        assert_ok(hp_worker_submit(w, record, &it[i], NULL));
    }
    hp_worker_free(w);
    assert_int_equal(atomic_load(&log.n), 8);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_wait),
        cmocka_unit_test(test_sticky_first_error),
        cmocka_unit_test(test_free_drains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
