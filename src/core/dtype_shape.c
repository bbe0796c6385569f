/* dtypes (f32, bf16, i32) and dense row-major shapes. */
#include "hp/core.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

size_t hp_dtype_size(hp_dtype dt) {
    switch (dt) {
    case HP_DTYPE_F32: return 4;
    case HP_DTYPE_BF16: return 2;
    case HP_DTYPE_I32: return 4;
    default: return 0;
    }
}

const char *hp_dtype_name(hp_dtype dt) {
    switch (dt) {
    case HP_DTYPE_F32: return "f32";
    case HP_DTYPE_BF16: return "bf16";
    case HP_DTYPE_I32: return "i32";
    default: return "?";
    }
}

hp_status hp_dtype_parse(const char *s, hp_dtype *out) {
    for (int d = 0; d < HP_DTYPE_COUNT; d++) {
        if (s && strcasecmp(s, hp_dtype_name((hp_dtype)d)) == 0) {
            *out = (hp_dtype)d;
            return HP_STATUS_OK;
        }
    }
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "unknown dtype '%s' (expected f32, bf16 or i32)",
                    s ? s : "(null)");
}

uint16_t hp_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float hp_bf16_to_f32(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

hp_shape hp_shape_make(int ndim, const int64_t *dims) {
    HP_ASSERT(ndim >= 0 && ndim <= HP_MAX_DIMS);
    hp_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++) s.dim[i] = dims[i];
    return s;
}

int64_t hp_shape_numel(const hp_shape *s) { return hp_shape_prod(s, 0, s->ndim); }

int64_t hp_shape_prod(const hp_shape *s, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= s->dim[i];
    return n;
}

bool hp_shape_equal(const hp_shape *a, const hp_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

void hp_shape_strides(const hp_shape *s, int64_t *strides) {
    int64_t st = 1;
    for (int i = s->ndim - 1; i >= 0; i--) {
        strides[i] = st;
        st *= s->dim[i];
    }
}

char *hp_shape_str(const hp_shape *s, char *buf, size_t n) {
    size_t off = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (int i = 0; i < s->ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ", %lld" : "%lld", (long long)s->dim[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
    return buf;
}
