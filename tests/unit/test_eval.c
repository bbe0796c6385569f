/*
 * hp_eval_checkpoint (hp/eval.h) on a tiny trained checkpoint: the loss equals the trainer's own
 * validation loss where their windows coincide, and a hand computation with the model's
 * CROSS_ENTROPY operator over the same windows (the last partial one included) on a file; bits per
 * byte = loss / ln 2 for bytes; every batch size gives the same loss; the trainer's coverage of the
 * split; bad input gives a message naming the bad path or value.
 */
#include "testutil.h"

#include "hp/checkpoint.h"
#include "hp/config.h"
#include "hp/eval.h"
#include "hp/nn.h"
#include "hp/runtime.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T_CTX 16

typedef struct fixture {
    char dir[64];       /* temporary directory */
    char run[128];      /* run directory (checkpoint_dir) */
    char corpus[128];   /* the first 1000 bytes of the KJV */
    char text[128];     /* 100 bytes: 99 targets = 6 full windows of 16 + one of 3 */
    double val_loss;    /* the trainer's validation loss after training */
    hp_val_coverage cov;
} fixture;

static void write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Trains 10 steps of a tiny model on 1000 bytes whose held-out split is 129 tokens: exactly the
 * 8 windows of 16 that eval_batches x batch = 2 x 4 cover. */
static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/hp-test-eval-XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    snprintf(fx->run, sizeof fx->run, "%s/run", fx->dir);
    snprintf(fx->corpus, sizeof fx->corpus, "%s/tiny.txt", fx->dir);
    snprintf(fx->text, sizeof fx->text, "%s/text.txt", fx->dir);
    FILE *k = fopen(hp_test_source_path("data/kjv.txt"), "rb");
    if (!k) return -1;
    char buf[1000];
    size_t got = fread(buf, 1, sizeof buf, k);
    fclose(k);
    if (got != sizeof buf) return -1;
    write_file(fx->corpus, buf, 1000);
    write_file(fx->text, buf + 500, 100);
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "model: {vocab: 256, context: %d, layers: 1, heads: 2, width: 16}\n"
             "data: {corpus: \"%s\", val_fraction: 0.1295}\n"
             "train: {steps: 10, batch: 4, seed: 3, eval_batches: 2, checkpoint_dir: \"%s\"}\n",
             T_CTX, fx->corpus, fx->run);
    hp_run_config c;
    if (hp_run_config_load_string(yaml, strlen(yaml), "eval-test", &c) != HP_STATUS_OK) return -1;
    hp_trainer *t;
    if (hp_trainer_new(&c, &t) != HP_STATUS_OK) return -1;
    hp_step_metrics m;
    for (int i = 0; i < 10; i++)
        if (hp_trainer_step(t, &m) != HP_STATUS_OK) return -1;
    if (hp_trainer_eval(t, &fx->val_loss) != HP_STATUS_OK) return -1;
    hp_trainer_val_coverage(t, &fx->cov);
    if (hp_trainer_save(t, NULL, 0) != HP_STATUS_OK) return -1;
    hp_trainer_free(t);
    hp_run_config_free(&c);
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
    int rc = system(cmd);
    free(fx);
    return rc == 0 ? 0 : -1;
}

static void test_windows(void **state) {
    (void)state;
    assert_int_equal(hp_eval_windows(0, 16), 0);
    assert_int_equal(hp_eval_windows(1, 16), 0);
    assert_int_equal(hp_eval_windows(2, 16), 1);
    assert_int_equal(hp_eval_windows(17, 16), 1);
    assert_int_equal(hp_eval_windows(18, 16), 2);
    assert_int_equal(hp_eval_windows(129, 16), 8);
    assert_int_equal(hp_eval_windows(100, 16), 7);
}

/* The held-out split: the same windows as the trainer's evaluation, so the same loss. */
static void test_matches_trainer_val_loss(void **state) {
    fixture *fx = *state;
    assert_int_equal(fx->cov.windows, 8);
    assert_int_equal(fx->cov.tokens, 128);
    assert_close(fx->cov.fraction, 1.0, 0, 1e-12);
    assert_close(fx->cov.bytes_per_token, 1.0, 0, 1e-12); /* bytes: one byte per target after an eval */
    hp_eval_result r;
    assert_ok(hp_eval_checkpoint(fx->run, NULL, &r));
    assert_true(r.held_out);
    assert_int_equal(r.step, 10);
    assert_int_equal(r.tokens, 128);
    assert_int_equal(r.bytes, 128);
    assert_int_equal(r.windows, 8);
    assert_int_equal(r.context, T_CTX);
    assert_string_equal(r.tokenizer, "bytes");
    assert_close(r.loss, fx->val_loss, 2e-6, 0);
    assert_close(r.bpb, r.loss / log(2.0), 1e-12, 0);
    assert_close(r.perplexity, exp(r.loss), 1e-12, 0);
    assert_close(r.nats, r.loss * 128, 1e-12, 0);
    /* the model learned something: below the uniform 5.545 nats of 256 bytes */
    assert_true(r.loss < log(256.0));
}

/* One window of `len` tokens at `start`: the model built for (1, len) with its loss operator. */
static double window_nats(const char *step_dir, const hp_gpt_config *gc, const unsigned char *bytes, int start,
                          int len) {
    hp_graph *g = hp_graph_new();
    hp_gpt gpt;
    assert_ok(hp_gpt_build(g, gc, 1, len, true, &gpt));
    hp_tid keep = gpt.loss;
    hp_program *p = hp_test_compile(g, &keep, 1);
    int n = hp_graph_params(g, NULL, 0);
    hp_tid *ids = calloc((size_t)n, sizeof *ids);
    hp_named_tensor *named = calloc((size_t)n, sizeof *named);
    hp_graph_params(g, ids, n);
    for (int i = 0; i < n; i++) {
        const hp_tensor *x = hp_graph_tensor(g, ids[i]);
        named[i] = (hp_named_tensor){x->name, x->dtype, x->shape, hp_program_data(p, ids[i])};
    }
    assert_ok(hp_checkpoint_load_model(step_dir, named, (size_t)n));
    int32_t *x = hp_program_data(p, gpt.tokens), *y = hp_program_data(p, gpt.targets);
    for (int t = 0; t < len; t++) {
        x[t] = bytes[start + t];
        y[t] = bytes[start + t + 1];
    }
    assert_ok(hp_program_run(p));
    double nats = (double)*(float *)hp_program_data(p, gpt.loss) * len;
    free(ids);
    free(named);
    hp_program_free(p);
    hp_graph_free(g);
    return nats;
}

/* A file of 100 bytes: 6 full windows and a last one of 3 targets, every batch size alike. */
static void test_file_hand_computation(void **state) {
    fixture *fx = *state;
    hp_eval_opts o = HP_EVAL_OPTS_INIT;
    o.data = fx->text;
    hp_eval_result r;
    assert_ok(hp_eval_checkpoint(fx->run, &o, &r));
    assert_false(r.held_out);
    assert_int_equal(r.tokens, 99);
    assert_int_equal(r.bytes, 99);
    assert_int_equal(r.windows, 7);
    hp_gpt_config gc = {.vocab = 256, .context = T_CTX, .layers = 1, .heads = 2, .width = 16};
    unsigned char bytes[100];
    FILE *f = fopen(fx->text, "rb");
    assert_non_null(f);
    assert_int_equal(fread(bytes, 1, 100, f), 100);
    fclose(f);
    double nats = 0;
    for (int k = 0; k < 7; k++) {
        int start = k * T_CTX, len = 99 - start < T_CTX ? 99 - start : T_CTX;
        nats += window_nats(r.step_dir, &gc, bytes, start, len);
    }
    assert_close(r.nats, nats, 2e-6, 0);
    assert_close(r.loss, nats / 99, 2e-6, 0);
    assert_close(r.bpb, r.loss / log(2.0), 1e-12, 0);
    int64_t batches[] = {1, 2, 3, 7, 100};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        hp_eval_result b;
        o.batch = batches[i];
        assert_ok(hp_eval_checkpoint(fx->run, &o, &b));
        assert_int_equal(b.batch, batches[i] < 7 ? batches[i] : 7);
        assert_close(b.loss, r.loss, 1e-6, 0);
    }
}

/* The trainer's coverage when eval_batches x batch is short of the split, or wraps past it. */
static void test_trainer_coverage(void **state) {
    fixture *fx = *state;
    for (int eb = 1; eb <= 3; eb += 2) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml,
                 "model: {vocab: 256, context: %d, layers: 1, heads: 2, width: 16}\n"
                 "data: {corpus: \"%s\", val_fraction: 0.1295}\n"
                 "train: {steps: 10, batch: 4, seed: 3, eval_batches: %d, checkpoint_dir: \"%s/unused\"}\n",
                 T_CTX, fx->corpus, eb, fx->dir);
        hp_run_config c;
        assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "eval-test", &c));
        hp_trainer *t;
        assert_ok(hp_trainer_new(&c, &t));
        hp_val_coverage v;
        hp_trainer_val_coverage(t, &v);
        assert_int_equal(v.windows, eb == 1 ? 4 : 8); /* 12 batches' rows wrap over the 8 windows */
        assert_int_equal(v.tokens, v.windows * T_CTX);
        assert_close(v.fraction, eb == 1 ? 0.5 : 1.0, 0, 1e-12);
        assert_close(v.bytes_per_token, 0, 0, 0); /* unknown before the first hp_trainer_eval */
        hp_trainer_free(t);
        hp_run_config_free(&c);
    }
}

static void expect_error(const char *ckpt, const hp_eval_opts *o, hp_status want, const char *needle) {
    hp_eval_result r;
    hp_status st = hp_eval_checkpoint(ckpt, o, &r);
    if (st != want) fail_msg("%s: got %s (%s), want %s", ckpt, hp_status_str(st), hp_error_message(), hp_status_str(want));
    hp_test_assert_error_contains(needle);
}

static void test_bad_input(void **state) {
    fixture *fx = *state;
    char path[256];
    hp_eval_opts o = HP_EVAL_OPTS_INIT;
    snprintf(path, sizeof path, "%s/no-such-run", fx->dir);
    expect_error(path, &o, HP_STATUS_NOT_FOUND, "no-such-run");
    expect_error(fx->corpus, &o, HP_STATUS_INVALID_ARGUMENT, "not a directory");
    snprintf(path, sizeof path, "%s/missing.txt", fx->dir);
    o.data = path;
    expect_error(fx->run, &o, HP_STATUS_IO, "missing.txt");
    snprintf(path, sizeof path, "%s/empty.txt", fx->dir);
    write_file(path, "", 0);
    expect_error(fx->run, &o, HP_STATUS_CORRUPT, "is empty");
    snprintf(path, sizeof path, "%s/one.txt", fx->dir);
    write_file(path, "A", 1);
    expect_error(fx->run, &o, HP_STATUS_INVALID_ARGUMENT, "nothing to predict");
    o.data = fx->dir; /* a directory */
    expect_error(fx->run, &o, HP_STATUS_IO, "not a regular file");
    o.data = NULL;
    o.batch = -1;
    expect_error(fx->run, &o, HP_STATUS_INVALID_ARGUMENT, "batch -1");
    o.batch = 0;
    o.tokenizer = "no-such-tokenizer.json";
    hp_eval_result r;
    assert_true(hp_eval_checkpoint(fx->run, &o, &r) != HP_STATUS_OK);
    hp_test_assert_error_contains("no-such-tokenizer.json");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_matches_trainer_val_loss),
        cmocka_unit_test(test_file_hand_computation),
        cmocka_unit_test(test_trainer_coverage),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
