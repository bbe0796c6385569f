/* CPU kernel for ROPE (rotate_half form; src/ops/rope.c has the formula). Time steps in parallel;
 * each computes its D/2 angles once (f32 angle as Hugging Face forms it, cos/sin in double of that
 * angle) and rotates every head of every batch row at that time. A team kernel. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <math.h>
#include <omp.h>

typedef struct rope_args {
    const int32_t *pos; /* (B, T) per-row positions (added to p0), or NULL */
    const float *x;
    float *y;
    int64_t rows, T, H, D, p0;
    float base, sign;
} rope_args;

static void rope_body(const rope_args *r) {
    const int64_t half = r->D / 2, C = r->H * r->D, B = r->rows / r->T;
#pragma omp for schedule(static) nowait
    for (int64_t t = 0; t < r->T; t++) {
        const float pos = (float)(r->p0 + t);
        for (int64_t j = 0; j < half; j++) {
            float inv = 1.0f / powf(r->base, (float)(2 * j) / (float)r->D), a = pos * inv;
            float cs = (float)cos((double)a), sn = r->sign * (float)sin((double)a);
            for (int64_t b = 0; b < B; b++) {
                const float *xr = r->x + (b * r->T + t) * C;
                float *yr = r->y + (b * r->T + t) * C;
                for (int64_t h = 0; h < r->H; h++) {
                    const float *xh = xr + h * r->D;
                    float *yh = yr + h * r->D;
                    float x1 = xh[j], x2 = xh[j + half];
                    yh[j] = x1 * cs - x2 * sn;
                    yh[j + half] = x2 * cs + x1 * sn;
                }
            }
        }
    }
}

/* With per-row positions: rows in parallel, each computing its own angles. */
static void rope_rows_body(const rope_args *r) {
    const int64_t half = r->D / 2, C = r->H * r->D;
#pragma omp for schedule(static) nowait
    for (int64_t row = 0; row < r->rows; row++) {
        int32_t pr = r->pos[row];
        const float pos = (float)(r->p0 + (pr < 0 ? 0 : pr));
        const float *xr = r->x + row * C;
        float *yr = r->y + row * C;
        for (int64_t j = 0; j < half; j++) {
            float inv = 1.0f / powf(r->base, (float)(2 * j) / (float)r->D), a = pos * inv;
            float cs = (float)cos((double)a), sn = r->sign * (float)sin((double)a);
            for (int64_t h = 0; h < r->H; h++) {
                const float *xh = xr + h * r->D;
                float *yh = yr + h * r->D;
                float x1 = xh[j], x2 = xh[j + half];
                yh[j] = x1 * cs - x2 * sn;
                yh[j + half] = x2 * cs + x1 * sn;
            }
        }
    }
}

hp_status hp__cpu_rope(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 0);
    rope_args r = {a->node->n_in > 1 ? a->in[1] : NULL, a->in[0], a->out[0], xs->dim[0] * xs->dim[1], xs->dim[1], a->node->attr.i[0], 0,
                   a->node->attr.i[1], a->node->attr.f[0], a->node->attr.i[2] ? -1.0f : 1.0f};
    if (r.H == 0 || r.rows == 0) return HP_STATUS_OK;
    r.D = xs->dim[2] / r.H;
    if (r.pos) HP_TEAM_RUN(hp_shape_numel(xs) > 16384, rope_rows_body(&r));
    else HP_TEAM_RUN(hp_shape_numel(xs) > 16384, rope_body(&r));
    return HP_STATUS_OK;
}
