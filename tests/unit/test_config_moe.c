/*
 * The `model.moe:` sub-section of the run config (src/io/config_moe.c): values, defaults, the
 * round trip through YAML and JSON, and errors naming the value with file:line (top_k larger than
 * the experts, a layer outside the model, an unknown router, both every and layers).
 */
#include "testutil.h"

#include "hp/config.h"

#include <stdlib.h>
#include <string.h>

static hp_status load(const char *text, hp_run_config *c) {
    return hp_run_config_load_string(text, strlen(text), "run.yaml", c);
}

/* Loading `text` fails with HP_STATUS_CONFIG and a message containing each of the needles. */
static void expect_error(const char *text, const char *n1, const char *n2) {
    hp_run_config c;
    assert_int_equal(load(text, &c), HP_STATUS_CONFIG);
    hp_test_assert_error_contains(n1);
    if (n2) hp_test_assert_error_contains(n2);
    hp_run_config_free(&c);
}

static void test_moe_values_and_round_trip(void **state) {
    (void)state;
    hp_run_config c;
    assert_ok(load("model: {layers: 4, moe: {experts: 8, top_k: 2, expert_width: 64, shared_experts: 1,\n"
                   "        layers: [1, 3], router: sigmoid_bias, balance_loss: 0.01, bias_update_rate: 0.002}}\n", &c));
    const hp_moe_config *m = &c.model.moe;
    assert_int_equal(m->experts, 8);
    assert_int_equal(m->top_k, 2);
    assert_int_equal(m->expert_width, 64);
    assert_int_equal(m->shared_experts, 1);
    assert_int_equal(m->router, HP_MOE_ROUTER_SIGMOID_BIAS);
    assert_int_equal(m->every, 0);
    assert_int_equal(m->n_layers, 2);
    assert_int_equal(m->layers[1], 3);
    assert_true(m->balance_loss == 0.01f && m->bias_update_rate == 0.002f);
    assert_false(m->training);
    char *yaml = hp_run_config_to_yaml(&c), *json = hp_run_config_to_json(&c);
    assert_non_null(yaml);
    assert_non_null(json);
    hp_run_config a, b;
    assert_ok(hp_run_config_load_string(yaml, strlen(yaml), "saved.yaml", &a));
    assert_ok(hp_run_config_load_string(json, strlen(json), "saved.json", &b));
    assert_memory_equal(&a.model.moe, m, sizeof *m);
    assert_memory_equal(&b.model.moe, m, sizeof *m);
    free(yaml);
    free(json);
    hp_run_config_free(&a);
    hp_run_config_free(&b);
    hp_run_config_free(&c);

    /* defaults: top_k 2, every layer, softmax, no balancing loss; without moe: off and not written */
    assert_ok(load("model: {moe: {experts: 4, expert_width: 32}}\n", &c));
    assert_int_equal(c.model.moe.top_k, 2);
    assert_int_equal(c.model.moe.every, 1);
    assert_int_equal(c.model.moe.router, HP_MOE_ROUTER_SOFTMAX);
    assert_true(c.model.moe.balance_loss == 0.0f);
    hp_run_config_free(&c);
    assert_ok(load("model: {layers: 2}\n", &c));
    assert_int_equal(c.model.moe.experts, 0);
    yaml = hp_run_config_to_yaml(&c);
    assert_null(strstr(yaml, "moe"));
    free(yaml);
    hp_run_config_free(&c);
}

static void test_moe_errors(void **state) {
    (void)state;
    expect_error("model:\n  moe: {experts: 4, top_k: 5, expert_width: 8}\n", "run.yaml:2:",
                 "model.moe.top_k 5 is larger than model.moe.experts 4");
    expect_error("model:\n  layers: 4\n  moe:\n    experts: 4\n    expert_width: 8\n    layers: [1, 4]\n",
                 "run.yaml:6:", "model.moe.layers[1] = 4 is outside [0, model.layers 4)");
    expect_error("model:\n  moe: {experts: 4, expert_width: 8, router: top1}\n", "run.yaml:2:",
                 "model.moe.router 'top1' is not softmax or sigmoid_bias");
    expect_error("model:\n  moe: {experts: 4, expert_width: 8, every: 2, layers: [1]}\n", "run.yaml:2:",
                 "give either 'every' or 'layers'");
    expect_error("model:\n  moe: {experts: 4}\n", "run.yaml:2:", "needs 'expert_width'");
    expect_error("model:\n  moe: {experts: 0, expert_width: 8}\n", "run.yaml:2:", "model.moe.experts 0 must be in [1,");
    expect_error("model:\n  moe: {experts: 4, expert_width: 8, balance_loss: -1}\n", "run.yaml:2:",
                 "model.moe.balance_loss -1 must be >= 0");
    expect_error("model:\n  moe: {experts: 4, expert_width: 8, topk: 2}\n", "unknown key 'topk'", NULL);
    expect_error("model:\n  moe: 8\n", "run.yaml:2:", "model.moe expects a map");
    expect_error("model:\n  family: llama\n  heads: 4\n  moe: {experts: 4, expert_width: 8, top_k: 5}\n", "run.yaml:4:",
                 "top_k");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_values_and_round_trip),
        cmocka_unit_test(test_moe_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
