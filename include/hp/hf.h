/*
 * hp/hf.h — Hugging Face interop: GPT-2, Llama-family and Mixtral checkpoints (a directory with config.json
 * and model.safetensors, or model.safetensors.index.json and its shards) to and from ours.
 *
 *     hp_hf_import_info in;
 *     HP_CHECK(hp_hf_import("gpt2/", "runs/gpt2", &in));          // runs/gpt2/{run.yaml, latest, step_00000000/}
 *     // fine-tune: hp train runs/gpt2/run.yaml --resume
 *     hp_hf_export_info out;
 *     HP_CHECK(hp_hf_export("runs/gpt2", "gpt2-tuned/", &out));   // config.json + model.safetensors
 *
 * Two levels. The file level (src/io/hf*.c) knows config.json and the tensor names and layouts of
 * both sides, and nothing of our models: hp_hf_read turns a Hugging Face directory into an
 * hp_hf_model (the architecture in our terms and every tensor under our name, float32, in our
 * layout), hp_hf_write turns one back. The checkpoint level (src/train/hf_convert*.c) writes an
 * hp_hf_model as a run directory (hp_hf_import) and reads a checkpoint into one (hp_hf_export).
 *
 * GPT-2 (model_type "gpt2", transformers' GPT2LMHeadModel). Hugging Face keeps OpenAI's Conv1D
 * layers: a weight is stored (in, out) and applied as x W + b, and the attention's q, k, v are one
 * fused c_attn of (C, 3C). Ours are Linear weights (out, in) with separate q, k, v (hp/nn.h):
 *
 *     HF (the "transformer." prefix optional)    ours
 *     wte.weight (V, C), wpe.weight (T, C)       wte.weight, wpe.weight            copied
 *     h.L.ln_1.{weight,bias} (C)                 blocks.L.ln1.{weight,bias}        copied
 *     h.L.attn.c_attn.weight (C, 3C)             blocks.L.attn.{q,k,v}.weight      columns [0,C), [C,2C),
 *                                                  (C, C) each                       [2C,3C), transposed
 *     h.L.attn.c_attn.bias (3C)                  blocks.L.attn.{q,k,v}.bias (C)    thirds
 *     h.L.attn.c_proj.weight (C, C)              blocks.L.attn.proj.weight         transposed
 *     h.L.ln_2.*, h.L.mlp.c_fc.weight (C, 4C),   blocks.L.ln2.*, blocks.L.mlp.fc.weight (4C, C),
 *     h.L.mlp.c_proj.weight (4C, C), biases      blocks.L.mlp.proj.weight (C, 4C)  transposed
 *     ln_f.{weight,bias}                         ln_f.{weight,bias}                copied
 *     lm_head.weight (V, C), only when untied    lm_head.weight                    copied
 *
 * The causal-mask buffers h.L.attn.bias / h.L.attn.masked_bias that older files carry are skipped.
 * config.json: n_embd, n_head, n_layer, n_positions (else n_ctx), vocab_size (or n_vocab),
 * layer_norm_epsilon (default 1e-5; ours is 1e-5, another value is refused), activation_function
 * (gelu_new, gelu_pytorch_tanh or gelu_fast: the tanh approximation ours computes, src/ops/gelu.c;
 * "gelu" (erf), "relu" and others are refused), n_inner (null or 4 n_embd), tie_word_embeddings
 * (default true), resid_pdrop (becomes model.dropout); scale_attn_by_inverse_layer_idx,
 * add_cross_attention and scale_attn_weights false are refused.
 *
 * Llama (model_type "llama" or "qwen2", LlamaForCausalLM / Qwen2ForCausalLM). Our Llama family
 * uses Hugging Face's names and layouts (Linear (out, in); q/k rows in Hugging Face's order, for
 * RoPE that rotates the two halves of each head, transformers' rotate_half), so every tensor is
 * copied under its own name: model.embed_tokens.weight (V, C), model.layers.L.input_layernorm.weight
 * (C), model.layers.L.self_attn.{q_proj (H d, C), k_proj (KV d, C), v_proj (KV d, C), o_proj (C, H d)}
 * .weight, model.layers.L.post_attention_layernorm.weight (C), model.layers.L.mlp.{gate_proj (F, C),
 * up_proj (F, C), down_proj (C, F)}.weight, model.norm.weight (C), lm_head.weight (V, C) unless
 * tied (d = C / H). config.json: hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads (default: the heads), max_position_embeddings,
 * vocab_size, rms_norm_eps (default 1e-6), rope_theta (default 10000), tie_word_embeddings
 * (default false), hidden_act (silu only); refused: rope_scaling, attention_bias or mlp_bias true,
 * a head_dim other than C / H, Qwen2's use_sliding_window true, and the q/k/v biases every Qwen2
 * checkpoint has (the Llama family here has no biases). The run config's model section for a Llama
 * is {family: llama, vocab, context, layers, heads, kv_heads, width, ffn_width, rope_base,
 * norm_eps, tied_head} (hp/nn.h, the Llama family); an export writes it as LlamaForCausalLM.
 *
 * Mixtral (model_type "mixtral", MixtralForCausalLM) is a Llama whose every MLP is a Mixture-of-
 * Experts layer (hp/moe.h) with SwiGLU experts, the softmax router (gates: the top-k probabilities
 * renormalised) and no shared experts. Hugging Face keeps one tensor per expert; ours stacks them:
 *
 *     HF (per layer L, expert e)                              ours (model.layers.L.mlp.)
 *     block_sparse_moe.gate.weight (E, C)                     router.weight (E, C)           copied
 *     block_sparse_moe.experts.e.w1.weight (F, C)             experts.gate_proj.weight (E, F, C)  [e]
 *     block_sparse_moe.experts.e.w3.weight (F, C)             experts.up_proj.weight (E, F, C)    [e]
 *     block_sparse_moe.experts.e.w2.weight (C, F)             experts.down_proj.weight (E, C, F)  [e]
 *
 * (the attention and norms as the Llama's). config.json adds num_local_experts (E), num_experts_per_tok
 * (k, default 2, at most E), router_aux_loss_coef (default 0.001, our model.moe.balance_loss, carried
 * as is: Hugging Face's loss, computed when output_router_logits is true, is k times ours over all
 * layers' tokens at once, so the same coefficient weighs balance differently) and intermediate_size
 * is the expert width F; refused: a sliding_window that is set. The run config's model section adds
 * moe: {experts, top_k, expert_width, router: softmax, every: 1, balance_loss}. An export writes a
 * Llama-family model with model.moe as MixtralForCausalLM when every layer is MoE, the router is
 * softmax and there are no shared experts; other MoE settings are refused naming the setting.
 *
 * Tensors are read as F32 or BF16 (converted exactly to float32) and written as F32. Every value
 * read is checked finite.
 */
#ifndef HP_HF_H
#define HP_HF_H

#include "hp/core.h"
#include "hp/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model families a Hugging Face checkpoint maps to. */
typedef enum hp_hf_family {
    HP_HF_FAMILY_GPT2 = 0, /* our GPT (hp/nn.h) */
    HP_HF_FAMILY_LLAMA,    /* the Llama family (model.family: llama) */
} hp_hf_family;

/* "gpt2" or "llama". */
const char *hp_hf_family_name(hp_hf_family f);

/* A model's architecture in our terms, as config.json describes it. */
typedef struct hp_hf_arch {
    hp_hf_family family;
    char model_type[32]; /* config.json's model_type: "gpt2", "llama", "qwen2" or "mixtral" */
    int64_t vocab;       /* V: vocab_size */
    int64_t context;     /* T: n_positions / max_position_embeddings */
    int64_t layers;      /* L: n_layer / num_hidden_layers */
    int64_t heads;       /* H: n_head / num_attention_heads */
    int64_t kv_heads;    /* KV: num_key_value_heads (Llama; equals heads for GPT-2) */
    int64_t width;       /* C: n_embd / hidden_size */
    int64_t ffn_width;   /* F: 4 C for GPT-2 / intermediate_size */
    double norm_eps;     /* layer_norm_epsilon / rms_norm_eps */
    double rope_base;    /* rope_theta (Llama); 0 for GPT-2 */
    bool tied_head;      /* tie_word_embeddings: the head reuses the token embedding */
    double dropout;      /* GPT-2's resid_pdrop (our model.dropout); 0 for Llama */
    /* Mixtral (model_type "mixtral"): every layer's MLP is a Mixture-of-Experts layer; 0 for the
     * dense models. ffn_width is then each expert's width (intermediate_size). */
    int64_t experts;     /* E: num_local_experts */
    int64_t top_k;       /* k: num_experts_per_tok, in [1, E] */
    double aux_loss_coef; /* router_aux_loss_coef (our model.moe.balance_loss) */
} hp_hf_arch;

/*
 * Parses and checks config.json text (`name` stands for the file in messages) into *out.
 * Errors, each naming the file and the key and value: HP_STATUS_CORRUPT for malformed JSON or a
 * missing or mistyped key (sizes are whole numbers in [1, 2^31-1]); HP_STATUS_UNSUPPORTED for a
 * model_type other than gpt2, llama, qwen2, mixtral and for every setting refused above (naming what is
 * supported); HP_STATUS_INVALID_ARGUMENT for sizes that do not fit (n_embd not divisible by
 * n_head, heads not divisible by kv_heads, num_experts_per_tok larger than num_local_experts).
 */
hp_status hp_hf_config_parse(const char *text, const char *name, hp_hf_arch *out);

/* Reads <dir>/config.json and parses it as hp_hf_config_parse; HP_STATUS_IO names a missing or
 * unreadable file. */
hp_status hp_hf_config_read(const char *dir, hp_hf_arch *out);

/*
 * The config.json text for `a` (malloc'd, the caller frees; NULL when out of memory): the keys
 * above and architectures, model_type, torch_dtype "float32". When `base` (the text of a
 * config.json, may be NULL) is given, its other keys (token ids, generation settings) are kept and
 * the architecture's keys replace its own; a `base` that is not a JSON object is ignored.
 */
char *hp_hf_config_json(const hp_hf_arch *a, const char *base);

/* A model in our terms: its architecture and every tensor under our name, float32, our layout. */
typedef struct hp_hf_model {
    hp_hf_arch arch;
    hp_named_tensor *tensors; /* n tensors in module order (embedding, blocks, head); names and data owned */
    size_t n;
} hp_hf_model;

/*
 * Allocates the tensors the architecture has (our names and shapes, data zeroed), so a checkpoint
 * can be loaded into them (hp_checkpoint_load_model). Errors: HP_STATUS_INVALID_ARGUMENT for an
 * architecture that does not validate (sizes below 1, heads not dividing, a tensor of more than
 * 2^48 elements); HP_STATUS_OUT_OF_MEMORY. Free with hp_hf_model_free.
 */
hp_status hp_hf_model_alloc(const hp_hf_arch *a, hp_hf_model *out);
/* Frees the tensors; safe on a zeroed model and twice. */
void hp_hf_model_free(hp_hf_model *m);
/* The tensor named `name`, or NULL. */
hp_named_tensor *hp_hf_model_find(const hp_hf_model *m, const char *name);
/* Elements over all tensors (a tied head counted once, as it is stored once). */
int64_t hp_hf_model_numel(const hp_hf_model *m);

/*
 * Reads a Hugging Face model directory: config.json (hp_hf_config_read), then the tensors of
 * model.safetensors or, when present, model.safetensors.index.json ("weight_map": tensor -> shard
 * file in the same directory) and its shards, mapped to ours as the tables above say. Errors name
 * the file and the tensor: HP_STATUS_IO (a missing or unreadable file), HP_STATUS_CORRUPT (a
 * damaged safetensors file, a malformed index, a dtype other than F32/BF16, a non-finite value,
 * a tensor the config's model does not have, a tied head stored with values that differ from the
 * embedding), HP_STATUS_NOT_FOUND (a tensor the config's model needs and the files lack),
 * HP_STATUS_SHAPE (a tensor whose shape differs from the one config.json implies: both shapes and
 * the config values that make it), HP_STATUS_UNSUPPORTED (config.json as above, Qwen2's q/k/v
 * biases), HP_STATUS_INVALID_ARGUMENT (a tensor of more than 2^48 elements). Every tensor is found
 * and checked before the model's memory is allocated. Free *out with hp_hf_model_free (also after
 * a failure).
 */
hp_status hp_hf_read(const char *dir, hp_hf_model *out);

/*
 * Writes m as a Hugging Face model directory `dir` (created with its parents if missing):
 * config.json (hp_hf_config_json with `base_config`, which may be NULL) and model.safetensors
 * (F32, metadata {"format": "pt"}, names as transformers' save_pretrained writes them: GPT-2 with the
 * "transformer." prefix and no mask buffers). Errors: HP_STATUS_INVALID_ARGUMENT when m lacks a
 * tensor its architecture has or holds it with another shape (naming it); HP_STATUS_IO naming the
 * path; HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_hf_write(const char *dir, const hp_hf_model *m, const char *base_config);

/* ---------------------------------------------------------------- checkpoints */

/* Tokenizer and vocabulary files carried along by import and export when present. */
#define HP_HF_TOKENIZER_FILES                                                                                \
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",       \
        "encoder.json", "vocab.bpe", "tokenizer.model", "generation_config.json"
/* The copy of the imported config.json kept in the run directory (export starts from its keys). */
#define HP_HF_CONFIG_COPY "hf_config.json"
/* The run config hp_hf_import writes into the run directory. */
#define HP_HF_RUN_YAML "run.yaml"
/* Where a run directory keeps an imported tokenizer this build cannot read (or whose vocabulary
 * exceeds the model's), so sampling and evaluation use the byte tokenizer meanwhile. */
#define HP_HF_TOKENIZER_DIR "hf_tokenizer"

typedef struct hp_hf_import_info {
    hp_hf_arch arch;
    int64_t params;         /* elements stored */
    char step_dir[4096];    /* the checkpoint written: <run_dir>/step_00000000 */
    char run_yaml[4096];    /* <run_dir>/run.yaml */
    int n_copied;           /* tokenizer files copied into run_dir */
    char copied[16][32];    /* their names */
    char tokenizer_note[1024]; /* "" when the tokenizer is in place for `hp generate` / `hp eval`; else
                                * why it was moved to HP_HF_TOKENIZER_DIR */
} hp_hf_import_info;

/*
 * Imports the Hugging Face directory hf_dir (hp_hf_read) into a new run directory run_dir:
 *   run_dir/run.yaml           a run config whose model section is the imported architecture
 *                              (GPT-2: vocab, context, layers, heads, width, tied_head, dropout),
 *                              train.checkpoint_dir run_dir (as given: relative paths resolve from
 *                              the working directory) and fine-tuning settings (lr 1e-4 to 1e-5,
 *                              warmup 20), the rest at their defaults; edit data: and train: to fine-tune
 *   run_dir/latest, run_dir/step_00000000/   a checkpoint of step 0 (hp/checkpoint.h) holding the
 *                              weights and NO optimizer state (optim.safetensors without tensors):
 *                              `hp train run.yaml --resume` starts AdamW's moments at zero and the
 *                              learning-rate schedule at step 0; `hp generate run_dir` samples from it
 *   run_dir/hf_config.json     a copy of config.json (hp_hf_export keeps its other keys)
 *   run_dir/tokenizer.json ... the files of HP_HF_TOKENIZER_FILES that hf_dir holds, copied; the
 *                              tokenizer (tokenizer.json, or encoder.json + vocab.bpe) stays beside
 *                              `latest`, where `hp generate` and `hp eval` take it from, when this
 *                              build reads it (hp_tokenizer_load) and its vocabulary is at most the
 *                              model's; else it moves to run_dir/hf_tokenizer/ (info->tokenizer_note
 *                              says why) and the run keeps the byte tokenizer
 * The checkpoint is checked against its config as resume does (hp_checkpoint_check_config).
 * Errors: hp_hf_read's; HP_STATUS_INVALID_ARGUMENT when run_dir already holds a checkpoint;
 * HP_STATUS_UNSUPPORTED when this build's run config lacks the model family (a Llama before the
 * Llama family is built in); the checkpoint's errors; HP_STATUS_IO naming the path.
 */
hp_status hp_hf_import(const char *hf_dir, const char *run_dir, hp_hf_import_info *info);

typedef struct hp_hf_export_info {
    hp_hf_arch arch;
    int64_t params;      /* elements written */
    int64_t step;        /* the checkpoint's step */
    char step_dir[4096]; /* the step directory exported */
    int n_copied;
    char copied[16][32]; /* tokenizer files copied from the run directory */
} hp_hf_export_info;

/*
 * Exports a checkpoint (a run directory, through `latest`, or a step directory; either format) to
 * the Hugging Face directory hf_dir (hp_hf_write): the model section of its state.json gives the
 * architecture, the model tensors are loaded with their checks (hp_checkpoint_load_model), and the
 * run directory's hf_config.json (kept by hp_hf_import) and tokenizer files, when present, go
 * along (from run_dir/hf_tokenizer/ too). Optimizer state is not exported. Importing the result gives back the same tensors, bit
 * for bit. A Llama-family model with model.moe is written as Mixtral (see above). Errors: the
 * checkpoint's (naming the file and the tensor or field); HP_STATUS_UNSUPPORTED for a MoE model
 * Mixtral cannot express (GELU experts, shared experts, the sigmoid_bias router, a dense layer),
 * naming the setting; hp_hf_write's.
 */
hp_status hp_hf_export(const char *ckpt, const char *hf_dir, hp_hf_export_info *info);

/*
 * The logits of a checkpoint's model on one sequence: tokens[0..n) (1 <= n <= the model's context),
 * logits (n, vocab) row-major into the caller's buffer of n * vocab floats. The model is rebuilt
 * from the checkpoint's saved config and its weights are loaded with their checks, as
 * hp_generate_from_checkpoint does. This is what the reference scripts (scripts/hf-ref/) compute
 * on the same model. Errors: the checkpoint's; HP_STATUS_INVALID_ARGUMENT for n out of range, a
 * token outside [0, vocab) or a vocab that is not the model's (naming both).
 */
hp_status hp_checkpoint_logits(const char *ckpt, const int32_t *tokens, int n, float *logits, int64_t vocab);

/* ---------------------------------------------------------------- file helpers (hp convert's) */

/* Bytes of a path buffer for hp_hf_join. */
#define HP_HF_PATH_MAX 4096

/* out (HP_HF_PATH_MAX bytes) = dir "/" name; HP_STATUS_INVALID_ARGUMENT when too long. */
hp_status hp_hf_join(char *out, const char *dir, const char *name);
/* The whole file as a malloc'd NUL-terminated string; HP_STATUS_IO naming the path. */
hp_status hp_hf_read_text(const char *path, char **out);
/* Writes text to path (replacing it); HP_STATUS_IO naming the path. */
hp_status hp_hf_write_text(const char *path, const char *text);
/* mkdir -p; HP_STATUS_IO naming the path. */
hp_status hp_hf_mkdir_p(const char *dir);
/* Copies src to dst (replacing it); HP_STATUS_IO naming the path that failed. */
hp_status hp_hf_copy_file(const char *src, const char *dst);
/* Whether path is an existing regular file. */
bool hp_hf_is_file(const char *path);


#ifdef __cplusplus
}
#endif
#endif /* HP_HF_H */
