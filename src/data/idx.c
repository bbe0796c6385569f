/*
 * IDX files (LeCun's MNIST format) and the Fashion-MNIST captions dataset (hp/multimodal.h).
 * The reader goes through zlib's gz* functions, which read gzip-compressed and plain files alike.
 */
#include "hp/multimodal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Reads exactly n bytes; false on a short read or an error. */
static bool gz_read_all(gzFile f, void *buf, size_t n) {
    uint8_t *p = buf;
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int got = gzread(f, p, chunk);
        if (got <= 0) return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

hp_status hp_idx_load(const char *path, hp_idx *out) {
    memset(out, 0, sizeof *out);
    gzFile f = gzopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "cannot open IDX file '%s'", path);
    hp_status st = HP_STATUS_OK;
    uint8_t head[4];
    if (!gz_read_all(f, head, 4)) {
        st = hp_error(HP_STATUS_IO, "%s: short read of the 4-byte IDX magic number", path);
        goto done;
    }
    if (head[0] != 0 || head[1] != 0) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: bad IDX magic 0x%02x%02x%02x%02x (the first two bytes must be 0)", path,
                      head[0], head[1], head[2], head[3]);
        goto done;
    }
    if (head[2] != 0x08) {
        st = hp_error(HP_STATUS_UNSUPPORTED, "%s: IDX element type 0x%02x is not 0x08 (unsigned byte)", path, head[2]);
        goto done;
    }
    if (head[3] < 1 || head[3] > 4) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: IDX dimension count %d is outside [1, 4]", path, head[3]);
        goto done;
    }
    out->ndim = head[3];
    uint64_t total = 1;
    for (int d = 0; d < out->ndim; d++) {
        uint8_t b[4];
        if (!gz_read_all(f, b, 4)) {
            st = hp_error(HP_STATUS_IO, "%s: short read of IDX dimension %d", path, d);
            goto done;
        }
        uint32_t v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (v == 0) {
            st = hp_error(HP_STATUS_CORRUPT, "%s: IDX dimension %d is 0", path, d);
            goto done;
        }
        out->dims[d] = v;
        total *= v;
        if (total > (1ull << 31)) {
            st = hp_error(HP_STATUS_CORRUPT, "%s: IDX data of more than 2^31 elements (dimension %d is %u)", path, d, v);
            goto done;
        }
    }
    out->data = malloc(total ? total : 1);
    if (!out->data) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: out of memory for %llu bytes", path, (unsigned long long)total);
        goto done;
    }
    if (!gz_read_all(f, out->data, total)) {
        st = hp_error(HP_STATUS_IO, "%s: short read: the header declares %llu data bytes", path,
                      (unsigned long long)total);
        goto done;
    }
    uint8_t extra;
    if (gzread(f, &extra, 1) > 0)
        st = hp_error(HP_STATUS_CORRUPT, "%s: data past the %llu bytes the IDX header declares", path,
                      (unsigned long long)total);
done:
    gzclose(f);
    if (st != HP_STATUS_OK) hp_idx_free(out);
    return st;
}

void hp_idx_free(hp_idx *x) {
    if (!x) return;
    free(x->data);
    memset(x, 0, sizeof *x);
}

/* DIR/SPLIT-KIND-ubyte.gz when it exists, else without .gz. */
static void split_path(const char *dir, const char *split, const char *kind, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s-%s-ubyte.gz", dir, split, kind);
    if (access(out, R_OK) != 0) snprintf(out, cap, "%s/%s-%s-ubyte", dir, split, kind);
}

hp_status hp_mm_data_load(const char *dir, const char *split, int64_t limit, hp_mm_data *out) {
    memset(out, 0, sizeof *out);
    char ip[1200], lp[1200];
    split_path(dir, split, "images-idx3", ip, sizeof ip);
    split_path(dir, split, "labels-idx1", lp, sizeof lp);
    hp_idx im, lb;
    HP_CHECK(hp_idx_load(ip, &im));
    hp_status st = hp_idx_load(lp, &lb);
    if (st != HP_STATUS_OK) {
        hp_idx_free(&im);
        return st;
    }
    if (im.ndim != 3) st = hp_error(HP_STATUS_CORRUPT, "%s: images must be 3-d (count, rows, cols), got %d-d", ip, im.ndim);
    else if (lb.ndim != 1) st = hp_error(HP_STATUS_CORRUPT, "%s: labels must be 1-d, got %d-d", lp, lb.ndim);
    else if (im.dims[0] != lb.dims[0])
        st = hp_error(HP_STATUS_CORRUPT, "%s has %lld images but %s has %lld labels", ip, (long long)im.dims[0], lp,
                      (long long)lb.dims[0]);
    for (int64_t i = 0; st == HP_STATUS_OK && i < lb.dims[0]; i++)
        if (lb.data[i] >= HP_MM_CLASSES)
            st = hp_error(HP_STATUS_CORRUPT, "%s: label %lld is %d, outside [0, %d)", lp, (long long)i, lb.data[i],
                          HP_MM_CLASSES);
    if (st != HP_STATUS_OK) {
        hp_idx_free(&im), hp_idx_free(&lb);
        return st;
    }
    out->n = limit > 0 && limit < im.dims[0] ? limit : im.dims[0];
    out->rows = (int)im.dims[1];
    out->cols = (int)im.dims[2];
    out->images = im.data; /* the tail past n is kept, unused */
    out->labels = lb.data;
    return HP_STATUS_OK;
}

void hp_mm_data_free(hp_mm_data *d) {
    if (!d) return;
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

hp_status hp_mm_patchify(const hp_mm_data *d, const int64_t *idx, int n, int patch, float *out) {
    if (patch < 1 || d->rows % patch || d->cols % patch)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "patch %d does not divide the %dx%d images", patch, d->rows, d->cols);
    int gr = d->rows / patch, gc = d->cols / patch, pp = patch * patch;
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= d->n)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "image index %lld is outside [0, %lld)", (long long)idx[i],
                            (long long)d->n);
        const uint8_t *img = d->images + idx[i] * d->rows * d->cols;
        float *o = out + (size_t)i * gr * gc * pp;
        for (int pr = 0; pr < gr; pr++)
            for (int pc = 0; pc < gc; pc++)
                for (int y = 0; y < patch; y++)
                    for (int x = 0; x < patch; x++)
                        *o++ = img[(pr * patch + y) * d->cols + pc * patch + x] / 255.0f;
    }
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- captions */

static const char *const k_classes[HP_MM_CLASSES] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                     "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
static const char *const k_vocab[HP_MM_VOCAB] = {"<bos>", "<eos>", "a",      "an",       "photo",   "of",
                                                 "t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal",
                                                 "shirt", "sneaker", "bag", "ankle", "boot"};
/* Each class's words (vocabulary ids), -1 terminated, and whether it takes "an". */
static const int k_class_words[HP_MM_CLASSES][3] = {{6, -1}, {7, -1},  {8, -1},  {9, -1},  {10, -1},
                                                    {11, -1}, {12, -1}, {13, -1}, {14, -1}, {15, 16, -1}};

const char *hp_mm_class_name(int label) { return label >= 0 && label < HP_MM_CLASSES ? k_classes[label] : "?"; }
const char *hp_mm_vocab_word(int id) { return id >= 0 && id < HP_MM_VOCAB ? k_vocab[id] : "?"; }

hp_status hp_mm_caption(int label, int32_t *tokens, int32_t *targets) {
    if (label < 0 || label >= HP_MM_CLASSES)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "caption label %d is outside [0, %d)", label, HP_MM_CLASSES);
    int32_t words[HP_MM_CAPTION + 1];
    int n = 0;
    words[n++] = 2;                      /* a */
    words[n++] = 4;                      /* photo */
    words[n++] = 5;                      /* of */
    words[n++] = label == 9 ? 3 : 2;     /* an ankle boot; a <vowel-less> others */
    for (int k = 0; k_class_words[label][k] >= 0; k++) words[n++] = k_class_words[label][k];
    tokens[0] = HP_MM_BOS;
    for (int t = 1; t < HP_MM_CAPTION; t++) tokens[t] = t - 1 < n ? words[t - 1] : HP_MM_EOS;
    for (int t = 0; t < HP_MM_CAPTION; t++) targets[t] = t < n ? words[t] : HP_MM_EOS;
    return HP_STATUS_OK;
}

void hp_mm_caption_text(int label, char *out, size_t cap) {
    int32_t tok[HP_MM_CAPTION], tgt[HP_MM_CAPTION];
    if (cap == 0) return;
    out[0] = 0;
    if (hp_mm_caption(label, tok, tgt) != HP_STATUS_OK) return;
    size_t at = 0;
    for (int t = 0; t < HP_MM_CAPTION && tgt[t] != HP_MM_EOS; t++) {
        int w = snprintf(out + at, cap - at, "%s%s", t ? " " : "", k_vocab[tgt[t]]);
        if (w < 0 || (size_t)w >= cap - at) break;
        at += (size_t)w;
    }
}
