/* CPU kernels for LAYERNORM and LAYERNORM_BACKWARD (rows in parallel; deterministic). */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <omp.h>
#include <string.h>

hp_status hp__cpu_layernorm(const hp_kernel_args *a) {
    const float *x = a->in[0], *gamma = a->in[1], *beta = a->in[2];
    float *y = a->out[0], *mean = a->out[1], *rstd = a->out[2];
    const hp_shape *xs = hp__in_shape(a, 0);
    const int64_t c = xs->dim[xs->ndim - 1], rows = hp_shape_numel(xs) / c;
    const float eps = a->node->attr.f[0];
#pragma omp parallel for schedule(static) if (rows * c > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * c;
        float *yr = y + r * c;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < c; i++) s += xr[i];
        float m = s / (float)c;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int64_t i = 0; i < c; i++) {
            float d = xr[i] - m;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(v / (float)c + eps);
        for (int64_t i = 0; i < c; i++) yr[i] = (xr[i] - m) * rs * gamma[i] + beta[i];
        mean[r] = m;
        rstd[r] = rs;
    }
    return HP_STATUS_OK;
}

/* Columns per task of the dgamma / dbeta sums: 2 x 8 AVX registers of accumulators. */
#define LN_COLS 64

/*
 * dx per row: with xhat = (x - mean) rstd and g = dy * gamma,
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)).
 * dgamma = sum over rows of dy xhat and dbeta = sum of dy, over column blocks of LN_COLS: each
 * task owns a block of columns and scans the rows in order into local accumulators (no atomics,
 * the same result for any thread count). Neither pass reads the other's output, so both share one
 * parallel region without a barrier between them.
 */
hp_status hp__cpu_layernorm_backward(const hp_kernel_args *a) {
    const float *dy = a->in[0], *x = a->in[1], *gamma = a->in[2], *mean = a->in[3], *rstd = a->in[4];
    float *dx = a->out[0], *dgamma = a->out[1], *dbeta = a->out[2];
    const hp_shape *xs = hp__in_shape(a, 1);
    const int64_t c = xs->dim[xs->ndim - 1], rows = hp_shape_numel(xs) / c;
    const int64_t nblk = (c + LN_COLS - 1) / LN_COLS;
#pragma omp parallel if (rows * c > 16384)
    {
#pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * c, *dyr = dy + r * c;
            float *dxr = dx + r * c;
            const float m = mean[r], rs = rstd[r];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t i = 0; i < c; i++) {
                float gi = dyr[i] * gamma[i];
                sg += gi;
                sgx += gi * (xr[i] - m) * rs;
            }
            sg /= (float)c;
            sgx /= (float)c;
            for (int64_t i = 0; i < c; i++) {
                float xh = (xr[i] - m) * rs;
                dxr[i] = rs * (dyr[i] * gamma[i] - sg - xh * sgx);
            }
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t c0 = b * LN_COLS, w = c - c0 < LN_COLS ? c - c0 : LN_COLS;
            float dg[LN_COLS] = {0}, db[LN_COLS] = {0};
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = x + r * c + c0, *dyr = dy + r * c + c0;
                const float m = mean[r], rs = rstd[r];
                if (w == LN_COLS) {
#pragma omp simd
                    for (int64_t i = 0; i < LN_COLS; i++) {
                        dg[i] += dyr[i] * (xr[i] - m) * rs;
                        db[i] += dyr[i];
                    }
                } else {
                    for (int64_t i = 0; i < w; i++) {
                        dg[i] += dyr[i] * (xr[i] - m) * rs;
                        db[i] += dyr[i];
                    }
                }
            }
            memcpy(dgamma + c0, dg, sizeof(float) * (size_t)w);
            memcpy(dbeta + c0, db, sizeof(float) * (size_t)w);
        }
    }
    return HP_STATUS_OK;
}
