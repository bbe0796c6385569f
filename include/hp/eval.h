/*
 * hp/eval.h — evaluation of a checkpoint: loss, perplexity and bits per byte over a whole text.
 *
 *     hp_eval_opts o = HP_EVAL_OPTS_INIT;                    // the run's held-out split
 *     o.data = "other.txt";                                   // or a file, evaluated whole
 *     hp_eval_result r;
 *     HP_CHECK(hp_eval_checkpoint("runs/kjv", &o, &r));
 *     printf("loss %.4f nats/token, ppl %.2f, %.4f bits/byte\n", r.loss, r.perplexity, r.bpb);
 *
 * What is evaluated. Without o.data: the held-out split of the corpus named by the config saved
 * with the checkpoint (data.corpus, data.val_fraction), cut as hp/data.h cuts it (the last
 * floor(N * val_fraction) of the corpus's N tokens); for a run trained on a shard set (data.shards,
 * hp/shards.h), the set's whole validation split instead, read into memory. With o.data: every
 * token of that file.
 *
 * Windows. A text of n tokens t_0 .. t_{n-1} has n - 1 targets (t_0 is never predicted). They are
 * covered by W = ceil((n - 1) / T) windows of the model's context T with stride T: window k feeds
 * t_{kT} .. t_{kT+len-1} and scores targets t_{kT+1} .. t_{kT+len}, len = min(T, n - 1 - kT), so
 * every target is counted exactly once and the last, partial window is included (its padding
 * sits after the real positions and causal attention keeps it out of their logits). Each window
 * starts with an empty context, as the trainer's validation windows do (hp_loader_val_batch: the
 * first floor((n - 1) / T) windows here are exactly those). Windows run `batch` at a time.
 *
 * Units. loss = total nats / targets (the mean cross-entropy, nats per token), perplexity =
 * exp(loss), bits per byte = total nats / (ln 2 * bytes), with bytes the length of the targets'
 * text (their decoded bytes): for the byte tokenizer one token is one byte and bpb = loss / ln 2.
 * Log-probabilities are computed from the model's logits in double precision (log-sum-exp).
 *
 * Tokenizer. o.tokenizer, else the run directory's tokenizer.json (the checkpoint directory's
 * parent, or the directory itself) when it has one, else "bytes" (hp/tokenizer.h).
 */
#ifndef HP_EVAL_H
#define HP_EVAL_H

#include "hp/comm.h"
#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_eval_opts {
    const char *data;      /* a text file evaluated whole; NULL: the run's held-out split */
    const char *tokenizer; /* a tokenizer spec (hp_tokenizer_load); NULL: the run's, else "bytes" */
    int64_t batch;         /* windows per forward pass, >= 0; 0: the checkpoint's train.batch */
    hp_comm *world;        /* NULL: this process alone; else windows are dealt round-robin to its
                            * ranks (window k to rank k mod size) and the sums are combined: a
                            * collective, every rank calls it with the same arguments */
} hp_eval_opts;

#define HP_EVAL_OPTS_INIT {NULL, NULL, 0, NULL}

typedef struct hp_eval_result {
    double loss;          /* nats per target token */
    double perplexity;    /* exp(loss) */
    double bpb;           /* bits per byte of the targets' text */
    double nats;          /* total over every target */
    int64_t tokens;       /* targets scored: n - 1 */
    int64_t bytes;        /* bytes of the targets' text */
    int64_t windows;      /* W */
    int64_t context;      /* T, the model's context */
    int64_t batch;        /* windows per forward pass used */
    int64_t step;         /* the checkpoint's training step */
    int64_t vocab;        /* the model's vocabulary */
    double seconds;       /* wall time of the forward passes and scoring (this rank) */
    bool held_out;        /* true: the run's held-out split; false: o.data */
    bool shards;          /* true: that split is a shard set's validation split (data.shards) */
    double val_fraction;  /* the split's data.val_fraction (held_out of a corpus only, else 0) */
    char source[4096];    /* the file the text came from (the corpus or o.data), or the shard set */
    char step_dir[4096];  /* the step directory evaluated */
    char tokenizer[16];   /* hp_tokenizer_kind of the tokenizer used */
} hp_eval_result;

/*
 * Windows covering n tokens with context T (both >= 1): ceil((n - 1) / T), 0 when n < 2.
 */
int64_t hp_eval_windows(int64_t n, int64_t T);

/*
 * Evaluates the checkpoint at `path` (a run directory or a step directory; checked as
 * hp_generate_from_checkpoint checks it: the saved config against the tensors, every tensor's
 * checksum and finite values) on the text the options name (see the header comment), filling *r.
 * Errors name the path and the bad value: the checkpoint's errors (HP_STATUS_NOT_FOUND for a path
 * that is neither a run nor a step directory, HP_STATUS_CORRUPT ...); HP_STATUS_IO for a data file
 * or corpus that is missing or not a regular file; HP_STATUS_CORRUPT for an empty one;
 * HP_STATUS_INVALID_ARGUMENT for a text of fewer than 2 tokens (nothing to predict), a negative
 * batch, a tokenizer whose vocabulary exceeds the model's or a token outside it, a shard set
 * tokenized by another tokenizer than the one evaluated with; the shard set's errors (hp/shards.h,
 * naming the file); the tokenizer's
 * errors; HP_STATUS_COMM when the ranks cannot combine their sums (every rank then fails).
 */
hp_status hp_eval_checkpoint(const char *path, const hp_eval_opts *o, hp_eval_result *r);

#ifdef __cplusplus
}
#endif
#endif /* HP_EVAL_H */
