/* The logits of a checkpoint's model on one sequence (hp_checkpoint_logits, hp/hf.h): the number
 * the Hugging Face reference scripts compute, so an import can be checked end to end. */
#include "hp/checkpoint.h"
#include "hp/hf.h"
#include "train/trainer_internal.h"

#include <stdlib.h>
#include <string.h>

hp_status hp_checkpoint_logits(const char *ckpt, const int32_t *tokens, int n, float *logits, int64_t vocab) {
    char dir[4096];
    HP_CHECK(hp_checkpoint_resolve(ckpt, dir, sizeof dir));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(dir, &s));
    hp_status st = HP_STATUS_OK;
    hp_graph *g = NULL;
    hp_program *p = NULL;
    hp_store *store = NULL;
    hp_named_tensor *named = NULL;
    hp_tid *ids = NULL;
    HP_CHECK_GOTO(hp_checkpoint_check_config(dir, &s), st, out);
    /* The model the saved config describes (hp_gpt_build builds either family from it). */
    hp_gpt_config gc = hp__gpt_config_from(&s.config.model);
    if (vocab != gc.vocab) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "logits of checkpoint %s: the caller's vocab %lld is not the model's %d",
                      dir, (long long)vocab, gc.vocab);
        goto out;
    }
    if (n < 1 || n > gc.context) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "logits of checkpoint %s: %d tokens is outside [1, context %d]", dir, n,
                      gc.context);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= gc.vocab) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "logits of checkpoint %s: token %d at position %d is outside "
                          "[0, vocab %d)", dir, tokens[i], i, gc.vocab);
            goto out;
        }
    hp_gpt gpt;
    if (!(g = hp_graph_new())) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    HP_CHECK_GOTO(hp_gpt_build(g, &gc, 1, n, false, &gpt), st, out);
    HP_CHECK_GOTO(hp_store_new(NULL, NULL, &store), st, out);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &gpt.logits;
    o.n_keep = 1;
    o.store = store;
    HP_CHECK_GOTO(hp_program_new(g, &o, &p), st, out);
    int np = hp_graph_params(g, NULL, 0);
    ids = calloc((size_t)np + 1, sizeof *ids);
    named = calloc((size_t)np + 1, sizeof *named);
    if (!ids || !named) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    hp_graph_params(g, ids, np);
    for (int i = 0; i < np; i++) {
        const hp_tensor *x = hp_graph_tensor(g, ids[i]);
        named[i] = (hp_named_tensor){x->name, x->dtype, x->shape, hp_store_data(store, x->name)};
    }
    HP_CHECK_GOTO(hp_checkpoint_load_model(dir, named, (size_t)np), st, out);
    for (int i = 0; i < np; i++) HP_CHECK_GOTO(hp_store_touch(store, named[i].name), st, out);
    memcpy(hp_program_data(p, gpt.tokens), tokens, sizeof *tokens * (size_t)n);
    HP_CHECK_GOTO(hp_program_run(p), st, out);
    memcpy(logits, hp_program_data(p, gpt.logits), sizeof *logits * (size_t)n * (size_t)gc.vocab);
out:
    free(ids);
    free(named);
    hp_program_free(p);
    hp_store_free(store);
    hp_graph_free(g);
    hp_checkpoint_state_free(&s);
    return st;
}
