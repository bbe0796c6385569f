/*
 * hp/config.h — the run configuration (`hp train RUN.yaml`): a typed struct with defaults, loaded
 * from YAML with strict checking, and written back as YAML or JSON (checkpoints keep a copy so
 * `hp generate CKPT` can rebuild the model).
 *
 *     hp_run_config cfg;
 *     hp_status st = hp_run_config_load("examples/kjv.yaml", &cfg);
 *     if (st != HP_STATUS_OK) { fprintf(stderr, "%s\n", hp_error_message()); return 1; }
 *     ... cfg.model.width, cfg.train.steps, cfg.strategy.present, cfg.offload.device_budget ...
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
 *     strategy: {mesh: {device_matrix: [..], alias_name: [..], ranks: [..]}, inputs: {NAME: TENSOR_MAP},
 *                params: [{match: GLOB, tensor_map: TENSOR_MAP}, ...], optimizer: {shard: [AXIS, ...]},
 *                bucket_size: 25MiB}                          (absent: one device; see hp/strategy.h)
 *     offload:  {device_budget: 0, host_budget: 0, disk_dir: "", disk_budget: 0,
 *                policy: {params: host, grads: host, optimizer: host, activations: host},
 *                bandwidth: {host: 1.0e10, disk: 1.0e9}, machine: {flops: (model), bytes: (model)},
 *                chunk: 1MiB, read_ahead: true, async_update: true}   (absent: no offload; see hp/offload_plan.h)
 *
 * Any other section or key is an error listing the known ones. `mpmd:`, `groups:` and `pipeline:`
 * are refused with a message saying HyperMPMD (pipeline groups) is not built yet.
 *
 * Integer ranges (checked in 64 bits before anything narrows to the int the model uses):
 *   model.vocab [256, 2^31-1]; model.context, layers, heads, width [1, 2^31-1];
 *   train.batch, eval_batches [1, 2^31-1]; train.sample_tokens [0, 2^31-1]; train.threads [0, 4096];
 *   train.steps [1, 10^15 - 1]; train.seed, log_every, eval_every, checkpoint_every, sample_every
 *   and optim.warmup [0, 10^15 - 1] (integers of 15 digits: written exactly as JSON numbers, so the
 *   config survives JSON, as in state.json); strategy.mesh.device_matrix entries [1, 2^20]
 *   (product <= 2^30).
 * Every tensor the model builds stays under 2^48 elements: the products vocab*width,
 * context*width, 4*width^2, batch*context*vocab, batch*context*4*width and
 * batch*heads*context^2 are checked.
 *
 * Sizes (strategy.bucket_size and the offload budgets and chunk) are plain bytes or a number with
 * a unit: B, KiB, MiB, GiB, TiB (powers of 1024), KB, MB, GB, TB (powers of 1000), K, M, G.
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
 * Errors (all HP_STATUS_CONFIG except I/O) name the file, and the line and column of the value
 * whenever the value came from a file: malformed YAML ("run.yaml:3:7: malformed YAML: ..."),
 * unknown keys ("run.yaml:4: unknown key 'lyers' in section 'model' (known keys: ...)"), unknown
 * top-level sections, wrong types ("run.yaml:2:10: model.width expects an integer, got 'wide'"),
 * values out of range ("run.yaml:2:10: model.width 4294967360 must be in [1, 2147483647]") and
 * impossible combinations ("run.yaml:3:10: model.width 250 is not divisible by model.heads 4").
 * Everything in strategy: and offload: that does not need the job's world size is checked at load
 * as well: unknown aliases in a tensor_map, an alias used twice in one tensor_map, duplicate or
 * invalid alias names, mesh dimensions < 1, a ranks list that is not a permutation of the mesh's
 * devices, bad glob patterns, unknown policy values, bad sizes and rates (hp/strategy.h and
 * hp/offload_plan.h list each). The strategy against the world size is checked by hp_strategy_new.
 */
#ifndef HP_CONFIG_H
#define HP_CONFIG_H

#include "hp/core.h"

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

#define HP_CONFIG_MAX_AXES 8  /* mesh axes of a strategy; equals HP_MESH_MAX_AXES (hp/mesh.h) */
#define HP_CONFIG_MAX_NAME 32 /* bytes of a mesh axis name, NUL included; equals HP_MESH_MAX_NAME */

/* A tensor_map as written: entries for the n leading tensor dimensions; entry d is split over the
 * nmap[d] mesh axes map[d][0..nmap[d]) (indices into hp_strategy_config.alias_name, the first
 * listed slowest). An axis appears at most once in one tensor_map. */
typedef struct hp_tensor_map_config {
    int n;
    int nmap[HP_MAX_DIMS];
    int map[HP_MAX_DIMS][HP_CONFIG_MAX_AXES];
} hp_tensor_map_config;

/* One strategy.params rule or strategy.inputs entry. */
typedef struct hp_strategy_rule {
    const char *match;               /* params: an fnmatch(3) glob; inputs: the input's name. Owned by the run config */
    hp_tensor_map_config tensor_map;
    int line;                        /* params: of the rule's match key; inputs: of the entry's value */
} hp_strategy_rule;

/* The `strategy:` section (HyperShard), checked as far as it can be without the world size. */
typedef struct hp_strategy_config {
    bool present;        /* false: no (or a null) strategy section: one device, no rules */
    const char *file;    /* the config file, for messages; owned by the run config (NULL when absent) */
    int mesh_line, mesh_column; /* of strategy.mesh.device_matrix (device-count messages) */
    int n_axes;                              /* 1..HP_CONFIG_MAX_AXES */
    int device_matrix[HP_CONFIG_MAX_AXES];   /* axis sizes, each >= 1, product <= 2^30 */
    char alias_name[HP_CONFIG_MAX_AXES][HP_CONFIG_MAX_NAME]; /* unique, not "none" */
    int *ranks;          /* NULL, or the world rank of each mesh index (row-major), a permutation of
                          * 0..devices-1; owned by the run config */
    int ranks_line, ranks_column;
    hp_strategy_rule *inputs; /* n_inputs entries, in file order; owned by the run config */
    int n_inputs;
    hp_strategy_rule *params; /* n_params rules, in match order; owned by the run config */
    int n_params;
    int n_opt_shard;                         /* optimizer.shard: ZeRO axes for optimizer states */
    int opt_shard[HP_CONFIG_MAX_AXES];       /* axis indices, in the order given */
    size_t bucket_size; /* bytes of gradient per all-reduce bucket; 0: no bucketing; default 25 MiB */
} hp_strategy_config;

/* Where a class of tensors lives under offload.policy. */
typedef enum hp_config_tier {
    HP_CONFIG_TIER_DEVICE = 0, /* false / device: stays in the fast tier */
    HP_CONFIG_TIER_HOST,       /* true / host (default): host DRAM, spilling to disk when full */
    HP_CONFIG_TIER_DISK,       /* disk: needs disk_dir */
} hp_config_tier;

/* The `offload:` section (HyperOffload); its meaning is documented in hp/offload_plan.h. */
typedef struct hp_offload_run_config {
    bool present;               /* false: no (or a null) offload section: no offload */
    size_t device_budget;       /* bytes; 0: unlimited (no offload) */
    size_t host_budget;         /* bytes; 0: unbounded */
    char disk_dir[HP_CONFIG_STR_MAX]; /* "": no disk tier */
    size_t disk_budget;         /* bytes; 0: the disk store's default */
    hp_config_tier policy[4];   /* params, grads, optimizer, activations (hp_offload_class order) */
    double bandwidth_host;      /* bytes/s between the fast tier and host; 0: measure; default 1e10 */
    double bandwidth_disk;      /* bytes/s between the fast tier and disk; 0: measure; default 1e9 */
    double machine_flops;       /* the cost model's FLOP/s; 0: not given (the model's default) */
    double machine_bytes;       /* the cost model's memory bytes/s; 0: not given (the model's default) */
    size_t chunk;               /* bytes of an AdamW streaming chunk; a positive multiple of 4096; default 1 MiB */
    bool read_ahead;            /* default true */
    bool async_update;          /* default true */
} hp_offload_run_config;

typedef struct hp_run_config {
    hp_model_config model;
    hp_data_config data;
    hp_train_config train;
    hp_optim_config optim;
    hp_strategy_config strategy;
    hp_offload_run_config offload;
    char source[HP_CONFIG_STR_MAX]; /* the file it was loaded from ("" for defaults) */
    /* Owns the strategy's rules, ranks and file name; freed by hp_run_config_free. A shallow copy
     * of the struct shares it (the original must outlive the copy and is the one freed). */
    hp_arena *arena;
} hp_run_config;

/* The defaults listed above; no memory is owned (arena NULL, strategy and offload not present). */
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

/* Frees what the config owns (the strategy's rules and ranks) and marks the strategy absent. Safe
 * on defaults and twice. */
void hp_run_config_free(hp_run_config *cfg);

/*
 * The config as text (malloc'd, NUL-terminated; the caller frees with free()), every key written,
 * strategy and offload when present (in YAML as JSON flow style, sizes in bytes). Either text loads
 * back with hp_run_config_load_string into an equal config (line numbers aside). NULL when out of
 * memory.
 */
char *hp_run_config_to_yaml(const hp_run_config *cfg);
char *hp_run_config_to_json(const hp_run_config *cfg);

/*
 * Parses a size: "64MiB", "1.5GiB", "4096", "8KB" (units above; a space before the unit is fine)
 * into bytes. HP_STATUS_CONFIG naming the text for a negative, non-numeric or too large value or an
 * unknown unit.
 */
hp_status hp_config_parse_size(const char *text, size_t *out);

/* Writes hp_run_config_to_yaml's text to `path`. HP_STATUS_IO names the path. */
hp_status hp_run_config_write_yaml(const hp_run_config *cfg, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* HP_CONFIG_H */
