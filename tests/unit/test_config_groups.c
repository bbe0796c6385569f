/*
 * HyperMPMD groups config (`groups:` and `pipeline:`, include/hp/config.h): good configs (pp2,
 * uneven layers, 3 stages on 1, 2 and 1 ranks, auto split, interleaved and V placements), the
 * placement of each rank, the world-size check, the round trip through YAML and JSON, every
 * validation error with the group and line it names, and the CLI (hp check accepts, hp train stops).
 */
#include "testutil.h"

#include "hp/compile.h"
#include "hp/config.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[64];
static char g_path[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/hp_test_groups_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_path, sizeof g_path, "%s/run.yaml", g_dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    rmdir(g_dir);
    return 0;
}

static void write_file(const char *text) {
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void load_ok(const char *text, hp_run_config *cfg) {
    write_file(text);
    hp_status st = hp_run_config_load(g_path, cfg);
    if (st != HP_STATUS_OK) fail_msg("loading:\n%s\ngave %s: %s", text, hp_status_str(st), hp_error_message());
}

/* Loading `text` fails with HP_STATUS_CONFIG naming "file:line:" and each non-NULL needle. */
static void expect_bad(const char *text, int line, const char *needle1, const char *needle2) {
    write_file(text);
    hp_run_config cfg;
    hp_status st = hp_run_config_load(g_path, &cfg);
    if (st != HP_STATUS_CONFIG)
        fail_msg("loading:\n%s\ngave %s (%s), expected a config error", text, hp_status_str(st), hp_error_message());
    char where[200];
    snprintf(where, sizeof where, "%s:%d:", g_path, line);
    hp_test_assert_error_contains(where);
    if (needle1) hp_test_assert_error_contains(needle1);
    if (needle2) hp_test_assert_error_contains(needle2);
    assert_false(cfg.groups.present);
    assert_null(cfg.arena);
}

/* The head of every config below: 4 layers, batch 8. */
#define HEAD "model: {context: 16, layers: 4, heads: 2, width: 16}\ntrain: {batch: 8}\n"
#define PP2 HEAD "pipeline: {schedule: 1f1b, micro_batches: 4}\n"

static void expect_place(const hp_run_config *c, int rank, int group, int stage, int group_rank, int first, int last,
                         bool emb, bool head) {
    hp_group_placement p;
    assert_ok(hp_groups_config_place(&c->groups, rank, &p));
    if (p.group != group || p.stage != stage || p.group_rank != group_rank || p.first != first || p.last != last ||
        p.embedding != emb || p.head != head)
        fail_msg("rank %d: group %d stage %d group_rank %d blocks [%d, %d) embedding %d head %d; expected %d %d %d [%d, "
                 "%d) %d %d", rank, p.group, p.stage, p.group_rank, p.first, p.last, p.embedding, p.head, group, stage,
                 group_rank, first, last, emb, head);
}

static void test_pp2(void **state) {
    (void)state;
    hp_run_config c;
    load_ok(PP2 "groups:\n"
                "  first:\n    kind: stage\n    ranks: [0]\n    module: [embedding, blocks.0-1]\n    memory_budget: 2GiB\n"
                "  second:\n    ranks: 1\n    module: [blocks.2-3, head]\n", &c);
    assert_true(c.groups.present);
    assert_true(c.pipeline.present);
    assert_int_equal(c.pipeline.schedule, HP_PIPELINE_SCHEDULE_1F1B);
    assert_int_equal(c.pipeline.micro_batches, 4);
    assert_int_equal(c.pipeline.chunks, 1);
    assert_false(c.pipeline.split_auto);
    assert_int_equal(c.groups.n_groups, 2);
    assert_int_equal(c.groups.n_stages, 2);
    assert_int_equal(c.groups.n_ranks, 2);
    const hp_group_config *g0 = &c.groups.groups[0], *g1 = &c.groups.groups[1];
    assert_string_equal(g0->name, "first");
    assert_string_equal(g1->name, "second");
    assert_int_equal(g0->kind, HP_GROUP_KIND_STAGE);
    assert_int_equal(g0->memory_budget, (size_t)2 << 30);
    assert_int_equal(g0->memory_budget_line, 9);
    assert_int_equal(g1->ranks[0], 1); /* a count: the next rank */
    assert_int_equal(g1->ranks_line, 11);
    assert_int_equal(g1->module_line, 12);
    assert_false(g0->strategy.present);
    assert_int_equal(g1->chunks[0].virtual_stage, 1);
    expect_place(&c, 0, 0, 0, 0, 0, 2, true, false);
    expect_place(&c, 1, 1, 1, 0, 2, 4, false, true);
    hp_group_placement p;
    assert_int_equal(hp_groups_config_place(&c.groups, 2, &p), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("rank 2 is in no group");
    /* The world size. */
    assert_ok(hp_groups_config_check_world(&c.groups, 2));
    assert_int_equal(hp_groups_config_check_world(&c.groups, 3), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("groups: the job runs on 3 ranks but the groups take 2: rank 2 is in no group");
    assert_int_equal(hp_groups_config_check_world(&c.groups, 5), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("ranks 2-4 are in no group");
    assert_int_equal(hp_groups_config_check_world(&c.groups, 1), HP_STATUS_CONFIG);
    char where[200];
    snprintf(where, sizeof where, "%s:11:", g_path);
    hp_test_assert_error_contains(where);
    hp_test_assert_error_contains("groups.second.ranks: rank 1 is out of range: the job runs on 1 rank");
    assert_ok(hp_run_config_validate(&c));
    /* The trainer runs it as a pipeline (on one process: the world-size check stops it); the
     * compile driver's GPT-from-config convenience refuses it (the pipeline is not a pass). */
    hp_trainer *t = NULL;
    assert_int_equal(hp_trainer_new(&c, &t), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("is out of range: the job runs on 1 rank");
    assert_null(t);
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.train = true;
    o.plan_only = true;
    o.plan_world_size = 2;
    hp_compiled *comp = NULL;
    assert_int_equal(hp_compile_run(&c, &o, &comp), HP_STATUS_UNSUPPORTED);
    hp_test_assert_error_contains("run them with hp_trainer_new");
    hp_run_config_free(&c);
    assert_false(c.groups.present);
    hp_run_config_free(&c);
}

static void test_uneven_and_unequal(void **state) {
    (void)state;
    hp_run_config c;
    /* 5 layers on 2 stages. */
    load_ok("model: {context: 16, layers: 5, heads: 2, width: 16}\ntrain: {batch: 6}\n"
            "pipeline: {schedule: gpipe, micro_batches: 3}\n"
            "groups:\n  a: {ranks: 1, module: [embedding, blocks.0-2]}\n  b: {ranks: 1, module: [blocks.3-4, head]}\n",
            &c);
    assert_int_equal(c.pipeline.schedule, HP_PIPELINE_SCHEDULE_GPIPE);
    expect_place(&c, 0, 0, 0, 0, 0, 3, true, false);
    expect_place(&c, 1, 1, 1, 0, 3, 5, false, true);
    hp_run_config_free(&c);
    /* 3 stages on 1, 2 and 1 ranks; the middle one data-parallel over its own mesh. */
    load_ok(PP2 "groups:\n"
                "  s0: {ranks: 1, module: [embedding, blocks.0]}\n"
                "  s1:\n    ranks: 2\n    module: blocks.1-2\n"
                "    mesh: {device_matrix: [2], alias_name: [dp]}\n"
                "    strategy:\n      inputs: {tokens: [dp, none], targets: [dp, none]}\n      optimizer: {shard: [dp]}\n"
                "      bucket_size: 1MiB\n"
                "  s2: {ranks: 1, module: [blocks.3, head]}\n", &c);
    assert_int_equal(c.groups.n_ranks, 4);
    const hp_group_config *g1 = &c.groups.groups[1];
    assert_int_equal(g1->n_ranks, 2);
    assert_int_equal(g1->ranks[0], 1);
    assert_int_equal(g1->ranks[1], 2);
    assert_true(g1->strategy.present);
    assert_null(g1->strategy.ranks);
    assert_int_equal(g1->strategy.device_matrix[0], 2);
    assert_string_equal(g1->strategy.alias_name[0], "dp");
    assert_int_equal(g1->strategy.n_inputs, 2);
    assert_int_equal(g1->strategy.n_opt_shard, 1);
    assert_int_equal(g1->strategy.bucket_size, 1u << 20);
    assert_int_equal(g1->strategy.mesh_line, 9);
    assert_int_equal(c.groups.groups[0].strategy.bucket_size, 25u << 20);
    expect_place(&c, 0, 0, 0, 0, 0, 1, true, false);
    expect_place(&c, 1, 1, 1, 0, 1, 3, false, false);
    expect_place(&c, 2, 1, 1, 1, 1, 3, false, false);
    expect_place(&c, 3, 2, 2, 0, 3, 4, false, true);
    assert_ok(hp_groups_config_check_world(&c.groups, 4));
    hp_run_config_free(&c);
    /* Listed ranks in any order (the mesh follows the list), the groups in any rank order. */
    load_ok(PP2 "groups:\n"
                "  a: {ranks: [3, 2], module: [embedding, blocks.0-1], mesh: {device_matrix: [2], alias_name: [dp]}}\n"
                "  b: {ranks: [0, 1], module: [blocks.2-3, head], mesh: {device_matrix: [2], alias_name: [dp]}}\n", &c);
    expect_place(&c, 2, 0, 0, 1, 0, 2, true, false);
    expect_place(&c, 0, 1, 1, 0, 2, 4, false, true);
    hp_run_config_free(&c);
}

static void test_auto_split(void **state) {
    (void)state;
    hp_run_config c;
    /* 5 layers over 3 stages: 2, 2, 1 (the first stages take the extra blocks). */
    load_ok("model: {context: 16, layers: 5, heads: 2, width: 16}\n"
            "pipeline: {schedule: 1f1b, micro_batches: 2, split: auto}\n"
            "groups:\n  a: {ranks: 1, module: auto}\n  b: {ranks: 1}\n  c: {ranks: 1, module: auto}\n", &c);
    assert_true(c.pipeline.split_auto);
    assert_true(c.groups.groups[0].module_auto);
    assert_true(c.groups.groups[1].module_auto);
    expect_place(&c, 0, 0, 0, 0, 0, 2, true, false);
    expect_place(&c, 1, 1, 1, 0, 2, 4, false, false);
    expect_place(&c, 2, 2, 2, 0, 4, 5, false, true);
    hp_run_config_free(&c);
    /* zb-v: 2 stages x 2 chunks in a V over 4 layers: stage 0 holds virtual stages 0 and 3. */
    load_ok(HEAD "pipeline: {schedule: zb-v, micro_batches: 4, split: auto}\ngroups: {a: {ranks: 1}, b: {ranks: 1}}\n", &c);
    assert_int_equal(c.pipeline.chunks, 2);
    const hp_group_config *a = &c.groups.groups[0];
    assert_int_equal(a->chunks[0].virtual_stage, 0);
    assert_int_equal(a->chunks[1].virtual_stage, 3);
    assert_int_equal(a->chunks[1].first, 3);
    assert_true(a->chunks[1].head);
    expect_place(&c, 0, 0, 0, 0, 0, 1, true, true);
    hp_run_config_free(&c);
}

static void test_chunks(void **state) {
    (void)state;
    hp_run_config c;
    /* Interleaved: chunk c of stage i is virtual stage 2c + i. */
    load_ok(HEAD "pipeline: {schedule: interleaved, micro_batches: 8}\n"
                 "groups:\n  a: {ranks: 1, module: [[embedding, blocks.0], blocks.2]}\n"
                 "  b: {ranks: 1, module: [blocks.1, [blocks.3, head]]}\n", &c);
    assert_int_equal(c.pipeline.chunks, 2);
    const hp_group_config *b = &c.groups.groups[1];
    assert_int_equal(b->n_chunks, 2);
    assert_int_equal(b->chunks[1].virtual_stage, 3);
    hp_group_placement p;
    assert_ok(hp_groups_config_place(&c.groups, 1, &p));
    assert_int_equal(p.n_chunks, 2);
    assert_int_equal(p.chunks[1].first, 3);
    assert_true(p.head);
    assert_false(p.embedding);
    hp_run_config_free(&c);
    /* ZB-V by hand and DualPipeV with enough micro-batches (2 x stages). */
    static const char *v = "groups:\n  a: {ranks: 1, module: [[embedding, blocks.0], [blocks.3, head]]}\n"
                           "  b: {ranks: 1, module: [blocks.1, blocks.2]}\n";
    char text[1024];
    snprintf(text, sizeof text, HEAD "pipeline: {schedule: zb-v, micro_batches: 2}\n%s", v);
    load_ok(text, &c);
    hp_run_config_free(&c);
    snprintf(text, sizeof text, HEAD "pipeline: {schedule: dualpipev, micro_batches: 4, chunks: 2}\n%s", v);
    load_ok(text, &c);
    assert_int_equal(c.pipeline.schedule, HP_PIPELINE_SCHEDULE_DUALPIPEV);
    hp_run_config_free(&c);
    /* A schedule table and zb-h1; no pipeline section means 1f1b, one micro-batch. */
    load_ok(PP2 "groups: {a: {ranks: 1, module: [embedding, blocks.0-1]}, b: {ranks: 1, module: [blocks.2-3, head]}}\n",
            &c);
    hp_run_config_free(&c);
    load_ok(HEAD "pipeline: {schedule: schedules/mine.table}\n"
                 "groups: {a: {ranks: 1, module: [embedding, blocks.0-1]}, b: {ranks: 1, module: [blocks.2-3, head]}}\n",
            &c);
    assert_int_equal(c.pipeline.schedule, HP_PIPELINE_SCHEDULE_TABLE);
    assert_string_equal(c.pipeline.table, "schedules/mine.table");
    hp_run_config_free(&c);
    load_ok(HEAD "groups: {only: {ranks: 1, module: [embedding, blocks.0-3, head]}}\n", &c);
    assert_false(c.pipeline.present);
    assert_int_equal(c.pipeline.schedule, HP_PIPELINE_SCHEDULE_1F1B);
    assert_int_equal(c.pipeline.micro_batches, 1);
    expect_place(&c, 0, 0, 0, 0, 0, 4, true, true);
    hp_run_config_free(&c);
    assert_string_equal(hp_pipeline_schedule_name(HP_PIPELINE_SCHEDULE_ZB_H1), "zb-h1");
    assert_string_equal(hp_group_kind_name(HP_GROUP_KIND_LEARNER), "learner");
}

/* Writing then loading gives the same groups and pipeline. */
static void check_same(const hp_run_config *a, const hp_run_config *b) {
    assert_int_equal(a->pipeline.present, b->pipeline.present);
    assert_int_equal(a->pipeline.schedule, b->pipeline.schedule);
    assert_int_equal(a->pipeline.micro_batches, b->pipeline.micro_batches);
    assert_int_equal(a->pipeline.chunks, b->pipeline.chunks);
    assert_int_equal(a->pipeline.split_auto, b->pipeline.split_auto);
    assert_int_equal(a->groups.n_groups, b->groups.n_groups);
    assert_int_equal(a->groups.n_ranks, b->groups.n_ranks);
    for (int i = 0; i < a->groups.n_groups; i++) {
        const hp_group_config *x = &a->groups.groups[i], *y = &b->groups.groups[i];
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->n_ranks, y->n_ranks);
        for (int k = 0; k < x->n_ranks; k++) assert_int_equal(x->ranks[k], y->ranks[k]);
        assert_int_equal(x->module_auto, y->module_auto);
        assert_int_equal(x->n_chunks, y->n_chunks);
        for (int k = 0; k < x->n_chunks; k++) {
            assert_int_equal(x->chunks[k].first, y->chunks[k].first);
            assert_int_equal(x->chunks[k].last, y->chunks[k].last);
            assert_int_equal(x->chunks[k].embedding, y->chunks[k].embedding);
            assert_int_equal(x->chunks[k].head, y->chunks[k].head);
        }
        assert_int_equal(x->memory_budget, y->memory_budget);
        assert_int_equal(x->strategy.present, y->strategy.present);
        assert_int_equal(x->strategy.n_axes, y->strategy.n_axes);
        assert_int_equal(x->strategy.n_inputs, y->strategy.n_inputs);
        assert_int_equal(x->strategy.n_params, y->strategy.n_params);
        assert_int_equal(x->strategy.bucket_size, y->strategy.bucket_size);
    }
}

static void test_round_trip(void **state) {
    (void)state;
    static const char *texts[] = {
        PP2 "groups:\n  s0: {ranks: 1, module: [embedding, blocks.0], memory_budget: 1MiB}\n"
            "  s1:\n    ranks: 2\n    module: blocks.1-2\n    mesh: {device_matrix: [2], alias_name: [tp]}\n"
            "    strategy: {params: [{match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp]}], bucket_size: 0}\n"
            "  s2: {ranks: 1, module: [blocks.3, head]}\n",
        HEAD "pipeline: {schedule: interleaved, micro_batches: 8, chunks: 2, split: auto}\n"
             "groups: {a: {ranks: 1}, b: {ranks: 1}}\n",
        HEAD "pipeline: {schedule: ./t.table}\ngroups: {a: {ranks: [0], module: [embedding, blocks.0-3, head]}}\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        hp_run_config a, b;
        load_ok(texts[i], &a);
        char *yaml = hp_run_config_to_yaml(&a);
        char *json = hp_run_config_to_json(&a);
        assert_non_null(yaml);
        assert_non_null(json);
        if (hp_run_config_load_string(yaml, strlen(yaml), "again.yaml", &b) != HP_STATUS_OK)
            fail_msg("reloading:\n%s\n%s", yaml, hp_error_message());
        check_same(&a, &b);
        hp_run_config_free(&b);
        assert_ok(hp_run_config_load_string(json, strlen(json), "again.json", &b));
        check_same(&a, &b);
        hp_run_config_free(&b);
        free(yaml);
        free(json);
        hp_run_config_free(&a);
    }
}

static void test_rank_errors(void **state) {
    (void)state;
    expect_bad(PP2 "groups:\n  a: {ranks: [0], module: [embedding, blocks.0-1]}\n"
                   "  b: {ranks: [0], module: [blocks.2-3, head]}\n",
               6, "groups.b.ranks: rank 0 is also in groups.a (line 5)", "every rank is in exactly one group");
    expect_bad(PP2 "groups:\n  a: {ranks: [0], module: [embedding, blocks.0-1]}\n"
                   "  b: {ranks: [2], module: [blocks.2-3, head]}\n",
               5, "groups: rank 1 is in no group", NULL);
    expect_bad(PP2 "groups:\n  a: {ranks: [0, 0], module: [embedding, blocks.0-1]}\n", 5,
               "groups.a.ranks[1]: rank 0 is listed twice", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: [-1]\n", 6, "groups.a.ranks[0]: rank -1 must be in [0, ", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 0\n", 6, "groups.a.ranks: a count of 0 ranks must be in [1, ", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: []\n", 6, "groups.a.ranks expects a non-empty list", NULL);
    expect_bad(PP2 "groups:\n  a:\n    module: auto\n", 6, "groups.a: missing key 'ranks'", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: {first: 0}\n", 6, "groups.a.ranks expects a non-empty list", NULL);
}

static void test_mesh_errors(void **state) {
    (void)state;
    expect_bad(PP2 "groups:\n  a: {ranks: 1, module: [embedding, blocks.0-1]}\n"
                   "  b:\n    ranks: 2\n    module: [blocks.2-3, head]\n"
                   "    mesh: {device_matrix: [2, 2], alias_name: [dp, tp]}\n",
               9, "groups.b.mesh has 4 devices but the group has 2 ranks", NULL);
    expect_bad(PP2 "groups:\n  a: {ranks: 1, module: [embedding, blocks.0-1]}\n"
                   "  b:\n    ranks: 2\n    module: [blocks.2-3, head]\n",
               7, "groups.b has 2 ranks but no mesh", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 1\n    strategy: {inputs: {tokens: [dp]}}\n", 7,
               "groups.a.strategy needs the group's mesh", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 2\n    strategy:\n      mesh: {device_matrix: [2], alias_name: [dp]}\n", 8,
               "groups.a.strategy: the group's mesh is its own key groups.a.mesh", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 2\n    mesh: {device_matrix: [2], alias_name: [dp], ranks: [1, 0]}\n", 7,
               "groups.a.mesh: 'ranks' cannot be set", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 2\n    mesh: {device_matrix: [2], alias_name: [dp]}\n"
                   "    strategy:\n      params:\n        - {match: \"*\", tensor_map: [tp]}\n",
               10, "groups.a.strategy.params[0].tensor_map", "unknown alias 'tp' (the mesh's aliases are: dp)");
    expect_bad(PP2 "groups:\n  a:\n    ranks: 2\n    mesh: {device_matrix: [0], alias_name: [dp]}\n", 7,
               "groups.a.mesh.device_matrix[0] must be an axis size >= 1", NULL);
    expect_bad(PP2 "strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n"
                   "groups:\n  a: {ranks: 1, module: [embedding, blocks.0-3, head]}\n",
               5, "strategy: cannot be used with groups:", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 1\n    memory_budget: 12 parsecs\n", 7, "groups.a.memory_budget", "unknown unit");
}

static void test_module_errors(void **state) {
    (void)state;
#define TWO(m0, m1) PP2 "groups:\n  a:\n    ranks: 1\n    module: " m0 "\n  b:\n    ranks: 1\n    module: " m1 "\n"
    /* Lines: a's module is line 7, b's line 10. */
    expect_bad(TWO("[embedding, blocks.0-1]", "[blocks.3, head]"), 10,
               "groups.b.module starts at blocks.3 but blocks.2 is run by no stage", NULL);
    expect_bad(TWO("[embedding, blocks.0-2]", "[blocks.2-3, head]"), 10,
               "groups.b.module: blocks.2 is also run by groups.a.module", NULL);
    expect_bad(TWO("[embedding, blocks.2-3]", "[blocks.0-1, head]"), 7,
               "groups.a.module runs blocks.2-3 before groups.b.module runs blocks.0", "in order");
    expect_bad(TWO("[embedding, blocks.0-1]", "[blocks.2-4, head]"), 10,
               "groups.b.module: blocks.4 is beyond the model (model.layers 4", NULL);
    expect_bad(TWO("[embedding, blocks.0-1]", "[blocks.2, head]"), 10,
               "groups.b.module is the last stage but blocks.3 is run by no stage", NULL);
    expect_bad(TWO("[blocks.0-1]", "[embedding, blocks.2-3, head]"), 7,
               "groups.a.module is the first stage and must run the embedding", NULL);
    expect_bad(TWO("[embedding, blocks.0-1, head]", "[blocks.2-3]"), 7,
               "groups.a.module runs the head, which belongs to the last stage (groups.b.module)", NULL);
    expect_bad(TWO("[embedding, blocks.0-1]", "[embedding, blocks.2-3, head]"), 10,
               "groups.b.module runs the embedding, which belongs to the first stage (groups.a.module)", NULL);
    expect_bad(TWO("[embedding, blocks.0-1]", "[blocks.2-3]"), 10,
               "groups.b.module is the last stage and must run the head", NULL);
    expect_bad(TWO("[blocks.0, embedding]", "[blocks.1-3, head]"), 7,
               "groups.a.module: 'embedding' must come first", NULL);
    expect_bad(TWO("[embedding, blocks.0, blocks.2]", "[blocks.1, blocks.3, head]"), 7,
               "groups.a.module: 'blocks.2' does not continue blocks.0-0", NULL);
    expect_bad(TWO("[embedding, blk.0-1]", "[blocks.2-3, head]"), 7, "groups.a.module: unknown module 'blk.0-1'", NULL);
    expect_bad(TWO("[embedding, blocks.1-0]", "[blocks.2-3, head]"), 7, "groups.a.module: unknown module 'blocks.1-0'",
               NULL);
    expect_bad(TWO("[]", "[blocks.0-3, head]"), 7, "groups.a.module expects embedding, blocks.A-B and head", NULL);
    expect_bad(TWO("auto", "[blocks.2-3, head]"), 7, "groups.a.module is auto but pipeline.split is manual", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 1\n", 6, "groups.a: missing key 'module'", NULL);
    expect_bad(HEAD "pipeline: {split: auto}\ngroups:\n  a: {ranks: 1}\n  b: {ranks: 1, module: [blocks.2-3, head]}\n", 6,
               "groups.b.module gives layers but pipeline.split is auto", NULL);
    expect_bad(HEAD "pipeline:\n  split: auto\n  chunks: 3\n  schedule: interleaved\n"
                    "groups: {a: {ranks: 1}, b: {ranks: 1}}\n",
               4, "pipeline.split auto: model.layers 4 cannot fill 2 stages x 3 chunks", NULL);
    /* Several chunks per stage. */
    expect_bad(HEAD "pipeline: {schedule: interleaved}\n"
                    "groups:\n  a: {ranks: 1, module: [embedding, blocks.0, blocks.2]}\n",
               5, "groups.a.module expects a list of 2 modules, one per model chunk (pipeline.chunks 2)", NULL);
    expect_bad(HEAD "pipeline: {schedule: interleaved}\n"
                    "groups:\n  a: {ranks: 1, module: [[embedding, blocks.0], blocks.1]}\n"
                    "  b: {ranks: 1, module: [blocks.2, [blocks.3, head]]}\n",
               6, "groups.b.module[0] runs blocks.2 before groups.a.module[1] runs blocks.1",
               "(chunk c of stage i is virtual stage c*p + i)");
#undef TWO
}

static void test_pipeline_errors(void **state) {
    (void)state;
#define G "groups: {a: {ranks: 1, module: [embedding, blocks.0-1]}, b: {ranks: 1, module: [blocks.2-3, head]}}\n"
#define V "groups:\n  a: {ranks: 1, module: [[embedding, blocks.0], [blocks.3, head]]}\n" \
          "  b: {ranks: 1, module: [blocks.1, blocks.2]}\n"
    expect_bad(HEAD "pipeline:\n  micro_batches: 0\n" G, 4, "pipeline.micro_batches 0 must be >= 1", NULL);
    expect_bad(HEAD "pipeline:\n  micro_batches: 3\n" G, 4, "pipeline.micro_batches 3 does not divide train.batch 8",
               NULL);
    expect_bad(HEAD "pipeline:\n  schedule: 1f1b\n  chunks: 2\n" G, 5,
               "pipeline.chunks 2: schedule 1f1b runs one model chunk per stage", NULL);
    expect_bad(HEAD "pipeline:\n  schedule: interleaved\n  chunks: 1\n" G, 5,
               "pipeline.chunks 1: schedule interleaved needs 2 or more model chunks", NULL);
    expect_bad(HEAD "pipeline:\n  schedule: zb-v\n  chunks: 3\n" G, 5,
               "pipeline.chunks 3: schedule zb-v runs exactly 2 model chunks per stage", NULL);
    expect_bad(HEAD "pipeline:\n  schedule: dualpipev\n  micro_batches: 2\n" V, 5,
               "pipeline.micro_batches 2: schedule dualpipev needs at least 2 x stages = 4", NULL);
    expect_bad(HEAD "pipeline:\n  schedule: pipedream\n" G, 4, "pipeline.schedule: unknown schedule 'pipedream'", NULL);
    expect_bad(HEAD "pipeline:\n  chunks: 17\n" G, 4, "pipeline.chunks 17 must be in [1, 16]", NULL);
    expect_bad(HEAD "pipeline:\n  split: greedy\n" G, 4, "pipeline.split expects manual or auto", NULL);
    expect_bad(HEAD "pipeline:\n  stages: 2\n" G, 4, "unknown key 'stages' in section 'pipeline'", NULL);
    expect_bad(HEAD "pipeline:\n  schedule: 1f1b\n", 4, "pipeline: needs a groups: section", NULL);
#undef G
#undef V
}

static void test_group_errors(void **state) {
    (void)state;
    expect_bad(PP2 "groups:\n  a:\n    kind: actor\n    ranks: 1\n", 3,
               "pipeline: cannot be used with RL groups", NULL);
    expect_bad(PP2 "groups:\n  a:\n    kind: critic\n    ranks: 1\n", 6,
               "groups.a.kind: kind 'critic' is not built yet", "actor and learner (hp rl)");
    expect_bad(PP2 "groups:\n  a:\n    kind: encoder\n", 6, "groups.a.kind: kind 'encoder' is not built yet", NULL);
    expect_bad(PP2 "groups:\n  a:\n    kind: vision\n", 6, "groups.a.kind: unknown kind 'vision'", NULL);
    expect_bad(PP2 "groups:\n  a:\n    ranks: 1\n    modules: auto\n", 7, "unknown key 'modules' in section 'groups.a'",
               NULL);
    expect_bad(PP2 "groups: {}\n", 4, "groups expects a map from group name to group", NULL);
    expect_bad(PP2 "groups:\n  a: 2\n", 5, "groups.a expects a map", NULL);
    expect_bad(PP2 "groups:\n  "
                   "a123456789012345678901234567890123456789012345678901234567890123456789: {ranks: 1}\n",
               5, "a group name must have 1 to 63 characters", NULL);
    /* The top level still lists its sections, and mpmd: is still refused. */
    expect_bad(PP2 "group: {}\n", 4, "unknown key 'group' in section '<top level>'", "HyperMPMD sections (groups, pipeline, rl)");
    expect_bad("mpmd: {stages: 2}\n", 1, "HyperMPMD (pipeline groups) is not built yet", "'groups:'");
}

/* `hp ARGS` from the source tree; its exit code and output (stdout and stderr) in out. */
static int run_hp(const char *args, char *out, size_t n) {
    const char *bin = getenv("HP_BINARY_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/hp' %s 2>&1", hp_test_source_path("."), bin ? bin : "build", args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli(void **state) {
    (void)state;
    char out[8192], args[512];
    assert_int_equal(run_hp("check examples/pp2.yaml", out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(run_hp("check examples/pp2.yaml --ranks 2", out, sizeof out), 0);
    assert_int_not_equal(run_hp("check examples/pp2.yaml --ranks 3", out, sizeof out), 0);
    if (!strstr(out, "examples/pp2.yaml:") || !strstr(out, "rank 2 is in no group")) fail_msg("output: %s", out);
    assert_int_not_equal(run_hp("check examples/pp2.yaml --ranks 1", out, sizeof out), 0);
    if (!strstr(out, "groups.") || !strstr(out, "is out of range: the job runs on 1 rank")) fail_msg("output: %s", out);
    /* One rank, one stage: hp check accepts it (hp train runs it: tests/mpi/test_pipeline_train.c). */
    write_file(HEAD "groups: {only: {ranks: 1, module: [embedding, blocks.0-3, head]}}\n");
    snprintf(args, sizeof args, "check '%s'", g_path);
    assert_int_equal(run_hp(args, out, sizeof out), 0);
    (void)args;
    /* hp plan draws the schedule (after checking the groups against --ranks). */
    assert_int_equal(run_hp("plan examples/pp2.yaml", out, sizeof out), 0);
    if (!strstr(out, "== schedule") || !strstr(out, "rank 1:") || !strstr(out, "== bubble")) fail_msg("output: %s", out);
    assert_int_equal(run_hp("plan examples/pp2.yaml --ranks 4", out, sizeof out), 1);
    if (!strstr(out, "ranks 2-3 are in no group")) fail_msg("output: %s", out);
    /* Two stages on one process: the world-size check comes first. */
    assert_int_equal(run_hp("train examples/pp2.yaml --steps 1", out, sizeof out), 1);
    if (!strstr(out, "is out of range: the job runs on 1 rank")) fail_msg("output: %s", out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pp2),
        cmocka_unit_test(test_uneven_and_unequal),
        cmocka_unit_test(test_auto_split),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_rank_errors),
        cmocka_unit_test(test_mesh_errors),
        cmocka_unit_test(test_module_errors),
        cmocka_unit_test(test_pipeline_errors),
        cmocka_unit_test(test_group_errors),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
