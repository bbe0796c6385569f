#include "hp/tokenizer.h"
#include "data/bpe_internal.h"
hp_tokenizer_train_options hp_tokenizer_train_options_default(void) { hp_tokenizer_train_options o = {0}; return o; }
hp_status hp_tokenizer_train(const char *const *paths, int n_paths, const hp_tokenizer_train_options *opt, hp_tokenizer **out) { (void)paths; (void)n_paths; (void)opt; *out = NULL; return HP_STATUS_UNSUPPORTED; }
hp_status hp_tokenizer_train_text(const char *text, size_t len, const hp_tokenizer_train_options *opt, hp_tokenizer **out) { (void)text; (void)len; (void)opt; *out = NULL; return HP_STATUS_UNSUPPORTED; }
