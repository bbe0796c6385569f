/*
 * Finite-difference gradient checks for operators and composed graphs.
 *
 * The caller builds a graph from n f32 PARAM inputs (created by the harness with the given shapes
 * and filled with uniform values in [lo, hi)) plus any extra inputs it makes itself; the harness
 * forms loss = sum(y * r) with r a fixed random tensor, runs autodiff, and compares every analytic
 * gradient element with the central difference (f(x+h) - f(x-h)) / 2h computed in double-checked
 * f32 runs. Fails the cmocka test with the worst element on mismatch.
 */
#ifndef HP_GRADCHECK_H
#define HP_GRADCHECK_H

#include "hp/ir.h"
#include "hp/ops.h"
#include "hp/runtime.h"

/* Builds y from the harness's params; may add inputs (fill them in `init`). Returns y. */
typedef hp_tid (*hp_gc_build)(hp_graph *g, const hp_tid *params, void *user);
/* Optional: fills non-param inputs after the program is built (e.g. integer ids). */
typedef void (*hp_gc_init)(hp_graph *g, hp_program *p, void *user);

typedef struct hp_gc_spec {
    int n;                      /* number of params */
    hp_shape shapes[6];
    float lo, hi;               /* param value range */
    float h;                    /* finite-difference step (default 1e-2 when 0) */
    float rtol, atol;           /* tolerances (default 2e-2, 2e-3 when 0) */
    hp_gc_build build;
    hp_gc_init init;
    void *user;
} hp_gc_spec;

/* Runs the check; fails the current cmocka test on mismatch. */
void hp_gradcheck(const hp_gc_spec *spec);

#endif
