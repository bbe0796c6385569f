/*
 * CPU kernels of the MoE operators (hp/moe.h): router, bias update, dispatch, combine, grouped GEMM
 * and the balancing loss. Every kernel is deterministic: per-token work runs in parallel over
 * tokens with sums in a fixed order, the dispatch sort is a sequential counting sort (O(N k)), and
 * the grouped GEMMs (team kernels, team.h) give each expert's product to one thread (one
 * single-threaded cblas_sgemm per expert: the result does not depend on the thread count).
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"
#include "hp/moe.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* ---------------------------------------------------------------- router */

/* Picks the k largest of score(e) (ties: the lower e), in decreasing order, into sel[0..k). */
static void top_k(const float *score, const float *bias, int64_t E, int64_t k, int32_t *sel) {
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        float bv = -INFINITY;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t q = 0; q < j; q++) taken |= sel[q] == e;
            if (taken) continue;
            float v = score[e] + (bias ? bias[e] : 0.0f);
            if (best < 0 || v > bv) best = e, bv = v;
        }
        sel[j] = (int32_t)best;
    }
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

hp_status hp__cpu_moe_route(const hp_kernel_args *a) {
    const hp_shape *ls = hp__in_shape(a, 0);
    const int64_t N = ls->dim[0], E = ls->dim[1], k = a->node->attr.i[0];
    const bool sig = a->node->attr.i[1] == HP_MOE_ROUTER_SIGMOID_BIAS;
    const float *logits = a->in[0], *bias = a->in[1];
    float *gates = a->out[0], *probs = a->out[2];
    int32_t *idx = a->out[1];
    for (int64_t e = 0; bias && e < E; e++)
        if (!isfinite(bias[e])) return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_route: bias[%lld] is %g", (long long)e, (double)bias[e]);
#pragma omp parallel for schedule(static) if (N * E > 16384)
    for (int64_t n = 0; n < N; n++) {
        const float *l = logits + n * E;
        float *p = probs + n * E;
        int32_t *sel = idx + n * k;
        float *gt = gates + n * k;
        double sum = 0.0;
        if (sig) {
            for (int64_t e = 0; e < E; e++) sum += (p[e] = sigmoidf(l[e]));
            top_k(p, bias, E, k, sel); /* selection by s + bias, before p is normalised */
        } else {
            float mx = -INFINITY;
            for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
            for (int64_t e = 0; e < E; e++) sum += (p[e] = expf(l[e] - mx));
        }
        float inv = (float)(1.0 / sum);
        for (int64_t e = 0; e < E; e++) p[e] *= inv;
        if (!sig) top_k(p, NULL, E, k, sel);
        double gs = 0.0;
        for (int64_t j = 0; j < k; j++) gs += p[sel[j]];
        for (int64_t j = 0; j < k; j++) gt[j] = (float)(p[sel[j]] / gs);
    }
    return HP_STATUS_OK;
}

hp_status hp__cpu_moe_route_backward(const hp_kernel_args *a) {
    const hp_shape *ls = hp__in_shape(a, 2);
    const int64_t N = ls->dim[0], E = ls->dim[1], k = hp__in_shape(a, 3)->dim[1];
    const bool sig = a->node->attr.i[1] == HP_MOE_ROUTER_SIGMOID_BIAS;
    const float *dg = a->in[0], *dp = a->in[1], *logits = a->in[2];
    const int32_t *idx = a->in[3];
    float *dl = a->out[0];
    for (int64_t i = 0; i < N * k; i++)
        if (idx[i] < 0 || idx[i] >= E)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_route_backward: expert id %d at %lld is outside [0, %lld)",
                            idx[i], (long long)i, (long long)E);
#pragma omp parallel for schedule(static) if (N * E > 16384)
    for (int64_t n = 0; n < N; n++) {
        const float *l = logits + n * E;
        const int32_t *sel = idx + n * k;
        float *d = dl + n * E;
        /* v_e: the sigmoid score s_e, or exp(l_e - max) (softmax); p_e = v_e / sum, g_j = v_sel_j / ssel */
        float mx = -INFINITY;
        if (!sig)
            for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        double sum = 0.0, ssel = 0.0, dot = 0.0, dotp = 0.0;
        for (int64_t e = 0; e < E; e++) sum += (d[e] = sig ? sigmoidf(l[e]) : expf(l[e] - mx));
        for (int64_t j = 0; j < k; j++) ssel += d[sel[j]];
        for (int64_t j = 0; j < k && dg; j++) dot += (d[sel[j]] / ssel) * dg[n * k + j];   /* sum_j g_j dg_j */
        for (int64_t e = 0; e < E && dp; e++) dotp += (d[e] / sum) * dp[n * E + e];       /* sum_e p_e dp_e */
        for (int64_t e = 0; e < E; e++) { /* the probs part: ds_e (sigmoid) or dlogit_e (softmax) */
            double v = d[e], acc = 0.0;
            if (dp) acc = sig ? (dp[n * E + e] - dotp) / sum : (v / sum) * (dp[n * E + e] - dotp);
            d[e] = (float)acc;
        }
        for (int64_t j = 0; j < k && dg; j++) { /* the gates part, on the selected experts */
            int64_t e = sel[j];
            double v = sig ? sigmoidf(l[e]) : expf(l[e] - mx);
            d[e] += (float)(sig ? (dg[n * k + j] - dot) / ssel : (v / ssel) * (dg[n * k + j] - dot));
        }
        if (sig)
            for (int64_t e = 0; e < E; e++) {
                float v = sigmoidf(l[e]);
                d[e] *= v * (1.0f - v);
            }
    }
    return HP_STATUS_OK;
}

hp_status hp__cpu_moe_bias_update(const hp_kernel_args *a) {
    const int64_t E = hp__in_shape(a, 0)->dim[0];
    float *bias = a->in[0];
    double total = 0.0;
    for (int i = 1; i < a->node->n_in; i++)
        for (int64_t e = 0; e < E; e++) total += ((const int32_t *)a->in[i])[e];
    const double mean = total / (double)E;
    const float u = a->node->attr.f[0];
    for (int64_t e = 0; e < E; e++) {
        double load = 0.0; /* summed over the counts inputs (a chunked layer's) */
        for (int i = 1; i < a->node->n_in; i++) load += ((const int32_t *)a->in[i])[e];
        double d = mean - load;
        bias[e] += d > 0 ? u : d < 0 ? -u : 0.0f;
    }
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- dispatch and combine */

hp_status hp__cpu_moe_dispatch(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 0), *is = hp__in_shape(a, 1);
    const int64_t N = xs->dim[0], C = xs->dim[1], k = is->dim[1], E = a->node->attr.i[0];
    const float *x = a->in[0];
    const int32_t *idx = a->in[1];
    float *out = a->out[0];
    int32_t *counts = a->out[1], *pos = a->out[2];
    int64_t *cursor = a->workspace;
    memset(counts, 0, sizeof(int32_t) * (size_t)E);
    for (int64_t i = 0; i < N * k; i++) {
        if (idx[i] < 0 || idx[i] >= E)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "moe_dispatch: expert id %d of token %lld slot %lld is outside [0, %lld)",
                            idx[i], (long long)(i / k), (long long)(i % k), (long long)E);
        counts[idx[i]]++;
    }
    int64_t off = 0;
    for (int64_t e = 0; e < E; e++) {
        cursor[e] = off;
        off += counts[e];
    }
    for (int64_t i = 0; i < N * k; i++) pos[i] = (int32_t)cursor[idx[i]]++;
#pragma omp parallel for schedule(static) if (N * k * C > 65536)
    for (int64_t i = 0; i < N * k; i++) memcpy(out + (int64_t)pos[i] * C, x + (i / k) * C, sizeof(float) * (size_t)C);
    return HP_STATUS_OK;
}

/* pos values must index the R = N*k rows. */
static hp_status check_pos(const int32_t *pos, int64_t n, int64_t rows, const char *op) {
    for (int64_t i = 0; i < n; i++)
        if (pos[i] < 0 || pos[i] >= rows)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: pos[%lld] = %d is outside [0, %lld)", op, (long long)i, pos[i],
                            (long long)rows);
    return HP_STATUS_OK;
}

hp_status hp__cpu_moe_combine(const hp_kernel_args *a) {
    const hp_shape *ps = hp__in_shape(a, 1);
    const int64_t N = ps->dim[0], k = ps->dim[1], C = hp__in_shape(a, 0)->dim[1];
    const float *ys = a->in[0], *gates = a->in[2];
    const int32_t *pos = a->in[1];
    float *y = a->out[0];
    HP_CHECK(check_pos(pos, N * k, N * k, "moe_combine"));
#pragma omp parallel for schedule(static) if (N * k * C > 65536)
    for (int64_t n = 0; n < N; n++) {
        float *yr = y + n * C;
        memset(yr, 0, sizeof(float) * (size_t)C);
        for (int64_t j = 0; j < k; j++) {
            const float *r = ys + (int64_t)pos[n * k + j] * C;
            const float g = gates ? gates[n * k + j] : 1.0f;
            for (int64_t c = 0; c < C; c++) yr[c] += g * r[c];
        }
    }
    return HP_STATUS_OK;
}

hp_status hp__cpu_moe_combine_backward(const hp_kernel_args *a) {
    const hp_shape *ps = hp__in_shape(a, 1);
    const int64_t N = ps->dim[0], k = ps->dim[1], C = hp__in_shape(a, 0)->dim[1];
    const float *dy = a->in[0], *gates = a->in[2], *ys = a->in[3];
    const int32_t *pos = a->in[1];
    float *dys = a->out[0], *dg = a->out[1];
    HP_CHECK(check_pos(pos, N * k, N * k, "moe_combine_backward"));
#pragma omp parallel for schedule(static) if (N * k * C > 65536)
    for (int64_t n = 0; n < N; n++) {
        const float *d = dy + n * C;
        for (int64_t j = 0; j < k; j++) {
            int64_t r = pos[n * k + j];
            float *o = dys + r * C;
            const float g = gates ? gates[n * k + j] : 1.0f;
            for (int64_t c = 0; c < C; c++) o[c] = g * d[c];
            double dot = 0.0;
            if (ys)
                for (int64_t c = 0; c < C; c++) dot += (double)d[c] * ys[r * C + c];
            dg[n * k + j] = (float)dot;
        }
    }
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- grouped GEMM */

/* Checks counts (E) against the R rows (ragged: R is a capacity, the counts may sum to less; an
 * expert-parallel rank's rows); HP_STATUS_INVALID_ARGUMENT naming the first bad count. */
static hp_status check_counts(const int32_t *counts, int64_t E, int64_t R, bool ragged, const char *op) {
    int64_t sum = 0;
    for (int64_t e = 0; e < E; e++) {
        if (counts[e] < 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: counts[%lld] = %d is negative", op, (long long)e, counts[e]);
        sum += counts[e];
    }
    if (ragged ? sum > R : sum != R)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: counts sum to %lld but x has %lld rows%s", op, (long long)sum,
                        (long long)R, ragged ? " (its capacity)" : "");
    return HP_STATUS_OK;
}

static int64_t first_row(const int32_t *counts, int64_t e) {
    int64_t off = 0;
    for (int64_t q = 0; q < e; q++) off += counts[q];
    return off;
}

static void gemm_body(const float *x, const float *w, const int32_t *counts, float *y, int64_t E, int64_t K,
                      int64_t N, bool tw) {
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t e = 0; e < E; e++) {
        int64_t r0 = first_row(counts, e), m = counts[e];
        if (m == 0) continue;
        const float *we = w + e * N * K;
        /* tw: w[e] is (N, K), y = x w^T; else (K, N), y = x w */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tw ? CblasTrans : CblasNoTrans, (int)m, (int)N, (int)K, 1.0f,
                    x + r0 * K, (int)K, we, tw ? (int)K : (int)N, 0.0f, y + r0 * N, (int)N);
    }
}

hp_status hp__cpu_moe_gemm(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 0), *ws = hp__in_shape(a, 1);
    const bool tw = a->node->attr.i[0] != 0;
    const int64_t R = xs->dim[0], K = xs->dim[1], E = ws->dim[0], N = hp__out_shape(a, 0)->dim[1];
    const bool ragged = a->node->attr.i[1] != 0;
    HP_CHECK(check_counts(a->in[2], E, R, ragged, "moe_gemm"));
    HP_TEAM_RUN(R * K * N > 65536, gemm_body(a->in[0], a->in[1], a->in[2], a->out[0], E, K, N, tw));
    if (ragged) { /* the capacity rows past the counts: zero, like the exchange leaves them */
        int64_t used = first_row(a->in[2], E);
        memset((float *)a->out[0] + used * N, 0, sizeof(float) * (size_t)((R - used) * N));
    }
    return HP_STATUS_OK;
}

static void gemm_dw_body(const float *dy, const float *x, const int32_t *counts, float *dw, int64_t E, int64_t N,
                         int64_t K) {
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t e = 0; e < E; e++) {
        int64_t r0 = first_row(counts, e), m = counts[e];
        float *de = dw + e * N * K;
        if (m == 0) {
            memset(de, 0, sizeof(float) * (size_t)(N * K));
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)m, 1.0f, dy + r0 * N, (int)N,
                    x + r0 * K, (int)K, 0.0f, de, (int)K);
    }
}

hp_status hp__cpu_moe_gemm_dw(const hp_kernel_args *a) {
    const hp_shape *dys = hp__in_shape(a, 0), *xs = hp__in_shape(a, 1);
    const int64_t R = dys->dim[0], N = dys->dim[1], K = xs->dim[1], E = hp__in_shape(a, 2)->dim[0];
    HP_CHECK(check_counts(a->in[2], E, R, a->node->attr.i[1] != 0, "moe_gemm_dw"));
    HP_TEAM_RUN(R * K * N > 65536, gemm_dw_body(a->in[0], a->in[1], a->in[2], a->out[0], E, N, K));
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- balancing loss */

hp_status hp__cpu_moe_balance_loss(const hp_kernel_args *a) {
    const hp_shape *ps = hp__in_shape(a, 0);
    const int64_t rows = ps->dim[0], E = ps->dim[1], k = a->node->attr.i[0], N = a->node->attr.i[1];
    const float *p = a->in[0];
    const int32_t *counts = a->in[1];
    double total = 0.0;
    for (int64_t e = 0; e < E; e++) {
        double pe = 0.0;
        for (int64_t n = 0; n < rows; n++) pe += p[n * E + e];
        total += ((double)counts[e] / ((double)N * (double)k)) * (pe / (double)N);
    }
    *(float *)a->out[0] = (float)((double)E * total);
    return HP_STATUS_OK;
}

hp_status hp__cpu_moe_balance_loss_backward(const hp_kernel_args *a) {
    const hp_shape *ps = hp__in_shape(a, 1);
    const int64_t rows = ps->dim[0], E = ps->dim[1], k = a->node->attr.i[0], N = a->node->attr.i[1];
    const float dl = *(const float *)a->in[0];
    const int32_t *counts = a->in[2];
    float *dp = a->out[0];
    for (int64_t n = 0; n < rows; n++)
        for (int64_t e = 0; e < E; e++)
            dp[n * E + e] = (float)((double)dl * (double)E * (double)counts[e] / ((double)N * (double)k * (double)N));
    return HP_STATUS_OK;
}
