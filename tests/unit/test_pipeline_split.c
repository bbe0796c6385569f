/*
 * The cost-model stage split (hp_pipeline_auto_split): contiguous, covering, every middle stage
 * with a block, and never slower than the even split by layer count; a costly head (large vocab)
 * takes blocks away from the last stage.
 */
#include "testutil.h"

#include "hp/pipeline.h"

#include <stdlib.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_split)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
