/*
 * CPU kernels for GRPO_LOSS and GRPO_LOSS_BACKWARD (src/ops/grpo.c has the formulas). Rows run in
 * order on one thread: RL batches are small (G samples of a few prompts) and the per-row terms are
 * summed in row order, so the loss is the same for any thread count. Log-softmax in double.
 */
#include "backend/cpu/cpu.h"

#include <math.h>

typedef struct grpo_row {
    double logp, ratio, k3_grad; /* log-prob of the token, exp(logp - old), 1 - exp(ref - logp) */
    double obj;                  /* min(ratio A, clip(ratio) A) - beta k3 */
    bool unclipped;              /* the min takes ratio A: the surrogate's gradient flows */
} grpo_row;

static hp_status grpo_token(const hp_kernel_args *a, int base, int64_t r, int64_t v, grpo_row *o) {
    const float *x = (const float *)a->in[base] + r * v;
    const int32_t tok = ((const int32_t *)a->in[base + 1])[r];
    if (tok < 0 || tok >= v)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "grpo_loss: token %d at row %lld is outside [0, %lld)", (int)tok,
                        (long long)r, (long long)v);
    const double old = ((const float *)a->in[base + 2])[r], ref = ((const float *)a->in[base + 3])[r];
    const double adv = ((const float *)a->in[base + 4])[r];
    const double eps = a->node->attr.f[0], beta = a->node->attr.f[1];
    double m = -INFINITY, s = 0.0;
    for (int64_t i = 0; i < v; i++) m = x[i] > m ? x[i] : m;
    for (int64_t i = 0; i < v; i++) s += exp((double)x[i] - m);
    o->logp = (double)x[tok] - m - log(s);
    o->ratio = exp(o->logp - old);
    const double clipped = o->ratio < 1.0 - eps ? 1.0 - eps : o->ratio > 1.0 + eps ? 1.0 + eps : o->ratio;
    const double s1 = o->ratio * adv, s2 = clipped * adv;
    o->unclipped = s1 <= s2;
    const double d = ref - o->logp;
    o->obj = (o->unclipped ? s1 : s2) - beta * (exp(d) - d - 1.0);
    o->k3_grad = 1.0 - exp(d);
    return HP_STATUS_OK;
}

hp_status hp__cpu_grpo_loss(const hp_kernel_args *a) {
    const hp_shape *xs = hp__in_shape(a, 0);
    const int64_t v = xs->dim[xs->ndim - 1], rows = hp_shape_numel(xs) / v;
    const float *w = a->in[5];
    double sum = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        if (w[r] == 0.0f) continue; /* prompt and padding rows: nothing to compute */
        grpo_row t;
        HP_CHECK(grpo_token(a, 0, r, v, &t));
        sum -= (double)w[r] * t.obj;
    }
    *(float *)a->out[0] = (float)sum;
    return HP_STATUS_OK;
}

hp_status hp__cpu_grpo_loss_backward(const hp_kernel_args *a) {
    const float dloss = *(const float *)a->in[0];
    const hp_shape *xs = hp__in_shape(a, 1);
    const int64_t v = xs->dim[xs->ndim - 1], rows = hp_shape_numel(xs) / v;
    const float *w = a->in[6];
    const float *x = a->in[1];
    float *dx = a->out[0];
    const double beta = a->node->attr.f[1];
    for (int64_t r = 0; r < rows; r++) {
        float *dr = dx + r * v;
        if (w[r] == 0.0f) {
            for (int64_t i = 0; i < v; i++) dr[i] = 0.0f;
            continue;
        }
        grpo_row t;
        HP_CHECK(grpo_token(a, 1, r, v, &t));
        const double adv = ((const float *)a->in[5])[r];
        /* dloss/dlogp, then through log-softmax: dlogp/dx_i = onehot_i - softmax_i */
        const double g = -(double)w[r] * ((t.unclipped ? t.ratio * adv : 0.0) - beta * t.k3_grad) * dloss;
        const float *xr = x + r * v;
        const double lse = t.logp - (double)xr[((const int32_t *)a->in[2])[r]]; /* -log sum exp */
        for (int64_t i = 0; i < v; i++) dr[i] = (float)(-g * exp((double)xr[i] + lse));
        dr[((const int32_t *)a->in[2])[r]] += (float)g;
    }
    return HP_STATUS_OK;
}
