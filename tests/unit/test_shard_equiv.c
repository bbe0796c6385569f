/*
 * HyperShard's correctness contract: for every strategy, the per-rank programs made by the
 * partitioner compute what the single-device program computes — loss, every gradient (gathered to
 * the full tensor) and the updated parameters — within float-reduction tolerance. Ranks run as
 * threads over the simulated communicator, so this covers 1-D and 2-D meshes, uneven shards and
 * every example strategy without MPI; tests/mpi/ repeats the main ones over real processes.
 */
#include "testutil.h"

#include "hp/compile.h"
#include "hp/mesh.h"
#include "hp/nn.h"
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

typedef struct rule {
    const char *pattern; /* fnmatch over tensor names; first match wins */
    const char *layout;  /* hp_layout_parse text; "" = replicated */
} rule;

typedef struct strategy {
    const char *name;
    int naxes;
    int dims[3];
    const char *axes[3];
    rule rules[16];
} strategy;

/* Megatron tensor parallelism over axis "tp" (column-parallel q, k, v, fc; row-parallel proj). */
#define TP_RULES                                                                                   \
    {"blocks.*.attn.[qkv].weight", "[tp, none]"}, {"blocks.*.attn.[qkv].bias", "[tp]"},           \
        {"blocks.*.mlp.fc.weight", "[tp, none]"}, {"blocks.*.mlp.fc.bias", "[tp]"},                \
        {"blocks.*.attn.proj.weight", "[none, tp]"}, {"blocks.*.mlp.proj.weight", "[none, tp]"},   \
        {"exp_avg*.blocks.*.attn.[qkv].weight", "[tp, none]"},                                     \
        {"exp_avg*.blocks.*.attn.[qkv].bias", "[tp]"}, {"exp_avg*.blocks.*.mlp.fc.weight", "[tp, none]"}, \
        {"exp_avg*.blocks.*.mlp.fc.bias", "[tp]"}, {"exp_avg*.blocks.*.attn.proj.weight", "[none, tp]"},  \
        {"exp_avg*.blocks.*.mlp.proj.weight", "[none, tp]"}

static const strategy STRATEGIES[] = {
    {"dp2", 1, {2}, {"dp"}, {{"tokens", "[dp, none]"}, {"targets", "[dp, none]"}}},
    {"dp4", 1, {4}, {"dp"}, {{"tokens", "[dp, none]"}, {"targets", "[dp, none]"}}},
    {"dp3-uneven", 1, {3}, {"dp"}, {{"tokens", "[dp, none]"}, {"targets", "[dp, none]"}}},
    {"tp2", 1, {2}, {"tp"}, {TP_RULES}},
    {"tp4", 1, {4}, {"tp"}, {TP_RULES}},
    {"dp2xtp2", 2, {2, 2}, {"dp", "tp"}, {{"tokens", "[dp, none]"}, {"targets", "[dp, none]"}, TP_RULES}},
    {"tp2sp", 1, {2}, {"tp"}, {{"tokens", "[none, tp]"}, {"targets", "[none, tp]"}, TP_RULES}},
    {"zero2dp2", 1, {2}, {"dp"},
     {{"tokens", "[dp, none]"}, {"targets", "[dp, none]"}, {"exp_avg*", "[dp]"}}},
    {"fsdp4", 1, {4}, {"dp"}, {{"tokens", "[dp, none]"}, {"targets", "[dp, none]"}, {"*", "[dp]"}}},
    {"fsdp3-uneven", 1, {3}, {"dp"}, {{"tokens", "[dp, none]"}, {"targets", "[dp, none]"}, {"*", "[dp]"}}},
    {"hsdp2x2", 2, {2, 2}, {"dp", "fsdp"},
     {{"tokens", "[[dp, fsdp], none]"}, {"targets", "[[dp, fsdp], none]"}, {"*", "[fsdp]"}}},
};

/* Gradient buckets (the cases above use the default size): tiny ones, several per step, for
 * all-reduce and reduce-scatter, and bucketing off. bucket: bytes, or BUCKETS_OFF. */
#define BUCKETS_OFF (-1)
#define DP_INPUTS {"tokens", "[dp, none]"}, {"targets", "[dp, none]"}

typedef struct bucket_case {
    strategy st;
    int64_t bucket;
} bucket_case;

static const bucket_case BUCKET_CASES[] = {
    {{"dp4-bucket1k", 1, {4}, {"dp"}, {DP_INPUTS}}, 1024},
    {{"dp4-nobucket", 1, {4}, {"dp"}, {DP_INPUTS}}, BUCKETS_OFF},
    {{"dp2xtp2-bkt1k", 2, {2, 2}, {"dp", "tp"}, {DP_INPUTS, TP_RULES}}, 1024},
    {{"zero2dp2-bkt1k", 1, {2}, {"dp"}, {DP_INPUTS, {"exp_avg*", "[dp]"}}}, 1024},
    {{"fsdp4-bucket1k", 1, {4}, {"dp"}, {DP_INPUTS, {"*", "[dp]"}}}, 1024},
    {{"dp3-unev-bkt1k", 1, {3}, {"dp"}, {DP_INPUTS}}, 1024},
    {{"fsdp4-nobucket", 1, {4}, {"dp"}, {DP_INPUTS, {"*", "[dp]"}}}, BUCKETS_OFF},
};

/* The logical step and its single-device results. */
typedef struct reference {
    hp_graph *g;
    hp_gpt gpt;
    hp_train_step ts;
    hp_tid *resolve; /* loss, grad_sq, grads..., params... */
    int n_resolve;
    float **init;    /* per tensor id: initial value of params (NULL otherwise) */
    int32_t *tokens, *targets;
    float **want[STEPS]; /* per step, per resolve entry: the single-device value */
} reference;

static const hp_gpt_config CFG = {.vocab = 32, .context = 8, .layers = 2, .heads = 4, .width = 16, .tied_head = false};
#define BATCH 4

static void fill_inputs(int32_t *tok, int32_t *tgt, int step) {
    for (int i = 0; i < BATCH * CFG.context; i++) {
        tok[i] = (i * 7 + 3 + 5 * step) % CFG.vocab;
        tgt[i] = (i * 5 + 1 + 3 * step) % CFG.vocab;
    }
}

static size_t numel_of(const hp_graph *g, hp_tid t) { return (size_t)hp_shape_numel(&hp_graph_tensor(g, t)->shape); }

/* The model with dropout on (training graph): the masks must follow each element to its rank. */
static const hp_gpt_config CFG_DROPOUT = {.vocab = 32, .context = 8, .layers = 2, .heads = 4, .width = 16,
                                          .tied_head = false, .dropout = 0.25f, .seed = 11};

static void build_reference(reference *r, const hp_gpt_config *cfg) {
    memset(r, 0, sizeof *r);
    r->g = hp_graph_new();
    assert_ok(hp_gpt_build(r->g, cfg, BATCH, CFG.context, true, &r->gpt));
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
    int nt = hp_graph_n_tensors(r->g);
    r->init = calloc((size_t)nt, sizeof *r->init);
    for (int i = 0; i < n; i++) {
        hp_tid p = r->ts.params[i];
        r->init[p] = malloc(numel_of(r->g, p) * sizeof(float));
        assert_ok(hp_gpt_init_param(cfg, hp_graph_tensor(r->g, p)->name, 5, 0, (int64_t)numel_of(r->g, p), r->init[p]));
    }
    hp_program *prog;
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = r->resolve;
    po.n_keep = 2 + n; /* params are persistent already */
    assert_ok(hp_program_new(r->g, &po, &prog));
    for (int i = 0; i < n; i++)
        memcpy(hp_program_data(prog, r->ts.params[i]), r->init[r->ts.params[i]], numel_of(r->g, r->ts.params[i]) * 4);
    for (int s = 0; s < STEPS; s++) {
        fill_inputs(hp_program_data(prog, r->gpt.tokens), hp_program_data(prog, r->gpt.targets), s);
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

static void free_reference(reference *r) {
    for (int t = 0; t < hp_graph_n_tensors(r->g); t++) free(r->init[t]);
    free(r->init);
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < r->n_resolve; k++) free(r->want[s][k]);
        free(r->want[s]);
    }
    free(r->resolve);
    hp_graph_free(r->g);
}

typedef struct job {
    const reference *ref;
    const strategy *st;
    int64_t bucket;     /* 0: the default bucket size; BUCKETS_OFF; else bytes */
    pthread_mutex_t mu;
    char failure[1024]; /* first mismatch or error, "" if none */
    int64_t bytes;      /* rank 0: bytes per step */
    int n_coll;
    int n_buckets;      /* rank 0 */
} job;

static void record(job *j, const char *fmt, ...) {
    pthread_mutex_lock(&j->mu);
    if (!j->failure[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->failure, sizeof j->failure, fmt, ap);
        va_end(ap);
        /* printed at once: the other ranks may now block in a collective and never return */
        fprintf(stderr, "FAILURE: %s\n", j->failure);
    }
    pthread_mutex_unlock(&j->mu);
}

static hp_status leaf_layouts(const job *j, hp_mesh *mesh, hp_layout *lay) {
    const hp_graph *g = j->ref->g;
    for (int t = 0; t < hp_graph_n_tensors(g); t++) {
        lay[t].ndim = -1;
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->producer >= 0 || !x->name) continue;
        for (const rule *r = j->st->rules; r->pattern; r++) {
            if (fnmatch(r->pattern, x->name, 0) != 0) continue;
            /* a short tensor_map applies to the leading dims */
            char text[128];
            snprintf(text, sizeof text, "%s", r->layout);
            hp_layout l;
            HP_CHECK(hp_layout_parse(text, mesh, &l));
            if (l.ndim > x->shape.ndim) break;
            hp_layout full;
            hp_layout_init(&full, x->shape.ndim);
            for (int d = 0; d < l.ndim; d++) {
                full.nmap[d] = l.nmap[d];
                memcpy(full.map[d], l.map[d], sizeof l.map[d]);
            }
            lay[t] = full;
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

/* The compile driver's annotate callback: the strategy's rules. */
static hp_status annotate(void *user, const hp_graph *g, const hp_mesh *mesh, hp_layout *lay) {
    (void)g;
    return leaf_layouts(user, (hp_mesh *)mesh, lay);
}

static hp_status rank_main(hp_comm *comm, int rank, void *user) {
    job *j = user;
    const reference *r = j->ref;
    hp_mesh *mesh = NULL;
    hp_compiled *c = NULL;
    hp_status st;
    HP_CHECK_GOTO(hp_mesh_new(j->st->naxes, j->st->dims, j->st->axes, NULL, 0, &mesh), st, out);
    /* the step graph is built: the driver runs shard and memplan (the mesh attached to comm) */
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = r->resolve[0];
    o.keep = r->resolve + 1;
    o.n_keep = r->n_resolve - 1;
    o.mesh = mesh;
    o.annotate = annotate;
    o.annotate_user = j;
    o.comm = comm;
    if (j->bucket) o.bucket_size = j->bucket == BUCKETS_OFF ? 0 : j->bucket;
    HP_CHECK_GOTO(hp_compile(r->g, &o, &c), st, out);
    hp_partition *part = hp_compiled_partition(c);
    hp_program *prog = hp_compiled_program(c);
    int idx = hp_mesh_my_index(mesh);
    for (int i = 0; i < r->ts.n_params; i++) {
        hp_tid p = r->ts.params[i];
        slice_global(mesh, hp_partition_layout(part, p), &hp_graph_tensor(r->g, p)->shape, idx, r->init[p],
                     hp_program_data(prog, hp_partition_local(part, p)), 4);
    }
    int32_t tok[BATCH * 8], tgt[BATCH * 8];
    for (int s = 0; s < STEPS; s++) {
        fill_inputs(tok, tgt, s);
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
                /* A parameter whose gradient is zero up to rounding (attn.k.bias: softmax ignores a
                 * per-row constant) gets an AdamW step of +-lr from noise: nothing to compare. */
                const float *gw = r->want[s][k - r->ts.n_params];
                float gmax = 0;
                for (size_t e = 0; e < ne; e++) gmax = fmaxf(gmax, fabsf(gw[e]));
                if (gmax < 1e-6f) continue;
            }
            /* per element too: an updated parameter whose own first gradient is below 1e-6 took AdamW's
             * first step of about lr * g / (|g| + eps), decided by rounding (seen with MoE under tp4:
             * a gradient of 3e-8 moved by 1e-9 of reduction order changed the update by 1.5e-5) */
            const float *g1 = k >= 2 + r->ts.n_params ? r->want[0][k - r->ts.n_params] : NULL;
            for (size_t e = 0; e < ne; e++) {
                if (g1 && fabsf(g1[e]) < 1e-6f) continue; /* from then on the element carries that step */
                double d = fabs((double)got[e] - want[e]), tol = 1e-5 * fabs(want[e]) + 2e-6;
                if (k == 1) tol = 1e-4 * fabs(want[e]) + 1e-6; /* the squared norm sums many terms */
                /* Updated parameters: AdamW divides by sqrt(v), which turns a 1e-9 difference in a
                 * near-zero gradient into ~1e-4 of the learning rate; hold them to 1e-3 of lr. */
                if (k >= 2 + r->ts.n_params) tol = 1e-5 * fabs(want[e]) + 1e-5;
                if (!(d <= tol)) {
                    const hp_tensor *x = hp_graph_tensor(r->g, r->resolve[k]);
                    record(j, "%s rank %d step %d: %s[%zu] = %.9g, single device %.9g", j->st->name, rank, s + 1,
                           x->name ? x->name : "?", e, (double)got[e], (double)want[e]);
                    break;
                }
            }
        }
    }
    if (rank == 0) {
        j->bytes = hp_partition_bytes(part);
        j->n_coll = hp_partition_n_collectives(part);
        j->n_buckets = hp_partition_n_buckets(part);
    }
out:
    if (st != HP_STATUS_OK) record(j, "%s rank %d: %s (%s)", j->st->name, rank, hp_error_message(), hp_status_str(st));
    hp_compiled_free(c);
    hp_mesh_free(mesh);
    return st;
}

static void run_strategy(const reference *r, const strategy *st, int64_t bucket) {
    job j;
    memset(&j, 0, sizeof j);
    j.ref = r;
    j.st = st;
    j.bucket = bucket;
    pthread_mutex_init(&j.mu, NULL);
    int n = 1;
    for (int a = 0; a < st->naxes; a++) n *= st->dims[a];
    hp_status s = hp_comm_sim_run(n, rank_main, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.failure[0]) fail_msg("%s", j.failure);
    if (s != HP_STATUS_OK) fail_msg("%s: %s", st->name, hp_error_message());
    print_message("%-14s %d ranks: %3d redistributions, %8lld bytes per rank per step (with the test's gathers), %d "
                  "gradient buckets\n", st->name, n, j.n_coll, (long long)j.bytes, j.n_buckets);
    /* the bucketed cases run what they claim to */
    if (bucket == BUCKETS_OFF && j.n_buckets != 0) fail_msg("%s: %d buckets with bucketing off", st->name, j.n_buckets);
    if (bucket > 0 && j.n_buckets < 2) fail_msg("%s: %d bucket(s), expected several", st->name, j.n_buckets);
}

static void test_every_strategy_matches_single_device(void **state) {
    (void)state;
    reference r;
    build_reference(&r, &CFG);
    for (size_t i = 0; i < sizeof STRATEGIES / sizeof STRATEGIES[0]; i++) run_strategy(&r, &STRATEGIES[i], 0);
    free_reference(&r);
}

static void test_gradient_buckets_match_single_device(void **state) {
    (void)state;
    reference r;
    build_reference(&r, &CFG);
    for (size_t i = 0; i < sizeof BUCKET_CASES / sizeof BUCKET_CASES[0]; i++)
        run_strategy(&r, &BUCKET_CASES[i].st, BUCKET_CASES[i].bucket);
    free_reference(&r);
}

static int count_op(const hp_graph *g, hp_op op) {
    int n = 0;
    for (int i = 0; i < hp_graph_n_nodes(g); i++) n += hp_graph_node(g, i)->op == op;
    return n;
}

/* Dropout keyed by the global element index: data parallel (batch split, uneven too), tensor
 * parallel (the projections' outputs are pending sums when dropped), sequence parallel (dim 1
 * split), FSDP and 2-D meshes all drop exactly the single-device elements, at every step. */
static void test_dropout_matches_single_device(void **state) {
    (void)state;
    reference plain, r;
    build_reference(&plain, &CFG);
    build_reference(&r, &CFG_DROPOUT);
    /* 3 sites per forward (embedding sum, 2 per block) and as many in the backward */
    assert_int_equal(count_op(r.g, HP_OP_DROPOUT), 2 * (1 + 2 * CFG.layers));
    assert_int_equal(count_op(plain.g, HP_OP_DROPOUT), 0);
    /* dropout changes the loss, and differently at each step (a fresh mask) */
    for (int s = 0; s < STEPS; s++)
        if (fabsf(r.want[s][0][0] - plain.want[s][0][0]) < 1e-4f)
            fail_msg("step %d: loss with dropout %.6g equals the loss without %.6g", s + 1, (double)r.want[s][0][0],
                     (double)plain.want[s][0][0]);
    static const char *const names[] = {"dp2", "dp3-uneven", "tp2", "dp2xtp2", "tp2sp", "fsdp4", "fsdp3-uneven"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const strategy *st = NULL;
        for (size_t i = 0; i < sizeof STRATEGIES / sizeof STRATEGIES[0]; i++)
            if (strcmp(STRATEGIES[i].name, names[k]) == 0) st = &STRATEGIES[i];
        assert_non_null(st);
        run_strategy(&r, st, 0);
    }
    free_reference(&r);
    free_reference(&plain);
}

/* The Llama family (RMSNorm, RoPE, grouped-query attention with 4 heads over 2 kv heads, SwiGLU,
 * Hugging Face names): Megatron TP over heads (tp2: kv heads split too; tp4: 2 kv heads do not
 * split 4 ways, so attention runs replicated), sequence parallelism, DP, ZeRO, FSDP (uneven too)
 * and 2-D meshes equal the single device. */
static const hp_gpt_config LLAMA = {.family = HP_MODEL_FAMILY_LLAMA, .vocab = 32, .context = 8, .layers = 2,
                                    .heads = 4, .kv_heads = 2, .width = 16, .ffn_width = 24, .tied_head = false};
#define LLAMA_TP_RULES                                                                             \
    {"model.layers.*.self_attn.[qkv]_proj.weight", "[tp, none]"},                                 \
        {"model.layers.*.mlp.gate_proj.weight", "[tp, none]"}, {"model.layers.*.mlp.up_proj.weight", "[tp, none]"}, \
        {"model.layers.*.self_attn.o_proj.weight", "[none, tp]"},                                 \
        {"model.layers.*.mlp.down_proj.weight", "[none, tp]"}

static const strategy LLAMA_STRATEGIES[] = {
    {"llama-dp2", 1, {2}, {"dp"}, {DP_INPUTS}},
    {"llama-tp2", 1, {2}, {"tp"}, {LLAMA_TP_RULES}},
    {"llama-tp4", 1, {4}, {"tp"}, {LLAMA_TP_RULES}},
    {"llama-dp2xtp2", 2, {2, 2}, {"dp", "tp"}, {DP_INPUTS, LLAMA_TP_RULES}},
    {"llama-tp2sp", 1, {2}, {"tp"}, {{"tokens", "[none, tp]"}, {"targets", "[none, tp]"}, LLAMA_TP_RULES}},
    {"llama-zero2dp2", 1, {2}, {"dp"}, {DP_INPUTS, {"exp_avg*", "[dp]"}}},
    {"llama-fsdp4", 1, {4}, {"dp"}, {DP_INPUTS, {"*", "[dp]"}}},
    {"llama-fsdp3-uneven", 1, {3}, {"dp"}, {DP_INPUTS, {"*", "[dp]"}}},
    {"llama-hsdp2x2", 2, {2, 2}, {"dp", "fsdp"},
     {{"tokens", "[[dp, fsdp], none]"}, {"targets", "[[dp, fsdp], none]"}, {"*", "[fsdp]"}}},
};

static void test_llama_every_strategy_matches_single_device(void **state) {
    (void)state;
    reference r;
    build_reference(&r, &LLAMA);
    assert_int_equal(count_op(r.g, HP_OP_ROPE), 2 * 2 * LLAMA.layers); /* q and k, forward and backward */
    for (size_t i = 0; i < sizeof LLAMA_STRATEGIES / sizeof LLAMA_STRATEGIES[0]; i++)
        run_strategy(&r, &LLAMA_STRATEGIES[i], 0);
    free_reference(&r);
}

/* Mixture-of-Experts MLPs (hp/moe.h) under every strategy: each rank routes and dispatches its own
 * tokens (an uneven token split falls back to replicated routing), the per-expert loads the
 * balancing loss and the bias update read are all-reduced, the expert weights are gathered (FSDP)
 * and their gradients summed. The compared parameters include the sigmoid_bias router's bias after
 * its in-place update. */
static void test_moe_matches_single_device(void **state) {
    (void)state;
    hp_gpt_config soft = CFG, sig = CFG;
    soft.moe = HP_MOE_CONFIG_INIT;
    soft.moe.experts = 4;
    soft.moe.top_k = 2;
    soft.moe.expert_width = 8;
    soft.moe.shared_experts = 1;
    soft.moe.balance_loss = 0.05f;
    soft.moe.training = true;
    sig.moe = soft.moe;
    sig.moe.top_k = 1;
    sig.moe.shared_experts = 0;
    sig.moe.router = HP_MOE_ROUTER_SIGMOID_BIAS;
    sig.moe.bias_update_rate = 0.01f;
    sig.moe.every = 0;
    sig.moe.n_layers = 1;
    sig.moe.layers[0] = 1;
    const hp_gpt_config *cfgs[2] = {&soft, &sig};
    for (int v = 0; v < 2; v++) {
        reference r;
        build_reference(&r, cfgs[v]);
        assert_int_equal(count_op(r.g, HP_OP_MOE_DISPATCH), v == 0 ? CFG.layers : 1);
        for (size_t i = 0; i < sizeof STRATEGIES / sizeof STRATEGIES[0]; i++) run_strategy(&r, &STRATEGIES[i], 0);
        free_reference(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_strategy_matches_single_device),
        cmocka_unit_test(test_gradient_buckets_match_single_device),
        cmocka_unit_test(test_dropout_matches_single_device),
        cmocka_unit_test(test_llama_every_strategy_matches_single_device),
        cmocka_unit_test(test_moe_matches_single_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
