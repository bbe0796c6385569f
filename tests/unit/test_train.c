/* GPT model, training step, trainer: determinism, learning on the KJV, resume, bad input. */
#include "testutil.h"

#include "hp/checkpoint.h"
#include "hp/config.h"
#include "hp/nn.h"
#include "hp/runtime.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kjv(void) { return hp_test_source_path("data/kjv.txt"); }

static hp_run_config tiny_config(const char *ckdir) {
    hp_run_config c;
    hp_test_tiny_config(&c, ckdir);
    return c;
}

static void test_lr_schedule(void **state) {
    (void)state;
    hp_optim_config o = hp_run_config_defaults().optim;
    o.lr = 1.0;
    o.min_lr = 0.1;
    o.warmup = 10;
    assert_close(hp_lr_at(&o, 1, 110), 0.1, 1e-12, 0);
    assert_close(hp_lr_at(&o, 10, 110), 1.0, 1e-12, 0);
    assert_close(hp_lr_at(&o, 60, 110), 0.55, 1e-9, 0); /* halfway through the cosine */
    assert_close(hp_lr_at(&o, 110, 110), 0.1, 1e-12, 0);
}

/* Gradients of every GPT parameter against central differences of the loss. */
static void test_gpt_param_gradients(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_gpt_config c = {.vocab = 16, .context = 6, .layers = 1, .heads = 2, .width = 8, .tied_head = false};
    hp_gpt gpt;
    assert_ok(hp_gpt_build(g, &c, 2, 6, true, &gpt));
    int n = hp_graph_params(g, NULL, 0);
    hp_tid params[32], grads[32], keep[33];
    hp_graph_params(g, params, n);
    assert_ok(hp_autodiff(g, gpt.loss, params, n, grads));
    keep[0] = gpt.loss;
    for (int i = 0; i < n; i++) keep[i + 1] = grads[i];
    hp_program *p;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = n + 1;
    assert_ok(hp_program_new(g, &o, &p));
    for (int i = 0; i < n; i++) {
        const hp_tensor *x = hp_graph_tensor(g, params[i]);
        hp_test_fill_uniform(hp_program_data(p, params[i]), (size_t)hp_shape_numel(&x->shape), 3 + (uint64_t)i,
                             -0.4f, 0.4f);
    }
    int32_t *tok = hp_program_data(p, gpt.tokens), *tgt = hp_program_data(p, gpt.targets);
    for (int i = 0; i < 12; i++) {
        tok[i] = (i * 7 + 3) % 16;
        tgt[i] = (i * 5 + 1) % 16;
    }
    assert_ok(hp_program_run(p));
    float *snap[32];
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)hp_shape_numel(&hp_graph_tensor(g, params[i])->shape);
        snap[i] = malloc(k * sizeof(float));
        memcpy(snap[i], hp_program_data(p, grads[i]), k * sizeof(float));
    }
    const float h = 1e-2f;
    for (int i = 0; i < n; i++) {
        const hp_tensor *x = hp_graph_tensor(g, params[i]);
        int64_t k = hp_shape_numel(&x->shape);
        float *w = hp_program_data(p, params[i]);
        for (int64_t e = 0; e < k; e += (k > 8 ? k / 8 : 1)) {
            float w0 = w[e];
            w[e] = w0 + h;
            assert_ok(hp_program_run(p));
            double fp = *(float *)hp_program_data(p, gpt.loss);
            w[e] = w0 - h;
            assert_ok(hp_program_run(p));
            double fm = *(float *)hp_program_data(p, gpt.loss);
            w[e] = w0;
            double fd = (fp - fm) / (2 * h);
            if (fabs(fd - snap[i][e]) > 2e-3 + 3e-2 * fabs(fd))
                fail_msg("%s[%lld]: analytic %.6g vs finite difference %.6g", x->name, (long long)e, (double)snap[i][e],
                         fd);
        }
        free(snap[i]);
    }
    hp_program_free(p);
    hp_graph_free(g);
}

static void run_steps(hp_trainer *t, int n, double *losses) { hp_test_run_steps(t, n, losses); }

static void test_deterministic_for_seed(void **state) {
    (void)state;
    hp_run_config c = tiny_config(NULL);
    double a[5], b[5];
    hp_trainer *t1, *t2;
    assert_ok(hp_trainer_new(&c, &t1));
    run_steps(t1, 5, a);
    assert_ok(hp_trainer_new(&c, &t2));
    run_steps(t2, 5, b);
    for (int i = 0; i < 5; i++) assert_true(a[i] == b[i]);
    int64_t n1, n2;
    const float *w1 = hp_trainer_param(t1, "blocks.1.mlp.fc.weight", &n1);
    const float *w2 = hp_trainer_param(t2, "blocks.1.mlp.fc.weight", &n2);
    assert_non_null(w1);
    assert_int_equal(n1, n2);
    assert_memory_equal(w1, w2, (size_t)n1 * sizeof(float));
    hp_trainer_free(t1);
    hp_trainer_free(t2);
    /* another seed gives other numbers */
    c.train.seed = 8;
    assert_ok(hp_trainer_new(&c, &t1));
    run_steps(t1, 1, b);
    assert_true(b[0] != a[0]);
    hp_trainer_free(t1);
}

static char *make_tmpdir(void) {
    char *d = strdup("/tmp/hp-test-train-XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_rf(const char *d) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

static void test_resume_matches_uninterrupted(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    hp_run_config c = tiny_config(dir);
    double full[12], part[12];
    hp_trainer *t;
    assert_ok(hp_trainer_new(&c, &t));
    run_steps(t, 12, full);
    hp_trainer_free(t);

    assert_ok(hp_trainer_new(&c, &t));
    run_steps(t, 6, part);
    assert_ok(hp_trainer_save(t, NULL, 0));
    hp_trainer_free(t);
    assert_ok(hp_trainer_new(&c, &t));
    assert_ok(hp_trainer_resume(t, dir));
    assert_int_equal(hp_trainer_steps_done(t), 6);
    run_steps(t, 6, part + 6);
    for (int i = 0; i < 12; i++)
        if (full[i] != part[i]) fail_msg("step %d: %.9g uninterrupted vs %.9g resumed", i + 1, full[i], part[i]);

    /* generation from the checkpoint works and is deterministic */
    char *a, *b;
    assert_ok(hp_generate_from_checkpoint(dir, "In the", 20, 0.8f, 40, 3, &a));
    assert_ok(hp_generate_from_checkpoint(dir, "In the", 20, 0.8f, 40, 3, &b));
    assert_string_equal(a, b);
    free(a);
    free(b);
    hp_trainer_free(t);
    rm_rf(dir);
    free(dir);
}

/* Dropout on: the masks are keyed by (seed, step, tensor, element), so a resumed run repeats the
 * uninterrupted one bitwise; evaluation runs without dropout (the same loss as a model built
 * without it, every time). */
static void test_dropout_resume_and_eval(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    hp_run_config c = tiny_config(dir), plain = c;
    c.model.dropout = 0.2;
    hp_trainer *t, *u;
    /* evaluation ignores dropout: at initialisation both models give the same validation loss */
    double v_drop, v_drop2, v_plain;
    assert_ok(hp_trainer_new(&c, &t));
    assert_ok(hp_trainer_new(&plain, &u));
    assert_ok(hp_trainer_eval(t, &v_drop));
    assert_ok(hp_trainer_eval(u, &v_plain));
    assert_true(v_drop == v_plain);
    /* training does not: the first step's loss differs */
    double a[8], b[8];
    run_steps(t, 1, a);
    run_steps(u, 1, b);
    if (a[0] == b[0]) fail_msg("step 1 loss %.9g with dropout equals %.9g without", a[0], b[0]);
    /* two evaluations of the same weights are equal */
    assert_ok(hp_trainer_eval(t, &v_drop));
    assert_ok(hp_trainer_eval(t, &v_drop2));
    assert_true(v_drop == v_drop2);
    hp_trainer_free(t);
    hp_trainer_free(u);

    double full[8], part[8];
    assert_ok(hp_trainer_new(&c, &t));
    run_steps(t, 8, full);
    assert_true(full[0] == a[0]);
    hp_trainer_free(t);
    assert_ok(hp_trainer_new(&c, &t));
    run_steps(t, 4, part);
    assert_ok(hp_trainer_save(t, NULL, 0));
    hp_trainer_free(t);
    assert_ok(hp_trainer_new(&c, &t));
    assert_ok(hp_trainer_resume(t, dir));
    run_steps(t, 4, part + 4);
    for (int i = 0; i < 8; i++)
        if (full[i] != part[i]) fail_msg("step %d: %.9g uninterrupted vs %.9g resumed", i + 1, full[i], part[i]);
    hp_trainer_free(t);
    rm_rf(dir);
    free(dir);
}

static void test_bad_inputs(void **state) {
    (void)state;
    hp_trainer *t = NULL;
    hp_run_config c = tiny_config(NULL);
    snprintf(c.data.corpus, sizeof c.data.corpus, "/nonexistent/corpus.txt");
    assert_int_not_equal(hp_trainer_new(&c, &t), HP_STATUS_OK);
    hp_test_assert_error_contains("/nonexistent/corpus.txt");
    assert_null(t);

    c = tiny_config(NULL);
    c.model.heads = 3; /* width 32 not divisible by 3 */
    assert_int_equal(hp_trainer_new(&c, &t), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("heads 3");

    /* a checkpoint of a different model shape: resume names the tensor and both shapes */
    char *dir = make_tmpdir();
    c = tiny_config(dir);
    assert_ok(hp_trainer_new(&c, &t));
    assert_ok(hp_trainer_save(t, NULL, 0));
    hp_trainer_free(t);
    c.model.width = 48;
    assert_ok(hp_trainer_new(&c, &t));
    assert_int_equal(hp_trainer_resume(t, dir), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("wte.weight");
    assert_int_equal(hp_trainer_steps_done(t), 0);
    hp_trainer_free(t);

    /* a corrupt checkpoint: truncate the weights */
    c.model.width = 32;
    char path[700], step_dir[600];
    assert_ok(hp_checkpoint_resolve(dir, step_dir, sizeof step_dir));
    snprintf(path, sizeof path, "%s/model.safetensors", step_dir);
    assert_int_equal(truncate(path, 100), 0);
    assert_ok(hp_trainer_new(&c, &t));
    assert_int_not_equal(hp_trainer_resume(t, dir), HP_STATUS_OK);
    hp_test_assert_error_contains("model.safetensors");
    hp_trainer_free(t);
    rm_rf(dir);
    free(dir);
}

/* HyperOffload fault: the disk tier's file removed mid-run stops the step with an error naming it,
 * and the last checkpoint is intact: a new trainer resumes from it and reproduces the losses. */
static void test_offload_disk_fault_keeps_checkpoint(void **state) {
    (void)state;
    char *dir = make_tmpdir(), *disk = make_tmpdir();
    char text[2048];
    snprintf(text, sizeof text,
             "model: {vocab: 256, context: 32, layers: 2, heads: 2, width: 32}\n"
             "data: {corpus: \"%s\"}\n"
             "train: {steps: 20, batch: 4, seed: 7, checkpoint_dir: \"%s\"}\n"
             "offload:\n  device_budget: 600KiB\n  host_budget: 64MiB\n  disk_dir: \"%s\"\n  disk_budget: 64MiB\n"
             "  policy: {params: disk, grads: host, optimizer: disk, activations: host}\n",
             kjv(), dir, disk);
    hp_run_config c;
    assert_ok(hp_run_config_load_string(text, strlen(text), "offload-fault", &c));
    hp_trainer *t;
    double a[6], b[3];
    assert_ok(hp_trainer_new(&c, &t));
    run_steps(t, 3, a);
    assert_ok(hp_trainer_save(t, NULL, 0));
    run_steps(t, 3, a + 3);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*", disk); /* the store's file disappears */
    assert_int_equal(system(cmd), 0);
    hp_step_metrics m;
    assert_int_equal(hp_trainer_step(t, &m), HP_STATUS_IO);
    hp_test_assert_error_contains(disk);
    hp_trainer_free(t);
    assert_ok(hp_trainer_new(&c, &t)); /* a new store file; the checkpoint at step 3 */
    assert_ok(hp_trainer_resume(t, dir));
    assert_int_equal(hp_trainer_steps_done(t), 3);
    run_steps(t, 3, b);
    for (int i = 0; i < 3; i++)
        if (a[3 + i] != b[i]) fail_msg("step %d after resume: %.9g, before the fault %.9g", 4 + i, b[i], a[3 + i]);
    hp_trainer_free(t);
    hp_run_config_free(&c);
    rm_rf(dir);
    rm_rf(disk);
    free(dir);
    free(disk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_gpt_param_gradients),
        cmocka_unit_test(test_deterministic_for_seed),
        cmocka_unit_test(test_resume_matches_uninterrupted),
        cmocka_unit_test(test_dropout_resume_and_eval),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_offload_disk_fault_keeps_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
