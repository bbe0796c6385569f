/* CPU kernels for SWIGLU and SWIGLU_BACKWARD (elementwise; team kernels). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/k_math.h"
#include "backend/cpu/team.h"

static void swiglu_body(const float *gate, const float *up, float *y, int64_t n) {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + hp__exp_fast(-g)) * up[i];
    }
}

hp_status hp__cpu_swiglu(const hp_kernel_args *a) {
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
    HP_TEAM_RUN(n > 32768, swiglu_body(a->in[0], a->in[1], a->out[0], n));
    return HP_STATUS_OK;
}

static void swiglu_backward_body(const float *dy, const float *gate, const float *up, float *dg, float *du,
                                 int64_t n) {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], s = 1.0f / (1.0f + hp__exp_fast(-g));
        du[i] = dy[i] * g * s;
        dg[i] = dy[i] * up[i] * s * (1.0f + g * (1.0f - s));
    }
}

hp_status hp__cpu_swiglu_backward(const hp_kernel_args *a) {
    int64_t n = hp_shape_numel(hp__out_shape(a, 0));
    HP_TEAM_RUN(n > 32768, swiglu_backward_body(a->in[0], a->in[1], a->in[2], a->out[0], a->out[1], n));
    return HP_STATUS_OK;
}
