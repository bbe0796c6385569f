/* Sharded checkpoint integrity on simulated ranks (a tiny GPT on a [2, 2] mesh): files swapped between ranks, a
 * rank's file missing, a file from another step, an edited index (blocks, step, mesh, files list),
 * each refused by the loader and by hp_checkpoint_verify naming the file or tensor; and
 * hp_checkpoint_list's ok / corrupt / incomplete and `latest`. */
#include "ckptutil.h"

#include "hp/comm.h"
#include "hp/redistribute.h"

#include <unistd.h>

static char g_tmp[64];
static char g_run[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hp_test_ckver_XXXXXX");
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

static void expect(hp_status st, hp_status want, const char *a, const char *b) {
    if (st != want) fail_msg("got %s (%s), expected %s", hp_status_str(st), hp_error_message(), hp_status_str(want));
    hp_test_assert_error_contains(a);
    if (b) hp_test_assert_error_contains(b);
}

/* The tensors: a tiny GPT's (tests/unit/ckptutil.h), saved with its config so that verify checks
 * everything. Weights (2-d) split over both axes, vectors replicated (stored by rank 0 only);
 * optimizer states ZeRO-style, every rank's block of a tensor one shape (so swapped files fit). */
static hp_run_config g_cfg;
static ck_gpt g_gpt;

static const char *save_layout(const hp_named_tensor *t, bool optim) {
    return t->shape.ndim == 2 ? (optim ? "[[dp, tp], none]" : "[dp, tp]") : (optim ? "[[dp, tp]]" : "[none]");
}

/* Global tensor t's block on `index` under layout text on m. */
static hp_sharded_tensor block(const hp_named_tensor *t, const hp_mesh *m, const char *layout, int index) {
    hp_sharded_tensor s = {t->name, HP_DTYPE_F32, t->shape, {0}, NULL};
    assert_ok(hp_layout_parse(layout, m, &s.layout));
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    assert_ok(hp_layout_slice_of(&s.layout, m, &t->shape, index, start, len));
    hp_shape local = hp_shape_make(t->shape.ndim, len);
    s.local = malloc((size_t)hp_shape_numel(&local) * sizeof(float) + 4);
    hp_copy_box(s.local, &local, zero, t->data, &t->shape, start, len, sizeof(float));
    return s;
}

static void release(hp_sharded_tensor *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].local);
    free(t);
}

typedef struct save_ctx {
    const hp_mesh *mesh;
    int64_t step;
    hp_status st[4];
} save_ctx;

static hp_status save_rank(hp_comm *c, int rank, void *user) {
    save_ctx *x = user;
    int n = g_gpt.n;
    hp_sharded_tensor *model = calloc((size_t)n, sizeof *model), *optim = calloc(2 * (size_t)n, sizeof *optim);
    for (int i = 0; i < n; i++) model[i] = block(&g_gpt.model[i], x->mesh, save_layout(&g_gpt.model[i], false), rank);
    for (int i = 0; i < 2 * n; i++) optim[i] = block(&g_gpt.optim[i], x->mesh, save_layout(&g_gpt.optim[i], true), rank);
    hp_checkpoint_save_args a = hp_checkpoint_save_args_default();
    a.dir = g_run;
    a.step = x->step;
    a.config = &g_cfg;
    x->st[rank] = hp_checkpoint_save_sharded(&a, c, x->mesh, model, (size_t)n, optim, 2 * (size_t)n, NULL, 0);
    release(model, n);
    release(optim, 2 * n);
    return HP_STATUS_OK;
}

/* Saves step `step` on 4 simulated ranks; its step directory into dir. */
static void save(int64_t step, char *dir, size_t n) {
    hp_mesh *m;
    assert_ok(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, NULL, 0, &m));
    save_ctx x = {m, step, {0}};
    assert_ok(hp_comm_sim_run(4, save_rank, &x));
    for (int r = 0; r < 4; r++) assert_ok(x.st[r]);
    hp_mesh_free(m);
    snprintf(dir, n, "%s/step_%08lld", g_run, (long long)step);
}

/* Loads the model (optim false) or optimizer state on every index of a [4] mesh, rows split; the
 * first failure, after checking the values of every success. */
static hp_status load_all(const char *dir, bool optim) {
    hp_mesh *m;
    assert_ok(hp_mesh_new(1, (int[]){4}, (const char *[]){"x"}, NULL, 0, &m));
    hp_status st = HP_STATUS_OK;
    int n = optim ? 2 * g_gpt.n : g_gpt.n;
    const hp_named_tensor *src = optim ? g_gpt.optim : g_gpt.model;
    for (int r = 0; r < 4 && st == HP_STATUS_OK; r++) {
        hp_sharded_tensor *want = calloc((size_t)n, sizeof *want), *got = calloc((size_t)n, sizeof *got);
        for (int i = 0; i < n; i++) {
            want[i] = got[i] = block(&src[i], m, src[i].shape.ndim == 2 ? "[x, none]" : "[x]", r);
            got[i].local = NULL;
        }
        for (int i = 0; i < n; i++) {
            hp_shape local;
            assert_ok(hp_layout_local_shape(&want[i].layout, m, &src[i].shape, r, &local));
            got[i].local = calloc(1, (size_t)hp_shape_numel(&local) * sizeof(float) + 4);
        }
        st = hp_checkpoint_load_sharded(dir, optim, m, r, got, (size_t)n);
        for (int i = 0; i < n && st == HP_STATUS_OK; i++) {
            hp_shape local;
            assert_ok(hp_layout_local_shape(&want[i].layout, m, &src[i].shape, r, &local));
            if (memcmp(got[i].local, want[i].local, (size_t)hp_shape_numel(&local) * sizeof(float)))
                fail_msg("'%s' differs on %d", src[i].name, r);
        }
        release(want, n);
        release(got, n);
    }
    hp_mesh_free(m);
    return st;
}

static hp_status verify(const char *dir, bool *incomplete) {
    hp_checkpoint_report r;
    hp_status st = hp_checkpoint_verify(dir, &r);
    if (incomplete) *incomplete = r.incomplete;
    hp_checkpoint_report_free(&r);
    return st;
}

static void swap_files(const char *dir, const char *a, const char *b) {
    char pa[700], pb[700], pt[700];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    snprintf(pt, sizeof pt, "%s/swap.tmp", dir);
    assert_int_equal(rename(pa, pt), 0);
    assert_int_equal(rename(pb, pa), 0);
    assert_int_equal(rename(pt, pb), 0);
}

static void test_clean(void **state) {
    (void)state;
    char dir[512];
    save(6, dir, sizeof dir);
    assert_ok(load_all(dir, false));
    assert_ok(load_all(dir, true));
    int n2 = 0, n1 = 0;
    for (int i = 0; i < g_gpt.n; i++) g_gpt.model[i].shape.ndim == 2 ? n2++ : n1++;
    hp_checkpoint_report r;
    assert_ok(hp_checkpoint_verify(dir, &r));
    assert_int_equal(r.format_version, 2);
    assert_int_equal(r.step, 6);
    assert_int_equal(r.world_size, 4);
    assert_int_equal(r.n_files, 2 + 8);
    assert_string_equal(r.files[2].name, "model-r00000.safetensors");
    assert_int_equal(r.files[2].tensors, n2 + n1); /* its blocks and every replicated vector */
    assert_int_equal(r.files[3].tensors, n2);
    for (int i = 2; i < r.n_files; i++) assert_true(r.files[i].checksummed);
    assert_int_equal(r.n_tensors, (n2 + n1) + 3 * n2 + 4 * 2 * (n2 + n1));
    hp_checkpoint_report_free(&r);
    /* what binds a file: its metadata */
    char p[700];
    snprintf(p, sizeof p, "%s/optim-r00002.safetensors", dir);
    hp_safetensors *f;
    assert_ok(hp_safetensors_open(p, &f));
    assert_string_equal(hp_safetensors_metadata(f, "rank"), "2");
    assert_string_equal(hp_safetensors_metadata(f, "world_size"), "4");
    assert_string_equal(hp_safetensors_metadata(f, "role"), "optim");
    assert_string_equal(hp_safetensors_metadata(f, "step"), "6");
    assert_string_equal(hp_safetensors_metadata(f, "mesh"), "device_matrix [2, 2] alias_name [dp, tp]");
    assert_string_equal(hp_safetensors_metadata(f, "model"),
                        "vocab=256 context=32 layers=2 heads=2 width=32 tied_head=false");
    assert_string_equal(hp_safetensors_metadata(f, "block.exp_avg.wte.weight"),
                        "layout [[dp, tp], none] start [128, 0] len [64, 32]");
    hp_safetensors_close(f);
}

static void test_files_swapped_or_missing(void **state) {
    (void)state;
    char good[512], bad[256], p[700];
    save(5, good, sizeof good);
    save(6, good, sizeof good);
    snprintf(bad, sizeof bad, "%s/bad", g_tmp);
    bool inc = true;

    /* optimizer states of ranks 1 and 2 swapped: the blocks fit, the binding does not */
    ck_copy_dir(good, bad);
    swap_files(bad, "optim-r00001.safetensors", "optim-r00002.safetensors");
    expect(load_all(bad, true), HP_STATUS_CORRUPT, "file 'optim-r00001.safetensors' records rank '2'",
           "lists it as rank 1's file");
    expect(verify(bad, &inc), HP_STATUS_CORRUPT, "records rank '2'", "optim-r00001.safetensors");
    assert_false(inc);
    assert_ok(load_all(bad, false)); /* the model files are intact */

    /* model files swapped between ranks 0 and 3 */
    ck_copy_dir(good, bad);
    swap_files(bad, "model-r00000.safetensors", "model-r00003.safetensors");
    expect(load_all(bad, false), HP_STATUS_CORRUPT, "model-r0000", "records rank");

    /* a file copied from the same rank of another step */
    ck_copy_dir(good, bad);
    ck_sh2("cp '%s/step_00000005/optim-r00003.safetensors' '%s/'", g_run, bad);
    expect(load_all(bad, true), HP_STATUS_CORRUPT, "'optim-r00003.safetensors' records step '5'", "at step 6");

    /* one rank's file missing */
    ck_copy_dir(good, bad);
    snprintf(p, sizeof p, "%s/model-r00003.safetensors", bad);
    assert_int_equal(unlink(p), 0);
    expect(load_all(bad, false), HP_STATUS_IO, "model-r00003.safetensors", NULL);
    expect(verify(bad, &inc), HP_STATUS_IO, "rank 3's model file", "model-r00003.safetensors");
    assert_true(inc);
    snprintf(p, sizeof p, "%s/model-r00001.safetensors", bad);
    assert_int_equal(unlink(p), 0);
    expect(verify(bad, &inc), HP_STATUS_IO, "model-r00001.safetensors", NULL);

    /* a flipped bit in one rank's block */
    ck_copy_dir(good, bad);
    snprintf(p, sizeof p, "%s/optim-r00002.safetensors", bad);
    ck_flip(p, -1, 7);
    expect(load_all(bad, true), HP_STATUS_CORRUPT, "checksum mismatch", "optim-r00002.safetensors");
    expect(verify(bad, NULL), HP_STATUS_CORRUPT, "checksum mismatch", "optim-r00002.safetensors");
}

typedef void (*index_edit)(cJSON *index);

static void edit_index(const char *good, const char *bad, index_edit fn) {
    char p[700];
    ck_copy_dir(good, bad);
    snprintf(p, sizeof p, "%s/index.json", bad);
    cJSON *j = ck_read_json(p);
    fn(j);
    ck_write_json(p, j);
    cJSON_Delete(j);
}

static cJSON *blocks_of(cJSON *index, const char *sec, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(index, sec), name), "blocks");
}

/* The "file" of blocks 1 and 2 of exp_avg.w exchanged: each names the other rank's block. */
static void swap_block_files(cJSON *j) {
    cJSON *b = blocks_of(j, "optim", "exp_avg.wte.weight");
    cJSON *f1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(b, 1), "file");
    cJSON *f2 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(b, 2), "file");
    char *t = f1->valuestring;
    f1->valuestring = f2->valuestring;
    f2->valuestring = t;
}
static void drop_block(cJSON *j) { cJSON_DeleteItemFromArray(blocks_of(j, "model", "wte.weight"), 3); }
static void change_step(cJSON *j) { cJSON_ReplaceItemInObjectCaseSensitive(j, "step", cJSON_CreateNumber(7)); }
static void drop_files(cJSON *j) { cJSON_DeleteItemFromObjectCaseSensitive(j, "files"); }
static void change_mesh(cJSON *j) {
    cJSON *dm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "mesh"), "device_matrix");
    cJSON_ReplaceItemInArray(dm, 0, cJSON_CreateNumber(4));
    cJSON_ReplaceItemInArray(dm, 1, cJSON_CreateNumber(1));
}
static void change_layout(cJSON *j) {
    cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"), "wte.weight");
    cJSON_ReplaceItemInObjectCaseSensitive(w, "layout", cJSON_CreateString("[tp, dp]"));
}

static void test_index_edits(void **state) {
    (void)state;
    char good[512], bad[256];
    save(6, good, sizeof good);
    snprintf(bad, sizeof bad, "%s/bad", g_tmp);
    edit_index(good, bad, swap_block_files);
    expect(load_all(bad, true), HP_STATUS_CORRUPT,
           "holds tensor 'exp_avg.wte.weight' as the block 'layout [[dp, tp], none] start [128, 0] len [64, 32]'",
           "places it at 'layout [[dp, tp], none] start [64, 0] len [64, 32]'");
    expect(verify(bad, NULL), HP_STATUS_CORRUPT, "tensor 'exp_avg.wte.weight'", NULL);
    edit_index(good, bad, drop_block);
    expect(verify(bad, NULL), HP_STATUS_CORRUPT, "the blocks of tensor 'wte.weight' cover 6144 of its 8192 elements", NULL);
    edit_index(good, bad, change_step);
    expect(load_all(bad, false), HP_STATUS_CORRUPT, "index.json': its step (a different number) is not state.json's step 6",
           NULL);
    edit_index(good, bad, drop_files);
    expect(load_all(bad, false), HP_STATUS_CORRUPT, "no \"files\" list", NULL);
    edit_index(good, bad, change_mesh);
    expect(load_all(bad, false), HP_STATUS_CORRUPT, "records mesh 'device_matrix [2, 2] alias_name [dp, tp]'",
           "has the mesh 'device_matrix [4, 1]");
    edit_index(good, bad, change_layout);
    expect(load_all(bad, false), HP_STATUS_CORRUPT, "holds tensor 'wte.weight' as the block 'layout [dp, tp]",
           "'layout [tp, dp]");
}

static const hp_checkpoint_listing *find(const hp_checkpoint_listing *l, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(l[i].name, name)) return &l[i];
    fail_msg("'%s' not listed", name);
    return NULL;
}

static void test_list(void **state) {
    (void)state;
    char dir[512], p[700];
    save(5, dir, sizeof dir);
    save(6, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/model-r00002.safetensors", dir);
    ck_flip(p, -3, 1);
    save(7, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/optim-r00001.safetensors", dir);
    assert_int_equal(unlink(p), 0);
    snprintf(p, sizeof p, "%s/.tmp-step_00000008-sharded", g_run);
    assert_int_equal(mkdir(p, 0755), 0);
    hp_checkpoint_listing *l;
    int n;
    assert_ok(hp_checkpoint_list(g_run, &l, &n));
    assert_int_equal(n, 4);
    assert_string_equal(l[0].name, "step_00000005");
    assert_int_equal(l[0].health, HP_CHECKPOINT_HEALTH_OK);
    assert_null(l[0].fault);
    const hp_checkpoint_listing *s6 = find(l, n, "step_00000006"), *s7 = find(l, n, "step_00000007");
    assert_int_equal(s6->health, HP_CHECKPOINT_HEALTH_CORRUPT);
    assert_non_null(strstr(s6->fault, "model-r00002.safetensors"));
    assert_int_equal(s7->health, HP_CHECKPOINT_HEALTH_INCOMPLETE);
    assert_non_null(strstr(s7->fault, "optim-r00001.safetensors"));
    assert_true(s7->latest && !s6->latest);
    const hp_checkpoint_listing *t8 = find(l, n, ".tmp-step_00000008-sharded");
    assert_int_equal(t8->health, HP_CHECKPOINT_HEALTH_INCOMPLETE);
    assert_int_equal(t8->step, 8);
    hp_checkpoint_listing_free(l, n);
    /* `latest` naming a step that is not there */
    snprintf(p, sizeof p, "%s/latest", g_run);
    ck_spit(p, "step_00000009\n", 14);
    assert_ok(hp_checkpoint_list(g_run, &l, &n));
    const hp_checkpoint_listing *s9 = find(l, n, "step_00000009");
    assert_true(s9->latest);
    assert_int_equal(s9->health, HP_CHECKPOINT_HEALTH_INCOMPLETE);
    assert_non_null(strstr(s9->fault, "missing"));
    hp_checkpoint_listing_free(l, n);
    expect(hp_checkpoint_list("/nonexistent/run", &l, &n), HP_STATUS_IO, "/nonexistent/run", NULL);
}

int main(void) {
    hp_test_tiny_config(&g_cfg, NULL);
    ck_gpt_make(&g_cfg.model, &g_gpt);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files_swapped_or_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_edits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    ck_gpt_free(&g_gpt);
    hp_run_config_free(&g_cfg);
    return failed;
}
