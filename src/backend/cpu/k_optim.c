/* CPU kernels for the optimizer operators: SUMSQ, CLIP_SCALE, ADAMW. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <math.h>
#include <omp.h>

/*
 * Sum of squares in double over a fixed number of chunks, the partial sums added in chunk order:
 * the result does not depend on the thread count. A team kernel (team.h): chunks are shared out,
 * partial sums meet in shared scratch, thread 0 adds them.
 */
#define SUMSQ_CHUNKS HP_TEAM_SHARED_DOUBLES

static void sumsq_body(const hp_kernel_args *a, double *part) {
    double s = 0.0;
    for (int i = 0; i < a->node->n_in; i++) {
        const float *x = a->in[i];
        int64_t n = hp_shape_numel(hp__in_shape(a, i)), per = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
#pragma omp for schedule(static) nowait
        for (int c = 0; c < SUMSQ_CHUNKS; c++) {
            int64_t lo = (int64_t)c * per, hi = lo + per < n ? lo + per : n;
            double p = 0.0;
            for (int64_t k = lo; k < hi; k++) p += (double)x[k] * (double)x[k];
            part[c] = p;
        }
        hp__team_sync();
        if (omp_get_thread_num() == 0) {
            double si = 0.0;
            for (int c = 0; c < SUMSQ_CHUNKS; c++) si += part[c];
            s += si;
        }
        hp__team_sync(); /* part is rewritten for the next input */
    }
    if (omp_get_thread_num() == 0) *(float *)a->out[0] = (float)s;
}

hp_status hp__cpu_sumsq(const hp_kernel_args *a) {
    int64_t total = 0;
    for (int i = 0; i < a->node->n_in; i++) total += hp_shape_numel(hp__in_shape(a, i));
    double local[SUMSQ_CHUNKS], *shared = hp__team_shared();
    double *part = shared ? shared : local;
    HP_TEAM_RUN(total > 65536, sumsq_body(a, part));
    return HP_STATUS_OK;
}

hp_status hp__cpu_clip_scale(const hp_kernel_args *a) {
    double ss = *(const float *)a->in[0], max_norm = a->node->attr.f[0];
    double loss = a->node->n_in > 1 ? *(const float *)a->in[1] : 0.0;
    if (!(ss >= 0.0) || isinf(ss) || !isfinite(loss)) { /* skip the step: ADAMW reads NaN as "no update" */
        *(float *)a->out[0] = NAN;
        return HP_STATUS_OK;
    }
    double s = max_norm / (sqrt(ss) + 1e-6);
    *(float *)a->out[0] = (float)(s < 1.0 ? s : 1.0);
    return HP_STATUS_OK;
}

static void adamw_body(const hp__adamw_coef *c, float *p, const float *gr, float *m, float *v, int64_t n) {
    const float lr = c->lr, sc = c->sc, b1 = c->b1, b2 = c->b2, eps = c->eps, wd = c->wd, c1 = c->c1, c2 = c->c2;
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; i++) {
        float g = gr[i] * sc;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * (mi * c1 / (sqrtf(vi * c2) + eps) + wd * p[i]);
    }
}

/* Shared out inside a team (ADAMW is a team kernel, team.h); a region of its own otherwise. */
void hp__adamw_update(const hp__adamw_coef *c, float *p, const float *gr, float *m, float *v, int64_t n) {
    if (isnan(c->sc)) return; /* a skipped step (hp_adamw): nothing changes */
    HP_TEAM_RUN(n > 32768, adamw_body(c, p, gr, m, v, n));
}

hp_status hp__cpu_adamw(const hp_kernel_args *a) {
    float *p = a->in[0], *m = a->in[2], *v = a->in[3];
    const float *gr = a->in[1];
    const float lr = *(const float *)a->in[4], t = *(const float *)a->in[5];
    const float sc = (a->node->n_in > 6 && a->in[6]) ? *(const float *)a->in[6] : 1.0f;
    const float b1 = a->node->attr.f[0], b2 = a->node->attr.f[1], eps = a->node->attr.f[2];
    const float wd = a->node->attr.f[3];
    if (!(t >= 1.0f))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: step must be >= 1 (counts from 1), is %g", (double)t);
    if (!isfinite(lr) || isinf(sc))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "adamw: lr %g and scale %g must be finite", (double)lr, (double)sc);
    if (isnan(sc)) return HP_STATUS_OK; /* a skipped step: param, m and v stay as they are */
    hp__adamw_coef c = {lr, sc, b1, b2, eps, wd, (float)(1.0 / (1.0 - pow((double)b1, (double)t))),
                        (float)(1.0 / (1.0 - pow((double)b2, (double)t)))};
    hp__adamw_update(&c, p, gr, m, v, hp_shape_numel(hp__in_shape(a, 0)));
    return HP_STATUS_OK;
}
