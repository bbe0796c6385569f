/*
 * Fuzz harness: byte-level BPE (hp/tokenizer.h). The first input byte picks what the rest is:
 *   even: a tokenizer.json, written to a file and loaded (hp_tokenizer_load: src/data/bpe_json.c);
 *         when it loads, a fixed text and the input itself must round-trip through it;
 *   odd:  text, encoded by a small BPE trained once on a fixed text (hp_tokenizer_train_text).
 *
 * Invariants beyond "no crash, leak or UB": a failure is a status with a message; every id is in
 * [0, V); decode(encode(text)) == text for any bytes; and cutting the text where the parallel
 * encoder may cut (a single '\n' between two ASCII non-space bytes) changes no id: the ids of the
 * two halves, concatenated, are the ids of the whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe_internal.h"
#include "fuzz_util.h"
#include "hp/tokenizer.h"

static const char train_text[] =
    "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void;\n"
    "and darkness was upon the face of the deep. It's 1611, they're here: we'll see\n  \t  x ,,, ... 42\n";

static void round_trip(const hp_tokenizer *t, const uint8_t *text, size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    hp_status st = hp_tokenizer_encode(t, (const char *)text, len, &ids, &n);
    if (st != HP_STATUS_OK) { /* only out of memory may fail */
        FUZZ_CHECK(st == HP_STATUS_OUT_OF_MEMORY);
        fuzz_check_error(st);
        return;
    }
    int32_t v = hp_tokenizer_vocab_size(t);
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < v);
    char *back = NULL;
    size_t blen = 0;
    FUZZ_CHECK(hp_tokenizer_decode(t, ids, n, &back, &blen) == HP_STATUS_OK);
    FUZZ_CHECK(blen == len && (len == 0 || memcmp(back, text, len) == 0));
    free(back);
    /* The first few safe cuts. */
    int cuts = 0;
    for (size_t p = 1; p < len && cuts < 4; p++) {
        if (!hp__bpe_pretok_cut_ok(text, len, p)) continue;
        cuts++;
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        FUZZ_CHECK(hp_tokenizer_encode(t, (const char *)text, p, &a, &na) == HP_STATUS_OK);
        FUZZ_CHECK(hp_tokenizer_encode(t, (const char *)text + p, len - p, &b, &nb) == HP_STATUS_OK);
        FUZZ_CHECK(na + nb == n);
        FUZZ_CHECK(memcmp(a, ids, na * sizeof *a) == 0 && (nb == 0 || memcmp(b, ids + na, nb * sizeof *b) == 0));
        free(a);
        free(b);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static hp_tokenizer *trained;
    if (!trained) {
        hp_tokenizer_train_options o = hp_tokenizer_train_options_default();
        o.vocab_size = 300;
        o.min_frequency = 1;
        FUZZ_CHECK(hp_tokenizer_train_text(train_text, sizeof train_text - 1, &o, &trained) == HP_STATUS_OK);
    }
    if (size == 0) return 0;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        round_trip(trained, rest, n);
        return 0;
    }
    fuzz_write_file("tokenizer.json", rest, n);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", fuzz_tmpdir());
    hp_tokenizer *t = (hp_tokenizer *)1;
    hp_status st = hp_tokenizer_load(path, &t);
    if (st != HP_STATUS_OK) {
        fuzz_check_error(st);
        FUZZ_CHECK(t == NULL);
        return 0;
    }
    FUZZ_CHECK(strcmp(hp_tokenizer_kind(t), "bpe") == 0);
    round_trip(t, (const uint8_t *)train_text, sizeof train_text - 1);
    round_trip(t, rest, n < 4096 ? n : 4096);
    hp_tokenizer_free(t);
    return 0;
}
