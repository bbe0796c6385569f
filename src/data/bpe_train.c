/* Training a byte-level BPE (see hp/tokenizer.h, hp_tokenizer_train): the corpus is cut into
 * GPT-2 pre-tokens, counted as unique words; then the most frequent adjacent pair is merged again
 * and again (Sennrich et al. 2016), the pair counts kept up to date from the words that hold the
 * merged pair (as Hugging Face tokenizers' BpeTrainer does), with a max-heap of pairs whose stale
 * entries are re-pushed with their current count when popped (a pair's count only falls after the
 * step that created it, so a popped entry whose count is current is the true maximum). */
#include "hp/tokenizer.h"

#include "data/bpe_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

hp_tokenizer_train_options hp_tokenizer_train_options_default(void) {
    static const char *const eot[] = {"<|endoftext|>"};
    hp_tokenizer_train_options o = {0};
    o.vocab_size = 4096;
    o.special = eot;
    o.n_special = 1;
    o.min_frequency = 2;
    return o;
}

/* ------------------------------------------------------------------------- pair counts */

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

typedef struct pairs {
    hp__bpe_map index; /* (a << 32 | b) -> pair */
    int32_t *a, *b;
    int64_t *count;
    int32_t **where; /* words that held the pair when it was counted (may hold stale words) */
    int32_t *where_n, *where_cap;
    uint8_t *queued; /* pushed in the current merge step */
    size_t n, cap;
} pairs;

static void pairs_free(pairs *p) {
    hp__bpe_map_free(&p->index);
    for (size_t i = 0; i < p->n; i++) free(p->where[i]);
    free(p->a);
    free(p->b);
    free(p->count);
    free(p->where);
    free(p->where_n);
    free(p->where_cap);
    free(p->queued);
}

static hp_status pair_get(pairs *p, int32_t a, int32_t b, int32_t *out) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    int32_t i = hp__bpe_map_get(&p->index, key);
    if (i >= 0) {
        *out = i;
        return HP_STATUS_OK;
    }
    size_t c = p->cap;
    if (p->n + 1 > c) {
        size_t nc = c ? c * 2 : 4096;
        int32_t *na = realloc(p->a, nc * sizeof *na);
        if (na) p->a = na;
        int32_t *nb = realloc(p->b, nc * sizeof *nb);
        if (nb) p->b = nb;
        int64_t *ncount = realloc(p->count, nc * sizeof *ncount);
        if (ncount) p->count = ncount;
        int32_t **nw = realloc(p->where, nc * sizeof *nw);
        if (nw) p->where = nw;
        int32_t *nwn = realloc(p->where_n, nc * sizeof *nwn);
        if (nwn) p->where_n = nwn;
        int32_t *nwc = realloc(p->where_cap, nc * sizeof *nwc);
        if (nwc) p->where_cap = nwc;
        uint8_t *nq = realloc(p->queued, nc);
        if (nq) p->queued = nq;
        if (!na || !nb || !ncount || !nw || !nwn || !nwc || !nq)
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory for %zu pairs", nc);
        p->cap = nc;
    }
    i = (int32_t)p->n++;
    p->a[i] = a;
    p->b[i] = b;
    p->count[i] = 0;
    p->where[i] = NULL;
    p->where_n[i] = p->where_cap[i] = 0;
    p->queued[i] = 0;
    HP_CHECK(hp__bpe_map_put(&p->index, key, i));
    *out = i;
    return HP_STATUS_OK;
}

static hp_status where_add(pairs *p, int32_t i, int32_t word) {
    if (p->where_n[i] && p->where[i][p->where_n[i] - 1] == word) return HP_STATUS_OK;
    if (p->where_n[i] == p->where_cap[i]) {
        int32_t nc = p->where_cap[i] ? p->where_cap[i] * 2 : 4;
        int32_t *nw = realloc(p->where[i], (size_t)nc * sizeof *nw);
        if (!nw) return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory");
        p->where[i] = nw;
        p->where_cap[i] = nc;
    }
    p->where[i][p->where_n[i]++] = word;
    return HP_STATUS_OK;
}

/* Adds `delta` occurrences of (a, b) in `word` (a positive delta records the word). */
static hp_status pair_add(pairs *p, int32_t a, int32_t b, int64_t delta, int32_t word, int32_t *out) {
    int32_t i = -1;
    HP_CHECK(pair_get(p, a, b, &i));
    p->count[i] += delta;
    if (delta > 0) HP_CHECK(where_add(p, i, word));
    if (out) *out = i;
    return HP_STATUS_OK;
}

/* Max-heap of (count, pair): the higher count first, then the smaller (a, b). */
typedef struct heap {
    int64_t *count;
    int32_t *pair;
    size_t n, cap;
} heap;

static int before(const pairs *p, int64_t c1, int32_t i1, int64_t c2, int32_t i2) {
    if (c1 != c2) return c1 > c2;
    if (p->a[i1] != p->a[i2]) return p->a[i1] < p->a[i2];
    return p->b[i1] < p->b[i2];
}

static hp_status heap_push(heap *h, const pairs *p, int64_t c, int32_t i) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 4096;
        int64_t *ncount = realloc(h->count, nc * sizeof *ncount);
        if (ncount) h->count = ncount;
        int32_t *npair = realloc(h->pair, nc * sizeof *npair);
        if (npair) h->pair = npair;
        if (!ncount || !npair) return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory for the pair heap");
        h->cap = nc;
    }
    size_t k = h->n++;
    while (k > 0) {
        size_t up = (k - 1) / 2;
        if (!before(p, c, i, h->count[up], h->pair[up])) break;
        h->count[k] = h->count[up];
        h->pair[k] = h->pair[up];
        k = up;
    }
    h->count[k] = c;
    h->pair[k] = i;
    return HP_STATUS_OK;
}

static void heap_pop(heap *h, const pairs *p, int64_t *c, int32_t *i) {
    *c = h->count[0];
    *i = h->pair[0];
    int64_t lc = h->count[--h->n];
    int32_t li = h->pair[h->n];
    size_t k = 0;
    for (;;) {
        size_t ch = 2 * k + 1;
        if (ch >= h->n) break;
        if (ch + 1 < h->n && before(p, h->count[ch + 1], h->pair[ch + 1], h->count[ch], h->pair[ch])) ch++;
        if (!before(p, h->count[ch], h->pair[ch], lc, li)) break;
        h->count[k] = h->count[ch];
        h->pair[k] = h->pair[ch];
        k = ch;
    }
    h->count[k] = lc;
    h->pair[k] = li;
}

/* ------------------------------------------------------------------------------ merging */

/* Tokens learned so far: bytes and a lookup by bytes (hash -> id, collisions at hash+1, ...). */
typedef struct toks {
    uint8_t *bytes;
    size_t bytes_n, bytes_cap;
    uint32_t *off; /* n + 1 */
    size_t n, cap;
    hp__bpe_map by_hash;
} toks;

static int32_t toks_find(const toks *t, const uint8_t *p, size_t n) {
    uint64_t h = hp__bpe_hash_bytes(p, n);
    for (;;) {
        int32_t id = hp__bpe_map_get(&t->by_hash, h);
        if (id < 0) return -1;
        if (t->off[id + 1] - t->off[id] == n && !memcmp(t->bytes + t->off[id], p, n)) return id;
        h = h + 1 == UINT64_MAX ? 0 : h + 1;
    }
}

static hp_status toks_add(toks *t, const uint8_t *p, size_t n, int32_t *id) {
    if (!grow((void **)&t->bytes, &t->bytes_cap, t->bytes_n + n, 1) ||
        !grow((void **)&t->off, &t->cap, t->n + 2, sizeof *t->off))
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory for %zu tokens", t->n + 1);
    memcpy(t->bytes + t->bytes_n, p, n);
    t->off[t->n] = (uint32_t)t->bytes_n;
    t->bytes_n += n;
    t->off[t->n + 1] = (uint32_t)t->bytes_n;
    *id = (int32_t)t->n++;
    uint64_t h = hp__bpe_hash_bytes(p, n);
    while (hp__bpe_map_get(&t->by_hash, h) >= 0) h = h + 1 == UINT64_MAX ? 0 : h + 1;
    return hp__bpe_map_put(&t->by_hash, h, *id);
}

typedef struct trainer {
    const hp__bpe_words *w;
    int32_t *sym; /* word i's symbols: sym[soff[i] .. soff[i] + slen[i]) */
    size_t *soff;
    uint32_t *slen;
    int32_t *stamp; /* the last merge step that visited word i */
    pairs p;
    heap h;
    toks t;
    int32_t *touched; /* pairs holding the new token in this step */
    size_t touched_n, touched_cap;
    int32_t *ma, *mb; /* merges so far */
    int32_t n_merges;
} trainer;

static void trainer_free(trainer *tr) {
    free(tr->sym);
    free(tr->soff);
    free(tr->slen);
    free(tr->stamp);
    pairs_free(&tr->p);
    free(tr->h.count);
    free(tr->h.pair);
    free(tr->t.bytes);
    free(tr->t.off);
    hp__bpe_map_free(&tr->t.by_hash);
    free(tr->touched);
    free(tr->ma);
    free(tr->mb);
}

/* Counts (a, new) or (new, b) up and remembers the pair for the heap. */
static hp_status add_new_pair(trainer *tr, int32_t a, int32_t b, int64_t c, int32_t word) {
    int32_t i;
    HP_CHECK(pair_add(&tr->p, a, b, c, word, &i));
    if (!tr->p.queued[i]) {
        if (!grow((void **)&tr->touched, &tr->touched_cap, tr->touched_n + 1, sizeof *tr->touched))
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory");
        tr->p.queued[i] = 1;
        tr->touched[tr->touched_n++] = i;
    }
    return HP_STATUS_OK;
}

/* Replaces each (a, b) in `word` by `id`, updating the pair counts around each occurrence. */
static hp_status merge_word(trainer *tr, int32_t word, int32_t a, int32_t b, int32_t id) {
    int32_t *s = tr->sym + tr->soff[word];
    size_t n = tr->slen[word], k = 0, j = 0;
    int64_t c = tr->w->count[word];
    while (j < n) {
        if (j + 1 < n && s[j] == a && s[j + 1] == b) {
            if (k > 0) {
                HP_CHECK(pair_add(&tr->p, s[k - 1], a, -c, word, NULL));
                HP_CHECK(add_new_pair(tr, s[k - 1], id, c, word));
            }
            if (j + 2 < n) {
                HP_CHECK(pair_add(&tr->p, b, s[j + 2], -c, word, NULL));
                HP_CHECK(add_new_pair(tr, id, s[j + 2], c, word));
            }
            s[k++] = id;
            j += 2;
        } else {
            s[k++] = s[j++];
        }
    }
    tr->slen[word] = (uint32_t)k;
    return HP_STATUS_OK;
}

static hp_status train_merges(trainer *tr, const hp_tokenizer_train_options *o, hp__bpe_reporter *rep) {
    const hp__bpe_words *w = tr->w;
    int32_t target = o->vocab_size - 256 - o->n_special;
    size_t total = 0;
    for (size_t i = 0; i < w->n; i++) total += w->len[i];
    tr->sym = malloc((total ? total : 1) * sizeof *tr->sym);
    tr->soff = malloc((w->n + 1) * sizeof *tr->soff);
    tr->slen = malloc((w->n + 1) * sizeof *tr->slen);
    tr->stamp = malloc((w->n + 1) * sizeof *tr->stamp);
    tr->ma = malloc(((size_t)target + 1) * sizeof *tr->ma);
    tr->mb = malloc(((size_t)target + 1) * sizeof *tr->mb);
    if (!tr->sym || !tr->soff || !tr->slen || !tr->stamp || !tr->ma || !tr->mb)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory for %zu words", w->n);
    HP_CHECK(hp__bpe_map_init(&tr->p.index, w->n * 2));
    HP_CHECK(hp__bpe_map_init(&tr->t.by_hash, (size_t)o->vocab_size));
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        int32_t id;
        HP_CHECK(toks_add(&tr->t, &byte, 1, &id));
    }
    size_t o_ = 0;
    for (size_t i = 0; i < w->n; i++) {
        tr->soff[i] = o_;
        tr->slen[i] = w->len[i];
        tr->stamp[i] = -1;
        const uint8_t *p = w->text + w->off[i];
        for (uint32_t j = 0; j < w->len[i]; j++) tr->sym[o_ + j] = p[j];
        for (uint32_t j = 0; j + 1 < w->len[i]; j++)
            HP_CHECK(pair_add(&tr->p, p[j], p[j + 1], w->count[i], (int32_t)i, NULL));
        o_ += w->len[i];
    }
    for (size_t i = 0; i < tr->p.n; i++)
        if (tr->p.count[i] > 0) HP_CHECK(heap_push(&tr->h, &tr->p, tr->p.count[i], (int32_t)i));
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    hp_status st = HP_STATUS_OK;
    while (tr->n_merges < target && tr->h.n) {
        int64_t c;
        int32_t i;
        heap_pop(&tr->h, &tr->p, &c, &i);
        if (c != tr->p.count[i]) { /* stale: its count fell since it was pushed */
            if (tr->p.count[i] > 0) HP_CHECK_GOTO(heap_push(&tr->h, &tr->p, tr->p.count[i], i), st, done);
            continue;
        }
        if (c < o->min_frequency) break;
        int32_t a = tr->p.a[i], b = tr->p.b[i];
        size_t la = tr->t.off[a + 1] - tr->t.off[a], lb = tr->t.off[b + 1] - tr->t.off[b];
        if (!grow((void **)&buf, &buf_cap, la + lb, 1)) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory");
            goto done;
        }
        memcpy(buf, tr->t.bytes + tr->t.off[a], la);
        memcpy(buf + la, tr->t.bytes + tr->t.off[b], lb);
        int32_t id = toks_find(&tr->t, buf, la + lb); /* the same bytes by another merge order: reuse */
        if (id < 0) HP_CHECK_GOTO(toks_add(&tr->t, buf, la + lb, &id), st, done);
        int32_t step = tr->n_merges;
        tr->ma[step] = a;
        tr->mb[step] = b;
        tr->n_merges++;
        const int32_t *where = tr->p.where[i];
        int32_t nw = tr->p.where_n[i];
        for (int32_t k = 0; k < nw; k++) {
            int32_t word = where[k];
            if (tr->stamp[word] == step) continue;
            tr->stamp[word] = step;
            HP_CHECK_GOTO(merge_word(tr, word, a, b, id), st, done);
        }
        tr->p.count[i] = 0;
        free(tr->p.where[i]);
        tr->p.where[i] = NULL;
        tr->p.where_n[i] = tr->p.where_cap[i] = 0;
        for (size_t k = 0; k < tr->touched_n; k++) {
            int32_t q = tr->touched[k];
            tr->p.queued[q] = 0;
            if (tr->p.count[q] > 0) HP_CHECK_GOTO(heap_push(&tr->h, &tr->p, tr->p.count[q], q), st, done);
        }
        tr->touched_n = 0;
        hp__bpe_report(rep, HP_TOKENIZER_TRAIN_PHASE_MERGE, tr->n_merges, target);
    }
    hp__bpe_report(rep, HP_TOKENIZER_TRAIN_PHASE_MERGE, target, target);
done:
    free(buf);
    return st;
}

static hp_status finish(trainer *tr, const hp_tokenizer_train_options *o, hp_tokenizer **out) {
    size_t v = tr->t.n + (size_t)o->n_special;
    const uint8_t **tok = malloc(v * sizeof *tok);
    uint32_t *len = malloc(v * sizeof *len);
    uint8_t *special = calloc(v, 1);
    hp_status st = HP_STATUS_OK;
    if (!tok || !len || !special) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe train: out of memory");
        goto done;
    }
    for (size_t i = 0; i < tr->t.n; i++) {
        tok[i] = tr->t.bytes + tr->t.off[i];
        len[i] = tr->t.off[i + 1] - tr->t.off[i];
    }
    for (int s = 0; s < o->n_special; s++) {
        tok[tr->t.n + (size_t)s] = (const uint8_t *)o->special[s];
        len[tr->t.n + (size_t)s] = (uint32_t)strlen(o->special[s]);
        special[tr->t.n + (size_t)s] = 1;
    }
    hp__bpe *m;
    HP_CHECK_GOTO(hp__bpe_build("bpe train", (int32_t)v, tok, len, special, tr->n_merges, tr->ma, tr->mb, &m), st,
                  done);
    st = hp__tokenizer_wrap_bpe(m, out);
done:
    free(tok);
    free(len);
    free(special);
    return st;
}

static hp_status check_options(const hp_tokenizer_train_options *o) {
    if (o->n_special < 0 || (o->n_special && !o->special))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "bpe train: %d special tokens without a list", o->n_special);
    if (o->vocab_size < 256 + o->n_special || o->vocab_size > (1 << 30))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "bpe train: vocab_size %d must be in [256 + %d specials, 2^30]",
                        o->vocab_size, o->n_special);
    for (int s = 0; s < o->n_special; s++)
        if (!o->special[s] || !o->special[s][0])
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "bpe train: special token %d is empty", s);
    return HP_STATUS_OK;
}

static hp_status train(hp__bpe_words *w, const hp_tokenizer_train_options *o, hp__bpe_reporter *rep,
                       hp_tokenizer **out) {
    trainer tr = {0};
    tr.w = w;
    hp_status st = train_merges(&tr, o, rep);
    if (st == HP_STATUS_OK) st = finish(&tr, o, out);
    trainer_free(&tr);
    return st;
}

hp_status hp_tokenizer_train(const char *const *paths, int n_paths, const hp_tokenizer_train_options *opt,
                             hp_tokenizer **out) {
    *out = NULL;
    hp_tokenizer_train_options o = opt ? *opt : hp_tokenizer_train_options_default();
    HP_CHECK(check_options(&o));
    if (n_paths < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "bpe train: no corpus files");
    int64_t total = 0, done = 0;
    for (int i = 0; i < n_paths; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) return hp_error(HP_STATUS_IO, "%s: cannot open: %s", paths[i], strerror(errno));
        total += S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : 0;
    }
    hp__bpe_reporter rep = {&o, {-1, -1}};
    hp__bpe_words w = {0};
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < n_paths && st == HP_STATUS_OK; i++)
        st = hp__bpe_words_count_file(&w, paths[i], &rep, &done, total);
    if (st == HP_STATUS_OK) st = train(&w, &o, &rep, out);
    hp__bpe_words_free(&w);
    return st;
}

hp_status hp_tokenizer_train_text(const char *text, size_t len, const hp_tokenizer_train_options *opt,
                                  hp_tokenizer **out) {
    *out = NULL;
    hp_tokenizer_train_options o = opt ? *opt : hp_tokenizer_train_options_default();
    HP_CHECK(check_options(&o));
    hp__bpe_reporter rep = {&o, {-1, -1}};
    hp__bpe_words w = {0};
    hp_status st = hp__bpe_words_count_text(&w, (const uint8_t *)text, len);
    hp__bpe_report(&rep, HP_TOKENIZER_TRAIN_PHASE_COUNT, (int64_t)len, (int64_t)len);
    if (st == HP_STATUS_OK) st = train(&w, &o, &rep, out);
    hp__bpe_words_free(&w);
    return st;
}
