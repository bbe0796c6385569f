/* A short KJV run: the validation loss falls well below the unigram entropy (labelled slow: the
 * sanitizer pass skips it; the release pass runs it). */
#include "testutil.h"

#include "hp/config.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_learns_kjv(void **state) {
    (void)state;
    hp_run_config c;
    hp_test_tiny_config(&c, NULL);
    c.model.context = 64;
    c.model.width = 64;
    c.model.heads = 4;
    c.train.batch = 16;
    c.train.steps = 300;
    c.train.eval_batches = 4;
    c.optim.warmup = 20;
    hp_trainer *t;
    assert_ok(hp_trainer_new(&c, &t));
    double before, after, losses[300];
    assert_ok(hp_trainer_eval(t, &before));
    hp_test_run_steps(t, 300, losses);
    assert_ok(hp_trainer_eval(t, &after));
    double h = hp_trainer_unigram_entropy(t);
    print_message("val loss %.3f -> %.3f, unigram entropy %.3f nats\n", before, after, h);
    assert_true(before > log(256.0) - 0.5);
    assert_true(after < 0.8 * h);
    char *text;
    assert_ok(hp_trainer_sample(t, "And God", 40, 0.8f, 40, 1, &text));
    assert_int_equal(strlen(text), strlen("And God") + 40);
    free(text);
    hp_trainer_free(t);
}


int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns_kjv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
