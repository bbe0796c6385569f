/* The trainer's data: a corpus (data.corpus) or a shard set (data.shards) behind one loader, the
 * set's tokenizer kept in the run directory, and sampling that encodes and decodes with it. */
#include "train/trainer_internal.h"

#include "hp/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Entropy estimate over the first tokens of a shard set: enough for the baseline, quick on any size. */
#define UNIGRAM_TOKENS ((uint64_t)1 << 22)

hp_status hp__trainer_data_new(hp_trainer *t) {
    const hp_run_config *cfg = &t->cfg;
    hp_loader_options lo = hp_loader_options_default();
    lo.batch = cfg->train.batch;
    lo.context = cfg->model.context;
    lo.val_fraction = cfg->data.val_fraction;
    lo.seed = (uint64_t)cfg->train.seed;
    if (!cfg->data.shards[0]) {
        HP_CHECK(hp_corpus_load(cfg->data.corpus, &t->corpus));
        HP_CHECK(hp_loader_new(t->corpus, &lo, &t->loader));
        t->unigram = hp_corpus_unigram_entropy(t->corpus, 0, hp_loader_train_tokens(t->loader));
        return HP_STATUS_OK;
    }
    /* every payload's crc32 once (streamed through the mapping, nothing stays resident) */
    HP_CHECK(hp_shard_set_open(cfg->data.shards, true, &t->set));
    int32_t v = hp_shard_set_vocab(t->set);
    if (cfg->model.vocab < v)
        return hp_error(HP_STATUS_CONFIG, "model.vocab %lld is smaller than the vocabulary %d of data.shards '%s' "
                        "(tokenizer %s): model.vocab must be >= %d", (long long)cfg->model.vocab, (int)v,
                        cfg->data.shards, hp_shard_set_tokenizer_kind(t->set), (int)v);
    char spec[4096];
    hp_status st = hp_tokenizer_load(hp_shard_set_tokenizer_spec(t->set, spec, sizeof spec), &t->tok);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "data.shards '%s': ", cfg->data.shards);
    if (hp_tokenizer_vocab_size(t->tok) != v)
        return hp_error(HP_STATUS_CORRUPT, "data.shards '%s': its tokenizer %s has %d ids, the shards say %d",
                        cfg->data.shards, spec, (int)hp_tokenizer_vocab_size(t->tok), (int)v);
    HP_CHECK(hp_loader_new_shards(t->set, &lo, &t->loader));
    return hp_shard_set_unigram_entropy(t->set, UNIGRAM_TOKENS, &t->unigram);
}

void hp__trainer_data_free(hp_trainer *t) {
    hp_loader_free(t->loader);
    hp_corpus_free(t->corpus);
    hp_shard_set_free(t->set);
    hp_tokenizer_free(t->tok);
    t->loader = NULL, t->corpus = NULL, t->set = NULL, t->tok = NULL;
}

hp_status hp__trainer_copy_tokenizer(const hp_trainer *t) {
    if (!t->set || !strcmp(hp_tokenizer_kind(t->tok), "bytes")) return HP_STATUS_OK;
    char spec[4096], copied[64];
    hp_status st = hp_tokenizer_files_copy(hp_shard_set_tokenizer_spec(t->set, spec, sizeof spec),
                                           t->cfg.train.checkpoint_dir, copied, sizeof copied);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "keeping the tokenizer in train.checkpoint_dir: ");
    return HP_STATUS_OK;
}

hp_status hp__checkpoint_tokenizer(const char *step_dir, hp_tokenizer **out) {
    *out = NULL;
    char run[4096], path[4200];
    snprintf(run, sizeof run, "%s", step_dir);
    size_t n = strlen(run);
    while (n > 1 && run[n - 1] == '/') run[--n] = 0;
    char *slash = strrchr(run, '/');
    if (!slash) snprintf(run, sizeof run, ".");
    else if (slash == run) run[1] = 0;
    else *slash = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", run);
    bool json = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/encoder.json", run);
    if (!json && access(path, F_OK) != 0) return HP_STATUS_OK; /* no tokenizer kept: bytes */
    if (json) snprintf(path, sizeof path, "%s/tokenizer.json", run);
    hp_status st = hp_tokenizer_load(json ? path : run, out);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "the tokenizer of checkpoint %s: ", step_dir);
    return HP_STATUS_OK;
}

hp_status hp__generate_tokens(hp_program *p, const hp_gpt *gpt, const hp_tokenizer *tok, const char *prompt, int n_tokens,
                              float temp, int top_k, uint64_t seed, char **text_out) {
    int T = gpt->seq, V = gpt->cfg.vocab, Vt = hp_tokenizer_vocab_size(tok);
    if (Vt > V) Vt = V; /* the model's extra ids (model.vocab > the tokenizer's) are never sampled */
    int32_t *ids = NULL, *seq = NULL;
    size_t np = 0;
    HP_CHECK(hp_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &np));
    seq = malloc((np + (size_t)n_tokens + 1) * sizeof *seq);
    if (!seq) {
        free(ids);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %d sampled tokens", n_tokens);
    }
    memcpy(seq, ids, np * sizeof *seq);
    free(ids);
    size_t len = np;
    int32_t *in = hp_program_data(p, gpt->tokens);
    const float *logits = hp_program_data(p, gpt->logits);
    uint64_t key = hp_rng_hash("sample") ^ seed;
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < n_tokens && st == HP_STATUS_OK; i++) {
        /* the last T ids, left-aligned; causal attention makes the padding after them irrelevant */
        size_t start = len > (size_t)T ? len - (size_t)T : 0, n = len - start;
        memset(in, 0, sizeof *in * (size_t)T);
        memcpy(in, seq + start, n * sizeof *in);
        if (n == 0) n = 1; /* empty prompt: condition on id 0 */
        st = hp_program_run(p);
        int next = 0;
        if (st == HP_STATUS_OK) st = hp__sample_logits(logits + (n - 1) * (size_t)V, Vt, temp, top_k, key, (uint64_t)i, &next);
        seq[len++] = next;
    }
    size_t tl;
    if (st == HP_STATUS_OK) st = hp_tokenizer_decode(tok, seq, len, text_out, &tl);
    free(seq);
    return st;
}
