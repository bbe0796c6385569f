/*
 * Concurrent sub-models (HyperMPMD) against the same multimodal model as one linear pipeline over
 * the same three ranks (encoder a -> encoder b -> decoder, 1F1B): rows/s, bubble fraction
 * (1 - busy / (3 ranks x wall), busy = each group's measured compute) and the throughput ratio.
 * The two modes run in alternating rounds of STEPS steps (ROUNDS each), and the median round is
 * reported, so a change of the machine's load hits both alike. Run under mpirun with 3 ranks:
 *   OMP_NUM_THREADS=1 mpirun --oversubscribe -n 3 ./build/bench/bench_mm [STEPS] [LOAD] [ROUNDS] [MICRO_BATCHES]
 * LOAD picks the encoders: "unequal" (a: 7x7 patches, 1 layer; b: 4x4 patches, 3 layers; decoder
 * 2 layers), "equal" (both 4x4 patches, 2 layers), or "PA:LA:PB:LB:LD" (encoder a's patch size and
 * layers, encoder b's, the decoder's layers; e.g. "7:6:4:3:2").
 */
#include "hp/comm_mpi.h"
#include "hp/costmodel.h"
#include "hp/multimodal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One round: `steps` steps of runner r; rows/s, bubble and the mean predicted step. */
static hp_status round_of(hp_comm *world, hp_mm_runner *r, int steps, int batch, double *rows_s, double *bubble,
                          double *pred) {
    double wall = 0, busy = 0, p = 0;
    for (int s = 0; s < steps; s++) {
        hp_mm_step_stats ms;
        HP_CHECK(hp_mm_runner_step(r, &ms));
        float w = (float)ms.seconds, wmax = 0;
        HP_CHECK(hp_comm_all_reduce(world, &w, &wmax, 1, HP_DTYPE_F32, HP_REDUCE_MAX));
        wall += wmax;
        busy += ms.busy[0] + ms.busy[1] + ms.busy[2];
        p += ms.predicted;
    }
    *rows_s = steps * batch / wall;
    *bubble = 1.0 - busy / (3.0 * wall);
    *pred = p / steps;
    return HP_STATUS_OK;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    const char *load = argc > 2 ? argv[2] : "unequal";
    bool eq = strcmp(load, "equal") == 0;
    int pa = eq ? 4 : 7, la = eq ? 2 : 1, pb = 4, lb = eq ? 2 : 3, ld = 2;
    if (strchr(load, ':') && sscanf(load, "%d:%d:%d:%d:%d", &pa, &la, &pb, &lb, &ld) != 5) {
        fprintf(stderr, "bench_mm: LOAD \"%s\" is not PA:LA:PB:LB:LD\n", load);
        return 2;
    }
    int mbs = argc > 4 ? atoi(argv[4]) : 8; /* micro-batches per step of 32 rows */
    char text[2048];
    snprintf(text, sizeof text,
             "model: {family: multimodal, layers: %d, heads: 4, width: 64,\n"
             "  multimodal: {patch_a: %d, layers_a: %d, width_a: 64, patch_b: %d, layers_b: %d, width_b: 64,\n"
             "               train_images: 2000, test_images: 10}}\n"
             "train: {steps: 1000, batch: 32, seed: 1}\n"
             "pipeline: {micro_batches: %d}\n"
             "groups: {a: {kind: encoder, ranks: [0]}, b: {kind: encoder, ranks: [1]}, dec: {kind: fusion, ranks: [2]}}\n",
             ld, pa, la, pb, lb, mbs);
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (steps < 1 || rounds < 1 || rounds > 64 || mbs < 1 || 32 % mbs) {
        fprintf(stderr, "usage: bench_mm [STEPS >= 1] [unequal|equal] [ROUNDS 1..64] [MICRO_BATCHES dividing 32]\n");
        return 2;
    }
    const char *names[2] = {"concurrent", "pipeline_1f1b"};
    hp_mm_mode modes[2] = {HP_MM_MODE_CONCURRENT, HP_MM_MODE_CHAIN};
    hp_run_config c;
    hp_mm_runner *r[2] = {NULL, NULL};
    double rs[2][64], bub[2][64], pr[2][64];
    hp_status st = hp_run_config_load_string(text, strlen(text), "bench_mm.yaml", &c);
    for (int k = 0; k < 2 && st == HP_STATUS_OK; k++) st = hp_mm_runner_new(&c, world, modes[k], &r[k]);
    for (int k = 0; k < 2 && st == HP_STATUS_OK; k++) /* warm-up: the first steps have no measured times */
        st = round_of(world, r[k], 2, (int)c.train.batch, &rs[k][0], &bub[k][0], &pr[k][0]);
    for (int i = 0; i < rounds && st == HP_STATUS_OK; i++)
        for (int k = 0; k < 2 && st == HP_STATUS_OK; k++)
            st = round_of(world, r[k], steps, (int)c.train.batch, &rs[k][i], &bub[k][i], &pr[k][i]);
    int rc = st != HP_STATUS_OK;
    if (rc) fprintf(stderr, "bench_mm: %s\n", hp_error_message());
    double med[2] = {0, 0};
    for (int k = 0; k < 2 && !rc; k++) {
        double a[64], b[64], p[64];
        memcpy(a, rs[k], sizeof(double) * (size_t)rounds);
        memcpy(b, bub[k], sizeof(double) * (size_t)rounds);
        memcpy(p, pr[k], sizeof(double) * (size_t)rounds);
        qsort(a, (size_t)rounds, sizeof *a, cmp), qsort(b, (size_t)rounds, sizeof *b, cmp), qsort(p, (size_t)rounds, sizeof *p, cmp);
        med[k] = a[rounds / 2];
        if (hp_comm_rank(world) == 0)
            printf("{\"bench\": \"mm\", \"load\": \"%s\", \"mode\": \"%s\", \"rounds\": %d, \"steps\": %d, "
                   "\"rows_per_s\": %.1f, \"rows_per_s_min\": %.1f, \"rows_per_s_max\": %.1f, \"bubble\": %.3f, "
                   "\"predicted_step_s\": %.4f}\n", load, names[k], rounds, steps, med[k], a[0], a[rounds - 1],
                   b[rounds / 2], p[rounds / 2]);
    }
    if (!rc && hp_comm_rank(world) == 0) {
        printf("{\"bench\": \"mm\", \"load\": \"%s\", \"throughput_ratio\": %.3f}\n", load, med[0] / med[1]);
        /* the cost model's view (hp plan's): flat roofline pass times, both schedules simulated */
        hp_mm_config mc = hp_mm_config_from_run(&c);
        hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
        double tf[3], tb[3];
        hp_mm_schedule a, b;
        int rows = (int)(c.train.batch / c.pipeline.micro_batches);
        if (hp_mm_predict_passes(&mc, rows, (int)c.pipeline.micro_batches, &mm, tf, tb) == HP_STATUS_OK &&
            hp_mm_schedule_make(HP_MM_MODE_CONCURRENT, (int)c.pipeline.micro_batches, tf, tb, 0, &a) == HP_STATUS_OK &&
            hp_mm_schedule_make(HP_MM_MODE_CHAIN, (int)c.pipeline.micro_batches, tf, tb, 0, &b) == HP_STATUS_OK)
            printf("{\"bench\": \"mm\", \"load\": \"%s\", \"cost_model_ms_per_microbatch\": [%.3f, %.3f, %.3f], "
                   "\"cost_model_step_ms\": {\"concurrent\": %.3f, \"pipeline_1f1b\": %.3f}, \"cost_model_ratio\": %.3f}\n",
                   load, 1e3 * (tf[0] + tb[0]), 1e3 * (tf[1] + tb[1]), 1e3 * tf[2], 1e3 * a.makespan, 1e3 * b.makespan,
                   b.makespan / a.makespan);
    }
    hp_mm_runner_free(r[0]);
    hp_mm_runner_free(r[1]);
    hp_run_config_free(&c); /* safe on the defaults a failed load leaves */
    hp_comm_free(world);
    if (rc) hp_comm_mpi_abort(rc);
    hp_comm_mpi_finalize();
    return rc;
}
