/* Atomic checkpoints: safetensors + state.json in step directories (see hp/checkpoint.h). */
#include "hp/checkpoint.h"
#include "train/checkpoint_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_BYTES HP__CKPT_PATH_BYTES
#define io_error hp__ckpt_io_error
#define join hp__ckpt_join
#define mkdir_p hp__ckpt_mkdir_p
#define fsync_path hp__ckpt_fsync_path
#define write_file_sync hp__ckpt_write_file_sync
#define remove_dir hp__ckpt_remove_dir
#define read_text hp__ckpt_read_text
#define is_file hp__ckpt_is_file

hp_checkpoint_save_args hp_checkpoint_save_args_default(void) {
    hp_checkpoint_save_args a;
    memset(&a, 0, sizeof a);
    return a;
}

hp_status hp__ckpt_io_error(const char *what, const char *path, int e) {
    return hp_error(HP_STATUS_IO, "checkpoint: cannot %s '%s': %s", what, path, strerror(e));
}

hp_status hp__ckpt_join(char *out, const char *a, const char *b) {
    int n = snprintf(out, PATH_BYTES, "%s/%s", a, b);
    if (n < 0 || n >= PATH_BYTES) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: path '%s/%s' is too long", a, b);
    return HP_STATUS_OK;
}

hp_status hp__ckpt_mkdir_p(const char *dir) {
    char buf[PATH_BYTES];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: path '%s' is too long", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return io_error("create directory", buf, errno);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return io_error("create directory", buf, errno);
    struct stat sb;
    if (stat(buf, &sb) != 0) return io_error("create directory", buf, errno);
    if (!S_ISDIR(sb.st_mode)) return io_error("create directory", buf, ENOTDIR);
    return HP_STATUS_OK;
}

hp_status hp__ckpt_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("open", path, errno);
    int r = fsync(fd), e = errno;
    close(fd);
    if (r != 0 && e != EINVAL) return io_error("sync", path, e);
    return HP_STATUS_OK;
}

hp_status hp__ckpt_write_file_sync(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error("create", path, errno);
    size_t len = strlen(text), off = 0;
    int e = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        off += (size_t)w;
    }
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        unlink(path);
        return io_error("write", path, e);
    }
    return HP_STATUS_OK;
}

void hp__ckpt_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *ent;
        char p[PATH_BYTES];
        while ((ent = readdir(d))) {
            if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
            if (join(p, dir, ent->d_name) == HP_STATUS_OK && unlink(p) != 0) rmdir(p); /* an empty stray dir */
        }
        closedir(d);
    }
    rmdir(dir);
}

char *hp__ckpt_state_json(const hp_checkpoint_save_args *a, int format_version, bool sharded) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)a->step);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)a->seed);
    bool ok = cJSON_AddStringToObject(root, "format", "hyperparallel-checkpoint") &&
              cJSON_AddNumberToObject(root, "format_version", format_version) &&
              cJSON_AddRawToObject(root, "step", num) && cJSON_AddStringToObject(root, "seed", seed);
    if (ok && sharded) ok = cJSON_AddStringToObject(root, "index_file", HP__CKPT_INDEX_FILE);
    if (ok && !sharded)
        ok = cJSON_AddStringToObject(root, "model_file", HP_CHECKPOINT_MODEL_FILE) &&
             cJSON_AddStringToObject(root, "optim_file", HP_CHECKPOINT_OPTIM_FILE);
    if (ok && a->config) {
        char *cj = hp_run_config_to_json(a->config);
        cJSON *c = cj ? cJSON_Parse(cj) : NULL;
        free(cj);
        ok = c && cJSON_AddItemToObject(root, "config", c);
        if (!ok) cJSON_Delete(c);
    }
    if (ok && a->extra_json) {
        cJSON *x = cJSON_Parse(a->extra_json);
        ok = x && cJSON_AddItemToObject(root, "extra", x);
        if (!ok) cJSON_Delete(x);
    }
    char *s = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return s;
}

/* One single-device file: checksummed, bound to the step, its role, rank 0 of 1 and the model. */
static hp_status write_tensor_file(const hp_checkpoint_save_args *a, const char *tmp, const char *file, const char *role,
                                   const hp_named_tensor *t, size_t n) {
    char path[PATH_BYTES], stepstr[32], model[512];
    char *model_json = a->config ? hp__ckpt_model_json(a->config) : NULL;
    if (a->config && !model_json) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)a->step);
    const char *meta[] = {"format", "pt", HP__CKPT_META_STEP, stepstr, HP__CKPT_META_ROLE, role,
                          HP__CKPT_META_RANK, "0", HP__CKPT_META_WORLD, "1", HP__CKPT_META_MODEL, model,
                          HP__CKPT_META_MODEL_JSON, model_json};
    if (a->config) hp__ckpt_model_summary(&a->config->model, model, sizeof model);
    hp_status st = join(path, tmp, file);
    if (st == HP_STATUS_OK) st = hp_safetensors_write_checked(path, t, n, meta, a->config ? 7 : 5);
    free(model_json);
    return st;
}

static hp_status write_contents(const hp_checkpoint_save_args *a, const char *tmp) {
    char path[PATH_BYTES];
    HP_CHECK(write_tensor_file(a, tmp, HP_CHECKPOINT_MODEL_FILE, "model", a->model, a->n_model));
    HP_CHECK(write_tensor_file(a, tmp, HP_CHECKPOINT_OPTIM_FILE, "optim", a->optim, a->n_optim));
    char *js = hp__ckpt_state_json(a, HP_CHECKPOINT_FORMAT_VERSION_SINGLE, false);
    if (!js) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory building state.json");
    hp_status st = join(path, tmp, HP_CHECKPOINT_STATE_FILE);
    if (st == HP_STATUS_OK) st = write_file_sync(path, js);
    free(js);
    HP_CHECK(st);
    return fsync_path(tmp);
}

static hp_status update_latest(const char *dir, const char *name) {
    char tmp[PATH_BYTES], latest[PATH_BYTES], leaf[128], text[128];
    snprintf(leaf, sizeof leaf, ".latest.tmp-%ld", (long)getpid());
    HP_CHECK(join(tmp, dir, leaf));
    HP_CHECK(join(latest, dir, "latest"));
    snprintf(text, sizeof text, "%s\n", name);
    HP_CHECK(write_file_sync(tmp, text));
    if (rename(tmp, latest) != 0) {
        int e = errno;
        unlink(tmp);
        return io_error("replace", latest, e);
    }
    return fsync_path(dir);
}

hp_status hp__ckpt_check_args(const hp_checkpoint_save_args *a) {
    if (!a->dir || !a->dir[0]) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: no directory given");
    if (a->step < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: step %lld must be >= 0", (long long)a->step);
    hp_run_dir_info info;
    HP_CHECK(hp_run_dir_inspect(a->dir, &info));
    if (info.latest_step > a->step)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: run directory '%s' has latest at step %lld, after step %lld: "
                        "saving would move 'latest' backwards (start the run with --overwrite, or use a new "
                        "train.checkpoint_dir)", a->dir, (long long)info.latest_step, (long long)a->step);
    if (a->extra_json) {
        cJSON *x = cJSON_Parse(a->extra_json);
        bool obj = cJSON_IsObject(x);
        cJSON_Delete(x);
        if (!obj) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: extra_json '%.80s' is not a JSON object", a->extra_json);
    }
    return HP_STATUS_OK;
}

hp_status hp__ckpt_paths(const hp_checkpoint_save_args *a, const char *tag, char *name, size_t n_name, char *tmp,
                         char *final, char *old) {
    char leaf[160];
    snprintf(name, n_name, "step_%08lld", (long long)a->step);
    snprintf(leaf, sizeof leaf, ".tmp-%s-%s", name, tag);
    HP_CHECK(join(tmp, a->dir, leaf));
    HP_CHECK(join(final, a->dir, name));
    snprintf(leaf, sizeof leaf, ".old-%s-%s", name, tag);
    return join(old, a->dir, leaf);
}

hp_status hp__ckpt_commit(const char *dir, const char *name, const char *tmp, const char *final, const char *old) {
    struct stat sb;
    bool replace = stat(final, &sb) == 0;
    if (replace && rename(final, old) != 0) {
        int e = errno;
        remove_dir(tmp);
        return io_error("move aside", final, e);
    }
    if (rename(tmp, final) != 0) {
        int e = errno;
        if (replace) rename(old, final);
        remove_dir(tmp);
        return io_error("rename into place", final, e);
    }
    if (replace) remove_dir(old);
    HP_CHECK(fsync_path(dir));
    return update_latest(dir, name);
}

hp_status hp_checkpoint_save(const hp_checkpoint_save_args *a, char *step_dir_out, size_t n) {
    HP_CHECK(hp__ckpt_check_args(a));
    HP_CHECK(mkdir_p(a->dir));
    char name[64], tag[32], tmp[PATH_BYTES], final[PATH_BYTES], old[PATH_BYTES];
    snprintf(tag, sizeof tag, "%ld", (long)getpid());
    HP_CHECK(hp__ckpt_paths(a, tag, name, sizeof name, tmp, final, old));

    remove_dir(tmp); /* a leftover of a crashed save by a process with our pid */
    if (mkdir(tmp, 0755) != 0) return io_error("create directory", tmp, errno);
    hp_status st = write_contents(a, tmp);
    if (st != HP_STATUS_OK) {
        remove_dir(tmp);
        return hp_error_prefix(st, "checkpoint step %lld not saved (previous checkpoints untouched): ", (long long)a->step);
    }
    HP_CHECK(hp__ckpt_commit(a->dir, name, tmp, final, old));
    if (step_dir_out && n) snprintf(step_dir_out, n, "%s", final);
    return HP_STATUS_OK;
}

bool hp__ckpt_is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static hp_status copy_out(char *out, size_t n, const char *s) {
    if (strlen(s) >= n) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: path '%s' does not fit in %zu bytes", s, n);
    memcpy(out, s, strlen(s) + 1);
    return HP_STATUS_OK;
}

hp_status hp_checkpoint_resolve(const char *path, char *out, size_t n) {
    char p[PATH_BYTES];
    HP_CHECK(join(p, path, "latest"));
    if (is_file(p)) {
        FILE *f = fopen(p, "r");
        if (!f) return io_error("open", p, errno);
        char name[256] = "";
        if (!fgets(name, sizeof name, f)) name[0] = 0;
        fclose(f);
        name[strcspn(name, "\r\n")] = 0;
        if (!name[0] || strchr(name, '/'))
            return hp_error(HP_STATUS_CORRUPT, "checkpoint: '%s' does not name a step directory", p);
        char step[PATH_BYTES], state[PATH_BYTES];
        HP_CHECK(join(step, path, name));
        HP_CHECK(join(state, step, HP_CHECKPOINT_STATE_FILE));
        if (!is_file(state))
            return hp_error(HP_STATUS_CORRUPT, "checkpoint: '%s' names '%s', which holds no %s", p, name,
                            HP_CHECKPOINT_STATE_FILE);
        return copy_out(out, n, step);
    }
    HP_CHECK(join(p, path, HP_CHECKPOINT_STATE_FILE));
    if (is_file(p)) return copy_out(out, n, path);
    return hp_error(HP_STATUS_NOT_FOUND,
                    "checkpoint: '%s' is neither a run directory (no 'latest' file) nor a step directory (no %s)%s", path,
                    HP_CHECKPOINT_STATE_FILE, is_dir(path) ? "" : "; it does not exist");
}

hp_status hp__ckpt_read_text(const char *path, char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return io_error("open", path, errno);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory reading '%s'", path);
    buf[len] = 0;
    *out = buf;
    return HP_STATUS_OK;
}

hp_status hp_checkpoint_read_state(const char *step_dir, hp_checkpoint_state *out) {
    memset(out, 0, sizeof *out);
    out->config = hp_run_config_defaults();
    char path[PATH_BYTES];
    HP_CHECK(join(path, step_dir, HP_CHECKPOINT_STATE_FILE));
    char *text = NULL;
    HP_CHECK(read_text(path, &text));
    cJSON *root = cJSON_Parse(text);
    free(text);
    hp_status st = HP_STATUS_OK;
    if (!cJSON_IsObject(root)) {
        st = hp_error(HP_STATUS_CORRUPT, "'%s' is not a JSON object", path);
        goto done;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "format_version");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsNumber(ver) || !cJSON_IsNumber(step) || !cJSON_IsString(seed)) {
        char *js = step ? cJSON_PrintUnformatted(step) : NULL;
        st = hp_error(HP_STATUS_CORRUPT, "'%s' lacks a numeric format_version and step or a string seed%s%s%s", path,
                      js ? " (step is " : "", js ? js : "", js ? ")" : "");
        free(js);
        goto done;
    }
    if (ver->valueint > HP_CHECKPOINT_FORMAT_VERSION || ver->valueint < 1 || ver->valuedouble != (double)ver->valueint) {
        st = hp_error(HP_STATUS_UNSUPPORTED, "'%s' has format_version %g; this build reads 1 to %d", path,
                      ver->valuedouble, HP_CHECKPOINT_FORMAT_VERSION);
        goto done;
    }
    if (format && (!cJSON_IsString(format) || strcmp(format->valuestring, "hyperparallel-checkpoint"))) {
        st = hp_error(HP_STATUS_CORRUPT, "'%s' has a \"format\" other than \"hyperparallel-checkpoint\"", path);
        goto done;
    }
    /* the range first: the cast of a value outside it (1e300) would be undefined behaviour */
    if (!(step->valuedouble >= 0 && step->valuedouble < 9007199254740992.0) ||
        step->valuedouble != (double)(int64_t)step->valuedouble) {
        st = hp_error(HP_STATUS_CORRUPT, "'%s': step %.17g is not a whole number of steps (0 <= step < 2^53)", path,
                      step->valuedouble);
        goto done;
    }
    char *end;
    errno = 0;
    unsigned long long sv = strtoull(seed->valuestring, &end, 10);
    if (errno || *end || !seed->valuestring[0]) {
        st = hp_error(HP_STATUS_CORRUPT, "'%s': seed '%s' is not a decimal integer", path, seed->valuestring);
        goto done;
    }
    out->format_version = ver->valueint;
    out->step = (int64_t)step->valuedouble;
    out->seed = (uint64_t)sv;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    if (cfg) {
        char *cj = cJSON_PrintUnformatted(cfg);
        char name[PATH_BYTES + 16];
        snprintf(name, sizeof name, "%s#config", path);
        st = cj ? hp_run_config_load_string(cj, strlen(cj), name, &out->config)
                : hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
        free(cj);
        if (st != HP_STATUS_OK) goto done;
        out->has_config = true;
    }
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(root, "extra");
    if (extra) out->extra_json = cJSON_PrintUnformatted(extra);
done:
    cJSON_Delete(root);
    if (st != HP_STATUS_OK) hp_checkpoint_state_free(out);
    return st;
}

void hp_checkpoint_state_free(hp_checkpoint_state *s) {
    hp_run_config_free(&s->config);
    free(s->extra_json);
    s->extra_json = NULL;
    s->has_config = false;
}

/* Both formats load through the checked loader (checkpoint_load.c) on a one-device mesh. */
hp_status hp_checkpoint_load_model(const char *step_dir, hp_named_tensor *tensors, size_t n) {
    return hp__ckpt_load_full(step_dir, false, tensors, n);
}

hp_status hp_checkpoint_load_optim(const char *step_dir, hp_named_tensor *tensors, size_t n) {
    return hp__ckpt_load_full(step_dir, true, tensors, n);
}
