/* HyperOffload manual API: tensor handles across tiers, budgets, non-blocking moves, failed moves,
 * and saved-tensor pack/unpack hooks. */
#include "testutil.h"

#include "hp/offload.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed * 97u) >> 9);
}

static void check_data(hp_tensor_handle *h, const unsigned char *ref) {
    void *p;
    assert_ok(hp_tensor_handle_data(h, &p));
    assert_memory_equal(p, ref, hp_tensor_handle_bytes(h));
}

static void test_handle_round_trips_every_tier(void **state) {
    (void)state;
    hp_offload_ctx *ctx;
    assert_ok(hp_offload_ctx_new(NULL, &ctx));
    const size_t n = 300001; /* odd: exercises the disk tier's bounce path */
    unsigned char *ref = malloc(n);
    fill(ref, n, 7);
    hp_tensor_handle *h;
    assert_ok(hp_tensor_handle_new(ctx, n, HP_TIER_DEVICE, &h));
    void *p;
    assert_ok(hp_tensor_handle_data(h, &p));
    memcpy(p, ref, n);
    /* Every ordered pair of distinct tiers, as a path through them. */
    const hp_tier path[] = {HP_TIER_HOST, HP_TIER_DISK, HP_TIER_HOST, HP_TIER_DEVICE,
                            HP_TIER_DISK, HP_TIER_DEVICE};
    for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
        hp_tier from = hp_tensor_handle_tier(h), to = path[i];
        if (to > from) assert_ok(hp_offload_tensor(h, to));
        else assert_ok(hp_prefetch_tensor(h, to));
        assert_int_equal(hp_tensor_handle_tier(h), to);
        assert_ok(hp_tensor_handle_wait(h));
        /* After the move settles only the destination holds the bytes. */
        for (int t = 0; t < HP_TIER_COUNT; t++)
            assert_int_equal(hp_offload_ctx_in_use(ctx, (hp_tier)t), t == (int)to ? n : 0);
        if (to != HP_TIER_DISK) check_data(h, ref);
    }
    assert_int_equal(hp_tensor_handle_tier(h), HP_TIER_DEVICE);
    /* Same-tier move is a no-op; wrong directions name the tiers. */
    assert_ok(hp_offload_tensor(h, HP_TIER_DEVICE));
    assert_ok(hp_offload_tensor(h, HP_TIER_DISK));
    assert_int_equal(hp_offload_tensor(h, HP_TIER_HOST), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("disk");
    assert_int_equal(hp_tensor_handle_data(h, &p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("prefetch it first");
    assert_ok(hp_prefetch_tensor(h, HP_TIER_HOST));
    assert_int_equal(hp_prefetch_tensor(h, HP_TIER_DISK), HP_STATUS_INVALID_ARGUMENT);
    check_data(h, ref);
    hp_tensor_handle_free(h);
    for (int t = 0; t < HP_TIER_COUNT; t++) assert_int_equal(hp_offload_ctx_in_use(ctx, (hp_tier)t), 0);
    assert_true(hp_offload_ctx_peak(ctx, HP_TIER_DISK) >= n);
    free(ref);
    hp_offload_ctx_free(ctx);
}

static void test_device_budget_enforced_and_reclaimed(void **state) {
    (void)state;
    hp_offload_config cfg = HP_OFFLOAD_CONFIG_INIT;
    cfg.device_capacity = 64 * 1024;
    hp_offload_ctx *ctx;
    assert_ok(hp_offload_ctx_new(&cfg, &ctx));
    hp_tensor_handle *a, *b, *c = NULL;
    assert_ok(hp_tensor_handle_new(ctx, 32 * 1024, HP_TIER_DEVICE, &a));
    assert_ok(hp_tensor_handle_new(ctx, 32 * 1024, HP_TIER_DEVICE, &b));
    assert_int_equal(hp_tensor_handle_new(ctx, 1000, HP_TIER_DEVICE, &c), HP_STATUS_OUT_OF_MEMORY);
    assert_null(c);
    hp_test_assert_error_contains("device tier");
    hp_test_assert_error_contains("1000");
    /* Offloading `a` frees its device bytes once the copy is done: the allocation reclaims them. */
    unsigned char ref[32 * 1024];
    fill(ref, sizeof ref, 3);
    void *p;
    assert_ok(hp_tensor_handle_data(a, &p));
    memcpy(p, ref, sizeof ref);
    assert_ok(hp_offload_tensor(a, HP_TIER_HOST));
    assert_ok(hp_tensor_handle_new(ctx, 1000, HP_TIER_DEVICE, &c));
    assert_true(hp_offload_ctx_peak(ctx, HP_TIER_DEVICE) <= 64 * 1024);
    /* Bringing `a` back does not fit until something leaves the device. */
    assert_int_equal(hp_prefetch_tensor(a, HP_TIER_DEVICE), HP_STATUS_OUT_OF_MEMORY);
    assert_int_equal(hp_tensor_handle_tier(a), HP_TIER_HOST); /* unchanged */
    hp_tensor_handle_free(b);
    assert_ok(hp_prefetch_tensor(a, HP_TIER_DEVICE));
    check_data(a, ref);
    hp_tensor_handle_free(a);
    hp_tensor_handle_free(c);
    hp_offload_ctx_free(ctx);
}

typedef struct gate {
    atomic_int open;
} gate;

static void gate_fn(void *user) {
    gate *g = user;
    while (!atomic_load(&g->open)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static void test_moves_are_non_blocking(void **state) {
    (void)state;
    hp_offload_ctx *ctx;
    assert_ok(hp_offload_ctx_new(NULL, &ctx));
    hp_tensor_handle *h;
    assert_ok(hp_tensor_handle_new(ctx, 8192, HP_TIER_DEVICE, &h));
    unsigned char ref[8192];
    fill(ref, sizeof ref, 11);
    void *p;
    assert_ok(hp_tensor_handle_data(h, &p));
    memcpy(p, ref, sizeof ref);
    gate g = {0};
    assert_ok(hp_copy_host_fn(hp_offload_ctx_copy_engine(ctx), gate_fn, &g)); /* hold the stream */
    assert_ok(hp_offload_tensor(h, HP_TIER_DISK)); /* must return while the stream is held */
    bool done = true;
    assert_ok(hp_event_query(hp_tensor_handle_event(h), &done));
    assert_false(done);
    assert_int_equal(hp_tensor_handle_tier(h), HP_TIER_DISK);
    /* Both copies exist while the move is in flight. */
    assert_int_equal(hp_offload_ctx_in_use(ctx, HP_TIER_DEVICE), 8192);
    assert_int_equal(hp_offload_ctx_in_use(ctx, HP_TIER_DISK), 8192);
    assert_ok(hp_offload_ctx_reclaim(ctx)); /* not done: nothing released */
    assert_int_equal(hp_offload_ctx_in_use(ctx, HP_TIER_DEVICE), 8192);
    atomic_store(&g.open, 1);
    assert_ok(hp_tensor_handle_wait(h));
    assert_int_equal(hp_offload_ctx_in_use(ctx, HP_TIER_DEVICE), 0);
    assert_ok(hp_prefetch_tensor(h, HP_TIER_DEVICE));
    check_data(h, ref);
    hp_tensor_handle_free(h);
    hp_offload_ctx_free(ctx);
}

static void test_failed_move_keeps_the_data(void **state) {
    (void)state;
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    hp_offload_config cfg = HP_OFFLOAD_CONFIG_INIT;
    cfg.disk = d;
    hp_offload_ctx *ctx;
    assert_ok(hp_offload_ctx_new(&cfg, &ctx));
    hp_tensor_handle *h;
    assert_ok(hp_tensor_handle_new(ctx, 4096, HP_TIER_HOST, &h));
    unsigned char ref[4096];
    fill(ref, sizeof ref, 5);
    void *p;
    assert_ok(hp_tensor_handle_data(h, &p));
    memcpy(p, ref, sizeof ref);
    hp_disk_inject_fault(d, ENOSPC, 0);
    assert_ok(hp_offload_tensor(h, HP_TIER_DISK));
    assert_int_equal(hp_tensor_handle_wait(h), HP_STATUS_IO);
    hp_test_assert_error_contains(hp_disk_path(d));
    hp_test_assert_error_contains(strerror(ENOSPC));
    assert_int_equal(hp_tensor_handle_tier(h), HP_TIER_HOST);
    assert_int_equal(hp_offload_ctx_in_use(ctx, HP_TIER_DISK), 0);
    hp_copy_engine_clear_error(hp_offload_ctx_copy_engine(ctx));
    check_data(h, ref);
    assert_ok(hp_offload_tensor(h, HP_TIER_DISK)); /* works again */
    assert_ok(hp_prefetch_tensor(h, HP_TIER_DEVICE));
    check_data(h, ref);
    hp_tensor_handle_free(h);
    hp_offload_ctx_free(ctx);
    hp_disk_close(d);
}

/* ---- saved-tensor hooks */

typedef struct tag_user {
    char tag;
    int packs;
} tag_user;

static hp_status tag_pack(void *user, const void *data, size_t bytes, void **packed, hp_event **ku) {
    tag_user *u = user;
    u->packs++;
    unsigned char *c = malloc(bytes);
    memcpy(c, data, bytes);
    *packed = c;
    *ku = NULL;
    return HP_STATUS_OK;
}
static hp_status tag_unpack(void *user, void *packed, const void **data) {
    (void)user;
    *data = packed;
    return HP_STATUS_OK;
}
static void tag_release(void *user, void *packed) {
    (void)user;
    free(packed);
}

static void test_hook_stack(void **state) {
    (void)state;
    char x[16] = "activation";
    hp_saved_tensor *s;
    hp_event *ku = (hp_event *)1;
    assert_ok(hp_saved_tensor_pack(x, sizeof x, &s, &ku)); /* no hooks: identity */
    assert_null(ku);
    const void *back;
    assert_ok(hp_saved_tensor_unpack(s, &back));
    assert_ptr_equal(back, x);
    hp_saved_tensor_free(s);
    tag_user a = {'a', 0}, b = {'b', 0};
    hp_saved_tensor_hooks ha = {tag_pack, NULL, tag_unpack, tag_release, &a};
    hp_saved_tensor_hooks hb = {tag_pack, NULL, tag_unpack, tag_release, &b};
    assert_ok(hp_saved_tensor_hooks_push(&ha));
    assert_ok(hp_saved_tensor_hooks_push(&hb));
    assert_ok(hp_saved_tensor_pack(x, sizeof x, &s, NULL));
    assert_int_equal(b.packs, 1);
    assert_ok(hp_saved_tensor_hooks_pop());
    assert_ok(hp_saved_tensor_hooks_pop());
    memset(x, 0, sizeof x); /* the hook copied: the source may change */
    assert_ok(hp_saved_tensor_prefetch(s)); /* no prefetch hook: no-op */
    assert_ok(hp_saved_tensor_unpack(s, &back)); /* unpacked with the hooks of save time */
    assert_string_equal(back, "activation");
    hp_saved_tensor_free(s);
    assert_int_equal(a.packs, 0);
    assert_int_equal(hp_saved_tensor_hooks_pop(), HP_STATUS_INVALID_ARGUMENT);
    hp_saved_tensor_hooks bad = {NULL, NULL, tag_unpack, tag_release, NULL};
    assert_int_equal(hp_saved_tensor_hooks_push(&bad), HP_STATUS_INVALID_ARGUMENT);
}

static void test_default_hooks_offload_activations(void **state) {
    (void)state;
    for (int tier = HP_TIER_HOST; tier <= HP_TIER_DISK; tier++) {
        hp_offload_ctx *ctx;
        assert_ok(hp_offload_ctx_new(NULL, &ctx));
        hp_saved_tensor_hooks hooks = hp_offload_default_hooks(ctx, (hp_tier)tier);
        assert_ok(hp_saved_tensor_hooks_push(&hooks));
        enum { L = 4, N = 20000 };
        float *act = malloc(N * sizeof(float)); /* one reused activation buffer, as a layer loop */
        float ref[L][8];
        hp_saved_tensor *saved[L];
        for (int l = 0; l < L; l++) {
            hp_test_fill_uniform(act, N, (uint64_t)(l + 1), -1, 1);
            memcpy(ref[l], act + N - 8, sizeof ref[l]);
            hp_event *ku;
            assert_ok(hp_saved_tensor_pack(act, N * sizeof(float), &saved[l], &ku));
            assert_non_null(ku);
            assert_ok(hp_event_wait(ku)); /* then the buffer may be reused */
        }
        assert_ok(hp_saved_tensor_hooks_pop());
        /* Forward is over: the saved activations live on the offload tier, not the device. */
        assert_int_equal(hp_offload_ctx_in_use(ctx, HP_TIER_DEVICE), 0);
        assert_int_equal(hp_offload_ctx_in_use(ctx, (hp_tier)tier), L * N * sizeof(float));
        /* Backward in reverse order, prefetching one layer ahead. */
        assert_ok(hp_saved_tensor_prefetch(saved[L - 1]));
        for (int l = L - 1; l >= 0; l--) {
            if (l > 0) assert_ok(hp_saved_tensor_prefetch(saved[l - 1]));
            const void *data;
            assert_ok(hp_saved_tensor_unpack(saved[l], &data));
            assert_int_equal(hp_saved_tensor_bytes(saved[l]), N * sizeof(float));
            assert_memory_equal((const float *)data + N - 8, ref[l], sizeof ref[l]);
            hp_test_fill_uniform(act, N, (uint64_t)(l + 1), -1, 1);
            assert_memory_equal(data, act, N * sizeof(float));
            hp_saved_tensor_free(saved[l]);
        }
        for (int t = 0; t < HP_TIER_COUNT; t++) assert_int_equal(hp_offload_ctx_in_use(ctx, (hp_tier)t), 0);
        free(act);
        hp_offload_ctx_free(ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle_round_trips_every_tier),
        cmocka_unit_test(test_device_budget_enforced_and_reclaimed),
        cmocka_unit_test(test_moves_are_non_blocking),
        cmocka_unit_test(test_failed_move_keeps_the_data),
        cmocka_unit_test(test_hook_stack),
        cmocka_unit_test(test_default_hooks_offload_activations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
