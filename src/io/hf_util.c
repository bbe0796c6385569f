/* File helpers of the Hugging Face interop (src/io/hf_internal.h). */
#include "io/hf_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

hp_status hp_hf_join(char *out, const char *dir, const char *name) {
    int k = snprintf(out, HP_HF_PATH_MAX, "%s/%s", dir, name);
    if (k < 0 || k >= HP_HF_PATH_MAX)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "path '%s/%s' is longer than %d bytes", dir, name, HP_HF_PATH_MAX - 1);
    return HP_STATUS_OK;
}

bool hp_hf_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

hp_status hp_hf_read_text(const char *path, char **out) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return hp_error(HP_STATUS_IO, "cannot read '%s': not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "cannot open '%s': %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory reading '%s'", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    bool err = ferror(f);
    int e = errno;
    fclose(f);
    if (err) {
        free(buf);
        return hp_error(HP_STATUS_IO, "cannot read '%s': %s", path, strerror(e));
    }
    buf[len] = '\0';
    *out = buf;
    return HP_STATUS_OK;
}

hp_status hp_hf_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return hp_error(HP_STATUS_IO, "cannot create '%s': %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    int e = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        remove(path);
        return hp_error(HP_STATUS_IO, "cannot write '%s': %s", path, strerror(e ? e : errno));
    }
    return HP_STATUS_OK;
}

hp_status hp_hf_mkdir_p(const char *dir) {
    char p[HP_HF_PATH_MAX];
    int k = snprintf(p, sizeof p, "%s", dir);
    if (k < 0 || k >= (int)sizeof p) return hp_error(HP_STATUS_INVALID_ARGUMENT, "path '%s' is too long", dir);
    for (char *s = p + 1;; s++) {
        bool end = *s == '\0';
        if (*s == '/' || end) {
            char c = *s;
            *s = '\0';
            struct stat sb;
            if (p[0] && stat(p, &sb) != 0 && mkdir(p, 0777) != 0 && errno != EEXIST)
                return hp_error(HP_STATUS_IO, "cannot create directory '%s': %s", p, strerror(errno));
            if (p[0] && stat(p, &sb) == 0 && !S_ISDIR(sb.st_mode))
                return hp_error(HP_STATUS_IO, "cannot create directory '%s': a file of that name exists", p);
            *s = c;
        }
        if (end) break;
    }
    return HP_STATUS_OK;
}

hp_status hp_hf_copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb");
    if (!in) return hp_error(HP_STATUS_IO, "cannot open '%s': %s", src, strerror(errno));
    FILE *out = fopen(dst, "wb");
    if (!out) {
        int e = errno;
        fclose(in);
        return hp_error(HP_STATUS_IO, "cannot create '%s': %s", dst, strerror(e));
    }
    char buf[65536];
    size_t got;
    bool ok = true;
    while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, got, out) == got;
    bool rerr = ferror(in);
    int e = errno;
    fclose(in);
    ok = (fclose(out) == 0) && ok;
    if (rerr) return hp_error(HP_STATUS_IO, "cannot read '%s': %s", src, strerror(e));
    if (!ok) {
        remove(dst);
        return hp_error(HP_STATUS_IO, "cannot write '%s': %s", dst, strerror(errno));
    }
    return HP_STATUS_OK;
}
