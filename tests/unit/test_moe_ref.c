/*
 * A Mixture-of-Experts layer (hp_moe_build) against PyTorch: tests/data/moe_ref.safetensors, written
 * once by scripts/make_moe_ref.py in float64 from the papers' definitions, holds three small layers
 * (softmax top-2 with a shared expert; DeepSeek-V3's sigmoid_bias router; softmax top-2 with the
 * Llama family's SwiGLU experts and a shared SwiGLU expert), their inputs, outputs,
 * routing, balancing loss, the loss sum(y * r) + alpha * aux, every gradient and (sigmoid) the bias
 * after one update. We build the same layer, load the weights, run forward and backward, and
 * compare per element:
 *   idx, counts            exactly
 *   y, aux, loss           |ours - ref| <= 1e-6 + 1e-5 |ref|
 *   gradients, new bias    |ours - ref| <= 1e-6 + 1e-4 |ref|
 * test_perturbed_weight_is_caught checks that moving one expert weight by 1e-3 fails the comparison.
 */
#include "testutil.h"

#include "hp/moe.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS 10

typedef struct ref_case {
    hp_safetensors *f;
    hp_graph *g;
    hp_program *p;
    hp_moe_layer ml;
    hp_tid x, r, loss, bias;
    int n_params;
    hp_tid params[MAX_PARAMS], grads[MAX_PARAMS];
} ref_case;

static double meta_num(const hp_safetensors *f, const char *key) {
    const char *v = hp_safetensors_metadata(f, key);
    if (!v) fail_msg("%s: no metadata '%s'", hp_safetensors_path(f), key);
    return atof(v);
}

static const hp_safetensors_entry *entry(const hp_safetensors *f, const char *c, const char *name, const hp_tensor *like) {
    char key[200];
    snprintf(key, sizeof key, "%s.%s", c, name);
    const hp_safetensors_entry *e = hp_safetensors_find(f, key);
    if (!e) fail_msg("%s: no tensor '%s'", hp_safetensors_path(f), key);
    if (like && hp_shape_numel(&e->shape) != hp_shape_numel(&like->shape)) {
        char a[64], b[64];
        fail_msg("'%s': reference shape %s, ours %s", key, hp_shape_str(&e->shape, a, sizeof a),
                 hp_shape_str(&like->shape, b, sizeof b));
    }
    return e;
}

static void set_from(ref_case *rc, const char *c, const char *name, hp_tid t, const char *perturb, float delta) {
    const hp_safetensors_entry *e = entry(rc->f, c, name, hp_graph_tensor(rc->g, t));
    float *w = malloc(e->nbytes + sizeof(float));
    assert_non_null(w);
    memcpy(w, e->data, e->nbytes); /* the mapped data may be unaligned */
    if (perturb && !strcmp(perturb, name)) w[0] += delta;
    assert_ok(hp_program_set_input(rc->p, t, w, e->nbytes));
    free(w);
}

/* Builds case c ("softmax", "sigmoid" or "swiglu") and runs it once. */
static void setup(ref_case *rc, const char *c, const char *perturb, float delta) {
    memset(rc, 0, sizeof *rc);
    assert_ok(hp_safetensors_open(hp_test_source_path("tests/data/moe_ref.safetensors"), &rc->f));
    const int B = (int)meta_num(rc->f, "B"), T = (int)meta_num(rc->f, "T"), C = (int)meta_num(rc->f, "C");
    const bool sig = !strcmp(c, "sigmoid");
    hp_moe_config mc = HP_MOE_CONFIG_INIT;
    mc.experts = (int)meta_num(rc->f, "E");
    mc.top_k = (int)meta_num(rc->f, "k");
    mc.expert_width = (int)meta_num(rc->f, "F");
    mc.shared_experts = sig ? 0 : (int)meta_num(rc->f, "shared");
    mc.router = sig ? HP_MOE_ROUTER_SIGMOID_BIAS : HP_MOE_ROUTER_SOFTMAX;
    mc.expert = !strcmp(c, "swiglu") ? HP_MOE_EXPERT_SWIGLU : HP_MOE_EXPERT_GELU;
    mc.balance_loss = (float)meta_num(rc->f, "alpha");
    mc.bias_update_rate = (float)meta_num(rc->f, "u");
    mc.training = true;
    rc->g = hp_graph_new();
    rc->x = hp_param(rc->g, "x", HP_SHAPE(B, T, C));
    rc->r = hp_leaf(rc->g, "r", HP_TENSOR_KIND_CONST, HP_DTYPE_F32, HP_SHAPE(B, T, C));
    assert_ok(hp_moe_build(rc->g, rc->x, &mc, "mlp", &rc->ml));
    assert_int_not_equal(rc->ml.aux_loss, HP_TID_NONE);
    rc->loss = hp_add(rc->g, hp_sum(rc->g, hp_mul(rc->g, rc->ml.y, rc->r), -1),
                      hp_scale(rc->g, rc->ml.aux_loss, mc.balance_loss));
    rc->bias = hp_graph_find(rc->g, "mlp.router.bias");
    assert_int_equal(rc->bias != HP_TID_NONE, sig);
    rc->n_params = hp_graph_params(rc->g, rc->params, MAX_PARAMS);
    assert_true(rc->n_params <= MAX_PARAMS);
    assert_ok(hp_autodiff(rc->g, rc->loss, rc->params, rc->n_params, rc->grads));
    hp_tid keep[2 * MAX_PARAMS + 6];
    int nk = 0;
    keep[nk++] = rc->loss;
    keep[nk++] = rc->ml.y;
    keep[nk++] = rc->ml.aux_loss;
    keep[nk++] = rc->ml.idx;
    keep[nk++] = rc->ml.counts;
    for (int i = 0; i < rc->n_params; i++) {
        keep[nk++] = rc->params[i];
        if (rc->grads[i] != HP_TID_NONE) keep[nk++] = rc->grads[i];
    }
    rc->p = hp_test_compile(rc->g, keep, nk);
    set_from(rc, c, "r", rc->r, NULL, 0);
    for (int i = 0; i < rc->n_params; i++) {
        const char *name = hp_graph_tensor(rc->g, rc->params[i])->name;
        char key[160];
        snprintf(key, sizeof key, "%s%s", strcmp(name, "x") ? "param." : "", name);
        set_from(rc, c, key, rc->params[i], perturb, delta);
    }
    assert_ok(hp_program_run(rc->p));
}

static void teardown(ref_case *rc) {
    hp_program_free(rc->p);
    hp_graph_free(rc->g);
    hp_safetensors_close(rc->f);
}

/* The worst error / (atol + rtol |ref|) of tensor t against the reference entry c.name (> 1 fails). */
static double worst_ratio(ref_case *rc, const char *c, const char *name, hp_tid t, double rtol, double atol,
                          char *where, size_t cap) {
    const hp_safetensors_entry *e = entry(rc->f, c, name, hp_graph_tensor(rc->g, t));
    size_t n = e->nbytes / sizeof(float);
    float *ref = malloc(e->nbytes + sizeof(float));
    assert_non_null(ref);
    memcpy(ref, e->data, e->nbytes);
    const float *ours = hp_program_data(rc->p, t);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ratio = fabs((double)ours[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (!(ratio <= worst)) {
            worst = ratio;
            snprintf(where, cap, "%s.%s[%zu]: ours %.9g, reference %.9g", c, name, i, (double)ours[i], (double)ref[i]);
        }
    }
    free(ref);
    return worst;
}

static void check_ints(ref_case *rc, const char *c, const char *name, hp_tid t) {
    const hp_safetensors_entry *e = entry(rc->f, c, name, hp_graph_tensor(rc->g, t));
    int32_t *ref = malloc(e->nbytes + sizeof(int32_t));
    assert_non_null(ref);
    memcpy(ref, e->data, e->nbytes);
    const int32_t *ours = hp_program_data(rc->p, t);
    for (size_t i = 0; i < e->nbytes / sizeof(int32_t); i++)
        if (ours[i] != ref[i]) fail_msg("%s.%s[%zu]: ours %d, reference %d", c, name, i, ours[i], ref[i]);
    free(ref);
}

/* The worst ratio over every compared float tensor of case c (idx and counts must match exactly). */
static double compare_case(ref_case *rc, const char *c, char *where, size_t cap) {
    check_ints(rc, c, "idx", rc->ml.idx);
    check_ints(rc, c, "counts", rc->ml.counts);
    double worst = 0;
    char w[256];
    struct { const char *name; hp_tid t; double rtol; } outs[] = {
        {"y", rc->ml.y, 1e-5}, {"aux", rc->ml.aux_loss, 1e-5}, {"loss", rc->loss, 1e-5},
        {"bias_updated", rc->bias, 1e-4}};
    for (size_t i = 0; i < 4; i++) {
        if (outs[i].t == HP_TID_NONE) continue;
        double r = worst_ratio(rc, c, outs[i].name, outs[i].t, outs[i].rtol, 1e-6, w, sizeof w);
        if (r > worst) worst = r, snprintf(where, cap, "%s", w);
    }
    for (int i = 0; i < rc->n_params; i++) {
        if (rc->params[i] == rc->bias) continue; /* its gradient is 0 by design; the update is checked above */
        char key[160];
        const char *name = hp_graph_tensor(rc->g, rc->params[i])->name;
        snprintf(key, sizeof key, "grad.%s", name);
        assert_int_not_equal(rc->grads[i], HP_TID_NONE);
        double r = worst_ratio(rc, c, key, rc->grads[i], 1e-4, 1e-6, w, sizeof w);
        if (r > worst) worst = r, snprintf(where, cap, "%s", w);
    }
    return worst;
}

static void test_moe_layer_matches_torch(void **state) {
    (void)state;
    const char *cases[] = {"softmax", "sigmoid", "swiglu"};
    for (int k = 0; k < 3; k++) {
        ref_case rc;
        setup(&rc, cases[k], NULL, 0);
        char where[256] = "";
        double worst = compare_case(&rc, cases[k], where, sizeof where);
        printf("%-7s worst error / tolerance %.3f (%s)\n", cases[k], worst, where);
        if (!(worst <= 1.0)) fail_msg("%s: %s (%.2f x the tolerance)", cases[k], where, worst);
        teardown(&rc);
    }
}

static void test_perturbed_weight_is_caught(void **state) {
    (void)state;
    ref_case rc;
    setup(&rc, "softmax", "param.mlp.experts.proj.weight", 1e-3f);
    char where[256] = "";
    double worst = compare_case(&rc, "softmax", where, sizeof where);
    if (!(worst > 1.0)) fail_msg("a weight moved by 1e-3 went unnoticed (worst ratio %.3f)", worst);
    teardown(&rc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_layer_matches_torch),
        cmocka_unit_test(test_perturbed_weight_is_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
