/*
 * Pipeline schedules: simulated bubble fraction of every built schedule for p = 2, 4, 8, 16 ranks
 * and m = p, 2p, 4p micro-batches, against the closed-form bubble (hp_schedule_bubble_formula), and
 * the peak in-flight activations against hp_schedule_peak_formula. One JSON line per (schedule, p, m):
 *
 *   bubble, formula, ratio                idle / total over a synchronous step (simulated, closed
 *                                         form, simulated / closed form; null when the form is 0)
 *   bubble_span, formula_span, ratio_span the same with steps overlapping (each rank's own span)
 *   formula_exact                         whether the closed form is exact here (the conditions
 *                                         in hp/schedule.h); otherwise it is a lower bound
 *   vs_1f1b, vs_1f1b_span                 the bubble fraction over 1F1B's on the same model and m
 *   idle_vs_1f1b                          idle seconds per rank (synchronous step) over 1F1B's
 *   peak, peak_formula                    the largest per-rank peak of in-flight activations, in
 *                                         units of one stage's (chunk's, v > 1) micro-batch
 *   build_ms                              building + validating + simulating the schedule
 *
 * Times are per stage (per chunk for interleaved 1F1B with v = 2, ZB-V and DualPipeV): the default
 * F = B = W = 1 s. A 1F1B-family stage holds two chunks' layers, so its times are doubled when the
 * schedules are compared (bubble fractions do not change with the scale).
 *
 *     ./build/bench/bench_schedule [F B W [LATENCY]]
 *
 * With --ranks it simulates one schedule with each rank's own times (every stage a rank holds runs
 * that rank's F, B and W: the times measured per rank from a trace, bench/pipeline.sh) and prints
 * one JSON line with the simulated synchronous bubble and the closed form at the ranks' mean times:
 * the schedule's bubble on stages as unequal as the measured ones, which the closed forms (uniform
 * times) leave out. B is the input-gradient part; under a schedule without W it is the whole backward.
 *
 *     ./build/bench/bench_schedule --ranks SCHEDULE M V F0 B0 W0 F1 B1 W1 ...   (p = the triples given)
 */
#include "hp/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void json_num(const char *key, double x, const char *sep) {
    if (isfinite(x))
        printf("\"%s\":%.6g%s", key, x, sep);
    else
        printf("\"%s\":null%s", key, sep);
}

/* Simulates one schedule; returns the timeline's bubbles and the largest per-rank peak. */
static int run(hp_sched_kind k, int p, int m, int v, const hp_sched_costs *c, double *sync, double *span, int *peak,
               double *step) {
    hp_schedule s;
    hp_sched_timeline tl;
    int *pk = malloc((size_t)p * sizeof *pk);
    if (!pk || hp_schedule_build(k, p, m, v, &s) != HP_STATUS_OK) {
        fprintf(stderr, "bench_schedule: %s p=%d m=%d: %s\n", hp_sched_kind_name(k), p, m, hp_error_message());
        free(pk);
        return 1;
    }
    hp_status st = hp_schedule_validate(&s, NULL, pk, NULL);
    if (st == HP_STATUS_OK) st = hp_schedule_simulate(&s, c, &tl);
    if (st != HP_STATUS_OK) {
        fprintf(stderr, "bench_schedule: %s p=%d m=%d: %s\n", hp_sched_kind_name(k), p, m, hp_error_message());
        hp_schedule_free(&s);
        free(pk);
        return 1;
    }
    *sync = tl.bubble, *span = tl.bubble_span, *step = tl.step_time;
    *peak = 0;
    for (int r = 0; r < p; r++)
        if (pk[r] > *peak) *peak = pk[r];
    hp_sched_timeline_free(&tl);
    hp_schedule_free(&s);
    free(pk);
    return 0;
}

/* --ranks SCHEDULE M V then F B W per rank: one schedule simulated with each rank's own times. */
static int per_rank(int argc, char **argv) {
    if (argc < 8 || (argc - 5) % 3) {
        fprintf(stderr, "usage: bench_schedule --ranks SCHEDULE M V F0 B0 W0 [F1 B1 W1 ...]\n");
        return 2;
    }
    hp_sched_kind kind;
    if (hp_sched_kind_parse(argv[2], &kind) != HP_STATUS_OK) {
        fprintf(stderr, "bench_schedule: %s\n", hp_error_message());
        return 2;
    }
    int m = atoi(argv[3]), v = atoi(argv[4]), p = (argc - 5) / 3;
    hp_schedule s;
    if (hp_schedule_build(kind, p, m, v, &s) != HP_STATUS_OK) {
        fprintf(stderr, "bench_schedule: %s p=%d m=%d v=%d: %s\n", argv[2], p, m, v, hp_error_message());
        return 1;
    }
    double *t = malloc(3 * (size_t)s.n_stages * sizeof *t);
    if (!t) {
        hp_schedule_free(&s);
        return 1;
    }
    double mean[3] = {0, 0, 0};
    for (int x = 0; x < 3; x++) {
        for (int r = 0; r < p; r++) mean[x] += atof(argv[5 + 3 * r + x]) / p;
        for (int st = 0; st < s.n_stages; st++) t[x * s.n_stages + st] = atof(argv[5 + 3 * s.stage_rank[st] + x]);
    }
    hp_sched_costs c = HP_SCHED_COSTS_INIT;
    c.f = mean[0], c.b = mean[1], c.w = mean[2];
    c.f_stage = t, c.b_stage = t + s.n_stages, c.w_stage = t + 2 * s.n_stages;
    hp_sched_timeline tl, tu;
    hp_status st = hp_schedule_validate(&s, NULL, NULL, NULL);
    if (st == HP_STATUS_OK) st = hp_schedule_simulate(&s, &c, &tl);
    c.f_stage = c.b_stage = c.w_stage = NULL;
    if (st == HP_STATUS_OK && (st = hp_schedule_simulate(&s, &c, &tu)) != HP_STATUS_OK) hp_sched_timeline_free(&tl);
    if (st != HP_STATUS_OK) {
        fprintf(stderr, "bench_schedule: %s p=%d m=%d: %s\n", argv[2], p, m, hp_error_message());
        free(t);
        hp_schedule_free(&s);
        return 1;
    }
    hp_sched_bubble fo = hp_schedule_bubble_formula(kind, p, m, v, c.f, c.b, c.w);
    printf("{\"bench\":\"schedule_ranks\",\"kind\":\"%s\",\"p\":%d,\"m\":%d,\"v\":%d,", hp_sched_kind_name(kind), p, m,
           v);
    json_num("bubble", tl.bubble, ","), json_num("bubble_uniform", tu.bubble, ",");
    json_num("formula", fo.sync, ","), json_num("step_s", tl.step_time, "}\n");
    hp_sched_timeline_free(&tl);
    hp_sched_timeline_free(&tu);
    free(t);
    hp_schedule_free(&s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--ranks")) return per_rank(argc, argv);
    double f = 1, b = 1, w = 1, lat = 0;
    if (argc >= 4) f = atof(argv[1]), b = atof(argv[2]), w = atof(argv[3]);
    if (argc >= 5) lat = atof(argv[4]);
    static const hp_sched_kind KINDS[] = {HP_SCHED_KIND_GPIPE, HP_SCHED_KIND_1F1B, HP_SCHED_KIND_INTERLEAVED_1F1B,
                                          HP_SCHED_KIND_ZB_H1, HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_DUALPIPE_V};
    static const int P[] = {2, 4, 8, 16};
    int fails = 0;
    for (size_t pi = 0; pi < sizeof P / sizeof P[0]; pi++)
        for (int mi = 0; mi < 3; mi++) {
            int p = P[pi], m = p * (mi == 0 ? 1 : mi == 1 ? 2 : 4);
            /* 1F1B on the same model: a stage of two chunks. */
            hp_sched_costs c2 = HP_SCHED_COSTS_INIT;
            c2.f = 2 * f, c2.b = 2 * b, c2.w = 2 * w, c2.p2p_latency = lat;
            double base_sync, base_span, base_step;
            int base_peak;
            fails += run(HP_SCHED_KIND_1F1B, p, m, 0, &c2, &base_sync, &base_span, &base_peak, &base_step);
            for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++) {
                hp_sched_kind kind = KINDS[k];
                bool chunked = kind == HP_SCHED_KIND_INTERLEAVED_1F1B || kind == HP_SCHED_KIND_ZB_V ||
                               kind == HP_SCHED_KIND_DUALPIPE_V;
                hp_sched_costs c = HP_SCHED_COSTS_INIT;
                double scale = chunked ? 1 : 2;
                c.f = scale * f, c.b = scale * b, c.w = scale * w, c.p2p_latency = lat;
                double t0 = now_ms(), sync, span, step;
                int peak;
                if (run(kind, p, m, 0, &c, &sync, &span, &peak, &step)) {
                    fails++;
                    continue;
                }
                double ms = now_ms() - t0;
                hp_sched_bubble fo = hp_schedule_bubble_formula(kind, p, m, 0, c.f, c.b, c.w);
                int pf = 0;
                for (int r = 0; r < p; r++) {
                    int x = hp_schedule_peak_formula(kind, p, m, 0, r);
                    if (x > pf) pf = x;
                }
                bool uniform = f == b && b == w && lat == 0;
                bool exact = lat == 0 && (kind == HP_SCHED_KIND_GPIPE || kind == HP_SCHED_KIND_1F1B ||
                                          (kind == HP_SCHED_KIND_INTERLEAVED_1F1B && uniform) ||
                                          (kind == HP_SCHED_KIND_ZB_H1 && m >= p) ||
                                          ((kind == HP_SCHED_KIND_ZB_V || kind == HP_SCHED_KIND_DUALPIPE_V) &&
                                           m >= 2 * p && f == b && w <= f));
                printf("{\"bench\":\"schedule\",\"kind\":\"%s\",\"p\":%d,\"m\":%d,\"v\":%d,", hp_sched_kind_name(kind), p, m,
                       chunked ? 2 : 1);
                json_num("f", c.f, ","), json_num("b", c.b, ","), json_num("w", c.w, ","), json_num("latency", lat, ",");
                json_num("step_s", step, ",");
                json_num("bubble", sync, ","), json_num("formula", fo.sync, ",");
                json_num("ratio", fo.sync > 0 ? sync / fo.sync : NAN, ",");
                printf("\"formula_exact\":%s,", exact ? "true" : "false");
                json_num("bubble_span", span, ","), json_num("formula_span", fo.span, ",");
                json_num("ratio_span", fo.span > 0 ? span / fo.span : NAN, ",");
                json_num("vs_1f1b", base_sync > 0 ? sync / base_sync : NAN, ",");
                json_num("vs_1f1b_span", base_span > 0 ? span / base_span : NAN, ",");
                json_num("idle_vs_1f1b", base_sync > 0 ? sync * step / (base_sync * base_step) : NAN, ",");
                printf("\"peak\":%d,\"peak_formula\":%d,", peak, pf);
                json_num("build_ms", ms, "}\n");
            }
        }
    return fails ? 1 : 0;
}
