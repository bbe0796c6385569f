/*
 * Checks a trace written by `hp train --trace` (and an SVG drawn by `hp trace-view`), for the
 * trace tests (tests/run_trace.sh). Exits 0 when every check passes, 1 with the failures otherwise.
 *
 *   trace_check TRACE.json [--ranks N] [--cat CAT]... [--svg FILE.svg]
 *
 * Checks: the file parses as {"traceEvents": [...]}; every event has ph, name, pid and tid, every
 * "X" event a cat, ts and dur >= 0; every (pid, tid) with spans has exactly one thread_name event
 * and every pid one process_name; track names are unique per rank and each rank has "compute";
 * the pids are exactly 0..N-1; spans on one track nest or follow each other (no partial overlap);
 * every rank has step spans and compute spans with op, step and phase (F, B and opt); for each
 * --cat, every rank has a span of that kind (a comm, p2p or copy span must carry bytes > 0).
 * --svg: the file is well-formed XML (balanced tags, quoted attributes) with an <svg> root and
 * rectangles.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 64
#define MAX_TRACKS 64
#define EPS 0.01 /* us: the writer rounds to nanoseconds */

static int failures;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "trace_check: " __VA_ARGS__);                                              \
        fputc('\n', stderr);                                                                       \
        if (++failures > 20) exit(1);                                                              \
    } while (0)

typedef struct span {
    double ts, end;
} span;

typedef struct track {
    int n_names;
    char name[96];
    span *s;
    int n, cap;
} track;

static track tracks[MAX_RANKS][MAX_TRACKS];
static int process_names[MAX_RANKS];
static bool rank_seen[MAX_RANKS];
static int n_step[MAX_RANKS], n_phase[MAX_RANKS][3]; /* F, B, opt compute spans with op and step */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = '\0';
    fclose(f);
    return b;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static bool num(const cJSON *o, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x)) return false;
    *v = x->valuedouble;
    return true;
}

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end; /* the enclosing span first */
}

/* Spans of one track nest or follow each other. */
static void check_nesting(int pid, int tid, track *t) {
    qsort(t->s, (size_t)t->n, sizeof *t->s, cmp_span);
    span *stack[256];
    int depth = 0;
    for (int i = 0; i < t->n; i++) {
        span *s = &t->s[i];
        while (depth && stack[depth - 1]->end <= s->ts + EPS) depth--;
        if (depth && s->end > stack[depth - 1]->end + EPS) {
            FAIL("rank %d track %d ('%s'): span [%.3f, %.3f] overlaps [%.3f, %.3f] without nesting", pid, tid, t->name,
                 s->ts, s->end, stack[depth - 1]->ts, stack[depth - 1]->end);
            return;
        }
        if (depth == 256) {
            FAIL("rank %d track %d: spans nested more than 256 deep", pid, tid);
            return;
        }
        stack[depth++] = s;
    }
}

/* A minimal XML well-formedness check: tags balance, attribute values are quoted, one root <svg>. */
static void check_svg(const char *path) {
    char *x = slurp(path);
    if (!x) {
        FAIL("cannot read '%s'", path);
        return;
    }
    char stack[64][32];
    int depth = 0, roots = 0, rects = 0;
    const char *p = x;
    if (!strncmp(p, "<?xml", 5)) p = strstr(p, "?>") ? strstr(p, "?>") + 2 : p + strlen(p);
    while ((p = strchr(p, '<'))) {
        if (p[1] == '/') {
            char name[32];
            int n = 0;
            for (p += 2; isalnum((unsigned char)*p) && n < 31; p++) name[n++] = *p;
            name[n] = '\0';
            if (!depth || strcmp(stack[depth - 1], name)) {
                FAIL("%s: </%s> closes <%s>", path, name, depth ? stack[depth - 1] : "(nothing)");
                break;
            }
            depth--;
            p = strchr(p, '>');
            if (!p) break;
            continue;
        }
        char name[32];
        int n = 0;
        for (p++; (isalnum((unsigned char)*p) || *p == ':') && n < 31; p++) name[n++] = *p;
        name[n] = '\0';
        if (!n) {
            FAIL("%s: '<' not starting a tag", path);
            break;
        }
        if (!depth) roots++;
        if (!depth && strcmp(name, "svg")) FAIL("%s: root element <%s>, not <svg>", path, name);
        if (!strcmp(name, "rect")) rects++;
        /* attributes: name="value" or name='value' */
        for (;;) {
            while (isspace((unsigned char)*p)) p++;
            if (*p == '>' || (*p == '/' && p[1] == '>')) break;
            while (*p && *p != '=' && *p != '>' && !isspace((unsigned char)*p)) p++;
            if (*p != '=' || (p[1] != '"' && p[1] != '\'')) {
                FAIL("%s: unquoted attribute in <%s>", path, name);
                free(x);
                return;
            }
            char q = p[1];
            p = strchr(p + 2, q);
            if (!p) {
                FAIL("%s: unterminated attribute in <%s>", path, name);
                free(x);
                return;
            }
            p++;
        }
        if (*p == '/') p += 2;
        else if (depth < 64) snprintf(stack[depth++], sizeof stack[0], "%s", name);
        else {
            FAIL("%s: nested too deep", path);
            break;
        }
    }
    if (depth) FAIL("%s: <%s> not closed", path, stack[depth - 1]);
    if (roots != 1) FAIL("%s: %d root elements", path, roots);
    if (rects < 2) FAIL("%s: only %d rectangles", path, rects);
    free(x);
}

int main(int argc, char **argv) {
    const char *path = NULL, *svg = NULL, *cats[8];
    int ranks = 1, n_cats = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cat") && i + 1 < argc && n_cats < 8) cats[n_cats++] = argv[++i];
        else if (!strcmp(argv[i], "--svg") && i + 1 < argc) svg = argv[++i];
        else path = argv[i];
    }
    if (!path || ranks < 1 || ranks > MAX_RANKS) {
        fprintf(stderr, "usage: trace_check TRACE.json [--ranks N] [--cat CAT]... [--svg FILE.svg]\n");
        return 2;
    }
    char *text = slurp(path);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    if (!cJSON_IsArray(events)) {
        fprintf(stderr, "trace_check: '%s' is not {\"traceEvents\": [...]}\n", path);
        return 1;
    }
    bool cat_seen[8][MAX_RANKS] = {{false}};
    int n_events = 0, n_spans = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        n_events++;
        const char *ph = str(e, "ph"), *name = str(e, "name");
        double pid, tid;
        if (!ph || !name || !num(e, "pid", &pid) || !num(e, "tid", &tid)) {
            FAIL("event %d lacks ph, name, pid or tid", n_events - 1);
            continue;
        }
        if (pid < 0 || pid >= MAX_RANKS || tid < 0 || tid >= MAX_TRACKS || pid != (int)pid || tid != (int)tid) {
            FAIL("event %d: pid %g / tid %g out of range", n_events - 1, pid, tid);
            continue;
        }
        int r = (int)pid, k = (int)tid;
        track *t = &tracks[r][k];
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (!strcmp(ph, "M")) {
            const char *an = str(args, "name");
            if (!strcmp(name, "thread_name")) {
                if (!an) FAIL("rank %d track %d: thread_name without args.name", r, k);
                t->n_names++;
                snprintf(t->name, sizeof t->name, "%s", an ? an : "");
            } else if (!strcmp(name, "process_name")) {
                process_names[r]++;
            }
            continue;
        }
        if (strcmp(ph, "X")) {
            FAIL("event %d: unexpected ph '%s'", n_events - 1, ph);
            continue;
        }
        n_spans++;
        rank_seen[r] = true;
        double ts, dur;
        const char *cat = str(e, "cat");
        if (!cat || !num(e, "ts", &ts) || !num(e, "dur", &dur) || dur < 0 || ts != ts) {
            FAIL("span %d ('%s'): no cat, ts or dur >= 0", n_events - 1, name);
            continue;
        }
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 1024;
            t->s = realloc(t->s, (size_t)t->cap * sizeof *t->s);
            if (!t->s) return 1;
        }
        t->s[t->n++] = (span){ts, ts + dur};
        double step, bytes = 0;
        bool has_step = num(args, "step", &step), has_bytes = num(args, "bytes", &bytes);
        const char *phase = str(args, "phase"), *op = str(args, "op");
        if (!strcmp(cat, "step") && !strcmp(name, "step") && has_step) n_step[r]++;
        if (!strcmp(cat, "compute") && op && has_step && phase) {
            if (!strcmp(phase, "F")) n_phase[r][0]++;
            if (!strcmp(phase, "B")) n_phase[r][1]++;
            if (!strcmp(phase, "opt")) n_phase[r][2]++;
        }
        for (int c = 0; c < n_cats; c++) {
            bool moves = !strcmp(cat, "comm") || !strcmp(cat, "p2p") || !strcmp(cat, "copy");
            if (!strcmp(cat, cats[c]) && (!moves || (has_bytes && bytes > 0))) cat_seen[c][r] = true;
        }
    }
    for (int r = 0; r < MAX_RANKS; r++) {
        if (rank_seen[r] != (r < ranks)) FAIL("rank %d: %s spans", r, rank_seen[r] ? "unexpected" : "no");
        if (r >= ranks) continue;
        if (process_names[r] != 1) FAIL("rank %d: %d process_name events", r, process_names[r]);
        if (!n_step[r]) FAIL("rank %d: no step spans", r);
        if (!n_phase[r][0] || !n_phase[r][1] || !n_phase[r][2])
            FAIL("rank %d: compute spans with op and step: F %d, B %d, opt %d", r, n_phase[r][0], n_phase[r][1],
                 n_phase[r][2]);
        bool compute = false;
        for (int k = 0; k < MAX_TRACKS; k++) {
            track *t = &tracks[r][k];
            if (t->n && t->n_names != 1) FAIL("rank %d track %d: %d thread_name events", r, k, t->n_names);
            if (t->n_names && !strcmp(t->name, "compute")) compute = true;
            for (int j = 0; j < k; j++)
                if (t->n_names && tracks[r][j].n_names && !strcmp(t->name, tracks[r][j].name))
                    FAIL("rank %d: tracks %d and %d are both '%s'", r, j, k, t->name);
            if (t->n) check_nesting(r, k, t);
        }
        if (!compute) FAIL("rank %d: no 'compute' track", r);
        for (int c = 0; c < n_cats; c++)
            if (!cat_seen[c][r]) FAIL("rank %d: no '%s' span (with bytes)", r, cats[c]);
    }
    if (svg) check_svg(svg);
    for (int r = 0; r < MAX_RANKS; r++)
        for (int k = 0; k < MAX_TRACKS; k++) free(tracks[r][k].s);
    cJSON_Delete(doc);
    free(text);
    if (failures) return 1;
    printf("trace_check: %s: %d events, %d spans, %d rank(s): ok%s\n", path, n_events, n_spans, ranks,
           svg ? " (svg ok)" : "");
    return 0;
}
