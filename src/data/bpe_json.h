/* Internal to src/data: tokenizer files of the byte-level BPE model (bpe_json.c). */
#ifndef HP_DATA_BPE_JSON_H
#define HP_DATA_BPE_JSON_H

#include "data/bpe_internal.h"

/* A Hugging Face tokenizer.json: HP_STATUS_IO, HP_STATUS_CORRUPT (malformed JSON, a merge naming an
 * unknown token, ids with gaps), HP_STATUS_UNSUPPORTED (another model type, pre-tokenizer or a
 * normalizer), each naming the path and the value. */
hp_status hp__bpe_load_json(const char *path, hp__bpe **out);
/* GPT-2's encoder.json ({token: id}) and vocab.bpe ("#version" line, then one "a b" merge a line);
 * "<|endoftext|>" becomes a special token. */
hp_status hp__bpe_load_gpt2(const char *encoder_json, const char *vocab_bpe, hp__bpe **out);
/* Writes m as a Hugging Face tokenizer.json (merges as "a b" strings, specials as added_tokens). */
hp_status hp__bpe_save_json(const hp__bpe *m, const char *path);

#endif /* HP_DATA_BPE_JSON_H */
