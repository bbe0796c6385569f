/* Writing a shard set: split writers that roll shard files, index.json, the tokenizer's files and
 * hp_shards_write_tokens (see hp/shards.h). */
#include "hp/shards.h"

#include "data/shard_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *split_name(hp_shard_split s) { return s == HP_SHARD_SPLIT_TRAIN ? "train" : "val"; }

void hp__split_writer_init(hp__split_writer *w, const char *dir, hp_shard_split split, int32_t vocab, uint64_t shard_tokens) {
    *w = (hp__split_writer){.dir = dir, .split = split, .vocab = vocab, .shard_tokens = shard_tokens};
}

static hp_status close_current(hp__split_writer *w) {
    hp_shard_writer *cur = w->cur;
    w->cur = NULL;
    return hp_shard_writer_close(cur, &w->entries[w->n - 1].info);
}

static hp_status open_next(hp__split_writer *w) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        hp__shard_entry *e = realloc(w->entries, (size_t)cap * sizeof *e);
        if (!e) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the shard list");
        w->entries = e;
        w->cap = cap;
    }
    hp__shard_entry *e = &w->entries[w->n];
    memset(e, 0, sizeof *e);
    snprintf(e->file, sizeof e->file, "%s_%06d.bin", split_name(w->split), w->n);
    size_t len = strlen(w->dir) + sizeof e->file + 2;
    char *path = malloc(len);
    if (!path) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
    snprintf(path, len, "%s/%s", w->dir, e->file);
    hp_status st = hp_shard_writer_new(path, w->vocab, w->split, &w->cur);
    free(path);
    HP_CHECK(st);
    w->n++;
    return HP_STATUS_OK;
}

hp_status hp__split_writer_append(hp__split_writer *w, const int32_t *ids, size_t n, uint64_t bytes) {
    size_t done = 0;
    uint64_t bytes_left = bytes;
    /* (non-empty text encodes to at least one token, so n == 0 comes with no bytes) */
    while (done < n) {
        if (w->cur && hp_shard_writer_tokens(w->cur) >= w->shard_tokens) HP_CHECK(close_current(w));
        if (!w->cur) HP_CHECK(open_next(w));
        uint64_t room = w->shard_tokens - hp_shard_writer_tokens(w->cur);
        size_t k = n - done < room ? n - done : (size_t)room;
        /* the last part takes what remains of the bytes; earlier parts their share by tokens */
        uint64_t b = done + k == n ? bytes_left : (uint64_t)((double)bytes * (double)k / (double)n);
        if (b > bytes_left) b = bytes_left;
        HP_CHECK(hp_shard_writer_append(w->cur, ids + done, k, b));
        done += k;
        bytes_left -= b;
        w->tokens += k;
        w->bytes += b;
    }
    return HP_STATUS_OK;
}

hp_status hp__split_writer_finish(hp__split_writer *w) { return w->cur ? close_current(w) : HP_STATUS_OK; }

void hp__split_writer_free(hp__split_writer *w) {
    hp_shard_writer_abort(w->cur);
    w->cur = NULL;
    free(w->entries);
    w->entries = NULL;
    w->n = w->cap = 0;
}

static char *join(const char *dir, const char *name) {
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/%s", dir, name);
    return p;
}

hp_status hp__shards_dir_prepare(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) return hp_error(HP_STATUS_IO, "output '%s' exists and is not a directory", dir);
    } else {
        /* mkdir -p: every missing component in turn */
        char *p = strdup(dir);
        if (!p) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        for (char *q = p + 1;; q++) {
            if (*q != '/' && *q != 0) continue;
            char c = *q;
            *q = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                hp_status st = hp_error(HP_STATUS_IO, "cannot create the output directory '%s': %s", p, strerror(errno));
                free(p);
                return st;
            }
            *q = c;
            if (!c) break;
        }
        free(p);
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return hp_error(HP_STATUS_IO, "cannot create the output directory '%s'", dir);
    }
    char *idx = join(dir, HP_SHARDS_INDEX);
    if (!idx) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
    bool exists = access(idx, F_OK) == 0;
    hp_status st = exists ? hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s' already holds a shard set (%s): remove it or "
                                     "choose another output directory", dir, idx)
                          : HP_STATUS_OK;
    free(idx);
    return st;
}

static cJSON *split_json(const hp__split_writer *w) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    if (!o || !arr) {
        cJSON_Delete(o);
        cJSON_Delete(arr);
        return NULL;
    }
    cJSON_AddNumberToObject(o, "tokens", (double)w->tokens);
    cJSON_AddNumberToObject(o, "bytes", (double)w->bytes);
    cJSON_AddItemToObject(o, "shards", arr);
    for (int i = 0; i < w->n; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e) break;
        cJSON_AddStringToObject(e, "file", w->entries[i].file);
        cJSON_AddNumberToObject(e, "tokens", (double)w->entries[i].info.tokens);
        cJSON_AddNumberToObject(e, "bytes", (double)w->entries[i].info.source_bytes);
        cJSON_AddNumberToObject(e, "crc32", (double)w->entries[i].info.crc32);
        cJSON_AddItemToArray(arr, e);
    }
    return o;
}

static hp_status write_file_atomic(const char *path, const void *data, size_t n) {
    size_t len = strlen(path) + 5;
    char *tmp = malloc(len);
    if (!tmp) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
    snprintf(tmp, len, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    hp_status st;
    if (!f) {
        st = hp_error(HP_STATUS_IO, "cannot create '%s': %s", tmp, strerror(errno));
    } else if (fwrite(data, 1, n, f) != n) {
        st = hp_error(HP_STATUS_IO, "cannot write '%s': %s", tmp, strerror(errno));
        fclose(f);
        remove(tmp);
    } else {
        st = hp__fsync_rename(f, tmp, path);
        if (st != HP_STATUS_OK) remove(tmp);
    }
    free(tmp);
    return st;
}

hp_status hp__shards_write_index(const char *dir, const char *tokenizer_spec, const char *tokenizer_source,
                                 const char *kind, int32_t vocab, const char *const *inputs, int n_inputs,
                                 const hp__split_writer sw[2]) {
    cJSON *root = cJSON_CreateObject(), *tok = cJSON_CreateObject(), *in = cJSON_CreateArray();
    cJSON *tr = split_json(&sw[0]), *va = split_json(&sw[1]);
    hp_status st = HP_STATUS_OK;
    char *text = NULL, *path = NULL;
    if (!root || !tok || !in || !tr || !va) {
        cJSON_Delete(tok);
        cJSON_Delete(in);
        cJSON_Delete(tr);
        cJSON_Delete(va);
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory writing %s", HP_SHARDS_INDEX);
        goto out;
    }
    cJSON_AddStringToObject(root, "format", "hp-shards");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "dtype", vocab <= 65536 ? "u16" : "u32");
    cJSON_AddNumberToObject(root, "vocab", vocab);
    cJSON_AddStringToObject(tok, "kind", kind);
    cJSON_AddStringToObject(tok, "spec", tokenizer_spec);
    cJSON_AddStringToObject(tok, "source", tokenizer_source);
    cJSON_AddItemToObject(root, "tokenizer", tok);
    for (int i = 0; i < n_inputs; i++) cJSON_AddItemToArray(in, cJSON_CreateString(inputs[i]));
    cJSON_AddItemToObject(root, "inputs", in);
    cJSON_AddItemToObject(root, "train", tr);
    cJSON_AddItemToObject(root, "val", va);
    text = cJSON_Print(root);
    path = join(dir, HP_SHARDS_INDEX);
    if (!text || !path) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory writing %s", HP_SHARDS_INDEX);
        goto out;
    }
    st = write_file_atomic(path, text, strlen(text));
out:
    free(text);
    free(path);
    cJSON_Delete(root);
    return st;
}

static hp_status copy_file(const char *src, const char *dir, const char *name) {
    FILE *in = fopen(src, "rb");
    if (!in) return hp_error(HP_STATUS_IO, "cannot open tokenizer file '%s': %s", src, strerror(errno));
    char *dst = join(dir, name);
    size_t len = dst ? strlen(dst) + 5 : 0;
    char *tmp = dst ? malloc(len) : NULL;
    if (!tmp) {
        fclose(in);
        free(dst);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    snprintf(tmp, len, "%s.tmp", dst);
    hp_status st = HP_STATUS_OK;
    FILE *out = fopen(tmp, "wb");
    if (!out) st = hp_error(HP_STATUS_IO, "cannot create '%s': %s", tmp, strerror(errno));
    char buf[1 << 16];
    size_t n;
    while (st == HP_STATUS_OK && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) st = hp_error(HP_STATUS_IO, "cannot write '%s': %s", tmp, strerror(errno));
    if (st == HP_STATUS_OK && ferror(in)) st = hp_error(HP_STATUS_IO, "cannot read tokenizer file '%s'", src);
    fclose(in);
    if (out && st == HP_STATUS_OK) st = hp__fsync_rename(out, tmp, dst);
    else if (out) fclose(out);
    if (st != HP_STATUS_OK) remove(tmp);
    free(tmp);
    free(dst);
    return st;
}

hp_status hp_tokenizer_files_copy(const char *spec, const char *dir, char *copied, size_t cap) {
    if (!strcmp(spec, "bytes")) {
        snprintf(copied, cap, "bytes");
        return HP_STATUS_OK;
    }
    struct stat sb;
    if (stat(spec, &sb) != 0) return hp_error(HP_STATUS_IO, "tokenizer '%s': %s", spec, strerror(errno));
    if (S_ISREG(sb.st_mode)) {
        HP_CHECK(copy_file(spec, dir, "tokenizer.json"));
        snprintf(copied, cap, "tokenizer.json");
        return HP_STATUS_OK;
    }
    if (!S_ISDIR(sb.st_mode)) return hp_error(HP_STATUS_IO, "tokenizer '%s' is neither a file nor a directory", spec);
    char *tj = join(spec, "tokenizer.json"), *ej = join(spec, "encoder.json"), *vb = join(spec, "vocab.bpe");
    hp_status st = HP_STATUS_OK;
    if (!tj || !ej || !vb) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
    } else if (access(tj, R_OK) == 0) {
        st = copy_file(tj, dir, "tokenizer.json");
        snprintf(copied, cap, "tokenizer.json");
    } else if (access(ej, R_OK) == 0 && access(vb, R_OK) == 0) {
        st = copy_file(ej, dir, "encoder.json");
        if (st == HP_STATUS_OK) st = copy_file(vb, dir, "vocab.bpe");
        snprintf(copied, cap, ".");
    } else {
        st = hp_error(HP_STATUS_IO, "tokenizer directory '%s' holds neither tokenizer.json nor encoder.json + vocab.bpe", spec);
    }
    free(tj);
    free(ej);
    free(vb);
    return st;
}

hp_status hp_shards_write_tokens(const char *dir, const char *tokenizer, const char *kind, int32_t vocab,
                                 const int32_t *train, size_t n_train, const int32_t *val, size_t n_val,
                                 uint64_t shard_tokens) {
    if (n_train < 1 || shard_tokens < 1 || shard_tokens > HP_SHARD_MAX_TOKENS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "shards '%s': %zu training tokens (need >= 1) or shard size %llu "
                        "(need [1, %llu]) is bad", dir, n_train, (unsigned long long)shard_tokens,
                        (unsigned long long)HP_SHARD_MAX_TOKENS);
    HP_CHECK(hp__shards_dir_prepare(dir));
    char spec[64];
    HP_CHECK(hp_tokenizer_files_copy(tokenizer, dir, spec, sizeof spec));
    hp__split_writer sw[2];
    hp__split_writer_init(&sw[0], dir, HP_SHARD_SPLIT_TRAIN, vocab, shard_tokens);
    hp__split_writer_init(&sw[1], dir, HP_SHARD_SPLIT_VAL, vocab, shard_tokens);
    hp_status st = hp__split_writer_append(&sw[0], train, n_train, n_train);
    if (st == HP_STATUS_OK && n_val) st = hp__split_writer_append(&sw[1], val, n_val, n_val);
    if (st == HP_STATUS_OK) st = hp__split_writer_finish(&sw[0]);
    if (st == HP_STATUS_OK) st = hp__split_writer_finish(&sw[1]);
    if (st == HP_STATUS_OK) st = hp__shards_write_index(dir, spec, tokenizer, kind, vocab, NULL, 0, sw);
    hp__split_writer_free(&sw[0]);
    hp__split_writer_free(&sw[1]);
    return st;
}
