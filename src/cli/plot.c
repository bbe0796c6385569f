/*
 * `hp plot METRICS.jsonl [MORE.jsonl ...] -o curves.svg`: training curves from `hp train --metrics`
 * files as a hand-written SVG: a loss panel (training loss of every step as a thin line, the
 * validation loss as a dashed line with a dot at each evaluation), a learning-rate panel and a
 * tokens/s panel, all against step, with ticks, grid lines, axis labels and a legend. Several files
 * are several runs, overlaid in one colour each and labelled by their file name (with the parent
 * directory when two names collide).
 *
 * When a run has "val_bpb" (validation bits per byte, which compares runs of different tokenizers),
 * a last row draws it against step and against training time (the running sum of "step_s").
 *
 * Input lines are JSON objects with "step" and any of "loss", "val_loss", "lr", "tokens_per_s",
 * "val_bpb", "step_s" (other fields are ignored; a field that is missing, null or not a number is
 * left out of that series only, whose line then joins the points either side). A resumed run
 * appends to its file, so a step that is not after the previous line's starts the run again from
 * there: the points at and after it are replaced by the new ones.
 * Blank lines are skipped; a line that is not JSON is an error naming the file and line.
 * Long runs: a series with more points than 2 per pixel column keeps each column's first, lowest,
 * highest and last point, which draws the same picture.
 */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* S_BPB_T is val_bpb against the training time so far (the sum of the lines' step_s) */
enum { S_LOSS, S_VAL, S_LR, S_TOKS, S_BPB, S_BPB_T, S_COUNT };
static const char *field[S_COUNT] = {"loss", "val_loss", "lr", "tokens_per_s", "val_bpb", "val_bpb"};
static const char *series_name[S_COUNT] = {"train_loss", "val_loss", "lr",
                                           "tokens_per_s", "val_bpb", "val_bpb_time"};
/* an evaluation series: dashed, a dot per point */
static bool is_val(int k) { return k == S_VAL || k == S_BPB || k == S_BPB_T; }
static const char *palette[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1",
                                "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#555555"};
#define N_COLORS ((int)(sizeof palette / sizeof palette[0]))

typedef struct series {
    double *x, *y;
    int n, cap;
} series;

typedef struct run {
    char label[160];
    const char *path;
    series s[S_COUNT];
    int lines;
} run;

static bool push(series *s, double x, double y) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return false;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return false;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return true;
}

static void run_free(run *r) {
    for (int k = 0; k < S_COUNT; k++) {
        free(r->s[k].x);
        free(r->s[k].y);
    }
}

/* Reads one metrics file; false (a message printed) when it cannot be read or holds a bad line. */
static bool load(run *r, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "hp: error: plot: cannot open '%s': %s\n", path, strerror(errno));
        return false;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    double last = -INFINITY;
    double *clock = NULL; /* pairs (step, training time so far) of the lines kept (a resume drops some) */
    int n_clock = 0, cap_clock = 0;
    bool ok = true;
    while (ok && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        const char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (!*p) continue;
        cJSON *o = cJSON_Parse(line);
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
        if (!cJSON_IsObject(o) || !cJSON_IsNumber(step) || !isfinite(step->valuedouble)) {
            int show = (int)strcspn(p, "\r\n");
            fprintf(stderr, "hp: error: plot: %s:%d is not a metrics line (a JSON object with a numeric \"step\", as "
                    "hp train --metrics writes): %.*s%s\n", path, lineno, show > 60 ? 60 : show, p, show > 60 ? "..." : "");
            cJSON_Delete(o);
            ok = false;
            break;
        }
        double x = step->valuedouble;
        if (x <= last) { /* a resumed run starts again from x: drop what it replaces */
            for (int k = 0; k < S_COUNT; k++) {
                series *q = &r->s[k];
                if (k == S_BPB_T) /* x is time here: keep the points of the steps kept by S_BPB */
                    q->n = r->s[S_BPB].n < q->n ? r->s[S_BPB].n : q->n;
                else
                    while (q->n > 0 && q->x[q->n - 1] >= x) q->n--;
            }
            while (n_clock > 0 && clock[2 * n_clock - 2] >= x) n_clock--;
        }
        last = x;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "step_s");
        double now = (n_clock ? clock[2 * n_clock - 1] : 0) +
                     (cJSON_IsNumber(dt) && isfinite(dt->valuedouble) ? dt->valuedouble : 0);
        if (n_clock == cap_clock) {
            cap_clock = cap_clock ? 2 * cap_clock : 256;
            double *nc = realloc(clock, 2 * (size_t)cap_clock * sizeof *nc);
            if (!nc) ok = false;
            else clock = nc;
        }
        if (ok) {
            clock[2 * n_clock] = x;
            clock[2 * n_clock + 1] = now;
            n_clock++;
        }
        for (int k = 0; k < S_COUNT && ok; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field[k]);
            if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
                ok = push(&r->s[k], k == S_BPB_T ? now : x, v->valuedouble);
        }
        if (!ok) fprintf(stderr, "hp: error: plot: out of memory reading '%s'\n", path);
        r->lines++;
        cJSON_Delete(o);
    }
    free(line);
    free(clock);
    fclose(f);
    if (ok && r->lines == 0) {
        fprintf(stderr, "hp: error: plot: '%s' holds no metrics lines (is it the file of hp train --metrics?)\n", path);
        ok = false;
    }
    return ok;
}

/* The file name without directory and extension (with the parent directory when `full`). */
static void label_of(const char *path, bool full, char *out, size_t n) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *from = base;
    if (full && base > path) {
        const char *q = base - 1; /* the slash */
        while (q > path && q[-1] != '/') q--;
        from = q;
    }
    snprintf(out, n, "%s", from);
    char *dot = strrchr(out, '.');
    if (dot && dot != out && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".json") || !strcmp(dot, ".txt"))) *dot = '\0';
}

/* Writes s with XML's special characters escaped. */
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

/* A tick label: plain, "k" for thousands, or scientific for small non-zero values. */
static void tick_label(double v, double step, char *buf, size_t n) {
    if (fabs(v) < step * 1e-6) v = 0;
    if (v == 0) snprintf(buf, n, "0");
    else if (fabs(v) >= 1e4 && step >= 100) snprintf(buf, n, "%gk", v / 1e3);
    else if (fabs(v) < 1e-3) snprintf(buf, n, "%.3g", v);
    else snprintf(buf, n, "%.6g", v);
}

typedef struct panel {
    double x, y, w, h; /* the plot area (px) */
    const char *title, *ylabel, *xlabel;
    int which[2], n_which;
    bool zero_based;   /* the y axis starts at 0 (rates) */
    int id;
} panel;

/* The points of s as "x,y " pairs relative to (x0, y0) with scales sx, sy: every point, or, when
 * there are more than 2 per pixel column, each column's first, lowest, highest and last. */
static void emit_points(FILE *f, const series *s, double x0, double sx, double y0, double sy, double px_w) {
    bool thin = s->n > 2 * (int)px_w;
    for (int i = 0; i < s->n;) {
        double col = floor((s->x[i] - x0) * sx);
        int j = i, lo = i, hi = i;
        if (thin)
            while (j + 1 < s->n && floor((s->x[j + 1] - x0) * sx) == col) {
                j++;
                if (s->y[j] < s->y[lo]) lo = j;
                if (s->y[j] > s->y[hi]) hi = j;
            }
        int keep[4] = {i, lo < hi ? lo : hi, lo < hi ? hi : lo, j};
        for (int k = 0; k < 4; k++) {
            if (k > 0 && keep[k] == keep[k - 1]) continue;
            int q = keep[k];
            fprintf(f, "%.2f,%.2f ", (s->x[q] - x0) * sx, y0 - (s->y[q]) * sy);
        }
        i = j + 1;
    }
}

static void draw_panel(FILE *f, const panel *p, run *runs, int nr, double xmin, double xmax) {
    double lo = INFINITY, hi = -INFINITY;
    int points = 0;
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < p->n_which; k++) {
            const series *s = &runs[r].s[p->which[k]];
            for (int i = 0; i < s->n; i++) {
                lo = fmin(lo, s->y[i]);
                hi = fmax(hi, s->y[i]);
            }
            points += s->n;
        }
    fprintf(f, "<g class=\"panel\" id=\"panel-%d\">\n", p->id);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", p->x, p->y - 10,
            p->title);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fcfcfc\" stroke=\"#999\"/>\n", p->x,
            p->y, p->w, p->h);
    if (!points) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no data in the metrics</text>\n</g>\n",
                p->x + p->w / 2, p->y + p->h / 2);
        return;
    }
    if (p->zero_based && lo > 0) lo = 0;
    if (hi - lo < 1e-12 * fmax(1, fabs(hi))) { /* a flat series: a band around it */
        double d = fabs(hi) > 0 ? 0.1 * fabs(hi) : 1;
        lo -= p->zero_based && lo == 0 ? 0 : d;
        hi += d;
    }
    double pad = 0.05 * (hi - lo);
    if (!(p->zero_based && lo == 0)) lo -= pad;
    hi += pad;
    /* grid and ticks: y */
    double ys = nice_step(hi - lo, 5);
    char buf[64];
    for (double v = ceil(lo / ys) * ys; v <= hi + 1e-9 * ys; v += ys) {
        double y = p->y + p->h - (v - lo) / (hi - lo) * p->h;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#e4e4e4\"/>\n", p->x, y, p->x + p->w, y);
        tick_label(v, ys, buf, sizeof buf);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#666\"/>"
                   "<text x=\"%.1f\" y=\"%.2f\" text-anchor=\"end\" fill=\"#444\">%s</text>\n",
                p->x - 4, y, p->x, y, p->x - 7, y + 4, buf);
    }
    /* grid and ticks: x */
    double xs = fmax(1, nice_step(xmax - xmin, p->w > 500 ? 10 : 5)); /* steps are whole numbers */
    for (double v = ceil(xmin / xs) * xs; v <= xmax + 1e-9 * xs; v += xs) {
        double x = p->x + (v - xmin) / (xmax - xmin) * p->w;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", x, p->y, x, p->y + p->h);
        tick_label(v, xs, buf, sizeof buf);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#666\"/>"
                   "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#444\">%s</text>\n",
                x, p->y + p->h, x, p->y + p->h + 4, x, p->y + p->h + 17, buf);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\">%s</text>\n", p->x + p->w / 2,
            p->y + p->h + 34, p->xlabel);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" fill=\"#222\">%s</text>\n",
            p->x - 52, p->y + p->h / 2, p->ylabel);
    /* the series, clipped to the plot area, in a group translated to its origin */
    fprintf(f, "<clipPath id=\"clip-%d\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
            p->id, p->x, p->y, p->w, p->h);
    fprintf(f, "<g clip-path=\"url(#clip-%d)\">\n", p->id);
    double sx = p->w / (xmax - xmin), sy = p->h / (hi - lo), oy = p->y + p->h + lo * sy;
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < p->n_which; k++) {
            int w = p->which[k];
            const series *s = &runs[r].s[w];
            if (!s->n) continue;
            const char *color = palette[r % N_COLORS];
            bool val = is_val(w);
            fprintf(f, "<polyline class=\"series\" data-run=\"");
            xml_text(f, runs[r].label);
            fprintf(f, "\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s "
                       "stroke-linejoin=\"round\" transform=\"translate(%.1f,0)\" points=\"",
                    series_name[w], color, val ? "2" : "1.3", val ? " stroke-dasharray=\"6 3\"" : "", p->x);
            emit_points(f, s, xmin, sx, oy, sy, p->w);
            fprintf(f, "\"><title>");
            xml_text(f, runs[r].label);
            fprintf(f, ": %s, %d points</title></polyline>\n", series_name[w], s->n);
        }
    fputs("</g>\n", f);
    /* a dot per evaluation, outside the clip (a dot on the frame stays whole) */
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < p->n_which; k++) {
            const series *s = &runs[r].s[p->which[k]];
            if (!is_val(p->which[k]) || s->n > 200) continue;
            for (int i = 0; i < s->n; i++)
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"><title>%s %g: %s %.4f</title>"
                           "</circle>\n", p->x + (s->x[i] - xmin) * sx, oy - s->y[i] * sy, palette[r % N_COLORS],
                        p->which[k] == S_BPB_T ? "training time (s)" : "step", s->x[i],
                        p->which[k] == S_VAL ? "val loss" : "val bits/byte", s->y[i]);
        }
    fputs("</g>\n", f);
}

static void draw(FILE *f, run *runs, int nr, double width) {
    double xmin = INFINITY, xmax = -INFINITY, tmax = 0;
    bool any_val = false, any_bpb = false;
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < S_COUNT; k++) {
            const series *s = &runs[r].s[k];
            if (k == S_BPB_T) {
                if (s->n) tmax = fmax(tmax, s->x[s->n - 1]);
                any_bpb |= s->n > 0;
            } else if (s->n) {
                xmin = fmin(xmin, s->x[0]);
                xmax = fmax(xmax, s->x[s->n - 1]);
            }
            if (k == S_VAL && s->n) any_val = true;
        }
    if (!(xmax > xmin)) { /* one step, or none: a unit range around it */
        if (!isfinite(xmin)) xmin = xmax = 0;
        xmin -= 0.5;
        xmax += 0.5;
    }
    /* legend: one entry per run and line style, wrapped into rows */
    double lx = 80, ly = 50, row_h = 20;
    int legend_rows = 1;
    double cx = lx;
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < (any_val ? 2 : 1); v++) {
            double w = 48 + 7.0 * (double)(strlen(runs[r].label) + (v ? 9 : 11));
            if (cx + w > width - 20 && cx > lx) {
                cx = lx;
                legend_rows++;
            }
            cx += w;
        }
    double top = ly + legend_rows * row_h + 30;
    double main_h = 320, small_h = 220, gap = 96, left = 80, right = 24;
    double bpb_top = top + main_h + gap + small_h + gap; /* the bits-per-byte row, when a run has val_bpb */
    double height = (any_bpb ? bpb_top + small_h : top + main_h + gap + small_h) + 56;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width, height);
    fprintf(f, "<text x=\"20\" y=\"26\" font-size=\"15\" font-weight=\"bold\">Training curves: %d run%s, steps %g to "
               "%g</text>\n", nr, nr == 1 ? "" : "s", xmin, xmax);
    cx = lx;
    double cy = ly;
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < (any_val ? 2 : 1); v++) {
            double w = 48 + 7.0 * (double)(strlen(runs[r].label) + (v ? 9 : 11));
            if (cx + w > width - 20 && cx > lx) {
                cx = lx;
                cy += row_h;
            }
            const char *color = palette[r % N_COLORS];
            fprintf(f, "<g class=\"legend\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"%s\"%s/>", cx, cy - 4, cx + 30, cy - 4, color, v ? "2" : "1.3",
                    v ? " stroke-dasharray=\"6 3\"" : "");
            if (v) fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", cx + 15, cy - 4, color);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", cx + 36, cy);
            xml_text(f, runs[r].label);
            fprintf(f, " %s</text></g>\n", v ? "val loss" : "train loss");
            cx += w;
        }
    double pw = width - left - right, half = (pw - left - 10) / 2;
    panel loss = {left, top, pw, main_h, "Loss (cross-entropy, nats/token)", "loss", "step", {S_LOSS, S_VAL}, 2,
                  false, 0};
    panel lr = {left, top + main_h + gap, half, small_h, "Learning rate", "lr", "step", {S_LR, 0}, 1, true, 1};
    panel tps = {left + half + left + 10, top + main_h + gap, half, small_h, "Throughput (tokens/s)", "tokens/s",
                 "step", {S_TOKS, 0}, 1, true, 2};
    draw_panel(f, &loss, runs, nr, xmin, xmax);
    draw_panel(f, &lr, runs, nr, xmin, xmax);
    draw_panel(f, &tps, runs, nr, xmin, xmax);
    if (any_bpb) { /* comparable across tokenizers: bits per byte of the text, against step and time */
        panel bs = {left, bpb_top, half, small_h, "Validation bits per byte", "bits/byte", "step", {S_BPB, 0}, 1,
                    false, 3};
        panel bt = {left + half + left + 10, bpb_top, half, small_h, "Validation bits per byte against time",
                    "bits/byte", "training time (s, the sum of step_s)", {S_BPB_T, 0}, 1, false, 4};
        draw_panel(f, &bs, runs, nr, xmin, xmax);
        draw_panel(f, &bt, runs, nr, 0, tmax > 0 ? tmax : 1);
    }
    fputs("</svg>\n", f);
}

int hp_cli_plot(int argc, char **argv) {
    const char *out = NULL;
    double width = 1000;
    const char **in = calloc((size_t)argc + 1, sizeof *in);
    int n_in = 0;
    if (!in) return 1;
    for (int i = 0; i < argc; i++) {
        bool takes = !strcmp(argv[i], "-o") || !strcmp(argv[i], "--width");
        if (takes && !hp_cli_has_value(argc, argv, i)) {
            free(in);
            return 2;
        }
        if (!strcmp(argv[i], "-o")) out = argv[++i];
        else if (!strcmp(argv[i], "--width")) {
            if (!hp_cli_double("--width", argv[++i], 500, 10000, &width)) {
                free(in);
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "hp: error: unknown option '%s' for plot\n", argv[i]);
            free(in);
            return 2;
        } else
            in[n_in++] = argv[i];
    }
    if (!n_in || !out) {
        fprintf(stderr, "usage: hp plot METRICS.jsonl [MORE.jsonl ...] -o CURVES.svg [--width PX]\n");
        free(in);
        return 2;
    }
    run *runs = calloc((size_t)n_in, sizeof *runs);
    int rc = 1;
    if (!runs) goto done;
    for (int r = 0; r < n_in; r++) {
        runs[r].path = in[r];
        if (!load(&runs[r], in[r])) goto done;
    }
    for (int r = 0; r < n_in; r++) { /* labels: file names, with the directory where two collide */
        char a[160], b[160];
        label_of(in[r], false, a, sizeof a);
        bool clash = false;
        for (int q = 0; q < n_in; q++) {
            label_of(in[q], false, b, sizeof b);
            clash |= q != r && !strcmp(a, b);
        }
        label_of(in[r], clash, runs[r].label, sizeof runs[r].label);
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "hp: error: plot: cannot write '%s': %s\n", out, strerror(errno));
        goto done;
    }
    draw(f, runs, n_in, width);
    if (fclose(f) != 0) {
        fprintf(stderr, "hp: error: plot: cannot write '%s': %s\n", out, strerror(errno));
        goto done;
    }
    for (int r = 0; r < n_in; r++)
        fprintf(stderr, "plot: %s: %d lines, %d train loss, %d val loss, %d lr, %d tokens/s, %d val bits/byte points\n",
                runs[r].label, runs[r].lines, runs[r].s[S_LOSS].n, runs[r].s[S_VAL].n, runs[r].s[S_LR].n,
                runs[r].s[S_TOKS].n, runs[r].s[S_BPB].n);
    fprintf(stderr, "plot: wrote %s\n", out);
    rc = 0;
done:
    for (int r = 0; runs && r < n_in; r++) run_free(&runs[r]);
    free(runs);
    free(in);
    return rc;
}
