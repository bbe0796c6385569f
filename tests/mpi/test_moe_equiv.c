/* ranks: 2 */
/*
 * A GPT with Mixture-of-Experts MLPs (hp/moe.h) under data parallelism equals the single-rank run:
 * for each MoE variant (softmax top-2 with the balancing loss; top-1; DeepSeek-V3's sigmoid_bias
 * router with its bias updates and a shared expert; the Llama family's SwiGLU experts with a shared
 * expert and grouped-query attention), the dp, zero2 and fsdp runs' first-step loss
 * and gradient norm match the single-rank run within 1e-5 (relative) and their 50-step loss
 * trajectories within 1e-4. Each rank routes, dispatches and runs the experts on its own tokens;
 * the partitioner sums the expert weight gradients and all-reduces the per-expert loads the
 * balancing loss and the bias update read (the sharding rules of src/ops/moe_*.c).
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/shard.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 50

#include "mpi_check.h"

static const char *const k_moe[] = {
    "{experts: 4, top_k: 2, expert_width: 16, every: 1, router: softmax, balance_loss: 0.05}",
    "{experts: 3, top_k: 1, expert_width: 24, layers: [1], router: softmax, balance_loss: 0.01}",
    "{experts: 4, top_k: 2, expert_width: 16, shared_experts: 1, every: 1, router: sigmoid_bias, bias_update_rate: 0.01}",
    "{experts: 4, top_k: 2, expert_width: 16, shared_experts: 1, every: 1, router: softmax, balance_loss: 0.05}",
};
/* the model family of each variant: the last is the Llama family's SwiGLU experts with GQA */
static const char *const k_family[] = {"", "", "", "family: llama, kv_heads: 2, ffn_width: 48, "};

static hp_status load(const char *model, const char *moe, const char *family, int n, hp_run_config *cfg) {
    char text[4096], corpus[1024];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    int off = snprintf(text, sizeof text,
                       "model: {vocab: 256, context: 32, layers: 2, heads: 4, width: 32, %smoe: %s}\n"
                       "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                       "train: {steps: %d, batch: 8, seed: 3, eval_batches: 2, checkpoint_dir: /tmp/unused}\n"
                       "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 5, weight_decay: 0.1, grad_clip: 1.0}\n",
                       model, moe, corpus, STEPS);
    if (family[0])
        off += snprintf(text + off, sizeof text - (size_t)off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
                        "  inputs: {tokens: [dp, none], targets: [dp, none]}\n%s",
                        n, !strcmp(family, "zero2") ? "  optimizer: {shard: [dp]}\n"
                           : !strcmp(family, "fsdp") ? "  params:\n    - {match: \"*\", tensor_map: [dp]}\n" : "");
    return hp_run_config_load_string(text, strlen(text), family[0] ? family : "single", cfg);
}

static void run(hp_trainer *t, int steps, double *loss, double *gnorm) {
    for (int i = 0; i < steps; i++) {
        hp_step_metrics m;
        OK(hp_trainer_step(t, &m));
        loss[i] = m.loss;
        gnorm[i] = m.grad_norm;
    }
}

static bool close_rel(double a, double b, double rtol) { return fabs(a - b) <= rtol * fabs(b) + 1e-7; }

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int n = hp_comm_size(world);
    for (size_t v = 0; v < sizeof k_moe / sizeof k_moe[0]; v++) {
        hp_run_config cfg;
        hp_trainer *t = NULL;
        double ref[STEPS], ref_gn[STEPS], loss[STEPS], gn[STEPS];
        if (load(k_family[v], k_moe[v], "", 1, &cfg) != HP_STATUS_OK || hp_trainer_new_dist(&cfg, NULL, &t) != HP_STATUS_OK) {
            fprintf(stderr, "[rank %d] reference %zu: %s\n", g_rank, v, hp_error_message());
            g_failed = 1;
            break;
        }
        run(t, STEPS, ref, ref_gn);
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
        CHECK(ref[STEPS - 1] < ref[0] - 1.0, "moe %zu: single-rank loss %.4f -> %.4f does not fall", v, ref[0],
              ref[STEPS - 1]);
        const char *families[] = {"dp", "zero2", "fsdp"};
        for (size_t f = 0; f < 3; f++) {
            if (load(k_family[v], k_moe[v], families[f], n, &cfg) != HP_STATUS_OK ||
                hp_trainer_new_dist(&cfg, world, &t) != HP_STATUS_OK) {
                fprintf(stderr, "[rank %d] moe %zu %s: %s\n", g_rank, v, families[f], hp_error_message());
                g_failed = 1;
                continue;
            }
            run(t, STEPS, loss, gn);
            CHECK(close_rel(loss[0], ref[0], 1e-5), "moe %zu %s/%d: step 1 loss %.9g vs single-rank %.9g", v,
                  families[f], n, loss[0], ref[0]);
            CHECK(close_rel(gn[0], ref_gn[0], 1e-5), "moe %zu %s/%d: step 1 gradient norm %.9g vs single-rank %.9g", v,
                  families[f], n, gn[0], ref_gn[0]);
            int bad = -1;
            for (int i = 0; i < STEPS && bad < 0; i++)
                if (!close_rel(loss[i], ref[i], 1e-4)) bad = i;
            CHECK(bad < 0, "moe %zu %s/%d: step %d loss %.9g vs single-rank %.9g", v, families[f], n, bad + 1,
                  bad >= 0 ? loss[bad] : 0.0, bad >= 0 ? ref[bad] : 0.0);
            if (g_rank == 0)
                printf("moe %zu %-5s %d ranks: loss %.6f -> %.6f (single rank %.6f -> %.6f), %d redistributions, "
                       "%lld bytes/rank/step\n", v, families[f], n, loss[0], loss[STEPS - 1], ref[0], ref[STEPS - 1],
                       hp_partition_n_collectives(hp_trainer_partition(t)),
                       (long long)hp_partition_bytes(hp_trainer_partition(t)));
            hp_trainer_free(t);
            hp_run_config_free(&cfg);
        }
    }
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "every MoE variant matches the single-rank run");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
