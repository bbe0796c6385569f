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

#include "io/safetensors_internal.h"

#define MAX_HEADER (100u * 1000u * 1000u) /* bytes; the reference implementation's limit */
#define META_KEY "__metadata__"

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

hp_status hp_safetensors_write(const char *path, const hp_named_tensor *tensors, size_t n, const char *const *meta,
                               size_t n_meta) {
    char *header = NULL;
    size_t hlen = 0;
    HP_CHECK(build_header(path, tensors, n, meta, n_meta, &header, &hlen));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(header);
        return hp_error(HP_STATUS_IO, "cannot create '%s': %s", path, strerror(e));
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    bool ok = write_all(fd, len8, 8) && write_all(fd, header, hlen);
    for (size_t i = 0; ok && i < n; i++) {
        size_t nbytes = (size_t)hp_shape_numel(&tensors[i].shape) * hp_dtype_size(tensors[i].dtype);
        if (nbytes) ok = write_all(fd, tensors[i].data, nbytes);
    }
    ok = ok && fsync(fd) == 0;
    int e = errno;
    ok = (close(fd) == 0) && ok;
    if (!ok && !e) e = errno;
    free(header);
    if (!ok) {
        unlink(path);
        return hp_error(HP_STATUS_IO, "cannot write '%s': %s", path, strerror(e));
    }
    return HP_STATUS_OK;
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
    HP_CHECK(check_unique_names(f));
    qsort(f->entries, f->n, sizeof *f->entries, cmp_offset);
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
        if (e->nbytes) memcpy(t->data, e->data, e->nbytes);
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
