/* safetensors reader and writer (see hp/safetensors.h for the format). */
#include "hp/safetensors.h"

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
#include <zlib.h>

#include "io/safetensors_internal.h"

#define MAX_HEADER (100u * 1000u * 1000u) /* bytes; the reference implementation's limit */
#define META_KEY "__metadata__"
#define CRC_CHUNK ((size_t)1 << 20) /* bytes checksummed (and written or copied) at a time */
/* The header checksum's key and value as the writer prints them (cJSON, unformatted). */
#define HEADER_CRC_PATTERN "\"" HP_SAFETENSORS_HEADER_CRC_KEY "\":\""

static bool is_crc_key(const char *k) {
    return !strcmp(k, HP_SAFETENSORS_CHECKSUM_KEY) || !strcmp(k, HP_SAFETENSORS_HEADER_CRC_KEY) ||
           !strncmp(k, HP_SAFETENSORS_CRC_PREFIX, strlen(HP_SAFETENSORS_CRC_PREFIX));
}

/* 8 lowercase hex digits into *out. */
static bool parse_crc(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return true;
}

static uint32_t crc_bytes(uint32_t crc, const void *p, size_t n) {
    return (uint32_t)crc32_z(crc, (const Bytef *)p, n);
}

static const char *st_dtype_name(hp_dtype dt) {
    switch (dt) {
    case HP_DTYPE_F32: return "F32";
    case HP_DTYPE_BF16: return "BF16";
    case HP_DTYPE_I32: return "I32";
    default: return NULL;
    }
}

static bool st_dtype_parse(const char *s, hp_dtype *out) {
    for (int d = 0; d < HP_DTYPE_COUNT; d++)
        if (strcmp(s, st_dtype_name((hp_dtype)d)) == 0) {
            *out = (hp_dtype)d;
            return true;
        }
    return false;
}

/* ---------------------------------------------------------------- writer */

static cJSON *json_int(long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return cJSON_CreateRaw(buf); /* exact, unlike cJSON's doubles */
}

static hp_status build_header(const char *path, const hp_named_tensor *t, size_t n, const char *const *meta, size_t n_meta,
                              char **out, size_t *out_len) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return hp_error(HP_STATUS_OUT_OF_MEMORY, "writing '%s': out of memory", path);
    hp_status st = HP_STATUS_OK;
    size_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const char *dn = st_dtype_name(t[i].dtype);
        if (!t[i].name || !t[i].name[0] || strcmp(t[i].name, META_KEY) == 0) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "writing '%s': tensor %zu has an invalid name '%s'", path, i,
                          t[i].name ? t[i].name : "(null)");
            goto fail;
        }
        if (!dn) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "writing '%s': tensor '%s' has an invalid dtype %d", path, t[i].name,
                          (int)t[i].dtype);
            goto fail;
        }
        if (cJSON_GetObjectItemCaseSensitive(root, t[i].name)) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "writing '%s': duplicate tensor name '%s'", path, t[i].name);
            goto fail;
        }
        size_t nbytes = (size_t)hp_shape_numel(&t[i].shape) * hp_dtype_size(t[i].dtype);
        cJSON *e = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        bool ok = e && shape && offs;
        for (int d = 0; ok && d < t[i].shape.ndim; d++) ok = cJSON_AddItemToArray(shape, json_int(t[i].shape.dim[d]));
        ok = ok && cJSON_AddItemToArray(offs, json_int((long long)offset)) &&
             cJSON_AddItemToArray(offs, json_int((long long)(offset + nbytes)));
        ok = ok && cJSON_AddStringToObject(e, "dtype", dn) && cJSON_AddItemToObject(e, "shape", shape);
        if (!ok) cJSON_Delete(shape);
        ok = ok && cJSON_AddItemToObject(e, "data_offsets", offs);
        if (!ok) cJSON_Delete(offs);
        ok = ok && cJSON_AddItemToObject(root, t[i].name, e);
        if (!ok) {
            cJSON_Delete(e);
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "writing '%s': out of memory", path);
            goto fail;
        }
        offset += nbytes;
    }
    if (n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, META_KEY);
        for (size_t i = 0; m && i < n_meta; i++)
            if (!cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1])) m = NULL;
        if (!m) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "writing '%s': out of memory", path);
            goto fail;
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "writing '%s': out of memory", path);
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    char *h = realloc(text, padded + 1);
    if (!h) {
        free(text);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "writing '%s': out of memory", path);
    }
    memset(h + len, ' ', padded - len);
    h[padded] = 0;
    *out = h;
    *out_len = padded;
    return HP_STATUS_OK;
fail:
    cJSON_Delete(root);
    return st;
}

static bool write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* The integrity metadata of a checked write: the caller's pairs, the marker, the header checksum
 * and one checksum per tensor, the checksums' values "00000000" until they are known. */
typedef struct crc_meta {
    const char **kv; /* 2 * n pairs */
    size_t n;
    char **keys;     /* "hp.crc32.<name>", one per tensor */
    char (*vals)[9]; /* tensor i's value, then the header's */
    uint32_t *crc;
} crc_meta;

static void crc_meta_free(crc_meta *c, size_t n_tensors) {
    for (size_t i = 0; c->keys && i < n_tensors; i++) free(c->keys[i]);
    free(c->keys);
    free(c->kv);
    free(c->vals);
    free(c->crc);
}

static hp_status crc_meta_init(const char *path, const hp_named_tensor *t, size_t n, const char *const *meta,
                               size_t n_meta, crc_meta *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < n_meta; i++)
        if (is_crc_key(meta[2 * i]))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "writing '%s': metadata key '%s' is reserved for checksums", path,
                            meta[2 * i]);
    c->n = n_meta + 2 + n;
    c->kv = calloc(2 * c->n, sizeof *c->kv);
    c->keys = calloc(n ? n : 1, sizeof *c->keys);
    c->vals = calloc(n + 1, sizeof *c->vals);
    c->crc = calloc(n ? n : 1, sizeof *c->crc);
    if (!c->kv || !c->keys || !c->vals || !c->crc) goto oom;
    for (size_t i = 0; i < 2 * n_meta; i++) c->kv[i] = meta[i];
    size_t k = 2 * n_meta;
    c->kv[k++] = HP_SAFETENSORS_CHECKSUM_KEY;
    c->kv[k++] = "crc32";
    c->kv[k++] = HP_SAFETENSORS_HEADER_CRC_KEY;
    c->kv[k++] = c->vals[n];
    memcpy(c->vals[n], "00000000", 9);
    for (size_t i = 0; i < n; i++) {
        const char *name = t[i].name ? t[i].name : "";
        size_t len = strlen(HP_SAFETENSORS_CRC_PREFIX) + strlen(name) + 1;
        if (!(c->keys[i] = malloc(len))) goto oom;
        snprintf(c->keys[i], len, "%s%s", HP_SAFETENSORS_CRC_PREFIX, name);
        memcpy(c->vals[i], "00000000", 9);
        c->kv[k++] = c->keys[i];
        c->kv[k++] = c->vals[i];
    }
    return HP_STATUS_OK;
oom:
    crc_meta_free(c, n);
    return hp_error(HP_STATUS_OUT_OF_MEMORY, "writing '%s': out of memory", path);
}

/* The final header of a checked write: the tensors' checksums filled in, then the checksum of the
 * 8 length bytes and the header with its own value read as "00000000". Same length as the first. */
static hp_status final_header(const char *path, const hp_named_tensor *t, size_t n, crc_meta *c, const unsigned char *len8,
                              size_t hlen, char **out) {
    for (size_t i = 0; i < n; i++) snprintf(c->vals[i], 9, "%08x", (unsigned)c->crc[i]);
    char *h = NULL;
    size_t len = 0;
    HP_CHECK(build_header(path, t, n, c->kv, c->n, &h, &len));
    char *at = len == hlen ? memmem(h, len, HEADER_CRC_PATTERN, strlen(HEADER_CRC_PATTERN)) : NULL;
    if (!at) {
        free(h);
        return hp_error(HP_STATUS_INTERNAL, "writing '%s': the header changed length when its checksums were filled in",
                        path);
    }
    uint32_t crc = crc_bytes(crc_bytes(0, len8, 8), h, len);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
    memcpy(at + strlen(HEADER_CRC_PATTERN), hex, 8);
    *out = h;
    return HP_STATUS_OK;
}

static bool pwrite_all(int fd, const void *buf, size_t n, off_t off) {
    const char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return true;
}

/* Writes the file; with `checked`, each tensor's CRC-32 is computed chunk by chunk as its bytes are
 * written, and the header is rewritten in place with the checksums at the end. */
static hp_status write_file(const char *path, const hp_named_tensor *tensors, size_t n, const char *const *meta,
                            size_t n_meta, bool checked) {
    crc_meta c = {0};
    if (checked) HP_CHECK(crc_meta_init(path, tensors, n, meta, n_meta, &c));
    char *header = NULL, *final = NULL;
    size_t hlen = 0;
    hp_status st = build_header(path, tensors, n, checked ? c.kv : meta, checked ? c.n : n_meta, &header, &hlen);
    if (st != HP_STATUS_OK) {
        crc_meta_free(&c, n);
        return st;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(header);
        crc_meta_free(&c, n);
        return hp_error(HP_STATUS_IO, "cannot create '%s': %s", path, strerror(e));
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int e = 0;
    bool ok = write_all(fd, len8, 8) && write_all(fd, header, hlen);
    for (size_t i = 0; ok && i < n; i++) {
        size_t nbytes = (size_t)hp_shape_numel(&tensors[i].shape) * hp_dtype_size(tensors[i].dtype);
        const unsigned char *p = tensors[i].data;
        for (size_t off = 0; ok && off < nbytes; off += CRC_CHUNK) {
            size_t k = nbytes - off < CRC_CHUNK ? nbytes - off : CRC_CHUNK;
            if (checked) c.crc[i] = crc_bytes(c.crc[i], p + off, k);
            ok = write_all(fd, p + off, k);
        }
    }
    if (ok && checked) {
        st = final_header(path, tensors, n, &c, len8, hlen, &final);
        if (st != HP_STATUS_OK) {
            close(fd);
            unlink(path);
            free(header);
            crc_meta_free(&c, n);
            return st;
        }
        ok = pwrite_all(fd, final, hlen, 8);
    }
    ok = ok && fsync(fd) == 0;
    if (!ok) e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    free(header);
    free(final);
    crc_meta_free(&c, n);
    if (!ok) {
        unlink(path);
        return hp_error(HP_STATUS_IO, "cannot write '%s': %s", path, strerror(e ? e : EIO));
    }
    return HP_STATUS_OK;
}

hp_status hp_safetensors_write(const char *path, const hp_named_tensor *tensors, size_t n, const char *const *meta,
                               size_t n_meta) {
    return write_file(path, tensors, n, meta, n_meta, false);
}

hp_status hp_safetensors_write_checked(const char *path, const hp_named_tensor *tensors, size_t n,
                                       const char *const *meta, size_t n_meta) {
    return write_file(path, tensors, n, meta, n_meta, true);
}

/* ---------------------------------------------------------------- reader */

struct hp_safetensors {
    char *path;
    void *map;
    size_t size;
    cJSON *header;
    hp_safetensors_entry *entries;
    size_t n;
    const cJSON *meta;
    bool checksummed;        /* the file records checksums (hp_safetensors_write_checked) */
    unsigned char *verified; /* per entry: its checksum matched once (hp_safetensors_verify) */
    bool borrowed; /* map is the caller's buffer (hp__safetensors_open_buffer), not an mmap */
};

#define CORRUPT(...) hp_error(HP_STATUS_CORRUPT, __VA_ARGS__)

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

static hp_status parse_entry(const hp_safetensors *f, const cJSON *j, hp_safetensors_entry *e, size_t buf_size) {
    const char *p = f->path, *name = j->string;
    e->name = name;
    if (!cJSON_IsObject(j)) return CORRUPT("'%s': tensor '%s': entry is not a JSON object", p, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(dt)) return CORRUPT("'%s': tensor '%s': missing or non-string dtype", p, name);
    if (!st_dtype_parse(dt->valuestring, &e->dtype))
        return CORRUPT("'%s': tensor '%s': unknown dtype '%s' (supported: F32, BF16, I32)", p, name, dt->valuestring);
    if (!cJSON_IsArray(shape)) return CORRUPT("'%s': tensor '%s': missing or non-array shape", p, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > HP_MAX_DIMS) return CORRUPT("'%s': tensor '%s': %d dims, more than %d", p, name, nd, HP_MAX_DIMS);
    e->shape.ndim = nd;
    uint64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        uint64_t v;
        if (!json_uint(cJSON_GetArrayItem(shape, d), &v))
            return CORRUPT("'%s': tensor '%s': shape[%d] is not a non-negative integer", p, name, d);
        e->shape.dim[d] = (int64_t)v;
        if (v && numel > UINT64_MAX / 8 / v) return CORRUPT("'%s': tensor '%s': shape is too large", p, name);
        numel *= v;
    }
    uint64_t b, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &end))
        return CORRUPT("'%s': tensor '%s': data_offsets must be two non-negative integers [begin, end]", p, name);
    if (b > end || end > buf_size)
        return CORRUPT("'%s': tensor '%s': data_offsets [%llu, %llu] out of range of the %zu-byte data buffer (truncated file?)", p, name,
                       (unsigned long long)b, (unsigned long long)end, buf_size);
    uint64_t want = numel * hp_dtype_size(e->dtype);
    if (end - b != want) {
        char sb[128];
        return CORRUPT("'%s': tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] hold %llu", p,
                       name, hp_shape_str(&e->shape, sb, sizeof sb), dt->valuestring, (unsigned long long)want,
                       (unsigned long long)b, (unsigned long long)end, (unsigned long long)(end - b));
    }
    e->offset = (size_t)b;
    e->nbytes = (size_t)(end - b);
    return HP_STATUS_OK;
}

/*
 * The header checksum, checked before the header is parsed, so that a damaged header is reported as
 * such: the CRC-32 of the 8 length bytes and the n header bytes with the recorded value read as
 * "00000000". A header without the key is checked later (check_crc_meta: a file recording tensor
 * checksums must have it).
 */
static hp_status check_header_crc(hp_safetensors *f, size_t n) {
    const char *h = (const char *)f->map + 8, *pat = HEADER_CRC_PATTERN;
    size_t pl = strlen(pat);
    const char *at = memmem(h, n, pat, pl);
    if (!at) return HP_STATUS_OK;
    if (at + pl + 8 > h + n || memmem(at + 1, (size_t)(h + n - at - 1), pat, pl))
        return CORRUPT("'%s': the header checksum (%s) is cut short or repeated", f->path, HP_SAFETENSORS_HEADER_CRC_KEY);
    const char *val = at + pl;
    uint32_t want;
    if (!parse_crc(val, &want))
        return CORRUPT("'%s': the header checksum (%s) '%.8s' is not 8 lowercase hex digits", f->path,
                       HP_SAFETENSORS_HEADER_CRC_KEY, val);
    uint32_t crc = crc_bytes(0, f->map, (size_t)(val - (const char *)f->map));
    crc = crc_bytes(crc, "00000000", 8);
    crc = crc_bytes(crc, val + 8, (size_t)(h + n - val - 8));
    if (crc != want)
        return CORRUPT("'%s': header checksum mismatch (recorded %08x, computed %08x): the first %zu bytes changed after "
                       "they were written", f->path, (unsigned)want, (unsigned)crc, 8 + n);
    f->checksummed = true;
    return HP_STATUS_OK;
}

/* The checksum metadata, once the header is parsed: none at all (a file from another writer), or
 * the marker, the header checksum and one checksum per tensor, each naming a tensor of the file. */
static hp_status check_crc_meta(hp_safetensors *f) {
    const char *p = f->path, *pre = HP_SAFETENSORS_CRC_PREFIX;
    size_t pl = strlen(pre);
    bool any = false;
    for (const cJSON *kv = f->meta ? f->meta->child : NULL; kv; kv = kv->next) any = any || is_crc_key(kv->string);
    if (!any) return HP_STATUS_OK;
    const char *algo = hp_safetensors_metadata(f, HP_SAFETENSORS_CHECKSUM_KEY);
    if (!algo) return CORRUPT("'%s': records checksums but not the %s marker", p, HP_SAFETENSORS_CHECKSUM_KEY);
    if (strcmp(algo, "crc32"))
        return hp_error(HP_STATUS_UNSUPPORTED, "'%s': checksum algorithm '%s' is unknown (this build knows crc32)", p, algo);
    if (!f->checksummed)
        return CORRUPT("'%s': records checksums but no header checksum (%s)", p, HP_SAFETENSORS_HEADER_CRC_KEY);
    for (size_t i = 0; i < f->n; i++) {
        hp_safetensors_entry *e = &f->entries[i];
        const cJSON *v = NULL;
        for (const cJSON *kv = f->meta->child; kv && !v; kv = kv->next)
            if (!strncmp(kv->string, pre, pl) && !strcmp(kv->string + pl, e->name)) v = kv;
        if (!v || strlen(v->valuestring) != 8 || !parse_crc(v->valuestring, &e->crc32))
            return CORRUPT("'%s': tensor '%s' has no valid checksum (%s%s)", p, e->name, pre, e->name);
        e->has_crc32 = true;
    }
    for (const cJSON *kv = f->meta->child; kv; kv = kv->next)
        if (!strncmp(kv->string, pre, pl) && !hp_safetensors_find(f, kv->string + pl))
            return CORRUPT("'%s': records a checksum for tensor '%s', which the file does not hold", p, kv->string + pl);
    return HP_STATUS_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const hp_safetensors_entry *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Duplicate tensor names, by sorting: a header may hold millions of entries (checking each against
 * all the others took a minute for 100k). */
static hp_status check_unique_names(const hp_safetensors *f) {
    const char **names = malloc((f->n ? f->n : 1) * sizeof *names);
    if (!names) return hp_error(HP_STATUS_OUT_OF_MEMORY, "'%s': out of memory", f->path);
    for (size_t i = 0; i < f->n; i++) names[i] = f->entries[i].name;
    qsort(names, f->n, sizeof *names, cmp_name);
    hp_status st = HP_STATUS_OK;
    for (size_t i = 1; i < f->n && st == HP_STATUS_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0) st = CORRUPT("'%s': duplicate tensor '%s'", f->path, names[i]);
    free(names);
    return st;
}

static hp_status parse_file(hp_safetensors *f) {
    const char *p = f->path;
    const unsigned char *m = f->map;
    if (f->size < 8) return CORRUPT("'%s': file is %zu bytes, too short for the 8-byte header length", p, f->size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)m[i] << (8 * i);
    if (n == 0 || n > MAX_HEADER || n > f->size - 8)
        return CORRUPT("'%s': header length %llu is invalid for a %zu-byte file (truncated or not safetensors?)", p,
                       (unsigned long long)n, f->size);
    const char *h = (const char *)m + 8;
    HP_CHECK(check_header_crc(f, (size_t)n));
    if (h[0] != '{') return CORRUPT("'%s': header does not start with '{'", p);
    const char *end = NULL;
    f->header = cJSON_ParseWithLengthOpts(h, (size_t)n, &end, 0);
    if (!f->header || !cJSON_IsObject(f->header))
        return CORRUPT("'%s': header is not valid JSON (near byte %zu of %llu)", p,
                       (size_t)((end ? end : cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : h) - h), (unsigned long long)n);
    for (const char *q = end; q && q < h + n; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r' && *q != 0)
            return CORRUPT("'%s': trailing bytes after the header JSON", p);
    size_t buf_size = f->size - 8 - (size_t)n;
    size_t count = 0;
    for (const cJSON *c = f->header->child; c; c = c->next) count += strcmp(c->string, META_KEY) != 0;
    f->entries = calloc(count ? count : 1, sizeof *f->entries);
    if (!f->entries) return hp_error(HP_STATUS_OUT_OF_MEMORY, "'%s': out of memory", p);
    for (const cJSON *c = f->header->child; c; c = c->next) {
        if (strcmp(c->string, META_KEY) == 0) {
            if (!cJSON_IsObject(c)) return CORRUPT("'%s': __metadata__ is not a JSON object", p);
            for (const cJSON *kv = c->child; kv; kv = kv->next)
                if (!cJSON_IsString(kv)) return CORRUPT("'%s': __metadata__ value '%s' is not a string", p, kv->string);
            f->meta = c;
            continue;
        }
        HP_CHECK(parse_entry(f, c, &f->entries[f->n], buf_size));
        f->n++;
    }
    HP_CHECK(check_crc_meta(f));
    HP_CHECK(check_unique_names(f));
    qsort(f->entries, f->n, sizeof *f->entries, cmp_offset);
    f->verified = calloc(f->n ? f->n : 1, 1);
    if (!f->verified) return hp_error(HP_STATUS_OUT_OF_MEMORY, "'%s': out of memory", p);
    size_t pos = 0;
    for (size_t i = 0; i < f->n; i++) {
        hp_safetensors_entry *e = &f->entries[i];
        if (e->offset < pos)
            return CORRUPT("'%s': tensor '%s' (bytes [%zu, %zu]) overlaps tensor '%s' which ends at %zu", p, e->name,
                           e->offset, e->offset + e->nbytes, f->entries[i - 1].name, pos);
        if (e->offset > pos)
            return CORRUPT("'%s': tensor '%s' starts at byte %zu, leaving a hole after byte %zu", p, e->name, e->offset, pos);
        pos = e->offset + e->nbytes;
        e->data = m + 8 + n + e->offset;
    }
    if (pos != buf_size)
        return CORRUPT("'%s': tensors cover %zu bytes but the data buffer holds %zu (truncated or trailing bytes)", p, pos,
                       buf_size);
    return HP_STATUS_OK;
}

hp_status hp_safetensors_open(const char *path, hp_safetensors **out) {
    *out = NULL;
    hp_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "opening '%s': out of memory", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        hp_safetensors_close(f);
        return hp_error(HP_STATUS_IO, "cannot open '%s': %s", path, strerror(e));
    }
    f->size = (size_t)sb.st_size;
    if (f->size) {
        f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            int e = errno;
            f->map = NULL;
            close(fd);
            hp_safetensors_close(f);
            return hp_error(HP_STATUS_IO, "cannot map '%s': %s", path, strerror(e));
        }
    }
    close(fd);
    hp_status st = parse_file(f);
    if (st != HP_STATUS_OK) {
        hp_safetensors_close(f);
        return st;
    }
    *out = f;
    return HP_STATUS_OK;
}

hp_status hp__safetensors_open_buffer(const void *data, size_t size, const char *name, hp_safetensors **out) {
    *out = NULL;
    hp_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        free(f);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "opening '%s': out of memory", name);
    }
    f->map = (void *)data;
    f->size = size;
    f->borrowed = true;
    hp_status st = parse_file(f);
    if (st != HP_STATUS_OK) {
        hp_safetensors_close(f);
        return st;
    }
    *out = f;
    return HP_STATUS_OK;
}

void hp_safetensors_close(hp_safetensors *f) {
    if (!f) return;
    if (f->map && !f->borrowed) munmap(f->map, f->size);
    cJSON_Delete(f->header);
    free(f->entries);
    free(f->verified);
    free(f->path);
    free(f);
}

size_t hp_safetensors_count(const hp_safetensors *f) { return f->n; }
const hp_safetensors_entry *hp_safetensors_entry_at(const hp_safetensors *f, size_t i) {
    return i < f->n ? &f->entries[i] : NULL;
}
const char *hp_safetensors_path(const hp_safetensors *f) { return f->path; }

const hp_safetensors_entry *hp_safetensors_find(const hp_safetensors *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
    return NULL;
}

const char *hp_safetensors_metadata(const hp_safetensors *f, const char *key) {
    const cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool hp_safetensors_checksummed(const hp_safetensors *f) { return f->checksummed; }

static hp_status crc_mismatch(const hp_safetensors *f, const hp_safetensors_entry *e, uint32_t got) {
    return CORRUPT("'%s': tensor '%s': checksum mismatch (recorded crc32 %08x, data %08x): its %zu bytes at offset %zu "
                   "changed after they were written", f->path, e->name, (unsigned)e->crc32, (unsigned)got, e->nbytes,
                   e->offset);
}

hp_status hp_safetensors_verify(const hp_safetensors *f, const hp_safetensors_entry *e) {
    size_t i = (size_t)(e - f->entries);
    if (i >= f->n) return hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s': verifying an entry of another file", f->path);
    if (!e->has_crc32 || f->verified[i]) return HP_STATUS_OK;
    uint32_t crc = crc_bytes(0, e->data, e->nbytes);
    if (crc != e->crc32) return crc_mismatch(f, e, crc);
    f->verified[i] = 1;
    return HP_STATUS_OK;
}

hp_status hp_safetensors_read_into(const hp_safetensors *f, hp_named_tensor *tensors, size_t n) {
    for (size_t i = 0; i < n; i++) {
        hp_named_tensor *t = &tensors[i];
        const hp_safetensors_entry *e = hp_safetensors_find(f, t->name);
        if (!e) return hp_error(HP_STATUS_NOT_FOUND, "'%s': missing tensor '%s'", f->path, t->name);
        if (e->dtype != t->dtype)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s': tensor '%s' has dtype %s, expected %s", f->path, t->name,
                            hp_dtype_name(e->dtype), hp_dtype_name(t->dtype));
        if (!hp_shape_equal(&e->shape, &t->shape)) {
            char a[128], b[128];
            return hp_error(HP_STATUS_SHAPE, "'%s': tensor '%s' has shape %s, expected %s", f->path, t->name,
                            hp_shape_str(&e->shape, a, sizeof a), hp_shape_str(&t->shape, b, sizeof b));
        }
        size_t k = (size_t)(e - f->entries);
        if (!e->has_crc32 || f->verified[k]) {
            if (e->nbytes) memcpy(t->data, e->data, e->nbytes);
            continue;
        }
        /* copy and checksum chunk by chunk, while the chunk is in cache */
        uint32_t crc = 0;
        for (size_t off = 0; off < e->nbytes; off += CRC_CHUNK) {
            size_t c = e->nbytes - off < CRC_CHUNK ? e->nbytes - off : CRC_CHUNK;
            memcpy((char *)t->data + off, (const char *)e->data + off, c);
            crc = crc_bytes(crc, (const char *)t->data + off, c);
        }
        if (crc != e->crc32) return crc_mismatch(f, e, crc);
        f->verified[k] = 1;
    }
    return HP_STATUS_OK;
}

hp_status hp_safetensors_load_into(const char *path, hp_named_tensor *tensors, size_t n) {
    hp_safetensors *f;
    HP_CHECK(hp_safetensors_open(path, &f));
    hp_status st = hp_safetensors_read_into(f, tensors, n);
    hp_safetensors_close(f);
    return st;
}
