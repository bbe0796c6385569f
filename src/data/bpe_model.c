/* The byte-level BPE model: vocabulary, merge ranks, GPT-2's byte <-> unicode map, UTF-8 helpers
 * (see bpe_internal.h). */
#include "data/bpe_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------- hash map */

hp_status hp__bpe_map_init(hp__bpe_map *m, size_t expect) {
    size_t cap = 64;
    while (cap < expect * 2 + 16) cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->cap = cap;
    m->n = 0;
    if (!m->keys || !m->vals) {
        hp__bpe_map_free(m);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe: out of memory for a map of %zu entries", expect);
    }
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    return HP_STATUS_OK;
}

void hp__bpe_map_free(hp__bpe_map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static void map_insert(uint64_t *keys, int32_t *vals, size_t cap, uint64_t key, int32_t val) {
    size_t mask = cap - 1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask;
    while (keys[i] != UINT64_MAX && keys[i] != key) i = (i + 1) & mask;
    keys[i] = key;
    vals[i] = val;
}

hp_status hp__bpe_map_put(hp__bpe_map *m, uint64_t key, int32_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap * 2;
        uint64_t *keys = malloc(cap * sizeof *keys);
        int32_t *vals = malloc(cap * sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "bpe: out of memory growing a map to %zu entries", cap);
        }
        memset(keys, 0xFF, cap * sizeof *keys);
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i] != UINT64_MAX) map_insert(keys, vals, cap, m->keys[i], m->vals[i]);
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    if (hp__bpe_map_get(m, key) < 0) m->n++;
    map_insert(m->keys, m->vals, m->cap, key, val);
    return HP_STATUS_OK;
}

/* FNV-1a, 64-bit, with UINT64_MAX (the empty key) folded away. */
uint64_t hp__bpe_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h == UINT64_MAX ? 0 : h;
}

/* ----------------------------------------------------------------------------- UTF-8, bytes */

size_t hp__bpe_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) {
        k = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        k = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        k = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (k > n) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return k;
}

size_t hp__bpe_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for themselves;
 * the other 68 map to 256, 257, ... in byte order. */
static int printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint32_t hp__bpe_byte_unicode(uint8_t b) {
    if (printable(b)) return b;
    if (b <= 0x20) return 256u + b;               /* 0x00..0x20: 256..288 */
    if (b <= 0xA0) return 256u + 33 + (b - 0x7F); /* 0x7F..0xA0: 289..322 */
    return 256u + 67;                             /* 0xAD */
}

int hp__bpe_unicode_byte(uint32_t cp) {
    if (cp < 256) return printable((int)cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

/* ---------------------------------------------------------------------------------- model */

void hp__bpe_free(hp__bpe *m) {
    if (!m) return;
    free(m->bytes);
    free(m->off);
    free(m->special);
    free(m->merge_a);
    free(m->merge_b);
    free(m->merge_new);
    hp__bpe_map_free(&m->pair_rank);
    hp__bpe_map_free(&m->by_bytes);
    free(m);
}

int32_t hp__bpe_find(const hp__bpe *m, const uint8_t *p, size_t n) {
    /* by_bytes maps hash -> id; colliding hashes are stored under hash+1, hash+2, ... */
    uint64_t h = hp__bpe_hash_bytes(p, n);
    for (;;) {
        int32_t id = hp__bpe_map_get(&m->by_bytes, h);
        if (id < 0) return -1;
        if (m->off[id + 1] - m->off[id] == n && !memcmp(m->bytes + m->off[id], p, n)) return id;
        h = h + 1 == UINT64_MAX ? 0 : h + 1;
    }
}

static hp_status put_bytes(hp__bpe *m, int32_t id) {
    const uint8_t *p = m->bytes + m->off[id];
    size_t n = m->off[id + 1] - m->off[id];
    uint64_t h = hp__bpe_hash_bytes(p, n);
    while (hp__bpe_map_get(&m->by_bytes, h) >= 0) h = h + 1 == UINT64_MAX ? 0 : h + 1;
    return hp__bpe_map_put(&m->by_bytes, h, id);
}

static void token_str(const hp__bpe *m, int32_t id, char *out, size_t cap) {
    size_t o = 0;
    for (uint32_t i = m->off[id]; i < m->off[id + 1] && o + 5 < cap; i++)
        o += hp__bpe_utf8_encode(hp__bpe_byte_unicode(m->bytes[i]), out + o);
    out[o] = 0;
}

hp_status hp__bpe_set_merges(hp__bpe *m, const char *what, int32_t n_merges, const int32_t *a, const int32_t *b) {
    hp_status st = HP_STATUS_OK;
    m->n_merges = 0;
    free(m->merge_a);
    free(m->merge_b);
    free(m->merge_new);
    hp__bpe_map_free(&m->pair_rank);
    m->merge_a = malloc((size_t)(n_merges + 1) * sizeof(int32_t));
    m->merge_b = malloc((size_t)(n_merges + 1) * sizeof(int32_t));
    m->merge_new = malloc((size_t)(n_merges + 1) * sizeof(int32_t));
    if (!m->merge_a || !m->merge_b || !m->merge_new)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory for %d merges", what, n_merges);
    HP_CHECK(hp__bpe_map_init(&m->pair_rank, (size_t)n_merges));
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    for (int32_t r = 0; r < n_merges; r++) {
        if (a[r] < 0 || a[r] >= m->vocab || b[r] < 0 || b[r] >= m->vocab || m->special[a[r]] || m->special[b[r]]) {
            free(buf);
            st = hp_error(HP_STATUS_CORRUPT, "%s: merge %d names token %d, not an ordinary token", what, r,
                          a[r] < 0 || a[r] >= m->vocab || m->special[a[r]] ? a[r] : b[r]);
            return st;
        }
        size_t la = (size_t)(m->off[a[r] + 1] - m->off[a[r]]), lb = (size_t)(m->off[b[r] + 1] - m->off[b[r]]);
        if (la + lb > buf_cap) {
            buf_cap = 2 * (la + lb);
            uint8_t *nb = realloc(buf, buf_cap);
            if (!nb) {
                free(buf);
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", what);
                return st;
            }
            buf = nb;
        }
        memcpy(buf, m->bytes + m->off[a[r]], la);
        memcpy(buf + la, m->bytes + m->off[b[r]], lb);
        int32_t id = hp__bpe_find(m, buf, la + lb);
        if (id < 0) {
            char sa[256], sb[256];
            token_str(m, a[r], sa, sizeof sa);
            token_str(m, b[r], sb, sizeof sb);
            free(buf);
            st = hp_error(HP_STATUS_CORRUPT, "%s: merge %d ('%s' '%s') makes a token that is not in the vocabulary",
                          what, r, sa, sb);
            return st;
        }
        m->merge_a[r] = a[r];
        m->merge_b[r] = b[r];
        m->merge_new[r] = id;
        uint64_t key = (uint64_t)(uint32_t)a[r] << 32 | (uint32_t)b[r];
        if (hp__bpe_map_get(&m->pair_rank, key) < 0) {
            st = hp__bpe_map_put(&m->pair_rank, key, r);
            if (st != HP_STATUS_OK) {
                free(buf);
                return st;
            }
        }
    }
    free(buf);
    m->n_merges = n_merges;
    return HP_STATUS_OK;
}

hp_status hp__bpe_build(const char *what, int32_t vocab, const uint8_t *const *tok, const uint32_t *tok_len,
                        const uint8_t *special, int32_t n_merges, const int32_t *a, const int32_t *b, hp__bpe **out) {
    *out = NULL;
    hp_status st = HP_STATUS_OK;
    hp__bpe *m = calloc(1, sizeof *m);
    if (!m) return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", what);
    size_t total = 0;
    for (int32_t i = 0; i < vocab; i++) total += tok_len[i];
    m->vocab = vocab;
    m->bytes = malloc(total ? total : 1);
    m->off = malloc((size_t)(vocab + 1) * sizeof *m->off);
    m->special = calloc((size_t)vocab + 1, 1);
    if (!m->bytes || !m->off || !m->special) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory for %d tokens", what, vocab);
        goto fail;
    }
    if (total > UINT32_MAX) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: %zu bytes of tokens (at most 4 GiB)", what, total);
        goto fail;
    }
    uint32_t o = 0;
    for (int32_t i = 0; i < vocab; i++) {
        m->off[i] = o;
        if (tok_len[i]) memcpy(m->bytes + o, tok[i], tok_len[i]);
        o += tok_len[i];
        m->special[i] = special ? special[i] : 0;
    }
    m->off[vocab] = o;
    HP_CHECK_GOTO(hp__bpe_map_init(&m->by_bytes, (size_t)vocab), st, fail);
    for (int32_t i = 0; i < vocab; i++) {
        if (m->special[i]) continue;
        if (tok_len[i] == 0) {
            st = hp_error(HP_STATUS_CORRUPT, "%s: token %d is empty", what, i);
            goto fail;
        }
        int32_t dup = hp__bpe_find(m, tok[i], tok_len[i]);
        if (dup >= 0) {
            char s[256];
            token_str(m, i, s, sizeof s);
            st = hp_error(HP_STATUS_CORRUPT, "%s: tokens %d and %d are both '%s'", what, dup, i, s);
            goto fail;
        }
        HP_CHECK_GOTO(put_bytes(m, i), st, fail);
    }
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        m->byte_id[c] = hp__bpe_find(m, &byte, 1);
        if (m->byte_id[c] < 0) {
            st = hp_error(HP_STATUS_CORRUPT, "%s: byte 0x%02X has no token (a byte-level BPE needs all 256)", what, c);
            goto fail;
        }
    }
    HP_CHECK_GOTO(hp__bpe_set_merges(m, what, n_merges, a, b), st, fail);
    *out = m;
    return HP_STATUS_OK;
fail:
    hp__bpe_free(m);
    return st;
}
