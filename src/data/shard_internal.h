/* Internal to src/data/shard*.c: the header codec and the split writer shared by the shard files,
 * hp_shards_write_tokens and hp_shards_prepare. */
#ifndef HP_DATA_SHARD_INTERNAL_H
#define HP_DATA_SHARD_INTERNAL_H

#include "hp/shards.h"

#include <stdio.h>

/* zlib's crc32 continued from `crc` over n bytes (any size_t). */
uint32_t hp__shard_crc(uint32_t crc, const void *p, size_t n);
void hp__shard_header_encode(const hp_shard_info *in, unsigned char h[HP_SHARD_HEADER_BYTES]);
/* Checks magic, versions and the header crc; errors name `path`. */
hp_status hp__shard_header_decode(const char *path, const unsigned char h[HP_SHARD_HEADER_BYTES], hp_shard_info *out);
/* fflush + fsync + fclose f (always closed), then rename tmp to path. Errors name the path. */
hp_status hp__fsync_rename(FILE *f, const char *tmp, const char *path);

/* One written shard, as index.json lists it. */
typedef struct hp__shard_entry {
    char file[64]; /* name inside the set's directory */
    hp_shard_info info;
} hp__shard_entry;

/* The shards of one split: a stream of tokens cut into files of at most shard_tokens tokens. */
typedef struct hp__split_writer {
    const char *dir;
    hp_shard_split split;
    int32_t vocab;
    uint64_t shard_tokens;
    hp_shard_writer *cur;
    hp__shard_entry *entries;
    int n, cap;
    uint64_t tokens, bytes; /* of the closed shards and cur together */
} hp__split_writer;

void hp__split_writer_init(hp__split_writer *w, const char *dir, hp_shard_split split, int32_t vocab, uint64_t shard_tokens);
/* Appends n ids encoded from `bytes` bytes of text; a chunk cut by a shard boundary gives each part
 * its share of the bytes in proportion to its tokens (the split's total stays exact). */
hp_status hp__split_writer_append(hp__split_writer *w, const int32_t *ids, size_t n, uint64_t bytes);
/* Closes the open shard. */
hp_status hp__split_writer_finish(hp__split_writer *w);
/* Removes the open shard's temporary file and frees the entries (the closed shards stay). */
void hp__split_writer_free(hp__split_writer *w);

/* Makes `dir` and its missing parents (an existing directory is fine); refuses one holding index.json. */
hp_status hp__shards_dir_prepare(const char *dir);
/* Writes dir/index.json atomically from the two split writers (finished). */
hp_status hp__shards_write_index(const char *dir, const char *tokenizer_spec, const char *tokenizer_source,
                                 const char *kind, int32_t vocab, const char *const *inputs, int n_inputs,
                                 const hp__split_writer sw[2]);

#endif
