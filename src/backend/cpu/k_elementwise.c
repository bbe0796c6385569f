/* CPU kernels for elementwise operators and reductions (OpenMP over rows). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <string.h>

/* Strides (elements) of `s` broadcast into an `nd`-dim output: 0 where the dim is 1 or absent. */
static void bcast_strides(const hp_shape *s, int nd, int64_t *st) {
    int64_t acc = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int k = s->ndim - nd + i;
        int64_t d = k >= 0 ? s->dim[k] : 1;
        st[i] = d == 1 ? 0 : acc;
        acc *= d;
    }
}

typedef enum { BIN_ADD, BIN_SUB, BIN_MUL } bin_op;

static inline float bin(bin_op op, float x, float y) {
    return op == BIN_ADD ? x + y : op == BIN_SUB ? x - y : x * y;
}

typedef struct binary {
    bin_op op;
    const float *x, *y;
    float *z;
    int64_t n;
    /* broadcast case: */
    const hp_shape *so;
    int nd;
    const int64_t *stx, *sty;
} binary;

/* Work-shared body: same-shape operands elementwise, else by output rows with broadcast strides. */
static void binary_body(const binary *b) {
    const bin_op op = b->op;
    const float *x = b->x, *y = b->y;
    float *z = b->z;
    if (!b->so) {
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < b->n; i++) z[i] = bin(op, x[i], y[i]);
        return;
    }
    const int nd = b->nd;
    const int64_t inner = b->so->dim[nd - 1], rows = b->n / inner, ix = b->stx[nd - 1], iy = b->sty[nd - 1];
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; r++) {
        int64_t ox = 0, oy = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t c = rem % b->so->dim[d];
            rem /= b->so->dim[d];
            ox += c * b->stx[d];
            oy += c * b->sty[d];
        }
        float *zr = z + r * inner;
        const float *xr = x + ox, *yr = y + oy;
        if (ix && iy)
            for (int64_t i = 0; i < inner; i++) zr[i] = bin(op, xr[i], yr[i]);
        else if (ix)
            for (int64_t i = 0; i < inner; i++) zr[i] = bin(op, xr[i], yr[0]);
        else if (iy)
            for (int64_t i = 0; i < inner; i++) zr[i] = bin(op, xr[0], yr[i]);
        else
            for (int64_t i = 0; i < inner; i++) zr[i] = bin(op, xr[0], yr[0]);
    }
}

/* A team kernel (team.h). */
static hp_status binary_kernel(const hp_kernel_args *a, bin_op op) {
    const hp_shape *so = hp__out_shape(a, 0), *sx = hp__in_shape(a, 0), *sy = hp__in_shape(a, 1);
    int64_t n = hp_shape_numel(so);
    binary b = {op, a->in[0], a->in[1], a->out[0], n, NULL, 0, NULL, NULL};
    if (n == 0) return HP_STATUS_OK;
    if (n == 1) { /* scalars (the optimizer's sums; every 0-d output): no work to share */
        if (hp__team_leader()) b.z[0] = bin(op, b.x[0], b.y[0]);
        return HP_STATUS_OK;
    }
    int64_t stx[HP_MAX_DIMS], sty[HP_MAX_DIMS];
    if (hp_shape_numel(sx) != n || hp_shape_numel(sy) != n) { /* broadcast: by rows with strides */
        b.so = so;
        b.nd = so->ndim;
        bcast_strides(sx, b.nd, stx);
        bcast_strides(sy, b.nd, sty);
        b.stx = stx;
        b.sty = sty;
    }
    HP_TEAM_RUN(n > 32768, binary_body(&b));
    return HP_STATUS_OK;
}

hp_status hp__cpu_add(const hp_kernel_args *a) { return binary_kernel(a, BIN_ADD); }
hp_status hp__cpu_sub(const hp_kernel_args *a) { return binary_kernel(a, BIN_SUB); }
hp_status hp__cpu_mul(const hp_kernel_args *a) { return binary_kernel(a, BIN_MUL); }

hp_status hp__cpu_scale(const hp_kernel_args *a) {
    const float *x = a->in[0];
    float *y = a->out[0], s = a->node->attr.f[0];
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
    return HP_STATUS_OK;
}

hp_status hp__cpu_fill(const hp_kernel_args *a) {
    float *y = a->out[0], v = a->node->attr.f[0];
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
    if (v == 0.0f) {
        memset(y, 0, (size_t)n * sizeof *y);
        return HP_STATUS_OK;
    }
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) y[i] = v;
    return HP_STATUS_OK;
}

hp_status hp__cpu_copy(const hp_kernel_args *a) {
    const hp_tensor *t = hp_graph_tensor(a->g, a->node->out[0]);
    memcpy(a->out[0], a->in[0], (size_t)hp_shape_numel(&t->shape) * hp_dtype_size(t->dtype));
    return HP_STATUS_OK;
}

/* Columns per task of the bias-gradient reduction (16 AVX registers of accumulators; 128 was
 * the fastest of 16-256 on this machine, bench_kernels bias_grad_A). */
#define SUM_COLS 128

/* Work-shared body of the bias-gradient case: y (inner) = column sums of x (rows, inner). Column
 * blocks of SUM_COLS, one per task, each summed row by row into a local accumulator the compiler
 * keeps in registers: every column is summed in row order whatever the thread count. */
static void sum_rows_body(const float *x, float *y, int64_t rows, int64_t inner) {
    int64_t nblk = (inner + SUM_COLS - 1) / SUM_COLS;
#pragma omp for schedule(static) nowait
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * SUM_COLS, w = inner - c0 < SUM_COLS ? inner - c0 : SUM_COLS;
        float acc[SUM_COLS] = {0};
        const float *xp = x + c0;
        if (w == SUM_COLS)
            for (int64_t r = 0; r < rows; r++, xp += inner)
#pragma omp simd
                for (int64_t c = 0; c < SUM_COLS; c++) acc[c] += xp[c];
        else
            for (int64_t r = 0; r < rows; r++, xp += inner)
                for (int64_t c = 0; c < w; c++) acc[c] += xp[c];
        memcpy(y + c0, acc, sizeof(float) * (size_t)w);
    }
}

/* y (shape of `like`) = sum of x over the broadcast axes. A team kernel (team.h): the
 * bias-gradient case is shared out, the general case runs on one thread. */
hp_status hp__cpu_sum_to(const hp_kernel_args *a) {
    const float *x = a->in[0];
    float *y = a->out[0];
    const hp_shape *sx = hp__in_shape(a, 0), *sy = hp__out_shape(a, 0);
    int nd = sx->ndim;
    int64_t nx = hp_shape_numel(sx), ny = hp_shape_numel(sy);
    int64_t sty[HP_MAX_DIMS];
    if (nd > 0 && ny > 0 && nx > 0) {
        bcast_strides(sy, nd, sty);
        int64_t inner = sx->dim[nd - 1], rows = nx / inner;
        if (sty[nd - 1] != 0 && ny == inner) {
            HP_TEAM_RUN(nx > 65536 && inner > SUM_COLS, sum_rows_body(x, y, rows, inner));
            return HP_STATUS_OK;
        }
    }
    if (!hp__team_leader()) return HP_STATUS_OK;
    memset(y, 0, (size_t)ny * sizeof *y);
    if (nd == 0 || ny == 0 || nx == 0) {
        if (nd == 0 && ny) y[0] = x[0];
        return HP_STATUS_OK;
    }
    int64_t inner = sx->dim[nd - 1], rows = nx / inner;
    for (int64_t r = 0; r < rows; r++) {
        int64_t oy = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t c = rem % sx->dim[d];
            rem /= sx->dim[d];
            oy += c * sty[d];
        }
        const float *xr = x + r * inner;
        if (sty[nd - 1])
            for (int64_t i = 0; i < inner; i++) y[oy + i] += xr[i];
        else {
            double s = 0;
            for (int64_t i = 0; i < inner; i++) s += xr[i];
            y[oy] += (float)s;
        }
    }
    return HP_STATUS_OK;
}

static hp_status reduce_kernel(const hp_kernel_args *a, bool mean) {
    const float *x = a->in[0];
    float *y = a->out[0];
    const hp_shape *sx = hp__in_shape(a, 0);
    int64_t n = hp_shape_numel(sx);
    if (a->node->attr.i[0] == -1) {
        double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; i++) s += x[i];
        y[0] = (float)(mean ? s / (double)n : s);
        return HP_STATUS_OK;
    }
    int ax = (int)a->node->attr.i[0];
    if (ax < 0) ax += sx->ndim;
    int64_t outer = hp_shape_prod(sx, 0, ax), len = sx->dim[ax], inner = hp_shape_prod(sx, ax + 1, sx->ndim);
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t k = 0; k < len; k++) s += x[(o * len + k) * inner + i];
            y[o * inner + i] = (float)(mean ? s / (double)len : s);
        }
    }
    return HP_STATUS_OK;
}

hp_status hp__cpu_sum(const hp_kernel_args *a) { return reduce_kernel(a, false); }
hp_status hp__cpu_mean(const hp_kernel_args *a) { return reduce_kernel(a, true); }
