/* Reliability promises at the library level (docs/reliability.md): the run-directory lock and its
 * debris removal, output-path checks, a FIFO corpus, config ranges for the new and the zero values,
 * train.threads, and non-finite steps (stop with the cause, or skip with nothing changed). The
 * whole-process versions are in tests/reliability.sh. */
#include "testutil.h"

#include "hp/backend.h"
#include "hp/config.h"
#include "hp/data.h"
#include "hp/run_dir.h"
#include "hp/train.h"
#include "train/trainer_internal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_tmp[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp_test_reliability_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *path(const char *leaf) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, leaf);
    return buf[k];
}

static bool exists(const char *p) {
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void write_text(const char *p, const char *text) {
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---------------------------------------------------------------- one owner per run directory */

static void test_lock_one_owner(void **state) {
    (void)state;
    const char *dir = path("run/nested");
    hp_run_dir_lock *a = NULL, *b = NULL;
    assert_ok(hp_run_dir_lock_acquire(dir, NULL, &a)); /* creates the directory */
    assert_true(hp_run_dir_lock_held(a));
    char lf[300], text[128] = "", want[64];
    snprintf(lf, sizeof lf, "%s/%s", dir, HP_RUN_DIR_LOCK_FILE);
    FILE *f = fopen(lf, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof text, f));
    fclose(f);
    snprintf(want, sizeof want, "%ld ", (long)getpid());
    assert_true(strncmp(text, want, strlen(want)) == 0);
    /* flock conflicts between open files even in one process: a second owner is refused */
    assert_int_equal(hp_run_dir_lock_acquire(dir, NULL, &b), HP_STATUS_INVALID_ARGUMENT);
    assert_null(b);
    snprintf(want, sizeof want, "pid %ld", (long)getpid());
    hp_test_assert_error_contains(want);
    hp_test_assert_error_contains("is in use by another run");
    hp_test_assert_error_contains(lf);
    hp_run_dir_lock_release(a);
    assert_ok(hp_run_dir_lock_acquire(dir, NULL, &b)); /* released: the next run takes it */
    hp_run_dir_lock_release(b);
    hp_run_dir_lock_release(NULL);
    assert_int_equal(hp_run_dir_lock_acquire(NULL, NULL, &a), HP_STATUS_INVALID_ARGUMENT);
}

/* A holder killed with SIGKILL leaves no stale lock: the kernel drops it with the process. */
static void test_lock_released_by_kill(void **state) {
    (void)state;
    const char *dir = path("killed");
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        hp_run_dir_lock *l = NULL;
        char ok = hp_run_dir_lock_acquire(dir, NULL, &l) == HP_STATUS_OK ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(ready[1]);
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    close(ready[0]);
    assert_int_equal(ok, 'y');
    hp_run_dir_lock *l = NULL;
    assert_int_equal(hp_run_dir_lock_acquire(dir, NULL, &l), HP_STATUS_INVALID_ARGUMENT);
    char want[64];
    snprintf(want, sizeof want, "pid %ld", (long)child);
    hp_test_assert_error_contains(want);
    assert_int_equal(kill(child, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_ok(hp_run_dir_lock_acquire(dir, NULL, &l));
    hp_run_dir_lock_release(l);
}

/* The holder removes .tmp-step_* debris (single-device and sharded temp names) and nothing else. */
static void test_lock_removes_debris(void **state) {
    (void)state;
    const char *dir = path("debris");
    assert_ok(hp_output_dir_prepare("test", dir));
    const char *made[] = {".tmp-step_00000003-4242", ".tmp-step_00000004-sharded", "step_00000002", ".old-step_00000001-1"};
    for (int i = 0; i < 4; i++) {
        char d[300], fl[400];
        snprintf(d, sizeof d, "%s/%s", dir, made[i]);
        assert_int_equal(mkdir(d, 0755), 0);
        snprintf(fl, sizeof fl, "%s/model.safetensors", d);
        write_text(fl, "partial");
    }
    char notes[300];
    snprintf(notes, sizeof notes, "%s/.tmp-step_notes.txt", dir); /* a file, not a directory: kept */
    write_text(notes, "mine");
    hp_run_dir_lock *l;
    assert_ok(hp_run_dir_lock_acquire(dir, NULL, &l));
    assert_int_equal(hp_run_dir_lock_removed(l), 2);
    char p[300];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, made[i]);
        assert_int_equal(exists(p), i >= 2);
    }
    assert_true(exists(notes));
    hp_run_dir_lock_release(l);
    int removed = -1;
    assert_ok(hp_run_dir_remove_temp(path("no-such-dir"), &removed));
    assert_int_equal(removed, 0);
}

/* ---------------------------------------------------------------- output paths */

static void test_output_dir(void **state) {
    (void)state;
    write_text(path("plain"), "x");
    assert_int_equal(hp_output_dir_prepare("train.checkpoint_dir", path("plain/run/a")), HP_STATUS_IO);
    hp_test_assert_error_contains("train.checkpoint_dir");
    char want[300];
    snprintf(want, sizeof want, "'%s' is a regular file", path("plain"));
    hp_test_assert_error_contains(want);
    /* the lock (the run's first use of checkpoint_dir) fails the same way, before anything else */
    hp_run_dir_lock *l = NULL;
    assert_int_equal(hp_run_dir_lock_acquire(path("plain/run"), NULL, &l), HP_STATUS_IO);
    hp_test_assert_error_contains(want);
    assert_int_equal(symlink(path("loop2"), path("loop1")), 0);
    assert_int_equal(symlink(path("loop1"), path("loop2")), 0);
    assert_int_equal(hp_output_dir_prepare("offload.disk_dir", path("loop1/x")), HP_STATUS_IO);
    hp_test_assert_error_contains("symbolic link loop");
    assert_ok(hp_output_dir_prepare("offload.disk_dir", path("made/deep//er/")));
    struct stat sb;
    assert_int_equal(stat(path("made/deep/er"), &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    if (geteuid() != 0) { /* root writes anywhere */
        assert_int_equal(mkdir(path("ro"), 0555), 0);
        assert_int_equal(hp_output_dir_prepare("train.checkpoint_dir", path("ro")), HP_STATUS_IO);
        hp_test_assert_error_contains("not writable");
    }
    assert_int_equal(hp_output_dir_prepare("x", ""), HP_STATUS_INVALID_ARGUMENT);
}

static void test_output_file(void **state) {
    (void)state;
    assert_ok(hp_output_file_check("--metrics", path("new.jsonl")));
    assert_false(exists(path("new.jsonl"))); /* checked, not created */
    assert_ok(hp_output_file_check("--metrics", "/dev/full")); /* writable; writes fail later */
    assert_ok(hp_output_file_check("--metrics", "/dev/null"));
    assert_int_equal(hp_output_file_check("--metrics", g_tmp), HP_STATUS_IO);
    hp_test_assert_error_contains("is a directory");
    assert_int_equal(mkfifo(path("pipe"), 0644), 0);
    assert_int_equal(hp_output_file_check("--metrics", path("pipe")), HP_STATUS_IO);
    hp_test_assert_error_contains("FIFO");
    assert_int_equal(hp_output_file_check("--metrics", path("none/m.jsonl")), HP_STATUS_IO);
    hp_test_assert_error_contains("does not exist");
    write_text(path("afile"), "x");
    assert_int_equal(hp_output_file_check("--metrics", path("afile/m.jsonl")), HP_STATUS_IO);
    hp_test_assert_error_contains("--metrics");
}

/* A FIFO corpus fails at once (stat before open) instead of blocking until a writer appears. */
static void test_corpus_fifo(void **state) {
    (void)state;
    assert_int_equal(mkfifo(path("corpus"), 0644), 0);
    alarm(20); /* a regression blocks: SIGALRM then fails the test instead of hanging it */
    hp_corpus *c = NULL;
    assert_int_equal(hp_corpus_load(path("corpus"), &c), HP_STATUS_IO);
    alarm(0);
    assert_null(c);
    hp_test_assert_error_contains("is a FIFO");
    assert_int_equal(hp_corpus_load(g_tmp, &c), HP_STATUS_IO);
    hp_test_assert_error_contains("is a directory");
}

/* ---------------------------------------------------------------- config */

static void expect_config_error(const char *text, const char *where, const char *what) {
    hp_run_config c;
    assert_int_equal(hp_run_config_load_string(text, strlen(text), "r.yaml", &c), HP_STATUS_CONFIG);
    hp_test_assert_error_contains(where);
    hp_test_assert_error_contains(what);
}

static void test_config_values(void **state) {
    (void)state;
    hp_run_config c;
    const char *ok = "train:\n  skip_nonfinite: 3\n  threads: 2\n";
    assert_ok(hp_run_config_load_string(ok, strlen(ok), "r.yaml", &c));
    assert_int_equal(c.train.skip_nonfinite, 3);
    assert_int_equal(c.train.threads, 2);
    char *json = hp_run_config_to_json(&c);
    assert_non_null(strstr(json, "\"skip_nonfinite\":"));
    free(json);
    hp_run_config_free(&c);
    assert_int_equal(hp_run_config_defaults().train.skip_nonfinite, 0);
    expect_config_error("train:\n  skip_nonfinite: -1\n", "r.yaml:2:", "train.skip_nonfinite -1 must be >= 0");
    expect_config_error("train:\n  threads: 5000\n", "r.yaml:2:", "train.threads 5000 must be <= 4096");
    /* a fast tier of 0 bytes holds nothing, however it is written, with its line */
    expect_config_error("offload:\n  device_budget: 0\n", "r.yaml:2:", "offload.device_budget is 0 bytes");
    expect_config_error("offload:\n  host_budget: 1MiB\n  device_budget: 0 GiB\n", "r.yaml:3:",
                        "offload.device_budget is 0 bytes");
    /* host and disk budgets keep their documented 0 (unbounded, default): old checkpoints write it */
    const char *hz = "offload:\n  device_budget: 1MiB\n  host_budget: 0\n  disk_budget: 0\n";
    assert_ok(hp_run_config_load_string(hz, strlen(hz), "r.yaml", &c));
    hp_run_config_free(&c);
    /* an offload section without budgets is written with null budgets and loads back */
    const char *nob = "offload:\n  policy: {params: host}\n";
    assert_ok(hp_run_config_load_string(nob, strlen(nob), "r.yaml", &c));
    char *text = hp_run_config_to_yaml(&c);
    assert_non_null(text);
    hp_run_config d;
    assert_ok(hp_run_config_load_string(text, strlen(text), "saved.yaml", &d));
    assert_int_equal(d.offload.device_budget, 0);
    assert_true(d.offload.present);
    free(text);
    hp_run_config_free(&c);
    hp_run_config_free(&d);
}

/* train.comm_timeout (docs/reliability.md, Stalls): seconds, fractions allowed, 0 for no limit,
 * range-checked with file:line, written back exactly; the trainer sets it on its world. */
static void test_comm_timeout_config(void **state) {
    (void)state;
    assert_true(hp_run_config_defaults().train.comm_timeout == 600.0);
    hp_run_config c;
    const char *ok = "train:\n  comm_timeout: 2.5\n";
    assert_ok(hp_run_config_load_string(ok, strlen(ok), "r.yaml", &c));
    assert_true(c.train.comm_timeout == 2.5);
    char *text = hp_run_config_to_yaml(&c);
    hp_run_config d;
    assert_ok(hp_run_config_load_string(text, strlen(text), "saved.yaml", &d));
    assert_true(d.train.comm_timeout == 2.5);
    free(text);
    hp_run_config_free(&c);
    hp_run_config_free(&d);
    const char *zero = "train:\n  comm_timeout: 0\n";
    assert_ok(hp_run_config_load_string(zero, strlen(zero), "r.yaml", &c));
    hp_run_config_free(&c);
    expect_config_error("train:\n  comm_timeout: -1\n", "r.yaml:2:", "train.comm_timeout -1 must be in [0, 31536000] seconds");
    expect_config_error("train:\n  steps: 3\n  comm_timeout: 1e9\n", "r.yaml:3:", "train.comm_timeout 1e+09 must be in");
    expect_config_error("train:\n  comm_timeout: .nan\n", "r.yaml:2:", "train.comm_timeout");
    expect_config_error("train:\n  comm_timeout: 10m\n", "r.yaml:2:", "train.comm_timeout expects a number");
    /* the trainer gives its world the configured timeout (splits made later inherit it) */
    hp_test_tiny_config(&c, path("ct"));
    c.train.comm_timeout = 7;
    hp_comm *world = hp_comm_self_new();
    hp_trainer *t;
    assert_ok(hp_trainer_new_dist(&c, world, &t));
    assert_true(hp_comm_timeout(world) == 7);
    hp_trainer_free(t);
    hp_comm_free(world);
    hp_run_config_free(&c);
}

/* ---------------------------------------------------------------- train.threads */

static void test_threads(void **state) {
    (void)state;
    int before = hp_backend_cpu_threads();
    assert_int_equal(hp_backend_cpu_set_threads(0, NULL), HP_STATUS_INVALID_ARGUMENT);
    assert_int_equal(hp_backend_cpu_threads(), before);
    hp_run_config c;
    hp_test_tiny_config(&c, "/tmp/unused");
    int want = before == 1 ? 2 : 1;
    c.train.threads = want;
    hp_trainer *t;
    assert_ok(hp_trainer_new(&c, &t));
    assert_int_equal(hp_backend_cpu_threads(), want); /* the team (and OpenBLAS) the steps run with */
    double loss[2];
    hp_test_run_steps(t, 2, loss);
    hp_trainer_free(t);
    assert_int_equal(hp_backend_cpu_threads(), before); /* restored */
}

/* ---------------------------------------------------------------- non-finite steps */

static int64_t g_poison_from, g_poison_to;
static const char *poison(int64_t step) { return step >= g_poison_from && step <= g_poison_to ? "wpe.weight" : NULL; }

/* Every parameter and optimizer state of the trainer, this rank's blocks, read through the store
 * (works on any tier), concatenated into a malloc'd buffer of *n floats. */
static float *snapshot(hp_trainer *t, size_t *n) {
    assert_ok(hp_program_sync(t->train.p));
    size_t cap = 0, len = 0;
    float *all = NULL;
    for (int which = 0; which < 3; which++)
        for (int i = 0; i < t->train.step.n_params; i++) {
            hp_tid id = which == 0 ? t->train.step.params[i] : which == 1 ? t->train.step.m[i] : t->train.step.v[i];
            const char *name = hp_graph_tensor(t->train.lg, id)->name;
            hp_store_entry_info e;
            assert_ok(hp_store_info(t->store, name, &e));
            size_t k = e.bytes / sizeof(float);
            if (len + k > cap) {
                cap = 2 * (len + k);
                all = realloc(all, cap * sizeof *all);
                assert_non_null(all);
            }
            assert_ok(hp_store_read(t->store, name, all + len, e.bytes));
            len += k;
        }
    *n = len;
    return all;
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* skip_nonfinite 1, over clipping on and off and over HyperOffload's streamed (disk) AdamW: a
 * poisoned step is skipped with every parameter and moment bit for bit as before, training goes
 * on from there, and two poisoned steps in a row stop the run naming the step and a tensor. */
static void run_skip_case(double grad_clip, bool offload) {
    char text[2048], disk[300] = "";
    snprintf(disk, sizeof disk, "%s", path(offload ? "spill" : "unused"));
    if (offload) assert_ok(hp_output_dir_prepare("offload.disk_dir", disk));
    snprintf(text, sizeof text,
             "model: {vocab: 256, context: 32, layers: 2, heads: 2, width: 32}\n"
             "data: {corpus: \"%s\"}\n"
             "train: {steps: 20, batch: 4, seed: 7, checkpoint_dir: \"%s\", skip_nonfinite: 1}\n"
             "optim: {grad_clip: %g, warmup: 0}\n%s%s%s",
             hp_test_source_path("data/kjv.txt"), path("skipck"), grad_clip,
             offload ? "offload:\n  device_budget: 600KiB\n  host_budget: 64MiB\n  disk_dir: \"" : "",
             offload ? disk : "", offload ? "\"\n  disk_budget: 64MiB\n  policy: {params: disk, optimizer: disk}\n" : "");
    hp_run_config c;
    assert_ok(hp_run_config_load_string(text, strlen(text), "skip", &c));
    hp_trainer *t;
    assert_ok(hp_trainer_new(&c, &t));
    hp__trainer_poison = poison;
    g_poison_from = 3, g_poison_to = 3;
    hp_step_metrics m;
    for (int s = 0; s < 2; s++) {
        assert_ok(hp_trainer_step(t, &m));
        assert_false(m.skipped);
    }
    size_t n0, n1, n2;
    float *before = snapshot(t, &n0);
    assert_ok(hp_trainer_step(t, &m)); /* step 3: poisoned, skipped */
    assert_true(m.skipped);
    assert_int_equal(m.step, 3);
    assert_int_equal(m.skipped_in_row, 1);
    assert_int_equal(m.skipped_total, 1);
    assert_false(isfinite(m.loss) && isfinite(m.grad_norm));
    float *after = snapshot(t, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0 * sizeof *before); /* weights and moments untouched */
    assert_true(all_finite(after, n1));
    assert_ok(hp_trainer_step(t, &m)); /* step 4: a normal step again */
    assert_false(m.skipped);
    assert_int_equal(m.skipped_in_row, 0);
    assert_int_equal(m.skipped_total, 1);
    assert_true(isfinite(m.loss));
    float *later = snapshot(t, &n2);
    assert_true(memcmp(after, later, n1 * sizeof *after) != 0);
    assert_true(all_finite(later, n2));
    /* two in a row with skip_nonfinite 1: step 5 skipped, step 6 stops */
    g_poison_from = 5, g_poison_to = 6;
    assert_ok(hp_trainer_step(t, &m));
    assert_true(m.skipped);
    assert_int_equal(hp_trainer_step(t, &m), HP_STATUS_NONFINITE);
    hp_test_assert_error_contains("step 6 is not finite");
    hp_test_assert_error_contains("2 non-finite steps in a row, train.skip_nonfinite is 1");
    hp_test_assert_error_contains("those after step 4, the last update applied");
    hp_test_assert_error_contains("no checkpoint was saved or resumed from by this run yet");
    if (!offload) hp_test_assert_error_contains("first non-finite tensor: gradient of '");
    assert_int_equal(hp_trainer_steps_done(t), 5); /* the failed step is not done */
    hp__trainer_poison = NULL;
    assert_ok(hp_trainer_step(t, &m)); /* and the run could go on */
    assert_false(m.skipped);
    free(before);
    free(after);
    free(later);
    hp_trainer_free(t);
    hp_run_config_free(&c);
}

static void test_skip_nonfinite(void **state) {
    (void)state;
    run_skip_case(1.0, false);
    run_skip_case(0.0, false);
}

static void test_skip_nonfinite_offload(void **state) {
    (void)state;
    run_skip_case(1.0, true);
}

/* skip_nonfinite 0 (the default): the first non-finite step stops, naming the last checkpoint. */
static void test_stop_names_checkpoint(void **state) {
    (void)state;
    hp_run_config c;
    hp_test_tiny_config(&c, path("stopck"));
    c.optim.grad_clip = 0;
    hp_trainer *t;
    assert_ok(hp_trainer_new(&c, &t));
    double loss[2];
    hp_test_run_steps(t, 2, loss);
    char saved[4096];
    assert_ok(hp_trainer_save(t, saved, sizeof saved));
    hp__trainer_poison = poison;
    g_poison_from = 3, g_poison_to = 3;
    hp_step_metrics m;
    assert_int_equal(hp_trainer_step(t, &m), HP_STATUS_NONFINITE);
    hp__trainer_poison = NULL;
    hp_test_assert_error_contains("step 3 is not finite");
    char want[4200];
    snprintf(want, sizeof want, "the last good checkpoint is '%s'", saved);
    hp_test_assert_error_contains(want);
    hp_test_assert_error_contains("gradient of '");
    hp_trainer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_one_owner),
        cmocka_unit_test(test_lock_released_by_kill),
        cmocka_unit_test(test_lock_removes_debris),
        cmocka_unit_test(test_output_dir),
        cmocka_unit_test(test_output_file),
        cmocka_unit_test(test_corpus_fifo),
        cmocka_unit_test(test_config_values),
        cmocka_unit_test(test_comm_timeout_config),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_skip_nonfinite),
        cmocka_unit_test(test_skip_nonfinite_offload),
        cmocka_unit_test(test_stop_names_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
