/*
 * The calibrated cost model (hp/costmodel.h): the alpha-beta fit recovers synthetic parameters;
 * per-class rates are applied to GEMM, attention and memory-bound nodes (and the flat model is
 * unchanged without a calibration); the step simulation overlaps a collective with compute; the
 * cache file round-trips and rejects another machine's or a stale entry with a message; the probe
 * fills a calibration (smoke test, not timed).
 */
#include "hp/calibrate.h"
#include "hp/costmodel.h"
#include "hp/instr.h"
#include "hp/ops.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hp_calibration *new_cal(void) {
    hp_calibration *c = malloc(sizeof *c);
    assert_non_null(c);
    hp_calibration_init(c);
    snprintf(c->key.cpu, sizeof c->key.cpu, "Test CPU 9000");
    c->key.cores = 8;
    c->key.threads = 2;
    c->key.ranks_per_node = 4;
    return c;
}

static void test_fit_recovers_alpha_beta(void **state) {
    (void)state;
    const double alpha = 25e-6, beta = 1.0 / 5e9; /* 25 us, 5 GB/s */
    double bytes[7], exact[7], noisy[7];
    for (int i = 0; i < 7; i++) {
        bytes[i] = 32.0 * pow(8.0, i); /* 32 B .. 8 MiB */
        exact[i] = alpha + beta * bytes[i];
        noisy[i] = exact[i] * (1.0 + 0.03 * ((i % 3) - 1)); /* -3%, 0, +3% */
    }
    double a, b, err;
    assert_ok(hp_comm_fit_alpha_beta(bytes, exact, 7, &a, &b, &err));
    assert_close(a, alpha, 1e-9, 0);
    assert_close(b, beta, 1e-9, 0);
    assert_true(err < 1e-9);
    assert_ok(hp_comm_fit_alpha_beta(bytes, noisy, 7, &a, &b, &err));
    assert_close(a, alpha, 0.05, 0);
    assert_close(b, beta, 0.05, 0);
    assert_true(err < 0.05);
    /* a pure bandwidth curve: alpha clamps at 0, beta refitted */
    double bw[3] = {1e-3, 2e-3, 4e-3}, sz[3] = {1e6, 2e6, 4e6};
    assert_ok(hp_comm_fit_alpha_beta(sz, bw, 3, &a, &b, NULL));
    assert_true(a >= 0);
    assert_close(b, 1e-9, 1e-6, 0);
    /* errors name the bad value */
    assert_int_equal(hp_comm_fit_alpha_beta(bytes, exact, 1, &a, &b, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("1 measurements");
    double z[2] = {1e-5, 0}, same[2] = {64, 64};
    assert_int_equal(hp_comm_fit_alpha_beta(bytes, z, 2, &a, &b, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("measurement 1");
    assert_int_equal(hp_comm_fit_alpha_beta(same, exact, 2, &a, &b, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("64 bytes");
}

static void test_comm_lookup(void **state) {
    (void)state;
    hp_calibration *c = new_cal();
    hp_comm_fit f2 = {.kind = HP_XFER_ALL_REDUCE, .group = 2, .alpha = 1e-5, .beta = 1e-9};
    hp_comm_fit f8 = {.kind = HP_XFER_ALL_REDUCE, .group = 8, .alpha = 4e-5, .beta = 2e-9};
    assert_ok(hp_calibration_set_comm(c, &f2));
    assert_ok(hp_calibration_set_comm(c, &f8));
    assert_int_equal(hp_calibration_comm(c, HP_XFER_ALL_REDUCE, 2)->group, 2);
    assert_int_equal(hp_calibration_comm(c, HP_XFER_ALL_REDUCE, 3)->group, 2);
    assert_int_equal(hp_calibration_comm(c, HP_XFER_ALL_REDUCE, 5)->group, 8); /* tie: the larger */
    assert_null(hp_calibration_comm(c, HP_XFER_ALL_GATHER, 2));
    hp_machine_model m = {.flops_per_s = 1e9, .bytes_per_s = 1e9, .cal = c};
    hp_xfer x = {.kind = HP_XFER_ALL_REDUCE, .group = 8, .bytes = 1e6};
    assert_close(hp_xfer_seconds(&m, &x), 4e-5 + 2e-3, 1e-12, 0);
    x.kind = HP_XFER_ALL_GATHER; /* not calibrated: the flat rate */
    assert_close(hp_xfer_seconds(&m, &x), 1e-3, 1e-12, 0);
    /* with measurements kept: interpolated inside their range, the fit's slope above, the first below */
    hp_comm_fit f4 = {.kind = HP_XFER_ALL_GATHER, .group = 4, .alpha = 1e-5, .beta = 1e-9, .n_kept = 3,
                      .bytes = {100, 1e4, 1e6}, .seconds = {2e-5, 4e-5, 1.04e-3}};
    assert_ok(hp_calibration_set_comm(c, &f4));
    x = (hp_xfer){.kind = HP_XFER_ALL_GATHER, .group = 4, .bytes = 5.05e5};
    assert_close(hp_xfer_seconds(&m, &x), 4e-5 + 0.5 * 1e-3, 1e-9, 0);
    x.bytes = 3e6;
    assert_close(hp_xfer_seconds(&m, &x), 1.04e-3 + 2e6 * 1e-9, 1e-9, 0);
    x.bytes = 10;
    assert_close(hp_xfer_seconds(&m, &x), 2e-5, 1e-12, 0);
    c->n_comm--;
    f2.alpha = 3e-5; /* replacing keeps one entry */
    assert_ok(hp_calibration_set_comm(c, &f2));
    assert_int_equal(c->n_comm, 2);
    assert_close(hp_calibration_comm(c, HP_XFER_ALL_REDUCE, 2)->alpha, 3e-5, 0, 0);
    free(c);
}

/* Every GEMM grid point at `rate` except the (512, 128, 128) op(A) = A one at `fast`. */
static void fill_gemm(hp_calibration *c, double rate, double fast) {
    for (int t = 0; t < 2; t++)
        for (int a = 0; a < HP_CAL_GEMM_DIMS; a++)
            for (int b = 0; b < HP_CAL_GEMM_DIMS; b++)
                for (int e = 0; e < HP_CAL_GEMM_DIMS; e++) c->gemm[t][a][b][e] = rate;
    c->gemm[0][2][1][1] = fast;
}

static void test_per_class_rates(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "x", HP_SHAPE(512, 128));
    hp_tid w = hp_param(g, "w", HP_SHAPE(128, 128));
    hp_tid y = hp_linear(g, x, w, HP_TID_NONE);             /* node 0: (512, 128, 128) */
    hp_tid h = hp_gelu(g, y);                               /* node 1: memory-bound */
    hp_tid dw = hp_matmul(g, h, x, true, false);            /* node 2: op(A) = A^T, (128, 128, 512) */
    hp_tid q = hp_reshape(g, h, HP_SHAPE(4, 128, 128));     /* node 3 */
    hp_tid o = hp_attention(g, q, q, q, 4, true);           /* node 4 */
    hp_tid y2 = hp_linear(g, hp_param(g, "x2", HP_SHAPE(256, 128)), w, HP_TID_NONE); /* node 5: (256, 128, 128) */
    assert_ok(hp_graph_status(g));
    (void)dw, (void)o, (void)y2;
    hp_op_cost c0 = hp_node_cost(g, 0), c2 = hp_node_cost(g, 2), c4 = hp_node_cost(g, 4);
    assert_int_equal(c0.kind, HP_COST_GEMM);
    assert_int_equal(c0.m, 512);
    assert_int_equal(c0.n, 128);
    assert_int_equal(c0.k, 128);
    assert_int_equal(c2.kind, HP_COST_GEMM);
    assert_true(c2.trans_a);
    assert_int_equal(c2.m, 128);
    assert_int_equal(c2.k, 512);
    assert_int_equal(c4.kind, HP_COST_ATTENTION);
    assert_int_equal(c4.batch, 16);
    assert_int_equal(c4.m, 128);
    assert_int_equal(c4.k, 32);
    assert_int_equal(hp_node_cost(g, 1).kind, HP_COST_MEMORY);

    /* without a calibration: the flat roofline, as before */
    hp_machine_model flat = {.flops_per_s = 1e9, .bytes_per_s = 1e12, .cal = NULL};
    assert_close(hp_node_seconds(g, 0, &flat), c0.flops / 1e9, 1e-12, 0);

    hp_calibration *c = new_cal();
    fill_gemm(c, 10e9, 40e9);
    c->op_curve[HP_OP_GELU] = (hp_cal_curve){.n = 2, .bytes = {1e5, 1e7}, .seconds = {1e-5, 2e-4}};
    c->attention[c->n_attention++] = (hp_cal_attention){.op = HP_OP_ATTENTION, .batch = 16, .t = 128, .d = 32,
                                                        .flops_per_s = 5e9};
    c->attention[c->n_attention++] = (hp_cal_attention){.op = HP_OP_ATTENTION, .batch = 16, .t = 1024, .d = 32,
                                                        .flops_per_s = 50e9};
    c->node_seconds = 1e-6;
    hp_machine_model m = {.flops_per_s = 1e9, .bytes_per_s = 1e9, .cal = c};
    /* a grid point: its own rate */
    assert_close(hp_calibration_gemm_rate(c, 512, 128, 128, false), 40e9, 1e-12, 0);
    assert_close(hp_node_seconds(g, 0, &m), c0.flops / 40e9, 1e-12, 0);
    /* halfway in log2(m) between 128 (10 GFLOP/s) and 512 (40): the geometric mean */
    assert_close(hp_calibration_gemm_rate(c, 256, 128, 128, false), 20e9, 1e-9, 0);
    assert_close(hp_node_seconds(g, 5, &m), hp_node_cost(g, 5).flops / 20e9, 1e-9, 0);
    /* the transposed grid is separate */
    assert_close(hp_node_seconds(g, 2, &m), c2.flops / 10e9, 1e-12, 0);
    /* outside the grid: clamped */
    assert_close(hp_calibration_gemm_rate(c, 8, 8, 8, false), 10e9, 1e-12, 0);
    /* memory-bound: the GELU curve at its bytes (2 x 256 KiB: between the two points) */
    hp_op_cost c1 = hp_node_cost(g, 1);
    double b = c1.bytes_read + c1.bytes_written, want = 1e-5 + (b - 1e5) / (1e7 - 1e5) * (2e-4 - 1e-5);
    assert_close(hp_node_seconds(g, 1, &m), want, 1e-12, 0);
    assert_close(hp_calibration_curve_seconds(c, HP_OP_GELU, 2e7), 2e-4 + 1e7 * (1.9e-4 / 9.9e6), 1e-9, 0);
    assert_true(hp_calibration_curve_seconds(c, HP_OP_SOFTMAX, 1e5) < 0); /* no curve */
    /* attention: the nearest measured shape of its operator */
    assert_close(hp_node_seconds(g, 4, &m), c4.flops / 5e9, 1e-12, 0);
    /* a memory-bound operator without a curve: the calibration's bandwidth, else the flat one */
    hp_tid r = hp_add(g, y, y);
    int ni = hp_graph_tensor(g, r)->producer;
    hp_op_cost ca = hp_node_cost(g, ni);
    assert_close(hp_node_seconds(g, ni, &m), (ca.bytes_read + ca.bytes_written) / 1e9 + 1e-6, 1e-9, 0);
    c->memory_bytes_per_s = 1e10;
    assert_close(hp_node_seconds(g, ni, &m), (ca.bytes_read + ca.bytes_written) / 1e10 + 1e-6, 1e-9, 0);
    free(c);
    hp_graph_free(g);
}

/* A collective stand-in: an all-reduce of 1e6 bytes on 2 ranks. */
static int fake_xfers(const hp_instr *self, hp_xfer *out, int max) {
    (void)self;
    if (max > 0) out[0] = (hp_xfer){.kind = HP_XFER_ALL_REDUCE, .group = 2, .bytes = 1e6};
    return 1;
}

static void test_predict_overlap(void **state) {
    (void)state;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_param(g, "x", HP_SHAPE(1000)), z = hp_param(g, "z", HP_SHAPE(1000));
    hp_tid y = hp_copy(g, x);       /* node 0: the "collective" */
    hp_tid a = hp_gelu(g, z);       /* node 1: compute that does not need it */
    hp_tid b = hp_gelu(g, a);       /* node 2 */
    hp_tid s = hp_add(g, y, b);     /* node 3: waits for it */
    assert_ok(hp_graph_status(g));
    (void)s;
    hp_instr ins = {.queue = HP_QUEUE_COLLECTIVE, .group = g, .bytes = 1e6, .xfers = fake_xfers};
    hp_node *n0 = hp_graph_node(g, 0);
    n0->extra = &ins;
    n0->flags |= HP_NODE_FLAG_INSTR | HP_NODE_FLAG_ASYNC;
    hp_calibration *c = new_cal();
    c->op_curve[HP_OP_GELU] = (hp_cal_curve){.n = 1, .bytes = {8000}, .seconds = {1e-3}};
    c->op_curve[HP_OP_ADD] = (hp_cal_curve){.n = 1, .bytes = {12000}, .seconds = {2e-4}};
    hp_comm_fit f = {.kind = HP_XFER_ALL_REDUCE, .group = 2, .alpha = 1e-4, .beta = 1e-9}; /* 1.1 ms */
    assert_ok(hp_calibration_set_comm(c, &f));
    hp_machine_model m = {.flops_per_s = 1e9, .bytes_per_s = 1e9, .cal = c};
    hp_step_prediction p;
    assert_ok(hp_predict_nodes(g, NULL, 0, 4, &m, &p));
    /* compute: gelu, gelu (2 ms) while the all-reduce (1.1 ms) runs; then the add (0.2 ms) */
    assert_close(p.comm_s, 1.1e-3, 1e-9, 0);
    assert_close(p.compute_s, 2.2e-3, 1e-9, 0);
    assert_close(p.total_s, 2.2e-3, 1e-9, 0);
    assert_close(p.exposed_comm_s, 0, 0, 1e-12);
    assert_int_equal(p.n_comm, 1);
    assert_true(p.by_node && p.calibrated);
    /* a slower collective (3.1 ms) is exposed: the add waits for it */
    c->comm[0].alpha = 2.1e-3;
    assert_ok(hp_predict_nodes(g, NULL, 0, 4, &m, &p));
    assert_close(p.total_s, 3.1e-3 + 2e-4, 1e-9, 0);
    assert_close(p.exposed_comm_s, 1.1e-3, 1e-9, 0);
    /* no spare core: its whole time also occupies the compute stream */
    c->comm[0].alpha = 1e-4;
    c->comm_compute_share = 1.0;
    assert_ok(hp_predict_nodes(g, NULL, 0, 4, &m, &p));
    assert_close(p.total_s, 1.1e-3 + 2.2e-3, 1e-9, 0);
    assert_close(p.comm_compute_s, 1.1e-3, 1e-9, 0);
    assert_close(p.compute_s, 2.2e-3, 1e-9, 0);
    assert_close(p.exposed_comm_s, 0, 0, 1e-12);
    /* node-by-node dispatch beyond the team's, per compute node */
    c->comm_compute_share = 0;
    c->node_seconds = 1e-6;
    c->region_seconds = 51e-6;
    assert_ok(hp_predict_nodes(g, NULL, 0, 4, &m, &p));
    assert_close(p.dispatch_s, 3 * 50e-6, 1e-9, 0);
    assert_close(p.total_s, 2.2e-3 + 3 * 50e-6, 1e-9, 0);
    /* a node range: the second gelu alone */
    assert_close(hp_predict_seconds(g, NULL, 2, 3, &m), 1e-3 + 50e-6, 1e-9, 0);
    assert_true(hp_predict_seconds(g, NULL, 3, 9, &m) < 0);
    hp_test_assert_error_contains("[3, 9)");
    free(c);
    hp_graph_free(g);
}

static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/hp_test_costmodel_%ld/%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid(), name);
    return buf;
}

static void test_cache_round_trip(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("sub/calibration.json"));
    hp_calibration *c = new_cal(), *r = new_cal();
    fill_gemm(c, 12.5e9, 99e9);
    c->gemm[1][3][3][3] = 0; /* not measured */
    c->created = 1.7e9;
    c->probe_seconds = 12.5;
    c->node_seconds = 1.5e-6;
    c->region_seconds = 3e-5;
    c->memory_bytes_per_s = 2.5e10;
    c->comm_compute_share = 1;
    c->op_curve[HP_OP_LAYERNORM] = (hp_cal_curve){.n = 3, .bytes = {1e3, 1e5, 1e7}, .seconds = {2e-6, 1e-5, 9e-4}};
    c->attention[c->n_attention++] = (hp_cal_attention){.op = HP_OP_ATTENTION_BACKWARD, .batch = 64, .t = 128,
                                                        .d = 32, .flops_per_s = 3.25e10};
    hp_comm_fit f = {.kind = HP_XFER_REDUCE_SCATTER, .group = 4, .alpha = 3.5e-5, .beta = 2.5e-10, .n_points = 7,
                     .max_rel_err = 0.125, .n_kept = 2, .bytes = {64, 65536}, .seconds = {3e-5, 5e-5}};
    assert_ok(hp_calibration_set_comm(c, &f));
    assert_ok(hp_calibration_save(path, c));
    /* a second machine setting in the same file */
    hp_calibration *c2 = new_cal();
    c2->key.threads = 1;
    c2->node_seconds = 7e-6;
    assert_ok(hp_calibration_save(path, c2));
    c->probe_seconds = 13.0; /* replacing the first entry keeps the second */
    assert_ok(hp_calibration_save(path, c));

    assert_ok(hp_calibration_load(path, &c->key, 0, r));
    assert_true(hp_machine_key_equal(&r->key, &c->key));
    assert_int_equal(r->version, HP_CAL_VERSION);
    assert_close(r->probe_seconds, 13.0, 0, 0);
    assert_close(r->created, c->created, 0, 0);
    assert_close(r->node_seconds, c->node_seconds, 1e-12, 0);
    assert_close(r->region_seconds, c->region_seconds, 1e-12, 0);
    assert_close(r->memory_bytes_per_s, c->memory_bytes_per_s, 1e-12, 0);
    assert_close(r->comm_compute_share, 1, 0, 0);
    for (int t = 0; t < 2; t++)
        for (int a = 0; a < HP_CAL_GEMM_DIMS; a++)
            for (int b = 0; b < HP_CAL_GEMM_DIMS; b++)
                for (int e = 0; e < HP_CAL_GEMM_DIMS; e++) assert_close(r->gemm[t][a][b][e], c->gemm[t][a][b][e], 1e-12, 0);
    assert_int_equal(r->op_curve[HP_OP_LAYERNORM].n, 3);
    for (int i = 0; i < 3; i++) {
        assert_close(r->op_curve[HP_OP_LAYERNORM].bytes[i], c->op_curve[HP_OP_LAYERNORM].bytes[i], 1e-12, 0);
        assert_close(r->op_curve[HP_OP_LAYERNORM].seconds[i], c->op_curve[HP_OP_LAYERNORM].seconds[i], 1e-12, 0);
    }
    assert_int_equal(r->op_curve[HP_OP_GELU].n, 0);
    assert_int_equal(r->n_attention, 1);
    assert_int_equal(r->attention[0].op, HP_OP_ATTENTION_BACKWARD);
    assert_int_equal(r->attention[0].batch, 64);
    assert_close(r->attention[0].flops_per_s, 3.25e10, 1e-12, 0);
    assert_int_equal(r->n_comm, 1);
    assert_int_equal(r->comm[0].kind, HP_XFER_REDUCE_SCATTER);
    assert_int_equal(r->comm[0].group, 4);
    assert_int_equal(r->comm[0].n_points, 7);
    assert_close(r->comm[0].alpha, 3.5e-5, 1e-12, 0);
    assert_close(r->comm[0].beta, 2.5e-10, 1e-12, 0);
    assert_close(r->comm[0].max_rel_err, 0.125, 1e-12, 0);
    assert_int_equal(r->comm[0].n_kept, 2);
    assert_close(r->comm[0].bytes[1], 65536, 0, 0);
    assert_close(r->comm[0].seconds[1], 5e-5, 1e-12, 0);
    /* the other entry, and any thread count (threads 0) finds the first match */
    assert_ok(hp_calibration_load(path, &c2->key, 0, r));
    assert_close(r->node_seconds, 7e-6, 1e-12, 0);
    hp_machine_key any = c->key;
    any.threads = 0;
    assert_ok(hp_calibration_load(path, &any, 0, r));
    /* the model reads it back the same */
    hp_machine_model m1 = {.flops_per_s = 1, .bytes_per_s = 1, .cal = c}, m2 = m1;
    assert_ok(hp_calibration_load(path, &c->key, 0, r));
    m2.cal = r;
    hp_xfer x = {.kind = HP_XFER_REDUCE_SCATTER, .group = 4, .bytes = 12345};
    assert_close(hp_xfer_seconds(&m2, &x), hp_xfer_seconds(&m1, &x), 1e-12, 0);
    remove(path);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp_path("sub"));
    rmdir(dir);
    free(c);
    free(c2);
    free(r);
}

static void test_cache_rejects(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("reject.json"));
    hp_calibration *c = new_cal(), *r = new_cal();
    c->created = 1.0; /* 1970: old */
    assert_ok(hp_calibration_save(path, c));
    /* another thread count and rank count: not found, the message says what differs */
    hp_machine_key k = c->key;
    k.threads = 1;
    k.ranks_per_node = 2;
    assert_int_equal(hp_calibration_load(path, &k, 0, r), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("2 threads (here 1)");
    hp_test_assert_error_contains("4 ranks per node (here 2)");
    hp_test_assert_error_contains(path);
    k = c->key;
    snprintf(k.cpu, sizeof k.cpu, "Other CPU");
    assert_int_equal(hp_calibration_load(path, &k, 0, r), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("cpu 'Test CPU 9000' (here 'Other CPU')");
    /* stale by age */
    assert_int_equal(hp_calibration_load(path, &c->key, 86400.0, r), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("stale");
    assert_ok(hp_calibration_load(path, &c->key, 0, r));
    /* stale by format version */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"format\": \"hyperparallel-calibration\", \"version\": 1, \"entries\": [{\"machine\": {\"cpu\": "
               "\"Test CPU 9000\", \"cores\": 8, \"threads\": 2, \"ranks_per_node\": 4}, \"version\": 0}]}\n");
    fclose(f);
    assert_int_equal(hp_calibration_load(path, &c->key, 0, r), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("stale (format version 0");
    /* a bad field names itself */
    f = fopen(path, "w");
    fprintf(f, "{\"format\": \"hyperparallel-calibration\", \"version\": 1, \"entries\": [{\"machine\": {\"cpu\": "
               "\"Test CPU 9000\", \"cores\": 8, \"threads\": 2, \"ranks_per_node\": 4}, \"version\": 1, "
               "\"created\": 1, \"probe_seconds\": 1, \"node_seconds\": -5}]}\n");
    fclose(f);
    assert_int_equal(hp_calibration_load(path, &c->key, 0, r), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("\"node_seconds\"");
    /* not a calibration file: neither read nor overwritten */
    f = fopen(path, "w");
    fprintf(f, "{\"hello\": 1}\n");
    fclose(f);
    assert_int_equal(hp_calibration_load(path, &c->key, 0, r), HP_STATUS_CORRUPT);
    hp_test_assert_error_contains("not a calibration file");
    assert_int_equal(hp_calibration_save(path, c), HP_STATUS_CORRUPT);
    remove(path);
    assert_int_equal(hp_calibration_load(path, &c->key, 0, r), HP_STATUS_IO);
    hp_test_assert_error_contains(path);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp_path(""));
    rmdir(dir);
    free(c);
    free(r);
}

static void test_machine_key(void **state) {
    (void)state;
    hp_machine_key k;
    assert_ok(hp_machine_key_local(3, 2, &k));
    assert_int_equal(k.threads, 3);
    assert_int_equal(k.ranks_per_node, 2);
    assert_true(k.cores >= 1);
    assert_true(strlen(k.cpu) > 0);
    char buf[256];
    assert_non_null(strstr(hp_machine_key_str(&k, buf, sizeof buf), "3 threads x 2 ranks per node"));
    assert_int_equal(hp_machine_key_local(-1, 0, &k), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("threads -1");
}

/* The probe on a tiny budget fills every part it runs (values are machine-dependent: not checked). */
static void test_probe_smoke(void **state) {
    (void)state;
    hp_calibrate_opts o = HP_CALIBRATE_OPTS_DEFAULT;
    o.reps = 1;
    o.max_gemm = 32.0 * 32 * 128;
    o.attention = false;
    hp_calibration *c = malloc(sizeof *c);
    assert_ok(hp_calibrate(NULL, &o, c));
    assert_true(c->gemm[0][0][0][0] > 0 && c->gemm[1][0][0][1] > 0);
    assert_true(c->gemm[0][3][3][3] == 0); /* beyond max_gemm */
    assert_true(c->op_curve[HP_OP_LAYERNORM].n >= 3 && c->op_curve[HP_OP_ADAMW].n >= 3);
    /* the other dispatch mode is a measured difference, which noise (a sanitizer build) can clamp to 0 */
    assert_true(c->node_seconds > 0 && c->region_seconds >= 0 && !c->by_node);
    assert_int_equal(c->n_comm, 0);
    o.reps = 0;
    assert_int_equal(hp_calibrate(NULL, &o, c), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("reps 0");
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_recovers_alpha_beta), cmocka_unit_test(test_comm_lookup),
        cmocka_unit_test(test_per_class_rates),         cmocka_unit_test(test_predict_overlap),
        cmocka_unit_test(test_cache_round_trip),        cmocka_unit_test(test_cache_rejects),
        cmocka_unit_test(test_machine_key),             cmocka_unit_test(test_probe_smoke),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
