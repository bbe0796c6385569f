/*
 * The calibrated machine model (hp/costmodel.h): per-node seconds from the operators' cost rules
 * and the calibration's rates, alpha-beta times of collectives, the least-squares fit, and the step
 * prediction (the compute stream and the communication queues simulated in program order).
 */
#include "hp/costmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t hp_cal_gemm_dim(int i) { return (int64_t)32 << (2 * i); }

void hp_calibration_init(hp_calibration *c) {
    memset(c, 0, sizeof *c);
    c->version = HP_CAL_VERSION;
}

/* ---------------------------------------------------------------- alpha-beta fit */

/* Weighted least squares of y = a + b x with weights w; false when the system is singular. */
static bool wls(const double *x, const double *y, const double *w, int n, double *a, double *b) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        sw += w[i];
        sx += w[i] * x[i];
        sy += w[i] * y[i];
        sxx += w[i] * x[i] * x[i];
        sxy += w[i] * x[i] * y[i];
    }
    double det = sw * sxx - sx * sx;
    if (!(fabs(det) > 1e-300 * (sw * sxx + 1e-300))) return false;
    *a = (sy * sxx - sx * sxy) / det;
    *b = (sw * sxy - sx * sy) / det;
    return true;
}

hp_status hp_comm_fit_alpha_beta(const double *bytes, const double *seconds, int n, double *alpha, double *beta,
                                 double *max_rel_err) {
    if (n < 2) return hp_error(HP_STATUS_INVALID_ARGUMENT, "alpha-beta fit: %d measurements (needs 2 or more)", n);
    double *w = malloc(sizeof(double) * (size_t)n);
    if (!w) return hp_error(HP_STATUS_OUT_OF_MEMORY, "alpha-beta fit: %d measurements", n);
    bool distinct = false;
    for (int i = 0; i < n; i++) {
        if (!(seconds[i] > 0) || !(bytes[i] >= 0)) {
            free(w);
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "alpha-beta fit: measurement %d is %g bytes in %g s", i,
                            bytes[i], seconds[i]);
        }
        w[i] = 1.0 / (seconds[i] * seconds[i]);
        if (bytes[i] != bytes[0]) distinct = true;
    }
    if (!distinct) {
        free(w);
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "alpha-beta fit: every measurement is of %g bytes", bytes[0]);
    }
    double a = 0, b = 0;
    wls(bytes, seconds, w, n, &a, &b);
    if (a < 0 || b < 0) { /* refit with the negative term clamped to 0: one-parameter fits */
        double swy = 0, sw = 0, swxy = 0, swxx = 0;
        for (int i = 0; i < n; i++) {
            swy += w[i] * seconds[i];
            sw += w[i];
            swxy += w[i] * bytes[i] * seconds[i];
            swxx += w[i] * bytes[i] * bytes[i];
        }
        if (a < 0) {
            a = 0;
            b = swxx > 0 ? swxy / swxx : 0;
        } else {
            b = 0;
            a = swy / sw;
        }
    }
    free(w);
    *alpha = a;
    *beta = b;
    if (max_rel_err) {
        double worst = 0;
        for (int i = 0; i < n; i++) {
            double e = fabs(a + b * bytes[i] - seconds[i]) / seconds[i];
            if (e > worst) worst = e;
        }
        *max_rel_err = worst;
    }
    return HP_STATUS_OK;
}

hp_status hp_calibration_set_comm(hp_calibration *c, const hp_comm_fit *f) {
    for (int i = 0; i < c->n_comm; i++)
        if (c->comm[i].kind == f->kind && c->comm[i].group == f->group) {
            c->comm[i] = *f;
            return HP_STATUS_OK;
        }
    if (c->n_comm >= HP_CAL_MAX_COMM)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "calibration: more than %d communication fits (adding %s on %d ranks)",
                        HP_CAL_MAX_COMM, hp_xfer_kind_name(f->kind), f->group);
    c->comm[c->n_comm++] = *f;
    return HP_STATUS_OK;
}

const hp_comm_fit *hp_calibration_comm(const hp_calibration *c, hp_xfer_kind kind, int group) {
    const hp_comm_fit *best = NULL;
    for (int i = 0; i < c->n_comm; i++) {
        const hp_comm_fit *f = &c->comm[i];
        if (f->kind != kind) continue;
        if (f->group == group) return f;
        if (!best) {
            best = f;
            continue;
        }
        int d = abs(f->group - group), db = abs(best->group - group);
        if (d < db || (d == db && f->group > best->group)) best = f;
    }
    return best;
}

/* ---------------------------------------------------------------- rates */

/* Position of x on the grid's log scale: 0 at 32, 1 at 128, ... clamped to [0, DIMS - 1]. */
static double grid_pos(int64_t x) {
    double u = (log2((double)(x > 1 ? x : 1)) - 5.0) / 2.0;
    return u < 0 ? 0 : u > HP_CAL_GEMM_DIMS - 1 ? HP_CAL_GEMM_DIMS - 1 : u;
}

static double gemm_grid_rate(const hp_calibration *c, int ta, int64_t m, int64_t n, int64_t k) {
    double u[3] = {grid_pos(m), grid_pos(n), grid_pos(k)};
    int i0[3];
    double f[3];
    for (int d = 0; d < 3; d++) {
        i0[d] = (int)u[d];
        if (i0[d] > HP_CAL_GEMM_DIMS - 2) i0[d] = HP_CAL_GEMM_DIMS - 2;
        f[d] = u[d] - i0[d];
    }
    double sw = 0, sl = 0;
    for (int corner = 0; corner < 8; corner++) {
        int a = corner & 1, b = (corner >> 1) & 1, e = (corner >> 2) & 1;
        double w = (a ? f[0] : 1 - f[0]) * (b ? f[1] : 1 - f[1]) * (e ? f[2] : 1 - f[2]);
        double r = c->gemm[ta][i0[0] + a][i0[1] + b][i0[2] + e];
        if (w <= 0 || !(r > 0)) continue;
        sw += w;
        sl += w * log(r);
    }
    if (sw > 0) return exp(sl / sw);
    /* no measured corner around the shape: the nearest measured grid point */
    double best = -1, rate = 0;
    for (int a = 0; a < HP_CAL_GEMM_DIMS; a++)
        for (int b = 0; b < HP_CAL_GEMM_DIMS; b++)
            for (int e = 0; e < HP_CAL_GEMM_DIMS; e++) {
                double r = c->gemm[ta][a][b][e];
                if (!(r > 0)) continue;
                double dd = (a - u[0]) * (a - u[0]) + (b - u[1]) * (b - u[1]) + (e - u[2]) * (e - u[2]);
                if (best < 0 || dd < best) best = dd, rate = r;
            }
    return rate;
}

double hp_calibration_gemm_rate(const hp_calibration *c, int64_t m, int64_t n, int64_t k, bool trans_a) {
    double r = gemm_grid_rate(c, trans_a ? 1 : 0, m, n, k);
    return r > 0 ? r : gemm_grid_rate(c, trans_a ? 0 : 1, m, n, k);
}

double hp_calibration_curve_seconds(const hp_calibration *c, hp_op op, double bytes) {
    if ((int)op < 0 || op >= HP_OP_COUNT) return -1;
    const hp_cal_curve *k = &c->op_curve[op];
    if (k->n <= 0) return -1;
    if (bytes <= k->bytes[0]) {
        double t = k->bytes[0] > 0 ? k->seconds[0] * bytes / k->bytes[0] : k->seconds[0];
        double floor = c->node_seconds < k->seconds[0] ? c->node_seconds : k->seconds[0];
        return t > floor ? t : floor;
    }
    for (int i = 1; i < k->n; i++)
        if (bytes <= k->bytes[i]) {
            double f = (bytes - k->bytes[i - 1]) / (k->bytes[i] - k->bytes[i - 1]);
            return k->seconds[i - 1] + f * (k->seconds[i] - k->seconds[i - 1]);
        }
    int l = k->n - 1;
    /* one point (FILL is probed only as a scalar) says nothing of bandwidth: the memory rate */
    double slope = l > 0 ? (k->seconds[l] - k->seconds[l - 1]) / (k->bytes[l] - k->bytes[l - 1])
                 : c->memory_bytes_per_s > 0 ? 1.0 / c->memory_bytes_per_s
                                             : k->seconds[l] / k->bytes[l];
    if (!(slope > 0)) slope = k->seconds[l] / k->bytes[l];
    return k->seconds[l] + slope * (bytes - k->bytes[l]);
}

/* The attention point of `op` nearest to the shape (log2 distance over T, head dim and batch). */
static double attention_rate(const hp_calibration *c, hp_op op, const hp_op_cost *x) {
    double best = -1, rate = 0;
    for (int i = 0; i < c->n_attention; i++) {
        const hp_cal_attention *a = &c->attention[i];
        if (a->op != op || !(a->flops_per_s > 0)) continue;
        double dt = log2((double)(x->m > 0 ? x->m : 1) / (double)a->t);
        double dd = log2((double)(x->k > 0 ? x->k : 1) / (double)a->d);
        double db = log2((double)(x->batch > 0 ? x->batch : 1) / (double)a->batch);
        double dist = dt * dt + dd * dd + 0.25 * db * db;
        if (best < 0 || dist < best) best = dist, rate = a->flops_per_s;
    }
    return rate;
}

double hp_xfer_seconds(const hp_machine_model *m, const hp_xfer *x) {
    const hp_comm_fit *f = m->cal ? hp_calibration_comm(m->cal, x->kind, x->group) : NULL;
    if (f && f->n_kept > 0) {
        int n = f->n_kept;
        if (x->bytes <= f->bytes[0]) return f->seconds[0];
        for (int i = 1; i < n; i++)
            if (x->bytes <= f->bytes[i])
                return f->seconds[i - 1] + (x->bytes - f->bytes[i - 1]) / (f->bytes[i] - f->bytes[i - 1]) *
                                               (f->seconds[i] - f->seconds[i - 1]);
        return f->seconds[n - 1] + f->beta * (x->bytes - f->bytes[n - 1]);
    }
    if (f) return f->alpha + f->beta * x->bytes;
    return m->bytes_per_s > 0 ? x->bytes / m->bytes_per_s : 0.0;
}

#define MAX_XFERS 64

double hp_node_comm_seconds(const hp_graph *g, int i, const hp_machine_model *m) {
    const hp_node *n = hp_graph_node(g, i);
    if (!(n->flags & HP_NODE_FLAG_ASYNC)) return 0.0;
    const hp_instr *x = hp_node_instr(n);
    if (!x) return m->bytes_per_s > 0 ? hp_node_cost(g, i).bytes_read / m->bytes_per_s : 0.0;
    if (!x->xfers) return m->bytes_per_s > 0 ? x->bytes / m->bytes_per_s : 0.0;
    hp_xfer xs[MAX_XFERS];
    int k = x->xfers(x, xs, MAX_XFERS);
    double s = 0;
    for (int j = 0; j < k && j < MAX_XFERS; j++) s += hp_xfer_seconds(m, &xs[j]);
    return s;
}

/* Compute seconds of node i under a calibration, by class (*cls: an hp_cost_kind), dispatch in the
 * backend's team included (the probe measured whole team runs). */
static double cal_compute_seconds(const hp_graph *g, int i, const hp_machine_model *m, int *cls) {
    const hp_calibration *c = m->cal;
    const hp_node *n = hp_graph_node(g, i);
    hp_op_cost x = hp_node_cost(g, i);
    *cls = x.kind;
    if (x.kind == HP_COST_VIEW) return 0.0;
    double bytes = x.bytes_read + x.bytes_written;
    if (x.kind == HP_COST_GEMM) {
        double r = hp_calibration_gemm_rate(c, x.m, x.n, x.k, x.trans_a);
        if (r > 0) return x.flops / r; /* the probe's rates include the dispatch */
    } else if (x.kind == HP_COST_ATTENTION) {
        double r = attention_rate(c, n->op, &x);
        if (r > 0) return x.flops / r;
    } else {
        double t = hp_calibration_curve_seconds(c, n->op, bytes);
        if (t >= 0) return t;
        if (c->memory_bytes_per_s > 0) {
            double tb = bytes / c->memory_bytes_per_s;
            double tf = m->flops_per_s > 0 ? x.flops / m->flops_per_s : 0.0;
            return (tb > tf ? tb : tf) + c->node_seconds;
        }
    }
    /* not calibrated for this class: the flat roofline */
    double tf = m->flops_per_s > 0 ? x.flops / m->flops_per_s : 0.0;
    double tb = m->bytes_per_s > 0 ? bytes / m->bytes_per_s : 0.0;
    return (tf > tb ? tf : tb) + c->node_seconds;
}

double hp_node_seconds(const hp_graph *g, int i, const hp_machine_model *m) {
    if (m->cal) {
        if (hp_graph_node(g, i)->flags & HP_NODE_FLAG_ASYNC) return hp_node_comm_seconds(g, i, m);
        int cls;
        return cal_compute_seconds(g, i, m, &cls);
    }
    if (!(m->flops_per_s > 0) || !(m->bytes_per_s > 0)) return 0.0;
    hp_op_cost c = hp_node_cost(g, i);
    double tf = c.flops / m->flops_per_s, tb = (c.bytes_read + c.bytes_written) / m->bytes_per_s;
    return tf > tb ? tf : tb;
}

/* ---------------------------------------------------------------- step prediction */

#define MAX_QUEUES 32

typedef struct sim_queue {
    int kind;          /* hp_queue_kind */
    const void *group; /* COLLECTIVE: the communicator family */
    uint32_t axes;     /* COLLECTIVE: axes seen so far (0: all) */
    double free_at;    /* seconds: when its last transfer ends */
} sim_queue;

/* The queue the runtime would issue instruction x on (hp/instr.h): collectives of one group whose axes
 * overlap share a queue; one queue for point-to-point, one for copies. */
static sim_queue *queue_of(sim_queue *q, int *nq, const hp_instr *x) {
    int kind = x ? (int)x->queue : HP_QUEUE_COLLECTIVE;
    const void *group = x ? x->group : NULL;
    uint32_t axes = x ? x->axes : 0u;
    for (int i = 0; i < *nq; i++) {
        if (q[i].kind != kind) continue;
        if (kind != HP_QUEUE_COLLECTIVE) return &q[i];
        if (q[i].group == group && (axes == 0 || q[i].axes == 0 || (axes & q[i].axes))) {
            q[i].axes = axes == 0 || q[i].axes == 0 ? 0u : (q[i].axes | axes);
            return &q[i];
        }
    }
    if (*nq >= MAX_QUEUES) return &q[*nq - 1]; /* more groups than any mesh has: share the last */
    q[*nq] = (sim_queue){.kind = kind, .group = group, .axes = axes, .free_at = 0};
    return &q[(*nq)++];
}

hp_status hp_predict_nodes(const hp_graph *g, const hp_liveness *lv, int first, int last, const hp_machine_model *m,
                           hp_step_prediction *out) {
    memset(out, 0, sizeof *out);
    int nn = hp_graph_n_nodes(g), nt = hp_graph_n_tensors(g);
    if (first < 0 || last > nn || first > last)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "predict: node range [%d, %d) is outside [0, %d]", first, last, nn);
    if (lv && lv->n_nodes != nn)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "predict: liveness has %d nodes, graph %d", lv->n_nodes, nn);
    double *ready = calloc((size_t)nt + 1, sizeof *ready);
    if (!ready) return hp_error(HP_STATUS_OUT_OF_MEMORY, "predict: %d tensors", nt);
    out->calibrated = m->cal != NULL;
    for (int i = 0; i < nn && !out->by_node; i++)
        if ((!lv || lv->node_live[i]) && (hp_graph_node(g, i)->flags & HP_NODE_FLAG_ASYNC)) out->by_node = true;
    const hp_calibration *c = m->cal;
    double extra = 0; /* per-node dispatch of this program's mode beyond what the probe's mode included */
    if (c && out->by_node != c->by_node) extra = out->by_node ? c->region_seconds - c->node_seconds
                                                              : c->node_seconds - c->region_seconds;
    double share = c ? c->comm_compute_share : 0.0;
    sim_queue q[MAX_QUEUES];
    int nq = 0;
    double clock = 0; /* the compute stream */
    for (int i = first; i < last; i++) {
        if (lv && !lv->node_live[i]) continue;
        const hp_node *n = hp_graph_node(g, i);
        out->n_nodes++;
        double start = clock;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && n->in[k] < nt && ready[n->in[k]] > start) start = ready[n->in[k]];
        if (n->flags & HP_NODE_FLAG_ASYNC) {
            /* issued in program order when the compute stream gets here; waited for at first use */
            double d = hp_node_comm_seconds(g, i, m);
            sim_queue *qu = queue_of(q, &nq, hp_node_instr(n));
            double s = start > qu->free_at ? start : qu->free_at;
            qu->free_at = s + d;
            for (int k = 0; k < n->n_out; k++)
                if (n->out[k] >= 0 && n->out[k] < nt) ready[n->out[k]] = qu->free_at;
            out->comm_s += d;
            out->n_comm++;
            /* what the progress thread takes from the compute cores (no spare core) */
            clock += share * d;
            out->comm_compute_s += share * d;
            continue;
        }
        double d;
        int cls = HP_COST_MEMORY;
        if (c) {
            d = cal_compute_seconds(g, i, m, &cls);
            if (cls == HP_COST_VIEW) continue; /* no kernel, no dispatch */
            d += extra;
        }
        else {
            d = hp_node_seconds(g, i, m);
            cls = hp_node_cost(g, i).kind;
        }
        if (cls == HP_COST_GEMM) out->gemm_s += d - extra;
        else if (cls == HP_COST_ATTENTION) out->attention_s += d - extra;
        else out->memory_s += d - extra;
        out->dispatch_s += extra;
        out->compute_s += d;
        clock = start + d;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && n->out[k] < nt) ready[n->out[k]] = clock;
    }
    double end = clock;
    for (int k = 0; k < nq; k++)
        if (q[k].free_at > end) end = q[k].free_at;
    out->total_s = end;
    double busy = out->compute_s + out->comm_compute_s;
    out->exposed_comm_s = end - busy > 0 ? end - busy : 0.0;
    free(ready);
    return HP_STATUS_OK;
}

double hp_predict_seconds(const hp_graph *g, const hp_liveness *lv, int first, int last, const hp_machine_model *m) {
    hp_step_prediction p;
    if (hp_predict_nodes(g, lv, first, last, m, &p) != HP_STATUS_OK) return -1.0;
    return p.total_s;
}
