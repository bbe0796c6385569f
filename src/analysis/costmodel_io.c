/*
 * The calibration cache (hp/costmodel.h): this machine's key, the JSON file (cJSON) with one entry
 * per key, the default path and a printed summary.
 *
 * File layout:
 *   {"format": "hyperparallel-calibration", "version": 1, "entries": [
 *     {"machine": {"cpu": "...", "cores": 2, "threads": 2, "ranks_per_node": 1}, "version": 1,
 *      "created": 1.7e9, "probe_seconds": 9.5, "node_seconds": 2e-6, "region_seconds": 4e-5, "by_node": false,
 *      "statistic": "median",
 *      "memory_bytes_per_s": 2e10, "comm_compute_share": 0,
 *      "gemm": {"dims": [32, 128, 512, 2048], "n": [64 rates, m-major then n then k], "t": [...]},
 *      "attention": [{"op": "attention", "batch": 16, "t": 128, "d": 32, "flops_per_s": 5e10}, ...],
 *      "curves": {"layernorm": {"bytes": [...], "seconds": [...]}, ...},
 *      "comm": [{"op": "all_reduce", "group": 2, "alpha_s": 1e-5, "beta_s_per_byte": 1e-10,
 *                "points": 7, "max_rel_err": 0.1, "bytes": [...], "seconds": [...]}, ...]}]}
 */
#include "hp/costmodel.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- machine key */

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t l = strlen(v);
        while (l > 0 && (v[l - 1] == '\n' || v[l - 1] == ' ')) v[--l] = '\0';
        snprintf(buf, n, "%s", v);
        break;
    }
    fclose(f);
}

static int env_int(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' && v > 0 && v < 1 << 20 ? (int)v : 0;
}

hp_status hp_machine_key_local(int threads, int ranks_per_node, hp_machine_key *out) {
    if (threads < 0 || ranks_per_node < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "machine key: threads %d and ranks per node %d must be >= 0",
                        threads, ranks_per_node);
    memset(out, 0, sizeof *out);
    cpu_model(out->cpu, sizeof out->cpu);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->cores = cores > 0 ? (int)cores : 1;
    out->threads = threads ? threads : omp_get_max_threads();
    if (!ranks_per_node) ranks_per_node = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!ranks_per_node) ranks_per_node = env_int("MPI_LOCALNRANKS");
    if (!ranks_per_node) ranks_per_node = env_int("SLURM_NTASKS_PER_NODE");
    out->ranks_per_node = ranks_per_node ? ranks_per_node : 1;
    return HP_STATUS_OK;
}

bool hp_machine_key_equal(const hp_machine_key *a, const hp_machine_key *b) {
    return !strcmp(a->cpu, b->cpu) && a->cores == b->cores && a->threads == b->threads &&
           a->ranks_per_node == b->ranks_per_node;
}

char *hp_machine_key_str(const hp_machine_key *k, char *buf, size_t n) {
    char th[32];
    if (k->threads > 0) snprintf(th, sizeof th, "%d thread%s", k->threads, k->threads == 1 ? "" : "s");
    else snprintf(th, sizeof th, "any threads");
    snprintf(buf, n, "%s, %d cores, %s x %d rank%s per node", k->cpu, k->cores, th, k->ranks_per_node,
             k->ranks_per_node == 1 ? "" : "s");
    return buf;
}

hp_status hp_calibration_default_path(char *buf, size_t n) {
    const char *e = getenv("HP_CALIBRATION"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int w;
    if (e && *e) w = snprintf(buf, n, "%s", e);
    else if (x && *x) w = snprintf(buf, n, "%s/hyperparallel/calibration.json", x);
    else if (h && *h) w = snprintf(buf, n, "%s/.cache/hyperparallel/calibration.json", h);
    else return hp_error(HP_STATUS_INVALID_ARGUMENT, "calibration path: none of HP_CALIBRATION, XDG_CACHE_HOME, HOME is set");
    if (w < 0 || (size_t)w >= n) return hp_error(HP_STATUS_INVALID_ARGUMENT, "calibration path: longer than %zu bytes", n);
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- to JSON */

static cJSON *doubles(const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber(v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

#define GRID (HP_CAL_GEMM_DIMS * HP_CAL_GEMM_DIMS * HP_CAL_GEMM_DIMS)

static cJSON *entry_json(const hp_calibration *c) {
    cJSON *e = cJSON_CreateObject(), *mk = cJSON_CreateObject();
    bool ok = e && mk && cJSON_AddItemToObject(e, "machine", mk);
    if (!ok) cJSON_Delete(mk);
    ok = ok && cJSON_AddStringToObject(mk, "cpu", c->key.cpu) && cJSON_AddNumberToObject(mk, "cores", c->key.cores) &&
         cJSON_AddNumberToObject(mk, "threads", c->key.threads) &&
         cJSON_AddNumberToObject(mk, "ranks_per_node", c->key.ranks_per_node);
    ok = ok && cJSON_AddNumberToObject(e, "version", c->version) && cJSON_AddNumberToObject(e, "created", c->created) &&
         cJSON_AddNumberToObject(e, "probe_seconds", c->probe_seconds) &&
         cJSON_AddNumberToObject(e, "node_seconds", c->node_seconds) &&
         cJSON_AddNumberToObject(e, "region_seconds", c->region_seconds) &&
         cJSON_AddBoolToObject(e, "by_node", c->by_node) &&
         cJSON_AddStringToObject(e, "statistic", c->fastest ? "min" : "median") &&
         cJSON_AddNumberToObject(e, "memory_bytes_per_s", c->memory_bytes_per_s) &&
         cJSON_AddNumberToObject(e, "comm_compute_share", c->comm_compute_share);
    cJSON *gm = ok ? cJSON_AddObjectToObject(e, "gemm") : NULL;
    ok = gm != NULL;
    double dims[HP_CAL_GEMM_DIMS];
    for (int i = 0; i < HP_CAL_GEMM_DIMS; i++) dims[i] = (double)hp_cal_gemm_dim(i);
    const char *tn[2] = {"n", "t"};
    cJSON *d = ok ? doubles(dims, HP_CAL_GEMM_DIMS) : NULL;
    ok = ok && d && cJSON_AddItemToObject(gm, "dims", d);
    for (int t = 0; ok && t < 2; t++) {
        cJSON *r = doubles(&c->gemm[t][0][0][0], GRID);
        ok = r && cJSON_AddItemToObject(gm, tn[t], r);
    }
    cJSON *at = ok ? cJSON_AddArrayToObject(e, "attention") : NULL;
    ok = at != NULL;
    for (int i = 0; ok && i < c->n_attention; i++) {
        const hp_cal_attention *a = &c->attention[i];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(at, o) && cJSON_AddStringToObject(o, "op", hp_op_name(a->op)) &&
             cJSON_AddNumberToObject(o, "batch", (double)a->batch) && cJSON_AddNumberToObject(o, "t", (double)a->t) &&
             cJSON_AddNumberToObject(o, "d", (double)a->d) && cJSON_AddNumberToObject(o, "flops_per_s", a->flops_per_s);
    }
    cJSON *cv = ok ? cJSON_AddObjectToObject(e, "curves") : NULL;
    ok = cv != NULL;
    for (int op = 0; ok && op < HP_OP_COUNT; op++) {
        const hp_cal_curve *k = &c->op_curve[op];
        if (k->n <= 0) continue;
        cJSON *o = cJSON_AddObjectToObject(cv, hp_op_name((hp_op)op));
        cJSON *b = o ? doubles(k->bytes, k->n) : NULL;
        ok = b && cJSON_AddItemToObject(o, "bytes", b);
        cJSON *s = ok ? doubles(k->seconds, k->n) : NULL;
        ok = s && cJSON_AddItemToObject(o, "seconds", s);
    }
    cJSON *cm = ok ? cJSON_AddArrayToObject(e, "comm") : NULL;
    ok = cm != NULL;
    for (int i = 0; ok && i < c->n_comm; i++) {
        const hp_comm_fit *f = &c->comm[i];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(cm, o) && cJSON_AddStringToObject(o, "op", hp_xfer_kind_name(f->kind)) &&
             cJSON_AddNumberToObject(o, "group", f->group) && cJSON_AddNumberToObject(o, "alpha_s", f->alpha) &&
             cJSON_AddNumberToObject(o, "beta_s_per_byte", f->beta) &&
             cJSON_AddNumberToObject(o, "points", f->n_points) &&
             cJSON_AddNumberToObject(o, "max_rel_err", f->max_rel_err);
        cJSON *b = ok ? doubles(f->bytes, f->n_kept) : NULL;
        ok = b && cJSON_AddItemToObject(o, "bytes", b);
        cJSON *s = ok ? doubles(f->seconds, f->n_kept) : NULL;
        ok = s && cJSON_AddItemToObject(o, "seconds", s);
    }
    if (!ok) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

/* ---------------------------------------------------------------- from JSON */

typedef struct reader {
    const char *path;
    int entry;
    hp_status st;
} reader;

static double num(reader *r, const cJSON *o, const char *key, double lo, double hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (r->st != HP_STATUS_OK) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        r->st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: \"%s\" is %s, wants a number in [%g, %g]", r->path,
                         r->entry, key, v ? (cJSON_IsNumber(v) ? "out of range" : "not a number") : "missing", lo, hi);
        return 0;
    }
    return v->valuedouble;
}

static int nums(reader *r, const cJSON *a, const char *what, double *out, int max) {
    if (r->st != HP_STATUS_OK) return 0;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n < 0 || n > max) {
        r->st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: %s must be an array of at most %d numbers", r->path,
                         r->entry, what, max);
        return 0;
    }
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0)) {
            r->st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: %s[%d] is not a number >= 0", r->path, r->entry,
                             what, i);
            return 0;
        }
        out[i++] = v->valuedouble;
    }
    return n;
}

static bool op_by_name(const char *s, hp_op *out) {
    for (int op = 0; s && op < HP_OP_COUNT; op++)
        if (!strcmp(s, hp_op_name((hp_op)op))) {
            *out = (hp_op)op;
            return true;
        }
    return false;
}

static bool xfer_by_name(const char *s, hp_xfer_kind *out) {
    for (int k = 0; s && k < HP_XFER_KIND_COUNT; k++)
        if (!strcmp(s, hp_xfer_kind_name((hp_xfer_kind)k))) {
            *out = (hp_xfer_kind)k;
            return true;
        }
    return false;
}

static void key_of(const cJSON *e, hp_machine_key *k) {
    memset(k, 0, sizeof *k);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "machine");
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(m, "cpu");
    snprintf(k->cpu, sizeof k->cpu, "%s", cJSON_IsString(cpu) ? cpu->valuestring : "?");
    const cJSON *v;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(m, "cores"))) k->cores = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(m, "threads"))) k->threads = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(m, "ranks_per_node"))) k->ranks_per_node = v->valueint;
}

static hp_status entry_read(const cJSON *e, const char *path, int idx, hp_calibration *c) {
    reader r = {path, idx, HP_STATUS_OK};
    hp_calibration_init(c);
    key_of(e, &c->key);
    c->version = (int)num(&r, e, "version", 0, 1e9);
    c->created = num(&r, e, "created", 0, 1e12);
    c->probe_seconds = num(&r, e, "probe_seconds", 0, 1e9);
    c->node_seconds = num(&r, e, "node_seconds", 0, 10);
    c->region_seconds = num(&r, e, "region_seconds", 0, 10);
    c->by_node = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "by_node"));
    const cJSON *stat = cJSON_GetObjectItemCaseSensitive(e, "statistic");
    c->fastest = cJSON_IsString(stat) && !strcmp(stat->valuestring, "min");
    c->memory_bytes_per_s = num(&r, e, "memory_bytes_per_s", 0, 1e15);
    c->comm_compute_share = num(&r, e, "comm_compute_share", 0, 1);
    const cJSON *gm = cJSON_GetObjectItemCaseSensitive(e, "gemm");
    const char *tn[2] = {"n", "t"};
    for (int t = 0; t < 2 && r.st == HP_STATUS_OK; t++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(gm, tn[t]);
        int n = nums(&r, a, t ? "gemm.t" : "gemm.n", &c->gemm[t][0][0][0], GRID);
        if (r.st == HP_STATUS_OK && n != GRID)
            r.st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: gemm.%s has %d rates, wants %d", path, idx, tn[t],
                            n, GRID);
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(e, "attention")) {
        if (r.st != HP_STATUS_OK) break;
        if (c->n_attention >= HP_CAL_MAX_ATTENTION) {
            r.st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: more than %d attention points", path, idx,
                            HP_CAL_MAX_ATTENTION);
            break;
        }
        hp_cal_attention *a = &c->attention[c->n_attention++];
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(v, "op");
        if (!op_by_name(cJSON_IsString(op) ? op->valuestring : NULL, &a->op)) {
            r.st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: attention point %d names no operator", path, idx,
                            c->n_attention - 1);
            break;
        }
        a->batch = (int64_t)num(&r, v, "batch", 1, 1e12);
        a->t = (int64_t)num(&r, v, "t", 1, 1e12);
        a->d = (int64_t)num(&r, v, "d", 1, 1e12);
        a->flops_per_s = num(&r, v, "flops_per_s", 0, 1e18);
    }
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(e, "curves")) {
        if (r.st != HP_STATUS_OK) break;
        hp_op op;
        if (!op_by_name(v->string, &op)) {
            r.st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: curve \"%s\" is not an operator", path, idx,
                            v->string ? v->string : "");
            break;
        }
        hp_cal_curve *k = &c->op_curve[op];
        int nb = nums(&r, cJSON_GetObjectItemCaseSensitive(v, "bytes"), v->string, k->bytes, HP_CAL_MAX_POINTS);
        int ns = nums(&r, cJSON_GetObjectItemCaseSensitive(v, "seconds"), v->string, k->seconds, HP_CAL_MAX_POINTS);
        bool inc = true;
        for (int i = 1; i < nb; i++) inc &= k->bytes[i] > k->bytes[i - 1];
        if (r.st == HP_STATUS_OK && (nb != ns || nb == 0 || !inc))
            r.st = hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "%s: entry %d: curve \"%s\" needs as many seconds as bytes (%d, %d), bytes increasing", path,
                            idx, v->string, ns, nb);
        k->n = nb;
    }
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(e, "comm")) {
        if (r.st != HP_STATUS_OK) break;
        hp_comm_fit f = {0};
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(v, "op");
        if (!xfer_by_name(cJSON_IsString(op) ? op->valuestring : NULL, &f.kind)) {
            r.st = hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: entry %d: comm fit %d names no communicator operation",
                            path, idx, c->n_comm);
            break;
        }
        f.group = (int)num(&r, v, "group", 1, 1 << 24);
        f.alpha = num(&r, v, "alpha_s", 0, 1e3);
        f.beta = num(&r, v, "beta_s_per_byte", 0, 1);
        f.n_points = (int)num(&r, v, "points", 0, 1e6);
        f.max_rel_err = num(&r, v, "max_rel_err", 0, 1e9);
        const cJSON *kb = cJSON_GetObjectItemCaseSensitive(v, "bytes"), *ks = cJSON_GetObjectItemCaseSensitive(v, "seconds");
        if (kb || ks) { /* the kept measurements (optional) */
            int nb = nums(&r, kb, "comm bytes", f.bytes, HP_CAL_COMM_POINTS);
            int ns = nums(&r, ks, "comm seconds", f.seconds, HP_CAL_COMM_POINTS);
            bool inc = true;
            for (int i = 1; i < nb; i++) inc &= f.bytes[i] > f.bytes[i - 1];
            if (r.st == HP_STATUS_OK && (nb != ns || !inc))
                r.st = hp_error(HP_STATUS_INVALID_ARGUMENT,
                                "%s: entry %d: comm fit %d needs as many seconds as bytes (%d, %d), bytes increasing",
                                path, idx, c->n_comm, ns, nb);
            f.n_kept = nb;
        }
        if (r.st == HP_STATUS_OK) r.st = hp_calibration_set_comm(c, &f);
    }
    return r.st;
}

/* Parses `path` into *root; HP_STATUS_IO when it cannot be read, HP_STATUS_CORRUPT when it is not a
 * calibration file. */
static hp_status read_file(const char *path, cJSON **root) {
    *root = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "calibration file %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 16384;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibration file %s: %zu bytes", path, cap);
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, 4096, f);
        len += k;
        if (k < 4096) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return hp_error(HP_STATUS_IO, "calibration file %s: read error", path);
    }
    buf[len] = '\0';
    cJSON *r = cJSON_Parse(buf);
    free(buf);
    const cJSON *fm = r ? cJSON_GetObjectItemCaseSensitive(r, "format") : NULL;
    if (!r || !cJSON_IsString(fm) || strcmp(fm->valuestring, HP_CAL_FORMAT) != 0 ||
        !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(r, "entries"))) {
        cJSON_Delete(r);
        return hp_error(HP_STATUS_CORRUPT, "calibration file %s: %s", path,
                        r ? "not a calibration file (no \"format\": \"" HP_CAL_FORMAT "\" with \"entries\")"
                          : "not valid JSON");
    }
    *root = r;
    return HP_STATUS_OK;
}

/* What differs between the wanted key and an entry's, for the message. */
static void key_diff(const hp_machine_key *want, const hp_machine_key *have, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
#define DIFF(cond, ...)                                                                                                \
    if (cond && k < n) k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__)
    DIFF(strcmp(want->cpu, have->cpu), "%scpu '%s' (here '%s')", k ? ", " : "", have->cpu, want->cpu);
    DIFF(want->cores != have->cores, "%s%d cores (here %d)", k ? ", " : "", have->cores, want->cores);
    DIFF(want->threads != have->threads, "%s%d threads (here %d)", k ? ", " : "", have->threads, want->threads);
    DIFF(want->ranks_per_node != have->ranks_per_node, "%s%d ranks per node (here %d)", k ? ", " : "",
         have->ranks_per_node, want->ranks_per_node);
#undef DIFF
}

hp_status hp_calibration_load(const char *path, const hp_machine_key *key, double max_age_s, hp_calibration *out) {
    cJSON *root;
    HP_CHECK(read_file(path, &root));
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries"), *e;
    char why[1024] = "", d[384], ks[256];
    size_t wk = 0;
    int idx = 0;
    hp_status st = HP_STATUS_NOT_FOUND;
    cJSON_ArrayForEach(e, entries) {
        hp_machine_key k;
        key_of(e, &k);
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(e, "version");
        const cJSON *cr = cJSON_GetObjectItemCaseSensitive(e, "created");
        hp_machine_key want = *key;
        if (want.threads == 0) want.threads = k.threads; /* any thread count */
        if (!hp_machine_key_equal(&k, &want)) {
            key_diff(&want, &k, d, sizeof d);
            if (wk < sizeof why) wk += (size_t)snprintf(why + wk, sizeof why - wk, "; entry %d: %s", idx, d);
        } else if (!cJSON_IsNumber(ver) || ver->valueint != HP_CAL_VERSION) {
            if (wk < sizeof why)
                wk += (size_t)snprintf(why + wk, sizeof why - wk, "; entry %d: stale (format version %d, this build reads %d)",
                                       idx, cJSON_IsNumber(ver) ? ver->valueint : -1, HP_CAL_VERSION);
        } else if (max_age_s > 0 && cJSON_IsNumber(cr) && (double)time(NULL) - cr->valuedouble > max_age_s) {
            if (wk < sizeof why)
                wk += (size_t)snprintf(why + wk, sizeof why - wk, "; entry %d: stale (%.1f days old, the limit is %.1f)",
                                       idx, ((double)time(NULL) - cr->valuedouble) / 86400.0, max_age_s / 86400.0);
        } else {
            st = entry_read(e, path, idx, out);
            break;
        }
        idx++;
    }
    cJSON_Delete(root);
    if (st == HP_STATUS_NOT_FOUND)
        return hp_error(HP_STATUS_NOT_FOUND, "calibration file %s has no entry for %s (%d entr%s%s)", path,
                        hp_machine_key_str(key, ks, sizeof ks), idx, idx == 1 ? "y" : "ies", why);
    return st;
}

static hp_status mkdir_parents(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return hp_error(HP_STATUS_IO, "calibration file %s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return hp_error(HP_STATUS_IO, "calibration file %s: cannot create directory %s: %s", path, buf,
                            strerror(errno));
        *p = '/';
    }
    return HP_STATUS_OK;
}

hp_status hp_calibration_save(const char *path, const hp_calibration *c) {
    cJSON *root = NULL;
    hp_status st = read_file(path, &root);
    if (st == HP_STATUS_CORRUPT) return st;
    if (st != HP_STATUS_OK) { /* no file yet: a new one */
        root = cJSON_CreateObject();
        if (!root || !cJSON_AddStringToObject(root, "format", HP_CAL_FORMAT) ||
            !cJSON_AddNumberToObject(root, "version", HP_CAL_VERSION) || !cJSON_AddArrayToObject(root, "entries")) {
            cJSON_Delete(root);
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibration file %s: building JSON", path);
        }
    }
    cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    int idx = 0, same = -1;
    cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        hp_machine_key k;
        key_of(e, &k);
        if (hp_machine_key_equal(&k, &c->key)) same = idx;
        idx++;
    }
    cJSON *ne = entry_json(c);
    bool ok = ne && (same >= 0 ? cJSON_ReplaceItemInArray(entries, same, ne) : cJSON_AddItemToArray(entries, ne));
    char *text = ok ? cJSON_Print(root) : NULL;
    if (!ok) cJSON_Delete(ne);
    cJSON_Delete(root);
    if (!text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibration file %s: building JSON", path);
    st = mkdir_parents(path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = st == HP_STATUS_OK ? fopen(tmp, "wb") : NULL;
    if (st == HP_STATUS_OK && !f) st = hp_error(HP_STATUS_IO, "calibration file %s: %s", tmp, strerror(errno));
    if (f) {
        bool w = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
        if (fclose(f) != 0 || !w) st = hp_error(HP_STATUS_IO, "calibration file %s: write failed", tmp);
        else if (rename(tmp, path) != 0) st = hp_error(HP_STATUS_IO, "calibration file %s: rename: %s", path, strerror(errno));
        if (st != HP_STATUS_OK) remove(tmp);
    }
    cJSON_free(text);
    return st;
}

/* ---------------------------------------------------------------- report */

void hp_calibration_print(const hp_calibration *c, FILE *f) {
    char ks[256];
    fprintf(f, "machine: %s (probe %.1f s; %s of each probe's runs)\n", hp_machine_key_str(&c->key, ks, sizeof ks),
            c->probe_seconds, c->fastest ? "fastest" : "median");
    fprintf(f, "node dispatch: %.2f us in a team, %.2f us on its own; kernels timed %s\n", 1e6 * c->node_seconds,
            1e6 * c->region_seconds, c->by_node ? "node by node" : "in a team");
    for (int t = 0; t < 2; t++) {
        fprintf(f, "GEMM op(A)=%s GFLOP/s, rows m; columns n x k:\n       ", t ? "A^T" : "A  ");
        for (int b = 0; b < HP_CAL_GEMM_DIMS; b++)
            for (int e = 0; e < HP_CAL_GEMM_DIMS; e++)
                fprintf(f, " %4lldx%-4lld", (long long)hp_cal_gemm_dim(b), (long long)hp_cal_gemm_dim(e));
        fprintf(f, "\n");
        for (int a = 0; a < HP_CAL_GEMM_DIMS; a++) {
            fprintf(f, "  %5lld", (long long)hp_cal_gemm_dim(a));
            for (int b = 0; b < HP_CAL_GEMM_DIMS; b++)
                for (int e = 0; e < HP_CAL_GEMM_DIMS; e++) fprintf(f, " %9.1f", 1e-9 * c->gemm[t][a][b][e]);
            fprintf(f, "\n");
        }
    }
    for (int i = 0; i < c->n_attention; i++) {
        const hp_cal_attention *a = &c->attention[i];
        fprintf(f, "%-20s batch x heads %-4lld T %-5lld head dim %-4lld %7.1f GFLOP/s\n", hp_op_name(a->op),
                (long long)a->batch, (long long)a->t, (long long)a->d, 1e-9 * a->flops_per_s);
    }
    for (int op = 0; op < HP_OP_COUNT; op++) {
        const hp_cal_curve *k = &c->op_curve[op];
        if (k->n <= 0) continue;
        fprintf(f, "%-24s", hp_op_name((hp_op)op));
        for (int i = 0; i < k->n; i++)
            fprintf(f, " %s%.0f KiB %.1f GB/s", i ? "| " : "", k->bytes[i] / 1024, 1e-9 * k->bytes[i] / k->seconds[i]);
        fprintf(f, "\n");
    }
    if (c->memory_bytes_per_s > 0) fprintf(f, "other memory-bound operators: %.1f GB/s\n", 1e-9 * c->memory_bytes_per_s);
    for (int i = 0; i < c->n_comm; i++) {
        const hp_comm_fit *x = &c->comm[i];
        fprintf(f, "%-15s %2d ranks: alpha %8.2f us, beta %7.3f GB/s (%d points, worst fit error %.0f%%)\n",
                hp_xfer_kind_name(x->kind), x->group, 1e6 * x->alpha, x->beta > 0 ? 1e-9 / x->beta : 0.0, x->n_points,
                100 * x->max_rel_err);
    }
    if (c->n_comm) fprintf(f, "communication also occupying compute: %.0f%% of its time\n", 100 * c->comm_compute_share);
}
