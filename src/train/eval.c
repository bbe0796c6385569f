/*
 * Evaluation of a checkpoint over a whole text (see hp/eval.h): the model rebuilt from the saved
 * config and weights, windows of its context with stride = context, the cross-entropy of every
 * target computed from the logits in double precision.
 */
#include "train/trainer_internal.h"

#include "hp/checkpoint.h"
#include "hp/eval.h"
#include "hp/shards.h"
#include "hp/tokenizer.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int64_t hp_eval_windows(int64_t n, int64_t T) { return n < 2 || T < 1 ? 0 : (n - 1 + T - 1) / T; }

/* The tokenizer: the option's, else the run directory's tokenizer.json, else bytes. */
static hp_status open_tokenizer(const char *spec, const char *step_dir, hp_tokenizer **out) {
    if (spec) return hp_tokenizer_load(spec, out);
    char run[4096], cand[2][4200];
    snprintf(run, sizeof run, "%s", step_dir);
    snprintf(cand[0], sizeof cand[0], "%s/tokenizer.json", dirname(run));
    snprintf(cand[1], sizeof cand[1], "%s/tokenizer.json", step_dir);
    struct stat sb;
    for (int i = 0; i < 2; i++)
        if (stat(cand[i], &sb) == 0) return hp_tokenizer_load(cand[i], out);
    return hp_tokenizer_load("bytes", out);
}

/* The whole file, tokenized: hp_corpus_load's checks (a regular file, not empty), then `tok`. */
static hp_status read_tokens(const char *path, bool is_data, const hp_tokenizer *tok, int32_t **ids, size_t *n) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return hp_error(HP_STATUS_IO, "%s '%s': %s", is_data ? "--data file" : "the run's corpus (data.corpus)", path,
                        strerror(errno));
    if (S_ISREG(sb.st_mode) && sb.st_size == 0)
        return hp_error(HP_STATUS_CORRUPT, "%s '%s' is empty: nothing to evaluate",
                        is_data ? "--data file" : "the run's corpus (data.corpus)", path);
    hp_corpus *c;
    HP_CHECK(hp_corpus_load(path, &c));
    size_t len = hp_corpus_size(c);
    const int32_t *bytes = hp_corpus_tokens(c);
    char *text = malloc(len);
    if (!text) {
        hp_corpus_free(c);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "eval: out of memory for the %zu bytes of '%s'", len, path);
    }
    for (size_t i = 0; i < len; i++) text[i] = (char)bytes[i];
    hp_corpus_free(c);
    hp_status st = hp_tokenizer_encode(tok, text, len, ids, n);
    free(text);
    return st;
}

/* The validation split of the shard set `dir` (a run trained on data.shards), read whole. The set's
 * tokenizer must be the one the model is evaluated with: the same vocabulary, and the same kind. */
static hp_status read_val_shards(const char *dir, const hp_tokenizer *tok, int32_t **ids, size_t *n) {
    hp_shard_set *set;
    HP_CHECK(hp_shard_set_open(dir, false, &set));
    hp_status st = HP_STATUS_OK;
    uint64_t N = hp_shard_set_tokens(set, HP_SHARD_SPLIT_VAL);
    if (hp_shard_set_vocab(set) != hp_tokenizer_vocab_size(tok) ||
        strcmp(hp_shard_set_tokenizer_kind(set), hp_tokenizer_kind(tok)) != 0) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "the run's shard set '%s' was tokenized by a %s tokenizer of %d ids, "
                      "not by the %s tokenizer of %d ids given to eval", dir, hp_shard_set_tokenizer_kind(set),
                      (int)hp_shard_set_vocab(set), hp_tokenizer_kind(tok), (int)hp_tokenizer_vocab_size(tok));
        goto out;
    }
    if (N > SIZE_MAX / sizeof **ids || !(*ids = malloc((size_t)(N ? N : 1) * sizeof **ids))) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "eval: out of memory for the %llu validation tokens of '%s'",
                      (unsigned long long)N, dir);
        goto out;
    }
    *n = (size_t)N;
    if (N) st = hp_shard_set_read(set, HP_SHARD_SPLIT_VAL, 0, (size_t)N, *ids);
    if (st != HP_STATUS_OK) {
        free(*ids);
        *ids = NULL;
    }
out:
    hp_shard_set_free(set);
    return st;
}

/* -log softmax(row)[target] in double precision (log-sum-exp around the row's maximum). */
static double nats_of(const float *row, int V, int32_t target) {
    float mx = row[0];
    for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)row[v] - (double)mx);
    return (double)mx + log(s) - (double)row[target];
}

/* The model of the checkpoint as a forward program for (B, T) tokens, its logits kept. */
typedef struct eval_model {
    hp_graph *g;
    hp_store *store;
    hp_program *p;
    hp_gpt gpt;
} eval_model;

static void model_free(eval_model *m) {
    hp_program_free(m->p);
    hp_store_free(m->store);
    hp_graph_free(m->g);
}

static hp_status model_load(const char *step_dir, const hp_gpt_config *gc, int B, eval_model *m) {
    hp_status st = HP_STATUS_OK;
    hp_named_tensor *named = NULL;
    hp_tid *ids = NULL;
    if (!(m->g = hp_graph_new())) return hp_error(HP_STATUS_OUT_OF_MEMORY, "eval: out of memory");
    HP_CHECK(hp_gpt_build(m->g, gc, B, gc->context, false, &m->gpt));
    HP_CHECK(hp_store_new(NULL, NULL, &m->store));
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &m->gpt.logits;
    o.n_keep = 1;
    o.store = m->store;
    HP_CHECK(hp_program_new(m->g, &o, &m->p));
    int n = hp_graph_params(m->g, NULL, 0);
    ids = calloc((size_t)n, sizeof *ids);
    named = calloc((size_t)n, sizeof *named);
    if (!ids || !named) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "eval: out of memory");
        goto out;
    }
    hp_graph_params(m->g, ids, n);
    for (int i = 0; i < n; i++) {
        const hp_tensor *x = hp_graph_tensor(m->g, ids[i]);
        named[i] = (hp_named_tensor){x->name, x->dtype, x->shape, hp_store_data(m->store, x->name)};
    }
    HP_CHECK_GOTO(hp_checkpoint_load_model(step_dir, named, (size_t)n), st, out);
    for (int i = 0; i < n; i++) HP_CHECK_GOTO(hp_store_touch(m->store, named[i].name), st, out);
out:
    free(ids);
    free(named);
    return st;
}

/* Scores windows rank, rank + size, ... of the n tokens `tok`: *nats their summed cross-entropy. */
static hp_status score(eval_model *m, const int32_t *tok, int64_t n, int rank, int size, double *nats) {
    int B = m->gpt.batch, T = m->gpt.seq, V = m->gpt.cfg.vocab;
    int64_t W = hp_eval_windows(n, T);
    int32_t *x = hp_program_data(m->p, m->gpt.tokens);
    const float *logits = hp_program_data(m->p, m->gpt.logits);
    int64_t *start = malloc((size_t)B * sizeof *start);
    if (!start) return hp_error(HP_STATUS_OUT_OF_MEMORY, "eval: out of memory");
    double sum = 0;
    hp_status st = HP_STATUS_OK;
    for (int64_t k = rank; k < W && st == HP_STATUS_OK;) {
        int rows = 0;
        memset(x, 0, sizeof *x * (size_t)B * (size_t)T);
        for (; rows < B && k < W; rows++, k += size) {
            start[rows] = k * T;
            int64_t len = n - 1 - start[rows] < T ? n - 1 - start[rows] : T;
            memcpy(x + (size_t)rows * (size_t)T, tok + start[rows], sizeof *x * (size_t)len);
        }
        if ((st = hp_program_run(m->p)) != HP_STATUS_OK) break;
        for (int r = 0; r < rows; r++) {
            int64_t len = n - 1 - start[r] < T ? n - 1 - start[r] : T;
            for (int64_t t = 0; t < len; t++)
                sum += nats_of(logits + ((size_t)r * (size_t)T + (size_t)t) * (size_t)V, V, tok[start[r] + t + 1]);
        }
    }
    free(start);
    *nats = sum;
    return st;
}

/* Everything one rank does: the checkpoint, the text, its share of the windows. */
static hp_status eval_local(const char *path, const hp_eval_opts *o, int rank, int size, hp_eval_result *r,
                            double *nats) {
    hp_checkpoint_state s;
    hp_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    eval_model m = {0};
    HP_CHECK(hp__ckpt_check_paths(path, NULL));
    HP_CHECK(hp_checkpoint_resolve(path, r->step_dir, sizeof r->step_dir));
    HP_CHECK(hp__ckpt_check_paths(path, r->step_dir));
    HP_CHECK(hp_checkpoint_read_state(r->step_dir, &s));
    hp_status st = HP_STATUS_OK;
    if (!s.has_config) {
        st = hp_error(HP_STATUS_CORRUPT, "checkpoint %s has no saved config, so the model cannot be rebuilt", r->step_dir);
        goto out;
    }
    HP_CHECK_GOTO(hp_checkpoint_check_config(r->step_dir, &s), st, out);
    hp_gpt_config gc = hp__gpt_config_from(&s.config.model);
    r->step = s.step;
    r->context = gc.context;
    r->vocab = gc.vocab;
    r->held_out = o->data == NULL;
    r->shards = r->held_out && s.config.data.shards[0];
    r->val_fraction = r->held_out && !r->shards ? s.config.data.val_fraction : 0;
    snprintf(r->source, sizeof r->source, "%s",
             !r->held_out ? o->data : r->shards ? s.config.data.shards : s.config.data.corpus);
    HP_CHECK_GOTO(open_tokenizer(o->tokenizer, r->step_dir, &tok), st, out);
    snprintf(r->tokenizer, sizeof r->tokenizer, "%s", hp_tokenizer_kind(tok));
    if (hp_tokenizer_vocab_size(tok) > gc.vocab) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "tokenizer %s has a vocabulary of %d, larger than the model's %d "
                      "(checkpoint %s)", r->tokenizer, (int)hp_tokenizer_vocab_size(tok), gc.vocab, r->step_dir);
        goto out;
    }
    size_t N;
    if (r->shards)
        HP_CHECK_GOTO(read_val_shards(r->source, tok, &ids, &N), st, out);
    else
        HP_CHECK_GOTO(read_tokens(r->source, !r->held_out, tok, &ids, &N), st, out);
    size_t first = 0, n = N;
    if (r->held_out && !r->shards) {
        n = (size_t)floor((double)N * r->val_fraction); /* hp/data.h's split */
        first = N - n;
    }
    if (n < 2) {
        const char *what = r->shards ? "the validation split of shard set"
                           : r->held_out ? "the held-out split of" : "--data file";
        const char *hint = r->shards ? " (prepare it with a larger --val-fraction)"
                           : r->held_out ? " (data.val_fraction too small)" : "";
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s '%s' gives %zu token%s%s: nothing to predict (at least 2 needed)",
                      what, r->source, n, n == 1 ? "" : "s", hint);
        goto out;
    }
    for (size_t i = first; i < N; i++)
        if (ids[i] < 0 || ids[i] >= gc.vocab) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "token %d at position %zu of '%s' is outside the model's vocabulary "
                          "[0, %d)", (int)ids[i], i, r->source, gc.vocab);
            goto out;
        }
    size_t blen;
    HP_CHECK_GOTO(hp_tokenizer_decode(tok, ids + first + 1, n - 1, &text, &blen), st, out);
    r->tokens = (int64_t)(n - 1);
    r->bytes = (int64_t)blen;
    r->windows = hp_eval_windows((int64_t)n, gc.context);
    int64_t mine = (r->windows - rank + size - 1) / size; /* windows rank, rank + size, ... */
    int64_t B = o->batch > 0 ? o->batch : s.config.train.batch;
    if (B > mine) B = mine > 0 ? mine : 1;
    if (B > INT32_MAX / gc.context) B = INT32_MAX / gc.context;
    r->batch = B;
    double t0 = hp_now_seconds();
    HP_CHECK_GOTO(model_load(r->step_dir, &gc, (int)B, &m), st, out);
    HP_CHECK_GOTO(score(&m, ids + first, (int64_t)n, rank, size, nats), st, out);
    r->seconds = hp_now_seconds() - t0;
out:
    model_free(&m);
    free(text);
    free(ids);
    hp_tokenizer_free(tok);
    hp_checkpoint_state_free(&s);
    return st;
}

hp_status hp_eval_checkpoint(const char *path, const hp_eval_opts *o, hp_eval_result *r) {
    hp_eval_opts def = HP_EVAL_OPTS_INIT;
    if (!o) o = &def;
    memset(r, 0, sizeof *r);
    if (o->batch < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "eval: batch %lld must be >= 0", (long long)o->batch);
    int rank = o->world ? hp_comm_rank(o->world) : 0, size = o->world ? hp_comm_size(o->world) : 1;
    double nats = 0;
    hp_status st = eval_local(path, o, rank, size, r, &nats);
    if (size > 1) {
        /* every rank's (nats, failed) to every rank, summed in rank order: the same total everywhere */
        double mine[2] = {nats, st != HP_STATUS_OK}, *all = malloc(sizeof *all * 2 * (size_t)size);
        if (!all) return hp_error(HP_STATUS_OUT_OF_MEMORY, "eval: out of memory");
        hp_status cs = hp_comm_all_gather(o->world, mine, all, 4, HP_DTYPE_I32);
        nats = 0;
        int failed = -1;
        for (int k = 0; k < size && cs == HP_STATUS_OK; k++) {
            nats += all[2 * k];
            if (all[2 * k + 1] != 0 && failed < 0) failed = k;
        }
        free(all);
        if (st != HP_STATUS_OK) return st;
        if (cs != HP_STATUS_OK) return cs;
        if (failed >= 0)
            return hp_error(HP_STATUS_COMM, "eval: rank %d failed (its own message says why)", failed);
    }
    if (st != HP_STATUS_OK) return st;
    r->nats = nats;
    r->loss = nats / (double)r->tokens;
    r->perplexity = exp(r->loss);
    r->bpb = nats / (log(2.0) * (double)r->bytes);
    return HP_STATUS_OK;
}
