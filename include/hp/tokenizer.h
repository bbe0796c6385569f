/*
 * hp/tokenizer.h — tokenizers behind one interface: byte-level (vocabulary 256, the default) and
 * byte-level BPE (GPT-2's scheme: Radford et al. 2019; Sennrich et al. 2016 for BPE), loaded from
 * a Hugging Face `tokenizer.json` or GPT-2's `encoder.json` + `vocab.bpe`.
 *
 *     hp_tokenizer *tok;
 *     HP_CHECK(hp_tokenizer_load("bytes", &tok));            // or "runs/x/tokenizer.json"
 *     int32_t *ids; size_t n;
 *     HP_CHECK(hp_tokenizer_encode(tok, text, len, &ids, &n));
 *     char *back; size_t blen;
 *     HP_CHECK(hp_tokenizer_decode(tok, ids, n, &back, &blen));   // back == text, byte for byte
 *     free(ids); free(back);
 *     hp_tokenizer_free(tok);
 *
 * A tokenizer is immutable after loading: encode and decode may run from several threads at once.
 * Token ids are int32 in [0, hp_tokenizer_vocab_size).
 */
#ifndef HP_TOKENIZER_H
#define HP_TOKENIZER_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_tokenizer hp_tokenizer;

/*
 * Loads the tokenizer `spec` names: "bytes" (the byte-level tokenizer of hp/data.h), a Hugging Face
 * `tokenizer.json` (model type BPE with the byte-level pre-tokenizer), or a directory holding
 * `tokenizer.json` or GPT-2's `encoder.json` + `vocab.bpe`. Errors name the path and the bad value:
 * HP_STATUS_IO (missing or unreadable file), HP_STATUS_CORRUPT (malformed JSON, a merge naming an
 * unknown token), HP_STATUS_UNSUPPORTED (a tokenizer.json of another model type, e.g. "WordPiece").
 * The caller frees *out with hp_tokenizer_free.
 */
hp_status hp_tokenizer_load(const char *spec, hp_tokenizer **out);

/* NULL is allowed. */
void hp_tokenizer_free(hp_tokenizer *t);

/* The vocabulary size V (ids are in [0, V)), special tokens included. 256 for "bytes". */
int32_t hp_tokenizer_vocab_size(const hp_tokenizer *t);

/* "bytes" or "bpe". */
const char *hp_tokenizer_kind(const hp_tokenizer *t);

/*
 * Encodes `len` bytes of `text` (any bytes; invalid UTF-8 is encoded byte-level, never rejected)
 * into a malloc'd array *ids of *n token ids; the caller frees *ids. Special tokens in the text are
 * NOT recognised (they encode as ordinary text). HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_tokenizer_encode(const hp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n);

/*
 * Decodes `n` ids into a malloc'd buffer *text of *len bytes (NUL-terminated for convenience, the
 * NUL not counted); the caller frees *text. decode(encode(s)) == s for every byte string s.
 * HP_STATUS_INVALID_ARGUMENT names the first id outside [0, V) and its position.
 */
hp_status hp_tokenizer_decode(const hp_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* HP_TOKENIZER_H */
