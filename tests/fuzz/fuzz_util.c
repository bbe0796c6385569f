/* Helpers shared by the fuzz harnesses (fuzz_util.h). */
#include "fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fuzz_fail(const char *file, int line, const char *what) {
    fprintf(stderr, "%s:%d: fuzz invariant failed: %s (last error: %s)\n", file, line, what, hp_error_message());
    abort();
}

void fuzz_check_error(hp_status st) {
    FUZZ_CHECK(st > HP_STATUS_OK && st < HP_STATUS_COUNT);
    FUZZ_CHECK(hp_error_message()[0] != 0);
}

static char g_dir[256];

static void remove_tmpdir(void) {
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(g_dir);
}

const char *fuzz_tmpdir(void) {
    if (g_dir[0]) return g_dir;
    struct stat sb;
    const char *base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : getenv("TMPDIR") && getenv("TMPDIR")[0]                                         ? getenv("TMPDIR")
                                                                                                          : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/hp-fuzz-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "fuzz: cannot create a temporary directory under %s: %s\n", base, strerror(errno));
        abort();
    }
    atexit(remove_tmpdir);
    return g_dir;
}

void fuzz_write_file(const char *name, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", fuzz_tmpdir(), name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const char *b = data;
    while (fd >= 0 && n) {
        ssize_t w = write(fd, b, n);
        if (w <= 0) break;
        b += w;
        n -= (size_t)w;
    }
    if (fd < 0 || n || close(fd) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", p, strerror(errno));
        abort();
    }
}
