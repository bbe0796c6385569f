/* CPU kernels for GELU (tanh approximation) and its backward. */
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
        float t = hp__tanh_fast(GELU_S * (v + GELU_A * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
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
        float t = hp__tanh_fast(GELU_S * (v + GELU_A * v * v * v));
        float du = GELU_S * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
    return HP_STATUS_OK;
}
