/*
 * CPU kernels for SOFTMAX, SOFTMAX_BACKWARD, CROSS_ENTROPY and CROSS_ENTROPY_BACKWARD.
 * Rows run in parallel; within a row, loops are branch-free so they vectorize, and exponentials use
 * hp__exp_fast (relative error < 2e-7). Row statistics (max, sum of exponentials) come from one
 * pass over memory: blocks of ROW_BLK logits (in L1) are scanned for their max, the running sum is
 * rescaled when the max grows (online softmax, Milakov & Gimelshein 2018), then the block's
 * exponentials are summed.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/k_math.h"
#include "backend/cpu/team.h"

#include <math.h>
#include <omp.h>

#define ROW_BLK 1024

/* Max and sum of exp(x - max) of one row (block sums in float, their total in double). */
static void row_stats(const float *x, int64_t n, float *max_out, double *sum_out) {
    float m = -INFINITY;
    double s = 0.0;
    for (int64_t b = 0; b < n; b += ROW_BLK) {
        int64_t e = b + ROW_BLK < n ? b + ROW_BLK : n;
        float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
        for (int64_t i = b; i < e; i++) bm = x[i] > bm ? x[i] : bm;
        if (bm > m) {
            s *= exp((double)m - (double)bm);
            m = bm;
        }
        float bs = 0.0f;
#pragma omp simd reduction(+ : bs)
        for (int64_t i = b; i < e; i++) bs += hp__exp_fast(x[i] - m);
        s += bs;
    }
    *max_out = m;
    *sum_out = s;
}

static float row_max(const float *x, int64_t n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* y = exp(x - m); returns the sum (block sums in float, their total in double). */
static double exp_write_sum(const float *x, float *y, int64_t n, float m) {
    double s = 0.0;
    for (int64_t b = 0; b < n; b += ROW_BLK) {
        int64_t e = b + ROW_BLK < n ? b + ROW_BLK : n;
        float bs = 0.0f;
#pragma omp simd reduction(+ : bs)
        for (int64_t i = b; i < e; i++) {
            y[i] = hp__exp_fast(x[i] - m);
            bs += y[i];
        }
        s += bs;
    }
    return s;
}

hp_status hp__cpu_softmax(const hp_kernel_args *a) {
    const float *x = a->in[0];
    float *y = a->out[0];
    const hp_shape *xs = hp__in_shape(a, 0);
    const int64_t n = xs->dim[xs->ndim - 1], rows = hp_shape_numel(xs) / n;
#pragma omp parallel for schedule(static) if (rows * n > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const float m = row_max(xr, n);
        const double s = exp_write_sum(xr, yr, n, m);
        const float inv = (float)(1.0 / s);
        for (int64_t i = 0; i < n; i++) yr[i] *= inv;
    }
    return HP_STATUS_OK;
}

hp_status hp__cpu_softmax_backward(const hp_kernel_args *a) {
    const float *dy = a->in[0], *y = a->in[1];
    float *dx = a->out[0];
    const hp_shape *ys = hp__in_shape(a, 1);
    const int64_t n = ys->dim[ys->ndim - 1], rows = hp_shape_numel(ys) / n;
#pragma omp parallel for schedule(static) if (rows * n > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *dyr = dy + r * n, *yr = y + r * n;
        float *dxr = dx + r * n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; i++) s += dyr[i] * yr[i];
        for (int64_t i = 0; i < n; i++) dxr[i] = yr[i] * (dyr[i] - s);
    }
    return HP_STATUS_OK;
}

static hp_status check_targets(const int32_t *t, int64_t rows, int64_t v, const char *op) {
    for (int64_t r = 0; r < rows; r++)
        if (t[r] < 0 || t[r] >= v)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: target %d at position %lld is outside [0, %lld)", op,
                            (int)t[r], (long long)r, (long long)v);
    return HP_STATUS_OK;
}

typedef struct ce_fwd {
    const float *x;
    const int32_t *t;
    int64_t rows, v;
    double *loss;
    float *out;
    double div;
} ce_fwd;

/* Per-row losses work-shared, then (after every row is written) summed in row order by one thread:
 * the same result for any thread count. */
static void cross_entropy_body(const ce_fwd *c) {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < c->rows; r++) {
        const float *xr = c->x + r * c->v;
        float m;
        double s;
        row_stats(xr, c->v, &m, &s);
        c->loss[r] = log(s) + (double)m - (double)xr[c->t[r]];
    }
    hp__team_sync();
    if (omp_get_thread_num() == 0) {
        double sum = 0.0;
        for (int64_t r = 0; r < c->rows; r++) sum += c->loss[r];
        *c->out = c->div > 0 ? (float)(sum / c->div) : 0.0f;
    }
}

/* A team kernel (team.h). */
hp_status hp__cpu_cross_entropy(const hp_kernel_args *a) {
    const float *x = a->in[0];
    const int32_t *t = a->in[1];
    const hp_shape *xs = hp__in_shape(a, 0);
    const int64_t v = xs->dim[xs->ndim - 1], rows = hp_shape_numel(xs) / v;
    HP_CHECK(check_targets(t, rows, v, "cross_entropy"));
    if (a->workspace_bytes < (size_t)rows * sizeof(double))
        return hp_error(HP_STATUS_INTERNAL, "cross_entropy: workspace of %zu bytes, need %zu", a->workspace_bytes,
                        (size_t)rows * sizeof(double));
    /* attr i[0]: the global row count when this rank holds some rows of the batch */
    const double div = a->node->attr.i[0] > 0 ? (double)a->node->attr.i[0] : (double)rows;
    ce_fwd c = {x, t, rows, v, a->workspace, a->out[0], div};
    HP_TEAM_RUN(rows * v > 16384, cross_entropy_body(&c));
    return HP_STATUS_OK;
}

typedef struct ce_bwd {
    const float *x;
    const int32_t *t;
    float *dx;
    int64_t rows, v;
    float scale;
} ce_bwd;

static void cross_entropy_backward_body(const ce_bwd *c) {
    const int64_t v = c->v;
    const float scale = c->scale;
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < c->rows; r++) {
        const float *xr = c->x + r * v;
        float *dr = c->dx + r * v;
        /* max, then exponentials written and summed, then scaled in place while the row is in
         * cache: one exponential per logit */
        const float m = row_max(xr, v);
        const double s = exp_write_sum(xr, dr, v, m);
        const float k = (float)(scale / s);
#pragma omp simd
        for (int64_t i = 0; i < v; i++) dr[i] *= k;
        dr[c->t[r]] -= scale;
    }
}

/* A team kernel (team.h). */
hp_status hp__cpu_cross_entropy_backward(const hp_kernel_args *a) {
    const float dloss = *(const float *)a->in[0];
    const int32_t *t = a->in[2];
    const hp_shape *xs = hp__in_shape(a, 1);
    const int64_t v = xs->dim[xs->ndim - 1], rows = hp_shape_numel(xs) / v;
    HP_CHECK(check_targets(t, rows, v, "cross_entropy_backward"));
    const double div = a->node->attr.i[0] > 0 ? (double)a->node->attr.i[0] : (double)rows;
    ce_bwd c = {a->in[1], t, a->out[0], rows, v, div > 0 ? (float)(dloss / div) : 0.0f};
    HP_TEAM_RUN(rows * v > 16384, cross_entropy_backward_body(&c));
    return HP_STATUS_OK;
}
