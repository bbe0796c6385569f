/* Byte-level BPE encoding (see bpe_internal.h): pre-tokens from bpe_pretok.c, each merged by rank
 * as in openai/gpt-2's encoder.py (the lowest-ranked adjacent pair first, the leftmost of equal
 * pairs first), with a cache of words per call and a parallel mode that cuts the text where the
 * pre-tokens do not change. */
#include "data/bpe_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NO_RANK INT32_MAX

static inline int32_t pair_rank(const hp__bpe *m, int32_t a, int32_t b) {
    int32_t r = hp__bpe_map_get(&m->pair_rank, (uint64_t)(uint32_t)a << 32 | (uint32_t)b);
    return r < 0 ? NO_RANK : r;
}

/* Short words: an array of symbols and of the ranks of adjacent pairs; each step scans for the
 * lowest rank (O(n^2) worst case, fastest for the few bytes of a typical word). */
static size_t merge_short(const hp__bpe *m, int32_t *sym, size_t n, int32_t *rank) {
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(m, sym[i], sym[i + 1]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == NO_RANK) break;
        sym[best] = m->merge_new[rank[best]];
        memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof *sym);
        if (n >= best + 3) memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof *rank);
        n--;
        if (best > 0) rank[best - 1] = pair_rank(m, sym[best - 1], sym[best]);
        if (best + 1 < n) rank[best] = pair_rank(m, sym[best], sym[best + 1]);
    }
    return n;
}

/* Long words: a linked list of symbols and a binary heap of (rank, position) with stale entries
 * skipped when popped, O(n log n). */
typedef struct heap_ent {
    int32_t rank, pos;
} heap_ent;

static inline int ent_less(heap_ent x, heap_ent y) { return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos); }

static void heap_push(heap_ent *h, size_t *n, heap_ent e) {
    size_t i = (*n)++;
    while (i > 0 && ent_less(e, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], e = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && ent_less(h[c + 1], h[c])) c++;
        if (!ent_less(h[c], e)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = e;
    return top;
}

static hp_status merge_long(const hp__bpe *m, int32_t *sym, size_t *np) {
    size_t n = *np;
    int32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    heap_ent *h = malloc(2 * n * sizeof *h); /* n - 1 initial pairs + at most 2 per merge */
    if (!next || !prev || !h) {
        free(next);
        free(prev);
        free(h);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe: out of memory for a word of %zu bytes", n);
    }
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
        if (i + 1 < n) {
            int32_t r = pair_rank(m, sym[i], sym[i + 1]);
            if (r != NO_RANK) heap_push(h, &hn, (heap_ent){r, (int32_t)i});
        }
    }
    while (hn) {
        heap_ent e = heap_pop(h, &hn);
        int32_t p = e.pos, q = next[p];
        if (sym[p] < 0 || q < 0 || pair_rank(m, sym[p], sym[q]) != e.rank) continue; /* stale */
        sym[p] = m->merge_new[e.rank];
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) {
            int32_t r = pair_rank(m, sym[prev[p]], sym[p]);
            if (r != NO_RANK) heap_push(h, &hn, (heap_ent){r, prev[p]});
        }
        if (next[p] >= 0) {
            int32_t r = pair_rank(m, sym[p], sym[next[p]]);
            if (r != NO_RANK) heap_push(h, &hn, (heap_ent){r, p});
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    *np = k;
    free(next);
    free(prev);
    free(h);
    return HP_STATUS_OK;
}

#define SHORT_WORD 64

/* Merges the word w[0..n) into sym (room for n ids); *k the count. */
static hp_status bpe_word(const hp__bpe *m, const uint8_t *w, size_t n, int32_t *sym, size_t *k) {
    if (m->ignore_merges) {
        int32_t id = hp__bpe_find(m, w, n);
        if (id >= 0) {
            sym[0] = id;
            *k = 1;
            return HP_STATUS_OK;
        }
    }
    for (size_t i = 0; i < n; i++) sym[i] = m->byte_id[w[i]];
    if (n <= SHORT_WORD) {
        int32_t rank[SHORT_WORD];
        *k = merge_short(m, sym, n, rank);
        return HP_STATUS_OK;
    }
    *k = n;
    return merge_long(m, sym, k);
}

/* ------------------------------------------------------------------------- word cache */

#define CACHE_MAX_WORD 48
#define CACHE_MAX_ENTRIES (1u << 20)

typedef struct cache_ent {
    uint64_t hash;
    uint32_t word_off, ids_off;
    uint16_t word_len, n_ids;
} cache_ent;

typedef struct word_cache {
    int32_t *slot; /* index into ents, -1 empty */
    size_t cap;    /* power of two */
    cache_ent *ents;
    size_t n, ents_cap;
    uint8_t *words;
    size_t words_n, words_cap;
    int32_t *ids;
    size_t ids_n, ids_cap;
} word_cache;

static void cache_free(word_cache *c) {
    free(c->slot);
    free(c->ents);
    free(c->words);
    free(c->ids);
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

/* The cached entry of w, or NULL; *slot_out its slot (for insertion). */
static const cache_ent *cache_get(const word_cache *c, const uint8_t *w, size_t n, uint64_t h, size_t *slot_out) {
    size_t mask = c->cap - 1, i = (size_t)(h >> 20) & mask;
    for (;;) {
        int32_t e = c->slot[i];
        if (e < 0) break;
        const cache_ent *ce = &c->ents[e];
        if (ce->hash == h && ce->word_len == n && !memcmp(c->words + ce->word_off, w, n)) return ce;
        i = (i + 1) & mask;
    }
    *slot_out = i;
    return NULL;
}

static int cache_rehash(word_cache *c, size_t cap) {
    int32_t *slot = malloc(cap * sizeof *slot);
    if (!slot) return 0;
    memset(slot, 0xFF, cap * sizeof *slot);
    for (size_t e = 0; e < c->n; e++) {
        size_t i = (size_t)(c->ents[e].hash >> 20) & (cap - 1);
        while (slot[i] >= 0) i = (i + 1) & (cap - 1);
        slot[i] = (int32_t)e;
    }
    free(c->slot);
    c->slot = slot;
    c->cap = cap;
    return 1;
}

static void cache_put(word_cache *c, size_t slot, const uint8_t *w, size_t n, uint64_t h, const int32_t *ids,
                      size_t k) {
    if (c->n >= CACHE_MAX_ENTRIES) return; /* full: encode without caching */
    if (!grow((void **)&c->ents, &c->ents_cap, c->n + 1, sizeof *c->ents) ||
        !grow((void **)&c->words, &c->words_cap, c->words_n + n, 1) ||
        !grow((void **)&c->ids, &c->ids_cap, c->ids_n + k, sizeof *c->ids))
        return; /* out of memory for the cache: it is only a cache */
    memcpy(c->words + c->words_n, w, n);
    memcpy(c->ids + c->ids_n, ids, k * sizeof *ids);
    c->ents[c->n] = (cache_ent){h, (uint32_t)c->words_n, (uint32_t)c->ids_n, (uint16_t)n, (uint16_t)k};
    c->slot[slot] = (int32_t)c->n++;
    c->words_n += n;
    c->ids_n += k;
    if (c->n * 2 > c->cap && !cache_rehash(c, c->cap * 2)) c->n = CACHE_MAX_ENTRIES; /* stop caching */
}

hp_status hp__bpe_encode(const hp__bpe *m, const uint8_t *text, size_t len, int32_t **ids, size_t *n, size_t *cap) {
    word_cache c = {0};
    c.cap = 1u << 12; /* grows with the words seen */
    c.slot = malloc(c.cap * sizeof *c.slot);
    int32_t *sym = NULL;
    size_t sym_cap = 0;
    hp_status st = HP_STATUS_OK;
    if (!c.slot) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe: out of memory for the word cache");
        goto done;
    }
    memset(c.slot, 0xFF, c.cap * sizeof *c.slot);
    /* A pre-token makes at most as many ids as it has bytes: reserve for the whole text once. */
    if (!grow((void **)ids, cap, *n + len + 1, sizeof **ids)) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe: out of memory for the ids of %zu bytes", len);
        goto done;
    }
    int32_t *out = *ids;
    size_t o = *n;
    for (size_t pos = 0; pos < len;) {
        size_t wl = hp__bpe_pretok_next(text, len, pos);
        const uint8_t *w = text + pos;
        pos += wl;
        if (wl == 1) {
            out[o++] = m->byte_id[w[0]];
            continue;
        }
        if (wl <= CACHE_MAX_WORD) {
            uint64_t h = hp__bpe_hash_bytes(w, wl);
            size_t slot = 0;
            const cache_ent *ce = cache_get(&c, w, wl, h, &slot);
            if (ce) {
                memcpy(out + o, c.ids + ce->ids_off, ce->n_ids * sizeof *out);
                o += ce->n_ids;
                continue;
            }
            size_t k;
            HP_CHECK_GOTO(bpe_word(m, w, wl, out + o, &k), st, done);
            cache_put(&c, slot, w, wl, h, out + o, k);
            o += k;
            continue;
        }
        if (!grow((void **)&sym, &sym_cap, wl, sizeof *sym)) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe: out of memory for a word of %zu bytes", wl);
            goto done;
        }
        size_t k;
        HP_CHECK_GOTO(bpe_word(m, w, wl, sym, &k), st, done);
        memcpy(out + o, sym, k * sizeof *sym);
        o += k;
    }
    *n = o;
done:
    free(sym);
    cache_free(&c);
    return st;
}
