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
 *     model:    {vocab: 256, context: 256, layers: 4, heads: 4, width: 256, tied_head: false, dropout: 0.0,
 *                family: gpt2, kv_heads: 0, ffn_width: 0, rope_base: 10000, norm_eps: 1.0e-5}
 *     data:     {corpus: data/kjv.txt, val_fraction: 0.05, shards: ""}
 *     train:    {steps: 1000, batch: 8, seed: 1, log_every: 10, eval_every: 100, eval_batches: 8,
 *                checkpoint_dir: runs/kjv, checkpoint_every: 200, sample_every: 0, sample_tokens: 200,
 *                sample_prompt: "And God said", threads: 0, skip_nonfinite: 0, comm_timeout: 600}
 *     optim:    {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 50, weight_decay: 0.1, beta1: 0.9, beta2: 0.95,
 *                eps: 1.0e-8, grad_clip: 1.0}
 *     strategy: {mesh: {device_matrix: [..], alias_name: [..], ranks: [..]}, inputs: {NAME: TENSOR_MAP},
 *                params: [{match: GLOB, tensor_map: TENSOR_MAP}, ...], optimizer: {shard: [AXIS, ...]},
 *                bucket_size: 25MiB, context_parallel: ulysses, ring_load_balance: true}
 *                (absent: one device; see hp/strategy.h)
 *     offload:  {device_budget: (none), host_budget: 0, disk_dir: "", disk_budget: 0,
 *                policy: {params: host, grads: host, optimizer: host, activations: host},
 *                bandwidth: {host: 1.0e10, disk: 1.0e9}, machine: {flops: (model), bytes: (model)},
 *                chunk: 1MiB, read_ahead: true, async_update: true}   (absent: no offload; see hp/offload_plan.h)
 *     pipeline: {schedule: 1f1b, micro_batches: 1, chunks: (1; 2 for interleaved, zb-v, dualpipev),
 *                split: manual}                               (only with groups:)
 *     groups:   {NAME: {kind: stage, ranks: [..] | COUNT, module: [..] | auto, mesh: {..},
 *                strategy: {..}, memory_budget: 0}, ...}      (absent: one program on every rank)
 *     rl:       {task: reverse, digits: [3, 5], prompts: 8, group_size: 8, ...}   (hp rl; see hp_rl_config)
 *
 * Any other section or key is an error listing the known ones. `mpmd:` is refused with a message
 * saying HyperMPMD (pipeline groups) is not built yet as such a section (groups: and pipeline: are
 * its configuration).
 *
 * HyperMPMD groups (`groups:`; the rank-to-module map of the HyperParallel paper's Listing 1). A map
 * from group name (1 to 63 characters) to the group, in pipeline order:
 *
 *     pipeline:
 *       schedule: 1f1b        # gpipe | 1f1b | interleaved | zb-h1 | zb-v | dualpipev | a table file
 *       micro_batches: 4      # m: train.batch is split into m micro-batches of batch/m rows
 *       chunks: 1             # v: model chunks per stage (interleaved >= 2; zb-v, dualpipev = 2)
 *       split: manual         # manual: each stage's module says its layers; auto: the cost model
 *     groups:
 *       first:
 *         kind: stage                          # the default
 *         ranks: [0, 1]                        # world ranks, in mesh order; or a count
 *         module: [embedding, blocks.0-1]      # blocks 0 and 1 (inclusive); or auto
 *         mesh: {device_matrix: [2], alias_name: [dp]}
 *         strategy: {inputs: {tokens: [dp, none], targets: [dp, none]}}
 *         memory_budget: 2GiB                  # device bytes per rank for this group
 *       second:
 *         ranks: 2                             # the next 2 ranks: [2, 3]
 *         module: [blocks.2-3, head]
 *         mesh: {device_matrix: [2], alias_name: [tp]}
 *         strategy: {params: [{match: "blocks.*.mlp.fc.weight", tensor_map: [tp]}]}
 *
 *   - kind: stage (a pipeline stage; the stages are the stage groups in file order), or actor and
 *     learner (GRPO under `hp rl`: one of each, no stages, no module:; the two share all their ranks
 *     (co-located) or none (disjoint), and the job needs an rl: section). The actor's mesh has no
 *     inputs rules and one axis of whole replicas, or with params rules tensor parallelism over
 *     its last axis (rules on a first, replica axis are refused) whose size divides model.heads
 *     and kv_heads (llama); co-located, such an actor and the learner's mesh have one axis each
 *     (errors name the value and the line). The other kinds of
 *     HyperMPMD part 2 (encoder, fusion, critic, reward, reference) are read and refused: they are
 *     not built yet.
 *   - ranks: a list of world ranks, or a count that takes the next ranks after the highest one of
 *     the groups before it (the first group: from 0). Every rank 0..N-1 is in exactly one group,
 *     where N is the highest rank + 1 (the job's world size: hp_groups_config_check_world).
 *   - module: a stage's part of the model: `embedding` (token and position embeddings), `blocks.A`
 *     or `blocks.A-B` (transformer blocks A..B, both included) and `head` (ln_f and lm_head), in
 *     that order, the blocks one contiguous range. With pipeline.chunks v > 1 it is a list of v such
 *     modules, one per model chunk (e.g. [[embedding, blocks.0], blocks.2-3]). Chunk c of stage i is
 *     virtual stage c*p + i (p stages; interleaved and table schedules) or, for the V schedules zb-v
 *     and dualpipev, i for c = 0 and 2p-1-i for c = 1. Across the virtual stages in order the modules
 *     cover the model exactly once: the embedding first, every block of model.layers in order, the
 *     head last. `auto` (or leaving module out) needs pipeline.split: auto and is needed by it; the
 *     config then holds an even split by layer count (the first virtual stages take one more
 *     block), embedding on virtual stage 0 and head on the last, which `hp train` and `hp plan`
 *     replace by the cost model's balanced split (hp_pipeline_auto_split, hp/pipeline.h).
 *   - mesh and strategy: the group's own HyperShard strategy, as the strategy: section (hp/strategy.h)
 *     with the mesh given beside it rather than inside it and without mesh.ranks (the mesh numbers
 *     the group's ranks in the order listed). The mesh's device count equals the group's rank count;
 *     a group of one rank may leave both out.
 *   - memory_budget: a size (below); 0 or absent: none. With split: auto every stage of the group
 *     fits it (parameters, gradients, AdamW state and its micro-batches in flight: hp/pipeline_plan.h).
 *   - pipeline: micro_batches >= 1 divides train.batch (each micro-batch is batch/m rows); chunks in
 *     [1, 16]: 1 for gpipe, 1f1b and zb-h1, >= 2 for interleaved, 2 for zb-v and dualpipev;
 *     dualpipev needs micro_batches >= 2 * stages. A schedule that is not one of the names is a path
 *     to a schedule table (it must contain '/' or '.'; read by the schedule builder, not here).
 *   - groups: goes without a top-level strategy: (each group has its own); pipeline: needs groups:.
 * Each error names the group (groups.NAME), the key and file:line. hp_trainer_new runs a config with
 * groups as a pipeline (src/mpmd); hp_compile_run, which builds one SPMD program, refuses it
 * (HP_STATUS_UNSUPPORTED).
 *
 * model.family is gpt2, llama or multimodal (hp/multimodal.h; groups of kinds encoder and fusion are
 * allowed only with it) (anything else is an error naming the value and its line). kv_heads,
 * ffn_width, rope_base and norm_eps are read for llama (hp/nn.h: the Llama family): kv_heads must
 * divide heads, the head dim width/heads must be even (RoPE rotates pairs), and dropout must be 0.
 *
 * Integer ranges (checked in 64 bits before anything narrows to the int the model uses):
 *   model.vocab [256, 2^31-1]; model.context, layers, heads, width [1, 2^31-1]; model.kv_heads,
 *   ffn_width [0, 2^31-1];
 *   train.batch, eval_batches [1, 2^31-1]; train.sample_tokens [0, 2^31-1]; train.threads [0, 4096];
 *   train.steps [1, 10^15 - 1]; train.seed, log_every, eval_every, checkpoint_every, sample_every,
 *   skip_nonfinite and optim.warmup [0, 10^15 - 1] (integers of 15 digits: written exactly as JSON
 *   numbers, so the config survives JSON, as in state.json); strategy.mesh.device_matrix entries
 *   [1, 2^20] (product <= 2^30).
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
 * number of validation batches per evaluation; threads is the number of CPU compute threads (the
 * OpenMP team that runs the kernels, and so OpenBLAS's threads; hp_backend_cpu_set_threads), 0
 * keeping the process's default (OMP_NUM_THREADS, else one per CPU); skip_nonfinite is how many
 * steps in a row with a non-finite loss or gradient norm are skipped (the update not applied, the
 * weights and optimizer state untouched) before the run stops, 0 stopping at the first (hp/train.h,
 * hp_trainer_step); comm_timeout is how long, in seconds (a number, fractions allowed), one
 * collective or point-to-point transfer may wait for the other ranks before the job ends with the
 * operation, the group and the ranks that did not arrive (hp_comm_set_timeout; in [0, 31536000],
 * 0 for no limit; 600 like PyTorch's process-group timeout); lr/min_lr are the
 * peak and final learning rates of warmup (linear, `warmup` steps) then cosine decay; grad_clip is a
 * global-norm clip (0 turns it off).
 *
 * data.shards names a shard set made by `hp data prepare` (hp/shards.h); when it is not empty the run
 * reads it instead of data.corpus (and val_fraction, which the set fixed when it was prepared), and
 * hp_trainer_new refuses a model.vocab below the set's vocabulary (HP_STATUS_CONFIG, naming both).
 *
 * Relative paths (data.corpus, data.shards, train.checkpoint_dir) are kept as written and resolve
 * relative to the CURRENT WORKING DIRECTORY of the process, not to the config file's folder.
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
 * hp/offload_plan.h list each), and offload.device_budget written as 0 bytes (leave the key out for
 * no device budget). The strategy against the world size is checked by hp_strategy_new.
 */
#ifndef HP_CONFIG_H
#define HP_CONFIG_H

#include "hp/core.h"
#include "hp/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HP_CONFIG_STR_MAX 1024 /* bytes, including the NUL, of each string field */

/* model.multimodal (model.family multimodal; hp/multimodal.h, src/io/config_mm.c):
 *   multimodal: {data_dir: /usr/share/datasets/fashion-mnist, patch_a: 7, layers_a: 1, width_a: 32,
 *                patch_b: 4, layers_b: 2, width_b: 32, train_images: 0, test_images: 1000}
 * Encoder a is the light branch, b the heavy one; the decoder is model.layers/heads/width (model.vocab,
 * context, tied_head and dropout are not used by this family: the caption vocabulary and sequence are
 * fixed). patch_* divide 28, widths divide model.heads; train_images 0: the whole training split. */
typedef struct hp_multimodal_config {
    char data_dir[HP_CONFIG_STR_MAX];
    int64_t patch_a, layers_a, width_a; /* patch in [1, 28] dividing 28; layers, width >= 1 */
    int64_t patch_b, layers_b, width_b;
    int64_t train_images; /* >= 0 (0: all) */
    int64_t test_images;  /* >= 1: images whose generated caption is scored */
} hp_multimodal_config;

typedef struct hp_model_config {
    int64_t vocab;   /* vocabulary size; >= 256 (the byte tokenizer's) */
    int64_t context; /* T, tokens per sequence; >= 1 */
    int64_t layers;  /* transformer blocks; >= 1 */
    int64_t heads;   /* attention heads; >= 1, divides width */
    int64_t width;   /* C, the embedding size; >= 1 */
    bool tied_head;  /* the output head reuses the token-embedding matrix */
    double dropout;  /* in [0, 1): GPT-2's dropout in the training step only (hp_gpt_build); llama: 0 */
    /* The decoder family (hp/nn.h): "gpt2" (the default) or "llama". The keys below are llama's. */
    char family[HP_CONFIG_STR_MAX];
    int64_t kv_heads;  /* grouped-query attention: key/value heads, dividing heads; 0 (default): heads */
    int64_t ffn_width; /* SwiGLU hidden width; 0 (default): 8/3 width rounded up to a multiple of 256 */
    double rope_base;  /* RoPE base theta, > 1; default 10000 */
    double norm_eps;   /* RMSNorm epsilon, > 0; default 1e-5 */
    hp_moe_config moe; /* model.moe: Mixture-of-Experts MLPs (hp/moe.h; src/io/config_moe.c); experts 0: off */
    hp_multimodal_config multimodal; /* model.multimodal: read for family multimodal (written only then) */
} hp_model_config;

typedef struct hp_data_config {
    char corpus[HP_CONFIG_STR_MAX]; /* UTF-8 text file; relative to the working directory */
    char shards[HP_CONFIG_STR_MAX]; /* a shard set (`hp data prepare`, hp/shards.h): when not "", the
                                       data instead of corpus, with its own validation split */
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
    int64_t threads;          /* CPU compute threads; >= 0 (0: the process's default) */
    int64_t skip_nonfinite;   /* non-finite steps in a row that are skipped; >= 0 (0: stop at the first) */
    double comm_timeout;      /* seconds one transfer may wait for the other ranks; in [0, 31536000] (0: no limit) */
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

/* How attention runs when the sequence is split over a mesh axis (strategy.context_parallel). */
typedef enum hp_cp_algo {
    HP_CP_ULYSSES = 0, /* all-to-all from sequence-split to head-split and back (DeepSpeed-Ulysses) */
    HP_CP_RING,        /* K/V blocks passed around the ring point to point (ring attention) */
} hp_cp_algo;

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
    hp_cp_algo context_parallel; /* `ulysses` (default) or `ring` */
    /* strategy.ring_load_balance: causal load balancing of ring attention (each cp rank holds
     * chunks i and 2n - 1 - i of the sequence): 0 not given (on under ring), 1 true, -1 false */
    int ring_load_balance;
    int ring_load_balance_line; /* of its value; else of context_parallel's (0: neither given) */
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

#define HP_CONFIG_MAX_CHUNKS 16   /* model chunks per pipeline stage (pipeline.chunks) */
#define HP_CONFIG_MAX_GROUP_NAME 64 /* bytes of a group name, NUL included */
#define HP_CONFIG_MAX_RANKS (1 << 20) /* world ranks the groups may name */

/* The pipeline schedules of `pipeline.schedule` (issue 12 part 4 builds them). */
typedef enum hp_pipeline_schedule {
    HP_PIPELINE_SCHEDULE_GPIPE = 0,   /* all forwards, then all backwards */
    HP_PIPELINE_SCHEDULE_1F1B,        /* one forward, one backward in the steady state (the default) */
    HP_PIPELINE_SCHEDULE_INTERLEAVED, /* 1F1B over v model chunks per stage (Megatron-LM) */
    HP_PIPELINE_SCHEDULE_ZB_H1,       /* zero bubble H1: backward split in B and W (Qi et al., ICLR 2024) */
    HP_PIPELINE_SCHEDULE_ZB_V,        /* zero bubble V: two chunks per stage in a V (Qi et al.) */
    HP_PIPELINE_SCHEDULE_DUALPIPEV,   /* DualPipe cut in half (DeepSeek-V3 report; Sea AI Lab) */
    HP_PIPELINE_SCHEDULE_TABLE,       /* a user's table file (hp_pipeline_config.table) */
    HP_PIPELINE_SCHEDULE_COUNT
} hp_pipeline_schedule;

/* The `pipeline:` section; defaults in hp_run_config_defaults. */
typedef struct hp_pipeline_config {
    bool present;                      /* false: not in the file (the defaults apply to the stages) */
    hp_pipeline_schedule schedule;     /* default HP_PIPELINE_SCHEDULE_1F1B */
    char table[HP_CONFIG_STR_MAX];     /* TABLE: the file, relative to the working directory; else "" */
    int64_t micro_batches;             /* m >= 1, divides train.batch; default 1 */
    int64_t chunks;                    /* v in [1, HP_CONFIG_MAX_CHUNKS]; default 1, or 2 for the schedules that need it */
    bool split_auto;                   /* split: auto (the cost model places the layers); default manual */
    bool post_validate;                /* post_validate: true: consecutive steps overlap, each step's loss and
                                        * gradient-norm check landing during the next one's schedule
                                        * (hp_pipeline_step_post; Qi et al. 2024, section 5); default false */
    int line, column;                  /* of the section (0: not from a file) */
    int schedule_line, schedule_column;
    int micro_batches_line, micro_batches_column;
    int chunks_line, chunks_column;
    int split_line, split_column;
} hp_pipeline_config;

/* What a group runs (`kind:`). Only HP_GROUP_KIND_STAGE is built; the others are read and refused. */
typedef enum hp_group_kind {
    HP_GROUP_KIND_STAGE = 0, /* a pipeline stage: model chunks (the default) */
    HP_GROUP_KIND_ENCODER,   /* a modality encoder of a multimodal model (part 2) */
    HP_GROUP_KIND_FUSION,    /* the backbone fusing the modalities (part 2) */
    HP_GROUP_KIND_ACTOR,     /* RL: generates rollouts (part 2) */
    HP_GROUP_KIND_LEARNER,   /* RL: trains the policy on them (part 2) */
    HP_GROUP_KIND_CRITIC,    /* RL: the value model (part 2) */
    HP_GROUP_KIND_REWARD,    /* RL: the reward model (part 2) */
    HP_GROUP_KIND_REFERENCE, /* RL: the frozen reference policy (part 2) */
    HP_GROUP_KIND_COUNT
} hp_group_kind;

/* One model chunk of a stage: the transformer blocks [first, last) and whether the chunk also runs
 * the embedding (before its blocks) or the head (ln_f and lm_head, after them). */
typedef struct hp_module_chunk {
    int first, last;          /* blocks [first, last), 0 <= first <= last <= model.layers; first == last: none */
    bool embedding, head;
    int virtual_stage;        /* the chunk's place in the pipeline, 0 .. stages*chunks-1 */
    int line, column;         /* of the chunk's module value (the group's module: for split auto) */
} hp_module_chunk;

/* One group of `groups:`. */
typedef struct hp_group_config {
    const char *name;            /* the key under groups:; owned by the run config */
    hp_group_kind kind;
    int stage;                   /* stage groups: the stage index (file order among them); else -1 */
    int line, column;            /* of the group's value */
    int *ranks;                  /* n_ranks world ranks in the order the group's mesh numbers them; owned by the run config */
    int n_ranks;                 /* >= 1 */
    int ranks_line, ranks_column;
    bool module_auto;            /* module: auto or absent (pipeline.split: auto) */
    int n_chunks;                /* stage groups: pipeline.chunks; else 0 */
    hp_module_chunk chunks[HP_CONFIG_MAX_CHUNKS]; /* chunk c of the stage, as written (or filled for auto) */
    int module_line, module_column;
    hp_strategy_config strategy; /* the group's mesh (groups.NAME.mesh) and rules (groups.NAME.strategy);
                                  * not present: no mesh (a one-rank group). strategy.ranks is NULL and
                                  * mesh indices are positions in `ranks` */
    size_t memory_budget;        /* device bytes per rank of the group; 0: not given */
    int memory_budget_line, memory_budget_column;
} hp_group_config;

/* The `groups:` section. */
typedef struct hp_groups_config {
    bool present;             /* false: no (or a null) groups section: one program on every rank */
    const char *file;         /* the config file, for messages; owned by the run config */
    int line, column;         /* of the section */
    hp_group_config *groups;  /* n_groups groups in file order; owned by the run config */
    int n_groups;
    int n_stages;             /* groups of kind stage */
    int n_ranks;              /* the ranks the groups name are exactly 0 .. n_ranks-1 */
} hp_groups_config;

/*
 * The `rl:` section (`hp rl`, hp/rl.h): GRPO on a task with a verifiable reward.
 *
 *     rl:
 *       task: reverse        # reverse | sort: the digits of the prompt "31415>" reversed ("51413\n")
 *       digits: [3, 5]       # prompt lengths, in digits (1..16; min <= max)
 *       prompts: 8           # prompts per step
 *       group_size: 8        # G samples per prompt (>= 2): the group of the relative advantages
 *       steps: 100           # GRPO steps (batches generated; iterations updates each)
 *       iterations: 1        # GRPO iterations per batch (DeepSeekMath's mu, 1..64): the learner's AdamW
 *                            # updates on each batch; from the second on the policy has moved, so the
 *                            # ratio to the sampling policy leaves 1 and the clip acts
 *       sft_steps: 150       # supervised steps on worked examples first (the pre-trained start; 0: none)
 *       sft_batch: 32        # rows per supervised step
 *       sft_lr: 1.0e-3       # its learning rate (constant)
 *       temperature: 1.0     # sampling temperature of the actor (> 0)
 *       clip_eps: 0.2        # PPO/GRPO ratio clip, in (0, 1)
 *       kl_beta: 0.04        # weight of the k3 KL to the reference policy (>= 0)
 *       off_policy: 0        # 1: the actor generates batch i+1 while the learner trains on batch i
 *       eval_prompts: 64     # greedy exact-match accuracy on this many fixed prompts, at start and end
 *
 * With `groups:` the job has one group of kind actor and one of kind learner (and no stage
 * groups): the same ranks (co-located) or disjoint ranks; see hp/rl.h. model.context must be at
 * least 2 max_digits + 2 (prompt, '>' , answer, '\n'). Errors name the key and file:line.
 */
typedef struct hp_rl_config {
    bool present;
    int line, column;
    char task[16];
    int64_t min_digits, max_digits;
    int digits_line, digits_column;
    int64_t prompts, group_size, steps, sft_steps, sft_batch, off_policy, eval_prompts, iterations;
    double sft_lr, temperature, clip_eps, kl_beta;
} hp_rl_config;

typedef struct hp_run_config {
    hp_model_config model;
    hp_data_config data;
    hp_train_config train;
    hp_optim_config optim;
    hp_strategy_config strategy;
    hp_offload_run_config offload;
    hp_pipeline_config pipeline;
    hp_groups_config groups;
    hp_rl_config rl; /* `rl:` (hp rl); present false when absent */
    char source[HP_CONFIG_STR_MAX]; /* the file it was loaded from ("" for defaults) */
    /* Owns the strategy's rules, ranks and file name and the groups; freed by hp_run_config_free. A
     * shallow copy of the struct shares it (the original must outlive the copy and is the one freed). */
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

/* Frees what the config owns (the strategy's rules and ranks, the groups) and marks the strategy and
 * the groups absent. Safe on defaults and twice. */
void hp_run_config_free(hp_run_config *cfg);

/*
 * Checks the groups against the job's world size (hp train: the communicator's size; hp check
 * --ranks N): HP_STATUS_CONFIG naming the group and file:line when a group's rank is >= world_size,
 * or naming the ranks no group takes when world_size > g->n_ranks. HP_STATUS_OK when the groups are
 * absent. HP_STATUS_INVALID_ARGUMENT for world_size < 1.
 */
hp_status hp_groups_config_check_world(const hp_groups_config *g, int world_size);

/* Where one rank sits in the groups (hp_groups_config_place). */
typedef struct hp_group_placement {
    int group;        /* index into groups[] */
    int stage;        /* the pipeline stage, or -1 for a group that is not a stage */
    int group_rank;   /* the rank's position in the group's ranks: its mesh index in the group */
    int first, last;  /* chunk 0's blocks [first, last): the stage's layers when pipeline.chunks is 1 */
    bool embedding;   /* one of the rank's chunks runs the embedding */
    bool head;        /* one of the rank's chunks runs the head */
    int n_chunks;     /* the stage's model chunks (pipeline.chunks) */
    const hp_module_chunk *chunks; /* n_chunks chunks, borrowed from the config */
} hp_group_placement;

/*
 * The group, stage, layer ranges and embedding/head of world rank `rank` under a loaded (validated)
 * groups config. HP_STATUS_INVALID_ARGUMENT naming the rank when the groups are absent or no group
 * has it. `out->chunks` points into `g` (valid while the config is).
 */
hp_status hp_groups_config_place(const hp_groups_config *g, int rank, hp_group_placement *out);

/* "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "table" (as in the config). */
const char *hp_pipeline_schedule_name(hp_pipeline_schedule s);
/* "stage", "encoder", "fusion", "actor", "learner", "critic", "reward", "reference". */
const char *hp_group_kind_name(hp_group_kind k);

/*
 * The config as text (malloc'd, NUL-terminated; the caller frees with free()), every key written,
 * strategy, offload, pipeline and groups when present (in YAML as JSON flow style, sizes in bytes). Either text loads
 * back with hp_run_config_load_string into an equal config (line numbers aside). NULL when out of
 * memory.
 */
char *hp_run_config_to_yaml(const hp_run_config *cfg);
char *hp_run_config_to_json(const hp_run_config *cfg);

/*
 * Parses a size: "64MiB", "1.5GiB", "4096", "8KB" (units above; a space before the unit is fine)
 * into bytes. The number is decimal (an exponent such as "1e6" is fine; no sign, hex, inf or nan).
 * HP_STATUS_CONFIG naming the text for a negative, non-numeric or too large value (over 2^62 bytes)
 * or an unknown unit.
 */
hp_status hp_config_parse_size(const char *text, size_t *out);

/* Writes hp_run_config_to_yaml's text to `path`. HP_STATUS_IO names the path. */
hp_status hp_run_config_write_yaml(const hp_run_config *cfg, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* HP_CONFIG_H */
