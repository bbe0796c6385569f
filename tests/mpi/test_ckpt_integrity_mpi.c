/* ranks: 2 */
/* Sharded checkpoint integrity across MPI processes: a tiny GPT saved by 2 ranks (weights split
 * over dp, optimizer states ZeRO-style) verifies and loads back; with the two ranks' optimizer
 * files swapped every rank's load and verify fail naming the file and the rank it holds; with one
 * rank's file missing, every rank that needs it (a full load, verify) fails naming it. */
#include "ckptutil.h"

#include "hp/comm_mpi.h"
#include "hp/redistribute.h"

#include <unistd.h>

static hp_comm *g_world;
static char g_tmp[64], g_run[128];
static hp_run_config g_cfg;
static ck_gpt g_gpt;

static const char *layout_of(const hp_named_tensor *t) { return t->shape.ndim == 2 ? "[dp, none]" : "[dp]"; }

/* This rank's block of global tensor t under its layout on m (values copied when `fill`). */
static hp_sharded_tensor block(const hp_named_tensor *t, const hp_mesh *m, bool fill) {
    int r = hp_comm_rank(g_world);
    hp_sharded_tensor s = {t->name, HP_DTYPE_F32, t->shape, {0}, NULL};
    assert_ok(hp_layout_parse(layout_of(t), m, &s.layout));
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    assert_ok(hp_layout_slice_of(&s.layout, m, &t->shape, r, start, len));
    hp_shape local = hp_shape_make(t->shape.ndim, len);
    s.local = calloc(1, (size_t)hp_shape_numel(&local) * sizeof(float) + 4);
    if (fill) hp_copy_box(s.local, &local, zero, t->data, &t->shape, start, len, sizeof(float));
    return s;
}

/* Every tensor of one part (model or optim) on this rank: filled (to save, or the expected values)
 * or zeroed (to load into). */
static hp_sharded_tensor *blocks(const hp_mesh *m, bool optim, bool fill, int *n) {
    *n = optim ? 2 * g_gpt.n : g_gpt.n;
    hp_sharded_tensor *t = calloc((size_t)(*n > 0 ? *n : 1), sizeof *t);
    for (int i = 0; i < *n; i++) t[i] = block(optim ? &g_gpt.optim[i] : &g_gpt.model[i], m, fill);
    return t;
}

static void release(hp_sharded_tensor *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].local);
    free(t);
}

/* Loads one part on this rank and compares it with the saved values. */
static hp_status load_part(const char *dir, const hp_mesh *m, bool optim) {
    int n;
    hp_sharded_tensor *got = blocks(m, optim, false, &n), *want = blocks(m, optim, true, &n);
    hp_status st = hp_checkpoint_load_sharded(dir, optim, m, hp_comm_rank(g_world), got, (size_t)n);
    for (int i = 0; i < n && st == HP_STATUS_OK; i++) {
        hp_shape local;
        assert_ok(hp_layout_local_shape(&got[i].layout, m, &got[i].shape, hp_comm_rank(g_world), &local));
        assert_memory_equal(got[i].local, want[i].local, (size_t)hp_shape_numel(&local) * sizeof(float));
    }
    release(got, n);
    release(want, n);
    return st;
}

static hp_status verify(const char *dir) {
    hp_checkpoint_report r;
    hp_status st = hp_checkpoint_verify(dir, &r);
    hp_checkpoint_report_free(&r);
    return st;
}

/* Rank 0 runs the command (two %s: the good and the bad step directory); everyone waits for it. */
static void on_rank0(const char *fmt, const char *good, const char *bad) {
    if (hp_comm_rank(g_world) == 0) ck_sh2(fmt, good, bad);
    assert_ok(hp_comm_barrier(g_world));
}

static void expect(hp_status st, hp_status want, const char *a, const char *b) {
    if (st != want) fail_msg("got %s (%s), expected %s", hp_status_str(st), hp_error_message(), hp_status_str(want));
    hp_test_assert_error_contains(a);
    if (b) hp_test_assert_error_contains(b);
}

static void test_swapped_and_missing(void **state) {
    (void)state;
    int r = hp_comm_rank(g_world);
    hp_mesh *m;
    assert_ok(hp_mesh_new(1, (int[]){2}, (const char *[]){"dp"}, NULL, 0, &m));
    int nm, no;
    hp_sharded_tensor *model = blocks(m, false, true, &nm), *optim = blocks(m, true, true, &no);
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = g_run;
    a.step = 3;
    a.config = &g_cfg;
    char good[512], bad[256];
    assert_ok(hp_checkpoint_save_sharded(&a, g_world, m, model, (size_t)nm, optim, (size_t)no, good, sizeof good));
    release(model, nm);
    release(optim, no);
    snprintf(bad, sizeof bad, "%s/bad", g_tmp);

    assert_ok(load_part(good, m, false));
    assert_ok(load_part(good, m, true));
    assert_ok(verify(good));

    /* the ranks' optimizer files swapped: each rank's own file now holds the other's moments */
    on_rank0("rm -rf '%2$s' && cp -r '%1$s' '%2$s' && cd '%2$s' && mv optim-r00000.safetensors x && "
             "mv optim-r00001.safetensors optim-r00000.safetensors && mv x optim-r00001.safetensors", good, bad);
    char needle[96];
    snprintf(needle, sizeof needle, "file 'optim-r%05d.safetensors' records rank '%d'", r, 1 - r);
    expect(load_part(bad, m, true), HP_STATUS_CORRUPT, needle, "files swapped between ranks");
    expect(verify(bad), HP_STATUS_CORRUPT, "records rank", "optim-r00000.safetensors");
    assert_ok(load_part(bad, m, false));
    assert_ok(hp_comm_barrier(g_world));

    /* rank 1's model file missing */
    on_rank0("rm -rf '%2$s' && cp -r '%1$s' '%2$s' && rm '%2$s/model-r00001.safetensors'", good, bad);
    if (r == 1) expect(load_part(bad, m, false), HP_STATUS_IO, "model-r00001.safetensors", NULL);
    float *full = malloc((size_t)hp_shape_numel(&g_gpt.model[0].shape) * sizeof(float));
    hp_named_tensor wte = {g_gpt.model[0].name, HP_DTYPE_F32, g_gpt.model[0].shape, full};
    expect(hp_checkpoint_load_model(bad, &wte, 1), HP_STATUS_IO, "model-r00001.safetensors", NULL);
    expect(verify(bad), HP_STATUS_IO, "rank 1's model file", "model-r00001.safetensors");
    assert_ok(hp_checkpoint_load_model(good, &wte, 1));
    assert_memory_equal(full, g_gpt.model[0].data, (size_t)hp_shape_numel(&wte.shape) * sizeof(float));
    free(full);
    assert_ok(hp_comm_barrier(g_world));
    hp_mesh_free(m);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&g_world) != HP_STATUS_OK) {
        fprintf(stderr, "MPI init failed: %s\n", hp_error_message());
        return 1;
    }
    if (hp_comm_size(g_world) != 2) {
        fprintf(stderr, "test_ckpt_integrity_mpi needs 2 ranks\n");
        return 1;
    }
    int32_t name[16] = {0};
    if (hp_comm_rank(g_world) == 0) {
        char tmpl[64] = "/tmp/hp_test_ckint_mpi_XXXXXX";
        if (!mkdtemp(tmpl)) return 1;
        memcpy(name, tmpl, strlen(tmpl) + 1);
    }
    if (hp_comm_broadcast(g_world, name, 16, HP_DTYPE_I32, 0) != HP_STATUS_OK) return 1;
    snprintf(g_tmp, sizeof g_tmp, "%s", (const char *)name);
    snprintf(g_run, sizeof g_run, "%s/run", g_tmp);
    hp_test_tiny_config(&g_cfg, NULL);
    ck_gpt_make(&g_cfg.model, &g_gpt);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swapped_and_missing),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hp_comm_barrier(g_world);
    if (hp_comm_rank(g_world) == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) failed++;
    }
    ck_gpt_free(&g_gpt);
    hp_run_config_free(&g_cfg);
    hp_comm_free(g_world);
    hp_comm_mpi_finalize();
    return failed;
}
