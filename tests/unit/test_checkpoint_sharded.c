/* Sharded checkpoints: save under a [2, 2] mesh (simulated ranks), load under other meshes and rank
 * counts, single-device interop, failure atomicity and load errors. Values are global flat indices,
 * so every loaded block can be checked exactly. */
#include "testutil.h"

#include "hp/checkpoint.h"
#include "hp/comm.h"
#include "hp/redistribute.h"
#include "train/checkpoint_internal.h"

#include <cjson/cJSON.h>
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
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp_test_ckpts_XXXXXX");
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

/* A tensor of the test: its layout when saved on [2, 2] (dp, tp) and when loaded on [k] (x). */
typedef struct spec {
    const char *name;
    hp_dtype dt;
    hp_shape shape;
    const char *save_layout, *load_layout;
} spec;

#define NMODEL 7
#define NOPTIM 4
static spec g_model[NMODEL], g_optim[NOPTIM];

static void init_specs(void) {
    g_model[0] = (spec){"w", HP_DTYPE_F32, HP_SHAPE(8, 6), "[dp, tp]", "[none, x]"};
    g_model[1] = (spec){"wq", HP_DTYPE_F32, HP_SHAPE(6, 4), "[tp, none]", "[x, none]"};
    g_model[2] = (spec){"b", HP_DTYPE_F32, HP_SHAPE(6), "[none]", "[x]"};
    g_model[3] = (spec){"u", HP_DTYPE_F32, HP_SHAPE(5, 3), "[dp, tp]", "[x, none]"};
    g_model[4] = (spec){"m", HP_DTYPE_F32, HP_SHAPE(7, 2), "[[dp, tp], none]", "[none, x]"};
    g_model[5] = (spec){"s", HP_DTYPE_F32, HP_SHAPE_SCALAR, "[]", "[]"};
    g_model[6] = (spec){"i", HP_DTYPE_I32, HP_SHAPE(4, 3), "[none, tp]", "[x, none]"};
    g_optim[0] = (spec){"exp_avg.w", HP_DTYPE_F32, HP_SHAPE(8, 6), "[[dp, tp], none]", "[x, none]"};
    g_optim[1] = (spec){"exp_avg_sq.w", HP_DTYPE_F32, HP_SHAPE(8, 6), "[[tp, dp], none]", "[none, x]"};
    g_optim[2] = (spec){"exp_avg.u", HP_DTYPE_F32, HP_SHAPE(5, 3), "[[dp, tp], none]", "[none, x]"};
    g_optim[3] = (spec){"exp_avg.b", HP_DTYPE_F32, HP_SHAPE(6), "[[dp, tp]]", "[none]"};
}

/* The global value of element `flat` of tensor `tid` (exact in f32 and i32). */
static void fill_global(const spec *s, int tid, void *buf) {
    int64_t n = hp_shape_numel(&s->shape);
    for (int64_t k = 0; k < n; k++) {
        if (s->dt == HP_DTYPE_I32)
            ((int32_t *)buf)[k] = (int32_t)(tid * 1000 + k);
        else
            ((float *)buf)[k] = (float)(tid * 1000 + k);
    }
}

/* Builds the tensors of one rank: layout from `save` or `load`, local block filled with the global
 * values (expect) or poisoned. */
static hp_status make(const spec *sp, int n, int tid0, const hp_mesh *m, bool save, int index, bool expect,
                      hp_sharded_tensor *out) {
    for (int i = 0; i < n; i++) {
        out[i] = (hp_sharded_tensor){sp[i].name, sp[i].dt, sp[i].shape, {0}, NULL};
        HP_CHECK(hp_layout_parse(save ? sp[i].save_layout : sp[i].load_layout, m, &out[i].layout));
        int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
        HP_CHECK(hp_layout_slice_of(&out[i].layout, m, &sp[i].shape, index, start, len));
        hp_shape local = hp_shape_make(sp[i].shape.ndim, len);
        size_t es = hp_dtype_size(sp[i].dt);
        out[i].local = malloc((size_t)hp_shape_numel(&local) * es + 1);
        memset(out[i].local, 0xff, (size_t)hp_shape_numel(&local) * es);
        if (expect) {
            void *g = malloc((size_t)hp_shape_numel(&sp[i].shape) * es);
            fill_global(&sp[i], tid0 + i, g);
            int64_t zero[HP_MAX_DIMS] = {0};
            hp_copy_box(out[i].local, &local, zero, g, &sp[i].shape, start, len, es);
            free(g);
        }
    }
    return HP_STATUS_OK;
}

static void release(hp_sharded_tensor *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].local);
}

/* Number of tensors whose loaded block differs from the expected one. */
static int mismatches(const spec *sp, int n, int tid0, const hp_mesh *m, int index, const hp_sharded_tensor *got) {
    hp_sharded_tensor want[16];
    if (make(sp, n, tid0, m, false, index, true, want) != HP_STATUS_OK) return n;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        hp_shape local;
        hp_layout_local_shape(&want[i].layout, m, &sp[i].shape, index, &local);
        size_t bytes = (size_t)hp_shape_numel(&local) * hp_dtype_size(sp[i].dt);
        if (memcmp(want[i].local, got[i].local, bytes)) {
            print_error("tensor '%s' differs at mesh index %d\n", sp[i].name, index);
            bad++;
        }
    }
    release(want, n);
    return bad;
}

/* ---------------------------------------------------------------- saving on simulated ranks */

typedef struct save_ctx {
    const hp_mesh *mesh;
    int64_t step;
    int null_local_rank; /* this rank passes a NULL local block for "w" (-1: none) */
    int short_list_rank; /* this rank passes one model tensor less (-1: none) */
    hp_status st[8];
    char msg[8][1024];
    char dir[8][512];
} save_ctx;

static hp_status save_rank(hp_comm *c, int rank, void *user) {
    save_ctx *x = user;
    hp_sharded_tensor model[NMODEL], optim[NOPTIM];
    HP_CHECK(make(g_model, NMODEL, 0, x->mesh, true, rank, true, model));
    HP_CHECK(make(g_optim, NOPTIM, 100, x->mesh, true, rank, true, optim));
    void *keep = model[0].local;
    if (rank == x->null_local_rank) model[0].local = NULL;
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = g_run;
    a.step = x->step;
    a.seed = 77;
    a.extra_json = "{\"loss\": 1.5}";
    size_t nm = rank == x->short_list_rank ? NMODEL - 1 : NMODEL;
    x->st[rank] = hp_checkpoint_save_sharded(&a, c, x->mesh, model, nm, optim, NOPTIM, x->dir[rank], sizeof x->dir[rank]);
    snprintf(x->msg[rank], sizeof x->msg[rank], "%s", hp_error_message());
    model[0].local = keep;
    release(model, NMODEL);
    release(optim, NOPTIM);
    return HP_STATUS_OK;
}

static hp_mesh *mesh22(void) {
    hp_mesh *m;
    assert_ok(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, NULL, 0, &m));
    return m;
}

static hp_mesh *mesh1d(int k) {
    hp_mesh *m;
    assert_ok(hp_mesh_new(1, (int[]){k}, (const char *[]){"x"}, NULL, 0, &m));
    return m;
}

static save_ctx *save(hp_mesh *m, int64_t step) {
    save_ctx *x = calloc(1, sizeof *x);
    x->mesh = m;
    x->step = step;
    x->null_local_rank = x->short_list_rank = -1;
    return x;
}

static void run_save(save_ctx *x) {
    assert_ok(hp_comm_sim_run(4, save_rank, x));
}

static void read_latest(char *buf, size_t n) {
    char p[256];
    snprintf(p, sizeof p, "%s/latest", g_run);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, (int)n, f));
    fclose(f);
}

static int count_hidden(void) {
    DIR *d = opendir(g_run);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static cJSON *read_json(const char *path) {
    char *text;
    assert_ok(hp__ckpt_read_text(path, &text));
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static void write_json(const char *path, cJSON *j) {
    char *text = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    free(text);
}

static int nblocks(const cJSON *index, const char *sec, const char *name) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(index, sec), name);
    assert_non_null(t);
    return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "blocks"));
}

/* Loads every tensor on every index of `m` and checks it. */
static void check_load(const char *dir, hp_mesh *m) {
    for (int r = 0; r < hp_mesh_size(m); r++) {
        hp_sharded_tensor model[NMODEL], optim[NOPTIM];
        assert_ok(make(g_model, NMODEL, 0, m, false, r, false, model));
        assert_ok(make(g_optim, NOPTIM, 100, m, false, r, false, optim));
        assert_ok(hp_checkpoint_load_sharded(dir, false, m, r, model, NMODEL));
        assert_ok(hp_checkpoint_load_sharded(dir, true, m, r, optim, NOPTIM));
        assert_int_equal(mismatches(g_model, NMODEL, 0, m, r, model), 0);
        assert_int_equal(mismatches(g_optim, NOPTIM, 100, m, r, optim), 0);
        release(model, NMODEL);
        release(optim, NOPTIM);
    }
}

/* ---------------------------------------------------------------- tests */

static void test_reshard_round_trip(void **state) {
    (void)state;
    hp_mesh *m = mesh22();
    save_ctx *x = save(m, 10);
    run_save(x);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(x->st[r], HP_STATUS_OK);
        assert_string_equal(x->dir[r], x->dir[0]);
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s", x->dir[0]);
    free(x);

    /* Layout of the step directory. */
    char resolved[4096], latest[64], p[1024];
    assert_ok(hp_checkpoint_resolve(g_run, resolved, sizeof resolved));
    assert_string_equal(resolved, dir);
    read_latest(latest, sizeof latest);
    assert_string_equal(latest, "step_00000010\n");
    assert_int_equal(count_hidden(), 0);
    for (int r = 0; r < 4; r++) {
        snprintf(p, sizeof p, "%s/model-r%05d.safetensors", dir, r);
        assert_true(hp__ckpt_is_file(p));
        snprintf(p, sizeof p, "%s/optim-r%05d.safetensors", dir, r);
        assert_true(hp__ckpt_is_file(p));
    }
    hp_checkpoint_state s;
    assert_ok(hp_checkpoint_read_state(dir, &s));
    assert_int_equal(s.format_version, 2);
    assert_int_equal(s.step, 10);
    assert_int_equal(s.seed, 77);
    assert_string_equal(s.extra_json, "{\"loss\":1.5}");
    hp_checkpoint_state_free(&s);

    /* The index: replicated tensors stored once, empty blocks skipped. */
    snprintf(p, sizeof p, "%s/index.json", dir);
    cJSON *index = read_json(p);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(index, "format_version")->valueint, 2);
    assert_int_equal(nblocks(index, "model", "w"), 4);
    assert_int_equal(nblocks(index, "model", "wq"), 2);
    assert_int_equal(nblocks(index, "model", "b"), 1);
    assert_int_equal(nblocks(index, "model", "s"), 1);
    assert_int_equal(nblocks(index, "model", "i"), 2);
    assert_int_equal(nblocks(index, "optim", "exp_avg.u"), 3); /* 5 rows over 4: 2, 2, 1, 0 */
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(index, "model"), "w");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(w, "layout")->valuestring, "[dp, tp]");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(w, "dtype")->valuestring, "F32");
    const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(index, "mesh");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(mesh, "device_matrix")), 2);
    cJSON_Delete(index);
    hp_safetensors *f;
    snprintf(p, sizeof p, "%s/model-r00001.safetensors", dir);
    assert_ok(hp_safetensors_open(p, &f));
    assert_null(hp_safetensors_find(f, "b"));  /* rank 0 holds the replicated copy */
    assert_non_null(hp_safetensors_find(f, "w"));
    hp_safetensors_close(f);

    /* Load under the saving mesh, [4], one device, and [3] (uneven). */
    for (int i = 0; i < NMODEL; i++) g_model[i].load_layout = g_model[i].save_layout;
    for (int i = 0; i < NOPTIM; i++) g_optim[i].load_layout = g_optim[i].save_layout;
    check_load(dir, m);
    init_specs();
    hp_mesh_free(m);
    int sizes[] = {4, 1, 3};
    for (int k = 0; k < 3; k++) {
        m = mesh1d(sizes[k]);
        check_load(dir, m);
        hp_mesh_free(m);
    }

    /* The single-device API loads full tensors from a sharded directory. */
    float wfull[48], want[48];
    int32_t ifull[12];
    hp_named_tensor named[] = {{"w", HP_DTYPE_F32, HP_SHAPE(8, 6), wfull}, {"i", HP_DTYPE_I32, HP_SHAPE(4, 3), ifull}};
    assert_ok(hp_checkpoint_load_model(dir, named, 2));
    fill_global(&g_model[0], 0, want);
    assert_memory_equal(wfull, want, sizeof want);
    assert_int_equal(ifull[11], 6 * 1000 + 11);
    hp_named_tensor mom = {"exp_avg.u", HP_DTYPE_F32, HP_SHAPE(5, 3), want};
    assert_ok(hp_checkpoint_load_optim(dir, &mom, 1));
    assert_true(want[14] == 102 * 1000 + 14);
}

static void test_single_device_checkpoint_loads_sharded(void **state) {
    (void)state;
    float w[48], u[15];
    int32_t i[12];
    fill_global(&g_model[0], 0, w);
    fill_global(&g_model[3], 3, u);
    fill_global(&g_model[6], 6, i);
    hp_named_tensor model[] = {{"w", HP_DTYPE_F32, HP_SHAPE(8, 6), w},
                               {"u", HP_DTYPE_F32, HP_SHAPE(5, 3), u},
                               {"i", HP_DTYPE_I32, HP_SHAPE(4, 3), i}};
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = g_run;
    a.step = 3;
    a.model = model;
    a.n_model = 3;
    char dir[4096];
    assert_ok(hp_checkpoint_save(&a, dir, sizeof dir));
    spec sp[] = {g_model[0], g_model[3], g_model[6]};
    sp[0].load_layout = "[x, none]";
    sp[1].load_layout = "[none, x]";
    hp_mesh *m = mesh1d(2);
    for (int r = 0; r < 2; r++) {
        hp_sharded_tensor t[3];
        assert_ok(make(sp, 3, 0, m, false, r, false, t));
        assert_ok(hp_checkpoint_load_sharded(dir, false, m, r, t, 3));
        /* mismatches() numbers tensors from tid0 by position: check one at a time with its id. */
        int ids[] = {0, 3, 6};
        for (int k = 0; k < 3; k++) assert_int_equal(mismatches(&sp[k], 1, ids[k], m, r, &t[k]), 0);
        release(t, 3);
    }
    hp_mesh_free(m);
}

static void before_write_block_rank1(const char *tmp, int rank) {
    if (rank != 1) return;
    char p[4200];
    snprintf(p, sizeof p, "%s/model-r00001.safetensors", tmp);
    mkdir(p, 0755); /* the rank's file cannot be created */
}

static void test_failed_save_is_atomic(void **state) {
    (void)state;
    hp_mesh *m = mesh22();
    save_ctx *x = save(m, 1);
    run_save(x);
    assert_int_equal(x->st[0], HP_STATUS_OK);
    free(x);
    char p[512], latest[64];

    /* An I/O failure on rank 1 while writing. */
    hp__ckpt_sharded_before_write = before_write_block_rank1;
    x = save(m, 2);
    run_save(x);
    hp__ckpt_sharded_before_write = NULL;
    for (int r = 0; r < 4; r++) {
        assert_int_equal(x->st[r], HP_STATUS_IO);
        assert_non_null(strstr(x->msg[r], "not saved (previous checkpoints untouched)"));
        if (r != 1) assert_non_null(strstr(x->msg[r], "rank 1 failed"));
    }
    assert_non_null(strstr(x->msg[1], "model-r00001.safetensors"));
    free(x);
    snprintf(p, sizeof p, "%s/step_00000002", g_run);
    struct stat sb;
    assert_int_not_equal(stat(p, &sb), 0);
    read_latest(latest, sizeof latest);
    assert_string_equal(latest, "step_00000001\n");
    assert_int_equal(count_hidden(), 0);

    /* A bad argument on rank 2 (no local block), and ranks that disagree on the tensor list. */
    x = save(m, 2);
    x->null_local_rank = 2;
    run_save(x);
    for (int r = 0; r < 4; r++) assert_int_equal(x->st[r], HP_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(x->msg[2], "'w' has no local block on mesh index 2"));
    assert_non_null(strstr(x->msg[0], "rank 2 failed"));
    free(x);
    x = save(m, 2);
    x->short_list_rank = 3;
    run_save(x);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(x->st[r], HP_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(x->msg[r], "different tensor lists"));
    }
    free(x);
    assert_int_not_equal(stat(p, &sb), 0);
    read_latest(latest, sizeof latest);
    assert_string_equal(latest, "step_00000001\n");
    assert_int_equal(count_hidden(), 0);
    hp_mesh_free(m);
}

static void test_load_errors(void **state) {
    (void)state;
    hp_mesh *m = mesh22();
    save_ctx *x = save(m, 5);
    run_save(x);
    assert_int_equal(x->st[0], HP_STATUS_OK);
    char dir[512], p[1024];
    snprintf(dir, sizeof dir, "%s", x->dir[0]);
    free(x);
    hp_mesh_free(m);
    m = mesh1d(2);
    float buf[64];
    hp_sharded_tensor t = {"w", HP_DTYPE_F32, HP_SHAPE(6, 8), {0}, buf};
    hp_layout_init(&t.layout, 2);
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 0, &t, 1), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("tensor 'w' has shape [8, 6], expected [6, 8]");
    t.name = "nope";
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 0, &t, 1), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("no tensor 'nope'");
    hp_test_assert_error_contains("index.json");
    t = (hp_sharded_tensor){"w", HP_DTYPE_I32, HP_SHAPE(8, 6), {0}, buf};
    hp_layout_init(&t.layout, 2);
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 0, &t, 1), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("dtype f32, expected i32");
    t.dtype = HP_DTYPE_F32;
    assert_ok(hp_layout_parse("[none, none] partial=sum(x)", m, &t.layout));
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 0, &t, 1), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("partial");
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 2, &t, 1), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("mesh index 2");

    /* A block dropped from the index: a hole named by tensor and box. */
    snprintf(p, sizeof p, "%s/index.json", dir);
    cJSON *index = read_json(p);
    cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(index, "model"), "w");
    cJSON_DeleteItemFromArray(cJSON_GetObjectItemCaseSensitive(w, "blocks"), 1); /* rows [0, 4), cols [3, 6) */
    write_json(p, index);
    cJSON_Delete(index);
    hp_layout_init(&t.layout, 2);
    assert_ok(hp_layout_parse("[x, none]", m, &t.layout));
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 0, &t, 1), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("tensor 'w' covers the box start [0, 3] len [4, 3]");
    assert_ok(hp_checkpoint_load_sharded(dir, false, m, 1, &t, 1)); /* rows [4, 8) are whole */

    /* A rank's file deleted, another truncated: errors name the file. */
    snprintf(p, sizeof p, "%s/model-r00003.safetensors", dir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 1, &t, 1), HP_STATUS_IO);
    hp_test_assert_error_contains("model-r00003.safetensors");
    snprintf(p, sizeof p, "%s/model-r00000.safetensors", dir);
    assert_int_equal(truncate(p, 40), 0);
    assert_int_equal(hp_checkpoint_load_sharded(dir, false, m, 0, &t, 1), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("model-r00000.safetensors");
    hp_mesh_free(m);
}

int main(void) {
    init_specs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reshard_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_device_checkpoint_loads_sharded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_save_is_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
