/*
 * GRPO on one rank (hp/rl.h): the task (prompts, answers, exact-match reward), learning (the mean
 * reward of the last steps clearly above the first steps' after a supervised start whose reward is
 * well below 1, and the greedy accuracy up), co-located weights shared through the store (the
 * actor's copy equals the learner's after every step), several GRPO iterations per batch, and config
 * errors naming value and line.
 */
#include "hp/config.h"
#include "hp/rl.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>

static hp_rl_config task(const char *name) {
    hp_rl_config r = {0};
    strcpy(r.task, name);
    r.min_digits = 3, r.max_digits = 5;
    return r;
}

static void test_task(void **state) {
    (void)state;
    hp_rl_config r = task("reverse");
    int32_t p[32], a[32];
    int seen[6] = {0};
    for (int64_t i = 0; i < 200; i++) {
        int n = hp_rl_prompt(&r, 7, i, p);
        assert_true(n >= 4 && n <= 6);
        seen[n - 1]++;
        assert_int_equal(p[n - 1], '>');
        for (int k = 0; k < n - 1; k++) assert_true(p[k] >= '0' && p[k] <= '9');
        int32_t q[32];
        assert_int_equal(hp_rl_prompt(&r, 7, i, q), n); /* a pure function of (seed, index) */
        assert_memory_equal(p, q, sizeof(int32_t) * (size_t)n);
    }
    assert_true(seen[3] > 0 && seen[4] > 0 && seen[5] > 0);
    const int32_t prompt[] = {'3', '1', '4', '>'};
    assert_int_equal(hp_rl_answer(&r, prompt, 4, a), 4);
    const int32_t rev[] = {'4', '1', '3', '\n'};
    assert_memory_equal(a, rev, sizeof rev);
    const int32_t good[] = {'4', '1', '3', '\n', 'x', 'y'}, bad[] = {'4', '1', '3', '3'}, early[] = {'4', '1', '\n'};
    assert_true(hp_rl_reward(&r, prompt, 4, good, 6) == 1.0); /* what follows '\n' is ignored */
    assert_true(hp_rl_reward(&r, prompt, 4, bad, 4) == 0.0);
    assert_true(hp_rl_reward(&r, prompt, 4, early, 3) == 0.0);
    assert_true(hp_rl_reward(&r, prompt, 4, good, 3) == 0.0); /* cut before the '\n' */
    hp_rl_config s = task("sort");
    const int32_t sorted[] = {'1', '3', '4', '\n'};
    hp_rl_answer(&s, prompt, 4, a);
    assert_memory_equal(a, sorted, sizeof sorted);
}

static const char *const LEARN =
    "model: {vocab: 256, context: 12, layers: 2, heads: 2, width: 64}\n"
    "train: {seed: 2}\n"
    "optim: {lr: 1.0e-3, min_lr: 1.0e-3, warmup: 0, weight_decay: 0.0, grad_clip: 1.0}\n"
    "rl: {digits: [3, 5], prompts: 8, group_size: 8, steps: %d, sft_steps: 150, sft_batch: 32, sft_lr: 3.0e-3, "
    "kl_beta: 0.0, eval_prompts: 128}\n";

#define LEARN_STEPS 100
#define WINDOW 20

static void test_learns(void **state) {
    (void)state;
    char text[1024];
    snprintf(text, sizeof text, LEARN, LEARN_STEPS);
    hp_run_config cfg;
    assert_ok(hp_run_config_load_string(text, strlen(text), "learn.yaml", &cfg));
    hp_rl_opts o = HP_RL_OPTS_DEFAULT;
    o.verify_sync = true; /* one rank, co-located: the generator reads the learner's own buffers */
    hp_rl *rl;
    assert_ok(hp_rl_new(&cfg, NULL, &o, &rl));
    assert_true(hp_rl_is_controller(rl));
    assert_string_equal(hp_rl_mode(rl), "co-located");
    double acc0, acc1, first = 0, last = 0;
    assert_ok(hp_rl_eval(rl, &acc0));
    int checked = 0;
    for (int i = 0; i < LEARN_STEPS; i++) {
        hp_rl_step_metrics m;
        assert_ok(hp_rl_step(rl, &m));
        assert_int_equal(m.step, i + 1);
        assert_int_equal(m.sync_mismatch, 0);
        assert_int_equal(m.sync_bytes, 0); /* shared, not copied */
        checked += m.sync_checked;
        if (i < WINDOW) first += m.reward_mean / WINDOW;
        if (i >= LEARN_STEPS - WINDOW) last += m.reward_mean / WINDOW;
        if (i == 0) assert_true(m.kl < 1e-6); /* the first batch: policy = reference */
    }
    assert_true(checked > 0);
    assert_int_equal(hp_rl_step(rl, NULL), HP_STATUS_INVALID_ARGUMENT);
    assert_ok(hp_rl_eval(rl, &acc1));
    printf("reward %.3f (first %d steps) -> %.3f (last %d); greedy accuracy %.3f -> %.3f\n", first, WINDOW, last, WINDOW,
           acc0, acc1);
    assert_true(first < 0.5); /* the start emits the format but is often wrong */
    assert_true(last > first + 0.1);
    assert_true(acc1 > acc0);
    hp_rl_free(rl);
    hp_run_config_free(&cfg);
}

/* GRPO iterations (rl.iterations: 2): the batch's first update is the one-iteration run's exactly
 * (same start, same batch: its loss bitwise equal, every ratio 1); the second update sees a moved
 * policy, so its loss differs; and the job still learns. */
static void test_iterations(void **state) {
    (void)state;
    const int steps = 60;
    double loss1[2] = {0};
    double first = 0, last = 0, acc0 = 0, acc1 = 0;
    for (int K = 1; K <= 2; K++) {
        char text[1024], rl[64];
        snprintf(text, sizeof text, LEARN, steps);
        snprintf(rl, sizeof rl, "rl: {iterations: %d, ", K);
        char *at = strstr(text, "rl: {");
        assert_non_null(at);
        char full[1200];
        snprintf(full, sizeof full, "%.*s%s%s", (int)(at - text), text, rl, at + 5);
        hp_run_config cfg;
        assert_ok(hp_run_config_load_string(full, strlen(full), "iter.yaml", &cfg));
        assert_int_equal(cfg.rl.iterations, K);
        hp_rl *r;
        assert_ok(hp_rl_new(&cfg, NULL, NULL, &r));
        if (K == 2) assert_ok(hp_rl_eval(r, &acc0));
        for (int i = 0; i < (K == 1 ? 1 : steps); i++) {
            hp_rl_step_metrics m;
            assert_ok(hp_rl_step(r, &m));
            if (i == 0) {
                loss1[K - 1] = m.loss_first;
                if (K == 1) assert_true(m.loss == m.loss_first);
                else assert_true(m.loss != m.loss_first);
            }
            if (K == 2 && i < WINDOW) first += m.reward_mean / WINDOW;
            if (K == 2 && i >= steps - WINDOW) last += m.reward_mean / WINDOW;
        }
        if (K == 2) assert_ok(hp_rl_eval(r, &acc1));
        hp_rl_free(r);
        hp_run_config_free(&cfg);
    }
    assert_true(loss1[0] == loss1[1]);
    printf("2 iterations: reward %.3f (first %d steps) -> %.3f (last %d of %d); greedy accuracy %.3f -> %.3f\n", first,
           WINDOW, last, WINDOW, steps, acc0, acc1);
    assert_true(last > first + 0.1);
}

static void expect_bad(const char *text, const char *where, const char *needle) {
    hp_run_config cfg;
    hp_status st = hp_run_config_load_string(text, strlen(text), "bad.yaml", &cfg);
    if (st != HP_STATUS_CONFIG) fail_msg("%s\ngave %s (%s), expected a config error", text, hp_status_str(st), hp_error_message());
    hp_test_assert_error_contains(where);
    hp_test_assert_error_contains(needle);
}

#define MODEL "model: {vocab: 256, context: 12, layers: 1, heads: 2, width: 32}\n"

static void test_config_errors(void **state) {
    (void)state;
    expect_bad(MODEL "rl:\n  off_policy: 2\n", "bad.yaml:3:", "rl.off_policy 2 must be in [0, 1]");
    expect_bad(MODEL "rl:\n  iterations: 0\n", "bad.yaml:3:", "rl.iterations 0 must be in [1, 64]");
    expect_bad(MODEL "rl:\n  group_size: 1\n", "bad.yaml:3:", "rl.group_size 1 must be in [2,");
    expect_bad(MODEL "rl:\n  task: add\n", "bad.yaml:3:", "rl.task: unknown task 'add'");
    expect_bad(MODEL "rl:\n  clip_eps: 1.5\n", "bad.yaml:3:", "rl.clip_eps 1.5 must be in (0, 1)");
    expect_bad(MODEL "rl:\n  digits: [4, 3]\n", "bad.yaml:3:", "rl.digits [4, 3] must satisfy");
    expect_bad(MODEL "rl:\n  digits: [3, 6]\n", "bad.yaml:3:", "need model.context >= 14");
    expect_bad(MODEL "rl:\n  bogus: 1\n", "bad.yaml:3:", "unknown key 'bogus'");
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0, 1], mesh: {device_matrix: [2], alias_name: [dp]}}\n"
               "  l: {kind: learner, ranks: [1, 2], mesh: {device_matrix: [2], alias_name: [dp]}}\n",
               "bad.yaml:4:", "share 1 rank");
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0]}\n  b: {kind: actor, ranks: [1]}\n"
               "  l: {kind: learner, ranks: [2]}\n", "bad.yaml:5:", "a second group of kind actor");
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0]}\n", "bad.yaml:4:", "needs a group of kind learner");
    expect_bad(MODEL "groups:\n  a: {kind: actor, ranks: [0]}\n  l: {kind: learner, ranks: [1]}\n", "bad.yaml:3:",
               "RL groups need an rl: section");
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0], module: [head]}\n  l: {kind: learner, ranks: [1]}\n",
               "bad.yaml:4:", "groups.a.module: a group of kind actor runs the whole model");
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0, 1], mesh: {device_matrix: [1, 2], alias_name: [x, y]}}\n"
               "  l: {kind: learner, ranks: [2]}\n", "bad.yaml:4:", "the actor's mesh has one axis");
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0, 1, 2, 3], mesh: {device_matrix: [2, 2], alias_name: "
               "[dp, tp]},\n      strategy: {params: [{match: \"*.attn.[qkv].weight\", tensor_map: [dp, none]}]}}\n"
               "  l: {kind: learner, ranks: [4]}\n", "bad.yaml:5:", "splits over dp, the axis of the actor's replicas");
    /* a tensor-parallel actor: its degree divides the heads (and kv_heads); its own ranks */
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0, 1, 2], mesh: {device_matrix: [3], alias_name: [tp]},\n"
               "      strategy: {params: [{match: \"*.attn.[qkv].weight\", tensor_map: [tp, none]}]}}\n"
               "  l: {kind: learner, ranks: [3]}\n", "bad.yaml:4:", "tensor parallelism of degree 3 does not divide "
               "model.heads 2");
    expect_bad("model: {family: llama, vocab: 256, context: 12, layers: 1, heads: 4, kv_heads: 1, width: 32}\n"
               "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0, 1], mesh: {device_matrix: [2], alias_name: [tp]},\n"
               "      strategy: {params: [{match: \"*.[qkv]_proj.weight\", tensor_map: [tp, none]}]}}\n"
               "  l: {kind: learner, ranks: [2]}\n", "bad.yaml:4:", "does not divide model.kv_heads 1");
    expect_bad(MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0, 1], mesh: {device_matrix: [2], alias_name: [tp]},\n"
               "      strategy: {params: [{match: \"*.attn.[qkv].weight\", tensor_map: [tp, none]}]}}\n"
               "  l: {kind: learner, ranks: [0, 1], mesh: {device_matrix: [1, 2], alias_name: [dp, fsdp]}}\n", "bad.yaml:4:",
               "a tensor-parallel actor on the learner's ranks (co-located) needs the learner's mesh shape (groups.l.mesh: 2 axes, "
               "the actor's 1");
    expect_bad(MODEL "rl: {prompts: 1, group_size: 2}\ngroups:\n  a: {kind: actor, ranks: [0, 1, 2], mesh: {device_matrix: "
               "[3], alias_name: [dp]}}\n  l: {kind: learner, ranks: [3]}\n", "bad.yaml:4:", "samples only");
    /* the world size against the groups */
    hp_run_config cfg;
    const char *ok = MODEL "rl: {}\ngroups:\n  a: {kind: actor, ranks: [0]}\n  l: {kind: learner, ranks: [1]}\n";
    assert_ok(hp_run_config_load_string(ok, strlen(ok), "ok.yaml", &cfg));
    hp_rl *rl;
    assert_int_equal(hp_rl_new(&cfg, NULL, NULL, &rl), HP_STATUS_CONFIG);
    hp_test_assert_error_contains("groups.l.ranks: rank 1 is out of range: the job runs on 1 rank");
    hp_run_config_free(&cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_learns),
        cmocka_unit_test(test_iterations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
