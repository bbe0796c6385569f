/*
 * The schedule as a text table: one row per rank, one column per time slot (hp_schedule_render),
 * and the same format read back as a user schedule (hp_schedule_parse, hp_schedule_load).
 */
#include "mpmd/schedule_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- growable string */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_pad(sbuf *b, size_t n) {
    for (size_t i = 0; i < n; i++) sb_put(b, " ", 1);
}

/* ---------------------------------------------------------------- rendering */

/* One drawn cell run: a token at column col, spanning width columns. */
typedef struct cell {
    long col, width;
    char text[48];
} cell;

static int token_of(const hp_sched_action *a, bool prefix, char *buf, size_t n) {
    const char *op = a->op == HP_SCHED_OP_F   ? "F"
                     : a->op == HP_SCHED_OP_W ? "W"
                     : (a->flags & HP_SCHED_FLAG_FULL_BACKWARD) ? "BW"
                                                                 : "B";
    if (prefix) return snprintf(buf, n, "%d%s%d", (int)a->stage, op, (int)a->mb);
    return snprintf(buf, n, "%s%d", op, (int)a->mb);
}

hp_status hp_schedule_render(const hp_schedule *s, const hp_sched_timeline *tl, char **out) {
    if (!s || !out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_render: NULL argument");
    *out = NULL;
    hp_sched_timeline own = {0};
    hp_status st = HP_STATUS_OK;
    if (tl) {
        if (tl->p != s->p)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_render: timeline of %d ranks for a schedule of %d",
                            tl->p, s->p);
        for (int r = 0; r < s->p; r++)
            if (tl->n_actions[r] != s->n_actions[r])
                return hp_error(HP_STATUS_INVALID_ARGUMENT,
                                "hp_schedule_render: timeline has %d actions on rank %d, the schedule %d", tl->n_actions[r],
                                r, s->n_actions[r]);
    }
    /* The slot: the shortest compute action. */
    double slot = INFINITY;
    for (int r = 0; tl && r < s->p; r++)
        for (int i = 0; i < s->n_actions[r]; i++)
            if (hp__sched_is_compute(s->actions[r][i].op) && tl->end[r][i] - tl->start[r][i] > 0)
                slot = fmin(slot, tl->end[r][i] - tl->start[r][i]);
    if (!tl || !isfinite(slot)) {
        HP_CHECK(hp_schedule_simulate(s, NULL, &own));
        tl = &own;
        slot = 1.0;
    }
    bool prefix = s->n_stages != s->p;
    for (int st2 = 0; !prefix && st2 < s->n_stages; st2++) prefix = s->stage_rank[st2] != st2;

    int total = 0;
    for (int r = 0; r < s->p; r++) total += hp_schedule_count_compute(s, r);
    cell *cells = malloc(((size_t)total + 1) * sizeof *cells);
    int *first = malloc(((size_t)s->p + 1) * sizeof *first);
    sbuf b = {0};
    if (!cells || !first) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule rendering (%d cells)", total);
        goto done;
    }
    long ncols = 0;
    size_t width = 1;
    int k = 0;
    for (int r = 0; r < s->p; r++) {
        first[r] = k;
        long cur = 0;
        double prev_end = 0;
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hp_sched_action *a = &s->actions[r][i];
            if (!hp__sched_is_compute(a->op)) continue;
            cell *c = &cells[k++];
            double t0 = tl->start[r][i], t1 = tl->end[r][i];
            int len = token_of(a, prefix, c->text, sizeof c->text);
            if (a->flags & HP_SCHED_FLAG_OVERLAP) {
                /* The pair's B is the next compute action: one token. */
                int j = i + 1;
                while (j < s->n_actions[r] && !hp__sched_is_compute(s->actions[r][j].op)) j++;
                if (j < s->n_actions[r]) {
                    c->text[len++] = '&';
                    token_of(&s->actions[r][j], prefix, c->text + len, sizeof c->text - (size_t)len);
                    t1 = tl->end[r][j];
                    i = j;
                }
            }
            /* A cell follows the rank's previous one after the rank's idle time before it, in
             * slots: placing every cell at round(start / slot) would open a column wherever actions
             * a little longer than the slot have added up to one (a bubble drawn where there is none). */
            c->col = cur + lround(fmax(t0 - prev_end, 0.0) / slot);
            prev_end = t1;
            c->width = lround((t1 - t0) / slot);
            if (c->width < 1) c->width = 1;
            cur = c->col + c->width;
            if (strlen(c->text) > width) width = strlen(c->text);
        }
        if (cur > ncols) ncols = cur;
    }
    first[s->p] = k;

    char line[128];
    snprintf(line, sizeof line, "schedule %s p=%d m=%d v=%d\n", hp_sched_kind_name(s->kind), s->p, s->m, s->v);
    sb_str(&b, line);
    int rw = snprintf(line, sizeof line, "%d", s->p - 1);
    for (int r = 0; r < s->p; r++) {
        snprintf(line, sizeof line, "rank %*d:", rw, r);
        sb_str(&b, line);
        long col = 0;
        size_t pending = 0; /* spaces owed before the next cell (trailing blanks are never written) */
        for (int c = first[r]; c < first[r + 1]; c++) {
            for (; col < cells[c].col; col++) {
                sb_pad(&b, pending + 1);
                sb_str(&b, ".");
                pending = width - 1;
            }
            sb_pad(&b, pending + 1);
            sb_str(&b, cells[c].text);
            pending = width - strlen(cells[c].text);
            for (long j = 1; j < cells[c].width; j++) {
                sb_pad(&b, pending + 1);
                sb_str(&b, "-");
                pending = width - 1;
            }
            col = cells[c].col + cells[c].width;
        }
        for (; col < ncols; col++) {
            sb_pad(&b, pending + 1);
            sb_str(&b, ".");
            pending = width - 1;
        }
        sb_str(&b, "\n");
    }
    if (b.oom) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule rendering (%zu bytes)", b.cap * 2);
        free(b.p);
        b.p = NULL;
    }
    *out = b.p;
done:
    free(cells);
    free(first);
    hp_sched_timeline_free(&own);
    return st;
}

/* ---------------------------------------------------------------- parsing */

/* Reads a non-negative decimal at *q (advancing it); -1 when there is none or it overflows. */
static long read_uint(const char **q) {
    if (!isdigit((unsigned char)**q)) return -1;
    long v = 0;
    while (isdigit((unsigned char)**q)) {
        if (v > 100000000) return -1;
        v = v * 10 + (**q - '0');
        (*q)++;
    }
    return v;
}

/* One half of a token: [stage]OPmb. Returns false on a malformed token. */
static bool parse_half(const char *t, const char *end, int rank, hp_sched_action *a) {
    const char *q = t;
    long stage = read_uint(&q);
    if (stage < 0) stage = rank;
    memset(a, 0, sizeof *a);
    a->peer = -1;
    if (end - q >= 2 && q[0] == 'B' && q[1] == 'W') {
        a->op = HP_SCHED_OP_B, a->flags = HP_SCHED_FLAG_FULL_BACKWARD, q += 2;
    } else if (q < end && (*q == 'F' || *q == 'B' || *q == 'W')) {
        a->op = *q == 'F' ? HP_SCHED_OP_F : *q == 'B' ? HP_SCHED_OP_B : HP_SCHED_OP_W;
        q++;
    } else {
        return false;
    }
    long mb = read_uint(&q);
    if (mb < 0 || q != end) return false;
    a->stage = (int32_t)stage;
    a->mb = (int32_t)mb;
    return true;
}

typedef struct parse_ctx {
    const char *name;
    int line;
} parse_ctx;

#define PERR(ctx, ...) hp_error_prefix(hp_error(HP_STATUS_CORRUPT, __VA_ARGS__), "%s:%d: ", (ctx)->name, (ctx)->line)

/* Splits the text into lines in place (a private copy). */
static char *next_line(char **cursor) {
    char *l = *cursor;
    if (!l || !*l) return NULL;
    char *nl = strchr(l, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = l + strlen(l);
    }
    size_t n = strlen(l);
    if (n && l[n - 1] == '\r') l[n - 1] = '\0';
    return l;
}

static char *skip_ws(char *q) {
    while (*q == ' ' || *q == '\t') q++;
    return q;
}

/* "rank R:" at q; returns the rest of the line after ':' or NULL (with *rank = -1 when the line is not
 * a rank row at all). */
static char *row_header(char *q, long *rank) {
    *rank = -1;
    if (strncmp(q, "rank", 4) != 0) return NULL;
    q = skip_ws(q + 4);
    const char *c = q;
    long r = read_uint(&c);
    q = skip_ws((char *)c);
    if (r < 0 || *q != ':') {
        *rank = -2;
        return NULL;
    }
    *rank = r;
    return q + 1;
}

hp_status hp_schedule_parse(const char *text, const char *name, hp_schedule *out) {
    if (!text || !out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_parse: NULL argument");
    memset(out, 0, sizeof *out);
    parse_ctx ctx = {name ? name : "<schedule>", 0};
    hp_status st = HP_STATUS_OK;
    char *copy = strdup(text);
    int *row_line = NULL, *stage_rank = NULL;
    hp__sched_lists l = {0};
    if (!copy) return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: copy of %zu bytes", ctx.name, strlen(text));

    /* Pass 1: the header and the rank rows. */
    long hp_p = -1, hp_m = -1, hp_v = -1, max_rank = -1;
    int header_line = 0;
    char *cur = copy, *ln;
    while ((ln = next_line(&cur))) {
        ctx.line++;
        char *q = skip_ws(ln);
        if (!*q || *q == '#') continue;
        long r;
        if (row_header(q, &r)) {
            if (r > max_rank) max_rank = r;
            continue;
        }
        if (r == -2) {
            st = PERR(&ctx, "a row starts 'rank R:' with R a rank number: '%.40s'", q);
            goto done;
        }
        if (strncmp(q, "schedule", 8) == 0 && (q[8] == ' ' || q[8] == '\t' || !q[8]) && !header_line) {
            header_line = ctx.line;
            char *save = NULL, *tok = strtok_r(q + 8, " \t", &save);
            tok = tok ? strtok_r(NULL, " \t", &save) : NULL; /* skip the name */
            for (; tok; tok = strtok_r(NULL, " \t", &save)) {
                long *dst = tok[0] == 'p' ? &hp_p : tok[0] == 'm' ? &hp_m : tok[0] == 'v' ? &hp_v : NULL;
                const char *c = tok + 2;
                long val = tok[0] && tok[1] == '=' ? read_uint(&c) : -1;
                if (!dst || val < 1 || *c) {
                    st = PERR(&ctx, "header field '%s': expected p=N, m=N or v=N with N >= 1", tok);
                    goto done;
                }
                *dst = val;
            }
            continue;
        }
        st = PERR(&ctx, "expected 'schedule NAME p=P m=M', 'rank R: TOKENS', a comment or a blank line, got '%.40s'", q);
        goto done;
    }
    if (max_rank < 0) {
        ctx.line = 0;
        st = hp_error(HP_STATUS_CORRUPT, "%s: no 'rank R:' rows", ctx.name);
        goto done;
    }
    if (max_rank > 65535) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: rank %ld is above 65535", ctx.name, max_rank);
        goto done;
    }
    int p = (int)max_rank + 1;
    if (hp_p > 0 && hp_p != p) {
        ctx.line = header_line;
        st = PERR(&ctx, "the header says p=%ld but the rows name ranks up to %d", hp_p, p - 1);
        goto done;
    }
    row_line = calloc((size_t)p, sizeof *row_line);
    if (!row_line || (st = hp__sched_lists_init(&l, p)) != HP_STATUS_OK) {
        if (!row_line) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: %d rows", ctx.name, p);
        goto done;
    }

    /* Pass 2: the tokens. */
    free(copy);
    copy = strdup(text);
    if (!copy) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: copy of %zu bytes", ctx.name, strlen(text));
        goto done;
    }
    cur = copy;
    ctx.line = 0;
    long max_stage = -1, max_mb = -1;
    while ((ln = next_line(&cur))) {
        ctx.line++;
        long r;
        char *q = row_header(skip_ws(ln), &r);
        if (!q) continue;
        if (row_line[r]) {
            st = PERR(&ctx, "rank %ld has a second row (the first is line %d)", r, row_line[r]);
            goto done;
        }
        row_line[r] = ctx.line;
        int col = 0;
        char *save = NULL;
        for (char *tok = strtok_r(q, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save), col++) {
            if (strcmp(tok, ".") == 0 || strcmp(tok, "-") == 0) continue;
            char *amp = strchr(tok, '&');
            char *end1 = amp ? amp : tok + strlen(tok);
            hp_sched_action a[2];
            int n = 1;
            bool ok = parse_half(tok, end1, (int)r, &a[0]);
            if (ok && amp) {
                ok = parse_half(amp + 1, amp + 1 + strlen(amp + 1), (int)r, &a[1]) && a[0].op == HP_SCHED_OP_F &&
                     a[1].op == HP_SCHED_OP_B;
                a[0].flags |= HP_SCHED_FLAG_OVERLAP;
                n = 2;
            }
            if (!ok) {
                st = PERR(&ctx,
                          "rank %ld column %d: token '%s' is not [stage]OPmb with OP one of F, B, W, BW (or an "
                          "overlapped pair F..&B..), '.' or '-'",
                          r, col, tok);
                goto done;
            }
            for (int h = 0; h < n; h++) {
                if (hp_m > 0 && a[h].mb >= hp_m) {
                    st = PERR(&ctx, "rank %ld column %d: token '%s' names micro-batch %d, but the header says m=%ld", r,
                              col, tok, (int)a[h].mb, hp_m);
                    goto done;
                }
                if (a[h].stage > max_stage) max_stage = a[h].stage;
                if (a[h].mb > max_mb) max_mb = a[h].mb;
                hp__sched_push(&l, (int)r, (hp_sched_op)a[h].op, a[h].stage, a[h].mb, a[h].flags);
            }
        }
    }
    if ((st = l.st) != HP_STATUS_OK) goto done;
    for (int r = 0; r < p; r++)
        if (!row_line[r]) {
            st = hp_error(HP_STATUS_CORRUPT, "%s: no row for rank %d (rows name ranks up to %d)", ctx.name, r, p - 1);
            goto done;
        }
    if (max_stage < 0) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: the rows hold no action", ctx.name);
        goto done;
    }
    if (max_stage > 1048575) {
        st = hp_error(HP_STATUS_CORRUPT, "%s: stage %ld is above 2^20", ctx.name, max_stage);
        goto done;
    }
    int n_stages = (int)max_stage + 1, m = hp_m > 0 ? (int)hp_m : (int)max_mb + 1;
    stage_rank = malloc((size_t)n_stages * sizeof *stage_rank);
    if (!stage_rank) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "%s: %d stages", ctx.name, n_stages);
        goto done;
    }
    for (int s = 0; s < n_stages; s++) stage_rank[s] = -1;
    for (int r = 0; r < p; r++)
        for (int i = 0; i < l.n[r]; i++) {
            int s = l.a[r][i].stage;
            if (stage_rank[s] >= 0 && stage_rank[s] != r) {
                ctx.line = row_line[r];
                st = PERR(&ctx, "stage %d appears on rank %d and on rank %d (a stage lives on one rank)", s,
                          stage_rank[s], r);
                goto done;
            }
            stage_rank[s] = r;
        }
    for (int s = 0; s < n_stages; s++)
        if (stage_rank[s] < 0) {
            st = hp_error(HP_STATUS_CORRUPT, "%s: stage %d appears on no rank (the tokens name stages up to %d)",
                          ctx.name, s, n_stages - 1);
            goto done;
        }
    st = hp_schedule_from_compute(HP_SCHED_KIND_USER, p, m, n_stages, stage_rank, (const hp_sched_action *const *)l.a,
                                  l.n, out);
    if (st != HP_STATUS_OK) {
        st = hp_error_prefix(HP_STATUS_CORRUPT, "%s: ", ctx.name);
        goto done;
    }
    if (hp_v > 0 && hp_v != out->v) {
        ctx.line = header_line;
        st = PERR(&ctx, "the header says v=%ld but the rows place up to %d stages on a rank", hp_v, out->v);
        hp_schedule_free(out);
        goto done;
    }
done:
    free(copy);
    free(row_line);
    free(stage_rank);
    hp__sched_lists_free(&l);
    return st;
}

hp_status hp_schedule_load(const char *path, hp_schedule *out) {
    if (!path || !out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_load: NULL argument");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return hp_error(HP_STATUS_IO, "cannot open schedule file %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *q = realloc(buf, cap);
            if (!q) {
                free(buf);
                fclose(f);
                return hp_error(HP_STATUS_OUT_OF_MEMORY, "reading schedule file %s (%zu bytes)", path, cap);
            }
            buf = q;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return hp_error(HP_STATUS_IO, "reading schedule file %s failed", path);
    }
    buf[n] = '\0';
    hp_status st = hp_schedule_parse(buf, path, out);
    free(buf);
    return st;
}
