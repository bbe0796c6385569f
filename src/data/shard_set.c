/* Reading a shard set: index.json, memory-mapped shards, reads across shard boundaries that keep
 * the resident set small (see hp/shards.h). */
#include "hp/shards.h"

#include "data/shard_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Pages are dropped from the page tables in blocks this large around what a read touched: the
 * kernel maps up to 64 KiB around a faulting page of a file mapping (fault-around). */
#define DROP_ALIGN ((size_t)64 << 10)
#define VERIFY_CHUNK ((size_t)8 << 20)

typedef struct shard {
    char *path;
    hp_shard_info info;
    const unsigned char *map; /* the whole file; the payload at HP_SHARD_HEADER_BYTES */
    size_t map_bytes;
    uint64_t first; /* offset of its first token in the split's stream */
} shard;

typedef struct split {
    shard *shards;
    int n;
    uint64_t tokens, bytes;
} split;

struct hp_shard_set {
    char *dir;
    char kind[32];
    char spec[256]; /* relative to dir unless "bytes" */
    int32_t vocab;
    split sp[2];
};

static const char *split_name(hp_shard_split s) { return s == HP_SHARD_SPLIT_TRAIN ? "train" : "val"; }

void hp_shard_set_free(hp_shard_set *s) {
    if (!s) return;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < s->sp[k].n; i++) {
            shard *sh = &s->sp[k].shards[i];
            if (sh->map) munmap((void *)sh->map, sh->map_bytes);
            free(sh->path);
        }
        free(s->sp[k].shards);
    }
    free(s->dir);
    free(s);
}

static hp_status read_text(const char *path, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "cannot open '%s': %s (not a shard set made by `hp data prepare`, or unfinished)",
                            path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf) {
        fclose(f);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot read '%s'", path);
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(buf);
        return hp_error(HP_STATUS_IO, "cannot read '%s': got %zu of %ld bytes", path, got, n);
    }
    buf[n] = 0;
    *out = buf;
    return HP_STATUS_OK;
}

static bool get_u64(const cJSON *o, const char *key, uint64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9007199254740992.0 ||
        x->valuedouble != floor(x->valuedouble))
        return false;
    *v = (uint64_t)x->valuedouble;
    return true;
}

static hp_status map_shard(shard *sh) {
    int fd = open(sh->path, O_RDONLY);
    if (fd < 0) return hp_error(HP_STATUS_IO, "cannot open shard '%s': %s", sh->path, strerror(errno));
    sh->map_bytes = HP_SHARD_HEADER_BYTES + (size_t)sh->info.tokens * (size_t)sh->info.token_bytes;
    void *m = mmap(NULL, sh->map_bytes, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED) return hp_error(HP_STATUS_IO, "cannot map shard '%s': %s", sh->path, strerror(err));
    sh->map = m;
    return HP_STATUS_OK;
}

/* One split of index.json: every shard's header checked against its entry, then mapped. */
static hp_status open_split(hp_shard_set *s, const char *idx, const cJSON *root, hp_shard_split which) {
    const char *name = split_name(which);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, name);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "shards");
    split *sp = &s->sp[which];
    if (!cJSON_IsObject(o) || !cJSON_IsArray(arr) || !get_u64(o, "tokens", &sp->tokens) || !get_u64(o, "bytes", &sp->bytes))
        return hp_error(HP_STATUS_CORRUPT, "%s: '%s' must be an object with tokens, bytes and shards", idx, name);
    int n = cJSON_GetArraySize(arr);
    sp->shards = calloc((size_t)(n ? n : 1), sizeof *sp->shards);
    if (!sp->shards) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %d shards", n);
    uint64_t first = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(arr, i);
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(e, "file");
        uint64_t tokens, crc, b;
        if (!cJSON_IsString(file) || strchr(file->valuestring, '/') || !get_u64(e, "tokens", &tokens) ||
            !get_u64(e, "crc32", &crc) || !get_u64(e, "bytes", &b))
            return hp_error(HP_STATUS_CORRUPT, "%s: %s.shards[%d] must have a file name, tokens, bytes and crc32", idx, name, i);
        shard *sh = &sp->shards[i];
        sp->n = i + 1;
        size_t len = strlen(s->dir) + strlen(file->valuestring) + 2;
        if (!(sh->path = malloc(len))) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        snprintf(sh->path, len, "%s/%s", s->dir, file->valuestring);
        HP_CHECK(hp_shard_read_info(sh->path, &sh->info));
        const hp_shard_info *in = &sh->info;
        if (in->tokens != tokens || in->crc32 != (uint32_t)crc || in->vocab != s->vocab || in->split != which ||
            in->source_bytes != b)
            return hp_error(HP_STATUS_CORRUPT, "shard '%s' disagrees with %s: header has %llu tokens, crc32 0x%08x, "
                            "vocabulary %d, split %s, %llu bytes; the index has %llu, 0x%08x, %d, %s, %llu",
                            sh->path, idx, (unsigned long long)in->tokens, in->crc32, (int)in->vocab,
                            split_name(in->split), (unsigned long long)in->source_bytes, (unsigned long long)tokens,
                            (uint32_t)crc, (int)s->vocab, name, (unsigned long long)b);
        if (in->tokens == 0) return hp_error(HP_STATUS_CORRUPT, "shard '%s' holds no tokens", sh->path);
        sh->first = first;
        first += in->tokens;
        bytes += in->source_bytes;
        HP_CHECK(map_shard(sh));
    }
    if (first != sp->tokens || bytes != sp->bytes)
        return hp_error(HP_STATUS_CORRUPT, "%s: %s.tokens %llu and bytes %llu are not the sums over its shards (%llu, %llu)",
                        idx, name, (unsigned long long)sp->tokens, (unsigned long long)sp->bytes,
                        (unsigned long long)first, (unsigned long long)bytes);
    return HP_STATUS_OK;
}

hp_status hp_shard_set_open(const char *dir, bool verify, hp_shard_set **out) {
    *out = NULL;
    hp_shard_set *s = calloc(1, sizeof *s);
    size_t len = strlen(dir) + sizeof HP_SHARDS_INDEX + 2;
    char *idx = malloc(len);
    if (!s || !idx || !(s->dir = strdup(dir))) {
        free(idx);
        hp_shard_set_free(s);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory opening '%s'", dir);
    }
    snprintf(idx, len, "%s/%s", dir, HP_SHARDS_INDEX);
    char *text = NULL;
    cJSON *root = NULL;
    hp_status st = read_text(idx, &text);
    if (st != HP_STATUS_OK) goto out;
    root = cJSON_Parse(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(tok, "kind"), *spec = cJSON_GetObjectItemCaseSensitive(tok, "spec");
    uint64_t version, vocab;
    if (!root || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "hp-shards") != 0) {
        st = hp_error(HP_STATUS_CORRUPT, "%s is not a shard index (no \"format\": \"hp-shards\")", idx);
        goto out;
    }
    if (!get_u64(root, "version", &version) || version != 1) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: version must be 1", idx);
        goto out;
    }
    if (!get_u64(root, "vocab", &vocab) || vocab < 1 || vocab > INT32_MAX || !cJSON_IsString(kind) || !cJSON_IsString(spec) ||
        strlen(spec->valuestring) >= sizeof s->spec || strlen(kind->valuestring) >= sizeof s->kind) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: needs vocab in [1, 2^31) and tokenizer.kind and tokenizer.spec strings", idx);
        goto out;
    }
    s->vocab = (int32_t)vocab;
    snprintf(s->kind, sizeof s->kind, "%s", kind->valuestring);
    snprintf(s->spec, sizeof s->spec, "%s", spec->valuestring);
    HP_CHECK_GOTO(open_split(s, idx, root, HP_SHARD_SPLIT_TRAIN), st, out);
    HP_CHECK_GOTO(open_split(s, idx, root, HP_SHARD_SPLIT_VAL), st, out);
    if (s->sp[0].tokens == 0) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: the training split holds no tokens", idx);
        goto out;
    }
    if (verify) HP_CHECK_GOTO(hp_shard_set_verify(s), st, out);
out:
    cJSON_Delete(root);
    free(text);
    free(idx);
    if (st != HP_STATUS_OK) hp_shard_set_free(s);
    else *out = s;
    return st;
}

/* Drops the pages of [p, p + n) (widened to DROP_ALIGN, within the mapping) from the page tables. */
static void drop_pages(const shard *sh, const unsigned char *p, size_t n) {
    uintptr_t base = (uintptr_t)sh->map, lo = (uintptr_t)p - ((uintptr_t)p - base) % DROP_ALIGN;
    uintptr_t hi = (uintptr_t)p + n, end = base + sh->map_bytes;
    hi = hi + (DROP_ALIGN - (hi - base) % DROP_ALIGN) % DROP_ALIGN;
    if (hi > end) hi = end;
    long page = sysconf(_SC_PAGESIZE);
    hi = (hi + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page; /* a mapping covers whole pages */
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* only advice: a failure changes no result */
}

hp_status hp_shard_set_verify(const hp_shard_set *s) {
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < s->sp[k].n; i++) {
            const shard *sh = &s->sp[k].shards[i];
            const unsigned char *p = sh->map + HP_SHARD_HEADER_BYTES;
            size_t left = sh->map_bytes - HP_SHARD_HEADER_BYTES;
            uint32_t crc = 0;
            while (left) {
                size_t c = left < VERIFY_CHUNK ? left : VERIFY_CHUNK;
                crc = hp__shard_crc(crc, p, c);
                drop_pages(sh, p, c);
                p += c;
                left -= c;
            }
            if (crc != sh->info.crc32)
                return hp_error(HP_STATUS_CORRUPT, "shard '%s' is corrupt: its payload's crc32 is 0x%08x, the header "
                                "records 0x%08x", sh->path, crc, sh->info.crc32);
        }
    return HP_STATUS_OK;
}

const char *hp_shard_set_dir(const hp_shard_set *s) { return s->dir; }
uint64_t hp_shard_set_tokens(const hp_shard_set *s, hp_shard_split split) { return s->sp[split].tokens; }
uint64_t hp_shard_set_bytes(const hp_shard_set *s, hp_shard_split split) { return s->sp[split].bytes; }
int hp_shard_set_count(const hp_shard_set *s, hp_shard_split split) { return s->sp[split].n; }
int32_t hp_shard_set_vocab(const hp_shard_set *s) { return s->vocab; }
const char *hp_shard_set_tokenizer_kind(const hp_shard_set *s) { return s->kind; }

const char *hp_shard_set_tokenizer_spec(const hp_shard_set *s, char *buf, size_t cap) {
    if (!strcmp(s->spec, "bytes")) snprintf(buf, cap, "bytes");
    else if (!strcmp(s->spec, ".")) snprintf(buf, cap, "%s", s->dir);
    else snprintf(buf, cap, "%s/%s", s->dir, s->spec);
    return buf;
}

hp_status hp_shard_set_read(const hp_shard_set *s, hp_shard_split which, uint64_t offset, size_t n, int32_t *out) {
    const split *sp = &s->sp[which];
    if (offset > sp->tokens || n > sp->tokens - offset)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "shards '%s': tokens [%llu, %llu) pass the end of the %s split (%llu "
                        "tokens)", s->dir, (unsigned long long)offset, (unsigned long long)(offset + n), split_name(which),
                        (unsigned long long)sp->tokens);
    /* the last shard whose first token is <= offset */
    int lo = 0, hi = sp->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (sp->shards[mid].first <= offset) lo = mid;
        else hi = mid - 1;
    }
    size_t done = 0;
    for (int i = lo; done < n; i++) {
        const shard *sh = &sp->shards[i];
        uint64_t at = offset + done - sh->first;
        size_t k = (size_t)(sh->info.tokens - at) < n - done ? (size_t)(sh->info.tokens - at) : n - done;
        int tb = sh->info.token_bytes;
        const unsigned char *p = sh->map + HP_SHARD_HEADER_BYTES + at * (uint64_t)tb;
        for (size_t j = 0; j < k; j++) {
            const unsigned char *q = p + j * (size_t)tb;
            uint32_t v = tb == 2 ? (uint32_t)q[0] | (uint32_t)q[1] << 8
                                 : (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            if (v >= (uint32_t)s->vocab)
                return hp_error(HP_STATUS_CORRUPT, "shard '%s': token %u at position %llu is outside the vocabulary "
                                "[0, %d)", sh->path, v, (unsigned long long)(at + j), (int)s->vocab);
            out[done + j] = (int32_t)v;
        }
        drop_pages(sh, p, k * (size_t)tb);
        done += k;
    }
    return HP_STATUS_OK;
}

hp_status hp_shard_set_unigram_entropy(const hp_shard_set *s, uint64_t max_tokens, double *nats) {
    uint64_t n = s->sp[0].tokens < max_tokens ? s->sp[0].tokens : max_tokens;
    uint64_t *counts = calloc((size_t)s->vocab, sizeof *counts);
    int32_t *buf = malloc(65536 * sizeof *buf);
    if (!counts || !buf) {
        free(counts);
        free(buf);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory counting %d token ids", (int)s->vocab);
    }
    hp_status st = HP_STATUS_OK;
    for (uint64_t at = 0; at < n && st == HP_STATUS_OK;) {
        size_t k = n - at < 65536 ? (size_t)(n - at) : 65536;
        st = hp_shard_set_read(s, HP_SHARD_SPLIT_TRAIN, at, k, buf);
        for (size_t j = 0; st == HP_STATUS_OK && j < k; j++) counts[buf[j]]++;
        at += k;
    }
    double h = 0;
    for (int32_t v = 0; v < s->vocab && n > 0; v++)
        if (counts[v]) {
            double p = (double)counts[v] / (double)n;
            h -= p * log(p);
        }
    free(counts);
    free(buf);
    *nats = h;
    return st;
}
