/* Hugging Face tensors to ours and back: the name and layout tables of hp/hf.h, reading a model
 * directory (single file or sharded), checking every tensor against config.json, and writing one. */
#include "hp/hf.h"
#include "io/hf_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the tables */

typedef enum map_kind {
    MAP_COPY,   /* the same tensor */
    MAP_CONV1D, /* ours (O, I) is part `part` of `parts` column blocks of HF's (I, parts * O), transposed */
    MAP_SPLIT,  /* ours (O) is part `part` of `parts` blocks of HF's (parts * O) */
    MAP_EXPERT, /* HF's (R, K) is expert `part` of ours (parts = E, R, K): Mixtral's one tensor per expert */
} map_kind;

typedef struct hf_map {
    char ours[96], hf[96];
    map_kind kind;
    int part, parts;
    bool base;      /* GPT-2: in the base model (the optional "transformer." prefix) */
    hp_shape shape; /* ours */
} hf_map;

typedef struct map_list {
    hf_map *v;
    size_t n, cap;
} map_list;

static void add(map_list *l, const char *ours, const char *hf, map_kind kind, int part, int parts, bool base, hp_shape s) {
    if (l->n == l->cap) return; /* sized exactly by build_maps */
    hf_map *m = &l->v[l->n++];
    snprintf(m->ours, sizeof m->ours, "%s", ours);
    snprintf(m->hf, sizeof m->hf, "%s", hf);
    m->kind = kind;
    m->part = part;
    m->parts = parts;
    m->base = base;
    m->shape = s;
}

static hp_status check_arch(const hp_hf_arch *a) {
    if (a->experts < 0 || (a->experts > 0 && (a->family != HP_HF_FAMILY_LLAMA || a->top_k < 1 || a->top_k > a->experts ||
                                              a->experts > 65536)))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid %s architecture: %lld experts, top_k %lld (Mixture-of-"
                        "Experts layers are Mixtral's: the Llama family, top_k in [1, experts], at most 65536 experts)",
                        hp_hf_family_name(a->family), (long long)a->experts, (long long)a->top_k);
    if (a->vocab < 1 || a->context < 1 || a->layers < 1 || a->heads < 1 || a->kv_heads < 1 || a->width < 1 ||
        a->ffn_width < 1 || a->width % a->heads || a->heads % a->kv_heads)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid %s architecture: vocab %lld context %lld layers %lld heads "
                        "%lld kv_heads %lld width %lld ffn_width %lld", hp_hf_family_name(a->family), (long long)a->vocab,
                        (long long)a->context, (long long)a->layers, (long long)a->heads, (long long)a->kv_heads,
                        (long long)a->width, (long long)a->ffn_width);
    /* every tensor under 2^48 elements, as the run config bounds them (divided: no overflow) */
    const int64_t lim = (int64_t)1 << 48, rows[4] = {a->vocab, a->context, a->ffn_width, a->width};
    for (int i = 0; i < 4; i++)
        if (rows[i] > lim / a->width)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s architecture too large: a (%lld, %lld) tensor has more than "
                            "2^48 elements", hp_hf_family_name(a->family), (long long)rows[i], (long long)a->width);
    if (a->experts > 0 && a->experts > lim / (a->ffn_width * a->width))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "mixtral architecture too large: a (%lld, %lld, %lld) expert tensor "
                        "has more than 2^48 elements", (long long)a->experts, (long long)a->ffn_width, (long long)a->width);
    return HP_STATUS_OK;
}

static hp_status build_maps(const hp_hf_arch *a, map_list *l) {
    HP_CHECK(check_arch(a));
    const int64_t V = a->vocab, T = a->context, C = a->width, F = a->ffn_width, d = C / a->heads;
    l->cap = a->family == HP_HF_FAMILY_GPT2 ? (size_t)(16 * a->layers + 5)
             : a->experts > 0               ? (size_t)((7 + 3 * a->experts) * a->layers + 3)
                                            : (size_t)(9 * a->layers + 3);
    l->n = 0;
    l->v = calloc(l->cap, sizeof *l->v);
    if (!l->v) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the tensor table");
    char o[96], h[96];
    if (a->family == HP_HF_FAMILY_GPT2) {
        add(l, "wte.weight", "wte.weight", MAP_COPY, 0, 1, true, HP_SHAPE(V, C));
        add(l, "wpe.weight", "wpe.weight", MAP_COPY, 0, 1, true, HP_SHAPE(T, C));
        for (int64_t L = 0; L < a->layers; L++) {
#define G(OURS, HF, KIND, PART, PARTS, SHAPE)                                                                 \
    snprintf(o, sizeof o, "blocks.%lld.%s", (long long)L, OURS);                                                 \
    snprintf(h, sizeof h, "h.%lld.%s", (long long)L, HF);                                                         \
    add(l, o, h, KIND, PART, PARTS, true, SHAPE)
            G("ln1.weight", "ln_1.weight", MAP_COPY, 0, 1, HP_SHAPE(C));
            G("ln1.bias", "ln_1.bias", MAP_COPY, 0, 1, HP_SHAPE(C));
            static const char *const qkv[3] = {"q", "k", "v"};
            for (int p = 0; p < 3; p++) {
                char w[32], b[32];
                snprintf(w, sizeof w, "attn.%s.weight", qkv[p]);
                snprintf(b, sizeof b, "attn.%s.bias", qkv[p]);
                G(w, "attn.c_attn.weight", MAP_CONV1D, p, 3, HP_SHAPE(C, C));
                G(b, "attn.c_attn.bias", MAP_SPLIT, p, 3, HP_SHAPE(C));
            }
            G("attn.proj.weight", "attn.c_proj.weight", MAP_CONV1D, 0, 1, HP_SHAPE(C, C));
            G("attn.proj.bias", "attn.c_proj.bias", MAP_COPY, 0, 1, HP_SHAPE(C));
            G("ln2.weight", "ln_2.weight", MAP_COPY, 0, 1, HP_SHAPE(C));
            G("ln2.bias", "ln_2.bias", MAP_COPY, 0, 1, HP_SHAPE(C));
            G("mlp.fc.weight", "mlp.c_fc.weight", MAP_CONV1D, 0, 1, HP_SHAPE(F, C));
            G("mlp.fc.bias", "mlp.c_fc.bias", MAP_COPY, 0, 1, HP_SHAPE(F));
            G("mlp.proj.weight", "mlp.c_proj.weight", MAP_CONV1D, 0, 1, HP_SHAPE(C, F));
            G("mlp.proj.bias", "mlp.c_proj.bias", MAP_COPY, 0, 1, HP_SHAPE(C));
#undef G
        }
        add(l, "ln_f.weight", "ln_f.weight", MAP_COPY, 0, 1, true, HP_SHAPE(C));
        add(l, "ln_f.bias", "ln_f.bias", MAP_COPY, 0, 1, true, HP_SHAPE(C));
    } else {
        const int64_t H = a->heads, KV = a->kv_heads;
        add(l, "model.embed_tokens.weight", "model.embed_tokens.weight", MAP_COPY, 0, 1, false, HP_SHAPE(V, C));
        for (int64_t L = 0; L < a->layers; L++) {
#define M(NAME, SHAPE)                                                                                        \
    snprintf(o, sizeof o, "model.layers.%lld.%s", (long long)L, NAME);                                           \
    add(l, o, o, MAP_COPY, 0, 1, false, SHAPE)
            M("input_layernorm.weight", HP_SHAPE(C));
            M("self_attn.q_proj.weight", HP_SHAPE(H * d, C));
            M("self_attn.k_proj.weight", HP_SHAPE(KV * d, C));
            M("self_attn.v_proj.weight", HP_SHAPE(KV * d, C));
            M("self_attn.o_proj.weight", HP_SHAPE(C, H * d));
            M("post_attention_layernorm.weight", HP_SHAPE(C));
            if (a->experts > 0) { /* Mixtral: the router, then each expert's w1 (gate), w3 (up), w2 (down) */
                const int64_t E = a->experts;
                snprintf(o, sizeof o, "model.layers.%lld.mlp.router.weight", (long long)L);
                snprintf(h, sizeof h, "model.layers.%lld.block_sparse_moe.gate.weight", (long long)L);
                add(l, o, h, MAP_COPY, 0, 1, false, HP_SHAPE(E, C));
                static const char *const ours[3] = {"gate_proj", "up_proj", "down_proj"}, *const hf[3] = {"w1", "w3", "w2"};
                for (int64_t e = 0; e < E; e++)
                    for (int w = 0; w < 3; w++) {
                        snprintf(o, sizeof o, "model.layers.%lld.mlp.experts.%s.weight", (long long)L, ours[w]);
                        snprintf(h, sizeof h, "model.layers.%lld.block_sparse_moe.experts.%lld.%s.weight", (long long)L,
                                 (long long)e, hf[w]);
                        add(l, o, h, MAP_EXPERT, (int)e, (int)E, false, w < 2 ? HP_SHAPE(E, F, C) : HP_SHAPE(E, C, F));
                    }
            } else {
                M("mlp.gate_proj.weight", HP_SHAPE(F, C));
                M("mlp.up_proj.weight", HP_SHAPE(F, C));
                M("mlp.down_proj.weight", HP_SHAPE(C, F));
            }
#undef M
        }
        add(l, "model.norm.weight", "model.norm.weight", MAP_COPY, 0, 1, false, HP_SHAPE(C));
    }
    if (!a->tied_head) add(l, "lm_head.weight", "lm_head.weight", MAP_COPY, 0, 1, false, HP_SHAPE(V, C));
    return HP_STATUS_OK;
}

static hp_shape hf_shape(const hf_map *m) {
    if (m->kind == MAP_EXPERT) return HP_SHAPE(m->shape.dim[1], m->shape.dim[2]);
    if (m->kind == MAP_CONV1D) return HP_SHAPE(m->shape.dim[1], m->parts * m->shape.dim[0]);
    if (m->kind == MAP_SPLIT) return HP_SHAPE(m->parts * m->shape.dim[0]);
    return m->shape;
}

/* The elements of ours that the map covers: ours[offset, offset + numel) (all of ours but for an
 * expert's slice). */
static int64_t ours_numel(const hf_map *m) {
    if (m->kind == MAP_EXPERT) return m->shape.dim[1] * m->shape.dim[2];
    return hp_shape_numel(&m->shape);
}
static int64_t ours_offset(const hf_map *m) { return m->kind == MAP_EXPERT ? m->part * ours_numel(m) : 0; }

/* The flat index in HF's tensor of element offset + i of ours (i in [0, ours_numel)). */
static int64_t hf_index(const hf_map *m, int64_t i) {
    if (m->kind == MAP_CONV1D) {
        int64_t O = m->shape.dim[0], I = m->shape.dim[1], o = i / I, c = i % I;
        return c * (m->parts * O) + m->part * O + o;
    }
    if (m->kind == MAP_SPLIT) return m->part * m->shape.dim[0] + i;
    return i;
}

static void arch_str(const hp_hf_arch *a, char *buf, size_t n) {
    if (a->family == HP_HF_FAMILY_GPT2)
        snprintf(buf, n, "gpt2: vocab_size %lld, n_positions %lld, n_layer %lld, n_head %lld, n_embd %lld, "
                 "tie_word_embeddings %s", (long long)a->vocab, (long long)a->context, (long long)a->layers,
                 (long long)a->heads, (long long)a->width, a->tied_head ? "true" : "false");
    else
        snprintf(buf, n, "%s: vocab_size %lld, hidden_size %lld, intermediate_size %lld, num_hidden_layers %lld, "
                 "num_attention_heads %lld, num_key_value_heads %lld, tie_word_embeddings %s", a->model_type,
                 (long long)a->vocab, (long long)a->width, (long long)a->ffn_width, (long long)a->layers,
                 (long long)a->heads, (long long)a->kv_heads, a->tied_head ? "true" : "false");
    if (a->experts > 0) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, ", num_local_experts %lld", (long long)a->experts);
    }
}

/* ---------------------------------------------------------------- the model */

void hp_hf_model_free(hp_hf_model *m) {
    for (size_t i = 0; i < m->n; i++) {
        free((char *)m->tensors[i].name);
        free(m->tensors[i].data);
    }
    free(m->tensors);
    m->tensors = NULL;
    m->n = 0;
}

hp_named_tensor *hp_hf_model_find(const hp_hf_model *m, const char *name) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

int64_t hp_hf_model_numel(const hp_hf_model *m) {
    int64_t n = 0;
    for (size_t i = 0; i < m->n; i++) n += hp_shape_numel(&m->tensors[i].shape);
    return n;
}

static hp_status alloc_from(const hp_hf_arch *a, const map_list *l, hp_hf_model *out) {
    out->arch = *a;
    out->tensors = calloc(l->n, sizeof *out->tensors);
    if (!out->tensors) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %zu tensors", l->n);
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].kind == MAP_EXPERT && l->v[i].part > 0) continue; /* expert 0's entry allocated the stack */
        hp_named_tensor *t = &out->tensors[out->n];
        size_t bytes = (size_t)hp_shape_numel(&l->v[i].shape) * sizeof(float);
        t->name = strdup(l->v[i].ours);
        t->data = calloc(bytes ? bytes : 1, 1);
        t->dtype = HP_DTYPE_F32;
        t->shape = l->v[i].shape;
        out->n++;
        if (!t->name || !t->data)
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for tensor '%s' (%zu bytes)", l->v[i].ours, bytes);
    }
    return HP_STATUS_OK;
}

hp_status hp_hf_model_alloc(const hp_hf_arch *a, hp_hf_model *out) {
    memset(out, 0, sizeof *out);
    map_list l = {0};
    hp_status st = build_maps(a, &l);
    if (st == HP_STATUS_OK) st = alloc_from(a, &l, out);
    free(l.v);
    return st;
}

/* ---------------------------------------------------------------- reading a directory */

typedef struct src_tensor {
    const char *name;
    const hp_safetensors_entry *e;
    int file;
    bool used;
} src_tensor;

typedef struct hf_source {
    char where[HP_HF_PATH_MAX]; /* model.safetensors or the index, for messages */
    int nfiles;
    hp_safetensors **files;
    src_tensor *t;
    size_t n;
} hf_source;

static void source_free(hf_source *s) {
    for (int i = 0; i < s->nfiles; i++) hp_safetensors_close(s->files[i]);
    free(s->files);
    free(s->t);
    memset(s, 0, sizeof *s);
}

static int src_cmp(const void *a, const void *b) {
    return strcmp(((const src_tensor *)a)->name, ((const src_tensor *)b)->name);
}

static src_tensor *source_find(const hf_source *s, const char *name) {
    src_tensor key = {.name = name};
    return s->n ? bsearch(&key, s->t, s->n, sizeof *s->t, src_cmp) : NULL;
}

/* Opens one safetensors file, with a hint when its dtype is one we do not read. */
static hp_status open_file(hf_source *s, const char *path, int *index) {
    hp_safetensors **v = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof *v);
    if (!v) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory opening '%s'", path);
    s->files = v;
    hp_status st = hp_safetensors_open(path, &v[s->nfiles]);
    if (st != HP_STATUS_OK) {
        if (strstr(hp_error_message(), "unknown dtype"))
            return hp_error_prefix(st, "hp convert reads F32 and BF16 weights (save the model in float32 or bfloat16 "
                                   "first): ");
        return st;
    }
    *index = s->nfiles++;
    return HP_STATUS_OK;
}

static hp_status add_tensor(hf_source *s, const char *name, const hp_safetensors_entry *e, int file) {
    src_tensor *v = realloc(s->t, (s->n + 1) * sizeof *v);
    if (!v) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory listing tensors");
    s->t = v;
    v[s->n++] = (src_tensor){name, e, file, false};
    return HP_STATUS_OK;
}

/* model.safetensors.index.json: {"weight_map": {"tensor": "shard file", ...}, ...}. */
static hp_status open_sharded(hf_source *s, const char *dir, const char *index) {
    char *text = NULL, path[HP_HF_PATH_MAX];
    HP_CHECK(hp_hf_read_text(index, &text));
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    hp_status st = HP_STATUS_OK;
    if (!cJSON_IsObject(wm)) st = hp_error(HP_STATUS_CORRUPT, "'%s': no \"weight_map\" object (malformed index)", index);
    /* shard file name -> opened file index, in order of first mention */
    const char **names = NULL;
    int nnames = 0;
    for (const cJSON *it = wm ? wm->child : NULL; st == HP_STATUS_OK && it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strchr(it->valuestring, '/') || !strcmp(it->valuestring, "..")) {
            st = hp_error(HP_STATUS_CORRUPT, "'%s': weight_map entry '%s' must name a file in the same directory", index,
                          it->string);
            break;
        }
        int f = -1;
        for (int k = 0; k < nnames && f < 0; k++)
            if (!strcmp(names[k], it->valuestring)) f = k;
        if (f < 0) {
            const char **nv = realloc(names, (size_t)(nnames + 1) * sizeof *nv);
            if (!nv) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory reading '%s'", index);
                break;
            }
            names = nv;
            names[nnames] = it->valuestring;
            if ((st = hp_hf_join(path, dir, it->valuestring)) != HP_STATUS_OK) break;
            if ((st = open_file(s, path, &f)) != HP_STATUS_OK) break;
            nnames++;
        }
        const hp_safetensors_entry *e = hp_safetensors_find(s->files[f], it->string);
        if (!e) {
            st = hp_error(HP_STATUS_CORRUPT, "'%s' places tensor '%s' in '%s', which lacks it", index, it->string,
                          hp_safetensors_path(s->files[f]));
            break;
        }
        st = add_tensor(s, e->name, e, f); /* the name lives in the opened file */
    }
    free(names);
    cJSON_Delete(root);
    return st;
}

static hp_status source_open(hf_source *s, const char *dir) {
    memset(s, 0, sizeof *s);
    char single[HP_HF_PATH_MAX], index[HP_HF_PATH_MAX];
    HP_CHECK(hp_hf_join(single, dir, "model.safetensors"));
    HP_CHECK(hp_hf_join(index, dir, "model.safetensors.index.json"));
    if (hp_hf_is_file(index)) {
        snprintf(s->where, sizeof s->where, "%s", index);
        HP_CHECK(open_sharded(s, dir, index));
    } else if (hp_hf_is_file(single)) {
        snprintf(s->where, sizeof s->where, "%s", single);
        int f;
        HP_CHECK(open_file(s, single, &f));
        for (size_t i = 0; i < hp_safetensors_count(s->files[f]); i++) {
            const hp_safetensors_entry *e = hp_safetensors_entry_at(s->files[f], i);
            HP_CHECK(add_tensor(s, e->name, e, f));
        }
    } else {
        char bin[HP_HF_PATH_MAX];
        HP_CHECK(hp_hf_join(bin, dir, "pytorch_model.bin"));
        return hp_error(HP_STATUS_IO, "'%s' holds neither model.safetensors nor model.safetensors.index.json%s", dir,
                        hp_hf_is_file(bin) ? " (only pytorch_model.bin, a pickle hp convert does not read: save the "
                                              "model with safe_serialization=True first)" : "");
    }
    if (s->n) qsort(s->t, s->n, sizeof *s->t, src_cmp);
    for (size_t i = 1; i < s->n; i++)
        if (!strcmp(s->t[i - 1].name, s->t[i].name))
            return hp_error(HP_STATUS_CORRUPT, "'%s': tensor '%s' appears twice", s->where, s->t[i].name);
    return HP_STATUS_OK;
}

static const char *file_of(const hf_source *s, const src_tensor *t) { return hp_safetensors_path(s->files[t->file]); }

static float element(const hp_safetensors_entry *e, int64_t j) {
    if (e->dtype == HP_DTYPE_BF16) {
        uint16_t b;
        memcpy(&b, (const char *)e->data + 2 * j, 2);
        return hp_bf16_to_f32(b);
    }
    float f;
    memcpy(&f, (const char *)e->data + 4 * j, 4);
    return f;
}

/* HF's tensor t has the dtype and the shape map m needs. */
static hp_status check_entry(const hf_source *s, const src_tensor *t, const hf_map *m, const hp_hf_arch *a) {
    char want[128], got[128], as[512];
    hp_shape hs = hf_shape(m);
    if (t->e->dtype != HP_DTYPE_F32 && t->e->dtype != HP_DTYPE_BF16)
        return hp_error(HP_STATUS_CORRUPT, "'%s': tensor '%s' has dtype %s; hp convert reads F32 and BF16 weights",
                        file_of(s, t), t->name, hp_dtype_name(t->e->dtype));
    if (!hp_shape_equal(&hs, &t->e->shape)) {
        arch_str(a, as, sizeof as);
        return hp_error(HP_STATUS_SHAPE, "'%s': tensor '%s' is %s, but config.json (%s) makes it %s", file_of(s, t),
                        t->name, hp_shape_str(&t->e->shape, got, sizeof got), as, hp_shape_str(&hs, want, sizeof want));
    }
    return HP_STATUS_OK;
}

/* Fills ours (m->shape, float32) from HF's tensor t (checked by check_entry): its checksum when the
 * file records one, every value finite. */
static hp_status convert(const hf_source *s, const src_tensor *t, const hf_map *m, float *dst) {
    HP_CHECK(hp_safetensors_verify(s->files[t->file], t->e));
    int64_t n = ours_numel(m);
    dst += ours_offset(m);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = hf_index(m, i);
        float v = element(t->e, j);
        if (!isfinite(v))
            return hp_error(HP_STATUS_CORRUPT, "'%s': tensor '%s' holds %g at element %lld", file_of(s, t), t->name,
                            (double)v, (long long)j);
        dst[i] = v;
    }
    return HP_STATUS_OK;
}

/* A tensor the files may hold that no parameter comes from: mask buffers and RoPE tables. */
static bool skippable(const hp_hf_arch *a, const char *name) {
    long long L;
    int end = 0;
    if (a->family == HP_HF_FAMILY_GPT2) {
        char rest[32];
        if (sscanf(name, "h.%lld.attn.%31s%n", &L, rest, &end) == 2 && !name[end])
            return !strcmp(rest, "bias") || !strcmp(rest, "masked_bias");
        return false;
    }
    return sscanf(name, "model.layers.%lld.self_attn.rotary_emb.inv_freq%n", &L, &end) == 1 && !name[end];
}

/* Every tensor is found and checked (dtype, shape, nothing extra) before any is allocated, so a
 * config.json that disagrees with its files fails before the model's memory is taken. */
static hp_status read_tensors(const hf_source *s, const hp_hf_arch *a, const map_list *l, hp_hf_model *m) {
    char as[512];
    arch_str(a, as, sizeof as);
    if (a->family == HP_HF_FAMILY_LLAMA)
        for (size_t i = 0; i < s->n; i++) {
            size_t len = strlen(s->t[i].name);
            if (len > 10 && !strcmp(s->t[i].name + len - 10, "_proj.bias"))
                return hp_error(HP_STATUS_UNSUPPORTED, "'%s' holds tensor '%s': a projection bias (every Qwen2 has "
                                "q/k/v biases), which the Llama family here does not have (model_type %s)",
                                file_of(s, &s->t[i]), s->t[i].name, a->model_type);
        }
    /* GPT-2's base-model tensors with or without the "transformer." prefix (GPT2Model or GPT2LMHeadModel) */
    const char *prefix = "";
    if (a->family == HP_HF_FAMILY_GPT2 && !source_find(s, "wte.weight") && source_find(s, "transformer.wte.weight"))
        prefix = "transformer.";
    const src_tensor **from = calloc(l->n, sizeof *from);
    if (!from) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the tensor table");
    hp_status st = HP_STATUS_OK;
    char name[160];
    for (size_t i = 0; st == HP_STATUS_OK && i < l->n; i++) {
        const hf_map *mp = &l->v[i];
        snprintf(name, sizeof name, "%s%s", mp->base ? prefix : "", mp->hf);
        src_tensor *t = source_find(s, name);
        if (!t) {
            st = hp_error(HP_STATUS_NOT_FOUND, "'%s' lacks tensor '%s', which the model config.json describes needs (%s)",
                          s->where, name, as);
            break;
        }
        t->used = true;
        from[i] = t;
        st = check_entry(s, t, mp, a);
    }
    const src_tensor *head = NULL; /* a tied head stored anyway */
    hf_map same = {.kind = MAP_COPY, .parts = 1, .shape = l->v[0].shape}; /* the embedding's */
    for (size_t i = 0; st == HP_STATUS_OK && i < s->n; i++) {
        const src_tensor *t = &s->t[i];
        size_t pl = strlen(prefix);
        const char *bare = strncmp(t->name, prefix, pl) ? t->name : t->name + pl;
        if (t->used || skippable(a, bare)) continue;
        if (a->tied_head && !strcmp(t->name, "lm_head.weight")) {
            head = t;
            st = check_entry(s, t, &same, a);
            continue;
        }
        st = hp_error(HP_STATUS_CORRUPT, "'%s' holds tensor '%s', which is not part of the model config.json describes "
                      "(%s)", file_of(s, t), t->name, as);
    }
    if (st == HP_STATUS_OK) st = alloc_from(a, l, m);
    for (size_t i = 0; st == HP_STATUS_OK && i < l->n; i++) {
        const hp_named_tensor *dst = hp_hf_model_find(m, l->v[i].ours); /* allocated from the same table */
        st = convert(s, from[i], &l->v[i], dst->data);
    }
    free(from);
    if (st != HP_STATUS_OK || !head) return st;
    /* the stored head must be the embedding */
    const hp_named_tensor *emb = &m->tensors[0];
    size_t bytes = (size_t)hp_shape_numel(&emb->shape) * sizeof(float);
    float *h = malloc(bytes + 1);
    if (!h) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory reading '%s'", head->name);
    st = convert(s, head, &same, h);
    bool eq = st == HP_STATUS_OK && !memcmp(h, emb->data, bytes);
    free(h);
    HP_CHECK(st);
    if (!eq)
        return hp_error(HP_STATUS_CORRUPT, "'%s': config.json ties the head to the embedding (tie_word_embeddings "
                        "true), but tensor 'lm_head.weight' differs from '%s'", file_of(s, head), emb->name);
    return HP_STATUS_OK;
}

hp_status hp_hf_read(const char *dir, hp_hf_model *out) {
    memset(out, 0, sizeof *out);
    hp_hf_arch a;
    HP_CHECK(hp_hf_config_read(dir, &a));
    map_list l = {0};
    hf_source s;
    memset(&s, 0, sizeof s);
    hp_status st = build_maps(&a, &l);
    if (st == HP_STATUS_OK) st = source_open(&s, dir);
    if (st == HP_STATUS_OK) st = read_tensors(&s, &a, &l, out);
    source_free(&s);
    free(l.v);
    return st;
}

/* ---------------------------------------------------------------- writing a directory */

hp_status hp_hf_write(const char *dir, const hp_hf_model *m, const char *base_config) {
    map_list l = {0};
    HP_CHECK(build_maps(&m->arch, &l));
    hp_named_tensor *out = calloc(l.n, sizeof *out);
    char **names = calloc(l.n, sizeof *names);
    bool *borrowed = calloc(l.n, sizeof *borrowed); /* a copied tensor is written from the model's own buffer */
    size_t n = 0;
    hp_status st = out && names && borrowed ? HP_STATUS_OK
                                            : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory writing '%s'", dir);
    char a[128], b[128], path[HP_HF_PATH_MAX];
    const char *prefix = m->arch.family == HP_HF_FAMILY_GPT2 ? "transformer." : "";
    for (size_t i = 0; st == HP_STATUS_OK && i < l.n; i++) {
        const hf_map *mp = &l.v[i];
        const hp_named_tensor *src = hp_hf_model_find(m, mp->ours);
        if (!src || src->dtype != HP_DTYPE_F32 || !hp_shape_equal(&src->shape, &mp->shape)) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "the %s model to write %s tensor '%s' as F32 %s%s%s",
                          hp_hf_family_name(m->arch.family), src ? "holds" : "lacks", mp->ours,
                          hp_shape_str(&mp->shape, a, sizeof a), src ? "; it is " : "",
                          src ? hp_shape_str(&src->shape, b, sizeof b) : "");
            break;
        }
        char full[160];
        snprintf(full, sizeof full, "%s%s", mp->base ? prefix : "", mp->hf);
        size_t k = 0;
        while (k < n && strcmp(names[k], full)) k++;
        if (k == n) { /* a new HF tensor */
            hp_shape hs = hf_shape(mp);
            names[n] = strdup(full);
            borrowed[n] = mp->kind == MAP_COPY;
            out[n] = (hp_named_tensor){names[n], HP_DTYPE_F32, hs,
                                       borrowed[n] ? src->data : calloc((size_t)hp_shape_numel(&hs) + 1, sizeof(float))};
            n++;
            if (!names[k] || !out[k].data) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for tensor '%s'", full);
                break;
            }
        }
        if (borrowed[k]) continue;
        const float *s = (const float *)src->data + ours_offset(mp);
        float *d = out[k].data;
        int64_t numel = ours_numel(mp);
        for (int64_t e = 0; e < numel; e++) d[hf_index(mp, e)] = s[e];
    }
    if (st == HP_STATUS_OK) st = hp_hf_mkdir_p(dir);
    if (st == HP_STATUS_OK) st = hp_hf_join(path, dir, "model.safetensors");
    static const char *const meta[] = {"format", "pt"};
    if (st == HP_STATUS_OK) st = hp_safetensors_write(path, out, n, meta, 1);
    char *cfg = NULL;
    if (st == HP_STATUS_OK && !(cfg = hp_hf_config_json(&m->arch, base_config)))
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory writing config.json");
    if (st == HP_STATUS_OK) st = hp_hf_join(path, dir, "config.json");
    if (st == HP_STATUS_OK) st = hp_hf_write_text(path, cfg);
    free(cfg);
    for (size_t i = 0; i < n; i++) {
        if (!borrowed[i]) free(out[i].data);
        free(names[i]);
    }
    free(out);
    free(names);
    free(borrowed);
    free(l.v);
    return st;
}
