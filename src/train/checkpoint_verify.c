/* Checking a checkpoint without loading it into a model: every file's checksums, binding and
 * values, the blocks tiling every tensor, the saved config against the tensors (see hp/checkpoint.h). */
#include "hp/checkpoint.h"
#include "hp/redistribute.h"
#include "train/checkpoint_internal.h"
#include "train/trainer_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_BYTES HP__CKPT_PATH_BYTES

static int64_t box_numel(int nd, const int64_t *len) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= len[d];
    return n;
}

/* ---------------------------------------------------------------- the config against the tensors */

bool hp__ckpt_model_diff(const char *a, const char *b, char *key, char *va, char *vb, size_t n) {
    for (;;) {
        size_t la = strcspn(a, " "), lb = strcspn(b, " ");
        if (!la && !lb) return false;
        if (la != lb || strncmp(a, b, la)) {
            const char *ea = memchr(a, '=', la), *eb = memchr(b, '=', lb);
            snprintf(key, n, "%.*s", (int)(ea ? ea - a : (ptrdiff_t)la), a);
            snprintf(va, n, "%.*s", (int)(ea ? (ptrdiff_t)la - (ea - a) - 1 : 0), ea ? ea + 1 : a);
            snprintf(vb, n, "%.*s", (int)(eb ? (ptrdiff_t)lb - (eb - b) - 1 : 0), eb ? eb + 1 : b);
            return true;
        }
        a += la + (a[la] == ' ');
        b += lb + (b[lb] == ' ');
    }
}

/* The model metadata of rank 0's model file against the config's model section: the summary and,
 * when the file carries it, every key of the model section as JSON ("hp.model"). */
static hp_status check_model_meta(hp__ckpt_saved *s, const char *summary, const hp_run_config *cfg) {
    hp__ckpt_file *fl;
    HP_CHECK(hp__ckpt_saved_file(s, s->files[0].name, &fl));
    const char *saved = hp_safetensors_metadata(fl->f, HP__CKPT_META_MODEL);
    char key[128], vs[128], vm[128];
    if (saved && hp__ckpt_model_diff(summary, saved, key, vs, vm, sizeof key))
        return hp_error(HP_STATUS_CORRUPT,
                        "checkpoint '%s': state.json's config has model.%s %s, but the tensors were saved with model.%s "
                        "%s (file '%s': %s)", s->dir, key, vs, key, vm, fl->name, saved);
    const char *js = hp_safetensors_metadata(fl->f, HP__CKPT_META_MODEL_JSON);
    if (!js) return HP_STATUS_OK;
    cJSON *meta = cJSON_Parse(js);
    char *mine_s = hp__ckpt_model_json(cfg);
    cJSON *mine = mine_s ? cJSON_Parse(mine_s) : NULL;
    free(mine_s);
    hp_status st = HP_STATUS_OK;
    if (!cJSON_IsObject(meta))
        st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s': metadata '%s' is not a JSON object", s->dir,
                      fl->name, HP__CKPT_META_MODEL_JSON);
    else if (!mine)
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    /* every key the file records must hold state.json's value (a key this build does not write,
     * from a newer build, is not compared) */
    for (const cJSON *it = meta && st == HP_STATUS_OK ? meta->child : NULL; it && st == HP_STATUS_OK; it = it->next) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(mine, it->string);
        if (v && !cJSON_Compare(v, it, true)) {
            char *a = cJSON_PrintUnformatted(v), *b = cJSON_PrintUnformatted(it);
            st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': state.json's config has model.%s %s, but the tensors "
                          "were saved with model.%s %s (file '%s', metadata '%s')", s->dir, it->string, a ? a : "?",
                          it->string, b ? b : "?", fl->name, HP__CKPT_META_MODEL_JSON);
            free(a);
            free(b);
        }
    }
    cJSON_Delete(meta);
    cJSON_Delete(mine);
    return st;
}

/* Every expected tensor (name, shape) is in the saved part with that shape, and nothing else is. */
static hp_status check_names(const hp__ckpt_saved *s, const hp_graph *g, const hp_tid *ids, int n, const char *summary) {
    const char *prefixes[2] = {s->optim ? "exp_avg." : "", s->optim ? "exp_avg_sq." : NULL};
    int found = 0;
    char a[128], b[128], name[600];
    for (int k = 0; k < 2 && prefixes[k]; k++)
        for (int i = 0; i < n; i++) {
            const hp_tensor *x = hp_graph_tensor(g, ids[i]);
            snprintf(name, sizeof name, "%s%s", prefixes[k], x->name);
            const hp__ckpt_entry *e = hp__ckpt_saved_find(s, name);
            if (!e)
                return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': state.json's model (%s) has the tensor '%s', which "
                                "the checkpoint's %s tensors (%s) lack", s->dir, summary, name,
                                s->optim ? "optimizer" : "model", s->source);
            if (!hp_shape_equal(&e->shape, &x->shape) || e->dtype != x->dtype)
                return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': state.json's model (%s) makes tensor '%s' %s %s, but "
                                "the checkpoint holds %s %s (%s)", s->dir, summary, name, hp_dtype_name(x->dtype),
                                hp_shape_str(&x->shape, a, sizeof a), hp_dtype_name(e->dtype),
                                hp_shape_str(&e->shape, b, sizeof b), s->source);
            found++;
        }
    if (found == s->nent) return HP_STATUS_OK;
    for (int j = 0; j < s->nent; j++) {
        bool known = false;
        for (int k = 0; k < 2 && prefixes[k] && !known; k++) {
            size_t pl = strlen(prefixes[k]);
            if (strncmp(s->ent[j].name, prefixes[k], pl)) continue;
            for (int i = 0; i < n && !known; i++) known = !strcmp(s->ent[j].name + pl, hp_graph_tensor(g, ids[i])->name);
        }
        if (!known)
            return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': it holds the %s tensor '%s', which state.json's model "
                            "(%s) does not have", s->dir, s->optim ? "optimizer" : "model", s->ent[j].name, summary);
    }
    return HP_STATUS_OK;
}

hp_status hp_checkpoint_check_config(const char *step_dir, const hp_checkpoint_state *st) {
    if (!st->has_config)
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': its state.json has no config, so its tensors cannot be "
                        "checked against a model", step_dir);
    char summary[512];
    hp__ckpt_model_summary(&st->config.model, summary, sizeof summary);
    hp_gpt_config gc = hp__gpt_config_from(&st->config.model);
    hp_status rc = hp_gpt_config_check(&gc);
    if (rc != HP_STATUS_OK) return hp_error_prefix(HP_STATUS_CORRUPT, "checkpoint '%s': state.json's config: ", step_dir);
    hp_graph *g = hp_graph_new();
    if (!g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory building the model");
    hp_gpt gpt;
    hp_tid *ids = NULL;
    HP_CHECK_GOTO(hp_gpt_build(g, &gc, 1, 1, false, &gpt), rc, out);
    int n = hp_graph_params(g, NULL, 0);
    ids = calloc((size_t)n + 1, sizeof *ids);
    if (!ids) {
        rc = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    hp_graph_params(g, ids, n);
    for (int optim = 0; optim < 2 && rc == HP_STATUS_OK; optim++) {
        hp__ckpt_saved s;
        rc = hp__ckpt_saved_open(&s, step_dir, optim);
        if (rc == HP_STATUS_OK && !optim) rc = check_model_meta(&s, summary, &st->config);
        /* an optimizer part without tensors is a model-only checkpoint (hp convert's import): resume
         * starts the moments at zero */
        if (rc == HP_STATUS_OK && !(optim && s.nent == 0)) rc = check_names(&s, g, ids, n, summary);
        hp__ckpt_saved_free(&s);
    }
out:
    free(ids);
    hp_graph_free(g);
    return rc;
}

/* ---------------------------------------------------------------- verify */

static hp_status report_add(hp_checkpoint_report *r, const char *name, const char *role, int rank, int64_t tensors,
                            int64_t bytes, bool checksummed) {
    hp_checkpoint_file_report *f = realloc(r->files, (size_t)(r->n_files + 1) * sizeof *f);
    if (!f) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    r->files = f;
    f = &r->files[r->n_files++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->role, sizeof f->role, "%s", role);
    f->rank = rank;
    f->tensors = tensors;
    f->bytes = bytes;
    f->checksummed = checksummed;
    if (rank >= 0) r->n_tensors += tensors, r->n_bytes += bytes;
    return HP_STATUS_OK;
}

/* The size of <dir>/<name>; a missing file marks the report incomplete (HP_STATUS_IO naming it). */
static hp_status need_file(hp_checkpoint_report *r, const char *dir, const char *name, const char *what, int64_t *bytes) {
    char path[PATH_BYTES];
    HP_CHECK(hp__ckpt_join(path, dir, name));
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        r->incomplete = e == ENOENT;
        return hp_error(HP_STATUS_IO, "checkpoint '%s': %s '%s' is missing or unreadable: %s", dir, what, path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        r->incomplete = true;
        return hp_error(HP_STATUS_IO, "checkpoint '%s': %s '%s' is not a regular file", dir, what, path);
    }
    *bytes = (int64_t)sb.st_size;
    return HP_STATUS_OK;
}

/* A block as the verifier finds it again: by (file, key). */
typedef struct ref {
    const char *file, *key;
    const hp__ckpt_entry *e;
    const hp__ckpt_block *k;
    bool seen;
} ref;

static int ref_cmp(const void *a, const void *b) {
    const ref *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->key, y->key);
}

/* Every tensor's blocks tile it: inside (checked when parsed), disjoint, covering every element. */
static hp_status check_tiling(const hp__ckpt_saved *s, const hp__ckpt_entry *e) {
    int nd = e->shape.ndim;
    int64_t covered = 0;
    for (int i = 0; i < e->nblocks; i++) {
        const hp__ckpt_block *k = &e->blocks[i];
        covered += box_numel(nd, k->len);
        for (int j = 0; j < i && box_numel(nd, k->len); j++) {
            int64_t os[HP_MAX_DIMS], ol[HP_MAX_DIMS];
            if (box_numel(nd, e->blocks[j].len) &&
                hp_slice_intersect(nd, k->start, k->len, e->blocks[j].start, e->blocks[j].len, os, ol))
                return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': blocks %d and %d of tensor '%s' overlap", s->source, j,
                                i, e->name);
        }
    }
    if (covered != hp_shape_numel(&e->shape))
        return hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': the blocks of tensor '%s' cover %lld of its %lld elements",
                        s->source, e->name, (long long)covered, (long long)hp_shape_numel(&e->shape));
    return HP_STATUS_OK;
}

/* One part (model or optim): every listed file opened, bound and fully checked. */
static hp_status verify_part(hp_checkpoint_report *r, const char *dir, bool optim) {
    hp__ckpt_saved s;
    ref *refs = NULL;
    hp_status st = HP_STATUS_OK;
    const char *role = optim ? "optim" : "model";
    if (r->format_version == 1) {
        int64_t bytes;
        HP_CHECK(need_file(r, dir, optim ? HP_CHECKPOINT_OPTIM_FILE : HP_CHECKPOINT_MODEL_FILE, "the tensor file", &bytes));
    }
    HP_CHECK_GOTO(hp__ckpt_saved_open(&s, dir, optim), st, out);
    r->world_size = s.world;
    int nrefs = 0;
    for (int i = 0; i < s.nent; i++) nrefs += s.ent[i].nblocks;
    refs = calloc((size_t)nrefs + 1, sizeof *refs);
    if (!refs) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory for %d blocks", nrefs);
        goto out;
    }
    nrefs = 0;
    for (int i = 0; i < s.nent; i++) {
        HP_CHECK_GOTO(check_tiling(&s, &s.ent[i]), st, out);
        for (int b = 0; b < s.ent[i].nblocks; b++)
            refs[nrefs++] = (ref){s.ent[i].blocks[b].file, s.ent[i].blocks[b].key, &s.ent[i], &s.ent[i].blocks[b], false};
    }
    qsort(refs, (size_t)nrefs, sizeof *refs, ref_cmp);
    for (int i = 0; i < s.nfiles; i++) {
        hp__ckpt_file *fl;
        int64_t bytes = 0;
        char what[64];
        snprintf(what, sizeof what, "rank %d's %s file", s.files[i].rank, role);
        HP_CHECK_GOTO(need_file(r, dir, s.files[i].name, what, &bytes), st, out);
        HP_CHECK_GOTO(hp__ckpt_saved_file(&s, s.files[i].name, &fl), st, out);
        size_t n = hp_safetensors_count(fl->f);
        for (size_t j = 0; j < n; j++) {
            const hp_safetensors_entry *x = hp_safetensors_entry_at(fl->f, j);
            ref key = {.file = fl->name, .key = x->name}, *k = bsearch(&key, refs, (size_t)nrefs, sizeof *refs, ref_cmp);
            if (!k) {
                st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' holds tensor '%s', which %s does not list",
                              dir, fl->name, x->name, s.source);
                goto out;
            }
            hp_shape bshape = hp_shape_make(k->e->shape.ndim, k->k->len);
            if (x->dtype != k->e->dtype || !hp_shape_equal(&x->shape, &bshape)) {
                char a[128], b[128];
                st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' holds tensor '%s' as %s %s, but %s lists a "
                              "%s %s block", dir, fl->name, x->name, hp_dtype_name(x->dtype),
                              hp_shape_str(&x->shape, a, sizeof a), s.source, hp_dtype_name(k->e->dtype),
                              hp_shape_str(&bshape, b, sizeof b));
                goto out;
            }
            HP_CHECK_GOTO(hp__ckpt_check_block(&s, fl, x, k->e, k->k), st, out);
            HP_CHECK_GOTO(hp__ckpt_check_entry(&s, fl, x, k->e->name), st, out);
            k->seen = true;
        }
        HP_CHECK_GOTO(report_add(r, fl->name, role, fl->rank, (int64_t)n, bytes, hp_safetensors_checksummed(fl->f)), st,
                      out);
    }
    for (int i = 0; i < nrefs; i++)
        if (!refs[i].seen) {
            st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': file '%s' lacks tensor '%s' (a block of '%s' that %s lists)",
                          dir, refs[i].file, refs[i].key, refs[i].e->name, s.source);
            goto out;
        }
out:
    free(refs);
    hp__ckpt_saved_free(&s);
    return st;
}

hp_status hp_checkpoint_verify(const char *step_dir, hp_checkpoint_report *r) {
    memset(r, 0, sizeof *r);
    r->step = -1;
    int64_t bytes;
    HP_CHECK(need_file(r, step_dir, HP_CHECKPOINT_STATE_FILE, "the state file", &bytes));
    hp_checkpoint_state s;
    HP_CHECK(hp_checkpoint_read_state(step_dir, &s));
    r->format_version = s.format_version;
    r->step = s.step;
    r->has_config = s.has_config;
    if (s.has_config) hp__ckpt_model_summary(&s.config.model, r->model, sizeof r->model);
    hp_status st = HP_STATUS_OK;
    if (!s.has_config) {
        st = hp_error(HP_STATUS_CORRUPT, "checkpoint '%s': its state.json has no config, so its tensors cannot be checked "
                      "against a model", step_dir);
        goto out;
    }
    HP_CHECK_GOTO(report_add(r, HP_CHECKPOINT_STATE_FILE, "state", -1, 0, bytes, false), st, out);
    if (s.format_version >= 2) {
        HP_CHECK_GOTO(need_file(r, step_dir, HP__CKPT_INDEX_FILE, "the index", &bytes), st, out);
        HP_CHECK_GOTO(report_add(r, HP__CKPT_INDEX_FILE, "index", -1, 0, bytes, false), st, out);
    }
    HP_CHECK_GOTO(verify_part(r, step_dir, false), st, out);
    HP_CHECK_GOTO(verify_part(r, step_dir, true), st, out);
    st = hp_checkpoint_check_config(step_dir, &s);
out:
    hp_checkpoint_state_free(&s);
    return st;
}

void hp_checkpoint_report_free(hp_checkpoint_report *r) {
    free(r->files);
    r->files = NULL;
    r->n_files = 0;
}

/* ---------------------------------------------------------------- list */

static int listing_cmp(const void *a, const void *b) {
    const hp_checkpoint_listing *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

static hp_status listing_add(hp_checkpoint_listing **l, int *n, const char *name, int64_t step,
                             hp_checkpoint_health health, const char *fault) {
    hp_checkpoint_listing *v = realloc(*l, (size_t)(*n + 1) * sizeof *v);
    if (!v) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory listing");
    *l = v;
    v = &v[(*n)++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->step = step;
    v->health = health;
    if (fault && !(v->fault = strdup(fault))) return hp_error(HP_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory listing");
    return HP_STATUS_OK;
}

/* The step of "step_<N>" (after `prefix`), or -1. */
static int64_t step_of(const char *name, const char *prefix) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) || name[pl] < '0' || name[pl] > '9') return -1;
    char *end;
    errno = 0;
    long long v = strtoll(name + pl, &end, 10);
    return errno || v < 0 ? -1 : (int64_t)v;
}

hp_status hp_checkpoint_list(const char *run_dir, hp_checkpoint_listing **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) return hp__ckpt_io_error("list", run_dir, errno);
    char latest[256] = "", path[PATH_BYTES];
    HP_CHECK(hp__ckpt_join(path, run_dir, "latest"));
    FILE *lf = fopen(path, "r");
    if (lf) {
        if (!fgets(latest, sizeof latest, lf)) latest[0] = 0;
        fclose(lf);
        latest[strcspn(latest, "\r\n")] = 0;
    }
    hp_status st = HP_STATUS_OK;
    struct dirent *ent;
    while (st == HP_STATUS_OK && (ent = readdir(d))) {
        const char *name = ent->d_name;
        int64_t step = step_of(name, "step_");
        HP_CHECK_GOTO(hp__ckpt_join(path, run_dir, name), st, done);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (step >= 0 && !strchr(name, '-')) {
            hp_checkpoint_report r;
            hp_status v = hp_checkpoint_verify(path, &r);
            hp_checkpoint_health h = v == HP_STATUS_OK ? HP_CHECKPOINT_HEALTH_OK
                                     : r.incomplete    ? HP_CHECKPOINT_HEALTH_INCOMPLETE
                                                       : HP_CHECKPOINT_HEALTH_CORRUPT;
            hp_checkpoint_report_free(&r);
            st = listing_add(out, n, name, step, h, v == HP_STATUS_OK ? NULL : hp_error_message());
        } else if ((step = step_of(name, ".tmp-step_")) >= 0 || (step = step_of(name, ".old-step_")) >= 0) {
            st = listing_add(out, n, name, step, HP_CHECKPOINT_HEALTH_INCOMPLETE,
                             name[1] == 't' ? "an unfinished save (its writer stopped before renaming it into place)"
                                            : "a step directory moved aside by a replace that did not finish");
        }
    }
done:
    closedir(d);
    bool found = false;
    for (int i = 0; st == HP_STATUS_OK && i < *n; i++)
        if (latest[0] && !strcmp((*out)[i].name, latest)) (*out)[i].latest = found = true;
    if (st == HP_STATUS_OK && latest[0] && !found) {
        st = listing_add(out, n, latest, step_of(latest, "step_"), HP_CHECKPOINT_HEALTH_INCOMPLETE,
                         "named by 'latest' but missing");
        if (st == HP_STATUS_OK) (*out)[*n - 1].latest = true;
    }
    if (st != HP_STATUS_OK) {
        hp_checkpoint_listing_free(*out, *n);
        *out = NULL;
        *n = 0;
        return st;
    }
    qsort(*out, (size_t)*n, sizeof **out, listing_cmp);
    return HP_STATUS_OK;
}

void hp_checkpoint_listing_free(hp_checkpoint_listing *l, int n) {
    for (int i = 0; l && i < n; i++) free(l[i].fault);
    free(l);
}
