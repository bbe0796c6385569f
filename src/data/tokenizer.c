/* Tokenizers behind one interface (see hp/tokenizer.h): bytes (hp/data.h) or byte-level BPE
 * (src/data/bpe_*.c). */
#include "hp/tokenizer.h"

#include "data/bpe_json.h"
#include "hp/data.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct hp_tokenizer {
    int32_t vocab;
    hp__bpe *bpe; /* NULL: bytes */
    uint8_t byte[256];
};

static hp_status wrap(hp__bpe *bpe, hp_tokenizer **out) {
    hp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        hp__bpe_free(bpe);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    t->bpe = bpe;
    t->vocab = bpe ? bpe->vocab : HP_BYTE_VOCAB;
    for (int i = 0; i < 256; i++) t->byte[i] = (uint8_t)i;
    *out = t;
    return HP_STATUS_OK;
}

hp_status hp__tokenizer_wrap_bpe(hp__bpe *bpe, hp_tokenizer **out) { return wrap(bpe, out); }

static int exists(const char *p) { return access(p, R_OK) == 0; }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

hp_status hp_tokenizer_load(const char *spec, hp_tokenizer **out) {
    *out = NULL;
    if (!spec || !*spec) return hp_error(HP_STATUS_INVALID_ARGUMENT, "tokenizer: empty name (\"bytes\" or a path)");
    if (!strcmp(spec, "bytes")) return wrap(NULL, out);
    struct stat sb;
    if (stat(spec, &sb) != 0)
        return hp_error(HP_STATUS_IO,
                        "tokenizer '%s': no such file or directory (\"bytes\", a tokenizer.json, an encoder.json or "
                        "a directory holding one)",
                        spec);
    size_t n = strlen(spec);
    char *a = malloc(n + 32), *b = malloc(n + 32);
    if (!a || !b) {
        free(a);
        free(b);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer '%s': out of memory", spec);
    }
    hp__bpe *bpe = NULL;
    hp_status st;
    if (S_ISDIR(sb.st_mode)) {
        snprintf(a, n + 32, "%s/tokenizer.json", spec);
        snprintf(b, n + 32, "%s/encoder.json", spec);
        if (exists(a)) {
            st = hp__bpe_load_json(a, &bpe);
        } else if (exists(b)) {
            snprintf(a, n + 32, "%s/vocab.bpe", spec);
            st = hp__bpe_load_gpt2(b, a, &bpe);
        } else {
            st = hp_error(HP_STATUS_IO, "tokenizer '%s': the directory holds neither tokenizer.json nor encoder.json",
                          spec);
        }
    } else if (ends_with(spec, "encoder.json")) {
        snprintf(a, n + 32, "%.*svocab.bpe", (int)(n - strlen("encoder.json")), spec);
        st = hp__bpe_load_gpt2(spec, a, &bpe);
    } else {
        st = hp__bpe_load_json(spec, &bpe);
    }
    free(a);
    free(b);
    if (st != HP_STATUS_OK) return st;
    return wrap(bpe, out);
}

void hp_tokenizer_free(hp_tokenizer *t) {
    if (!t) return;
    hp__bpe_free(t->bpe);
    free(t);
}

int32_t hp_tokenizer_vocab_size(const hp_tokenizer *t) { return t->vocab; }

const char *hp_tokenizer_kind(const hp_tokenizer *t) { return t->bpe ? "bpe" : "bytes"; }

int32_t hp_tokenizer_merge_count(const hp_tokenizer *t) { return t->bpe ? t->bpe->n_merges : 0; }

const uint8_t *hp_tokenizer_token(const hp_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab) return NULL;
    if (!t->bpe) {
        *len = 1;
        return &t->byte[id];
    }
    *len = t->bpe->off[id + 1] - t->bpe->off[id];
    return t->bpe->bytes + t->bpe->off[id];
}

int32_t hp_tokenizer_special_id(const hp_tokenizer *t, const char *content) {
    if (!t->bpe) return -1;
    size_t n = strlen(content);
    for (int32_t i = 0; i < t->vocab; i++)
        if (t->bpe->special[i] && t->bpe->off[i + 1] - t->bpe->off[i] == n &&
            !memcmp(t->bpe->bytes + t->bpe->off[i], content, n))
            return i;
    return -1;
}

hp_status hp_tokenizer_save(const hp_tokenizer *t, const char *path) {
    if (!t->bpe) return hp_error(HP_STATUS_UNSUPPORTED, "%s: the \"bytes\" tokenizer has no file to save", path);
    return hp__bpe_save_json(t->bpe, path);
}

hp_status hp_tokenizer_encode(const hp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    if (t->bpe) {
        size_t cap = 0;
        hp_status st = hp__bpe_encode(t->bpe, (const uint8_t *)text, len, ids, n, &cap);
        if (st != HP_STATUS_OK) {
            free(*ids);
            *ids = NULL;
            *n = 0;
        } else if (*n < cap / 2) { /* room was reserved for one id per byte: give the rest back */
            int32_t *shrunk = realloc(*ids, (*n ? *n : 1) * sizeof **ids);
            if (shrunk) *ids = shrunk;
        }
        return st;
    }
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu tokens", len);
    *n = hp_byte_encode(text, len, *ids);
    return HP_STATUS_OK;
}

/* ----------------------------------------------------------------------- parallel encode */

typedef struct chunk_job {
    const hp__bpe *m;
    const uint8_t *text;
    size_t len;
    int32_t *ids;
    size_t n, cap;
    hp_status st;
    char err[256];
} chunk_job;

static void *chunk_run(void *arg) {
    chunk_job *j = arg;
    j->st = hp__bpe_encode(j->m, j->text, j->len, &j->ids, &j->n, &j->cap);
    if (j->st != HP_STATUS_OK) snprintf(j->err, sizeof j->err, "%s", hp_error_message());
    return NULL;
}

hp_status hp_tokenizer_encode_parallel(const hp_tokenizer *t, const char *text, size_t len, int threads, int32_t **ids,
                                       size_t *n) {
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    if (!t->bpe || threads == 1 || len < ((size_t)1 << 16)) return hp_tokenizer_encode(t, text, len, ids, n);
    *ids = NULL;
    *n = 0;
    const uint8_t *u = (const uint8_t *)text;
    /* One chunk per thread (each thread warms one word cache), each cut moved forward to the next
     * safe cut. */
    size_t want = (size_t)threads, target = len / want;
    chunk_job *jobs = calloc(want, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    if (!jobs || !tid) {
        free(jobs);
        free(tid);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %d threads", threads);
    }
    size_t nj = 0, start = 0;
    while (start < len && nj < want) {
        size_t cut = nj + 1 == want ? len : start + target;
        while (cut < len && !hp__bpe_pretok_cut_ok(u, len, cut)) cut++;
        if (cut > len) cut = len;
        jobs[nj++] = (chunk_job){.m = t->bpe, .text = u + start, .len = cut - start};
        start = cut;
    }
    hp_status st = HP_STATUS_OK;
    for (size_t w = 0; w < nj; w += (size_t)threads) {
        size_t k = nj - w < (size_t)threads ? nj - w : (size_t)threads, started = 0;
        for (; started < k; started++)
            if (pthread_create(&tid[started], NULL, chunk_run, &jobs[w + started]) != 0) break;
        for (size_t i = 0; i < started; i++) pthread_join(tid[i], NULL);
        for (size_t i = started; i < k; i++) chunk_run(&jobs[w + i]); /* could not start: run here */
    }
    size_t total = 0;
    for (size_t i = 0; i < nj; i++) {
        if (jobs[i].st != HP_STATUS_OK && st == HP_STATUS_OK) st = hp_error(jobs[i].st, "%s", jobs[i].err);
        total += jobs[i].n;
    }
    if (st == HP_STATUS_OK) {
        *ids = malloc((total ? total : 1) * sizeof **ids);
        if (!*ids) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu ids", total);
    }
    if (st == HP_STATUS_OK) {
        size_t o = 0;
        for (size_t i = 0; i < nj; i++) {
            if (jobs[i].n) memcpy(*ids + o, jobs[i].ids, jobs[i].n * sizeof **ids);
            o += jobs[i].n;
        }
        *n = total;
    }
    for (size_t i = 0; i < nj; i++) free(jobs[i].ids);
    free(jobs);
    free(tid);
    return st;
}

hp_status hp_tokenizer_decode(const hp_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len) {
    *text = NULL;
    if (!t->bpe) {
        *text = malloc(n + 1);
        if (!*text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu bytes", n);
        hp_status st = hp_byte_decode(ids, n, *text);
        if (st != HP_STATUS_OK) {
            free(*text);
            *text = NULL;
            return st;
        }
        (*text)[n] = 0;
        *len = n;
        return HP_STATUS_OK;
    }
    const hp__bpe *m = t->bpe;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->vocab)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "tokenizer: id %d at position %zu is outside [0, %d)", ids[i],
                            i, m->vocab);
        total += m->off[ids[i] + 1] - m->off[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) return hp_error(HP_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = m->off[ids[i]], b = m->off[ids[i] + 1];
        memcpy(out + o, m->bytes + a, b - a);
        o += b - a;
    }
    out[o] = 0;
    *text = out;
    *len = o;
    return HP_STATUS_OK;
}
