/* CPU kernels for LAYERNORM and LAYERNORM_BACKWARD (rows in parallel; deterministic; team kernels). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <math.h>
#include <omp.h>
#include <string.h>

static void layernorm_body(const float *x, const float *gamma, const float *beta, float *y, float *mean, float *rstd,
                           int64_t rows, int64_t c, float eps) {
#pragma omp for schedule(static) nowait
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
}

hp_status hp__cpu_layernorm(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 0);
    const int64_t c = xs->dim[xs->ndim - 1], rows = c ? hp_shape_numel(xs) / c : 0;
    HP_TEAM_RUN(rows * c > 16384, layernorm_body(a->in[0], a->in[1], a->in[2], a->out[0], a->out[1], a->out[2], rows,
                                                 c, a->node->attr.f[0]));
    return HP_STATUS_OK;
}

/* Columns per task of the dgamma / dbeta sums: 2 x 8 AVX registers of accumulators. */
#define LN_COLS 64

/*
 * dx per row: with xhat = (x - mean) rstd and g = dy * gamma,
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)).
 * dgamma = sum over rows of dy xhat and dbeta = sum of dy, over column blocks of LN_COLS: each
 * task owns a block of columns and scans the rows in order into local accumulators (no atomics,
 * the same result for any thread count). Neither pass reads the other's output, so neither waits
 * for the other.
 */
typedef struct ln_bwd {
    const float *dy, *x, *gamma, *mean, *rstd;
    float *dx, *dgamma, *dbeta;
    int64_t rows, c;
} ln_bwd;

static void layernorm_backward_body(const ln_bwd *p) {
    const float *dy = p->dy, *x = p->x, *gamma = p->gamma, *mean = p->mean, *rstd = p->rstd;
    float *dx = p->dx, *dgamma = p->dgamma, *dbeta = p->dbeta;
    const int64_t rows = p->rows, c = p->c, nblk = (c + LN_COLS - 1) / LN_COLS;
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
#pragma omp for schedule(static) nowait
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

hp_status hp__cpu_layernorm_backward(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 1);
    const int64_t c = xs->dim[xs->ndim - 1], rows = c ? hp_shape_numel(xs) / c : 0;
    ln_bwd p = {a->in[0], a->in[1], a->in[2], a->in[3], a->in[4], a->out[0], a->out[1], a->out[2], rows, c};
    HP_TEAM_RUN(rows * c > 16384, layernorm_backward_body(&p));
    return HP_STATUS_OK;
}
