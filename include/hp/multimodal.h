/*
 * hp/multimodal.h — a multimodal captioning model (two image encoders + a text decoder with prefix
 * fusion) on Fashion-MNIST, trained on one device or as concurrent sub-models on their own rank
 * groups (HyperMPMD's second level: heterogeneous sub-models under a dynamic scheduler).
 *
 *     hp_idx imgs;
 *     HP_CHECK(hp_idx_load("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", &imgs));
 *     ... imgs.dims[0] images of imgs.dims[1] x imgs.dims[2] bytes at imgs.data ...
 *     hp_idx_free(&imgs);
 *
 * Data. IDX files (LeCun's MNIST format: magic 0x0000 TT NN with TT the element type, 0x08 for
 * unsigned bytes, NN the number of dimensions; NN big-endian u32 sizes; the elements row-major),
 * read plain or gzip-compressed through zlib. Each image's caption is "a photo of a/an <class
 * name>" over a word vocabulary of HP_MM_VOCAB words (hp_mm_vocab_word): <bos>, <eos>, "a", "an",
 * "photo", "of" and the class words (Fashion-MNIST's classes; "ankle boot" is two words). The
 * decoder reads HP_MM_CAPTION tokens [<bos>, w1, ..., w_{n}, <eos>...] and predicts the next token
 * at each of them (targets [w1, ..., w_n, <eos>, ...]), so captions are padded with <eos>.
 *
 * Model (Dosovitskiy et al. 2021's ViT encoder; prefix fusion as in ClipCap, Mokady et al. 2021):
 * encoder e in {a, b} cuts the 28x28 image into (28/patch)^2 patches of patch^2 pixels (scaled to
 * [0, 1]), embeds them with a LINEAR (enc_e.patch.weight (W_e, patch^2), .bias), adds learned
 * positions (enc_e.pos.weight (N_e, W_e)), runs layers_e pre-LayerNorm transformer blocks with
 * bidirectional attention (GPT-2's block: enc_e.blocks.L.{ln1,attn.{q,k,v,proj},ln2,mlp.{fc,proj}}),
 * a final LayerNorm (enc_e.ln_f) and a projection to the decoder width (enc_e.out.weight (C, W_e),
 * .bias): (B, N_e, C). Encoder b is the deliberately heavier branch (smaller patches: more tokens,
 * and/or more layers). The decoder embeds the caption tokens (dec.wte.weight (V, C)), prepends both
 * encoders' outputs (prefix a, then prefix b), adds learned positions (dec.wpe.weight (S, C), S =
 * N_a + N_b + HP_MM_CAPTION), runs model.layers causal blocks (dec.blocks.L...), a final LayerNorm
 * (dec.ln_f) and a head (dec.lm_head.weight (V, C)) on the caption positions only: the loss is the
 * mean cross-entropy over the caption tokens, none on the prefix.
 *
 * Concurrent sub-models (hp_mm_runner): encoder a, encoder b and the decoder each run on a group
 * of their own (groups: kinds encoder, encoder, fusion), the encoders concurrently. A group of k
 * ranks is data parallel (mesh: {device_matrix: [k], alias_name: [dp]}): its ranks split every
 * micro-batch's rows in order, the hand-offs go between the ranks whose rows overlap, and the
 * group sums its gradients (all-reduce) before the update.
 * Per micro-batch the encoders send their outputs to the decoder, the decoder runs forward and
 * backward and sends the prefix gradients back, the encoders finish their backward; gradients
 * accumulate over the step's micro-batches, then each group clips by the global norm (one
 * all-reduce) and applies AdamW. The order of every group's forward and backward passes is chosen
 * each step by a list scheduler (hp_mm_schedule) from the passes' measured times.
 */
#ifndef HP_MULTIMODAL_H
#define HP_MULTIMODAL_H

#include "hp/comm.h"
#include "hp/config.h"
#include "hp/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- IDX files */

/* An IDX file of unsigned bytes. */
typedef struct hp_idx {
    int ndim;          /* 1..4 */
    int64_t dims[4];   /* sizes, slowest first (images: count, rows, columns) */
    uint8_t *data;     /* prod(dims) bytes, row-major; owned (hp_idx_free) */
} hp_idx;

/*
 * Reads an IDX file (gzip-compressed or plain) of element type 0x08 (unsigned byte).
 * Errors name the file and the value: HP_STATUS_IO (cannot open, or short read naming the bytes
 * expected), HP_STATUS_CORRUPT (a magic number whose first two bytes are not zero, a dimension count
 * outside [1, 4], a zero dimension or more than 2^31 elements, data past the declared size),
 * HP_STATUS_UNSUPPORTED (an element type other than 0x08, named in hex). On failure *out is empty.
 */
hp_status hp_idx_load(const char *path, hp_idx *out);
void hp_idx_free(hp_idx *x);

/* ---------------------------------------------------------------- captions */

#define HP_MM_CLASSES 10
#define HP_MM_CAPTION 7  /* decoder tokens per caption: <bos> + up to 6 words (padded with <eos>) */
#define HP_MM_VOCAB 17   /* <bos> <eos> a an photo of + 11 class words */
#define HP_MM_BOS 0
#define HP_MM_EOS 1

/* Fashion-MNIST's class name of label 0..9 ("T-shirt/top", ..., "Ankle boot"); "?" otherwise. */
const char *hp_mm_class_name(int label);
/* Word `id` of the caption vocabulary; "?" outside [0, HP_MM_VOCAB). */
const char *hp_mm_vocab_word(int id);
/*
 * The caption of `label` as decoder inputs and targets (each HP_MM_CAPTION ids): tokens =
 * [<bos>, a, photo, of, a|an, class words..., <eos>...], targets = tokens shifted left by one and
 * padded with <eos>. Errors: HP_STATUS_INVALID_ARGUMENT naming a label outside [0, 10).
 */
hp_status hp_mm_caption(int label, int32_t *tokens, int32_t *targets);
/* The caption text of `label` ("a photo of an ankle boot"), at most `cap` bytes with the NUL. */
void hp_mm_caption_text(int label, char *out, size_t cap);
/* The position in the targets where the class words start (after "a photo of a/an": 4). */
#define HP_MM_CLASS_POS 4

/* A Fashion-MNIST split in memory. */
typedef struct hp_mm_data {
    int64_t n;         /* images */
    int rows, cols;    /* 28, 28 */
    uint8_t *images;   /* n * rows * cols bytes */
    uint8_t *labels;   /* n labels in [0, 10) */
} hp_mm_data;

/*
 * Loads split `split` ("train" or "t10k") from folder `dir`: DIR/SPLIT-images-idx3-ubyte(.gz) and
 * DIR/SPLIT-labels-idx1-ubyte(.gz) (the .gz name tried first), at most `limit` images (0: all).
 * Errors: hp_idx_load's; HP_STATUS_CORRUPT naming the files when the counts differ, the images
 * are not 3-d or a label is outside [0, 10) (the index and value named).
 */
hp_status hp_mm_data_load(const char *dir, const char *split, int64_t limit, hp_mm_data *out);
void hp_mm_data_free(hp_mm_data *d);

/*
 * The patches of `n` images (indices idx[0..n) of d): out (n, (rows/patch)*(cols/patch), patch^2)
 * f32, pixels / 255, patches in row-major order of the patch grid, pixels row-major within a patch.
 * Errors: HP_STATUS_INVALID_ARGUMENT for a patch that does not divide rows and cols, or an index
 * outside [0, d->n) (named).
 */
hp_status hp_mm_patchify(const hp_mm_data *d, const int64_t *idx, int n, int patch, float *out);

/* ---------------------------------------------------------------- the model */

typedef struct hp_mm_encoder_config {
    int patch;  /* pixels per patch side; divides 28 */
    int layers; /* transformer blocks (>= 1) */
    int width;  /* W_e, divisible by heads */
} hp_mm_encoder_config;

typedef struct hp_mm_config {
    hp_mm_encoder_config enc[2]; /* a (light), b (heavy) */
    int heads;                   /* attention heads of every sub-model */
    int dec_layers, width;       /* the decoder's blocks and width C */
    int image_rows, image_cols;  /* 28, 28 */
} hp_mm_config;

/* The model part of a run config (model.multimodal and model.layers/heads/width). */
hp_mm_config hp_mm_config_from_run(const hp_run_config *cfg);
/* Checks divisibility and ranges; HP_STATUS_INVALID_ARGUMENT naming the value. */
hp_status hp_mm_config_check(const hp_mm_config *c);
/* Image tokens of encoder e: (rows/patch)*(cols/patch). */
int hp_mm_tokens(const hp_mm_config *c, int e);
/* The decoder's sequence length S = N_a + N_b + HP_MM_CAPTION. */
int hp_mm_seq(const hp_mm_config *c);

/* The tensors of one encoder graph (hp_mm_build_encoder). */
typedef struct hp_mm_encoder {
    hp_tid patches; /* input "enc_E.patches" (batch, N_e, patch^2) f32 */
    hp_tid out;     /* (batch, N_e, C) */
} hp_mm_encoder;

/* Builds encoder e (0: a, 1: b) for `batch` images into g. Errors: config; the graph's. */
hp_status hp_mm_build_encoder(hp_graph *g, const hp_mm_config *c, int e, int batch, hp_mm_encoder *out);

/* The tensors of a decoder graph (hp_mm_build_decoder). */
typedef struct hp_mm_decoder {
    hp_tid prefix[2]; /* the encoders' outputs (batch, N_e, C): given, or inputs "dec.prefix_a/_b" */
    hp_tid tokens;    /* input "tokens" (batch, HP_MM_CAPTION) i32 */
    hp_tid targets;   /* input "targets" (batch, HP_MM_CAPTION) i32, or HP_TID_NONE without loss */
    hp_tid logits;    /* (batch, HP_MM_CAPTION, HP_MM_VOCAB) */
    hp_tid loss;      /* scalar mean cross-entropy over the caption tokens, or HP_TID_NONE */
} hp_mm_decoder;

/*
 * Builds the decoder into g. prefix[e] is the encoder output tensor when the encoders are in the
 * same graph (hp_mm_build), or HP_TID_NONE for an input "dec.prefix_a" / "dec.prefix_b" (the
 * decoder's own group). Errors: config; the graph's.
 */
hp_status hp_mm_build_decoder(hp_graph *g, const hp_mm_config *c, int batch, const hp_tid prefix[2], bool with_loss,
                              hp_mm_decoder *out);

/* The whole model in one graph (the single-device view): both encoders and the decoder. */
typedef struct hp_mm_model {
    hp_mm_encoder enc[2];
    hp_mm_decoder dec;
} hp_mm_model;
hp_status hp_mm_build(hp_graph *g, const hp_mm_config *c, int batch, bool with_loss, hp_mm_model *out);

/*
 * Initial values of parameter `name`, elements [first, first + n): LayerNorm weights 1, biases 0,
 * every other weight N(0, 0.02) (GPT-2's), a pure function of (seed, name, index), so every group
 * and the single-device model start equal. Errors: HP_STATUS_NOT_FOUND for a name that is not one.
 */
hp_status hp_mm_init_param(const char *name, uint64_t seed, int64_t first, int64_t n, float *data);

/* ---------------------------------------------------------------- the dynamic scheduler */

/* The passes of one step, per group: encoders a and b run F (forward) and B (backward) per
 * micro-batch; the decoder runs F (its forward and backward together). */
enum { HP_MM_ROLE_ENC_A = 0, HP_MM_ROLE_ENC_B = 1, HP_MM_ROLE_DEC = 2, HP_MM_ROLES = 3 };

typedef enum hp_mm_mode {
    HP_MM_MODE_CONCURRENT = 0, /* encoders in parallel, both feeding the decoder (HyperMPMD) */
    HP_MM_MODE_CHAIN,          /* one linear pipeline enc_a -> enc_b -> decoder, 1F1B (the SPMD baseline) */
} hp_mm_mode;

/* One pass in a group's order. */
typedef struct hp_mm_op {
    int mb;        /* micro-batch */
    bool backward; /* encoders: B; false: F (the decoder's only pass) */
} hp_mm_op;

/* A step's schedule: each group's passes in order, and what the simulation predicts. */
typedef struct hp_mm_schedule {
    int m;                           /* micro-batches */
    int n_ops[HP_MM_ROLES];
    hp_mm_op ops[HP_MM_ROLES][128];  /* 2 m entries at most (m <= 64) */
    int inflight[HP_MM_ROLES];       /* forwards a group may run ahead of its backwards */
    double makespan;                 /* predicted seconds of the step */
    double busy[HP_MM_ROLES];        /* predicted busy seconds per group */
} hp_mm_schedule;

/*
 * Orders the passes of `m` micro-batches (1..64) by simulating the groups as one list scheduler:
 * a group starts, whenever it is idle, a ready pass (inputs arrived, its slots of in-flight
 * micro-batches not exhausted), backward first. t_f[r] and t_b[r] are the measured seconds of a
 * forward and a backward pass of group r (decoder: t_f is its forward and backward); `link` the
 * seconds of one hand-off. CHAIN is the linear pipeline's 1F1B (in-flight limits p - stage).
 * CONCURRENT tries every in-flight limit 1..m for the encoders and keeps the one with the smallest
 * predicted makespan (ties: the smaller limit, fewer activations held). The result is the same on
 * every rank for the same inputs. Errors: HP_STATUS_INVALID_ARGUMENT for m outside [1, 64] or a
 * negative or non-finite time (named).
 */
hp_status hp_mm_schedule_make(hp_mm_mode mode, int m, const double t_f[HP_MM_ROLES], const double t_b[HP_MM_ROLES],
                              double link, hp_mm_schedule *out);

/*
 * The cost model's seconds of each group's passes for micro-batches of `rows` rows (hp_predict_seconds
 * over the sub-model's training graph under `mm`, hp/costmodel.h): t_f[r] the forward of encoder r
 * (the decoder: its forward and backward), t_b[r] the encoders' backward (0 for the decoder).
 * Errors: HP_STATUS_INVALID_ARGUMENT for rows or m < 1; the model's and the predictor's errors.
 */
struct hp_machine_model;
hp_status hp_mm_predict_passes(const hp_mm_config *c, int rows, int m, const struct hp_machine_model *mm,
                               double t_f[HP_MM_ROLES], double t_b[HP_MM_ROLES]);

/*
 * The split of `ranks` ranks (3..1024) over the three groups (each >= 1 rank) with the smallest
 * predicted step: each group's pass times divided by its ranks (its ranks splitting every
 * micro-batch's rows, data parallel; the gradient all-reduce not counted), scheduled by
 * hp_mm_schedule_make (CONCURRENT). best[r] gets group r's ranks, *makespan the predicted seconds.
 * Errors: HP_STATUS_INVALID_ARGUMENT for ranks outside [3, 1024]; hp_mm_schedule_make's.
 */
hp_status hp_mm_suggest_split(const double t_f[HP_MM_ROLES], const double t_b[HP_MM_ROLES], int m, int ranks,
                              int best[HP_MM_ROLES], double *makespan);

/* ---------------------------------------------------------------- training */

typedef struct hp_mm_runner hp_mm_runner;

/* Metrics of one step. */
typedef struct hp_mm_step_stats {
    float loss;             /* mean over the step's rows (every rank) */
    float grad_norm;        /* global, before clipping */
    double seconds;         /* wall time of the step on this rank */
    double busy[HP_MM_ROLES]; /* compute seconds of each group in this step (every rank) */
    double predicted;       /* the schedule's predicted makespan */
    int inflight;           /* the encoders' in-flight limit the scheduler chose */
} hp_mm_step_stats;

/*
 * A trainer of the multimodal model of cfg (model.family multimodal). With world NULL (or of size
 * 1) and no groups: one program over the whole model on this process (hp_train_step_build: clip +
 * AdamW), a batch of train.batch rows per step. With groups (kinds encoder, encoder, fusion) on
 * `world` (collective over it): this rank's sub-model, train.batch split into
 * pipeline.micro_batches micro-batches, under `mode` (CONCURRENT: hp train; CHAIN: the baseline of
 * bench/, one rank per group). Data: model.multimodal.data_dir, at most
 * model.multimodal.train_images training images; step s takes rows hashed from (train.seed, s).
 * Errors: HP_STATUS_CONFIG naming the group when the world size is not the groups' ranks or a
 * group's ranks do not divide a micro-batch's rows; HP_STATUS_UNSUPPORTED for a group mesh with more
 * than one axis or strategy rules, or CHAIN with a group of several ranks; data, graph and program
 * errors. With groups the ranks agree on the build (hp_comm_agree): where another rank's build
 * failed, HP_STATUS_COMM naming it.
 */
hp_status hp_mm_runner_new(const hp_run_config *cfg, hp_comm *world, hp_mm_mode mode, hp_mm_runner **out);
void hp_mm_runner_free(hp_mm_runner *r);
/* This rank's role (HP_MM_ROLE_*), or -1 on one device. */
int hp_mm_runner_role(const hp_mm_runner *r);
/* One optimizer step (collective over the world with groups). */
hp_status hp_mm_runner_step(hp_mm_runner *r, hp_mm_step_stats *st);
/*
 * Greedy-decodes the captions of the first `n` test images (model.multimodal.test_images when n is
 * 0) and counts those whose class words (after "a photo of a/an") equal the image's class: *acc in
 * [0, 1]; *caption_acc those whose whole caption is right. With groups the encoders send their
 * parameters to the decoder's rank, which decodes (collective; *acc only there, others get -1).
 */
hp_status hp_mm_runner_eval(hp_mm_runner *r, int64_t n, double *acc, double *caption_acc);
/*
 * Writes the model's parameters (every enc_a.*, enc_b.* and dec.* entry of the store) to the
 * safetensors file `path` (metadata format: hp-multimodal). With groups only the decoder's rank
 * writes, after hp_mm_runner_eval has gathered the encoders' parameters there (others: no-op).
 * Errors: hp_safetensors_write's.
 */
hp_status hp_mm_runner_save(hp_mm_runner *r, const char *path);
/*
 * Records every program's nodes into `tr` (hp/trace.h; NULL: stops), each step numbered: with
 * groups, spans tagged with the group's role as the stage and the micro-batch, so
 * bench/trace_bubble.py measures the bubble from the written trace. `tr` is borrowed and must
 * outlive the runner or be unset. Errors: hp_program_set_trace's.
 */
struct hp_trace;
hp_status hp_mm_runner_set_trace(hp_mm_runner *r, struct hp_trace *tr);
/* This rank's values of parameter `name` (numel elements, the store's memory: valid until the runner
 * is freed). Errors: HP_STATUS_NOT_FOUND naming a name this rank does not hold. */
hp_status hp_mm_runner_params(hp_mm_runner *r, const char *name, float **data, int64_t *numel);

#ifdef __cplusplus
}
#endif
#endif
