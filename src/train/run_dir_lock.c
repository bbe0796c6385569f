/*
 * One owner per run directory (an flock on <dir>/.lock held for the life of a run), removal of the
 * temporary step directories dead writers left, and the output-path checks a run makes before its
 * first step (see hp/run_dir.h).
 */
#include "hp/run_dir.h"
#include "train/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_PREFIX ".tmp-step_"
#define MSG_BYTES 1024

struct hp_run_dir_lock {
    int fd;      /* the locked file, or -1 (ranks other than 0) */
    int removed; /* .tmp-step_* directories removed when the lock was taken */
};

static hp_status bad_arg(const char *fn, const char *what) {
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: %s is NULL or empty", fn, what);
}

/* ---------------------------------------------------------------- output paths */

hp_status hp_output_dir_prepare(const char *what, const char *dir) {
    if (!what || !*what) return bad_arg("hp_output_dir_prepare", "what");
    if (!dir || !*dir) return bad_arg("hp_output_dir_prepare", "dir");
    char buf[HP__CKPT_PATH_BYTES];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s '%s' is longer than %d bytes", what, dir, HP__CKPT_PATH_BYTES - 1);
    /* Each prefix ending at a '/' and then the whole path: made when missing, else a directory. */
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && buf[i] != '/') continue;
        if (i < n && buf[i - 1] == '/') continue; /* "a//b" */
        char keep = buf[i];
        buf[i] = 0;
        struct stat sb;
        if (stat(buf, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                return hp_error(HP_STATUS_IO, "%s '%s' cannot be created: '%s' is %s, not a directory", what, dir, buf,
                                S_ISREG(sb.st_mode) ? "a regular file" : "not a directory either");
        } else if (errno == ELOOP) {
            return hp_error(HP_STATUS_IO, "%s '%s' cannot be created: '%s' is a symbolic link loop", what, dir, buf);
        } else if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            return hp_error(HP_STATUS_IO, "%s '%s' cannot be created: mkdir '%s': %s", what, dir, buf, strerror(errno));
        }
        buf[i] = keep;
    }
    if (access(dir, W_OK | X_OK) != 0)
        return hp_error(HP_STATUS_IO, "%s '%s' is not writable by this process: %s", what, dir, strerror(errno));
    return HP_STATUS_OK;
}

hp_status hp_output_file_check(const char *what, const char *path) {
    if (!what || !*what) return bad_arg("hp_output_file_check", "what");
    if (!path || !*path) return bad_arg("hp_output_file_check", "path");
    struct stat sb;
    if (stat(path, &sb) == 0) {
        const char *kind = S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)"
                           : S_ISSOCK(sb.st_mode) ? "a socket" : NULL;
        if (kind || !(S_ISREG(sb.st_mode) || S_ISCHR(sb.st_mode)))
            return hp_error(HP_STATUS_IO, "%s '%s' is %s, not a regular file", what, path, kind ? kind : "a special file");
        if (access(path, W_OK) != 0)
            return hp_error(HP_STATUS_IO, "%s '%s' is not writable by this process: %s", what, path, strerror(errno));
        return HP_STATUS_OK;
    }
    if (errno != ENOENT) return hp_error(HP_STATUS_IO, "%s '%s' cannot be used: %s", what, path, strerror(errno));
    char parent[HP__CKPT_PATH_BYTES];
    if (snprintf(parent, sizeof parent, "%s", path) >= (int)sizeof parent)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s '%s' is longer than %d bytes", what, path, HP__CKPT_PATH_BYTES - 1);
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    if (stat(parent, &sb) != 0)
        return hp_error(HP_STATUS_IO, "%s '%s' cannot be created: its directory '%s' does not exist (%s)", what, path,
                        parent, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return hp_error(HP_STATUS_IO, "%s '%s' cannot be created: '%s' is not a directory", what, path, parent);
    if (access(parent, W_OK | X_OK) != 0)
        return hp_error(HP_STATUS_IO, "%s '%s' cannot be created: directory '%s' is not writable by this process: %s",
                        what, path, parent, strerror(errno));
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- debris */

hp_status hp_run_dir_remove_temp(const char *dir, int *removed) {
    if (removed) *removed = 0;
    if (!dir || !*dir) return bad_arg("hp_run_dir_remove_temp", "dir");
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return HP_STATUS_OK;
        return hp__ckpt_io_error("list directory", dir, errno);
    }
    /* Names first, then removal: removing while listing may skip entries. */
    char **names = NULL;
    size_t n = 0, cap = 0;
    hp_status st = HP_STATUS_OK;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (strncmp(ent->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory listing '%s'", dir);
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(ent->d_name))) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory listing '%s'", dir);
            break;
        }
        n++;
    }
    closedir(d);
    char p[HP__CKPT_PATH_BYTES];
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (st == HP_STATUS_OK && hp__ckpt_join(p, dir, names[i]) == HP_STATUS_OK && lstat(p, &sb) == 0 &&
            S_ISDIR(sb.st_mode)) {
            hp__ckpt_remove_dir(p);
            if (lstat(p, &sb) != 0 && removed) (*removed)++;
        }
        free(names[i]);
    }
    free(names);
    return st;
}

/* ---------------------------------------------------------------- the lock */

/* The holder named in an existing lock file: "pid P on host H", or a note that it says nothing. */
static void describe_holder(int fd, char *out, size_t n) {
    char buf[256] = "";
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    buf[got > 0 ? got : 0] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    long pid = 0;
    char host[200] = "";
    int k = sscanf(buf, "%ld %199s", &pid, host);
    if (k >= 1 && pid > 0)
        snprintf(out, n, "pid %ld%s%s", pid, k == 2 ? " on host " : "", k == 2 ? host : "");
    else
        snprintf(out, n, "a process that has not written its pid yet");
}

/* This process takes the lock (no communication). */
static hp_status lock_here(const char *dir, hp_run_dir_lock *l) {
    HP_CHECK(hp_output_dir_prepare("train.checkpoint_dir", dir));
    char p[HP__CKPT_PATH_BYTES];
    HP_CHECK(hp__ckpt_join(p, dir, HP_RUN_DIR_LOCK_FILE));
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0)
        return hp_error(HP_STATUS_IO, "cannot open the run directory's lock file '%s': %s", p, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return hp_error(HP_STATUS_IO, "the run directory's lock file '%s' is not a regular file", p);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char who[300];
            describe_holder(fd, who, sizeof who);
            close(fd);
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "run directory '%s' (train.checkpoint_dir) is in use by another run: %s holds the lock "
                            "'%s'. Wait for that run to end or stop it, or set train.checkpoint_dir to another "
                            "directory", dir, who, p);
        }
        close(fd);
        return hp_error(HP_STATUS_IO, "cannot lock '%s': %s", p, strerror(e));
    }
    char host[128] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == ' ' || *c == '\n') *c = '_';
    char text[200];
    int len = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        int e = errno;
        close(fd); /* releases the lock */
        return hp_error(HP_STATUS_IO, "cannot write the run directory's lock file '%s': %s", p, strerror(e));
    }
    l->fd = fd;
    hp_status st = hp_run_dir_remove_temp(dir, &l->removed);
    if (st != HP_STATUS_OK) {
        close(fd);
        l->fd = -1;
    }
    return st;
}

/* What rank 0 broadcasts: its status and message (int32 words, for an I32 broadcast). */
typedef struct lock_result {
    int32_t status;
    int32_t removed;
    char msg[MSG_BYTES];
} lock_result;
_Static_assert(sizeof(lock_result) % 4 == 0, "lock_result must be whole int32 words");

hp_status hp_run_dir_lock_acquire(const char *dir, hp_comm *comm, hp_run_dir_lock **out) {
    if (!out) return bad_arg("hp_run_dir_lock_acquire", "out");
    *out = NULL;
    hp_run_dir_lock *l = calloc(1, sizeof *l);
    if (!l) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for a run-directory lock");
    l->fd = -1;
    int rank = comm ? hp_comm_rank(comm) : 0;
    lock_result r = {0};
    if (rank == 0) {
        hp_status st = !dir || !*dir ? bad_arg("hp_run_dir_lock_acquire", "dir") : lock_here(dir, l);
        r.status = (int32_t)st;
        r.removed = l->removed;
        if (st != HP_STATUS_OK) snprintf(r.msg, sizeof r.msg, "%s", hp_error_message());
    }
    if (comm && hp_comm_size(comm) > 1) {
        hp_status bs = hp_comm_broadcast(comm, &r, sizeof r / 4, HP_DTYPE_I32, 0);
        if (bs != HP_STATUS_OK) {
            hp_run_dir_lock_release(l);
            return hp_error_prefix(bs, "run-directory lock: broadcasting rank 0's result: ");
        }
    }
    if (r.status != HP_STATUS_OK) {
        hp_run_dir_lock_release(l);
        if (rank == 0) return (hp_status)r.status; /* its own message is the thread's */
        return hp_error((hp_status)r.status, "rank 0: %s", r.msg);
    }
    *out = l;
    return HP_STATUS_OK;
}

void hp_run_dir_lock_release(hp_run_dir_lock *l) {
    if (!l) return;
    if (l->fd >= 0) close(l->fd); /* the kernel drops the flock with the last descriptor */
    free(l);
}

bool hp_run_dir_lock_held(const hp_run_dir_lock *l) { return l && l->fd >= 0; }

int hp_run_dir_lock_removed(const hp_run_dir_lock *l) { return l ? l->removed : 0; }
