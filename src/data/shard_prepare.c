/* hp_shards_prepare: text files and JSONL streamed in bounded chunks, encoded by several threads,
 * written in order into a shard set (see hp/shards.h). */
#include "hp/shards.h"
#include "hp/tokenizer.h"

#include "data/shard_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

hp_shards_prepare_options hp_shards_prepare_options_default(void) {
    return (hp_shards_prepare_options){.tokenizer = "bytes", .shard_tokens = 100000000, .threads = 1,
                                       .val_fraction = 0.05, .chunk_bytes = (size_t)4 << 20};
}

/* A unit of work: text made of pieces (documents, or a part of a text file), each encoded alone. */
typedef struct chunk {
    char *text;
    size_t len, cap;
    size_t *ends; /* end offset of each piece */
    int pieces, pieces_cap;
    hp_shard_split split;
    int32_t *ids;
    size_t n, ids_cap;
    hp_status st;
    char err[1024];
    const hp_tokenizer *tok;
} chunk;

static hp_status chunk_add(chunk *c, const char *p, size_t n, bool new_piece) {
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 1 << 16;
        while (cap < c->len + n) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %zu bytes of text", cap);
        c->text = t, c->cap = cap;
    }
    memcpy(c->text + c->len, p, n);
    c->len += n;
    if (new_piece || c->pieces == 0) {
        if (c->pieces == c->pieces_cap) {
            int cap = c->pieces_cap ? 2 * c->pieces_cap : 64;
            size_t *e = realloc(c->ends, (size_t)cap * sizeof *e);
            if (!e) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
            c->ends = e, c->pieces_cap = cap;
        }
        c->pieces++;
    }
    c->ends[c->pieces - 1] = c->len;
    return HP_STATUS_OK;
}

static void *encode_chunk(void *arg) {
    chunk *c = arg;
    c->n = 0;
    c->st = HP_STATUS_OK;
    size_t begin = 0;
    for (int i = 0; i < c->pieces && c->st == HP_STATUS_OK; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        c->st = hp_tokenizer_encode(c->tok, c->text + begin, c->ends[i] - begin, &ids, &n);
        if (c->st == HP_STATUS_OK && c->n + n > c->ids_cap) {
            size_t cap = c->ids_cap ? c->ids_cap : 1 << 16;
            while (cap < c->n + n) cap *= 2;
            int32_t *t = realloc(c->ids, cap * sizeof *t);
            if (!t) c->st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %zu tokens", cap);
            else c->ids = t, c->ids_cap = cap;
        }
        if (c->st == HP_STATUS_OK) memcpy(c->ids + c->n, ids, n * sizeof *ids), c->n += n;
        free(ids);
        begin = c->ends[i];
    }
    if (c->st != HP_STATUS_OK) snprintf(c->err, sizeof c->err, "%s", hp_error_message());
    return NULL;
}

/* The reader: the inputs as a sequence of chunks, the split point in input bytes. */
typedef struct reader {
    const char *const *inputs;
    int n_inputs, cur;
    FILE *f;
    bool jsonl;
    int64_t line;
    char *carry; /* text read but not yet given to a chunk (text files) */
    size_t ncarry;
    char *linebuf;
    size_t linecap;
    uint64_t total, consumed, split_at;
    bool val;
    size_t chunk_bytes;
    int64_t documents;
} reader;

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
/* A boundary GPT-2's pre-tokenizer never merges across: after '\n', before a non-space. */
static bool safe_cut(const char *t, size_t i) { return i > 0 && t[i - 1] == '\n' && !is_space(t[i]); }

static hp_status open_next(reader *r) {
    if (r->f) fclose(r->f);
    r->f = NULL;
    if (++r->cur >= r->n_inputs) return HP_STATUS_OK;
    const char *path = r->inputs[r->cur];
    r->f = fopen(path, "rb");
    if (!r->f) return hp_error(HP_STATUS_IO, "cannot open input '%s': %s", path, strerror(errno));
    r->jsonl = ends_with(path, ".jsonl");
    r->line = 0;
    r->ncarry = 0;
    return HP_STATUS_OK;
}

/* The next chunk of a text file into c (at most chunk_bytes; *done when the file is exhausted). */
static hp_status next_text(reader *r, chunk *c, bool *done) {
    size_t cap = r->chunk_bytes;
    size_t got = fread(r->carry + r->ncarry, 1, cap - r->ncarry, r->f);
    if (ferror(r->f)) return hp_error(HP_STATUS_IO, "cannot read input '%s': %s", r->inputs[r->cur], strerror(errno));
    size_t have = r->ncarry + got;
    bool eof = have < cap;
    size_t cut = have;
    bool cross = false;
    if (!r->val && r->consumed + have > r->split_at) { /* the split point is in this buffer */
        size_t lim = (size_t)(r->split_at - r->consumed);
        cut = lim;
        while (cut < have && !safe_cut(r->carry, cut)) cut++;
        if (cut == have && !eof) cut = lim; /* no boundary after it here: cut at the point itself */
        cross = true;
    } else if (!eof) {
        cut = have - 1; /* a cut at `have` would need the byte after it, not read yet */
        while (cut > 0 && !safe_cut(r->carry, cut)) cut--;
        if (cut == 0) cut = have; /* no boundary in a whole chunk: cut at its end */
    }
    if (cut) HP_CHECK(chunk_add(c, r->carry, cut, true));
    memmove(r->carry, r->carry + cut, have - cut);
    r->ncarry = have - cut;
    r->consumed += cut;
    if (cross) r->val = true;
    *done = eof && r->ncarry == 0;
    return HP_STATUS_OK;
}

/* Documents of a JSONL file into c until it holds chunk_bytes or the split point is reached. */
static hp_status next_jsonl(reader *r, chunk *c, bool *done) {
    *done = false;
    while (c->len < r->chunk_bytes) {
        if (!r->val && r->consumed >= r->split_at) {
            r->val = true;
            if (c->len) return HP_STATUS_OK; /* the chunk so far is training data */
        }
        c->split = r->val ? HP_SHARD_SPLIT_VAL : HP_SHARD_SPLIT_TRAIN;
        ssize_t n = getline(&r->linebuf, &r->linecap, r->f);
        if (n < 0) {
            if (ferror(r->f)) return hp_error(HP_STATUS_IO, "cannot read input '%s': %s", r->inputs[r->cur], strerror(errno));
            *done = true;
            return HP_STATUS_OK;
        }
        r->line++;
        r->consumed += (uint64_t)n;
        size_t k = 0;
        while (k < (size_t)n && is_space(r->linebuf[k])) k++;
        if (k == (size_t)n) continue;
        cJSON *o = cJSON_ParseWithLength(r->linebuf, (size_t)n);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "text");
        if (!cJSON_IsObject(o) || !cJSON_IsString(t)) {
            cJSON_Delete(o);
            return hp_error(HP_STATUS_CORRUPT, "%s:%lld: expected a JSON object with a string \"text\"", r->inputs[r->cur],
                            (long long)r->line);
        }
        hp_status st = chunk_add(c, t->valuestring, strlen(t->valuestring), true);
        cJSON_Delete(o);
        HP_CHECK(st);
        r->documents++;
    }
    return HP_STATUS_OK;
}

/* Fills c with the next chunk; c->pieces stays 0 at the end of all inputs. */
static hp_status next_chunk(reader *r, chunk *c) {
    c->len = 0;
    c->pieces = 0;
    while (r->f) {
        c->split = r->val ? HP_SHARD_SPLIT_VAL : HP_SHARD_SPLIT_TRAIN;
        bool done = false;
        HP_CHECK(r->jsonl ? next_jsonl(r, c, &done) : next_text(r, c, &done));
        if (done) HP_CHECK(open_next(r));
        if (c->len) return HP_STATUS_OK;
    }
    return HP_STATUS_OK;
}

static hp_status check_options(const char *dir, const hp_shards_prepare_options *o, int n_inputs) {
    if (n_inputs < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "prepare '%s': no inputs", dir);
    if (o->shard_tokens < 1 || o->shard_tokens > HP_SHARD_MAX_TOKENS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "shard tokens %llu must be in [1, %llu]",
                        (unsigned long long)o->shard_tokens, (unsigned long long)HP_SHARD_MAX_TOKENS);
    if (o->threads < 1 || o->threads > 1024)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "threads %d must be in [1, 1024]", o->threads);
    if (!(o->val_fraction > 0 && o->val_fraction < 1))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "val fraction %g must be in (0, 1)", o->val_fraction);
    if (o->chunk_bytes < 4096) return hp_error(HP_STATUS_INVALID_ARGUMENT, "chunk bytes %zu must be >= 4096", o->chunk_bytes);
    return HP_STATUS_OK;
}

hp_status hp_shards_prepare(const char *const *inputs, int n_inputs, const char *dir,
                            const hp_shards_prepare_options *opt, hp_shards_prepare_result *result) {
    double t0 = hp_now_seconds();
    HP_CHECK(check_options(dir, opt, n_inputs));
    reader r = {.inputs = inputs, .n_inputs = n_inputs, .cur = -1, .chunk_bytes = opt->chunk_bytes};
    for (int i = 0; i < n_inputs; i++) {
        struct stat sb;
        if (stat(inputs[i], &sb) != 0) return hp_error(HP_STATUS_IO, "input '%s': %s", inputs[i], strerror(errno));
        if (!S_ISREG(sb.st_mode)) return hp_error(HP_STATUS_IO, "input '%s' is not a regular file", inputs[i]);
        r.total += (uint64_t)sb.st_size;
    }
    r.split_at = (uint64_t)((double)r.total * (1.0 - opt->val_fraction));
    hp_tokenizer *tok = NULL;
    HP_CHECK(hp_tokenizer_load(opt->tokenizer, &tok));
    int32_t vocab = hp_tokenizer_vocab_size(tok);
    int nt = opt->threads;
    chunk *cs = calloc((size_t)nt, sizeof *cs);
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    r.carry = malloc(opt->chunk_bytes);
    hp__split_writer sw[2];
    hp__split_writer_init(&sw[0], dir, HP_SHARD_SPLIT_TRAIN, vocab, opt->shard_tokens);
    hp__split_writer_init(&sw[1], dir, HP_SHARD_SPLIT_VAL, vocab, opt->shard_tokens);
    hp_status st = HP_STATUS_OK;
    char spec[64];
    if (!cs || !th || !r.carry) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    HP_CHECK_GOTO(hp__shards_dir_prepare(dir), st, out);
    HP_CHECK_GOTO(hp_tokenizer_files_copy(opt->tokenizer, dir, spec, sizeof spec), st, out);
    HP_CHECK_GOTO(open_next(&r), st, out);
    for (;;) {
        int k = 0;
        for (; k < nt; k++) {
            HP_CHECK_GOTO(next_chunk(&r, &cs[k]), st, out);
            if (!cs[k].pieces) break;
            cs[k].tok = tok;
        }
        if (k == 0) break;
        int started = 0;
        if (k > 1)
            for (; started < k; started++)
                if (pthread_create(&th[started], NULL, encode_chunk, &cs[started]) != 0) break;
        for (int i = started; i < k; i++) encode_chunk(&cs[i]); /* one chunk, or no thread to spare */
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < k; i++) {
            if (cs[i].st != HP_STATUS_OK) {
                st = hp_error(cs[i].st, "%s", cs[i].err);
                goto out;
            }
            HP_CHECK_GOTO(hp__split_writer_append(&sw[cs[i].split], cs[i].ids, cs[i].n, cs[i].len), st, out);
        }
        if (opt->progress) opt->progress(r.consumed, r.total, sw[0].tokens + sw[1].tokens, opt->user);
    }
    if (sw[0].tokens == 0 || sw[1].tokens == 0) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "inputs of %llu bytes give %llu training and %llu validation tokens "
                      "(val fraction %g): both splits need tokens", (unsigned long long)r.total,
                      (unsigned long long)sw[0].tokens, (unsigned long long)sw[1].tokens, opt->val_fraction);
        goto out;
    }
    HP_CHECK_GOTO(hp__split_writer_finish(&sw[0]), st, out);
    HP_CHECK_GOTO(hp__split_writer_finish(&sw[1]), st, out);
    HP_CHECK_GOTO(hp__shards_write_index(dir, spec, opt->tokenizer, hp_tokenizer_kind(tok), vocab, inputs, n_inputs, sw),
                  st, out);
    if (result) {
        *result = (hp_shards_prepare_result){.documents = r.documents, .seconds = hp_now_seconds() - t0};
        for (int k = 0; k < 2; k++) result->tokens[k] = sw[k].tokens, result->bytes[k] = sw[k].bytes, result->shards[k] = sw[k].n;
    }
out:
    hp__split_writer_free(&sw[0]);
    hp__split_writer_free(&sw[1]);
    for (int i = 0; cs && i < nt; i++) free(cs[i].text), free(cs[i].ends), free(cs[i].ids);
    free(cs);
    free(th);
    free(r.carry);
    free(r.linebuf);
    if (r.f) fclose(r.f);
    hp_tokenizer_free(tok);
    return st;
}
