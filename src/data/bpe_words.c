/* Counting the unique pre-tokens of a corpus for BPE training (see bpe_train.h). */
#include "data/bpe_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hp__bpe_words_free(hp__bpe_words *w) {
    free(w->slot);
    free(w->hash);
    free(w->off);
    free(w->len);
    free(w->count);
    free(w->text);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return 0;
    *p = q;
    *cap = nc;
    return 1;
}

static hp_status words_rehash(hp__bpe_words *w, size_t cap) {
    int32_t *slot = malloc(cap * sizeof *slot);
    if (!slot) return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory for %zu words", w->n);
    memset(slot, 0xFF, cap * sizeof *slot);
    for (size_t i = 0; i < w->n; i++) {
        size_t j = (size_t)(w->hash[i] >> 20) & (cap - 1);
        while (slot[j] >= 0) j = (j + 1) & (cap - 1);
        slot[j] = (int32_t)i;
    }
    free(w->slot);
    w->slot = slot;
    w->cap = cap;
    return HP_STATUS_OK;
}

static hp_status words_add(hp__bpe_words *w, const uint8_t *p, size_t n) {
    if ((w->n + 1) * 2 > w->cap) HP_CHECK(words_rehash(w, w->cap ? w->cap * 2 : 1 << 16));
    uint64_t h = hp__bpe_hash_bytes(p, n);
    size_t j = (size_t)(h >> 20) & (w->cap - 1);
    for (;;) {
        int32_t e = w->slot[j];
        if (e < 0) break;
        if (w->hash[e] == h && w->len[e] == n && !memcmp(w->text + w->off[e], p, n)) {
            w->count[e]++;
            return HP_STATUS_OK;
        }
        j = (j + 1) & (w->cap - 1);
    }
    if (w->n >= INT32_MAX || w->text_n + n > UINT32_MAX)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: more than 2^31 unique words or 4 GiB of them");
    if (w->n == w->n_cap) {
        size_t nc = w->n_cap ? w->n_cap * 2 : 4096;
        uint64_t *nh = realloc(w->hash, nc * sizeof *nh);
        if (nh) w->hash = nh;
        uint32_t *no = realloc(w->off, nc * sizeof *no);
        if (no) w->off = no;
        uint32_t *nl = realloc(w->len, nc * sizeof *nl);
        if (nl) w->len = nl;
        int64_t *ncount = realloc(w->count, nc * sizeof *ncount);
        if (ncount) w->count = ncount;
        if (!nh || !no || !nl || !ncount)
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory for %zu words", nc);
        w->n_cap = nc;
    }
    if (!grow((void **)&w->text, &w->text_cap, w->text_n + n, 1))
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory for %zu bytes of words", w->text_n + n);
    memcpy(w->text + w->text_n, p, n);
    w->hash[w->n] = h;
    w->off[w->n] = (uint32_t)w->text_n;
    w->len[w->n] = (uint32_t)n;
    w->count[w->n] = 1;
    w->slot[j] = (int32_t)w->n++;
    w->text_n += n;
    return HP_STATUS_OK;
}

hp_status hp__bpe_words_count_text(hp__bpe_words *w, const uint8_t *text, size_t len) {
    for (size_t pos = 0; pos < len;) {
        size_t k = hp__bpe_pretok_next(text, len, pos);
        HP_CHECK(words_add(w, text + pos, k));
        pos += k;
    }
    return HP_STATUS_OK;
}

void hp__bpe_report(hp__bpe_reporter *r, hp_tokenizer_train_phase ph, int64_t done, int64_t total) {
    if (!r->o->progress) return;
    int step = total > 0 ? (int)(200 * done / total) : 200;
    if (step == r->last[ph]) return;
    r->last[ph] = step;
    r->o->progress(r->o->progress_ctx, ph, done, total);
}

#define CHUNK ((size_t)1 << 20) /* bytes read at a time (more for a longer line) */

/* Reads one file in chunks cut where the pre-tokens cannot change. */
hp_status hp__bpe_words_count_file(hp__bpe_words *w, const char *path, hp__bpe_reporter *rep, int64_t *done,
                                   int64_t total) {
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = CHUNK, have = 0;
    uint8_t *buf = malloc(cap);
    hp_status st = HP_STATUS_OK;
    if (!buf) {
        fclose(f);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory for a read buffer", path);
    }
    for (;;) {
        size_t got = fread(buf + have, 1, cap - have, f);
        have += got;
        *done += (int64_t)got;
        int eof = have < cap;
        if (ferror(f)) {
            st = hp_error(HP_STATUS_IO, "%s: read error", path);
            break;
        }
        size_t cut = have;
        if (!eof) {
            cut = have - 1;
            while (cut > have / 2 && !hp__bpe_pretok_cut_ok(buf, have, cut)) cut--;
            if (cut <= have / 2) { /* no cut point in the second half: read more before counting */
                uint8_t *nb = realloc(buf, cap * 2);
                if (!nb) {
                    st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory for a %zu-byte line", path, cap * 2);
                    break;
                }
                buf = nb;
                cap *= 2;
                continue;
            }
        }
        HP_CHECK_GOTO(hp__bpe_words_count_text(w, buf, cut), st, out);
        hp__bpe_report(rep, HP_TOKENIZER_TRAIN_PHASE_COUNT, *done, total);
        memmove(buf, buf + cut, have - cut);
        have -= cut;
        if (eof && !have) break;
    }
out:
    free(buf);
    fclose(f);
    return st;
}
