#include "gradcheck.h"

#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double run_loss(hp_program *p, hp_tid loss) {
    if (hp_program_run(p) != HP_STATUS_OK) fail_msg("run failed: %s", hp_error_message());
    return *(float *)hp_program_data(p, loss);
}

void hp_gradcheck(const hp_gc_spec *s) {
    hp_graph *g = hp_graph_new();
    hp_tid params[6];
    for (int i = 0; i < s->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        params[i] = hp_param(g, name, s->shapes[i]);
    }
    hp_tid y = s->build(g, params, s->user);
    if (hp_graph_status(g) != HP_STATUS_OK) fail_msg("build failed: %s", hp_graph_error(g));
    hp_tid r = hp_leaf(g, "r", HP_TENSOR_KIND_CONST, HP_DTYPE_F32, hp_graph_tensor(g, y)->shape);
    hp_tid loss = hp_sum(g, hp_mul(g, y, r), -1);
    hp_tid grads[6];
    assert_ok(hp_autodiff(g, loss, params, s->n, grads));
    hp_tid keep[8];
    int nk = 0;
    keep[nk++] = loss;
    for (int i = 0; i < s->n; i++)
        if (grads[i] != HP_TID_NONE) keep[nk++] = grads[i];
    hp_program *p;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = nk;
    assert_ok(hp_program_new(g, &o, &p));
    for (int i = 0; i < s->n; i++)
        hp_test_fill_uniform(hp_program_data(p, params[i]), (size_t)hp_shape_numel(&s->shapes[i]), 100 + (uint64_t)i,
                             s->lo, s->hi);
    hp_test_fill_uniform(hp_program_data(p, r), (size_t)hp_shape_numel(&hp_graph_tensor(g, r)->shape), 7, -1, 1);
    if (s->init) s->init(g, p, s->user);
    run_loss(p, loss);
    float h = s->h ? s->h : 1e-2f, rtol = s->rtol ? s->rtol : 2e-2f, atol = s->atol ? s->atol : 2e-3f;
    float *gxs[6];
    for (int i = 0; i < s->n; i++) { /* snapshot every gradient before any probe reruns the step */
        int64_t n = hp_shape_numel(&s->shapes[i]);
        gxs[i] = calloc((size_t)n, sizeof(float));
        if (grads[i] != HP_TID_NONE) memcpy(gxs[i], hp_program_data(p, grads[i]), sizeof(float) * (size_t)n);
    }
    for (int i = 0; i < s->n; i++) {
        int64_t n = hp_shape_numel(&s->shapes[i]);
        float *x = hp_program_data(p, params[i]);
        float *gx = gxs[i];
        int64_t step = n > 64 ? n / 64 : 1; /* probe at most ~64 elements per param */
        for (int64_t k = 0; k < n; k += step) {
            float x0 = x[k];
            x[k] = x0 + h;
            double fp = run_loss(p, loss);
            x[k] = x0 - h;
            double fm = run_loss(p, loss);
            x[k] = x0;
            double fd = (fp - fm) / (2.0 * h);
            double d = fabs(fd - gx[k]);
            if (!(d <= atol + rtol * fabs(fd)))
                fail_msg("param %d element %lld: analytic %.6g vs finite difference %.6g", i, (long long)k,
                         (double)gx[k], fd);
        }
        free(gx);
    }
    hp_program_free(p);
    hp_graph_free(g);
}
