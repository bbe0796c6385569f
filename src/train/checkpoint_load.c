/* Loading checkpoints of either format: the saved blocks, checked (checksums, binding of each file
 * to its step, role, rank and mesh, finite values) and intersected with the slice each loader
 * wants, so a checkpoint loads under any strategy and rank count (see hp/checkpoint.h). */
#include "hp/checkpoint.h"
#include "hp/redistribute.h"
#include "train/checkpoint_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_BYTES HP__CKPT_PATH_BYTES

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

void hp__ckpt_model_summary(const hp_model_config *m, char *buf, size_t n) {
    snprintf(buf, n, "vocab=%lld context=%lld layers=%lld heads=%lld width=%lld tied_head=%s", (long long)m->vocab,
             (long long)m->context, (long long)m->layers, (long long)m->heads, (long long)m->width,
             m->tied_head ? "true" : "false");
    if (strcmp(m->family, "llama") == 0) { /* gpt2 summaries stay as they were (older checkpoints) */
        size_t k = strlen(buf);
        if (k < n)
            snprintf(buf + k, n - k, " family=llama kv_heads=%lld ffn_width=%lld rope_base=%g norm_eps=%g",
                     (long long)m->kv_heads, (long long)m->ffn_width, m->rope_base, m->norm_eps);
    }
}

char *hp__ckpt_model_json(const hp_run_config *cfg) {
    char *all = hp_run_config_to_json(cfg);
    cJSON *root = all ? cJSON_Parse(all) : NULL;
    free(all);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    char *s = cJSON_IsObject(model) ? cJSON_PrintUnformatted(model) : NULL;
    cJSON_Delete(root);
    return s;
}

void hp__ckpt_mesh_str(int naxes, const int64_t *dims, const char *const *names, char *buf, size_t n) {
    char d[256];
    size_t k = (size_t)snprintf(buf, n, "device_matrix %s alias_name [", ints_str(naxes, dims, d, sizeof d));
    for (int a = 0; a < naxes && k < n; a++) k += (size_t)snprintf(buf + k, n - k, "%s%s", a ? ", " : "", names[a]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

void hp__ckpt_block_str(const char *layout, int nd, const int64_t *start, const int64_t *len, char *buf, size_t n) {
    char a[256], b[256];
    snprintf(buf, n, "layout %s start %s len %s", layout, ints_str(nd, start, a, sizeof a), ints_str(nd, len, b, sizeof b));
}

/* ---------------------------------------------------------------- the saved checkpoint */

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const hp__ckpt_entry *)a)->name, ((const hp__ckpt_entry *)b)->name);
}

hp__ckpt_entry *hp__ckpt_saved_find(const hp__ckpt_saved *s, const char *name) {
    hp__ckpt_entry key = {.name = name};
    return s->nent ? bsearch(&key, s->ent, (size_t)s->nent, sizeof *s->ent, entry_cmp) : NULL;
}

void hp__ckpt_saved_free(hp__ckpt_saved *s) {
    for (int i = 0; i < s->nent; i++) free(s->ent[i].blocks);
    free(s->ent);
    for (int i = 0; i < s->nfiles; i++) {
        hp_safetensors_close(s->files[i].f);
        free(s->files[i].done);
    }
    free(s->files);
    cJSON_Delete(s->json);
    memset(s, 0, sizeof *s);
}

static const char *role(const hp__ckpt_saved *s) { return s->optim ? "optim" : "model"; }

/* Whether f carries any metadata a hyperparallel checkpoint writes (then it must be checksummed). */
static bool has_our_meta(const hp_safetensors *f) {
    static const char *keys[] = {HP__CKPT_META_STEP, HP__CKPT_META_ROLE, HP__CKPT_META_RANK, HP__CKPT_META_WORLD,
                                 HP__CKPT_META_MODEL, HP__CKPT_META_MODEL_JSON};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (hp_safetensors_metadata(f, keys[i])) return true;
    return false;
}

/* One binding key of file fl: present and equal to `want`. */
static hp_status bind_key(const hp__ckpt_saved *s, const hp__ckpt_file *fl, const char *key, const char *want,
                          const char *what) {
    const char *got = hp_safetensors_metadata(fl->f, key);
    if (!got)
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' has no \"%s\" in its metadata", s->dir, fl->name,
                        key);
    if (strcmp(got, want))
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' records %s '%s', but %s", s->dir, fl->name, key, got,
                        what);
    return HP_STATUS_OK;
}

/* The file's binding: checksums (an imported single-device file may have none), role, step, rank,
 * world size and, for sharded files, the mesh. */
static hp_status bind_file(const hp__ckpt_saved *s, const hp__ckpt_file *fl) {
    if (!hp_safetensors_checksummed(fl->f)) {
        if (!s->sharded && !has_our_meta(fl->f)) return HP_STATUS_OK; /* imported: no checksums to check */
        return hp_error(HP_STATUS_CORRUPT,
                        "checkpoint '%s': file '%s' records no checksums (saved before hyperparallel checkpoints "
                        "carried them, or its checksum metadata was removed): refusing to load unverified data",
                        s->dir, fl->name);
    }
    char want[64], what[PATH_BYTES + 1024];
    snprintf(what, sizeof what, "%s lists it for the %s tensors", s->source, role(s));
    HP_CHECK(bind_key(s, fl, HP__CKPT_META_ROLE, role(s), what));
    snprintf(want, sizeof want, "%lld", (long long)s->step);
    snprintf(what, sizeof what, "state.json is at step %lld", (long long)s->step);
    HP_CHECK(bind_key(s, fl, HP__CKPT_META_STEP, want, what));
    snprintf(want, sizeof want, "%d", fl->rank);
    snprintf(what, sizeof what, "%s lists it as rank %d's file (files swapped between ranks or renamed?)", s->source,
             fl->rank);
    HP_CHECK(bind_key(s, fl, HP__CKPT_META_RANK, want, what));
    snprintf(want, sizeof want, "%d", s->world);
    snprintf(what, sizeof what, "%s describes %d rank%s", s->source, s->world, s->world == 1 ? "" : "s");
    HP_CHECK(bind_key(s, fl, HP__CKPT_META_WORLD, want, what));
    if (s->sharded) {
        snprintf(what, sizeof what, "%s has the mesh '%s'", s->source, s->mesh);
        HP_CHECK(bind_key(s, fl, HP__CKPT_META_MESH, s->mesh, what));
    }
    return HP_STATUS_OK;
}

hp_status hp__ckpt_saved_file(hp__ckpt_saved *s, const char *name, hp__ckpt_file **out) {
    hp__ckpt_file *fl = NULL;
    for (int i = 0; i < s->nfiles && !fl; i++)
        if (!strcmp(s->files[i].name, name)) fl = &s->files[i];
    if (!fl)
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' is not listed for the %s tensors in %s", s->dir,
                        name, role(s), s->source);
    *out = fl;
    if (fl->f) return HP_STATUS_OK;
    char path[PATH_BYTES];
    HP_CHECK(hp__ckpt_join(path, s->dir, name));
    hp_safetensors *f;
    hp_status st = hp_safetensors_open(path, &f);
    if (st != HP_STATUS_OK)
        return s->sharded ? hp_error_prefix(st, "checkpoint '%s' (listed in %s): ", s->dir, s->source)
                          : hp_error_prefix(st, "checkpoint '%s': ", s->dir);
    fl->done = calloc(hp_safetensors_count(f) + 1, 1);
    if (!fl->done) {
        hp_safetensors_close(f);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory opening '%s'", name);
    }
    fl->f = f;
    return bind_file(s, fl);
}

/* The first non-finite value of an F32 or BF16 buffer (possibly unaligned): its index, or -1. */
static int64_t first_nonfinite(hp_dtype dt, const unsigned char *p, int64_t n, const char **what) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        if (dt == HP_DTYPE_F32) {
            memcpy(&bits, p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            bits = (uint32_t)h << 16;
        }
        if ((bits & 0x7f800000u) == 0x7f800000u) {
            *what = bits & 0x007fffffu ? "nan" : bits >> 31 ? "-inf" : "inf";
            return i;
        }
    }
    return -1;
}

hp_status hp__ckpt_check_entry(hp__ckpt_saved *s, hp__ckpt_file *fl, const hp_safetensors_entry *x, const char *tensor) {
    size_t i = (size_t)(x - hp_safetensors_entry_at(fl->f, 0));
    if (fl->done[i]) return HP_STATUS_OK;
    hp_status st = hp_safetensors_verify(fl->f, x);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "checkpoint '%s': ", s->dir);
    if (x->dtype == HP_DTYPE_F32 || x->dtype == HP_DTYPE_BF16) {
        const char *what = NULL;
        int64_t at = first_nonfinite(x->dtype, x->data, hp_shape_numel(&x->shape), &what);
        if (at >= 0) {
            char sb[128];
            return hp_error(HP_STATUS_CORRUPT,
                            "checkpoint '%s': %s tensor '%s' holds a non-finite value (%s) at element %lld of its "
                            "block %s in file '%s'", s->dir, role(s), tensor, what, (long long)at,
                            hp_shape_str(&x->shape, sb, sizeof sb), fl->name);
        }
    }
    fl->done[i] = 1;
    return HP_STATUS_OK;
}

hp_status hp__ckpt_check_block(const hp__ckpt_saved *s, const hp__ckpt_file *fl, const hp_safetensors_entry *x,
                               const hp__ckpt_entry *e, const hp__ckpt_block *k) {
    if (!s->sharded) return HP_STATUS_OK;
    char key[600], want[1024];
    snprintf(key, sizeof key, "%s%s", HP__CKPT_META_BLOCK, x->name);
    hp__ckpt_block_str(e->layout, e->shape.ndim, k->start, k->len, want, sizeof want);
    const char *got = hp_safetensors_metadata(fl->f, key);
    if (!got || strcmp(got, want))
        return hp_error(HP_STATUS_CORRUPT,
                        "checkpoint '%s': file '%s' holds tensor '%s' as the block '%s', but %s places it at '%s'",
                        s->dir, fl->name, e->name, got ? got : "(no block metadata)", s->source, want);
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- opening */

static bool json_ints(const cJSON *a, int max, int *n, int64_t *v) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > max) return false;
    *n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= 9007199254740992.0 ||
            x->valuedouble != (double)(int64_t)x->valuedouble)
            return false;
        v[(*n)++] = (int64_t)x->valuedouble;
    }
    return true;
}

static hp_status parse_entry(hp__ckpt_saved *s, const cJSON *t, hp__ckpt_entry *e) {
    e->name = t->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(t, "layout");
    const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(t, "blocks");
    if (!cJSON_IsString(dt) || hp_dtype_parse(dt->valuestring, &e->dtype) != HP_STATUS_OK)
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': tensor '%s' has no valid dtype", s->source, e->name);
    e->shape.ndim = 0;
    if (!json_ints(cJSON_GetObjectItemCaseSensitive(t, "shape"), HP_MAX_DIMS, &e->shape.ndim, e->shape.dim) ||
        !cJSON_IsArray(blocks) || !cJSON_IsString(lay))
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': tensor '%s' has no valid shape, layout or blocks", s->source,
                        e->name);
    e->layout = lay->valuestring;
    int nb = cJSON_GetArraySize(blocks);
    e->blocks = calloc(nb ? (size_t)nb : 1, sizeof *e->blocks);
    if (!e->blocks) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %d blocks", nb);
    const cJSON *b;
    cJSON_ArrayForEach(b, blocks) {
        hp__ckpt_block *k = &e->blocks[e->nblocks];
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
        bool listed = false;
        for (int i = 0; i < s->nfiles && !listed; i++) listed = !strcmp(s->files[i].name, k->file);
        if (!listed)
            return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': block %d of tensor '%s' is in file '%s', which is not "
                            "listed for the %s tensors", s->source, e->nblocks, e->name, k->file, role(s));
        e->nblocks++;
    }
    return HP_STATUS_OK;
}

/* The index's mesh: its string (hp__ckpt_mesh_str) and size. */
static hp_status parse_mesh(hp__ckpt_saved *s, const cJSON *mesh) {
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(mesh, "alias_name");
    int64_t dims[HP_MESH_MAX_AXES];
    const char *names[HP_MESH_MAX_AXES];
    int nd = 0;
    bool ok = json_ints(cJSON_GetObjectItemCaseSensitive(mesh, "device_matrix"), HP_MESH_MAX_AXES, &nd, dims) && nd > 0 &&
              cJSON_IsArray(an) && cJSON_GetArraySize(an) == nd;
    int64_t world = 1;
    for (int a = 0; ok && a < nd; a++) {
        const cJSON *x = cJSON_GetArrayItem(an, a);
        ok = dims[a] >= 1 && (world *= dims[a]) <= (1 << 24) && cJSON_IsString(x);
        if (ok) names[a] = x->valuestring;
    }
    if (!ok)
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': \"mesh\" is not {\"device_matrix\": [...], \"alias_name\": "
                        "[...]} of positive sizes", s->source);
    s->world = (int)world;
    hp__ckpt_mesh_str(nd, dims, names, s->mesh, sizeof s->mesh);
    return HP_STATUS_OK;
}

/* The index's "files": every rank's file of this role, once each (opened when a block is needed). */
static hp_status parse_files(hp__ckpt_saved *s, const cJSON *files) {
    if (!cJSON_IsArray(files))
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s' has no \"files\" list (saved before hyperparallel "
                        "checkpoints were verified?)", s->source);
    s->files = calloc((size_t)s->world, sizeof *s->files);
    if (!s->files) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %d files", s->world);
    const cJSON *x;
    cJSON_ArrayForEach(x, files) {
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(x, "file");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(x, "role");
        const cJSON *rank = cJSON_GetObjectItemCaseSensitive(x, "rank");
        if (!cJSON_IsString(file) || !file->valuestring[0] || strchr(file->valuestring, '/') || !cJSON_IsString(r) ||
            !cJSON_IsNumber(rank))
            return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': an entry of \"files\" is not {\"file\", \"role\", "
                            "\"rank\"}", s->source);
        if (strcmp(r->valuestring, role(s))) continue;
        int k = rank->valueint;
        if (rank->valuedouble != (double)k || k < 0 || k >= s->world || s->files[k].name)
            return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' is listed for rank %g, outside the %d ranks "
                            "or twice", s->source, file->valuestring, rank->valuedouble, s->world);
        s->files[k] = (hp__ckpt_file){file->valuestring, k, NULL, NULL};
    }
    s->nfiles = s->world;
    for (int k = 0; k < s->world; k++)
        if (!s->files[k].name)
            return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s' lists no %s file for rank %d", s->source, role(s), k);
    return HP_STATUS_OK;
}

static hp_status open_sharded(hp__ckpt_saved *s, const char *index_path) {
    char *text;
    HP_CHECK(hp__ckpt_read_text(index_path, &text));
    s->json = cJSON_Parse(text);
    free(text);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(s->json, "format_version");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(s->json, "step");
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(s->json, role(s));
    if (!cJSON_IsObject(s->json) || !cJSON_IsNumber(ver) || !cJSON_IsObject(sec))
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s' is not a JSON object with a format_version and a \"%s\" object",
                        index_path, role(s));
    if (ver->valueint > HP_CHECKPOINT_FORMAT_VERSION || ver->valueint < 2)
        return hp_error(HP_STATUS_UNSUPPORTED, "checkpoint '%s' has format_version %d; this build reads 2 to %d",
                        index_path, ver->valueint, HP_CHECKPOINT_FORMAT_VERSION);
    if (!cJSON_IsNumber(step) || step->valuedouble != (double)s->step)
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': its step (%s) is not state.json's step %lld", index_path,
                        cJSON_IsNumber(step) ? "a different number" : "missing", (long long)s->step);
    HP_CHECK(parse_mesh(s, cJSON_GetObjectItemCaseSensitive(s->json, "mesh")));
    HP_CHECK(parse_files(s, cJSON_GetObjectItemCaseSensitive(s->json, "files")));
    int n = cJSON_GetArraySize(sec);
    s->ent = calloc(n ? (size_t)n : 1, sizeof *s->ent);
    if (!s->ent) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %d tensors", n);
    const cJSON *t;
    cJSON_ArrayForEach(t, sec) HP_CHECK(parse_entry(s, t, &s->ent[s->nent++]));
    return HP_STATUS_OK;
}

/* A single-device file: one block per tensor, the whole tensor. */
static hp_status open_single(hp__ckpt_saved *s, const char *file) {
    s->world = 1;
    s->files = calloc(1, sizeof *s->files);
    if (!s->files) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    s->files[0] = (hp__ckpt_file){file, 0, NULL, NULL};
    s->nfiles = 1;
    hp__ckpt_file *fl;
    HP_CHECK(hp__ckpt_saved_file(s, file, &fl));
    size_t n = hp_safetensors_count(fl->f);
    s->ent = calloc(n ? n : 1, sizeof *s->ent);
    if (!s->ent) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %zu tensors", n);
    for (size_t i = 0; i < n; i++) {
        const hp_safetensors_entry *x = hp_safetensors_entry_at(fl->f, i);
        hp__ckpt_entry *e = &s->ent[s->nent++];
        *e = (hp__ckpt_entry){x->name, x->dtype, x->shape, "", 1, calloc(1, sizeof(hp__ckpt_block))};
        if (!e->blocks) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
        e->blocks[0].file = file;
        e->blocks[0].key = x->name;
        memcpy(e->blocks[0].len, x->shape.dim, sizeof x->shape.dim);
    }
    return HP_STATUS_OK;
}

hp_status hp__ckpt_saved_open(hp__ckpt_saved *s, const char *step_dir, bool optim) {
    memset(s, 0, sizeof *s);
    s->dir = step_dir;
    s->optim = optim;
    hp_checkpoint_state st;
    HP_CHECK(hp_checkpoint_read_state(step_dir, &st));
    s->step = st.step;
    hp_checkpoint_state_free(&st);
    char index[PATH_BYTES];
    HP_CHECK(hp__ckpt_join(index, step_dir, HP__CKPT_INDEX_FILE));
    if (hp__ckpt_is_file(index)) {
        s->sharded = true;
        snprintf(s->source, sizeof s->source, "%s", index);
        HP_CHECK(open_sharded(s, index));
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

/* ---------------------------------------------------------------- loading a slice */

/* Names the first box of the slice that no piece covers (pieces: the intersections used). */
static hp_status hole_error(const hp__ckpt_saved *s, const char *name, int nd, const int64_t *start, const int64_t *len,
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

static hp_status load_one(hp__ckpt_saved *s, const hp_mesh *m, int index, hp_sharded_tensor *t) {
    if (!t->name) return hp_error(HP_STATUS_INVALID_ARGUMENT, "checkpoint: a tensor to load has no name");
    hp__ckpt_entry *e = hp__ckpt_saved_find(s, t->name);
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
        const hp__ckpt_block *k = &e->blocks[i];
        if (box_numel(nd, k->len) == 0 || !hp_slice_intersect(nd, start, len, k->start, k->len, ps[np], pl[np])) continue;
        for (int q = 0; q < np; q++) {
            int64_t os[HP_MAX_DIMS], ol[HP_MAX_DIMS];
            if (hp_slice_intersect(nd, ps[q], pl[q], ps[np], pl[np], os, ol)) {
                st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': blocks of tensor '%s' overlap at start %s", s->source,
                              t->name, ints_str(nd, os, a, sizeof a));
                goto out;
            }
        }
        hp__ckpt_file *fl;
        HP_CHECK_GOTO(hp__ckpt_saved_file(s, k->file, &fl), st, out);
        const hp_safetensors_entry *x = hp_safetensors_find(fl->f, k->key);
        hp_shape bshape = hp_shape_make(nd, k->len);
        if (!x || x->dtype != e->dtype || !hp_shape_equal(&x->shape, &bshape)) {
            st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' has no %s tensor '%s' of shape %s (block of '%s')",
                          s->dir, hp_safetensors_path(fl->f), hp_dtype_name(e->dtype), k->key,
                          hp_shape_str(&bshape, a, sizeof a), t->name);
            goto out;
        }
        HP_CHECK_GOTO(hp__ckpt_check_block(s, fl, x, e, k), st, out);
        HP_CHECK_GOTO(hp__ckpt_check_entry(s, fl, x, t->name), st, out);
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
    hp__ckpt_saved s;
    hp_status st = hp__ckpt_saved_open(&s, step_dir, optim);
    for (size_t i = 0; st == HP_STATUS_OK && i < n; i++) st = load_one(&s, mesh, index, &tensors[i]);
    hp__ckpt_saved_free(&s);
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

hp_status hp_checkpoint_has_optim(const char *step_dir, bool *has) {
    *has = false;
    hp__ckpt_saved s;
    hp_status st = hp__ckpt_saved_open(&s, step_dir, true);
    if (st == HP_STATUS_OK) *has = s.nent > 0;
    hp__ckpt_saved_free(&s);
    return st;
}
