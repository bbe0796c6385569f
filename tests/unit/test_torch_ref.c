/*
 * One training step of our GPT against PyTorch (llm.c's test_gpt2.c, with an exit code that fails):
 * tests/data/gpt2_ref.safetensors, written once by scripts/make_torch_ref.py from bench/torch_gpt.py's
 * model in float64, holds a tiny GPT's weights, a batch, the loss, every gradient and every
 * parameter after one clipped AdamW step. We build the same model (hp_gpt_build +
 * hp_train_step_build), load the weights, run one step and compare, per element:
 *   loss              |ours - ref| <= 1e-5 |ref|
 *   gradients         |ours - ref| <= 1e-6 + 1e-4 |ref|   (read from the kept gradient tensors)
 *   updated params    |ours - ref| <= 1e-6 + 1e-4 |ref|
 * A failure names the worst tensor, its element, both values and the error relative to the bound.
 * test_perturbed_weight_is_caught checks that the comparison is sharp enough to see one weight
 * moved by 1e-3.
 */
#include "testutil.h"

#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/safetensors.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOSS_RTOL 1e-5
#define RTOL 1e-4
#define ATOL 1e-6
#define NOISE_GRAD 1e-5 /* gradients below this many units have no reliable float32 sign */

typedef struct ref_run {
    hp_safetensors *f;
    hp_graph *g;
    hp_gpt gpt;
    hp_train_step step;
    hp_program *p;
    int n_keep;
    hp_tid *keep; /* loss, squared gradient norm, then every gradient */
} ref_run;

/* The worst element of one comparison: error / (atol + rtol |ref|); above 1 fails. */
typedef struct worst {
    double ratio, ours, ref;
    int64_t index;
    char tensor[160];
} worst;

static double meta_num(const hp_safetensors *f, const char *key) {
    const char *v = hp_safetensors_metadata(f, key);
    if (!v) fail_msg("%s: no metadata '%s'", hp_safetensors_path(f), key);
    return atof(v);
}

static const hp_safetensors_entry *entry(const hp_safetensors *f, const char *prefix, const char *name,
                                         const hp_tensor *like) {
    char key[200];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    const hp_safetensors_entry *e = hp_safetensors_find(f, key);
    if (!e) fail_msg("%s: no tensor '%s'", hp_safetensors_path(f), key);
    if (like && !hp_shape_equal(&e->shape, &like->shape)) {
        char a[64], b[64];
        fail_msg("'%s': reference shape %s, ours %s", key, hp_shape_str(&e->shape, a, sizeof a),
                 hp_shape_str(&like->shape, b, sizeof b));
    }
    return e;
}

/* Builds the reference's model and step, compiles it keeping the loss and the gradients, loads the
 * weights (weight `perturb` element 0 moved by `delta` when perturb is not NULL) and the batch. */
static void setup(ref_run *r, const char *perturb, float delta) {
    memset(r, 0, sizeof *r);
    assert_ok(hp_safetensors_open(hp_test_source_path("tests/data/gpt2_ref.safetensors"), &r->f));
    hp_gpt_config c = {.vocab = (int)meta_num(r->f, "vocab"), .context = (int)meta_num(r->f, "context"),
                       .layers = (int)meta_num(r->f, "layers"), .heads = (int)meta_num(r->f, "heads"),
                       .width = (int)meta_num(r->f, "width"), .tied_head = false};
    double lr = meta_num(r->f, "lr");
    hp_optim_config o = {.lr = lr, .min_lr = lr, .warmup = 0, .weight_decay = meta_num(r->f, "weight_decay"),
                         .beta1 = meta_num(r->f, "beta1"), .beta2 = meta_num(r->f, "beta2"),
                         .eps = meta_num(r->f, "eps"), .grad_clip = meta_num(r->f, "grad_clip")};
    r->g = hp_graph_new();
    assert_ok(hp_gpt_build(r->g, &c, (int)meta_num(r->f, "batch"), c.context, true, &r->gpt));
    assert_ok(hp_train_step_build(r->g, r->gpt.loss, &o, &r->step));
    r->n_keep = r->step.n_params + 2;
    r->keep = calloc((size_t)r->n_keep, sizeof *r->keep);
    assert_non_null(r->keep);
    r->keep[0] = r->step.loss;
    r->keep[1] = r->step.grad_sq;
    memcpy(r->keep + 2, r->step.grads, sizeof(hp_tid) * (size_t)r->step.n_params);
    r->p = hp_test_compile(r->g, r->keep, r->n_keep);

    const hp_tid ins[2] = {r->gpt.tokens, r->gpt.targets};
    const char *in_names[2] = {"tokens", "targets"};
    for (int k = 0; k < 2; k++) {
        const hp_safetensors_entry *e = entry(r->f, "", in_names[k], hp_graph_tensor(r->g, ins[k]));
        assert_int_equal(e->dtype, HP_DTYPE_I32);
        assert_ok(hp_program_set_input(r->p, ins[k], e->data, e->nbytes));
    }
    for (int i = 0; i < r->step.n_params; i++) {
        const hp_tensor *x = hp_graph_tensor(r->g, r->step.params[i]);
        const hp_safetensors_entry *e = entry(r->f, "param.", x->name, x);
        float *w = malloc(e->nbytes);
        assert_non_null(w);
        memcpy(w, e->data, e->nbytes); /* the mapped data may be unaligned */
        if (perturb && !strcmp(perturb, x->name)) w[0] += delta;
        assert_ok(hp_program_set_input(r->p, r->step.params[i], w, e->nbytes));
        free(w);
    }
    /* every parameter of the reference is one of ours: none is left unset */
    size_t n_param_entries = 0;
    for (size_t i = 0; i < hp_safetensors_count(r->f); i++)
        n_param_entries += strncmp(hp_safetensors_entry_at(r->f, i)->name, "param.", 6) == 0;
    assert_int_equal(n_param_entries, (size_t)r->step.n_params);
    float lr_f = (float)lr, step = 1.0f;
    assert_ok(hp_program_set_input(r->p, r->step.lr, &lr_f, sizeof lr_f));
    assert_ok(hp_program_set_input(r->p, r->step.step, &step, sizeof step));
}

static void teardown(ref_run *r) {
    hp_program_free(r->p);
    hp_graph_free(r->g);
    hp_safetensors_close(r->f);
    free(r->keep);
}

/*
 * Compares tensor t of our program with the reference entry prefix+name; updates *w. With `grad`
 * (the reference gradient of an updated parameter), elements whose gradient is below NOISE_GRAD
 * (but not exactly 0: then the step is the weight decay alone) are held only to |ours - ref| <=
 * loose: there float32 rounding decides the sign of AdamW's first
 * step (about lr * g / |g|), e.g. every attention key bias, whose exact gradient is 0 (softmax
 * ignores a shift shared by all keys). *n_loose counts them.
 */
static void compare(ref_run *r, hp_tid t, const char *prefix, const char *name, double rtol, double atol,
                    const char *grad, double loose, int *n_loose, worst *w, worst *w_loose) {
    const hp_tensor *x = hp_graph_tensor(r->g, t);
    const hp_safetensors_entry *e = entry(r->f, prefix, name, x);
    const hp_safetensors_entry *ge = grad ? entry(r->f, grad, name, x) : NULL;
    size_t n = e->nbytes / sizeof(float);
    float *ours = malloc(e->nbytes + sizeof(float)), *ref = malloc(e->nbytes + sizeof(float));
    float *gref = malloc(e->nbytes + sizeof(float));
    assert_true(ours && ref && gref);
    memcpy(ref, e->data, e->nbytes);
    if (ge) memcpy(gref, ge->data, e->nbytes);
    assert_ok(hp_program_get_output(r->p, t, ours, e->nbytes));
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)ours[i] - (double)ref[i]), ratio = err / (atol + rtol * fabs((double)ref[i]));
        worst *into = w;
        if (ge && gref[i] != 0.0f && fabs((double)gref[i]) < NOISE_GRAD) {
            ratio = err / loose;
            ++*n_loose;
            into = w_loose;
        }
        if (!(ratio <= into->ratio)) { /* NaN counts as the worst */
            *into = (worst){.ratio = isnan(ratio) ? INFINITY : ratio, .ours = ours[i], .ref = ref[i], .index = (int64_t)i};
            snprintf(into->tensor, sizeof into->tensor, "%s%s", prefix, name);
        }
    }
    free(ours);
    free(ref);
    free(gref);
}

/* Runs the step and returns the worst loss, gradient and updated-parameter elements, and how many
 * updated elements had a gradient at the noise level. */
static void run_and_compare(ref_run *r, worst *loss, worst *grad, worst *upd, worst *upd_loose, int *n_loose) {
    *loss = *grad = *upd = *upd_loose = (worst){.ratio = -1.0};
    *n_loose = 0;
    assert_ok(hp_program_run(r->p));
    double loose = 2.0 * meta_num(r->f, "lr") + ATOL; /* both moved at most lr from the same start */
    compare(r, r->step.loss, "", "loss", LOSS_RTOL, 0.0, NULL, 0.0, NULL, loss, NULL);
    for (int i = 0; i < r->step.n_params; i++) {
        const char *name = hp_graph_tensor(r->g, r->step.params[i])->name;
        compare(r, r->step.grads[i], "grad.", name, RTOL, ATOL, NULL, 0.0, NULL, grad, NULL);
        compare(r, r->step.params[i], "updated.", name, RTOL, ATOL, "grad.", loose, n_loose, upd, upd_loose);
    }
}

static void print_worst(const char *what, const worst *w) {
    printf("  %-16s worst %-36s [%lld] ours %.9g ref %.9g: %.3g of the tolerance\n", what, w->tensor,
           (long long)w->index, w->ours, w->ref, w->ratio);
}

static void assert_within(const char *what, const worst *w) {
    if (!(w->ratio <= 1.0))
        fail_msg("%s: '%s'[%lld] is %.9g, PyTorch says %.9g (%.3g times the tolerance)", what, w->tensor,
                 (long long)w->index, w->ours, w->ref, w->ratio);
}

static void test_one_step_matches_pytorch(void **state) {
    (void)state;
    ref_run r;
    setup(&r, NULL, 0.0f);
    worst loss, grad, upd, upd_loose;
    int n_loose;
    run_and_compare(&r, &loss, &grad, &upd, &upd_loose, &n_loose);
    printf("one step against PyTorch (%d parameters; tolerance: loss %.0e rel, others %.0e + %.0e rel):\n",
           r.step.n_params, LOSS_RTOL, ATOL, RTOL);
    print_worst("loss", &loss);
    print_worst("gradients", &grad);
    print_worst("updated params", &upd);
    printf("  %d updated elements have 0 < |grad| < %.0e and are held to |diff| <= 2 lr:\n", n_loose, NOISE_GRAD);
    print_worst("  of those", &upd_loose);
    assert_within("loss", &loss);
    assert_within("gradient", &grad);
    assert_within("updated parameter", &upd);
    assert_within("updated parameter (gradient at the noise level)", &upd_loose);
    assert_true(n_loose < 100); /* the loose class stays small: 2 x 16 key biases and a few others */
    /* the reference's clipping acted: the norm is above the clip (so the scale is exercised) */
    float gsq;
    assert_ok(hp_program_get_output(r.p, r.step.grad_sq, &gsq, sizeof gsq));
    assert_true(meta_num(r.f, "grad_norm") > meta_num(r.f, "grad_clip"));
    assert_close(sqrt(gsq), meta_num(r.f, "grad_norm"), 1e-4, 0.0);
    teardown(&r);
}

/* One weight moved by 1e-3 (a relative change of about 1%) must fail the comparison. */
static void test_perturbed_weight_is_caught(void **state) {
    (void)state;
    ref_run r;
    setup(&r, "blocks.1.attn.k.weight", 1e-3f);
    worst loss, grad, upd, upd_loose;
    int n_loose;
    run_and_compare(&r, &loss, &grad, &upd, &upd_loose, &n_loose);
    print_worst("perturbed: grads", &grad);
    assert_true(grad.ratio > 1.0);
    assert_true(loss.ratio > 1.0 || upd.ratio > 1.0 || grad.ratio > 10.0);
    (void)upd_loose;
    teardown(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_step_matches_pytorch),
        cmocka_unit_test(test_perturbed_weight_is_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
