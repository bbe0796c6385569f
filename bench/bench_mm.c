/*
 * Concurrent sub-models (HyperMPMD) against the same multimodal model as one linear pipeline over
 * the same three ranks (encoder a -> encoder b -> decoder, 1F1B): rows/s, bubble fraction
 * (1 - busy / (3 ranks x wall), busy = each group's measured compute) and the throughput ratio.
 * Run under mpirun with 3 ranks:
 *   OMP_NUM_THREADS=1 mpirun --oversubscribe -n 3 ./build/bench/bench_mm [STEPS] [LOAD]
 * LOAD picks the encoders: "unequal" (a: 7x7 patches, 1 layer; b: 4x4 patches, 3 layers; decoder
 * 2 layers) or "equal" (both 4x4 patches, 2 layers).
 */
#include "hp/comm_mpi.h"
#include "hp/multimodal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hp_status run(hp_comm *world, const char *text, hp_mm_mode mode, int steps, double *rows_s, double *bubble,
                     double *pred) {
    hp_run_config c;
    HP_CHECK(hp_run_config_load_string(text, strlen(text), "bench_mm.yaml", &c));
    hp_mm_runner *r;
    hp_status st = hp_mm_runner_new(&c, world, mode, &r);
    if (st != HP_STATUS_OK) {
        hp_run_config_free(&c);
        return st;
    }
    double wall = 0, busy = 0, p = 0;
    for (int s = 0; s < steps + 2 && st == HP_STATUS_OK; s++) {
        hp_mm_step_stats ms;
        st = hp_mm_runner_step(r, &ms);
        if (s < 2) continue; /* warm-up: the first step's schedule has no measured times */
        double w = ms.seconds;
        HP_CHECK(hp_comm_all_reduce(world, &(float){(float)w}, &(float){0}, 1, HP_DTYPE_F32, HP_REDUCE_MAX));
        wall += w;
        busy += ms.busy[0] + ms.busy[1] + ms.busy[2];
        p += ms.predicted;
    }
    *rows_s = steps * c.train.batch / wall;
    *bubble = 1.0 - busy / (3.0 * wall);
    *pred = p / steps;
    hp_mm_runner_free(r);
    hp_run_config_free(&c);
    return st;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    const char *load = argc > 2 ? argv[2] : "unequal";
    bool eq = strcmp(load, "equal") == 0;
    char text[2048];
    snprintf(text, sizeof text,
             "model: {family: multimodal, layers: 2, heads: 4, width: 64,\n"
             "  multimodal: {patch_a: %d, layers_a: %d, width_a: 64, patch_b: 4, layers_b: %d, width_b: 64,\n"
             "               train_images: 2000, test_images: 10}}\n"
             "train: {steps: 1000, batch: 32, seed: 1}\n"
             "pipeline: {micro_batches: 8}\n"
             "groups: {a: {kind: encoder, ranks: [0]}, b: {kind: encoder, ranks: [1]}, dec: {kind: fusion, ranks: [2]}}\n",
             eq ? 4 : 7, eq ? 2 : 1, eq ? 2 : 3);
    double rs[2], bub[2], pr[2];
    const char *names[2] = {"concurrent", "pipeline_1f1b"};
    hp_mm_mode modes[2] = {HP_MM_MODE_CONCURRENT, HP_MM_MODE_CHAIN};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        hp_status st = run(world, text, modes[k], steps, &rs[k], &bub[k], &pr[k]);
        if (st != HP_STATUS_OK) {
            fprintf(stderr, "bench_mm: %s: %s\n", names[k], hp_error_message());
            rc = 1;
            break;
        }
        if (hp_comm_rank(world) == 0)
            printf("{\"bench\": \"mm\", \"load\": \"%s\", \"mode\": \"%s\", \"steps\": %d, \"rows_per_s\": %.1f, "
                   "\"bubble\": %.3f, \"predicted_step_s\": %.4f}\n", load, names[k], steps, rs[k], bub[k], pr[k]);
    }
    if (rc == 0 && hp_comm_rank(world) == 0)
        printf("{\"bench\": \"mm\", \"load\": \"%s\", \"throughput_ratio\": %.3f}\n", load, rs[0] / rs[1]);
    hp_comm_free(world);
    if (rc) hp_comm_mpi_abort(rc);
    hp_comm_mpi_finalize();
    return rc;
}
