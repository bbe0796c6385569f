/*
 * Gradient bucketing in the partitioned graph (hp/shard.h): the number of collectives before and
 * after, each bucket issued right after its last gradient's producer, bucket sizes within the cap,
 * bytes unchanged, the same collective sequence on every rank, and bucketing off. (That bucketed
 * programs compute what the single device computes is tests/unit/test_shard_equiv.c and
 * tests/mpi/test_train_equiv.c.)
 */
#include "testutil.h"

#include "hp/config.h"
#include "hp/nn.h"
#include "hp/shard.h"
#include "hp/strategy.h"
#include "hp/train.h"
#include "hp/yaml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hp_gpt_config CFG = {.vocab = 32, .context = 8, .layers = 2, .heads = 4, .width = 16, .tied_head = false};
#define BATCH 6

typedef struct setup {
    hp_graph *g;
    hp_gpt gpt;
    hp_train_step ts;
    hp_strategy *s;
    hp_layout *lay;
} setup;

/* The GPT training step and the leaf layouts of a `strategy:` section given as YAML. */
static void build(setup *x, const char *strategy_yaml) {
    memset(x, 0, sizeof *x);
    x->g = hp_graph_new();
    assert_ok(hp_gpt_build(x->g, &CFG, BATCH, CFG.context, true, &x->gpt));
    hp_optim_config o = {.lr = 1e-2, .min_lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                         .grad_clip = 1.0};
    assert_ok(hp_train_step_build(x->g, x->gpt.loss, &o, &x->ts));
    hp_run_config cfg;
    assert_ok(hp_run_config_load_string(strategy_yaml, strlen(strategy_yaml), "test.yaml", &cfg));
    assert_ok(hp_strategy_new(&cfg.strategy, 0, &x->s));
    hp_run_config_free(&cfg);
    x->lay = calloc((size_t)hp_graph_n_tensors(x->g), sizeof *x->lay);
    assert_ok(hp_strategy_annotate(x->s, x->g, x->lay, NULL));
}

static void free_setup(setup *x) {
    free(x->lay);
    hp_strategy_free(x->s);
    hp_graph_free(x->g);
}

static hp_partition *partition(setup *x, int index, int64_t bucket_size) {
    hp_partition_opts o = HP_PARTITION_OPTS_DEFAULT;
    o.index = index;
    o.bucket_size = bucket_size;
    hp_tid resolve[2] = {x->ts.loss, x->ts.grad_sq};
    hp_partition *p;
    assert_ok(hp_partition_new_opts(x->g, hp_strategy_mesh(x->s), x->lay, resolve, 2, &o, &p));
    return p;
}

static bool communicates(const hp_redistribute_plan *p) {
    for (int k = 0; k < p->nsteps; k++)
        if (p->steps[k].kind != HP_REDIST_LOCAL_SLICE && p->steps[k].kind != HP_REDIST_LOCAL_PARTIAL) return true;
    return false;
}

/* Collectives with a communicating step, from the records. */
static int n_communicating(const hp_partition *p) {
    int n = 0;
    for (int i = 0; i < hp_partition_n_collectives(p); i++) n += communicates(&hp_partition_collective(p, i)->plan);
    return n;
}

/* Collectives of `kind` (any step), from the records. */
static int n_kind(const hp_partition *p, hp_redist_kind kind) {
    int n = 0;
    for (int i = 0; i < hp_partition_n_collectives(p); i++) {
        const hp_redistribute_plan *pl = &hp_partition_collective(p, i)->plan;
        for (int k = 0; k < pl->nsteps; k++) n += pl->steps[k].kind == kind;
    }
    return n;
}

/*
 * Every bucket: at least two gradients, at most bucket_size bytes (the first of a group at most
 * HP_BUCKET_FIRST_SIZE), one step of its kind, an async REDISTRIBUTE placed right after its last
 * gradient's producer with only the bucket's RESHAPE views and CONCATs in between, and read only
 * after it. Buckets of one group are issued in production order.
 */
static void check_buckets(const hp_partition *p, int64_t bucket_size) {
    const hp_graph *g = hp_partition_graph(p);
    int prev_last[HP_REDIST_KIND_COUNT];
    bool seen[HP_REDIST_KIND_COUNT] = {0};
    for (int b = 0; b < hp_partition_n_buckets(p); b++) {
        const hp_bucket_info *bi = hp_partition_bucket(p, b);
        hp_redist_kind kind = bi->kind;
        assert_true(kind == HP_REDIST_ALL_REDUCE || kind == HP_REDIST_REDUCE_SCATTER);
        assert_true(bi->n_tensors >= 2);
        int64_t cap = !seen[kind] && bucket_size > HP_BUCKET_FIRST_SIZE ? HP_BUCKET_FIRST_SIZE : bucket_size;
        if (bi->bytes > cap) fail_msg("bucket %d packs %lld bytes, more than %lld", b, (long long)bi->bytes, (long long)cap);
        int64_t sum = 0, last = -1;
        for (int k = 0; k < bi->n_tensors; k++) {
            const hp_tensor *t = hp_graph_tensor(g, bi->tensors[k]);
            sum += hp_shape_numel(&t->shape) * (int64_t)hp_dtype_size(t->dtype);
            assert_true(t->producer >= 0);
            assert_true(hp_graph_node(g, t->producer)->flags & HP_NODE_FLAG_BACKWARD);
            if (t->producer > last) last = t->producer;
        }
        assert_int_equal(sum, bi->bytes);
        const hp_collective_info *ci = hp_partition_collective(p, bi->collective);
        assert_int_equal(ci->local_node, bi->local_node);
        assert_int_equal(ci->plan.nsteps, 1);
        assert_int_equal(ci->plan.steps[0].kind, kind);
        const hp_node *r = hp_graph_node(g, bi->local_node);
        assert_int_equal(r->op, HP_OP_REDISTRIBUTE);
        assert_true(r->flags & HP_NODE_FLAG_ASYNC);
        /* the issue point: right after the last gradient's producer (other collectives issued at the
         * same point may come first) */
        assert_true(last < bi->local_node);
        int concats = 0;
        for (int i = (int)last + 1; i < bi->local_node; i++) {
            const hp_node *n = hp_graph_node(g, i);
            hp_op op = n->op;
            if (op == HP_OP_REDISTRIBUTE && (n->flags & HP_NODE_FLAG_ASYNC)) continue;
            if (op != HP_OP_RESHAPE && op != HP_OP_CONCAT)
                fail_msg("bucket %d: node %d between its last gradient's producer (node %lld) and its collective (node %d) "
                         "is a %s", b, i, (long long)last, bi->local_node, hp_op_name(op));
            concats += op == HP_OP_CONCAT;
        }
        assert_true(concats >= 1);
        assert_int_equal(hp_graph_node(g, hp_graph_tensor(g, r->in[0])->producer)->op, HP_OP_CONCAT);
        /* nothing reads the reduced bucket before it exists (the wait is at the first SLICE) */
        for (int i = 0; i < hp_graph_n_nodes(g); i++) {
            const hp_node *n = hp_graph_node(g, i);
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] == r->out[0]) {
                    assert_true(i > bi->local_node);
                    assert_int_equal(n->op, HP_OP_SLICE);
                }
        }
        if (seen[kind]) assert_true(last >= prev_last[kind]);
        prev_last[kind] = (int)last;
        seen[kind] = true;
    }
}

/* Kind, axis and plan shape of each communicating REDISTRIBUTE, in program order. */
static int collective_sequence(const hp_partition *p, int64_t *seq, int cap) {
    const hp_graph *g = hp_partition_graph(p);
    int n = 0;
    for (int i = 0; i < hp_graph_n_nodes(g); i++) {
        const hp_node *nd = hp_graph_node(g, i);
        if (nd->op != HP_OP_REDISTRIBUTE || !(nd->flags & HP_NODE_FLAG_ASYNC)) continue;
        for (int c = 0; c < hp_partition_n_collectives(p); c++) {
            const hp_collective_info *ci = hp_partition_collective(p, c);
            if (ci->local_node != i) continue;
            assert_true(n + 1 < cap);
            seq[n++] = ci->plan.steps[0].kind * 1000 + ci->plan.steps[0].axis;
            seq[n++] = hp_shape_numel(&ci->plan.shape);
        }
    }
    return n;
}

/* Every mesh index issues the same collectives in the same order. */
static void check_rank_independent(setup *x, int64_t bucket_size) {
    static int64_t want[4096], got[4096];
    hp_partition *p0 = partition(x, 0, bucket_size);
    int n0 = collective_sequence(p0, want, 4096);
    for (int i = 1; i < hp_mesh_size(hp_strategy_mesh(x->s)); i++) {
        hp_partition *p = partition(x, i, bucket_size);
        int n = collective_sequence(p, got, 4096);
        assert_int_equal(n, n0);
        for (int k = 0; k < n; k++)
            if (got[k] != want[k]) fail_msg("mesh index %d: collective %d differs from index 0's", i, k / 2);
        assert_int_equal(hp_partition_n_buckets(p), hp_partition_n_buckets(p0));
        hp_partition_free(p);
    }
    hp_partition_free(p0);
}

/* Before/after for one strategy: fewer collectives, the same bytes. */
static void check_strategy(const char *yaml, int64_t bucket_size, hp_redist_kind kind, const char *name) {
    int members_of[HP_REDIST_KIND_COUNT] = {0}, buckets_of[HP_REDIST_KIND_COUNT] = {0};
    setup x;
    build(&x, yaml);
    hp_partition *off = partition(&x, 0, 0), *on = partition(&x, 0, bucket_size);
    assert_int_equal(hp_partition_n_buckets(off), 0);
    int members = 0, nb = hp_partition_n_buckets(on);
    for (int b = 0; b < nb; b++) {
        const hp_bucket_info *bi = hp_partition_bucket(on, b);
        members += bi->n_tensors;
        members_of[bi->kind] += bi->n_tensors;
        buckets_of[bi->kind]++;
    }
    if (buckets_of[kind] < 2)
        fail_msg("%s: %d %s bucket(s) with bucket_size %lld, expected several", name, buckets_of[kind],
                 hp_redist_kind_name(kind), (long long)bucket_size);
    assert_int_equal(n_communicating(on), n_communicating(off) - members + nb);
    for (int k = 0; k < HP_REDIST_KIND_COUNT; k++)
        assert_int_equal(n_kind(on, (hp_redist_kind)k), n_kind(off, (hp_redist_kind)k) - members_of[k] + buckets_of[k]);
    /* no padding: the same bytes up to the rounding of each collective's ring-algorithm share */
    int64_t d = hp_partition_bytes(on) - hp_partition_bytes(off);
    if (d < 0 || d > members) fail_msg("%s: %lld bytes bucketed vs %lld not", name, (long long)hp_partition_bytes(on),
                                       (long long)hp_partition_bytes(off));
    check_buckets(on, bucket_size);
    print_message("%-8s bucket_size %6lld: %3d collectives -> %3d (%d buckets of %d gradients), %lld -> %lld bytes\n", name,
                  (long long)bucket_size, n_communicating(off), n_communicating(on), nb, members,
                  (long long)hp_partition_bytes(off), (long long)hp_partition_bytes(on));
    hp_partition_free(off);
    hp_partition_free(on);
    check_rank_independent(&x, bucket_size);
    free_setup(&x);
}

#define DP4 "strategy:\n  mesh: {device_matrix: [4], alias_name: [dp]}\n  inputs: {tokens: [dp, none], targets: [dp, none]}\n"

static void test_dp_all_reduce(void **state) {
    (void)state;
    check_strategy(DP4, 1024, HP_REDIST_ALL_REDUCE, "dp4");
    check_strategy(DP4, 4096, HP_REDIST_ALL_REDUCE, "dp4");
}

static void test_dp_x_tp(void **state) {
    (void)state;
    check_strategy("strategy:\n  mesh: {device_matrix: [2, 2], alias_name: [dp, tp]}\n"
                   "  inputs: {tokens: [dp, none], targets: [dp, none]}\n"
                   "  params:\n    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
                   "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}\n"
                   "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
                   "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"
                   "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
                   "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n",
                   1024, HP_REDIST_ALL_REDUCE, "dp2xtp2");
}

static void test_zero_and_fsdp_reduce_scatter(void **state) {
    (void)state;
    check_strategy(DP4 "  optimizer: {shard: [dp]}\n", 1024, HP_REDIST_REDUCE_SCATTER, "zero2dp4");
    check_strategy(DP4 "  params:\n    - {match: \"*\", tensor_map: [dp]}\n", 1024, HP_REDIST_REDUCE_SCATTER, "fsdp4");
}

/* Uneven shards (vocab 32 over 3 ranks, width 16 over 3) keep their own collectives; the even ones
 * are still bucketed and the sequence is the same on every rank. */
static void test_uneven_shards_skipped(void **state) {
    (void)state;
    setup x;
    build(&x, "strategy:\n  mesh: {device_matrix: [3], alias_name: [dp]}\n"
              "  inputs: {tokens: [dp, none], targets: [dp, none]}\n  params:\n    - {match: \"*\", tensor_map: [dp]}\n");
    hp_partition *p = partition(&x, 0, 1024);
    const hp_graph *g = hp_partition_graph(p);
    for (int b = 0; b < hp_partition_n_buckets(p); b++) {
        const hp_bucket_info *bi = hp_partition_bucket(p, b);
        for (int k = 0; k < bi->n_tensors; k++) {
            const hp_tensor *t = hp_graph_tensor(g, bi->tensors[k]);
            if (t->shape.dim[0] % 3 != 0) fail_msg("bucket %d packs a gradient of %lld rows over 3 ranks", b,
                                                  (long long)t->shape.dim[0]);
        }
    }
    assert_true(n_kind(p, HP_REDIST_REDUCE_SCATTER) + n_kind(p, HP_REDIST_ALL_TO_ALLV) > 0);
    hp_partition_free(p);
    check_rank_independent(&x, 1024);
    free_setup(&x);
}

/* bucket_size 0 is the graph without bucketing: one collective per gradient; a negative size is an error. */
static void test_off_and_errors(void **state) {
    (void)state;
    setup x;
    build(&x, DP4);
    hp_partition *off = partition(&x, 0, 0), *def = partition(&x, 0, HP_BUCKET_SIZE_DEFAULT);
    int grads = 0;
    for (int i = 0; i < hp_partition_n_collectives(off); i++)
        grads += !strncmp(hp_partition_collective(off, i)->tensor, "grad.", 5);
    assert_int_equal(grads, x.ts.n_params);
    assert_int_equal(hp_partition_n_buckets(off), 0);
    /* the default: this small model fits in DDP's 1 MiB first bucket */
    assert_int_equal(hp_partition_n_buckets(def), 1);
    assert_int_equal(hp_partition_bucket(def, 0)->n_tensors, x.ts.n_params);
    assert_int_equal(n_communicating(def), n_communicating(off) - x.ts.n_params + 1);
    hp_partition_free(off);
    hp_partition_free(def);
    hp_partition_opts o = HP_PARTITION_OPTS_DEFAULT;
    o.index = 0;
    o.bucket_size = -1;
    hp_partition *p = (hp_partition *)1;
    assert_int_equal(hp_partition_new_opts(x.g, hp_strategy_mesh(x.s), x.lay, &x.ts.loss, 1, &o, &p),
                     HP_STATUS_INVALID_ARGUMENT);
    assert_null(p);
    hp_test_assert_error_contains("bucket_size -1");
    free_setup(&x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_all_reduce),
        cmocka_unit_test(test_dp_x_tp),
        cmocka_unit_test(test_zero_and_fsdp_reduce_scatter),
        cmocka_unit_test(test_uneven_shards_skipped),
        cmocka_unit_test(test_off_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

