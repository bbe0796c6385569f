/*
 * Context parallelism as a layout (Ulysses): the activations (B, T, C) split on the sequence dim
 * over a mesh axis `cp` through the whole block; attention's sharding rule moves that axis from
 * the sequence to the heads and back, which the redistribution planner makes all-to-alls. For every
 * case the per-rank programs compute what the single-device program computes — loss, every
 * gradient (gathered to the full tensor) and the updated parameters, two steps — with the ranks as
 * threads over the simulated communicator: cp2, cp4, dp2 x cp2, tp2 x cp2, cp2 x fsdp2, sequences that do not
 * divide evenly, GPT (learned positions) and Llama (RoPE with each rank's global offset; grouped-
 * query attention whose 2 kv heads do not split 4 ways, so the sequence is gathered there), and
 * Megatron sequence parallelism over 4 ranks (tp4sp), whose attention now takes the same path.
 * The communication is checked too: GPT cp2 moves its attention activations by all-to-all only
 * (4 per layer forward, 4 backward: q, k, v, o and do, dq, dk, dv), never by all-gather.
 * 2-D tensor parallelism (examples/tp2d.yaml's layouts, 2 x 2) is checked the same way, plus where
 * its forward and backward collectives run: activations only within tpc groups, weights only
 * within tpr groups. tests/mpi/test_cp_train_equiv.c repeats the main cases over real processes
 * with `hp train`.
 */
#include "testutil.h"

#include "hp/compile.h"
#include "hp/mesh.h"
#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/redistribute.h"
#include "hp/runtime.h"
#include "hp/shard.h"
#include "hp/train.h"

#include <fnmatch.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 2
#define BATCH 4
#define MAX_T 16

typedef struct rule {
    const char *pattern; /* fnmatch over tensor names; first match wins */
    const char *layout;  /* hp_layout_parse text */
} rule;

typedef struct strategy {
    const char *name;
    int naxes;
    int dims[3];
    const char *axes[3];
    rule rules[16];
} strategy;

#define CP_INPUTS {"tokens", "[none, cp]"}, {"targets", "[none, cp]"}
#define TP_RULES                                                                                   \
    {"blocks.*.attn.[qkv].weight", "[tp, none]"}, {"blocks.*.attn.[qkv].bias", "[tp]"},           \
        {"blocks.*.mlp.fc.weight", "[tp, none]"}, {"blocks.*.mlp.fc.bias", "[tp]"},                \
        {"blocks.*.attn.proj.weight", "[none, tp]"}, {"blocks.*.mlp.proj.weight", "[none, tp]"}
#define LLAMA_TP_RULES                                                                             \
    {"model.layers.*.self_attn.[qkv]_proj.weight", "[tp, none]"},                                 \
        {"model.layers.*.mlp.gate_proj.weight", "[tp, none]"}, {"model.layers.*.mlp.up_proj.weight", "[tp, none]"}, \
        {"model.layers.*.self_attn.o_proj.weight", "[none, tp]"},                                 \
        {"model.layers.*.mlp.down_proj.weight", "[none, tp]"}

static const strategy CP2 = {"cp2", 1, {2}, {"cp"}, {CP_INPUTS}};
static const strategy CP4 = {"cp4", 1, {4}, {"cp"}, {CP_INPUTS}};
static const strategy DP2XCP2 = {"dp2xcp2", 2, {2, 2}, {"dp", "cp"},
                                 {{"tokens", "[dp, cp]"}, {"targets", "[dp, cp]"}}};
static const strategy TP2XCP2 = {"tp2xcp2", 2, {2, 2}, {"tp", "cp"}, {CP_INPUTS, TP_RULES}};
static const strategy LLAMA_TP2XCP2 = {"llama-tp2xcp2", 2, {2, 2}, {"tp", "cp"}, {CP_INPUTS, LLAMA_TP_RULES}};
/* Megatron sequence parallelism over 4 ranks: attention now takes Ulysses' all-to-all over tp. */
static const strategy TP4SP = {"tp4sp", 1, {4}, {"tp"}, {{"tokens", "[none, tp]"}, {"targets", "[none, tp]"}, TP_RULES}};
static const strategy CP2_FSDP = {"cp2xfsdp2", 2, {2, 2}, {"cp", "fsdp"},
                                  {{"tokens", "[fsdp, cp]"}, {"targets", "[fsdp, cp]"}, {"*", "[fsdp]"}}};

/* Ring attention (strategy.context_parallel: ring): the sequence stays split through attention. */
static const strategy RING_CP2 = {"ring-cp2", 1, {2}, {"cp"}, {CP_INPUTS}};
static const strategy RING_CP4 = {"ring-cp4", 1, {4}, {"cp"}, {CP_INPUTS}};
static const strategy RING_DP2XCP2 = {"ring-dp2xcp2", 2, {2, 2}, {"dp", "cp"},
                                      {{"tokens", "[dp, cp]"}, {"targets", "[dp, cp]"}}};
static const strategy RING_TP2XCP2 = {"ring-tp2xcp2", 2, {2, 2}, {"tp", "cp"}, {CP_INPUTS, TP_RULES}};
static const strategy RING_LLAMA_TP2XCP2 = {"ring-llama-tp2xcp2", 2, {2, 2}, {"tp", "cp"},
                                            {CP_INPUTS, LLAMA_TP_RULES}};
static const strategy RING_CP2_FSDP = {"ring-cp2xfsdp2", 2, {2, 2}, {"cp", "fsdp"},
                                       {{"tokens", "[fsdp, cp]"}, {"targets", "[fsdp, cp]"}, {"*", "[fsdp]"}}};

/* 2-D tensor parallelism (Optimus / SUMMA layouts, Xu et al. 2021): every block weight split over
 * both axes, the batch over tpr; activations move only within tpc groups, weights within tpr. */
#define TP2D_RULES(prefix_qkv, prefix_up, prefix_out)                                              \
    {prefix_qkv, "[tpc, tpr]"}, {prefix_up, "[tpc, tpr]"}, {prefix_out, "[tpr, tpc]"}
static const strategy TP2D = {"tp2d-2x2", 2, {2, 2}, {"tpr", "tpc"},
                              {{"tokens", "[tpr, none]"}, {"targets", "[tpr, none]"},
                               TP2D_RULES("blocks.*.attn.[qkv].weight", "blocks.*.mlp.fc.weight",
                                          "blocks.*.[am][tl][tp].proj.weight"),
                               {"blocks.*.attn.[qkv].bias", "[tpc]"}, {"blocks.*.mlp.fc.bias", "[tpc]"}}};
static const strategy LLAMA_TP2D = {"llama-tp2d-2x2", 2, {2, 2}, {"tpr", "tpc"},
                                    {{"tokens", "[tpr, none]"}, {"targets", "[tpr, none]"},
                                     TP2D_RULES("model.layers.*.self_attn.[qkv]_proj.weight",
                                                "model.layers.*.mlp.[gu][ap]*_proj.weight",
                                                "model.layers.*.[sm]*.[od]*_proj.weight")}};

/* The logical step and its single-device results. */
typedef struct reference {
    hp_gpt_config cfg;
    int T;
    hp_graph *g;
    hp_gpt gpt;
    hp_train_step ts;
    hp_tid *resolve; /* loss, grad_sq, grads..., params... */
    int n_resolve;
    float **init;    /* per tensor id: initial value of params (NULL otherwise) */
    float **want[STEPS]; /* per step, per resolve entry: the single-device value */
    int balance;         /* > 1: g is the load-balanced ring order's graph for this many ranks (want: the
                          * natural order's single-device run) */
    int32_t *pos;        /* balance: hp_ring_balance_positions(T, balance) */
} reference;

static void fill_inputs(const reference *r, int32_t *tok, int32_t *tgt, int step) {
    for (int i = 0; i < BATCH * r->T; i++) {
        tok[i] = (i * 7 + 3 + 5 * step) % r->cfg.vocab;
        tgt[i] = (i * 5 + 1 + 3 * step) % r->cfg.vocab;
    }
}

static size_t numel_of(const hp_graph *g, hp_tid t) { return (size_t)hp_shape_numel(&hp_graph_tensor(g, t)->shape); }

/* The logical step graph of cfg, its resolve list and initial parameters (r->cfg, r->T set). */
static void build_graph(reference *r, const hp_gpt_config *cfg) {
    r->g = hp_graph_new();
    assert_ok(hp_gpt_build(r->g, cfg, BATCH, r->T, true, &r->gpt));
    hp_optim_config o = {.lr = 1e-2, .min_lr = 1e-3, .warmup = 0, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                         .eps = 1e-8, .grad_clip = 1.0};
    assert_ok(hp_train_step_build(r->g, r->gpt.loss, &o, &r->ts));
    int n = r->ts.n_params;
    r->n_resolve = 2 + 2 * n;
    r->resolve = calloc((size_t)r->n_resolve, sizeof *r->resolve);
    r->resolve[0] = r->ts.loss;
    r->resolve[1] = r->ts.grad_sq;
    for (int i = 0; i < n; i++) {
        r->resolve[2 + i] = r->ts.grads[i];
        r->resolve[2 + n + i] = r->ts.params[i];
    }
    r->init = calloc((size_t)hp_graph_n_tensors(r->g), sizeof *r->init);
    for (int i = 0; i < n; i++) {
        hp_tid p = r->ts.params[i];
        r->init[p] = malloc(numel_of(r->g, p) * sizeof(float));
        assert_ok(hp_gpt_init_param(cfg, hp_graph_tensor(r->g, p)->name, 5, 0, (int64_t)numel_of(r->g, p), r->init[p]));
    }
}

static void free_graph(reference *r) {
    for (int t = 0; t < hp_graph_n_tensors(r->g); t++) free(r->init[t]);
    free(r->init);
    free(r->resolve);
    hp_graph_free(r->g);
}

static void build_reference(reference *r, const hp_gpt_config *cfg) {
    memset(r, 0, sizeof *r);
    r->cfg = *cfg;
    r->T = cfg->context;
    build_graph(r, cfg);
    int n = r->ts.n_params;
    hp_program *prog;
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = r->resolve;
    po.n_keep = 2 + n; /* params are persistent already */
    assert_ok(hp_program_new(r->g, &po, &prog));
    for (int i = 0; i < n; i++)
        memcpy(hp_program_data(prog, r->ts.params[i]), r->init[r->ts.params[i]], numel_of(r->g, r->ts.params[i]) * 4);
    for (int s = 0; s < STEPS; s++) {
        fill_inputs(r, hp_program_data(prog, r->gpt.tokens), hp_program_data(prog, r->gpt.targets), s);
        *(float *)hp_program_data(prog, r->ts.lr) = 1e-2f;
        *(float *)hp_program_data(prog, r->ts.step) = (float)(s + 1);
        assert_ok(hp_program_run(prog));
        r->want[s] = calloc((size_t)r->n_resolve, sizeof(float *));
        for (int k = 0; k < r->n_resolve; k++) {
            size_t ne = numel_of(r->g, r->resolve[k]);
            r->want[s][k] = malloc(ne * sizeof(float));
            memcpy(r->want[s][k], hp_program_data(prog, r->resolve[k]), ne * sizeof(float));
        }
    }
    hp_program_free(prog);
}

/* The single-device results of cfg in the natural order, and the graph of the load-balanced ring
 * order for `balance` ranks (hp_gpt_config.cp_balance) that the ranks then run: the same parameters
 * in the same order, the tokens and targets permuted, positions an input. */
static void build_reference_balanced(reference *r, const hp_gpt_config *cfg, int balance) {
    build_reference(r, cfg);
    free_graph(r);
    hp_gpt_config c = *cfg;
    c.cp_balance = balance;
    build_graph(r, &c);
    r->balance = balance;
    r->pos = malloc((size_t)r->T * sizeof *r->pos);
    assert_ok(hp_ring_balance_positions(r->T, balance, r->pos));
}

static void free_reference(reference *r) {
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < r->n_resolve; k++) free(r->want[s][k]);
        free(r->want[s]);
    }
    free_graph(r);
    free(r->pos);
}

/* Collective steps on activations (B, T, C) per kind, counted on rank 0. */
typedef struct counts {
    int all_to_all, all_gather, other;
    int act_axis[3], weight_axis[3]; /* collective steps per mesh axis on (B, T, C) and on matrices */
    int64_t p2p_bytes;               /* rank 0's point-to-point bytes received per step */
} counts;

typedef struct job {
    const reference *ref;
    const strategy *st;
    pthread_mutex_t mu;
    char failure[1024]; /* first mismatch or error, "" if none */
    int64_t bytes;      /* rank 0: bytes per step */
    int64_t p2p_bytes;  /* rank 0: bytes received point to point per step (ring attention) */
    hp_cp_algo cp;      /* attention under the sequence split: Ulysses or ring */
    int n_coll;
    counts act;         /* rank 0: steps on (B, T, C) activations */
} job;

static void record(job *j, const char *fmt, ...) {
    pthread_mutex_lock(&j->mu);
    if (!j->failure[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->failure, sizeof j->failure, fmt, ap);
        va_end(ap);
        fprintf(stderr, "FAILURE: %s\n", j->failure); /* the other ranks may now block forever */
    }
    pthread_mutex_unlock(&j->mu);
}

static hp_status annotate(void *user, const hp_graph *g, const hp_mesh *mesh, hp_layout *lay) {
    const job *j = user;
    for (int t = 0; t < hp_graph_n_tensors(g); t++) {
        lay[t].ndim = -1;
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->producer >= 0 || !x->name) continue;
        for (const rule *r = j->st->rules; r->pattern; r++) {
            if (fnmatch(r->pattern, x->name, 0) != 0) continue;
            hp_layout l;
            HP_CHECK(hp_layout_parse(r->layout, mesh, &l));
            if (l.ndim > x->shape.ndim) break;
            hp_layout_init(&lay[t], x->shape.ndim); /* a short tensor_map applies to the leading dims */
            for (int d = 0; d < l.ndim; d++) {
                lay[t].nmap[d] = l.nmap[d];
                memcpy(lay[t].map[d], l.map[d], sizeof l.map[d]);
            }
            break;
        }
    }
    return HP_STATUS_OK;
}

/* The block of a global row-major tensor that mesh index `index` holds under `l`. */
static void slice_global(const hp_mesh *m, const hp_layout *l, const hp_shape *gs, int index, const void *global,
                         void *local, size_t es) {
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    hp_layout_slice_of(l, m, gs, index, start, len);
    hp_shape ls = hp_shape_make(gs->ndim, len);
    hp_copy_box(local, &ls, zero, global, gs, start, len, es);
}

static void count_activation_steps(job *j, const hp_partition *part) {
    const reference *r = j->ref;
    for (int i = 0; i < hp_partition_n_collectives(part); i++) {
        const hp_redistribute_plan *pl = &hp_partition_collective(part, i)->plan;
        /* the GEMMs' collectives: forward and backward (the optimizer phase has the gradients'
         * reductions and the test's gathers of every tensor to replicated) */
        bool gemm = !(hp_partition_collective(part, i)->flags & HP_NODE_FLAG_OPTIMIZER);
        for (int k = 0; k < pl->nsteps && gemm; k++) {
            hp_redist_kind kind = pl->steps[k].kind;
            int a = pl->steps[k].axis;
            if (kind == HP_REDIST_LOCAL_SLICE || kind == HP_REDIST_LOCAL_PARTIAL || a < 0 || a > 2) continue;
            if (pl->shape.ndim == 3) j->act.act_axis[a]++;
            if (pl->shape.ndim == 2) j->act.weight_axis[a]++;
        }
        if (pl->shape.ndim != 3 || pl->shape.dim[0] != BATCH || pl->shape.dim[1] != r->T) continue;
        for (int k = 0; k < pl->nsteps; k++) {
            hp_redist_kind kind = pl->steps[k].kind;
            if (kind == HP_REDIST_ALL_TO_ALL) j->act.all_to_all++;
            else if (kind == HP_REDIST_ALL_GATHER) j->act.all_gather++;
            else if (kind != HP_REDIST_LOCAL_SLICE && kind != HP_REDIST_LOCAL_PARTIAL) j->act.other++;
        }
    }
}

static hp_status rank_main(hp_comm *comm, int rank, void *user) {
    job *j = user;
    const reference *r = j->ref;
    hp_mesh *mesh = NULL;
    hp_compiled *c = NULL;
    hp_status st;
    HP_CHECK_GOTO(hp_mesh_new(j->st->naxes, j->st->dims, j->st->axes, NULL, 0, &mesh), st, out);
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = r->resolve[0];
    o.keep = r->resolve + 1;
    o.n_keep = r->n_resolve - 1;
    o.mesh = mesh;
    o.annotate = annotate;
    o.annotate_user = j;
    o.comm = comm;
    o.context_parallel = j->cp;
    /* the counts below are the attention algorithm's; the weight-stationary search (which at these
     * tiny shapes gathers some activations instead of FSDP's weights) is tested on its own
     * (test_partition_search, test_shard_equiv) */
    o.no_search = true;
    HP_CHECK_GOTO(hp_compile(r->g, &o, &c), st, out);
    hp_partition *part = hp_compiled_partition(c);
    hp_program *prog = hp_compiled_program(c);
    int idx = hp_mesh_my_index(mesh);
    for (int i = 0; i < r->ts.n_params; i++) {
        hp_tid p = r->ts.params[i];
        slice_global(mesh, hp_partition_layout(part, p), &hp_graph_tensor(r->g, p)->shape, idx, r->init[p],
                     hp_program_data(prog, hp_partition_local(part, p)), 4);
    }
    int32_t tok[BATCH * MAX_T], tgt[BATCH * MAX_T], pos[BATCH * MAX_T];
    for (int s = 0; s < STEPS; s++) {
        fill_inputs(r, tok, tgt, s);
        if (r->balance) { /* the loader's permutation: row p holds token pos[p] */
            int32_t a[BATCH * MAX_T], b[BATCH * MAX_T];
            for (int i = 0; i < BATCH * r->T; i++) {
                int row = i / r->T;
                a[i] = tok[row * r->T + r->pos[i % r->T]];
                b[i] = tgt[row * r->T + r->pos[i % r->T]];
                pos[i] = r->pos[i % r->T];
            }
            memcpy(tok, a, sizeof a);
            memcpy(tgt, b, sizeof b);
            slice_global(mesh, hp_partition_layout(part, r->gpt.positions),
                         &hp_graph_tensor(r->g, r->gpt.positions)->shape, idx, pos,
                         hp_program_data(prog, hp_partition_local(part, r->gpt.positions)), 4);
        }
        slice_global(mesh, hp_partition_layout(part, r->gpt.tokens), &hp_graph_tensor(r->g, r->gpt.tokens)->shape, idx,
                     tok, hp_program_data(prog, hp_partition_local(part, r->gpt.tokens)), 4);
        slice_global(mesh, hp_partition_layout(part, r->gpt.targets), &hp_graph_tensor(r->g, r->gpt.targets)->shape,
                     idx, tgt, hp_program_data(prog, hp_partition_local(part, r->gpt.targets)), 4);
        *(float *)hp_program_data(prog, hp_partition_local(part, r->ts.lr)) = 1e-2f;
        *(float *)hp_program_data(prog, hp_partition_local(part, r->ts.step)) = (float)(s + 1);
        HP_CHECK_GOTO(hp_program_run(prog), st, out);
        for (int k = 0; k < r->n_resolve; k++) {
            const float *got = hp_program_data(prog, hp_partition_resolved(part, k));
            const float *want = r->want[s][k];
            size_t ne = numel_of(r->g, r->resolve[k]);
            if (k >= 2 + r->ts.n_params) {
                /* a parameter whose gradient is zero up to rounding (attn.k.bias) moves by noise */
                const float *gw = r->want[s][k - r->ts.n_params];
                float gmax = 0;
                for (size_t e = 0; e < ne; e++) gmax = fmaxf(gmax, fabsf(gw[e]));
                if (gmax < 1e-6f) continue;
            }
            for (size_t e = 0; e < ne; e++) {
                /* loss and gradients: 1e-5 relative (the squared norm sums many terms: 1e-4);
                 * updated parameters: AdamW's 1/sqrt(v) amplifies noise, 1e-3 of lr */
                double d = fabs((double)got[e] - want[e]), tol = 1e-5 * fabs(want[e]) + 2e-6;
                if (k == 1) tol = 1e-4 * fabs(want[e]) + 1e-6;
                if (k >= 2 + r->ts.n_params) tol = 1e-5 * fabs(want[e]) + 1e-5;
                if (!(d <= tol)) {
                    const hp_tensor *x = hp_graph_tensor(r->g, r->resolve[k]);
                    record(j, "%s T=%d rank %d step %d: %s[%zu] = %.9g, single device %.9g", j->st->name, r->T, rank,
                           s + 1, x->name ? x->name : "?", e, (double)got[e], (double)want[e]);
                    break;
                }
            }
        }
    }
    if (rank == 0) {
        j->bytes = hp_partition_bytes(part);
        j->p2p_bytes = hp_partition_p2p_bytes(part);
        j->n_coll = hp_partition_n_collectives(part);
        count_activation_steps(j, part);
    }
out:
    if (st != HP_STATUS_OK) record(j, "%s rank %d: %s (%s)", j->st->name, rank, hp_error_message(), hp_status_str(st));
    hp_compiled_free(c);
    hp_mesh_free(mesh);
    return st;
}

static counts run_strategy_cp(const reference *r, const strategy *st, hp_cp_algo cp) {
    job j;
    memset(&j, 0, sizeof j);
    j.ref = r;
    j.st = st;
    j.cp = cp;
    pthread_mutex_init(&j.mu, NULL);
    int n = 1;
    for (int a = 0; a < st->naxes; a++) n *= st->dims[a];
    hp_status s = hp_comm_sim_run(n, rank_main, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.failure[0]) fail_msg("%s", j.failure);
    if (s != HP_STATUS_OK) fail_msg("%s: %s", st->name, hp_error_message());
    print_message("%-14s T=%-2d %d ranks: %3d redistributions, %7lld bytes per rank per step (+%lld point to point); "
                  "on (B, T, C) activations %d all-to-all, %d all-gather, %d other steps\n",
                  st->name, r->T, n, j.n_coll, (long long)j.bytes, (long long)j.p2p_bytes, j.act.all_to_all,
                  j.act.all_gather, j.act.other);
    j.act.p2p_bytes = j.p2p_bytes;
    return j.act;
}

static counts run_strategy(const reference *r, const strategy *st) { return run_strategy_cp(r, st, HP_CP_ULYSSES); }
static counts run_ring(const reference *r, const strategy *st) { return run_strategy_cp(r, st, HP_CP_RING); }

static const hp_gpt_config GPT = {.vocab = 32, .context = 8, .layers = 2, .heads = 4, .width = 16, .tied_head = false};
static const hp_gpt_config LLAMA = {.family = HP_MODEL_FAMILY_LLAMA, .vocab = 32, .context = 8, .layers = 2,
                                    .heads = 4, .kv_heads = 2, .width = 16, .ffn_width = 24, .tied_head = false};

static hp_gpt_config with_context(hp_gpt_config c, int T) {
    c.context = T;
    return c;
}

static void test_gpt_cp_matches_single_device(void **state) {
    (void)state;
    reference r;
    build_reference(&r, &GPT);
    counts cp2 = run_strategy(&r, &CP2);
    /* Ulysses: q, k, v, o forward and do, dq, dk, dv backward, each one all-to-all, per layer */
    assert_int_equal(cp2.all_to_all, 8 * GPT.layers);
    assert_int_equal(cp2.all_gather, 0);
    counts cp4 = run_strategy(&r, &CP4);
    assert_int_equal(cp4.all_to_all, 8 * GPT.layers);
    assert_int_equal(cp4.all_gather, 0);
    run_strategy(&r, &DP2XCP2);
    run_strategy(&r, &TP2XCP2);
    run_strategy(&r, &CP2_FSDP);
    run_strategy(&r, &TP4SP);
    free_reference(&r);
}

/* Sequences that do not divide evenly: 7 over 2 (4 + 3 rows), 10 over 4 (3 + 3 + 3 + 1). */
static void test_gpt_cp_uneven_sequence(void **state) {
    (void)state;
    reference r;
    hp_gpt_config c = with_context(GPT, 7);
    build_reference(&r, &c);
    run_strategy(&r, &CP2);
    run_strategy(&r, &DP2XCP2);
    free_reference(&r);
    c = with_context(GPT, 10);
    build_reference(&r, &c);
    run_strategy(&r, &CP4);
    free_reference(&r);
}

/* Llama: RoPE on the split sequence with global positions. cp2 splits the 2 kv heads 2 ways; cp4
 * and tp2 x cp2 cannot (4-way), so the sequence is gathered for attention and sliced back. */
static void test_llama_cp_matches_single_device(void **state) {
    (void)state;
    reference r;
    build_reference(&r, &LLAMA);
    counts cp2 = run_strategy(&r, &CP2);
    assert_int_equal(cp2.all_gather, 0);
    assert_true(cp2.all_to_all >= 8 * LLAMA.layers);
    run_strategy(&r, &CP4);
    run_strategy(&r, &DP2XCP2);
    run_strategy(&r, &LLAMA_TP2XCP2);
    free_reference(&r);
    hp_gpt_config c = with_context(LLAMA, 7);
    build_reference(&r, &c);
    run_strategy(&r, &CP2);
    free_reference(&r);
}

/*
 * Ring attention: the same results with the sequence split kept through attention, K/V passed
 * around the cp axis point to point, no collective on the attention activations. Rank 0's bytes
 * received per step under the causal mask: no K/V block (it reads only its own and a block is
 * never passed beyond its last reader), and per layer n - 1 dK and n - 1 dV accumulator blocks of
 * B x T/n x C floats (every other rank's share of rank 0's block comes home).
 */
static void test_ring_matches_single_device(void **state) {
    (void)state;
    reference r;
    build_reference(&r, &GPT);
    const strategy *gpt_cases[] = {&RING_CP2, &RING_CP4, &RING_DP2XCP2, &RING_TP2XCP2, &RING_CP2_FSDP};
    for (size_t i = 0; i < sizeof gpt_cases / sizeof gpt_cases[0]; i++) {
        counts c = run_ring(&r, gpt_cases[i]);
        /* cp2 x fsdp2's 2 all-to-alls are outside attention (Ulysses' run has them too: 18 = 16 + 2) */
        assert_int_equal(c.all_to_all, gpt_cases[i] == &RING_CP2_FSDP ? 2 : 0);
        /* under FSDP the weight-gradient contractions may gather an activation where that is cheaper
         * than moving the other operand (src/ops/matmul.c's fold candidates): not attention's */
        if (gpt_cases[i] != &RING_CP2_FSDP) assert_int_equal(c.all_gather, 0);
        int n = gpt_cases[i]->dims[gpt_cases[i]->naxes - 1 - (gpt_cases[i] == &RING_CP2_FSDP)];
        int64_t batch = gpt_cases[i] == &RING_DP2XCP2 || gpt_cases[i] == &RING_CP2_FSDP ? BATCH / 2 : BATCH;
        int64_t width = gpt_cases[i] == &RING_TP2XCP2 ? GPT.width / 2 : GPT.width;
        int64_t block = batch * (GPT.context / n) * width * 4;
        assert_int_equal(c.p2p_bytes, GPT.layers * 2 * (n - 1) * block);
    }
    free_reference(&r);
    hp_gpt_config c7 = with_context(GPT, 7); /* 4 + 3 rows */
    build_reference(&r, &c7);
    run_ring(&r, &RING_CP2);
    run_ring(&r, &RING_DP2XCP2);
    free_reference(&r);
    hp_gpt_config c10 = with_context(GPT, 10); /* 3 + 3 + 3 + 1 rows */
    build_reference(&r, &c10);
    run_ring(&r, &RING_CP4);
    free_reference(&r);
    /* Llama: RoPE with global offsets; 2 kv heads need no split under ring (Ulysses gathers for cp4) */
    build_reference(&r, &LLAMA);
    run_ring(&r, &RING_CP2);
    run_ring(&r, &RING_CP4);
    run_ring(&r, &RING_LLAMA_TP2XCP2);
    free_reference(&r);
    hp_gpt_config l7 = with_context(LLAMA, 7);
    build_reference(&r, &l7);
    run_ring(&r, &RING_CP2);
    free_reference(&r);
}

/*
 * Ring attention with causal load balancing (strategy.ring_load_balance): the ranks run the graph
 * of the load-balanced order (tokens and targets permuted so rank i holds chunks i and 2n - 1 - i,
 * positions from the permutation: wpe gathered by them, RoPE rotating by them) and match the
 * single-device run in the natural order. Rank 0 now reads every other block (its second chunk is
 * the last), so it receives K and V blocks too; block 0 leaves home as its first chunk only. Uneven: 7 over 2 (blocks 4 + 3: chunks 2, 2, 1, 2),
 * 10 over 4 (blocks 3 + 3 + 3 + 1: chunks 2, 2, 2, 1, 0, 1, 1, 1, one of them empty).
 */
static void test_ring_balanced_matches_single_device(void **state) {
    (void)state;
    reference r;
    const struct {
        const hp_gpt_config *cfg;
        int T;
        const strategy *st;
    } cases[] = {
        {&GPT, 8, &RING_CP2},   {&GPT, 8, &RING_CP4},     {&GPT, 8, &RING_DP2XCP2}, {&GPT, 8, &RING_TP2XCP2},
        {&GPT, 8, &RING_CP2_FSDP}, {&GPT, 7, &RING_CP2},  {&GPT, 7, &RING_DP2XCP2}, {&GPT, 10, &RING_CP4},
        {&GPT, 16, &RING_CP4},  {&LLAMA, 8, &RING_CP2},   {&LLAMA, 8, &RING_CP4},   {&LLAMA, 8, &RING_DP2XCP2},
        {&LLAMA, 8, &RING_LLAMA_TP2XCP2}, {&LLAMA, 7, &RING_CP2}, {&LLAMA, 10, &RING_CP4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hp_gpt_config c = with_context(*cases[i].cfg, cases[i].T);
        const strategy *st = cases[i].st;
        int n = st->dims[st->naxes - 1 - (st == &RING_CP2_FSDP)];
        build_reference_balanced(&r, &c, n);
        counts k = run_ring(&r, st);
        assert_int_equal(k.all_to_all, st == &RING_CP2_FSDP ? 2 : 0);
        if (st != &RING_CP2_FSDP) assert_int_equal(k.all_gather, 0);
        if ((st == &RING_CP2 || st == &RING_CP4) && cases[i].T % (2 * n) == 0) {
            /* even T: rank 0 receives the n - 1 other K and V blocks forward and again backward,
             * n - 2 dK, dV accumulators passing through and its own coming home, which holds only
             * its first chunk (no other rank reads chunk 2n - 1): (6n - 7) blocks per layer */
            int64_t block = (int64_t)BATCH * (cases[i].T / n) * c.width * 4;
            if (c.family == HP_MODEL_FAMILY_LLAMA) block = block / c.heads * c.kv_heads;
            assert_int_equal(k.p2p_bytes, c.layers * (6 * n - 7) * block);
        }
        free_reference(&r);
    }
}

/* 2-D TP on 2 x 2 equals the single device, and each GEMM's collectives stay in one group kind. */
static void test_tp2d_matches_single_device(void **state) {
    (void)state;
    reference r;
    const strategy *cases[2] = {&TP2D, &LLAMA_TP2D};
    for (int i = 0; i < 2; i++) {
        build_reference(&r, i ? &LLAMA : &GPT);
        counts c = run_strategy(&r, cases[i]);
        print_message("  collective steps on activations: tpr %d, tpc %d; on matrices: tpr %d, tpc %d\n",
                      c.act_axis[0], c.act_axis[1], c.weight_axis[0], c.weight_axis[1]);
        /* activations only within row groups (tpc), weights and their gradients only within column groups (tpr) */
        assert_int_equal(c.act_axis[0], 0);
        assert_true(c.act_axis[1] > 0);
        assert_true(c.weight_axis[0] > 0);
        assert_int_equal(c.weight_axis[1], 0);
        free_reference(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_cp_matches_single_device),
        cmocka_unit_test(test_gpt_cp_uneven_sequence),
        cmocka_unit_test(test_llama_cp_matches_single_device),
        cmocka_unit_test(test_tp2d_matches_single_device),
        cmocka_unit_test(test_ring_matches_single_device),
        cmocka_unit_test(test_ring_balanced_matches_single_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
