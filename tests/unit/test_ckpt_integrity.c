/* Checkpoint integrity (single-device format and the safetensors layer): checksums written and
 * checked (every single-bit flip of a file is caught), truncation, non-finite values, files without
 * checksums, state.json against the tensors, and resume refusing each of these. Every failure must
 * name the file and, where there is one, the tensor or config field. */
#include "ckptutil.h"

#include "hp/config.h"
#include "hp/train.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_tmp[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp_test_ckint_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static hp_run_config tiny(void) {
    hp_run_config c;
    hp_test_tiny_config(&c, NULL);
    return c;
}

/* Fails unless st is `want` and the message holds both needles (b may be NULL). */
static void expect(hp_status st, hp_status want, const char *a, const char *b) {
    if (st != want) fail_msg("got %s (%s), expected %s", hp_status_str(st), hp_error_message(), hp_status_str(want));
    hp_test_assert_error_contains(a);
    if (b) hp_test_assert_error_contains(b);
}

/* ---------------------------------------------------------------- the safetensors layer */

static void test_checked_file(void **state) {
    (void)state;
    char p[256];
    snprintf(p, sizeof p, "%s/t.safetensors", g_tmp);
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {hp_f32_to_bf16(1.5f), 0, 1};
    hp_named_tensor t[] = {{"a", HP_DTYPE_F32, HP_SHAPE(2, 3), a}, {"h", HP_DTYPE_BF16, HP_SHAPE(3), h}};
    const char *meta[] = {"format", "pt"};
    assert_ok(hp_safetensors_write_checked(p, t, 2, meta, 1));
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(p, &f));
    assert_true(hp_safetensors_checksummed(f));
    assert_string_equal(hp_safetensors_metadata(f, HP_SAFETENSORS_CHECKSUM_KEY), "crc32");
    assert_string_equal(hp_safetensors_metadata(f, "format"), "pt");
    const hp_safetensors_entry *e = hp_safetensors_find(f, "a");
    assert_true(e->has_crc32);
    assert_int_equal(e->crc32, (uint32_t)crc32_z(0, (const Bytef *)a, sizeof a));
    assert_ok(hp_safetensors_verify(f, e));
    float back[6];
    hp_named_tensor want = {"a", HP_DTYPE_F32, HP_SHAPE(2, 3), back};
    assert_ok(hp_safetensors_read_into(f, &want, 1));
    assert_memory_equal(back, a, sizeof a);
    hp_safetensors_close(f);

    /* The plain writer records nothing (files for other readers stay byte-exact). */
    assert_ok(hp_safetensors_write(p, t, 2, meta, 1));
    assert_ok(hp_safetensors_open(p, &f));
    assert_false(hp_safetensors_checksummed(f));
    assert_false(hp_safetensors_find(f, "a")->has_crc32);
    hp_safetensors_close(f);

    /* Reserved keys. */
    const char *bad[] = {"hp.crc32.a", "0"};
    expect(hp_safetensors_write_checked(p, t, 2, bad, 1), HP_STATUS_INVALID_ARGUMENT, "hp.crc32.a", "reserved");

    /* Consistent edits of the checksum metadata (header checksum recomputed) are still refused. */
    assert_ok(hp_safetensors_write_checked(p, t, 2, meta, 1));
    ck_replace(p, "\"hp.checksum\":\"crc32\"", "\"hp.checksum\":\"crc64\"");
    ck_reseal(p);
    expect(hp_safetensors_open(p, &f), HP_STATUS_UNSUPPORTED, "crc64", p);
    assert_ok(hp_safetensors_write_checked(p, t, 2, meta, 1));
    ck_replace(p, "\"hp.crc32.h\"", "\"hp.crc32.z\"");
    ck_reseal(p);
    expect(hp_safetensors_open(p, &f), HP_STATUS_CORRUPT, "tensor 'h' has no valid checksum", p);
    assert_ok(hp_safetensors_write_checked(p, t, 2, meta, 1));
    ck_replace(p, "\"hp.header_crc32\"", "\"hp.header_crc3X\"");
    expect(hp_safetensors_open(p, &f), HP_STATUS_CORRUPT, "no header checksum", p);
}

/* Every single-bit flip anywhere in a checksummed file (length, header, padding, data) is caught
 * by open + verify, and a flip in a tensor's bytes names that tensor. */
static void test_every_bit_flip_is_detected(void **state) {
    (void)state;
    char p[256], q[256];
    snprintf(p, sizeof p, "%s/good.safetensors", g_tmp);
    snprintf(q, sizeof q, "%s/flipped.safetensors", g_tmp);
    float w[12], b[3] = {0, 0, 0}; /* zeros: a flip in them must still be caught */
    hp_test_fill_uniform(w, 12, 3, -1, 1);
    hp_named_tensor t[] = {{"blocks.0.w", HP_DTYPE_F32, HP_SHAPE(3, 4), w}, {"blocks.0.b", HP_DTYPE_F32, HP_SHAPE(3), b}};
    const char *meta[] = {"format", "pt", "step", "3"};
    assert_ok(hp_safetensors_write_checked(p, t, 2, meta, 2));
    size_t n;
    unsigned char *good = ck_slurp(p, &n);
    size_t data0 = 8 + ck_header_len(p);
    assert_int_equal(n, data0 + sizeof w + sizeof b);
    int caught = 0;
    for (size_t off = 0; off < n; off++)
        for (int bit = 0; bit < 8; bit++) {
            good[off] ^= (unsigned char)(1u << bit);
            ck_spit(q, good, n);
            good[off] ^= (unsigned char)(1u << bit);
            hp_safetensors *f = NULL;
            hp_status st = hp_safetensors_open(q, &f);
            for (size_t i = 0; st == HP_STATUS_OK && i < hp_safetensors_count(f); i++)
                st = hp_safetensors_verify(f, hp_safetensors_entry_at(f, i));
            hp_safetensors_close(f);
            if (st == HP_STATUS_OK) fail_msg("a flip of bit %d of byte %zu (of %zu) went unnoticed", bit, off, n);
            if (!strstr(hp_error_message(), q)) fail_msg("byte %zu: the message does not name the file: %s", off, hp_error_message());
            if (off >= data0)
                hp_test_assert_error_contains(off < data0 + sizeof w ? "tensor 'blocks.0.w'" : "tensor 'blocks.0.b'");
            caught++;
        }
    assert_int_equal(caught, 8 * (int)n);
    free(good);
}

/* ---------------------------------------------------------------- single-device checkpoints */

/* The tensor of a step directory's file whose bytes hold file offset `off`, or NULL. */
static const char *tensor_at(const char *path, size_t off, char *name, size_t cap) {
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(path, &f));
    size_t data0 = 8 + ck_header_len(path);
    const char *r = NULL;
    for (size_t i = 0; i < hp_safetensors_count(f) && !r; i++) {
        const hp_safetensors_entry *e = hp_safetensors_entry_at(f, i);
        if (off >= data0 + e->offset && off < data0 + e->offset + e->nbytes) {
            snprintf(name, cap, "tensor '%s'", e->name);
            r = name;
        }
    }
    hp_safetensors_close(f);
    return r;
}

static void test_bit_flips_and_truncation(void **state) {
    (void)state;
    hp_run_config cfg = tiny();
    ck_gpt g;
    ck_gpt_make(&cfg.model, &g);
    char run[128], dir[512], bad[256], p[700], name[300];
    snprintf(run, sizeof run, "%s/run", g_tmp);
    snprintf(bad, sizeof bad, "%s/bad", g_tmp);
    ck_gpt_save(&g, &cfg, run, 4, dir, sizeof dir);
    assert_ok(ck_gpt_load(&g, dir));
    for (int k = 0; k < 2; k++) {
        const char *file = k ? HP_CHECKPOINT_OPTIM_FILE : HP_CHECKPOINT_MODEL_FILE;
        char orig[700];
        snprintf(orig, sizeof orig, "%s/%s", dir, file);
        size_t size;
        free(ck_slurp(orig, &size));
        size_t data0 = 8 + ck_header_len(orig);
        /* the length, the header's JSON, its padding end, the first data byte, the middle, the last */
        size_t offs[] = {2, 8 + 40, data0 - 1, data0, data0 + (size - data0) / 2, size - 1};
        for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
            ck_copy_dir(dir, bad);
            snprintf(p, sizeof p, "%s/%s", bad, file);
            ck_flip(p, (long)offs[i], 3);
            const char *t = offs[i] >= data0 ? tensor_at(orig, offs[i], name, sizeof name) : NULL;
            expect(ck_gpt_load(&g, bad), HP_STATUS_CORRUPT, file, t);
            hp_checkpoint_report r;
            expect(hp_checkpoint_verify(bad, &r), HP_STATUS_CORRUPT, file, t);
            assert_false(r.incomplete);
            hp_checkpoint_report_free(&r);
        }
        /* cut short anywhere: empty, inside the length, inside the header, at the data, before the end */
        size_t cuts[] = {0, 4, 8 + (data0 - 8) / 2, data0, size - 1};
        for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
            ck_copy_dir(dir, bad);
            snprintf(p, sizeof p, "%s/%s", bad, file);
            assert_int_equal(truncate(p, (off_t)cuts[i]), 0);
            expect(ck_gpt_load(&g, bad), HP_STATUS_CORRUPT, file, NULL);
        }
    }
    ck_gpt_free(&g);
    hp_run_config_free(&cfg);
}

static void test_nonfinite_values(void **state) {
    (void)state;
    char run[128], dir[512], p[700];
    snprintf(run, sizeof run, "%s/run", g_tmp);
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8}, m[8] = {0}, w2[8], m2[8];
    uint16_t h[4] = {0, 0, 0, 0}, h2[4];
    hp_named_tensor model[] = {{"w", HP_DTYPE_F32, HP_SHAPE(2, 4), w}, {"h", HP_DTYPE_BF16, HP_SHAPE(4), h}};
    hp_named_tensor optim[] = {{"exp_avg.w", HP_DTYPE_F32, HP_SHAPE(2, 4), m}};
    hp_named_tensor lm[] = {{"w", HP_DTYPE_F32, HP_SHAPE(2, 4), w2}, {"h", HP_DTYPE_BF16, HP_SHAPE(4), h2}};
    hp_named_tensor lo[] = {{"exp_avg.w", HP_DTYPE_F32, HP_SHAPE(2, 4), m2}};
    struct {
        int which; /* 0: w, 1: h, 2: exp_avg.w */
        int at;
        float v;
        const char *tensor, *what;
    } cases[] = {{0, 3, NAN, "tensor 'w'", "non-finite value (nan) at element 3"},
                 {0, 7, INFINITY, "tensor 'w'", "(inf) at element 7"},
                 {1, 1, -INFINITY, "tensor 'h'", "(-inf) at element 1"},
                 {1, 0, NAN, "tensor 'h'", "(nan) at element 0"},
                 {2, 5, INFINITY, "optim tensor 'exp_avg.w'", "(inf) at element 5"}};
    for (int c = 0; c < 5; c++) {
        float wk[8], mk[8];
        memcpy(wk, w, sizeof w), memcpy(mk, m, sizeof m);
        uint16_t hk[4] = {0, 0, 0, 0};
        if (cases[c].which == 0) wk[cases[c].at] = cases[c].v;
        if (cases[c].which == 1) hk[cases[c].at] = hp_f32_to_bf16(cases[c].v);
        if (cases[c].which == 2) mk[cases[c].at] = cases[c].v;
        model[0].data = wk, model[1].data = hk, optim[0].data = mk;
        hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
        a.dir = run, a.step = c, a.model = model, a.n_model = 2, a.optim = optim, a.n_optim = 1;
        assert_ok(hp_checkpoint_save(&a, dir, sizeof dir));
        hp_status st = cases[c].which == 2 ? hp_checkpoint_load_optim(dir, lo, 1) : hp_checkpoint_load_model(dir, lm, 2);
        expect(st, HP_STATUS_CORRUPT, cases[c].tensor, cases[c].what);
        hp_test_assert_error_contains(cases[c].which == 2 ? "optim.safetensors" : "model.safetensors");
        /* the same through the resharding loader */
        hp_mesh *mesh;
        assert_ok(hp_mesh_new(1, (int[]){2}, (const char *[]){"x"}, NULL, 0, &mesh));
        hp_sharded_tensor s = {cases[c].which == 2 ? "exp_avg.w" : "w", HP_DTYPE_F32, HP_SHAPE(2, 4), {0}, w2};
        assert_ok(hp_layout_parse("[x, none]", mesh, &s.layout));
        if (cases[c].which != 1) {
            st = hp_checkpoint_load_sharded(dir, cases[c].which == 2, mesh, cases[c].at / 4, &s, 1);
            expect(st, HP_STATUS_CORRUPT, cases[c].tensor, "non-finite");
        }
        hp_mesh_free(mesh);
    }
    /* A NaN written into the saved bytes: the checksum catches it first, naming the tensor. */
    model[0].data = w, model[1].data = h, optim[0].data = m;
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = run, a.step = 9, a.model = model, a.n_model = 2, a.optim = optim, a.n_optim = 1;
    assert_ok(hp_checkpoint_save(&a, dir, sizeof dir));
    assert_ok(hp_checkpoint_load_model(dir, lm, 2));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    size_t n;
    unsigned char *b = ck_slurp(p, &n);
    float nan = NAN;
    memcpy(b + 8 + ck_header_len(p) + 4 * 2, &nan, 4); /* w[2] */
    ck_spit(p, b, n);
    free(b);
    expect(hp_checkpoint_load_model(dir, lm, 2), HP_STATUS_CORRUPT, "tensor 'w': checksum mismatch", "model.safetensors");
}

/* Files without checksums: one from an older hyperparallel (its step metadata) is refused; an
 * imported single-device file (no metadata of ours) loads, still checked for finite values. */
static void test_files_without_checksums(void **state) {
    (void)state;
    char run[128], dir[512], p[700];
    snprintf(run, sizeof run, "%s/run", g_tmp);
    float w[4] = {1, 2, 3, 4}, back[4];
    hp_named_tensor t[] = {{"w", HP_DTYPE_F32, HP_SHAPE(4), w}};
    hp_named_tensor want[] = {{"w", HP_DTYPE_F32, HP_SHAPE(4), back}};
    hp_run_config cfg = tiny();
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = run, a.step = 1, a.model = t, a.n_model = 1, a.config = &cfg;
    assert_ok(hp_checkpoint_save(&a, dir, sizeof dir));
    hp_run_config_free(&cfg);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    const char *old[] = {"format", "pt", "step", "1"};
    assert_ok(hp_safetensors_write(p, t, 1, old, 2)); /* what this build wrote before checksums */
    expect(hp_checkpoint_load_model(dir, want, 1), HP_STATUS_CORRUPT, "'model.safetensors' records no checksums",
           "refusing");
    hp_checkpoint_report r;
    expect(hp_checkpoint_verify(dir, &r), HP_STATUS_CORRUPT, "records no checksums", NULL);
    hp_checkpoint_report_free(&r);
    const char *imported[] = {"format", "pt"};
    assert_ok(hp_safetensors_write(p, t, 1, imported, 1));
    memset(back, 0, sizeof back);
    assert_ok(hp_checkpoint_load_model(dir, want, 1));
    assert_memory_equal(back, w, sizeof w);
    w[1] = NAN;
    assert_ok(hp_safetensors_write(p, t, 1, imported, 1));
    expect(hp_checkpoint_load_model(dir, want, 1), HP_STATUS_CORRUPT, "tensor 'w'", "(nan)");
}

/* ---------------------------------------------------------------- state.json against the tensors */

/* Applies `edit` to a copy of step directory src's state.json in <tmp>/edited. */
static const char *edited(const char *src, void (*edit)(cJSON *root, const void *arg), const void *arg) {
    static char bad[256];
    char p[700];
    snprintf(bad, sizeof bad, "%s/edited", g_tmp);
    ck_copy_dir(src, bad);
    snprintf(p, sizeof p, "%s/state.json", bad);
    cJSON *j = ck_read_json(p);
    edit(j, arg);
    ck_write_json(p, j);
    cJSON_Delete(j);
    return bad;
}

typedef struct field_edit {
    const char *key;
    const char *raw; /* JSON text of the new value */
} field_edit;

static void set_model_field(cJSON *root, const void *arg) {
    const field_edit *e = arg;
    cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"), "model");
    assert_true(cJSON_ReplaceItemInObjectCaseSensitive(m, e->key, cJSON_Parse(e->raw)));
}

static void set_top(cJSON *root, const void *arg) {
    const field_edit *e = arg;
    if (!e->raw)
        cJSON_DeleteItemFromObjectCaseSensitive(root, e->key);
    else
        assert_true(cJSON_ReplaceItemInObjectCaseSensitive(root, e->key, cJSON_Parse(e->raw)));
}

/* read_state + check_config, as resume does. */
static hp_status check_dir(const char *dir) {
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(dir, &s));
    hp_status st = hp_checkpoint_check_config(dir, &s);
    hp_checkpoint_state_free(&s);
    return st;
}

static void test_state_json_against_tensors(void **state) {
    (void)state;
    hp_run_config cfg = tiny();
    ck_gpt g;
    ck_gpt_make(&cfg.model, &g);
    char run[128], dir[512];
    snprintf(run, sizeof run, "%s/run", g_tmp);
    ck_gpt_save(&g, &cfg, run, 6, dir, sizeof dir);
    assert_ok(check_dir(dir));
    hp_checkpoint_report r;
    assert_ok(hp_checkpoint_verify(dir, &r));
    assert_int_equal(r.step, 6);
    assert_int_equal(r.world_size, 1);
    assert_int_equal(r.n_files, 3); /* state.json, model, optim */
    assert_int_equal(r.n_tensors, 3 * g.n);
    assert_true(r.files[1].checksummed && r.files[2].checksummed);
    hp_checkpoint_report_free(&r);

    struct {
        field_edit e;
        const char *needle;
    } model[] = {{{"width", "48"}, "state.json's config has model.width 48, but the tensors were saved with model.width 32"},
                 {{"layers", "3"}, "model.layers 3, but the tensors were saved with model.layers 2"},
                 {{"heads", "4"}, "model.heads 4"},
                 {{"vocab", "300"}, "model.vocab 300"},
                 {{"context", "64"}, "model.context 64"},
                 {{"tied_head", "true"}, "model.tied_head true"}};
    for (size_t i = 0; i < sizeof model / sizeof *model; i++) {
        const char *bad = edited(dir, set_model_field, &model[i].e);
        expect(check_dir(bad), HP_STATUS_CORRUPT, model[i].needle, bad);
        expect(hp_checkpoint_verify(bad, &r), HP_STATUS_CORRUPT, model[i].needle, NULL);
        hp_checkpoint_report_free(&r);
    }
    struct {
        field_edit e;
        hp_status st;
        const char *needle;
    } top[] = {{{"step", "1.5"}, HP_STATUS_CORRUPT, "step 1.5 is not a whole number"},
               {{"step", "\"1.5\""}, HP_STATUS_CORRUPT, "(step is \"1.5\")"},
               {{"step", "-2"}, HP_STATUS_CORRUPT, "step -2 is not a whole number"},
               {{"step", NULL}, HP_STATUS_CORRUPT, "lacks a numeric format_version and step"},
               {{"step", "5"}, HP_STATUS_CORRUPT, "'model.safetensors' records step '6', but state.json is at step 5"},
               {{"config", NULL}, HP_STATUS_CORRUPT, "has no config"},
               {{"format", "\"other\""}, HP_STATUS_CORRUPT, "\"format\""},
               {{"format_version", "1.5"}, HP_STATUS_UNSUPPORTED, "format_version 1.5"}};
    for (size_t i = 0; i < sizeof top / sizeof *top; i++) {
        const char *bad = edited(dir, set_top, &top[i].e);
        expect(check_dir(bad), top[i].st, top[i].needle, NULL);
        expect(hp_checkpoint_verify(bad, &r), top[i].st, top[i].needle, NULL);
        hp_checkpoint_report_free(&r);
    }
    ck_gpt_free(&g);

    /* Saved with a config that does not describe the tensors: the shapes name the tensor. */
    hp_run_config wide = tiny();
    wide.model.width = 48;
    ck_gpt_make(&cfg.model, &g);
    ck_gpt_save(&g, &wide, run, 7, dir, sizeof dir);
    expect(check_dir(dir), HP_STATUS_CORRUPT, "makes tensor 'wte.weight' f32 [256, 48], but the checkpoint holds f32 [256, 32]",
           NULL);
    /* An extra tensor, and a missing optimizer state. */
    g.n++;
    g.model = realloc(g.model, (size_t)g.n * sizeof *g.model);
    float extra[2] = {0, 0};
    g.model[g.n - 1] = (hp_named_tensor){strdup("extra.bias"), HP_DTYPE_F32, HP_SHAPE(2), NULL};
    g.model[g.n - 1].data = malloc(sizeof extra), memcpy(g.model[g.n - 1].data, extra, sizeof extra);
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = run, a.step = 8, a.config = &cfg, a.model = g.model, a.n_model = (size_t)g.n, a.optim = g.optim;
    a.n_optim = 2 * (size_t)(g.n - 1) - 1;
    assert_ok(hp_checkpoint_save(&a, dir, sizeof dir));
    expect(check_dir(dir), HP_STATUS_CORRUPT, "holds the model tensor 'extra.bias', which state.json's model", NULL);
    a.n_model = (size_t)g.n - 1, a.step = 9;
    assert_ok(hp_checkpoint_save(&a, dir, sizeof dir));
    expect(check_dir(dir), HP_STATUS_CORRUPT, "has the tensor 'exp_avg_sq.", "optimizer tensors");
    g.n--;
    free((char *)g.model[g.n].name);
    free(g.model[g.n].data);
    ck_gpt_free(&g);
    hp_run_config_free(&wide);
    hp_run_config_free(&cfg);
}

/* `hp ckpt verify` on checkpoints whose values are not finite (saved as they are, checksums valid,
 * as a run that diverged saves them): exit 1 naming the tensor; clean on the good one. */
static int run_hp(const char *args, char *out, size_t n) {
    const char *bin = getenv("HP_BINARY_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s/hp' %s 2>&1", bin ? bin : "build", args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli_verify_nonfinite(void **state) {
    (void)state;
    hp_run_config cfg = tiny();
    ck_gpt g;
    ck_gpt_make(&cfg.model, &g);
    char run[128], dir[512], args[700], out[8192];
    snprintf(run, sizeof run, "%s/run", g_tmp);
    ck_gpt_save(&g, &cfg, run, 1, dir, sizeof dir);
    snprintf(args, sizeof args, "ckpt verify '%s'", run);
    if (run_hp(args, out, sizeof out) != 0 || !strstr(out, "ok: ")) fail_msg("verify on a good checkpoint: %s", out);
    if (!strstr(out, "model.safetensors") || !strstr(out, "checksums ok")) fail_msg("verify output: %s", out);
    float *w = g.model[3].data, *m = g.optim[g.n + 5].data;
    struct {
        float *at, v;
        const char *needle;
    } cases[] = {{w + 7, NAN, "non-finite value (nan) at element 7"}, {m + 2, -INFINITY, "(-inf) at element 2"}};
    for (int c = 0; c < 2; c++) {
        float keep = *cases[c].at;
        *cases[c].at = cases[c].v;
        ck_gpt_save(&g, &cfg, run, 2 + c, dir, sizeof dir);
        *cases[c].at = keep;
        snprintf(args, sizeof args, "ckpt verify '%s'", dir);
        if (run_hp(args, out, sizeof out) != 1) fail_msg("verify passed on a non-finite value: %s", out);
        char tensor[300];
        snprintf(tensor, sizeof tensor, "tensor '%s'", c ? g.optim[g.n + 5].name : g.model[3].name);
        if (!strstr(out, tensor) || !strstr(out, cases[c].needle) || !strstr(out, "corrupt checkpoint"))
            fail_msg("verify does not name %s: %s", tensor, out);
    }
    snprintf(args, sizeof args, "ckpt list '%s'", run);
    if (run_hp(args, out, sizeof out) != 1 || !strstr(out, "step_00000001            ok") ||
        !strstr(out, "step_00000003            corrupt (latest): ") || !strstr(out, "(-inf)"))
        fail_msg("list: %s", out);
    ck_gpt_free(&g);
    hp_run_config_free(&cfg);
}

/* ---------------------------------------------------------------- resume */

static void test_resume_refuses(void **state) {
    (void)state;
    char run[128], dir[512], p[600];
    snprintf(run, sizeof run, "%s/run", g_tmp);
    hp_run_config c;
    hp_test_tiny_config(&c, run);
    hp_trainer *t;
    assert_ok(hp_trainer_new(&c, &t));
    assert_ok(hp_trainer_save(t, dir, sizeof dir));
    hp_trainer_free(t);

    /* a flipped bit in a weight */
    char copy[256];
    snprintf(copy, sizeof copy, "%s/copy", g_tmp);
    ck_copy_dir(dir, copy);
    const char *bad = copy;
    snprintf(p, sizeof p, "%s/model.safetensors", bad);
    ck_flip(p, -100, 0);
    assert_ok(hp_trainer_new(&c, &t));
    expect(hp_trainer_resume(t, bad), HP_STATUS_CORRUPT, "checksum mismatch", "model.safetensors");
    assert_int_equal(hp_trainer_steps_done(t), 0);
    /* state.json's model edited, or its config gone */
    bad = edited(dir, set_model_field, &(field_edit){"width", "64"});
    expect(hp_trainer_resume(t, bad), HP_STATUS_CORRUPT, "model.width 64", NULL);
    bad = edited(dir, set_top, &(field_edit){"config", NULL});
    expect(hp_trainer_resume(t, bad), HP_STATUS_CORRUPT, "has no config", NULL);
    assert_int_equal(hp_trainer_steps_done(t), 0);
    assert_ok(hp_trainer_resume(t, dir));
    hp_trainer_free(t);

    /* a run whose model differs where the shapes cannot tell (heads) */
    c.model.heads = 4;
    assert_ok(hp_trainer_new(&c, &t));
    expect(hp_trainer_resume(t, dir), HP_STATUS_INVALID_ARGUMENT, "saved with model.heads 2; this run has model.heads 4",
           NULL);
    assert_int_equal(hp_trainer_steps_done(t), 0);
    hp_trainer_free(t);
    hp_run_config_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_checked_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_bit_flip_is_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bit_flips_and_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files_without_checksums, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_json_against_tensors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_verify_nonfinite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_refuses, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
