/*
 * The cost-model stage split (hp_pipeline_auto_split): contiguous, covering, every middle stage
 * with a block, and never slower than the even split by layer count; a costly head (large vocab)
 * takes blocks away from the last stage. Under memory budgets (hp_pipeline_split): every stage
 * fits, the split moves blocks away from a tight group, the memory model matches the stage graphs'
 * own plan, GPipe's m micro-batches in flight need more than 1F1B's p - r, and an impossible budget
 * is an error naming the group and its line. The slots per stage equal hp_schedule_peak_formula.
 * The first stage's backward splits into B and W as every other stage's.
 */
#include "testutil.h"

#include "hp/pipeline.h"
#include "hp/pipeline_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double stage_seconds(const hp_gpt_config *c, const int *first, int n, int k, const hp_machine_model *mm) {
    hp_gpt_stage part = {first[k], k + 1 < n ? first[k + 1] : c->layers, k == 0, k == n - 1};
    hp_pipeline_stage_plan sp;
    assert_ok(hp_pipeline_plan_stage(c, &part, 4, 32, 4, mm, &sp));
    return sp.f_seconds + sp.b_seconds + sp.w_seconds;
}

static double slowest(const hp_gpt_config *c, const int *first, int n, const hp_machine_model *mm) {
    double w = 0;
    for (int k = 0; k < n; k++) {
        double s = stage_seconds(c, first, n, k, mm);
        if (s > w) w = s;
    }
    return w;
}

static void test_split(void **state) {
    (void)state;
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    const int vocabs[] = {64, 8192};
    for (int vi = 0; vi < 2; vi++)
        for (int n = 2; n <= 4; n++) {
            hp_gpt_config c = {.vocab = vocabs[vi], .context = 32, .layers = 7, .heads = 2, .width = 32};
            int first[8], even[8];
            double worst = 0;
            assert_ok(hp_pipeline_auto_split(&c, n, 4, 32, 4, &mm, first, &worst));
            assert_int_equal(first[0], 0);
            for (int k = 1; k < n; k++) {
                assert_true(first[k] >= first[k - 1]);
                if (k < n - 1) assert_true(first[k + 1] > first[k]); /* a middle stage holds a block */
            }
            assert_true(first[n - 1] <= c.layers);
            for (int k = 0; k < n; k++) even[k] = k * (c.layers / n) + (k < c.layers % n ? k : c.layers % n);
            double a = slowest(&c, first, n, &mm), e = slowest(&c, even, n, &mm);
            assert_true(a <= e * (1 + 1e-9));
            assert_true(worst > 0 && a <= 1.05 * worst); /* the reported slowest stage (additive per-block costs) */
            if (vi == 1 && n == 2) assert_true(c.layers - first[1] < first[1]); /* the head's stage takes fewer blocks */
        }
    hp_gpt_config c = {.vocab = 64, .context = 32, .layers = 2, .heads = 2, .width = 32};
    int first[8];
    assert_int_equal(hp_pipeline_auto_split(&c, 5, 4, 32, 4, &mm, first, NULL), HP_STATUS_INVALID_ARGUMENT);
}

/* Slots per stage (the runtime's program instances) against the peak formula, one chunk per rank. */
static void test_slots(void **state) {
    (void)state;
    const hp_sched_kind kinds[] = {HP_SCHED_KIND_GPIPE, HP_SCHED_KIND_1F1B, HP_SCHED_KIND_ZB_H1};
    for (int ki = 0; ki < 3; ki++)
        for (int p = 2; p <= 4; p++)
            for (int m = 1; m <= 9; m += 2) {
                hp_schedule s;
                assert_ok(hp_schedule_build(kinds[ki], p, m, 1, &s));
                int slots[8];
                assert_ok(hp_pipeline_stage_slots(&s, slots));
                for (int r = 0; r < p; r++) assert_int_equal(slots[r], hp_schedule_peak_formula(kinds[ki], p, m, 1, r));
                hp_schedule_free(&s);
            }
}

static hp_gpt_config big_head(void) {
    return (hp_gpt_config){.vocab = 4096, .context = 32, .layers = 6, .heads = 2, .width = 32};
}

static void test_budget(void **state) {
    (void)state;
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    hp_gpt_config c = big_head();
    hp_schedule s;
    assert_ok(hp_schedule_build(HP_SCHED_KIND_1F1B, 2, 4, 1, &s));
    const char *names[2] = {"first", "second"};
    size_t budget[2] = {0, 0};
    int line[2] = {7, 12};
    hp_pipeline_plan_opts o = {.model = &c, .schedule = &s, .rows = 4, .seq = 32, .mm = &mm, .memory_budget = budget,
                               .group_name = names, .budget_line = line, .file = "run.yaml"};
    int free_first[2], first[2];
    double free_bytes[2], bytes[2], free_worst, worst;
    assert_ok(hp_pipeline_split(&o, free_first, &free_worst, free_bytes));
    /* the model's bytes against the stage graphs' own plan (hp_pipeline_predict), within 5% */
    hp_pipeline_prediction pr;
    assert_ok(hp_pipeline_predict(&o, free_first, &pr));
    for (int k = 0; k < 2; k++) assert_close(free_bytes[k], pr.rank_bytes[k], 0.05, 0);
    hp_pipeline_prediction_free(&pr);
    /* a budget just under the heavier stage's bytes moves blocks away from it, slowing the split */
    int h = free_bytes[1] > free_bytes[0];
    budget[h] = (size_t)(free_bytes[h] * 0.98);
    assert_ok(hp_pipeline_split(&o, first, &worst, bytes));
    if (h == 1) assert_true(first[1] > free_first[1]);
    else assert_true(first[1] < free_first[1]);
    assert_true(bytes[h] <= (double)budget[h]);
    assert_true(worst > free_worst);
    budget[h] = 0;
    /* impossible: below what the head alone needs */
    budget[1] = 1 << 20;
    hp_status st = hp_pipeline_split(&o, first, NULL, NULL);
    assert_int_equal(st, HP_STATUS_CONFIG);
    assert_non_null(strstr(hp_error_message(), "run.yaml:12: groups.second.memory_budget: 1.00 MiB"));
    /* GPipe keeps m = 8 micro-batches in flight on both stages, 1F1B 2 and 1: a budget 1F1B meets */
    hp_schedule_free(&s);
    assert_ok(hp_schedule_build(HP_SCHED_KIND_1F1B, 2, 8, 1, &s));
    budget[0] = budget[1] = 0;
    assert_ok(hp_pipeline_split(&o, first, NULL, bytes));
    budget[0] = budget[1] = (size_t)(1.01 * (bytes[0] > bytes[1] ? bytes[0] : bytes[1]));
    assert_ok(hp_pipeline_split(&o, first, NULL, NULL));
    hp_schedule_free(&s);
    assert_ok(hp_schedule_build(HP_SCHED_KIND_GPIPE, 2, 8, 1, &s));
    assert_int_equal(hp_pipeline_split(&o, first, NULL, NULL), HP_STATUS_CONFIG);
    assert_non_null(strstr(hp_error_message(), "memory_budget"));
    assert_non_null(strstr(hp_error_message(), "8 micro-batches in flight"));
    hp_schedule_free(&s);
}

/* From a run config: groups.NAME.memory_budget read, the error with the file and line. */
static void test_budget_config(void **state) {
    (void)state;
    const char *yaml = "model: {vocab: 4096, context: 32, layers: 6, heads: 2, width: 32}\n"
                       "train: {batch: 8, steps: 1}\n"
                       "pipeline: {schedule: 1f1b, micro_batches: 2, split: auto}\n"
                       "groups:\n"
                       "  a: {ranks: 1}\n"
                       "  b:\n"
                       "    ranks: 1\n"
                       "    memory_budget: 1MiB\n";
    hp_run_config cfg;
    assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "budget.yaml", &cfg));
    hp_schedule s;
    assert_ok(hp_pipeline_schedule_from_config(&cfg, &s));
    int first[2];
    bool cal = true;
    hp_status st = hp_pipeline_split_from_config(&cfg, &s, "/nonexistent/calibration.json", first, &cal);
    assert_int_equal(st, HP_STATUS_CONFIG);
    assert_false(cal);
    assert_non_null(strstr(hp_error_message(), "budget.yaml:8: groups.b.memory_budget: 1.00 MiB"));
    hp_schedule_free(&s);
    hp_run_config_free(&cfg);
}

/* A calibration in the cache feeds the split and the prediction (hp_pipeline_machine_model); a
 * missing file falls back to the flat model with the reason. */
static void test_calibrated(void **state) {
    (void)state;
    char dir[] = "/tmp/hp_test_split_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/cal.json", dir);
    setenv("OMP_NUM_THREADS", "1", 1);
    hp_calibration *cal = calloc(1, sizeof *cal), *back = calloc(1, sizeof *back);
    hp_calibration_init(cal);
    assert_ok(hp_machine_key_local(1, 1, &cal->key));
    for (int t = 0; t < 2; t++) /* every GEMM at 1 GFLOP/s: far slower than the flat 100 */
        for (int i = 0; i < HP_CAL_GEMM_DIMS; i++)
            for (int j = 0; j < HP_CAL_GEMM_DIMS; j++)
                for (int k = 0; k < HP_CAL_GEMM_DIMS; k++) cal->gemm[t][i][j][k] = 1e9;
    cal->memory_bytes_per_s = 10e9;
    cal->node_seconds = cal->region_seconds = 1e-6;
    assert_ok(hp_calibration_save(path, cal));
    hp_machine_model mm;
    bool calibrated = false;
    char why[512];
    assert_ok(hp_pipeline_machine_model(path, 1, back, &mm, &calibrated, why, sizeof why));
    assert_true(calibrated);
    assert_non_null(mm.cal);
    hp_gpt_config c = big_head();
    hp_schedule s;
    assert_ok(hp_schedule_build(HP_SCHED_KIND_1F1B, 2, 4, 1, &s));
    hp_pipeline_plan_opts o = {.model = &c, .schedule = &s, .rows = 4, .seq = 32, .mm = &mm};
    int first[2];
    double worst_cal, worst_flat;
    assert_ok(hp_pipeline_split(&o, first, &worst_cal, NULL));
    hp_pipeline_prediction pr;
    assert_ok(hp_pipeline_predict(&o, first, &pr));
    assert_true(pr.calibrated);
    assert_true(pr.step_seconds > pr.schedule_seconds && pr.schedule_seconds > 0);
    hp_pipeline_prediction_free(&pr);
    hp_machine_model flat = HP_MACHINE_MODEL_DEFAULT;
    o.mm = &flat;
    assert_ok(hp_pipeline_split(&o, first, &worst_flat, NULL));
    assert_true(worst_cal > 10 * worst_flat); /* the calibrated GEMM rate is what the split saw */
    /* no cache: the flat model, and the reason */
    snprintf(path, sizeof path, "%s/none.json", dir);
    assert_ok(hp_pipeline_machine_model(path, 1, back, &mm, &calibrated, why, sizeof why));
    assert_false(calibrated);
    assert_null(mm.cal);
    assert_non_null(strstr(why, "none.json"));
    hp_schedule_free(&s);
    free(cal), free(back);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    assert_int_equal(system(path), 0);
}

/* Tensor-parallel stage groups: with their strategies the prediction plans the partitioned graph
 * and counts its collectives (hp_pipeline_plan_stage_group): every phase that holds TP's activation
 * all-reduces (forward: two per block) takes at least their time more than the unsplit compute
 * divided by tp; a group without a strategy is planned as before. */
static void test_tp_collectives(void **state) {
    (void)state;
    const char *yaml = "model: {vocab: 256, context: 32, layers: 2, heads: 2, width: 64}\n"
                       "train: {batch: 8, steps: 1}\n"
                       "pipeline: {schedule: 1f1b, micro_batches: 2}\n"
                       "groups:\n"
                       "  s0:\n"
                       "    ranks: [0, 1]\n"
                       "    module: [embedding, blocks.0]\n"
                       "    mesh: {device_matrix: [2], alias_name: [tp]}\n"
                       "    strategy:\n"
                       "      params:\n"
                       "        - {match: 'blocks.*.attn.[qkv].weight', tensor_map: [tp, none]}\n"
                       "        - {match: 'blocks.*.attn.[qkv].bias', tensor_map: [tp]}\n"
                       "        - {match: 'blocks.*.mlp.fc.weight', tensor_map: [tp, none]}\n"
                       "        - {match: 'blocks.*.mlp.fc.bias', tensor_map: [tp]}\n"
                       "        - {match: 'blocks.*.attn.proj.weight', tensor_map: [none, tp]}\n"
                       "        - {match: 'blocks.*.mlp.proj.weight', tensor_map: [none, tp]}\n"
                       "  s1: {ranks: [2], module: [blocks.1, head]}\n";
    hp_run_config cfg;
    assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "tp.yaml", &cfg));
    hp_schedule s;
    assert_ok(hp_pipeline_schedule_from_config(&cfg, &s));
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    hp_pipeline_plan_opts o;
    assert_ok(hp_pipeline_plan_opts_from_config(&cfg, &s, &mm, &o));
    assert_int_equal(o.tp[0], 2);
    assert_non_null(o.strategy);
    int first[2] = {0, 1};
    hp_pipeline_prediction with, without;
    assert_ok(hp_pipeline_predict(&o, first, &with));
    const hp_strategy_config *keep = o.strategy;
    o.strategy = NULL;
    assert_ok(hp_pipeline_predict(&o, first, &without));
    o.strategy = keep;
    /* the forward's two all-reduces of one replica's activation (4 rows x 32 x 64 floats) */
    hp_xfer ar = {.kind = HP_XFER_ALL_REDUCE, .group = 2, .bytes = 4.0 * 32 * 64 * 4};
    double two = 2 * hp_xfer_seconds(&mm, &ar);
    assert_true(two > 0);
    assert_true(with.f[0] >= without.f[0] + 0.9 * two);
    assert_true(with.step_seconds > without.step_seconds);
    /* the one-rank group is planned alike either way */
    assert_true(fabs(with.f[1] - without.f[1]) <= 1e-12 && fabs(with.w[1] - without.w[1]) <= 1e-12);
    /* without a strategy, the group planner is the plain stage planner */
    hp_gpt_stage part = {0, 1, true, false};
    hp_pipeline_stage_plan a, b;
    assert_ok(hp_pipeline_plan_stage(o.model, &part, 4, 32, 2, &mm, &a));
    assert_ok(hp_pipeline_plan_stage_group(o.model, &part, 4, 32, 2, NULL, 1, &mm, &b));
    assert_true(a.f_seconds == b.f_seconds && a.w_seconds == b.w_seconds && a.activation_bytes == b.activation_bytes);
    /* one rank's partitioned stage holds fewer activation bytes than the unsplit one */
    assert_ok(hp_pipeline_plan_stage_group(o.model, &part, 4, 32, 2, &cfg.groups.groups[0].strategy, 2, &mm, &b));
    assert_true(b.activation_bytes < a.activation_bytes);
    /* and its parameter blocks: the qkv, fc and proj weights halved, the embedding whole */
    assert_true(b.param_bytes < a.param_bytes && 2 * b.param_bytes > a.param_bytes);
    /* the prediction's memory is that process's: its activations, its blocks and their moments */
    assert_int_equal(with.activation_bytes[0], hp_pipeline_stage_activations(&b, s.split_backward));
    assert_int_equal(without.activation_bytes[0], hp_pipeline_stage_activations(&a, s.split_backward));
    assert_int_equal(b.moment_bytes, 2 * b.param_bytes);
    assert_int_equal(with.state_bytes[0], b.persistent_bytes + b.moment_bytes);
    assert_int_equal(without.state_bytes[0], a.persistent_bytes + 2 * a.param_bytes);
    /* ZeRO over the same tp axis (optimizer.shard: [tp]): the moments of the parameters tp leaves
     * whole (embeddings, norms, proj biases) are split over it, the tp-split ones' stay their blocks */
    hp_strategy_config zero = cfg.groups.groups[0].strategy;
    zero.n_opt_shard = 1, zero.opt_shard[0] = 0;
    hp_pipeline_stage_plan z;
    assert_ok(hp_pipeline_plan_stage_group(o.model, &part, 4, 32, 2, &zero, 2, &mm, &z));
    assert_int_equal(z.param_bytes, b.param_bytes);
    assert_true(z.moment_bytes > z.param_bytes && z.moment_bytes < 2 * z.param_bytes);
    assert_true(with.rank_bytes[0] < without.rank_bytes[0]);
    /* offload inside the partitioned stage is planned on the same per-process graph */
    hp_offload_plan_config oc;
    hp_offload_plan_config_init(&oc);
    oc.bandwidth[HP_TIER_HOST] = 1e10; /* no probe */
    oc.device_budget = 0;
    hp_offload_plan_stats whole, blocks;
    assert_ok(hp_pipeline_plan_stage_offload_group(o.model, &part, 4, 32, 2, false, &oc, 1, NULL, 1, &whole));
    assert_ok(hp_pipeline_plan_stage_offload_group(o.model, &part, 4, 32, 2, false, &oc, 1,
                                                   &cfg.groups.groups[0].strategy, 2, &blocks));
    assert_true(blocks.peak_before < whole.peak_before);
    assert_int_equal(hp_pipeline_plan_stage_offload_group(o.model, &part, 4, 32, 2, false, &oc, 1,
                                                          &cfg.groups.groups[0].strategy, 3, &blocks),
                     HP_STATUS_INVALID_ARGUMENT); /* a mesh of 2 for 3 ranks */
    hp_pipeline_prediction_free(&with), hp_pipeline_prediction_free(&without);
    hp_pipeline_plan_opts_free(&o);
    hp_schedule_free(&s);
    hp_run_config_free(&cfg);
}

/* optimizer.shard over an axis the parameters' layouts already split (FSDP's) splits the update no
 * further: the plan's zero is 1 there and the optimizer's time that of no optimizer.shard; over a
 * pure data-parallel axis (ZeRO-1) it is the axis' size. */
static hp_status opt_plan(const char *shard0, hp_pipeline_plan_opts *o, hp_schedule *s, hp_run_config *cfg,
                          double *opt0) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "model: {vocab: 256, context: 16, layers: 2, heads: 2, width: 32}\n"
             "train: {batch: 8, steps: 1}\n"
             "pipeline: {schedule: 1f1b, micro_batches: 2}\n"
             "groups:\n"
             "  s0:\n"
             "    ranks: [0, 1]\n"
             "    module: [embedding, blocks.0]\n"
             "    mesh: {device_matrix: [2], alias_name: [fsdp]}\n"
             "    strategy: {inputs: {tokens: [fsdp, none], targets: [fsdp, none]}, params: [{match: '*', "
             "tensor_map: [fsdp]}]%s}\n"
             "  s1: {ranks: [2, 3], module: [blocks.1, head], mesh: {device_matrix: [2], alias_name: [dp]}, "
             "strategy: {optimizer: {shard: [dp]}}}\n", shard0);
    HP_CHECK(hp_run_config_load_string(yaml, strlen(yaml), "opt.yaml", cfg));
    HP_CHECK(hp_pipeline_schedule_from_config(cfg, s));
    static const hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    HP_CHECK(hp_pipeline_plan_opts_from_config(cfg, s, &mm, o));
    int first[2] = {0, 1};
    hp_pipeline_prediction pr;
    HP_CHECK(hp_pipeline_predict(o, first, &pr));
    *opt0 = pr.optimizer_seconds[0];
    hp_pipeline_prediction_free(&pr);
    return HP_STATUS_OK;
}

static void test_opt_shard_ranks(void **state) {
    (void)state;
    hp_pipeline_plan_opts a, b;
    hp_schedule sa, sb;
    hp_run_config ca, cb;
    double with, without;
    assert_ok(opt_plan(", optimizer: {shard: [fsdp]}", &a, &sa, &ca, &with));
    assert_ok(opt_plan("", &b, &sb, &cb, &without));
    assert_int_equal(a.tp[0], 2);
    assert_int_equal(a.zero[0], 1); /* was 2: the update counted split over 4 */
    assert_int_equal(a.zero[1], 2);
    assert_true(with > 0 && with == without);
    hp_pipeline_plan_opts_free(&a), hp_pipeline_plan_opts_free(&b);
    hp_schedule_free(&sa), hp_schedule_free(&sb);
    hp_run_config_free(&ca), hp_run_config_free(&cb);
}

/* Zero Bubble's split on every stage: B is the chain of activation gradients, W the weights'. The
 * first stage has no input gradient to send, but its B still runs its blocks' activation gradients
 * (down to the embeddings' output), so it is about as long as a middle stage's B of the same blocks,
 * and its W about as long as theirs (before, its B was empty and W held the whole backward). */
static void test_first_stage_split(void **state) {
    (void)state;
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    hp_gpt_config c = {.vocab = 64, .context = 32, .layers = 6, .heads = 2, .width = 64};
    hp_gpt_stage first = {0, 2, true, false}, middle = {2, 4, false, false};
    hp_pipeline_stage_plan a, b;
    assert_ok(hp_pipeline_plan_stage(&c, &first, 4, 32, 4, &mm, &a));
    assert_ok(hp_pipeline_plan_stage(&c, &middle, 4, 32, 4, &mm, &b));
    assert_true(a.b_seconds > 0.7 * b.b_seconds && a.b_seconds < 1.3 * b.b_seconds);
    assert_true(a.w_seconds > 0.7 * b.w_seconds && a.w_seconds < 1.5 * b.w_seconds);
}

/* HyperOffload inside a stage as the runtime plans it (hp plan's offload section): under a budget
 * below one micro-batch's peak the planner moves activations to the host and the peak drops; the
 * rank's budget is split over its micro-batches in flight (two slots leave each half, so they move
 * more); a budget no plan meets is the planner's error; a disk policy needs a directory. */
static void test_stage_offload(void **state) {
    (void)state;
    hp_gpt_config c = {.vocab = 64, .context = 32, .layers = 4, .heads = 2, .width = 64};
    hp_gpt_stage part = {0, 2, true, false};
    hp_offload_plan_config oc;
    hp_offload_plan_config_init(&oc);
    oc.bandwidth[HP_TIER_HOST] = 1e10; /* no probe */
    hp_offload_plan_stats none, one, two;
    oc.device_budget = 0;
    assert_ok(hp_pipeline_plan_stage_offload(&c, &part, 4, 32, 4, false, &oc, 1, &none));
    assert_true(none.bytes_out[HP_TIER_HOST] == 0);
    oc.device_budget = none.peak_before * 3 / 8; /* + the store: about 3/4 of the peak */
    assert_ok(hp_pipeline_plan_stage_offload(&c, &part, 4, 32, 4, false, &oc, 1, &one));
    assert_true(one.bytes_out[HP_TIER_HOST] > 0 && one.bytes_in[HP_TIER_HOST] > 0);
    assert_true(one.peak_after < one.peak_before && one.peak_before == none.peak_before);
    oc.device_budget = none.peak_before * 3 / 4; /* two slots: each 3/8 again, plus the store */
    assert_ok(hp_pipeline_plan_stage_offload(&c, &part, 4, 32, 4, false, &oc, 2, &two));
    assert_true(two.bytes_out[HP_TIER_HOST] > 0);
    oc.device_budget = 1000;
    assert_int_equal(hp_pipeline_plan_stage_offload(&c, &part, 4, 32, 4, false, &oc, 1, &one), HP_STATUS_OUT_OF_MEMORY);
    /* hp_pipeline_predict with the offload: each stage planned under its rank's budget (rank 0 keeps
     * two micro-batches in flight under 1F1B), its stall in its B; a budget too small names the stage */
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    hp_schedule s;
    assert_ok(hp_schedule_build(HP_SCHED_KIND_1F1B, 2, 4, 0, &s));
    int first[2] = {0, 2};
    hp_pipeline_plan_opts po = {.model = &c, .schedule = &s, .rows = 4, .seq = 32, .mm = &mm};
    hp_pipeline_prediction plain, with;
    assert_ok(hp_pipeline_predict(&po, first, &plain));
    assert_null(plain.offload);
    po.offload = true, po.offload_cfg = oc;
    po.offload_cfg.device_budget = none.peak_before * 3 / 4;
    assert_ok(hp_pipeline_predict(&po, first, &with));
    assert_non_null(with.offload);
    assert_true(with.offload[0].bytes_out[HP_TIER_HOST] > 0 && with.b[0] >= plain.b[0]);
    assert_true(with.rank_bytes[0] < plain.rank_bytes[0]); /* what the plan moved out of its slots */
    hp_pipeline_prediction_free(&with);
    po.offload_cfg.device_budget = 1000;
    assert_int_equal(hp_pipeline_predict(&po, first, &with), HP_STATUS_OUT_OF_MEMORY);
    hp_test_assert_error_contains("stage 0 (rank 0, 2 micro-batches in flight) cannot run under its offload budget");
    hp_pipeline_prediction_free(&with), hp_pipeline_prediction_free(&plain);
    hp_schedule_free(&s);
    oc.device_budget = none.peak_before / 2;
    oc.policy[HP_OFFLOAD_CLASS_ACTIVATIONS] = HP_TIER_DISK;
    assert_int_equal(hp_pipeline_plan_stage_offload(&c, &part, 4, 32, 4, false, &oc, 1, &one),
                     HP_STATUS_INVALID_ARGUMENT);
}

/* A tied head under a V schedule: stage 0 (the embedding) and stage 3 (the head reading the same
 * matrix) are on rank 0, whose store holds the matrix, its accumulator and moments once, so the
 * prediction counts them once; under 1F1B the two stages are on different ranks and each holds a
 * copy. */
static void test_tied_v(void **state) {
    (void)state;
    hp_gpt_config c = {.vocab = 64, .context = 16, .layers = 4, .heads = 2, .width = 32, .tied_head = true};
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    hp_schedule s;
    assert_ok(hp_schedule_build(HP_SCHED_KIND_ZB_V, 2, 4, 2, &s));
    assert_int_equal(s.stage_rank[0], s.stage_rank[3]);
    hp_pipeline_plan_opts o = {.model = &c, .schedule = &s, .rows = 2, .seq = 16, .mm = &mm};
    int first[4] = {0, 1, 2, 3};
    hp_pipeline_prediction pr;
    assert_ok(hp_pipeline_predict(&o, first, &pr));
    hp_gpt_stage last = {3, 4, false, true};
    hp_pipeline_stage_plan sp;
    assert_ok(hp_pipeline_plan_stage(&c, &last, 2, 16, 4, &mm, &sp));
    size_t emb = (size_t)c.vocab * (size_t)c.width * sizeof(float);
    assert_int_equal(sp.embedding_bytes, 4 * emb); /* parameter, accumulator, two moments */
    double sum = 0;
    for (int k = 0; k < 4; k++)
        if (s.stage_rank[k] == 0) sum += (double)pr.state_bytes[k] + (double)pr.slots[k] * (double)pr.activation_bytes[k];
    assert_true(fabs(pr.rank_bytes[0] - (sum - 4.0 * (double)emb)) < 1.0);
    hp_pipeline_prediction_free(&pr);
    hp_schedule_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_split), cmocka_unit_test(test_slots),
                                       cmocka_unit_test(test_first_stage_split), cmocka_unit_test(test_stage_offload),
                                       cmocka_unit_test(test_budget), cmocka_unit_test(test_budget_config), cmocka_unit_test(test_calibrated),
                                       cmocka_unit_test(test_tp_collectives), cmocka_unit_test(test_tied_v),
                                       cmocka_unit_test(test_opt_shard_ranks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
