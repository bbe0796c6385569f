/* ranks: 2 4 */
/*
 * `hp train` with the Llama family (model.family: llama: RMSNorm, RoPE, grouped-query attention
 * with 4 heads over 2 kv heads, SwiGLU, Hugging Face names) over real MPI processes: the first-step
 * loss and gradient norm equal the single-rank run's within 1e-5 (relative) and the 50-step loss
 * trajectory within 1e-4, for data parallelism, tensor parallelism over heads (Megatron on the HF
 * projections), FSDP, ZeRO-2, (4 ranks) dp x tp and tp4 (2 kv heads over 4 ranks: attention
 * replicated), and (2 ranks) a two-stage 1F1B pipeline whose last stage holds the tied head's copy
 * of model.embed_tokens.weight. A checkpoint saved under tp resumes on one rank with the same losses.
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 50

#include "mpi_check.h"

static const char *TP_PARAMS =
    "  params:\n"
    "    - {match: \"model.layers.*.self_attn.[qkv]_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.mlp.gate_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.mlp.up_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.self_attn.o_proj.weight\", tensor_map: [none, tp]}\n"
    "    - {match: \"model.layers.*.mlp.down_proj.weight\", tensor_map: [none, tp]}\n";

static void make_config(char *buf, size_t cap, const char *family, int n, const char *ckdir) {
    char corpus[1024];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    int off = snprintf(buf, cap,
                       "model: {family: llama, vocab: 256, context: 32, layers: 2, heads: 4, kv_heads: 2, width: 32,\n"
                       "        ffn_width: 64, tied_head: true}\n"
                       "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                       "train: {steps: %d, batch: 8, seed: 3, eval_batches: 2, checkpoint_dir: \"%s\"}\n"
                       "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 5, weight_decay: 0.1, grad_clip: 1.0}\n",
                       corpus, STEPS, ckdir);
    const char *dp_in = "  inputs: {tokens: [dp, none], targets: [dp, none]}\n";
    if (!strcmp(family, "dp"))
        snprintf(buf + off, cap - off, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n%s", n, dp_in);
    else if (!strcmp(family, "zero2"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n%s  optimizer: {shard: [dp]}\n", n, dp_in);
    else if (!strcmp(family, "tp"))
        snprintf(buf + off, cap - off, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [tp]}\n%s", n, TP_PARAMS);
    else if (!strcmp(family, "dpxtp"))
        snprintf(buf + off, cap - off, "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, tp]}\n%s%s",
                 n / 2, dp_in, TP_PARAMS);
    else if (!strcmp(family, "pp")) /* two pipeline stages, 1F1B over 4 micro-batches; tied head */
        snprintf(buf + off, cap - off,
                 "pipeline: {schedule: 1f1b, micro_batches: 4}\n"
                 "groups:\n  s0: {ranks: [0], module: [embedding, blocks.0]}\n"
                 "  s1: {ranks: [1], module: [blocks.1, head]}\n");
    else if (!strcmp(family, "fsdp"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n%s"
                 "  params:\n    - {match: \"*\", tensor_map: [dp]}\n", n, dp_in);
}

static hp_status load(const char *family, int n, const char *ckdir, hp_run_config *cfg) {
    char text[8192];
    make_config(text, sizeof text, family, n, ckdir);
    return hp_run_config_load_string(text, strlen(text), family[0] ? family : "single", cfg);
}

static void run(hp_trainer *t, int steps, double *loss, double *gnorm) {
    for (int i = 0; i < steps; i++) {
        hp_step_metrics m;
        OK(hp_trainer_step(t, &m));
        loss[i] = m.loss;
        if (gnorm) gnorm[i] = m.grad_norm;
    }
}

static bool close_rel(double a, double b, double rtol) { return fabs(a - b) <= rtol * fabs(b) + 1e-7; }

static void check_family(hp_comm *world, const char *family, const double *ref_loss, const double *ref_gn) {
    int n = hp_comm_size(world);
    hp_run_config cfg;
    OK(load(family, n, "/tmp/unused", &cfg));
    hp_trainer *t = NULL;
    OK(hp_trainer_new_dist(&cfg, world, &t));
    double loss[STEPS], gn[STEPS];
    run(t, STEPS, loss, gn);
    CHECK(close_rel(loss[0], ref_loss[0], 1e-5), "llama %s/%d: step 1 loss %.9g vs single-rank %.9g", family, n,
          loss[0], ref_loss[0]);
    CHECK(close_rel(gn[0], ref_gn[0], 1e-5), "llama %s/%d: step 1 gradient norm %.9g vs single-rank %.9g", family, n,
          gn[0], ref_gn[0]);
    int bad = -1;
    for (int i = 0; i < STEPS && bad < 0; i++)
        if (!close_rel(loss[i], ref_loss[i], 1e-4)) bad = i;
    CHECK(bad < 0, "llama %s/%d: step %d loss %.9g vs single-rank %.9g", family, n, bad + 1,
          bad >= 0 ? loss[bad] : 0.0, bad >= 0 ? ref_loss[bad] : 0.0);
    if (g_rank == 0)
        printf("llama %-6s %d ranks: loss %.6f -> %.6f (single rank %.6f -> %.6f)\n", family, n, loss[0],
               loss[STEPS - 1], ref_loss[0], ref_loss[STEPS - 1]);
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

/* Save under tp at step 4, resume on one rank: steps 5-8 as the uninterrupted tp run. */
static void check_resume(hp_comm *world) {
    char dir[64] = "/tmp/hp-llama-XXXXXX";
    if (g_rank == 0 && !mkdtemp(dir)) dir[0] = 0;
    OK(hp_comm_broadcast(world, dir, sizeof dir / 4, HP_DTYPE_I32, 0));
    hp_run_config c1, c2;
    OK(load("tp", hp_comm_size(world), dir, &c1));
    OK(load("", 1, dir, &c2));
    hp_trainer *t = NULL;
    double a[8], b[4];
    OK(hp_trainer_new_dist(&c1, world, &t));
    run(t, 4, a, NULL);
    OK(hp_trainer_save(t, NULL, 0));
    run(t, 4, a + 4, NULL);
    hp_trainer_free(t);
    OK(hp_trainer_new_dist(&c2, NULL, &t));
    OK(hp_trainer_resume(t, dir));
    run(t, 4, b, NULL);
    hp_trainer_free(t);
    for (int i = 0; i < 4; i++)
        CHECK(close_rel(b[i], a[4 + i], 1e-5), "llama resume on one rank, step %d: %.9g vs %.9g under tp", 5 + i, b[i],
              a[4 + i]);
    if (g_rank == 0) printf("llama resume: tp%d -> 1 rank, steps 5-8 match (%.6f %.6f)\n", hp_comm_size(world), a[7], b[3]);
    hp_comm_barrier(world);
    if (g_rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) g_failed = 1;
    }
    hp_run_config_free(&c1);
    hp_run_config_free(&c2);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int n = hp_comm_size(world);
    hp_run_config cfg;
    double ref_loss[STEPS], ref_gn[STEPS];
    hp_trainer *t = NULL;
    if (load("", 1, "/tmp/unused", &cfg) != HP_STATUS_OK || hp_trainer_new_dist(&cfg, NULL, &t) != HP_STATUS_OK) {
        fprintf(stderr, "[rank %d] reference: %s\n", g_rank, hp_error_message());
        return 1;
    }
    run(t, STEPS, ref_loss, ref_gn);
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
    const char *families[] = {"dp", "zero2", "tp", "fsdp", "dpxtp", "pp"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if ((strcmp(families[i], "dpxtp") || n == 4) && (strcmp(families[i], "pp") || n == 2))
            check_family(world, families[i], ref_loss, ref_gn);
    check_resume(world);
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "llama: all strategies match the single-rank run");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
