/* ranks: 2 4 8 */
/*
 * `hp train` semantics over real MPI processes: for every strategy family at this world size, the
 * distributed trainer's first-step loss and gradient norm equal the single-rank run's within 1e-5
 * (relative), and its 50-step loss trajectory within 1e-4 — also with HyperOffload planning the
 * per-rank step of a ZeRO run under a fast-tier budget, and with gradient buckets of 4 KiB (several
 * per step) or none. At 4 ranks also: a checkpoint saved
 * under dp2xtp2 resumes under tp4 and under one rank with the same losses afterwards. At 2 ranks
 * also: with model.dropout on, dp, tp and fsdp runs equal the single-rank run with dropout.
 * (Per-element gradient equality for every strategy is tests/unit/test_shard_equiv.c.)
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/shard.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 50

#include "mpi_check.h"

static const char *TP_PARAMS =
    "  params:\n"
    "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
    "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n";

/* The run config for a strategy family at n ranks ("" family: no strategy section). */
static double g_dropout; /* model.dropout of the configs load() makes */

static void make_config(char *buf, size_t cap, const char *family, int n, const char *ckdir) {
    char corpus[1024];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    int off = snprintf(buf, cap,
                       "model: {vocab: 256, context: 32, layers: 2, heads: 4, width: 32, dropout: %g}\n"
                       "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                       "train: {steps: %d, batch: 8, seed: 3, eval_batches: 2, checkpoint_dir: \"%s\"}\n"
                       "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 5, weight_decay: 0.1, grad_clip: 1.0}\n",
                       g_dropout, corpus, STEPS, ckdir);
    int h = n / 2;
    if (!strcmp(family, "dp"))
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n", n);
    else if (!strcmp(family, "zero2"))
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n  optimizer: {shard: [dp]}\n", n);
    else if (!strcmp(family, "tp"))
        off += snprintf(buf + off, cap - off, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [tp]}\n%s", n,
                        TP_PARAMS);
    else if (!strcmp(family, "tpsp"))
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [tp]}\n"
                        "  inputs: {tokens: [none, tp], targets: [none, tp]}\n%s", n, TP_PARAMS);
    else if (!strcmp(family, "dpxtp"))
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, tp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n%s", h, TP_PARAMS);
    else if (!strcmp(family, "fsdp"))
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n"
                        "  params:\n    - {match: \"*\", tensor_map: [dp]}\n", n);
    else if (!strcmp(family, "zero2+offload")) /* HyperOffload on the per-rank (sharded) step */
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n  optimizer: {shard: [dp]}\n"
                        "offload:\n  device_budget: %d\n  host_budget: 64MiB\n  disk_dir: /tmp\n"
                        "  disk_budget: 64MiB\n"
                        "  policy: {params: host, grads: host, optimizer: disk, activations: host}\n",
                        n, 1100000);
    else if (!strcmp(family, "dp/bkt")) /* gradient buckets of 4 KiB: several per step */
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n  bucket_size: 4KiB\n", n);
    else if (!strcmp(family, "fsdp/bkt"))
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n"
                        "  params:\n    - {match: \"*\", tensor_map: [dp]}\n  bucket_size: 4KiB\n", n);
    else if (!strcmp(family, "zero2/nobkt")) /* bucketing off */
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n  optimizer: {shard: [dp]}\n"
                        "  bucket_size: 0\n", n);
    else if (!strcmp(family, "hsdp"))
        off += snprintf(buf + off, cap - off,
                        "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, fsdp]}\n"
                        "  inputs: {tokens: [[dp, fsdp], none], targets: [[dp, fsdp], none]}\n"
                        "  params:\n    - {match: \"*\", tensor_map: [fsdp]}\n", h);
    (void)off;
}

static hp_status load(const char *family, int n, const char *ckdir, hp_run_config *cfg) {
    char text[8192];
    make_config(text, sizeof text, family, n, ckdir);
    return hp_run_config_load_string(text, strlen(text), family[0] ? family : "single", cfg);
}

static void run(hp_trainer *t, int steps, double *loss, double *gnorm) {
    for (int i = 0; i < steps; i++) {
        hp_step_metrics m;
        OK(hp_trainer_step(t, &m));
        loss[i] = m.loss;
        if (gnorm) gnorm[i] = m.grad_norm;
    }
}

static bool close_rel(double a, double b, double rtol) { return fabs(a - b) <= rtol * fabs(b) + 1e-7; }

static void check_family(hp_comm *world, const char *family, const double *ref_loss, const double *ref_gn) {
    int n = hp_comm_size(world);
    hp_run_config cfg;
    OK(load(family, n, "/tmp/unused", &cfg));
    hp_trainer *t = NULL;
    OK(hp_trainer_new_dist(&cfg, world, &t));
    double loss[STEPS], gn[STEPS];
    run(t, STEPS, loss, gn);
    CHECK(close_rel(loss[0], ref_loss[0], 1e-5), "%s/%d: step 1 loss %.9g vs single-rank %.9g", family, n, loss[0],
          ref_loss[0]);
    CHECK(close_rel(gn[0], ref_gn[0], 1e-5), "%s/%d: step 1 gradient norm %.9g vs single-rank %.9g", family, n, gn[0],
          ref_gn[0]);
    int bad = -1;
    for (int i = 0; i < STEPS && bad < 0; i++)
        if (!close_rel(loss[i], ref_loss[i], 1e-4)) bad = i;
    CHECK(bad < 0, "%s/%d: step %d loss %.9g vs single-rank %.9g", family, n, bad + 1, bad >= 0 ? loss[bad] : 0.0,
          bad >= 0 ? ref_loss[bad] : 0.0);
    /* the bucketed families run several buckets, the unbucketed none */
    int nb = hp_partition_n_buckets(hp_trainer_partition(t));
    if (strstr(family, "/bkt")) CHECK(nb >= 2, "%s/%d: %d gradient bucket(s), expected several", family, n, nb);
    if (strstr(family, "/nobkt")) CHECK(nb == 0, "%s/%d: %d gradient buckets with bucket_size 0", family, n, nb);
    if (g_rank == 0)
        printf("%-6s %d ranks: loss %.6f -> %.6f (single rank %.6f -> %.6f), %d redistributions, %lld bytes/rank/step\n",
               family, n, loss[0], loss[STEPS - 1], ref_loss[0], ref_loss[STEPS - 1],
               hp_partition_n_collectives(hp_trainer_partition(t)), (long long)hp_partition_bytes(hp_trainer_partition(t)));
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

/* Save under dp2xtp2 at step 4, then resume under tp4 and under one rank: the same losses. */
static void check_reshard(hp_comm *world) {
    char dir[64] = "/tmp/hp-reshard-XXXXXX";
    if (g_rank == 0 && !mkdtemp(dir)) dir[0] = 0;
    OK(hp_comm_broadcast(world, dir, sizeof dir / 4, HP_DTYPE_I32, 0));
    hp_run_config c1, c2, c3;
    OK(load("dpxtp", 4, dir, &c1));
    OK(load("tp", 4, dir, &c2));
    OK(load("", 1, dir, &c3));
    hp_trainer *t = NULL;
    double a[8], b[4], c[4];
    OK(hp_trainer_new_dist(&c1, world, &t));
    run(t, 4, a, NULL);
    OK(hp_trainer_save(t, NULL, 0));
    run(t, 4, a + 4, NULL);
    hp_trainer_free(t);
    OK(hp_trainer_new_dist(&c2, world, &t));
    OK(hp_trainer_resume(t, dir));
    run(t, 4, b, NULL);
    hp_trainer_free(t);
    OK(hp_trainer_new_dist(&c3, NULL, &t)); /* every process alone: one rank */
    OK(hp_trainer_resume(t, dir));
    run(t, 4, c, NULL);
    hp_trainer_free(t);
    for (int i = 0; i < 4; i++) {
        CHECK(close_rel(b[i], a[4 + i], 1e-5), "resume under tp4, step %d: %.9g vs %.9g under dp2xtp2", 5 + i, b[i],
              a[4 + i]);
        CHECK(close_rel(c[i], a[4 + i], 1e-5), "resume on one rank, step %d: %.9g vs %.9g under dp2xtp2", 5 + i, c[i],
              a[4 + i]);
    }
    if (g_rank == 0) printf("reshard: dp2xtp2 -> tp4 and -> 1 rank, steps 5-8 match (%.6f %.6f %.6f)\n", a[7], b[3], c[3]);
    hp_comm_barrier(world);
    if (g_rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) g_failed = 1;
    }
    hp_run_config_free(&c1);
    hp_run_config_free(&c2);
    hp_run_config_free(&c3);
}

/* Dropout masks keyed by the global element: each family equals the single-rank run with dropout
 * (DROPOUT_STEPS steps), which differs from the run without it. */
#define DROPOUT_STEPS 8
static void check_dropout(hp_comm *world, const double *plain_loss) {
    g_dropout = 0.1;
    hp_run_config cfg;
    double ref[DROPOUT_STEPS], loss[DROPOUT_STEPS];
    hp_trainer *t = NULL;
    OK(load("", 1, "/tmp/unused", &cfg));
    OK(hp_trainer_new_dist(&cfg, NULL, &t));
    run(t, DROPOUT_STEPS, ref, NULL);
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
    CHECK(ref[0] != plain_loss[0], "dropout: step 1 loss %.9g equals the loss without dropout", ref[0]);
    const char *families[] = {"dp", "tp", "fsdp"};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        OK(load(families[f], hp_comm_size(world), "/tmp/unused", &cfg));
        OK(hp_trainer_new_dist(&cfg, world, &t));
        run(t, DROPOUT_STEPS, loss, NULL);
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
        for (int i = 0; i < DROPOUT_STEPS; i++)
            CHECK(close_rel(loss[i], ref[i], 1e-5), "dropout %s: step %d loss %.9g vs single-rank %.9g", families[f],
                  i + 1, loss[i], ref[i]);
        if (g_rank == 0)
            printf("dropout %-4s: loss %.6f -> %.6f (single rank %.6f -> %.6f)\n", families[f], loss[0],
                   loss[DROPOUT_STEPS - 1], ref[0], ref[DROPOUT_STEPS - 1]);
    }
    g_dropout = 0.0;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int n = hp_comm_size(world);
    /* the single-rank reference, computed by every process alone */
    hp_run_config cfg;
    double ref_loss[STEPS], ref_gn[STEPS];
    hp_trainer *t = NULL;
    if (load("", 1, "/tmp/unused", &cfg) != HP_STATUS_OK || hp_trainer_new_dist(&cfg, NULL, &t) != HP_STATUS_OK) {
        fprintf(stderr, "[rank %d] reference: %s\n", g_rank, hp_error_message());
        return 1;
    }
    run(t, STEPS, ref_loss, ref_gn);
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
    const char *families[] = {"dp", "zero2", "tp", "tpsp", "dpxtp", "fsdp", "hsdp", "zero2+offload",
                              "dp/bkt", "fsdp/bkt", "zero2/nobkt"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) check_family(world, families[i], ref_loss, ref_gn);
    if (n == 4) check_reshard(world);
    if (n == 2) check_dropout(world, ref_loss);
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "all strategies match the single-rank run");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
