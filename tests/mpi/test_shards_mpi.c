/* ranks: 2 4 */
/*
 * Token shards under real MPI processes. Rank 0 prepares the KJV as a shard set; then every rank
 * opens a loader for its data-parallel index: over 40 steps each global row is read by exactly one
 * rank (disjoint, covering the batch), and each rank's rows hold the tokens a single-process loader
 * puts there. A data-parallel training run on the shards (every rank reading only its own rows)
 * gives the single-process run's losses, and a run resumed from its step-2 checkpoint the same
 * losses again.
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/data.h"
#include "hp/shards.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

#define B 8
#define T 32
#define STEPS 40

static void check_rows(hp_comm *world, const hp_shard_set *set) {
    int n = hp_comm_size(world);
    hp_loader_options o = hp_loader_options_default();
    o.batch = B, o.context = T, o.seed = 5, o.rank = g_rank, o.world = n;
    hp_loader_options single = o;
    single.rank = 0, single.world = 1;
    hp_loader *ld = NULL, *one = NULL;
    OK(hp_loader_new_shards(set, &o, &ld));
    OK(hp_loader_new_shards(set, &single, &one));
    int32_t counts[STEPS * B] = {0}, total[STEPS * B];
    int32_t x[B * T], y[B * T], xs[B * T], ys[B * T];
    int64_t b, e;
    hp_loader_rows(ld, &b, &e);
    CHECK(e - b == B / n, "rank %d reads %lld rows, not %d", g_rank, (long long)(e - b), B / n);
    for (int s = 0; s < STEPS; s++) {
        OK(hp_loader_batch(ld, s, x, y));
        OK(hp_loader_batch(one, s, xs, ys));
        for (int64_t r = b; r < e; r++) counts[s * B + r]++;
        CHECK(!memcmp(x, xs + b * T, (size_t)(e - b) * T * sizeof *x), "step %d: rows [%lld, %lld) differ from the "
              "single-process loader's", s, (long long)b, (long long)e);
        CHECK(!memcmp(y, ys + b * T, (size_t)(e - b) * T * sizeof *y), "step %d: targets differ", s);
    }
    OK(hp_comm_all_reduce(world, counts, total, STEPS * B, HP_DTYPE_I32, HP_REDUCE_SUM));
    for (int i = 0; i < STEPS * B; i++)
        CHECK(total[i] == 1, "step %d row %d was read by %d ranks (want exactly 1)", i / B, i % B, (int)total[i]);
    hp_loader_free(ld);
    hp_loader_free(one);
}

static void train(hp_comm *world, const char *dir, const char *ck, bool resume, double *losses) {
    char text[2048];
    int n = world ? hp_comm_size(world) : 1;
    int off = snprintf(text, sizeof text,
                       "model: {vocab: 256, context: %d, layers: 2, heads: 2, width: 32}\n"
                       "data: {shards: \"%s\"}\n"
                       "train: {steps: 4, batch: %d, seed: 3, eval_batches: 2, checkpoint_dir: \"%s\"}\n",
                       T, dir, B, ck);
    if (world)
        snprintf(text + off, sizeof text - (size_t)off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                 "  inputs: {tokens: [dp, none], targets: [dp, none]}\n", n);
    hp_run_config cfg;
    OK(hp_run_config_load_string(text, strlen(text), "shards", &cfg));
    hp_trainer *t = NULL;
    OK(hp_trainer_new_dist(&cfg, world, &t));
    int from = 0;
    if (resume) {
        OK(hp_trainer_resume(t, ck));
        from = 2;
    }
    for (int i = from; i < 4 && t; i++) {
        hp_step_metrics m;
        OK(hp_trainer_step(t, &m));
        losses[i] = m.loss;
        if (i == 1 && !resume) OK(hp_trainer_save(t, NULL, 0));
    }
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

/* OK() for main, which goes on to the final all-reduce. */
static void note(hp_status st, const char *what) {
    if (st == HP_STATUS_OK) return;
    fprintf(stderr, "[rank %d] FAIL %s: %s\n", g_rank, what, hp_error_message());
    g_failed = 1;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int32_t name[64] = {0}; /* the directory's name, broadcast as int32s */
    char *dir = (char *)name;
    if (g_rank == 0) {
        snprintf(dir, sizeof name, "/tmp/hp-shards-mpi-XXXXXX");
        if (!mkdtemp(dir)) dir[0] = 0;
    }
    note(hp_comm_broadcast(world, name, 64, HP_DTYPE_I32, 0), "broadcast");
    char set_dir[300], ck[300], ck1[300];
    snprintf(set_dir, sizeof set_dir, "%s/set", dir);
    snprintf(ck, sizeof ck, "%s/run", dir);
    snprintf(ck1, sizeof ck1, "%s/run1-%d", dir, g_rank);
    int prep = 0, prep_all = 0;
    if (g_rank == 0) {
        const char *root = getenv("HP_SOURCE_DIR");
        char kjv[512];
        snprintf(kjv, sizeof kjv, "%s/data/kjv.txt", root ? root : ".");
        const char *inputs[1] = {kjv};
        hp_shards_prepare_options po = hp_shards_prepare_options_default();
        po.shard_tokens = 1000000;
        po.threads = 2;
        hp_status st = hp_shards_prepare(inputs, 1, set_dir, &po, NULL);
        if (st != HP_STATUS_OK) fprintf(stderr, "prepare: %s\n", hp_error_message());
        prep = st != HP_STATUS_OK;
    }
    note(hp_comm_all_reduce(world, &prep, &prep_all, 1, HP_DTYPE_I32, HP_REDUCE_MAX), "all-reduce");
    if (!prep_all) {
        hp_shard_set *set = NULL;
        note(hp_shard_set_open(set_dir, false, &set), set_dir);
        if (set) check_rows(world, set);
        hp_shard_set_free(set);
        double ref[4] = {0}, dist[4] = {0}, resumed[4] = {0};
        train(NULL, set_dir, ck1, false, ref); /* every process alone */
        train(world, set_dir, ck, false, dist);
        train(world, set_dir, ck, true, resumed);
        for (int i = 0; i < 4; i++) {
            CHECK(fabs(dist[i] - ref[i]) <= 1e-5 * fabs(ref[i]), "step %d: dp loss %.9g vs single %.9g", i + 1, dist[i],
                  ref[i]);
            if (i >= 2)
                CHECK(fabs(resumed[i] - dist[i]) <= 1e-6 * fabs(dist[i]), "step %d: resumed loss %.9g vs %.9g", i + 1,
                      resumed[i], dist[i]);
        }
        if (g_rank == 0)
            printf("%d ranks: losses %.6f %.6f %.6f %.6f (single %.6f %.6f %.6f %.6f; resumed %.6f %.6f)\n",
                   hp_comm_size(world), dist[0], dist[1], dist[2], dist[3], ref[0], ref[1], ref[2], ref[3], resumed[2],
                   resumed[3]);
    } else {
        g_failed = 1;
    }
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    hp_comm_barrier(world);
    if (g_rank == 0) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (dir[0] && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
        printf("%s\n", any ? "FAILED" : "ranks read disjoint rows of the shards; dp training and resume match");
    }
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
