/*
 * CPU kernels for MATMUL and LINEAR: OpenBLAS cblas_sgemm (the OpenMP build; it uses the process's
 * thread pool when called outside a parallel region and runs single-threaded inside one).
 *
 * MATMUL folds the batch into the row dimension whenever the layout allows it (b broadcast over
 * a's batch with a not transposed, or the explicit fold attribute), so a (B, T, K) @ (K, N) is one
 * (B*T, K) @ (K, N) GEMM. Otherwise it loops over the (broadcast) batch: batches of small matrices
 * run in parallel with one single-threaded GEMM each, large ones in sequence, each split by rows.
 * Both are team kernels (team.h).
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/team.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <string.h>

/* Matrices smaller than this (M*N*K) in a batch run one per thread instead of one threaded GEMM. */
#define SMALL_GEMM (128 * 128 * 128)
/* Row blocks of a row-split GEMM start at multiples of this (whole register tiles of the kernel). */
#define SPLIT_ALIGN 16

/*
 * A GEMM C (M x N) = op(A) op(B) (+ bias on every row) is computed as `gemm_parts` row blocks of C
 * (SPLIT_ALIGN-row granularity), each one single-threaded cblas_sgemm (OpenBLAS's results depend
 * on its thread count), with the bias rows filled
 * just before the GEMM of their block accumulates onto them. With op(A) = A^T the rows of C are
 * columns of A (offset r0, same lda). Inside a team (team.h) thread t computes block t; outside one,
 * the blocks run on a region of their own. The partition depends only on the shape and the
 * thread count, never on the mode, so a program's results are bitwise the same whether its nodes
 * run in a team or one by one (HyperOffload's numerics guarantee relies on it). For the
 * tall-skinny products of a transformer step (M = tokens; N, K = widths) row blocks match or beat
 * OpenBLAS's own threading, which also splits N and synchronizes between panels.
 */
static int gemm_parts(int64_t M, int64_t N, int64_t K) {
    int nt = hp__team_all() ? omp_get_num_threads() : omp_get_max_threads();
    if (nt <= 1 || M * N * K < SMALL_GEMM || M < (int64_t)nt * 4 * SPLIT_ALIGN) return 1;
    return nt;
}

static void gemm_block(CBLAS_TRANSPOSE TA, CBLAS_TRANSPOSE TB, int64_t M, int64_t N, int64_t K, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float *C, const float *bias, int part, int parts) {
    int64_t blocks = (M + SPLIT_ALIGN - 1) / SPLIT_ALIGN;
    int64_t r0 = parts == 1 ? 0 : blocks * part / parts * SPLIT_ALIGN;
    int64_t r1 = parts == 1 ? M : blocks * (part + 1) / parts * SPLIT_ALIGN;
    r1 = r1 < M ? r1 : M;
    if (r1 <= r0) return;
    if (bias)
        for (int64_t r = r0; r < r1; r++) memcpy(C + r * N, bias, sizeof(float) * (size_t)N);
    const float *Ab = TA == CblasTrans ? A + r0 : A + r0 * lda;
    cblas_sgemm(CblasRowMajor, TA, TB, (int)(r1 - r0), (int)N, (int)K, 1.0f, Ab, (int)lda, B, (int)ldb,
                bias ? 1.0f : 0.0f, C + r0 * N, (int)N);
}

static void gemm(CBLAS_TRANSPOSE TA, CBLAS_TRANSPOSE TB, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *C, const float *bias) {
    int parts = gemm_parts(M, N, K);
    if (hp__team_all()) {
        int t = omp_get_thread_num();
        if (t < parts) gemm_block(TA, TB, M, N, K, A, lda, B, ldb, C, bias, t, parts);
        return;
    }
    if (parts == 1) { /* a small product: one single-threaded call, as inside a team */
#pragma omp parallel num_threads(1)
        {
            omp_set_num_threads(1); /* OpenBLAS sizes its threads by omp_get_max_threads() */
            gemm_block(TA, TB, M, N, K, A, lda, B, ldb, C, bias, 0, 1);
        }
        return;
    }
#pragma omp parallel num_threads(parts)
    for (int t = omp_get_thread_num(); t < parts; t += omp_get_num_threads()) /* all parts, even nested */
        gemm_block(TA, TB, M, N, K, A, lda, B, ldb, C, bias, t, parts);
}

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

/* Element offsets into a and b of batch element bi of the output (broadcast batch dims). */
static void batch_offsets(const hp_shape *sc, int nd, const int64_t *sta, const int64_t *stb, int64_t bi,
                          int64_t *oa, int64_t *ob) {
    int64_t rem = bi;
    *oa = *ob = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t c = rem % sc->dim[d];
        rem /= sc->dim[d];
        *oa += c * sta[d];
        *ob += c * stb[d];
    }
}

typedef struct batched {
    CBLAS_TRANSPOSE TA, TB;
    int64_t M, N, K;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    float *C;
    int64_t batch;
    const hp_shape *sc;
    int nd;
    const int64_t *sta, *stb;
} batched;

/* Work-shared loop over the batch, one cblas_sgemm per matrix. */
static void batched_body(const batched *b) {
#pragma omp for schedule(static) nowait
    for (int64_t bi = 0; bi < b->batch; bi++) {
        int64_t oa, ob;
        batch_offsets(b->sc, b->nd, b->sta, b->stb, bi, &oa, &ob);
        cblas_sgemm(CblasRowMajor, b->TA, b->TB, (int)b->M, (int)b->N, (int)b->K, 1.0f, b->A + oa, (int)b->lda,
                    b->B + ob, (int)b->ldb, 0.0f, b->C + bi * b->M * b->N, (int)b->N);
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
        if (hp__team_leader()) memset(C, 0, sizeof(float) * (size_t)hp_shape_numel(sc));
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
        gemm(TA, TB, Mt, N, K, A, lda, B, ldb, C, NULL);
        return HP_STATUS_OK;
    }
    if (!fits(M, N, K)) return too_big(M, N, K);
    int nd = sc->ndim - 2;
    int64_t sta[HP_MAX_DIMS], stb[HP_MAX_DIMS];
    batch_strides(sa, nd, sta);
    batch_strides(sb, nd, stb);
    bool small = M * N * K < SMALL_GEMM;
    if (!small || batch == 1) { /* in sequence, each GEMM split by rows (gemm) */
        for (int64_t bi = 0; bi < batch; bi++) {
            int64_t oa, ob;
            batch_offsets(sc, nd, sta, stb, bi, &oa, &ob);
            gemm(TA, TB, M, N, K, A + oa, lda, B + ob, ldb, C + bi * M * N, NULL);
        }
        return HP_STATUS_OK;
    }
    /* Small matrices: one single-threaded GEMM each, work-shared over the batch. */
    batched b = {TA, TB, M, N, K, A, lda, B, ldb, C, batch, sc, nd, sta, stb};
    HP_TEAM_RUN(true, batched_body(&b));
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
    if (K == 0) {
        for (int64_t r = 0; r < M && hp__team_leader(); r++) {
            if (bias) memcpy(Y + r * N, bias, sizeof(float) * (size_t)N);
            else memset(Y + r * N, 0, sizeof(float) * (size_t)N);
        }
        return HP_STATUS_OK;
    }
    gemm(CblasNoTrans, CblasTrans, M, N, K, X, K, W, K, Y, bias);
    return HP_STATUS_OK;
}
