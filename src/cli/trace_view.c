/*
 * `hp trace-view FILE.json -o timeline.svg`: draws a Chrome trace-event file (hp train --trace) as
 * an SVG timeline: one row per rank and stream (the file's pid and tid, named by its process_name
 * and thread_name metadata, ordered by their sort indices), spans coloured by kind (forward,
 * backward, weight-gradient and optimizer compute, collectives, point-to-point, copies, waits),
 * step spans as a thin band above their row, and a time axis in milliseconds. Spans narrower than a
 * pixel that touch a neighbour of the same colour are drawn as one rectangle, so a long trace stays
 * a small file; wider spans carry a tooltip (<title>) with name, detail, duration and bytes.
 */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LABEL_W 190.0 /* px: the row labels */
#define ROW_H 22.0
#define RANK_GAP 10.0
#define TOP 58.0      /* px: title and time axis */

typedef struct row {
    int pid, tid;
    int psort, tsort;
    int orig;      /* its index before sorting */
    char name[96];
} row;

typedef struct span {
    int row;
    double ts, dur;     /* us */
    const char *name, *cat, *phase, *detail;
    double bytes;       /* < 0: none */
    int step;
} span;

typedef struct view {
    row *rows;
    int n_rows, cap_rows;
    span *spans;
    int n_spans, cap_spans;
    char (*pnames)[64]; /* per pid seen in process_name events */
    int *pname_pid, n_pnames;
} view;

/* The colour of a span: by kind, compute by phase. */
static const char *color_of(const span *s) {
    const char *c = s->cat ? s->cat : "";
    if (!strcmp(c, "comm")) return "#e15759";
    if (!strcmp(c, "p2p")) return "#ff9da7";
    if (!strcmp(c, "copy")) return "#76b7b2";
    if (!strcmp(c, "wait")) return "#c9c9c9";
    if (!strcmp(c, "step")) return "#555555";
    const char *p = s->phase ? s->phase : "";
    if (!strcmp(p, "F")) return "#4e79a7";
    if (!strcmp(p, "B")) return "#f28e2b";
    if (!strcmp(p, "W")) return "#59a14f";
    if (!strcmp(p, "opt")) return "#b07aa1";
    return "#9c9c9c";
}

static const struct {
    const char *label, *color;
} legend[] = {
    {"forward (F)", "#4e79a7"}, {"backward (B)", "#f28e2b"}, {"weight grad (W)", "#59a14f"},
    {"optimizer", "#b07aa1"},   {"collective", "#e15759"},   {"send/recv", "#ff9da7"},
    {"copy", "#76b7b2"},        {"wait", "#c9c9c9"},         {"step", "#555555"},
};

static int find_row(view *v, int pid, int tid) {
    for (int r = 0; r < v->n_rows; r++)
        if (v->rows[r].pid == pid && v->rows[r].tid == tid) return r;
    if (v->n_rows == v->cap_rows) {
        int cap = v->cap_rows ? v->cap_rows * 2 : 16;
        row *p = realloc(v->rows, (size_t)cap * sizeof *p);
        if (!p) return -1;
        v->rows = p;
        v->cap_rows = cap;
    }
    row *r = &v->rows[v->n_rows];
    *r = (row){.pid = pid, .tid = tid, .psort = pid, .tsort = tid, .orig = v->n_rows};
    snprintf(r->name, sizeof r->name, "tid %d", tid);
    return v->n_rows++;
}

static const char *str_item(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static bool num_item(const cJSON *o, const char *key, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x)) return false;
    *out = x->valuedouble;
    return true;
}

/* Reads the events into rows and spans; false (with a message printed) on a malformed file. */
static bool load(view *v, const cJSON *events, const char *path) {
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, events) {
        const char *ph = str_item(e, "ph"), *name = str_item(e, "name");
        double pid, tid;
        if (!ph || !num_item(e, "pid", &pid) || !num_item(e, "tid", &tid)) {
            fprintf(stderr, "hp: error: %s: event %d has no ph, pid or tid\n", path, i);
            return false;
        }
        i++;
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        int r = find_row(v, (int)pid, (int)tid);
        if (r < 0) return false;
        if (!strcmp(ph, "M") && name) {
            const char *an = str_item(args, "name");
            double sort;
            if (!strcmp(name, "thread_name") && an) snprintf(v->rows[r].name, sizeof v->rows[r].name, "%s", an);
            if (!strcmp(name, "thread_sort_index") && num_item(args, "sort_index", &sort)) v->rows[r].tsort = (int)sort;
            if (!strcmp(name, "process_sort_index") && num_item(args, "sort_index", &sort))
                for (int k = 0; k < v->n_rows; k++)
                    if (v->rows[k].pid == (int)pid) v->rows[k].psort = (int)sort;
            if (!strcmp(name, "process_name") && an) {
                int *pp = realloc(v->pname_pid, (size_t)(v->n_pnames + 1) * sizeof *pp);
                char(*pn)[64] = realloc(v->pnames, (size_t)(v->n_pnames + 1) * sizeof *pn);
                if (pp) v->pname_pid = pp;
                if (pn) v->pnames = pn;
                if (!pp || !pn) return false;
                v->pname_pid[v->n_pnames] = (int)pid;
                snprintf(v->pnames[v->n_pnames++], 64, "%s", an);
            }
            continue;
        }
        if (strcmp(ph, "X") != 0) continue;
        span s = {.row = r, .name = name ? name : "", .cat = str_item(e, "cat"), .bytes = -1, .step = -1};
        if (!num_item(e, "ts", &s.ts) || !num_item(e, "dur", &s.dur) || s.dur < 0) {
            fprintf(stderr, "hp: error: %s: span '%s' has no ts or a bad dur\n", path, s.name);
            return false;
        }
        s.phase = str_item(args, "phase");
        s.detail = str_item(args, "detail");
        num_item(args, "bytes", &s.bytes);
        double step;
        if (num_item(args, "step", &step)) s.step = (int)step;
        if (v->n_spans == v->cap_spans) {
            int cap = v->cap_spans ? v->cap_spans * 2 : 1024;
            span *p = realloc(v->spans, (size_t)cap * sizeof *p);
            if (!p) return false;
            v->spans = p;
            v->cap_spans = cap;
        }
        v->spans[v->n_spans++] = s;
    }
    return true;
}

static int cmp_row(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->psort != y->psort) return x->psort < y->psort ? -1 : 1;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tsort != y->tsort) return x->tsort < y->tsort ? -1 : 1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

/* Writes s with XML's five special characters escaped. */
static void xml_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

/* A tick spacing of 1, 2 or 5 times a power of ten giving about `n` ticks over `range`. */
static double nice_step(double range, int n) {
    double raw = range / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct pending { /* a run of sub-pixel spans merged into one rectangle */
    double x0, x1, y, h;
    const char *color;
    int n;
} pending;

static void flush(FILE *f, pending *p) {
    if (p->n) fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>\n", p->x0, p->y,
                      p->x1 - p->x0 < 0.3 ? 0.3 : p->x1 - p->x0, p->h, p->color);
    p->n = 0;
}

static void draw(FILE *f, view *v, const char *path, double t0, double t1, double width) {
    double plot_w = width - LABEL_W - 20, scale = plot_w / (t1 - t0); /* px per us */
    int *row_of = malloc((size_t)v->n_rows * sizeof *row_of);
    double *row_y = malloc((size_t)v->n_rows * sizeof *row_y);
    if (!row_of || !row_y) {
        free(row_of);
        free(row_y);
        return;
    }
    double y = TOP;
    for (int r = 0; r < v->n_rows; r++) {
        if (r > 0 && v->rows[r].pid != v->rows[r - 1].pid) y += RANK_GAP;
        row_y[r] = y;
        y += ROW_H;
    }
    double height = y + 50;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width, height);
    fprintf(f, "<text x=\"10\" y=\"18\" font-size=\"13\" font-weight=\"bold\">");
    xml_text(f, path);
    fprintf(f, "</text>\n<text x=\"%.0f\" y=\"18\" text-anchor=\"end\">%.3f ms to %.3f ms (%.3f ms)</text>\n",
            width - 20, t0 / 1e3, t1 / 1e3, (t1 - t0) / 1e3);
    /* time axis: ticks and grid lines */
    double step = nice_step((t1 - t0) / 1e3, 10) * 1e3;
    for (double t = ceil(t0 / step) * step; t <= t1 + 1e-9; t += step) {
        double x = LABEL_W + (t - t0) * scale;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#e4e4e4\"/>\n", x, TOP - 8, x, y);
        fprintf(f, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#444\">%g ms</text>\n", x, TOP - 12,
                round(t / 1e3 * 1e6) / 1e6);
    }
    for (int r = 0; r < v->n_rows; r++) {
        const row *w = &v->rows[r];
        const char *pname = NULL;
        for (int k = 0; k < v->n_pnames; k++)
            if (v->pname_pid[k] == w->pid) pname = v->pnames[k];
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>\n", LABEL_W, row_y[r] + 1,
                plot_w, ROW_H - 2, r % 2 ? "#fafafa" : "#f3f3f3");
        fprintf(f, "<text x=\"8\" y=\"%.1f\">", row_y[r] + ROW_H / 2 + 4);
        if (pname) xml_text(f, pname);
        else fprintf(f, "pid %d", w->pid);
        fputs(" \xc2\xb7 ", f);
        xml_text(f, w->name);
        fputs("</text>\n", f);
    }
    /* spans: per row in file order (a track's spans are recorded in time order) */
    pending *pend = calloc((size_t)v->n_rows, sizeof *pend);
    for (int i = 0; i < v->n_spans && pend; i++) {
        const span *s = &v->spans[i];
        double a = s->ts, b = s->ts + s->dur;
        if (b < t0 || a > t1) continue;
        if (a < t0) a = t0;
        if (b > t1) b = t1;
        double x0 = LABEL_W + (a - t0) * scale, x1 = LABEL_W + (b - t0) * scale;
        bool band = s->cat && !strcmp(s->cat, "step");
        double ry = row_y[s->row] + (band ? 1 : 5), rh = band ? 3 : ROW_H - 8;
        const char *color = color_of(s);
        pending *p = &pend[s->row];
        if (x1 - x0 < 1.0 && !band) { /* merge sub-pixel spans with a touching neighbour of their colour */
            if (p->n && p->color == color && x0 - p->x1 < 0.5) {
                if (x1 > p->x1) p->x1 = x1;
                p->n++;
                continue;
            }
            flush(f, p);
            *p = (pending){x0, x1, ry, rh, color, 1};
            continue;
        }
        if (!band) flush(f, p);
        fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>", x0, ry,
                x1 - x0, rh, color);
        xml_text(f, s->name);
        if (s->detail) {
            fputs(" \xe2\x80\x94 ", f);
            xml_text(f, s->detail);
        }
        fprintf(f, "\n%.3f ms", s->dur / 1e3);
        if (s->step >= 0) fprintf(f, ", step %d", s->step);
        if (s->phase) {
            fputs(", phase ", f);
            xml_text(f, s->phase);
        }
        if (s->bytes >= 0) fprintf(f, ", %.0f bytes", s->bytes);
        fputs("</title></rect>\n", f);
        size_t chars = strlen(s->name) + (band && s->step >= 0 ? 6 : 0);
        if (!band && x1 - x0 > 6.5 * (double)chars + 6) {
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\" font-size=\"10\">", x0 + 3, ry + rh - 4);
            xml_text(f, s->name);
            fputs("</text>\n", f);
        }
        if (band && x1 - x0 > 6.0 * (double)chars + 6) {
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"#333\" font-size=\"8\">", x0 + 2, row_y[s->row] - 1);
            xml_text(f, s->name);
            if (s->step >= 0) fprintf(f, " %d", s->step);
            fputs("</text>\n", f);
        }
    }
    for (int r = 0; r < v->n_rows && pend; r++) flush(f, &pend[r]);
    free(pend);
    /* legend */
    double lx = LABEL_W, ly = y + 24;
    for (size_t k = 0; k < sizeof legend / sizeof legend[0]; k++) {
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx, ly - 10, legend[k].color);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", lx + 16, ly, legend[k].label);
        lx += 26 + 6.5 * (double)strlen(legend[k].label);
    }
    fputs("</svg>\n", f);
    free(row_of);
    free(row_y);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        got = fread(buf + n, 1, 65536, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static bool parse_double(const char *s, double *out) {
    char *end;
    *out = strtod(s, &end);
    return *s && !*end;
}

int hp_cli_trace_view(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    double from = NAN, to = NAN, width = 1600, want_step = -1;
    for (int i = 0; i < argc; i++) {
        bool more = i + 1 < argc;
        if (!strcmp(argv[i], "-o") && more) out = argv[++i];
        else if (!strcmp(argv[i], "--from") && more && parse_double(argv[i + 1], &from)) i++;
        else if (!strcmp(argv[i], "--to") && more && parse_double(argv[i + 1], &to)) i++;
        else if (!strcmp(argv[i], "--width") && more && parse_double(argv[i + 1], &width) && width >= 400) i++;
        else if (!strcmp(argv[i], "--step") && more && parse_double(argv[i + 1], &want_step) && want_step >= 0) i++;
        else if (argv[i][0] != '-' && !in) in = argv[i];
        else {
            fprintf(stderr, "hp: error: trace-view: bad argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "usage: hp trace-view FILE.json -o TIMELINE.svg [--step N] [--from MS] [--to MS] [--width PX]\n");
        return 2;
    }
    char *text = read_file(in);
    if (!text) {
        fprintf(stderr, "hp: error: trace-view: cannot read '%s'\n", in);
        return 1;
    }
    cJSON *doc = cJSON_Parse(text);
    free(text);
    const cJSON *events = cJSON_IsArray(doc) ? doc : cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    view v = {0};
    int rc = 1;
    if (!cJSON_IsArray(events)) {
        fprintf(stderr, "hp: error: trace-view: '%s' is not trace-event JSON (no traceEvents array)\n", in);
        goto done;
    }
    if (!load(&v, events, in)) goto done;
    if (!v.n_spans) {
        fprintf(stderr, "hp: error: trace-view: '%s' has no spans\n", in);
        goto done;
    }
    qsort(v.rows, (size_t)v.n_rows, sizeof *v.rows, cmp_row);
    int *map = malloc((size_t)v.n_rows * sizeof *map);
    if (!map) goto done;
    for (int r = 0; r < v.n_rows; r++) map[v.rows[r].orig] = r;
    double t0 = INFINITY, t1 = -INFINITY, s0 = INFINITY, s1 = -INFINITY;
    for (int i = 0; i < v.n_spans; i++) {
        span *sp = &v.spans[i];
        sp->row = map[sp->row];
        if (sp->ts < t0) t0 = sp->ts;
        if (sp->ts + sp->dur > t1) t1 = sp->ts + sp->dur;
        if (sp->step == (int)want_step && sp->cat && !strcmp(sp->cat, "step") && !strcmp(sp->name, "step")) {
            if (sp->ts < s0) s0 = sp->ts;
            if (sp->ts + sp->dur > s1) s1 = sp->ts + sp->dur;
        }
    }
    free(map);
    if (want_step >= 0) {
        if (s1 < s0) {
            fprintf(stderr, "hp: error: trace-view: '%s' has no span of step %.0f\n", in, want_step);
            goto done;
        }
        double pad = 0.02 * (s1 - s0);
        t0 = s0 - pad;
        t1 = s1 + pad;
    }
    if (!isnan(from)) t0 = from * 1e3;
    if (!isnan(to)) t1 = to * 1e3;
    if (!(t1 > t0)) {
        fprintf(stderr, "hp: error: trace-view: empty time window [%g, %g] ms\n", t0 / 1e3, t1 / 1e3);
        goto done;
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "hp: error: trace-view: cannot write '%s'\n", out);
        goto done;
    }
    draw(f, &v, in, t0, t1, width);
    if (fclose(f) != 0) {
        fprintf(stderr, "hp: error: trace-view: cannot write '%s'\n", out);
        goto done;
    }
    fprintf(stderr, "trace-view: %s: %d rows, %d spans, %.3f ms\n", out, v.n_rows, v.n_spans, (t1 - t0) / 1e3);
    rc = 0;
done:
    cJSON_Delete(doc);
    free(v.rows);
    free(v.spans);
    free(v.pnames);
    free(v.pname_pid);
    return rc;
}
