/* Token shards (hp/shards.h): the file layout (llm.c's slots), shard sets read across shard
 * boundaries, the loader over shards (pure in (seed, step, row), rank slices, resume), prepare from
 * text and JSONL (thread count does not change the result), and bad input: a corrupt, truncated or
 * damaged shard, a bad JSONL line, a vocabulary larger than the model's. */
#include "testutil.h"

#include "hp/config.h"
#include "hp/data.h"
#include "hp/shards.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/hp-test-shards-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* g_dir/name in a static buffer (one at a time). */
static const char *path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

/* Token i of the synthetic stream: identifiable by position, below `vocab`. */
static int32_t tok_at(size_t i, int32_t vocab) { return (int32_t)((i * 7919u + i / 97u) % (uint32_t)vocab); }

static int32_t *stream(size_t n, int32_t vocab) {
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = tok_at(i, vocab);
    return t;
}

/* A set in g_dir/name: n_train + n_val tokens of the synthetic stream, shards of `per` tokens. */
static void write_set(const char *name, size_t n_train, size_t n_val, int32_t vocab, uint64_t per) {
    int32_t *all = stream(n_train + n_val, vocab);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path(name));
    assert_ok(hp_shards_write_tokens(dir, "bytes", "bytes", vocab, all, n_train, all + n_train, n_val, per));
    free(all);
}

static void test_layout_is_llmc_compatible(void **state) {
    (void)state;
    write_set("a", 2500, 600, 256, 1000);
    FILE *f = fopen(path("a/train_000002.bin"), "rb");
    assert_non_null(f);
    int32_t h[256];
    assert_int_equal(fread(h, 4, 256, f), 256);
    assert_int_equal(h[0], 20240520);
    assert_int_equal(h[1], 1); /* uint16 */
    assert_int_equal(h[2], 500);
    assert_int_equal(h[18], 2);
    assert_int_equal(h[19], 256);
    uint16_t t[500];
    assert_int_equal(fread(t, 2, 500, f), 500);
    fclose(f);
    for (int i = 0; i < 500; i++) assert_int_equal(t[i], tok_at(2000 + (size_t)i, 256));
    hp_shard_info in;
    assert_ok(hp_shard_read_info(path("a/val_000000.bin"), &in));
    assert_int_equal(in.tokens, 600);
    assert_int_equal(in.split, HP_SHARD_SPLIT_VAL);
    assert_int_equal(in.token_bytes, 2);
}

static void test_set_reads_across_shards(void **state) {
    (void)state;
    const int32_t vocabs[2] = {256, 70000}; /* uint16 and uint32 tokens */
    for (int k = 0; k < 2; k++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", k);
        write_set(name, 5000, 777, vocabs[k], 999);
        hp_shard_set *s;
        char dir[512];
        snprintf(dir, sizeof dir, "%s", path(name));
        assert_ok(hp_shard_set_open(dir, true, &s));
        assert_int_equal(hp_shard_set_tokens(s, HP_SHARD_SPLIT_TRAIN), 5000);
        assert_int_equal(hp_shard_set_tokens(s, HP_SHARD_SPLIT_VAL), 777);
        assert_int_equal(hp_shard_set_count(s, HP_SHARD_SPLIT_TRAIN), 6);
        assert_int_equal(hp_shard_set_vocab(s), vocabs[k]);
        int32_t buf[5000];
        assert_ok(hp_shard_set_read(s, HP_SHARD_SPLIT_TRAIN, 0, 5000, buf));
        for (size_t i = 0; i < 5000; i++) assert_int_equal(buf[i], tok_at(i, vocabs[k]));
        assert_ok(hp_shard_set_read(s, HP_SHARD_SPLIT_TRAIN, 990, 2020, buf)); /* spans 3 shards */
        for (size_t i = 0; i < 2020; i++) assert_int_equal(buf[i], tok_at(990 + i, vocabs[k]));
        assert_ok(hp_shard_set_read(s, HP_SHARD_SPLIT_VAL, 770, 7, buf));
        for (size_t i = 0; i < 7; i++) assert_int_equal(buf[i], tok_at(5000 + 770 + i, vocabs[k]));
        assert_int_equal(hp_shard_set_read(s, HP_SHARD_SPLIT_VAL, 771, 7, buf), HP_STATUS_INVALID_ARGUMENT);
        hp_test_assert_error_contains("val split (777 tokens)");
        hp_shard_set_free(s);
    }
}

static void test_loader_over_shards(void **state) {
    (void)state;
    write_set("c", 20000, 3000, 256, 4096);
    hp_shard_set *s;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path("c"));
    assert_ok(hp_shard_set_open(dir, false, &s));
    hp_loader_options o = hp_loader_options_default();
    o.batch = 6, o.context = 64, o.seed = 11;
    hp_loader *ld, *again;
    assert_ok(hp_loader_new_shards(s, &o, &ld));
    assert_int_equal(hp_loader_train_tokens(ld), 20000);
    assert_int_equal(hp_loader_val_tokens(ld), 3000);
    int32_t x[6 * 64], y[6 * 64], x2[6 * 64], y2[6 * 64];
    /* every row is the window at its offset: targets are the tokens shifted by one */
    for (int64_t step = 0; step < 20; step++) {
        assert_ok(hp_loader_batch(ld, step, x, y));
        for (int64_t r = 0; r < 6; r++) {
            size_t off = hp_loader_train_offset(ld, step, r);
            for (int t = 0; t < 64; t++) {
                assert_int_equal(x[r * 64 + t], tok_at(off + (size_t)t, 256));
                assert_int_equal(y[r * 64 + t], tok_at(off + (size_t)t + 1, 256));
            }
        }
    }
    /* resume: a new set and loader give step 13's batch again (a pure function of the step) */
    assert_ok(hp_loader_batch(ld, 13, x, y));
    hp_shard_set *s2;
    assert_ok(hp_shard_set_open(dir, true, &s2));
    assert_ok(hp_loader_new_shards(s2, &o, &again));
    assert_ok(hp_loader_batch(again, 13, x2, y2));
    assert_memory_equal(x, x2, sizeof x);
    assert_memory_equal(y, y2, sizeof y);
    assert_ok(hp_loader_batch(again, 14, x2, y2));
    assert_memory_not_equal(x, x2, sizeof x); /* and the steps differ */
    hp_loader_free(again);
    /* rank slices: 3 ranks of 6 rows read disjoint rows whose union is the whole batch */
    assert_ok(hp_loader_batch(ld, 5, x, y));
    for (int rank = 0; rank < 3; rank++) {
        hp_loader_options ro = o;
        ro.rank = rank, ro.world = 3;
        hp_loader *rl;
        assert_ok(hp_loader_new_shards(s2, &ro, &rl));
        int64_t b, e;
        hp_loader_rows(rl, &b, &e);
        assert_int_equal(b, 2 * rank);
        assert_int_equal(e, 2 * rank + 2);
        assert_ok(hp_loader_batch(rl, 5, x2, y2));
        assert_memory_equal(x2, x + b * 64, (size_t)(e - b) * 64 * sizeof *x);
        hp_loader_free(rl);
    }
    /* validation windows: stride T through the val split */
    assert_ok(hp_loader_val_batch(ld, 0, x, y));
    for (int t = 0; t < 64; t++) assert_int_equal(x[64 + t], tok_at(20000 + 64 + (size_t)t, 256));
    hp_loader_free(ld);
    hp_shard_set_free(s);
    hp_shard_set_free(s2);
}

/* Overwrites one byte of `file` at `off` with its complement. */
static void flip(const char *file, long off) {
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(~c & 0xff, f);
    fclose(f);
}

static void test_bad_shards(void **state) {
    (void)state;
    char dir[512];
    hp_shard_set *s = NULL;
    /* a flipped payload byte: the header still checks out, the crc32 does not */
    write_set("d", 3000, 500, 256, 1000);
    flip(path("d/train_000001.bin"), 1024 + 777);
    snprintf(dir, sizeof dir, "%s", path("d"));
    assert_ok(hp_shard_set_open(dir, false, &s));
    hp_shard_set_free(s);
    assert_int_equal(hp_shard_set_open(dir, true, &s), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("train_000001.bin' is corrupt: its payload's crc32 is 0x");
    assert_null(s);
    /* truncated */
    write_set("e", 3000, 500, 256, 1000);
    assert_int_equal(truncate(path("e/train_000002.bin"), 1024 + 1500), 0);
    snprintf(dir, sizeof dir, "%s", path("e"));
    assert_int_equal(hp_shard_set_open(dir, false, &s), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("train_000002.bin' is truncated: 2524 bytes, its header says 1024 + 1000 tokens x 2 bytes = 3024");
    /* a damaged header (the vocabulary slot) */
    write_set("f", 3000, 500, 256, 1000);
    flip(path("f/val_000000.bin"), 19 * 4);
    snprintf(dir, sizeof dir, "%s", path("f"));
    assert_int_equal(hp_shard_set_open(dir, false, &s), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("val_000000.bin': header crc32 0x");
    /* not a shard */
    FILE *f = fopen(path("f/val_000000.bin"), "wb");
    fputs("hello", f);
    fclose(f);
    assert_int_equal(hp_shard_set_open(dir, false, &s), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("shorter than the 1024-byte header");
    /* no index: not a shard set */
    assert_int_equal(hp_shard_set_open(g_dir, false, &s), HP_STATUS_IO);
    hp_test_assert_error_contains("index.json");
    /* a second write into a finished set is refused */
    int32_t one[2] = {1, 2};
    snprintf(dir, sizeof dir, "%s", path("d"));
    assert_int_equal(hp_shards_write_tokens(dir, "bytes", "bytes", 256, one, 2, one, 2, 10), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("already holds a shard set");
    /* an id outside the vocabulary is refused when writing */
    int32_t bad[3] = {1, 300, 2};
    snprintf(dir, sizeof dir, "%s", path("g"));
    assert_int_equal(hp_shards_write_tokens(dir, "bytes", "bytes", 256, bad, 3, bad, 3, 10), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("token 300 at position 1 is outside the vocabulary [0, 256)");
}

static void write_text(const char *file, const char *text) {
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The whole set's tokens (train then val) as bytes; *n receives the count. */
static char *set_bytes(const char *dir, size_t *n) {
    hp_shard_set *s;
    assert_ok(hp_shard_set_open(dir, true, &s));
    size_t nt = hp_shard_set_tokens(s, HP_SHARD_SPLIT_TRAIN), nv = hp_shard_set_tokens(s, HP_SHARD_SPLIT_VAL);
    int32_t *t = malloc((nt + nv) * sizeof *t);
    assert_ok(hp_shard_set_read(s, HP_SHARD_SPLIT_TRAIN, 0, nt, t));
    assert_ok(hp_shard_set_read(s, HP_SHARD_SPLIT_VAL, 0, nv, t + nt));
    assert_int_equal(hp_shard_set_bytes(s, HP_SHARD_SPLIT_TRAIN) + hp_shard_set_bytes(s, HP_SHARD_SPLIT_VAL), nt + nv);
    char *b = malloc(nt + nv + 1);
    for (size_t i = 0; i < nt + nv; i++) b[i] = (char)t[i];
    b[nt + nv] = 0;
    free(t);
    hp_shard_set_free(s);
    *n = nt + nv;
    return b;
}

static void test_prepare_text_and_jsonl(void **state) {
    (void)state;
    /* 3 text paragraphs of KJV-like lines and 3 documents */
    char *text = malloc(200000);
    size_t len = 0;
    for (int i = 0; i < 3000; i++) len += (size_t)sprintf(text + len, "%d:%d And it came to pass, line %d.\n", i / 50, i % 50, i);
    write_text(path("a.txt"), text);
    write_text(path("b.jsonl"), "{\"text\": \"First document.\\n\"}\n\n{\"text\": \"Second \\u00e9\", \"id\": 2}\n"
                                "{\"text\": \"Third.\"}\n");
    const char *inputs[2];
    char in0[512], in1[512], d1[512], d3[512];
    snprintf(in0, sizeof in0, "%s", path("a.txt"));
    snprintf(in1, sizeof in1, "%s", path("b.jsonl"));
    inputs[0] = in0, inputs[1] = in1;
    snprintf(d1, sizeof d1, "%s", path("p1"));
    snprintf(d3, sizeof d3, "%s", path("p3"));
    hp_shards_prepare_options o = hp_shards_prepare_options_default();
    o.chunk_bytes = 4096;
    o.shard_tokens = 20000;
    o.val_fraction = 0.1;
    hp_shards_prepare_result r1, r3;
    assert_ok(hp_shards_prepare(inputs, 2, d1, &o, &r1));
    o.threads = 3;
    assert_ok(hp_shards_prepare(inputs, 2, d3, &o, &r3));
    assert_int_equal(r1.documents, 3);
    assert_int_equal(r1.tokens[0], r3.tokens[0]);
    assert_int_equal(r1.tokens[1], r3.tokens[1]);
    assert_true(r1.shards[0] >= 5);
    /* the validation split is the tail, cut just after a newline near 90% of the input bytes */
    size_t total = len + strlen("First document.\n") + strlen("Second \xc3\xa9") + strlen("Third.");
    struct stat sb;
    assert_int_equal(stat(in1, &sb), 0);
    size_t jsonl_bytes = (size_t)sb.st_size;
    size_t split_at = (size_t)((double)(len + jsonl_bytes) * 0.9);
    assert_true(r1.tokens[0] >= split_at && r1.tokens[0] < split_at + 64);
    assert_int_equal(text[r1.tokens[0] - 1], '\n');
    /* the tokens are the inputs' bytes (documents' texts) in order, whatever the thread count */
    size_t n1, n3;
    char *b1 = set_bytes(d1, &n1), *b3 = set_bytes(d3, &n3);
    assert_int_equal(n1, total);
    assert_int_equal(n3, total);
    assert_memory_equal(b1, text, len);
    assert_memory_equal(b1 + len, "First document.\nSecond \xc3\xa9Third.", total - len);
    assert_memory_equal(b1, b3, n1);
    free(b1);
    free(b3);
    /* a JSONL line that is not {"text": "..."} names the file and line */
    write_text(path("bad.jsonl"), "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
    char in2[512], d4[512];
    snprintf(in2, sizeof in2, "%s", path("bad.jsonl"));
    snprintf(d4, sizeof d4, "%s", path("p4"));
    const char *bad[1] = {in2};
    assert_int_equal(hp_shards_prepare(bad, 1, d4, &o, NULL), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("bad.jsonl:2: expected a JSON object with a string \"text\"");
    /* an input too small for a validation split */
    write_text(path("tiny.txt"), "x");
    snprintf(in2, sizeof in2, "%s", path("tiny.txt"));
    snprintf(d4, sizeof d4, "%s", path("p5"));
    assert_int_equal(hp_shards_prepare(bad, 1, d4, &o, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("both splits need tokens");
    free(text);
}

static void test_trainer_checks_vocab(void **state) {
    (void)state;
    write_set("v", 5000, 1000, 70000, 100000);
    hp_run_config c;
    hp_test_tiny_config(&c, NULL);
    snprintf(c.data.shards, sizeof c.data.shards, "%s", path("v"));
    hp_trainer *t = NULL;
    assert_int_equal(hp_trainer_new(&c, &t), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("model.vocab 256 is smaller than the vocabulary 70000 of data.shards");
    assert_null(t);
}

static void test_trainer_on_shards_resumes(void **state) {
    (void)state;
    /* the KJV as shards: a trainer on them resumes into the same losses as an uninterrupted run */
    char dir[512], ck[512];
    snprintf(dir, sizeof dir, "%s", path("kjv"));
    snprintf(ck, sizeof ck, "%s", path("run"));
    const char *inputs[1] = {hp_test_source_path("data/kjv.txt")};
    hp_shards_prepare_options o = hp_shards_prepare_options_default();
    o.shard_tokens = 1000000;
    assert_ok(hp_shards_prepare(inputs, 1, dir, &o, NULL));
    hp_run_config c;
    hp_test_tiny_config(&c, ck);
    snprintf(c.data.shards, sizeof c.data.shards, "%s", dir);
    c.train.steps = 6;
    hp_trainer *t;
    double full[6], tail[3];
    assert_ok(hp_trainer_new(&c, &t));
    hp_test_run_steps(t, 3, full);
    assert_ok(hp_trainer_save(t, NULL, 0));
    hp_test_run_steps(t, 3, full + 3);
    double val;
    assert_ok(hp_trainer_eval(t, &val));
    assert_true(val > 0 && val < 6);
    hp_trainer_free(t);
    assert_ok(hp_trainer_new(&c, &t));
    assert_ok(hp_trainer_resume(t, ck));
    assert_int_equal(hp_trainer_steps_done(t), 3);
    hp_test_run_steps(t, 3, tail);
    for (int i = 0; i < 3; i++) assert_close(tail[i], full[3 + i], 1e-6, 0);
    /* sampling through the set's tokenizer ("bytes") is the byte-level sampler's text exactly */
    char *a = NULL, *g = NULL;
    assert_ok(hp_trainer_sample(t, "And God said", 24, 0.8f, 20, 5, &a));
    assert_ok(hp_trainer_save(t, NULL, 0));
    assert_ok(hp_generate_from_checkpoint(ck, "And God said", 24, 0.8f, 20, 5, &g));
    assert_int_equal(strncmp(a, "And God said", 12), 0);
    assert_int_equal(strlen(a), 12 + 24);
    assert_string_equal(a, g);
    free(a);
    free(g);
    hp_trainer_free(t);
}

static void test_tokenizer_files_copy(void **state) {
    (void)state;
    char out[512], spec[64], src[512];
    snprintf(out, sizeof out, "%s", path("tokcopy"));
    assert_int_equal(mkdir(out, 0777), 0);
    assert_ok(hp_tokenizer_files_copy("bytes", out, spec, sizeof spec));
    assert_string_equal(spec, "bytes");
    write_text(path("my-tokenizer.json"), "{\"model\": {\"type\": \"BPE\"}}");
    snprintf(src, sizeof src, "%s", path("my-tokenizer.json"));
    assert_ok(hp_tokenizer_files_copy(src, out, spec, sizeof spec));
    assert_string_equal(spec, "tokenizer.json");
    FILE *f = fopen(path("tokcopy/tokenizer.json"), "rb");
    assert_non_null(f);
    char buf[64] = {0};
    assert_true(fread(buf, 1, sizeof buf - 1, f) > 0);
    fclose(f);
    assert_string_equal(buf, "{\"model\": {\"type\": \"BPE\"}}");
    /* a GPT-2 directory: encoder.json + vocab.bpe, loaded as the directory "." */
    snprintf(src, sizeof src, "%s", path("gpt2"));
    assert_int_equal(mkdir(src, 0777), 0);
    write_text(path("gpt2/encoder.json"), "{}");
    write_text(path("gpt2/vocab.bpe"), "#version: 0.2\n");
    snprintf(out, sizeof out, "%s", path("tokcopy2"));
    assert_int_equal(mkdir(out, 0777), 0);
    assert_ok(hp_tokenizer_files_copy(src, out, spec, sizeof spec));
    assert_string_equal(spec, ".");
    assert_int_equal(access(path("tokcopy2/vocab.bpe"), R_OK), 0);
    assert_int_equal(access(path("tokcopy2/encoder.json"), R_OK), 0);
    assert_int_equal(hp_tokenizer_files_copy(path("nowhere"), out, spec, sizeof spec), HP_STATUS_IO);
    hp_test_assert_error_contains("nowhere");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_is_llmc_compatible),
        cmocka_unit_test(test_set_reads_across_shards),
        cmocka_unit_test(test_loader_over_shards),
        cmocka_unit_test(test_bad_shards),
        cmocka_unit_test(test_prepare_text_and_jsonl),
        cmocka_unit_test(test_trainer_checks_vocab),
        cmocka_unit_test(test_trainer_on_shards_resumes),
        cmocka_unit_test(test_tokenizer_files_copy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
