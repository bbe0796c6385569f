/*
 * Bad Hugging Face input to hp convert (hp/hf.h): each case is a copy of tests/data/hf/gpt2-tiny or
 * llama-tiny with one thing wrong, and hp_hf_read / hp_hf_import must fail with the expected status
 * and a message naming the file and the value: config.json disagreeing with its tensors (shape:
 * both shapes; a missing tensor; an extra one), unsupported model_type, activation, LayerNorm
 * epsilon, rope_scaling and Qwen2's q/k/v biases, a corrupt or truncated safetensors file, an F16
 * tensor, a non-finite weight, a tied head that differs from the embedding, a shard the index
 * names that is missing, a run directory that already holds checkpoints.
 */
#include "ckptutil.h"

#include "hp/hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp-hf-bad.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* A fresh copy of tests/data/hf/<model> as <tmp>/<name>; the path in a static buffer. */
static const char *copy_of(const char *model, const char *name) {
    static char dst[512];
    char src[512];
    snprintf(src, sizeof src, "tests/data/hf/%s", model);
    snprintf(dst, sizeof dst, "%s/%s", g_tmp, name);
    ck_copy_dir(hp_test_source_path(src), dst);
    return dst;
}

static const char *file_in(const char *dir, const char *name) {
    static char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* config.json of dir with key set to the JSON value `value` (NULL: removed). */
static void set_config(const char *dir, const char *key, const char *value) {
    const char *p = file_in(dir, "config.json");
    cJSON *c = ck_read_json(p);
    cJSON_DeleteItemFromObject(c, key);
    if (value) cJSON_AddItemToObject(c, key, cJSON_Parse(value));
    ck_write_json(p, c);
    cJSON_Delete(c);
}

/* hp_hf_read(dir) fails with `want` and a message holding every needle (NULL-terminated). */
static void expect(const char *dir, hp_status want, ...) {
    hp_hf_model m;
    hp_status st = hp_hf_read(dir, &m);
    hp_hf_model_free(&m);
    if (st != want)
        fail_msg("hp_hf_read(%s) returned %s (%s), expected %s", dir, hp_status_str(st), hp_error_message(),
                 hp_status_str(want));
    va_list ap;
    va_start(ap, want);
    for (const char *n; (n = va_arg(ap, const char *));) hp_test_assert_error_contains(n);
    va_end(ap);
    print_message("ok: %s\n", hp_error_message());
}

static void test_shape_mismatch_names_tensor_and_shapes(void **state) {
    (void)state;
    const char *d = copy_of("gpt2-tiny", "ctx");
    set_config(d, "n_positions", "64");
    set_config(d, "n_ctx", "64");
    expect(d, HP_STATUS_SHAPE, "model.safetensors", "'wpe.weight'", "[32, 32]", "[64, 32]", "n_positions 64", NULL);
    d = copy_of("gpt2-tiny", "width");
    set_config(d, "n_embd", "64");
    expect(d, HP_STATUS_SHAPE, "'wte.weight'", "[320, 32]", "[320, 64]", NULL);
    d = copy_of("llama-tiny", "kv");
    set_config(d, "num_key_value_heads", "4");
    expect(d, HP_STATUS_SHAPE, "model-00001-of-00002.safetensors", "'model.layers.0.self_attn.k_proj.weight'", "[16, 32]",
           "[32, 32]", NULL);
}

static void test_missing_and_extra_tensors(void **state) {
    (void)state;
    const char *d = copy_of("gpt2-tiny", "more-layers");
    set_config(d, "n_layer", "3");
    expect(d, HP_STATUS_NOT_FOUND, "model.safetensors", "lacks tensor 'h.2.ln_1.weight'", "n_layer 3", NULL);
    d = copy_of("gpt2-tiny", "fewer-layers");
    set_config(d, "n_layer", "1");
    expect(d, HP_STATUS_CORRUPT, "model.safetensors", "'h.1.", "is not part of the model", "n_layer 1", NULL);
    d = copy_of("llama-tiny", "untied");
    set_config(d, "tie_word_embeddings", "true");
    /* a tied config with a different stored head: the head must be the embedding */
    expect(d, HP_STATUS_CORRUPT, "lm_head.weight", "differs from 'model.embed_tokens.weight'", NULL);
    d = copy_of("gpt2-tiny", "head");
    set_config(d, "tie_word_embeddings", "false");
    expect(d, HP_STATUS_NOT_FOUND, "lacks tensor 'lm_head.weight'", "tie_word_embeddings false", NULL);
}

static void test_unsupported_configs(void **state) {
    (void)state;
    const char *d = copy_of("gpt2-tiny", "bert");
    set_config(d, "model_type", "\"bert\"");
    expect(d, HP_STATUS_UNSUPPORTED, "config.json", "model_type 'bert'", "gpt2, llama, qwen2 and mixtral", NULL);
    d = copy_of("gpt2-tiny", "gelu");
    set_config(d, "activation_function", "\"gelu\"");
    expect(d, HP_STATUS_UNSUPPORTED, "config.json", "'activation_function' is 'gelu'", "gelu_new", NULL);
    d = copy_of("gpt2-tiny", "eps");
    set_config(d, "layer_norm_epsilon", "1e-6");
    expect(d, HP_STATUS_UNSUPPORTED, "'layer_norm_epsilon' is 1e-06", "1e-05", NULL);
    d = copy_of("gpt2-tiny", "inner");
    set_config(d, "n_inner", "100");
    expect(d, HP_STATUS_UNSUPPORTED, "'n_inner' is 100", NULL);
    d = copy_of("gpt2-tiny", "noembd");
    set_config(d, "n_embd", NULL);
    expect(d, HP_STATUS_CORRUPT, "config.json", "missing key 'n_embd'", NULL);
    d = copy_of("gpt2-tiny", "badheads");
    set_config(d, "n_head", "2.5");
    expect(d, HP_STATUS_CORRUPT, "'n_head' must be a whole number", "2.5", NULL);
    d = copy_of("llama-tiny", "rope");
    set_config(d, "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}");
    expect(d, HP_STATUS_UNSUPPORTED, "'rope_scaling' is {\"rope_type\":\"llama3\"", NULL);
    d = copy_of("llama-tiny", "act");
    set_config(d, "hidden_act", "\"gelu\"");
    expect(d, HP_STATUS_UNSUPPORTED, "'hidden_act' is 'gelu'", NULL);
    d = copy_of("gpt2-tiny", "huge");
    set_config(d, "n_embd", "2147483646");
    set_config(d, "n_head", "2");
    expect(d, HP_STATUS_INVALID_ARGUMENT, "too large", "2^48", NULL); /* before any allocation */
    d = copy_of("gpt2-tiny", "nojson");
    ck_spit(file_in(d, "config.json"), "{\"model_type\": \"gpt2\",", 22);
    expect(d, HP_STATUS_CORRUPT, "config.json", "not a JSON object", NULL);
    char p[600];
    snprintf(p, sizeof p, "%s/none", g_tmp);
    expect(p, HP_STATUS_IO, "none/config.json", NULL);
}

/* A Qwen2 checkpoint: the Llama names plus q/k/v biases, which are refused by name. */
static void test_qwen2_biases_refused(void **state) {
    (void)state;
    hp_hf_model m;
    assert_ok(hp_hf_read(hp_test_source_path("tests/data/hf/llama-tiny"), &m));
    const char *d = copy_of("gpt2-tiny", "qwen");
    ck_sh2("rm -f '%s/model.safetensors' '%s/config.json'", d, d);
    hp_named_tensor *t = calloc(m.n + 1, sizeof *t);
    memcpy(t, m.tensors, m.n * sizeof *t);
    float bias[32] = {0};
    t[m.n] = (hp_named_tensor){"model.layers.0.self_attn.q_proj.bias", HP_DTYPE_F32, HP_SHAPE(32), bias};
    assert_ok(hp_safetensors_write(file_in(d, "model.safetensors"), t, m.n + 1, NULL, 0));
    ck_sh2("cp '%s/config.json' '%s/'", hp_test_source_path("tests/data/hf/llama-tiny"), d);
    set_config(d, "model_type", "\"qwen2\"");
    set_config(d, "architectures", "[\"Qwen2ForCausalLM\"]");
    expect(d, HP_STATUS_UNSUPPORTED, "model.safetensors", "'model.layers.0.self_attn.q_proj.bias'", "model_type qwen2",
           "projection bias", NULL);
    free(t);
    hp_hf_model_free(&m);
}

static void test_corrupt_files(void **state) {
    (void)state;
    const char *d = copy_of("gpt2-tiny", "trunc");
    ck_sh2("truncate -s 100000 '%s/%s'", d, "model.safetensors");
    expect(d, HP_STATUS_CORRUPT, "model.safetensors", NULL);
    d = copy_of("gpt2-tiny", "garbage");
    ck_spit(file_in(d, "model.safetensors"), "\xff\xff\xff\xff\xff\xff\xff\x7fnot a header", 20);
    expect(d, HP_STATUS_CORRUPT, "model.safetensors", NULL);
    d = copy_of("gpt2-tiny", "nofile");
    ck_sh2("rm '%s/%s'", d, "model.safetensors");
    expect(d, HP_STATUS_IO, "neither model.safetensors nor model.safetensors.index.json", NULL);
    d = copy_of("llama-tiny", "noshard");
    ck_sh2("rm '%s/%s'", d, "model-00002-of-00002.safetensors");
    expect(d, HP_STATUS_IO, "model-00002-of-00002.safetensors", NULL);
    d = copy_of("llama-tiny", "badindex");
    ck_replace(file_in(d, "model.safetensors.index.json"), "\"weight_map\"", "\"weight_mop\"");
    expect(d, HP_STATUS_CORRUPT, "model.safetensors.index.json", "weight_map", NULL);
    d = copy_of("llama-tiny", "wrongshard");
    /* the index places a tensor of shard 2 in shard 1 */
    ck_replace(file_in(d, "model.safetensors.index.json"),
               "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"",
               "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"");
    expect(d, HP_STATUS_CORRUPT, "places tensor 'model.norm.weight' in", "model-00001-of-00002.safetensors", NULL);
}

/* A hand-made file: one F16 tensor (a dtype hp convert does not read), and a NaN weight. */
static void test_dtype_and_nonfinite(void **state) {
    (void)state;
    const char *d = copy_of("gpt2-tiny", "f16");
    const char *hdr = "{\"wte.weight\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}    ";
    size_t hl = strlen(hdr); /* 8 + hl is a multiple of 8 */
    unsigned char buf[256] = {0};
    uint64_t n = hl;
    memcpy(buf, &n, 8);
    memcpy(buf + 8, hdr, hl);
    ck_spit(file_in(d, "model.safetensors"), buf, 8 + hl + 4);
    expect(d, HP_STATUS_CORRUPT, "model.safetensors", "F16", "F32 and BF16", NULL);
    hp_hf_model m;
    assert_ok(hp_hf_read(hp_test_source_path("tests/data/hf/gpt2-tiny"), &m));
    ((float *)hp_hf_model_find(&m, "blocks.0.mlp.proj.weight")->data)[7] = NAN;
    char p[600];
    snprintf(p, sizeof p, "%s/nan", g_tmp);
    assert_ok(hp_hf_write(p, &m, NULL));
    hp_hf_model_free(&m);
    expect(p, HP_STATUS_CORRUPT, "model.safetensors", "'transformer.h.0.mlp.c_proj.weight' holds nan", NULL);
}

static void test_import_refuses_used_run_dir(void **state) {
    (void)state;
    char run[600];
    snprintf(run, sizeof run, "%s/run", g_tmp);
    hp_hf_import_info in;
    assert_ok(hp_hf_import(hp_test_source_path("tests/data/hf/gpt2-tiny"), run, &in));
    assert_int_equal(hp_hf_import(hp_test_source_path("tests/data/hf/gpt2-tiny"), run, &in),
                     HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("already holds checkpoints");
    /* export of something that is not a checkpoint names it */
    hp_hf_export_info ex;
    snprintf(run, sizeof run, "%s/nothing", g_tmp);
    assert_int_equal(hp_hf_export(run, run, &ex), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("nothing");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shape_mismatch_names_tensor_and_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_extra_tensors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsupported_configs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_qwen2_biases_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dtype_and_nonfinite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_import_refuses_used_run_dir, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
