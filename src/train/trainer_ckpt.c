/* Trainer checkpoints (save, resume) and generation from a checkpoint. */
#include "train/trainer_internal.h"

#include "hp/checkpoint.h"

#include <stdlib.h>
#include <string.h>

/* Named views of the training program's parameters (which = 0), exp_avg (1) or exp_avg_sq (2). */
static hp_named_tensor *named_views(hp_trainer *t, int which) {
    int n = t->step.n_params;
    hp_named_tensor *v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v) return NULL;
    for (int i = 0; i < n; i++) {
        hp_tid id = which == 0 ? t->step.params[i] : which == 1 ? t->step.m[i] : t->step.v[i];
        const hp_tensor *x = hp_graph_tensor(t->g, id);
        v[i] = (hp_named_tensor){x->name, x->dtype, x->shape, hp_program_data(t->p, id)};
    }
    return v;
}

hp_status hp_trainer_save(hp_trainer *t, char *path_out, size_t cap) {
    int n = t->step.n_params;
    hp_named_tensor *model = named_views(t, 0), *m = named_views(t, 1), *v = named_views(t, 2);
    hp_named_tensor *optim = calloc((size_t)(n > 0 ? 2 * n : 1), sizeof *optim);
    hp_status st;
    if (!model || !m || !v || !optim) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    memcpy(optim, m, sizeof *m * (size_t)n);
    memcpy(optim + n, v, sizeof *v * (size_t)n);
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = t->cfg.train.checkpoint_dir;
    a.step = t->steps_done;
    a.seed = (uint64_t)t->cfg.train.seed;
    a.config = &t->cfg;
    a.model = model;
    a.n_model = (size_t)n;
    a.optim = optim;
    a.n_optim = 2 * (size_t)n;
    char buf[4096];
    st = hp_checkpoint_save(&a, path_out ? path_out : buf, path_out ? cap : sizeof buf);
out:
    free(model);
    free(m);
    free(v);
    free(optim);
    return st;
}

hp_status hp_trainer_resume(hp_trainer *t, const char *path) {
    char dir[4096];
    HP_CHECK(hp_checkpoint_resolve(path, dir, sizeof dir));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(dir, &s));
    int64_t step = s.step;
    hp_checkpoint_state_free(&s);
    if (step > t->cfg.train.steps)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint %s is at step %lld, beyond train.steps %lld", dir,
                        (long long)step, (long long)t->cfg.train.steps);
    int n = t->step.n_params;
    hp_named_tensor *model = named_views(t, 0), *optim = calloc((size_t)(n > 0 ? 2 * n : 1), sizeof *optim);
    hp_named_tensor *m = named_views(t, 1), *v = named_views(t, 2);
    hp_status st = HP_STATUS_OK;
    if (!model || !optim || !m || !v) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "resume: out of memory");
    if (st == HP_STATUS_OK) {
        memcpy(optim, m, sizeof *m * (size_t)n);
        memcpy(optim + n, v, sizeof *v * (size_t)n);
        st = hp_checkpoint_load_model(dir, model, (size_t)n);
    }
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_optim(dir, optim, 2 * (size_t)n);
    if (st == HP_STATUS_OK) t->steps_done = step;
    free(model);
    free(optim);
    free(m);
    free(v);
    return st;
}

hp_status hp_generate_from_checkpoint(const char *path, const char *prompt, int n_tokens, float temp, int top_k,
                                      uint64_t seed, char **text_out) {
    *text_out = NULL;
    char dir[4096];
    HP_CHECK(hp_checkpoint_resolve(path, dir, sizeof dir));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(dir, &s));
    hp_status st = HP_STATUS_OK;
    hp_graph *g = NULL;
    hp_program *p = NULL;
    hp_named_tensor *named = NULL;
    if (!s.has_config) {
        st = hp_error(HP_STATUS_CORRUPT, "checkpoint %s has no saved config, so the model cannot be rebuilt", dir);
        goto out;
    }
    hp_gpt_config gc = hp__gpt_config_from(&s.config.model);
    hp_gpt gpt;
    g = hp_graph_new();
    if (!g) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    HP_CHECK_GOTO(hp_gpt_build(g, &gc, 1, gc.context, false, &gpt), st, out);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &gpt.logits;
    o.n_keep = 1;
    HP_CHECK_GOTO(hp_program_new(g, &o, &p), st, out);
    int n = hp_graph_params(g, NULL, 0);
    hp_tid *ids = calloc((size_t)n, sizeof *ids);
    named = calloc((size_t)n, sizeof *named);
    if (!ids || !named) {
        free(ids);
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    hp_graph_params(g, ids, n);
    for (int i = 0; i < n; i++) {
        const hp_tensor *x = hp_graph_tensor(g, ids[i]);
        named[i] = (hp_named_tensor){x->name, x->dtype, x->shape, hp_program_data(p, ids[i])};
    }
    free(ids);
    HP_CHECK_GOTO(hp_checkpoint_load_model(dir, named, (size_t)n), st, out);
    st = hp__generate(g, p, &gpt, prompt, n_tokens, temp, top_k, seed, text_out);
out:
    free(named);
    hp_program_free(p);
    hp_graph_free(g);
    hp_checkpoint_state_free(&s);
    return st;
}
