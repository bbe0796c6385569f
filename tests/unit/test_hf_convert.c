/*
 * Hugging Face interop (hp/hf.h), against the independent PyTorch references of scripts/hf-ref/:
 *   - tests/data/hf/gpt2-tiny (the hub's GPT-2 layout: no prefix, mask buffers, tied head) imported
 *     with hp_hf_import has the logits gpt2_ref.py computed from the same files: |ours - ref| <=
 *     ATOL + RTOL |ref| at every position and vocabulary entry; one weight moved by 1e-3 is caught;
 *   - ours -> HF -> ours is bitwise equal (tied and untied heads), and HF -> ours -> HF gives the
 *     original tensors back bitwise (the mask buffers aside), so the fused c_attn and the Conv1D
 *     transposes are exact;
 *   - a sharded copy (index + 2 shards) and a BF16 copy import to the same tensors (BF16 rounded);
 *   - Llama: the file-level mapping round trips bitwise (config and tensors), and the logits test
 *     runs once this build's run config knows model.family: llama (skipped with a message before);
 *   - a model-only checkpoint (no optimizer tensors) passes verification and resumes with zero moments;
 *   - the "hp.model" metadata (the model section as JSON) catches a state.json edit of a key the
 *     summary does not carry (model.dropout).
 */
#include "ckptutil.h"

#include "hp/config.h"
#include "hp/hf.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ATOL 1e-5
#define RTOL 1e-5

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp-hf-test.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", g_tmp, name);
    return b;
}

static void assert_same_tensors(const hp_hf_model *a, const hp_hf_model *b) {
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const hp_named_tensor *x = &a->tensors[i], *y = hp_hf_model_find(b, x->name);
        if (!y) fail_msg("tensor '%s' missing after the round trip", x->name);
        assert_true(hp_shape_equal(&x->shape, &y->shape));
        size_t bytes = (size_t)hp_shape_numel(&x->shape) * 4;
        if (memcmp(x->data, y->data, bytes)) fail_msg("tensor '%s' differs after the round trip", x->name);
    }
}

/* Compares a checkpoint's logits with a reference file; returns the worst |d| / (ATOL + RTOL |ref|). */
static double logits_ratio(const char *ckpt, const char *ref_path, int64_t vocab, bool must_pass) {
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(ref_path, &f));
    const hp_safetensors_entry *tk = hp_safetensors_find(f, "tokens"), *lg = hp_safetensors_find(f, "logits");
    assert_non_null(tk);
    assert_non_null(lg);
    int n = (int)tk->shape.dim[0];
    assert_int_equal(lg->shape.dim[1], vocab);
    int32_t *tokens = malloc(sizeof *tokens * (size_t)n);
    float *ref = malloc(sizeof *ref * (size_t)n * (size_t)vocab), *ours = malloc(sizeof *ours * (size_t)n * (size_t)vocab);
    memcpy(tokens, tk->data, sizeof *tokens * (size_t)n);
    memcpy(ref, lg->data, sizeof *ref * (size_t)n * (size_t)vocab);
    hp_safetensors_close(f);
    assert_ok(hp_checkpoint_logits(ckpt, tokens, n, ours, vocab));
    double worst = 0, wo = 0, wr = 0, maxabs = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < (int64_t)n * vocab; i++) {
        double r = fabs((double)ours[i] - ref[i]) / (ATOL + RTOL * fabs(ref[i]));
        maxabs = fmax(maxabs, fabs((double)ours[i] - ref[i]));
        if (r > worst) worst = r, wi = i, wo = ours[i], wr = ref[i];
    }
    print_message("%s: max |ours - ref| %.3g over %d x %lld logits (worst at position %lld, token %lld: %.7g vs %.7g)\n",
                  ref_path, maxabs, n, (long long)vocab, (long long)(wi / vocab), (long long)(wi % vocab), wo, wr);
    if (must_pass && worst > 1.0)
        fail_msg("logits differ from %s: position %lld token %lld ours %.9g ref %.9g (%.2f x the bound)", ref_path,
                 (long long)(wi / vocab), (long long)(wi % vocab), wo, wr, worst);
    free(tokens);
    free(ref);
    free(ours);
    return worst;
}

static void test_gpt2_logits_match_reference(void **state) {
    (void)state;
    hp_hf_import_info in;
    assert_ok(hp_hf_import(hp_test_source_path("tests/data/hf/gpt2-tiny"), tmp("gpt2"), &in));
    assert_int_equal(in.arch.family, HP_HF_FAMILY_GPT2);
    assert_true(in.arch.tied_head);
    assert_int_equal(in.n_copied, 1);
    assert_string_equal(in.copied[0], "tokenizer.json");
    logits_ratio(tmp("gpt2"), hp_test_source_path("tests/data/hf/gpt2-tiny.ref.safetensors"), 320, true);
}

/* One weight of c_attn (the part that becomes k) moved by 1e-3: the comparison sees it. */
static void test_perturbed_weight_is_caught(void **state) {
    (void)state;
    /* the model rewritten with k's weight [3, 5] moved (through the exporter's layout) */
    hp_hf_model m;
    assert_ok(hp_hf_read(hp_test_source_path("tests/data/hf/gpt2-tiny"), &m));
    float *k = hp_hf_model_find(&m, "blocks.1.attn.k.weight")->data;
    k[3 * 32 + 5] += 1e-3f;
    assert_ok(hp_hf_write(tmp("moved2"), &m, NULL));
    hp_hf_model_free(&m);
    hp_hf_import_info in;
    assert_ok(hp_hf_import(tmp("moved2"), tmp("moved-run"), &in));
    double r = logits_ratio(tmp("moved-run"), hp_test_source_path("tests/data/hf/gpt2-tiny.ref.safetensors"), 320, false);
    assert_true(r > 1.0);
}

/* Random weights (every element distinct) into a GPT checkpoint of this shape (the other model keys
 * at their defaults). */
static void save_random(const hp_model_config *mc, const char *dir, char *step_dir) {
    hp_run_config cfg;
    hp_test_tiny_config(&cfg, dir);
    cfg.model.vocab = mc->vocab;
    cfg.model.context = mc->context;
    cfg.model.layers = mc->layers;
    cfg.model.heads = mc->heads;
    cfg.model.width = mc->width;
    cfg.model.tied_head = mc->tied_head;
    ck_gpt g;
    ck_gpt_make(&cfg.model, &g);
    for (int i = 0; i < g.n; i++)
        hp_test_fill_uniform(g.model[i].data, (size_t)hp_shape_numel(&g.model[i].shape), 100 + (uint64_t)i, -1, 1);
    ck_gpt_save(&g, &cfg, dir, 5, step_dir, 4096);
    ck_gpt_free(&g);
}

static void load_ckpt(const char *step_dir, const hp_hf_arch *a, hp_hf_model *m) {
    assert_ok(hp_hf_model_alloc(a, m));
    assert_ok(hp_checkpoint_load_model(step_dir, m->tensors, m->n));
}

static void test_gpt2_ours_hf_ours_bitwise(void **state) {
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        hp_model_config mc = {.vocab = 260, .context = 12, .layers = 2, .heads = 2, .width = 8, .tied_head = tied};
        char run[256], hf[300], back[300], step[4096];
        snprintf(run, sizeof run, "%s", tmp(tied ? "ours-tied" : "ours-untied"));
        snprintf(hf, sizeof hf, "%s-hf", run);
        snprintf(back, sizeof back, "%s-back", run);
        save_random(&mc, run, step);
        hp_hf_export_info ex;
        assert_ok(hp_hf_export(run, hf, &ex));
        assert_int_equal(ex.step, 5);
        assert_int_equal(ex.arch.tied_head, tied);
        hp_hf_import_info in;
        assert_ok(hp_hf_import(hf, back, &in));
        hp_hf_model a, b;
        load_ckpt(step, &ex.arch, &a);
        load_ckpt(in.step_dir, &in.arch, &b);
        assert_same_tensors(&a, &b);
        /* the exported file is HF's layout: c_attn (C, 3C) holds q^T | k^T | v^T */
        hp_safetensors *f;
        char p[600];
        snprintf(p, sizeof p, "%s/model.safetensors", hf);
        assert_ok(hp_safetensors_open(p, &f));
        const hp_safetensors_entry *ca = hp_safetensors_find(f, "transformer.h.1.attn.c_attn.weight");
        assert_non_null(ca);
        assert_int_equal(ca->shape.dim[0], 8);
        assert_int_equal(ca->shape.dim[1], 24);
        assert_int_equal(hp_safetensors_find(f, "lm_head.weight") != NULL, !tied);
        const float *v = hp_hf_model_find(&a, "blocks.1.attn.v.weight")->data;
        float x;
        memcpy(&x, (const char *)ca->data + 4 * (3 * 24 + 16 + 5), 4); /* c_attn[3][2C + 5] = v[5][3] */
        assert_true(x == v[5 * 8 + 3]);
        hp_safetensors_close(f);
        hp_hf_model_free(&a);
        hp_hf_model_free(&b);
    }
}

/* HF -> ours -> HF: every tensor of the original (but the mask buffers) comes back bitwise. */
static void test_gpt2_hf_ours_hf_bitwise(void **state) {
    (void)state;
    hp_hf_import_info in;
    assert_ok(hp_hf_import(hp_test_source_path("tests/data/hf/gpt2-tiny"), tmp("h1"), &in));
    hp_hf_export_info ex;
    assert_ok(hp_hf_export(tmp("h1"), tmp("h1-hf"), &ex));
    hp_safetensors *orig, *back;
    char p[600];
    assert_ok(hp_safetensors_open(hp_test_source_path("tests/data/hf/gpt2-tiny/model.safetensors"), &orig));
    snprintf(p, sizeof p, "%s/model.safetensors", tmp("h1-hf"));
    assert_ok(hp_safetensors_open(p, &back));
    size_t compared = 0;
    for (size_t i = 0; i < hp_safetensors_count(orig); i++) {
        const hp_safetensors_entry *e = hp_safetensors_entry_at(orig, i);
        size_t len = strlen(e->name);
        if (len > 10 && !strcmp(e->name + len - 10, ".attn.bias")) continue;
        char name[200];
        snprintf(name, sizeof name, "transformer.%s", e->name);
        const hp_safetensors_entry *b = hp_safetensors_find(back, name);
        if (!b) fail_msg("%s lacks '%s'", p, name);
        assert_true(hp_shape_equal(&e->shape, &b->shape));
        if (e->nbytes != b->nbytes || memcmp(e->data, b->data, e->nbytes)) fail_msg("'%s' differs", name);
        compared++;
    }
    assert_int_equal(compared, hp_safetensors_count(back)); /* nothing more was written */
    hp_safetensors_close(orig);
    hp_safetensors_close(back);
    /* config.json keeps the original's other keys (token ids) */
    snprintf(p, sizeof p, "%s/config.json", tmp("h1-hf"));
    cJSON *cfg = ck_read_json(p);
    assert_int_equal(cJSON_GetObjectItem(cfg, "eos_token_id")->valueint, 319);
    assert_string_equal(cJSON_GetObjectItem(cfg, "model_type")->valuestring, "gpt2");
    cJSON_Delete(cfg);
}

/* The hub file split into two shards with an index, and a BF16 copy: the same tensors. */
static void test_sharded_and_bf16(void **state) {
    (void)state;
    hp_hf_model ref;
    assert_ok(hp_hf_read(hp_test_source_path("tests/data/hf/gpt2-tiny"), &ref));
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(hp_test_source_path("tests/data/hf/gpt2-tiny/model.safetensors"), &f));
    size_t n = hp_safetensors_count(f);
    hp_named_tensor *t = calloc(n, sizeof *t), *t16 = calloc(n, sizeof *t16);
    cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
    for (size_t i = 0; i < n; i++) {
        const hp_safetensors_entry *e = hp_safetensors_entry_at(f, i);
        t[i] = (hp_named_tensor){e->name, e->dtype, e->shape, (void *)e->data};
        cJSON_AddStringToObject(wm, e->name, i < n / 2 ? "model-00001-of-00002.safetensors"
                                                       : "model-00002-of-00002.safetensors");
        int64_t numel = hp_shape_numel(&e->shape);
        uint16_t *h = malloc((size_t)numel * 2 + 2);
        for (int64_t k = 0; k < numel; k++) {
            float x;
            memcpy(&x, (const char *)e->data + 4 * k, 4);
            h[k] = hp_f32_to_bf16(x);
        }
        t16[i] = (hp_named_tensor){e->name, HP_DTYPE_BF16, e->shape, h};
    }
    ck_sh2("mkdir -p '%s' '%s'", tmp("sharded"), tmp("bf16"));
    char p[600];
    static const char *const meta[] = {"format", "pt"};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", tmp("sharded"));
    assert_ok(hp_safetensors_write(p, t, n / 2, meta, 1));
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", tmp("sharded"));
    assert_ok(hp_safetensors_write(p, t + n / 2, n - n / 2, meta, 1));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", tmp("sharded"));
    ck_write_json(p, idx);
    snprintf(p, sizeof p, "%s/model.safetensors", tmp("bf16"));
    assert_ok(hp_safetensors_write(p, t16, n, meta, 1));
    ck_sh2("cp '%s/config.json' '%s/'", hp_test_source_path("tests/data/hf/gpt2-tiny"), tmp("sharded"));
    ck_sh2("cp '%s/config.json' '%s/'", hp_test_source_path("tests/data/hf/gpt2-tiny"), tmp("bf16"));
    hp_hf_model sh, b16;
    assert_ok(hp_hf_read(tmp("sharded"), &sh));
    assert_same_tensors(&ref, &sh);
    assert_ok(hp_hf_read(tmp("bf16"), &b16));
    for (size_t i = 0; i < ref.n; i++) {
        const float *x = ref.tensors[i].data, *y = hp_hf_model_find(&b16, ref.tensors[i].name)->data;
        for (int64_t k = 0; k < hp_shape_numel(&ref.tensors[i].shape); k++)
            if (hp_bf16_to_f32(hp_f32_to_bf16(x[k])) != y[k])
                fail_msg("%s[%lld]: bf16 import %g, want %g", ref.tensors[i].name, (long long)k, y[k], x[k]);
    }
    for (size_t i = 0; i < n; i++) free(t16[i].data);
    free(t);
    free(t16);
    cJSON_Delete(idx);
    hp_safetensors_close(f);
    hp_hf_model_free(&ref);
    hp_hf_model_free(&sh);
    hp_hf_model_free(&b16);
}

/* Llama: config.json and the (sharded) tensors through ours and back, bitwise; names one to one. */
static void test_llama_file_roundtrip(void **state) {
    (void)state;
    const char *src = hp_test_source_path("tests/data/hf/llama-tiny");
    hp_hf_model a, b;
    assert_ok(hp_hf_read(src, &a));
    assert_int_equal(a.arch.family, HP_HF_FAMILY_LLAMA);
    assert_int_equal(a.arch.kv_heads, 2);
    assert_int_equal(a.arch.ffn_width, 88);
    assert_true(a.arch.norm_eps == 1e-6);
    assert_true(a.arch.rope_base == 50000.0);
    assert_false(a.arch.tied_head);
    assert_int_equal(a.n, 2 * 9 + 3);
    assert_non_null(hp_hf_model_find(&a, "model.layers.1.self_attn.k_proj.weight"));
    assert_int_equal(hp_hf_model_find(&a, "model.layers.1.self_attn.k_proj.weight")->shape.dim[0], 16);
    assert_ok(hp_hf_write(tmp("llama-out"), &a, NULL));
    assert_ok(hp_hf_read(tmp("llama-out"), &b));
    assert_memory_equal(&a.arch, &b.arch, sizeof a.arch);
    assert_same_tensors(&a, &b);
    /* the file written holds the original shards' tensors under the same names, bitwise */
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", tmp("llama-out"));
    hp_safetensors *out;
    assert_ok(hp_safetensors_open(p, &out));
    for (int s = 1; s <= 2; s++) {
        char shard[600];
        snprintf(shard, sizeof shard, "%s/model-0000%d-of-00002.safetensors", src, s);
        hp_safetensors *f;
        assert_ok(hp_safetensors_open(shard, &f));
        for (size_t i = 0; i < hp_safetensors_count(f); i++) {
            const hp_safetensors_entry *e = hp_safetensors_entry_at(f, i), *o = hp_safetensors_find(out, e->name);
            if (!o || o->nbytes != e->nbytes || memcmp(o->data, e->data, e->nbytes)) fail_msg("'%s' differs", e->name);
        }
        hp_safetensors_close(f);
    }
    hp_safetensors_close(out);
    hp_hf_model_free(&a);
    hp_hf_model_free(&b);
}

static void test_llama_logits_match_reference(void **state) {
    (void)state;
    hp_hf_import_info in;
    hp_status st = hp_hf_import(hp_test_source_path("tests/data/hf/llama-tiny"), tmp("llama-run"), &in);
    if (st == HP_STATUS_UNSUPPORTED && strstr(hp_error_message(), "unknown key 'family'")) {
        print_message("skipped: this build's run config has no model.family, so the Llama family cannot be imported "
                      "yet (%s)\n", hp_error_message());
        skip();
    }
    assert_ok(st);
    logits_ratio(tmp("llama-run"), hp_test_source_path("tests/data/hf/llama-tiny.ref.safetensors"), 320, true);
}

/* An imported checkpoint has no optimizer state: verify passes, and a trainer resumes from it with
 * the weights loaded and both moments zero. */
static void test_model_only_checkpoint_resumes(void **state) {
    (void)state;
    hp_hf_import_info in;
    assert_ok(hp_hf_import(hp_test_source_path("tests/data/hf/gpt2-tiny"), tmp("resume"), &in));
    bool has = true;
    assert_ok(hp_checkpoint_has_optim(in.step_dir, &has));
    assert_false(has);
    hp_checkpoint_report r;
    assert_ok(hp_checkpoint_verify(in.step_dir, &r));
    hp_checkpoint_report_free(&r);
    hp_run_config cfg;
    assert_ok(hp_run_config_load(in.run_yaml, &cfg));
    snprintf(cfg.data.corpus, sizeof cfg.data.corpus, "%s", hp_test_source_path("data/kjv.txt"));
    cfg.train.batch = 2;
    hp_trainer *t;
    assert_ok(hp_trainer_new(&cfg, &t));
    assert_ok(hp_trainer_resume(t, tmp("resume")));
    assert_int_equal(hp_trainer_steps_done(t), 0);
    hp_hf_model m;
    assert_ok(hp_hf_read(hp_test_source_path("tests/data/hf/gpt2-tiny"), &m));
    int64_t numel;
    const float *w = hp_trainer_param(t, "blocks.0.attn.q.weight", &numel);
    assert_non_null(w);
    assert_memory_equal(w, hp_hf_model_find(&m, "blocks.0.attn.q.weight")->data, (size_t)numel * 4);
    const float *mo = hp_trainer_param(t, "exp_avg.blocks.0.attn.q.weight", &numel);
    assert_non_null(mo);
    for (int64_t i = 0; i < numel; i++) assert_true(mo[i] == 0.0f);
    hp_step_metrics sm;
    assert_ok(hp_trainer_step(t, &sm));
    assert_true(isfinite(sm.loss));
    hp_hf_model_free(&m);
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

/* "hp.model" carries every key of the model section: an edit of state.json's model.dropout (not in
 * the "model" summary) is caught. */
static void test_model_json_metadata(void **state) {
    (void)state;
    hp_hf_import_info in;
    assert_ok(hp_hf_import(hp_test_source_path("tests/data/hf/gpt2-tiny"), tmp("meta"), &in));
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", in.step_dir);
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(p, &f));
    const char *js = hp_safetensors_metadata(f, "hp.model");
    assert_non_null(js);
    cJSON *m = cJSON_Parse(js);
    assert_int_equal(cJSON_GetObjectItem(m, "vocab")->valueint, 320);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(m, "tied_head")));
    cJSON_Delete(m);
    hp_safetensors_close(f);
    snprintf(p, sizeof p, "%s/state.json", in.step_dir);
    cJSON *s = ck_read_json(p);
    cJSON *model = cJSON_GetObjectItem(cJSON_GetObjectItem(s, "config"), "model");
    cJSON_ReplaceItemInObject(model, "dropout", cJSON_CreateNumber(0.25));
    ck_write_json(p, s);
    cJSON_Delete(s);
    hp_checkpoint_report r;
    assert_int_equal(hp_checkpoint_verify(in.step_dir, &r), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("model.dropout 0.25");
    hp_test_assert_error_contains("hp.model");
    hp_checkpoint_report_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gpt2_logits_match_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_perturbed_weight_is_caught, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gpt2_ours_hf_ours_bitwise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gpt2_hf_ours_hf_bitwise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sharded_and_bf16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llama_file_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llama_logits_match_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_only_checkpoint_resumes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_json_metadata, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
