/*
 * The trainer's pipeline mode (a run config with `groups:` and `pipeline:`): the training step is
 * a HyperMPMD pipeline (hp/pipeline.h) over the stage groups. Evaluation, sampling and checkpoints
 * use the single-device programs and code of the other modes over a full copy of the model in the
 * trainer's store (t->store, one device): the stages' parameters (and, for a checkpoint, optimizer
 * states) are broadcast from the rank holding each into it first, and a resume loads into it and
 * scatters to the stages. So a pipeline checkpoint is the single-device format and resumes into any
 * strategy, and any checkpoint resumes into a pipeline. Every rank holds that copy: a model that
 * does not fit one device's memory needs the sharded gather this does not do yet.
 */
#include "train/trainer_internal.h"

#include "hp/dtensor.h"
#include "hp/pipeline.h"
#include "hp/pipeline_plan.h"
#include "hp/redistribute.h"
#include "hp/schedule.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hp_status hp__pipe_new(hp_trainer *t) {
    const hp_run_config *cfg = &t->cfg;
    const hp_groups_config *g = &cfg->groups;
    HP_CHECK(hp_groups_config_check_world(g, hp_comm_size(t->world)));
    hp_group_placement pl;
    HP_CHECK(hp_groups_config_place(g, hp_comm_rank(t->world), &pl));
    for (int i = 0; i < g->n_groups; i++) {
        const hp_group_config *gr = &g->groups[i];
        if (gr->kind != HP_GROUP_KIND_STAGE)
            return hp_error(HP_STATUS_UNSUPPORTED, "%s:%d:%d: groups.%s: kind %s is not built yet", g->file, gr->line,
                            gr->column, gr->name, hp_group_kind_name(gr->kind));
        /* the group's strategy is checked by hp_pipeline_new (its mesh, its inputs rules) */
    }
    if (cfg->strategy.present)
        return hp_error(HP_STATUS_CONFIG, "strategy: and groups: together: a pipeline's strategies are per group "
                        "(groups.NAME.strategy)");
    HP_CHECK(hp_groups_name_ranks(t->world, g));
    /* the pipeline's communicator: every rank of every stage group, ordered by stage then replica */
    HP_CHECK(hp_comm_split(t->world, 0, pl.stage * hp_comm_size(t->world) + pl.group_rank, &t->pipe_comm));
    hp_schedule *s = calloc(1, sizeof *s);
    if (!s) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the schedule");
    t->sched = s;
    HP_CHECK(hp_pipeline_schedule_from_config(cfg, s));
    int *first;
    HP_CHECK(hp_pipeline_first_layers(cfg, s, &first));
    if (cfg->pipeline.split_auto) { /* the cost model places the layers (calibrated when cached), under the budgets */
        hp_status sst = hp_pipeline_split_from_config(cfg, s, NULL, first, NULL);
        if (sst != HP_STATUS_OK) {
            free(first);
            return sst;
        }
    }
    int *gsize = calloc((size_t)g->n_stages + 1, sizeof *gsize);
    hp_strategy_config *gstrat = calloc((size_t)g->n_stages + 1, sizeof *gstrat);
    if (!gsize || !gstrat) {
        free(first), free(gsize), free(gstrat);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the groups");
    }
    for (int i = 0; i < g->n_groups; i++)
        if (g->groups[i].stage >= 0 && g->groups[i].stage < g->n_stages) {
            gsize[g->groups[i].stage] = g->groups[i].n_ranks;
            gstrat[g->groups[i].stage] = g->groups[i].strategy;
        }
    hp_pipeline_opts o = HP_PIPELINE_OPTS_INIT;
    o.group_size = gsize;
    o.group_strategy = gstrat;
    hp_offload_plan_config ocfg; /* HyperOffload inside the stages: the activations in flight */
    hp_offload_plan_config_from(&cfg->offload, &ocfg);
    if (cfg->offload.present && ocfg.device_budget > 0) o.offload = &ocfg;
    hp_gpt_config train_model = t->gcfg; /* dropout in the training stages only */
    train_model.dropout = (float)cfg->model.dropout, train_model.seed = (uint64_t)cfg->train.seed;
    o.model = &train_model;
    o.batch = (int)cfg->train.batch;
    o.seq = (int)cfg->model.context;
    o.schedule = s;
    o.first_layer = first;
    o.optim = &cfg->optim;
    o.comm = t->pipe_comm;
    hp_status st = hp_pipeline_new(&o, &t->pipe);
    free(first);
    free(gsize);
    free(gstrat);
    HP_CHECK(st);
    /* a full copy of an entry split over a group's model-parallel axes comes from the planner */
    hp_store_set_redistribute(hp_pipeline_store(t->pipe), hp_redistribute_tensor);
    return hp_pipeline_init_params(t->pipe, (uint64_t)cfg->train.seed);
}

void hp__pipe_free(hp_trainer *t) {
    hp_pipeline_free(t->pipe);
    t->pipe = NULL;
    if (t->sched) hp_schedule_free(t->sched);
    free(t->sched);
    t->sched = NULL;
    hp_comm_free(t->pipe_comm);
    t->pipe_comm = NULL;
}

hp_status hp__pipe_step(hp_trainer *t, hp_step_metrics *m) {
    double t0 = hp_now_seconds();
    int64_t s = t->steps_done;
    HP_CHECK(hp_loader_batch_rows(t->loader, s, 0, t->cfg.train.batch, t->tok_buf, t->tgt_buf));
    double lr = hp_lr_at(&t->cfg.optim, s + 1, t->cfg.train.steps);
    float loss = 0, gn = 0;
    HP_CHECK(hp_pipeline_step(t->pipe, t->tok_buf, t->tgt_buf, (float)lr, &loss, &gn));
    double dt = hp_now_seconds() - t0;
    *m = (hp_step_metrics){0};
    m->step = s + 1;
    m->loss = loss;
    m->lr = lr;
    m->grad_norm = gn;
    m->seconds = dt;
    m->tokens_per_s = (double)t->cfg.train.batch * (double)t->cfg.model.context / dt;
    return hp__trainer_account(t, m); /* a non-finite step was not applied (hp_pipeline_update) */
}

/* A post-validated step's metrics completed by its settled check, and judged. */
static hp_status settled(hp_trainer *t, const hp_pipeline_settled *r, hp_step_metrics *m) {
    *m = t->launched;
    t->pending = false;
    m->loss = r->loss;
    m->grad_norm = r->grad_norm;
    m->redone = r->rolled_back;
    return hp__trainer_judge(t, m); /* a skipped step was not applied (hp_pipeline_settle) */
}

hp_status hp__pipe_step_post(hp_trainer *t, bool settle, hp_step_metrics out[2], int *n) {
    *n = 0;
    if (t->has_held) { /* settled by an evaluation or save since the last call */
        out[(*n)++] = t->held;
        t->has_held = false;
    }
    double t0 = hp_now_seconds();
    int64_t s = t->steps_done;
    HP_CHECK(hp_loader_batch_rows(t->loader, s, 0, t->cfg.train.batch, t->tok_buf, t->tgt_buf));
    double lr = hp_lr_at(&t->cfg.optim, s + 1, t->cfg.train.steps);
    hp_pipeline_settled prev, last;
    HP_CHECK(hp_pipeline_step_post(t->pipe, t->tok_buf, t->tgt_buf, (float)lr, &prev));
    if (prev.valid && hp__trainer_stops(t, prev.loss, prev.grad_norm)) {
        /* The run stops at the previous step: this one, applied unchecked, is taken back, so the
         * store holds what the error message says (the synchronous trainer's state). */
        char why[1024] = "";
        if (hp_pipeline_discard(t->pipe) != HP_STATUS_OK) snprintf(why, sizeof why, "%s", hp_error_message());
        hp_status st = settled(t, &prev, &out[*n]); /* HP_STATUS_NONFINITE naming the previous step */
        t->steps_done = s - 1;                       /* as hp_trainer_step leaves it: that step not done */
        if (!why[0]) return st;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hp_error_message());
        return hp_error(st, "%s; step %lld, launched before that was known, could not be taken back: %s", msg,
                        (long long)(s + 1), why);
    }
    hp_status st = prev.valid ? settled(t, &prev, &out[*n]) : HP_STATUS_OK;
    if (prev.valid) (*n)++;
    t->launched = (hp_step_metrics){.step = s + 1, .lr = lr};
    t->pending = true;
    t->steps_done++; /* launched: the next call takes the next batch */
    if (st == HP_STATUS_OK && settle) st = hp_pipeline_settle(t->pipe, &last);
    double dt = hp_now_seconds() - t0; /* the launch, and with settle the settling too */
    t->launched.seconds = dt;
    t->launched.tokens_per_s = (double)t->cfg.train.batch * (double)t->cfg.model.context / dt;
    if (st == HP_STATUS_OK && settle) st = settled(t, &last, &out[*n]);
    if (st == HP_STATUS_OK && settle) (*n)++;
    return st;
}

hp_status hp__pipe_settle(hp_trainer *t) {
    if (!t->pending) return HP_STATUS_OK;
    hp_pipeline_settled last;
    HP_CHECK(hp_pipeline_settle(t->pipe, &last));
    HP_CHECK(settled(t, &last, &t->held));
    t->has_held = true;
    return HP_STATUS_OK;
}

/* The full model's entries that t->store holds: the parameters, with optimizer states also
 * "exp_avg." and "exp_avg_sq." + name (3n names, in checkpoint order). */
static const char *full_name(const hp_trainer *t, int k, char *buf, size_t cap) {
    int n = t->train.step.n_params;
    const char *p = hp_graph_tensor(t->train.lg, t->train.step.params[k % n])->name;
    const char *pre = k < n ? "" : k < 2 * n ? "exp_avg." : "exp_avg_sq.";
    snprintf(buf, cap, "%s%s", pre, p);
    return buf;
}

/* Every rank's t->store gets the stages' values (params; with optim also AdamW's states), each
 * broadcast from the lowest pipeline rank holding it. Collective over the pipeline. */
hp_status hp__pipe_gather(hp_trainer *t, bool optim) {
    HP_CHECK(hp__pipe_settle(t)); /* the store after the last step launched, checked */
    int n = t->train.step.n_params, total = optim ? 3 * n : n;
    hp_store *ps = hp_pipeline_store(t->pipe);
    int me = hp_comm_rank(t->pipe_comm);
    int *have = malloc(sizeof(int) * (size_t)(total + 1)), *owner = malloc(sizeof(int) * (size_t)(total + 1));
    hp_status st = have && owner ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory gathering the model");
    char name[600];
    for (int k = 0; st == HP_STATUS_OK && k < total; k++)
        have[k] = hp_store_data(ps, full_name(t, k, name, sizeof name)) ? me : INT_MAX;
    if (st == HP_STATUS_OK) st = hp_comm_all_reduce(t->pipe_comm, have, owner, (size_t)total, HP_DTYPE_I32, HP_REDUCE_MIN);
    for (int k = 0; st == HP_STATUS_OK && k < total; k++) {
        full_name(t, k, name, sizeof name);
        if (owner[k] == INT_MAX) {
            st = hp_error(HP_STATUS_INTERNAL, "pipeline: no stage holds '%s'", name);
            break;
        }
        hp_store_entry_info e;
        st = hp_store_info(t->store, name, &e);
        float *buf = st == HP_STATUS_OK ? malloc(e.bytes + 4) : NULL;
        if (st == HP_STATUS_OK && !buf) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory gathering '%s'", name);
        void *full = NULL; /* every rank of the owner's group takes part in a view of a split entry */
        if (st == HP_STATUS_OK && have[k] == me) st = hp_store_view(ps, name, NULL, &full);
        if (st == HP_STATUS_OK && owner[k] == me) memcpy(buf, full, e.bytes);
        if (st == HP_STATUS_OK) st = hp_comm_broadcast(t->pipe_comm, buf, e.bytes / sizeof(float), HP_DTYPE_F32, owner[k]);
        if (st == HP_STATUS_OK) st = hp_store_write(t->store, name, buf, e.bytes);
        free(buf);
    }
    free(have);
    free(owner);
    return st;
}

/* After a resume into t->store: each stage takes its entries from it (its optimizer states too). */
hp_status hp__pipe_scatter(hp_trainer *t) {
    int n = t->train.step.n_params;
    hp_store *ps = hp_pipeline_store(t->pipe);
    char name[600];
    for (int k = 0; k < 3 * n; k++) {
        full_name(t, k, name, sizeof name);
        if (!hp_store_data(ps, name)) continue;
        hp_store_entry_info e, pe;
        HP_CHECK(hp_store_info(t->store, name, &e));
        HP_CHECK(hp_store_info(ps, name, &pe));
        if (!hp_pipeline_mesh(t->pipe)) {
            HP_CHECK(hp_store_write(ps, name, hp_store_data(t->store, name), e.bytes));
            continue;
        }
        hp_dtensor *blk; /* this rank's block of a split entry */
        HP_CHECK(hp_dtensor_distribute(hp_pipeline_mesh(t->pipe), &pe.layout, &pe.shape, HP_DTYPE_F32,
                                       hp_store_data(t->store, name), &blk));
        hp_status st = hp_store_write(ps, name, hp_dtensor_data(blk), pe.bytes);
        hp_dtensor_free(blk);
        HP_CHECK(st);
    }
    hp_pipeline_set_step(t->pipe, t->steps_done);
    return HP_STATUS_OK;
}

void hp__pipe_report_memory(const hp_trainer *t, FILE *f) {
    int nc = hp_pipeline_n_chunks(t->pipe);
    fprintf(f, "memory: pipeline rank %d of %d (%s, m=%d):", hp_comm_rank(t->pipe_comm), hp_comm_size(t->pipe_comm),
            hp_sched_kind_name(t->sched->kind), t->sched->m);
    for (int c = 0; c < nc; c++) {
        int stage = 0, slots = 0;
        hp_gpt_stage part;
        if (hp_pipeline_stage_info(t->pipe, c, &stage, &part, &slots) != HP_STATUS_OK) continue;
        fprintf(f, " stage %d (blocks %d-%d%s%s, %d micro-batch%s in flight)", stage, part.first_layer,
                part.last_layer - 1, part.embedding ? ", embedding" : "", part.head ? ", head" : "", slots,
                slots == 1 ? "" : "es");
    }
    fprintf(f, "\n");
    hp_pipeline_stats ps;
    hp_pipeline_get_stats(t->pipe, &ps);
    if (ps.bytes_offloaded > 0) /* HyperOffload inside the stages, since the pipeline was built */
        fprintf(f, "offload: activations of the micro-batches in flight: %.1f MiB offloaded, %.1f MiB written to "
                "and %.1f MiB read from disk\n", (double)ps.bytes_offloaded / 1048576.0,
                (double)ps.bytes_to_disk / 1048576.0, (double)ps.bytes_from_disk / 1048576.0);
    hp_store_report_memory(hp_pipeline_store(t->pipe), f);
}
