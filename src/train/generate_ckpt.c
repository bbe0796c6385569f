/* `hp generate`'s library side: a checkpoint's model into a generator, prompts in, texts out
 * (hp_generate_checkpoint, hp/generate.h). */
#include "train/trainer_internal.h"

#include "hp/checkpoint.h"
#include "hp/generate.h"
#include "hp/redistribute.h"
#include "hp/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* The weights of the generator's graph from the step directory, written into the store; with a
 * mesh (tensor parallelism) each whole tensor is read, then this rank's block of the layout the
 * generator declared is cut from it (hp_redistribute_tensor from replicated: no communication). */
static hp_status load_weights(const char *dir, hp_generator *gen, hp_store *store, hp_mesh *mesh) {
    const hp_graph *g = hp_generator_graph(gen);
    int n = hp_graph_params(g, NULL, 0);
    hp_tid *ids = calloc((size_t)n + 1, sizeof *ids);
    hp_named_tensor *named = calloc((size_t)n + 1, sizeof *named);
    hp_status st = HP_STATUS_OK;
    if (!ids || !named) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory");
    if (st == HP_STATUS_OK) {
        hp_graph_params(g, ids, n);
        for (int i = 0; i < n && st == HP_STATUS_OK; i++) {
            const hp_tensor *x = hp_graph_tensor(g, ids[i]);
            void *d = mesh ? malloc((size_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype) + 1)
                           : hp_store_data(store, x->name);
            if (!d) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for '%s'", x->name);
            named[i] = (hp_named_tensor){x->name, x->dtype, x->shape, d};
        }
        if (st == HP_STATUS_OK) st = hp_checkpoint_load_model(dir, named, (size_t)n);
    }
    for (int i = 0; mesh && st == HP_STATUS_OK && i < n; i++) {
        hp_store_entry_info info;
        hp_layout rep;
        hp_layout_init(&rep, named[i].shape.ndim);
        st = hp_store_info(store, named[i].name, &info);
        if (st == HP_STATUS_OK)
            st = hp_redistribute_tensor(mesh, &rep, &info.layout, &named[i].shape, named[i].dtype, named[i].data,
                                        hp_store_data(store, named[i].name), NULL);
    }
    for (int i = 0; st == HP_STATUS_OK && i < n; i++) st = hp_store_touch(store, named[i].name);
    for (int i = 0; mesh && named && i < n; i++) free(named[i].data);
    free(ids);
    free(named);
    return st;
}

/* Prompt text -> ids (bytes without a tokenizer). *ids malloc'd. */
static hp_status encode(const hp_tokenizer *tok, const char *text, int32_t **ids, int *n) {
    size_t len = strlen(text), m = 0;
    if (tok) {
        HP_CHECK(hp_tokenizer_encode(tok, text, len, ids, &m));
    } else {
        *ids = malloc((len + 1) * sizeof **ids);
        if (!*ids) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a prompt");
        for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
        m = len;
    }
    if (m > (size_t)INT32_MAX) return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: prompt of %zu tokens", m);
    *n = (int)m;
    return HP_STATUS_OK;
}

/* Prompt text + generated ids -> text (malloc'd). */
static hp_status decode(const hp_tokenizer *tok, const char *prompt, const int32_t *prompt_ids, int np,
                        const int32_t *gen, int n, char **out) {
    if (!tok) {
        size_t pl = strlen(prompt);
        char *t = malloc(pl + (size_t)n + 1);
        if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a text");
        memcpy(t, prompt, pl);
        for (int i = 0; i < n; i++) t[pl + (size_t)i] = (char)(gen[i] & 0xff);
        t[pl + (size_t)n] = '\0';
        *out = t;
        return HP_STATUS_OK;
    }
    int32_t *all = malloc(((size_t)np + (size_t)n + 1) * sizeof *all);
    if (!all) return hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a text");
    memcpy(all, prompt_ids, (size_t)np * sizeof *all);
    memcpy(all + np, gen, (size_t)n * sizeof *all);
    size_t len;
    hp_status st = hp_tokenizer_decode(tok, all, (size_t)np + (size_t)n, out, &len);
    free(all);
    return st;
}

/* hp_generate over windows of the context (hp_generate_checkpoint's contract): out (n_seq, N). */
static hp_status generate_windows(hp_generator *gen, int C, int n_seq, const int32_t *const *ids, const int *lens,
                                  const hp_generate_opts *o, int32_t *out) {
    const int N = o->max_new_tokens;
    int longest = 0;
    for (int j = 0; j < n_seq; j++) longest = lens[j] > longest ? lens[j] : longest;
    if ((int64_t)(longest > 0 ? longest : 1) + N <= C) return hp_generate(gen, n_seq, ids, lens, o, out);
    /* each sequence so far (prompt + generated), and the window buffers */
    int64_t cap = 0;
    for (int j = 0; j < n_seq; j++) cap = lens[j] + N > cap ? lens[j] + N : cap;
    int32_t *all = malloc((size_t)n_seq * (size_t)cap * sizeof *all), *chunk = malloc(((size_t)n_seq * (size_t)C + 1) * sizeof *chunk);
    int *len = malloc((size_t)n_seq * sizeof *len), *wlen = malloc((size_t)n_seq * sizeof *wlen);
    const int32_t **win = malloc((size_t)n_seq * sizeof *win);
    hp_status st = HP_STATUS_OK;
    if (!all || !chunk || !len || !wlen || !win) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory");
    for (int j = 0; st == HP_STATUS_OK && j < n_seq; j++) {
        memcpy(all + (size_t)j * cap, ids[j], (size_t)lens[j] * sizeof *all);
        len[j] = lens[j];
    }
    hp_generate_opts w = *o;
    for (int done = 0; st == HP_STATUS_OK && done < N;) {
        int n = N - done < (C + 1) / 2 ? N - done : (C + 1) / 2;
        for (int j = 0; j < n_seq; j++) {
            wlen[j] = len[j] < C - n ? len[j] : C - n;
            win[j] = all + (size_t)j * cap + (len[j] - wlen[j]);
        }
        w.max_new_tokens = n;
        w.first_draw = o->first_draw + (uint64_t)done;
        st = hp_generate(gen, n_seq, win, wlen, &w, chunk);
        for (int j = 0; st == HP_STATUS_OK && j < n_seq; j++) {
            memcpy(all + (size_t)j * cap + len[j], chunk + (size_t)j * n, (size_t)n * sizeof *all);
            memcpy(out + (size_t)j * N + done, chunk + (size_t)j * n, (size_t)n * sizeof *out);
            len[j] += n;
        }
        done += n;
    }
    free(all);
    free(chunk);
    free(len);
    free(wlen);
    free(win);
    return st;
}

hp_status hp_generate_checkpoint(const char *path, const char *const *prompts, int n_prompts,
                                 const hp_generate_text_opts *o, char **texts_out, hp_generator_stats *stats_out) {
    if (n_prompts < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: %d prompts (at least one)", n_prompts);
    if (o->batch < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "generate: batch %d must be >= 0", o->batch);
    int n_seq = o->batch > n_prompts ? o->batch : n_prompts;
    for (int j = 0; j < n_seq; j++) texts_out[j] = NULL;
    char dir[4096];
    HP_CHECK(hp__ckpt_check_paths(path, NULL));
    HP_CHECK(hp_checkpoint_resolve(path, dir, sizeof dir));
    HP_CHECK(hp__ckpt_check_paths(path, dir));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(dir, &s));
    hp_status st = HP_STATUS_OK;
    hp_store *store = NULL;
    hp_generator *gen = NULL;
    hp_tokenizer *tok = NULL;
    hp_strategy *strategy = NULL;
    hp_comm *self = NULL;
    int32_t **ids = calloc((size_t)n_prompts, sizeof *ids), *out = NULL;
    int *lens = calloc((size_t)n_prompts, sizeof *lens), *seq_lens = calloc((size_t)n_seq, sizeof *seq_lens);
    const int32_t **seq_ids = calloc((size_t)n_seq, sizeof *seq_ids);
    if (!ids || !lens || !seq_lens || !seq_ids) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory");
        goto out;
    }
    if (!s.has_config) {
        st = hp_error(HP_STATUS_CORRUPT, "checkpoint %s has no saved config, so the model cannot be rebuilt", dir);
        goto out;
    }
    HP_CHECK_GOTO(hp_checkpoint_check_config(dir, &s), st, out);
    hp_gpt_config gc = hp__gpt_config_from(&s.config.model);
    hp_mesh *mesh = NULL;
    if (o->strategy) { /* tensor parallelism over the world (or one rank) */
        hp_comm *world = o->world;
        if (!world && !(world = self = hp_comm_self_new())) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for a communicator");
            goto out;
        }
        HP_CHECK_GOTO(hp_strategy_new(o->strategy, hp_comm_size(world), &strategy), st, out);
        mesh = hp_strategy_mesh(strategy);
        HP_CHECK_GOTO(hp_mesh_attach(mesh, world), st, out);
    }
    HP_CHECK_GOTO(hp_store_new(mesh, NULL, &store), st, out);
    hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
    go.slots = n_seq;
    go.use_cache = o->use_cache;
    go.strategy = strategy;
    HP_CHECK_GOTO(hp_generator_new(&gc, store, &go, &gen), st, out);
    HP_CHECK_GOTO(load_weights(dir, gen, store, mesh), st, out);
    HP_CHECK_GOTO(hp__checkpoint_tokenizer(dir, &tok), st, out);
    for (int j = 0; j < n_prompts; j++) HP_CHECK_GOTO(encode(tok, prompts[j], &ids[j], &lens[j]), st, out);
    for (int j = 0; j < n_seq; j++) {
        seq_ids[j] = ids[j % n_prompts];
        seq_lens[j] = lens[j % n_prompts];
    }
    hp_generate_opts g = o->gen;
    g.logits = NULL;
    if (tok && hp_tokenizer_vocab_size(tok) < gc.vocab) g.sample_vocab = hp_tokenizer_vocab_size(tok);
    int N = g.max_new_tokens;
    out = malloc(((size_t)n_seq * (size_t)N + 1) * sizeof *out);
    if (!out) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "generate: out of memory for %d x %d tokens", n_seq, N);
        goto out;
    }
    HP_CHECK_GOTO(generate_windows(gen, gc.context, n_seq, seq_ids, seq_lens, &g, out), st, out);
    for (int j = 0; j < n_seq; j++)
        HP_CHECK_GOTO(decode(tok, prompts[j % n_prompts], seq_ids[j], seq_lens[j], out + (size_t)j * N, N,
                             &texts_out[j]), st, out);
    if (stats_out) hp_generator_get_stats(gen, stats_out);
out:
    if (st != HP_STATUS_OK)
        for (int j = 0; j < n_seq; j++) {
            free(texts_out[j]);
            texts_out[j] = NULL;
        }
    for (int j = 0; ids && j < n_prompts; j++) free(ids[j]);
    free(ids);
    free(lens);
    free(seq_lens);
    free(seq_ids);
    free(out);
    hp_generator_free(gen);
    hp_store_free(store);
    hp_strategy_free(strategy);
    hp_comm_free(self);
    hp_tokenizer_free(tok);
    hp_checkpoint_state_free(&s);
    return st;
}
