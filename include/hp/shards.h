/*
 * hp/shards.h — streaming token shards: a corpus tokenized once into binary files that training
 * memory-maps, so a corpus larger than RAM trains with a small, constant resident set.
 *
 *     // hp data prepare kjv.txt books.jsonl --tokenizer bytes -o shards/
 *     hp_shards_prepare_options po = hp_shards_prepare_options_default();
 *     po.tokenizer = "bytes";
 *     const char *inputs[] = {"kjv.txt", "books.jsonl"};
 *     HP_CHECK(hp_shards_prepare(inputs, 2, "shards", &po, NULL));
 *
 *     hp_shard_set *set;
 *     HP_CHECK(hp_shard_set_open("shards", true, &set));      // true: check every payload's crc32
 *     hp_loader *ld;
 *     HP_CHECK(hp_loader_new_shards(set, &loader_options, &ld)); // hp/data.h: the same batches API
 *     ...
 *     hp_loader_free(ld);
 *     hp_shard_set_free(set);
 *
 * ONE SHARD FILE (`train_000000.bin`, `val_000000.bin`, ...) is a 1024-byte header of 256
 * little-endian 32-bit slots followed by the payload: `tokens` token ids, each a little-endian
 * uint16 (vocabularies up to 65536) or uint32. Slots 0-2 are llm.c's `.bin` layout (karpathy/llm.c,
 * dev/data/data_common.py), so llm.c's loaders read our uint16 shards as they are:
 *
 *     slot  0     magic 20240520 (HP_SHARD_MAGIC)
 *     slot  1     version: 1 = uint16 tokens, 7 = uint32 tokens (llm.c's GPT-2 and Llama-3 versions)
 *     slot  2     token count (a shard holds at most 2^31 - 1 tokens)
 *     slots 3-15  zero
 *     slot 16     0x48505348 (HP_SHARD_HP_MAGIC): the slots below are present
 *     slot 17     1: version of the slots below
 *     slot 18     bytes per token: 2 or 4 (agrees with slot 1)
 *     slot 19     vocabulary size V of the tokenizer (every id is < V)
 *     slots 20-21 token count as uint64 (low word first)
 *     slots 22-23 source bytes as uint64: bytes of text the tokens were encoded from (bits per byte
 *                 = loss_in_nats * tokens / (bytes * ln 2))
 *     slot 24     crc32 (zlib's, ISO-HDLC polynomial) of the payload bytes
 *     slot 25     split: 0 training, 1 validation
 *     slot 26     crc32 of header bytes [0, 104) (slots 0-25), so a damaged header is told apart
 *     slots 27-255 zero
 *
 * A SHARD SET is a directory with the shard files and `index.json` (HP_SHARDS_INDEX), written last:
 *
 *     {"format": "hp-shards", "version": 1, "dtype": "u16", "vocab": 256,
 *      "tokenizer": {"kind": "bytes", "spec": "bytes", "source": "bytes"},
 *      "inputs": ["kjv.txt"],
 *      "train": {"tokens": N, "bytes": B, "shards": [{"file": "train_000000.bin", "tokens": n,
 *                "bytes": b, "crc32": c}, ...]},
 *      "val": {...}}
 *
 * `tokenizer.spec` is what hp_tokenizer_load takes: "bytes", or a file name inside the directory
 * (a copy of the tokenizer.json the set was prepared with, or "." for a copy of GPT-2's
 * encoder.json + vocab.bpe). Every file is written under a temporary name and renamed when complete
 * (after fsync), and index.json last: a directory without index.json is an unfinished prepare.
 *
 * SPLITS. Each split is the concatenation of its shards in order: one token stream of
 * hp_shard_set_tokens(set, split) tokens, read at any offset (a window may span two shards). The
 * validation split is the held-out tail of the input: the last `val_fraction` of the input bytes
 * (cut at a text boundary, see hp_shards_prepare).
 *
 * MEMORY. Shards are memory-mapped read-only (mmap(2)); reads copy from the mapping and then drop
 * the pages they touched from this process's page tables (madvise MADV_DONTNEED, which on a file
 * mapping only unmaps: the data stays in the page cache, a later read faults it back in). So the
 * resident set does not grow with the corpus; the kernel's page cache keeps what memory allows.
 *
 * Errors name the file and the value: HP_STATUS_IO (missing or unreadable file), HP_STATUS_CORRUPT
 * (bad magic or version, header crc mismatch, a file shorter or longer than its header says — a
 * truncated shard —, payload crc mismatch, index.json disagreeing with a shard's header, a token
 * id >= the vocabulary), HP_STATUS_INVALID_ARGUMENT (bad options, a read outside a split).
 */
#ifndef HP_SHARDS_H
#define HP_SHARDS_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HP_SHARD_MAGIC 20240520
#define HP_SHARD_VERSION_U16 1
#define HP_SHARD_VERSION_U32 7
#define HP_SHARD_HP_MAGIC 0x48505348u
#define HP_SHARD_HEADER_BYTES 1024
#define HP_SHARD_MAX_TOKENS ((uint64_t)INT32_MAX) /* tokens per shard file */
#define HP_SHARDS_INDEX "index.json"

typedef enum hp_shard_split { HP_SHARD_SPLIT_TRAIN = 0, HP_SHARD_SPLIT_VAL = 1 } hp_shard_split;

/* What one shard's header says. */
typedef struct hp_shard_info {
    int token_bytes;       /* 2 (uint16) or 4 (uint32) */
    int32_t vocab;         /* tokenizer vocabulary size V */
    uint64_t tokens;       /* token count */
    uint64_t source_bytes; /* bytes of text the tokens came from */
    uint32_t crc32;        /* of the payload */
    hp_shard_split split;
} hp_shard_info;

/* ---------------------------------------------------------------- one shard file */

typedef struct hp_shard_writer hp_shard_writer;

/*
 * Starts the shard `path` for tokens of a vocabulary of `vocab` ids (uint16 when vocab <= 65536,
 * else uint32). The data goes to "<path>.tmp" until hp_shard_writer_close renames it. Errors:
 * HP_STATUS_INVALID_ARGUMENT (vocab < 1), HP_STATUS_IO naming the path.
 */
hp_status hp_shard_writer_new(const char *path, int32_t vocab, hp_shard_split split, hp_shard_writer **out);

/*
 * Appends `n` ids (each in [0, vocab): HP_STATUS_INVALID_ARGUMENT names the first that is not, and
 * its position) encoded from `source_bytes` bytes of text. HP_STATUS_INVALID_ARGUMENT when the
 * shard would pass HP_SHARD_MAX_TOKENS; HP_STATUS_IO naming the file.
 */
hp_status hp_shard_writer_append(hp_shard_writer *w, const int32_t *ids, size_t n, uint64_t source_bytes);

/* Tokens appended so far. */
uint64_t hp_shard_writer_tokens(const hp_shard_writer *w);

/*
 * Writes the final header, fsyncs and renames "<path>.tmp" to path; *info (may be NULL) receives
 * the header. Frees the writer in every case; on error the temporary file is removed.
 */
hp_status hp_shard_writer_close(hp_shard_writer *w, hp_shard_info *info);

/* Abandons the shard: removes the temporary file and frees the writer. NULL is allowed. */
void hp_shard_writer_abort(hp_shard_writer *w);

/*
 * Reads and checks the header of the shard file `path`: magic, versions, header crc, and the file
 * size against 1024 + tokens * token_bytes (a truncated or overlong shard is HP_STATUS_CORRUPT,
 * naming the file, its size and the size the header implies). The payload crc is not checked here.
 */
hp_status hp_shard_read_info(const char *path, hp_shard_info *out);

/* ---------------------------------------------------------------- a shard set */

typedef struct hp_shard_set hp_shard_set;

/*
 * Opens the shard set in directory `dir`: reads index.json, checks every shard's header against it
 * (hp_shard_read_info, then tokens, vocabulary, crc32 and split agree with the index) and maps the
 * shards. With `verify` every payload's crc32 is recomputed (reading the whole set once, through
 * the mapping, with the same small resident set as training). Free with hp_shard_set_free.
 */
hp_status hp_shard_set_open(const char *dir, bool verify, hp_shard_set **out);

/* Unmaps the shards. NULL is allowed. */
void hp_shard_set_free(hp_shard_set *s);

/* Recomputes every shard's payload crc32 (see hp_shard_set_open's `verify`). */
hp_status hp_shard_set_verify(const hp_shard_set *s);

/* The directory the set was opened from. */
const char *hp_shard_set_dir(const hp_shard_set *s);
/* Tokens, source bytes and shard files of a split. */
uint64_t hp_shard_set_tokens(const hp_shard_set *s, hp_shard_split split);
uint64_t hp_shard_set_bytes(const hp_shard_set *s, hp_shard_split split);
int hp_shard_set_count(const hp_shard_set *s, hp_shard_split split);
/* The tokenizer's vocabulary size V (every id is < V). */
int32_t hp_shard_set_vocab(const hp_shard_set *s);
/* The tokenizer's kind ("bytes", "bpe") as the index records it. */
const char *hp_shard_set_tokenizer_kind(const hp_shard_set *s);
/*
 * The spec to give hp_tokenizer_load for this set's tokenizer (written into `buf`, `cap` bytes):
 * "bytes", or a path inside the set's directory (its copy of the tokenizer). Returns buf.
 */
const char *hp_shard_set_tokenizer_spec(const hp_shard_set *s, char *buf, size_t cap);

/*
 * Copies `n` tokens of `split` starting at token `offset` (of the split's concatenated stream)
 * into out (int32). Safe to call from several threads at once. HP_STATUS_INVALID_ARGUMENT when
 * [offset, offset + n) passes the split's end; HP_STATUS_CORRUPT naming the shard when an id is
 * >= the vocabulary.
 */
hp_status hp_shard_set_read(const hp_shard_set *s, hp_shard_split split, uint64_t offset, size_t n, int32_t *out);

/*
 * Entropy in nats per token of the unigram distribution of the first min(max_tokens, N) training
 * tokens (an estimate of the context-free baseline loss; hp_corpus_unigram_entropy for a corpus).
 */
hp_status hp_shard_set_unigram_entropy(const hp_shard_set *s, uint64_t max_tokens, double *nats);

/* ---------------------------------------------------------------- writing a set */

/*
 * Writes a shard set into `dir` (created when missing; HP_STATUS_INVALID_ARGUMENT when it already
 * holds index.json) from token arrays already in memory: the training tokens (n_train >= 1) cut
 * into shards of at most `shard_tokens` tokens, the validation tokens likewise. `tokenizer` is the
 * spec recorded (it is not loaded; its files are copied as by hp_tokenizer_files_copy), `kind`
 * the kind recorded and `vocab` the vocabulary. Bytes are recorded as one byte per token. For
 * tests and tools; text goes through hp_shards_prepare.
 */
hp_status hp_shards_write_tokens(const char *dir, const char *tokenizer, const char *kind, int32_t vocab,
                                 const int32_t *train, size_t n_train, const int32_t *val, size_t n_val,
                                 uint64_t shard_tokens);

/*
 * Copies the files of tokenizer `spec` into directory `dir` (atomically: temporary name, then
 * rename): nothing for "bytes"; a file is copied as dir/tokenizer.json; a directory's tokenizer.json,
 * or else its encoder.json and vocab.bpe. *copied (cap bytes) receives the spec that loads the
 * copy relative to `dir`: "bytes", "tokenizer.json" or ".". HP_STATUS_IO naming the path.
 */
hp_status hp_tokenizer_files_copy(const char *spec, const char *dir, char *copied, size_t cap);

/* Progress of hp_shards_prepare: input bytes consumed of the total, tokens written so far. */
typedef void (*hp_shards_progress_fn)(uint64_t bytes_done, uint64_t bytes_total, uint64_t tokens, void *user);

typedef struct hp_shards_prepare_options {
    const char *tokenizer;  /* spec for hp_tokenizer_load: "bytes", a tokenizer.json, a directory */
    uint64_t shard_tokens;  /* tokens per shard file, in [1, HP_SHARD_MAX_TOKENS] */
    int threads;            /* encoding threads, >= 1 (each encodes whole chunks: hp_tokenizer_encode) */
    double val_fraction;    /* held-out tail of the input bytes, in (0, 1) */
    size_t chunk_bytes;     /* bytes of text per unit of work, >= 4096 */
    hp_shards_progress_fn progress; /* NULL: none; called from the calling thread */
    void *user;
} hp_shards_prepare_options;

/* tokenizer "bytes", shard_tokens 100,000,000 (llm.c's), threads 1, val_fraction 0.05, 4 MiB chunks. */
hp_shards_prepare_options hp_shards_prepare_options_default(void);

typedef struct hp_shards_prepare_result {
    uint64_t tokens[2];      /* per split (hp_shard_split) */
    uint64_t bytes[2];       /* source bytes per split */
    int shards[2];           /* files per split */
    int64_t documents;       /* JSONL records (0 for text files) */
    double seconds;
} hp_shards_prepare_result;

/*
 * Tokenizes `inputs` (n_inputs >= 1 paths, read as streams in bounded chunks: a corpus larger than
 * RAM works) into the shard set `dir`. A path ending in ".jsonl" holds one JSON object per line
 * whose string member "text" is a document (blank lines skipped; a line that is not such an object
 * is HP_STATUS_CORRUPT naming the file and line); any other path is text. Each document (and each
 * text file) is encoded on its own and the results concatenated in input order; no separator
 * token is inserted. Text files are cut into chunks just after a newline followed by a character
 * that is not white space (a boundary GPT-2's pre-tokenizer never merges across), or at the chunk
 * size when a chunk has no such place. The validation split holds the input from byte
 * floor((1 - val_fraction) * total) on (moved to such a boundary), so it is the tail of the last
 * inputs. Chunks are encoded by `threads` threads and written in order: the result does not depend
 * on the thread count. The tokenizer's files are copied into dir (hp_tokenizer_files_copy).
 * Errors: those of hp_tokenizer_load, HP_STATUS_IO naming an input or output path,
 * HP_STATUS_INVALID_ARGUMENT for bad options, an existing index.json in dir, or an input so small
 * that a split would be empty. *result (may be NULL) receives the counts.
 */
hp_status hp_shards_prepare(const char *const *inputs, int n_inputs, const char *dir,
                            const hp_shards_prepare_options *opt, hp_shards_prepare_result *result);

#ifdef __cplusplus
}
#endif
#endif /* HP_SHARDS_H */
