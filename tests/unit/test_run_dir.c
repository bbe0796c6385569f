/* The run-directory guard: a fresh run refuses a directory holding checkpoints, --resume may not
 * move `latest` backwards, --overwrite deletes the old checkpoints (and only them); saves never
 * move `latest` backwards; and `hp train` / `hp check` at the command line. */
#include "testutil.h"

#include "hp/checkpoint.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[64];
static char g_run[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp_test_run_dir_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    snprintf(g_run, sizeof g_run, "%s/run", g_tmp);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static float g_w[4];

static hp_status save(const char *dir, int64_t step) {
    hp_named_tensor model[] = {{"w", HP_DTYPE_F32, HP_SHAPE(4), g_w}};
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = dir;
    a.step = step;
    a.model = model;
    a.n_model = 1;
    return hp_checkpoint_save(&a, NULL, 0);
}

static bool exists(const char *dir, const char *leaf) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, leaf);
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void expect_latest(const char *dir, const char *want) {
    char p[512], name[128] = "";
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(name, sizeof name, f));
    fclose(f);
    name[strcspn(name, "\n")] = 0;
    assert_string_equal(name, want);
}

/* Entries of dir whose name starts with prefix. */
static int count_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

static void test_guard(void **state) {
    (void)state;
    /* Nothing there (not even the directory): every mode proceeds. */
    assert_ok(hp_run_dir_prepare(g_run, HP_RUN_DIR_MODE_FRESH, 0));
    hp_run_dir_info info;
    assert_ok(hp_run_dir_inspect(g_run, &info));
    assert_int_equal(info.n_steps, 0);
    assert_int_equal(info.latest_step, -1);

    /* Another run's checkpoints at steps 500 and 1000. */
    assert_ok(save(g_run, 500));
    assert_ok(save(g_run, 1000));
    assert_ok(hp_run_dir_inspect(g_run, &info));
    assert_true(info.has_latest);
    assert_int_equal(info.latest_step, 1000);
    assert_int_equal(info.newest_step, 1000);
    assert_int_equal(info.n_steps, 2);

    /* A fresh run stops, naming the directory, its latest step and both ways out. */
    assert_int_equal(hp_run_dir_prepare(g_run, HP_RUN_DIR_MODE_FRESH, 0), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains(g_run);
    hp_test_assert_error_contains("latest step 1000");
    hp_test_assert_error_contains("--resume");
    hp_test_assert_error_contains("--overwrite");

    /* Resuming from the newest step proceeds; from an older one it would move latest backwards. */
    assert_ok(hp_run_dir_prepare(g_run, HP_RUN_DIR_MODE_RESUME, 1000));
    assert_int_equal(hp_run_dir_prepare(g_run, HP_RUN_DIR_MODE_RESUME, 60), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("holds step 1000, newer than step 60");

    /* A 60-step save never makes latest name step 60 behind step 1000's back. */
    assert_int_equal(save(g_run, 60), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("backwards");
    expect_latest(g_run, "step_00001000");
    assert_false(exists(g_run, "step_00000060"));
    assert_ok(save(g_run, 1000)); /* the same step may be saved again */

    /* --overwrite: latest and every step directory go; other files stay; nothing half-removed. */
    char p[512];
    snprintf(p, sizeof p, "%s/metrics.jsonl", g_run);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    /* A trash folder left by a crashed overwrite is cleaned up too. */
    snprintf(p, sizeof p, "%s/.overwritten-999999/step_00000007", g_run);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && touch '%s/state.json'", p, p);
    assert_int_equal(system(cmd), 0);
    assert_ok(hp_run_dir_prepare(g_run, HP_RUN_DIR_MODE_OVERWRITE, 0));
    assert_false(exists(g_run, "latest"));
    assert_int_equal(count_prefix(g_run, "step_"), 0);
    assert_int_equal(count_prefix(g_run, ".overwritten-"), 0);
    assert_true(exists(g_run, "metrics.jsonl"));
    assert_ok(hp_run_dir_prepare(g_run, HP_RUN_DIR_MODE_FRESH, 0));

    /* The new run's checkpoints go where the old ones were. */
    assert_ok(save(g_run, 60));
    expect_latest(g_run, "step_00000060");
}

/* ---------------------------------------------------------------- the command line */

/* Runs `hp ARGS` with stderr merged; returns the exit status and the output in out. */
static int run_hp(const char *args, char *out, size_t n) {
    const char *bin = getenv("HP_BINARY_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/hp' %s 2>&1", hp_test_source_path("."), bin ? bin : "build", args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_cli_check(void **state) {
    (void)state;
    char out[8192], args[512], path[256];
    /* A good config: no output, exit 0, also for the strategy against its own device count. */
    assert_int_equal(run_hp("check examples/kjv.yaml", out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(run_hp("check examples/dp2xtp2.yaml --ranks 4", out, sizeof out), 0);
    assert_string_equal(out, "");
    /* The wrong rank count. */
    assert_int_not_equal(run_hp("check examples/dp2xtp2.yaml --ranks 2", out, sizeof out), 0);
    if (!strstr(out, "has 4 devices but the job runs on 2 ranks")) fail_msg("output: %s", out);
    /* A bad value: the message names file:line. */
    snprintf(path, sizeof path, "%s/bad.yaml", g_tmp);
    write_text(path, "model:\n  width: 64\n  layers: 4294967297\n");
    snprintf(args, sizeof args, "check '%s'", path);
    assert_int_not_equal(run_hp(args, out, sizeof out), 0);
    char where[300];
    snprintf(where, sizeof where, "%s:3:", path);
    if (!strstr(out, where) || !strstr(out, "model.layers 4294967297")) fail_msg("output: %s", out);
    write_text(path, "mpmd: {stages: 2}\n");
    assert_int_not_equal(run_hp(args, out, sizeof out), 0);
    if (!strstr(out, "HyperMPMD (pipeline groups) is not built yet")) fail_msg("output: %s", out);
    /* Usage errors. */
    assert_int_equal(run_hp("check", out, sizeof out), 2);
}

static void test_cli_train_guard(void **state) {
    (void)state;
    char dir[256], cfg[256], text[1024], args[600], out[16384];
    snprintf(dir, sizeof dir, "%s/cli-run", g_tmp);
    snprintf(cfg, sizeof cfg, "%s/tiny.yaml", g_tmp);
    snprintf(text, sizeof text,
             "model: {context: 16, layers: 1, heads: 2, width: 16}\n"
             "train: {steps: 1, batch: 2, log_every: 0, eval_every: 0, sample_tokens: 0, checkpoint_dir: '%s'}\n",
             dir);
    write_text(cfg, text);
    assert_ok(save(dir, 1000)); /* another run's checkpoint */
    snprintf(args, sizeof args, "train '%s'", cfg);
    assert_int_not_equal(run_hp(args, out, sizeof out), 0);
    if (!strstr(out, dir) || !strstr(out, "latest step 1000") || !strstr(out, "--overwrite")) fail_msg("output: %s", out);
    assert_false(exists(dir, "step_00000001")); /* stopped before any step */
    expect_latest(dir, "step_00001000");

    snprintf(args, sizeof args, "train '%s' --overwrite", cfg);
    if (run_hp(args, out, sizeof out) != 0) fail_msg("output: %s", out);
    expect_latest(dir, "step_00000001");
    assert_false(exists(dir, "step_00001000"));

    /* The run's own checkpoint: a plain rerun refuses, --resume continues from it. */
    snprintf(args, sizeof args, "train '%s' --steps 2", cfg);
    assert_int_not_equal(run_hp(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "train '%s' --steps 2 --resume", cfg);
    if (run_hp(args, out, sizeof out) != 0) fail_msg("output: %s", out);
    expect_latest(dir, "step_00000002");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard),
        cmocka_unit_test(test_cli_check),
        cmocka_unit_test(test_cli_train_guard),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
