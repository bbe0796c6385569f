/* `hp convert`: a Hugging Face model directory into a run directory of ours (a step-0 checkpoint
 * with no optimizer state and a run config), and a checkpoint of ours back into a Hugging Face
 * directory (see hp/hf.h). */
#include "hp/checkpoint.h"
#include "hp/config.h"
#include "hp/hf.h"
#include "hp/nn.h"
#include "hp/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the run config */

/* The shortest decimal that reads back as v, always with a '.' or an exponent (a YAML float). */
static void num(char *buf, size_t n, double v) {
    snprintf(buf, n, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", n - strlen(buf) - 1);
}

/*
 * The run config text of an imported model. The model section is the one place that knows how an
 * architecture is written in our config: a Llama's keys are the Llama family's (model.family:
 * llama, kv_heads, ffn_width, rope_base, norm_eps), which a build without that family refuses.
 */
static char *run_yaml(const hp_hf_arch *a, const char *hf_dir, const char *run_dir, const char *tokenizer) {
    char eps[64], rope[64], drop[64];
    num(eps, sizeof eps, a->norm_eps);
    num(rope, sizeof rope, a->rope_base);
    num(drop, sizeof drop, a->dropout);
    cJSON *js = cJSON_CreateString(run_dir), *jh = cJSON_CreateString(hf_dir);
    char *qdir = js ? cJSON_PrintUnformatted(js) : NULL, *qhf = jh ? cJSON_PrintUnformatted(jh) : NULL;
    cJSON_Delete(js);
    cJSON_Delete(jh);
    char model[1536];
    if (a->family == HP_HF_FAMILY_GPT2)
        snprintf(model, sizeof model,
                 "model:\n  vocab: %lld\n  context: %lld\n  layers: %lld\n  heads: %lld\n  width: %lld\n"
                 "  tied_head: %s\n  dropout: %s          # GPT-2's resid_pdrop (attention-probability dropout is not applied)\n",
                 (long long)a->vocab, (long long)a->context, (long long)a->layers, (long long)a->heads,
                 (long long)a->width, a->tied_head ? "true" : "false", drop);
    else
        snprintf(model, sizeof model,
                 "model:\n  family: llama\n  vocab: %lld\n  context: %lld\n  layers: %lld\n  heads: %lld\n"
                 "  kv_heads: %lld\n  width: %lld\n  ffn_width: %lld\n  rope_base: %s\n  norm_eps: %s\n"
                 "  tied_head: %s\n",
                 (long long)a->vocab, (long long)a->context, (long long)a->layers, (long long)a->heads,
                 (long long)a->kv_heads, (long long)a->width, (long long)a->ffn_width, rope, eps,
                 a->tied_head ? "true" : "false");
    if (a->family == HP_HF_FAMILY_LLAMA && a->experts > 0) { /* Mixtral: every layer's MLP is MoE */
        char coef[64];
        num(coef, sizeof coef, a->aux_loss_coef);
        size_t k = strlen(model);
        snprintf(model + k, sizeof model - k,
                 "  moe:                 # Mixtral's block_sparse_moe (balance_loss: its router_aux_loss_coef)\n"
                 "    experts: %lld\n    top_k: %lld\n    expert_width: %lld\n    router: softmax\n    every: 1\n"
                 "    balance_loss: %s\n",
                 (long long)a->experts, (long long)a->top_k, (long long)a->ffn_width, coef);
    }
    size_t cap = strlen(model) + 4096 + 3 * HP_HF_PATH_MAX;
    char *text = qdir && qhf ? malloc(cap) : NULL;
    if (text)
        snprintf(text, cap,
                 "# Imported from the Hugging Face model %s (model_type %s) by `hp convert --from-hf`.\n"
                 "# The checkpoint beside this file (step_00000000) holds the weights and no optimizer state.\n"
                 "#   fine-tune:  hp train %s/" HP_HF_RUN_YAML " --resume\n"
                 "#               (AdamW's moments start at zero, the learning-rate schedule at step 0)\n"
                 "#   sample:     hp generate %s\n"
                 "#   export:     hp convert --to-hf %s -o DIR   (the latest checkpoint, Hugging Face's layout)\n"
                 "# Paths resolve from the working directory. Set data.corpus to your text (read as bytes, ids\n"
                 "# 0..255), or data.shards to token shards made with the model's tokenizer (hp data prepare\n"
                 "# CORPUS --tokenizer TOKENIZER -o DIR). %s\n"
                 "%s"
                 "data:\n  corpus: data/kjv.txt\n"
                 "train:\n  checkpoint_dir: %s\n  steps: 1000\n  batch: 8\n  checkpoint_every: 200\n"
                 "  eval_every: 100\n  sample_every: 0\n"
                 "optim:\n  lr: 1.0e-4\n  min_lr: 1.0e-5\n  warmup: 20\n  weight_decay: 0.1\n",
                 qhf, a->model_type, run_dir, run_dir, run_dir,
                 tokenizer ? "The model's tokenizer files were copied into this directory."
                           : "The model came without a tokenizer file.",
                 model, qdir);
    free(qdir);
    free(qhf);
    return text;
}

/* ---------------------------------------------------------------- import */

static hp_status copy_tokenizer(const char *from, const char *to, int *n, char (*names)[32], int max) {
    static const char *const files[] = {HP_HF_TOKENIZER_FILES};
    char src[HP_HF_PATH_MAX], dst[HP_HF_PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        HP_CHECK(hp_hf_join(src, from, files[i]));
        if (!hp_hf_is_file(src)) continue;
        HP_CHECK(hp_hf_join(dst, to, files[i]));
        HP_CHECK(hp_hf_copy_file(src, dst));
        bool seen = false;
        for (int k = 0; k < *n && !seen; k++) seen = !strcmp(names[k], files[i]);
        if (!seen && *n < max) snprintf(names[(*n)++], 32, "%s", files[i]);
    }
    return HP_STATUS_OK;
}

/*
 * `hp generate` and `hp eval` decode with the tokenizer a run directory keeps beside `latest`
 * (tokenizer.json, or encoder.json + vocab.bpe). The imported one stays there when this build reads
 * it and its vocabulary fits the model's; otherwise its files move to HP_HF_TOKENIZER_DIR (they
 * travel with an export all the same) and the run keeps the byte tokenizer, saying why in `note`.
 */
static hp_status place_tokenizer(const char *run_dir, int64_t vocab, char *note, size_t cap) {
    char json[HP_HF_PATH_MAX], enc[HP_HF_PATH_MAX], aside[HP_HF_PATH_MAX], src[HP_HF_PATH_MAX], dst[HP_HF_PATH_MAX];
    HP_CHECK(hp_hf_join(json, run_dir, "tokenizer.json"));
    HP_CHECK(hp_hf_join(enc, run_dir, "encoder.json"));
    bool has_json = hp_hf_is_file(json);
    if (!has_json && !hp_hf_is_file(enc)) return HP_STATUS_OK;
    hp_tokenizer *tok = NULL;
    hp_status st = hp_tokenizer_load(has_json ? json : run_dir, &tok);
    if (st == HP_STATUS_OK && hp_tokenizer_vocab_size(tok) <= vocab) {
        hp_tokenizer_free(tok);
        return HP_STATUS_OK;
    }
    if (st == HP_STATUS_OK)
        snprintf(note, cap, "its vocabulary (%d) is larger than the model's (%lld)", (int)hp_tokenizer_vocab_size(tok),
                 (long long)vocab);
    else
        snprintf(note, cap, "%s", hp_error_message());
    hp_tokenizer_free(tok);
    HP_CHECK(hp_hf_join(aside, run_dir, HP_HF_TOKENIZER_DIR));
    HP_CHECK(hp_hf_mkdir_p(aside));
    static const char *const files[] = {"tokenizer.json", "encoder.json", "vocab.bpe"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        HP_CHECK(hp_hf_join(src, run_dir, files[i]));
        HP_CHECK(hp_hf_join(dst, aside, files[i]));
        if (hp_hf_is_file(src) && rename(src, dst) != 0)
            return hp_error(HP_STATUS_IO, "cannot move '%s' to '%s': %s", src, dst, strerror(errno));
    }
    return HP_STATUS_OK;
}

hp_status hp_hf_import(const char *hf_dir, const char *run_dir, hp_hf_import_info *info) {
    memset(info, 0, sizeof *info);
    hp_run_dir_info rd;
    HP_CHECK(hp_run_dir_inspect(run_dir, &rd));
    if (rd.has_latest || rd.n_steps > 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "'%s' already holds checkpoints (%d step directories); import into "
                        "a new directory", run_dir, rd.n_steps);
    hp_hf_model m;
    hp_status st = hp_hf_read(hf_dir, &m);
    hp_run_config cfg = hp_run_config_defaults();
    char *yaml = NULL, tok[HP_HF_PATH_MAX], path[HP_HF_PATH_MAX];
    bool loaded = false;
    if (st != HP_STATUS_OK) goto out;
    info->arch = m.arch;
    info->params = hp_hf_model_numel(&m);
    HP_CHECK_GOTO(hp_hf_join(tok, hf_dir, "tokenizer.json"), st, out);
    HP_CHECK_GOTO(hp_hf_join(info->run_yaml, run_dir, HP_HF_RUN_YAML), st, out);
    if (!(yaml = run_yaml(&m.arch, hf_dir, run_dir, hp_hf_is_file(tok) ? tok : NULL))) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory writing the run config");
        goto out;
    }
    st = hp_run_config_load_string(yaml, strlen(yaml), info->run_yaml, &cfg);
    if (st != HP_STATUS_OK) {
        if (m.arch.family != HP_HF_FAMILY_GPT2)
            st = hp_error_prefix(HP_STATUS_UNSUPPORTED, "'%s' is a %s model (model_type %s), which this build's run "
                                 "config cannot describe: ", hf_dir, hp_hf_family_name(m.arch.family), m.arch.model_type);
        goto out;
    }
    loaded = true;
    cJSON *extra = cJSON_CreateObject(), *from = cJSON_AddObjectToObject(extra, "imported_from");
    bool ok = from && cJSON_AddStringToObject(from, "format", "huggingface") &&
              cJSON_AddStringToObject(from, "dir", hf_dir) && cJSON_AddStringToObject(from, "model_type", m.arch.model_type);
    char *extra_s = ok ? cJSON_PrintUnformatted(extra) : NULL;
    cJSON_Delete(extra);
    if (!extra_s) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = run_dir;
    a.step = 0;
    a.seed = (uint64_t)cfg.train.seed;
    a.config = &cfg;
    a.model = m.tensors;
    a.n_model = m.n;
    a.extra_json = extra_s;
    st = hp_checkpoint_save(&a, info->step_dir, sizeof info->step_dir);
    free(extra_s);
    if (st != HP_STATUS_OK) goto out;
    /* what resume and generate will check: the saved config against the saved tensors */
    hp_checkpoint_state s;
    HP_CHECK_GOTO(hp_checkpoint_read_state(info->step_dir, &s), st, out);
    st = hp_checkpoint_check_config(info->step_dir, &s);
    hp_checkpoint_state_free(&s);
    if (st != HP_STATUS_OK) goto out;
    HP_CHECK_GOTO(hp_hf_write_text(info->run_yaml, yaml), st, out);
    char cfg_src[HP_HF_PATH_MAX];
    HP_CHECK_GOTO(hp_hf_join(cfg_src, hf_dir, "config.json"), st, out);
    HP_CHECK_GOTO(hp_hf_join(path, run_dir, HP_HF_CONFIG_COPY), st, out);
    HP_CHECK_GOTO(hp_hf_copy_file(cfg_src, path), st, out);
    HP_CHECK_GOTO(copy_tokenizer(hf_dir, run_dir, &info->n_copied, info->copied, 16), st, out);
    st = place_tokenizer(run_dir, m.arch.vocab, info->tokenizer_note, sizeof info->tokenizer_note);
out:
    free(yaml);
    if (loaded) hp_run_config_free(&cfg);
    hp_hf_model_free(&m);
    return st;
}

/* ---------------------------------------------------------------- export */

/* The shortest decimal that reads back as the float f, as a double (0.02f becomes 0.02, so
 * config.json says router_aux_loss_coef 0.02, not 0.019999999552965164). */
static double shortest(float f) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if ((float)strtod(buf, NULL) == f) return strtod(buf, NULL);
    }
    return f;
}

/*
 * Whether a model's MoE layers are Mixtral's (hp/hf.h): the Llama family's SwiGLU experts in every
 * layer, the softmax router, no shared experts. Anything else is refused naming the setting:
 * Mixtral's config.json has no field for it.
 */
static hp_status check_mixtral(const hp_model_config *mc) {
    const hp_moe_config *m = &mc->moe;
    const char *why = " (Hugging Face's Mixtral, the MoE layout hp convert writes, has no such setting)";
    if (strcmp(mc->family, "llama") != 0)
        return hp_error(HP_STATUS_UNSUPPORTED, "the checkpoint's model has Mixture-of-Experts layers with GELU experts "
                        "(model.family %s, model.moe.experts %d); only the Llama family's SwiGLU experts export, as "
                        "Mixtral%s", mc->family, m->experts, why);
    if (m->shared_experts > 0)
        return hp_error(HP_STATUS_UNSUPPORTED, "the checkpoint's model has model.moe.shared_experts %d; Mixtral has no "
                        "shared experts%s", m->shared_experts, why);
    if (m->router != HP_MOE_ROUTER_SOFTMAX)
        return hp_error(HP_STATUS_UNSUPPORTED, "the checkpoint's model has model.moe.router %s; Mixtral's router is "
                        "softmax%s", hp_moe_router_name(m->router), why);
    for (int l = 0; l < mc->layers; l++)
        if (!hp_moe_config_layer(m, l))
            return hp_error(HP_STATUS_UNSUPPORTED, "the checkpoint's model has a dense MLP in layer %d (model.moe.%s); "
                            "Mixtral's every layer is Mixture-of-Experts (model.moe.every 1)%s", l,
                            m->every > 0 ? "every > 1" : "layers lists only some", why);
    return HP_STATUS_OK;
}

/*
 * The architecture a checkpoint's model section describes: model.family llama (with kv_heads,
 * ffn_width, rope_base, norm_eps; 0 meaning their defaults, as hp/nn.h resolves them; with
 * model.moe, Mixtral's) or GPT-2.
 */
static hp_status arch_from_model(const hp_model_config *mc, hp_hf_arch *a) {
    memset(a, 0, sizeof *a);
    if (mc->moe.experts > 0) {
        HP_CHECK(check_mixtral(mc));
        a->experts = mc->moe.experts;
        a->top_k = mc->moe.top_k;
        a->aux_loss_coef = shortest(mc->moe.balance_loss);
    }
    if (!strcmp(mc->family, "llama")) {
        hp_gpt_config gc = hp_gpt_config_from_model(mc);
        a->family = HP_HF_FAMILY_LLAMA; /* written as LlamaForCausalLM, or MixtralForCausalLM with experts */
        snprintf(a->model_type, sizeof a->model_type, "%s", a->experts > 0 ? "mixtral" : "llama");
        a->vocab = mc->vocab;
        a->context = mc->context;
        a->layers = mc->layers;
        a->heads = mc->heads;
        a->kv_heads = mc->kv_heads ? mc->kv_heads : mc->heads;
        a->width = mc->width;
        a->ffn_width = a->experts > 0  ? mc->moe.expert_width
                       : mc->ffn_width ? mc->ffn_width
                                       : hp_llama_default_ffn_width(gc.width);
        a->norm_eps = mc->norm_eps;
        a->rope_base = mc->rope_base;
        a->tied_head = mc->tied_head;
        return HP_STATUS_OK;
    }
    a->family = HP_HF_FAMILY_GPT2;
    snprintf(a->model_type, sizeof a->model_type, "gpt2");
    a->vocab = mc->vocab;
    a->context = mc->context;
    a->layers = mc->layers;
    a->heads = a->kv_heads = mc->heads;
    a->width = mc->width;
    a->ffn_width = 4 * mc->width;
    a->norm_eps = 1e-5;
    a->tied_head = mc->tied_head;
    a->dropout = mc->dropout;
    return HP_STATUS_OK;
}

hp_status hp_hf_export(const char *ckpt, const char *hf_dir, hp_hf_export_info *info) {
    memset(info, 0, sizeof *info);
    HP_CHECK(hp_checkpoint_resolve(ckpt, info->step_dir, sizeof info->step_dir));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(info->step_dir, &s));
    hp_hf_model m;
    memset(&m, 0, sizeof m);
    char *base = NULL;
    hp_status st = hp_checkpoint_check_config(info->step_dir, &s);
    if (st == HP_STATUS_OK) st = arch_from_model(&s.config.model, &info->arch);
    info->step = s.step;
    hp_checkpoint_state_free(&s);
    if (st == HP_STATUS_OK) st = hp_hf_model_alloc(&info->arch, &m);
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_model(info->step_dir, m.tensors, m.n);
    /* the run directory holding the step directory: its imported config.json and tokenizer */
    char run_dir[HP_HF_PATH_MAX], path[HP_HF_PATH_MAX];
    snprintf(run_dir, sizeof run_dir, "%s", info->step_dir);
    char *slash = strrchr(run_dir, '/');
    if (slash) *slash = '\0';
    else snprintf(run_dir, sizeof run_dir, ".");
    if (st == HP_STATUS_OK) st = hp_hf_join(path, run_dir, HP_HF_CONFIG_COPY);
    if (st == HP_STATUS_OK && hp_hf_is_file(path)) st = hp_hf_read_text(path, &base);
    if (st == HP_STATUS_OK) st = hp_hf_write(hf_dir, &m, base);
    if (st == HP_STATUS_OK) info->params = hp_hf_model_numel(&m);
    char aside[HP_HF_PATH_MAX];
    if (st == HP_STATUS_OK) st = hp_hf_join(aside, run_dir, HP_HF_TOKENIZER_DIR);
    if (st == HP_STATUS_OK) st = copy_tokenizer(aside, hf_dir, &info->n_copied, info->copied, 16);
    if (st == HP_STATUS_OK) st = copy_tokenizer(run_dir, hf_dir, &info->n_copied, info->copied, 16);
    free(base);
    hp_hf_model_free(&m);
    return st;
}
