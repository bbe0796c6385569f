/*
 * Fuzz harness (d): the manifest of a sharded checkpoint (index.json, src/train/checkpoint_sharded.c).
 * The input is the index's text, written into a step directory that also holds fixed, valid
 * per-rank safetensors files (made once, below: what a 2-rank save of the tensors listed here
 * writes). The harness then loads the model and optimizer sections as the trainer would, under
 * several meshes and layouts (hp_checkpoint_load_sharded: mesh [2] dp, mesh [2, 2] dp x tp) and as
 * full tensors (hp_checkpoint_load_model / _optim, a one-device mesh), into exact-size buffers.
 *
 * Invariants: every failure is a status with a message; no read or write outside the buffers and
 * files, whatever the blocks, offsets, names or numbers the index holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hp/checkpoint.h"
#include "hp/mesh.h"

typedef struct spec {
    const char *name;
    hp_dtype dtype;
    hp_shape shape;
    const char *layout_dp;   /* on mesh [2] (dp) */
    const char *layout_dptp; /* on mesh [2, 2] (dp, tp) */
} spec;

static const spec k_model[] = {
    {"wte.weight", HP_DTYPE_F32, {2, {4, 3}}, "[dp, none]", "[[tp, dp], none]"},
    {"ln.bias", HP_DTYPE_F32, {1, {3}}, "[none]", "[tp]"},
    {"pos", HP_DTYPE_BF16, {2, {2, 2}}, "[none, none]", "[dp, tp]"},
    {"ids", HP_DTYPE_I32, {1, {4}}, "[none]", "[none]"},
};
static const spec k_optim[] = {
    {"exp_avg.wte.weight", HP_DTYPE_F32, {2, {4, 3}}, "[dp, none]", "[none, tp]"},
    {"exp_avg_sq.wte.weight", HP_DTYPE_F32, {2, {4, 3}}, "[dp, none]", "[dp, none]"},
    {"exp_avg.ln.bias", HP_DTYPE_F32, {1, {3}}, "[none]", "[dp]"},
};
#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The saved blocks: rank r holds rows [2r, 2r + 2) of the dp-sharded tensors, rank 0 the rest. */
static void write_rank_file(const char *prefix, int rank, const spec *t, size_t n) {
    static float f32[64];
    static int32_t i32[64];
    for (int i = 0; i < 64; i++) f32[i] = (float)(rank * 100 + i), i32[i] = rank * 100 + i;
    hp_named_tensor nt[8];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        hp_shape s = t[i].shape;
        bool sharded = strcmp(t[i].layout_dp, "[dp, none]") == 0;
        if (sharded) s.dim[0] /= 2;
        else if (rank != 0) continue;
        nt[k++] = (hp_named_tensor){t[i].name, t[i].dtype, s, t[i].dtype == HP_DTYPE_I32 ? (void *)i32 : (void *)f32};
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s-r%05d.safetensors", fuzz_tmpdir(), prefix, rank);
    if (hp_safetensors_write(path, nt, k, NULL, 0) != HP_STATUS_OK) {
        fprintf(stderr, "fuzz_manifest: cannot write %s: %s\n", path, hp_error_message());
        abort();
    }
}

static hp_mesh *g_dp, *g_dptp;

static void setup(void) {
    for (int r = 0; r < 2; r++) {
        write_rank_file("model", r, k_model, N(k_model));
        write_rank_file("optim", r, k_optim, N(k_optim));
    }
    const char *dp[] = {"dp"}, *dptp[] = {"dp", "tp"};
    if (hp_mesh_new(1, (int[]){2}, dp, NULL, 0, &g_dp) != HP_STATUS_OK ||
        hp_mesh_new(2, (int[]){2, 2}, dptp, NULL, 0, &g_dptp) != HP_STATUS_OK)
        abort();
}

/* Loads every tensor of `t` at each index of `mesh` (dptp: the layouts on [2, 2]). */
static void load_sharded(bool optim, const spec *t, size_t n, const hp_mesh *mesh, bool dptp) {
    for (int index = 0; index < hp_mesh_size(mesh); index++) {
        hp_sharded_tensor st[8];
        for (size_t i = 0; i < n; i++) {
            st[i] = (hp_sharded_tensor){t[i].name, t[i].dtype, t[i].shape, {0}, NULL};
            FUZZ_CHECK(hp_layout_parse(dptp ? t[i].layout_dptp : t[i].layout_dp, mesh, &st[i].layout) == HP_STATUS_OK);
            hp_shape local;
            FUZZ_CHECK(hp_layout_local_shape(&st[i].layout, mesh, &t[i].shape, index, &local) == HP_STATUS_OK);
            size_t bytes = (size_t)hp_shape_numel(&local) * hp_dtype_size(t[i].dtype);
            st[i].local = bytes ? malloc(bytes) : NULL;
        }
        hp_status s = hp_checkpoint_load_sharded(fuzz_tmpdir(), optim, mesh, index, st, n);
        if (s != HP_STATUS_OK) fuzz_check_error(s);
        for (size_t i = 0; i < n; i++) free(st[i].local);
    }
}

/* Loads the full tensors of `t` (hp_checkpoint_load_model / _optim). */
static void load_full(bool optim, const spec *t, size_t n) {
    hp_named_tensor nt[8];
    for (size_t i = 0; i < n; i++)
        nt[i] = (hp_named_tensor){t[i].name, t[i].dtype, t[i].shape,
                                  malloc((size_t)hp_shape_numel(&t[i].shape) * hp_dtype_size(t[i].dtype))};
    hp_status s = optim ? hp_checkpoint_load_optim(fuzz_tmpdir(), nt, n) : hp_checkpoint_load_model(fuzz_tmpdir(), nt, n);
    if (s != HP_STATUS_OK) fuzz_check_error(s);
    for (size_t i = 0; i < n; i++) free(nt[i].data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        setup();
        ready = true;
    }
    fuzz_write_file("index.json", data, size);
    load_full(false, k_model, N(k_model));
    load_full(true, k_optim, N(k_optim));
    load_sharded(false, k_model, N(k_model), g_dp, false);
    load_sharded(true, k_optim, N(k_optim), g_dp, false);
    load_sharded(false, k_model, N(k_model), g_dptp, true);
    load_sharded(true, k_optim, N(k_optim), g_dptp, true);
    return 0;
}
