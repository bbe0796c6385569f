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
 *     hp_tokenizer_train_options o = hp_tokenizer_train_options_default();
 *     o.vocab_size = 4096;                                      // 256 bytes + 3839 merges + <|endoftext|>
 *     const char *files[] = {"data/kjv.txt"};
 *     HP_CHECK(hp_tokenizer_train(files, 1, &o, &tok));
 *     HP_CHECK(hp_tokenizer_save(tok, "kjv-bpe.json"));         // a Hugging Face tokenizer.json
 *
 * A tokenizer is immutable after loading: encode and decode may run from several threads at once.
 * Token ids are int32 in [0, hp_tokenizer_vocab_size).
 *
 * BPE encoding follows openai/gpt-2's encoder.py: the text is cut into pre-tokens by the pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (\s: Unicode White_Space, as in OpenAI's tiktoken; \p{L}, \p{N}: Unicode 14 categories; a byte
 * that does not start valid UTF-8 is one "other" character), each pre-token's bytes become their
 * single-byte tokens, and adjacent pairs are merged lowest merge rank first (leftmost first among
 * equal pairs) until no pair has a rank. Training (hp_tokenizer_train) is the pair-count algorithm
 * of Sennrich et al. (2016) over the unique pre-tokens, with incremental pair counts.
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
 * `tokenizer.json` (model type BPE with the byte-level pre-tokenizer; any other file name is read
 * as tokenizer.json too), GPT-2's `encoder.json` (its `vocab.bpe` beside it), or a directory holding
 * `tokenizer.json` or GPT-2's `encoder.json` + `vocab.bpe`. Added tokens are special: they have ids
 * and decode to their text, but encode never produces them. Errors name the path and the bad value:
 * HP_STATUS_IO (missing or unreadable file), HP_STATUS_CORRUPT (malformed JSON, a merge naming an
 * unknown token or making one not in the vocabulary, duplicate or missing ids, a byte without a
 * token), HP_STATUS_UNSUPPORTED (a tokenizer.json of another model type, e.g. "WordPiece", another
 * pre-tokenizer than ByteLevel, or a normalizer).
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

/*
 * Encodes like hp_tokenizer_encode with `threads` POSIX threads (<= 0: one per online CPU; 1, the
 * "bytes" tokenizer or a text under 64 KiB: the calling thread only). The text is cut into at most
 * `threads` chunks (one per thread, each with its own word cache) only at single newlines between
 * two ASCII non-space bytes, where the pre-tokens cannot change, so *ids equals hp_tokenizer_encode's
 * result exactly; a text without such newlines is one chunk. A chunk whose thread cannot be
 * started runs on the calling thread. The caller frees *ids. HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_tokenizer_encode_parallel(const hp_tokenizer *t, const char *text, size_t len, int threads, int32_t **ids,
                                       size_t *n);

/*
 * The bytes of token `id` (not NUL-terminated; *len bytes) in storage owned by t, or NULL when id
 * is outside [0, V). A special token's bytes are its text (e.g. "<|endoftext|>").
 */
const uint8_t *hp_tokenizer_token(const hp_tokenizer *t, int32_t id, size_t *len);

/* The id of the special token whose text is `content` (e.g. "<|endoftext|>"), or -1 if none. */
int32_t hp_tokenizer_special_id(const hp_tokenizer *t, const char *content);

/* The number of merges of a BPE tokenizer (0 for "bytes"). */
int32_t hp_tokenizer_merge_count(const hp_tokenizer *t);

/*
 * Writes a BPE tokenizer as a Hugging Face tokenizer.json at `path` (model BPE with the ByteLevel
 * pre-tokenizer and decoder; merges as "a b" strings; special tokens as added_tokens), which
 * hp_tokenizer_load and Hugging Face `tokenizers` read back. HP_STATUS_UNSUPPORTED for "bytes",
 * HP_STATUS_IO naming the path.
 */
hp_status hp_tokenizer_save(const hp_tokenizer *t, const char *path);

/* What hp_tokenizer_train reports through its progress callback. */
typedef enum hp_tokenizer_train_phase {
    HP_TOKENIZER_TRAIN_PHASE_COUNT, /* reading the corpus: done/total in bytes */
    HP_TOKENIZER_TRAIN_PHASE_MERGE, /* learning merges: done/total in merges */
} hp_tokenizer_train_phase;

typedef struct hp_tokenizer_train_options {
    int32_t vocab_size;        /* V: 256 byte tokens + merges + specials (default 4096) */
    const char *const *special; /* special tokens appended after the merges (default {"<|endoftext|>"}) */
    int n_special;              /* default 1 */
    int64_t min_frequency;      /* stop when the best pair occurs fewer times than this (default 2) */
    /* Called from the calling thread now and then (at most about 200 times per phase), never from
     * the library otherwise; NULL: no reports. */
    void (*progress)(void *ctx, hp_tokenizer_train_phase phase, int64_t done, int64_t total);
    void *progress_ctx;
} hp_tokenizer_train_options;

/* The defaults above. */
hp_tokenizer_train_options hp_tokenizer_train_options_default(void);

/*
 * Trains a byte-level BPE tokenizer (GPT-2's pre-tokenizer and byte alphabet) on the files `paths`
 * (n_paths >= 1; any bytes, read in chunks). Ids 0..255 are the bytes in byte order, then one token
 * per merge in the order learned, then the special tokens. Each step merges the adjacent pair with
 * the highest count over the unique pre-tokens weighted by their frequency; ties go to the pair
 * with the smaller (left id, right id), so the result is deterministic. Training stops at
 * vocab_size or when the best count falls below min_frequency (V is then smaller). Pair counts are
 * updated incrementally from the words that hold the merged pair (Sennrich et al. 2016; as Hugging
 * Face tokenizers' BpeTrainer). HP_STATUS_INVALID_ARGUMENT (vocab_size < 256 + n_special),
 * HP_STATUS_IO naming the file, HP_STATUS_OUT_OF_MEMORY. The caller frees *out.
 */
hp_status hp_tokenizer_train(const char *const *paths, int n_paths, const hp_tokenizer_train_options *opt,
                             hp_tokenizer **out);

/* hp_tokenizer_train on `len` bytes in memory. */
hp_status hp_tokenizer_train_text(const char *text, size_t len, const hp_tokenizer_train_options *opt,
                                  hp_tokenizer **out);

#ifdef __cplusplus
}
#endif
#endif /* HP_TOKENIZER_H */
