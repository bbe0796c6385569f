/*
 * Internal: vectorizable float math for CPU kernels (branch-free, so GCC/Clang vectorize the loops
 * that call them). hp__exp_fast: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, and a
 * degree-6 Taylor polynomial for e^r; relative error below 2e-7 over [-87, 88]; 0 below -87.3,
 * clamped (finite) above 88.7; NaN stays NaN.
 *
 * GCC if-converts the clamps (and so vectorizes the loops) only when it may assume that float
 * compares do not trap: files that include this header compile with -fno-trapping-math (it changes
 * no result; FP exception flags are not used anywhere in the library). Reductions over these calls
 * still need `#pragma omp simd reduction(...)`, since float addition is not reassociated.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#elif defined(__clang__)
/* `omp simd` is a request: without AVX some reductions stay scalar, which is not an error. */
#pragma clang diagnostic ignored "-Wpass-failed"
#endif
#ifndef HP_BACKEND_CPU_K_MATH_H
#define HP_BACKEND_CPU_K_MATH_H

#include <stdint.h>

static inline float hp__exp_fast(float x) {
    const float lo = -87.3f, hi = 88.7f;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    float t = xc * 1.44269504088896341f;
    float kn = (t + 12582912.0f) - 12582912.0f; /* round to nearest integer (1.5 * 2^23 trick) */
    float r = xc - kn * 0.693145751953125f;      /* ln2 split in a high part exact in float ... */
    r = r - kn * 1.428606765330187e-06f;         /* ... and the rest */
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667163f + r * (0.04166666791f +
                                                                          r * (0.00833333377f + r * 0.00138888892f)))));
    union { int32_t i; float f; } s;
    kn = kn == kn ? kn : 0.0f; /* NaN x: p is NaN already; keep the int conversion defined */
    s.i = (((int32_t)kn + 127) << 23) & -(int32_t)(x >= lo); /* 2^kn, or 0 below the range */
    return p * s.f;
}

/* tanh(u) = 1 - 2 / (e^{2u} + 1), absolute error about 1e-7. */
static inline float hp__tanh_fast(float u) { return 1.0f - 2.0f / (hp__exp_fast(2.0f * u) + 1.0f); }

#endif
