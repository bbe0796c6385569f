/* Hugging Face tokenizer.json (model BPE, ByteLevel pre-tokenizer, added tokens) and GPT-2's
 * encoder.json + vocab.bpe, read and written with cJSON (see bpe_internal.h). Vocabulary strings
 * are in GPT-2's byte-level alphabet (bytes_to_unicode); added tokens are raw text. */
#include "data/bpe_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hp_status read_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            fclose(f);
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory after %zu bytes", path, n);
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) free(buf);
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return hp_error(HP_STATUS_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return HP_STATUS_OK;
}

static hp_status parse_json(const char *path, cJSON **out) {
    char *text;
    size_t len;
    HP_CHECK(read_file(path, &text, &len));
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*out) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
        free(text);
        return hp_error(HP_STATUS_CORRUPT, "%s: not valid JSON (near byte %zu of %zu)", path, at, len);
    }
    free(text);
    return HP_STATUS_OK;
}

/* A byte-level string to bytes; -1 when a character is outside the alphabet (*bad_cp names it). */
static long unmap(const char *s, uint8_t *out, uint32_t *bad_cp) {
    size_t n = strlen(s), o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = hp__bpe_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        int b = k ? hp__bpe_unicode_byte(cp) : -1;
        if (b < 0) {
            *bad_cp = k ? cp : (uint8_t)s[i];
            return -1;
        }
        out[o++] = (uint8_t)b;
        i += k;
    }
    return (long)o;
}

/* Token tables being filled: bytes of each id (or NULL while unset). */
typedef struct vocab_fill {
    int32_t vocab;
    uint8_t **tok;
    uint32_t *len;
    uint8_t *special;
    uint8_t *added_special; /* the "special" field of an added token, kept for saving */
} vocab_fill;

static void fill_free(vocab_fill *v) {
    if (v->tok)
        for (int32_t i = 0; i < v->vocab; i++) free(v->tok[i]);
    free(v->tok);
    free(v->len);
    free(v->special);
    free(v->added_special);
}

static hp_status fill_init(vocab_fill *v, const char *path, int32_t vocab) {
    v->vocab = vocab;
    v->tok = calloc((size_t)vocab, sizeof *v->tok);
    v->len = calloc((size_t)vocab, sizeof *v->len);
    v->special = calloc((size_t)vocab, 1);
    v->added_special = calloc((size_t)vocab, 1);
    if (!v->tok || !v->len || !v->special || !v->added_special)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory for %d tokens", path, vocab);
    return HP_STATUS_OK;
}

/* The largest id in a {token: id} object and the added tokens, each checked to be an integer in
 * [0, 2^31 - 1). */
static hp_status max_id(const char *path, const cJSON *vocab, const cJSON *added, int32_t *vmax) {
    *vmax = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= 2147483647.0 ||
            e->valuedouble != (double)(int32_t)e->valuedouble)
            return hp_error(HP_STATUS_CORRUPT, "%s: vocab entry '%s' has id %s, not an integer in [0, 2^31-1)", path,
                            e->string, cJSON_IsNumber(e) ? "out of range" : "not a number");
        if ((int32_t)e->valuedouble > *vmax) *vmax = (int32_t)e->valuedouble;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= 2147483647.0 || !cJSON_IsString(content))
            return hp_error(HP_STATUS_CORRUPT, "%s: an added_tokens entry without an integer id and a string content",
                            path);
        if ((int32_t)id->valuedouble > *vmax) *vmax = (int32_t)id->valuedouble;
    }
    if (*vmax < 0) return hp_error(HP_STATUS_CORRUPT, "%s: the vocabulary is empty", path);
    /* Ids run 0..V-1 without gaps, so the largest is below the number of entries (checked before
     * the tables of V entries are allocated). */
    int64_t entries = (int64_t)cJSON_GetArraySize(vocab) + (added ? cJSON_GetArraySize(added) : 0);
    if (*vmax >= entries)
        return hp_error(HP_STATUS_CORRUPT,
                        "%s: id %d but only %lld vocab and added tokens (ids must be 0..V-1 without gaps)", path, *vmax,
                        (long long)entries);
    return HP_STATUS_OK;
}

static hp_status fill_vocab(vocab_fill *v, const char *path, const cJSON *vocab, int mark_eot) {
    const cJSON *e;
    uint8_t *buf = NULL;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = (int32_t)e->valuedouble;
        if (v->tok[id])
            return hp_error(HP_STATUS_CORRUPT, "%s: id %d is given to two vocab entries (one is '%s')", path, id,
                            e->string);
        size_t sl = strlen(e->string);
        buf = malloc(sl + 1);
        if (!buf) return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
        uint32_t bad = 0;
        long n = unmap(e->string, buf, &bad);
        if (n < 0) {
            /* Not in the byte-level alphabet: only an added token may be that (checked later). */
            memcpy(buf, e->string, sl);
            n = (long)sl;
            v->special[id] = 2; /* provisional: must be an added token */
        }
        if (mark_eot && !strcmp(e->string, "<|endoftext|>")) v->special[id] = 1;
        v->tok[id] = buf;
        v->len[id] = (uint32_t)n;
        (void)bad;
    }
    return HP_STATUS_OK;
}

static hp_status fill_added(vocab_fill *v, const char *path, const cJSON *added) {
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "special");
        int special = !cJSON_IsFalse(sp);
        v->added_special[id] = (uint8_t)(1 + special);
        if (v->tok[id] && v->special[id] != 2 && !special) continue; /* an ordinary vocab token also listed as added */
        free(v->tok[id]);
        size_t sl = strlen(content);
        v->tok[id] = malloc(sl + 1);
        if (!v->tok[id]) return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
        memcpy(v->tok[id], content, sl);
        v->len[id] = (uint32_t)sl;
        v->special[id] = 1;
    }
    for (int32_t i = 0; i < v->vocab; i++) {
        if (!v->tok[i])
            return hp_error(HP_STATUS_CORRUPT, "%s: no token has id %d (ids must be 0..%d without gaps)", path, i,
                            v->vocab - 1);
        if (v->special[i] == 2) {
            char s[64];
            snprintf(s, sizeof s, "%.*s", (int)(v->len[i] < 40 ? v->len[i] : 40), (const char *)v->tok[i]);
            return hp_error(HP_STATUS_CORRUPT,
                            "%s: vocab token '%s' (id %d) has a character outside the byte-level alphabet", path, s, i);
        }
    }
    return HP_STATUS_OK;
}

/* Splits merge r ("a b" or ["a", "b"]) into ids. */
static hp_status merge_ids(const hp__bpe *m, const char *path, int32_t r, const cJSON *e, int32_t *a, int32_t *b) {
    char *s0 = NULL;
    const char *pa, *pb;
    size_t la, lb;
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return hp_error(HP_STATUS_CORRUPT, "%s: merge %d '%s' is not two tokens separated by one space", path, r,
                            s);
        pa = s, la = (size_t)(sp - s), pb = sp + 1, lb = strlen(sp + 1);
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
        pa = cJSON_GetArrayItem(e, 0)->valuestring, la = strlen(pa);
        pb = cJSON_GetArrayItem(e, 1)->valuestring, lb = strlen(pb);
    } else {
        return hp_error(HP_STATUS_CORRUPT, "%s: merge %d is neither a string \"a b\" nor a pair [\"a\", \"b\"]", path,
                        r);
    }
    s0 = malloc(la + lb + 2);
    uint8_t *buf = malloc(la + lb + 2);
    if (!s0 || !buf) {
        free(s0);
        free(buf);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    hp_status st = HP_STATUS_OK;
    for (int side = 0; side < 2; side++) {
        const char *p = side ? pb : pa;
        size_t l = side ? lb : la;
        memcpy(s0, p, l);
        s0[l] = 0;
        uint32_t bad;
        long n = unmap(s0, buf, &bad);
        int32_t id = n > 0 ? hp__bpe_find(m, buf, (size_t)n) : -1;
        if (id < 0) {
            st = hp_error(HP_STATUS_CORRUPT, "%s: merge %d names '%s', which is not in the vocabulary", path, r, s0);
            break;
        }
        *(side ? b : a) = id;
    }
    free(s0);
    free(buf);
    return st;
}

/* Builds the model from filled tokens and a merges array (JSON) or vocab.bpe lines. */
static hp_status finish(vocab_fill *v, const char *path, const cJSON *merges, char *bpe_text, hp__bpe **out) {
    hp__bpe *m = NULL;
    int32_t *a = NULL, *b = NULL;
    hp_status st = hp__bpe_build(path, v->vocab, (const uint8_t *const *)v->tok, v->len, v->special, 0, NULL, NULL, &m);
    if (st != HP_STATUS_OK) return st;
    int32_t nm = 0;
    if (merges) {
        nm = cJSON_GetArraySize(merges);
    } else {
        for (char *p = bpe_text; *p; p++) nm += *p == '\n';
        nm++;
    }
    a = malloc(((size_t)nm + 1) * sizeof *a);
    b = malloc(((size_t)nm + 1) * sizeof *b);
    if (!a || !b) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory for %d merges", path, nm);
        goto done;
    }
    int32_t r = 0;
    if (merges) {
        const cJSON *e;
        cJSON_ArrayForEach(e, merges) {
            HP_CHECK_GOTO(merge_ids(m, path, r, e, &a[r], &b[r]), st, done);
            r++;
        }
    } else {
        char *save = NULL;
        int line_no = 0;
        for (char *line = strtok_r(bpe_text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            line_no++;
            size_t l = strlen(line);
            if (l && line[l - 1] == '\r') line[--l] = 0;
            if (!l || (line_no == 1 && !strncmp(line, "#version", 8))) continue;
            cJSON *s = cJSON_CreateString(line);
            if (!s) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
                goto done;
            }
            st = merge_ids(m, path, r, s, &a[r], &b[r]);
            cJSON_Delete(s);
            if (st != HP_STATUS_OK) goto done;
            r++;
        }
    }
    HP_CHECK_GOTO(hp__bpe_set_merges(m, path, r, a, b), st, done);
done:
    free(a);
    free(b);
    if (st != HP_STATUS_OK) {
        hp__bpe_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "(no type)";
}

hp_status hp__bpe_load_json(const char *path, hp__bpe **out) {
    *out = NULL;
    cJSON *root;
    HP_CHECK(parse_json(path, &root));
    hp_status st = HP_STATUS_OK;
    vocab_fill v = {0};
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: no \"model\" object (not a Hugging Face tokenizer.json)", path);
        goto done;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE") != 0) {
        st =
            hp_error(HP_STATUS_UNSUPPORTED, "%s: model.type \"%s\": only \"BPE\" (byte-level) tokenizers are supported",
                     path, type->valuestring);
        goto done;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!cJSON_IsObject(pre) || strcmp(type_of(pre), "ByteLevel") != 0) {
        st = hp_error(HP_STATUS_UNSUPPORTED, "%s: pre_tokenizer \"%s\": only \"ByteLevel\" (GPT-2's) is supported",
                      path, cJSON_IsObject(pre) ? type_of(pre) : "null");
        goto done;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space")) ||
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex"))) {
        st = hp_error(HP_STATUS_UNSUPPORTED,
                      "%s: pre_tokenizer ByteLevel with add_prefix_space true or use_regex false is not supported",
                      path);
        goto done;
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        st = hp_error(HP_STATUS_UNSUPPORTED, "%s: normalizer \"%s\": tokenizers with a normalizer are not supported",
                      path, type_of(norm));
        goto done;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: model.vocab must be an object and model.merges an array", path);
        goto done;
    }
    if (added && !cJSON_IsArray(added) && !cJSON_IsNull(added)) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: added_tokens must be an array", path);
        goto done;
    }
    int32_t vmax;
    HP_CHECK_GOTO(max_id(path, vocab, cJSON_IsArray(added) ? added : NULL, &vmax), st, done);
    HP_CHECK_GOTO(fill_init(&v, path, vmax + 1), st, done);
    HP_CHECK_GOTO(fill_vocab(&v, path, vocab, 0), st, done);
    HP_CHECK_GOTO(fill_added(&v, path, cJSON_IsArray(added) ? added : NULL), st, done);
    hp__bpe *m;
    HP_CHECK_GOTO(finish(&v, path, merges, NULL, &m), st, done);
    m->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    *out = m;
done:
    fill_free(&v);
    cJSON_Delete(root);
    return st;
}

hp_status hp__bpe_load_gpt2(const char *encoder_json, const char *vocab_bpe, hp__bpe **out) {
    *out = NULL;
    cJSON *root;
    HP_CHECK(parse_json(encoder_json, &root));
    hp_status st = HP_STATUS_OK;
    vocab_fill v = {0};
    char *bpe_text = NULL;
    size_t bpe_len;
    if (!cJSON_IsObject(root)) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: not a JSON object {token: id}", encoder_json);
        goto done;
    }
    int32_t vmax;
    HP_CHECK_GOTO(max_id(encoder_json, root, NULL, &vmax), st, done);
    HP_CHECK_GOTO(fill_init(&v, encoder_json, vmax + 1), st, done);
    HP_CHECK_GOTO(fill_vocab(&v, encoder_json, root, 1), st, done);
    HP_CHECK_GOTO(fill_added(&v, encoder_json, NULL), st, done);
    HP_CHECK_GOTO(read_file(vocab_bpe, &bpe_text, &bpe_len), st, done);
    HP_CHECK_GOTO(finish(&v, vocab_bpe, NULL, bpe_text, out), st, done);
done:
    free(bpe_text);
    fill_free(&v);
    cJSON_Delete(root);
    return st;
}

/* A token in the byte-level alphabet (NUL-terminated, malloc'd). */
static char *mapped(const hp__bpe *m, int32_t id) {
    uint32_t n = m->off[id + 1] - m->off[id];
    char *s = malloc(4 * (size_t)n + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (uint32_t i = 0; i < n; i++) o += hp__bpe_utf8_encode(hp__bpe_byte_unicode(m->bytes[m->off[id] + i]), s + o);
    s[o] = 0;
    return s;
}

static cJSON *byte_level(int add_prefix_space, int trim_offsets) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
    cJSON_AddBoolToObject(o, "use_regex", 1);
    return o;
}

hp_status hp__bpe_save_json(const hp__bpe *m, const char *path) {
    hp_status st = HP_STATUS_OK;
    cJSON *root = cJSON_CreateObject();
    char *text = NULL;
    if (!root) return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (int32_t i = 0; i < m->vocab; i++) {
        if (!m->special[i]) continue;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", i);
        char *c = malloc(m->off[i + 1] - m->off[i] + 1);
        if (!c) {
            cJSON_Delete(t);
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
            goto done;
        }
        memcpy(c, m->bytes + m->off[i], m->off[i + 1] - m->off[i]);
        c[m->off[i + 1] - m->off[i]] = 0;
        cJSON_AddStringToObject(t, "content", c);
        free(c);
        cJSON_AddBoolToObject(t, "single_word", 0);
        cJSON_AddBoolToObject(t, "lstrip", 0);
        cJSON_AddBoolToObject(t, "rstrip", 0);
        cJSON_AddBoolToObject(t, "normalized", 0);
        cJSON_AddBoolToObject(t, "special", 1);
        cJSON_AddItemToArray(added, t);
    }
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", byte_level(0, 1));
    cJSON_AddItemToObject(root, "post_processor", byte_level(1, 0));
    cJSON_AddItemToObject(root, "decoder", byte_level(1, 1));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", m->ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int32_t i = 0; i < m->vocab; i++) {
        if (m->special[i]) continue;
        char *s = mapped(m, i);
        if (!s || !cJSON_AddNumberToObject(vocab, s, i)) {
            free(s);
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
            goto done;
        }
        free(s);
    }
    /* Specials are in the vocab too (as Hugging Face writes them), after the ordinary tokens. */
    for (int32_t i = 0; i < m->vocab; i++) {
        if (!m->special[i]) continue;
        char *c = malloc(m->off[i + 1] - m->off[i] + 1);
        if (!c) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
            goto done;
        }
        memcpy(c, m->bytes + m->off[i], m->off[i + 1] - m->off[i]);
        c[m->off[i + 1] - m->off[i]] = 0;
        cJSON_AddNumberToObject(vocab, c, i);
        free(c);
    }
    for (int32_t r = 0; r < m->n_merges; r++) {
        char *sa = mapped(m, m->merge_a[r]), *sb = mapped(m, m->merge_b[r]);
        char *s = sa && sb ? malloc(strlen(sa) + strlen(sb) + 2) : NULL;
        if (!s) {
            free(sa);
            free(sb);
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
            goto done;
        }
        sprintf(s, "%s %s", sa, sb);
        cJSON_AddItemToArray(merges, cJSON_CreateString(s));
        free(sa);
        free(sb);
        free(s);
    }
    text = cJSON_Print(root);
    if (!text) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory printing JSON", path);
        goto done;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        st = hp_error(HP_STATUS_IO, "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    size_t len = strlen(text);
    int bad = fwrite(text, 1, len, f) != len || fputc('\n', f) == EOF;
    bad |= fclose(f) != 0;
    if (bad) st = hp_error(HP_STATUS_IO, "%s: write failed: %s", path, strerror(errno));
done:
    free(text);
    cJSON_Delete(root);
    return st;
}
