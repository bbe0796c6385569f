/* Internal to src/data: the byte-level BPE model behind hp/tokenizer.h.
 *
 * Files: bpe_unicode.c (generated \p{L} / \p{N} tables), bpe_pretok.c (the GPT-2 pre-tokenization
 * regex by hand), bpe_model.c (vocabulary, merge ranks, GPT-2's byte <-> unicode map), bpe_encode.c
 * (merging a pre-token, encode with a word cache, parallel encode), bpe_json.c (Hugging Face
 * tokenizer.json and GPT-2's encoder.json + vocab.bpe), bpe_train.c (training). */
#ifndef HP_DATA_BPE_INTERNAL_H
#define HP_DATA_BPE_INTERNAL_H

#include "hp/core.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hp__bpe_range {
    uint32_t lo, hi; /* inclusive code points */
} hp__bpe_range;

extern const hp__bpe_range hp__bpe_letters[];
extern const int hp__bpe_letters_count;
extern const hp__bpe_range hp__bpe_numbers[];
extern const int hp__bpe_numbers_count;

/* ------------------------------------------------------------ pre-tokenizer (bpe_pretok.c) */

/*
 * The length in bytes (>= 1) of the pre-token starting at text[pos] (pos < len), under GPT-2's
 * pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ with \s the
 * Unicode White_Space property (as in OpenAI's tiktoken). A byte that does not start valid UTF-8
 * is one character of its own in the class [^\s\p{L}\p{N}].
 */
size_t hp__bpe_pretok_next(const uint8_t *text, size_t len, size_t pos);

/* True when text may be cut at p (0 < p < len) without changing the pre-tokens: a single '\n'
 * between two ASCII non-whitespace bytes. */
int hp__bpe_pretok_cut_ok(const uint8_t *text, size_t len, size_t p);

/* ------------------------------------------------------------------- model (bpe_model.c) */

/* Open-addressing map from a uint64 key to an int32 value (keys are never UINT64_MAX). */
typedef struct hp__bpe_map {
    uint64_t *keys;
    int32_t *vals;
    size_t cap; /* a power of two */
    size_t n;
} hp__bpe_map;

hp_status hp__bpe_map_init(hp__bpe_map *m, size_t expect);
void hp__bpe_map_free(hp__bpe_map *m);
hp_status hp__bpe_map_put(hp__bpe_map *m, uint64_t key, int32_t val);
/* The value, or -1 when absent. */
static inline int32_t hp__bpe_map_get(const hp__bpe_map *m, uint64_t key) {
    size_t mask = m->cap - 1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask;
    for (;;) {
        if (m->keys[i] == key) return m->vals[i];
        if (m->keys[i] == UINT64_MAX) return -1;
        i = (i + 1) & mask;
    }
}
uint64_t hp__bpe_hash_bytes(const uint8_t *p, size_t n);

typedef struct hp__bpe {
    int32_t vocab;        /* V: ids in [0, V) */
    uint8_t *bytes;       /* token i's bytes are bytes[off[i] .. off[i+1]) */
    uint32_t *off;        /* V + 1 offsets */
    uint8_t *special;     /* V flags: an added (special) token */
    int32_t byte_id[256]; /* the token of each single byte */
    int32_t n_merges;
    int32_t *merge_a, *merge_b, *merge_new; /* merge r (its rank) joins a and b into new */
    hp__bpe_map pair_rank;                  /* (a << 32 | b) -> rank */
    hp__bpe_map by_bytes;                   /* hash of a token's bytes -> id (chained by probing) */
    int ignore_merges;                      /* HF's model.ignore_merges: a whole word in the vocab is one token */
} hp__bpe;

/*
 * Builds a model from V tokens' bytes (tok[i], tok_len[i]), special flags (NULL: none) and
 * `n_merges` merges (a[r], b[r]) by rank r. Checks: every byte has a single-byte token, no two
 * ordinary tokens share bytes, the merge of a and b is a token (its id becomes merge_new[r]).
 * `what` names the source in errors. HP_STATUS_CORRUPT, HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp__bpe_build(const char *what, int32_t vocab, const uint8_t *const *tok, const uint32_t *tok_len,
                        const uint8_t *special, int32_t n_merges, const int32_t *a, const int32_t *b, hp__bpe **out);
void hp__bpe_free(hp__bpe *m);

/* Replaces the merges of m (checked as in hp__bpe_build). */
hp_status hp__bpe_set_merges(hp__bpe *m, const char *what, int32_t n_merges, const int32_t *a, const int32_t *b);

/* The ordinary (non-special) token with these bytes, or -1. */
int32_t hp__bpe_find(const hp__bpe *m, const uint8_t *p, size_t n);

/* GPT-2's byte <-> unicode map (bytes_to_unicode in openai/gpt-2 encoder.py): each byte is a
 * printable code point below 324. hp__bpe_unicode_byte returns the byte of a code point, or -1. */
uint32_t hp__bpe_byte_unicode(uint8_t b);
int hp__bpe_unicode_byte(uint32_t cp);

/* Decodes one UTF-8 code point at s[0..n) into *cp; returns its length, or 0 when invalid. */
size_t hp__bpe_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out (4 bytes room); returns the length. */
size_t hp__bpe_utf8_encode(uint32_t cp, char *out);

/* ------------------------------------------------------------------ encode (bpe_encode.c) */

/* Encodes text with one thread (a word cache per call) and appends to *ids (grown with realloc;
 * *n used, *cap allocated). */
hp_status hp__bpe_encode(const hp__bpe *m, const uint8_t *text, size_t len, int32_t **ids, size_t *n, size_t *cap);

/* Wraps a model in a tokenizer handle (tokenizer.c); frees m on failure. */
struct hp_tokenizer;
hp_status hp__tokenizer_wrap_bpe(hp__bpe *m, struct hp_tokenizer **out);

#endif /* HP_DATA_BPE_INTERNAL_H */
