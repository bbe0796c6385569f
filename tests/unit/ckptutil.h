/* Helpers of the checkpoint-integrity tests (test_ckpt_integrity.c, test_ckpt_verify.c): files as
 * bytes, bit flips, JSON edits, and the tensors of a GPT checkpoint built from a model config. */
#ifndef HP_TEST_CKPTUTIL_H
#define HP_TEST_CKPTUTIL_H

#include "testutil.h"

#include "hp/checkpoint.h"
#include "hp/nn.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* The whole file (malloc'd) and its size. */
static inline unsigned char *ck_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static inline void ck_spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Flips bit `bit` of byte `off` (from the end when negative). */
static inline void ck_flip(const char *path, long off, int bit) {
    size_t n;
    unsigned char *b = ck_slurp(path, &n);
    size_t o = off < 0 ? n - (size_t)(-off) : (size_t)off;
    assert_true(o < n);
    b[o] ^= (unsigned char)(1u << bit);
    ck_spit(path, b, n);
    free(b);
}

/* The safetensors header length N of a file (the data buffer starts at 8 + N). */
static inline size_t ck_header_len(const char *path) {
    size_t n;
    unsigned char *b = ck_slurp(path, &n);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)b[i] << (8 * i);
    free(b);
    return (size_t)h;
}

/* Recomputes the header checksum after an edit of the header that kept its length (what a tool
 * rewriting a file consistently would do). */
static inline void ck_reseal(const char *path) {
    size_t n;
    unsigned char *b = ck_slurp(path, &n);
    size_t h = 0;
    for (int i = 0; i < 8; i++) h |= (size_t)b[i] << (8 * i);
    const char *pat = "\"" HP_SAFETENSORS_HEADER_CRC_KEY "\":\"";
    unsigned char *at = memmem(b + 8, h, pat, strlen(pat));
    assert_non_null(at);
    at += strlen(pat);
    memcpy(at, "00000000", 8);
    char hex[9];
    snprintf(hex, sizeof hex, "%08lx", crc32_z(0, b, 8 + h));
    memcpy(at, hex, 8);
    ck_spit(path, b, n);
    free(b);
}

/* Replaces the first `from` in the file by `to` (the same length). */
static inline void ck_replace(const char *path, const char *from, const char *to) {
    assert_int_equal(strlen(from), strlen(to));
    size_t n;
    unsigned char *b = ck_slurp(path, &n);
    unsigned char *at = memmem(b, n, from, strlen(from));
    if (!at) fail_msg("'%s' not found in %s", from, path);
    memcpy(at, to, strlen(to));
    ck_spit(path, b, n);
    free(b);
}

static inline cJSON *ck_read_json(const char *path) {
    size_t n;
    unsigned char *b = ck_slurp(path, &n);
    b[n] = 0;
    cJSON *j = cJSON_Parse((const char *)b);
    free(b);
    assert_non_null(j);
    return j;
}

static inline void ck_write_json(const char *path, cJSON *j) {
    char *t = cJSON_Print(j);
    ck_spit(path, t, strlen(t));
    free(t);
}

/* dst becomes a copy of directory src. */
static inline void ck_copy_dir(const char *src, const char *dst) {
    char cmd[3 * 4096 + 64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, src, dst);
    if (system(cmd) != 0) fail_msg("command failed: %s", cmd);
}

/* Runs the shell command fmt with its two %s filled in. */
static inline void ck_sh2(const char *fmt, const char *a, const char *b) {
    char cmd[3 * 4096 + 64];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    if (system(cmd) != 0) fail_msg("command failed: %s", cmd);
}

/* The tensors of a GPT checkpoint for a model config: parameters, then exp_avg.* and exp_avg_sq.*,
 * with small finite values. */
typedef struct ck_gpt {
    int n;
    hp_named_tensor *model, *optim; /* n and 2n */
} ck_gpt;

static inline void ck_gpt_make(const hp_model_config *m, ck_gpt *g) {
    hp_gpt_config gc = {.vocab = (int)m->vocab, .context = (int)m->context, .layers = (int)m->layers,
                        .heads = (int)m->heads, .width = (int)m->width, .tied_head = m->tied_head};
    hp_graph *gr = hp_graph_new();
    hp_gpt gpt;
    assert_ok(hp_gpt_build(gr, &gc, 1, 1, false, &gpt));
    g->n = hp_graph_params(gr, NULL, 0);
    hp_tid *ids = calloc((size_t)g->n, sizeof *ids);
    hp_graph_params(gr, ids, g->n);
    g->model = calloc((size_t)g->n, sizeof *g->model);
    g->optim = calloc(2 * (size_t)g->n, sizeof *g->optim);
    for (int k = 0; k < 3 * g->n; k++) {
        const hp_tensor *x = hp_graph_tensor(gr, ids[k % g->n]);
        char name[256];
        snprintf(name, sizeof name, "%s%s", k < g->n ? "" : k < 2 * g->n ? "exp_avg." : "exp_avg_sq.", x->name);
        int64_t numel = hp_shape_numel(&x->shape);
        float *d = malloc((size_t)numel * sizeof *d + 4);
        for (int64_t e = 0; e < numel; e++) d[e] = 0.01f * (float)((e + k) % 13) - 0.05f;
        hp_named_tensor t = {strdup(name), HP_DTYPE_F32, x->shape, d};
        if (k < g->n)
            g->model[k] = t;
        else
            g->optim[k - g->n] = t;
    }
    free(ids);
    hp_graph_free(gr);
}

static inline void ck_gpt_free(ck_gpt *g) {
    for (int k = 0; k < 3 * g->n; k++) {
        hp_named_tensor *t = k < g->n ? &g->model[k] : &g->optim[k - g->n];
        free((char *)t->name);
        free(t->data);
    }
    free(g->model);
    free(g->optim);
}

/* Saves g at `step` into run directory `dir` with config cfg (may be NULL); the step dir into out. */
static inline void ck_gpt_save(const ck_gpt *g, const hp_run_config *cfg, const char *dir, int64_t step, char *out,
                               size_t n) {
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = dir;
    a.step = step;
    a.seed = 7;
    a.config = cfg;
    a.model = g->model;
    a.n_model = (size_t)g->n;
    a.optim = g->optim;
    a.n_optim = 2 * (size_t)g->n;
    assert_ok(hp_checkpoint_save(&a, out, n));
}

/* Loads every tensor of g back from step_dir (into fresh buffers); the status of the first failure. */
static inline hp_status ck_gpt_load(const ck_gpt *g, const char *step_dir) {
    hp_status st = HP_STATUS_OK;
    for (int k = 0; k < 2 && st == HP_STATUS_OK; k++) {
        int n = k ? 2 * g->n : g->n;
        hp_named_tensor *t = calloc((size_t)n, sizeof *t);
        for (int i = 0; i < n; i++) {
            t[i] = k ? g->optim[i] : g->model[i];
            t[i].data = malloc((size_t)hp_shape_numel(&t[i].shape) * 4 + 4);
        }
        st = k ? hp_checkpoint_load_optim(step_dir, t, (size_t)n) : hp_checkpoint_load_model(step_dir, t, (size_t)n);
        for (int i = 0; i < n; i++) free(t[i].data);
        free(t);
    }
    return st;
}

#endif
