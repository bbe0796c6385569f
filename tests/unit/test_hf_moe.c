/*
 * Hugging Face interop of Mixture-of-Experts models (hp/hf.h, Mixtral), against the independent
 * PyTorch reference scripts/hf-ref/mixtral_ref.py:
 *   - tests/data/hf/mixtral-tiny (4 experts, 2 per token, one tensor per expert, tied head) reads
 *     into our stacked expert tensors, each expert's slice bitwise the file's tensor; written back it
 *     gives the file's tensors bitwise, and read again the same model (config and tensors);
 *   - imported with hp_hf_import, its logits match mixtral_ref.py's within ATOL + RTOL |ref|;
 *   - checkpoint -> hp_hf_export -> hp_hf_import gives bit-identical parameters and logits, and the
 *     exported config.json is a MixtralForCausalLM's;
 *   - bad input fails naming the tensor or key (a missing expert tensor, a wrong expert or router
 *     shape, num_experts_per_tok > num_local_experts, no num_local_experts, sliding_window set, a
 *     dense Llama config over Mixtral's files);
 *   - an export of a MoE variant Mixtral cannot express (shared experts, the sigmoid_bias router,
 *     MoE on only some layers, GELU experts) is refused naming the setting.
 */
#include "ckptutil.h"

#include "hp/config.h"
#include "hp/hf.h"
#include "hp/nn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ATOL 1e-5
#define RTOL 1e-5
#define V 320 /* the tiny Mixtral's vocabulary */

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp-hf-moe.XXXXXX");
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

static const char *src_dir(void) { return hp_test_source_path("tests/data/hf/mixtral-tiny"); }

static void assert_same_tensors(const hp_hf_model *a, const hp_hf_model *b) {
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const hp_named_tensor *x = &a->tensors[i], *y = hp_hf_model_find(b, x->name);
        if (!y) fail_msg("tensor '%s' missing after the round trip", x->name);
        assert_true(hp_shape_equal(&x->shape, &y->shape));
        if (memcmp(x->data, y->data, (size_t)hp_shape_numel(&x->shape) * 4))
            fail_msg("tensor '%s' differs after the round trip", x->name);
    }
}

/* Every tensor of safetensors file `a` is in `b`, bitwise; both hold as many. */
static void assert_same_file(const char *a, const char *b) {
    hp_safetensors *fa, *fb;
    assert_ok(hp_safetensors_open(a, &fa));
    assert_ok(hp_safetensors_open(b, &fb));
    assert_int_equal(hp_safetensors_count(fa), hp_safetensors_count(fb));
    for (size_t i = 0; i < hp_safetensors_count(fa); i++) {
        const hp_safetensors_entry *e = hp_safetensors_entry_at(fa, i), *o = hp_safetensors_find(fb, e->name);
        if (!o || o->nbytes != e->nbytes || memcmp(o->data, e->data, e->nbytes))
            fail_msg("'%s' of %s differs in %s", e->name, a, b);
    }
    hp_safetensors_close(fa);
    hp_safetensors_close(fb);
}

static float *checkpoint_logits(const char *ckpt, const int32_t *tokens, int n) {
    float *out = malloc(sizeof *out * (size_t)n * V);
    assert_ok(hp_checkpoint_logits(ckpt, tokens, n, out, V));
    return out;
}

static void test_mixtral_read_write(void **state) {
    (void)state;
    hp_hf_model a, b;
    assert_ok(hp_hf_read(src_dir(), &a));
    assert_int_equal(a.arch.family, HP_HF_FAMILY_LLAMA);
    assert_string_equal(a.arch.model_type, "mixtral");
    assert_int_equal(a.arch.experts, 4);
    assert_int_equal(a.arch.top_k, 2);
    assert_int_equal(a.arch.ffn_width, 24);
    assert_true(a.arch.aux_loss_coef == 0.02);
    assert_true(a.arch.tied_head);
    assert_int_equal(a.n, 1 + 2 * (6 + 1 + 3) + 1); /* embedding, per layer 6 + router + 3 stacks, norm */
    const hp_named_tensor *up = hp_hf_model_find(&a, "model.layers.1.mlp.experts.up_proj.weight"),
                          *down = hp_hf_model_find(&a, "model.layers.1.mlp.experts.down_proj.weight");
    assert_non_null(up);
    assert_non_null(down);
    const hp_shape su = HP_SHAPE(4, 24, 32), sd = HP_SHAPE(4, 32, 24);
    assert_true(hp_shape_equal(&up->shape, &su));
    assert_true(hp_shape_equal(&down->shape, &sd));
    assert_non_null(hp_hf_model_find(&a, "model.layers.0.mlp.router.weight"));
    assert_null(hp_hf_model_find(&a, "model.layers.0.mlp.gate_proj.weight"));
    /* expert e's slice of the stack is the file's experts.e tensor, bitwise */
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", src_dir());
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(p, &f));
    for (int e = 0; e < 4; e++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.1.block_sparse_moe.experts.%d.w3.weight", e);
        const hp_safetensors_entry *x = hp_safetensors_find(f, name);
        assert_non_null(x);
        assert_memory_equal(x->data, (const float *)up->data + e * 24 * 32, 24 * 32 * 4);
        snprintf(name, sizeof name, "model.layers.1.block_sparse_moe.experts.%d.w2.weight", e);
        x = hp_safetensors_find(f, name);
        assert_memory_equal(x->data, (const float *)down->data + e * 32 * 24, 32 * 24 * 4);
    }
    hp_safetensors_close(f);
    assert_ok(hp_hf_write(tmp("out"), &a, NULL));
    snprintf(p, sizeof p, "%s/model.safetensors", tmp("out"));
    char q[600];
    snprintf(q, sizeof q, "%s/model.safetensors", src_dir());
    assert_same_file(q, p); /* the same tensors under the same names, bitwise, and no others */
    assert_ok(hp_hf_read(tmp("out"), &b));
    assert_memory_equal(&a.arch, &b.arch, sizeof a.arch);
    assert_same_tensors(&a, &b);
    hp_hf_model_free(&a);
    hp_hf_model_free(&b);
}

/* Compares a checkpoint's logits with the reference file; fails past the bound. */
static void logits_match(const char *ckpt, const char *ref_path) {
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(ref_path, &f));
    const hp_safetensors_entry *tk = hp_safetensors_find(f, "tokens"), *lg = hp_safetensors_find(f, "logits");
    assert_non_null(tk);
    assert_non_null(lg);
    int n = (int)tk->shape.dim[0];
    assert_int_equal(lg->shape.dim[1], V);
    float *ours = checkpoint_logits(ckpt, tk->data, n);
    const float *ref = lg->data;
    double worst = 0, maxabs = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < (int64_t)n * V; i++) {
        double r = fabs((double)ours[i] - ref[i]) / (ATOL + RTOL * fabs(ref[i]));
        maxabs = fmax(maxabs, fabs((double)ours[i] - ref[i]));
        if (r > worst) worst = r, wi = i;
    }
    print_message("%s: max |ours - ref| %.3g over %d x %d logits (%.3f x the bound)\n", ref_path, maxabs, n, V, worst);
    if (worst > 1.0)
        fail_msg("logits differ from %s: position %lld token %lld ours %.9g ref %.9g", ref_path, (long long)(wi / V),
                 (long long)(wi % V), ours[wi], ref[wi]);
    free(ours);
    hp_safetensors_close(f);
}

static void test_mixtral_logits_match_reference(void **state) {
    (void)state;
    hp_hf_import_info in;
    assert_ok(hp_hf_import(src_dir(), tmp("run"), &in));
    assert_int_equal(in.arch.experts, 4);
    logits_match(tmp("run"), hp_test_source_path("tests/data/hf/mixtral-tiny.ref.safetensors"));
    /* the run config describes Mixtral's MoE */
    hp_run_config cfg;
    assert_ok(hp_run_config_load(in.run_yaml, &cfg));
    assert_int_equal(cfg.model.moe.experts, 4);
    assert_int_equal(cfg.model.moe.top_k, 2);
    assert_int_equal(cfg.model.moe.expert_width, 24);
    assert_int_equal(cfg.model.moe.every, 1);
    assert_int_equal(cfg.model.moe.shared_experts, 0);
    assert_int_equal(cfg.model.moe.router, HP_MOE_ROUTER_SOFTMAX);
    assert_true(cfg.model.moe.balance_loss == 0.02f);
    hp_run_config_free(&cfg);
}

static void test_mixtral_checkpoint_roundtrip(void **state) {
    (void)state;
    hp_hf_import_info in, in2;
    hp_hf_export_info out;
    assert_ok(hp_hf_import(src_dir(), tmp("run"), &in));
    assert_ok(hp_hf_export(tmp("run"), tmp("exported"), &out));
    assert_string_equal(out.arch.model_type, "mixtral");
    assert_int_equal(out.arch.experts, 4);
    assert_int_equal(out.params, in.params);
    /* config.json: Mixtral's keys */
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/config.json", tmp("exported"));
    cJSON *c = ck_read_json(p);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "architectures"), 0)->valuestring, "MixtralForCausalLM");
    assert_string_equal(cJSON_GetObjectItem(c, "model_type")->valuestring, "mixtral");
    assert_int_equal(cJSON_GetObjectItem(c, "num_local_experts")->valueint, 4);
    assert_int_equal(cJSON_GetObjectItem(c, "num_experts_per_tok")->valueint, 2);
    assert_int_equal(cJSON_GetObjectItem(c, "intermediate_size")->valueint, 24);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(c, "output_router_logits")));
    assert_true(fabs(cJSON_GetObjectItem(c, "router_aux_loss_coef")->valuedouble - 0.02) < 1e-9);
    assert_null(cJSON_GetObjectItem(c, "mlp_bias"));
    cJSON_Delete(c);
    /* the exported file holds the original's tensors bitwise */
    snprintf(p, sizeof p, "%s/model.safetensors", tmp("exported"));
    snprintf(q, sizeof q, "%s/model.safetensors", src_dir());
    assert_same_file(q, p);
    /* imported again: the same parameters, bit for bit, and the same logits */
    assert_ok(hp_hf_import(tmp("exported"), tmp("run2"), &in2));
    hp_hf_model a, b;
    assert_ok(hp_hf_read(src_dir(), &a));
    assert_ok(hp_hf_model_alloc(&a.arch, &b));
    assert_ok(hp_checkpoint_load_model(in2.step_dir, b.tensors, b.n));
    assert_same_tensors(&a, &b);
    hp_hf_model_free(&a);
    hp_hf_model_free(&b);
    const int32_t tokens[12] = {3, 17, 300, 2, 99, 250, 1, 0, 319, 64, 128, 7};
    float *x = checkpoint_logits(tmp("run"), tokens, 12), *y = checkpoint_logits(tmp("run2"), tokens, 12);
    assert_memory_equal(x, y, sizeof *x * 12 * V);
    free(x);
    free(y);
}

/* ---------------------------------------------------------------- bad input */

static const char *copy_src(const char *name) {
    static char dst[512];
    snprintf(dst, sizeof dst, "%s/%s", g_tmp, name);
    ck_copy_dir(src_dir(), dst);
    return dst;
}

static void set_config(const char *dir, const char *key, const char *value) {
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    cJSON *c = ck_read_json(p);
    cJSON_DeleteItemFromObject(c, key);
    if (value) cJSON_AddItemToObject(c, key, cJSON_Parse(value));
    ck_write_json(p, c);
    cJSON_Delete(c);
}

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

/* Rewrites dir/model.safetensors without tensor `drop`. */
static void drop_tensor(const char *dir, const char *drop) {
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    snprintf(q, sizeof q, "%s/model.safetensors.new", dir);
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(p, &f));
    size_t n = hp_safetensors_count(f), k = 0;
    hp_named_tensor *t = calloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++) {
        const hp_safetensors_entry *e = hp_safetensors_entry_at(f, i);
        if (strcmp(e->name, drop) != 0) t[k++] = (hp_named_tensor){e->name, e->dtype, e->shape, (void *)e->data};
    }
    assert_int_equal(k, n - 1);
    static const char *const meta[] = {"format", "pt"};
    assert_ok(hp_safetensors_write(q, t, k, meta, 1));
    free(t);
    hp_safetensors_close(f);
    assert_int_equal(rename(q, p), 0);
}

static void test_mixtral_bad_input(void **state) {
    (void)state;
    const char *d = copy_src("missing");
    drop_tensor(d, "model.layers.1.block_sparse_moe.experts.2.w3.weight");
    expect(d, HP_STATUS_NOT_FOUND, "lacks tensor 'model.layers.1.block_sparse_moe.experts.2.w3.weight'",
           "num_local_experts 4", NULL);
    d = copy_src("more-experts"); /* the router's shape tells first */
    set_config(d, "num_local_experts", "5");
    expect(d, HP_STATUS_SHAPE, "'model.layers.0.block_sparse_moe.gate.weight'", "[4, 32]", "[5, 32]",
           "num_local_experts 5", NULL);
    d = copy_src("width");
    set_config(d, "intermediate_size", "16");
    expect(d, HP_STATUS_SHAPE, "'model.layers.0.block_sparse_moe.experts.0.w1.weight'", "[24, 32]", "[16, 32]",
           "intermediate_size 16", NULL);
    d = copy_src("topk");
    set_config(d, "num_experts_per_tok", "5");
    expect(d, HP_STATUS_INVALID_ARGUMENT, "'num_experts_per_tok' 5", "'num_local_experts' 4", NULL);
    d = copy_src("no-experts");
    set_config(d, "num_local_experts", NULL);
    expect(d, HP_STATUS_CORRUPT, "missing key 'num_local_experts'", NULL);
    d = copy_src("window");
    set_config(d, "sliding_window", "4096");
    expect(d, HP_STATUS_UNSUPPORTED, "'sliding_window' is 4096", NULL);
    /* a dense Llama's config over Mixtral's files: the expert tensors are not part of that model */
    d = copy_src("as-llama");
    set_config(d, "model_type", "\"llama\"");
    expect(d, HP_STATUS_NOT_FOUND, "lacks tensor 'model.layers.0.mlp.gate_proj.weight'", NULL);
}

/* ---------------------------------------------------------------- export refusals */

/* A step-0 checkpoint of the model `model` (a run config's model section) in run directory dir. */
static void save_model(const char *model, const char *dir) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml, "%sdata:\n  corpus: x.txt\ntrain:\n  checkpoint_dir: %s\n", model, dir);
    hp_run_config cfg;
    assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "test.yaml", &cfg));
    hp_gpt_config gc = hp_gpt_config_from_model(&cfg.model);
    hp_graph *g = hp_graph_new();
    hp_gpt gpt;
    assert_ok(hp_gpt_build(g, &gc, 1, 4, false, &gpt));
    int np = hp_graph_params(g, NULL, 0);
    hp_tid *ids = calloc((size_t)np, sizeof *ids);
    hp_named_tensor *t = calloc((size_t)np, sizeof *t);
    hp_graph_params(g, ids, np);
    for (int i = 0; i < np; i++) {
        const hp_tensor *x = hp_graph_tensor(g, ids[i]);
        t[i] = (hp_named_tensor){x->name, HP_DTYPE_F32, x->shape, calloc((size_t)hp_shape_numel(&x->shape) + 1, 4)};
    }
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = dir;
    a.config = &cfg;
    a.model = t;
    a.n_model = (size_t)np;
    char step[1024];
    assert_ok(hp_checkpoint_save(&a, step, sizeof step));
    for (int i = 0; i < np; i++) free(t[i].data);
    free(t);
    free(ids);
    hp_graph_free(g);
    hp_run_config_free(&cfg);
}

#define LLAMA "model:\n  family: llama\n  vocab: 256\n  context: 8\n  layers: 2\n  heads: 2\n  width: 16\n"

static void expect_export(const char *model, const char *name, const char *needle1, const char *needle2) {
    save_model(model, tmp(name));
    hp_hf_export_info out;
    hp_status st = hp_hf_export(tmp(name), tmp("never"), &out);
    if (st != HP_STATUS_UNSUPPORTED)
        fail_msg("export of %s returned %s (%s), expected UNSUPPORTED", name, hp_status_str(st), hp_error_message());
    hp_test_assert_error_contains(needle1);
    hp_test_assert_error_contains(needle2);
    print_message("ok: %s\n", hp_error_message());
}

static void test_export_refuses_other_moe(void **state) {
    (void)state;
    expect_export(LLAMA "  moe: {experts: 4, top_k: 2, expert_width: 8, shared_experts: 1}\n", "shared",
                  "model.moe.shared_experts 1", "Mixtral");
    expect_export(LLAMA "  moe: {experts: 4, top_k: 2, expert_width: 8, router: sigmoid_bias}\n", "sigmoid",
                  "model.moe.router sigmoid_bias", "softmax");
    expect_export(LLAMA "  moe: {experts: 4, top_k: 2, expert_width: 8, every: 2}\n", "every",
                  "dense MLP in layer 0", "model.moe.every");
    expect_export(LLAMA "  moe: {experts: 4, top_k: 2, expert_width: 8, layers: [0]}\n", "layers",
                  "dense MLP in layer 1", "model.moe.layers");
    expect_export("model:\n  vocab: 256\n  context: 8\n  layers: 2\n  heads: 2\n  width: 16\n"
                  "  moe: {experts: 4, top_k: 2, expert_width: 8}\n",
                  "gelu", "GELU experts", "model.family gpt2");
    /* the Mixtral case of the same builder exports, and comes back bitwise */
    save_model(LLAMA "  moe: {experts: 4, top_k: 1, expert_width: 8, balance_loss: 0.01}\n", tmp("ok"));
    hp_hf_export_info out;
    assert_ok(hp_hf_export(tmp("ok"), tmp("ok-hf"), &out));
    assert_int_equal(out.arch.top_k, 1);
    hp_hf_model m;
    assert_ok(hp_hf_read(tmp("ok-hf"), &m));
    assert_int_equal(m.arch.experts, 4);
    assert_int_equal(m.arch.ffn_width, 8);
    assert_true((float)m.arch.aux_loss_coef == 0.01f);
    hp_hf_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mixtral_read_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixtral_logits_match_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixtral_checkpoint_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixtral_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_refuses_other_moe, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
