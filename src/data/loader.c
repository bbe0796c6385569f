/* Deterministic, rank-sliceable batch loader (see hp/data.h). */
#include "hp/data.h"
#include "hp/shards.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct hp_loader {
    const hp_corpus *corpus; /* one of corpus and set */
    const hp_shard_set *set;
    hp_loader_options opt;
    size_t n_train, n_val;
    int64_t row_begin, row_end;
};

hp_loader_options hp_loader_options_default(void) {
    return (hp_loader_options){
        .batch = 8, .context = 256, .val_fraction = 0.05, .seed = 1, .rank = 0, .world = 1};
}

/* splitmix64's finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Counter-based: one 64-bit draw keyed by (seed, step, row), no state. */
static uint64_t draw(uint64_t seed, uint64_t step, uint64_t row) {
    return mix64(mix64(mix64(seed) ^ step) ^ row);
}

/* Checks the options against splits of n_train and n_val tokens from `name`. */
static hp_status loader_make(const char *name, size_t n_train, size_t n_val, const hp_loader_options *opt, hp_loader **out) {
    *out = NULL;
    if (opt->batch < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: batch %lld must be >= 1", (long long)opt->batch);
    if (opt->context < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: context %lld must be >= 1", (long long)opt->context);
    if (opt->world < 1 || opt->rank < 0 || opt->rank >= opt->world)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: rank %d is outside [0, world %d)", opt->rank, opt->world);
    if (opt->world > opt->batch)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: world %d exceeds the global batch %lld", opt->world,
                        (long long)opt->batch);
    size_t need = (size_t)opt->context + 1;
    if (n_train < need || n_val < need)
        return hp_error(HP_STATUS_CORRUPT,
                        "corpus '%s' is too short for context %lld: %zu tokens give a train split of %zu and a "
                        "val split of %zu, each needs at least %zu",
                        name, (long long)opt->context, n_train + n_val, n_train, n_val, need);
    hp_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return hp_error(HP_STATUS_OUT_OF_MEMORY, "loader: out of memory");
    ld->opt = *opt;
    ld->n_train = n_train;
    ld->n_val = n_val;
    ld->row_begin = (int64_t)opt->rank * opt->batch / opt->world;
    ld->row_end = (int64_t)(opt->rank + 1) * opt->batch / opt->world;
    *out = ld;
    return HP_STATUS_OK;
}

hp_status hp_loader_new(const hp_corpus *corpus, const hp_loader_options *opt, hp_loader **out) {
    *out = NULL;
    if (!(opt->val_fraction > 0.0 && opt->val_fraction < 1.0))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: val_fraction %g must be in (0, 1)", opt->val_fraction);
    size_t n = hp_corpus_size(corpus);
    size_t n_val = (size_t)floor((double)n * opt->val_fraction);
    HP_CHECK(loader_make(hp_corpus_name(corpus), n - n_val, n_val, opt, out));
    (*out)->corpus = corpus;
    return HP_STATUS_OK;
}

hp_status hp_loader_new_shards(const hp_shard_set *set, const hp_loader_options *opt, hp_loader **out) {
    *out = NULL;
    uint64_t nt = hp_shard_set_tokens(set, HP_SHARD_SPLIT_TRAIN), nv = hp_shard_set_tokens(set, HP_SHARD_SPLIT_VAL);
    if (nt > SIZE_MAX / 2 || nv > SIZE_MAX / 2)
        return hp_error(HP_STATUS_UNSUPPORTED, "shards '%s': %llu tokens do not fit this machine's size_t",
                        hp_shard_set_dir(set), (unsigned long long)(nt + nv));
    HP_CHECK(loader_make(hp_shard_set_dir(set), (size_t)nt, (size_t)nv, opt, out));
    (*out)->set = set;
    return HP_STATUS_OK;
}

void hp_loader_free(hp_loader *ld) { free(ld); }

size_t hp_loader_train_tokens(const hp_loader *ld) { return ld->n_train; }
size_t hp_loader_val_tokens(const hp_loader *ld) { return ld->n_val; }

void hp_loader_rows(const hp_loader *ld, int64_t *begin, int64_t *end) {
    *begin = ld->row_begin;
    *end = ld->row_end;
}

int64_t hp_loader_val_windows(const hp_loader *ld) { return (int64_t)(ld->n_val - 1) / ld->opt.context; }

size_t hp_loader_train_offset(const hp_loader *ld, int64_t step, int64_t row) {
    uint64_t starts = (uint64_t)(ld->n_train - (size_t)ld->opt.context); /* >= 1 */
    return (size_t)(draw(ld->opt.seed, (uint64_t)step, (uint64_t)row) % starts);
}

/* The window of T+1 tokens at `start` of the concatenated splits (train, then val). */
static hp_status copy_window(const hp_loader *ld, size_t start, int32_t *x, int32_t *y) {
    int64_t T = ld->opt.context;
    if (ld->set) {
        hp_shard_split sp = start >= ld->n_train ? HP_SHARD_SPLIT_VAL : HP_SHARD_SPLIT_TRAIN;
        size_t at = sp == HP_SHARD_SPLIT_VAL ? start - ld->n_train : start;
        HP_CHECK(hp_shard_set_read(ld->set, sp, at, (size_t)T, x));
        memmove(y, x + 1, (size_t)(T - 1) * sizeof *y);
        return hp_shard_set_read(ld->set, sp, at + (size_t)T, 1, y + T - 1);
    }
    const int32_t *tok = hp_corpus_tokens(ld->corpus);
    for (int64_t t = 0; t < T; t++) {
        x[t] = tok[start + (size_t)t];
        y[t] = tok[start + (size_t)t + 1];
    }
    return HP_STATUS_OK;
}

hp_status hp_loader_batch_rows(const hp_loader *ld, int64_t step, int64_t row_begin, int64_t row_end,
                               int32_t *tokens_out, int32_t *targets_out) {
    if (step < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: step %lld must be >= 0", (long long)step);
    if (row_begin < 0 || row_end < row_begin || row_end > ld->opt.batch)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: rows [%lld, %lld) are outside the batch [0, %lld)",
                        (long long)row_begin, (long long)row_end, (long long)ld->opt.batch);
    int64_t T = ld->opt.context;
    for (int64_t r = row_begin; r < row_end; r++) {
        size_t start = hp_loader_train_offset(ld, step, r);
        HP_CHECK(copy_window(ld, start, tokens_out + (r - row_begin) * T, targets_out + (r - row_begin) * T));
    }
    return HP_STATUS_OK;
}

hp_status hp_loader_batch(const hp_loader *ld, int64_t step, int32_t *tokens_out, int32_t *targets_out) {
    return hp_loader_batch_rows(ld, step, ld->row_begin, ld->row_end, tokens_out, targets_out);
}

hp_status hp_loader_val_batch(const hp_loader *ld, int64_t index, int32_t *tokens_out, int32_t *targets_out) {
    if (index < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "loader: validation batch index %lld must be >= 0", (long long)index);
    int64_t T = ld->opt.context, W = hp_loader_val_windows(ld);
    for (int64_t r = ld->row_begin; r < ld->row_end; r++) {
        /* (index*B + r) mod W without overflow for large indices. */
        int64_t w = (int64_t)((((uint64_t)index % (uint64_t)W) * ((uint64_t)ld->opt.batch % (uint64_t)W) +
                               (uint64_t)r) % (uint64_t)W);
        size_t start = ld->n_train + (size_t)(w * T);
        HP_CHECK(copy_window(ld, start, tokens_out + (r - ld->row_begin) * T, targets_out + (r - ld->row_begin) * T));
    }
    return HP_STATUS_OK;
}
