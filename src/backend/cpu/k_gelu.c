/* CPU kernels for GELU (tanh approximation, written through sigmoid(2u)) and its backward. Both are
 * team kernels (team.h). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/k_math.h"
#include "backend/cpu/team.h"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static void gelu_body(const float *x, float *y, int64_t n) {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        /* 0.5 (1 + tanh(u)) = sigmoid(2u): one exp and one division. */
        y[i] = v / (1.0f + hp__exp_fast(-2.0f * GELU_S * (v + GELU_A * v * v * v)));
    }
}

hp_status hp__cpu_gelu(const hp_kernel_args *a) {
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
    HP_TEAM_RUN(n > 32768, gelu_body(a->in[0], a->out[0], n));
    return HP_STATUS_OK;
}

static void gelu_backward_body(const float *dy, const float *x, float *dx, int64_t n) {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        /* With s = sigmoid(2u) = 0.5 (1 + tanh(u)): 1 - tanh(u)^2 = 4 s (1 - s), so
         * gelu'(x) = s + 0.5 x 4 s (1 - s) u' = s (1 + 2 x (1 - s) u'). */
        float s = 1.0f / (1.0f + hp__exp_fast(-2.0f * GELU_S * (v + GELU_A * v * v * v)));
        float du = GELU_S * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * s * (1.0f + 2.0f * v * (1.0f - s) * du);
    }
}

hp_status hp__cpu_gelu_backward(const hp_kernel_args *a) {
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
    HP_TEAM_RUN(n > 32768, gelu_backward_body(a->in[0], a->in[1], a->out[0], n));
    return HP_STATUS_OK;
}
