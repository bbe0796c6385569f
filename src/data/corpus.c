/* Byte-level tokenizer and text corpora (see hp/data.h). */
#include "hp/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct hp_corpus {
    int32_t *tokens;
    size_t n;
    char *name;
};

size_t hp_byte_encode(const char *text, size_t len, int32_t *tokens) {
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) tokens[i] = (int32_t)p[i];
    return len;
}

hp_status hp_byte_decode(const int32_t *tokens, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= HP_BYTE_VOCAB)
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "token %d at position %zu is outside the byte vocabulary [0, %d)",
                            (int)tokens[i], i, HP_BYTE_VOCAB);
        out[i] = (char)(unsigned char)tokens[i];
    }
    return HP_STATUS_OK;
}

static hp_status corpus_new(const char *text, size_t len, const char *name, hp_corpus **out) {
    *out = NULL;
    if (len == 0) return hp_error(HP_STATUS_CORRUPT, "corpus '%s' is empty", name);
    hp_corpus *c = calloc(1, sizeof *c);
    if (!c) return hp_error(HP_STATUS_OUT_OF_MEMORY, "corpus '%s': out of memory", name);
    c->name = strdup(name);
    c->tokens = malloc(len * sizeof *c->tokens);
    if (!c->name || !c->tokens) {
        hp_corpus_free(c);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "corpus '%s': out of memory for %zu tokens", name, len);
    }
    c->n = hp_byte_encode(text, len, c->tokens);
    *out = c;
    return HP_STATUS_OK;
}

hp_status hp_corpus_from_text(const char *text, size_t len, const char *name, hp_corpus **out) {
    return corpus_new(text, len, name ? name : "<memory>", out);
}

hp_status hp_corpus_load(const char *path, hp_corpus **out) {
    *out = NULL;
    /* stat before open: opening a FIFO (or a device) would block until a writer appears */
    struct stat pre;
    if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode))
        return hp_error(HP_STATUS_IO, "corpus '%s' is %s, not a regular file", path,
                        S_ISDIR(pre.st_mode) ? "a directory" : S_ISFIFO(pre.st_mode) ? "a FIFO (named pipe)"
                        : S_ISCHR(pre.st_mode) || S_ISBLK(pre.st_mode) ? "a device" : "a special file");
    FILE *f = fopen(path, "rb");
    if (!f)
        return hp_error(HP_STATUS_IO, "cannot open corpus '%s': %s (run scripts/get-data.sh for the default corpus)",
                        path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return hp_error(HP_STATUS_IO, "corpus '%s' is not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len == 0) {
        fclose(f);
        return hp_error(HP_STATUS_CORRUPT, "corpus '%s' is empty", path);
    }
    char *buf = malloc(len);
    if (!buf) {
        fclose(f);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "corpus '%s': out of memory for %zu bytes", path, len);
    }
    size_t got = fread(buf, 1, len, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != len) {
        free(buf);
        return hp_error(HP_STATUS_IO, "cannot read corpus '%s': read %zu of %zu bytes%s%s", path, got, len,
                        err ? ": " : "", err ? strerror(err) : "");
    }
    hp_status st = corpus_new(buf, len, path, out);
    free(buf);
    return st;
}

void hp_corpus_free(hp_corpus *c) {
    if (!c) return;
    free(c->tokens);
    free(c->name);
    free(c);
}

const int32_t *hp_corpus_tokens(const hp_corpus *c) { return c->tokens; }
size_t hp_corpus_size(const hp_corpus *c) { return c->n; }
const char *hp_corpus_name(const hp_corpus *c) { return c->name; }

double hp_corpus_unigram_entropy(const hp_corpus *c, size_t begin, size_t end) {
    HP_ASSERT(begin < end && end <= c->n);
    size_t counts[HP_BYTE_VOCAB] = {0};
    for (size_t i = begin; i < end; i++) {
        int32_t t = c->tokens[i];
        HP_ASSERT(t >= 0 && t < HP_BYTE_VOCAB);
        counts[t]++;
    }
    double n = (double)(end - begin), h = 0.0;
    for (int v = 0; v < HP_BYTE_VOCAB; v++) {
        if (!counts[v]) continue;
        double p = (double)counts[v] / n;
        h -= p * log(p);
    }
    return h;
}
