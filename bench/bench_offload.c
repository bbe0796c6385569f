/*
 * HyperOffload: budget sweeps over GPT training steps whose full state (params, grads, AdamW m and v)
 * exceeds the smaller budgets, and the largest model that fits a fixed budget.
 *
 * Points (POINTS below): "small" (256 tokens per step; budgets 100%, 50%, 25%, 10% of the no-offload
 * fast-tier peak, both layouts), "tokens" (the training bench's config A, 2,048 tokens per step; 50%)
 * and "wide4/6/8" (width 512, 1,024 to 2,048 tokens per step; 50%, and 25% on disk for wide4). Layouts: "host":
 * every class to the host tier; "disk": params, gradients and optimizer states on the O_DIRECT disk
 * store, activations on the host. For each configuration a forked child builds the step, plans, runs
 * warmup + timed steps and reports: step time (best of the timed steps), its ratio to the unlimited
 * step, peak RSS of the child (VmHWM, from the OS), the fast tier's bytes, bytes per tier per step,
 * the predicted stall and the fraction of copy time hidden behind compute (copy engine statistics).
 * Each point also prints a bound: the bytes that must be read from the slow tier after the gradient
 * norm is known (state minus the 50% budget) and their time at the probed disk read bandwidth. Then,
 * at a fixed budget, layers grow (1, 2, 3, 4, 6, ... 32) until the planner says impossible, without
 * and with offload.
 *
 *     OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE ./build/bench/bench_offload [disk_dir]
 *     ./build/bench/bench_offload DIR POINT                  # one point's rounds only
 *     ./build/bench/bench_offload DIR POINT FRAC host|disk   # one configuration (HP_BENCH_PLAN=1:
 *                                                            # print its plan on stderr)
 * HP_BENCH_ASYNC=0 turns deferred AdamW updates off (offload.async_update) for A/B runs.
 *
 * One JSON line per measurement. Bandwidths are measured once (hp_tier_probe) and the machine
 * model's FLOP/s from each point's unlimited step, then handed to every child.
 */
#include "hp/compile.h"
#include "hp/nn.h"
#include "hp/offload_plan.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/tier.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The measured points: "small" (256 tokens per step) and "tokens" (realistic tokens per step). */
typedef struct {
    const char *name;
    int batch, seq, steps, rounds;
    hp_gpt_config cfg;
    int n_conf;          /* configurations: budget fraction (1: unlimited, no offload) and disk layout */
    double frac[9];
    bool disk[9];
} bench_point;
/* "small": 256 tokens per step, the full sweep. "tokens": the training bench's config A (2,048 tokens
 * per step); its state fits in half its own peak (activations dominate), so nothing needs the disk.
 * "wide4/6/8": width 512 at 1,024, 1,536 and 2,048 tokens per step: the state is 1.35x, 1.09x and
 * 0.92x half the point's own peak, and the disk layout moves state through the disk file in all
 * three (ZeRO-Infinity's argument: more tokens per step, more compute to hide the same bytes). */
static const bench_point POINTS[] = {
    {"small", 4, 64, 9, 3, {.vocab = 256, .context = 64, .layers = 4, .heads = 4, .width = 256, .tied_head = true},
     9, {1, 1.0, 0.5, 0.25, 0.10, 1.0, 0.5, 0.25, 0.10}, {0, 0, 0, 0, 0, 1, 1, 1, 1}},
    {"tokens", 8, 256, 4, 3, {.vocab = 256, .context = 256, .layers = 4, .heads = 4, .width = 256, .tied_head = true},
     3, {1, 0.5, 0.5}, {0, 0, 1}},
    {"wide4", 4, 256, 4, 5, {.vocab = 256, .context = 256, .layers = 4, .heads = 8, .width = 512, .tied_head = true},
     4, {1, 0.5, 0.5, 0.25}, {0, 0, 1, 1}},
    {"wide6", 6, 256, 4, 5, {.vocab = 256, .context = 256, .layers = 4, .heads = 8, .width = 512, .tied_head = true},
     3, {1, 0.5, 0.5}, {0, 0, 1}},
    {"wide8", 8, 256, 4, 5, {.vocab = 256, .context = 256, .layers = 4, .heads = 8, .width = 512, .tied_head = true},
     3, {1, 0.5, 0.5}, {0, 0, 1}},
};
enum { MAX_STEPS = 16, MAX_ROUNDS = 8 };
static int BATCH, SEQ, STEPS;
static hp_gpt_config CFG;
static const char *POINT = "";
static void use_point(const bench_point *pt) {
    BATCH = pt->batch;
    SEQ = pt->seq;
    STEPS = pt->steps;
    CFG = pt->cfg;
    POINT = pt->name;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long vm_hwm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static void die(const char *what, hp_status st) {
    fprintf(stderr, "bench_offload: %s: %s: %s\n", what, hp_status_str(st), hp_error_message());
    exit(1);
}
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        hp_status st_ = (expr);                                                                    \
        if (st_ != HP_STATUS_OK) die(#expr, st_);                                                  \
    } while (0)

typedef struct {
    hp_graph *g;
    hp_gpt m;
    hp_train_step ts;
    hp_tid keep[2];
    hp_compiled *c; /* the compile driver's result (owns the partition, offload state and program) */
} step_graph;

/* The GPT step through the compile driver up to `stop` (HP_PASS_AUTODIFF: the logical step graph
 * only, for the planner alone), with HyperOffload under `oc` (NULL: none). */
static void build_upto(step_graph *s, int layers, hp_pass stop, const hp_offload_plan_config *oc) {
    hp_gpt_config c = CFG;
    c.layers = layers;
    s->g = hp_graph_new();
    CHECK(hp_gpt_build(s->g, &c, BATCH, SEQ, true, &s->m));
    static const hp_optim_config optim = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                          .grad_clip = 1.0};
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = s->m.loss;
    o.train = true;
    o.optim = &optim;
    o.offload = oc;
    o.stop_after = stop;
    CHECK(hp_compile(s->g, &o, &s->c));
    s->ts = *hp_compiled_step(s->c);
    s->keep[0] = s->ts.loss;
    s->keep[1] = s->ts.grad_sq;
}

static void build(step_graph *s, int layers) { build_upto(s, layers, HP_PASS_AUTODIFF, NULL); }

static void drop(step_graph *s) {
    hp_compiled_free(s->c);
    hp_graph_free(s->g);
}

static int64_t n_params(const step_graph *s) {
    int64_t n = 0;
    for (int i = 0; i < s->ts.n_params; i++) n += hp_shape_numel(&hp_graph_tensor(s->g, s->ts.params[i])->shape);
    return n;
}

/* Runs warmup + STEPS steps of the compiled step (build_upto to HP_PASS_MEMPLAN); returns the best
 * step seconds. */
static double run(step_graph *s, hp_program **out_p) {
    hp_program *p = hp_compiled_program(s->c);
    const hp_partition *part = hp_compiled_partition(s->c);
    hp_offload_state *ofl = hp_compiled_offload(s->c);
    for (int i = 0; i < s->ts.n_params; i++) {
        const hp_tensor *t = hp_graph_tensor(s->g, s->ts.params[i]);
        int64_t n = hp_shape_numel(&t->shape);
        float *buf = malloc((size_t)n * sizeof(float));
        CHECK(hp_gpt_init_param(&s->m.cfg, t->name, 42, 0, n, buf));
        CHECK(hp_program_set_input(p, hp_partition_local(part, s->ts.params[i]), buf, (size_t)n * sizeof(float)));
        free(buf);
    }
    int32_t *tok = malloc(sizeof *tok * (size_t)(BATCH * SEQ)), *tgt = malloc(sizeof *tgt * (size_t)(BATCH * SEQ));
    for (int i = 0; i < BATCH * SEQ; i++) {
        tok[i] = (int32_t)((i * 7 + 3) % CFG.vocab);
        tgt[i] = (int32_t)((i * 5 + 1) % CFG.vocab);
    }
    float lr = 1e-3f;
    CHECK(hp_program_set_input(p, hp_partition_local(part, s->m.tokens), tok, sizeof *tok * (size_t)(BATCH * SEQ)));
    CHECK(hp_program_set_input(p, hp_partition_local(part, s->m.targets), tgt, sizeof *tgt * (size_t)(BATCH * SEQ)));
    free(tok);
    free(tgt);
    CHECK(hp_program_set_input(p, hp_partition_local(part, s->ts.lr), &lr, sizeof lr));
    double t[MAX_STEPS + 1] = {0};
    for (int k = 0; k <= STEPS; k++) {
        float step = (float)(k + 1);
        CHECK(hp_program_set_input(p, hp_partition_local(part, s->ts.step), &step, sizeof step));
        if (k == 1 && ofl) hp_offload_state_reset_copy_stats(ofl);
        double t0 = now_s();
        CHECK(hp_program_run(p));
        if (k == STEPS) CHECK(hp_program_sync(p)); /* deferred updates of the last step count too */
        t[k] = now_s() - t0;
    }
    /* the best of the timed steps (k >= 1): the machine is shared, and interference only adds */
    double best = t[1];
    for (int i = 2; i <= STEPS; i++)
        if (t[i] < best) best = t[i];
    *out_p = p;
    return best;
}

static size_t plan_peak(step_graph *s) {
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    hp_offload_plan *p;
    CHECK(hp_offload_plan_new(s->g, s->keep, 2, &c, &p));
    hp_offload_plan_stats st;
    hp_offload_plan_get_stats(p, &st);
    hp_offload_plan_free(p);
    return st.peak_before;
}

static int64_t n_params_of(const hp_gpt_config *c) {
    step_graph s;
    hp_gpt_config save = CFG;
    CFG = *c;
    build(&s, c->layers);
    int64_t n = n_params(&s);
    drop(&s);
    CFG = save;
    return n;
}

static void set_policy(hp_offload_plan_config *c, bool disk, const char *dir) {
    for (int k = 0; k < HP_OFFLOAD_CLASS_COUNT; k++) c->policy[k] = HP_TIER_HOST;
    if (disk) {
        c->disk_dir = dir;
        c->policy[HP_OFFLOAD_CLASS_PARAMS] = c->policy[HP_OFFLOAD_CLASS_OPTIMIZER] = HP_TIER_DISK;
        c->policy[HP_OFFLOAD_CLASS_GRADS] = HP_TIER_DISK;
    }
}

/* One child: budget fraction `frac` (0: unlimited, no offload). Prints one JSON line. */
static void child(double frac, bool disk, const char *dir, const hp_tier_list *tiers, double flops, size_t peak,
                  double base_s) {
    step_graph s;
    hp_offload_plan_stats ps;
    memset(&ps, 0, sizeof ps);
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    if (frac > 0) {
        c.device_budget = (size_t)(frac * (double)peak);
        set_policy(&c, disk, dir);
        if (getenv("HP_BENCH_ASYNC") && atoi(getenv("HP_BENCH_ASYNC")) == 0) c.async_update = false;
        c.bandwidth[HP_TIER_HOST] = tiers->tier[HP_TIER_HOST].read_bw;
        c.bandwidth[HP_TIER_DISK] = tiers->tier[HP_TIER_DISK].read_bw;
        if (flops > 0) c.machine.flops_per_s = flops;
    }
    build_upto(&s, CFG.layers, HP_PASS_MEMPLAN, frac > 0 ? &c : NULL);
    hp_offload_state *ofl = hp_compiled_offload(s.c);
    if (ofl) {
        const hp_graph *lg = hp_compiled_graph(s.c);
        hp_offload_plan_get_stats(hp_offload_state_plan(ofl), &ps);
        /* HP_BENCH_PLAN=1: the residency plan on stderr (tensor names only are read from the graph) */
        if (getenv("HP_BENCH_PLAN")) hp_offload_plan_print(hp_offload_state_plan(ofl), lg, stderr);
        if (getenv("HP_BENCH_PLAN") && atoi(getenv("HP_BENCH_PLAN")) > 1) /* resident bytes per node */
            for (int i = 0; hp_offload_plan_resident_at(hp_offload_state_plan(ofl), i) > 0; i += 8)
                fprintf(stderr, "resident at %d: %zu\n", i, hp_offload_plan_resident_at(hp_offload_state_plan(ofl), i));
    }
    hp_program *p;
    double sec = run(&s, &p);
    hp_program_stats st;
    hp_program_get_stats(p, &st);
    hp_copy_stats cs;
    memset(&cs, 0, sizeof cs);
    if (ofl) hp_offload_state_copy_stats(ofl, &cs);
    float loss;
    CHECK(hp_program_get_output(p, hp_compiled_loss(s.c), &loss, sizeof loss));
    printf("{\"bench\":\"offload_sweep\",\"point\":\"%s\",\"batch\":%d,\"seq\":%d,\"tiers\":\"%s\",\"budget_frac\":%.2f,\"budget_bytes\":%zu,\"layers\":%d,"
           "\"params\":%lld,\"state_bytes\":%lld,\"step_s\":%.4f,\"vs_unlimited\":%.3f,\"vm_hwm_mib\":%.1f,"
           "\"fast_tier_bytes\":%zu,\"host_in_mib\":%.1f,\"host_out_mib\":%.1f,\"disk_in_mib\":%.1f,"
           "\"disk_out_mib\":%.1f,\"prefetch\":%d,\"offload\":%d,\"adamw_streamed\":%d,\"predicted_stall_s\":%.4f,"
           "\"copy_busy_s\":%.4f,\"copy_wait_s\":%.4f,\"hidden_frac\":%.3f,\"loss\":%.6f}\n",
           POINT, BATCH, SEQ, frac > 0 ? (disk ? "disk" : "host") : "none", frac > 0 ? frac : 1.0,
           frac > 0 ? ps.budget : peak,
           CFG.layers, (long long)n_params(&s), (long long)(4 * 4 * n_params(&s)), sec,
           base_s > 0 ? sec / base_s : 1.0, (double)vm_hwm_kib() / 1024.0, st.device_bytes,
           ps.bytes_in[HP_TIER_HOST] / 1048576.0, ps.bytes_out[HP_TIER_HOST] / 1048576.0,
           ps.bytes_in[HP_TIER_DISK] / 1048576.0, ps.bytes_out[HP_TIER_DISK] / 1048576.0, ps.n_prefetch, ps.n_offload,
           ps.n_streamed, ps.stall_s, cs.busy_total_s / STEPS, cs.wait_s / STEPS,
           ofl ? hp_copy_stats_hidden_fraction(&cs) : 1.0, (double)loss);
    fflush(stdout);
    drop(&s);
}

typedef struct {
    double step_s, rss_mib, hidden;
} child_result;

static double json_num(const char *line, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *at = strstr(line, k);
    return at ? atof(at + strlen(k)) : 0.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static child_result fork_child(double frac, bool disk, const char *dir, const hp_tier_list *tiers, double flops,
                               size_t peak, double base_s) {
    fflush(stdout);
    int fd[2];
    if (pipe(fd) != 0) return (child_result){0, 0, 0};
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1);
        child(frac, disk, dir, tiers, flops, peak, base_s);
        fflush(stdout);
        _exit(0);
    }
    close(fd[1]);
    char line[4096];
    FILE *f = fdopen(fd[0], "r");
    child_result r = {0, 0, 0};
    while (fgets(line, sizeof line, f)) {
        fputs(line, stdout);
        if (strstr(line, "\"step_s\":"))
            r = (child_result){json_num(line, "step_s"), json_num(line, "vm_hwm_mib"), json_num(line, "hidden_frac")};
    }
    fclose(f);
    int status;
    waitpid(pid, &status, 0);
    return r;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    hp_tier_list tiers;
    hp_tier_list_init(&tiers);
    CHECK(hp_tier_probe(&tiers, HP_TIER_HOST, NULL, 0));
    CHECK(hp_tier_probe(&tiers, HP_TIER_DISK, dir, 0));
    printf("{\"bench\":\"tiers\",\"host_read_gbps\":%.2f,\"host_write_gbps\":%.2f,\"disk_read_gbps\":%.2f,"
           "\"disk_write_gbps\":%.2f,\"disk_dir\":\"%s\"}\n",
           1e-9 * tiers.tier[HP_TIER_HOST].read_bw, 1e-9 * tiers.tier[HP_TIER_HOST].write_bw,
           1e-9 * tiers.tier[HP_TIER_DISK].read_bw, 1e-9 * tiers.tier[HP_TIER_DISK].write_bw, dir);
    /* bench_offload DIR POINT FRAC host|disk: that one configuration only (for looking at a plan) */
    const char *only = argc > 4 ? argv[2] : NULL, *point = argc > 2 ? argv[2] : NULL;
    for (size_t pi = 0; pi < sizeof POINTS / sizeof POINTS[0]; pi++) {
        if (point && strcmp(point, POINTS[pi].name) != 0) continue;
        use_point(&POINTS[pi]);
        step_graph s;
        build(&s, CFG.layers);
        size_t peak = plan_peak(&s);
        /* measured FLOP/s of the unlimited step for the cost model */
        double flops_step = 0;
        for (int i = 0; i < hp_graph_n_nodes(s.g); i++) flops_step += hp_node_cost(s.g, i).flops;
        drop(&s);
        double base = fork_child(0, false, dir, &tiers, 0, peak, 0).step_s;
        double flops = base > 0 ? flops_step / base : 0;
        /* A bound at 50% budget: when the AdamW updates start (they need the global gradient norm, so
         * every gradient exists), params, grads, m and v all exist and at most the budget of them is in
         * the fast tier: the rest must be read from the slow tier after that point, with nothing left to
         * compute behind it but the updates. */
        double state = 16.0 * (double)n_params_of(&CFG), half = 0.5 * (double)peak;
        printf("{\"bench\":\"machine\",\"point\":\"%s\",\"tokens_per_step\":%d,\"step_gflop\":%.3f,"
               "\"measured_gflops\":%.2f,\"no_offload_peak_bytes\":%zu,\"state_bytes\":%.0f,"
               "\"state_over_half_budget\":%.2f,\"read_after_norm_min_mib\":%.1f,\"read_after_norm_min_s\":%.4f}\n",
               POINT, BATCH * SEQ, 1e-9 * flops_step, 1e-9 * flops, peak, state, state / half,
               (state > half ? state - half : 0) / 1048576.0,
               (state > half ? state - half : 0) / tiers.tier[HP_TIER_DISK].read_bw);
        if (only) {
            fork_child(atof(argv[3]), strcmp(argv[4], "disk") == 0, dir, &tiers, flops, peak, base);
            continue;
        }
        /* Rounds interleaved over the configurations (unlimited first in each); the summary keeps each
         * configuration's best round, so a noisy neighbour on a shared machine only hurts when it
         * hurts every round. Configuration 0 is the unlimited step (no offload). */
        const bench_point *pt = &POINTS[pi];
        child_result best[9];
        double round_s[9][MAX_ROUNDS], median[9];
        for (int c = 0; c < pt->n_conf; c++) best[c] = (child_result){1e30, 0, 0};
        for (int r = 0; r < pt->rounds; r++)
            for (int c = 0; c < pt->n_conf; c++) {
                child_result x = c == 0 ? fork_child(0, false, dir, &tiers, 0, peak, 0)
                                        : fork_child(pt->frac[c], pt->disk[c], dir, &tiers, flops, peak, base);
                round_s[c][r] = x.step_s;
                if (x.step_s > 0 && x.step_s < best[c].step_s) best[c] = x;
            }
        /* The median over rounds of the ratio to the same round's unlimited step: configurations of a
         * round run back to back, so they share the machine's load (the best and median rounds of
         * each configuration may come from different load). */
        double paired[9];
        for (int c = 0; c < pt->n_conf; c++) {
            double q[MAX_ROUNDS];
            for (int r = 0; r < pt->rounds; r++) q[r] = round_s[0][r] > 0 ? round_s[c][r] / round_s[0][r] : 0;
            qsort(q, (size_t)pt->rounds, sizeof(double), cmp_double);
            int h = pt->rounds / 2;
            paired[c] = pt->rounds % 2 ? q[h] : 0.5 * (q[h - 1] + q[h]);
        }
        for (int c = 0; c < pt->n_conf; c++) { /* the median round too: less at the mercy of one lucky round */
            qsort(round_s[c], (size_t)pt->rounds, sizeof(double), cmp_double);
            int h = pt->rounds / 2;
            median[c] = pt->rounds % 2 ? round_s[c][h] : 0.5 * (round_s[c][h - 1] + round_s[c][h]);
        }
        for (int c = 0; c < pt->n_conf; c++)
            printf("{\"bench\":\"offload_best\",\"point\":\"%s\",\"tiers\":\"%s\",\"budget_frac\":%.2f,"
                   "\"step_s\":%.4f,\"vs_unlimited\":%.3f,\"median_step_s\":%.4f,\"median_vs_unlimited\":%.3f,"
                   "\"paired_vs_unlimited\":%.3f,\"vm_hwm_mib\":%.1f,\"hidden_frac\":%.3f,\"rounds\":%d}\n",
                   POINT, c == 0 ? "none" : pt->disk[c] ? "disk" : "host", pt->frac[c], best[c].step_s,
                   best[c].step_s / best[0].step_s, median[c], median[c] / median[0], paired[c], best[c].rss_mib,
                   best[c].hidden, pt->rounds);
    }
    if (point) return 0;

    /* The largest model under a fixed budget: the no-offload peak of a 2-layer model (small point). */
    use_point(&POINTS[0]);
    step_graph s;
    build(&s, 2);
    size_t budget = plan_peak(&s);
    drop(&s);
    int best_plain = 0, best_ofl = 0;
    int64_t params_plain = 0, params_ofl = 0;
    static const int layers[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
    for (size_t li = 0; li < sizeof layers / sizeof layers[0]; li++) {
        int L = layers[li];
        build(&s, L);
        bool plain = plan_peak(&s) <= budget;
        hp_offload_plan_config c;
        hp_offload_plan_config_init(&c);
        c.device_budget = budget;
        set_policy(&c, true, dir);
        c.bandwidth[HP_TIER_HOST] = tiers.tier[HP_TIER_HOST].read_bw;
        c.bandwidth[HP_TIER_DISK] = tiers.tier[HP_TIER_DISK].read_bw;
        hp_offload_plan *p = NULL;
        hp_status st = hp_offload_plan_new(s.g, s.keep, 2, &c, &p);
        if (plain) {
            best_plain = L;
            params_plain = n_params(&s);
        }
        if (st == HP_STATUS_OK) {
            best_ofl = L;
            params_ofl = n_params(&s);
        }
        hp_offload_plan_free(p);
        drop(&s);
        if (st != HP_STATUS_OK) {
            printf("{\"bench\":\"offload_capacity_limit\",\"layers\":%d,\"why\":\"%.200s\"}\n", L, hp_error_message());
            break;
        }
    }
    printf("{\"bench\":\"offload_capacity\",\"budget_bytes\":%zu,\"max_layers_no_offload\":%d,\"params_no_offload\":%lld,"
           "\"max_layers_offload\":%d,\"params_offload\":%lld,\"ratio\":%.2f}\n",
           budget, best_plain, (long long)params_plain, best_ofl, (long long)params_ofl,
           params_plain ? (double)params_ofl / (double)params_plain : 0.0);
    return 0;
}
