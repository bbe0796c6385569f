/* Checkpoints: round trip, `latest`, resolve, atomic failure, mismatch errors. */
#include "testutil.h"

#include "hp/checkpoint.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[64];
static char g_run[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp_test_ckpt_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    snprintf(g_run, sizeof g_run, "%s/runs/kjv", g_tmp); /* parents created by save */
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static float g_w[16 * 8], g_b[8], g_m[16 * 8], g_v[16 * 8];

static void save_step(int64_t step, float fill, char *out, size_t n) {
    for (int i = 0; i < 128; i++) g_w[i] = fill + (float)i, g_m[i] = -fill, g_v[i] = fill * fill;
    for (int i = 0; i < 8; i++) g_b[i] = fill;
    hp_named_tensor model[] = {{"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), g_w},
                               {"blocks.0.attn.q.bias", HP_DTYPE_F32, HP_SHAPE(8), g_b}};
    hp_named_tensor optim[] = {{"exp_avg.blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), g_m},
                               {"exp_avg_sq.blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), g_v}};
    hp_run_config cfg = hp_run_config_defaults();
    cfg.model.width = 64;
    cfg.train.seed = 1234;
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = g_run;
    a.step = step;
    a.seed = 1234;
    a.config = &cfg;
    a.model = model;
    a.n_model = 2;
    a.optim = optim;
    a.n_optim = 2;
    a.extra_json = "{\"loss\": 2.5}";
    assert_ok(hp_checkpoint_save(&a, out, n));
}

static void read_latest(char *buf, size_t n) {
    char p[256];
    snprintf(p, sizeof p, "%s/latest", g_run);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, (int)n, f));
    fclose(f);
}

static int count_tmp_entries(void) {
    DIR *d = opendir(g_run);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static void test_round_trip_and_latest(void **state) {
    (void)state;
    char dir[4096];
    save_step(100, 1.0f, dir, sizeof dir);
    char want[256];
    snprintf(want, sizeof want, "%s/step_00000100", g_run);
    assert_string_equal(dir, want);
    char latest[64];
    read_latest(latest, sizeof latest);
    assert_string_equal(latest, "step_00000100\n");
    save_step(200, 2.0f, dir, sizeof dir);
    read_latest(latest, sizeof latest);
    assert_string_equal(latest, "step_00000200\n");
    assert_int_equal(count_tmp_entries(), 0);

    char resolved[4096];
    assert_ok(hp_checkpoint_resolve(g_run, resolved, sizeof resolved));
    assert_string_equal(resolved, dir);
    assert_ok(hp_checkpoint_resolve(want, resolved, sizeof resolved)); /* a step dir resolves to itself */
    assert_string_equal(resolved, want);
    assert_int_equal(hp_checkpoint_resolve(g_tmp, resolved, sizeof resolved), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains(g_tmp);

    float w[128], b[8], m[128], v[128];
    hp_named_tensor model[] = {{"blocks.0.attn.q.bias", HP_DTYPE_F32, HP_SHAPE(8), b},
                               {"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), w}};
    assert_ok(hp_checkpoint_load_model(dir, model, 2));
    assert_true(w[5] == 7.0f && b[0] == 2.0f);
    hp_named_tensor optim[] = {{"exp_avg_sq.blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), v},
                               {"exp_avg.blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), m}};
    assert_ok(hp_checkpoint_load_optim(dir, optim, 2));
    assert_true(m[3] == -2.0f && v[3] == 4.0f);
    /* The older checkpoint is still there. */
    assert_ok(hp_checkpoint_load_model(want, model, 2));
    assert_true(b[0] == 1.0f);

    hp_checkpoint_state s;
    assert_ok(hp_checkpoint_read_state(dir, &s));
    assert_int_equal(s.format_version, HP_CHECKPOINT_FORMAT_VERSION_SINGLE);
    assert_int_equal(s.step, 200);
    assert_int_equal(s.seed, 1234);
    assert_true(s.has_config);
    assert_int_equal(s.config.model.width, 64);
    assert_int_equal(s.config.train.seed, 1234);
    assert_string_equal(s.extra_json, "{\"loss\":2.5}");
    hp_checkpoint_state_free(&s);

    /* Saving the same step again replaces it. */
    save_step(200, 3.0f, dir, sizeof dir);
    assert_ok(hp_checkpoint_load_model(dir, model, 2));
    assert_true(b[0] == 3.0f);
    assert_int_equal(count_tmp_entries(), 0);
}

static void test_mismatch_errors(void **state) {
    (void)state;
    char dir[4096];
    save_step(5, 1.0f, dir, sizeof dir);
    float buf[256];
    hp_named_tensor missing = {"blocks.9.mlp.fc.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), buf};
    assert_int_equal(hp_checkpoint_load_model(dir, &missing, 1), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("blocks.9.mlp.fc.weight");
    hp_test_assert_error_contains("model.safetensors");
    hp_named_tensor shape = {"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(8, 16), buf};
    assert_int_equal(hp_checkpoint_load_model(dir, &shape, 1), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("'blocks.0.attn.q.weight' has shape [16, 8], expected [8, 16]");
    hp_named_tensor dt = {"blocks.0.attn.q.bias", HP_DTYPE_BF16, HP_SHAPE(8), buf};
    assert_int_equal(hp_checkpoint_load_model(dir, &dt, 1), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("dtype f32, expected bf16");

    /* A corrupted file. */
    char p[4200];
    snprintf(p, sizeof p, "%s/optim.safetensors", dir);
    assert_int_equal(truncate(p, 100), 0);
    hp_named_tensor m = {"exp_avg.blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), buf};
    assert_int_equal(hp_checkpoint_load_optim(dir, &m, 1), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("optim.safetensors");

    /* A newer format version. */
    snprintf(p, sizeof p, "%s/state.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"format_version\": 3, \"step\": 5, \"seed\": \"1\"}", f);
    fclose(f);
    hp_checkpoint_state s;
    assert_int_equal(hp_checkpoint_read_state(dir, &s), HP_STATUS_UNSUPPORTED);
    hp_test_assert_error_contains("format_version 3");
    f = fopen(p, "w");
    fputs("{\"format_version\": 1, \"step\": ", f);
    fclose(f);
    assert_int_equal(hp_checkpoint_read_state(dir, &s), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("state.json");
}

static void check_previous_intact(const char *prev_dir, float expect_b) {
    char latest[64];
    read_latest(latest, sizeof latest);
    assert_string_equal(latest, "step_00000001\n");
    float w[128], b[8];
    hp_named_tensor model[] = {{"blocks.0.attn.q.bias", HP_DTYPE_F32, HP_SHAPE(8), b},
                               {"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), w}};
    assert_ok(hp_checkpoint_load_model(prev_dir, model, 2));
    assert_true(b[0] == expect_b);
    assert_int_equal(count_tmp_entries(), 0);
}

static void test_failed_save_leaves_previous(void **state) {
    (void)state;
    char dir[4096];
    save_step(1, 1.0f, dir, sizeof dir);

    /* 1. A file-size limit makes the weights write fail midway (EFBIG). */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 200; /* bytes: less than one tensor */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    float w[128] = {0};
    hp_named_tensor model[] = {{"blocks.0.attn.q.weight", HP_DTYPE_F32, HP_SHAPE(16, 8), w}};
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = g_run;
    a.step = 2;
    a.model = model;
    a.n_model = 1;
    hp_status st = hp_checkpoint_save(&a, NULL, 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, HP_STATUS_IO);
    hp_test_assert_error_contains("model.safetensors");
    hp_test_assert_error_contains("untouched");
    check_previous_intact(dir, 1.0f);
    char p[4200];
    snprintf(p, sizeof p, "%s/step_00000002", g_run);
    assert_int_equal(access(p, F_OK), -1);

    /* 2. A run directory that cannot be created (root ignores permissions, so use a path whose
     * parent is a regular file): nothing changes. */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/latest/run", g_run); /* `latest` is a regular file */
    a.dir = bad;
    assert_int_equal(hp_checkpoint_save(&a, NULL, 0), HP_STATUS_IO);
    hp_test_assert_error_contains(bad);
    check_previous_intact(dir, 1.0f);

    /* 3. Bad arguments. */
    a.dir = g_run;
    a.step = -1;
    assert_int_equal(hp_checkpoint_save(&a, NULL, 0), HP_STATUS_INVALID_ARGUMENT);
    a.step = 3;
    a.extra_json = "[1]";
    assert_int_equal(hp_checkpoint_save(&a, NULL, 0), HP_STATUS_INVALID_ARGUMENT);
    check_previous_intact(dir, 1.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_and_latest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mismatch_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_save_leaves_previous, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
