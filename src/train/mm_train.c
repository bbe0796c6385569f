/*
 * The multimodal runner (hp/multimodal.h): data, the one-device training step, greedy-decoding
 * evaluation; the groups path is in mm_groups.c.
 */
#include "train/mm_internal.h"

#include "hp/ops.h"
#include "hp/safetensors.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM(what) hp_error(HP_STATUS_OUT_OF_MEMORY, "multimodal: out of memory for %s", what)

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void hp__mm_step_rows(hp_mm_runner *r, int64_t step) {
    uint64_t key = mix((uint64_t)r->cfg->train.seed * 0x100000001b3ull + (uint64_t)step);
    for (int i = 0; i < r->batch; i++) r->idx[i] = (int64_t)(mix(key + (uint64_t)i) % (uint64_t)r->train.n);
}

hp_status hp__mm_patches(hp_mm_runner *r, int e, int row0, int n, float *out) {
    return hp_mm_patchify(&r->train, r->idx + row0, n, r->mc.enc[e].patch, out);
}

hp_status hp__mm_captions(hp_mm_runner *r, int row0, int n, int32_t *tokens, int32_t *targets) {
    for (int i = 0; i < n; i++)
        HP_CHECK(hp_mm_caption(r->train.labels[r->idx[row0 + i]], tokens + (size_t)i * HP_MM_CAPTION,
                               targets + (size_t)i * HP_MM_CAPTION));
    return HP_STATUS_OK;
}

hp_status hp__mm_init_store(hp_mm_runner *r, const hp_graph *g) {
    int np = hp_graph_params(g, NULL, 0);
    hp_tid *ids = malloc(sizeof *ids * (size_t)(np + 1));
    if (!ids) return OOM("the parameter list");
    hp_graph_params(g, ids, np);
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < np && st == HP_STATUS_OK; i++) {
        const hp_tensor *t = hp_graph_tensor(g, ids[i]);
        float *d = hp_store_data(r->store, t->name);
        if (!d) {
            st = hp_error(HP_STATUS_INTERNAL, "multimodal: parameter '%s' is not in the store", t->name);
            break;
        }
        st = hp_mm_init_param(t->name, (uint64_t)r->cfg->train.seed, 0, hp_shape_numel(&t->shape), d);
        if (st == HP_STATUS_OK) st = hp_store_touch(r->store, t->name);
    }
    free(ids);
    return st;
}

static hp_status single_new(hp_mm_runner *r) {
    r->g = hp_graph_new();
    if (!r->g) return OOM("the graph");
    HP_CHECK(hp_mm_build(r->g, &r->mc, r->batch, true, &r->model));
    HP_CHECK(hp_train_step_build(r->g, r->model.dec.loss, &r->cfg->optim, &r->ts));
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    hp_tid keep[2] = {r->ts.loss, r->ts.grad_sq};
    po.keep = keep;
    po.n_keep = 2;
    po.store = r->store;
    HP_CHECK(hp_program_new(r->g, &po, &r->p));
    return hp__mm_init_store(r, r->g);
}

static hp_status single_step(hp_mm_runner *r, hp_mm_step_stats *st) {
    int B = r->batch;
    size_t na = (size_t)B * hp_mm_tokens(&r->mc, 0) * r->mc.enc[0].patch * r->mc.enc[0].patch;
    size_t nb = (size_t)B * hp_mm_tokens(&r->mc, 1) * r->mc.enc[1].patch * r->mc.enc[1].patch;
    float *pa = malloc(sizeof(float) * (na + nb));
    int32_t *tt = malloc(sizeof(int32_t) * 2 * (size_t)B * HP_MM_CAPTION);
    hp_status s = pa && tt ? HP_STATUS_OK : OOM("a batch");
    if (s == HP_STATUS_OK) s = hp__mm_patches(r, 0, 0, B, pa);
    if (s == HP_STATUS_OK) s = hp__mm_patches(r, 1, 0, B, pa + na);
    if (s == HP_STATUS_OK) s = hp__mm_captions(r, 0, B, tt, tt + (size_t)B * HP_MM_CAPTION);
    if (s == HP_STATUS_OK) s = hp_program_set_input(r->p, r->model.enc[0].patches, pa, na * sizeof(float));
    if (s == HP_STATUS_OK) s = hp_program_set_input(r->p, r->model.enc[1].patches, pa + na, nb * sizeof(float));
    size_t tb = sizeof(int32_t) * (size_t)B * HP_MM_CAPTION;
    if (s == HP_STATUS_OK) s = hp_program_set_input(r->p, r->model.dec.tokens, tt, tb);
    if (s == HP_STATUS_OK) s = hp_program_set_input(r->p, r->model.dec.targets, tt + (size_t)B * HP_MM_CAPTION, tb);
    float lr = (float)hp_lr_at(&r->cfg->optim, r->step + 1, r->cfg->train.steps), stp = (float)(r->step + 1);
    if (s == HP_STATUS_OK) s = hp_program_set_input(r->p, r->ts.lr, &lr, sizeof lr);
    if (s == HP_STATUS_OK) s = hp_program_set_input(r->p, r->ts.step, &stp, sizeof stp);
    if (s == HP_STATUS_OK) s = hp_program_run(r->p);
    float gsq = 0;
    if (s == HP_STATUS_OK) s = hp_program_get_output(r->p, r->ts.loss, &st->loss, sizeof st->loss);
    if (s == HP_STATUS_OK) s = hp_program_get_output(r->p, r->ts.grad_sq, &gsq, sizeof gsq);
    st->grad_norm = sqrtf(gsq);
    free(pa), free(tt);
    return s;
}

hp_status hp_mm_runner_new(const hp_run_config *cfg, hp_comm *world, hp_mm_mode mode, hp_mm_runner **out) {
    *out = NULL;
    if (strcmp(cfg->model.family, "multimodal") != 0)
        return hp_error(HP_STATUS_CONFIG, "%s: model.family is '%s', not multimodal", cfg->source, cfg->model.family);
    hp_mm_runner *r = calloc(1, sizeof *r);
    if (!r) return OOM("the runner");
    r->cfg = cfg;
    r->mc = hp_mm_config_from_run(cfg);
    r->world = world;
    r->mode = mode;
    r->role = -1;
    r->batch = (int)cfg->train.batch;
    r->m = cfg->groups.present ? (int)cfg->pipeline.micro_batches : 1;
    r->rows = r->batch / r->m;
    for (int k = 0; k < HP_MM_ROLES; k++) r->t_f[k] = r->t_b[k] = 1.0; /* until measured */
    hp_status st = hp_mm_config_check(&r->mc);
    const hp_multimodal_config *mm = &cfg->model.multimodal;
    if (st == HP_STATUS_OK) st = hp_mm_data_load(mm->data_dir, "train", mm->train_images, &r->train);
    if (st == HP_STATUS_OK) st = hp_mm_data_load(mm->data_dir, "t10k", mm->test_images, &r->test);
    if (st == HP_STATUS_OK && (r->train.rows != r->mc.image_rows || r->train.cols != r->mc.image_cols))
        st = hp_error(HP_STATUS_CORRUPT, "%s: images are %dx%d, the model takes %dx%d", mm->data_dir, r->train.rows,
                      r->train.cols, r->mc.image_rows, r->mc.image_cols);
    if (st == HP_STATUS_OK) {
        r->idx = malloc(sizeof *r->idx * (size_t)r->batch);
        if (!r->idx) st = OOM("the batch rows");
    }
    if (st == HP_STATUS_OK) st = hp_store_new(NULL, NULL, &r->store);
    if (st == HP_STATUS_OK) st = cfg->groups.present ? hp__mm_groups_new(r) : single_new(r);
    /* a group whose own build failed must not leave the others waiting for its sends */
    if (cfg->groups.present && world) st = hp_comm_agree(world, st, "multimodal: building the groups");
    if (st != HP_STATUS_OK) {
        hp_mm_runner_free(r);
        return st;
    }
    *out = r;
    return HP_STATUS_OK;
}

void hp_mm_runner_free(hp_mm_runner *r) {
    if (!r) return;
    hp__mm_groups_free(r);
    hp_program_free(r->p);
    hp_graph_free(r->g);
    hp_store_free(r->store);
    hp_mm_data_free(&r->train);
    hp_mm_data_free(&r->test);
    free(r->idx);
    free(r);
}

int hp_mm_runner_role(const hp_mm_runner *r) { return r->role; }

hp_status hp_mm_runner_step(hp_mm_runner *r, hp_mm_step_stats *st) {
    memset(st, 0, sizeof *st);
    hp__mm_step_rows(r, r->step);
    if (r->trace) hp_trace_set_step(r->trace, r->step + 1);
    double t0 = hp_now_seconds();
    hp_status s = r->role >= 0 ? hp__mm_groups_step(r, st) : single_step(r, st);
    st->seconds = hp_now_seconds() - t0;
    if (s == HP_STATUS_OK) r->step++;
    return s;
}

/* Greedy decoding of test images [i0, i0 + n) with program p over the whole model; counts hits. */
static hp_status decode_chunk(hp_mm_runner *r, hp_program *p, const hp_mm_model *md, int64_t i0, int n, int bs,
                              int64_t *hit_class, int64_t *hit_caption) {
    const hp_mm_config *c = &r->mc;
    size_t na = (size_t)bs * hp_mm_tokens(c, 0) * c->enc[0].patch * c->enc[0].patch;
    size_t nb = (size_t)bs * hp_mm_tokens(c, 1) * c->enc[1].patch * c->enc[1].patch;
    size_t nl = (size_t)bs * HP_MM_CAPTION * HP_MM_VOCAB;
    float *buf = malloc(sizeof(float) * (na + nb + nl));
    int32_t *tok = calloc((size_t)bs * HP_MM_CAPTION * 3, sizeof *tok);
    int64_t *ix = malloc(sizeof *ix * (size_t)bs);
    hp_status s = buf && tok && ix ? HP_STATUS_OK : OOM("decoding");
    int32_t *pred = tok + (size_t)bs * HP_MM_CAPTION, *want = pred + (size_t)bs * HP_MM_CAPTION;
    for (int i = 0; ix && i < bs; i++) ix[i] = i0 + (i < n ? i : 0);
    if (s == HP_STATUS_OK) s = hp_mm_patchify(&r->test, ix, bs, c->enc[0].patch, buf);
    if (s == HP_STATUS_OK) s = hp_mm_patchify(&r->test, ix, bs, c->enc[1].patch, buf + na);
    if (s == HP_STATUS_OK) s = hp_program_set_input(p, md->enc[0].patches, buf, na * sizeof(float));
    if (s == HP_STATUS_OK) s = hp_program_set_input(p, md->enc[1].patches, buf + na, nb * sizeof(float));
    for (int i = 0; i < bs && s == HP_STATUS_OK; i++) {
        int32_t scratch[HP_MM_CAPTION];
        s = hp_mm_caption(r->test.labels[ix[i]], scratch, want + (size_t)i * HP_MM_CAPTION);
        for (int t = 0; t < HP_MM_CAPTION; t++) tok[(size_t)i * HP_MM_CAPTION + t] = t ? HP_MM_EOS : HP_MM_BOS;
    }
    for (int t = 0; t < HP_MM_CAPTION && s == HP_STATUS_OK; t++) {
        s = hp_program_set_input(p, md->dec.tokens, tok, sizeof *tok * (size_t)bs * HP_MM_CAPTION);
        if (s == HP_STATUS_OK) s = hp_program_run(p);
        if (s == HP_STATUS_OK) s = hp_program_get_output(p, md->dec.logits, buf + na + nb, nl * sizeof(float));
        for (int i = 0; i < bs && s == HP_STATUS_OK; i++) {
            const float *l = buf + na + nb + ((size_t)i * HP_MM_CAPTION + t) * HP_MM_VOCAB;
            int best = 0;
            for (int v = 1; v < HP_MM_VOCAB; v++)
                if (l[v] > l[best]) best = v;
            pred[(size_t)i * HP_MM_CAPTION + t] = best;
            if (t + 1 < HP_MM_CAPTION) tok[(size_t)i * HP_MM_CAPTION + t + 1] = best;
        }
    }
    for (int i = 0; i < n && s == HP_STATUS_OK; i++) {
        const int32_t *pw = pred + (size_t)i * HP_MM_CAPTION, *ww = want + (size_t)i * HP_MM_CAPTION;
        bool cls = true, all = true;
        for (int t = 0; t < HP_MM_CAPTION; t++) {
            if (pw[t] != ww[t]) all = false;
            if (t >= HP_MM_CLASS_POS && pw[t] != ww[t]) cls = false;
            if (t >= HP_MM_CLASS_POS && ww[t] == HP_MM_EOS) break; /* the class words and the first <eos> */
        }
        *hit_class += cls;
        *hit_caption += all;
    }
    free(buf), free(tok), free(ix);
    return s;
}

hp_status hp_mm_runner_eval(hp_mm_runner *r, int64_t n, double *acc, double *caption_acc) {
    *acc = *caption_acc = -1;
    if (n <= 0 || n > r->test.n) n = r->test.n;
    if (r->role >= 0 && r->role != HP_MM_ROLE_DEC) return hp__mm_groups_gather(r); /* send the encoder */
    if (r->role >= 0 && r->gi > 0) return HP_STATUS_OK; /* the decoder's first rank decodes */
    int bs = n < 100 ? (int)n : 100;
    hp_graph *g = hp_graph_new();
    if (!g) return OOM("the evaluation graph");
    hp_mm_model md;
    hp_program *p = NULL;
    hp_status s = hp_mm_build(g, &r->mc, bs, false, &md);
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = &md.dec.logits;
    po.n_keep = 1;
    po.store = r->store;
    if (s == HP_STATUS_OK) s = hp_program_new(g, &po, &p);
    if (s == HP_STATUS_OK && r->role == HP_MM_ROLE_DEC) s = hp__mm_groups_gather(r); /* the encoders' weights */
    int64_t hc = 0, ha = 0;
    for (int64_t i0 = 0; i0 < n && s == HP_STATUS_OK; i0 += bs)
        s = decode_chunk(r, p, &md, i0, (int)(n - i0 < bs ? n - i0 : bs), bs, &hc, &ha);
    hp_program_free(p);
    hp_graph_free(g);
    if (s == HP_STATUS_OK) *acc = (double)hc / (double)n, *caption_acc = (double)ha / (double)n;
    return s;
}

hp_status hp_mm_runner_params(hp_mm_runner *r, const char *name, float **data, int64_t *numel) {
    hp_store_entry_info e;
    HP_CHECK(hp_store_info(r->store, name, &e));
    *data = hp_store_data(r->store, name);
    *numel = hp_shape_numel(&e.shape);
    if (!*data) return hp_error(HP_STATUS_NOT_FOUND, "multimodal: '%s' has no storage on this rank", name);
    return HP_STATUS_OK;
}

hp_status hp_mm_runner_save(hp_mm_runner *r, const char *path) {
    if (r->role >= 0 && (r->role != HP_MM_ROLE_DEC || r->gi > 0)) return HP_STATUS_OK;
    int n = hp_store_n_entries(r->store), k = 0;
    hp_named_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    if (!ts) return OOM("the checkpoint list");
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < n && st == HP_STATUS_OK; i++) {
        const char *name = hp_store_name(r->store, i);
        if (strncmp(name, "enc_a.", 6) && strncmp(name, "enc_b.", 6) && strncmp(name, "dec.", 4)) continue;
        hp_store_entry_info e;
        st = hp_store_info(r->store, name, &e);
        if (st != HP_STATUS_OK) break;
        ts[k] = (hp_named_tensor){.name = name, .dtype = e.dtype, .shape = e.shape, .data = hp_store_data(r->store, name)};
        if (!ts[k].data) st = hp_error(HP_STATUS_NOT_FOUND, "multimodal: '%s' has no storage", name);
        k++;
    }
    const char *meta[2] = {"format", "hp-multimodal"};
    if (st == HP_STATUS_OK) st = hp_safetensors_write(path, ts, (size_t)k, meta, 1);
    free(ts);
    return st;
}

hp_status hp_mm_runner_set_trace(hp_mm_runner *r, hp_trace *tr) {
    r->trace = tr;
    if (r->p) return hp_program_set_trace(r->p, tr, NULL);
    for (int i = 0; i < r->m; i++) {
        hp_trace_tags tags = {.stage = r->role, .microbatch = i, .phase = HP_TRACE_PHASE_NONE};
        HP_CHECK(hp_program_set_trace(r->slot[i], tr, &tags));
    }
    HP_CHECK(hp_program_set_trace(r->norm_p, tr, NULL));
    return hp_program_set_trace(r->opt_p, tr, NULL);
}
