/* ranks: 3 5 */
/*
 * The multimodal model (hp/multimodal.h) as concurrent sub-models on three one-rank groups (encoder
 * a, encoder b, decoder) equals the single-device computation: over several steps of 4 micro-batches
 * (clip + AdamW between them, so later steps also check the gradients) every step's loss and
 * gradient norm are within 1e-5 relative of the whole model's one-program training step on the same
 * rows, and after training every parameter of this rank's sub-model matches. The baseline linear
 * pipeline (HP_MM_MODE_CHAIN) computes the same losses too. The decoder's greedy test accuracy
 * equals the single-device one. On 5 ranks encoder b and the decoder are groups of 2 ranks (data
 * parallel: each rank half of every micro-batch's rows, the rows handed between groups of different
 * sizes by their overlaps).
 */
#include "hp/comm_mpi.h"
#include "hp/multimodal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

#define STEPS 4

static const char *k_base =
    "model: {family: multimodal, layers: 1, heads: 2, width: 16,\n"
    "        multimodal: {patch_a: 7, layers_a: 1, width_a: 16, patch_b: 4, layers_b: 2, width_b: 16,\n"
    "                     train_images: 512, test_images: 50}}\n"
    "train: {steps: 4, batch: 8, seed: 3}\n"
    "optim: {lr: 0.01, warmup: 0, grad_clip: 0.5, weight_decay: 0.1}\n";
static const char *k_groups3 =
    "pipeline: {micro_batches: 4}\n"
    "groups:\n"
    "  enc_light: {kind: encoder, ranks: [0]}\n"
    "  enc_heavy: {kind: encoder, ranks: [1]}\n"
    "  text: {kind: fusion, ranks: [2]}\n";
static const char *k_groups5 =
    "pipeline: {micro_batches: 4}\n"
    "groups:\n"
    "  enc_light: {kind: encoder, ranks: [0]}\n"
    "  enc_heavy: {kind: encoder, ranks: [1, 2], mesh: {device_matrix: [2], alias_name: [dp]}}\n"
    "  text: {kind: fusion, ranks: [3, 4], mesh: {device_matrix: [2], alias_name: [dp]}}\n";
static int g_size;

static hp_status load(bool groups, hp_run_config *cfg) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s", k_base, groups ? (g_size == 5 ? k_groups5 : k_groups3) : "");
    return hp_run_config_load_string(text, strlen(text), "mm_equiv.yaml", cfg);
}

static bool close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(b), 1e-12); }

static void run(hp_comm *world, hp_mm_mode mode) {
    hp_run_config c1, cg;
    OK(load(false, &c1));
    OK(load(true, &cg));
    hp_mm_runner *one = NULL, *grp = NULL;
    OK(hp_mm_runner_new(&c1, NULL, HP_MM_MODE_CONCURRENT, &one));
    OK(hp_mm_runner_new(&cg, world, mode, &grp));
    int role = hp_mm_runner_role(grp), want = g_size == 5 ? (g_rank == 0 ? 0 : g_rank <= 2 ? 1 : 2) : g_rank;
    CHECK(role == want, "role %d on rank %d", role, g_rank);
    for (int s = 0; s < STEPS; s++) {
        hp_mm_step_stats a, b;
        OK(hp_mm_runner_step(one, &a));
        OK(hp_mm_runner_step(grp, &b));
        CHECK(close_rel(b.loss, a.loss, 1e-5), "mode %d step %d: groups loss %.9g vs one device %.9g", (int)mode, s + 1,
              (double)b.loss, (double)a.loss);
        CHECK(close_rel(b.grad_norm, a.grad_norm, 1e-4), "mode %d step %d: grad norm %.9g vs %.9g", (int)mode, s + 1,
              (double)b.grad_norm, (double)a.grad_norm);
        if (s == 0) CHECK(a.loss > 2.0f, "step 1 loss %g is not near ln(17)", (double)a.loss);
    }
    /* this rank's parameters after the updates */
    const char *names[3] = {"enc_a.patch.weight", "enc_b.blocks.1.mlp.fc.weight", "dec.lm_head.weight"};
    float *pa, *pb;
    int64_t na, nb;
    OK(hp_mm_runner_params(one, names[role], &pa, &na));
    OK(hp_mm_runner_params(grp, names[role], &pb, &nb));
    CHECK(na == nb, "%s: %lld vs %lld elements", names[role], (long long)na, (long long)nb);
    double worst = 0;
    for (int64_t i = 0; i < na && na == nb; i++) worst = fmax(worst, fabs((double)pa[i] - pb[i]));
    CHECK(worst < 1e-5, "%s differs by %g after %d steps", names[role], worst, STEPS);
    double acc1, cap1, accg, capg;
    OK(hp_mm_runner_eval(one, 50, &acc1, &cap1));
    OK(hp_mm_runner_eval(grp, 50, &accg, &capg));
    if (g_rank == g_size - (g_size == 5 ? 2 : 1)) CHECK(accg == acc1 && capg == cap1, "accuracy %g/%g vs one device %g/%g", accg, capg, acc1, cap1);
    else CHECK(accg < 0, "an encoder rank reports accuracy %g", accg);
    hp_mm_runner_free(grp);
    hp_mm_runner_free(one);
    hp_run_config_free(&cg);
    hp_run_config_free(&c1);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    g_size = hp_comm_size(world);
    run(world, HP_MM_MODE_CONCURRENT);
    if (g_size == 3) run(world, HP_MM_MODE_CHAIN); /* the baseline runs one rank per group */
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "ok");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any;
}
