/* Sharded checkpoints: per-rank safetensors blocks plus index.json; loading reshards by intersecting
 * slices with the saved blocks (see hp/checkpoint.h). */
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

/* "[1, 2, 3]" of n int64 values into buf. */
static char *ints_str(int n, const int64_t *v, char *buf, size_t cap) {
    hp_shape s = hp_shape_make(n, v);
    return hp_shape_str(&s, buf, cap);
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

/* Writes this rank's file of one list: the blocks it first owns, under the tensors' names. */
static hp_status write_rank_file(const char *tmp, const char *prefix, int rank, const hp_sharded_tensor *t, size_t n,
                                 const hp_mesh *m, int64_t step) {
    hp_named_tensor *nt = calloc(n ? n : 1, sizeof *nt);
    if (!nt) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %zu tensors", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        hp_shape local;
        hp_status st = hp_layout_local_shape(&t[i].layout, m, &t[i].shape, rank, &local);
        if (st != HP_STATUS_OK) {
            free(nt);
            return st;
        }
        if (hp_shape_numel(&local) == 0 || !is_first_owner(&t[i].layout, m, rank)) continue;
        nt[k++] = (hp_named_tensor){t[i].name, t[i].dtype, local, t[i].local};
    }
    char leaf[64], path[PATH_BYTES], stepstr[32], rankstr[32];
    snprintf(leaf, sizeof leaf, "%s-r%05d.safetensors", prefix, rank);
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)step);
    snprintf(rankstr, sizeof rankstr, "%d", rank);
    const char *meta[] = {"format", "pt", "step", stepstr, "rank", rankstr};
    hp_status st = hp__ckpt_join(path, tmp, leaf);
    if (st == HP_STATUS_OK) st = hp_safetensors_write(path, nt, k, meta, 3);
    free(nt);
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
         index_section(root, "optim", "optim", optim, n_optim, m);
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
    st = write_rank_file(tmp, "model", rank, model, n_model, mesh, a->step);
    if (st == HP_STATUS_OK) st = write_rank_file(tmp, "optim", rank, optim, n_optim, mesh, a->step);
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

/* ---------------------------------------------------------------- load */

/* One saved block: a box of the global tensor stored as `key` in `file` (a name in the step dir). */
typedef struct block {
    const char *file, *key;
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
} block;

typedef struct entry {
    const char *name;
    hp_dtype dtype;
    hp_shape shape;
    int nblocks;
    block *blocks;
} entry;

/* The saved checkpoint in either format, with the files opened so far. */
typedef struct saved {
    const char *dir;
    char source[PATH_BYTES]; /* index.json or the single-device file, for messages */
    cJSON *json;             /* owns the strings of a sharded index */
    int nent;
    entry *ent;              /* sorted by name */
    int nfiles, capfiles;
    char **fname;
    hp_safetensors **files;
} saved;

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static void saved_free(saved *s) {
    for (int i = 0; i < s->nent; i++) free(s->ent[i].blocks);
    free(s->ent);
    for (int i = 0; i < s->nfiles; i++) {
        hp_safetensors_close(s->files[i]);
        free(s->fname[i]);
    }
    free(s->files);
    free(s->fname);
    cJSON_Delete(s->json);
}

/* The opened file `name` of the step directory (opened and validated on first use). */
static hp_status saved_file(saved *s, const char *name, hp_safetensors **out) {
    for (int i = 0; i < s->nfiles; i++)
        if (!strcmp(s->fname[i], name)) {
            *out = s->files[i];
            return HP_STATUS_OK;
        }
    if (s->nfiles == s->capfiles) {
        int cap = s->capfiles ? 2 * s->capfiles : 8;
        char **fn = realloc(s->fname, (size_t)cap * sizeof *fn);
        if (fn) s->fname = fn;
        hp_safetensors **f = fn ? realloc(s->files, (size_t)cap * sizeof *f) : NULL;
        if (!f) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory opening '%s'", name);
        s->files = f;
        s->capfiles = cap;
    }
    char path[PATH_BYTES];
    HP_CHECK(hp__ckpt_join(path, s->dir, name));
    char *dup = strdup(name);
    if (!dup) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory opening '%s'", name);
    hp_safetensors *f;
    hp_status st = hp_safetensors_open(path, &f);
    if (st != HP_STATUS_OK) {
        free(dup);
        return hp_error_prefix(st, "checkpoint '%s' (listed in %s): ", s->dir, s->source);
    }
    s->fname[s->nfiles] = dup;
    s->files[s->nfiles++] = f;
    *out = f;
    return HP_STATUS_OK;
}

static bool json_ints(const cJSON *a, int max, int *n, int64_t *v) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > max) return false;
    *n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        /* A whole number in [0, 2^53] (cast only then: 1e300 would be undefined behaviour). */
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble <= 9007199254740992.0) ||
            x->valuedouble != (double)(int64_t)x->valuedouble)
            return false;
        v[(*n)++] = (int64_t)x->valuedouble;
    }
    return true;
}

static hp_status parse_entry(saved *s, const cJSON *t, entry *e) {
    e->name = t->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(t, "blocks");
    if (!cJSON_IsString(dt) || hp_dtype_parse(dt->valuestring, &e->dtype) != HP_STATUS_OK)
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': tensor '%s' has no valid dtype", s->source, e->name);
    e->shape.ndim = 0;
    if (!json_ints(cJSON_GetObjectItemCaseSensitive(t, "shape"), HP_MAX_DIMS, &e->shape.ndim, e->shape.dim) ||
        !cJSON_IsArray(blocks))
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': tensor '%s' has no valid shape or blocks", s->source, e->name);
    int nb = cJSON_GetArraySize(blocks);
    e->blocks = calloc(nb ? (size_t)nb : 1, sizeof *e->blocks);
    if (!e->blocks) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %d blocks", nb);
    const cJSON *b;
    cJSON_ArrayForEach(b, blocks) {
        block *k = &e->blocks[e->nblocks];
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(b, "file");
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(b, "key");
        int n1 = -1, n2 = -1;
        bool ok = cJSON_IsString(file) && file->valuestring[0] && !strchr(file->valuestring, '/') &&
                  cJSON_IsString(key) &&
                  json_ints(cJSON_GetObjectItemCaseSensitive(b, "start"), HP_MAX_DIMS, &n1, k->start) &&
                  json_ints(cJSON_GetObjectItemCaseSensitive(b, "len"), HP_MAX_DIMS, &n2, k->len) &&
                  n1 == e->shape.ndim && n2 == e->shape.ndim;
        for (int d = 0; ok && d < e->shape.ndim; d++) ok = k->start[d] + k->len[d] <= e->shape.dim[d];
        if (!ok)
            return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': block %d of tensor '%s' is malformed or outside its shape",
                            s->source, e->nblocks, e->name);
        k->file = file->valuestring;
        k->key = key->valuestring;
        e->nblocks++;
    }
    return HP_STATUS_OK;
}

static hp_status open_sharded(saved *s, const char *index_path, bool optim) {
    char *text;
    HP_CHECK(hp__ckpt_read_text(index_path, &text));
    s->json = cJSON_Parse(text);
    free(text);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(s->json, "format_version");
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(s->json, optim ? "optim" : "model");
    if (!cJSON_IsObject(s->json) || !cJSON_IsNumber(ver) || !cJSON_IsObject(sec))
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s' is not a JSON object with a format_version and a \"%s\" object",
                        index_path, optim ? "optim" : "model");
    if (ver->valueint > HP_CHECKPOINT_FORMAT_VERSION || ver->valueint < 2)
        return hp_error(HP_STATUS_UNSUPPORTED, "checkpoint '%s' has format_version %d; this build reads 2 to %d",
                        index_path, ver->valueint, HP_CHECKPOINT_FORMAT_VERSION);
    int n = cJSON_GetArraySize(sec);
    s->ent = calloc(n ? (size_t)n : 1, sizeof *s->ent);
    if (!s->ent) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %d tensors", n);
    const cJSON *t;
    cJSON_ArrayForEach(t, sec) HP_CHECK(parse_entry(s, t, &s->ent[s->nent++]));
    return HP_STATUS_OK;
}

/* A single-device file: one block per tensor, the whole tensor. */
static hp_status open_single(saved *s, const char *file) {
    hp_safetensors *f;
    HP_CHECK(saved_file(s, file, &f));
    size_t n = hp_safetensors_count(f);
    s->ent = calloc(n ? n : 1, sizeof *s->ent);
    if (!s->ent) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %zu tensors", n);
    for (size_t i = 0; i < n; i++) {
        const hp_safetensors_entry *x = hp_safetensors_entry_at(f, i);
        entry *e = &s->ent[s->nent++];
        *e = (entry){x->name, x->dtype, x->shape, 1, calloc(1, sizeof(block))};
        if (!e->blocks) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
        e->blocks[0].file = file;
        e->blocks[0].key = x->name;
        memcpy(e->blocks[0].len, x->shape.dim, sizeof x->shape.dim);
    }
    return HP_STATUS_OK;
}

static hp_status saved_open(saved *s, const char *step_dir, bool optim) {
    memset(s, 0, sizeof *s);
    s->dir = step_dir;
    char index[PATH_BYTES];
    HP_CHECK(hp__ckpt_join(index, step_dir, HP__CKPT_INDEX_FILE));
    if (hp__ckpt_is_file(index)) {
        snprintf(s->source, sizeof s->source, "%s", index);
        HP_CHECK(open_sharded(s, index, optim));
    } else {
        const char *file = optim ? HP_CHECKPOINT_OPTIM_FILE : HP_CHECKPOINT_MODEL_FILE;
        HP_CHECK(hp__ckpt_join(s->source, step_dir, file));
        HP_CHECK(open_single(s, file));
    }
    qsort(s->ent, (size_t)s->nent, sizeof *s->ent, entry_cmp);
    for (int i = 1; i < s->nent; i++)
        if (!strcmp(s->ent[i].name, s->ent[i - 1].name))
            return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s' lists tensor '%s' twice", s->source, s->ent[i].name);
    return HP_STATUS_OK;
}

/* Names the first box of the slice that no piece covers (pieces: the intersections used). */
static hp_status hole_error(const saved *s, const char *name, int nd, const int64_t *start, const int64_t *len,
                            int np, const int64_t (*ps)[HP_MAX_DIMS], const int64_t (*pl)[HP_MAX_DIMS]) {
    /* Cut every dim at the slice's and the pieces' boundaries; find the first uncovered cell. */
    int64_t *cut[HP_MAX_DIMS] = {0};
    int nc[HP_MAX_DIMS] = {0};
    hp_status st = HP_STATUS_OK;
    for (int d = 0; d < nd; d++) {
        cut[d] = malloc((size_t)(2 * np + 2) * sizeof(int64_t));
        if (!cut[d]) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
            goto out;
        }
        int64_t *c = cut[d];
        c[nc[d]++] = start[d];
        c[nc[d]++] = start[d] + len[d];
        for (int p = 0; p < np; p++) c[nc[d]++] = ps[p][d], c[nc[d]++] = ps[p][d] + pl[p][d];
        for (int i = 1; i < nc[d]; i++) /* insertion sort, then unique */
            for (int j = i; j > 0 && c[j - 1] > c[j]; j--) {
                int64_t t = c[j];
                c[j] = c[j - 1];
                c[j - 1] = t;
            }
        int u = 0;
        for (int i = 0; i < nc[d]; i++)
            if (!u || c[i] != c[u - 1]) c[u++] = c[i];
        nc[d] = u;
    }
    int idx[HP_MAX_DIMS] = {0};
    int64_t hs[HP_MAX_DIMS] = {0}, hl[HP_MAX_DIMS] = {0};
    for (;;) {
        for (int d = 0; d < nd; d++) hs[d] = cut[d][idx[d]], hl[d] = cut[d][idx[d] + 1] - hs[d];
        bool covered = false;
        for (int p = 0; p < np && !covered; p++) {
            covered = true;
            for (int d = 0; d < nd; d++)
                if (hs[d] < ps[p][d] || hs[d] >= ps[p][d] + pl[p][d]) covered = false;
        }
        if (!covered) break;
        int d = nd - 1;
        while (d >= 0 && ++idx[d] == nc[d] - 1) idx[d--] = 0;
        if (d < 0) break; /* every cell covered: counting disagreed (cannot happen) */
    }
    char a[128], b[128], c[128], e[128];
    st = hp_error(HP_STATUS_CORRUPT,
                  "checkpoint '%s': no saved block of tensor '%s' covers the box start %s len %s (of the slice start %s "
                  "len %s)", s->source, name, ints_str(nd, hs, a, sizeof a), ints_str(nd, hl, b, sizeof b),
                  ints_str(nd, start, c, sizeof c), ints_str(nd, len, e, sizeof e));
out:
    for (int d = 0; d < nd; d++) free(cut[d]);
    return st;
}

static hp_status load_one(saved *s, const hp_mesh *m, int index, hp_sharded_tensor *t) {
    if (!t->name) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: a tensor to load has no name");
    entry key = {.name = t->name}, *e = bsearch(&key, s->ent, (size_t)s->nent, sizeof *s->ent, entry_cmp);
    if (!e) return hp_error(HP_STATUS_NOT_FOUND, "checkpoint '%s': no tensor '%s'", s->source, t->name);
    char a[128], b[128];
    if (!hp_shape_equal(&e->shape, &t->shape))
        return hp_error(HP_STATUS_SHAPE, "checkpoint '%s': tensor '%s' has shape %s, expected %s", s->source, t->name,
                        hp_shape_str(&e->shape, a, sizeof a), hp_shape_str(&t->shape, b, sizeof b));
    if (e->dtype != t->dtype)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint '%s': tensor '%s' has dtype %s, expected %s", s->source,
                        t->name, hp_dtype_name(e->dtype), hp_dtype_name(t->dtype));
    hp_status st = hp_layout_validate(&t->layout, m, &t->shape);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "checkpoint: loading tensor '%s': ", t->name);
    if (t->layout.partial)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: loading tensor '%s' into a partial layout", t->name);
    int nd = t->shape.ndim;
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
    HP_CHECK(hp_layout_slice_of(&t->layout, m, &t->shape, index, start, len));
    int64_t want = box_numel(nd, len), got = 0;
    if (want == 0) return HP_STATUS_OK;
    if (!t->local) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: tensor '%s' has no local buffer", t->name);
    hp_shape local = hp_shape_make(nd, len);
    int64_t(*ps)[HP_MAX_DIMS] = malloc((size_t)e->nblocks * sizeof *ps + 1);
    int64_t(*pl)[HP_MAX_DIMS] = malloc((size_t)e->nblocks * sizeof *pl + 1);
    int np = 0;
    if (!ps || !pl) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %d blocks", e->nblocks);
        goto out;
    }
    size_t es = hp_dtype_size(t->dtype);
    for (int i = 0; i < e->nblocks; i++) {
        const block *k = &e->blocks[i];
        if (box_numel(nd, k->len) == 0 || !hp_slice_intersect(nd, start, len, k->start, k->len, ps[np], pl[np])) continue;
        for (int q = 0; q < np; q++) {
            int64_t os[HP_MAX_DIMS], ol[HP_MAX_DIMS];
            if (hp_slice_intersect(nd, ps[q], pl[q], ps[np], pl[np], os, ol)) {
                st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': blocks of tensor '%s' overlap at start %s", s->source,
                              t->name, ints_str(nd, os, a, sizeof a));
                goto out;
            }
        }
        hp_safetensors *f;
        HP_CHECK_GOTO(saved_file(s, k->file, &f), st, out);
        const hp_safetensors_entry *x = hp_safetensors_find(f, k->key);
        hp_shape bshape = hp_shape_make(nd, k->len);
        if (!x || x->dtype != e->dtype || !hp_shape_equal(&x->shape, &bshape)) {
            st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' has no %s tensor '%s' of shape %s (block of '%s')",
                          s->dir, hp_safetensors_path(f), hp_dtype_name(e->dtype), k->key,
                          hp_shape_str(&bshape, a, sizeof a), t->name);
            goto out;
        }
        int64_t doff[HP_MAX_DIMS], soff[HP_MAX_DIMS];
        for (int d = 0; d < nd; d++) doff[d] = ps[np][d] - start[d], soff[d] = ps[np][d] - k->start[d];
        hp_copy_box(t->local, &local, doff, x->data, &bshape, soff, pl[np], es);
        got += box_numel(nd, pl[np]);
        np++;
    }
    if (got != want) st = hole_error(s, t->name, nd, start, len, np, (const int64_t(*)[HP_MAX_DIMS])ps,
                                     (const int64_t(*)[HP_MAX_DIMS])pl);
out:
    free(ps);
    free(pl);
    return st;
}

hp_status hp_checkpoint_load_sharded(const char *step_dir, bool optim, const hp_mesh *mesh, int index,
                                     hp_sharded_tensor *tensors, size_t n) {
    if (index < 0 || index >= hp_mesh_size(mesh))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: mesh index %d outside a mesh of %d devices", index,
                        hp_mesh_size(mesh));
    saved s;
    hp_status st = saved_open(&s, step_dir, optim);
    for (size_t i = 0; st == HP_STATUS_OK && i < n; i++) st = load_one(&s, mesh, index, &tensors[i]);
    saved_free(&s);
    return st;
}

hp_status hp__ckpt_load_full(const char *step_dir, bool optim, hp_named_tensor *tensors, size_t n) {
    hp_mesh *m;
    HP_CHECK(hp_mesh_new(1, (int[]){1}, (const char *[]){"single"}, NULL, 0, &m));
    hp_sharded_tensor *t = calloc(n ? n : 1, sizeof *t);
    if (!t) {
        hp_mesh_free(m);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %zu tensors", n);
    }
    hp_status st = HP_STATUS_OK;
    for (size_t i = 0; st == HP_STATUS_OK && i < n; i++) {
        if (tensors[i].shape.ndim < 0 || tensors[i].shape.ndim > HP_MAX_DIMS)
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: tensor '%s' has %d dims", tensors[i].name,
                          tensors[i].shape.ndim);
        t[i] = (hp_sharded_tensor){tensors[i].name, tensors[i].dtype, tensors[i].shape, {0}, tensors[i].data};
        if (st == HP_STATUS_OK) hp_layout_init(&t[i].layout, tensors[i].shape.ndim);
    }
    if (st == HP_STATUS_OK) st = hp_checkpoint_load_sharded(step_dir, optim, m, 0, t, n);
    free(t);
    hp_mesh_free(m);
    return st;
}
