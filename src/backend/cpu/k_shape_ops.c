/* CPU kernels for data-movement operators. */
#include "backend/cpu/cpu.h"

#include <string.h>

hp_status hp__cpu_reshape(const hp_kernel_args *a) {
    const hp_tensor *t = hp_graph_tensor(a->g, a->node->out[0]);
    if (a->out[0] != a->in[0])
        memcpy(a->out[0], a->in[0], (size_t)hp_shape_numel(&t->shape) * hp_dtype_size(t->dtype));
    return HP_STATUS_OK;
}

static int norm_axis(int64_t axis, int ndim) { return (int)(axis < 0 ? axis + ndim : axis); }

static size_t elem_size(const hp_kernel_args *a, int in) {
    return hp_dtype_size(hp_graph_tensor(a->g, a->node->in[in])->dtype);
}

/*
 * Input viewed as (pre, n0, mid, n1, post) with n0, n1 the swapped axes; output (pre, n1, mid, n0,
 * post). Parallel over output rows (pre, n1, mid, n0); each copies `post` contiguous elements.
 */
hp_status hp__cpu_transpose(const hp_kernel_args *a) {
    const hp_shape *s = hp__in_shape(a, 0);
    int d0 = norm_axis(a->node->attr.i[0], s->ndim), d1 = norm_axis(a->node->attr.i[1], s->ndim);
    const size_t es = elem_size(a, 0);
    if (d0 == d1) {
        memcpy(a->out[0], a->in[0], (size_t)hp_shape_numel(s) * es);
        return HP_STATUS_OK;
    }
    if (d0 > d1) {
        int t = d0;
        d0 = d1;
        d1 = t;
    }
    const int64_t pre = hp_shape_prod(s, 0, d0), n0 = s->dim[d0], mid = hp_shape_prod(s, d0 + 1, d1);
    const int64_t n1 = s->dim[d1], post = hp_shape_prod(s, d1 + 1, s->ndim);
    const int64_t rows = pre * n1 * mid * n0;
    const char *x = a->in[0];
    char *y = a->out[0];
    const size_t rb = (size_t)post * es;
#pragma omp parallel for schedule(static) if (rows * post > 32768)
    for (int64_t o = 0; o < rows; o++) {
        int64_t i = o % n0, rem = o / n0;
        int64_t m = rem % mid;
        rem /= mid;
        int64_t j = rem % n1, p = rem / n1;
        int64_t src = (((p * n0 + i) * mid + m) * n1 + j) * post;
        if (post == 1 && es == 4)
            ((uint32_t *)y)[o] = ((const uint32_t *)x)[src];
        else
            memcpy(y + (size_t)o * rb, x + (size_t)src * es, rb);
    }
    return HP_STATUS_OK;
}

/* Copies, for each of `outer` blocks, `len` rows of `inner` elements between x (block length lx,
 * offset ox) and y (block length ly, offset oy). */
static void copy_blocks(char *y, int64_t ly, int64_t oy, const char *x, int64_t lx, int64_t ox, int64_t outer,
                        int64_t len, int64_t inner, size_t es) {
    const size_t nb = (size_t)(len * inner) * es;
#pragma omp parallel for schedule(static) if (outer * len * inner > 32768 && outer > 1)
    for (int64_t o = 0; o < outer; o++)
        memcpy(y + (size_t)((o * ly + oy) * inner) * es, x + (size_t)((o * lx + ox) * inner) * es, nb);
}

hp_status hp__cpu_slice(const hp_kernel_args *a) {
    const hp_shape *s = hp__in_shape(a, 0);
    int ax = norm_axis(a->node->attr.i[0], s->ndim);
    int64_t start = a->node->attr.i[1], len = a->node->attr.i[2];
    copy_blocks(a->out[0], len, 0, a->in[0], s->dim[ax], start, hp_shape_prod(s, 0, ax), len,
                hp_shape_prod(s, ax + 1, s->ndim), elem_size(a, 0));
    return HP_STATUS_OK;
}

hp_status hp__cpu_pad(const hp_kernel_args *a) {
    const hp_shape *s = hp__in_shape(a, 0);
    int ax = norm_axis(a->node->attr.i[0], s->ndim);
    int64_t start = a->node->attr.i[1], full = a->node->attr.i[2];
    const size_t es = elem_size(a, 0);
    memset(a->out[0], 0, (size_t)hp_shape_numel(hp__out_shape(a, 0)) * es);
    copy_blocks(a->out[0], full, start, a->in[0], s->dim[ax], 0, hp_shape_prod(s, 0, ax), s->dim[ax],
                hp_shape_prod(s, ax + 1, s->ndim), es);
    return HP_STATUS_OK;
}

hp_status hp__cpu_concat(const hp_kernel_args *a) {
    const hp_shape *so = hp__out_shape(a, 0);
    int ax = norm_axis(a->node->attr.i[0], so->ndim);
    const int64_t outer = hp_shape_prod(so, 0, ax), inner = hp_shape_prod(so, ax + 1, so->ndim);
    const size_t es = elem_size(a, 0);
    int64_t off = 0;
    for (int i = 0; i < a->node->n_in; i++) {
        int64_t len = hp__in_shape(a, i)->dim[ax];
        copy_blocks(a->out[0], so->dim[ax], off, a->in[i], len, 0, outer, len, inner, es);
        off += len;
    }
    return HP_STATUS_OK;
}
