/*
 * The trainer: one job from a run config — data, the step graph partitioned by the strategy,
 * programs, evaluation, sampling. One code path serves one rank and many: without a strategy the
 * mesh has one device and the partition is the logical graph itself.
 */
#include "train/trainer_internal.h"

#include "hp/backend.h"
#include "hp/ops.h"
#include "hp/pipeline.h"
#include "hp/redistribute.h"
#include "hp/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hp_gpt_config hp__gpt_config_from(const hp_model_config *m) {
    /* no dropout: the training program's builder adds it (evaluation and generation run without) */
    return hp_gpt_config_from_model(m);
}

void *hp__prog_data(const hp_trainer_prog *pr, hp_tid t) { return hp_program_data(pr->p, hp_partition_local(pr->part, t)); }

void hp__prog_slice(const hp_trainer *t, const hp_trainer_prog *pr, hp_tid lt, int64_t *start, int64_t *len) {
    hp_status st = hp_layout_slice_of(hp_partition_layout(pr->part, lt), t->mesh,
                                      &hp_graph_tensor(pr->lg, lt)->shape, t->index, start, len);
    HP_ASSERT(st == HP_STATUS_OK);
}

/* Builds the logical graph (forward + loss) and compiles it with the driver (hp/compile.h): the
 * training step (autodiff + optimizer, shard, offload, memplan) or evaluation (shard, memplan). */
static hp_status build_prog(hp_trainer *t, hp_trainer_prog *pr, bool training) {
    pr->lg = hp_graph_new();
    if (!pr->lg) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory building a graph");
    hp_gpt_config gc = t->gcfg; /* dropout only in the training graph */
    if (training) gc.dropout = (float)t->cfg.model.dropout, gc.seed = (uint64_t)t->cfg.train.seed;
    gc.moe.training = training; /* MoE balancing loss and router bias updates: training only */
    gc.cp_balance = t->cp_balance; /* the load-balanced order where the strategy asks for it */
    HP_CHECK(hp_gpt_build(pr->lg, &gc, (int)t->cfg.train.batch, (int)t->cfg.model.context, true, &pr->gpt));
    /* HyperOffload plans the per-rank training step (parameters, gradients, optimizer state and
     * activations under the `offload:` budgets); evaluation runs without it. */
    hp_offload_plan_config oc;
    if (training) HP_CHECK(hp_compile_config_objects(&t->cfg, 0, NULL, &oc));
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = pr->gpt.loss;
    o.train = training;
    o.optim = &t->cfg.optim;
    o.strategy = t->strategy;
    o.offload = training ? &oc : NULL;
    o.comm = t->world;
    o.program.store = t->store;
    o.program.trace = t->trace;
    HP_CHECK(hp_compile(pr->lg, &o, &pr->compiled));
    if (training) pr->step = *hp_compiled_step(pr->compiled);
    pr->part = hp_compiled_partition(pr->compiled);
    pr->p = hp_compiled_program(pr->compiled);
    pr->offload = hp_compiled_offload(pr->compiled);
    pr->loss = hp_compiled_loss(pr->compiled);
    pr->grad_sq = hp_compiled_grad_sq(pr->compiled);
    return HP_STATUS_OK;
}

/* Pipeline mode: the logical training-step graph only (names and shapes of the parameters and
 * AdamW states of the full model, for t->store), no program. */
static hp_status build_step_graph(hp_trainer *t) {
    hp_trainer_prog *pr = &t->train;
    pr->lg = hp_graph_new();
    if (!pr->lg) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory building a graph");
    HP_CHECK(hp_gpt_build(pr->lg, &t->gcfg, 1, (int)t->cfg.model.context, true, &pr->gpt));
    return hp_train_step_build(pr->lg, pr->gpt.loss, &t->cfg.optim, &pr->step);
}

static void free_prog(hp_trainer_prog *pr) {
    hp_compiled_free(pr->compiled);
    hp_graph_free(pr->lg);
    memset(pr, 0, sizeof *pr);
}

/* Records the logical shape and layout of every parameter and optimizer state in the store (the
 * training program created the entries when it bound them, knowing only its local blocks). */
static hp_status declare_entries(hp_trainer *t) {
    const hp_trainer_prog *pr = &t->train;
    for (int i = 0; i < 3 * pr->step.n_params; i++) {
        int k = i % pr->step.n_params, which = i / pr->step.n_params;
        hp_tid id = which == 0 ? pr->step.params[k] : which == 1 ? pr->step.m[k] : pr->step.v[k];
        const hp_tensor *x = hp_graph_tensor(pr->lg, id);
        hp_layout rep;
        hp_layout_init(&rep, x->shape.ndim);
        HP_CHECK(hp_store_declare(t->store, x->name, x->dtype, &x->shape, pr->part ? hp_partition_layout(pr->part, id) : &rep));
    }
    return HP_STATUS_OK;
}

/* GPT-2 initialisation of this rank's block of every parameter (a pure function of the global
 * index, so every strategy starts from the same weights), written into the store. */
static hp_status init_params(hp_trainer *t) {
    const hp_trainer_prog *pr = &t->train;
    for (int i = 0; i < pr->step.n_params; i++) {
        hp_tid p = pr->step.params[i];
        const hp_tensor *x = hp_graph_tensor(pr->lg, p);
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(t->store, x->name, &e));
        int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
        HP_CHECK(hp_layout_slice_of(&e.layout, t->mesh, &e.shape, t->index, start, len));
        float *dst = malloc(e.bytes + 4);
        if (!dst) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory initialising '%s'", x->name);
        hp_status ist = hp_gpt_init_block(&t->gcfg, x->name, (uint64_t)t->cfg.train.seed, &x->shape, start, len, dst);
        if (ist != HP_STATUS_OK) {
            free(dst);
            return ist;
        }
        hp_status st = hp_store_write(t->store, x->name, dst, e.bytes);
        free(dst);
        HP_CHECK(st);
    }
    return HP_STATUS_OK;
}

/* Copies this rank's block of the (B, T) batch in the staging buffers into the program's inputs;
 * under causal load balancing the block of the permuted sequence (row p holds token t->pos[p]),
 * and the positions input its rows' global positions. */
static void scatter_batch(hp_trainer *t, const hp_trainer_prog *pr) {
    const int64_t T = t->cfg.model.context;
    hp_tid ids[3] = {pr->gpt.tokens, pr->gpt.targets, pr->gpt.positions};
    const int32_t *src[2] = {t->tok_buf, t->tgt_buf};
    for (int k = 0; k < 3; k++) {
        if (ids[k] == HP_TID_NONE) continue;
        int64_t start[2], len[2];
        hp__prog_slice(t, pr, ids[k], start, len);
        int32_t *dst = hp__prog_data(pr, ids[k]);
        for (int64_t r = 0; r < len[0]; r++) {
            int32_t *row = dst + r * len[1];
            if (k == 2) {
                memcpy(row, t->pos + start[1], (size_t)len[1] * sizeof *dst);
            } else if (t->pos) {
                const int32_t *in = src[k] + (start[0] + r) * T;
                for (int64_t u = 0; u < len[1]; u++) row[u] = in[t->pos[start[1] + u]];
            } else {
                memcpy(row, src[k] + (start[0] + r) * T + start[1], (size_t)len[1] * sizeof *dst);
            }
        }
    }
}

/* The global rows [*r0, *r1) of the (B, T) batch that this rank's blocks of the tokens and targets
 * cover: a data-parallel rank reads only its own rows from the loader. */
static void batch_rows(const hp_trainer *t, const hp_trainer_prog *pr, int64_t *r0, int64_t *r1) {
    hp_tid ids[2] = {pr->gpt.tokens, pr->gpt.targets};
    *r0 = t->cfg.train.batch, *r1 = 0;
    for (int k = 0; k < 2; k++) {
        int64_t start[2], len[2];
        hp__prog_slice(t, pr, ids[k], start, len);
        if (len[0] <= 0) continue;
        if (start[0] < *r0) *r0 = start[0];
        if (start[0] + len[0] > *r1) *r1 = start[0] + len[0];
    }
    if (*r1 < *r0) *r0 = *r1 = 0;
}

hp_status hp_trainer_new(const hp_run_config *cfg, hp_trainer **out) { return hp_trainer_new_dist(cfg, NULL, out); }

hp_status hp_trainer_new_dist(const hp_run_config *cfg, hp_comm *world, hp_trainer **out) {
    *out = NULL;
    hp_trainer *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the trainer");
    t->cfg = *cfg;
    t->gcfg = hp__gpt_config_from(&cfg->model);
    t->world = world;
    hp_status st;
    if (!t->world) {
        t->world = hp_comm_self_new();
        t->own_world = true;
        if (!t->world) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for a communicator");
            goto fail;
        }
    }
    HP_CHECK_GOTO(hp_gpt_config_check(&t->gcfg), st, fail);
    /* train.comm_timeout: on world before any communicator is split from it (they inherit it) */
    HP_CHECK_GOTO(hp_comm_set_timeout(t->world, cfg->train.comm_timeout), st, fail);
    /* train.threads: the compute team (and OpenBLAS) of the programs this thread builds and runs */
    if (cfg->train.threads > 0) HP_CHECK_GOTO(hp_backend_cpu_set_threads((int)cfg->train.threads, &t->prev_threads), st, fail);
    bool pipeline = cfg->groups.present;
    if (pipeline) HP_CHECK_GOTO(hp_groups_config_check_world(&cfg->groups, hp_comm_size(t->world)), st, fail);
    /* A pipeline's evaluation, sampling and checkpoints run on one device per rank (trainer_pipe.c). */
    if (pipeline && !(t->self = hp_comm_self_new())) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for a communicator");
        goto fail;
    }
    HP_CHECK_GOTO(hp_strategy_new(&cfg->strategy, pipeline ? 1 : hp_comm_size(t->world), &t->strategy), st, fail);
    t->mesh = hp_strategy_mesh(t->strategy);
    HP_CHECK_GOTO(hp_mesh_attach(t->mesh, pipeline ? t->self : t->world), st, fail);
    t->index = hp_mesh_my_index(t->mesh);
    if (t->index < 0) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d is not in the strategy's mesh", hp_comm_rank(t->world));
        goto fail;
    }
    HP_CHECK_GOTO(hp__trainer_data_new(t), st, fail); /* before any graph: checks the vocabulary */
    if (!pipeline) HP_CHECK_GOTO(hp_strategy_ring_balance(t->strategy, cfg->model.context, &t->cp_balance), st, fail);
    if (t->cp_balance > 1) {
        if (!(t->pos = malloc((size_t)cfg->model.context * sizeof *t->pos))) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the sequence order");
            goto fail;
        }
        HP_CHECK_GOTO(hp_ring_balance_positions(cfg->model.context, t->cp_balance, t->pos), st, fail);
    }
    size_t bt = (size_t)(cfg->train.batch * cfg->model.context);
    t->tok_buf = malloc(bt * sizeof *t->tok_buf);
    t->tgt_buf = malloc(bt * sizeof *t->tgt_buf);
    if (!t->tok_buf || !t->tgt_buf) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the batch");
        goto fail;
    }
    HP_CHECK_GOTO(hp_store_new(t->mesh, NULL, &t->store), st, fail);
    hp_store_set_redistribute(t->store, hp_redistribute_tensor);
    if (pipeline) {
        HP_CHECK_GOTO(build_step_graph(t), st, fail);
        HP_CHECK_GOTO(hp__pipe_new(t), st, fail);
    } else {
        HP_CHECK_GOTO(build_prog(t, &t->train, true), st, fail);
    }
    HP_CHECK_GOTO(declare_entries(t), st, fail);
    if (!pipeline) HP_CHECK_GOTO(init_params(t), st, fail);
    *out = t;
    return HP_STATUS_OK;
fail:
    hp_trainer_free(t);
    return st;
}

void hp_trainer_free(hp_trainer *t) {
    if (!t) return;
    hp_store_closing(t->store); /* slow-tier parameters need not outlive the training program */
    hp__pipe_free(t);
    free_prog(&t->train);
    free_prog(&t->eval);
    hp_program_free(t->sample.p);
    hp_graph_free(t->sample.g);
    hp_store_free(t->store); /* after every program bound to it */
    hp__trainer_data_free(t);
    free(t->tok_buf);
    free(t->pos);
    free(t->tgt_buf);
    hp_strategy_free(t->strategy);
    hp_comm_free(t->self);
    if (t->own_world) hp_comm_free(t->world);
    if (t->prev_threads > 0) (void)hp_backend_cpu_set_threads(t->prev_threads, NULL);
    free(t);
}

int64_t hp_trainer_steps_done(const hp_trainer *t) { return t->steps_done; }
double hp_trainer_unigram_entropy(const hp_trainer *t) { return t->unigram; }
int hp_trainer_rank(const hp_trainer *t) { return hp_comm_rank(t->world); }
const hp_mesh *hp_trainer_mesh(const hp_trainer *t) { return t->mesh; }
const hp_partition *hp_trainer_partition(const hp_trainer *t) { return t->train.part; }

void hp__trainer_trace(hp_trainer *t, const hp_trace_span *s, double t0) {
    if (t->trace) hp_trace_end(t->trace, t->trace_track, t0, s);
}

hp_status hp_trainer_set_trace(hp_trainer *t, hp_trace *tr) {
    hp_program *progs[3] = {t->train.p, t->eval.p, t->sample.p};
    if (tr) {
        HP_CHECK(hp_trace_track(tr, "compute", 0, &t->trace_track));
        const char *names[3] = {"step", "eval", "checkpoint"};
        hp_trace_span *spans[3] = {&t->trace_step, &t->trace_eval, &t->trace_save};
        for (int k = 0; k < 3; k++) {
            *spans[k] = HP_TRACE_SPAN_INIT;
            spans[k]->kind = HP_TRACE_KIND_STEP;
            spans[k]->name = hp_trace_intern(tr, names[k]);
            if (spans[k]->name < 0) return hp_error(HP_STATUS_OUT_OF_MEMORY, "trainer: out of memory for trace names");
        }
        hp_trace_set_step(tr, t->steps_done);
    }
    for (int k = 0; k < 3; k++)
        if (progs[k]) HP_CHECK(hp_program_set_trace(progs[k], tr, NULL));
    if (t->pipe) HP_CHECK(hp_pipeline_set_trace(t->pipe, tr));
    t->trace = tr;
    return HP_STATUS_OK;
}

hp_status hp_trainer_step(hp_trainer *t, hp_step_metrics *m) {
    double t0 = hp_now_seconds();
    if (t->trace) hp_trace_set_step(t->trace, t->steps_done + 1);
    if (t->pipe && t->cfg.pipeline.post_validate) { /* launched and settled at once */
        if (t->pending || t->has_held)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_trainer_step: post-validated step %lld is not reported yet "
                            "(hp_trainer_step_post or hp_trainer_settle first)",
                            (long long)(t->has_held ? t->held.step : t->launched.step));
        hp_step_metrics two[2];
        int n = 0;
        hp_status ps = hp_trainer_step_post(t, true, two, &n);
        if (ps == HP_STATUS_OK) *m = two[n - 1];
        return ps;
    }
    if (t->pipe) {
        hp_status ps = hp__pipe_step(t, m);
        hp__trainer_trace(t, &t->trace_step, t0);
        return ps;
    }
    hp_trainer_prog *pr = &t->train;
    int64_t s = t->steps_done; /* 0-based batch index; the optimizer step is s + 1 */
    int64_t r0, r1, T = t->cfg.model.context;
    batch_rows(t, pr, &r0, &r1);
    HP_CHECK(hp_loader_batch_rows(t->loader, s, r0, r1, t->tok_buf + r0 * T, t->tgt_buf + r0 * T));
    scatter_batch(t, pr);
    double lr = hp_lr_at(&t->cfg.optim, s + 1, t->cfg.train.steps);
    *(float *)hp__prog_data(pr, pr->step.lr) = (float)lr;
    *(float *)hp__prog_data(pr, pr->step.step) = (float)(s + 1);
    const char *poisoned = NULL;
    float saved = 0;
    HP_CHECK(hp__trainer_poison_apply(t, s + 1, &poisoned, &saved));
    hp_status st = hp_program_run(pr->p);
    hp_status rs = hp__trainer_poison_restore(t, poisoned, saved);
    HP_CHECK(st);
    HP_CHECK(rs);
    hp__trainer_trace(t, &t->trace_step, t0);
    double dt = hp_now_seconds() - t0;
    *m = (hp_step_metrics){0};
    m->step = s + 1;
    m->loss = *(float *)hp_program_data(pr->p, pr->loss);
    m->lr = lr;
    m->grad_norm = sqrt(*(float *)hp_program_data(pr->p, pr->grad_sq));
    m->seconds = dt;
    m->tokens_per_s = (double)t->cfg.train.batch * (double)t->cfg.model.context / dt;
    return hp__trainer_account(t, m);
}

bool hp__trainer_stops(const hp_trainer *t, double loss, double grad_norm) {
    return !(isfinite(loss) && isfinite(grad_norm)) && t->nonfinite_in_row + 1 > t->cfg.train.skip_nonfinite;
}

hp_status hp__trainer_judge(hp_trainer *t, hp_step_metrics *m) {
    /* The step's guard applied no update when either is NaN or Inf (hp_train_step_build). */
    bool stop = hp__trainer_stops(t, m->loss, m->grad_norm);
    if (isfinite(m->loss) && isfinite(m->grad_norm)) {
        t->nonfinite_in_row = 0;
        t->last_applied = m->step;
    } else {
        t->nonfinite_in_row++;
        if (stop) return hp__trainer_nonfinite_error(t, m->step, m->loss, m->grad_norm);
        t->skipped_total++;
        m->skipped = true;
    }
    m->skipped_in_row = t->nonfinite_in_row;
    m->skipped_total = t->skipped_total;
    return HP_STATUS_OK;
}

hp_status hp__trainer_account(hp_trainer *t, hp_step_metrics *m) {
    HP_CHECK(hp__trainer_judge(t, m));
    t->steps_done++;
    return HP_STATUS_OK;
}

hp_status hp_trainer_step_post(hp_trainer *t, bool settle, hp_step_metrics m[2], int *n) {
    *n = 0;
    if (t->pipe && t->cfg.pipeline.post_validate) {
        double t0 = hp_now_seconds();
        if (t->trace) hp_trace_set_step(t->trace, t->steps_done + 1);
        hp_status st = hp__pipe_step_post(t, settle, m, n);
        hp__trainer_trace(t, &t->trace_step, t0);
        return st;
    }
    HP_CHECK(hp_trainer_step(t, &m[0]));
    *n = 1;
    return HP_STATUS_OK;
}

hp_status hp_trainer_settle(hp_trainer *t, hp_step_metrics m[1], int *n) {
    *n = 0;
    if (!t->pipe) return HP_STATUS_OK;
    HP_CHECK(hp__pipe_settle(t));
    if (t->has_held) {
        m[0] = t->held;
        t->has_held = false;
        *n = 1;
    }
    return HP_STATUS_OK;
}

hp_status hp_trainer_eval(hp_trainer *t, double *val_loss) {
    /* The evaluation program binds to the store: it reads the parameters the training program
     * writes (no copy; a slow-tier home is copied in by the program's run when it changed). */
    if (!t->eval.p) HP_CHECK(build_prog(t, &t->eval, false));
    double t0 = hp_trace_begin(t->trace);
    if (t->pipe) HP_CHECK(hp__pipe_gather(t, false)); /* every rank evaluates the whole model */
    double sum = 0, bytes = 0;
    const int64_t BT = t->cfg.train.batch * t->cfg.model.context;
    for (int64_t b = 0; b < t->cfg.train.eval_batches; b++) {
        HP_CHECK(hp_loader_val_batch(t->loader, b, t->tok_buf, t->tgt_buf));
        if (t->val_bytes == 0) /* the targets' text, once: the batches are the same every call */
            for (int64_t i = 0; i < BT; i++) {
                size_t len = 1;
                if (t->tok) hp_tokenizer_token(t->tok, t->tgt_buf[i], &len);
                bytes += (double)len;
            }
        scatter_batch(t, &t->eval);
        HP_CHECK(hp_program_run(t->eval.p));
        sum += *(float *)hp_program_data(t->eval.p, t->eval.loss);
    }
    *val_loss = sum / (double)t->cfg.train.eval_batches;
    if (t->val_bytes == 0) t->val_bytes = bytes;
    hp__trainer_trace(t, &t->trace_eval, t0);
    return HP_STATUS_OK;
}

void hp_trainer_val_coverage(const hp_trainer *t, hp_val_coverage *c) {
    int64_t W = hp_loader_val_windows(t->loader), n = t->cfg.train.eval_batches * t->cfg.train.batch;
    c->windows = n < W ? n : W;
    c->tokens = c->windows * t->cfg.model.context;
    c->fraction = (double)c->tokens / (double)(hp_loader_val_tokens(t->loader) - 1);
    c->bytes_per_token = t->val_bytes / (double)(t->cfg.train.eval_batches * t->cfg.train.batch * t->cfg.model.context);
}

const float *hp_trainer_param(hp_trainer *t, const char *name, int64_t *numel) {
    /* NULL for a tensor HyperOffload keeps on disk: it has no address in memory; also NULL when a
     * deferred optimizer update that writes it failed (the error is the thread's last) */
    if (hp_program_sync(t->train.p) != HP_STATUS_OK) return NULL;
    if (t->pipe && hp__pipe_gather(t, false) != HP_STATUS_OK) return NULL; /* collective */
    hp_store_entry_info e;
    if (hp_store_info(t->store, name, &e) != HP_STATUS_OK) return NULL;
    if (numel) *numel = hp_shape_numel(&e.local_shape);
    return hp_store_data(t->store, name);
}

/* The single-device sampling program over the store: every parameter whose training layout is
 * sharded gets a replicated view (collective; the planner refreshes it only when training wrote the
 * parameter since), the others bind to the entries themselves. */
static hp_status gather_for_sampling(hp_trainer *t) {
    hp_trainer_fwd *f = &t->sample;
    if (t->pipe) HP_CHECK(hp__pipe_gather(t, false)); /* every rank samples from the whole model */
    for (int i = 0; i < t->train.step.n_params; i++) {
        const char *name = hp_graph_tensor(t->train.lg, t->train.step.params[i])->name;
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(t->store, name, &e));
        hp_layout rep;
        hp_layout_init(&rep, e.shape.ndim);
        void *d;
        if (!hp_layout_equal(&e.layout, &rep)) HP_CHECK(hp_store_view(t->store, name, &rep, &d));
    }
    if (f->p) return HP_STATUS_OK;
    f->g = hp_graph_new();
    if (!f->g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory building a graph");
    HP_CHECK(hp_gpt_build(f->g, &t->gcfg, 1, t->gcfg.context, false, &f->gpt));
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &f->gpt.logits;
    o.n_keep = 1;
    o.store = t->store;
    o.trace = t->trace;
    return hp_program_new(f->g, &o, &f->p);
}

hp_status hp__sample_logits(const float *logits, int V, float temp, int top_k, uint64_t key, uint64_t counter,
                            int *out) {
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best]) best = j;
    if (temp <= 0.0f) {
        *out = best;
        return HP_STATUS_OK;
    }
    /* Threshold for top-k: the k-th largest logit (O(V k), fine for the sizes sampled here). */
    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float prev = INFINITY;
        for (int r = 0; r < top_k; r++) {
            float cur = -INFINITY;
            for (int j = 0; j < V; j++)
                if (logits[j] < prev && logits[j] > cur) cur = logits[j];
            prev = cur;
        }
        thresh = prev;
    }
    double z = 0;
    for (int j = 0; j < V; j++)
        if (logits[j] >= thresh) z += exp((double)(logits[j] - logits[best]) / temp);
    double u = hp_rng_uniform(key, counter) * z, acc = 0;
    for (int j = 0; j < V; j++) {
        if (logits[j] < thresh) continue;
        acc += exp((double)(logits[j] - logits[best]) / temp);
        if (acc >= u) {
            *out = j;
            return HP_STATUS_OK;
        }
    }
    *out = best;
    return HP_STATUS_OK;
}

hp_status hp_trainer_sample(hp_trainer *t, const char *prompt, int n_tokens, float temp, int top_k, uint64_t seed,
                            char **text_out) {
    *text_out = NULL;
    HP_CHECK(gather_for_sampling(t));
    return hp__generate(t->sample.g, t->sample.p, &t->sample.gpt, t->tok, prompt, n_tokens, temp, top_k, seed, text_out);
}

hp_status hp__generate(const hp_graph *g, hp_program *p, const hp_gpt *gpt, const hp_tokenizer *tokenizer, const char *prompt,
                       int n_tokens, float temp, int top_k, uint64_t seed, char **text_out) {
    (void)g;
    if (tokenizer) return hp__generate_tokens(p, gpt, tokenizer, prompt, n_tokens, temp, top_k, seed, text_out);
    int T = gpt->seq, V = gpt->cfg.vocab;
    size_t plen = strlen(prompt);
    char *text = malloc(plen + (size_t)n_tokens + 1);
    if (!text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %d sampled tokens", n_tokens);
    memcpy(text, prompt, plen);
    size_t len = plen;
    int32_t *tok = hp_program_data(p, gpt->tokens);
    const float *logits = hp_program_data(p, gpt->logits);
    uint64_t key = hp_rng_hash("sample") ^ seed;
    for (int i = 0; i < n_tokens; i++) {
        /* The last T bytes (or fewer) of the text, left-aligned; causal attention makes the
         * padding after them irrelevant to the logits at the last real position. */
        size_t start = len > (size_t)T ? len - (size_t)T : 0, n = len - start;
        memset(tok, 0, sizeof *tok * (size_t)T);
        for (size_t j = 0; j < n; j++) tok[j] = (unsigned char)text[start + j];
        if (n == 0) n = 1; /* empty prompt: condition on a zero byte */
        hp_status st = hp_program_run(p);
        if (st != HP_STATUS_OK) {
            free(text);
            return st;
        }
        int next;
        hp__sample_logits(logits + (n - 1) * (size_t)V, V, temp, top_k, key, (uint64_t)i, &next);
        text[len++] = (char)(next & 0xff);
    }
    text[len] = '\0';
    *text_out = text;
    return HP_STATUS_OK;
}

/* One line per other program (its own bytes; parameters are in the store's line). */
static void report_other(const char *what, const hp_program *p, FILE *f) {
    if (!p) return;
    hp_program_stats s;
    hp_program_get_stats(p, &s);
    fprintf(f, "memory: %s program fast tier %zu bytes (persistent %zu, arena %zu, workspace %zu), %zu bytes in the "
               "state store\n", what, s.device_bytes, s.persistent_bytes, s.arena_bytes, s.workspace_bytes,
            s.store_bytes);
}

void hp_trainer_report_memory(const hp_trainer *t, FILE *f) {
    if (t->pipe) hp__pipe_report_memory(t, f);
    else hp_program_report_memory(t->train.p, f);
    report_other("eval", t->eval.p, f);
    report_other("sample", t->sample.p, f);
    hp_store_report_memory(t->store, f);
}
