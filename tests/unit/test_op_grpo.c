/* GRPO_LOSS: values against a double reference, finite-difference gradients (clipped and unclipped
 * tokens, both signs of advantage, with and without the KL term), masking, shape errors. */
#include "gradcheck.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

#define ROWS 8
#define V 5

typedef struct grpo_case {
    float eps, beta;
    hp_tid logits, tokens, old, ref, adv, w;
} grpo_case;

static const int32_t k_tokens[ROWS] = {0, 4, 2, 1, 3, 3, 0, 2};
/* log-ratio offsets: inside the clip range, beyond it on both sides */
static const float k_delta[ROWS] = {0.05f, -0.5f, 0.6f, -0.08f, 0.4f, -0.3f, 0.0f, 0.1f};
static const float k_adv[ROWS] = {1.0f, 1.0f, 1.0f, -1.0f, -1.0f, -0.5f, 0.7f, 2.0f};
static const float k_w[ROWS] = {0.25f, 0.25f, 0.25f, 0.25f, 0.5f, 0.5f, 0.0f, 0.125f};

static double logp_of(const float *x, int32_t tok) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = fmax(m, x[i]);
    for (int i = 0; i < V; i++) s += exp(x[i] - m);
    return x[tok] - m - log(s);
}

static double ref_loss(const float *x, const grpo_case *c, const float *old, const float *ref) {
    double sum = 0;
    for (int r = 0; r < ROWS; r++) {
        double lp = logp_of(x + r * V, k_tokens[r]), ratio = exp(lp - old[r]);
        double cl = fmin(fmax(ratio, 1.0 - c->eps), 1.0 + c->eps);
        double d = ref[r] - lp;
        sum -= k_w[r] * (fmin(ratio * k_adv[r], cl * k_adv[r]) - c->beta * (exp(d) - d - 1.0));
    }
    return sum;
}

static hp_tid b_grpo(hp_graph *g, const hp_tid *p, void *user) {
    grpo_case *c = user;
    c->logits = p[0];
    c->tokens = hp_input(g, "tokens", HP_DTYPE_I32, HP_SHAPE(2, 4));
    c->old = hp_input(g, "old_logp", HP_DTYPE_F32, HP_SHAPE(2, 4));
    c->ref = hp_input(g, "ref_logp", HP_DTYPE_F32, HP_SHAPE(2, 4));
    c->adv = hp_input(g, "adv", HP_DTYPE_F32, HP_SHAPE(2, 4));
    c->w = hp_input(g, "weight", HP_DTYPE_F32, HP_SHAPE(2, 4));
    return hp_grpo_loss(g, c->logits, c->tokens, c->old, c->ref, c->adv, c->w, c->eps, c->beta);
}

/* old = logp - delta (so log ratio = delta), ref = logp + 0.3 delta. */
static void fill_inputs(hp_program *p, const grpo_case *c, float *old, float *ref) {
    const float *x = hp_program_data(p, c->logits);
    for (int r = 0; r < ROWS; r++) {
        double lp = logp_of(x + r * V, k_tokens[r]);
        old[r] = (float)(lp - k_delta[r]);
        ref[r] = (float)(lp + 0.3 * k_delta[r] - 0.1);
    }
    memcpy(hp_program_data(p, c->tokens), k_tokens, sizeof k_tokens);
    memcpy(hp_program_data(p, c->old), old, sizeof(float) * ROWS);
    memcpy(hp_program_data(p, c->ref), ref, sizeof(float) * ROWS);
    memcpy(hp_program_data(p, c->adv), k_adv, sizeof k_adv);
    memcpy(hp_program_data(p, c->w), k_w, sizeof k_w);
}

static void init_grpo(hp_graph *g, hp_program *p, void *user) {
    (void)g;
    float old[ROWS], ref[ROWS];
    fill_inputs(p, user, old, ref);
}

static void test_grpo_grad(void **state) {
    (void)state;
    grpo_case cases[] = {{.eps = 0.2f, .beta = 0.0f}, {.eps = 0.2f, .beta = 0.04f}, {.eps = 0.2f, .beta = 1.0f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hp_gc_spec s = {.n = 1, .shapes = {HP_SHAPE(2, 4, V)}, .lo = -2, .hi = 2, .h = 1e-3f, .build = b_grpo,
                        .init = init_grpo, .user = &cases[i]};
        hp_gradcheck(&s);
    }
}

static void test_grpo_values(void **state) {
    (void)state;
    grpo_case c = {.eps = 0.2f, .beta = 0.1f};
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "logits", HP_SHAPE(2, 4, V));
    hp_tid loss = b_grpo(g, &x, &c);
    hp_tid grad;
    assert_ok(hp_autodiff(g, loss, &x, 1, &grad));
    hp_tid keep[2] = {loss, grad};
    hp_program *p = hp_test_compile(g, keep, 2);
    float *px = hp_program_data(p, x);
    hp_test_fill_uniform(px, ROWS * V, 3, -3, 3);
    float old[ROWS], ref[ROWS];
    fill_inputs(p, &c, old, ref);
    assert_ok(hp_program_run(p));
    assert_close(*(float *)hp_program_data(p, loss), ref_loss(px, &c, old, ref), 1e-5, 1e-7);
    /* a zero-weight row (row 6) has no gradient; each row's gradient sums to zero (softmax) */
    const float *pg = hp_program_data(p, grad);
    for (int r = 0; r < ROWS; r++) {
        double s = 0, a = 0;
        for (int i = 0; i < V; i++) s += pg[r * V + i], a += fabs(pg[r * V + i]);
        assert_close(s, 0.0, 0, 1e-6);
        if (r == 6) assert_close(a, 0.0, 0, 0);
        else assert_true(a > 0);
    }
    /* on-policy (ratio 1) without KL: the loss is -sum w A */
    for (int r = 0; r < ROWS; r++) old[r] = ref[r] = (float)logp_of(px + r * V, k_tokens[r]);
    memcpy(hp_program_data(p, c.old), old, sizeof old);
    memcpy(hp_program_data(p, c.ref), ref, sizeof ref);
    assert_ok(hp_program_run(p));
    double want = 0;
    for (int r = 0; r < ROWS; r++) want -= k_w[r] * k_adv[r];
    assert_close(*(float *)hp_program_data(p, loss), want, 1e-5, 1e-6);
    /* a token outside the vocabulary is named */
    ((int32_t *)hp_program_data(p, c.tokens))[3] = V;
    assert_int_equal(hp_program_run(p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("token 5 at row 3 is outside [0, 5)");
    hp_program_free(p);
    hp_graph_free(g);
}

static void test_grpo_shape_errors(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "logits", HP_SHAPE(2, 4, V));
    hp_tid t = hp_input(g, "tokens", HP_DTYPE_I32, HP_SHAPE(2, 4));
    hp_tid f = hp_input(g, "f", HP_DTYPE_F32, HP_SHAPE(2, 4));
    hp_tid bad = hp_input(g, "adv", HP_DTYPE_F32, HP_SHAPE(2));
    assert_int_equal(hp_grpo_loss(g, x, t, f, f, bad, f, 0.2f, 0.0f), HP_TID_NONE);
    assert_int_equal(hp_graph_status(g), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("adv must be f32 [2, 4]");
    hp_graph_free(g);
    g = hp_graph_new();
    x = hp_param(g, "logits", HP_SHAPE(2, 4, V));
    t = hp_input(g, "tokens", HP_DTYPE_I32, HP_SHAPE(2, 4));
    f = hp_input(g, "f", HP_DTYPE_F32, HP_SHAPE(2, 4));
    assert_int_equal(hp_grpo_loss(g, x, t, f, f, f, f, -0.1f, 0.0f), HP_TID_NONE);
    hp_test_assert_error_contains("clip eps -0.1");
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grpo_grad),
        cmocka_unit_test(test_grpo_values),
        cmocka_unit_test(test_grpo_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
