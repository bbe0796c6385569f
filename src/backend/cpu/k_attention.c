/*
 * CPU kernels for ATTENTION and ATTENTION_BACKWARD (FlashAttention-style, Dao et al. 2022).
 *
 * q, k, v (B, T, H*D): head h of batch b is the (T, D) matrix at q + b*T*C + h*D with row stride C,
 * which cblas_sgemm reads directly (lda = C), so nothing is packed. Work is split into query blocks
 * of BQ rows. For a block [i0, i1) the scores against keys [0, L) (L = i1 when causal, else T) are
 * one GEMM into the thread's scratch, then a row softmax (fast vectorized exp), then one GEMM into o.
 *
 * Forward: OpenMP over (b, h, block), largest (causal) blocks first; each GEMM is single-threaded
 * inside the parallel region (OpenBLAS's OpenMP build checks omp_in_parallel()).
 * Backward: OpenMP over (b, kv head) pairs, each owned by one thread, which walks the query blocks
 * of the kv head's query heads (grouped-query attention: H / KV of them; k and v rows are KV*D
 * long) and accumulates dK and dV in place: recompute P = exp(S - lse), dV += P^T dO, dP = dO V^T,
 * dS = P (dP - rowsum(dO o O)), dQ = scale dS K, dK += scale dS^T Q. With fewer (b, h) pairs than
 * threads the extra threads stay idle (single-threaded GEMMs throughout). Both are team kernels.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* Query rows per block; the same constant sizes the workspace in src/ops/attention.c. */
#ifndef HP_ATTN_BLOCK
#define HP_ATTN_BLOCK 64
#endif
#define BQ HP_ATTN_BLOCK

/*
 * exp(x) for the softmax arguments (s - max, s - lse; <= 0 up to rounding): Cephes' expf polynomial
 * after the range reduction x = n ln2 + r, |r| <= ln2/2; relative error < 1e-7. Inputs are clamped
 * to [-87, 88], so very negative ones give exp(-87) ~ 1.6e-38 (masked entries are zeroed
 * explicitly). With AVX2 + FMA, 8 lanes at a time with intrinsics: GCC does not vectorize the
 * scalar form without -ffast-math (the clamps and rounding are not if-converted), and a scalar
 * exp costs more than the score GEMMs themselves.
 */
static inline float exp_scalar(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    n = n == n ? n : 0.0f; /* NaN x: p is NaN already; keep the int conversion defined */
    int32_t e = ((int32_t)n + 127) * (1 << 23);
    float s;
    memcpy(&s, &e, sizeof s);
    return p * s;
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HP_ATTN_SIMD 1
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* s[j] = exp(s[j] - c) for j < n; returns the sum of the results. */
static float exp_shift(float *s, int64_t n, float c) {
    int64_t j = 0;
    float sum = 0.0f;
#ifdef HP_ATTN_SIMD
    __m256 acc = _mm256_setzero_ps(), vc = _mm256_set1_ps(c);
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vc));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    sum = hsum8(acc);
#endif
    for (; j < n; j++) {
        s[j] = exp_scalar(s[j] - c);
        sum += s[j];
    }
    return sum;
}

static float row_max(const float *s, int64_t n) {
    int64_t j = 0;
    float m = -INFINITY;
#ifdef HP_ATTN_SIMD
    if (n >= 8) {
        __m256 vm = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
        m = hmax8(vm);
    }
#endif
    for (; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

typedef struct attn_dims {
    int64_t B, T, C, H, D;
    int64_t Tk, off; /* key/value rows; causal offset: query row i sees keys j <= i + off */
    int64_t KV, Ck, G; /* kv heads, k/v row length KV*D, query heads per kv head */
    bool causal;
    float scale;
} attn_dims;

static attn_dims dims_of(const hp_kernel_args *a, int qi) {
    const hp_shape *q = hp__in_shape(a, qi);
    attn_dims d;
    d.B = q->dim[0];
    d.T = q->dim[1];
    d.C = q->dim[2];
    d.H = a->node->attr.i[0];
    d.D = d.C / d.H;
    d.KV = a->node->attr.i[2] ? a->node->attr.i[2] : d.H;
    d.Ck = d.KV * d.D;
    d.G = d.H / d.KV;
    d.causal = a->node->attr.i[1] != 0;
    d.Tk = hp__in_shape(a, qi + 1)->dim[1];
    d.off = a->node->attr.i[3];
    d.scale = 1.0f / sqrtf((float)d.D);
    return d;
}

/* Floats of scratch per thread, rounded to 64 bytes (the same rule as the workspace size): nbuf
 * blocks of (query rows, Tk) plus max(Tq, Tk) floats. */
static size_t per_thread_floats(int64_t Tq, int64_t Tk, int nbuf) {
    int64_t rows = Tq < BQ ? Tq : BQ;
    size_t bytes = (size_t)(nbuf * rows * Tk + (Tq > Tk ? Tq : Tk)) * sizeof(float);
    bytes = (bytes + 63) & ~(size_t)63;
    return bytes / sizeof(float);
}

/* Threads whose scratch fits the workspace (at most omp_get_max_threads()); inside a team
 * (team.h) every thread of the team must have its scratch. */
static hp_status threads_for(const hp_kernel_args *a, size_t per_thread, int *nt) {
    size_t avail = a->workspace_bytes / (per_thread * sizeof(float));
    if (avail == 0 || !a->workspace)
        return hp_error(HP_STATUS_INTERNAL, "attention: workspace of %zu bytes is smaller than one thread's %zu",
                        a->workspace_bytes, per_thread * sizeof(float));
    int max = omp_get_max_threads();
    *nt = (size_t)max < avail ? max : (int)avail;
    if (hp__team_all() && (size_t)omp_get_num_threads() > avail)
        return hp_error(HP_STATUS_INTERNAL, "attention: workspace holds %zu threads' scratch, the team has %d", avail,
                        omp_get_num_threads());
    return HP_STATUS_OK;
}

/* Keys visible to query row i: all Tk, or under the causal mask those j <= i + off, clamped. */
static inline int64_t visible(const attn_dims *d, int64_t i) {
    if (!d->causal) return d->Tk;
    int64_t v = i + d->off + 1;
    return v < 0 ? 0 : v > d->Tk ? d->Tk : v;
}

/* Unnormalized row softmax: s[0, valid) = exp(s - max) in place, s[valid, L) = 0. Returns the
 * row's sum (0 for a row that sees no key: lse = -inf); the caller divides the row of P V by it
 * (D values, not L) and stores lse. */
static float softmax_row(float *s, int64_t valid, int64_t L, float *lse) {
    if (valid == 0) {
        memset(s, 0, sizeof(float) * (size_t)L);
        *lse = -INFINITY;
        return 0.0f;
    }
    float m = row_max(s, valid);
    float sum = exp_shift(s, valid, m);
    if (valid < L) memset(s + valid, 0, sizeof(float) * (size_t)(L - valid));
    *lse = m + logf(sum);
    return sum;
}

typedef struct attn_fwd {
    attn_dims d;
    const float *q, *k, *v;
    float *o, *lse, *ws;
    size_t pt;
    int64_t nblk, items;
} attn_fwd;

static void attention_body(const attn_fwd *f) {
    const attn_dims d = f->d;
    int C = (int)d.C, D = (int)d.D, Ck = (int)d.Ck;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t it = 0; it < f->items; it++) {
        /* Block index varies slowest and descending: the costly causal blocks are handed out first. */
        int64_t blk = f->nblk - 1 - it / (d.B * d.H), bh = it % (d.B * d.H), b = bh / d.H, h = bh % d.H;
        float *S = f->ws + (size_t)omp_get_thread_num() * f->pt;
        int64_t i0 = blk * BQ, i1 = i0 + BQ < d.T ? i0 + BQ : d.T, rows = i1 - i0;
        int64_t L = visible(&d, i1 - 1);
        const float *Q = f->q + (b * d.T + i0) * d.C + h * d.D;
        const float *K = f->k + b * d.Tk * d.Ck + h / d.G * d.D, *V = f->v + b * d.Tk * d.Ck + h / d.G * d.D;
        float *lrow = f->lse + (b * d.H + h) * d.T + i0, *O = f->o + (b * d.T + i0) * d.C + h * d.D;
        if (L == 0) { /* the block sees no key (a ring step's future block): o = 0, lse = -inf */
            for (int64_t r = 0; r < rows; r++) {
                lrow[r] = -INFINITY;
                memset(O + r * d.C, 0, sizeof(float) * (size_t)d.D);
            }
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)L, D, d.scale, Q, C, K, Ck, 0.0f, S,
                    (int)L);
        float *rsum = S + rows * L; /* BQ floats after the score block (see per_thread_floats) */
        for (int64_t r = 0; r < rows; r++) rsum[r] = softmax_row(S + r * L, visible(&d, i0 + r), L, &lrow[r]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, D, (int)L, 1.0f, S, (int)L, V, Ck, 0.0f, O, C);
        for (int64_t r = 0; r < rows; r++) {
            float inv = rsum[r] > 0.0f ? 1.0f / rsum[r] : 0.0f, *orow = O + r * d.C;
            for (int64_t e = 0; e < d.D; e++) orow[e] *= inv;
        }
    }
}

/* A team kernel (team.h): every GEMM single-threaded, the (b, h, block) items shared out. */
hp_status hp__cpu_attention(const hp_kernel_args *a) {
    attn_dims d = dims_of(a, 0);
    if (a->node->attr.i[4])
        return hp_error(HP_STATUS_UNSUPPORTED, "attention over the load-balanced ring order for %lld ranks runs only as "
                        "ring attention (strategy.context_parallel: ring over that many ranks)",
                        (long long)a->node->attr.i[4]);
    if (d.B == 0 || d.T == 0 || d.D == 0) return HP_STATUS_OK;
    if (d.Tk == 0) { /* no keys: every row sees none */
        memset(a->out[0], 0, sizeof(float) * (size_t)(d.B * d.T * d.C));
        for (int64_t i = 0; i < d.B * d.H * d.T; i++) ((float *)a->out[1])[i] = -INFINITY;
        return HP_STATUS_OK;
    }
    attn_fwd f = {d, a->in[0], a->in[1], a->in[2], a->out[0], a->out[1], a->workspace, per_thread_floats(d.T, d.Tk, 1),
                  (d.T + BQ - 1) / BQ, 0};
    f.items = d.B * d.H * f.nblk;
    int nt = 1;
    HP_CHECK(threads_for(a, f.pt, &nt));
    if (hp__team_all()) {
        attention_body(&f);
        return HP_STATUS_OK;
    }
#pragma omp parallel num_threads(nt)
    attention_body(&f);
    return HP_STATUS_OK;
}

/* Backward of query head h of batch b with scratch `ws` (two BQ x Tk buffers and max(T, Tk) floats),
 * accumulating into its kv head's dK and dV (zeroed by the caller). o and lse may be those of a
 * larger attention (a ring's final ones): P = exp(S - lse) is then this block's share, exactly. */
static void backward_head(const attn_dims *d, int64_t b, int64_t h, const float *dout, const float *q,
                          const float *k, const float *v, const float *o, const float *lse, float *dq, float *dk,
                          float *dv, float *ws) {
    int64_t T = d->T, Tk = d->Tk, C = d->C, D = d->D, Ck = d->Ck, rows0 = T < BQ ? T : BQ;
    float *P = ws, *dP = ws + rows0 * Tk, *Dv = ws + 2 * rows0 * Tk;
    size_t base = (size_t)(b * T * C + h * D), kbase = (size_t)(b * Tk * Ck + h / d->G * D);
    const float *Q = q + base, *K = k + kbase, *V = v + kbase, *dO = dout + base, *O = o + base;
    float *dQ = dq + base, *dK = dk + kbase, *dV = dv + kbase;
    const float *l = lse + (b * d->H + h) * T;
    for (int64_t i = 0; i < T; i++) {
        float s = 0.0f;
        for (int64_t j = 0; j < D; j++) s += dO[i * C + j] * O[i * C + j];
        Dv[i] = s;
    }
    for (int64_t i0 = 0; i0 < T; i0 += BQ) {
        int64_t i1 = i0 + BQ < T ? i0 + BQ : T, rows = i1 - i0, L = visible(d, i1 - 1);
        const float *Qb = Q + i0 * C, *dOb = dO + i0 * C;
        if (L == 0) { /* no key visible to the block: no gradient */
            for (int64_t r = 0; r < rows; r++) memset(dQ + (i0 + r) * C, 0, sizeof(float) * (size_t)D);
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)L, (int)D, d->scale, Qb, (int)C, K,
                    (int)Ck, 0.0f, P, (int)L);
        for (int64_t r = 0; r < rows; r++) {
            float *pr = P + r * L, li = l[i0 + r];
            int64_t valid = visible(d, i0 + r);
            if (valid > 0) exp_shift(pr, valid, li);
            if (valid < L) memset(pr + valid, 0, sizeof(float) * (size_t)(L - valid));
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)L, (int)D, (int)rows, 1.0f, P, (int)L, dOb, (int)C,
                    1.0f, dV, (int)Ck);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)L, (int)D, 1.0f, dOb, (int)C, V, (int)Ck,
                    0.0f, dP, (int)L);
        for (int64_t r = 0; r < rows; r++) {
            float *pr = P + r * L, *gr = dP + r * L, di = Dv[i0 + r];
#pragma omp simd
            for (int64_t j = 0; j < L; j++) gr[j] = pr[j] * (gr[j] - di);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)D, (int)L, d->scale, dP, (int)L, K,
                    (int)Ck, 0.0f, dQ + i0 * C, (int)C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)L, (int)D, (int)rows, d->scale, dP, (int)L, Qb,
                    (int)C, 1.0f, dK, (int)Ck);
    }
}

typedef struct attn_bwd {
    attn_dims d;
    const float *dout, *q, *k, *v, *o, *lse;
    float *dq, *dk, *dv, *ws;
    size_t pt;
} attn_bwd;

/* Work items are (b, kv head) pairs: one thread owns a kv head's dK and dV and runs the backward of
 * its G query heads in order (the same sums for any thread count). */
static void attention_backward_body(const attn_bwd *p) {
    const attn_dims *d = &p->d;
    int64_t pairs = d->B * d->KV;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t bk = 0; bk < pairs; bk++) {
        int64_t b = bk / d->KV, kh = bk % d->KV;
        float *dK = p->dk + b * d->Tk * d->Ck + kh * d->D, *dV = p->dv + b * d->Tk * d->Ck + kh * d->D;
        for (int64_t i = 0; i < d->Tk; i++) {
            memset(dK + i * d->Ck, 0, sizeof(float) * (size_t)d->D);
            memset(dV + i * d->Ck, 0, sizeof(float) * (size_t)d->D);
        }
        for (int64_t h = kh * d->G; h < (kh + 1) * d->G; h++)
            backward_head(d, b, h, p->dout, p->q, p->k, p->v, p->o, p->lse, p->dq, p->dk, p->dv,
                          p->ws + (size_t)omp_get_thread_num() * p->pt);
    }
}

/* A team kernel (team.h): each (b, h) pair owned by one thread, its GEMMs single-threaded. */
hp_status hp__cpu_attention_backward(const hp_kernel_args *a) {
    attn_dims d = dims_of(a, 1);
    if (a->node->attr.i[4])
        return hp_error(HP_STATUS_UNSUPPORTED, "attention over the load-balanced ring order for %lld ranks runs only as "
                        "ring attention (strategy.context_parallel: ring over that many ranks)",
                        (long long)a->node->attr.i[4]);
    if (d.B == 0 || d.D == 0) return HP_STATUS_OK;
    if (d.T == 0 || d.Tk == 0) { /* an empty side: dq and dk, dv are zero */
        memset(a->out[0], 0, sizeof(float) * (size_t)(d.B * d.T * d.C));
        memset(a->out[1], 0, sizeof(float) * (size_t)(d.B * d.Tk * d.Ck));
        memset(a->out[2], 0, sizeof(float) * (size_t)(d.B * d.Tk * d.Ck));
        return HP_STATUS_OK;
    }
    attn_bwd p = {d,         a->in[0],  a->in[1],  a->in[2],    a->in[3],
                  a->in[4],  a->in[5],  a->out[0], a->out[1],   a->out[2],
                  a->workspace, per_thread_floats(d.T, d.Tk, 2)};
    int nt = 1;
    HP_CHECK(threads_for(a, p.pt, &nt));
    if (hp__team_all()) {
        attention_backward_body(&p);
        return HP_STATUS_OK;
    }
    /* Fewer pairs than threads: leave threads idle rather than thread the small GEMMs (OpenBLAS
     * runs a 64 x T x 64 product 5-10x slower on 2 threads than on one, from wake-up costs). */
    if (d.B * d.KV < nt) nt = (int)(d.B * d.KV);
#pragma omp parallel num_threads(nt)
    attention_backward_body(&p);
    return HP_STATUS_OK;
}
