/*
 * The multimodal model (hp/multimodal.h): the IDX reader (gzip and plain, and each malformed
 * header named), the captions, patches, the dynamic scheduler (valid orders; concurrent beats the
 * linear pipeline when the encoders' loads differ) and a tiny model that learns Fashion-MNIST
 * captions on one device (loss falls, greedy test accuracy above chance).
 */
#include "testutil.h"

#include "hp/costmodel.h"
#include "hp/multimodal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define FMNIST "/usr/share/datasets/fashion-mnist"

/* Writes an IDX file of bytes: magic (type, ndim), dims, then `n` data bytes (0, 1, 2, ...). */
static void write_idx(const char *path, bool gz, int type, int ndim, const uint32_t *dims, size_t n) {
    uint8_t head[4 + 16];
    head[0] = head[1] = 0;
    head[2] = (uint8_t)type;
    head[3] = (uint8_t)ndim;
    if (ndim > 4) ndim = 0; /* a bad count: the reader stops before the sizes */
    for (int d = 0; d < ndim; d++)
        for (int k = 0; k < 4; k++) head[4 + 4 * d + k] = (uint8_t)(dims[d] >> (24 - 8 * k));
    uint8_t *data = malloc(n + 1);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i % 10);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        gzwrite(f, head, 4 + 4 * (unsigned)ndim);
        if (n) gzwrite(f, data, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fwrite(head, 1, 4 + 4 * (size_t)ndim, f);
        fwrite(data, 1, n, f);
        fclose(f);
    }
    free(data);
}

static void test_idx_reader(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "/tmp/hp_test_mm_%d.idx", (int)getpid());
    uint32_t dims[3] = {3, 2, 4};
    for (int gz = 0; gz < 2; gz++) {
        write_idx(path, gz, 0x08, 3, dims, 24);
        hp_idx x;
        assert_ok(hp_idx_load(path, &x));
        assert_int_equal(x.ndim, 3);
        assert_int_equal(x.dims[0], 3);
        assert_int_equal(x.dims[2], 4);
        assert_int_equal(x.data[23], 3);
        hp_idx_free(&x);
    }
    hp_idx x;
    write_idx(path, true, 0x0D, 3, dims, 24); /* float elements */
    assert_int_equal(hp_idx_load(path, &x), HP_STATUS_UNSUPPORTED);
    hp_test_assert_error_contains("element type 0x0d");
    hp_test_assert_error_contains(path);
    write_idx(path, false, 0x08, 3, dims, 20); /* short */
    assert_int_equal(hp_idx_load(path, &x), HP_STATUS_IO);
    hp_test_assert_error_contains("declares 24 data bytes");
    write_idx(path, false, 0x08, 3, dims, 25); /* long */
    assert_int_equal(hp_idx_load(path, &x), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("data past the 24 bytes");
    write_idx(path, false, 0x08, 7, dims, 0);
    assert_int_equal(hp_idx_load(path, &x), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("dimension count 7");
    uint32_t zero[2] = {3, 0};
    write_idx(path, false, 0x08, 2, zero, 0);
    assert_int_equal(hp_idx_load(path, &x), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("dimension 1 is 0");
    unlink(path);
    assert_int_equal(hp_idx_load(path, &x), HP_STATUS_IO);
    hp_test_assert_error_contains("cannot open");
    assert_null(x.data);
}

static void test_captions_and_patches(void **state) {
    (void)state;
    int32_t tok[HP_MM_CAPTION], tgt[HP_MM_CAPTION];
    assert_ok(hp_mm_caption(9, tok, tgt));
    const char *want[HP_MM_CAPTION] = {"a", "photo", "of", "an", "ankle", "boot", "<eos>"};
    for (int t = 0; t < HP_MM_CAPTION; t++) {
        assert_string_equal(hp_mm_vocab_word(tgt[t]), want[t]);
        if (t) assert_int_equal(tok[t], tgt[t - 1]);
    }
    assert_int_equal(tok[0], HP_MM_BOS);
    char text[64];
    hp_mm_caption_text(1, text, sizeof text);
    assert_string_equal(text, "a photo of a trouser");
    assert_int_equal(hp_mm_caption(10, tok, tgt), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("label 10");
    uint8_t img[28 * 28];
    for (int i = 0; i < 28 * 28; i++) img[i] = (uint8_t)(i % 251);
    uint8_t lab = 0;
    hp_mm_data d = {.n = 1, .rows = 28, .cols = 28, .images = img, .labels = &lab};
    float p[28 * 28];
    int64_t idx = 0;
    assert_ok(hp_mm_patchify(&d, &idx, 1, 7, p));
    /* patch (1, 2) of the 4x4 grid is patch 6; its pixel (3, 5) is image (10, 19) */
    assert_float_equal(p[6 * 49 + 3 * 7 + 5], (float)((10 * 28 + 19) % 251) / 255.0f, 1e-7);
    assert_int_equal(hp_mm_patchify(&d, &idx, 1, 5, p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("patch 5");
    idx = 1;
    assert_int_equal(hp_mm_patchify(&d, &idx, 1, 7, p), HP_STATUS_INVALID_ARGUMENT);
}

/* Every pass of every group appears once, in micro-batch order per kind. */
static void check_orders(const hp_mm_schedule *s) {
    for (int r = 0; r < HP_MM_ROLES; r++) {
        int nf = 0, nb = 0;
        for (int k = 0; k < s->n_ops[r]; k++) {
            const hp_mm_op *o = &s->ops[r][k];
            if (o->backward) assert_int_equal(o->mb, nb++);
            else assert_int_equal(o->mb, nf++);
            if (o->backward) assert_true(nb <= nf);
        }
        assert_int_equal(nf, s->m);
        assert_int_equal(nb, r == HP_MM_ROLE_DEC ? 0 : s->m);
    }
}

static void test_schedule(void **state) {
    (void)state;
    /* encoder b four times encoder a, the decoder in between */
    double tf[3] = {1, 4, 3}, tb[3] = {2, 8, 0};
    hp_mm_schedule con, chain;
    assert_ok(hp_mm_schedule_make(HP_MM_MODE_CONCURRENT, 8, tf, tb, 0.0, &con));
    assert_ok(hp_mm_schedule_make(HP_MM_MODE_CHAIN, 8, tf, tb, 0.0, &chain));
    check_orders(&con);
    check_orders(&chain);
    /* the heavy encoder bounds both (8 x 12); the chain adds encoder a's fill and drain (1 + 2) */
    assert_float_equal(con.makespan, 96.0, 1e-9);
    assert_float_equal(chain.makespan, 99.0, 1e-9);
    /* two equal encoders and a heavier decoder: the chain's deeper pipeline idles much more */
    double ef[3] = {2, 2, 3}, eb[3] = {4, 4, 0};
    assert_ok(hp_mm_schedule_make(HP_MM_MODE_CONCURRENT, 4, ef, eb, 0.0, &con));
    assert_ok(hp_mm_schedule_make(HP_MM_MODE_CHAIN, 4, ef, eb, 0.0, &chain));
    check_orders(&con);
    assert_float_equal(con.makespan, 26.0, 1e-9);
    assert_float_equal(chain.makespan, 37.0, 1e-9);
    assert_int_equal(hp_mm_schedule_make(HP_MM_MODE_CONCURRENT, 65, ef, eb, 0.0, &con), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("65 micro-batches");
    ef[1] = -1;
    assert_int_equal(hp_mm_schedule_make(HP_MM_MODE_CONCURRENT, 4, ef, eb, 0.0, &con), HP_STATUS_INVALID_ARGUMENT);
}

static void test_plan(void **state) {
    (void)state;
    hp_mm_config c = {.enc = {{7, 1, 16}, {4, 2, 16}}, .heads = 2, .dec_layers = 1, .width = 16, .image_rows = 28,
                      .image_cols = 28};
    double tf[3], tb[3];
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    assert_ok(hp_mm_predict_passes(&c, 4, 2, &mm, tf, tb));
    /* encoder b (49 tokens, 2 layers) costs more than encoder a (16 tokens, 1 layer); backward > forward */
    assert_true(tf[0] > 0 && tf[1] > tf[0] && tb[1] > tb[0] && tb[0] > tf[0]);
    assert_true(tf[2] > 0 && tb[2] == 0);
    assert_int_equal(hp_mm_predict_passes(&c, 0, 2, &mm, tf, tb), HP_STATUS_INVALID_ARGUMENT);
    /* per micro-batch a 3, b 6, the decoder 12: on 6 ranks 1, 2, 3 (3, 3, 4) beats 1, 1, 4 (3, 6, 3) */
    double f[3] = {1, 2, 12}, b[3] = {2, 4, 0};
    int best[3];
    double t3, t6;
    assert_ok(hp_mm_suggest_split(f, b, 8, 3, best, &t3));
    assert_int_equal(best[0] + best[1] + best[2], 3);
    assert_ok(hp_mm_suggest_split(f, b, 8, 6, best, &t6));
    assert_int_equal(best[0], 1);
    assert_int_equal(best[1], 2);
    assert_int_equal(best[2], 3);
    assert_true(t6 < t3 / 2);
    assert_int_equal(hp_mm_suggest_split(f, b, 8, 2, best, &t6), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("2 ranks");
}

static void test_config_errors(void **state) {
    (void)state;
    hp_run_config c;
    const char *bad = "model: {family: multimodal, heads: 2, multimodal: {patch_a: 5}}\n";
    assert_int_equal(hp_run_config_load_string(bad, strlen(bad), "mm.yaml", &c), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("mm.yaml:1:");
    hp_test_assert_error_contains("patch_a 5 does not divide");
    const char *wide = "model: {family: multimodal, heads: 4, width: 32, multimodal: {width_b: 30}}\n";
    assert_int_equal(hp_run_config_load_string(wide, strlen(wide), "mm.yaml", &c), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("width_b 30 is not divisible by model.heads 4");
    const char *gpt = "model: {multimodal: {patch_a: 7}}\n";
    assert_int_equal(hp_run_config_load_string(gpt, strlen(gpt), "mm.yaml", &c), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("only with model.family: multimodal");
    const char *grp = "model: {family: multimodal, heads: 2, width: 32}\ntrain: {batch: 4}\n"
                      "groups: {a: {kind: encoder, ranks: [0]}, b: {kind: encoder, ranks: [1]}, c: {kind: stage, "
                      "ranks: [2], module: [embedding, blocks.0-3, head]}}\n";
    assert_int_equal(hp_run_config_load_string(grp, strlen(grp), "mm.yaml", &c), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("groups.c: kind 'stage' with model.family multimodal");
    const char *ok = "model: {family: multimodal, heads: 2, width: 32}\ntrain: {batch: 4}\npipeline: {micro_batches: 2}\n"
                     "groups: {a: {kind: encoder, ranks: [0]}, b: {kind: encoder, ranks: [1]}, c: {kind: fusion, "
                     "ranks: [2]}}\n";
    assert_ok(hp_run_config_load_string(ok, strlen(ok), "mm.yaml", &c));
    assert_int_equal(c.groups.n_groups, 3);
    assert_int_equal(c.model.multimodal.patch_b, 4);
    hp_run_config_free(&c);
}

static void test_tiny_model_learns(void **state) {
    (void)state;
    if (access(FMNIST "/train-labels-idx1-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "skipping: " FMNIST " is missing (scripts/setup.sh installs dataset-fashion-mnist)\n");
        skip();
    }
    const char *text = "model: {family: multimodal, layers: 1, heads: 2, width: 32,\n"
                       "  multimodal: {patch_a: 7, layers_a: 1, width_a: 16, patch_b: 4, layers_b: 1, width_b: 16,\n"
                       "               train_images: 4000, test_images: 200}}\n"
                       "train: {steps: 120, batch: 16, seed: 1}\n"
                       "optim: {lr: 0.01, min_lr: 0.001, warmup: 10, weight_decay: 0.0, grad_clip: 1.0}\n";
    hp_run_config c;
    assert_ok(hp_run_config_load_string(text, strlen(text), "tiny_mm.yaml", &c));
    hp_mm_runner *r;
    assert_ok(hp_mm_runner_new(&c, NULL, HP_MM_MODE_CONCURRENT, &r));
    double first = 0, last = 0;
    for (int s = 0; s < 120; s++) {
        hp_mm_step_stats st;
        assert_ok(hp_mm_runner_step(r, &st));
        if (s < 5) first += st.loss / 5.0;
        if (s >= 115) last += st.loss / 5.0;
    }
    double acc, cap;
    assert_ok(hp_mm_runner_eval(r, 200, &acc, &cap));
    fprintf(stderr, "tiny multimodal: loss %.3f -> %.3f, test accuracy %.3f (caption %.3f)\n", first, last, acc, cap);
    assert_true(last < 0.5 * first);
    /* chance: 0.1; 0.30-0.35 measured, the last digit moving with the CPU's GEMM kernels (0.300 on an
     * AVX-512 machine) */
    assert_true(acc >= 0.25);
    assert_true(cap <= acc);
    hp_mm_runner_free(r);
    hp_run_config_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_reader),  cmocka_unit_test(test_captions_and_patches),
        cmocka_unit_test(test_schedule),    cmocka_unit_test(test_config_errors),  cmocka_unit_test(test_plan),
        cmocka_unit_test(test_tiny_model_learns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
