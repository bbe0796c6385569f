/* Saving sharded checkpoints: per-rank safetensors blocks, each file bound to its step, rank, mesh
 * and blocks and checksummed, plus index.json (see hp/checkpoint.h; loading is checkpoint_load.c). */
#include "hp/checkpoint.h"
#include "hp/redistribute.h"
#include "train/checkpoint_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_BYTES HP__CKPT_PATH_BYTES

void (*hp__ckpt_sharded_before_write)(const char *tmp_dir, int rank) = NULL;

static int64_t box_numel(int nd, const int64_t *len) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= len[d];
    return n;
}

/* ---------------------------------------------------------------- save */

/* A non-empty slice is stored by its first owner: the mesh index with the same coordinates on the
 * axes the layout shards and coordinate 0 on every other axis (distinct shard indices of a block
 * distribution give disjoint slices, so only the replicating axes repeat a slice). */
static bool is_first_owner(const hp_layout *l, const hp_mesh *m, int index) {
    int c[HP_MESH_MAX_AXES];
    hp_mesh_coords(m, index, c);
    uint32_t used = hp_layout_sharded_axes(l);
    for (int a = 0; a < hp_mesh_naxes(m); a++)
        if (!(used & (1u << a)) && c[a] != 0) return false;
    return true;
}

static uint32_t fnv(uint32_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* Checks one list of tensors on this rank and folds its description into *hash. */
static hp_status check_tensors(const char *what, const hp_sharded_tensor *t, size_t n, const hp_mesh *m, int index,
                               uint32_t *hash) {
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__"))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: %s tensor %zu has no valid name", what, i);
        if ((int)t[i].dtype < 0 || t[i].dtype >= HP_DTYPE_COUNT)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: %s tensor '%s' has invalid dtype %d", what, t[i].name,
                            (int)t[i].dtype);
        hp_status st = hp_layout_validate(&t[i].layout, m, &t[i].shape);
        if (st != HP_STATUS_OK) return hp_error_prefix(st, "checkpoint: %s tensor '%s': ", what, t[i].name);
        if (t[i].layout.partial)
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "checkpoint: %s tensor '%s' has a partial layout; reduce it before saving", what, t[i].name);
        int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
        HP_CHECK(hp_layout_slice_of(&t[i].layout, m, &t[i].shape, index, start, len));
        if (!t[i].local && box_numel(t[i].shape.ndim, len) > 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: %s tensor '%s' has no local block on mesh index %d",
                            what, t[i].name, index);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(t[i].name, t[j].name))
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: %s tensor '%s' is listed twice", what, t[i].name);
        *hash = fnv(*hash, t[i].name, strlen(t[i].name) + 1);
        *hash = fnv(*hash, &t[i].dtype, sizeof t[i].dtype);
        *hash = fnv(*hash, &t[i].shape.ndim, sizeof t[i].shape.ndim);
        *hash = fnv(*hash, t[i].shape.dim, (size_t)t[i].shape.ndim * sizeof(int64_t));
        hp_layout l = t[i].layout; /* only the meaningful fields */
        for (int d = 0; d < l.ndim; d++) *hash = fnv(*hash, l.map[d], (size_t)l.nmap[d] * sizeof(int));
        *hash = fnv(*hash, l.nmap, (size_t)l.ndim * sizeof(int));
    }
    return HP_STATUS_OK;
}

/* The mesh metadata of m (hp__ckpt_mesh_str). */
static void mesh_meta(const hp_mesh *m, char *buf, size_t n) {
    int64_t dims[HP_MESH_MAX_AXES];
    const char *names[HP_MESH_MAX_AXES];
    for (int a = 0; a < hp_mesh_naxes(m); a++) dims[a] = hp_mesh_dim(m, a), names[a] = hp_mesh_axis_name(m, a);
    hp__ckpt_mesh_str(hp_mesh_naxes(m), dims, names, buf, n);
}

/* Writes this rank's file of one list: the blocks it first owns, under the tensors' names, with
 * checksums and the binding metadata (step, role, rank, world size, mesh, model, each block's
 * layout and box). */
static hp_status write_rank_file(const char *tmp, const char *prefix, int rank, const hp_sharded_tensor *t, size_t n,
                                 const hp_mesh *m, const hp_checkpoint_save_args *a) {
    enum { FIXED = 8 };
    char *model_json = NULL;
    hp_named_tensor *nt = calloc(n ? n : 1, sizeof *nt);
    const char **meta = calloc(2 * (FIXED + n), sizeof *meta);
    char *strs = calloc(n ? n : 1, 2048); /* per block: key (first 1024 bytes) and value */
    hp_status st = HP_STATUS_OK;
    if (!nt || !meta || !strs) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %zu tensors", n);
        goto out;
    }
    char stepstr[32], rankstr[32], worldstr[32], mesh[512], model[512], leaf[64], path[PATH_BYTES];
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)a->step);
    snprintf(rankstr, sizeof rankstr, "%d", rank);
    snprintf(worldstr, sizeof worldstr, "%d", hp_mesh_size(m));
    mesh_meta(m, mesh, sizeof mesh);
    size_t nm = 0;
    const char *fixed[] = {"format", "pt", HP__CKPT_META_STEP, stepstr, HP__CKPT_META_ROLE, prefix,
                           HP__CKPT_META_RANK, rankstr, HP__CKPT_META_WORLD, worldstr, HP__CKPT_META_MESH, mesh};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i += 2, nm++) meta[2 * nm] = fixed[i], meta[2 * nm + 1] = fixed[i + 1];
    if (a->config) {
        hp__ckpt_model_summary(&a->config->model, model, sizeof model);
        meta[2 * nm] = HP__CKPT_META_MODEL, meta[2 * nm + 1] = model, nm++;
        if (!(model_json = hp__ckpt_model_json(a->config))) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
            goto out;
        }
        meta[2 * nm] = HP__CKPT_META_MODEL_JSON, meta[2 * nm + 1] = model_json, nm++;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        hp_shape local;
        int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
        HP_CHECK_GOTO(hp_layout_local_shape(&t[i].layout, m, &t[i].shape, rank, &local), st, out);
        if (hp_shape_numel(&local) == 0 || !is_first_owner(&t[i].layout, m, rank)) continue;
        HP_CHECK_GOTO(hp_layout_slice_of(&t[i].layout, m, &t[i].shape, rank, start, len), st, out);
        char lay[512], *key = strs + 2048 * k, *val = key + 1024;
        hp_layout_format(&t[i].layout, m, lay, sizeof lay);
        if (snprintf(key, 1024, "%s%s", HP__CKPT_META_BLOCK, t[i].name) >= 1024) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: tensor name '%.64s...' is too long", t[i].name);
            goto out;
        }
        hp__ckpt_block_str(lay, t[i].shape.ndim, start, len, val, 1024);
        meta[2 * nm] = key, meta[2 * nm + 1] = val, nm++;
        nt[k++] = (hp_named_tensor){t[i].name, t[i].dtype, local, t[i].local};
    }
    snprintf(leaf, sizeof leaf, "%s-r%05d.safetensors", prefix, rank);
    st = hp__ckpt_join(path, tmp, leaf);
    if (st == HP_STATUS_OK) st = hp_safetensors_write_checked(path, nt, k, meta, nm);
out:
    free(nt);
    free(meta);
    free(strs);
    free(model_json);
    return st;
}

static cJSON *int_array(int n, const int64_t *v) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber((double)v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* The index section of one list: every non-empty first-owned block of every tensor. */
static bool index_section(cJSON *root, const char *key, const char *prefix, const hp_sharded_tensor *t, size_t n,
                          const hp_mesh *m) {
    cJSON *sec = cJSON_AddObjectToObject(root, key);
    if (!sec) return false;
    for (size_t i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(sec, t[i].name);
        char lay[512], dt[8];
        snprintf(dt, sizeof dt, "%s", hp_dtype_name(t[i].dtype));
        for (char *c = dt; *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
        hp_layout_format(&t[i].layout, m, lay, sizeof lay);
        cJSON *blocks = NULL;
        if (!e || !cJSON_AddStringToObject(e, "dtype", dt) ||
            !cJSON_AddItemToObject(e, "shape", int_array(t[i].shape.ndim, t[i].shape.dim)) ||
            !cJSON_AddStringToObject(e, "layout", lay) || !(blocks = cJSON_AddArrayToObject(e, "blocks")))
            return false;
        for (int r = 0; r < hp_mesh_size(m); r++) {
            int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
            if (hp_layout_slice_of(&t[i].layout, m, &t[i].shape, r, start, len) != HP_STATUS_OK) return false;
            if (box_numel(t[i].shape.ndim, len) == 0 || !is_first_owner(&t[i].layout, m, r)) continue;
            char file[64];
            snprintf(file, sizeof file, "%s-r%05d.safetensors", prefix, r);
            cJSON *b = cJSON_CreateObject();
            if (!b || !cJSON_AddItemToArray(blocks, b)) {
                cJSON_Delete(b);
                return false;
            }
            if (!cJSON_AddStringToObject(b, "file", file) || !cJSON_AddStringToObject(b, "key", t[i].name) ||
                !cJSON_AddItemToObject(b, "start", int_array(t[i].shape.ndim, start)) ||
                !cJSON_AddItemToObject(b, "len", int_array(t[i].shape.ndim, len)))
                return false;
        }
    }
    return true;
}

/* "files": every rank's model and optim file, bound to its rank (what loading checks each file's
 * metadata against). */
static bool index_files(cJSON *root, const hp_mesh *m) {
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int k = 0; files && k < 2; k++)
        for (int r = 0; r < hp_mesh_size(m); r++) {
            const char *prefix = k ? "optim" : "model";
            char file[64];
            snprintf(file, sizeof file, "%s-r%05d.safetensors", prefix, r);
            cJSON *f = cJSON_CreateObject();
            if (!f || !cJSON_AddItemToArray(files, f)) {
                cJSON_Delete(f);
                return false;
            }
            if (!cJSON_AddStringToObject(f, "file", file) || !cJSON_AddStringToObject(f, "role", prefix) ||
                !cJSON_AddNumberToObject(f, "rank", r))
                return false;
        }
    return files != NULL;
}

static hp_status write_index(const char *tmp, const hp_checkpoint_save_args *a, const hp_mesh *m,
                             const hp_sharded_tensor *model, size_t n_model, const hp_sharded_tensor *optim,
                             size_t n_optim) {
    cJSON *root = cJSON_CreateObject(), *mesh = NULL, *dm = NULL, *an = NULL;
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)a->step);
    bool ok = root && cJSON_AddStringToObject(root, "format", "hyperparallel-checkpoint-index") &&
              cJSON_AddNumberToObject(root, "format_version", HP_CHECKPOINT_FORMAT_VERSION) &&
              cJSON_AddRawToObject(root, "step", step) && (mesh = cJSON_AddObjectToObject(root, "mesh")) &&
              (dm = cJSON_AddArrayToObject(mesh, "device_matrix")) && (an = cJSON_AddArrayToObject(mesh, "alias_name"));
    for (int ax = 0; ok && ax < hp_mesh_naxes(m); ax++)
        ok = cJSON_AddItemToArray(dm, cJSON_CreateNumber(hp_mesh_dim(m, ax))) &&
             cJSON_AddItemToArray(an, cJSON_CreateString(hp_mesh_axis_name(m, ax)));
    ok = ok && index_section(root, "model", "model", model, n_model, m) &&
         index_section(root, "optim", "optim", optim, n_optim, m) && index_files(root, m);
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory building %s", HP__CKPT_INDEX_FILE);
    char path[PATH_BYTES];
    hp_status st = hp__ckpt_join(path, tmp, HP__CKPT_INDEX_FILE);
    if (st == HP_STATUS_OK) st = hp__ckpt_write_file_sync(path, text);
    free(text);
    HP_CHECK(st);
    char *js = hp__ckpt_state_json(a, HP_CHECKPOINT_FORMAT_VERSION, true);
    if (!js) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory building state.json");
    st = hp__ckpt_join(path, tmp, HP_CHECKPOINT_STATE_FILE);
    if (st == HP_STATUS_OK) st = hp__ckpt_write_file_sync(path, js);
    free(js);
    return st;
}

/*
 * Agreement: every rank contributes its status (and a hash of its tensor lists); *bad_rank is the
 * lowest failing rank (-1 when none), *bad_st its status, *hash_same whether all hashes agree.
 */
static hp_status agree(hp_comm *c, hp_status mine, uint32_t hash, int *bad_rank, hp_status *bad_st, bool *hash_same) {
    int32_t size = hp_comm_size(c), rank = hp_comm_rank(c);
    int32_t h = (int32_t)(hash & 0x3fffffffu);
    int32_t v[3] = {mine != HP_STATUS_OK ? rank * HP_STATUS_COUNT + (int32_t)mine : size * HP_STATUS_COUNT, h, -h};
    hp_status st = hp_comm_all_reduce(c, v, v, 3, HP_DTYPE_I32, HP_REDUCE_MIN);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "checkpoint: agreeing on the save: ");
    *bad_rank = v[0] / HP_STATUS_COUNT < size ? v[0] / HP_STATUS_COUNT : -1;
    *bad_st = *bad_rank >= 0 ? (hp_status)(v[0] % HP_STATUS_COUNT) : HP_STATUS_OK;
    if (hash_same) *hash_same = v[1] == -v[2];
    return HP_STATUS_OK;
}

/* The error every rank returns after a failed phase. */
static hp_status failed(int rank, int bad_rank, hp_status bad_st, int64_t step) {
    if (rank == bad_rank)
        return hp_error_prefix(bad_st, "checkpoint step %lld not saved (previous checkpoints untouched): ", (long long)step);
    return hp_error(bad_st, "checkpoint step %lld not saved (previous checkpoints untouched): rank %d failed", (long long)step,
                    bad_rank);
}

hp_status hp_checkpoint_save_sharded(const hp_checkpoint_save_args *a, hp_comm *comm, const hp_mesh *mesh,
                                     const hp_sharded_tensor *model, size_t n_model, const hp_sharded_tensor *optim,
                                     size_t n_optim, char *step_dir_out, size_t n) {
    int rank = hp_comm_rank(comm), bad_rank = -1;
    hp_status bad_st = HP_STATUS_OK;
    bool hash_same = false;
    char name[64], tmp[PATH_BYTES], final[PATH_BYTES], old[PATH_BYTES];
    uint32_t hash = 2166136261u;

    /* Phase 1: check the arguments everywhere; rank 0 creates the temp directory. */
    hp_status st = hp__ckpt_check_args(a);
    if (st == HP_STATUS_OK && hp_comm_size(comm) != hp_mesh_size(mesh))
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: communicator of %d ranks for a mesh of %d devices",
                      hp_comm_size(comm), hp_mesh_size(mesh));
    if (st == HP_STATUS_OK) st = check_tensors("model", model, n_model, mesh, rank, &hash);
    if (st == HP_STATUS_OK) st = check_tensors("optim", optim, n_optim, mesh, rank, &hash);
    if (st == HP_STATUS_OK) st = hp__ckpt_paths(a, "sharded", name, sizeof name, tmp, final, old);
    bool made = false;
    if (st == HP_STATUS_OK && rank == 0) {
        st = hp__ckpt_mkdir_p(a->dir);
        if (st == HP_STATUS_OK) {
            hp__ckpt_remove_dir(tmp); /* a leftover of a crashed save */
            if (mkdir(tmp, 0755) != 0)
                st = hp__ckpt_io_error("create directory", tmp, errno);
            else
                made = true;
        }
    }
    HP_CHECK(agree(comm, st, hash, &bad_rank, &bad_st, &hash_same));
    if (bad_rank < 0 && !hash_same) {
        if (made) hp__ckpt_remove_dir(tmp);
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "checkpoint step %lld not saved: the ranks passed different tensor lists (names, dtypes, "
                        "shapes or layouts)", (long long)a->step);
    }
    if (bad_rank >= 0) {
        if (made) hp__ckpt_remove_dir(tmp);
        return failed(rank, bad_rank, bad_st, a->step);
    }

    /* Phase 2: every rank writes its blocks; rank 0 the index and state.json. */
    if (hp__ckpt_sharded_before_write) hp__ckpt_sharded_before_write(tmp, rank);
    st = write_rank_file(tmp, "model", rank, model, n_model, mesh, a);
    if (st == HP_STATUS_OK) st = write_rank_file(tmp, "optim", rank, optim, n_optim, mesh, a);
    if (st == HP_STATUS_OK && rank == 0) st = write_index(tmp, a, mesh, model, n_model, optim, n_optim);
    HP_CHECK(agree(comm, st, 0, &bad_rank, &bad_st, NULL));

    /* Phase 3: rank 0 commits (or removes the temp directory); all return after it. */
    hp_status st3 = HP_STATUS_OK;
    if (rank == 0) {
        if (bad_rank >= 0)
            hp__ckpt_remove_dir(tmp);
        else {
            st3 = hp__ckpt_fsync_path(tmp);
            if (st3 == HP_STATUS_OK)
                st3 = hp__ckpt_commit(a->dir, name, tmp, final, old);
            else
                hp__ckpt_remove_dir(tmp);
        }
    }
    if (bad_rank >= 0) {
        HP_CHECK(agree(comm, HP_STATUS_OK, 0, &(int){0}, &(hp_status){HP_STATUS_OK}, NULL));
        return failed(rank, bad_rank, bad_st, a->step);
    }
    HP_CHECK(agree(comm, st3, 0, &bad_rank, &bad_st, NULL));
    if (bad_rank >= 0) return failed(rank, bad_rank, bad_st, a->step);
    if (step_dir_out && n) snprintf(step_dir_out, n, "%s", final);
    return HP_STATUS_OK;
}
