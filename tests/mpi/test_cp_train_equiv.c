/* ranks: 2 4 */
/*
 * Context parallelism (Ulysses) with `hp train`'s trainer over real MPI processes: the sequence of
 * tokens and targets split over a mesh axis `cp`, attention's all-to-alls to head-split and back.
 * For GPT (learned positions) and Llama (RoPE with global offsets, 4 heads over 2 kv heads), with a
 * context that divides the ranks (32) and one that does not (31), the first-step loss and gradient
 * norm equal the single-rank run's within 1e-5 (relative) and the 50-step loss trajectory within
 * 1e-4: cpN, cpN with FSDP over the same axis (ZeRO-3 as in DeepSpeed-Ulysses), cpN with
 * HyperOffload (a 450 KiB fast tier: activations, parameters and optimizer states offloaded to the
 * host tier), and on 4 ranks
 * dp2 x cp2 and tp2 x cp2 (Megatron rules inside each cp group). Llama's 2 kv heads do not split 4
 * ways: there (cp4, tp2 x cp2) attention gathers the sequence instead, and the result is the same.
 * Also on 4 ranks: 2-D tensor parallelism (examples/tp2d.yaml's layouts, 2 x 2, no cp).
 * Ring attention (strategy.context_parallel: ring, K/V passed point to point around cp) the same
 * way, with causal load balancing (the default: rank i holds chunks i and 2n - 1 - i, the loader
 * permutes the batch, positions from the permutation; T = 31 gives uneven chunks): cpN, cpN with
 * offload, cpN with FSDP, and dp2 x cp2 and tp2 x cp2 on 4 ranks; and cpN without balancing
 * (ring_load_balance: false).
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 50

#include "mpi_check.h"

static const char *GPT_TP =
    "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"
    "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
    "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n";
/* 2-D TP (examples/tp2d.yaml): block weights over both axes, the batch over tpr. */
static const char *GPT_TP2D =
    "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tpc, tpr]}\n"
    "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tpc, tpr]}\n"
    "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [tpr, tpc]}\n"
    "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [tpr, tpc]}\n"
    "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tpc]}\n"
    "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tpc]}\n";
static const char *LLAMA_TP2D =
    "    - {match: \"model.layers.*.self_attn.[qkv]_proj.weight\", tensor_map: [tpc, tpr]}\n"
    "    - {match: \"model.layers.*.mlp.gate_proj.weight\", tensor_map: [tpc, tpr]}\n"
    "    - {match: \"model.layers.*.mlp.up_proj.weight\", tensor_map: [tpc, tpr]}\n"
    "    - {match: \"model.layers.*.self_attn.o_proj.weight\", tensor_map: [tpr, tpc]}\n"
    "    - {match: \"model.layers.*.mlp.down_proj.weight\", tensor_map: [tpr, tpc]}\n";
static const char *LLAMA_TP =
    "    - {match: \"model.layers.*.self_attn.[qkv]_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.mlp.gate_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.mlp.up_proj.weight\", tensor_map: [tp, none]}\n"
    "    - {match: \"model.layers.*.self_attn.o_proj.weight\", tensor_map: [none, tp]}\n"
    "    - {match: \"model.layers.*.mlp.down_proj.weight\", tensor_map: [none, tp]}\n";

/* model: "gpt" or "llama"; family: "" (single rank), "cp", "cpfsdp", "cpoffload", "dpxcp", "tpxcp",
 * "tp2d"; with strategy.context_parallel: ring, "ring" (cpN), "ringoffload" (cpN + HyperOffload) and
 * "ringdpxcp" (dp2 x cp2), "ringfsdp" (cpN with FSDP over cp), "ringtpxcp" (tp2 x cp2), all
 * load-balanced, and "ringnolb" (cpN, ring_load_balance: false). */
static void make_config(char *buf, size_t cap, const char *model, int context, const char *family, int n) {
    char corpus[1024];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    bool llama = !strcmp(model, "llama");
    int off = snprintf(buf, cap,
                       "model: {%s vocab: 256, context: %d, layers: 2, heads: 4, width: 32, tied_head: true}\n"
                       "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                       "train: {steps: %d, batch: 8, seed: 3, eval_batches: 2, checkpoint_dir: \"/tmp/unused\"}\n"
                       "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 5, weight_decay: 0.1, grad_clip: 1.0}\n",
                       llama ? "family: llama, kv_heads: 2, ffn_width: 64," : "", context, corpus, STEPS);
    const char *cp_in = "  inputs: {tokens: [none, cp], targets: [none, cp]}\n";
    if (!strcmp(family, "cp"))
        snprintf(buf + off, cap - off, "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n%s", n, cp_in);
    else if (!strcmp(family, "ring"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n%s  context_parallel: ring\n", n, cp_in);
    else if (!strcmp(family, "ringnolb")) /* the block layout: rank r computes r + 1 of the n causal blocks */
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n%s  context_parallel: ring\n"
                 "  ring_load_balance: false\n", n, cp_in);
    else if (!strcmp(family, "ringoffload")) /* the ring's blocks need more than Ulysses' 450 KiB */
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n%s  context_parallel: ring\n"
                 "offload:\n  device_budget: 768KiB\n  host_budget: 64MiB\n"
                 "  policy: {params: host, grads: host, optimizer: host, activations: host}\n", n, cp_in);
    else if (!strcmp(family, "ringdpxcp"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, cp]}\n"
                 "  inputs: {tokens: [dp, cp], targets: [dp, cp]}\n  context_parallel: ring\n", n / 2);
    else if (!strcmp(family, "ringfsdp"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n%s  context_parallel: ring\n"
                 "  params:\n    - {match: \"*\", tensor_map: [cp]}\n", n, cp_in);
    else if (!strcmp(family, "ringtpxcp"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [2, %d], alias_name: [tp, cp]}\n%s  context_parallel: ring\n"
                 "  params:\n%s", n / 2, cp_in, llama ? LLAMA_TP : GPT_TP);
    else if (!strcmp(family, "cpfsdp"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n%s"
                 "  params:\n    - {match: \"*\", tensor_map: [cp]}\n", n, cp_in);
    else if (!strcmp(family, "cpoffload")) /* 0.83-1.27 MiB per rank without offload */
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d], alias_name: [cp]}\n%s"
                 "offload:\n  device_budget: 450KiB\n  host_budget: 64MiB\n"
                 "  policy: {params: host, grads: host, optimizer: host, activations: host}\n", n, cp_in);
    else if (!strcmp(family, "dpxcp"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [%d, 2], alias_name: [dp, cp]}\n"
                 "  inputs: {tokens: [dp, cp], targets: [dp, cp]}\n", n / 2);
    else if (!strcmp(family, "tp2d"))
        snprintf(buf + off, cap - off,
                 "strategy:\n  mesh: {device_matrix: [2, %d], alias_name: [tpr, tpc]}\n"
                 "  inputs: {tokens: [tpr, none], targets: [tpr, none]}\n  params:\n%s",
                 n / 2, llama ? LLAMA_TP2D : GPT_TP2D);
    else if (!strcmp(family, "tpxcp"))
        snprintf(buf + off, cap - off, "strategy:\n  mesh: {device_matrix: [2, %d], alias_name: [tp, cp]}\n%s  params:\n%s",
                 n / 2, cp_in, llama ? LLAMA_TP : GPT_TP);
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

/* One model and context: the single-rank reference, then every family that fits n ranks. */
static void check_model(hp_comm *world, const char *model, int context) {
    int n = hp_comm_size(world);
    char text[8192];
    hp_run_config cfg;
    hp_trainer *t = NULL;
    double ref_loss[STEPS], ref_gn[STEPS], loss[STEPS], gn[STEPS];
    make_config(text, sizeof text, model, context, "", 1);
    OK(hp_run_config_load_string(text, strlen(text), "single", &cfg));
    OK(hp_trainer_new_dist(&cfg, NULL, &t));
    run(t, STEPS, ref_loss, ref_gn);
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
    const char *families[] = {"cp",   "cpfsdp",   "cpoffload",   "dpxcp",    "tpxcp",    "tp2d",
                              "ring", "ringnolb", "ringoffload", "ringdpxcp", "ringfsdp", "ringtpxcp"};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        const char *fam = families[f];
        bool any_n = !strncmp(fam, "cp", 2) || !strcmp(fam, "ring") || !strcmp(fam, "ringnolb") ||
                     !strcmp(fam, "ringoffload") || !strcmp(fam, "ringfsdp");
        if (!any_n && n != 4) continue;
        make_config(text, sizeof text, model, context, fam, n);
        OK(hp_run_config_load_string(text, strlen(text), fam, &cfg));
        t = NULL;
        hp_status st = hp_trainer_new_dist(&cfg, world, &t);
        CHECK(st == HP_STATUS_OK, "%s %s/%d T=%d: %s", model, fam, n, context, hp_error_message());
        if (st == HP_STATUS_OK) {
            run(t, STEPS, loss, gn);
            CHECK(close_rel(loss[0], ref_loss[0], 1e-5), "%s %s/%d T=%d: step 1 loss %.9g vs single-rank %.9g", model,
                  fam, n, context, loss[0], ref_loss[0]);
            CHECK(close_rel(gn[0], ref_gn[0], 1e-5), "%s %s/%d T=%d: step 1 gradient norm %.9g vs single-rank %.9g",
                  model, fam, n, context, gn[0], ref_gn[0]);
            int bad = -1;
            for (int i = 0; i < STEPS && bad < 0; i++)
                if (!close_rel(loss[i], ref_loss[i], 1e-4)) bad = i;
            CHECK(bad < 0, "%s %s/%d T=%d: step %d loss %.9g vs single-rank %.9g", model, fam, n, context, bad + 1,
                  bad >= 0 ? loss[bad] : 0.0, bad >= 0 ? ref_loss[bad] : 0.0);
            if (g_rank == 0)
                printf("%-5s %-6s %d ranks T=%d: loss %.6f -> %.6f (single rank %.6f -> %.6f)\n", model, fam, n, context,
                       loss[0], loss[STEPS - 1], ref_loss[0], ref_loss[STEPS - 1]);
        }
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
    }
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    check_model(world, "gpt", 32);
    check_model(world, "gpt", 31); /* 16 + 15 rows on 2 ranks, 8 + 8 + 8 + 7 on 4 */
    check_model(world, "llama", 32);
    check_model(world, "llama", 31);
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "context parallelism: every strategy matches the single-rank run");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
