/*
 * CPU kernel for ATTENTION_CACHE (src/ops/attention_cache.c has the contract). A team kernel in
 * two phases separated by a team barrier:
 *   1. append: every row (s, t) with position p >= 0 copies its KV heads of k and v into
 *      cache[s, :, p, :] (work-shared over rows);
 *   2. attend: work items (slot, query head, block of up to BQ rows); for the block the scores
 *      against cache rows [0, L) (L = the block's largest position + 1) are one GEMM into the
 *      thread's scratch (Q rows of stride H*D against the cache head's (T_max, D) rows), a row
 *      softmax over each row's own [0, p] (the rest zeroed), then one GEMM into o.
 * GEMMs are single-threaded inside the parallel region, as in k_attention.c. Positions are
 * validated before any write, identically on every thread of a team.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define BQ 32 /* HP_ATTN_CACHE_BLOCK in src/ops/attention_cache.c */

typedef struct cache_args {
    const float *q, *k, *v;
    float *kc, *vc, *o, *ws;
    const int32_t *pos;
    int64_t S, T, H, KV, D, Tmax, nblk;
    size_t pt; /* floats of scratch per thread */
    int nt;    /* threads whose scratch fits */
} cache_args;

static void append_rows(const cache_args *c) {
    const int64_t Ck = c->KV * c->D;
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < c->S * c->T; r++) {
        int64_t s = r / c->T, p = c->pos[r];
        if (p < 0) continue;
        for (int64_t h = 0; h < c->KV; h++) {
            size_t at = (size_t)(((s * c->KV + h) * c->Tmax + p) * c->D);
            memcpy(c->kc + at, c->k + r * Ck + h * c->D, sizeof(float) * (size_t)c->D);
            memcpy(c->vc + at, c->v + r * Ck + h * c->D, sizeof(float) * (size_t)c->D);
        }
    }
}

static void attend(const cache_args *c) {
    const int64_t C = c->H * c->D, G = c->H / c->KV;
    const float scale = 1.0f / sqrtf((float)c->D);
    const int64_t items = c->S * c->H * c->nblk;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t it = 0; it < items; it++) {
        int tid = omp_get_thread_num();
        if (tid >= c->nt) continue; /* never: the caller checked the team fits the workspace */
        int64_t blk = it % c->nblk, sh = it / c->nblk, s = sh / c->H, h = sh % c->H, kvh = h / G;
        int64_t t0 = blk * BQ, t1 = t0 + BQ < c->T ? t0 + BQ : c->T, rows = t1 - t0;
        const int32_t *pos = c->pos + s * c->T + t0;
        int64_t L = 0;
        for (int64_t i = 0; i < rows; i++) L = pos[i] + 1 > L ? pos[i] + 1 : L;
        float *O = c->o + (s * c->T + t0) * C + h * c->D;
        if (L == 0) { /* every row is padding */
            for (int64_t i = 0; i < rows; i++) memset(O + i * C, 0, sizeof(float) * (size_t)c->D);
            continue;
        }
        const float *Q = c->q + (s * c->T + t0) * C + h * c->D;
        const float *K = c->kc + (s * c->KV + kvh) * c->Tmax * c->D;
        const float *V = c->vc + (s * c->KV + kvh) * c->Tmax * c->D;
        float *P = c->ws + (size_t)tid * c->pt;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)L, (int)c->D, scale, Q, (int)C, K,
                    (int)c->D, 0.0f, P, (int)L);
        for (int64_t i = 0; i < rows; i++) {
            float *row = P + i * L;
            int64_t valid = pos[i] + 1; /* 0 for a padding row */
            float m = -INFINITY, sum = 0.0f;
            for (int64_t j = 0; j < valid; j++) m = row[j] > m ? row[j] : m;
            for (int64_t j = 0; j < valid; j++) {
                row[j] = expf(row[j] - m);
                sum += row[j];
            }
            float inv = valid ? 1.0f / sum : 0.0f;
            for (int64_t j = 0; j < valid; j++) row[j] *= inv;
            if (valid < L) memset(row + valid, 0, sizeof(float) * (size_t)(L - valid));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)c->D, (int)L, 1.0f, P, (int)L, V,
                    (int)c->D, 0.0f, O, (int)C);
    }
}

hp_status hp__cpu_attention_cache(const hp_kernel_args *a) {
    const hp_shape *qs = hp__in_shape(a, 0), *kcs = hp__in_shape(a, 3);
    cache_args c = {a->in[0], a->in[1], a->in[2], a->in[3], a->in[4], a->out[0], a->workspace, a->in[5],
                    qs->dim[0], qs->dim[1], a->node->attr.i[0], 0, 0, kcs->dim[2], 0, 0, 0};
    c.KV = a->node->attr.i[2] ? a->node->attr.i[2] : c.H;
    c.D = qs->dim[2] / c.H;
    if (c.S * c.T == 0) return HP_STATUS_OK;
    for (int64_t r = 0; r < c.S * c.T; r++)
        if (c.pos[r] < -1 || c.pos[r] >= c.Tmax)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "attention_cache: position %d of slot %lld, row %lld is outside "
                            "[-1, T_max %lld) (the cache holds T_max tokens per slot)", (int)c.pos[r],
                            (long long)(r / c.T), (long long)(r % c.T), (long long)c.Tmax);
    int64_t rows = c.T < BQ ? c.T : BQ;
    size_t bytes = ((size_t)(rows * c.Tmax) * sizeof(float) + 63) & ~(size_t)63;
    c.pt = bytes / sizeof(float);
    size_t avail = a->workspace ? a->workspace_bytes / bytes : 0;
    int max = omp_get_max_threads();
    c.nt = (size_t)max < avail ? max : (int)avail;
    if (avail == 0 || (hp__team_all() && (size_t)omp_get_num_threads() > avail))
        return hp_error(HP_STATUS_INTERNAL, "attention_cache: workspace of %zu bytes holds %zu threads' scratch of "
                        "%zu bytes", a->workspace_bytes, avail, bytes);
    c.nblk = (c.T + BQ - 1) / BQ;
    bool par = c.S * c.H * c.nblk > 1 && c.S * c.T * c.H * c.D * c.Tmax > 65536;
    HP_TEAM_RUN(par, append_rows(&c); hp__team_sync(); attend(&c));
    return HP_STATUS_OK;
}
