/*
 * CPU kernels for MATMUL and LINEAR: OpenBLAS cblas_sgemm (the OpenMP build; it uses the process's
 * thread pool when called outside a parallel region and runs single-threaded inside one).
 *
 * MATMUL folds the batch into the row dimension whenever the layout allows it (b broadcast over
 * a's batch with a not transposed, or the explicit fold attribute), so a (B, T, K) @ (K, N) is one
 * (B*T, K) @ (K, N) GEMM. Otherwise it loops over the (broadcast) batch: batches of small matrices
 * run in parallel with one single-threaded GEMM each, large ones in sequence with threaded GEMMs.
 */
#include "backend/cpu/cpu.h"

#include <cblas.h>
#include <limits.h>
#include <string.h>

/* Matrices smaller than this (M*N*K) in a batch run one per thread instead of one threaded GEMM. */
#define SMALL_GEMM (128 * 128 * 128)

static hp_status too_big(int64_t m, int64_t n, int64_t k) {
    return hp_error(HP_STATUS_UNSUPPORTED, "sgemm dims M=%lld N=%lld K=%lld exceed the BLAS integer range",
                    (long long)m, (long long)n, (long long)k);
}

static bool fits(int64_t m, int64_t n, int64_t k) { return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX; }

/* Element strides of the batch dims of `s` (all but the last two) broadcast to `nd` dims. */
static void batch_strides(const hp_shape *s, int nd, int64_t *st) {
    int sb = s->ndim - 2;
    int64_t acc = s->dim[s->ndim - 1] * s->dim[s->ndim - 2];
    for (int i = nd - 1; i >= 0; i--) {
        int k = sb - nd + i;
        int64_t d = k >= 0 ? s->dim[k] : 1;
        st[i] = d == 1 ? 0 : acc;
        acc *= d;
    }
}

hp_status hp__cpu_matmul(const hp_kernel_args *a) {
    const float *A = a->in[0], *B = a->in[1];
    float *C = a->out[0];
    const hp_shape *sa = hp__in_shape(a, 0), *sb = hp__in_shape(a, 1), *sc = hp__out_shape(a, 0);
    bool ta = a->node->attr.i[0] != 0, tb = a->node->attr.i[1] != 0, fold = a->node->attr.i[2] != 0;
    int64_t M = sc->dim[sc->ndim - 2], N = sc->dim[sc->ndim - 1];
    int64_t K = ta ? sa->dim[sa->ndim - 2] : sa->dim[sa->ndim - 1];
    if (fold) K = ta ? hp_shape_numel(sa) / sa->dim[sa->ndim - 1] : sa->dim[sa->ndim - 1];
    if (M == 0 || N == 0 || hp_shape_numel(sc) == 0) return HP_STATUS_OK;
    int64_t batch = hp_shape_numel(sc) / (M * N);
    if (K == 0) {
        memset(C, 0, sizeof(float) * (size_t)hp_shape_numel(sc));
        return HP_STATUS_OK;
    }
    /* Leading dims of the stored (untransposed) matrices. */
    int64_t lda = fold ? sa->dim[sa->ndim - 1] : sa->dim[sa->ndim - 1];
    int64_t ldb = sb->dim[sb->ndim - 1];
    CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    int64_t b_batch = fold ? 1 : hp_shape_prod(sb, 0, sb->ndim - 2);
    int64_t a_batch = fold ? 1 : hp_shape_prod(sa, 0, sa->ndim - 2);
    if (fold || (b_batch == 1 && !ta && a_batch == batch)) {
        /* One GEMM: a's batch folded into M (rows are contiguous with stride K). */
        int64_t Mt = fold ? M : M * batch;
        if (!fits(Mt, N, K)) return too_big(Mt, N, K);
        cblas_sgemm(CblasRowMajor, TA, TB, (int)Mt, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, 0.0f, C, (int)N);
        return HP_STATUS_OK;
    }
    if (!fits(M, N, K)) return too_big(M, N, K);
    int nd = sc->ndim - 2;
    int64_t sta[HP_MAX_DIMS], stb[HP_MAX_DIMS];
    batch_strides(sa, nd, sta);
    batch_strides(sb, nd, stb);
    bool small = M * N * K < SMALL_GEMM;
#pragma omp parallel for schedule(static) if (small && batch > 1)
    for (int64_t bi = 0; bi < batch; bi++) {
        int64_t oa = 0, ob = 0, rem = bi;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t c = rem % sc->dim[d];
            rem /= sc->dim[d];
            oa += c * sta[d];
            ob += c * stb[d];
        }
        cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, 1.0f, A + oa, (int)lda, B + ob, (int)ldb, 0.0f,
                    C + bi * M * N, (int)N);
    }
    return HP_STATUS_OK;
}

hp_status hp__cpu_linear(const hp_kernel_args *a) {
    const float *X = a->in[0], *W = a->in[1], *bias = a->in[2];
    float *Y = a->out[0];
    const hp_shape *sx = hp__in_shape(a, 0), *sw = hp__in_shape(a, 1);
    int64_t K = sx->dim[sx->ndim - 1], N = sw->dim[0];
    int64_t M = K ? hp_shape_numel(sx) / K : hp_shape_prod(sx, 0, sx->ndim - 1);
    if (M == 0 || N == 0) return HP_STATUS_OK;
    if (!fits(M, N, K)) return too_big(M, N, K);
    float beta = 0.0f;
    if (bias) {
        /* Pre-fill every row with the bias and accumulate the product onto it (beta = 1). */
#pragma omp parallel for schedule(static) if (M * N > 65536)
        for (int64_t r = 0; r < M; r++) memcpy(Y + r * N, bias, sizeof(float) * (size_t)N);
        beta = 1.0f;
    }
    if (K == 0) {
        if (!bias) memset(Y, 0, sizeof(float) * (size_t)(M * N));
        return HP_STATUS_OK;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, X, (int)K, W, (int)K, beta, Y,
                (int)N);
    return HP_STATUS_OK;
}
