/* Backend streams, events and asynchronous copies (hp/backend.h): the CPU backend's worker streams
 * order copies across streams through events; a backend without the methods falls back to copies at
 * once; the workspace query gives the operator's rule. */
#include "testutil.h"

#include "hp/backend.h"
#include "hp/ops.h"

#include <stdlib.h>
#include <string.h>

#define BYTES ((size_t)32 << 20)

static void test_cpu_streams_order_through_events(void **state) {
    (void)state;
    hp_backend_t be;
    assert_ok(hp_backend_cpu_new(&be));
    unsigned char *a = malloc(BYTES), *b = malloc(BYTES), *c = malloc(BYTES);
    for (size_t i = 0; i < BYTES; i++) a[i] = (unsigned char)(i * 131u + 7u);
    memset(b, 0, BYTES);
    memset(c, 0, BYTES);
    hp_backend_stream_t s1, s2;
    hp_backend_event_t e1, e2;
    assert_ok(hp_backend_stream_new(be, &s1));
    assert_ok(hp_backend_stream_new(be, &s2));
    assert_ok(hp_backend_event_new(be, &e1));
    assert_ok(hp_backend_event_new(be, &e2));
    assert_ok(hp_backend_event_synchronize(be, e1)); /* never recorded: complete */
    for (int round = 0; round < 4; round++) {
        /* a -> b on s1 (in 8 pieces), then b -> c on s2 only after e1 (the end of s1's copies). */
        for (int k = 0; k < 8; k++)
            assert_ok(hp_backend_memcpy_async(be, b + k * (BYTES / 8), a + k * (BYTES / 8), BYTES / 8,
                                              HP_COPY_DEVICE_TO_DEVICE, s1));
        assert_ok(hp_backend_event_record(be, e1, s1));
        assert_ok(hp_backend_stream_wait_event(be, s2, e1));
        assert_ok(hp_backend_memcpy_async(be, c, b, BYTES, HP_COPY_DEVICE_TO_DEVICE, s2));
        assert_ok(hp_backend_event_record(be, e2, s2));
        assert_ok(hp_backend_event_synchronize(be, e2));
        assert_memory_equal(c, a, BYTES);
        for (size_t i = 0; i < BYTES; i++) a[i] ^= 0x5a; /* the next round copies new bytes */
        memset(c, 0, BYTES);
    }
    /* The compute stream (NULL): a copy there is done on return. */
    assert_ok(hp_backend_memcpy_async(be, c, a, 64, HP_COPY_HOST_TO_DEVICE, NULL));
    assert_memory_equal(c, a, 64);
    assert_int_equal(hp_backend_memcpy_async(be, c, a, 64, (hp_copy_dir)9, s1), HP_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hp_backend_memcpy_async(be, NULL, a, 64, HP_COPY_HOST_TO_HOST, s1), HP_STATUS_INVALID_ARGUMENT);
    hp_backend_event_free(be, e1);
    hp_backend_event_free(be, e2);
    hp_backend_stream_free(be, s1);
    hp_backend_stream_free(be, s2);
    hp_backend_free(be);
    free(a);
    free(b);
    free(c);
}

/* A stream freed while an event recorded on it and a wait for it on another stream are still
 * around (CUDA allows both): the event stays usable and the wait still orders the copies. Under
 * ASan this is the use-after-free check. */
static void test_stream_freed_before_its_events(void **state) {
    (void)state;
    hp_backend_t be;
    assert_ok(hp_backend_cpu_new(&be));
    unsigned char *a = malloc(BYTES), *b = calloc(1, BYTES), *c = calloc(1, BYTES);
    for (size_t i = 0; i < BYTES; i++) a[i] = (unsigned char)(i * 17u + 3u);
    hp_backend_stream_t s1, s2;
    hp_backend_event_t e1, e2;
    assert_ok(hp_backend_stream_new(be, &s1));
    assert_ok(hp_backend_stream_new(be, &s2));
    assert_ok(hp_backend_event_new(be, &e1));
    assert_ok(hp_backend_event_new(be, &e2));
    assert_ok(hp_backend_memcpy_async(be, b, a, BYTES, HP_COPY_DEVICE_TO_DEVICE, s1));
    assert_ok(hp_backend_event_record(be, e1, s1));
    assert_ok(hp_backend_stream_wait_event(be, s2, e1));
    hp_backend_stream_free(be, s1); /* drains s1; e1 and s2's wait still refer to it */
    assert_ok(hp_backend_memcpy_async(be, c, b, BYTES, HP_COPY_DEVICE_TO_DEVICE, s2));
    assert_ok(hp_backend_event_record(be, e2, s2));
    assert_ok(hp_backend_event_synchronize(be, e1));
    assert_ok(hp_backend_event_synchronize(be, e2));
    assert_memory_equal(c, a, BYTES);
    hp_backend_stream_free(be, s2); /* before its event, too */
    assert_ok(hp_backend_event_synchronize(be, e2));
    hp_backend_event_free(be, e1);
    hp_backend_event_free(be, e2);
    hp_backend_free(be);
    free(a);
    free(b);
    free(c);
}

/* A backend with only the required methods: the wrappers copy at once and events are complete. */
static hp_status copy_fn(hp_backend_t b, void *dst, const void *src, size_t bytes) {
    (void)b;
    memcpy(dst, src, bytes);
    return HP_STATUS_OK;
}

static void test_defaults_without_stream_methods(void **state) {
    (void)state;
    struct hp_backend minimal = {0};
    minimal.iface.set = copy_fn;
    minimal.iface.get = copy_fn;
    hp_backend_stream_t s;
    hp_backend_event_t e;
    assert_ok(hp_backend_stream_new(&minimal, &s));
    assert_non_null(s);
    assert_ok(hp_backend_event_new(&minimal, &e));
    char src[16] = "fifteen chars..", dst[16] = {0};
    assert_ok(hp_backend_memcpy_async(&minimal, dst, src, sizeof src, HP_COPY_HOST_TO_DEVICE, s));
    assert_memory_equal(dst, src, sizeof src); /* at once */
    assert_ok(hp_backend_event_record(&minimal, e, s));
    assert_ok(hp_backend_stream_wait_event(&minimal, s, e));
    assert_ok(hp_backend_event_synchronize(&minimal, e));
    hp_backend_event_free(&minimal, e);
    hp_backend_stream_free(&minimal, s);
}

/* The workspace query is the operator's rule (ATTENTION needs scratch, ADD none). */
static void test_workspace_query(void **state) {
    (void)state;
    hp_backend_t be;
    assert_ok(hp_backend_cpu_new(&be));
    hp_graph *g = hp_graph_new();
    hp_tid q = hp_input(g, "q", HP_DTYPE_F32, HP_SHAPE(2, 8, 64));
    hp_tid y = hp_attention(g, q, q, q, 4, true);
    hp_tid z = hp_add(g, y, y);
    assert_ok(hp_graph_status(g));
    (void)z;
    const hp_node *att = hp_graph_node(g, 0), *add = hp_graph_node(g, 1);
    assert_int_equal(att->op, HP_OP_ATTENTION);
    assert_true(hp_backend_workspace_bytes(be, g, att) > 0);
    assert_int_equal(hp_backend_workspace_bytes(be, g, att), hp_op_workspace(g, att));
    assert_int_equal(hp_backend_workspace_bytes(be, g, add), 0);
    hp_graph_free(g);
    hp_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_streams_order_through_events),
        cmocka_unit_test(test_stream_freed_before_its_events),
        cmocka_unit_test(test_defaults_without_stream_methods),
        cmocka_unit_test(test_workspace_query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
