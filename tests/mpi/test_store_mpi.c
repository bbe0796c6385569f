/* ranks: 2 4 */
/*
 * The state store under real MPI processes: a sharded training run (FSDP, TP) evaluates with a
 * program bound to the store's shards and samples with a single-device program bound to replicated
 * views that the redistribution planner refreshes after each training step. The validation loss
 * equals the single-rank run's (relative 1e-5) and greedy samples are the same text, before and
 * after more training (a stale view would sample the old model).
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

/* What a trainer reports after each of two rounds of 3 steps: val loss and a greedy sample. */
typedef struct outcome {
    double val[2];
    char text[2][64];
} outcome;

static void config(char *buf, size_t cap, const char *family, int n) {
    const char *root = getenv("HP_SOURCE_DIR");
    int off = snprintf(buf, cap,
                       "model: {vocab: 256, context: 32, layers: 2, heads: 4, width: 32}\n"
                       "data: {corpus: \"%s/data/kjv.txt\"}\n"
                       "train: {steps: 20, batch: 8, seed: 3, eval_batches: 2}\n",
                       root ? root : ".");
    if (!strcmp(family, "fsdp"))
        snprintf(buf + off, cap - (size_t)off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                 "  inputs: {tokens: [dp, none], targets: [dp, none]}\n"
                 "  params:\n    - {match: \"*\", tensor_map: [dp]}\n",
                 n);
    else if (!strcmp(family, "tp"))
        snprintf(buf + off, cap - (size_t)off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [tp]}\n"
                 "  params:\n"
                 "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
                 "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
                 "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"
                 "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
                 "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n",
                 n);
}

static void run(hp_comm *world, const char *family, outcome *o) {
    char text[4096];
    config(text, sizeof text, family, world ? hp_comm_size(world) : 1);
    hp_run_config cfg;
    OK(hp_run_config_load_string(text, strlen(text), family, &cfg));
    hp_trainer *t = NULL;
    OK(hp_trainer_new_dist(&cfg, world, &t));
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++) {
            hp_step_metrics m;
            OK(hp_trainer_step(t, &m));
        }
        OK(hp_trainer_eval(t, &o->val[round]));
        char *s = NULL;
        OK(hp_trainer_sample(t, "And God", 12, 0.0f, 0, 1, &s));
        snprintf(o->text[round], sizeof o->text[round], "%s", s);
        free(s);
        OK(hp_trainer_sample(t, "And God", 12, 0.0f, 0, 1, &s)); /* no step since: the same views */
        CHECK(!strcmp(s, o->text[round]), "%s: a second sample without training differs: '%s' vs '%s'", family, s,
              o->text[round]);
        free(s);
    }
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    outcome ref = {0};
    run(NULL, "single", &ref); /* every process alone */
    CHECK(strcmp(ref.text[0], ref.text[1]) != 0 || ref.val[0] != ref.val[1], "training changed nothing");
    const char *families[] = {"fsdp", "tp"};
    for (int f = 0; f < 2; f++) {
        outcome o = {0};
        run(world, families[f], &o);
        for (int r = 0; r < 2; r++) {
            CHECK(fabs(o.val[r] - ref.val[r]) <= 1e-5 * fabs(ref.val[r]), "%s round %d: val loss %.9g vs single rank %.9g",
                  families[f], r, o.val[r], ref.val[r]);
            CHECK(!strcmp(o.text[r], ref.text[r]), "%s round %d: sample '%s' vs single rank '%s'", families[f], r,
                  o.text[r], ref.text[r]);
        }
        if (g_rank == 0)
            printf("%s %d ranks: val %.6f %.6f (single %.6f %.6f), samples '%s' / '%s'\n", families[f],
                   hp_comm_size(world), o.val[0], o.val[1], ref.val[0], ref.val[1], o.text[0], o.text[1]);
    }
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "store-bound eval and sampling match the single-rank run");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
