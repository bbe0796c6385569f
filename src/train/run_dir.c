/*
 * The run-directory guard (hp_run_dir_inspect, hp_run_dir_prepare): a new run never writes into a
 * directory holding another run's checkpoints, and `latest` never moves backwards.
 */
#include "hp/checkpoint.h"
#include "train/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRASH_PREFIX ".overwritten-"

/* The step of a directory name "step_<digits>", or -1. */
static int64_t step_of(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

hp_status hp_run_dir_inspect(const char *dir, hp_run_dir_info *out) {
    if (!dir || !out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_run_dir_inspect: %s is NULL", !dir ? "dir" : "out");
    *out = (hp_run_dir_info){.latest_step = -1, .newest_step = -1, .n_steps = 0, .has_latest = false};
    char p[HP__CKPT_PATH_BYTES];
    HP_CHECK(hp__ckpt_join(p, dir, "latest"));
    if (hp__ckpt_is_file(p)) {
        out->has_latest = true;
        FILE *f = fopen(p, "r");
        char name[256] = "";
        if (f) {
            if (!fgets(name, sizeof name, f)) name[0] = 0;
            fclose(f);
        }
        name[strcspn(name, "\r\n")] = 0;
        out->latest_step = step_of(name);
    }
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return HP_STATUS_OK; /* a run directory not made yet holds nothing */
        return hp__ckpt_io_error("open directory", dir, errno);
    }
    struct dirent *ent;
    while ((ent = readdir(d))) {
        int64_t s = step_of(ent->d_name);
        if (s < 0 || hp__ckpt_join(p, dir, ent->d_name) != HP_STATUS_OK || !is_dir(p)) continue;
        out->n_steps++;
        if (s > out->newest_step) out->newest_step = s;
    }
    closedir(d);
    return HP_STATUS_OK;
}

/* Removes a trash directory: its step directories (flat), then itself. */
static void remove_trash(const char *trash) {
    DIR *d = opendir(trash);
    if (d) {
        struct dirent *ent;
        char p[HP__CKPT_PATH_BYTES];
        while ((ent = readdir(d))) {
            if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
            if (hp__ckpt_join(p, trash, ent->d_name) != HP_STATUS_OK) continue;
            if (is_dir(p)) hp__ckpt_remove_dir(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(trash);
}

/* Moves `latest` and then every step_* directory into <dir>/.overwritten-<pid>/, syncs the run
 * directory, then deletes that trash directory (and any left by an earlier crashed overwrite). */
static hp_status overwrite(const char *dir) {
    char trash[HP__CKPT_PATH_BYTES], leaf[64], p[HP__CKPT_PATH_BYTES], q[HP__CKPT_PATH_BYTES];
    snprintf(leaf, sizeof leaf, TRASH_PREFIX "%ld", (long)getpid());
    HP_CHECK(hp__ckpt_join(trash, dir, leaf));
    remove_trash(trash);
    if (mkdir(trash, 0755) != 0) return hp__ckpt_io_error("create directory", trash, errno);
    /* `latest` first: from then on nothing names a step directory that may be half moved. */
    HP_CHECK(hp__ckpt_join(p, dir, "latest"));
    HP_CHECK(hp__ckpt_join(q, trash, "latest"));
    if (hp__ckpt_is_file(p) && rename(p, q) != 0) return hp__ckpt_io_error("move aside", p, errno);
    DIR *d = opendir(dir);
    if (!d) return hp__ckpt_io_error("open directory", dir, errno);
    struct dirent *ent;
    hp_status st = HP_STATUS_OK;
    while ((ent = readdir(d)) && st == HP_STATUS_OK) {
        bool stale = strncmp(ent->d_name, TRASH_PREFIX, strlen(TRASH_PREFIX)) == 0 && strcmp(ent->d_name, leaf) != 0;
        if (step_of(ent->d_name) < 0 && !stale) continue;
        st = hp__ckpt_join(p, dir, ent->d_name);
        if (st == HP_STATUS_OK && !is_dir(p)) continue;
        if (st == HP_STATUS_OK) st = hp__ckpt_join(q, trash, ent->d_name);
        if (st == HP_STATUS_OK && rename(p, q) != 0) st = hp__ckpt_io_error("move aside", p, errno);
    }
    closedir(d);
    HP_CHECK(st);
    HP_CHECK(hp__ckpt_fsync_path(dir));
    /* A stale trash moved in holds step directories one level deeper; remove_trash handles one
     * level, so empty those first. */
    d = opendir(trash);
    if (d) {
        while ((ent = readdir(d)))
            if (strncmp(ent->d_name, TRASH_PREFIX, strlen(TRASH_PREFIX)) == 0 &&
                hp__ckpt_join(p, trash, ent->d_name) == HP_STATUS_OK)
                remove_trash(p);
        closedir(d);
    }
    remove_trash(trash);
    return HP_STATUS_OK;
}

hp_status hp_run_dir_prepare(const char *dir, hp_run_dir_mode mode, int64_t resume_step) {
    hp_run_dir_info info;
    HP_CHECK(hp_run_dir_inspect(dir, &info));
    bool holds = info.has_latest || info.n_steps > 0;
    int64_t newest = info.latest_step > info.newest_step ? info.latest_step : info.newest_step;
    switch (mode) {
    case HP_RUN_DIR_MODE_FRESH:
        if (!holds) return HP_STATUS_OK;
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "run directory '%s' (train.checkpoint_dir) already holds the checkpoints of another run: "
                        "%d step director%s, latest step %lld. Pass --resume to continue that run from step %lld, or "
                        "--overwrite to delete its checkpoints and start over (or set train.checkpoint_dir to a new "
                        "directory)", dir, info.n_steps, info.n_steps == 1 ? "y" : "ies", (long long)newest,
                        (long long)newest);
    case HP_RUN_DIR_MODE_RESUME:
        if (newest <= resume_step) return HP_STATUS_OK;
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "run directory '%s' (train.checkpoint_dir) holds step %lld, newer than step %lld that this run "
                        "resumes from, so its checkpoints would move 'latest' backwards. Resume from '%s' itself, or add "
                        "--overwrite to delete its checkpoints first", dir, (long long)newest, (long long)resume_step, dir);
    case HP_RUN_DIR_MODE_OVERWRITE:
        if (!holds) return HP_STATUS_OK;
        return overwrite(dir);
    }
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_run_dir_prepare: unknown mode %d", (int)mode);
}
