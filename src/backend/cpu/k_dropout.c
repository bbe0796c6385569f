/* CPU kernel for DROPOUT (src/ops/dropout.c): a team kernel (team.h) over rows of the last dim. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"
#include "hp/rng.h"

typedef struct dropout_job {
    const float *x;
    float *y;
    int nd;
    int64_t len[HP_MAX_DIMS];     /* local block */
    int64_t start[HP_MAX_DIMS];   /* its global offsets */
    int64_t gstride[HP_MAX_DIMS]; /* global row-major strides (elements) */
    uint64_t key;                 /* per tensor and step */
    uint32_t threshold;           /* drop where the 24-bit uniform draw is below it */
    float scale;                  /* 1 / (1 - p) */
} dropout_job;

static void dropout_body(const dropout_job *j) {
    const int nd = j->nd;
    const int64_t inner = nd ? j->len[nd - 1] : 1;
    int64_t rows = 1;
    for (int d = 0; d < nd - 1; d++) rows *= j->len[d];
    if (inner == 0) rows = 0;
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; r++) {
        /* global flat index of the row's first element */
        int64_t flat = nd ? j->start[nd - 1] : 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            flat += (j->start[d] + rem % j->len[d]) * j->gstride[d];
            rem /= j->len[d];
        }
        const float *x = j->x + r * inner;
        float *y = j->y + r * inner;
        for (int64_t e = 0; e < inner; e++) {
            /* the same 24 bits hp_rng_uniform turns into [0, 1) */
            uint32_t u = (uint32_t)(hp_rng_u64(j->key, (uint64_t)(flat + e)) >> 40);
            y[e] = u < j->threshold ? 0.0f : x[e] * j->scale;
        }
    }
}

hp_status hp__cpu_dropout(const hp_kernel_args *a) {
    const hp_attrs *at = &a->node->attr;
    const hp_shape *ls = hp__in_shape(a, 0);
    float step = *(const float *)a->in[1];
    /* The step is the optimizer's f32 counter: exact, so a distinct key per step, only below 2^24. */
    if (!(step >= 0.0f && step < 16777216.0f && step == (float)(int32_t)step))
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "dropout: step %.9g is not an integer in [0, 2^24) (an f32 step count is exact, "
                        "and every step's mask distinct, only below 2^24 = 16777216 steps)",
                        (double)step);
    float p = at->f[0];
    dropout_job j = {.x = a->in[0], .y = a->out[0], .nd = ls->ndim,
                     .key = hp_rng_u64((uint64_t)at->i[0], (uint64_t)step), .scale = 1.0f / (1.0f - p)};
    /* u / 2^24 < p  <=>  u < ceil(p 2^24) for integer u (p 2^24 is exact in double) */
    double t = (double)p * 16777216.0, tc = (double)(int64_t)t;
    j.threshold = (uint32_t)(tc < t ? tc + 1.0 : tc);
    hp_shape_strides(&at->shape, j.gstride);
    for (int d = 0; d < ls->ndim; d++) {
        j.len[d] = ls->dim[d];
        j.start[d] = at->i[1 + d];
    }
    if (a->node->n_in > 2 && a->in[2]) { /* a run-time row offset (a pipeline's micro-batch) */
        int32_t row0 = *(const int32_t *)a->in[2];
        if (ls->ndim < 1 || row0 < 0 || j.start[0] + row0 + j.len[0] > at->shape.dim[0])
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "dropout: row offset %d puts the block of %lld rows outside "
                            "the %lld global rows", (int)row0, (long long)(ls->ndim ? j.len[0] : 0),
                            (long long)(at->shape.ndim ? at->shape.dim[0] : 0));
        j.start[0] += row0;
    }
    HP_TEAM_RUN(hp_shape_numel(ls) > 16384, dropout_body(&j));
    return HP_STATUS_OK;
}
