/*
 * The compile driver: runs the named passes (autodiff, shard, offload, memplan) in order, timing
 * each, stopping and dumping the IR where asked. Each pass only reads and writes the IR; the
 * driver owns what the passes make and resolves the per-rank ids callers need.
 */
#include "hp/compile.h"
#include "hp/costmodel.h"

#include <stdlib.h>
#include <string.h>

static const char *const PASS_NAMES[HP_PASS_COUNT] = {"autodiff", "shard", "offload", "memplan"};

struct hp_compiled {
    hp_compile_opts opts;      /* the caller's, keep and program.keep pointing at ours */
    hp_compile_report report;
    hp_graph *logical;
    bool own_graph;            /* hp_compile_run built it */
    hp_gpt gpt;
    bool has_gpt;
    hp_train_step step;
    bool has_step;
    hp_strategy *strategy;     /* opts' or owned (own_strategy) */
    bool own_strategy;
    hp_offload_plan_config offload_cfg; /* hp_compile_run's parsed section */
    hp_mesh *mesh;             /* the strategy's, opts', or owned (own_mesh) */
    bool own_mesh;
    hp_comm *self;             /* owned one-rank communicator, or NULL */
    int index;
    hp_partition *part;
    hp_tid *resolve;           /* logical: loss, grad_sq (training), keep... */
    hp_tid *local;             /* per-rank ids of resolve */
    int n_resolve;
    hp_offload_state *offload;
    hp_program *program;
    hp_program_stats memory;
};

const char *hp_pass_name(hp_pass p) { return p >= 0 && p < HP_PASS_COUNT ? PASS_NAMES[p] : "?"; }

hp_status hp_pass_parse(const char *name, hp_pass *out) {
    for (int p = 0; p < HP_PASS_COUNT; p++)
        if (name && !strcmp(name, PASS_NAMES[p])) {
            *out = (hp_pass)p;
            return HP_STATUS_OK;
        }
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "unknown pass '%s' (known passes: autodiff, shard, offload, memplan)",
                    name ? name : "(null)");
}

void hp_compile_report_print(const hp_compile_report *r, FILE *f) {
    double total = 0;
    for (int p = 0; p < HP_PASS_COUNT; p++) {
        if (r->ran[p]) {
            fprintf(f, "  %-9s %8.3f s\n", PASS_NAMES[p], r->seconds[p]);
            total += r->seconds[p];
        } else
            fprintf(f, "  %-9s %8s\n", PASS_NAMES[p], p <= r->last ? "skipped" : "not run");
    }
    fprintf(f, "  total     %8.3f s\n", total);
}

void hp_compiled_dump(const hp_compiled *c, FILE *f) {
    const hp_graph *g = c->part ? hp_partition_graph(c->part) : c->logical;
    fprintf(f, "== IR after %s (%s graph, %d nodes)\n", hp_pass_name(c->report.last),
            c->part ? "per-rank" : "logical", hp_graph_n_nodes(g));
    hp_graph_dump(g, f);
}

/* ---------------------------------------------------------------- passes */

static hp_status pass_autodiff(hp_compiled *c) {
    if (!c->opts.train) return HP_STATUS_OK;
    HP_CHECK(hp_train_step_build(c->logical, c->opts.loss, c->opts.optim, &c->step));
    c->has_step = true;
    return HP_STATUS_OK;
}

/* The mesh and this rank's index: attaches the mesh to the world unless planning without one. */
static hp_status world_and_mesh(hp_compiled *c) {
    if (c->strategy)
        c->mesh = hp_strategy_mesh(c->strategy);
    else if (c->opts.mesh)
        c->mesh = c->opts.mesh;
    else {
        const int one = 1;
        const char *dp = "dp";
        HP_CHECK(hp_mesh_new(1, &one, &dp, NULL, 0, &c->mesh));
        c->own_mesh = true;
    }
    if (!hp_mesh_parent_comm(c->mesh) && !(c->opts.plan_only && !c->opts.comm)) {
        hp_comm *world = c->opts.comm;
        if (!world && !c->own_mesh && !c->own_strategy)
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "compile: the caller's mesh is not attached and no communicator was given "
                            "(attach it with hp_mesh_attach or set hp_compile_opts.comm): a one-rank "
                            "communicator made here would be freed with the compiled program while "
                            "the mesh still refers to it");
        if (!world) {
            world = c->self = hp_comm_self_new();
            if (!world) return hp_error(HP_STATUS_OUT_OF_MEMORY, "compile: out of memory for a communicator");
        }
        HP_CHECK(hp_mesh_attach(c->mesh, world));
    }
    if (hp_mesh_parent_comm(c->mesh)) {
        c->index = hp_mesh_my_index(c->mesh);
        if (c->index < 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "compile: rank %d is not in the strategy's mesh",
                            hp_comm_rank(hp_mesh_parent_comm(c->mesh)));
    } else {
        c->index = c->opts.plan_index;
        if (c->index < 0 || c->index >= hp_mesh_size(c->mesh))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "compile: plan index %d is outside the mesh of %d devices",
                            c->index, hp_mesh_size(c->mesh));
    }
    return HP_STATUS_OK;
}

static hp_status pass_shard(hp_compiled *c) {
    HP_CHECK(world_and_mesh(c));
    int nt = hp_graph_n_tensors(c->logical);
    hp_layout *lay = calloc((size_t)(nt ? nt : 1), sizeof *lay);
    c->n_resolve = 1 + (c->has_step ? 1 : 0) + c->opts.n_keep;
    c->resolve = calloc((size_t)c->n_resolve, sizeof *c->resolve);
    c->local = calloc((size_t)c->n_resolve, sizeof *c->local);
    if (!lay || !c->resolve || !c->local) {
        free(lay);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "compile: out of memory for %d layouts", nt);
    }
    int k = 0;
    c->resolve[k++] = c->opts.loss;
    if (c->has_step) c->resolve[k++] = c->step.grad_sq;
    for (int i = 0; i < c->opts.n_keep; i++) c->resolve[k++] = c->opts.keep[i];
    for (int t = 0; t < nt; t++) lay[t].ndim = -1;
    hp_status st = HP_STATUS_OK;
    if (c->strategy)
        st = hp_strategy_annotate(c->strategy, c->logical, lay, &c->report.strategy_warnings);
    else if (c->opts.annotate)
        st = c->opts.annotate(c->opts.annotate_user, c->logical, c->mesh, lay);
    hp_partition_opts po = HP_PARTITION_OPTS_DEFAULT;
    po.index = c->index;
    po.search = !c->opts.no_search;
    po.bucket_size = c->opts.bucket_size >= 0 ? c->opts.bucket_size
                     : c->strategy               ? hp_strategy_bucket_size(c->strategy)
                                                 : HP_BUCKET_SIZE_DEFAULT;
    po.context_parallel = c->strategy ? hp_strategy_context_parallel(c->strategy) : c->opts.context_parallel;
    if (st == HP_STATUS_OK)
        st = hp_partition_new_opts(c->logical, c->mesh, lay, c->resolve, c->n_resolve, &po, &c->part);
    free(lay);
    HP_CHECK(st);
    for (int i = 0; i < c->n_resolve; i++) c->local[i] = hp_partition_resolved(c->part, i);
    c->opts.program.keep = c->local;
    c->opts.program.n_keep = c->n_resolve;
    return HP_STATUS_OK;
}

static hp_status pass_offload(hp_compiled *c) {
    if (!c->opts.offload || c->opts.offload->device_budget == 0) return HP_STATUS_OK;
    return hp_offload_apply_config(c->opts.offload, hp_partition_graph(c->part), &c->opts.program, &c->offload);
}

static hp_status pass_memplan(hp_compiled *c) {
    const hp_graph *g = hp_partition_graph(c->part);
    if (c->opts.plan_only) return hp_program_plan(g, &c->opts.program, &c->memory);
    HP_CHECK(hp_program_new(g, &c->opts.program, &c->program));
    hp_program_get_stats(c->program, &c->memory);
    return HP_STATUS_OK;
}

/* Whether pass p does anything with these options (a pass that does nothing is reported skipped). */
static bool pass_runs(const hp_compiled *c, hp_pass p) {
    if (p == HP_PASS_AUTODIFF) return c->opts.train;
    if (p == HP_PASS_OFFLOAD) return c->opts.offload && c->opts.offload->device_budget > 0;
    return true;
}

static hp_status run_passes(hp_compiled *c) {
    static hp_status (*const RUN[HP_PASS_COUNT])(hp_compiled *) = {pass_autodiff, pass_shard, pass_offload,
                                                                   pass_memplan};
    for (int p = 0; p <= c->opts.stop_after && p < HP_PASS_COUNT; p++) {
        if (pass_runs(c, (hp_pass)p)) {
            double t0 = hp_now_seconds();
            HP_CHECK(RUN[p](c));
            c->report.seconds[p] = hp_now_seconds() - t0;
            c->report.ran[p] = true;
        }
        c->report.last = (hp_pass)p;
        if (c->opts.dump_after == p && c->opts.dump) hp_compiled_dump(c, c->opts.dump);
    }
    return HP_STATUS_OK;
}

static hp_status check_opts(const hp_graph *g, const hp_compile_opts *o) {
    if (!g) return hp_error(HP_STATUS_INVALID_ARGUMENT, "compile: no logical graph");
    HP_CHECK(hp_graph_status(g));
    if (o->loss < 0 || o->loss >= hp_graph_n_tensors(g))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "compile: loss %d is not a tensor of the graph (%d tensors)",
                        o->loss, hp_graph_n_tensors(g));
    if (o->train && !o->optim)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "compile: train is set but no optimizer config was given");
    if (o->n_keep < 0 || (o->n_keep > 0 && !o->keep))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "compile: %d keep ids without an array", o->n_keep);
    if (o->stop_after < 0 || o->stop_after >= HP_PASS_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "compile: stop_after %d is not a pass", (int)o->stop_after);
    return HP_STATUS_OK;
}

static hp_status compile_into(hp_compiled *c, hp_graph *logical, const hp_compile_opts *opts, hp_compiled **out) {
    hp_status st = check_opts(logical, opts);
    if (st == HP_STATUS_OK) {
        c->opts = *opts;
        c->logical = logical;
        if (!c->strategy) c->strategy = opts->strategy;
        c->opts.program.keep = NULL;
        c->opts.program.n_keep = 0;
        c->opts.program.ext = NULL;
        c->index = -1;
        c->report.last = HP_PASS_NONE;
        st = run_passes(c);
    }
    if (st != HP_STATUS_OK) {
        hp_compiled_free(c);
        return st;
    }
    *out = c;
    return HP_STATUS_OK;
}

hp_status hp_compile(hp_graph *logical, const hp_compile_opts *opts, hp_compiled **out) {
    *out = NULL;
    hp_compiled *c = calloc(1, sizeof *c);
    if (!c) return hp_error(HP_STATUS_OUT_OF_MEMORY, "compile: out of memory");
    return compile_into(c, logical, opts, out);
}

hp_status hp_compile_config_objects(const hp_run_config *cfg, int world_size, hp_strategy **strategy,
                                    hp_offload_plan_config *offload) {
    if (strategy) *strategy = NULL;
    if (cfg->groups.present) {
        const hp_groups_config *g = &cfg->groups;
        return hp_error(HP_STATUS_UNSUPPORTED, "%s:%d:%d: groups: %d stage group%s on %d ranks are several programs "
                        "(HyperMPMD), not the one SPMD program hp_compile_run builds: run them with hp_trainer_new "
                        "(hp train), which builds each stage's programs (src/mpmd)", g->file ? g->file : cfg->source,
                        g->line, g->column, g->n_stages, g->n_stages == 1 ? "" : "s", g->n_ranks);
    }
    if (strategy) HP_CHECK(hp_strategy_new(&cfg->strategy, world_size, strategy));
    hp_offload_plan_config_from(&cfg->offload, offload);
    return HP_STATUS_OK;
}

hp_status hp_compile_run(const hp_run_config *cfg, const hp_compile_opts *opts, hp_compiled **out) {
    *out = NULL;
    hp_compiled *c = calloc(1, sizeof *c);
    if (!c) return hp_error(HP_STATUS_OUT_OF_MEMORY, "compile: out of memory");
    c->own_graph = c->own_strategy = true;
    /* the training step's graph as the trainer builds it: with the run's dropout */
    hp_gpt_config gc = hp_gpt_config_from_model(&cfg->model);
    gc.dropout = opts->train ? (float)cfg->model.dropout : 0.0f;
    gc.seed = (uint64_t)cfg->train.seed;
    gc.moe.training = opts->train; /* MoE balancing loss and router bias updates: training only */
    int world = opts->comm ? hp_comm_size(opts->comm) : opts->plan_world_size;
    hp_status st = hp_gpt_config_check(&gc);
    if (st == HP_STATUS_OK) st = hp_compile_config_objects(cfg, world, &c->strategy, &c->offload_cfg);
    if (st == HP_STATUS_OK) {
        c->logical = hp_graph_new();
        if (!c->logical) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "compile: out of memory for a graph");
    }
    /* the trainer's order of the sequence: load-balanced where ring attention asks for it */
    if (st == HP_STATUS_OK) st = hp_strategy_ring_balance(c->strategy, cfg->model.context, &gc.cp_balance);
    if (st == HP_STATUS_OK) st = hp_gpt_build(c->logical, &gc, (int)cfg->train.batch, (int)cfg->model.context, true, &c->gpt);
    if (st != HP_STATUS_OK) {
        hp_compiled_free(c);
        return st;
    }
    c->has_gpt = true;
    hp_compile_opts o = *opts;
    o.loss = c->gpt.loss;
    o.optim = &cfg->optim;
    o.strategy = c->strategy;
    o.mesh = NULL;
    o.offload = &c->offload_cfg;
    return compile_into(c, c->logical, &o, out);
}

void hp_compiled_free(hp_compiled *c) {
    if (!c) return;
    hp_program_free(c->program);
    hp_offload_state_free(c->offload);
    hp_partition_free(c->part);
    if (c->own_mesh) hp_mesh_free(c->mesh);
    if (c->own_strategy) hp_strategy_free(c->strategy);
    if (c->self) hp_comm_free(c->self);
    if (c->own_graph) hp_graph_free(c->logical);
    free(c->resolve);
    free(c->local);
    free(c);
}

const hp_compile_report *hp_compiled_report(const hp_compiled *c) { return &c->report; }
hp_graph *hp_compiled_logical(const hp_compiled *c) { return c->logical; }
const hp_train_step *hp_compiled_step(const hp_compiled *c) { return c->has_step ? &c->step : NULL; }
const hp_gpt *hp_compiled_gpt(const hp_compiled *c) { return c->has_gpt ? &c->gpt : NULL; }
hp_mesh *hp_compiled_mesh(const hp_compiled *c) { return c->part ? c->mesh : NULL; }
int hp_compiled_index(const hp_compiled *c) { return c->part ? c->index : -1; }
hp_strategy *hp_compiled_strategy(const hp_compiled *c) { return c->strategy; }
hp_partition *hp_compiled_partition(const hp_compiled *c) { return c->part; }
hp_graph *hp_compiled_graph(const hp_compiled *c) { return c->part ? hp_partition_graph(c->part) : NULL; }
hp_offload_state *hp_compiled_offload(const hp_compiled *c) { return c->offload; }
hp_program *hp_compiled_program(const hp_compiled *c) { return c->program; }
const hp_program_stats *hp_compiled_memory(const hp_compiled *c) { return &c->memory; }
hp_tid hp_compiled_loss(const hp_compiled *c) { return c->part ? c->local[0] : HP_TID_NONE; }
hp_tid hp_compiled_grad_sq(const hp_compiled *c) { return c->part && c->has_step ? c->local[1] : HP_TID_NONE; }

hp_tid hp_compiled_kept(const hp_compiled *c, int i) {
    int at = 1 + (c->has_step ? 1 : 0) + i;
    return c->part && i >= 0 && at < c->n_resolve ? c->local[at] : HP_TID_NONE;
}

hp_status hp_compiled_predict(const hp_compiled *c, const hp_machine_model *m, hp_step_prediction *out) {
    if (!c->part) return hp_error(HP_STATUS_INVALID_ARGUMENT, "predict: the shard pass has not run");
    const hp_graph *g = hp_partition_graph(c->part);
    const hp_liveness *lv = c->program ? hp_program_liveness(c->program) : NULL;
    hp_liveness own;
    if (!lv) {
        HP_CHECK(hp_liveness_compute(g, c->local, c->n_resolve, &own));
        lv = &own;
    }
    hp_status st = hp_predict_nodes(g, lv, 0, hp_graph_n_nodes(g), m, out);
    if (lv == &own) hp_liveness_free(&own);
    return st;
}
