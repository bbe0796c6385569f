/* Layouts: tensor_map + partial axes, validation, text form, block-distribution slices. */
#include "hp/mesh.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void hp_layout_init(hp_layout *l, int ndim) {
    HP_ASSERT(ndim >= 0 && ndim <= HP_MAX_DIMS);
    memset(l, 0, sizeof *l);
    l->ndim = ndim;
    l->partial_op = HP_REDUCE_SUM;
}

uint32_t hp_layout_sharded_axes(const hp_layout *l) {
    uint32_t mask = 0;
    for (int d = 0; d < l->ndim; d++)
        for (int k = 0; k < l->nmap[d]; k++) mask |= 1u << l->map[d][k];
    return mask;
}

/* Where axis a is used: -1 nowhere, d for tensor_map[d], -2 partial. */
static int axis_use(const hp_layout *l, int a, int skip_dim) {
    for (int d = 0; d < l->ndim; d++) {
        if (d == skip_dim) continue;
        for (int k = 0; k < l->nmap[d]; k++)
            if (l->map[d][k] == a) return d;
    }
    if (l->partial & (1u << a)) return -2;
    return -1;
}

hp_status hp_layout_set(hp_layout *l, const hp_mesh *m, int dim, int n, const char *const *names) {
    if (dim < 0 || dim >= l->ndim)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "tensor_map dim %d out of range for a %d-d tensor", dim, l->ndim);
    if (n < 0 || n > hp_mesh_naxes(m))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "tensor_map[%d] lists %d axes of a %d-axis mesh", dim, n, hp_mesh_naxes(m));
    int axes[HP_MESH_MAX_AXES];
    for (int k = 0; k < n; k++) {
        HP_CHECK(hp_mesh_axis_index(m, names[k], &axes[k]));
        for (int j = 0; j < k; j++)
            if (axes[j] == axes[k])
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "alias '%s' appears twice in the tensor_map", names[k]);
        int use = axis_use(l, axes[k], dim);
        if (use >= 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "alias '%s' appears twice in the tensor_map (dims %d and %d)",
                            names[k], use, dim);
        if (use == -2)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "alias '%s' is partial and cannot also shard dim %d", names[k], dim);
    }
    l->nmap[dim] = n;
    memcpy(l->map[dim], axes, (size_t)n * sizeof *axes);
    return HP_STATUS_OK;
}

hp_status hp_layout_set_partial(hp_layout *l, const hp_mesh *m, hp_reduce_op op, int n,
                                const char *const *names) {
    if ((int)op < 0 || op >= HP_REDUCE_COUNT) return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid partial op %d", (int)op);
    uint32_t mask = 0;
    for (int k = 0; k < n; k++) {
        int a;
        HP_CHECK(hp_mesh_axis_index(m, names[k], &a));
        if (mask & (1u << a)) return hp_error(HP_STATUS_INVALID_ARGUMENT, "alias '%s' is listed twice as partial", names[k]);
        int use = axis_use(l, a, -1);
        if (use >= 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "partial on alias '%s', which shards dim %d", names[k], use);
        mask |= 1u << a;
    }
    l->partial = mask;
    l->partial_op = op;
    return HP_STATUS_OK;
}

hp_status hp_layout_validate(const hp_layout *l, const hp_mesh *m, const hp_shape *shape) {
    int na = hp_mesh_naxes(m);
    if (l->ndim < 0 || l->ndim > HP_MAX_DIMS) return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout has %d dims", l->ndim);
    if (shape && shape->ndim != l->ndim)
        return hp_error(HP_STATUS_SHAPE, "layout has %d dims but the tensor has %d", l->ndim, shape->ndim);
    uint32_t used = 0;
    for (int d = 0; d < l->ndim; d++) {
        if (l->nmap[d] < 0 || l->nmap[d] > na)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "tensor_map[%d] lists %d axes of a %d-axis mesh", d, l->nmap[d], na);
        for (int k = 0; k < l->nmap[d]; k++) {
            int a = l->map[d][k];
            if (a < 0 || a >= na) return hp_error(HP_STATUS_INVALID_ARGUMENT, "tensor_map[%d] names mesh axis %d of a %d-axis mesh", d, a, na);
            if (used & (1u << a))
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "alias '%s' appears twice in the tensor_map", hp_mesh_axis_name(m, a));
            used |= 1u << a;
        }
    }
    if (l->partial >> na) return hp_error(HP_STATUS_INVALID_ARGUMENT, "partial mask 0x%x names axes beyond the %d-axis mesh", l->partial, na);
    if ((int)l->partial_op < 0 || l->partial_op >= HP_REDUCE_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid partial op %d", (int)l->partial_op);
    for (int a = 0; a < na; a++)
        if ((l->partial & used) & (1u << a))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "partial on alias '%s', which shards dim %d",
                            hp_mesh_axis_name(m, a), axis_use(l, a, -1));
    if (l->ragged) { /* one ragged axis, the last of tensor_map[0] */
        int last = l->ndim > 0 && l->nmap[0] > 0 ? l->map[0][l->nmap[0] - 1] : -1;
        if (last < 0 || l->ragged != (1u << last))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "ragged mask 0x%x must name exactly the last axis of tensor_map[0]",
                            l->ragged);
        if (l->ragged_by < 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "ragged layout without its counts tensor (ragged_by %d)",
                            (int)l->ragged_by);
    }
    return HP_STATUS_OK;
}

bool hp_layout_equal(const hp_layout *a, const hp_layout *b) {
    if (a->ndim != b->ndim || a->partial != b->partial || a->ragged != b->ragged) return false;
    if (a->ragged && a->ragged_by != b->ragged_by) return false;
    if (a->partial && a->partial_op != b->partial_op) return false;
    for (int d = 0; d < a->ndim; d++) {
        if (a->nmap[d] != b->nmap[d]) return false;
        for (int k = 0; k < a->nmap[d]; k++)
            if (a->map[d][k] != b->map[d][k]) return false;
    }
    return true;
}

/* ---------------------------------------------------------------- text form */

typedef struct lexer {
    const char *s, *p;
} lexer;

static void skip_ws(lexer *x) {
    while (isspace((unsigned char)*x->p)) x->p++;
}

static bool accept(lexer *x, char c) {
    skip_ws(x);
    if (*x->p != c) return false;
    x->p++;
    return true;
}

static hp_status expect(lexer *x, char c) {
    if (accept(x, c)) return HP_STATUS_OK;
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout '%s': expected '%c' at offset %d, found '%.8s'", x->s, c,
                    (int)(x->p - x->s), *x->p ? x->p : "end of text");
}

static hp_status ident(lexer *x, char *out) {
    skip_ws(x);
    int n = 0;
    while (isalnum((unsigned char)x->p[n]) || x->p[n] == '_') n++;
    if (n == 0 || n >= HP_MESH_MAX_NAME)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout '%s': expected an alias at offset %d, found '%.8s'", x->s,
                        (int)(x->p - x->s), *x->p ? x->p : "end of text");
    memcpy(out, x->p, (size_t)n);
    out[n] = 0;
    x->p += n;
    return HP_STATUS_OK;
}

static hp_status parse_names(lexer *x, char names[][HP_MESH_MAX_NAME], int *n, int max, char close) {
    *n = 0;
    if (accept(x, close)) return HP_STATUS_OK;
    do {
        if (*n >= max) return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout '%s': too many aliases in one list", x->s);
        HP_CHECK(ident(x, names[(*n)++]));
    } while (accept(x, ','));
    return expect(x, close);
}

hp_status hp_layout_parse(const char *text, const hp_mesh *m, hp_layout *out) {
    lexer x = {text ? text : "", text ? text : ""};
    char names[HP_MESH_MAX_AXES][HP_MESH_MAX_NAME];
    const char *ptrs[HP_MESH_MAX_AXES];
    for (int i = 0; i < HP_MESH_MAX_AXES; i++) ptrs[i] = names[i];
    int nd = 0;
    hp_layout l;
    hp_layout_init(&l, HP_MAX_DIMS);
    HP_CHECK(expect(&x, '['));
    if (!accept(&x, ']')) {
        do {
            if (nd >= HP_MAX_DIMS) return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout '%s' has more than %d dims", x.s, HP_MAX_DIMS);
            int n = 0;
            if (accept(&x, '[')) {
                HP_CHECK(parse_names(&x, names, &n, HP_MESH_MAX_AXES, ']'));
            } else {
                HP_CHECK(ident(&x, names[0]));
                n = strcmp(names[0], "none") == 0 ? 0 : 1;
            }
            hp_status st = hp_layout_set(&l, m, nd, n, ptrs);
            if (st != HP_STATUS_OK) return hp_error_prefix(st, "layout '%s': ", x.s);
            nd++;
        } while (accept(&x, ','));
        HP_CHECK(expect(&x, ']'));
    }
    l.ndim = nd;
    skip_ws(&x);
    if (*x.p) {
        char word[HP_MESH_MAX_NAME], opname[HP_MESH_MAX_NAME];
        HP_CHECK(ident(&x, word));
        if (strcmp(word, "partial") != 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout '%s': expected 'partial', found '%s'", x.s, word);
        HP_CHECK(expect(&x, '='));
        HP_CHECK(ident(&x, opname));
        hp_reduce_op op;
        HP_CHECK(hp_reduce_op_parse(opname, &op));
        HP_CHECK(expect(&x, '('));
        int n;
        HP_CHECK(parse_names(&x, names, &n, HP_MESH_MAX_AXES, ')'));
        HP_CHECK(hp_layout_set_partial(&l, m, op, n, ptrs));
        skip_ws(&x);
        if (*x.p) return hp_error(HP_STATUS_INVALID_ARGUMENT, "layout '%s': unexpected '%s' at the end", x.s, x.p);
    }
    HP_CHECK(hp_layout_validate(&l, m, NULL));
    *out = l;
    return HP_STATUS_OK;
}

char *hp_layout_format(const hp_layout *l, const hp_mesh *m, char *buf, size_t n) {
    size_t k = 0;
#define PUT(...) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, __VA_ARGS__)
    PUT("[");
    for (int d = 0; d < l->ndim; d++) {
        if (d) PUT(", ");
        if (l->nmap[d] == 0) PUT("none");
        else if (l->nmap[d] == 1) PUT("%s", hp_mesh_axis_name(m, l->map[d][0]));
        else {
            PUT("[");
            for (int j = 0; j < l->nmap[d]; j++) PUT("%s%s", j ? ", " : "", hp_mesh_axis_name(m, l->map[d][j]));
            PUT("]");
        }
    }
    PUT("]");
    if (l->partial) {
        PUT(" partial=%s(", hp_reduce_op_name(l->partial_op));
        bool first = true;
        for (int a = 0; a < hp_mesh_naxes(m); a++) {
            if (!(l->partial & (1u << a))) continue;
            PUT("%s%s", first ? "" : ", ", hp_mesh_axis_name(m, a));
            first = false;
        }
        PUT(")");
    }
    for (int a = 0; a < hp_mesh_naxes(m); a++)
        if (l->ragged & (1u << a)) PUT(" ragged=%s(by %%%d)", hp_mesh_axis_name(m, a), (int)l->ragged_by);
#undef PUT
    return buf;
}

/* ---------------------------------------------------------------- slices */

int64_t hp_layout_shards(const hp_layout *l, const hp_mesh *m, int d) {
    int64_t k = 1;
    for (int j = 0; j < l->nmap[d]; j++) k *= hp_mesh_dim(m, l->map[d][j]);
    return k;
}

void hp_block_range(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len) {
    int64_t b = k > 0 ? (n + k - 1) / k : n;
    int64_t s = i * b < n ? i * b : n;
    int64_t e = (i + 1) * b < n ? (i + 1) * b : n;
    *start = s;
    *len = e - s;
}

hp_status hp_layout_slice_of(const hp_layout *l, const hp_mesh *m, const hp_shape *shape,
                             int index, int64_t *start, int64_t *len) {
    if (index < 0 || index >= hp_mesh_size(m))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh index %d outside a mesh of %d devices", index, hp_mesh_size(m));
    if (shape->ndim != l->ndim)
        return hp_error(HP_STATUS_SHAPE, "layout has %d dims but the tensor has %d", l->ndim, shape->ndim);
    int coords[HP_MESH_MAX_AXES];
    hp_mesh_coords(m, index, coords);
    for (int d = 0; d < l->ndim; d++) {
        int64_t k = 1, i = 0;
        for (int j = 0; j < l->nmap[d]; j++) {
            int a = l->map[d][j];
            if (d == 0 && (l->ragged & (1u << a))) continue; /* the capacity block */
            k *= hp_mesh_dim(m, a);
            i = i * hp_mesh_dim(m, a) + coords[a];
        }
        hp_block_range(shape->dim[d], k, i, &start[d], &len[d]);
    }
    return HP_STATUS_OK;
}

hp_status hp_layout_local_shape(const hp_layout *l, const hp_mesh *m, const hp_shape *shape,
                                int index, hp_shape *out) {
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
    HP_CHECK(hp_layout_slice_of(l, m, shape, index, start, len));
    *out = hp_shape_make(l->ndim, len);
    return HP_STATUS_OK;
}

bool hp_slice_intersect(int ndim, const int64_t *as, const int64_t *al, const int64_t *bs,
                        const int64_t *bl, int64_t *os, int64_t *ol) {
    bool nonempty = true;
    for (int d = 0; d < ndim; d++) {
        int64_t s = as[d] > bs[d] ? as[d] : bs[d];
        int64_t e1 = as[d] + al[d], e2 = bs[d] + bl[d];
        int64_t e = e1 < e2 ? e1 : e2;
        os[d] = s;
        ol[d] = e > s ? e - s : 0;
        if (ol[d] == 0) nonempty = false;
    }
    if (!nonempty)
        for (int d = 0; d < ndim; d++) ol[d] = 0;
    return nonempty;
}
