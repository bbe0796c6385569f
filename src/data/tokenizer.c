/* Tokenizers behind one interface (see hp/tokenizer.h). Byte-level only so far; BPE is loaded by
 * the BPE module once it exists (issue 16). */
#include "hp/tokenizer.h"

#include "hp/data.h"

#include <stdlib.h>
#include <string.h>

struct hp_tokenizer {
    int32_t vocab;
};

hp_status hp_tokenizer_load(const char *spec, hp_tokenizer **out) {
    *out = NULL;
    if (!spec || strcmp(spec, "bytes") != 0)
        return hp_error(HP_STATUS_UNSUPPORTED, "tokenizer '%s': only \"bytes\" is built so far", spec ? spec : "(null)");
    hp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer '%s': out of memory", spec);
    t->vocab = HP_BYTE_VOCAB;
    *out = t;
    return HP_STATUS_OK;
}

void hp_tokenizer_free(hp_tokenizer *t) { free(t); }

int32_t hp_tokenizer_vocab_size(const hp_tokenizer *t) { return t->vocab; }

const char *hp_tokenizer_kind(const hp_tokenizer *t) {
    (void)t;
    return "bytes";
}

hp_status hp_tokenizer_encode(const hp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n) {
    (void)t;
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu tokens", len);
    *n = hp_byte_encode(text, len, *ids);
    return HP_STATUS_OK;
}

hp_status hp_tokenizer_decode(const hp_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len) {
    (void)t;
    *text = malloc(n + 1);
    if (!*text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu bytes", n);
    hp_status st = hp_byte_decode(ids, n, *text);
    if (st != HP_STATUS_OK) {
        free(*text);
        *text = NULL;
        return st;
    }
    (*text)[n] = 0;
    *len = n;
    return HP_STATUS_OK;
}
