/* GPT-2's byte-level BPE (hp/tokenizer.h) against reference ids from OpenAI's tiktoken (made once by
 * scripts/tokenizer-ref/make_ref.js, committed in tests/data/gpt2/): byte-exact on a text of mixed
 * scripts and whitespace, on Unicode whitespace where JavaScript ports differ, on the KJV (the first
 * 256 KiB id by id, the whole file by count and CRC-32 of the ids); the parallel encoder equals the
 * serial one; round trips on random bytes; long words (the heap merge) equal a naive merge. */
#include "testutil.h"

#include "data/bpe_json.h"
#include "hp/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char *slurp(const char *rel, size_t *len) {
    const char *path = hp_test_source_path(rel);
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

static int32_t *read_ids(const char *rel, size_t *n) {
    size_t len;
    char *text = slurp(rel, &len);
    assert_non_null(text);
    int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    assert_non_null(ids);
    *n = 0;
    for (char *p = text, *end; *p; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[(*n)++] = (int32_t)v;
    }
    free(text);
    return ids;
}

static hp_tokenizer *gpt2(void) {
    hp_tokenizer *t;
    assert_ok(hp_tokenizer_load(hp_test_source_path("tests/data/gpt2"), &t));
    assert_string_equal(hp_tokenizer_kind(t), "bpe");
    assert_int_equal(hp_tokenizer_vocab_size(t), 50257);
    assert_int_equal(hp_tokenizer_merge_count(t), 50000);
    assert_int_equal(hp_tokenizer_special_id(t, "<|endoftext|>"), 50256);
    return t;
}

static void assert_ids_equal(const int32_t *got, size_t n_got, const int32_t *want, size_t n_want, const char *what) {
    size_t n = n_got < n_want ? n_got : n_want;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s: token %zu is %d, the reference has %d", what, i, got[i], want[i]);
    if (n_got != n_want) fail_msg("%s: %zu tokens, the reference has %zu", what, n_got, n_want);
}

static void check_file(hp_tokenizer *t, const char *text_rel, const char *ids_rel) {
    size_t len, n_ref, n;
    char *text = slurp(text_rel, &len);
    assert_non_null(text);
    int32_t *ref = read_ids(ids_rel, &n_ref), *ids;
    assert_ok(hp_tokenizer_encode(t, text, len, &ids, &n));
    assert_ids_equal(ids, n, ref, n_ref, text_rel);
    char *back;
    size_t blen;
    assert_ok(hp_tokenizer_decode(t, ids, n, &back, &blen));
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
    free(ref);
    free(text);
}

static void test_mixed_scripts(void **state) {
    (void)state;
    hp_tokenizer *t = gpt2();
    check_file(t, "tests/data/gpt2/mixed.txt", "tests/data/gpt2/mixed.ids");
    check_file(t, "tests/data/gpt2/unicode-ws.txt", "tests/data/gpt2/unicode-ws.ids");
    /* encoder.json names the same tokenizer as its directory. */
    hp_tokenizer *t2;
    assert_ok(hp_tokenizer_load(hp_test_source_path("tests/data/gpt2/encoder.json"), &t2));
    check_file(t2, "tests/data/gpt2/mixed.txt", "tests/data/gpt2/mixed.ids");
    hp_tokenizer_free(t2);
    hp_tokenizer_free(t);
}

static void test_kjv(void **state) {
    (void)state;
    size_t len;
    char *text = slurp("data/kjv.txt", &len);
    if (!text) skip(); /* scripts/get-data.sh not run */
    size_t sum_len;
    char *sum = slurp("tests/data/gpt2/kjv.sum", &sum_len);
    assert_non_null(sum);
    unsigned long bytes, tokens, ids_crc, text_crc;
    assert_int_equal(
        sscanf(sum, "bytes %lu\ntokens %lu\nids_crc32 %lu\ntext_crc32 %lu", &bytes, &tokens, &ids_crc, &text_crc), 4);
    free(sum);
    unsigned long crc = crc32(0, (const Bytef *)text, (uInt)len);
    if (len != bytes || crc != text_crc)
        fail_msg("data/kjv.txt (%zu bytes, CRC-32 %lu) is not the file the reference ids were made from (%lu bytes, "
                 "CRC-32 %lu)",
                 len, crc, bytes, text_crc);
    hp_tokenizer *t = gpt2();
    int32_t *ids, *par;
    size_t n, n_par, n_head;
    assert_ok(hp_tokenizer_encode(t, text, len, &ids, &n));
    /* The first 256 KiB id by id. */
    int32_t *head = read_ids("tests/data/gpt2/kjv-head.ids", &n_head);
    int32_t *hids;
    size_t hn;
    assert_ok(hp_tokenizer_encode(t, text, 262144, &hids, &hn));
    assert_ids_equal(hids, hn, head, n_head, "kjv.txt[0:262144]");
    /* The whole file by count and CRC-32 of the ids as little-endian uint32. */
    uint8_t *le = malloc(4 * n);
    assert_non_null(le);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) le[4 * i + k] = (uint8_t)((uint32_t)ids[i] >> (8 * k));
    unsigned long got_crc = crc32(0, le, (uInt)(4 * n));
    if (n != tokens || got_crc != ids_crc)
        fail_msg("kjv.txt: %zu tokens with CRC-32 %lu; the reference has %lu tokens with CRC-32 %lu", n, got_crc,
                 tokens, ids_crc);
    /* The parallel encoder gives the same ids with 2, 3 and 8 threads. */
    int threads[] = {2, 3, 8};
    for (int k = 0; k < 3; k++) {
        assert_ok(hp_tokenizer_encode_parallel(t, text, len, threads[k], &par, &n_par));
        assert_ids_equal(par, n_par, ids, n, "parallel encode");
        free(par);
    }
    free(le);
    free(hids);
    free(head);
    free(ids);
    free(text);
    hp_tokenizer_free(t);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void round_trip(hp_tokenizer *t, const char *text, size_t len) {
    int32_t *ids;
    size_t n;
    assert_ok(hp_tokenizer_encode(t, text, len, &ids, &n));
    for (size_t i = 0; i < n; i++) assert_true(ids[i] >= 0 && ids[i] < hp_tokenizer_vocab_size(t));
    char *back;
    size_t blen;
    assert_ok(hp_tokenizer_decode(t, ids, n, &back, &blen));
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    assert_int_equal(back[blen], 0);
    free(back);
    int32_t *par;
    size_t np;
    assert_ok(hp_tokenizer_encode_parallel(t, text, len, 4, &par, &np));
    assert_ids_equal(par, np, ids, n, "parallel encode of random bytes");
    free(par);
    free(ids);
}

/* Random bytes (invalid UTF-8 included), random text over a small alphabet of ASCII, multi-byte
 * characters and whitespace, and random bytes with newlines (so the parallel encoder cuts). */
static void test_random_round_trip(void **state) {
    (void)state;
    hp_tokenizer *t = gpt2();
    uint64_t s = 0x9E3779B97F4A7C15ull;
    static const char *alphabet[] = {"a",
                                     "b",
                                     "e",
                                     "The",
                                     " ",
                                     "  ",
                                     "\n",
                                     "\t",
                                     "'s",
                                     "'",
                                     "1",
                                     "23",
                                     ",",
                                     ".",
                                     "\xC3\xA9",
                                     "\xE4\xB8\xAD",
                                     "\xF0\x9F\x98\x80",
                                     "\xC2\xA0",
                                     "\xE3\x80\x80",
                                     "\xFF",
                                     "\x80"};
    size_t cap = 1 << 18;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (int trial = 0; trial < 40; trial++) {
        size_t len = (size_t)(rng_next(&s) % (trial < 20 ? 300 : 200000));
        if (trial % 2 == 0) {
            for (size_t i = 0; i < len; i++) buf[i] = (char)(rng_next(&s) & 0xFF);
            if (trial % 4 == 0)
                for (size_t i = 0; i < len; i += 1 + rng_next(&s) % 80) buf[i] = '\n';
        } else {
            size_t o = 0;
            while (o + 8 < len) {
                const char *a = alphabet[rng_next(&s) % (sizeof alphabet / sizeof *alphabet)];
                memcpy(buf + o, a, strlen(a));
                o += strlen(a);
            }
            len = o;
        }
        round_trip(t, buf, len);
    }
    round_trip(t, "", 0);
    free(buf);
    hp_tokenizer_free(t);
}

/* A naive merge loop (the pair with the lowest rank, leftmost first), for long words. */
static size_t naive(const hp__bpe *m, const uint8_t *w, size_t n, int32_t *sym) {
    for (size_t i = 0; i < n; i++) sym[i] = m->byte_id[w[i]];
    for (;;) {
        int32_t best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t r = hp__bpe_map_get(&m->pair_rank, (uint64_t)(uint32_t)sym[i] << 32 | (uint32_t)sym[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
        }
        if (best < 0) return n;
        sym[at] = m->merge_new[best];
        memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof *sym);
        n--;
    }
}

static void test_long_words(void **state) {
    (void)state;
    hp__bpe *m;
    char enc[4096];
    snprintf(enc, sizeof enc, "%s", hp_test_source_path("tests/data/gpt2/encoder.json"));
    assert_ok(hp__bpe_load_gpt2(enc, hp_test_source_path("tests/data/gpt2/vocab.bpe"), &m));
    char words[6][4096];
    size_t lens[6];
    uint64_t s = 42;
    memset(words[0], 'a', 1000), lens[0] = 1000;                                  /* one letter run */
    for (int i = 0; i < 1500; i++) words[1][i] = "0123456789"[rng_next(&s) % 10]; /* digits */
    lens[1] = 1500;
    for (int i = 0; i < 2000; i++) words[2][i] = "!?-=*#.,;:"[rng_next(&s) % 10]; /* punctuation */
    lens[2] = 2000;
    for (int i = 0; i < 4000; i++) words[3][i] = "abcdefghijklmnopqrstuvwxyz"[rng_next(&s) % 26];
    lens[3] = 4000;
    for (int i = 0; i < 3000; i++) words[4][i] = (char)(0x80 + rng_next(&s) % 64); /* invalid UTF-8: "other" */
    lens[4] = 3000;
    for (int i = 0; i < 1200; i++) words[5][i] = "ababcab"[i % 7];
    lens[5] = 1200;
    int32_t *a = malloc(4096 * sizeof *a), *b = NULL;
    assert_non_null(a);
    for (int k = 0; k < 6; k++) {
        size_t na = naive(m, (const uint8_t *)words[k], lens[k], a), nb = 0, cap = 0;
        assert_ok(hp__bpe_encode(m, (const uint8_t *)words[k], lens[k], &b, &nb, &cap));
        assert_ids_equal(b, nb, a, na, "long word");
        free(b);
        b = NULL;
    }
    free(a);
    hp__bpe_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_scripts),
        cmocka_unit_test(test_kjv),
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_long_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
