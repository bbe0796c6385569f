/*
 * hp/config.h — the run configuration (`hp train RUN.yaml`): a typed struct with defaults, loaded
 * from YAML with strict checking, and written back as YAML or JSON (checkpoints keep a copy so
 * `hp generate CKPT` can rebuild the model).
 *
 *     hp_run_config cfg;
 *     hp_status st = hp_run_config_load("examples/kjv.yaml", &cfg);
 *     if (st != HP_STATUS_OK) { fprintf(stderr, "%s\n", hp_error_message()); return 1; }
 *     ... cfg.model.width, cfg.train.steps, cfg.strategy (a YAML tree or NULL) ...
 *     hp_run_config_free(&cfg);
 *
 * Schema (every key optional; the value shown is the default):
 *
 *     model:    {vocab: 256, context: 256, layers: 4, heads: 4, width: 256, tied_head: false, dropout: 0.0}
 *     data:     {corpus: data/kjv.txt, val_fraction: 0.05}
 *     train:    {steps: 1000, batch: 8, seed: 1, log_every: 10, eval_every: 100, eval_batches: 8,
 *                checkpoint_dir: runs/kjv, checkpoint_every: 200, sample_every: 0, sample_tokens: 200,
 *                sample_prompt: "And God said", threads: 0}
 *     optim:    {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 50, weight_decay: 0.1, beta1: 0.9, beta2: 0.95,
 *                eps: 1.0e-8, grad_clip: 1.0}
 *     strategy: ...   kept as a YAML tree for HyperShard (hp/yaml.h)
 *     offload:  ...   kept as a YAML tree for HyperOffload
 *     mpmd:     ...   kept as a YAML tree for HyperMPMD
 *
 * Meanings: batch is the global batch in rows (sequences) per step; context is T, tokens per row;
 * width is the embedding size C; seed keys data shuffling and initialization; *_every are in steps
 * (0 turns the action off; checkpoint_every 0 still writes the final checkpoint); eval_batches is the
 * number of validation batches per evaluation; threads 0 lets the runtime choose; lr/min_lr are the
 * peak and final learning rates of warmup (linear, `warmup` steps) then cosine decay; grad_clip is a
 * global-norm clip (0 turns it off).
 *
 * Relative paths (data.corpus, train.checkpoint_dir) are kept as written and resolve relative to
 * the CURRENT WORKING DIRECTORY of the process, not to the config file's folder.
 *
 * Errors (all HP_STATUS_CONFIG except I/O) name the file, and the line and column where there is one:
 * malformed YAML ("run.yaml:3:7: malformed YAML: ..."), unknown keys ("run.yaml:4: unknown key
 * 'lyers' in section 'model' (known keys: ...)"), unknown top-level sections, wrong types
 * ("run.yaml:2:10: model.width expects an integer, got 'wide'"), and impossible values
 * ("run.yaml: model.width 250 is not divisible by model.heads 4").
 */
#ifndef HP_CONFIG_H
#define HP_CONFIG_H

#include "hp/core.h"
#include "hp/yaml.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HP_CONFIG_STR_MAX 1024 /* bytes, including the NUL, of each string field */

typedef struct hp_model_config {
    int64_t vocab;   /* vocabulary size; >= 256 (the byte tokenizer's) */
    int64_t context; /* T, tokens per sequence; >= 1 */
    int64_t layers;  /* transformer blocks; >= 1 */
    int64_t heads;   /* attention heads; >= 1, divides width */
    int64_t width;   /* C, the embedding size; >= 1 */
    bool tied_head;  /* the output head reuses the token-embedding matrix */
    double dropout;  /* in [0, 1): GPT-2's dropout in the training step only (hp_gpt_build) */
} hp_model_config;

typedef struct hp_data_config {
    char corpus[HP_CONFIG_STR_MAX]; /* UTF-8 text file; relative to the working directory */
    double val_fraction;            /* held-out tail of the corpus, in (0, 1) */
} hp_data_config;

typedef struct hp_train_config {
    int64_t steps;            /* optimizer steps; >= 1 */
    int64_t batch;            /* global rows per step; >= 1 */
    int64_t seed;             /* >= 0 */
    int64_t log_every;        /* steps; >= 0 (0: never) */
    int64_t eval_every;       /* steps; >= 0 (0: never) */
    int64_t eval_batches;     /* validation batches per evaluation; >= 1 */
    char checkpoint_dir[HP_CONFIG_STR_MAX]; /* run directory; relative to the working directory */
    int64_t checkpoint_every; /* steps; >= 0 (0: only at the end) */
    int64_t sample_every;     /* steps; >= 0 (0: never) */
    int64_t sample_tokens;    /* tokens to generate per sample; >= 0 */
    char sample_prompt[HP_CONFIG_STR_MAX];
    int64_t threads;          /* CPU threads; >= 0 (0: the runtime chooses) */
} hp_train_config;

typedef struct hp_optim_config {
    double lr;           /* peak learning rate; > 0 */
    double min_lr;       /* final learning rate of the cosine decay; in [0, lr] */
    int64_t warmup;      /* linear warmup steps; >= 0 */
    double weight_decay; /* AdamW decoupled decay; >= 0 */
    double beta1, beta2; /* each in [0, 1) */
    double eps;          /* > 0 */
    double grad_clip;    /* global-norm clip; >= 0 (0: off) */
} hp_optim_config;

typedef struct hp_run_config {
    hp_model_config model;
    hp_data_config data;
    hp_train_config train;
    hp_optim_config optim;
    /* The opaque sections as YAML trees; NULL when absent. Owned by `doc`. */
    const hp_yaml_node *strategy;
    const hp_yaml_node *offload;
    const hp_yaml_node *mpmd;
    char source[HP_CONFIG_STR_MAX]; /* the file it was loaded from ("" for defaults) */
    hp_yaml_doc *doc;               /* owns the trees above; freed by hp_run_config_free */
} hp_run_config;

/* The defaults listed above; no memory is owned (doc NULL, the opaque sections NULL). */
hp_run_config hp_run_config_defaults(void);

/*
 * Loads `path` over the defaults and validates it (see the errors above). HP_STATUS_IO naming the
 * path when it cannot be read. On success the caller owns *cfg and frees it with
 * hp_run_config_free; on failure *cfg holds the defaults and owns nothing.
 */
hp_status hp_run_config_load(const char *path, hp_run_config *cfg);

/* Like hp_run_config_load from `len` bytes of YAML (or JSON) text; `name` stands for the file. */
hp_status hp_run_config_load_string(const char *text, size_t len, const char *name, hp_run_config *cfg);

/* Checks every value (the rules above); `cfg->source` names the file in messages. */
hp_status hp_run_config_validate(const hp_run_config *cfg);

/* Frees the YAML tree and resets the opaque section pointers. Safe on defaults and twice. */
void hp_run_config_free(hp_run_config *cfg);

/*
 * The config as text (malloc'd, NUL-terminated; the caller frees with free()), every key written,
 * the opaque sections included (in YAML as JSON flow style). Either text loads back with
 * hp_run_config_load_string into an equal config. NULL when out of memory.
 */
char *hp_run_config_to_yaml(const hp_run_config *cfg);
char *hp_run_config_to_json(const hp_run_config *cfg);

/* Writes hp_run_config_to_yaml's text to `path`. HP_STATUS_IO names the path. */
hp_status hp_run_config_write_yaml(const hp_run_config *cfg, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* HP_CONFIG_H */
