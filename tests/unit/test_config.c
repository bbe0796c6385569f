/* Run config: defaults, a full file, every kind of error, and the YAML/JSON round trip. */
#include "testutil.h"

#include "hp/config.h"
#include "hp/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];
static char g_path[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/hp_test_config_XXXXXX");
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

/* Loads `text` from the temp file, expects `code`, and that the message names each needle. */
static void expect_error(const char *text, hp_status code, const char *needle1, const char *needle2) {
    write_file(text);
    hp_run_config cfg;
    hp_status st = hp_run_config_load(g_path, &cfg);
    if (st != code)
        fail_msg("loading '%s' gave %s (%s), expected %s", text, hp_status_str(st), hp_error_message(), hp_status_str(code));
    hp_test_assert_error_contains(g_path);
    if (needle1) hp_test_assert_error_contains(needle1);
    if (needle2) hp_test_assert_error_contains(needle2);
    assert_null(cfg.arena);
    assert_false(cfg.strategy.present);
    assert_int_equal(cfg.model.width, 256); /* defaults on failure */
}

static void test_defaults(void **state) {
    (void)state;
    hp_run_config c = hp_run_config_defaults();
    assert_int_equal(c.model.vocab, 256);
    assert_int_equal(c.model.context, 256);
    assert_int_equal(c.model.layers, 4);
    assert_false(c.model.tied_head);
    assert_string_equal(c.data.corpus, "data/kjv.txt");
    assert_close(c.data.val_fraction, 0.05, 0, 0);
    assert_int_equal(c.train.steps, 1000);
    assert_string_equal(c.train.checkpoint_dir, "runs/kjv");
    assert_string_equal(c.train.sample_prompt, "And God said");
    assert_close(c.optim.lr, 3.0e-3, 0, 0);
    assert_close(c.optim.eps, 1.0e-8, 0, 0);
    assert_false(c.strategy.present);
    assert_false(c.offload.present);
    assert_int_equal(c.strategy.bucket_size, 25u << 20);
    assert_int_equal(c.strategy.context_parallel, HP_CP_ULYSSES);
    assert_int_equal(c.offload.chunk, 1u << 20);
    assert_ok(hp_run_config_validate(&c));
    hp_run_config_free(&c);
    hp_run_config_free(&c);

    /* An empty file gives the defaults. */
    write_file("# nothing\n");
    assert_ok(hp_run_config_load(g_path, &c));
    assert_int_equal(c.train.batch, 8);
    assert_string_equal(c.source, g_path);
    hp_run_config_free(&c);
}

static const char *k_full =
    "model:\n"
    "  vocab: 256\n  context: 64\n  layers: 2\n  heads: 2\n  width: 96\n  tied_head: true\n  dropout: 0.1\n"
    "data: {corpus: /tmp/x.txt, val_fraction: 0.1}\n"
    "train:\n"
    "  steps: 50\n  batch: 4\n  seed: 7\n  log_every: 5\n  eval_every: 25\n  eval_batches: 2\n"
    "  checkpoint_dir: runs/test\n  checkpoint_every: 25\n  sample_every: 10\n  sample_tokens: 64\n"
    "  sample_prompt: \"In the: beginning\"\n  threads: 2\n"
    "optim: {lr: 1.0e-3, min_lr: 1e-4, warmup: 5, weight_decay: 0.0, beta1: 0.8, beta2: 0.99, eps: 1e-6, grad_clip: 0}\n"
    "strategy:\n"
    "  mesh: {device_matrix: [2, 4], alias_name: [dp, tp], ranks: [7, 6, 5, 4, 3, 2, 1, 0]}\n"
    "  inputs: {tokens: [dp, none]}\n"
    "  params:\n    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, null]}\n"
    "    - {match: \"wte.weight\", tensor_map: [[dp, tp]]}\n"
    "  optimizer: {shard: [dp]}\n"
    "  bucket_size: 4MiB\n"
    "  context_parallel: ring\n"
    "offload: {device_budget: 1.5GiB, disk_dir: /tmp/off, policy: {params: disk, activations: false},\n"
    "          bandwidth: {host: measure}, machine: {flops: 2.0e11}, chunk: 64KiB, read_ahead: false}\n";

static void check_full(const hp_run_config *c) {
    assert_int_equal(c->model.context, 64);
    assert_int_equal(c->model.width, 96);
    assert_true(c->model.tied_head);
    assert_close(c->model.dropout, 0.1, 0, 0);
    assert_string_equal(c->data.corpus, "/tmp/x.txt");
    assert_int_equal(c->train.steps, 50);
    assert_int_equal(c->train.seed, 7);
    assert_int_equal(c->train.threads, 2);
    assert_string_equal(c->train.sample_prompt, "In the: beginning");
    assert_string_equal(c->train.checkpoint_dir, "runs/test");
    assert_close(c->optim.lr, 1e-3, 0, 0);
    assert_close(c->optim.min_lr, 1e-4, 0, 0);
    assert_close(c->optim.grad_clip, 0.0, 0, 0);
    assert_int_equal(c->optim.warmup, 5);
    /* The typed sections. */
    const hp_strategy_config *st = &c->strategy;
    assert_true(st->present);
    assert_int_equal(st->n_axes, 2);
    assert_int_equal(st->device_matrix[1], 4);
    assert_string_equal(st->alias_name[1], "tp");
    assert_non_null(st->ranks);
    assert_int_equal(st->ranks[0], 7);
    assert_int_equal(st->n_inputs, 1);
    assert_string_equal(st->inputs[0].match, "tokens");
    assert_int_equal(st->inputs[0].tensor_map.n, 2);
    assert_int_equal(st->inputs[0].tensor_map.nmap[0], 1);
    assert_int_equal(st->inputs[0].tensor_map.map[0][0], 0);
    assert_int_equal(st->inputs[0].tensor_map.nmap[1], 0);
    assert_int_equal(st->n_params, 2);
    assert_string_equal(st->params[0].match, "blocks.*.mlp.fc.weight");
    assert_int_equal(st->params[0].tensor_map.map[0][0], 1);
    assert_int_equal(st->params[0].tensor_map.nmap[1], 0);
    assert_int_equal(st->params[1].tensor_map.nmap[0], 2);
    assert_int_equal(st->params[1].tensor_map.map[0][1], 1);
    assert_int_equal(st->n_opt_shard, 1);
    assert_int_equal(st->opt_shard[0], 0);
    assert_int_equal(st->bucket_size, 4u << 20);
    assert_int_equal(st->context_parallel, HP_CP_RING);
    const hp_offload_run_config *o = &c->offload;
    assert_true(o->present);
    assert_int_equal(o->device_budget, 3u << 29);
    assert_string_equal(o->disk_dir, "/tmp/off");
    assert_int_equal(o->policy[0], HP_CONFIG_TIER_DISK);
    assert_int_equal(o->policy[1], HP_CONFIG_TIER_HOST);
    assert_int_equal(o->policy[3], HP_CONFIG_TIER_DEVICE);
    assert_true(o->bandwidth_host == 0 && o->bandwidth_disk == 1e9);
    assert_true(o->machine_flops == 2.0e11 && o->machine_bytes == 0);
    assert_int_equal(o->chunk, 64u << 10);
    assert_false(o->read_ahead);
    assert_true(o->async_update);
}

static void test_full_file_and_round_trip(void **state) {
    (void)state;
    write_file(k_full);
    hp_run_config c;
    assert_ok(hp_run_config_load(g_path, &c));
    check_full(&c);
    assert_string_equal(c.strategy.file, g_path);
    assert_int_equal(c.strategy.params[0].line, 28); /* the first rule's line */
    assert_int_equal(c.strategy.mesh_line, 25);

    char *yaml = hp_run_config_to_yaml(&c);
    char *json = hp_run_config_to_json(&c);
    assert_non_null(yaml);
    assert_non_null(json);
    hp_run_config c2, c3;
    assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "saved.yaml", &c2));
    check_full(&c2);
    assert_ok(hp_run_config_load_string(json, strlen(json), "saved.json", &c3));
    check_full(&c3);
    /* Re-serializing gives the same text. */
    char *json2 = hp_run_config_to_json(&c3);
    assert_string_equal(json, json2);
    free(json2);
    free(yaml);
    free(json);
    hp_run_config_free(&c);
    hp_run_config_free(&c2);
    hp_run_config_free(&c3);

    /* write_yaml + load. */
    c = hp_run_config_defaults();
    c.optim.lr = 0.1 + 0.2; /* not representable in 15 digits */
    assert_ok(hp_run_config_write_yaml(&c, g_path));
    assert_ok(hp_run_config_load(g_path, &c2));
    assert_true(c2.optim.lr == 0.1 + 0.2);
    hp_run_config_free(&c2);
}

/* model.family and the llama keys: defaults, a round trip through YAML and JSON, and the bad values
 * (each naming the value and its line). */
static void test_llama_family(void **state) {
    (void)state;
    hp_run_config c = hp_run_config_defaults();
    assert_string_equal(c.model.family, "gpt2");
    assert_int_equal(c.model.kv_heads, 0);
    assert_close(c.model.rope_base, 10000.0, 0, 0);
    assert_close(c.model.norm_eps, 1e-5, 0, 0);
    const char *text = "model:\n  family: llama\n  heads: 4\n  kv_heads: 2\n  width: 64\n  ffn_width: 96\n"
                       "  rope_base: 500\n  norm_eps: 1.0e-6\n";
    assert_ok(hp_run_config_load_string(text, strlen(text), "llama.yaml", &c));
    char *yaml = hp_run_config_to_yaml(&c), *json = hp_run_config_to_json(&c);
    hp_run_config c2, c3;
    assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "saved.yaml", &c2));
    assert_ok(hp_run_config_load_string(json, strlen(json), "saved.json", &c3));
    const hp_run_config *all[3] = {&c, &c2, &c3};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(all[i]->model.family, "llama");
        assert_int_equal(all[i]->model.kv_heads, 2);
        assert_int_equal(all[i]->model.ffn_width, 96);
        assert_close(all[i]->model.rope_base, 500.0, 0, 0);
        assert_close(all[i]->model.norm_eps, 1e-6, 0, 0);
    }
    free(yaml);
    free(json);
    hp_run_config_free(&c);
    hp_run_config_free(&c2);
    hp_run_config_free(&c3);
    expect_error("model:\n  family: mistral\n", HP_STATUS_CONFIG, "model.family 'mistral' is not a known family", ":2:");
    expect_error("model:\n  family: llama\n  kv_heads: 3\n", HP_STATUS_CONFIG,
                 "model.kv_heads 3 does not divide model.heads 4", ":3:");
    expect_error("model:\n  family: llama\n  heads: 4\n  width: 36\n", HP_STATUS_CONFIG, "odd head dim", ":3:");
    expect_error("model: {family: llama, rope_base: 1}\n", HP_STATUS_CONFIG, "model.rope_base 1 must be > 1", ":1:");
    expect_error("model: {family: llama, norm_eps: 0}\n", HP_STATUS_CONFIG, "model.norm_eps 0 must be > 0", ":1:");
    expect_error("model: {family: llama, dropout: 0.1}\n", HP_STATUS_CONFIG, "llama family has no dropout", ":1:");
    expect_error("model: {kv_heads: -1}\n", HP_STATUS_CONFIG, "model.kv_heads -1 must be >= 0", ":1:");
}

static void test_malformed_yaml(void **state) {
    (void)state;
    expect_error("model:\n  width: 64\n   heads: [1, 2\n", HP_STATUS_CONFIG, "malformed YAML", ":3:");
    expect_error("model: {width: 64\n", HP_STATUS_CONFIG, "malformed YAML", NULL);
    expect_error("model:\n  width: 64\n  width: 128\n", HP_STATUS_CONFIG, "duplicate key 'width'", ":3:");
    expect_error("a: &x 1\nb: *x\n", HP_STATUS_CONFIG, "alias", NULL);
    expect_error("- model\n- data\n", HP_STATUS_CONFIG, "must be a map", NULL);
    expect_error("model: 3\n", HP_STATUS_CONFIG, "section 'model' must be a map", NULL);
    hp_run_config c;
    assert_int_equal(hp_run_config_load("/nonexistent/run.yaml", &c), HP_STATUS_IO);
    hp_test_assert_error_contains("/nonexistent/run.yaml");
}

static void test_unknown_keys(void **state) {
    (void)state;
    expect_error("model:\n  lyers: 4\n", HP_STATUS_CONFIG, "unknown key 'lyers' in section 'model'", ":2");
    expect_error("data: {corpse: x}\n", HP_STATUS_CONFIG, "unknown key 'corpse' in section 'data'", NULL);
    expect_error("train:\n  step: 4\n", HP_STATUS_CONFIG, "unknown key 'step' in section 'train'", NULL);
    expect_error("optim:\n  learning_rate: 4\n", HP_STATUS_CONFIG, "unknown key 'learning_rate' in section 'optim'", NULL);
    expect_error("model: {}\nstrategi: {}\n", HP_STATUS_CONFIG, "unknown key 'strategi'", "top level");
}

static void test_wrong_types(void **state) {
    (void)state;
    expect_error("model: {width: wide}\n", HP_STATUS_CONFIG, "model.width expects an integer", "'wide'");
    expect_error("model: {width: 64.0}\n", HP_STATUS_CONFIG, "model.width expects an integer", "'64.0'");
    expect_error("model: {width: \"64\"}\n", HP_STATUS_CONFIG, "model.width expects an integer", "quoted");
    expect_error("model: {tied_head: yes}\n", HP_STATUS_CONFIG, "model.tied_head expects true or false", "'yes'");
    expect_error("optim: {lr: fast}\n", HP_STATUS_CONFIG, "optim.lr expects a number", "'fast'");
    expect_error("optim: {lr: [1]}\n", HP_STATUS_CONFIG, "optim.lr expects a number", "sequence");
    expect_error("optim: {lr: nan}\n", HP_STATUS_CONFIG, "optim.lr expects a number", NULL);
    expect_error("optim: {lr: }\n", HP_STATUS_CONFIG, "optim.lr expects a number", NULL);
    expect_error("data: {corpus: {a: 1}}\n", HP_STATUS_CONFIG, "data.corpus expects a string", "map");
    expect_error("train: {steps: 99999999999999999999}\n", HP_STATUS_CONFIG, "train.steps expects an integer", NULL);
}

static void test_impossible_values(void **state) {
    (void)state;
    expect_error("model: {width: 250, heads: 4}\n", HP_STATUS_CONFIG, "model.width 250 is not divisible by model.heads 4", NULL);
    expect_error("model: {context: 0}\n", HP_STATUS_CONFIG, "model.context 0", NULL);
    expect_error("model: {vocab: 100}\n", HP_STATUS_CONFIG, "model.vocab 100", NULL);
    expect_error("model: {dropout: 1.0}\n", HP_STATUS_CONFIG, "model.dropout 1", NULL);
    expect_error("optim: {lr: 0}\n", HP_STATUS_CONFIG, "optim.lr 0 must be > 0", NULL);
    expect_error("optim: {lr: -1e-3}\n", HP_STATUS_CONFIG, "optim.lr -0.001", NULL);
    expect_error("optim: {lr: 1e-3, min_lr: 1e-2}\n", HP_STATUS_CONFIG, "optim.min_lr 0.01", NULL);
    expect_error("optim: {beta2: 1.0}\n", HP_STATUS_CONFIG, "optim.beta2 1", NULL);
    expect_error("train: {steps: 0}\n", HP_STATUS_CONFIG, "train.steps 0 must be >= 1", NULL);
    expect_error("train: {batch: -2}\n", HP_STATUS_CONFIG, "train.batch -2", NULL);
    expect_error("train: {eval_every: -1}\n", HP_STATUS_CONFIG, "train.eval_every -1", NULL);
    expect_error("data: {val_fraction: 1.5}\n", HP_STATUS_CONFIG, "data.val_fraction 1.5 must be in (0, 1)", NULL);
    expect_error("data: {val_fraction: 0}\n", HP_STATUS_CONFIG, "data.val_fraction 0", NULL);
    expect_error("data: {corpus: \"\"}\n", HP_STATUS_CONFIG, "data.corpus", NULL);
}

/* Expects `text` to fail in hp_run_config_load (so before any graph can exist) with a message
 * naming the file and line ("<path>:<line>:") and containing `needle`. */
static void expect_at(const char *text, int line, const char *needle) {
    char where[200];
    snprintf(where, sizeof where, "%s:%d:", g_path, line);
    expect_error(text, HP_STATUS_CONFIG, where, needle);
}

static void test_errors_name_file_and_line(void **state) {
    (void)state;
    /* model, data, train, optim: range and combination errors point at the value. */
    expect_at("model:\n  heads: 4\n  width: 250\n", 3, "model.width 250 is not divisible by model.heads 4");
    expect_at("model:\n  vocab: 100\n", 2, "model.vocab 100 must be >= 256");
    expect_at("data:\n  corpus: x.txt\n  val_fraction: 2\n", 3, "data.val_fraction 2 must be in (0, 1)");
    expect_at("train:\n  steps: 10\n  batch: 0\n", 3, "train.batch 0 must be >= 1");
    expect_at("train:\n  threads: 100000\n", 2, "train.threads 100000 must be <= 4096");
    expect_at("optim:\n  lr: 1.0e-3\n  min_lr: 1.0\n", 3, "optim.min_lr 1");
    expect_at("optim:\n  eps: 0\n", 2, "optim.eps 0 must be > 0");
}

static void test_huge_integers(void **state) {
    (void)state;
    /* Values that used to wrap when narrowed to int: 2^32 + 1 layers, 2^32 + 64 width. */
    expect_at("model:\n  layers: 4294967297\n", 2, "model.layers 4294967297 must be <= 2147483647");
    expect_at("model:\n  heads: 1\n  width: 4294967360\n", 3, "model.width 4294967360 must be <= 2147483647");
    expect_at("model: {context: 2147483648}\n", 1, "model.context 2147483648 must be <= 2147483647");
    expect_at("train:\n  batch: 4294967297\n", 2, "train.batch 4294967297 must be <= 2147483647");
    expect_at("train:\n  sample_tokens: 3000000000\n", 2, "train.sample_tokens 3000000000");
    /* Each value fits an int but a tensor built from them would not be countable. */
    expect_at("model:\n  vocab: 2000000000\n  width: 2000000000\n  heads: 1\n", 2, "the token embedding");
    expect_at("model:\n  context: 1000000\n  heads: 1000000\n  width: 1000000\n", 2, "the attention scores");
    /* Just inside the ranges is accepted. */
    write_file("model: {layers: 2147483647, heads: 1, width: 64}\n");
    hp_run_config c;
    assert_ok(hp_run_config_load(g_path, &c));
    assert_int_equal(c.model.layers, 2147483647);
    hp_run_config_free(&c);
}

static void test_unknown_and_unbuilt_sections(void **state) {
    (void)state;
    expect_at("model: {}\nmodels: {width: 4}\n", 2, "unknown key 'models' in section '<top level>' (known keys: model, "
              "data, train, optim, strategy, offload)");
    expect_at("mpmd: {stages: 2, schedule: 1f1b}\n", 1, "HyperMPMD (pipeline groups) is not built yet");
    /* groups: is read now (test_config_groups.c); a list is not its form. */
    expect_at("model: {}\ngroups:\n  - ranks: [0, 1]\n", 3, "groups expects a map from group name to group");
    expect_at("pipeline: garbage\n", 1, "section 'pipeline'");
}

static void test_strategy_errors(void **state) {
    (void)state;
    static const char *mesh = "strategy:\n  mesh: {device_matrix: [2, 2], alias_name: [dp, tp]}\n";
    char text[1024];
#define WITH(rest) (snprintf(text, sizeof text, "%s%s", mesh, rest), text)
    expect_at(WITH("  params:\n    - {match: \"*\", tensor_map: [pp]}\n"), 4, "unknown alias 'pp' (the mesh's aliases are: dp, tp)");
    expect_at(WITH("  inputs:\n    tokens: [dp, dp]\n"), 4, "alias 'dp' is used twice");
    expect_at(WITH("  params:\n    - {match: \"blocks.[qk.weight\", tensor_map: [tp]}\n"), 4, "bad glob pattern");
    expect_at(WITH("  optimizer: {shard: [ep]}\n"), 3, "unknown alias 'ep'");
    expect_at(WITH("  bucket_size: 25 parsecs\n"), 3, "strategy.bucket_size");
    expect_at(WITH("  context_parallel: zigzag\n"), 3, "strategy.context_parallel: zigzag is not an algorithm (expected ulysses or ring)");
    expect_at(WITH("  context_parallel: ring\n  ring_load_balance: maybe\n"), 4,
              "strategy.ring_load_balance: maybe is not true or false");
    expect_at(WITH("  buckets: 4\n"), 3, "unknown key 'buckets' in section 'strategy'");
    expect_at(WITH("  bucket_size: 1e19B\n"), 3, "is too large");
    expect_at(WITH("  bucket_size: 0x100\n"), 3, "is not a number of bytes");
    expect_at(WITH("  bucket_size: inf\n"), 3, "is not a number of bytes");
#undef WITH
    expect_at("strategy:\n  mesh: {device_matrix: [2, 2], alias_name: [dp, dp]}\n", 2, "axis name 'dp' is used twice");
    expect_at("strategy:\n  mesh: {device_matrix: [2, 0], alias_name: [dp, tp]}\n", 2, "device_matrix[1] must be an axis size >= 1");
    expect_at("strategy:\n  mesh: {device_matrix: [-2], alias_name: [dp]}\n", 2, "must be an axis size >= 1, got -2");
    expect_at("strategy:\n  mesh:\n    device_matrix: [2]\n    alias_name: [dp]\n    ranks: [0, 2]\n", 5, "rank 2 is out of range");

    /* bucket_size: a size, default 25 MiB, 0 turns bucketing off. */
    hp_run_config c;
    write_file("strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n  bucket_size: 0\n");
    assert_ok(hp_run_config_load(g_path, &c));
    assert_int_equal(c.strategy.bucket_size, 0);
    hp_run_config_free(&c);
    write_file("strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n");
    assert_ok(hp_run_config_load(g_path, &c));
    assert_int_equal(c.strategy.bucket_size, 25u << 20);
    hp_run_config_free(&c);
}

/* strategy.ring_load_balance: on by default under ring (the size of the axis splitting the tokens'
 * sequence), off when false or without ring; a sequence shorter than 2n is refused, naming the line. */
static void test_ring_load_balance(void **state) {
    (void)state;
    static const char *const cases[] = {
        "  context_parallel: ring\n",                                 /* default: on */
        "  context_parallel: ring\n  ring_load_balance: true\n",     /* on */
        "  context_parallel: ring\n  ring_load_balance: false\n",    /* off */
        "  context_parallel: ulysses\n  ring_load_balance: true\n",  /* no ring: nothing to balance */
    };
    const int want[] = {4, 4, 0, 0};
    for (int i = 0; i < 4; i++) {
        char text[512];
        snprintf(text, sizeof text, "model: {context: 64}\nstrategy:\n  mesh: {device_matrix: [2, 4], alias_name: "
                 "[dp, cp]}\n  inputs: {tokens: [dp, cp], targets: [dp, cp]}\n%s", cases[i]);
        write_file(text);
        hp_run_config c;
        assert_ok(hp_run_config_load(g_path, &c));
        hp_strategy *s;
        assert_ok(hp_strategy_new(&c.strategy, 8, &s));
        int n = -1;
        assert_ok(hp_strategy_ring_balance(s, c.model.context, &n));
        assert_int_equal(n, want[i]);
        /* 7 tokens do not make 2 x 4 chunks */
        hp_status st = hp_strategy_ring_balance(s, 7, &n);
        if (want[i]) {
            assert_int_equal(st, HP_STATUS_CONFIG);
            char where[200];
            snprintf(where, sizeof where, "%s:%d: strategy.ring_load_balance", g_path, i == 0 ? 5 : 6);
            assert_non_null(strstr(hp_error_message(), where));
            assert_non_null(strstr(hp_error_message(), "7 tokens"));
        } else {
            assert_ok(st);
            assert_int_equal(n, 0);
        }
        hp_strategy_free(s);
        hp_run_config_free(&c);
    }
}

static void test_offload_errors(void **state) {
    (void)state;
    expect_at("offload:\n  device_budget: 64MiB\n  policy: {params: sometimes}\n", 3,
              "offload.policy.params expects true, false, host, disk or device, got 'sometimes'");
    expect_at("offload:\n  device_budget: 64 parsecs\n", 2, "unknown unit");
    expect_at("offload:\n  device_budget: -1MiB\n", 2, "is not a number of bytes");
    expect_at("offload:\n  chunk: 1000\n", 2, "offload.chunk must be a positive multiple of 4096");
    expect_at("offload:\n  policy: {optimizer: disk}\n", 2, "offload.disk_dir is not set");
    expect_at("offload:\n  bandwidth: {host: -1}\n", 2, "offload.bandwidth.host must be positive");
    expect_at("offload:\n  machine: {flops: 0}\n", 2, "offload.machine rates must be positive");
    expect_at("offload:\n  budget: 1GiB\n", 2, "unknown key 'budget' in section 'offload' (known keys: device_budget");
}

/* The typed sections written out load back equal (what a checkpoint's state.json relies on). */
static void test_typed_round_trip(void **state) {
    (void)state;
    write_file("strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n  params:\n"
               "    - {match: \"blocks.[!0]*\", tensor_map: [dp]}\n  bucket_size: 1KB\n"
               "offload: {device_budget: 12345, bandwidth: {disk: measure}}\n");
    hp_run_config a, b;
    assert_ok(hp_run_config_load(g_path, &a));
    char *yaml = hp_run_config_to_yaml(&a);
    assert_non_null(yaml);
    assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "saved.yaml", &b));
    assert_int_equal(b.strategy.bucket_size, 1000);
    assert_string_equal(b.strategy.params[0].match, "blocks.[!0]*");
    assert_int_equal(b.offload.device_budget, 12345);
    assert_true(b.offload.bandwidth_disk == 0 && b.offload.bandwidth_host == 1e10);
    assert_true(b.offload.present);
    assert_memory_equal(&a.offload, &b.offload, sizeof a.offload);
    char *j1 = hp_run_config_to_json(&a), *j2 = hp_run_config_to_json(&b);
    assert_string_equal(j1, j2);
    free(j1);
    free(j2);
    free(yaml);
    hp_run_config_free(&a);
    hp_run_config_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),          cmocka_unit_test(test_full_file_and_round_trip),
        cmocka_unit_test(test_malformed_yaml),    cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_wrong_types),       cmocka_unit_test(test_impossible_values),
        cmocka_unit_test(test_llama_family),
        cmocka_unit_test(test_errors_name_file_and_line), cmocka_unit_test(test_huge_integers),
        cmocka_unit_test(test_unknown_and_unbuilt_sections), cmocka_unit_test(test_strategy_errors),
        cmocka_unit_test(test_ring_load_balance),
        cmocka_unit_test(test_offload_errors),    cmocka_unit_test(test_typed_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
