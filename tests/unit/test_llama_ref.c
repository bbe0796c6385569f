/*
 * Our Llama-family decoder against PyTorch: tests/data/llama_ref.safetensors and
 * llama_mqa_tied_ref.safetensors, written once by scripts/make_llama_ref.py (Hugging Face's
 * modeling_llama written out in plain torch, float64), hold a tiny model's weights (HF names), a
 * batch, the logits, the loss and every parameter gradient. We build the same model with
 * hp_gpt_build (family llama), load the weights by name, run forward and backward, and compare per
 * element:
 *   loss        |ours - ref| <= 1e-5 |ref|
 *   logits      |ours - ref| <= 1e-5 + 1e-5 |ref|   (logits are O(1..10): float32 sums leave ~1e-6)
 *   gradients   |ours - ref| <= 1e-6 + 1e-4 |ref|
 * The first model has grouped-query attention (4 heads over 2 kv heads), an untied head and an
 * explicit ffn_width; the second multi-query attention (1 kv head), a tied head, the default
 * ffn_width (8/3 C rounded up to 256) and another RoPE base and eps. A perturbed weight must fail.
 */
#include "testutil.h"

#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct llama_run {
    hp_safetensors *f;
    hp_graph *g;
    hp_gpt m;
    hp_program *p;
    int n;
    hp_tid params[64], grads[64];
} llama_run;

static double meta_num(const hp_safetensors *f, const char *key) {
    const char *v = hp_safetensors_metadata(f, key);
    if (!v) fail_msg("%s: no metadata '%s'", hp_safetensors_path(f), key);
    return atof(v);
}

static const hp_safetensors_entry *entry(const hp_safetensors *f, const char *prefix, const char *name,
                                         const hp_shape *like) {
    char key[200];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    const hp_safetensors_entry *e = hp_safetensors_find(f, key);
    if (!e) fail_msg("%s: no tensor '%s'", hp_safetensors_path(f), key);
    if (like && !hp_shape_equal(&e->shape, like)) {
        char a[64], b[64];
        fail_msg("'%s': reference shape %s, ours %s", key, hp_shape_str(&e->shape, a, sizeof a),
                 hp_shape_str(like, b, sizeof b));
    }
    return e;
}

static void setup(llama_run *r, const char *file, const char *perturb) {
    memset(r, 0, sizeof *r);
    assert_ok(hp_safetensors_open(hp_test_source_path(file), &r->f));
    hp_gpt_config c = {.family = HP_MODEL_FAMILY_LLAMA, .vocab = (int)meta_num(r->f, "vocab"),
                       .context = (int)meta_num(r->f, "context"), .layers = (int)meta_num(r->f, "layers"),
                       .heads = (int)meta_num(r->f, "heads"), .width = (int)meta_num(r->f, "width"),
                       .tied_head = meta_num(r->f, "tied_head") != 0, .kv_heads = (int)meta_num(r->f, "kv_heads"),
                       .rope_base = (float)meta_num(r->f, "rope_base"), .norm_eps = (float)meta_num(r->f, "norm_eps")};
    int ffn = (int)meta_num(r->f, "ffn_width");
    if (ffn != hp_llama_default_ffn_width(c.width)) c.ffn_width = ffn; /* else exercise the default */
    r->g = hp_graph_new();
    assert_ok(hp_gpt_build(r->g, &c, (int)meta_num(r->f, "batch"), c.context, true, &r->m));
    r->n = hp_graph_params(r->g, r->params, 64);
    assert_ok(hp_autodiff(r->g, r->m.loss, r->params, r->n, r->grads));
    hp_tid keep[66];
    keep[0] = r->m.loss;
    keep[1] = r->m.logits;
    memcpy(keep + 2, r->grads, sizeof(hp_tid) * (size_t)r->n);
    r->p = hp_test_compile(r->g, keep, r->n + 2);
    const hp_tid ins[2] = {r->m.tokens, r->m.targets};
    const char *in_names[2] = {"tokens", "targets"};
    for (int k = 0; k < 2; k++) {
        const hp_safetensors_entry *e = entry(r->f, "", in_names[k], &hp_graph_tensor(r->g, ins[k])->shape);
        assert_ok(hp_program_set_input(r->p, ins[k], e->data, e->nbytes));
    }
    for (int i = 0; i < r->n; i++) {
        const hp_tensor *x = hp_graph_tensor(r->g, r->params[i]);
        const hp_safetensors_entry *e = entry(r->f, "param.", x->name, &x->shape);
        float *w = malloc(e->nbytes);
        assert_non_null(w);
        memcpy(w, e->data, e->nbytes);
        if (perturb && !strcmp(perturb, x->name)) w[0] += 1e-3f;
        assert_ok(hp_program_set_input(r->p, r->params[i], w, e->nbytes));
        free(w);
    }
    size_t n_ref = 0; /* every reference parameter is one of ours */
    for (size_t i = 0; i < hp_safetensors_count(r->f); i++)
        n_ref += strncmp(hp_safetensors_entry_at(r->f, i)->name, "param.", 6) == 0;
    assert_int_equal(n_ref, (size_t)r->n);
    int64_t numel = 0; /* hp_gpt_n_params counts what the graph holds */
    for (int i = 0; i < r->n; i++) numel += hp_shape_numel(&hp_graph_tensor(r->g, r->params[i])->shape);
    assert_int_equal(hp_gpt_n_params(&c), numel);
    assert_ok(hp_program_run(r->p));
}

static void teardown(llama_run *r) {
    hp_program_free(r->p);
    hp_graph_free(r->g);
    hp_safetensors_close(r->f);
}

/* The worst element of t against prefix+name as a multiple of its tolerance. */
static double worst(llama_run *r, hp_tid t, const char *prefix, const char *name, double rtol, double atol,
                    char *where, size_t cap) {
    const hp_tensor *x = hp_graph_tensor(r->g, t);
    const hp_safetensors_entry *e = entry(r->f, prefix, name, &x->shape);
    size_t n = e->nbytes / sizeof(float);
    float *ours = malloc(e->nbytes + 4), *ref = malloc(e->nbytes + 4);
    assert_true(ours && ref);
    memcpy(ref, e->data, e->nbytes);
    assert_ok(hp_program_get_output(r->p, t, ours, e->nbytes));
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double ratio = fabs((double)ours[i] - ref[i]) / (atol + rtol * fabs((double)ref[i]));
        if (!(ratio <= w)) {
            w = isnan(ratio) ? INFINITY : ratio;
            snprintf(where, cap, "%s%s[%zu]: ours %.9g ref %.9g", prefix, name, i, ours[i], ref[i]);
        }
    }
    free(ours);
    free(ref);
    return w;
}

static void check_file(const char *file) {
    llama_run r;
    setup(&r, file, NULL);
    char where[256] = "", gwhere[256] = "";
    double wl = worst(&r, r.m.loss, "", "loss", 1e-5, 0.0, where, sizeof where);
    printf("%s: loss %s (%.3g of tolerance)\n", file, where, wl);
    assert_true(wl <= 1.0);
    double wg = worst(&r, r.m.logits, "", "logits", 1e-5, 1e-5, where, sizeof where);
    printf("  logits worst %s (%.3g)\n", where, wg);
    assert_true(wg <= 1.0);
    double gw = 0;
    for (int i = 0; i < r.n; i++) {
        const char *name = hp_graph_tensor(r.g, r.params[i])->name;
        double w = worst(&r, r.grads[i], "grad.", name, 1e-4, 1e-6, where, sizeof where);
        if (w >= gw) gw = w, snprintf(gwhere, sizeof gwhere, "%s", where);
    }
    printf("  %d gradients, worst %s (%.3g of tolerance)\n", r.n, gwhere, gw);
    assert_true(gw <= 1.0);
    teardown(&r);
}

static void test_gqa_untied_matches_pytorch(void **state) {
    (void)state;
    check_file("tests/data/llama_ref.safetensors");
}

static void test_mqa_tied_matches_pytorch(void **state) {
    (void)state;
    check_file("tests/data/llama_mqa_tied_ref.safetensors");
}

static void test_perturbed_weight_is_caught(void **state) {
    (void)state;
    llama_run r;
    setup(&r, "tests/data/llama_ref.safetensors", "model.layers.1.self_attn.k_proj.weight");
    char where[256];
    double gw = 0;
    for (int i = 0; i < r.n; i++) {
        double w = worst(&r, r.grads[i], "grad.", hp_graph_tensor(r.g, r.params[i])->name, 1e-4, 1e-6, where,
                         sizeof where);
        gw = w > gw ? w : gw;
    }
    assert_true(gw > 1.0);
    teardown(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gqa_untied_matches_pytorch),
        cmocka_unit_test(test_mqa_tied_matches_pytorch),
        cmocka_unit_test(test_perturbed_weight_is_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
