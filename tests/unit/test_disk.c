/* The disk tier: O_DIRECT store, io_uring and pread paths, alignment, budgets and faults.
 *
 * Fault simulation (see hp/disk.h): "file removed" unlinks the store file mid-run and checks that
 * the next growth of the file fails with HP_STATUS_IO naming the path (Linux keeps I/O on an
 * unlinked open file working, so growth is where removal is detected); a removed directory is
 * checked at open; "disk full" uses RLIMIT_FSIZE with SIGXFSZ ignored (EFBIG) and the store's
 * capacity cap; hp_disk_inject_fault forces EIO/ENOSPC on a request. */
#include "testutil.h"

#include "hp/disk.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 7u) ^ (i >> 9));
}

static void roundtrip(bool uring) {
    hp_disk_config cfg = HP_DISK_CONFIG_INIT;
    cfg.use_uring = uring;
    cfg.queue_depth = 4; /* fewer slots than requests below: the store must reap to make room */
    hp_disk *d;
    assert_ok(hp_disk_open(&cfg, &d));
    hp_disk_stats s;
    hp_disk_get_stats(d, &s);
    if (!uring) assert_false(s.uring);
    struct stat sb;
    assert_int_equal(stat(s.path, &sb), 0);
    enum { N = 9, PIECE = 3 * 4096 };
    unsigned char *src, *dst;
    assert_int_equal(posix_memalign((void **)&src, 4096, N * PIECE), 0);
    assert_int_equal(posix_memalign((void **)&dst, 4096, N * PIECE), 0);
    fill(src, N * PIECE, 1);
    memset(dst, 0, N * PIECE);
    uint64_t off[N], req[N];
    for (int i = 0; i < N; i++) assert_ok(hp_disk_alloc(d, PIECE, &off[i]));
    for (int i = 0; i < N; i++) assert_ok(hp_disk_write_async(d, off[i], src + i * PIECE, PIECE, &req[i]));
    for (int i = N - 1; i >= 0; i--) assert_ok(hp_disk_wait(d, req[i])); /* any order */
    for (int i = 0; i < N; i++) assert_ok(hp_disk_read_async(d, off[i], dst + i * PIECE, PIECE, &req[i]));
    for (int i = 0; i < N; i++) assert_ok(hp_disk_wait(d, req[i]));
    assert_memory_equal(src, dst, N * PIECE);
    assert_int_equal(hp_disk_wait(d, req[0]), HP_STATUS_INVALID_ARGUMENT); /* already reaped */

    /* Unaligned buffer and length go through a bounce buffer, bit-exact. */
    unsigned char *u = malloc(10001 + 3), *v = malloc(10001 + 3);
    fill(u + 3, 10001, 5);
    uint64_t uo;
    assert_ok(hp_disk_alloc(d, 10001, &uo));
    assert_ok(hp_disk_write(d, uo, u + 3, 10001));
    assert_ok(hp_disk_read(d, uo, v + 1, 10001));
    assert_memory_equal(u + 3, v + 1, 10001);
    hp_disk_get_stats(d, &s);
    if (s.direct) assert_true(s.bounced >= 2);
    assert_int_equal(s.bytes_written, N * PIECE + 10001);
    assert_int_equal(s.bytes_read, N * PIECE + 10001);
    assert_int_equal(s.in_use, N * PIECE + 3 * 4096);

    assert_int_equal(hp_disk_read(d, 100, v, 10), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("offset 100");
    assert_int_equal(hp_disk_read(d, (uint64_t)1 << 30, v, 10), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("outside the file");
    for (int i = 0; i < N; i++) assert_ok(hp_disk_free(d, off[i]));
    assert_int_equal(hp_disk_free(d, off[0]), HP_STATUS_INVALID_ARGUMENT);
    char path[512];
    snprintf(path, sizeof path, "%s", s.path);
    hp_disk_close(d);
    assert_int_equal(stat(path, &sb), -1); /* removed at close */
    free(u);
    free(v);
    free(src);
    free(dst);
}

static void test_roundtrip_uring(void **state) {
    (void)state;
    roundtrip(true);
}

static void test_roundtrip_pread_fallback(void **state) {
    (void)state;
    roundtrip(false);
}

static void test_direct_in_effect_or_reported(void **state) {
    (void)state;
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    hp_disk_stats s;
    hp_disk_get_stats(d, &s);
    struct statfs fs;
    assert_int_equal(statfs("/tmp", &fs), 0);
    if (fs.f_type == 0xEF53) assert_true(s.direct); /* ext4 supports O_DIRECT */
    hp_disk_close(d);
    /* Older tmpfs refuses O_DIRECT (newer kernels accept it): either way the store works and
     * reports which mode it is in. */
    if (statfs("/dev/shm", &fs) == 0 && fs.f_type == 0x01021994 && access("/dev/shm", W_OK) == 0) {
        hp_disk_config cfg = HP_DISK_CONFIG_INIT;
        cfg.dir = "/dev/shm";
        assert_ok(hp_disk_open(&cfg, &d));
        uint64_t off;
        char a[100] = "hello", b[100] = {0};
        assert_ok(hp_disk_alloc(d, 100, &off));
        assert_ok(hp_disk_write(d, off, a, 100));
        assert_ok(hp_disk_read(d, off, b, 100));
        assert_string_equal(b, "hello");
        hp_disk_close(d);
    }
}

static void test_budget_cap(void **state) {
    (void)state;
    hp_disk_config cfg = HP_DISK_CONFIG_INIT;
    cfg.capacity = 3 * 4096;
    hp_disk *d;
    assert_ok(hp_disk_open(&cfg, &d));
    uint64_t a, b;
    assert_ok(hp_disk_alloc(d, 8192, &a));
    assert_int_equal(hp_disk_alloc(d, 8192, &b), HP_STATUS_OUT_OF_MEMORY);
    hp_test_assert_error_contains(hp_disk_path(d));
    hp_test_assert_error_contains("disk tier");
    hp_test_assert_error_contains("8192");
    assert_ok(hp_disk_alloc(d, 4096, &b));
    hp_disk_close(d);
}

static void test_directory_removed_before_open(void **state) {
    (void)state;
    char dir[] = "/tmp/hp-disk-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(rmdir(dir), 0);
    hp_disk_config cfg = HP_DISK_CONFIG_INIT;
    cfg.dir = dir;
    hp_disk *d = NULL;
    assert_int_equal(hp_disk_open(&cfg, &d), HP_STATUS_IO);
    assert_null(d);
    hp_test_assert_error_contains(dir);
    hp_test_assert_error_contains(strerror(ENOENT));
}

static void test_file_removed_mid_run(void **state) {
    (void)state;
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    uint64_t a, b;
    char buf[4096];
    memset(buf, 3, sizeof buf);
    assert_ok(hp_disk_alloc(d, 4096, &a));
    assert_ok(hp_disk_write(d, a, buf, sizeof buf));
    assert_int_equal(unlink(hp_disk_path(d)), 0);
    /* Data already placed stays readable (Linux keeps the inode); growing the store fails clearly. */
    char back[4096];
    assert_ok(hp_disk_read(d, a, back, sizeof back));
    assert_memory_equal(buf, back, sizeof buf);
    assert_int_equal(hp_disk_alloc(d, 4096, &b), HP_STATUS_IO);
    hp_test_assert_error_contains(hp_disk_path(d));
    hp_test_assert_error_contains("removed");
    hp_disk_close(d);
}

static void test_disk_full_rlimit(void **state) {
    (void)state;
    hp_disk *d;
    assert_ok(hp_disk_open(NULL, &d));
    void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit saved, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    lim = saved;
    lim.rlim_cur = 64 * 1024;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    uint64_t a, b;
    hp_status s1 = hp_disk_alloc(d, 32 * 1024, &a);
    hp_status s2 = hp_disk_alloc(d, 64 * 1024, &b); /* would end at 96 KiB > 64 KiB */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hp_error_message());
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old);
    assert_ok(s1);
    assert_int_equal(s2, HP_STATUS_IO);
    assert_non_null(strstr(msg, hp_disk_path(d)));
    assert_non_null(strstr(msg, strerror(EFBIG)));
    /* The store stays usable after the failure. */
    char buf[4096] = {1};
    assert_ok(hp_disk_write(d, a, buf, sizeof buf));
    hp_disk_close(d);
}

static void test_injected_faults(void **state) {
    (void)state;
    for (int uring = 0; uring < 2; uring++) {
        hp_disk_config cfg = HP_DISK_CONFIG_INIT;
        cfg.use_uring = uring;
        hp_disk *d;
        assert_ok(hp_disk_open(&cfg, &d));
        uint64_t a, r1, r2;
        char buf[8192] = {0};
        assert_ok(hp_disk_alloc(d, sizeof buf, &a));
        hp_disk_inject_fault(d, ENOSPC, 1);
        assert_ok(hp_disk_write_async(d, a, buf, 4096, &r1));
        assert_ok(hp_disk_write_async(d, a + 4096, buf, 4096, &r2));
        assert_ok(hp_disk_wait(d, r1));
        assert_int_equal(hp_disk_wait(d, r2), HP_STATUS_IO);
        hp_test_assert_error_contains(hp_disk_path(d));
        hp_test_assert_error_contains(strerror(ENOSPC));
        hp_test_assert_error_contains("write");
        hp_disk_inject_fault(d, EIO, 0);
        assert_int_equal(hp_disk_read(d, a, buf, 4096), HP_STATUS_IO);
        hp_test_assert_error_contains(strerror(EIO));
        assert_ok(hp_disk_read(d, a, buf, 4096)); /* one-shot */
        hp_disk_close(d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_uring),
        cmocka_unit_test(test_roundtrip_pread_fallback),
        cmocka_unit_test(test_direct_in_effect_or_reported),
        cmocka_unit_test(test_budget_cap),
        cmocka_unit_test(test_directory_removed_before_open),
        cmocka_unit_test(test_file_removed_mid_run),
        cmocka_unit_test(test_disk_full_rlimit),
        cmocka_unit_test(test_injected_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
