/* Byte tokenizer, corpus loading, train/val split and the deterministic loader. */
#include "testutil.h"

#include "hp/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_tokenizer_round_trip(void **state) {
    (void)state;
    const char *text = "In the beginning \xe2\x80\x94 caf\xc3\xa9 \x01\xff";
    size_t n = strlen(text);
    int32_t tok[64];
    assert_int_equal(hp_byte_encode(text, n, tok), n);
    assert_int_equal(tok[0], 'I');
    assert_int_equal(tok[n - 1], 255);
    char back[64];
    assert_ok(hp_byte_decode(tok, n, back));
    assert_memory_equal(back, text, n);
    tok[3] = 256;
    assert_int_equal(hp_byte_decode(tok, n, back), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("token 256 at position 3");
}

/* A corpus of n bytes where byte i is (i * 7 + i / 256) % 256, so windows are identifiable. */
static hp_corpus *make_corpus(size_t n) {
    char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (char)((i * 7 + i / 256) % 256);
    hp_corpus *c = NULL;
    assert_ok(hp_corpus_from_text(buf, n, "synthetic", &c));
    free(buf);
    return c;
}

static void test_loader_determinism_and_rank_slices(void **state) {
    (void)state;
    hp_corpus *c = make_corpus(10000);
    hp_loader_options o = hp_loader_options_default();
    o.batch = 8;
    o.context = 16;
    o.seed = 42;
    o.val_fraction = 0.1;
    hp_loader *a, *b;
    assert_ok(hp_loader_new(c, &o, &a));
    assert_ok(hp_loader_new(c, &o, &b));
    assert_int_equal(hp_loader_val_tokens(a), 1000);
    assert_int_equal(hp_loader_train_tokens(a), 9000);

    int32_t x1[8 * 16], y1[8 * 16], x2[8 * 16], y2[8 * 16];
    /* Same (seed, step) -> same batch, in any order of calls; targets are the shift by one. */
    assert_ok(hp_loader_batch(a, 5, x1, y1));
    assert_ok(hp_loader_batch(b, 3, x2, y2));
    assert_ok(hp_loader_batch(b, 5, x2, y2));
    assert_memory_equal(x1, x2, sizeof x1);
    assert_memory_equal(y1, y2, sizeof y1);
    const int32_t *tok = hp_corpus_tokens(c);
    for (int r = 0; r < 8; r++) {
        size_t s = hp_loader_train_offset(a, 5, r);
        assert_true(s + 16 < 9000 + 1); /* window of T+1 inside the train split */
        for (int t = 0; t < 16; t++) {
            assert_int_equal(x1[r * 16 + t], tok[s + t]);
            assert_int_equal(y1[r * 16 + t], tok[s + t + 1]);
        }
    }
    /* A different step or seed gives a different batch. */
    assert_ok(hp_loader_batch(a, 6, x2, y2));
    assert_true(memcmp(x1, x2, sizeof x1) != 0);
    hp_loader_options o2 = o;
    o2.seed = 43;
    hp_loader *d;
    assert_ok(hp_loader_new(c, &o2, &d));
    assert_ok(hp_loader_batch(d, 5, x2, y2));
    assert_true(memcmp(x1, x2, sizeof x1) != 0);
    hp_loader_free(d);

    /* Rank slices: world 3 over batch 8 -> rows [0,2), [2,5), [5,8); concatenated = global. */
    int32_t xs[8 * 16], ys[8 * 16];
    int64_t covered = 0;
    for (int rank = 0; rank < 3; rank++) {
        hp_loader_options orank = o;
        orank.rank = rank;
        orank.world = 3;
        hp_loader *lr;
        assert_ok(hp_loader_new(c, &orank, &lr));
        int64_t r0, r1;
        hp_loader_rows(lr, &r0, &r1);
        assert_int_equal(r0, covered);
        assert_ok(hp_loader_batch(lr, 5, xs + r0 * 16, ys + r0 * 16));
        covered = r1;
        hp_loader_free(lr);
    }
    assert_int_equal(covered, 8);
    assert_memory_equal(xs, x1, sizeof x1);
    assert_memory_equal(ys, y1, sizeof y1);

    /* Offsets spread over the whole train split. */
    size_t lo = 9000, hi = 0;
    for (int s = 0; s < 200; s++)
        for (int r = 0; r < 8; r++) {
            size_t off = hp_loader_train_offset(a, s, r);
            lo = off < lo ? off : lo;
            hi = off > hi ? off : hi;
        }
    assert_true(lo < 200 && hi > 8700);

    assert_int_equal(hp_loader_batch(a, -1, x1, y1), HP_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hp_loader_batch_rows(a, 0, 7, 9, x1, y1), HP_STATUS_INVALID_ARGUMENT);
    hp_loader_free(a);
    hp_loader_free(b);
    hp_corpus_free(c);
}

static void test_val_split(void **state) {
    (void)state;
    hp_corpus *c = make_corpus(1000);
    hp_loader_options o = hp_loader_options_default();
    o.batch = 4;
    o.context = 10;
    o.val_fraction = 0.25; /* val = tokens [750, 1000) */
    hp_loader *ld;
    assert_ok(hp_loader_new(c, &o, &ld));
    assert_int_equal(hp_loader_train_tokens(ld), 750);
    assert_int_equal(hp_loader_val_windows(ld), 24); /* (250 - 1) / 10 */
    const int32_t *tok = hp_corpus_tokens(c);
    int32_t x[40], y[40];
    for (int64_t idx = 0; idx < 8; idx++) {
        assert_ok(hp_loader_val_batch(ld, idx, x, y));
        for (int r = 0; r < 4; r++) {
            size_t start = 750 + (size_t)(((idx * 4 + r) % 24) * 10);
            assert_int_equal(x[r * 10], tok[start]);
            assert_int_equal(y[r * 10 + 9], tok[start + 10]);
        }
    }
    /* Training windows never touch the val split. */
    for (int s = 0; s < 500; s++)
        for (int r = 0; r < 4; r++) assert_true(hp_loader_train_offset(ld, s, r) + 10 < 750);
    hp_loader_free(ld);

    /* Too short for the context: the error names the corpus and the context. */
    o.context = 300;
    assert_int_equal(hp_loader_new(c, &o, &ld), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("synthetic");
    hp_test_assert_error_contains("context 300");
    o.context = 10;
    o.val_fraction = 1.0;
    assert_int_equal(hp_loader_new(c, &o, &ld), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("val_fraction");
    o.val_fraction = 0.1;
    o.world = 5;
    assert_int_equal(hp_loader_new(c, &o, &ld), HP_STATUS_INVALID_ARGUMENT);
    hp_corpus_free(c);
}

static void test_missing_and_empty_files(void **state) {
    (void)state;
    hp_corpus *c = (hp_corpus *)0x1;
    assert_int_equal(hp_corpus_load("/nonexistent/hp/corpus.txt", &c), HP_STATUS_IO);
    assert_null(c);
    hp_test_assert_error_contains("/nonexistent/hp/corpus.txt");

    char dir[] = "/tmp/hp_test_data_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/empty.txt", dir);
    FILE *f = fopen(path, "w");
    fclose(f);
    assert_int_equal(hp_corpus_load(path, &c), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains(path);
    hp_test_assert_error_contains("empty");

    f = fopen(path, "w");
    fputs("hello, world\n", f);
    fclose(f);
    assert_ok(hp_corpus_load(path, &c));
    assert_int_equal(hp_corpus_size(c), 13);
    assert_string_equal(hp_corpus_name(c), path);
    hp_corpus_free(c);
    unlink(path);
    rmdir(dir);
}

static void test_unigram_entropy(void **state) {
    (void)state;
    hp_corpus *c;
    /* "aabb": two symbols, equally likely -> ln 2 nats. */
    assert_ok(hp_corpus_from_text("aabbcccc", 8, NULL, &c));
    assert_close(hp_corpus_unigram_entropy(c, 0, 4), log(2.0), 1e-12, 1e-12);
    /* "aabbcccc": p = 1/4, 1/4, 1/2 -> 1.5 bits. */
    assert_close(hp_corpus_unigram_entropy(c, 0, 8) / log(2.0), 1.5, 1e-12, 1e-12);
    assert_close(hp_corpus_unigram_entropy(c, 4, 8), 0.0, 0, 1e-12);
    hp_corpus_free(c);
}

/* The default corpus, when scripts/get-data.sh has been run (skipped otherwise). */
static void test_kjv_corpus(void **state) {
    (void)state;
    const char *path = hp_test_source_path("data/kjv.txt");
    if (access(path, R_OK) != 0) skip();
    hp_corpus *c;
    assert_ok(hp_corpus_load(path, &c));
    size_t n = hp_corpus_size(c);
    assert_true(n > 4000000);
    hp_loader_options o = hp_loader_options_default();
    hp_loader *ld;
    assert_ok(hp_loader_new(c, &o, &ld));
    /* Unigram entropy of English bytes: about 3.03 nats (4.37 bits) per token. */
    double h = hp_corpus_unigram_entropy(c, 0, hp_loader_train_tokens(ld));
    assert_true(h > 2.8 && h < 3.3);
    const char *prefix = "Genesis\n\nChapter 1\nIn the beginning God created";
    char head[64];
    assert_ok(hp_byte_decode(hp_corpus_tokens(c), strlen(prefix), head));
    assert_memory_equal(head, prefix, strlen(prefix));
    hp_loader_free(ld);
    hp_corpus_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_round_trip),
        cmocka_unit_test(test_loader_determinism_and_rank_slices),
        cmocka_unit_test(test_val_split),
        cmocka_unit_test(test_missing_and_empty_files),
        cmocka_unit_test(test_unigram_entropy),
        cmocka_unit_test(test_kjv_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
