/*
 * The calibration probe's compute part (hp/calibrate.h): GEMM grid, memory-bound operator curves,
 * node dispatch and attention, each measured as per-node medians of profiled runs of a small graph
 * through the runtime (the same kernels, thread team and dispatch as a training step). The
 * communicator part is in calibrate_comm.c.
 */
#include "hp/calibrate.h"
#include "hp/compile.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "train/calibrate_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bounds on the nodes of a GEMM probe (opts.gemm_flops sets how many). */
#define GEMM_MAX_NODES 256
#define GEMM_MAX_OUT_FLOATS (16 << 20)
#define GEMM_MAX_IN_FLOATS (16 << 20)

void hp__calib_say(const hp__probe *pr, const char *fmt, ...) {
    if (!pr->o->progress || !pr->lead) return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pr->o->progress(pr->o->user, buf);
}

hp_status hp__calib_barrier(const hp__probe *pr) { return pr->world ? hp_comm_barrier(pr->world) : HP_STATUS_OK; }

hp_status hp__calib_reduce(const hp__probe *pr, double *v, int n, hp_reduce_op op) {
    if (!pr->world || pr->size < 2) return HP_STATUS_OK;
    float *f = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!f) return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: %d values", n);
    for (int i = 0; i < n; i++) f[i] = (float)v[i];
    hp_status st = hp_comm_all_reduce(pr->world, f, f, (size_t)n, HP_DTYPE_F32, op);
    for (int i = 0; i < n && st == HP_STATUS_OK; i++) v[i] = f[i];
    free(f);
    return st;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double hp__calib_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/*
 * Compiles g (keeping keep[0..n_keep)), runs it once to warm up and reps times with profiling, a
 * barrier before each run; med[i] = node i's median time averaged over the ranks (-1: not run).
 */
static hp_status node_medians(const hp__probe *pr, const hp_graph *g, const hp_tid *keep, int n_keep, bool by_node,
                              const hp_tid *feed, const void *const *feed_data, const size_t *feed_bytes, int n_feed,
                              double *med) {
    int nn = hp_graph_n_nodes(g), reps = pr->o->reps;
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = keep;
    po.n_keep = n_keep;
    po.profile = true;
    po.node_by_node = by_node;
    hp_program *p = NULL;
    double *t = malloc(sizeof(double) * (size_t)nn * (size_t)reps);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: %d nodes x %d runs", nn, reps);
    hp_status st;
    HP_CHECK_GOTO(hp_program_new(g, &po, &p), st, out);
    for (int i = 0; i < n_feed; i++) HP_CHECK_GOTO(hp_program_set_input(p, feed[i], feed_data[i], feed_bytes[i]), st, out);
    HP_CHECK_GOTO(hp_program_run(p), st, out);
    for (int r = 0; r < reps; r++) {
        HP_CHECK_GOTO(hp__calib_barrier(pr), st, out);
        /* Where ranks share the cores (4 ranks on 2), one short run of each rank would run alone
         * while the others wait for a core: every rank runs for a window long enough for the
         * scheduler to share the cores out, and the window's wall time is shared out over the nodes
         * in proportion to their profiled times (a rank is descheduled between nodes as well as
         * within them, and a step pays for both). */
        double t0 = hp_now_seconds(), wall, sum = 0;
        int runs = 0;
        for (int i = 0; i < nn; i++) t[(size_t)i * reps + r] = -1.0;
        do {
            HP_CHECK_GOTO(hp_program_run(p), st, out);
            runs++;
            for (int i = 0; i < nn; i++) {
                double last;
                if (!hp_program_node_seconds(p, i, &last, NULL)) continue;
                double *ti = &t[(size_t)i * reps + r];
                *ti = (*ti < 0 ? 0 : *ti) + last;
                sum += last;
            }
            wall = hp_now_seconds() - t0;
        } while (wall < pr->window);
        double scale = sum > 0 && wall > sum ? wall / sum : 1.0;
        for (int i = 0; i < nn; i++)
            if (t[(size_t)i * reps + r] >= 0) t[(size_t)i * reps + r] *= scale / runs;
    }
    for (int i = 0; i < nn; i++) {
        double *ti = t + (size_t)i * reps;
        med[i] = ti[0] < 0                                   ? -1.0
                 : pr->o->stat == HP_CALIBRATE_STAT_MIN ? (hp__calib_median(ti, reps), ti[0]) /* sorted */
                                                        : hp__calib_median(ti, reps);
    }
    st = hp__calib_reduce(pr, med, nn, HP_REDUCE_AVG);
out:
    hp_program_free(p);
    free(t);
    return st;
}

/* ---------------------------------------------------------------- GEMM */

/* Per-node seconds of an (m, n, k) product: LINEAR nodes (trans_a 0) or A^T B MATMUL nodes. */
static hp_status gemm_point(const hp__probe *pr, int ta, int64_t m, int64_t n, int64_t k, double *rate) {
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int nodes = (int)ceil(pr->o->gemm_flops / flops);
    int64_t cap = GEMM_MAX_OUT_FLOATS / (m * n);
    if (nodes > cap) nodes = (int)cap;
    if (nodes > GEMM_MAX_NODES) nodes = GEMM_MAX_NODES;
    if (nodes < 1) nodes = 1;
    hp_graph *g = hp_graph_new();
    hp_tid *keep = malloc(sizeof(hp_tid) * (size_t)nodes);
    double *med = malloc(sizeof(double) * (size_t)nodes);
    if (!g || !keep || !med) {
        hp_graph_free(g);
        free(keep);
        free(med);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: GEMM probe of %d nodes", nodes);
    }
    /* operands of their own for the first nodes (as a step's GEMMs read what the nodes before them wrote,
     * not the same cache-hot matrices), then reused, within GEMM_MAX_IN_FLOATS */
    int64_t per = (m + n) * k;
    int own = (int)(GEMM_MAX_IN_FLOATS / per);
    own = own < 1 ? 1 : own > nodes ? nodes : own;
    hp_tid a = HP_TID_NONE, b = HP_TID_NONE;
    for (int i = 0; i < nodes; i++) {
        if (i < own) {
            char na[32], nb[32];
            snprintf(na, sizeof na, "a%d", i);
            snprintf(nb, sizeof nb, "b%d", i);
            a = hp_param(g, na, ta ? HP_SHAPE(k, m) : HP_SHAPE(m, k));
            b = hp_param(g, nb, ta ? HP_SHAPE(k, n) : HP_SHAPE(n, k));
        }
        keep[i] = ta ? hp_matmul(g, a, b, true, false) : hp_linear(g, a, b, HP_TID_NONE);
    }
    hp_status st = hp_graph_status(g);
    if (st == HP_STATUS_OK) st = node_medians(pr, g, keep, nodes, pr->by_node, NULL, NULL, NULL, 0, med);
    if (st == HP_STATUS_OK) {
        double s = 0;
        for (int i = 0; i < nodes; i++) s += med[i] > 0 ? med[i] : 0;
        *rate = s > 0 ? flops * nodes / s : 0;
    }
    hp_graph_free(g);
    free(keep);
    free(med);
    return st;
}

static hp_status probe_gemm(const hp__probe *pr, hp_calibration *c) {
    for (int ta = 0; ta < 2; ta++) {
        hp__calib_say(pr, "GEMM grid, op(A) = %s", ta ? "A^T (weight gradients)" : "A (forward, input gradients)");
        for (int a = 0; a < HP_CAL_GEMM_DIMS; a++)
            for (int b = 0; b < HP_CAL_GEMM_DIMS; b++)
                for (int e = 0; e < HP_CAL_GEMM_DIMS; e++) {
                    int64_t m = hp_cal_gemm_dim(a), n = hp_cal_gemm_dim(b), k = hp_cal_gemm_dim(e);
                    if ((double)m * (double)n * (double)k > pr->o->max_gemm) continue;
                    HP_CHECK(gemm_point(pr, ta, m, n, k, &c->gemm[ta][a][b][e]));
                }
    }
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- memory-bound operators */

typedef struct point {
    double bytes, seconds;
} point;

typedef struct points {
    int n, cap;
    point *p;
} points;

static hp_status add_point(points *ps, double bytes, double seconds) {
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 16;
        point *np = realloc(ps->p, sizeof *np * (size_t)cap);
        if (!np) return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: %d curve points", cap);
        ps->p = np;
        ps->cap = cap;
    }
    ps->p[ps->n++] = (point){bytes, seconds};
    return HP_STATUS_OK;
}

static int cmp_point(const void *a, const void *b) {
    double x = ((const point *)a)->bytes, y = ((const point *)b)->bytes;
    return x < y ? -1 : x > y;
}

/* Sorts the points, merges those within 5% in bytes (mean of each), keeps at most
 * HP_CAL_MAX_POINTS spread over the range. */
static void make_curve(points *ps, hp_cal_curve *k) {
    memset(k, 0, sizeof *k);
    if (ps->n == 0) return;
    qsort(ps->p, (size_t)ps->n, sizeof *ps->p, cmp_point);
    int m = 0;
    for (int i = 0; i < ps->n;) {
        int j = i;
        double sb = 0, ss = 0;
        while (j < ps->n && ps->p[j].bytes <= 1.05 * ps->p[i].bytes) {
            sb += ps->p[j].bytes;
            ss += ps->p[j].seconds;
            j++;
        }
        ps->p[m++] = (point){sb / (j - i), ss / (j - i)};
        i = j;
    }
    int n = m < HP_CAL_MAX_POINTS ? m : HP_CAL_MAX_POINTS;
    for (int i = 0; i < n; i++) {
        int src = n == 1 ? 0 : (int)((double)i * (m - 1) / (n - 1) + 0.5);
        k->bytes[i] = ps->p[src].bytes;
        k->seconds[i] = ps->p[src].seconds;
    }
    k->n = n;
}

/* The synthetic step of R rows of C features over L layers (hp/calibrate.h). */
static hp_graph *memory_graph(int64_t R, int64_t C, int L, hp_train_step *st, hp_tid *ids, hp_tid *tg) {
    hp_graph *g = hp_graph_new();
    if (!g) return NULL;
    *ids = hp_input(g, "ids", HP_DTYPE_I32, HP_SHAPE(R));
    *tg = hp_input(g, "targets", HP_DTYPE_I32, HP_SHAPE(R));
    hp_tid x = hp_embedding(g, hp_param(g, "wte", HP_SHAPE(C, C)), *ids), outs[8];
    for (int l = 0; l < L && l < 8; l++) {
        hp_graph_push_scopef(g, "l%d", l);
        hp_tid h = hp_layernorm(g, x, hp_param(g, "ln.weight", HP_SHAPE(C)), hp_param(g, "ln.bias", HP_SHAPE(C)), 1e-5f);
        hp_tid v = hp_add(g, hp_gelu(g, h), hp_param(g, "bias", HP_SHAPE(C)));
        hp_tid s = hp_softmax(g, hp_mul(g, v, hp_param(g, "p", HP_SHAPE(R, C))));
        x = outs[l] = hp_add(g, x, hp_scale(g, s, 0.5f));
        hp_graph_pop_scope(g);
    }
    /* packing and unpacking (gradient buckets, sequence shards): concat, slice and their gradients */
    hp_tid cat = hp_concat(g, outs, L < 8 ? L : 8, 0);
    x = hp_add(g, x, hp_slice(g, cat, 0, R, R));
    hp_tid loss = hp_cross_entropy(g, x, *tg);
    hp_optim_config oc = {.lr = 1e-3, .min_lr = 0, .warmup = 0, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                          .eps = 1e-8, .grad_clip = 1.0};
    if (hp_graph_status(g) == HP_STATUS_OK) hp_train_step_build(g, loss, &oc, st);
    return g;
}

/* Runs the synthetic step of R x C: per-node medians into med (team or node by node), the node count. */
static hp_status memory_run(const hp__probe *pr, int64_t R, int64_t C, bool by_node, hp_graph **gout, double **medout) {
    hp_train_step step;
    hp_tid ids, tg;
    hp_graph *g = memory_graph(R, C, 3, &step, &ids, &tg);
    if (!g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: memory probe graph");
    hp_status st = hp_graph_status(g);
    int nn = hp_graph_n_nodes(g);
    double *med = malloc(sizeof(double) * (size_t)nn);
    int32_t *zeros = calloc((size_t)R, sizeof *zeros);
    float lr = 0.0f, one = 1.0f; /* lr 0: the parameters stay as they are run after run */
    if (st == HP_STATUS_OK && (!med || !zeros)) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: %d nodes", nn);
    hp_tid feed[4] = {ids, tg, step.lr, step.step};
    const void *data[4] = {zeros, zeros, &lr, &one};
    size_t bytes[4] = {sizeof(int32_t) * (size_t)R, sizeof(int32_t) * (size_t)R, sizeof lr, sizeof one};
    if (st == HP_STATUS_OK) st = node_medians(pr, g, &step.loss, 1, by_node, feed, data, bytes, 4, med);
    free(zeros);
    if (st != HP_STATUS_OK) {
        free(med);
        hp_graph_free(g);
        return st;
    }
    *gout = g;
    *medout = med;
    return HP_STATUS_OK;
}

static hp_status probe_memory(const hp__probe *pr, hp_calibration *c) {
    /* activation rows of 128 features: powers of two, and sizes just above them, where the kernels'
     * thresholds for using the threads (16384, 32768, 65536 elements) put steps in the curves */
    static const int64_t rows[] = {1, 4, 16, 64, 128, 144, 256, 288, 512, 576, 1024, 2048, 8192};
    const int64_t C = 128;
    points ps[HP_OP_COUNT];
    memset(ps, 0, sizeof ps);
    hp_status st = HP_STATUS_OK;
    double add_bw = 0, here = 0, other = 0; /* dispatch in the probe's mode, the other mode's extra */
    for (size_t s = 0; s < sizeof rows / sizeof rows[0] && st == HP_STATUS_OK; s++) {
        hp__calib_say(pr, "memory-bound operators, %lld x %lld activations", (long long)rows[s], (long long)C);
        hp_graph *g = NULL;
        double *med = NULL;
        st = memory_run(pr, rows[s], C, pr->by_node, &g, &med);
        for (int i = 0; st == HP_STATUS_OK && i < hp_graph_n_nodes(g); i++) {
            hp_op_cost x = hp_node_cost(g, i);
            if (med[i] <= 0 || x.kind != HP_COST_MEMORY) continue;
            double b = x.bytes_read + x.bytes_written;
            hp_op op = hp_graph_node(g, i)->op;
            st = add_point(&ps[op], b, med[i]);
            if (op == HP_OP_ADD && s + 1 == sizeof rows / sizeof rows[0] && b / med[i] > add_bw) add_bw = b / med[i];
        }
        if (st == HP_STATUS_OK && rows[s] == 1) { /* dispatch: the smallest nodes' median time */
            double *v = malloc(sizeof(double) * (size_t)hp_graph_n_nodes(g));
            int n = 0;
            for (int i = 0; v && i < hp_graph_n_nodes(g); i++) {
                hp_op_cost x = hp_node_cost(g, i);
                if (med[i] > 0 && x.kind == HP_COST_MEMORY && x.bytes_read + x.bytes_written <= 4096) v[n++] = med[i];
            }
            here = n ? hp__calib_median(v, n) : 0;
            free(v);
        }
        if (st == HP_STATUS_OK && rows[s] == 2048) { /* the same step in the other mode: its extra dispatch */
            hp_graph *g2 = NULL;
            double *med2 = NULL;
            st = memory_run(pr, rows[s], C, !pr->by_node, &g2, &med2);
            double a = 0, b = 0;
            int n = 0;
            for (int i = 0; st == HP_STATUS_OK && i < hp_graph_n_nodes(g2); i++)
                if (med[i] > 0 && med2[i] > 0) {
                    a += med[i];
                    b += med2[i];
                    n++;
                }
            other = n ? (b - a) / n : 0.0;
            free(med2);
            hp_graph_free(g2);
        }
        free(med);
        hp_graph_free(g);
    }
    for (int op = 0; op < HP_OP_COUNT; op++) {
        if (st == HP_STATUS_OK) make_curve(&ps[op], &c->op_curve[op]);
        free(ps[op].p);
    }
    double there = here + other > 0 ? here + other : 0.0;
    c->by_node = pr->by_node;
    c->node_seconds = pr->by_node ? there : here;
    c->region_seconds = pr->by_node ? here : there;
    c->memory_bytes_per_s = add_bw;
    return st;
}

/* ---------------------------------------------------------------- attention */

static hp_status attention_point(const hp__probe *pr, int64_t bh, int64_t T, int64_t D, hp_calibration *c) {
    int64_t H = bh >= 4 ? 4 : 1, B = bh / H;
    double fwd = 4.0 * (double)bh * (double)T * (double)(T + 1) / 2.0 * (double)D;
    int nodes = (int)ceil(32e6 / fwd);
    nodes = nodes < 1 ? 1 : nodes > 8 ? 8 : nodes;
    hp_graph *g = hp_graph_new();
    if (!g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: attention probe");
    hp_tid q = hp_param(g, "q", HP_SHAPE(B, T, H * D)), k = hp_param(g, "k", HP_SHAPE(B, T, H * D));
    hp_tid v = hp_param(g, "v", HP_SHAPE(B, T, H * D)), loss = HP_TID_NONE;
    for (int i = 0; i < nodes; i++) {
        hp_tid l = hp_sum(g, hp_attention(g, q, k, v, (int)H, true), -1);
        loss = loss == HP_TID_NONE ? l : hp_add(g, loss, l);
    }
    hp_tid wrt[3] = {q, k, v}, grads[3];
    hp_status st = hp_graph_status(g);
    if (st == HP_STATUS_OK) st = hp_autodiff(g, loss, wrt, 3, grads);
    int nn = hp_graph_n_nodes(g);
    double *med = malloc(sizeof(double) * (size_t)nn);
    if (st == HP_STATUS_OK && !med) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "calibrate: attention probe");
    if (st == HP_STATUS_OK) st = node_medians(pr, g, grads, 3, pr->by_node, NULL, NULL, NULL, 0, med);
    hp_op ops[2] = {HP_OP_ATTENTION, HP_OP_ATTENTION_BACKWARD};
    for (int o = 0; o < 2 && st == HP_STATUS_OK; o++) {
        double fl = 0, s = 0;
        for (int i = 0; i < nn; i++)
            if (hp_graph_node(g, i)->op == ops[o] && med[i] > 0) {
                fl += hp_node_cost(g, i).flops;
                s += med[i];
            }
        if (s <= 0 || c->n_attention >= HP_CAL_MAX_ATTENTION) continue;
        c->attention[c->n_attention++] = (hp_cal_attention){.op = ops[o], .batch = bh, .t = T, .d = D,
                                                            .flops_per_s = fl / s};
    }
    free(med);
    hp_graph_free(g);
    return st;
}

static hp_status probe_attention(const hp__probe *pr, hp_calibration *c) {
    static const int64_t shapes[][3] = {{16, 64, 32},  {64, 64, 32},  {16, 128, 32}, {64, 128, 32},
                                        {16, 256, 32}, {64, 256, 32}, {8, 512, 32},  {16, 128, 64},
                                        {64, 128, 64}, {8, 512, 64},  {4, 1024, 64}, {16, 128, 16}};
    hp__calib_say(pr, "attention forward and backward, %d shapes", (int)(sizeof shapes / sizeof shapes[0]));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        HP_CHECK(attention_point(pr, shapes[i][0], shapes[i][1], shapes[i][2], c));
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- the probe */

hp_status hp_calibrate(hp_comm *world, const hp_calibrate_opts *opts, hp_calibration *out) {
    if (opts->reps < 1 || !(opts->max_gemm > 0) || !(opts->gemm_flops > 0) || opts->stat < 0 ||
        opts->stat > HP_CALIBRATE_STAT_MIN)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "calibrate: reps %d must be >= 1, max_gemm %g and gemm_flops %g > 0, stat %d 0 or 1", opts->reps,
                        opts->max_gemm, opts->gemm_flops, (int)opts->stat);
    hp__probe pr = {.world = world, .o = opts, .size = world ? hp_comm_size(world) : 1};
    pr.by_node = pr.size > 1; /* a run on several ranks has collectives: its program runs node by node */
    pr.lead = !world || hp_comm_rank(world) == 0;
    double t0 = hp_now_seconds();
    hp_calibration_init(out);
    HP_CHECK(hp_machine_key_local(0, 0, &out->key));
    if (pr.size > 1 && out->key.ranks_per_node == 1) out->key.ranks_per_node = pr.size; /* one node assumed */
    if (out->key.ranks_per_node * out->key.threads > out->key.cores) pr.window = 0.03; /* shared cores */
    if (opts->memory) HP_CHECK(probe_memory(&pr, out));
    if (opts->gemm) HP_CHECK(probe_gemm(&pr, out));
    if (opts->attention) HP_CHECK(probe_attention(&pr, out));
    if (opts->comm && pr.size > 1) HP_CHECK(hp__calibrate_comm(&pr, out));
    const hp_machine_key *k = &out->key;
    out->fastest = opts->stat == HP_CALIBRATE_STAT_MIN;
    out->comm_compute_share = k->ranks_per_node * (k->threads + 1) > k->cores ? 1.0 : 0.0;
    out->created = (double)time(NULL);
    double el = hp_now_seconds() - t0;
    HP_CHECK(hp__calib_reduce(&pr, &el, 1, HP_REDUCE_MAX));
    out->probe_seconds = el;
    return HP_STATUS_OK;
}
