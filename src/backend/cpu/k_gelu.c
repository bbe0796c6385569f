/* CPU kernels for GELU (tanh approximation, written through sigmoid(2u)) and its backward. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/k_math.h"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

hp_status hp__cpu_gelu(const hp_kernel_args *a) {
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        /* 0.5 (1 + tanh(u)) = sigmoid(2u): one exp and one division. */
        y[i] = v / (1.0f + hp__exp_fast(-2.0f * GELU_S * (v + GELU_A * v * v * v)));
    }
    return HP_STATUS_OK;
}

hp_status hp__cpu_gelu_backward(const hp_kernel_args *a) {
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        /* With s = sigmoid(2u) = 0.5 (1 + tanh(u)): 1 - tanh(u)^2 = 4 s (1 - s), so
         * gelu'(x) = s + 0.5 x 4 s (1 - s) u' = s (1 + 2 x (1 - s) u'). */
        float s = 1.0f / (1.0f + hp__exp_fast(-2.0f * GELU_S * (v + GELU_A * v * v * v)));
        float du = GELU_S * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * s * (1.0f + 2.0f * v * (1.0f - s) * du);
    }
    return HP_STATUS_OK;
}
