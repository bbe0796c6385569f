/* Byte-level BPE files and training (hp/tokenizer.h): tokenizer.json save/load round trips, bad
 * files (corrupt or truncated JSON, a WordPiece model, a merge naming an unknown token, a merge
 * making a token not in the vocabulary, a missing byte, gaps in the ids, a missing file), and
 * training: deterministic, the merges of a naive trainer (scripts/tokenizer-ref/train_ref.py) on a
 * KJV slice, files read in chunks equal to the text in memory, progress reports. */
#include "testutil.h"

#include "data/bpe_internal.h"
#include "hp/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/hp_test_tokenizer_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static void encode_eq(hp_tokenizer *a, hp_tokenizer *b, const char *text, size_t len) {
    int32_t *ia, *ib;
    size_t na, nb;
    assert_ok(hp_tokenizer_encode(a, text, len, &ia, &na));
    assert_ok(hp_tokenizer_encode(b, text, len, &ib, &nb));
    assert_int_equal(na, nb);
    assert_memory_equal(ia, ib, na * sizeof *ia);
    free(ia);
    free(ib);
}

static void test_save_load_gpt2(void **state) {
    (void)state;
    hp_tokenizer *t, *u;
    assert_ok(hp_tokenizer_load(hp_test_source_path("tests/data/gpt2"), &t));
    assert_ok(hp_tokenizer_save(t, tmp("gpt2.json")));
    assert_ok(hp_tokenizer_load(tmp("gpt2.json"), &u));
    assert_int_equal(hp_tokenizer_vocab_size(u), 50257);
    assert_int_equal(hp_tokenizer_merge_count(u), 50000);
    assert_int_equal(hp_tokenizer_special_id(u, "<|endoftext|>"), 50256);
    size_t len;
    char *text = slurp(hp_test_source_path("tests/data/gpt2/mixed.txt"), &len);
    assert_non_null(text);
    encode_eq(t, u, text, len);
    /* Saving what was loaded writes the same bytes. */
    assert_ok(hp_tokenizer_save(u, tmp("gpt2b.json")));
    size_t la, lb;
    char *a = slurp(tmp("gpt2.json"), &la), *b = slurp(tmp("gpt2b.json"), &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    /* A directory holding tokenizer.json loads it. */
    assert_int_equal(mkdir(tmp("dir"), 0755), 0);
    assert_ok(hp_tokenizer_save(t, tmp("dir/tokenizer.json")));
    hp_tokenizer *d;
    assert_ok(hp_tokenizer_load(tmp("dir"), &d));
    encode_eq(t, d, text, len);
    hp_tokenizer_free(d);
    free(a);
    free(b);
    free(text);
    hp_tokenizer_free(t);
    hp_tokenizer_free(u);
}

/* A tokenizer.json with the 256 byte tokens, `extra` more vocab entries (JSON members, each
 * ending in a comma) and `merges` (JSON array members). */
static void write_tiny(const char *path, const char *extra, const char *merges, int skip_byte) {
    size_t cap = 1 << 16, o = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    o += (size_t)snprintf(s + o, cap - o,
                          "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": null,\n"
                          "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},\n"
                          "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    int id = 0;
    for (int c = 0; c < 256; c++) {
        if (c == skip_byte) continue;
        char u[8];
        size_t k = hp__bpe_utf8_encode(hp__bpe_byte_unicode((uint8_t)c), u);
        u[k] = 0;
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(s + o, cap - o, "\"\\%s\": %d, ", u, id++);
        else
            o += (size_t)snprintf(s + o, cap - o, "\"%s\": %d, ", u, id++);
    }
    o += (size_t)snprintf(s + o, cap - o, "%s \"ab\": %d}, \"merges\": [%s]}}\n", extra, id, merges);
    write_file(path, s, o);
    free(s);
}

static void expect_fail(const char *path, hp_status want, const char *needle1, const char *needle2) {
    hp_tokenizer *t = (hp_tokenizer *)0x1;
    hp_status st = hp_tokenizer_load(path, &t);
    if (st != want)
        fail_msg("loading %s: %s (%s), wanted %s", path, hp_status_str(st), hp_error_message(), hp_status_str(want));
    assert_null(t);
    hp_test_assert_error_contains(needle1);
    if (needle2) hp_test_assert_error_contains(needle2);
}

static void test_bad_files(void **state) {
    (void)state;
    /* A good tiny file first, so the failures below are the edits'. */
    write_tiny(tmp("tiny.json"), "", "\"a b\"", -1);
    hp_tokenizer *t;
    assert_ok(hp_tokenizer_load(tmp("tiny.json"), &t));
    assert_int_equal(hp_tokenizer_vocab_size(t), 257);
    int32_t *ids;
    size_t n;
    assert_ok(hp_tokenizer_encode(t, "abab ab", 7, &ids, &n));
    int32_t want[] = {256, 256, 32, 256};
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    /* decode names an id outside the vocabulary and its position */
    int32_t bad[] = {97, 257};
    char *back;
    size_t blen;
    assert_int_equal(hp_tokenizer_decode(t, bad, 2, &back, &blen), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("id 257 at position 1");
    hp_tokenizer_free(t);

    write_tiny(tmp("unknown.json"), "", "\"a b\", \"a zz\"", -1);
    expect_fail(tmp("unknown.json"), HP_STATUS_CORRUPT, "unknown.json", "'zz'");
    write_tiny(tmp("notinvocab.json"), "", "\"b a\"", -1);
    expect_fail(tmp("notinvocab.json"), HP_STATUS_CORRUPT, "notinvocab.json", "not in the vocabulary");
    write_tiny(tmp("nobyte.json"), "", "\"a b\"", 'x');
    expect_fail(tmp("nobyte.json"), HP_STATUS_CORRUPT, "nobyte.json", "byte 0x78");
    write_tiny(tmp("gap.json"), "\"gap\": 300,", "", -1);
    expect_fail(tmp("gap.json"), HP_STATUS_CORRUPT, "gap.json", "id 300 but only 258");
    write_tiny(tmp("gap2.json"), "\"x1\": 257, \"x2\": 257, \"x3\": 259,", "", -1);
    expect_fail(tmp("gap2.json"), HP_STATUS_CORRUPT, "gap2.json", "id 257 is given to two");

    const char *wp =
        "{\"version\": \"1.0\", \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},\n"
        "\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0, \"a\": 1}}}\n";
    write_file(tmp("wordpiece.json"), wp, strlen(wp));
    expect_fail(tmp("wordpiece.json"), HP_STATUS_UNSUPPORTED, "wordpiece.json", "WordPiece");

    const char *sp =
        "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    write_file(tmp("metaspace.json"), sp, strlen(sp));
    expect_fail(tmp("metaspace.json"), HP_STATUS_UNSUPPORTED, "metaspace.json", "Metaspace");

    const char *corrupt = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,";
    write_file(tmp("corrupt.json"), corrupt, strlen(corrupt));
    expect_fail(tmp("corrupt.json"), HP_STATUS_CORRUPT, "corrupt.json", "not valid JSON");

    /* A real file cut in half. */
    size_t len;
    char *full = slurp(tmp("tiny.json"), &len);
    write_file(tmp("truncated.json"), full, len / 2);
    free(full);
    expect_fail(tmp("truncated.json"), HP_STATUS_CORRUPT, "truncated.json", "not valid JSON");

    expect_fail(tmp("missing.json"), HP_STATUS_IO, "missing.json", NULL);
    expect_fail(g_dir, HP_STATUS_IO, "neither tokenizer.json nor encoder.json", NULL);

    /* GPT-2's encoder.json without its vocab.bpe. */
    char enc[4096];
    snprintf(enc, sizeof enc, "%s", hp_test_source_path("tests/data/gpt2/encoder.json"));
    size_t elen;
    char *etext = slurp(enc, &elen);
    assert_non_null(etext);
    write_file(tmp("encoder.json"), etext, elen);
    free(etext);
    expect_fail(tmp("encoder.json"), HP_STATUS_IO, "vocab.bpe", NULL);

    /* The byte tokenizer: still the default, and it has no file to save. */
    assert_ok(hp_tokenizer_load("bytes", &t));
    assert_string_equal(hp_tokenizer_kind(t), "bytes");
    assert_int_equal(hp_tokenizer_save(t, tmp("bytes.json")), HP_STATUS_UNSUPPORTED);
    hp_tokenizer_free(t);
}

typedef struct seen {
    int calls[2];
    int64_t last_done[2], last_total[2];
} seen;

static void on_progress(void *ctx, hp_tokenizer_train_phase ph, int64_t done, int64_t total) {
    seen *s = ctx;
    assert_true(done <= total);
    assert_true(done >= s->last_done[ph]);
    s->calls[ph]++;
    s->last_done[ph] = done;
    s->last_total[ph] = total;
}

static void test_train_small(void **state) {
    (void)state;
    const char *text =
        "low low low low low lower lower newest newest newest newest newest newest widest widest widest\n";
    hp_tokenizer_train_options o = hp_tokenizer_train_options_default();
    o.vocab_size = 256 + 12 + 1;
    seen s = {0};
    o.progress = on_progress;
    o.progress_ctx = &s;
    hp_tokenizer *t, *t2, *u;
    assert_ok(hp_tokenizer_train_text(text, strlen(text), &o, &t));
    assert_true(s.calls[HP_TOKENIZER_TRAIN_PHASE_MERGE] > 0);
    assert_int_equal(s.last_done[HP_TOKENIZER_TRAIN_PHASE_MERGE], s.last_total[HP_TOKENIZER_TRAIN_PHASE_MERGE]);
    assert_int_equal(hp_tokenizer_vocab_size(t), 269);
    assert_int_equal(hp_tokenizer_merge_count(t), 12);
    assert_int_equal(hp_tokenizer_special_id(t, "<|endoftext|>"), 268);
    /* The first merge is the most frequent pair: "es" and "st" occur 9 times (newest 6, widest 3),
     * more than any other; the tie goes to the smaller ids, ('e', 's') = (101, 115). */
    size_t len;
    const uint8_t *tok = hp_tokenizer_token(t, 256, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(tok, "es", 2);
    /* Deterministic: a second run saves the same bytes. */
    o.progress = NULL;
    assert_ok(hp_tokenizer_train_text(text, strlen(text), &o, &t2));
    assert_ok(hp_tokenizer_save(t, tmp("a.json")));
    assert_ok(hp_tokenizer_save(t2, tmp("b.json")));
    size_t la, lb;
    char *a = slurp(tmp("a.json"), &la), *b = slurp(tmp("b.json"), &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    assert_ok(hp_tokenizer_load(tmp("a.json"), &u));
    encode_eq(t, u, text, strlen(text));
    /* "newest" is learned whole; decode of the special id gives its text. */
    int32_t *ids;
    size_t n;
    assert_ok(hp_tokenizer_encode(u, " newest", 7, &ids, &n));
    assert_int_equal(n, 1);
    int32_t eot = 268;
    char *back;
    size_t blen;
    assert_ok(hp_tokenizer_decode(u, &eot, 1, &back, &blen));
    assert_string_equal(back, "<|endoftext|>");
    free(back);
    free(ids);
    free(a);
    free(b);
    hp_tokenizer_free(t);
    hp_tokenizer_free(t2);
    hp_tokenizer_free(u);

    o.vocab_size = 200;
    assert_int_equal(hp_tokenizer_train_text(text, strlen(text), &o, &t), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("vocab_size 200");
    /* Nothing to learn: the bytes and the specials. */
    o.vocab_size = 1000;
    assert_ok(hp_tokenizer_train_text("", 0, &o, &t));
    assert_int_equal(hp_tokenizer_vocab_size(t), 257);
    hp_tokenizer_free(t);
    const char *missing[] = {tmp("no-such-corpus.txt")};
    assert_int_equal(hp_tokenizer_train(missing, 1, &o, &t), HP_STATUS_IO);
    hp_test_assert_error_contains("no-such-corpus.txt");
}

/* The first 300 merges on the first 100,000 bytes of the KJV equal a naive trainer's
 * (tests/data/bpe/kjv100k-300.merges, scripts/tokenizer-ref/train_ref.py); the whole KJV read
 * from the file in chunks trains the same tokenizer as the text in memory. */
static void test_train_kjv(void **state) {
    (void)state;
    size_t len;
    char *kjv = slurp(hp_test_source_path("data/kjv.txt"), &len);
    if (!kjv) skip();
    hp_tokenizer_train_options o = hp_tokenizer_train_options_default();
    o.vocab_size = 256 + 300;
    o.n_special = 0;
    hp_tokenizer *t;
    assert_ok(hp_tokenizer_train_text(kjv, 100000, &o, &t));
    assert_ok(hp_tokenizer_save(t, tmp("k100.json")));
    hp_tokenizer_free(t);
    size_t jl, rl;
    char *json = slurp(tmp("k100.json"), &jl),
         *ref = slurp(hp_test_source_path("tests/data/bpe/kjv100k-300.merges"), &rl);
    assert_non_null(ref);
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    assert_int_equal(cJSON_GetArraySize(merges), 300);
    char *line = ref;
    for (int i = 0; i < 300; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = 0;
        const char *got = cJSON_GetArrayItem(merges, i)->valuestring;
        if (strcmp(got, line) != 0) fail_msg("merge %d is '%s', the naive trainer's is '%s'", i, got, line);
        line = nl + 1;
    }
    cJSON_Delete(root);
    free(json);
    free(ref);

    o = hp_tokenizer_train_options_default();
    o.vocab_size = 2000;
    hp_tokenizer *a, *b;
    const char *paths[] = {hp_test_source_path("data/kjv.txt")};
    assert_ok(hp_tokenizer_train(paths, 1, &o, &a));
    assert_ok(hp_tokenizer_train_text(kjv, len, &o, &b));
    assert_int_equal(hp_tokenizer_vocab_size(a), 2000);
    assert_ok(hp_tokenizer_save(a, tmp("fa.json")));
    assert_ok(hp_tokenizer_save(b, tmp("fb.json")));
    size_t la, lb;
    char *fa = slurp(tmp("fa.json"), &la), *fb = slurp(tmp("fb.json"), &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(fa, fb, la);
    /* Round trip of the whole KJV with the trained tokenizer, parallel = serial. */
    int32_t *ids, *par;
    size_t n, np;
    assert_ok(hp_tokenizer_encode(a, kjv, len, &ids, &n));
    assert_ok(hp_tokenizer_encode_parallel(a, kjv, len, 3, &par, &np));
    assert_int_equal(n, np);
    assert_memory_equal(ids, par, n * sizeof *ids);
    char *back;
    size_t blen;
    assert_ok(hp_tokenizer_decode(a, ids, n, &back, &blen));
    assert_int_equal(blen, len);
    assert_memory_equal(back, kjv, len);
    free(back);
    free(ids);
    free(par);
    free(fa);
    free(fb);
    hp_tokenizer_free(a);
    hp_tokenizer_free(b);
    free(kjv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_load_gpt2),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_train_small),
        cmocka_unit_test(test_train_kjv),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
