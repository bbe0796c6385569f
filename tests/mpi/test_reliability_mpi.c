/* ranks: 2 */
/*
 * Reliability under real MPI processes (docs/reliability.md):
 *   - the run-directory lock is collective: rank 0 alone takes it and removes the .tmp-step_*
 *     debris, every rank learns the outcome, and when the directory is in use every rank returns
 *     the same error (the others' messages say "rank 0: ...") so all stop together;
 *   - a non-finite step under a strategy (DP with ZeRO-sharded optimizer state, TP): every rank
 *     skips it (the guard's scale is replicated), each rank's blocks of the parameters and moments
 *     stay bit for bit, and two in a row stop every rank with HP_STATUS_NONFINITE.
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/run_dir.h"
#include "hp/train.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_rank, g_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_failed = 1;                                                                          \
        }                                                                                          \
    } while (0)

#define OK(expr)                                                                                   \
    do {                                                                                           \
        hp_status st_ = (expr);                                                                    \
        if (st_ != HP_STATUS_OK) {                                                                 \
            fprintf(stderr, "[rank %d] FAIL %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #expr,   \
                    hp_error_message());                                                           \
            g_failed = 1;                                                                          \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void test_lock(hp_comm *world) {
    char dir[128] = "";
    if (g_rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/hp_test_lock_mpi_XXXXXX");
        if (!mkdtemp(dir)) dir[0] = 0;
    }
    OK(hp_comm_broadcast(world, dir, sizeof dir / 4, HP_DTYPE_I32, 0));
    CHECK(dir[0], "no temporary directory");
    if (!dir[0]) return;
    char debris[256];
    snprintf(debris, sizeof debris, "%s/.tmp-step_00000007-sharded", dir);
    if (g_rank == 0) CHECK(mkdir(debris, 0755) == 0, "mkdir %s", debris);
    OK(hp_comm_barrier(world));
    hp_run_dir_lock *l = NULL;
    OK(hp_run_dir_lock_acquire(dir, world, &l));
    CHECK(hp_run_dir_lock_held(l) == (g_rank == 0), "held on rank %d: %d", g_rank, hp_run_dir_lock_held(l));
    CHECK(hp_run_dir_lock_removed(l) == (g_rank == 0 ? 1 : 0), "removed %d", hp_run_dir_lock_removed(l));
    CHECK(!exists(debris), "%s is still there", debris);
    /* a second job on the directory: every rank gets the error */
    hp_run_dir_lock *l2 = NULL;
    hp_status st = hp_run_dir_lock_acquire(dir, world, &l2);
    CHECK(st == HP_STATUS_INVALID_ARGUMENT && !l2, "second acquire: %s", hp_status_str(st));
    char want[64];
    snprintf(want, sizeof want, "pid ");
    CHECK(strstr(hp_error_message(), "is in use by another run") && strstr(hp_error_message(), want),
          "message: %s", hp_error_message());
    if (g_rank != 0) CHECK(!strncmp(hp_error_message(), "rank 0: ", 8), "message: %s", hp_error_message());
    hp_run_dir_lock_release(l);
    OK(hp_run_dir_lock_acquire(dir, world, &l2)); /* released: taken again */
    hp_run_dir_lock_release(l2);
    OK(hp_comm_barrier(world));
    if (g_rank == 0) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "%s", cmd);
    }
}

static const char *poison(int64_t step) { return step == 3 || step == 5 || step == 6 ? "wpe.weight" : NULL; }

/* This rank's blocks of every parameter and moment, concatenated (malloc'd, *n floats). */
static float *snapshot(hp_trainer *t, size_t *n) {
    *n = 0;
    if (hp_program_sync(t->train.p) != HP_STATUS_OK) return NULL;
    size_t len = 0;
    float *all = NULL;
    for (int which = 0; which < 3; which++)
        for (int i = 0; i < t->train.step.n_params; i++) {
            hp_tid id = which == 0 ? t->train.step.params[i] : which == 1 ? t->train.step.m[i] : t->train.step.v[i];
            hp_store_entry_info e;
            if (hp_store_info(t->store, hp_graph_tensor(t->train.lg, id)->name, &e) != HP_STATUS_OK) return NULL;
            float *na = realloc(all, (len + e.bytes / 4 + 1) * sizeof *all);
            if (!na) return NULL;
            all = na;
            if (hp_store_read(t->store, e.name, all + len, e.bytes) != HP_STATUS_OK) return NULL;
            len += e.bytes / 4;
        }
    *n = len;
    return all;
}

static void test_skip(hp_comm *world, const char *family) {
    const char *root = getenv("HP_SOURCE_DIR");
    char text[2048];
    int off = snprintf(text, sizeof text,
                       "model: {vocab: 256, context: 32, layers: 2, heads: 2, width: 32}\n"
                       "data: {corpus: \"%s/data/kjv.txt\"}\n"
                       "train: {steps: 20, batch: 4, seed: 3, skip_nonfinite: 1}\n",
                       root ? root : ".");
    if (!strcmp(family, "zero"))
        snprintf(text + off, sizeof text - (size_t)off,
                 "strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n"
                 "  inputs: {tokens: [dp, none], targets: [dp, none]}\n  optimizer: {shard: [dp]}\n");
    else
        snprintf(text + off, sizeof text - (size_t)off,
                 "strategy:\n  mesh: {device_matrix: [2], alias_name: [tp]}\n"
                 "  params:\n    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
                 "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
                 "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
                 "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n");
    hp_run_config c;
    OK(hp_run_config_load_string(text, strlen(text), family, &c));
    hp_trainer *t;
    hp_status st = hp_trainer_new_dist(&c, world, &t);
    if (st != HP_STATUS_OK) hp_run_config_free(&c);
    OK(st);
    hp__trainer_poison = poison;
    hp_step_metrics m;
    for (int s = 0; s < 2; s++) OK(hp_trainer_step(t, &m));
    size_t n0, n1;
    float *before = snapshot(t, &n0);
    st = hp_trainer_step(t, &m); /* step 3: skipped on every rank */
    CHECK(st == HP_STATUS_OK && m.skipped, "%s step 3: %s, skipped %d", family, hp_status_str(st), m.skipped);
    float *after = snapshot(t, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0 * sizeof *before),
          "%s: a skipped step changed this rank's parameters or moments", family);
    st = hp_trainer_step(t, &m); /* step 4: normal */
    CHECK(st == HP_STATUS_OK && !m.skipped && isfinite(m.loss), "%s step 4: %s loss %g", family, hp_status_str(st), m.loss);
    st = hp_trainer_step(t, &m); /* step 5: skipped */
    CHECK(st == HP_STATUS_OK && m.skipped, "%s step 5: %s", family, hp_status_str(st));
    st = hp_trainer_step(t, &m); /* step 6: the second in a row: every rank stops */
    CHECK(st == HP_STATUS_NONFINITE, "%s step 6: %s", family, hp_status_str(st));
    CHECK(strstr(hp_error_message(), "step 6 is not finite") != NULL, "%s: %s", family, hp_error_message());
    hp__trainer_poison = NULL;
    free(before);
    free(after);
    hp_trainer_free(t);
    hp_run_config_free(&c);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    test_lock(world);
    if (hp_comm_size(world) == 2) {
        test_skip(world, "zero");
        test_skip(world, "tp");
    }
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "collective lock and non-finite skips hold under MPI");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any;
}
