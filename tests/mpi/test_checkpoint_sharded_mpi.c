/* ranks: 4 */
/* Sharded checkpoints across MPI processes: save under [2, 2] (dp, tp), load under [4] and one device;
 * a failure on one process leaves no step directory and the previous `latest`. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hp/checkpoint.h"
#include "hp/comm_mpi.h"
#include "hp/redistribute.h"
#include "train/checkpoint_internal.h"

static hp_comm *g_world;
static char g_run[128];

/* Tensor `tid`'s global values are tid * 1000 + flat index. */
static void *block_of(int tid, const hp_shape *shape, const hp_layout *l, const hp_mesh *m, int index,
                      hp_shape *local) {
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    assert_ok(hp_layout_slice_of(l, m, shape, index, start, len));
    *local = hp_shape_make(shape->ndim, len);
    float *g = malloc((size_t)hp_shape_numel(shape) * sizeof *g);
    float *b = malloc((size_t)hp_shape_numel(local) * sizeof *b + 1);
    for (int64_t k = 0; k < hp_shape_numel(shape); k++) g[k] = (float)(tid * 1000 + k);
    hp_copy_box(b, local, zero, g, shape, start, len, sizeof(float));
    free(g);
    return b;
}

static hp_status save(hp_mesh *m, int64_t step) {
    int r = hp_comm_rank(g_world);
    hp_sharded_tensor model[2] = {{"w", HP_DTYPE_F32, HP_SHAPE(5, 3), {0}, NULL},
                                  {"b", HP_DTYPE_F32, HP_SHAPE(3), {0}, NULL}};
    hp_sharded_tensor optim[1] = {{"exp_avg.w", HP_DTYPE_F32, HP_SHAPE(5, 3), {0}, NULL}};
    assert_ok(hp_layout_parse("[dp, tp]", m, &model[0].layout));
    assert_ok(hp_layout_parse("[none]", m, &model[1].layout));
    assert_ok(hp_layout_parse("[[dp, tp], none]", m, &optim[0].layout));
    hp_shape local;
    model[0].local = block_of(0, &model[0].shape, &model[0].layout, m, r, &local);
    model[1].local = block_of(1, &model[1].shape, &model[1].layout, m, r, &local);
    optim[0].local = block_of(2, &optim[0].shape, &optim[0].layout, m, r, &local);
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = g_run;
    a.step = step;
    hp_status st = hp_checkpoint_save_sharded(&a, g_world, m, model, 2, optim, 1, NULL, 0);
    free(model[0].local);
    free(model[1].local);
    free(optim[0].local);
    return st;
}

static void fail_on_rank1(const char *tmp, int rank) {
    if (rank != 1) return;
    char p[4200];
    snprintf(p, sizeof p, "%s/optim-r00001.safetensors", tmp);
    mkdir(p, 0755);
}

static void test_save_mpi_load_elsewhere(void **state) {
    (void)state;
    int r = hp_comm_rank(g_world);
    hp_mesh *m;
    assert_ok(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, NULL, 0, &m));
    assert_ok(save(m, 1));
    hp_mesh_free(m);

    char dir[4096];
    assert_ok(hp_checkpoint_resolve(g_run, dir, sizeof dir));
    assert_ok(hp_mesh_new(1, (int[]){4}, (const char *[]){"x"}, NULL, 0, &m));
    hp_sharded_tensor t[1] = {{"w", HP_DTYPE_F32, HP_SHAPE(5, 3), {0}, NULL}};
    hp_sharded_tensor o[1] = {{"exp_avg.w", HP_DTYPE_F32, HP_SHAPE(5, 3), {0}, NULL}};
    assert_ok(hp_layout_parse("[none, x]", m, &t[0].layout));
    assert_ok(hp_layout_parse("[x, none]", m, &o[0].layout));
    hp_shape local;
    float *want = block_of(0, &t[0].shape, &t[0].layout, m, r, &local);
    t[0].local = calloc((size_t)hp_shape_numel(&local) + 1, sizeof(float));
    assert_ok(hp_checkpoint_load_sharded(dir, false, m, r, t, 1));
    assert_memory_equal(t[0].local, want, (size_t)hp_shape_numel(&local) * sizeof(float));
    free(want);
    free(t[0].local);
    want = block_of(2, &o[0].shape, &o[0].layout, m, r, &local);
    o[0].local = calloc((size_t)hp_shape_numel(&local) + 1, sizeof(float));
    assert_ok(hp_checkpoint_load_sharded(dir, true, m, r, o, 1));
    assert_memory_equal(o[0].local, want, (size_t)hp_shape_numel(&local) * sizeof(float));
    free(want);
    free(o[0].local);
    hp_mesh_free(m);

    float full[15], b[3];
    hp_named_tensor named[2] = {{"w", HP_DTYPE_F32, HP_SHAPE(5, 3), full}, {"b", HP_DTYPE_F32, HP_SHAPE(3), b}};
    assert_ok(hp_checkpoint_load_model(dir, named, 2));
    for (int k = 0; k < 15; k++) assert_true(full[k] == (float)k);
    assert_true(b[2] == 1002.0f);

    /* One process fails: every process errors, step 2 does not appear, latest stays. */
    hp__ckpt_sharded_before_write = fail_on_rank1;
    assert_ok(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, NULL, 0, &m));
    hp_status st = save(m, 2);
    hp__ckpt_sharded_before_write = NULL;
    hp_mesh_free(m);
    assert_int_equal(st, HP_STATUS_IO);
    hp_test_assert_error_contains(r == 1 ? "optim-r00001.safetensors" : "rank 1 failed");
    char step2[256];
    snprintf(step2, sizeof step2, "%s/step_00000002", g_run);
    struct stat sb;
    assert_int_not_equal(stat(step2, &sb), 0);
    assert_ok(hp_checkpoint_resolve(g_run, dir, sizeof dir));
    assert_non_null(strstr(dir, "step_00000001"));
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&g_world) != HP_STATUS_OK) {
        fprintf(stderr, "MPI init failed: %s\n", hp_error_message());
        return 1;
    }
    if (hp_comm_size(g_world) != 4) {
        fprintf(stderr, "test_checkpoint_sharded_mpi needs 4 ranks\n");
        return 1;
    }
    /* Rank 0 picks the run directory; the others receive its name. */
    int32_t name[16] = {0};
    if (hp_comm_rank(g_world) == 0) {
        char tmpl[64] = "/tmp/hp_test_ckpt_mpi_XXXXXX";
        if (!mkdtemp(tmpl)) return 1;
        memcpy(name, tmpl, strlen(tmpl) + 1);
    }
    if (hp_comm_broadcast(g_world, name, 16, HP_DTYPE_I32, 0) != HP_STATUS_OK) return 1;
    snprintf(g_run, sizeof g_run, "%s/run", (const char *)name);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_mpi_load_elsewhere),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hp_comm_barrier(g_world);
    if (hp_comm_rank(g_world) == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", (const char *)name);
        if (system(cmd) != 0) failed++;
    }
    hp_comm_free(g_world);
    hp_comm_mpi_finalize();
    return failed;
}
