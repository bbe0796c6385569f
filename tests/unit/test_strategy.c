/* Strategy section: every example config, parameter/input/optimizer-state layouts of the GPT
 * training step, each error with its message, warnings, and the description for `hp plan`. */
#include "testutil.h"

#include "hp/comm.h"
#include "hp/compile.h"
#include "hp/config.h"
#include "hp/nn.h"
#include "hp/shard.h"
#include "hp/strategy.h"
#include "hp/train.h"
#include "hp/yaml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static char g_log[16384];

static void capture_sink(hp_log_level level, const char *line, void *user) {
    (void)user;
    if (level < HP_LOG_LEVEL_WARN) return;
    size_t n = strlen(g_log);
    snprintf(g_log + n, sizeof g_log - n, "%s\n", line);
}

/* Loads `yaml` as a run config (named "run.yaml" in messages; the section is checked there) and
 * makes the strategy for `world` ranks. The config is freed before returning, so every test also
 * checks that the strategy keeps no pointer into it. */
static hp_status parse(const char *yaml, int world, hp_strategy **s) {
    hp_run_config cfg;
    *s = NULL;
    HP_CHECK(hp_run_config_load_string(yaml, strlen(yaml), "run.yaml", &cfg));
    hp_status st = hp_strategy_new(&cfg.strategy, world, s);
    hp_run_config_free(&cfg);
    return st;
}

static void expect_parse_error(const char *yaml, int world, const char *needle1, const char *needle2) {
    hp_strategy *s = (hp_strategy *)1;
    hp_status st = parse(yaml, world, &s);
    if (st != HP_STATUS_CONFIG)
        fail_msg("expected a config error containing '%s', got %s: %s", needle1, hp_status_str(st), hp_error_message());
    assert_null(s);
    hp_test_assert_error_contains(needle1);
    if (needle2) hp_test_assert_error_contains(needle2);
}

/* A GPT training step: forward, backward, AdamW (params, inputs, opt states, opt.lr/opt.step). */
typedef struct gpt_step {
    hp_graph *g;
    hp_layout *lay;
} gpt_step;

static gpt_step build_gpt(const hp_gpt_config *c, int batch, int seq) {
    gpt_step r = {hp_graph_new(), NULL};
    assert_non_null(r.g);
    hp_gpt gpt;
    assert_ok(hp_gpt_build(r.g, c, batch, seq, true, &gpt));
    hp_optim_config o = hp_run_config_defaults().optim;
    hp_train_step ts;
    assert_ok(hp_train_step_build(r.g, gpt.loss, &o, &ts));
    r.lay = calloc((size_t)hp_graph_n_tensors(r.g), sizeof *r.lay);
    assert_non_null(r.lay);
    return r;
}

static gpt_step small_gpt(void) {
    hp_gpt_config c = {.vocab = 64, .context = 8, .layers = 2, .heads = 4, .width = 16, .tied_head = false};
    return build_gpt(&c, 4, 8);
}

static void free_gpt(gpt_step *r) {
    hp_graph_free(r->g);
    free(r->lay);
}

/* Fails unless tensor `name` has layout `want` ("-" for replicated, ndim -1). */
static void expect_layout(const hp_strategy *s, const gpt_step *r, const char *name, const char *want) {
    hp_tid t = hp_graph_find(r->g, name);
    if (t == HP_TID_NONE) fail_msg("no tensor '%s' in the graph", name);
    char got[256] = "-";
    if (r->lay[t].ndim >= 0) hp_layout_format(&r->lay[t], hp_strategy_mesh((hp_strategy *)s), got, sizeof got);
    if (strcmp(got, want) != 0) fail_msg("layout of '%s' is %s, expected %s", name, got, want);
}

static int annotate(const hp_strategy *s, gpt_step *r) {
    int warnings = -1;
    assert_ok(hp_strategy_annotate(s, r->g, r->lay, &warnings));
    return warnings;
}

static const char *MESH22 = "strategy:\n"
                            "  mesh:\n"
                            "    device_matrix: [2, 2]\n"
                            "    alias_name: [dp, tp]\n";

static char *cat(const char *a, const char *b) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", a, b);
    return buf;
}

/* ---------------------------------------------------------------- no strategy */

static void test_null_node(void **state) {
    (void)state;
    hp_strategy *s;
    assert_ok(hp_strategy_new(NULL, 1, &s));
    hp_mesh *m = hp_strategy_mesh(s);
    assert_int_equal(hp_mesh_naxes(m), 1);
    assert_int_equal(hp_mesh_dim(m, 0), 1);
    assert_string_equal(hp_mesh_axis_name(m, 0), "dp");
    gpt_step r = small_gpt();
    assert_int_equal(annotate(s, &r), 0);
    for (int t = 0; t < hp_graph_n_tensors(r.g); t++) assert_int_equal(r.lay[t].ndim, -1);
    free_gpt(&r);
    hp_strategy_free(s);

    /* A strategy key with a null value is the same. */
    assert_ok(parse("strategy:\n", 1, &s));
    assert_int_equal(hp_mesh_size(hp_strategy_mesh(s)), 1);
    hp_strategy_free(s);

    /* No strategy but several ranks: a config error; bad world sizes are argument errors. */
    assert_int_equal(hp_strategy_new(NULL, 2, &s), HP_STATUS_CONFIG);
    assert_null(s);
    hp_test_assert_error_contains("runs on 2 ranks");
    assert_int_equal(hp_strategy_new(NULL, -1, &s), HP_STATUS_INVALID_ARGUMENT);
    assert_ok(hp_strategy_new(NULL, 0, &s));
    assert_int_equal(hp_mesh_size(hp_strategy_mesh(s)), 1);
    hp_strategy_free(s);
    hp_strategy_free(NULL);
}

/* ---------------------------------------------------------------- examples */

typedef struct check {
    const char *tensor, *layout;
} check;

static void run_example(const char *file, int world, const check *checks, int n) {
    char rel[128];
    snprintf(rel, sizeof rel, "examples/%s", file);
    hp_run_config cfg;
    assert_ok(hp_run_config_load(hp_test_source_path(rel), &cfg));
    hp_strategy *s;
    assert_ok(hp_strategy_new(&cfg.strategy, world, &s));
    assert_int_equal(hp_mesh_size(hp_strategy_mesh(s)), world);
    /* The wrong number of ranks is rejected, naming the mesh and both counts. */
    hp_strategy *bad = NULL;
    if (cfg.strategy.present) {
        assert_int_equal(hp_strategy_new(&cfg.strategy, world + 1, &bad), HP_STATUS_CONFIG);
        char msg[128];
        snprintf(msg, sizeof msg, "has %d devices but the job runs on %d ranks", world, world + 1);
        hp_test_assert_error_contains(msg);
        hp_test_assert_error_contains(file);
    }
    assert_null(bad);

    hp_gpt_config c = {.vocab = (int)cfg.model.vocab, .context = (int)cfg.model.context,
                       .layers = (int)cfg.model.layers, .heads = (int)cfg.model.heads,
                       .width = (int)cfg.model.width, .tied_head = cfg.model.tied_head};
    gpt_step r = build_gpt(&c, (int)cfg.train.batch, (int)cfg.model.context);
    hp_log_set_sink(capture_sink, NULL);
    g_log[0] = 0;
    if (annotate(s, &r) != 0) fail_msg("%s: unexpected warnings:\n%s", file, g_log);
    hp_log_set_sink(NULL, NULL);
    for (int i = 0; i < n; i++) expect_layout(s, &r, checks[i].tensor, checks[i].layout);
    /* Every annotated leaf is valid for its shape, and the description names the mesh. */
    for (int t = 0; t < hp_graph_n_tensors(r.g); t++)
        if (r.lay[t].ndim >= 0) assert_ok(hp_layout_validate(&r.lay[t], hp_strategy_mesh(s), &hp_graph_tensor(r.g, t)->shape));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    hp_strategy_describe(s, f);
    fclose(f);
    char mesh[128];
    hp_mesh_str(hp_strategy_mesh(s), mesh, sizeof mesh);
    assert_non_null(strstr(text, mesh));
    free(text);
    free_gpt(&r);
    hp_strategy_free(s);
    hp_run_config_free(&cfg);
}

static void test_example_kjv(void **state) {
    (void)state;
    static const check c[] = {{"tokens", "-"}, {"wte.weight", "-"}, {"exp_avg.wte.weight", "-"}};
    run_example("kjv.yaml", 1, c, 3);
}

static void test_example_dp4(void **state) {
    (void)state;
    static const check c[] = {{"tokens", "[dp, none]"},          {"targets", "[dp, none]"},
                              {"wte.weight", "-"},                {"blocks.0.attn.q.weight", "-"},
                              {"exp_avg.wte.weight", "-"},        {"opt.lr", "-"},
                              {"exp_avg_sq.blocks.3.mlp.fc.bias", "-"}};
    run_example("dp4.yaml", 4, c, 7);
}

static void test_example_zero2dp4(void **state) {
    (void)state;
    static const check c[] = {{"tokens", "[dp, none]"},
                              {"blocks.0.attn.q.weight", "-"},
                              {"exp_avg.blocks.0.attn.q.weight", "[dp, none]"}, /* dim 0 list [dp] */
                              {"exp_avg_sq.blocks.0.attn.q.weight", "[dp, none]"},
                              {"exp_avg.ln_f.bias", "[dp]"},
                              {"exp_avg_sq.wpe.weight", "[dp, none]"},
                              {"opt.step", "-"}};
    run_example("zero2dp4.yaml", 4, c, 7);
}

static const check TP_CHECKS[] = {
    {"blocks.0.attn.q.weight", "[tp, none]"}, {"blocks.0.attn.k.weight", "[tp, none]"},
    {"blocks.3.attn.v.weight", "[tp, none]"}, {"blocks.1.attn.q.bias", "[tp]"},
    {"blocks.2.mlp.fc.weight", "[tp, none]"}, {"blocks.2.mlp.fc.bias", "[tp]"},
    {"blocks.0.attn.proj.weight", "[none, tp]"}, {"blocks.0.attn.proj.bias", "-"},
    {"blocks.3.mlp.proj.weight", "[none, tp]"},  {"blocks.3.mlp.proj.bias", "-"},
    {"blocks.0.ln1.weight", "-"},                {"wte.weight", "-"},
    {"lm_head.weight", "-"},                     {"exp_avg.blocks.0.attn.q.weight", "[tp, none]"},
    {"exp_avg_sq.blocks.0.mlp.proj.weight", "[none, tp]"},
};
#define N_TP ((int)(sizeof TP_CHECKS / sizeof TP_CHECKS[0]))

static void test_example_tp4(void **state) {
    (void)state;
    check c[N_TP + 2];
    memcpy(c, TP_CHECKS, sizeof TP_CHECKS);
    c[N_TP] = (check){"tokens", "-"};
    c[N_TP + 1] = (check){"targets", "-"};
    run_example("tp4.yaml", 4, c, N_TP + 2);
}

static void test_example_dp2xtp2(void **state) {
    (void)state;
    check c[N_TP + 2];
    memcpy(c, TP_CHECKS, sizeof TP_CHECKS);
    c[N_TP] = (check){"tokens", "[dp, none]"};
    c[N_TP + 1] = (check){"targets", "[dp, none]"};
    run_example("dp2xtp2.yaml", 4, c, N_TP + 2);
}

static void test_example_tp2sp(void **state) {
    (void)state;
    check c[N_TP + 2];
    memcpy(c, TP_CHECKS, sizeof TP_CHECKS);
    c[N_TP] = (check){"tokens", "[none, tp]"};
    c[N_TP + 1] = (check){"targets", "[none, tp]"};
    run_example("tp2sp.yaml", 2, c, N_TP + 2);
}

static void test_example_fsdp4(void **state) {
    (void)state;
    static const check c[] = {{"tokens", "[dp, none]"},
                              {"wte.weight", "[dp, none]"},
                              {"wpe.weight", "[dp, none]"},
                              {"blocks.0.ln1.weight", "[dp]"},
                              {"blocks.1.attn.proj.weight", "[dp, none]"},
                              {"blocks.3.mlp.fc.bias", "[dp]"},
                              {"lm_head.weight", "[dp, none]"},
                              {"exp_avg.wte.weight", "[dp, none]"},
                              {"exp_avg_sq.ln_f.bias", "[dp]"}};
    run_example("fsdp4.yaml", 4, c, 9);
}

static void test_example_hsdp2x2(void **state) {
    (void)state;
    static const check c[] = {{"tokens", "[[dp, fsdp], none]"},
                              {"targets", "[[dp, fsdp], none]"},
                              {"wte.weight", "[fsdp, none]"},
                              {"blocks.2.ln2.bias", "[fsdp]"},
                              {"exp_avg.wte.weight", "[fsdp, none]"},
                              {"exp_avg_sq.blocks.2.ln2.bias", "[fsdp]"}};
    run_example("hsdp2x2.yaml", 4, c, 6);
}

/* ---------------------------------------------------------------- optimizer states */

static void test_optimizer_states(void **state) {
    (void)state;
    hp_strategy *s;
    /* ZeRO over both axes on top of tp rules: the axes a parameter already uses are skipped, the
     * others appended to dim 0 in the order listed. */
    assert_ok(parse(cat(MESH22, "  params:\n"
                                "    - match: \"blocks.*.attn.q.weight\"\n"
                                "      tensor_map: [tp, none]\n"
                                "    - match: \"blocks.*.attn.proj.weight\"\n"
                                "      tensor_map: [none, tp]\n"
                                "    - match: \"wte.weight\"\n"
                                "      tensor_map: [none, dp]\n"
                                "  optimizer:\n"
                                "    shard: [dp, tp]\n"),
                    4, &s));
    gpt_step r = small_gpt();
    assert_int_equal(annotate(s, &r), 0);
    expect_layout(s, &r, "blocks.0.attn.q.weight", "[tp, none]");
    expect_layout(s, &r, "exp_avg.blocks.0.attn.q.weight", "[[tp, dp], none]");
    expect_layout(s, &r, "exp_avg_sq.blocks.1.attn.q.weight", "[[tp, dp], none]");
    expect_layout(s, &r, "exp_avg.blocks.0.attn.proj.weight", "[dp, tp]");
    expect_layout(s, &r, "exp_avg.wte.weight", "[tp, dp]");
    expect_layout(s, &r, "blocks.0.ln1.weight", "-");
    expect_layout(s, &r, "exp_avg.blocks.0.ln1.weight", "[[dp, tp]]");
    expect_layout(s, &r, "exp_avg_sq.ln_f.bias", "[[dp, tp]]");
    /* Gradients and other non-leaves are left to the partitioner. */
    hp_tid grad = HP_TID_NONE;
    for (int t = 0; t < hp_graph_n_tensors(r.g); t++)
        if (hp_graph_tensor(r.g, t)->grad_of == hp_graph_find(r.g, "blocks.0.attn.q.weight")) grad = t;
    assert_int_not_equal(grad, HP_TID_NONE);
    assert_int_equal(r.lay[grad].ndim, -1);
    free_gpt(&r);
    hp_strategy_free(s);

    /* shard as a single alias, and `none`. */
    assert_ok(parse(cat(MESH22, "  optimizer: {shard: tp}\n"), 4, &s));
    r = small_gpt();
    annotate(s, &r);
    expect_layout(s, &r, "exp_avg.wte.weight", "[tp, none]");
    expect_layout(s, &r, "wte.weight", "-");
    free_gpt(&r);
    hp_strategy_free(s);
    assert_ok(parse(cat(MESH22, "  optimizer: {shard: none}\n"), 4, &s));
    r = small_gpt();
    annotate(s, &r);
    expect_layout(s, &r, "exp_avg.wte.weight", "-");
    free_gpt(&r);
    hp_strategy_free(s);
}

/* Uneven splits (3 shards of 16 rows) and splits of a size-1 dimension are valid layouts. */
static void test_uneven(void **state) {
    (void)state;
    hp_strategy *s;
    assert_ok(parse("strategy:\n"
                    "  mesh: {device_matrix: [3], alias_name: [dp]}\n"
                    "  inputs: {tokens: [dp, none], targets: [dp]}\n"
                    "  params:\n"
                    "    - {match: \"*\", tensor_map: [dp]}\n"
                    "  optimizer: {shard: [dp]}\n",
                    3, &s));
    hp_gpt_config c = {.vocab = 64, .context = 8, .layers = 1, .heads = 4, .width = 16, .tied_head = false};
    gpt_step r = build_gpt(&c, 1, 8); /* batch 1 split over 3 */
    assert_int_equal(annotate(s, &r), 0);
    expect_layout(s, &r, "tokens", "[dp, none]");
    expect_layout(s, &r, "targets", "[dp, none]"); /* a short tensor_map pads with none */
    expect_layout(s, &r, "wte.weight", "[dp, none]");
    expect_layout(s, &r, "exp_avg.wte.weight", "[dp, none]");
    int64_t start[2], len[2];
    hp_tid t = hp_graph_find(r.g, "blocks.0.ln1.weight");
    assert_ok(hp_layout_slice_of(&r.lay[t], hp_strategy_mesh(s), &hp_graph_tensor(r.g, t)->shape, 2, start, len));
    assert_int_equal(start[0], 12);
    assert_int_equal(len[0], 4);
    free_gpt(&r);
    hp_strategy_free(s);
}

/* The annotated layouts are what the partitioner consumes: each example partitions the GPT
 * training step on every rank (threads over the simulated communicator). */
typedef struct part_job {
    const hp_strategy_config *strategy; /* read-only, shared by the ranks */
    const hp_gpt_config *cfg;
    int batch;
    int collectives[8];
} part_job;

static hp_status partition_rank(hp_comm *comm, int rank, void *user) {
    part_job *j = user;
    hp_strategy *s = NULL;
    hp_graph *g = hp_graph_new();
    hp_compiled *c = NULL;
    hp_gpt gpt;
    hp_optim_config o = hp_run_config_defaults().optim;
    hp_status st;
    HP_CHECK_GOTO(hp_strategy_new(j->strategy, hp_comm_size(comm), &s), st, out);
    HP_CHECK_GOTO(hp_gpt_build(g, j->cfg, j->batch, j->cfg->context, true, &gpt), st, out);
    /* autodiff + optimizer, then shard (the driver attaches the mesh to comm) */
    hp_compile_opts co = HP_COMPILE_OPTS_INIT;
    co.loss = gpt.loss;
    co.train = true;
    co.optim = &o;
    co.strategy = s;
    co.comm = comm;
    co.stop_after = HP_PASS_SHARD;
    HP_CHECK_GOTO(hp_compile(g, &co, &c), st, out);
    if (rank < 8) j->collectives[rank] = hp_partition_n_collectives(hp_compiled_partition(c));
out:
    hp_compiled_free(c);
    hp_graph_free(g);
    hp_strategy_free(s);
    return st;
}

static void test_partitions(void **state) {
    (void)state;
    static const struct {
        const char *file;
        int world;
    } ex[] = {{"dp4.yaml", 4},   {"zero2dp4.yaml", 4}, {"tp4.yaml", 4},     {"dp2xtp2.yaml", 4},
              {"tp2sp.yaml", 2}, {"fsdp4.yaml", 4},    {"hsdp2x2.yaml", 4}};
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "examples/%s", ex[i].file);
        hp_run_config cfg;
        assert_ok(hp_run_config_load(hp_test_source_path(rel), &cfg));
        /* A smaller model than the file's keeps the test fast; the layouts are the same rules. */
        hp_gpt_config c = {.vocab = 64, .context = 8, .layers = 2, .heads = 4, .width = 16, .tied_head = false};
        part_job j = {&cfg.strategy, &c, 4, {0}};
        hp_status st = hp_comm_sim_run(ex[i].world, partition_rank, &j);
        if (st != HP_STATUS_OK) fail_msg("%s: %s: %s", ex[i].file, hp_status_str(st), hp_error_message());
        if (j.collectives[0] <= 0) fail_msg("%s: no collectives inserted", ex[i].file);
        hp_run_config_free(&cfg);
    }
}

/* ---------------------------------------------------------------- mesh */

static void test_mesh(void **state) {
    (void)state;
    hp_strategy *s;
    assert_ok(parse("strategy:\n  mesh:\n    device_matrix: [2, 2]\n    alias_name: [dp, tp]\n    ranks: [3, 2, 1, 0]\n", 4,
                    &s));
    hp_mesh *m = hp_strategy_mesh(s);
    assert_int_equal(hp_mesh_rank(m, 0), 3);
    assert_int_equal(hp_mesh_rank(m, 3), 0);
    assert_string_equal(hp_mesh_axis_name(m, 1), "tp");
    hp_strategy_free(s);
    /* world_size 0: the mesh's own device count (hp plan without --ranks); ranks checked against it. */
    assert_ok(parse(MESH22, 0, &s));
    assert_int_equal(hp_mesh_size(hp_strategy_mesh(s)), 4);
    hp_strategy_free(s);
    expect_parse_error(cat(MESH22, "    ranks: [0, 1, 2, 4]\n"), 0, "rank 4 is out of range", NULL);

    expect_parse_error(MESH22, 2, "run.yaml:3:", "strategy mesh [2, 2] has 4 devices but the job runs on 2 ranks");
    expect_parse_error(MESH22, 8, "strategy mesh [2, 2] has 4 devices but the job runs on 8 ranks", NULL);
    expect_parse_error(cat(MESH22, "    ranks: [0, 1, 2]\n"), 4, "run.yaml:5:", "expects a sequence of 4 world ranks");
    expect_parse_error(cat(MESH22, "    ranks: [0, 1, 2, 4]\n"), 4, "strategy.mesh.ranks[3]: rank 4 is out of range", "0..3");
    expect_parse_error(cat(MESH22, "    ranks: [0, 1, 2, -1]\n"), 4, "rank -1 is out of range", NULL);
    expect_parse_error(cat(MESH22, "    ranks: [0, 1, 1, 2]\n"), 4, "strategy.mesh.ranks[2]: rank 1 is listed twice", NULL);
    expect_parse_error("strategy:\n  inputs: {tokens: [dp]}\n", 1, "run.yaml:2:", "missing key 'mesh'");
    expect_parse_error("strategy:\n  mesh: {alias_name: [dp]}\n", 1, "missing key 'device_matrix'", NULL);
    expect_parse_error("strategy:\n  mesh: {device_matrix: [1]}\n", 1, "missing key 'alias_name'", NULL);
    expect_parse_error("strategy:\n  mesh: {device_matrix: [2, 2], alias_name: [dp]}\n", 4,
                       "alias_name expects a sequence of 2 names", NULL);
    expect_parse_error("strategy:\n  mesh: {device_matrix: [0], alias_name: [dp]}\n", 1,
                       "device_matrix[0] must be an axis size >= 1, got 0", NULL);
    expect_parse_error("strategy:\n  mesh: {device_matrix: [two], alias_name: [dp]}\n", 2,
                       "device_matrix[0] expects an integer", "'two'");
    expect_parse_error("strategy:\n  mesh: {device_matrix: [2, 2], alias_name: [dp, dp]}\n", 4, "axis name 'dp' is used twice",
                       NULL);
    expect_parse_error("strategy:\n  mesh: {device_matrix: [2], alias_name: [none]}\n", 2, "'none' is not a valid axis name",
                       NULL);
    expect_parse_error("strategy:\n  mesh: {device_matrix: 4, alias_name: [dp]}\n", 4, "device_matrix expects a sequence",
                       NULL);
}

/* ---------------------------------------------------------------- errors */

static void test_unknown_keys(void **state) {
    (void)state;
    expect_parse_error(cat(MESH22, "  param:\n    - {match: \"*\", tensor_map: [dp]}\n"), 4, "unknown key 'param'",
                       "section 'strategy'");
    expect_parse_error("strategy:\n  mesh:\n    device_matrix: [2]\n    alias_name: [dp]\n    shape: [2]\n", 2,
                       "run.yaml:5", "unknown key 'shape' in section 'strategy.mesh'");
    expect_parse_error(cat(MESH22, "  params:\n    - match: \"*\"\n      tensor_map: [dp]\n      axes: [dp]\n"), 4,
                       "run.yaml:8", "unknown key 'axes' in section 'strategy.params[0]'");
    expect_parse_error(cat(MESH22, "  optimizer:\n    zero: 2\n"), 4, "unknown key 'zero'", "strategy.optimizer");
    /* partial is not user-settable. */
    expect_parse_error(cat(MESH22, "  params:\n    - match: \"*\"\n      tensor_map: [dp]\n      partial: [tp]\n"), 4,
                       "run.yaml:8", "'partial' cannot be set");
    expect_parse_error(cat(MESH22, "  partial: sum\n"), 4, "run.yaml:5", "'partial' cannot be set");
    expect_parse_error("strategy: [1, 2]\n", 1, "section 'strategy' must be a map", NULL);
    expect_parse_error(cat(MESH22, "  params:\n    - {tensor_map: [dp]}\n"), 4, "strategy.params[0]: missing key 'match'", NULL);
    expect_parse_error(cat(MESH22, "  params:\n    - {match: \"*\"}\n"), 4, "strategy.params[0]: missing key 'tensor_map'",
                       NULL);
    expect_parse_error(cat(MESH22, "  params:\n    match: \"*\"\n"), 4, "strategy.params expects a sequence of rules", NULL);
    expect_parse_error(cat(MESH22, "  inputs: [tokens]\n"), 4, "strategy.inputs expects a map", NULL);
}

static void test_tensor_map_errors(void **state) {
    (void)state;
    expect_parse_error(cat(MESH22, "  inputs:\n    tokens: [tp, tp]\n"), 4, "run.yaml:6:", "alias 'tp' is used twice");
    expect_parse_error(cat(MESH22, "  params:\n    - {match: \"wte.weight\", tensor_map: [[dp, dp], none]}\n"), 4,
                       "strategy.params[0].tensor_map (match \"wte.weight\")[0][1]", "alias 'dp' is used twice");
    expect_parse_error(cat(MESH22, "  params:\n    - {match: \"wte.weight\", tensor_map: [pp, none]}\n"), 4,
                       "unknown alias 'pp'", "(the mesh's aliases are: dp, tp)");
    expect_parse_error(cat(MESH22, "  inputs:\n    tokens: [[dp, ep]]\n"), 4, "strategy.inputs.tokens[0][1]: unknown alias 'ep'",
                       NULL);
    expect_parse_error(cat(MESH22, "  inputs:\n    tokens: dp\n"), 4, "strategy.inputs.tokens expects a tensor_map", "'dp'");
    expect_parse_error(cat(MESH22, "  inputs:\n    tokens: [[none]]\n"), 4, "expects a mesh alias, got 'none'", NULL);
    expect_parse_error(cat(MESH22, "  optimizer:\n    shard: [dp, dp]\n"), 4, "strategy.optimizer.shard[1]",
                       "alias 'dp' is used twice");
    expect_parse_error(cat(MESH22, "  optimizer:\n    shard: [zz]\n"), 4, "unknown alias 'zz'", NULL);
    expect_parse_error(cat(MESH22, "  inputs:\n    tokens: [none, none, none, none, none, none, none, none, none]\n"), 4,
                       "has 9 entries", NULL);
}

static void test_annotate_errors(void **state) {
    (void)state;
    hp_strategy *s;
    gpt_step r = small_gpt();

    /* Two rules with different layouts for one parameter: both patterns, their lines, the name. */
    assert_ok(parse(cat(MESH22, "  params:\n"
                                "    - match: \"blocks.*.attn.[qkv].weight\"\n"
                                "      tensor_map: [tp, none]\n"
                                "    - match: \"blocks.1.*\"\n"
                                "      tensor_map: [dp]\n"),
                    4, &s));
    assert_int_equal(hp_strategy_annotate(s, r.g, r.lay, NULL), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("parameter 'blocks.1.attn.q.weight'");
    hp_test_assert_error_contains("rule \"blocks.*.attn.[qkv].weight\" (line 6) with layout [tp, none]");
    hp_test_assert_error_contains("rule \"blocks.1.*\" (line 8) with a different layout [dp, none]");
    hp_test_assert_error_contains("run.yaml");
    hp_strategy_free(s);

    /* The same layout twice is fine (both rules count as matched). */
    assert_ok(parse(cat(MESH22, "  params:\n"
                                "    - {match: \"blocks.*.attn.q.weight\", tensor_map: [tp, none]}\n"
                                "    - {match: \"*.weight\", tensor_map: [tp]}\n"
                                "    - {match: \"*\", tensor_map: [tp]}\n"),
                    4, &s));
    int w = -1;
    assert_ok(hp_strategy_annotate(s, r.g, r.lay, &w));
    assert_int_equal(w, 0);
    expect_layout(s, &r, "blocks.0.attn.q.weight", "[tp, none]");
    expect_layout(s, &r, "wte.weight", "[tp, none]");
    expect_layout(s, &r, "blocks.0.attn.q.bias", "[tp]");
    hp_strategy_free(s);

    /* A tensor_map longer than the parameter's rank names the parameter and its shape. */
    assert_ok(parse(cat(MESH22, "  params:\n    - {match: \"blocks.*.attn.q.*\", tensor_map: [tp, none]}\n"), 4, &s));
    assert_int_equal(hp_strategy_annotate(s, r.g, r.lay, NULL), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("run.yaml:6:");
    hp_test_assert_error_contains("parameter 'blocks.0.attn.q.bias' has rank 1 (shape [16])");
    hp_strategy_free(s);

    /* The same for an input, and an inputs entry naming a parameter. */
    assert_ok(parse(cat(MESH22, "  inputs:\n    tokens: [dp, none, tp]\n"), 4, &s));
    assert_int_equal(hp_strategy_annotate(s, r.g, r.lay, NULL), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("input 'tokens' has rank 2");
    hp_strategy_free(s);
    assert_ok(parse(cat(MESH22, "  inputs:\n    wte.weight: [dp]\n"), 4, &s));
    assert_int_equal(hp_strategy_annotate(s, r.g, r.lay, NULL), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("'wte.weight', which is a param tensor, not an input");
    hp_strategy_free(s);

    assert_ok(parse(MESH22, 4, &s));
    assert_int_equal(hp_strategy_annotate(s, NULL, r.lay, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_strategy_free(s);
    free_gpt(&r);
}

/* Rules that match nothing and unknown inputs are warnings: counted and logged with file:line. */
static void test_warnings(void **state) {
    (void)state;
    hp_strategy *s;
    assert_ok(parse(cat(MESH22, "  inputs:\n"
                                "    tokens: [dp, none]\n"
                                "    mask: [dp, none]\n"
                                "  params:\n"
                                "    - {match: \"blocks.*.attn.q.weight\", tensor_map: [tp, none]}\n"
                                "    - {match: \"blocks.*.moe.*\", tensor_map: [tp]}\n"
                                "    - {match: \"encoder.*\", tensor_map: [dp]}\n"),
                    4, &s));
    gpt_step r = small_gpt();
    g_log[0] = 0;
    hp_log_set_sink(capture_sink, NULL);
    int w = -1;
    assert_ok(hp_strategy_annotate(s, r.g, r.lay, &w));
    hp_log_set_sink(NULL, NULL);
    assert_int_equal(w, 3);
    if (!strstr(g_log, "run.yaml:10: strategy.params rule \"blocks.*.moe.*\" matches no parameter") ||
        !strstr(g_log, "run.yaml:11: strategy.params rule \"encoder.*\" matches no parameter") ||
        !strstr(g_log, "run.yaml:7: strategy.inputs names 'mask'"))
        fail_msg("missing warnings in:\n%s", g_log);
    expect_layout(s, &r, "blocks.1.attn.q.weight", "[tp, none]");
    expect_layout(s, &r, "tokens", "[dp, none]");
    expect_layout(s, &r, "targets", "-");
    free_gpt(&r);
    hp_strategy_free(s);
}

static void test_describe(void **state) {
    (void)state;
    hp_strategy *s;
    assert_ok(parse(cat(MESH22, "  inputs: {tokens: [[dp, tp], none]}\n"
                                "  params:\n"
                                "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
                                "  optimizer: {shard: [dp]}\n"),
                    4, &s));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hp_strategy_describe(s, f);
    fclose(f);
    const char *want[] = {"mesh [2, 2] (dp, tp): 4 devices from run.yaml", "axis 0 dp", "axis 1 tp", "0 1 2 3", "tokens",
                          "[[dp, tp], none]", "blocks.*.mlp.fc.weight", "[tp, none]", "line 7", "[dp] (ZeRO)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i])) fail_msg("description lacks '%s':\n%s", want[i], text);
    free(text);
    hp_strategy_free(s);
}

/* strategy.bucket_size: sizes as the offload budgets write them, 0 turns bucketing off, the DDP
 * default when absent; a bad size names the key and its line. */
static void test_bucket_size(void **state) {
    (void)state;
    hp_strategy *s;
    assert_ok(parse(MESH22, 4, &s));
    assert_int_equal(hp_strategy_bucket_size(s), HP_BUCKET_SIZE_DEFAULT);
    assert_int_equal(HP_BUCKET_SIZE_DEFAULT, 25 << 20);
    hp_strategy_free(s);
    assert_ok(parse(cat(MESH22, "  bucket_size: 4KiB\n"), 4, &s));
    assert_int_equal(hp_strategy_bucket_size(s), 4096);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hp_strategy_describe(s, f);
    fclose(f);
    if (!strstr(text, "gradient buckets: up to 4096 bytes")) fail_msg("description lacks the bucket size:\n%s", text);
    free(text);
    hp_strategy_free(s);
    assert_ok(parse(cat(MESH22, "  bucket_size: 0\n"), 4, &s));
    assert_int_equal(hp_strategy_bucket_size(s), 0);
    hp_strategy_free(s);
    assert_ok(parse(cat(MESH22, "  bucket_size: 1000000\n"), 4, &s));
    assert_int_equal(hp_strategy_bucket_size(s), 1000000);
    hp_strategy_free(s);
    assert_ok(hp_strategy_new(NULL, 1, &s));
    assert_int_equal(hp_strategy_bucket_size(s), HP_BUCKET_SIZE_DEFAULT);
    hp_strategy_free(s);
    expect_parse_error(cat(MESH22, "  bucket_size: 25 parsecs\n"), 4, "run.yaml:5", "strategy.bucket_size");
    expect_parse_error(cat(MESH22, "  bucket_size: -1MiB\n"), 4, "run.yaml:5", "'-1MiB'");
    expect_parse_error(cat(MESH22, "  bucket_size: [1]\n"), 4, "strategy.bucket_size", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_size),
        cmocka_unit_test(test_null_node),      cmocka_unit_test(test_example_kjv),
        cmocka_unit_test(test_example_dp4),    cmocka_unit_test(test_example_zero2dp4),
        cmocka_unit_test(test_example_tp4),    cmocka_unit_test(test_example_dp2xtp2),
        cmocka_unit_test(test_example_tp2sp),  cmocka_unit_test(test_example_fsdp4),
        cmocka_unit_test(test_example_hsdp2x2), cmocka_unit_test(test_optimizer_states),
        cmocka_unit_test(test_uneven),         cmocka_unit_test(test_partitions),
        cmocka_unit_test(test_mesh),           cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_tensor_map_errors), cmocka_unit_test(test_annotate_errors),
        cmocka_unit_test(test_warnings),       cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
