#include "testutil.h"

#include "hp/config.h"
#include "hp/runtime.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hp_test_assert_error_contains(const char *needle) {
    const char *msg = hp_error_message();
    if (!strstr(msg, needle)) fail_msg("error message '%s' does not contain '%s'", msg, needle);
}

void hp_test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
}

const char *hp_test_source_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", rel);
    return buf;
}

void hp_test_tiny_config(hp_run_config *c, const char *ckdir) {
    *c = hp_run_config_defaults();
    c->model.vocab = 256;
    c->model.context = 32;
    c->model.layers = 2;
    c->model.heads = 2;
    c->model.width = 32;
    c->train.batch = 4;
    c->train.steps = 20;
    c->train.seed = 7;
    c->train.eval_batches = 2;
    c->optim.lr = 3e-3;
    c->optim.warmup = 5;
    c->optim.min_lr = 3e-4;
    const char *corpus = hp_test_source_path("data/kjv.txt");
    size_t n = strlen(corpus) < sizeof c->data.corpus - 1 ? strlen(corpus) : sizeof c->data.corpus - 1;
    memcpy(c->data.corpus, corpus, n);
    c->data.corpus[n] = '\0';
    snprintf(c->train.checkpoint_dir, sizeof c->train.checkpoint_dir, "%s", ckdir ? ckdir : "/tmp/unused");
}

void hp_test_run_steps(hp_trainer *t, int n, double *losses) {
    for (int i = 0; i < n; i++) {
        hp_step_metrics m;
        assert_ok(hp_trainer_step(t, &m));
        losses[i] = m.loss;
    }
}

hp_program *hp_test_compile(hp_graph *g, hp_tid *keep, int nk) {
    assert_ok(hp_graph_status(g));
    hp_program *p;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = nk;
    assert_ok(hp_program_new(g, &o, &p));
    return p;
}
