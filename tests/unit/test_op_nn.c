/*
 * nn operators: EMBEDDING, GELU, LAYERNORM, SOFTMAX, CROSS_ENTROPY, DROPOUT. Finite-difference gradient
 * checks on a few shapes (odd sizes, 1-sized dims, 3-D inputs), forward values against naive double
 * references, and shape/kernel errors.
 */
#include "gradcheck.h"
#include "hp/rng.h"
#include "hp/runtime.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

/* Integer inputs (ids, targets) made in a build callback and filled in init. */
typedef struct int_input {
    hp_shape shape; /* of the ids */
    int64_t range;  /* values in [0, range) */
    hp_tid tid;
} int_input;

static void fill_ints(int32_t *d, int64_t n, int64_t range, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        d[i] = (int32_t)((s >> 33) % (uint64_t)range);
    }
}

static void init_ints(hp_graph *g, hp_program *p, void *user) {
    (void)g;
    int_input *u = user;
    fill_ints(hp_program_data(p, u->tid), hp_shape_numel(&u->shape), u->range, 5);
}


/* ---- EMBEDDING ---- */

static hp_tid b_embedding(hp_graph *g, const hp_tid *p, void *user) {
    int_input *u = user;
    u->tid = hp_input(g, "ids", HP_DTYPE_I32, u->shape);
    return hp_embedding(g, p[0], u->tid);
}

static void test_embedding_grad(void **state) {
    (void)state;
    struct {
        hp_shape table, ids;
    } cases[] = {{HP_SHAPE(7, 5), HP_SHAPE(2, 3)}, {HP_SHAPE(3, 1), HP_SHAPE(9)}, {HP_SHAPE(11, 37), HP_SHAPE(2, 1, 13)}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int_input u = {cases[i].ids, cases[i].table.dim[0], HP_TID_NONE};
        hp_gc_spec s = {.n = 1, .shapes = {cases[i].table}, .lo = -1, .hi = 1, .build = b_embedding,
                        .init = init_ints, .user = &u};
        hp_gradcheck(&s);
    }
}

static void test_embedding_values_and_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid t = hp_param(g, "wte", HP_SHAPE(50, 24));
    hp_tid ids = hp_input(g, "ids", HP_DTYPE_I32, HP_SHAPE(3, 40));
    hp_tid y = hp_embedding(g, t, ids);
    hp_shape want = HP_SHAPE(3, 40, 24);
    assert_true(hp_shape_equal(&hp_graph_tensor(g, y)->shape, &want));
    hp_tid dy = hp_input(g, "dy", HP_DTYPE_F32, HP_SHAPE(3, 40, 24));
    hp_tid in[2] = {dy, ids};
    hp_attrs at = {0};
    at.shape = HP_SHAPE(50, 24);
    hp_tid dt = hp_graph_add_node(g, HP_OP_EMBEDDING_BACKWARD, in, 2, &at);
    hp_tid keep[2] = {y, dt};
    hp_program *p = hp_test_compile(g, keep, 2);
    float *pt = hp_program_data(p, t), *pdy = hp_program_data(p, dy);
    int32_t *pid = hp_program_data(p, ids);
    hp_test_fill_uniform(pt, 50 * 24, 1, -1, 1);
    hp_test_fill_uniform(pdy, 120 * 24, 2, -1, 1);
    fill_ints(pid, 120, 50, 3);
    assert_ok(hp_program_run(p));
    const float *py = hp_program_data(p, y), *pdt = hp_program_data(p, dt);
    static double ref[50 * 24];
    memset(ref, 0, sizeof ref);
    for (int r = 0; r < 120; r++)
        for (int c = 0; c < 24; c++) {
            assert_true(py[r * 24 + c] == pt[pid[r] * 24 + c]);
            ref[pid[r] * 24 + c] += pdy[r * 24 + c];
        }
    for (int k = 0; k < 50 * 24; k++) assert_close(pdt[k], ref[k], 1e-5, 1e-6);
    /* an id outside [0, V) is a kernel error naming the id and its position */
    pid[77] = 50;
    assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("id 50 at position 77");
    pid[77] = -3;
    assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("id -3");
    hp_program_free(p);
    hp_graph_free(g);

    g = hp_graph_new();
    t = hp_param(g, "wte", HP_SHAPE(50, 24));
    hp_tid fids = hp_input(g, "fids", HP_DTYPE_F32, HP_SHAPE(4));
    assert_int_equal(hp_embedding(g, t, fids), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("ids must be i32");
    hp_graph_free(g);
    g = hp_graph_new();
    t = hp_param(g, "wte", HP_SHAPE(50, 24, 2));
    ids = hp_input(g, "ids", HP_DTYPE_I32, HP_SHAPE(4));
    assert_int_equal(hp_embedding(g, t, ids), HP_TID_NONE);
    hp_test_assert_error_contains("[50, 24, 2]");
    hp_graph_free(g);
}

/* ---- GELU ---- */

static hp_tid b_gelu(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_gelu(g, p[0]); }

static void test_gelu(void **state) {
    (void)state;
    hp_shape shapes[3] = {HP_SHAPE(4, 7), HP_SHAPE(1, 1, 3), HP_SHAPE(2, 3, 5)};
    for (int i = 0; i < 3; i++) {
        hp_gc_spec s = {.n = 1, .shapes = {shapes[i]}, .lo = -3, .hi = 3, .build = b_gelu};
        hp_gradcheck(&s);
    }
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(1001));
    hp_tid y = hp_gelu(g, x);
    hp_program *p = hp_test_compile(g, &y, 1);
    float *px = hp_program_data(p, x);
    for (int i = 0; i < 1001; i++) px[i] = -10.0f + 0.02f * (float)i;
    assert_ok(hp_program_run(p));
    const float *py = hp_program_data(p, y);
    for (int i = 0; i < 1001; i++) {
        double v = px[i], ref = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        assert_close(py[i], ref, 1e-5, 1e-6);
    }
    hp_program_free(p);
    hp_graph_free(g);
}

/* ---- LAYERNORM ---- */

static hp_tid b_layernorm(hp_graph *g, const hp_tid *p, void *u) {
    (void)u;
    return hp_layernorm(g, p[0], p[1], p[2], 1e-5f);
}

static void test_layernorm_grad(void **state) {
    (void)state;
    int64_t cs[3] = {7, 6, 33};
    hp_shape xs[3] = {HP_SHAPE(1, 7), HP_SHAPE(3, 2, 6), HP_SHAPE(5, 33)};
    for (int i = 0; i < 3; i++) {
        hp_gc_spec s = {.n = 3, .shapes = {xs[i], HP_SHAPE(cs[i]), HP_SHAPE(cs[i])}, .lo = -1, .hi = 1,
                        .build = b_layernorm};
        hp_gradcheck(&s);
    }
}

static void test_layernorm_values_and_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(2, 5, 64));
    hp_tid w = hp_param(g, "w", HP_SHAPE(64)), b = hp_param(g, "b", HP_SHAPE(64));
    hp_tid y = hp_layernorm(g, x, w, b, 1e-5f);
    const hp_node *n = hp_graph_node(g, hp_graph_n_nodes(g) - 1);
    hp_tid mean = n->out[1], rstd = n->out[2];
    hp_shape want = HP_SHAPE(2, 5);
    assert_true(hp_shape_equal(&hp_graph_tensor(g, mean)->shape, &want));
    hp_tid keep[3] = {y, mean, rstd};
    hp_program *p = hp_test_compile(g, keep, 3);
    float *px = hp_program_data(p, x), *pw = hp_program_data(p, w), *pb = hp_program_data(p, b);
    hp_test_fill_uniform(px, 640, 9, -3, 5);
    for (int i = 0; i < 64; i++) pw[i] = 1.0f, pb[i] = 0.0f;
    assert_ok(hp_program_run(p));
    const float *py = hp_program_data(p, y), *pm = hp_program_data(p, mean), *pr = hp_program_data(p, rstd);
    for (int r = 0; r < 10; r++) {
        double m = 0, v = 0, xm = 0, xv = 0;
        for (int i = 0; i < 64; i++) m += py[r * 64 + i], xm += px[r * 64 + i];
        m /= 64, xm /= 64;
        for (int i = 0; i < 64; i++) v += (py[r * 64 + i] - m) * (py[r * 64 + i] - m);
        for (int i = 0; i < 64; i++) xv += (px[r * 64 + i] - xm) * (px[r * 64 + i] - xm);
        v /= 64, xv /= 64;
        assert_close(m, 0.0, 0, 1e-5);
        assert_close(v, 1.0, 1e-4, 0); /* var + eps in the denominator */
        assert_close(pm[r], xm, 1e-5, 1e-6);
        assert_close(pr[r], 1.0 / sqrt(xv + 1e-5), 1e-5, 0);
    }
    hp_program_free(p);
    hp_graph_free(g);

    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(4, 8));
    w = hp_param(g, "w", HP_SHAPE(7));
    b = hp_param(g, "b", HP_SHAPE(8));
    assert_int_equal(hp_layernorm(g, x, w, b, 1e-5f), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("gamma must be (C) = [8] for x [4, 8], is [7]");
    hp_graph_free(g);
}

/* ---- SOFTMAX ---- */

static hp_tid b_softmax(hp_graph *g, const hp_tid *p, void *u) { (void)u; return hp_softmax(g, p[0]); }

static void test_softmax(void **state) {
    (void)state;
    hp_shape shapes[4] = {HP_SHAPE(3, 7), HP_SHAPE(2, 1, 5), HP_SHAPE(4, 1), HP_SHAPE(2, 2, 9)};
    for (int i = 0; i < 4; i++) {
        hp_gc_spec s = {.n = 1, .shapes = {shapes[i]}, .lo = -2, .hi = 2, .build = b_softmax};
        hp_gradcheck(&s);
    }
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(5, 1000));
    hp_tid y = hp_softmax(g, x);
    hp_program *p = hp_test_compile(g, &y, 1);
    float *px = hp_program_data(p, x);
    hp_test_fill_uniform(px, 5000, 4, -30, 30);
    assert_ok(hp_program_run(p));
    const float *py = hp_program_data(p, y);
    for (int r = 0; r < 5; r++) {
        double m = -INFINITY, s = 0, t = 0;
        for (int i = 0; i < 1000; i++) m = fmax(m, px[r * 1000 + i]);
        for (int i = 0; i < 1000; i++) s += exp(px[r * 1000 + i] - m);
        for (int i = 0; i < 1000; i++) {
            assert_close(py[r * 1000 + i], exp(px[r * 1000 + i] - m) / s, 1e-5, 1e-9);
            t += py[r * 1000 + i];
        }
        assert_close(t, 1.0, 1e-5, 0);
    }
    hp_program_free(p);
    hp_graph_free(g);
    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_I32, HP_SHAPE(5, 3));
    assert_int_equal(hp_softmax(g, x), HP_TID_NONE);
    hp_test_assert_error_contains("i32 [5, 3]");
    hp_graph_free(g);
}

/* ---- CROSS_ENTROPY ---- */

static hp_tid b_xent(hp_graph *g, const hp_tid *p, void *user) {
    int_input *u = user;
    u->tid = hp_input(g, "targets", HP_DTYPE_I32, u->shape);
    return hp_cross_entropy(g, p[0], u->tid);
}

static void test_cross_entropy_grad(void **state) {
    (void)state;
    struct {
        hp_shape logits, targets;
    } cases[] = {{HP_SHAPE(2, 3, 11), HP_SHAPE(2, 3)}, {HP_SHAPE(4, 1), HP_SHAPE(4)}, {HP_SHAPE(1, 2000), HP_SHAPE(1)},
                 {HP_SHAPE(5, 7), HP_SHAPE(5)}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const hp_shape *l = &cases[i].logits;
        int_input u = {cases[i].targets, l->dim[l->ndim - 1], HP_TID_NONE};
        hp_gc_spec s = {.n = 1, .shapes = {*l}, .lo = -2, .hi = 2, .build = b_xent, .init = init_ints, .user = &u};
        hp_gradcheck(&s);
    }
}

/* Reference loss in double. */
static double ref_xent(const float *x, const int32_t *t, int64_t rows, int64_t v) {
    double sum = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * v;
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < v; i++) m = fmax(m, xr[i]);
        for (int64_t i = 0; i < v; i++) s += exp(xr[i] - m);
        sum += log(s) + m - xr[t[r]];
    }
    return sum / (double)rows;
}

static void test_cross_entropy_values_and_errors(void **state) {
    (void)state;
    const int64_t rows = 6, v = 50257;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "logits", HP_SHAPE(2, 3, 50257));
    hp_tid t = hp_input(g, "targets", HP_DTYPE_I32, HP_SHAPE(2, 3));
    hp_tid loss = hp_cross_entropy(g, x, t);
    hp_tid grad;
    assert_ok(hp_autodiff(g, loss, &x, 1, &grad));
    hp_tid keep[2] = {loss, grad};
    hp_program *p = hp_test_compile(g, keep, 2);
    float *px = hp_program_data(p, x);
    int32_t *pt = hp_program_data(p, t);
    fill_ints(pt, rows, v, 11);
    pt[0] = 0, pt[5] = (int32_t)v - 1;
    /* uniform logits: loss = log V, gradient (1/V - onehot) / N */
    for (int64_t i = 0; i < rows * v; i++) px[i] = 0.25f;
    assert_ok(hp_program_run(p));
    assert_close(*(float *)hp_program_data(p, loss), log((double)v), 1e-6, 0);
    const float *pg = hp_program_data(p, grad);
    for (int64_t r = 0; r < rows; r++) {
        assert_close(pg[r * v + (pt[r] + 1) % v], 1.0 / (double)v / (double)rows, 1e-5, 0);
        assert_close(pg[r * v + pt[r]], (1.0 / (double)v - 1.0) / (double)rows, 1e-5, 0);
    }
    /* random logits of a wide range against the double reference */
    hp_test_fill_uniform(px, (size_t)(rows * v), 12, -20, 20);
    assert_ok(hp_program_run(p));
    assert_close(*(float *)hp_program_data(p, loss), ref_xent(px, pt, rows, v), 1e-6, 0);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = px + r * v;
        double m = -INFINITY, s = 0, gsum = 0;
        for (int64_t i = 0; i < v; i++) m = fmax(m, xr[i]);
        for (int64_t i = 0; i < v; i++) s += exp(xr[i] - m);
        for (int64_t i = 0; i < v; i += 97) {
            double ref = (exp(xr[i] - m) / s - (i == pt[r])) / (double)rows;
            assert_close(pg[r * v + i], ref, 1e-5, 1e-12);
        }
        for (int64_t i = 0; i < v; i++) gsum += pg[r * v + i];
        assert_close(gsum, 0.0, 0, 1e-6); /* softmax sums to 1, minus the one-hot */
    }
    /* a target outside [0, V) is a kernel error naming it */
    pt[4] = (int32_t)v;
    assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("target 50257 at position 4");
    hp_program_free(p);
    hp_graph_free(g);

    g = hp_graph_new();
    x = hp_param(g, "logits", HP_SHAPE(4, 10));
    t = hp_input(g, "targets", HP_DTYPE_I32, HP_SHAPE(5));
    assert_int_equal(hp_cross_entropy(g, x, t), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("targets [5] must match the leading dims of logits [4, 10]");
    hp_graph_free(g);
}

/* ---- DROPOUT ---- */

#define DROP_KEY 0x5eedULL

/* y = dropout(p[0]) at step 3; the harness's loss sums y * r, so the mask is fixed across the
 * finite-difference runs (same key and step) and the check sees the masked, scaled identity. */
static hp_tid b_dropout(hp_graph *g, const hp_tid *p, void *user) {
    hp_tid *step = user;
    *step = hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    return hp_dropout(g, p[0], *step, 0.3f, DROP_KEY);
}

static void init_step(hp_graph *g, hp_program *p, void *user) {
    (void)g;
    *(float *)hp_program_data(p, *(hp_tid *)user) = 3.0f;
}

static void test_dropout_grad(void **state) {
    (void)state;
    hp_shape shapes[3] = {HP_SHAPE(4, 7), HP_SHAPE(1, 1, 3), HP_SHAPE(2, 3, 5)};
    for (int i = 0; i < 3; i++) {
        hp_tid step = HP_TID_NONE;
        hp_gc_spec s = {.n = 1, .shapes = {shapes[i]}, .lo = -2, .hi = 2, .build = b_dropout, .init = init_step,
                        .user = &step};
        hp_gradcheck(&s);
    }
}

/* A compiled y = dropout(x, step) on a (rows, cols) f32 input. */
typedef struct drop_prog {
    hp_graph *g;
    hp_program *p;
    hp_tid x, step, y;
} drop_prog;

static drop_prog drop_build(int64_t rows, int64_t cols, float prob, uint64_t key) {
    drop_prog d;
    d.g = hp_graph_new();
    d.x = hp_input(d.g, "x", HP_DTYPE_F32, HP_SHAPE(rows, cols));
    d.step = hp_input(d.g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    d.y = hp_dropout(d.g, d.x, d.step, prob, key);
    d.p = hp_test_compile(d.g, &d.y, 1);
    return d;
}

static void drop_free(drop_prog *d) {
    hp_program_free(d->p);
    hp_graph_free(d->g);
}

/* Fraction of positions where the zero patterns of a and b (n elements) differ. */
static double mask_diff(const float *a, const float *b, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += (a[i] == 0.0f) != (b[i] == 0.0f);
    return (double)k / (double)n;
}

static void test_dropout_mask(void **state) {
    (void)state;
    const int64_t rows = 512, cols = 1024, n = rows * cols;
    const float prob = 0.25f, scale = 1.0f / (1.0f - prob);
    drop_prog d = drop_build(rows, cols, prob, DROP_KEY);
    float *x = hp_program_data(d.p, d.x);
    hp_test_fill_uniform(x, (size_t)n, 3, 0.5f, 2.0f); /* never zero */
    float *y0 = malloc((size_t)n * sizeof *y0);
    *(float *)hp_program_data(d.p, d.step) = 5.0f;
    assert_ok(hp_program_run(d.p));
    const float *y = hp_program_data(d.p, d.y);
    memcpy(y0, y, (size_t)n * sizeof *y0);
    /* every element is the documented draw: dropped where uniform(u64(key, step), e) < p, else
     * x / (1 - p) exactly; the kept fraction is 1 - p within 5 standard deviations */
    uint64_t k5 = hp_rng_u64(DROP_KEY, 5);
    int64_t kept = 0;
    for (int64_t e = 0; e < n; e++) {
        bool drop = hp_rng_uniform(k5, (uint64_t)e) < prob;
        float want = drop ? 0.0f : x[e] * scale;
        if (y0[e] != want) fail_msg("element %lld: %.9g, want %.9g", (long long)e, (double)y0[e], (double)want);
        kept += !drop;
    }
    double sd = sqrt(prob * (1.0 - prob) / (double)n);
    assert_close((double)kept / (double)n, 1.0 - prob, 0, 5 * sd);
    /* masks differ across elements: row 0 against row 1, column 0 against column 1 */
    assert_true(mask_diff(y0, y0 + cols, cols) > 0.3);
    float c0[512], c1[512];
    for (int64_t r = 0; r < rows; r++) c0[r] = y0[r * cols], c1[r] = y0[r * cols + 1];
    assert_true(mask_diff(c0, c1, rows) > 0.3);
    /* the same step gives the same mask; the next step another (2 p (1 - p) = 0.375 differ) */
    assert_ok(hp_program_run(d.p));
    assert_memory_equal(hp_program_data(d.p, d.y), y0, (size_t)n * sizeof *y0);
    *(float *)hp_program_data(d.p, d.step) = 6.0f;
    assert_ok(hp_program_run(d.p));
    assert_close(mask_diff(hp_program_data(d.p, d.y), y0, n), 2 * prob * (1 - prob), 0, 0.01);
    /* a negative step is a kernel error naming it */
    *(float *)hp_program_data(d.p, d.step) = -1.0f;
    assert_int_equal(hp_program_run(d.p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("step -1");
    drop_free(&d);

    /* another key (tensor) at the same step: another mask */
    drop_prog o = drop_build(rows, cols, prob, DROP_KEY + 1);
    hp_test_fill_uniform(hp_program_data(o.p, o.x), (size_t)n, 3, 0.5f, 2.0f);
    *(float *)hp_program_data(o.p, o.step) = 5.0f;
    assert_ok(hp_program_run(o.p));
    assert_close(mask_diff(hp_program_data(o.p, o.y), y0, n), 2 * prob * (1 - prob), 0, 0.01);
    drop_free(&o);
    free(y0);
}

/* A block of the global tensor, with its global offsets in the attributes (what the sharding rule
 * gives each rank), drops exactly the elements the whole tensor drops there. */
static void test_dropout_block_offsets(void **state) {
    (void)state;
    const int64_t R = 6, C = 10, r0 = 2, c0 = 3, br = 3, bc = 5;
    drop_prog whole = drop_build(R, C, 0.5f, DROP_KEY);
    float *x = hp_program_data(whole.p, whole.x);
    hp_test_fill_uniform(x, (size_t)(R * C), 9, 1.0f, 2.0f);
    *(float *)hp_program_data(whole.p, whole.step) = 2.0f;
    assert_ok(hp_program_run(whole.p));
    const float *yw = hp_program_data(whole.p, whole.y);

    hp_graph *g = hp_graph_new();
    hp_tid in[2] = {hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(br, bc)), hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR)};
    hp_attrs at = {.i = {(int64_t)DROP_KEY, r0, c0}, .f = {0.5f}, .shape = HP_SHAPE(R, C)};
    hp_tid y = hp_graph_add_node(g, HP_OP_DROPOUT, in, 2, &at);
    hp_program *p = hp_test_compile(g, &y, 1);
    float *xb = hp_program_data(p, in[0]);
    for (int64_t r = 0; r < br; r++)
        for (int64_t c = 0; c < bc; c++) xb[r * bc + c] = x[(r0 + r) * C + c0 + c];
    *(float *)hp_program_data(p, in[1]) = 2.0f;
    assert_ok(hp_program_run(p));
    const float *yb = hp_program_data(p, y);
    int dropped = 0;
    for (int64_t r = 0; r < br; r++)
        for (int64_t c = 0; c < bc; c++) {
            assert_true(yb[r * bc + c] == yw[(r0 + r) * C + c0 + c]);
            dropped += yb[r * bc + c] == 0.0f;
        }
    assert_true(dropped > 0 && dropped < br * bc); /* the comparison saw both kinds */
    hp_program_free(p);
    hp_graph_free(g);

    /* a block reaching outside the global shape is a shape error naming both */
    g = hp_graph_new();
    in[0] = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(br, bc));
    in[1] = hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    at.i[1] = R - 1;
    assert_int_equal(hp_graph_add_node(g, HP_OP_DROPOUT, in, 2, &at), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("outside the global shape [6, 10]");
    hp_graph_free(g);
    drop_free(&whole);
}

/* The step is an f32 count: only integers in [0, 2^24) give distinct masks, others are refused. */
static void test_dropout_step_range(void **state) {
    (void)state;
    drop_prog d = drop_build(4, 8, 0.5f, DROP_KEY);
    hp_test_fill_uniform(hp_program_data(d.p, d.x), 32, 3, 0.5f, 2.0f);
    float *step = hp_program_data(d.p, d.step);
    *step = 16777215.0f;
    assert_ok(hp_program_run(d.p));
    const float bad[] = {16777216.0f, 2.5f, -1.0f};
    for (int k = 0; k < 3; k++) {
        *step = bad[k];
        assert_int_equal(hp_program_run(d.p), HP_STATUS_INVALID_ARGUMENT);
        hp_test_assert_error_contains("is not an integer in [0, 2^24)");
    }
    drop_free(&d);
}

static void test_dropout_builder(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(4, 3));
    hp_tid step = hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    /* p = 0 adds nothing */
    assert_int_equal(hp_dropout(g, x, step, 0.0f, 1), x);
    assert_int_equal(hp_graph_n_nodes(g), 0);
    /* a step that is not a scalar is a shape error */
    hp_tid bad = hp_input(g, "steps", HP_DTYPE_F32, HP_SHAPE(2));
    assert_int_equal(hp_dropout(g, x, bad, 0.1f, 1), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("step must be an f32 scalar");
    hp_graph_free(g);
    /* p outside [0, 1) */
    g = hp_graph_new();
    x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(4, 3));
    step = hp_input(g, "step", HP_DTYPE_F32, HP_SHAPE_SCALAR);
    assert_int_equal(hp_dropout(g, x, step, 1.0f, 1), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("dropout: p 1 must be in [0, 1)");
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_grad),
        cmocka_unit_test(test_embedding_values_and_errors),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_layernorm_grad),
        cmocka_unit_test(test_layernorm_values_and_errors),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_cross_entropy_grad),
        cmocka_unit_test(test_cross_entropy_values_and_errors),
        cmocka_unit_test(test_dropout_grad),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_dropout_block_offsets),
        cmocka_unit_test(test_dropout_builder),
        cmocka_unit_test(test_dropout_step_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
