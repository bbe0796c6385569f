/*
 * Trainer checkpoints: one rank writes the single-device format (full tensors, readable by any
 * safetensors reader); many ranks write the sharded format (per-rank blocks + index.json). Resume
 * reads either into any strategy or rank count (hp_checkpoint_load_sharded reshards on load).
 */
#include "train/trainer_internal.h"

#include "hp/checkpoint.h"
#include "train/checkpoint_internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static hp_tid view_id(const hp_trainer_prog *pr, int which, int i) {
    return which == 0 ? pr->step.params[i] : which == 1 ? pr->step.m[i] : pr->step.v[i];
}

static const char *view_name(const hp_trainer *t, int which, int i) {
    return hp_graph_tensor(t->train.lg, view_id(&t->train, which, i))->name;
}

/* This rank's view of the parameters (which = 0), exp_avg (1) or exp_avg_sq (2): the state store's
 * entries (logical shape, layout, block). A tensor HyperOffload keeps on disk has no address and
 * is staged through a malloc'd copy (flagged in `staged`). */
static hp_sharded_tensor *sharded_views(hp_trainer *t, int which, bool *staged) {
    int n = t->train.step.n_params;
    hp_sharded_tensor *v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v) return NULL;
    for (int i = 0; i < n; i++) {
        hp_store_entry_info e;
        void *d = NULL;
        bool ok = hp_store_info(t->store, view_name(t, which, i), &e) == HP_STATUS_OK;
        if (ok) d = e.tier == HP_TIER_DISK ? NULL : hp_store_data(t->store, e.name);
        staged[i] = d == NULL;
        if (!ok || (!d && !(d = malloc(e.bytes + 4)))) {
            for (int k = 0; k < i; k++)
                if (staged[k]) free(v[k].local);
            free(v);
            return NULL;
        }
        v[i] = (hp_sharded_tensor){e.name, e.dtype, e.shape, e.layout, d};
    }
    return v;
}

/* model = params, optim = exp_avg then exp_avg_sq (2n), as the checkpoint files order them.
 * staged[k] (3n entries, model then optim) marks malloc'd copies of slow-tier tensors. */
static hp_status views(hp_trainer *t, hp_sharded_tensor **model, hp_sharded_tensor **optim, bool *staged) {
    int n = t->train.step.n_params;
    *model = sharded_views(t, 0, staged);
    hp_sharded_tensor *m = sharded_views(t, 1, staged + n), *v = sharded_views(t, 2, staged + 2 * n);
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

/* Reads (read) or writes back (!read) staged slow-tier tensors through the store, and after a load
 * (!read) bumps the versions of the entries loaded in place; with release, only frees the copies. */
static hp_status staged_sync(hp_trainer *t, hp_sharded_tensor *model, hp_sharded_tensor *optim, const bool *staged,
                             bool read, bool release) {
    int n = t->train.step.n_params;
    hp_status st = HP_STATUS_OK;
    for (int k = 0; k < 3 * n; k++) {
        hp_sharded_tensor *x = k < n ? &model[k] : &optim[k - n];
        if (!staged[k]) {
            if (!read && !release && st == HP_STATUS_OK) st = hp_store_touch(t->store, x->name);
            continue;
        }
        hp_store_entry_info e;
        if (!release && st == HP_STATUS_OK && x->local && (st = hp_store_info(t->store, x->name, &e)) == HP_STATUS_OK)
            st = read ? hp_store_read(t->store, x->name, x->local, e.bytes)
                      : hp_store_write(t->store, x->name, x->local, e.bytes);
        if (release) {
            free(x->local);
            x->local = NULL;
        }
    }
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
    /* deferred optimizer updates (HyperOffload) finish first, and their errors stop the save */
    HP_CHECK(hp_program_sync(t->train.p));
    /* the run dir keeps the tokenizer, so `hp generate` decodes with it */
    if (hp_comm_rank(t->world) == 0) HP_CHECK(hp__trainer_copy_tokenizer(t));
    double t0 = hp_trace_begin(t->trace);
    if (t->pipe) { /* the stages' tensors into the full copy on every rank; rank 0 writes it alone */
        HP_CHECK(hp__pipe_gather(t, true));
        if (hp_comm_rank(t->world) != 0) {
            if (path_out && cap) snprintf(path_out, cap, "%s", t->cfg.train.checkpoint_dir);
            hp__trainer_trace(t, &t->trace_save, t0);
            return HP_STATUS_OK;
        }
    }
    bool *staged = calloc(3 * n + 1, sizeof *staged);
    if (!staged) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    hp_status st = views(t, &model, &optim, staged);
    if (st == HP_STATUS_OK) st = staged_sync(t, model, optim, staged, true, false);
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
    if (st == HP_STATUS_OK) snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", out); /* the last good one */
    if (model && optim) staged_sync(t, model, optim, staged, true, true); /* release the copies */
    free(staged);
    free(model);
    free(optim);
    free(nm);
    free(no);
    if (st == HP_STATUS_OK) hp__trainer_trace(t, &t->trace_save, t0);
    return st;
}

/* A checkpoint path is a directory (a run or a step directory) and a step directory holds only
 * regular files: checked with stat before anything is opened, so a FIFO or device planted there
 * fails at once instead of blocking a reader. */
static hp_status check_paths(const char *path, const char *step_dir) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint path '%s' is %s, not a directory (give a run "
                        "directory or a step directory)", path, S_ISREG(sb.st_mode) ? "a regular file" : "a special file");
    if (!step_dir) return HP_STATUS_OK;
    DIR *d = opendir(step_dir);
    if (!d) return HP_STATUS_OK; /* the loaders report it */
    struct dirent *e;
    hp_status st = HP_STATUS_OK;
    char p[4400];
    while (st == HP_STATUS_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", step_dir, e->d_name);
        if (stat(p, &sb) == 0 && !S_ISREG(sb.st_mode))
            st = hp_error(HP_STATUS_CORRUPT, "checkpoint file '%s' is %s, not a regular file", p,
                          S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)"
                                                                                    : "a special file");
    }
    closedir(d);
    return st;
}

/* Sets this rank's blocks of the 2n optimizer states to zero (staged copies of slow-tier tensors
 * too: staged_sync writes them back). */
static hp_status zero_moments(hp_trainer *t, hp_sharded_tensor *optim) {
    for (int i = 0; i < 2 * t->train.step.n_params; i++) {
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(t->store, optim[i].name, &e));
        if (optim[i].local) memset(optim[i].local, 0, e.bytes);
    }
    return HP_STATUS_OK;
}

hp_status hp_trainer_resume(hp_trainer *t, const char *path) {
    char dir[4096];
    HP_CHECK(check_paths(path, NULL));
    HP_CHECK(hp_checkpoint_resolve(path, dir, sizeof dir));
    HP_CHECK(check_paths(path, dir));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(dir, &s));
    /* the saved config must describe the saved tensors */
    hp_status cs = hp_checkpoint_check_config(dir, &s);
    char saved[512], run[512], key[128], vs[128], vr[128];
    if (cs == HP_STATUS_OK) {
        hp__ckpt_model_summary(&s.config.model, saved, sizeof saved);
        hp__ckpt_model_summary(&t->cfg.model, run, sizeof run);
    }
    int64_t step = s.step;
    hp_checkpoint_state_free(&s);
    HP_CHECK(cs);
    if (step > t->cfg.train.steps)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint %s is at step %lld, beyond train.steps %lld", dir,
                        (long long)step, (long long)t->cfg.train.steps);
    size_t n = (size_t)t->train.step.n_params;
    hp_sharded_tensor *model = NULL, *optim = NULL;
    bool *staged = calloc(3 * n + 1, sizeof *staged);
    if (!staged) return hp_error(HP_STATUS_OUT_OF_MEMORY, "resume: out of memory");
    bool has_optim = false;
    hp_status st = hp_checkpoint_has_optim(dir, &has_optim);
    if (st == HP_STATUS_OK) st = views(t, &model, &optim, staged);
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_sharded(dir, false, t->mesh, t->index, model, n);
    if (st == HP_STATUS_OK && has_optim) st = hp_checkpoint_load_sharded(dir, true, t->mesh, t->index, optim, 2 * n);
    if (st == HP_STATUS_OK && !has_optim) { /* a model-only checkpoint (hp convert): fresh moments */
        hp_log(HP_LOG_LEVEL_INFO, "checkpoint %s holds no optimizer state: AdamW's moments start at zero", dir);
        st = zero_moments(t, optim);
    }
    if (st == HP_STATUS_OK) st = staged_sync(t, model, optim, staged, false, false);
    /* the tensors fit the run's shapes; the run's model must also be the saved one where shapes
     * cannot tell (heads, a tied head whose lm_head the run would not load) */
    if (st == HP_STATUS_OK && hp__ckpt_model_diff(saved, run, key, vs, vr, sizeof key))
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint %s was saved with model.%s %s; this run has model.%s %s", dir,
                      key, vs, key, vr);
    if (st == HP_STATUS_OK) {
        t->steps_done = t->last_applied = step;
        snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", dir);
    }
    if (st == HP_STATUS_OK && t->pipe) st = hp__pipe_scatter(t); /* the stages take their tensors */
    if (model && optim) staged_sync(t, model, optim, staged, false, true);
    free(staged);
    free(model);
    free(optim);
    return st;
}

hp_status hp_generate_from_checkpoint(const char *path, const char *prompt, int n_tokens, float temp, int top_k,
                                      uint64_t seed, char **text_out) {
    *text_out = NULL;
    char dir[4096];
    HP_CHECK(check_paths(path, NULL));
    HP_CHECK(hp_checkpoint_resolve(path, dir, sizeof dir));
    HP_CHECK(check_paths(path, dir));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(dir, &s));
    hp_status st = HP_STATUS_OK;
    hp_graph *g = NULL;
    hp_program *p = NULL;
    hp_store *store = NULL;
    hp_named_tensor *named = NULL;
    hp_tid *ids = NULL;
    hp_tokenizer *tok = NULL;
    if (!s.has_config) {
        st = hp_error(HP_STATUS_CORRUPT, "checkpoint %s has no saved config, so the model cannot be rebuilt", dir);
        goto out;
    }
    HP_CHECK_GOTO(hp_checkpoint_check_config(dir, &s), st, out);
    hp_gpt_config gc = hp__gpt_config_from(&s.config.model);
    hp_gpt gpt;
    g = hp_graph_new();
    if (!g) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    HP_CHECK_GOTO(hp_gpt_build(g, &gc, 1, gc.context, false, &gpt), st, out);
    /* the checkpoint loads into the store the sampling program is bound to */
    HP_CHECK_GOTO(hp_store_new(NULL, NULL, &store), st, out);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &gpt.logits;
    o.n_keep = 1;
    o.store = store;
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
        named[i] = (hp_named_tensor){x->name, x->dtype, x->shape, hp_store_data(store, x->name)};
    }
    HP_CHECK_GOTO(hp_checkpoint_load_model(dir, named, (size_t)n), st, out);
    for (int i = 0; i < n; i++) HP_CHECK_GOTO(hp_store_touch(store, named[i].name), st, out);
    HP_CHECK_GOTO(hp__checkpoint_tokenizer(dir, &tok), st, out);
    st = hp__generate(g, p, &gpt, tok, prompt, n_tokens, temp, top_k, seed, text_out);
out:
    free(ids);
    free(named);
    hp_program_free(p);
    hp_store_free(store);
    hp_graph_free(g);
    hp_checkpoint_state_free(&s);
    hp_tokenizer_free(tok);
    return st;
}

hp_status hp__ckpt_check_paths(const char *path, const char *step_dir) { return check_paths(path, step_dir); }
