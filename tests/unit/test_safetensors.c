/* safetensors: exact bytes, round trip, load errors and every kind of corruption. */
#include "testutil.h"

#include "hp/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char g_dir[64];
static char g_path[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/hp_test_st_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_path, sizeof g_path, "%s/t.safetensors", g_dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    rmdir(g_dir);
    return 0;
}

static size_t read_all(const char *path, unsigned char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* Writes 8-byte length + header (unpadded) + `nbytes` zero data bytes; `len_override` if nonzero. */
static void write_raw(const char *header, size_t nbytes, uint64_t len_override) {
    FILE *f = fopen(g_path, "wb");
    assert_non_null(f);
    uint64_t n = len_override ? len_override : strlen(header);
    unsigned char l[8];
    for (int i = 0; i < 8; i++) l[i] = (unsigned char)(n >> (8 * i));
    fwrite(l, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < nbytes; i++) fputc(0, f);
    fclose(f);
}

static void expect_corrupt(const char *header, size_t nbytes, uint64_t len_override, const char *needle) {
    write_raw(header, nbytes, len_override);
    hp_safetensors *f = NULL;
    hp_status st = hp_safetensors_open(g_path, &f);
    if (st != HP_STATUS_CORRUPT)
        fail_msg("header %s: got %s (%s), expected corrupt", header, hp_status_str(st), hp_error_message());
    assert_null(f);
    hp_test_assert_error_contains(g_path);
    if (needle) hp_test_assert_error_contains(needle);
}

static void test_exact_bytes(void **state) {
    (void)state;
    float a[2] = {1.0f, -2.0f};
    hp_named_tensor t[] = {{"a", HP_DTYPE_F32, HP_SHAPE(2), a}};
    assert_ok(hp_safetensors_write(g_path, t, 1, NULL, 0));
    unsigned char buf[256];
    size_t n = read_all(g_path, buf, sizeof buf);
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"; /* 54 bytes */
    assert_int_equal(n, 8 + 56 + 8);
    assert_int_equal(buf[0], 56);
    for (int i = 1; i < 8; i++) assert_int_equal(buf[i], 0);
    assert_memory_equal(buf + 8, hdr, 54);
    assert_memory_equal(buf + 8 + 54, "  ", 2); /* padding to a multiple of 8 */
    assert_memory_equal(buf + 64, a, 8);
}

static void test_round_trip(void **state) {
    (void)state;
    float w[3 * 4];
    hp_test_fill_uniform(w, 12, 1, -1, 1);
    uint16_t h[5] = {hp_f32_to_bf16(1.5f), hp_f32_to_bf16(-3.0f), 0, 1, 0x7f80};
    int32_t ids[2 * 2 * 2] = {1, -2, 3, -4, 5, 6, 7, 2147483647};
    float s = 42.0f;
    hp_named_tensor t[] = {
        {"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(3, 4), w},
        {"half", HP_DTYPE_BF16, HP_SHAPE(5), h}, /* 10 bytes: the next tensor is unaligned */
        {"ids", HP_DTYPE_I32, HP_SHAPE(2, 2, 2), ids},
        {"scalar", HP_DTYPE_F32, HP_SHAPE_SCALAR, &s},
        {"empty", HP_DTYPE_F32, HP_SHAPE(0, 3), NULL},
    };
    const char *meta[] = {"format", "pt", "step", "12"};
    assert_ok(hp_safetensors_write(g_path, t, 5, meta, 2));

    hp_safetensors *f;
    assert_ok(hp_safetensors_open(g_path, &f));
    assert_int_equal(hp_safetensors_count(f), 5);
    assert_string_equal(hp_safetensors_metadata(f, "step"), "12");
    assert_null(hp_safetensors_metadata(f, "nope"));
    const hp_safetensors_entry *e = hp_safetensors_find(f, "ids");
    assert_non_null(e);
    assert_int_equal(e->dtype, HP_DTYPE_I32);
    assert_int_equal(e->shape.ndim, 3);
    assert_int_equal(e->offset, 48 + 10);
    assert_int_equal(hp_safetensors_entry_at(f, 0)->offset, 0);
    assert_null(hp_safetensors_find(f, "nothing"));

    float w2[12], s2 = 0;
    uint16_t h2[5];
    int32_t ids2[8];
    hp_named_tensor want[] = {
        {"ids", HP_DTYPE_I32, HP_SHAPE(2, 2, 2), ids2},
        {"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(3, 4), w2},
        {"scalar", HP_DTYPE_F32, HP_SHAPE_SCALAR, &s2},
        {"half", HP_DTYPE_BF16, HP_SHAPE(5), h2},
    };
    assert_ok(hp_safetensors_read_into(f, want, 4));
    assert_memory_equal(w, w2, sizeof w);
    assert_memory_equal(h, h2, sizeof h);
    assert_memory_equal(ids, ids2, sizeof ids);
    assert_true(s2 == 42.0f);

    /* Load errors name the file and tensor. */
    hp_named_tensor missing = {"blocks.1.mlp", HP_DTYPE_F32, HP_SHAPE(3, 4), w2};
    assert_int_equal(hp_safetensors_read_into(f, &missing, 1), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("missing tensor 'blocks.1.mlp'");
    hp_test_assert_error_contains(g_path);
    hp_named_tensor badshape = {"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(4, 3), w2};
    assert_int_equal(hp_safetensors_read_into(f, &badshape, 1), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("has shape [3, 4], expected [4, 3]");
    hp_named_tensor baddt = {"ids", HP_DTYPE_F32, HP_SHAPE(2, 2, 2), ids2};
    assert_int_equal(hp_safetensors_read_into(f, &baddt, 1), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("has dtype i32, expected f32");
    hp_safetensors_close(f);

    /* Writer argument errors. */
    hp_named_tensor dup[] = {{"x", HP_DTYPE_F32, HP_SHAPE(1), &s}, {"x", HP_DTYPE_F32, HP_SHAPE(1), &s}};
    assert_int_equal(hp_safetensors_write(g_path, dup, 2, NULL, 0), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("duplicate tensor name 'x'");
    assert_int_equal(hp_safetensors_write("/nonexistent/dir/x.safetensors", dup, 1, NULL, 0), HP_STATUS_IO);
    hp_test_assert_error_contains("/nonexistent/dir/x.safetensors");
    hp_safetensors *g;
    assert_int_equal(hp_safetensors_open("/nonexistent/x.safetensors", &g), HP_STATUS_IO);
}

static void test_corruption(void **state) {
    (void)state;
    /* Truncated: a valid file cut short. */
    float a[4] = {1, 2, 3, 4};
    hp_named_tensor t[] = {{"a", HP_DTYPE_F32, HP_SHAPE(4), a}};
    assert_ok(hp_safetensors_write(g_path, t, 1, NULL, 0));
    assert_int_equal(truncate(g_path, 8 + 56 + 10), 0);
    hp_safetensors *f;
    assert_int_equal(hp_safetensors_open(g_path, &f), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("truncated");
    assert_int_equal(truncate(g_path, 5), 0);
    assert_int_equal(hp_safetensors_open(g_path, &f), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("too short");

    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    write_raw(ok, 8, 0);
    assert_ok(hp_safetensors_open(g_path, &f));
    hp_safetensors_close(f);

    /* Header length beyond the file, and zero. */
    expect_corrupt(ok, 8, 1000, "header length 1000");
    expect_corrupt(ok, 8, (uint64_t)1 << 62, "header length");
    expect_corrupt("", 8, 0, "header length 0");
    /* Bad JSON. */
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",", 8, 0, "not valid JSON");
    expect_corrupt("[1, 2]", 8, 0, "does not start with '{'");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} xx", 8, 0, "trailing");
    /* Offsets out of range, reversed, malformed. */
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, 0, "out of range");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, 0, "out of range");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, 0, "data_offsets");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, 0, "data_offsets");
    /* Shape and size disagree. */
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, "tensor 'a': shape [3]");
    expect_corrupt("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, "needs 4 bytes");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, 0, "shape[0]");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, 0, "shape");
    /* Unknown dtype. */
    expect_corrupt("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, 0, "unknown dtype 'F64'");
    expect_corrupt("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,8]}}", 8, 0, "dtype");
    /* Overlap, hole, unused trailing bytes, duplicate name. */
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   8, 0, "overlaps");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0, "hole");
    expect_corrupt(ok, 12, 0, "trailing bytes");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   8, 0, "duplicate tensor 'a'");
    expect_corrupt("{\"__metadata__\":{\"k\":1}}", 0, 0, "__metadata__");
    expect_corrupt("{\"a\":[1]}", 0, 0, "tensor 'a'");
}

/* A header of 200,000 (empty) tensors opens in well under a second: names are checked for duplicates
 * by sorting (checking each against all the others took minutes: a hang on a hostile file). */
static void test_many_tensors(void **state) {
    (void)state;
    enum { N = 200000 };
    size_t cap = (size_t)N * 64 + 64, len = 0;
    char *h = malloc(cap);
    assert_non_null(h);
    h[len++] = '{';
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(h + len, cap - len, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                                i ? "," : "", i);
    snprintf(h + len, cap - len, "}");
    write_raw(h, 0, 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    hp_safetensors *f = NULL;
    assert_ok(hp_safetensors_open(g_path, &f));
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    assert_int_equal(hp_safetensors_count(f), N);
    hp_safetensors_close(f);
    if (secs > 20) fail_msg("opening %d tensors took %.1f s", N, secs); /* ~0.5 s; quadratic: minutes */
    /* The last name made equal to one in the middle: the duplicate is found. */
    memcpy(strstr(h, "\"t199999\""), "\"t100000\"", 9);
    write_raw(h, 0, 0);
    free(h);
    assert_int_equal(hp_safetensors_open(g_path, &f), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("duplicate tensor 't100000'");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_bytes),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_many_tensors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
