/* Internal to src/data: counting the unique pre-tokens of a corpus for BPE training
 * (bpe_words.c), used by bpe_train.c. */
#ifndef HP_DATA_BPE_TRAIN_H
#define HP_DATA_BPE_TRAIN_H

#include "data/bpe_internal.h"
#include "hp/tokenizer.h"

/* Unique words (pre-tokens) with their counts; word i's bytes are text[off[i] .. off[i] + len[i]). */
typedef struct hp__bpe_words {
    int32_t *slot; /* -1 empty, else word index */
    size_t cap;
    uint64_t *hash;
    uint32_t *off, *len; /* into text */
    int64_t *count;
    size_t n, n_cap;
    uint8_t *text;
    size_t text_n, text_cap;
} hp__bpe_words;

/* Progress reports of one training run: at most about 200 per phase. */
typedef struct hp__bpe_reporter {
    const hp_tokenizer_train_options *o;
    int last[2];
} hp__bpe_reporter;

void hp__bpe_report(hp__bpe_reporter *r, hp_tokenizer_train_phase ph, int64_t done, int64_t total);
void hp__bpe_words_free(hp__bpe_words *w);
/* Counts the pre-tokens of text (HP_STATUS_OUT_OF_MEMORY). */
hp_status hp__bpe_words_count_text(hp__bpe_words *w, const uint8_t *text, size_t len);
/* Counts the pre-tokens of a file read in 1 MiB chunks cut where the pre-tokens cannot change;
 * *done advances by the bytes read (of `total`, for the reports). HP_STATUS_IO names the path. */
hp_status hp__bpe_words_count_file(hp__bpe_words *w, const char *path, hp__bpe_reporter *rep, int64_t *done,
                                   int64_t total);

#endif /* HP_DATA_BPE_TRAIN_H */
