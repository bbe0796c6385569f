/*
 * CPU kernel of ATTENTION_MERGE (src/ops/attention_ring.c): the FlashAttention recurrence across
 * key blocks (Milakov and Gimelshein 2018, "Online normalizer calculation for softmax"; Dao et al.
 * 2022): lse = logaddexp(lse_a, lse_b), o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b, per row
 * and head. A row whose lse is -inf on both sides (it sees no key) keeps o = 0 and lse = -inf.
 */
#include "backend/cpu/cpu.h"

#include <math.h>

hp_status hp__cpu_attention_merge(const hp_kernel_args *a) {
    const hp_shape *q = hp__in_shape(a, 0);
    int64_t B = q->dim[0], T = q->dim[1], C = q->dim[2], H = a->node->attr.i[0], D = C / H;
    const float *oa = a->in[0], *la = a->in[1], *ob = a->in[2], *lb = a->in[3];
    float *o = a->out[0], *l = a->out[1];
#pragma omp parallel for schedule(static) if (B * T * C > 65536)
    for (int64_t bt = 0; bt < B * T; bt++) {
        int64_t b = bt / T, t = bt % T;
        for (int64_t h = 0; h < H; h++) {
            size_t li = (size_t)((b * H + h) * T + t), oi = (size_t)(bt * C + h * D);
            float x = la[li], y = lb[li], m = x > y ? x : y;
            if (m == -INFINITY) {
                l[li] = -INFINITY;
                for (int64_t e = 0; e < D; e++) o[oi + e] = 0.0f;
                continue;
            }
            float wa = expf(x - m), wb = expf(y - m), s = wa + wb;
            l[li] = m + logf(s);
            wa /= s;
            wb /= s;
            for (int64_t e = 0; e < D; e++) o[oi + e] = wa * oa[oi + e] + wb * ob[oi + e];
        }
    }
    return HP_STATUS_OK;
}
