/*
 * hp/data.h — byte-level tokenizer, text corpora, train/validation split and batch loaders.
 *
 *     hp_corpus *c;
 *     HP_CHECK(hp_corpus_load("data/kjv.txt", &c));          // scripts/get-data.sh makes it
 *     hp_loader_options o = hp_loader_options_default();
 *     o.batch = 8; o.context = 256; o.seed = 1; o.val_fraction = 0.05;
 *     hp_loader *ld;
 *     HP_CHECK(hp_loader_new(c, &o, &ld));
 *     int32_t x[8 * 256], y[8 * 256];
 *     HP_CHECK(hp_loader_batch(ld, step, x, y));             // rows x[r*T..], targets y = x shifted
 *     ...
 *     hp_loader_free(ld);
 *     hp_corpus_free(c);
 *
 * Tokens. The tokenizer is byte-level: vocabulary HP_BYTE_VOCAB (256), token = the byte's value
 * (0..255), decoding writes the bytes back. Any UTF-8 (or other) text round-trips exactly.
 *
 * Split. Of a corpus of N tokens, the last floor(N * val_fraction) tokens (contiguous) are the
 * validation split; the first N - floor(N * val_fraction) are the training split.
 *
 * Training batches are a PURE function of (seed, step, global row): row r of step s is the window
 * of T+1 training tokens starting at offset hash(seed, s, r) mod (n_train - T), where hash is a
 * counter-based generator (splitmix64 finalizers chained over the three keys). So a resumed run
 * needs only the step number, and a data-parallel rank that asks for global rows [r0, r1) gets
 * exactly the rows a single-process run would have put there. (The modulo bias is below
 * n_train / 2^64 and ignored.)
 *
 * Validation batches are sequential: the val split is cut into W = (n_val - 1) / T windows of
 * T+1 tokens with stride T (each target is seen once); batch `index` holds global windows
 * index*B + r (r in [0, B)), taken modulo W so any index is valid.
 *
 * Tokens are int32 (the I32 dtype fed to embedding lookups). Loaders only read the corpus and are
 * safe to use from several threads at once.
 */
#ifndef HP_DATA_H
#define HP_DATA_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- byte tokenizer */

#define HP_BYTE_VOCAB 256

/* Encodes `len` bytes of `text` into `tokens` (len entries, each 0..255). Returns len. */
size_t hp_byte_encode(const char *text, size_t len, int32_t *tokens);

/*
 * Decodes `n` tokens into `out` (n bytes; no NUL is appended). HP_STATUS_INVALID_ARGUMENT names
 * the first token outside [0, 256) and its position; `out` is then partially written.
 */
hp_status hp_byte_decode(const int32_t *tokens, size_t n, char *out);

/* ---------------------------------------------------------------- corpus */

/* A tokenized text: an immutable array of int32 tokens plus the name it came from. */
typedef struct hp_corpus hp_corpus;

/*
 * Reads the whole file at `path` (any bytes; UTF-8 expected) and tokenizes it byte-level. Errors
 * name the path: HP_STATUS_IO when it is not a regular file (a directory, FIFO or device: checked
 * with stat before opening, so a FIFO fails at once instead of blocking) or cannot be opened or
 * read (with strerror), HP_STATUS_CORRUPT
 * when it is empty, HP_STATUS_OUT_OF_MEMORY. The caller frees *out with hp_corpus_free.
 */
hp_status hp_corpus_load(const char *path, hp_corpus **out);

/*
 * A corpus from `len` bytes in memory (copied); `name` (may be NULL) is used in error messages.
 * HP_STATUS_CORRUPT when len is 0.
 */
hp_status hp_corpus_from_text(const char *text, size_t len, const char *name, hp_corpus **out);

/* NULL is allowed. */
void hp_corpus_free(hp_corpus *c);

/* The tokens (valid until hp_corpus_free) and their count. */
const int32_t *hp_corpus_tokens(const hp_corpus *c);
size_t hp_corpus_size(const hp_corpus *c);
/* The path or name the corpus came from. */
const char *hp_corpus_name(const hp_corpus *c);

/*
 * Shannon entropy of the unigram (single-token) distribution over tokens [begin, end) of the
 * corpus, in NATS per token (natural log, the unit of the cross-entropy loss; divide by ln 2 for
 * bits). It is the loss of the best model that ignores context, so a trained model's validation
 * loss should fall well below it. Requires begin < end <= size (asserted).
 */
double hp_corpus_unigram_entropy(const hp_corpus *c, size_t begin, size_t end);

/* ---------------------------------------------------------------- loader */

typedef struct hp_loader_options {
    int64_t batch;       /* B: rows per step of the GLOBAL batch (all ranks together); >= 1 */
    int64_t context;     /* T: tokens per row; each row reads T+1 tokens; >= 1 */
    double val_fraction; /* share of the corpus held out at its end, in (0, 1) */
    uint64_t seed;       /* keys the shuffling of training windows */
    int rank;            /* this rank's data-parallel index, in [0, world) */
    int world;           /* data-parallel ranks; this loader returns rows [rank*B/world, (rank+1)*B/world) */
} hp_loader_options;

/* batch 8, context 256, val_fraction 0.05, seed 1, rank 0, world 1. */
hp_loader_options hp_loader_options_default(void);

typedef struct hp_loader hp_loader;

/*
 * A loader over `corpus`, which it borrows: the corpus must outlive the loader. Errors:
 * HP_STATUS_INVALID_ARGUMENT naming a bad option (batch < 1, context < 1, val_fraction outside
 * (0,1), rank outside [0, world), world > batch); HP_STATUS_CORRUPT naming the corpus when its
 * train or val split holds fewer than context+1 tokens ("too short for context T").
 */
hp_status hp_loader_new(const hp_corpus *corpus, const hp_loader_options *opt, hp_loader **out);

/* A shard set (hp/shards.h). */
typedef struct hp_shard_set hp_shard_set;

/*
 * A loader over a shard set, which it borrows (the set must outlive the loader): the same batches
 * API and contract as a corpus loader, with the set's training split as n_train tokens and its
 * validation split as n_val (opt->val_fraction is not used: the set fixes the split). Windows are
 * read from the memory-mapped shards on demand (a window may span two shards), so a set larger than
 * RAM works. Errors: those of hp_loader_new (the split sizes named with the set's directory), and
 * the batch functions also return hp_shard_set_read's (HP_STATUS_CORRUPT for an id outside the
 * vocabulary).
 */
hp_status hp_loader_new_shards(const hp_shard_set *set, const hp_loader_options *opt, hp_loader **out);
/* NULL is allowed. */
void hp_loader_free(hp_loader *ld);

/* Tokens in the training split [0, n_train) and the val split [n_train, n_train + n_val). */
size_t hp_loader_train_tokens(const hp_loader *ld);
size_t hp_loader_val_tokens(const hp_loader *ld);
/* This rank's global row range [*begin, *end) of every batch; rows = end - begin. */
void hp_loader_rows(const hp_loader *ld, int64_t *begin, int64_t *end);
/* Number of validation windows W (see the header comment). */
int64_t hp_loader_val_windows(const hp_loader *ld);

/*
 * Training batch for `step` (any int64 >= 0): this rank's rows, each T tokens. tokens_out and
 * targets_out are (rows, T) row-major int32, rows = end - begin of hp_loader_rows; targets are the
 * tokens shifted by one (targets_out[r*T + t] = corpus[start_r + t + 1]). A pure function of
 * (seed, step, global row). HP_STATUS_INVALID_ARGUMENT for step < 0.
 */
hp_status hp_loader_batch(const hp_loader *ld, int64_t step, int32_t *tokens_out, int32_t *targets_out);

/*
 * Like hp_loader_batch for any global row range [row_begin, row_end) within [0, B), regardless of
 * this loader's rank: outputs are (row_end - row_begin, T). HP_STATUS_INVALID_ARGUMENT for a bad
 * range or step < 0.
 */
hp_status hp_loader_batch_rows(const hp_loader *ld, int64_t step, int64_t row_begin, int64_t row_end,
                               int32_t *tokens_out, int32_t *targets_out);

/* The start offset (into the corpus) of global row `row` of training step `step`. */
size_t hp_loader_train_offset(const hp_loader *ld, int64_t step, int64_t row);

/*
 * Validation batch `index` (>= 0): this rank's rows of the global windows index*B + r (mod W), in
 * the same (rows, T) layout as hp_loader_batch. HP_STATUS_INVALID_ARGUMENT for index < 0.
 */
hp_status hp_loader_val_batch(const hp_loader *ld, int64_t index, int32_t *tokens_out, int32_t *targets_out);

#ifdef __cplusplus
}
#endif
#endif /* HP_DATA_H */
