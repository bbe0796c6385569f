/*
 * Trainer checkpoints: one rank writes the single-device format (full tensors, readable by any
 * safetensors reader); many ranks write the sharded format (per-rank blocks + index.json). Resume
 * reads either into any strategy or rank count (hp_checkpoint_load_sharded reshards on load).
 */
#include "train/trainer_internal.h"

#include "hp/checkpoint.h"

#include <stdlib.h>
#include <string.h>

/* This rank's view of the parameters (which = 0), exp_avg (1) or exp_avg_sq (2). */
static hp_sharded_tensor *sharded_views(hp_trainer *t, int which) {
    const hp_trainer_prog *pr = &t->train;
    int n = pr->step.n_params;
    hp_sharded_tensor *v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v) return NULL;
    for (int i = 0; i < n; i++) {
        hp_tid id = which == 0 ? pr->step.params[i] : which == 1 ? pr->step.m[i] : pr->step.v[i];
        const hp_tensor *x = hp_graph_tensor(pr->lg, id);
        v[i] = (hp_sharded_tensor){x->name, x->dtype, x->shape, *hp_partition_layout(pr->part, id),
                                   hp__prog_data(pr, id)};
    }
    return v;
}

/* model = params, optim = exp_avg then exp_avg_sq (2n), as the checkpoint files order them. */
static hp_status views(hp_trainer *t, hp_sharded_tensor **model, hp_sharded_tensor **optim) {
    int n = t->train.step.n_params;
    *model = sharded_views(t, 0);
    hp_sharded_tensor *m = sharded_views(t, 1), *v = sharded_views(t, 2);
    *optim = calloc((size_t)(n > 0 ? 2 * n : 1), sizeof **optim);
    hp_status st = HP_STATUS_OK;
    if (!*model || !m || !v || !*optim) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    else {
        memcpy(*optim, m, sizeof *m * (size_t)n);
        memcpy(*optim + n, v, sizeof *v * (size_t)n);
    }
    free(m);
    free(v);
    return st;
}

static hp_named_tensor *as_named(const hp_sharded_tensor *s, size_t n) {
    hp_named_tensor *v = calloc(n ? n : 1, sizeof *v);
    if (v)
        for (size_t i = 0; i < n; i++) v[i] = (hp_named_tensor){s[i].name, s[i].dtype, s[i].shape, s[i].local};
    return v;
}

hp_status hp_trainer_save(hp_trainer *t, char *path_out, size_t cap) {
    size_t n = (size_t)t->train.step.n_params;
    hp_sharded_tensor *model = NULL, *optim = NULL;
    hp_named_tensor *nm = NULL, *no = NULL;
    hp_status st = views(t, &model, &optim);
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = t->cfg.train.checkpoint_dir;
    a.step = t->steps_done;
    a.seed = (uint64_t)t->cfg.train.seed;
    a.config = &t->cfg;
    char buf[4096];
    char *out = path_out ? path_out : buf;
    size_t outn = path_out ? cap : sizeof buf;
    if (st == HP_STATUS_OK && hp_mesh_size(t->mesh) == 1) {
        nm = as_named(model, n);
        no = as_named(optim, 2 * n);
        if (!nm || !no) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
        a.model = nm;
        a.n_model = n;
        a.optim = no;
        a.n_optim = 2 * n;
        if (st == HP_STATUS_OK) st = hp_checkpoint_save(&a, out, outn);
    } else if (st == HP_STATUS_OK) {
        int naxes = hp_mesh_naxes(t->mesh), axes[HP_MESH_MAX_AXES];
        for (int i = 0; i < naxes; i++) axes[i] = i;
        hp_comm *mc = NULL;
        st = hp_mesh_axes_comm(t->mesh, naxes, axes, &mc);
        if (st == HP_STATUS_OK) st = hp_checkpoint_save_sharded(&a, mc, t->mesh, model, n, optim, 2 * n, out, outn);
    }
    free(model);
    free(optim);
    free(nm);
    free(no);
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
    size_t n = (size_t)t->train.step.n_params;
    hp_sharded_tensor *model = NULL, *optim = NULL;
    hp_status st = views(t, &model, &optim);
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_sharded(dir, false, t->mesh, t->index, model, n);
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_sharded(dir, true, t->mesh, t->index, optim, 2 * n);
    if (st == HP_STATUS_OK) t->steps_done = step;
    free(model);
    free(optim);
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
    hp_tid *ids = NULL;
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
    ids = calloc((size_t)n, sizeof *ids);
    named = calloc((size_t)n, sizeof *named);
    if (!ids || !named) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    hp_graph_params(g, ids, n);
    for (int i = 0; i < n; i++) {
        const hp_tensor *x = hp_graph_tensor(g, ids[i]);
        named[i] = (hp_named_tensor){x->name, x->dtype, x->shape, hp_program_data(p, ids[i])};
    }
    HP_CHECK_GOTO(hp_checkpoint_load_model(dir, named, (size_t)n), st, out);
    st = hp__generate(g, p, &gpt, prompt, n_tokens, temp, top_k, seed, text_out);
out:
    free(ids);
    free(named);
    hp_program_free(p);
    hp_graph_free(g);
    hp_checkpoint_state_free(&s);
    return st;
}
