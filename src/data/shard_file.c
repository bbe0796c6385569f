/* One token shard file: the header layout, the writer and the header check (see hp/shards.h). */
#include "hp/shards.h"

#include "data/shard_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Slots of the 256-slot header (hp/shards.h). */
enum {
    SLOT_MAGIC = 0, SLOT_VERSION = 1, SLOT_COUNT = 2, SLOT_HP_MAGIC = 16, SLOT_HP_VERSION = 17, SLOT_TOKEN_BYTES = 18,
    SLOT_VOCAB = 19, SLOT_TOKENS = 20, SLOT_BYTES = 22, SLOT_CRC = 24, SLOT_SPLIT = 25, SLOT_HEADER_CRC = 26,
};
#define HEADER_CRC_BYTES (SLOT_HEADER_CRC * 4)
#define WRITE_BUF_TOKENS (1 << 16)

static void put32(unsigned char *h, int slot, uint32_t v) {
    for (int i = 0; i < 4; i++) h[slot * 4 + i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *h, int slot) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)h[slot * 4 + i] << (8 * i);
    return v;
}
static uint64_t get64(const unsigned char *h, int slot) { return get32(h, slot) | (uint64_t)get32(h, slot + 1) << 32; }

uint32_t hp__shard_crc(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) { /* zlib's crc32 takes a uInt length */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, b, k);
        b += k;
        n -= k;
    }
    return crc;
}

void hp__shard_header_encode(const hp_shard_info *in, unsigned char h[HP_SHARD_HEADER_BYTES]) {
    memset(h, 0, HP_SHARD_HEADER_BYTES);
    put32(h, SLOT_MAGIC, HP_SHARD_MAGIC);
    put32(h, SLOT_VERSION, in->token_bytes == 2 ? HP_SHARD_VERSION_U16 : HP_SHARD_VERSION_U32);
    put32(h, SLOT_COUNT, (uint32_t)in->tokens);
    put32(h, SLOT_HP_MAGIC, HP_SHARD_HP_MAGIC);
    put32(h, SLOT_HP_VERSION, 1);
    put32(h, SLOT_TOKEN_BYTES, (uint32_t)in->token_bytes);
    put32(h, SLOT_VOCAB, (uint32_t)in->vocab);
    put32(h, SLOT_TOKENS, (uint32_t)in->tokens);
    put32(h, SLOT_TOKENS + 1, (uint32_t)(in->tokens >> 32));
    put32(h, SLOT_BYTES, (uint32_t)in->source_bytes);
    put32(h, SLOT_BYTES + 1, (uint32_t)(in->source_bytes >> 32));
    put32(h, SLOT_CRC, in->crc32);
    put32(h, SLOT_SPLIT, (uint32_t)in->split);
    put32(h, SLOT_HEADER_CRC, hp__shard_crc(0, h, HEADER_CRC_BYTES));
}

hp_status hp__shard_header_decode(const char *path, const unsigned char h[HP_SHARD_HEADER_BYTES], hp_shard_info *out) {
    uint32_t magic = get32(h, SLOT_MAGIC), version = get32(h, SLOT_VERSION);
    if (magic != HP_SHARD_MAGIC)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s': magic %u is not %u (not a token shard)", path, magic, HP_SHARD_MAGIC);
    if (version != HP_SHARD_VERSION_U16 && version != HP_SHARD_VERSION_U32)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s': version %u is neither %d (uint16 tokens) nor %d (uint32)", path,
                        version, HP_SHARD_VERSION_U16, HP_SHARD_VERSION_U32);
    if (get32(h, SLOT_HP_MAGIC) != HP_SHARD_HP_MAGIC)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s' lacks hp's header slots (slot 16 is 0x%08x, not 0x%08x): an llm.c "
                        "shard without vocabulary, byte count and checksum; prepare it with `hp data prepare`",
                        path, get32(h, SLOT_HP_MAGIC), HP_SHARD_HP_MAGIC);
    uint32_t want = get32(h, SLOT_HEADER_CRC), got = hp__shard_crc(0, h, HEADER_CRC_BYTES);
    if (want != got)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s': header crc32 0x%08x does not match the 0x%08x it records "
                        "(the header is damaged)", path, got, want);
    if (get32(h, SLOT_HP_VERSION) != 1)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s': hp header version %u is not 1", path, get32(h, SLOT_HP_VERSION));
    hp_shard_info in = {0};
    in.token_bytes = (int)get32(h, SLOT_TOKEN_BYTES);
    in.vocab = (int32_t)get32(h, SLOT_VOCAB);
    in.tokens = get64(h, SLOT_TOKENS);
    in.source_bytes = get64(h, SLOT_BYTES);
    in.crc32 = get32(h, SLOT_CRC);
    uint32_t split = get32(h, SLOT_SPLIT);
    int want_bytes = version == HP_SHARD_VERSION_U16 ? 2 : 4;
    if (in.token_bytes != want_bytes)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s': %d bytes per token disagree with version %u", path, in.token_bytes,
                        version);
    if (in.vocab < 1 || (in.token_bytes == 2 && in.vocab > 65536))
        return hp_error(HP_STATUS_CORRUPT, "shard '%s': vocabulary %d does not fit %d-byte tokens", path, (int)in.vocab,
                        in.token_bytes);
    if (in.tokens > HP_SHARD_MAX_TOKENS || get32(h, SLOT_COUNT) != (uint32_t)in.tokens)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s': token count %llu (slot 2: %u) is inconsistent", path,
                        (unsigned long long)in.tokens, get32(h, SLOT_COUNT));
    if (split > 1) return hp_error(HP_STATUS_CORRUPT, "shard '%s': split %u is neither 0 (train) nor 1 (val)", path, split);
    in.split = (hp_shard_split)split;
    *out = in;
    return HP_STATUS_OK;
}

hp_status hp_shard_read_info(const char *path, hp_shard_info *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "cannot open shard '%s': %s", path, strerror(errno));
    struct stat sb;
    unsigned char h[HP_SHARD_HEADER_BYTES];
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return hp_error(HP_STATUS_IO, "shard '%s' is not a regular file", path);
    }
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got != sizeof h)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s' is truncated: %lld bytes, shorter than the %d-byte header", path,
                        (long long)sb.st_size, HP_SHARD_HEADER_BYTES);
    HP_CHECK(hp__shard_header_decode(path, h, out));
    uint64_t want = HP_SHARD_HEADER_BYTES + out->tokens * (uint64_t)out->token_bytes;
    if ((uint64_t)sb.st_size != want)
        return hp_error(HP_STATUS_CORRUPT, "shard '%s' is %s: %lld bytes, its header says %d + %llu tokens x %d bytes = %llu",
                        path, (uint64_t)sb.st_size < want ? "truncated" : "longer than its header says",
                        (long long)sb.st_size, HP_SHARD_HEADER_BYTES, (unsigned long long)out->tokens, out->token_bytes,
                        (unsigned long long)want);
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- writer */

struct hp_shard_writer {
    char *path, *tmp;
    FILE *f;
    hp_shard_info info;
    unsigned char *buf; /* WRITE_BUF_TOKENS encoded tokens */
    size_t nbuf;        /* tokens in buf */
};

hp_status hp_shard_writer_new(const char *path, int32_t vocab, hp_shard_split split, hp_shard_writer **out) {
    *out = NULL;
    if (vocab < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "shard '%s': vocabulary %d must be >= 1", path, (int)vocab);
    hp_shard_writer *w = calloc(1, sizeof *w);
    if (!w) return hp_error(HP_STATUS_OUT_OF_MEMORY, "shard '%s': out of memory", path);
    size_t n = strlen(path);
    w->path = strdup(path);
    w->tmp = malloc(n + 5);
    w->buf = malloc(WRITE_BUF_TOKENS * 4);
    if (!w->path || !w->tmp || !w->buf) {
        hp_shard_writer_abort(w);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "shard '%s': out of memory", path);
    }
    snprintf(w->tmp, n + 5, "%s.tmp", path);
    w->info = (hp_shard_info){.token_bytes = vocab <= 65536 ? 2 : 4, .vocab = vocab, .split = split};
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        hp_status st = hp_error(HP_STATUS_IO, "cannot create shard '%s': %s", w->tmp, strerror(errno));
        hp_shard_writer_abort(w);
        return st;
    }
    unsigned char h[HP_SHARD_HEADER_BYTES] = {0}; /* placeholder until close */
    if (fwrite(h, 1, sizeof h, w->f) != sizeof h) {
        hp_status st = hp_error(HP_STATUS_IO, "cannot write shard '%s': %s", w->tmp, strerror(errno));
        hp_shard_writer_abort(w);
        return st;
    }
    *out = w;
    return HP_STATUS_OK;
}

static hp_status flush_buf(hp_shard_writer *w) {
    size_t bytes = w->nbuf * (size_t)w->info.token_bytes;
    if (bytes && fwrite(w->buf, 1, bytes, w->f) != bytes)
        return hp_error(HP_STATUS_IO, "cannot write shard '%s': %s", w->tmp, strerror(errno));
    w->info.crc32 = hp__shard_crc(w->info.crc32, w->buf, bytes);
    w->nbuf = 0;
    return HP_STATUS_OK;
}

hp_status hp_shard_writer_append(hp_shard_writer *w, const int32_t *ids, size_t n, uint64_t source_bytes) {
    if (w->info.tokens + n > HP_SHARD_MAX_TOKENS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "shard '%s': %llu + %zu tokens pass the limit of %llu per shard",
                        w->path, (unsigned long long)w->info.tokens, n, (unsigned long long)HP_SHARD_MAX_TOKENS);
    int tb = w->info.token_bytes;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= w->info.vocab)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "shard '%s': token %d at position %zu is outside the vocabulary "
                            "[0, %d)", w->path, (int)id, i, (int)w->info.vocab);
        unsigned char *p = w->buf + w->nbuf * (size_t)tb;
        uint32_t v = (uint32_t)id;
        p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
        if (tb == 4) p[2] = (unsigned char)(v >> 16), p[3] = (unsigned char)(v >> 24);
        if (++w->nbuf == WRITE_BUF_TOKENS) HP_CHECK(flush_buf(w));
    }
    w->info.tokens += n;
    w->info.source_bytes += source_bytes;
    return HP_STATUS_OK;
}

uint64_t hp_shard_writer_tokens(const hp_shard_writer *w) { return w->info.tokens; }

hp_status hp__fsync_rename(FILE *f, const char *tmp, const char *path) {
    int rc = fflush(f);
    if (rc == 0) rc = fsync(fileno(f));
    int err = errno;
    if (fclose(f) != 0 && rc == 0) rc = -1, err = errno;
    if (rc != 0) return hp_error(HP_STATUS_IO, "cannot write '%s': %s", tmp, strerror(err));
    if (rename(tmp, path) != 0) return hp_error(HP_STATUS_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    return HP_STATUS_OK;
}

hp_status hp_shard_writer_close(hp_shard_writer *w, hp_shard_info *info) {
    hp_status st = flush_buf(w);
    unsigned char h[HP_SHARD_HEADER_BYTES];
    hp__shard_header_encode(&w->info, h);
    if (st == HP_STATUS_OK && (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, w->f) != sizeof h))
        st = hp_error(HP_STATUS_IO, "cannot write the header of shard '%s': %s", w->tmp, strerror(errno));
    if (st != HP_STATUS_OK) {
        hp_shard_writer_abort(w);
        return st;
    }
    FILE *f = w->f;
    w->f = NULL;
    st = hp__fsync_rename(f, w->tmp, w->path);
    if (st == HP_STATUS_OK && info) *info = w->info;
    if (st != HP_STATUS_OK) remove(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w->buf);
    free(w);
    return st;
}

void hp_shard_writer_abort(hp_shard_writer *w) {
    if (!w) return;
    if (w->f) {
        fclose(w->f);
        remove(w->tmp);
    }
    free(w->path);
    free(w->tmp);
    free(w->buf);
    free(w);
}
