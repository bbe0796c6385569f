/* CPU kernels for RMSNORM and RMSNORM_BACKWARD (rows in parallel; deterministic; team kernels).
 * The squares are summed in double: the rstd matches a float64 reference to float rounding. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <math.h>
#include <omp.h>
#include <string.h>

static void rmsnorm_body(const float *x, const float *w, float *y, float *rstd, int64_t rows, int64_t c, float eps) {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * c;
        float *yr = y + r * c;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < c; i++) s += (double)xr[i] * xr[i];
        float rs = (float)(1.0 / sqrt(s / (double)c + (double)eps));
        for (int64_t i = 0; i < c; i++) yr[i] = xr[i] * rs * w[i];
        rstd[r] = rs;
    }
}

hp_status hp__cpu_rmsnorm(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 0);
    const int64_t c = xs->dim[xs->ndim - 1], rows = c ? hp_shape_numel(xs) / c : 0;
    HP_TEAM_RUN(rows * c > 16384, rmsnorm_body(a->in[0], a->in[1], a->out[0], a->out[1], rows, c, a->node->attr.f[0]));
    return HP_STATUS_OK;
}

/* Columns per task of the dweight sums (as LayerNorm's backward). */
#define RMS_COLS 64

typedef struct rms_bwd {
    const float *dy, *x, *w, *rstd;
    float *dx, *dw;
    int64_t rows, c;
} rms_bwd;

/* dx per row: rstd (g - xhat mean(g xhat)), g = dy w; dw over column blocks, each task scanning
 * the rows in order (the same sums for any thread count). */
static void rmsnorm_backward_body(const rms_bwd *p) {
    const int64_t rows = p->rows, c = p->c, nblk = (c + RMS_COLS - 1) / RMS_COLS;
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = p->x + r * c, *dyr = p->dy + r * c;
        float *dxr = p->dx + r * c;
        const float rs = p->rstd[r];
        float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
        for (int64_t i = 0; i < c; i++) sgx += dyr[i] * p->w[i] * xr[i] * rs;
        sgx /= (float)c;
        for (int64_t i = 0; i < c; i++) dxr[i] = rs * (dyr[i] * p->w[i] - xr[i] * rs * sgx);
    }
#pragma omp for schedule(static) nowait
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * RMS_COLS, wd = c - c0 < RMS_COLS ? c - c0 : RMS_COLS;
        float dw[RMS_COLS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = p->x + r * c + c0, *dyr = p->dy + r * c + c0;
            const float rs = p->rstd[r];
            for (int64_t i = 0; i < wd; i++) dw[i] += dyr[i] * xr[i] * rs;
        }
        memcpy(p->dw + c0, dw, sizeof(float) * (size_t)wd);
    }
}

hp_status hp__cpu_rmsnorm_backward(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 1);
    const int64_t c = xs->dim[xs->ndim - 1], rows = c ? hp_shape_numel(xs) / c : 0;
    rms_bwd p = {a->in[0], a->in[1], a->in[2], a->in[3], a->out[0], a->out[1], rows, c};
    HP_TEAM_RUN(rows * c > 16384, rmsnorm_backward_body(&p));
    return HP_STATUS_OK;
}
