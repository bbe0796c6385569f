/* ranks: 2 4 */
/*
 * Pipeline parallelism (hp/pipeline.h) over real MPI processes against the single-device step,
 * computed by every process alone: for every schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V,
 * DualPipeV) at this world size, with m a multiple of the ranks and not, an untied and a tied head,
 * even and uneven layer splits: the loss and every gradient after one step's forward and backward
 * equal the single-device ones within 1e-5 of the tensor's largest value, every parameter after
 * AdamW with clipping within that too, except elements whose gradient is below 1e-2 of the tensor's
 * largest, held to 2 lr (AdamW's first step is about lr g / |g|, so where g is rounding-sized a
 * last-bit difference moves it by up to 2 lr); then a 10-step loss trajectory within 1e-4
 * relative. Stages over several processes (data-parallel replicas splitting each micro-batch's
 * rows, groups of equal and unequal sizes) are held to the same. The attention key biases are held only to "moved at most 2 lr apart" and
 * gradients below 1e-5 of the largest gradient of the model: their exact gradient is 0 (softmax
 * ignores a shift shared by every key), so both sides hold rounding noise
 * (tests/unit/test_torch_ref.c meets the same). On 2 ranks, 1F1B with HyperOffload inside the stages
 * is held to the same: the activations in flight to the host tier (200 kB per rank) and to the disk
 * tier (150 kB per rank, so both stages offload; also under ZB-H1, whose B and W phases run
 * apart), where every rank must have written activation bytes to disk and read them back
 * (hp_pipeline_stats.bytes_to_disk, bytes_from_disk).
 */
#include "hp/comm_mpi.h"
#include "hp/compile.h"
#include "hp/ops.h"
#include "hp/pipeline.h"
#include "hp/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK_ON_FAIL goto out
#include "mpi_check.h"

#define BATCH 24
#define SEQ 8
#define STEPS 10
#define SEED 7

static const hp_optim_config OPTIM = {.lr = 3e-3, .min_lr = 3e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                                      .eps = 1e-8, .grad_clip = 0.5};

static size_t g_offload; /* device_budget of HyperOffload inside the stages, bytes per rank (0: none) */
static const char *g_disk_dir; /* with g_offload: the activations go to the disk tier in this directory */

static hp_gpt_config model(bool tied, int layers) {
    return (hp_gpt_config){.vocab = 48, .context = SEQ, .layers = layers, .heads = 2, .width = 16, .tied_head = tied};
}

static void batch(int step, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < BATCH * SEQ; i++) {
        tok[i] = (int32_t)(hp_rng_u64(11 + (uint64_t)step, (uint64_t)i) % 48);
        tgt[i] = (int32_t)(hp_rng_u64(23 + (uint64_t)step, (uint64_t)i) % 48);
    }
}

/* The single-device step: a program with the gradients and parameters kept. */
typedef struct reference {
    hp_graph *g;
    hp_gpt gpt;
    hp_train_step ts;
    hp_program *p;
} reference;

static hp_status ref_new(const hp_gpt_config *c, reference *r) {
    memset(r, 0, sizeof *r);
    r->g = hp_graph_new();
    HP_CHECK(hp_gpt_build(r->g, c, BATCH, SEQ, true, &r->gpt));
    HP_CHECK(hp_train_step_build(r->g, r->gpt.loss, &OPTIM, &r->ts));
    hp_tid keep[256];
    int nk = 0;
    keep[nk++] = r->ts.loss;
    for (int i = 0; i < r->ts.n_params && nk < 256; i++) keep[nk++] = r->ts.grads[i];
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = nk;
    HP_CHECK(hp_program_new(r->g, &o, &r->p));
    for (int i = 0; i < r->ts.n_params; i++) {
        const hp_tensor *t = hp_graph_tensor(r->g, r->ts.params[i]);
        HP_CHECK(hp_gpt_init_param(c, t->name, SEED, 0, hp_shape_numel(&t->shape), hp_program_data(r->p, r->ts.params[i])));
        memset(hp_program_data(r->p, r->ts.m[i]), 0, (size_t)hp_shape_numel(&t->shape) * sizeof(float));
        memset(hp_program_data(r->p, r->ts.v[i]), 0, (size_t)hp_shape_numel(&t->shape) * sizeof(float));
    }
    return HP_STATUS_OK;
}

static hp_status ref_step(reference *r, int step, float *loss) {
    int32_t tok[BATCH * SEQ], tgt[BATCH * SEQ];
    batch(step, tok, tgt);
    float lr = (float)OPTIM.lr, st = (float)(step + 1);
    HP_CHECK(hp_program_set_input(r->p, r->gpt.tokens, tok, sizeof tok));
    HP_CHECK(hp_program_set_input(r->p, r->gpt.targets, tgt, sizeof tgt));
    HP_CHECK(hp_program_set_input(r->p, r->ts.lr, &lr, sizeof lr));
    HP_CHECK(hp_program_set_input(r->p, r->ts.step, &st, sizeof st));
    HP_CHECK(hp_program_run(r->p));
    *loss = *(const float *)hp_program_data(r->p, r->ts.loss);
    return HP_STATUS_OK;
}

static void ref_free(reference *r) {
    hp_program_free(r->p);
    hp_graph_free(r->g);
}

/* Worst |a - b| / max|b| over a tensor. */
static double rel_err(const float *a, const float *b, int64_t n) {
    double worst = 0, scale = 1e-12;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return worst / scale;
}

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Every store entry named `prefix` + a reference parameter's name against the reference's gradient
 * (grads) or parameter. */
static void compare(hp_pipeline *pp, reference *r, const char *prefix, bool grads, const char *label) {
    hp_store *s = hp_pipeline_store(pp);
    double gmax = 0; /* the largest gradient of the model */
    for (int i = 0; i < r->ts.n_params && grads; i++) {
        const hp_tensor *t = hp_graph_tensor(r->g, r->ts.params[i]);
        gmax = fmax(gmax, max_abs(hp_program_data(r->p, r->ts.grads[i]), hp_shape_numel(&t->shape)));
    }
    for (int i = 0; i < r->ts.n_params; i++) {
        const hp_tensor *t = hp_graph_tensor(r->g, r->ts.params[i]);
        char name[600];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        const float *mine = hp_store_data(s, name);
        if (!mine) continue; /* another rank's stage */
        const float *ref = hp_program_data(r->p, grads ? r->ts.grads[i] : r->ts.params[i]);
        int64_t n = hp_shape_numel(&t->shape);
        double e = rel_err(mine, ref, n), scale = fmax(max_abs(ref, n), 1e-12), lr = OPTIM.lr;
        if (ends_with(t->name, "attn.k.bias")) {
            if (grads)
                CHECK(max_abs(mine, n) <= 1e-5 * gmax && max_abs(ref, n) <= 1e-5 * gmax,
                      "%s: %s is not rounding-sized (%.3g, single device %.3g; largest gradient %.3g)", label, name,
                      max_abs(mine, n), max_abs(ref, n), gmax);
            else
                CHECK(e * scale <= 2 * lr * 1.0001, "%s: %s moved %.3g apart (more than 2 lr)", label, name, e * scale);
            continue;
        }
        if (!grads) { /* per element: within 1e-5, or a rounding-sized gradient that AdamW's first step amplifies */
            const float *g = hp_program_data(r->p, r->ts.grads[i]);
            double gm = max_abs(g, n);
            int64_t bad = 0, first = -1;
            for (int64_t k = 0; k < n; k++) {
                double d = fabs((double)mine[k] - (double)ref[k]);
                bool ok = d <= 1e-5 * scale || (fabs((double)g[k]) <= 1e-2 * gm && d <= 2 * lr * 1.0001);
                if (!ok && !bad++) first = k;
            }
            CHECK(!bad, "%s: %s: %lld elements differ (first %lld: %.9g vs %.9g)", label, name, (long long)bad,
                  (long long)first, first >= 0 ? (double)mine[first] : 0.0, first >= 0 ? (double)ref[first] : 0.0);
            continue;
        }
        double tol = 1e-5;
        CHECK(e <= tol, "%s: %s differs by %.3g of its largest value (tolerance %.3g; first values %.6g %.6g vs %.6g %.6g)",
              label, name, e, tol, (double)mine[0], (double)mine[1], (double)ref[0], (double)ref[1]);
    }
}

/* One schedule over p stage groups of gsize[r] processes each (NULL: p = the world, one each). */
static void check_groups(hp_comm *world, hp_sched_kind kind, int m, bool tied, int layers, const int *first_layer, int p,
                         const int *gsize) {
    char label[160], gs[64] = "";
    for (int r = 0; gsize && r < p; r++) snprintf(gs + strlen(gs), sizeof gs - strlen(gs), "%s%d", r ? "," : " groups ", gsize[r]);
    snprintf(label, sizeof label, "%s p=%d m=%d %s layers=%d%s%s", hp_sched_kind_name(kind), p, m, tied ? "tied" : "untied",
             layers, first_layer ? " uneven" : "", gs);
    hp_gpt_config c = model(tied, layers);
    reference r;
    hp_schedule s;
    memset(&s, 0, sizeof s);
    hp_pipeline *pp = NULL;
    bool have_sched = false;
    OK(ref_new(&c, &r));
    OK(hp_schedule_build(kind, p, m, 0, &s));
    have_sched = true;
    hp_pipeline_opts o = HP_PIPELINE_OPTS_INIT;
    o.model = &c;
    o.batch = BATCH;
    o.seq = SEQ;
    o.schedule = &s;
    o.first_layer = first_layer;
    o.optim = &OPTIM;
    o.comm = world;
    o.group_size = gsize;
    hp_offload_plan_config ocfg;
    hp_offload_plan_config_init(&ocfg);
    ocfg.device_budget = g_offload;
    ocfg.bandwidth[HP_TIER_HOST] = 1e10; /* no probe */
    ocfg.bandwidth[HP_TIER_DISK] = 1e9;
    if (g_disk_dir) {
        ocfg.disk_dir = g_disk_dir;
        ocfg.policy[HP_OFFLOAD_CLASS_ACTIVATIONS] = HP_TIER_DISK;
    }
    if (g_offload) o.offload = &ocfg;
    OK(hp_pipeline_new(&o, &pp));
    OK(hp_pipeline_init_params(pp, SEED));
    if (!gsize) { /* micro-batches in flight: the program instances this rank keeps against the schedule's peak */
        int slots = 0, k;
        for (int c = 0; c < hp_pipeline_n_chunks(pp); c++) {
            OK(hp_pipeline_stage_info(pp, c, NULL, NULL, &k));
            slots += k;
        }
        /* one chunk: exactly the peak; several: each chunk keeps its own peak's worth (their peaks
         * fall at different times), at most p - 1 more than the rank's peak over all chunks */
        int peak = hp_schedule_peak_formula(kind, p, m, s.v, g_rank), slack = s.v > 1 ? p - 1 : 0;
        CHECK(slots <= peak + slack, "%s: rank %d keeps %d micro-batches' activations, the schedule's peak is %d",
              label, g_rank, slots, peak);
    }
    compare(pp, &r, "", false, label); /* the same initial weights */
    int32_t tok[BATCH * SEQ], tgt[BATCH * SEQ];
    float ref_loss[STEPS], loss, gn;
    for (int step = 0; step < STEPS; step++) {
        OK(ref_step(&r, step, &ref_loss[step]));
        batch(step, tok, tgt);
        OK(hp_pipeline_forward_backward(pp, tok, tgt, &loss));
        if (step == 0) {
            CHECK(fabsf(loss - ref_loss[0]) <= 1e-5f * fabsf(ref_loss[0]), "%s: loss %.8g, single device %.8g", label,
                  (double)loss, (double)ref_loss[0]);
            compare(pp, &r, "grad_acc.", true, label);
        }
        OK(hp_pipeline_update(pp, (float)OPTIM.lr, &gn));
        if (step == 0) compare(pp, &r, "", false, label);
        CHECK(fabsf(loss - ref_loss[step]) <= 1e-4f * fabsf(ref_loss[step]), "%s: step %d loss %.8g, single device %.8g",
              label, step + 1, (double)loss, (double)ref_loss[step]);
    }
    if (g_offload) { /* the activations in flight did leave the fast tier */
        hp_pipeline_stats ps;
        hp_pipeline_get_stats(pp, &ps);
        float mine = (float)ps.bytes_offloaded, all = 0;
        OK(hp_comm_all_reduce(world, &mine, &all, 1, HP_DTYPE_F32, HP_REDUCE_SUM));
        CHECK(all > 0, "%s: offload budget %zu bytes: no activation was offloaded", label, g_offload);
        if (g_rank == 0) printf("%s: offload %zu B/rank%s: %lld activation bytes offloaded\n", label, g_offload,
                                g_disk_dir ? " (disk tier)" : "", (long long)all);
        /* to the disk tier and back, on every rank that offloaded (under 1F1B the last rank's one
         * micro-batch in flight, its backward in autodiff order, fits 150 kB; under ZB-H1, B and W
         * apart, it does not) */
        if (g_disk_dir && (ps.bytes_offloaded > 0 || g_rank == 0 || s.split_backward)) {
            CHECK(ps.bytes_to_disk > 0 && ps.bytes_to_disk == ps.bytes_offloaded,
                  "%s: rank %d wrote %lld bytes to disk of %lld offloaded", label, g_rank, (long long)ps.bytes_to_disk,
                  (long long)ps.bytes_offloaded);
            CHECK(ps.bytes_from_disk > 0, "%s: rank %d read %lld bytes back from disk", label, g_rank,
                  (long long)ps.bytes_from_disk);
            if (g_rank == 0)
                printf("%s: rank 0 wrote %lld and read %lld activation bytes on disk over %d steps\n", label,
                       (long long)ps.bytes_to_disk, (long long)ps.bytes_from_disk, STEPS);
        }
    }
out:
    hp_pipeline_free(pp);
    if (have_sched) hp_schedule_free(&s);
    ref_free(&r);
}

static void check_schedule(hp_comm *world, hp_sched_kind kind, int m, bool tied, int layers, const int *first_layer) {
    check_groups(world, kind, m, tied, layers, first_layer, hp_comm_size(world), NULL);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int p = hp_comm_size(world);
    const char *one = getenv("HP_TEST_PIPELINE"); /* "KIND M TIED LAYERS": one case, for debugging */
    if (one) {
        char kn[32];
        int m, tied, layers;
        hp_sched_kind k;
        if (sscanf(one, "%31s %d %d %d", kn, &m, &tied, &layers) == 4 && hp_sched_kind_parse(kn, &k) == HP_STATUS_OK)
            check_schedule(world, k, m, tied, layers, NULL);
        goto done;
    }
    const hp_sched_kind kinds[] = {HP_SCHED_KIND_GPIPE, HP_SCHED_KIND_1F1B, HP_SCHED_KIND_INTERLEAVED_1F1B,
                                   HP_SCHED_KIND_ZB_H1, HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_DUALPIPE_V};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int stages = kinds[k] == HP_SCHED_KIND_GPIPE || kinds[k] == HP_SCHED_KIND_1F1B || kinds[k] == HP_SCHED_KIND_ZB_H1 ? p : 2 * p;
        check_schedule(world, kinds[k], 2 * p, false, stages, NULL);   /* m a multiple of p */
        check_schedule(world, kinds[k], 3, true, stages + 1, NULL);   /* m not a multiple, tied head, uneven */
    }
    /* uneven layers per stage from the caller: 5 layers on p stages, the last stage holding most */
    int first[4] = {0, 1, 2, 3};
    if (p == 2) first[1] = 1;
    check_schedule(world, HP_SCHED_KIND_1F1B, 4, false, 5, first);
    /* stages over several processes (data-parallel replicas of a stage, rows split between them) */
    if (p == 2) {
        const int one[1] = {2};
        check_groups(world, HP_SCHED_KIND_1F1B, 4, true, 3, NULL, 1, one); /* pure data parallelism */
    }
    if (p == 4) {
        const int two[2] = {2, 2}, uneq[3] = {1, 2, 1};
        check_groups(world, HP_SCHED_KIND_1F1B, 4, false, 4, NULL, 2, two);  /* pp2 x dp2 */
        check_groups(world, HP_SCHED_KIND_ZB_V, 4, true, 4, NULL, 2, two);   /* the V: both ends on group 0 */
        check_groups(world, HP_SCHED_KIND_GPIPE, 3, true, 5, NULL, 2, two);  /* 8 rows: 4 + 4; tied on two groups */
        check_groups(world, HP_SCHED_KIND_1F1B, 4, true, 5, NULL, 3, uneq);  /* 3 stages on 1, 2 and 1 ranks */
        check_groups(world, HP_SCHED_KIND_ZB_H1, 8, false, 3, NULL, 3, uneq); /* 3 rows per micro-batch: 2 + 1 */
    }
    /* HyperOffload inside the stages: each micro-batch's activations under its share of the budget */
    const char *ob = getenv("HP_TEST_PIPELINE_OFFLOAD");
    g_offload = ob ? (size_t)strtoull(ob, NULL, 10) : 200000;
    if (p == 2) check_schedule(world, HP_SCHED_KIND_1F1B, 2 * p, false, 2 * p, NULL);
    /* the same to the disk tier: every phase (F, B, W ranges of a slot's program) drains its disk
     * reads and writes, each slot its own store file; 150 kB per rank makes rank 0 offload (two
     * micro-batches in flight) and, with B and W apart, rank 1 too (one) */
    g_offload = ob ? (size_t)strtoull(ob, NULL, 10) : 150000;
    const char *tmp = getenv("TMPDIR");
    g_disk_dir = tmp && *tmp ? tmp : "/tmp";
    if (p == 2) check_schedule(world, HP_SCHED_KIND_1F1B, 2 * p, false, 2 * p, NULL);
    if (p == 2) check_schedule(world, HP_SCHED_KIND_ZB_H1, 2 * p, false, 2 * p, NULL); /* B and W apart */
    g_disk_dir = NULL;
    g_offload = 0;
done:;
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "every schedule matches the single-device step");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
