/* Sizes against the machine (hp/fit.h; docs/reliability.md): the machine's limits, the planned
 * memory of a run per rank (parameters, AdamW states, activations; sharded by a strategy; under an
 * offload budget; a pipeline's stages), nothing allocated for a model far larger than the machine,
 * and the verdict with what to change. The whole-process check is tests/fit.sh. */
#include "testutil.h"

#include "hp/fit.h"
#include "hp/nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* A run config from YAML text, its corpus the repository's. */
static void load(const char *yaml, hp_run_config *cfg) {
    char text[2048];
    const char *src = getenv("HP_SOURCE_DIR");
    snprintf(text, sizeof text, "data: {corpus: %s/data/kjv.txt}\n%s", src ? src : ".", yaml);
    assert_ok(hp_run_config_load_string(text, strlen(text), "fit.yaml", cfg));
}

static const char *TINY = "model: {context: 16, layers: 2, heads: 2, width: 32}\ntrain: {batch: 4}\n";

static void test_machine(void **state) {
    (void)state;
    hp_machine_memory m;
    assert_ok(hp_machine_memory_get(&m));
    assert_true(m.physical > 0);
    assert_true(m.local_ranks >= 1);
    assert_true(m.limit > 0 && m.limit <= m.physical);
    setenv("HP_MEMORY_LIMIT", "3M", 1);
    assert_ok(hp_machine_memory_get(&m));
    assert_int_equal(m.limit, 3 << 20);
    assert_string_equal(m.limited_by, "HP_MEMORY_LIMIT");
    setenv("HP_MEMORY_LIMIT", "12x", 1);
    assert_int_equal(hp_machine_memory_get(&m), HP_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(hp_error_message(), "'12x'"));
    unsetenv("HP_MEMORY_LIMIT");
}

static void test_estimate(void **state) {
    (void)state;
    hp_run_config cfg;
    load(TINY, &cfg);
    hp_run_memory one;
    assert_ok(hp_run_memory_estimate(&cfg, 1, 0, &one));
    hp_gpt_config gc = {.vocab = 256, .context = 16, .layers = 2, .heads = 2, .width = 32};
    assert_int_equal(one.params, 4 * (uint64_t)hp_gpt_n_params(&gc));
    assert_int_equal(one.optimizer, 2 * one.params);
    assert_true(one.activations > 0);
    assert_int_equal(one.fast, one.params + one.optimizer + one.activations);
    assert_true(one.corpus > 4000000); /* data/kjv.txt */
    assert_int_equal(one.ram, one.fast + one.host + one.corpus);
    assert_false(one.offload || one.pipeline);
    hp_run_config_free(&cfg);
    /* FSDP over 2 ranks: half the parameters and AdamW states per rank (the first rank's blocks,
     * the larger ones of uneven shards); data parallelism alone: all of them */
    load("model: {context: 16, layers: 2, heads: 2, width: 32}\ntrain: {batch: 4}\nstrategy:\n"
         "  mesh: {device_matrix: [2], alias_name: [dp]}\n  inputs: {tokens: [dp, none], targets: [dp, none]}\n"
         "  params:\n    - {match: \"*\", tensor_map: [dp]}\n", &cfg);
    hp_run_memory fsdp;
    assert_ok(hp_run_memory_estimate(&cfg, 2, 1, &fsdp));
    assert_true(fsdp.params < one.params * 0.6 && fsdp.params >= one.params / 2);
    assert_true(fsdp.optimizer < one.optimizer * 0.6);
    hp_run_config_free(&cfg);
    load("model: {context: 16, layers: 2, heads: 2, width: 32}\ntrain: {batch: 4}\nstrategy:\n"
         "  mesh: {device_matrix: [2], alias_name: [dp]}\n  inputs: {tokens: [dp, none], targets: [dp, none]}\n", &cfg);
    hp_run_memory dp;
    assert_ok(hp_run_memory_estimate(&cfg, 2, 0, &dp));
    assert_int_equal(dp.params, one.params);
    assert_true(dp.activations < one.activations); /* half the rows */
    assert_int_equal(hp_run_memory_estimate(&cfg, 3, 0, &dp), HP_STATUS_CONFIG); /* the mesh against the world */
    assert_int_equal(hp_run_memory_estimate(&cfg, 2, 2, &dp), HP_STATUS_INVALID_ARGUMENT);
    hp_run_config_free(&cfg);
}

/* A model of some 50 TB is planned without allocating it: the process's address space is capped
 * at 2 GiB while it plans. */
static void test_huge_not_allocated(void **state) {
    (void)state;
    hp_run_config cfg;
    load("model: {context: 16, layers: 1, heads: 1, width: 1048576}\ntrain: {batch: 1}\n", &cfg);
    struct rlimit old, cap = {(rlim_t)2 << 30, (rlim_t)2 << 30};
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    cap.rlim_max = old.rlim_max;
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < cap.rlim_cur) cap.rlim_cur = old.rlim_max;
#if defined(__SANITIZE_ADDRESS__)
    cap = old; /* AddressSanitizer's shadow memory needs terabytes of address space: no cap */
#endif
    assert_int_equal(setrlimit(RLIMIT_AS, &cap), 0);
    hp_run_memory need;
    hp_status st = hp_run_memory_estimate(&cfg, 1, 0, &need);
    hp_machine_memory have;
    hp_status st2 = hp_machine_memory_get(&have);
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
    assert_ok(st);
    assert_ok(st2);
    assert_true(need.params > ((uint64_t)40 << 40)); /* 12 * 2^40 floats and more */
#if !defined(__SANITIZE_ADDRESS__)
    assert_true(have.rlimit > 0 && have.limit <= have.rlimit);
#endif
    hp_status v = hp_run_memory_check(&cfg, &need, &have);
    assert_int_equal(v, HP_STATUS_OUT_OF_MEMORY);
    const char *msg = hp_error_message();
    assert_non_null(strstr(msg, "the run needs about"));
    assert_non_null(strstr(msg, "TiB") ? strstr(msg, "TiB") : strstr(msg, "GiB"));
#if !defined(__SANITIZE_ADDRESS__)
    assert_non_null(strstr(msg, "RLIMIT_AS/RLIMIT_DATA"));
#endif
    assert_non_null(strstr(msg, "model.width (now 1048576)")); /* the parameters dominate: named first */
    assert_true(strstr(msg, "model.width") < strstr(msg, "model.context"));
    assert_non_null(strstr(msg, "hp train --force"));
    hp_run_config_free(&cfg);
}

static void test_verdict(void **state) {
    (void)state;
    hp_run_config cfg;
    load(TINY, &cfg);
    hp_run_memory need;
    assert_ok(hp_run_memory_estimate(&cfg, 1, 0, &need));
    hp_machine_memory have = {.physical = need.ram, .local_ranks = 1, .limit = need.ram, .limited_by = "physical memory"};
    assert_ok(hp_run_memory_check(&cfg, &need, &have));
    have.limit = 0; /* nothing known: nothing to refuse */
    assert_ok(hp_run_memory_check(&cfg, &need, &have));
    have = (hp_machine_memory){.physical = 2 * need.ram - 2, .local_ranks = 2, .limit = need.ram - 1,
                               .limited_by = "physical memory"};
    assert_int_equal(hp_run_memory_check(&cfg, &need, &have), HP_STATUS_OUT_OF_MEMORY);
    const char *msg = hp_error_message();
    assert_non_null(strstr(msg, "shared by 2 ranks of this job on this machine"));
    assert_non_null(strstr(msg, "model.context (now 16) or train.batch (now 4)"));
    assert_non_null(strstr(msg, "offload: with a device_budget and the disk tier"));
    hp_run_config_free(&cfg);
}

/* Under an offload budget the fast tier holds what the residency plan keeps; the rest has a home
 * on the host or the disk tier, and only the disk's is not RAM. */
static void test_offload(void **state) {
    (void)state;
    hp_run_config cfg;
    load(TINY, &cfg);
    hp_run_memory plain;
    assert_ok(hp_run_memory_estimate(&cfg, 1, 0, &plain));
    hp_run_config_free(&cfg);
    char yaml[512];
    snprintf(yaml, sizeof yaml, "%soffload: {device_budget: %llu, disk_dir: /tmp/hp_test_fit_disk, "
             "policy: {params: disk, grads: disk, optimizer: disk, activations: host}}\n", TINY,
             (unsigned long long)(plain.fast * 2 / 3));
    load(yaml, &cfg);
    hp_run_memory off;
    assert_ok(hp_run_memory_estimate(&cfg, 1, 0, &off));
    assert_true(off.offload);
    assert_true(off.fast <= plain.fast * 2 / 3);
    assert_true(off.disk > 0);
    assert_true(off.ram < plain.ram);
    assert_int_equal(off.params, plain.params); /* the model's figures stay */
    hp_run_config_free(&cfg);
}

/* A pipeline rank: its stage's programs and the full model copy every pipeline rank keeps. */
static void test_pipeline(void **state) {
    (void)state;
    hp_run_config cfg;
    load("model: {context: 16, layers: 2, heads: 2, width: 32}\ntrain: {batch: 4}\n"
         "pipeline: {schedule: 1f1b, micro_batches: 2}\n"
         "groups:\n  first: {ranks: 1, module: [embedding, blocks.0-0]}\n  second: {ranks: 1, module: [blocks.1-1, head]}\n",
         &cfg);
    hp_run_memory r0, r1;
    assert_ok(hp_run_memory_estimate(&cfg, 2, 0, &r0));
    assert_ok(hp_run_memory_estimate(&cfg, 2, 1, &r1));
    assert_true(r0.pipeline && r1.pipeline);
    hp_gpt_config gc = {.vocab = 256, .context = 16, .layers = 2, .heads = 2, .width = 32};
    uint64_t copy = 4 * (uint64_t)hp_gpt_n_params(&gc);
    assert_true(r0.params > copy && r1.params > copy); /* the copy plus the stage's own */
    assert_true(r0.activations > 0 && r1.activations > 0);
    assert_int_equal(r0.fast, r0.params + r0.optimizer + r0.activations);
    assert_int_equal(hp_run_memory_estimate(&cfg, 3, 0, &r0), HP_STATUS_CONFIG); /* groups against the world */
    hp_run_config_free(&cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_machine),  cmocka_unit_test(test_estimate), cmocka_unit_test(test_huge_not_allocated),
        cmocka_unit_test(test_verdict),  cmocka_unit_test(test_offload),  cmocka_unit_test(test_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
