/* ranks: 2 3 4 5 */
/*
 * GRPO under one controller (hp/rl.h) over real MPI processes: after every weight sync the actor's
 * copy of every parameter equals the learner's byte for byte (hp_rl_opts.verify_sync gathers the
 * learner's layout on the controller and compares), with different strategies on the two groups:
 * learner FSDP or data-parallel on some ranks and the actor on others (one rank or two replicas),
 * the learner on the last rank with the actors before it, co-located FSDP over every rank, and a
 * tensor-parallel actor (tp2: one replica, heads split) after an fsdp2 learner, disjoint (4 ranks,
 * both orders) and co-located (2 ranks: the actor binds to views of the learner's store in its tp
 * layout), and two tp2 replicas (a [dp, tp] actor mesh, 5 ranks), an MoE policy with an
 * expert-parallel actor (each rank half the experts; 4 ranks); every actor rank's block is
 * compared (replicated parameters too);
 * synchronous and one step off-policy. Where the actor is one rank (or one tp replica) it samples what the one-rank
 * job samples, so the first update's reward equals the one-rank job's exactly and its GRPO loss and
 * gradient norm within 1e-5 (the learner's strategy changes only the float summation order). A
 * tiny model and a few steps keep it fast.
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/rl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mpi_check.h"

#define STEPS 4

static const char *const BASE =
    "model: {vocab: 256, context: 8, layers: 1, heads: 2, width: 32}\n"
    "train: {seed: 3}\n"
    "optim: {lr: 1.0e-3, min_lr: 1.0e-3, warmup: 0, weight_decay: 0.0}\n"
    "rl: {digits: [1, 3], prompts: 4, group_size: 4, steps: %d, sft_steps: 60, sft_batch: 16, sft_lr: 1.0e-2, "
    "off_policy: %d, eval_prompts: 8}\n";
/* A stronger start (more supervised steps: about half the samples right), for comparisons that
 * must see every share of the batch. */
static const char *const BASE_STRONG =
    "model: {vocab: 256, context: 8, layers: 1, heads: 2, width: 32}\n"
    "train: {seed: 3}\n"
    "optim: {lr: 1.0e-3, min_lr: 1.0e-3, warmup: 0, weight_decay: 0.0}\n"
    "rl: {digits: [1, 3], prompts: 4, group_size: 4, steps: %d, sft_steps: 400, sft_batch: 16, sft_lr: 1.0e-2, "
    "off_policy: %d, eval_prompts: 8}\n";
/* A mixture-of-experts policy (4 experts, top 2, in the second block), for an expert-parallel actor. */
static const char *const BASE_MOE =
    "model: {vocab: 256, context: 8, layers: 2, heads: 2, width: 32,\n"
    "        moe: {experts: 4, top_k: 2, expert_width: 32, every: 2, router: softmax, balance_loss: 0.01}}\n"
    "train: {seed: 3}\n"
    "optim: {lr: 1.0e-3, min_lr: 1.0e-3, warmup: 0, weight_decay: 0.0}\n"
    "rl: {digits: [1, 3], prompts: 4, group_size: 4, steps: %d, sft_steps: 60, sft_batch: 16, sft_lr: 1.0e-2, "
    "off_policy: %d, eval_prompts: 8}\n";
static const char *g_base = BASE;

static hp_rl_step_metrics g_ref; /* step 1 of the one-rank job */

static void reference(void) {
    char text[4096];
    snprintf(text, sizeof text, BASE, STEPS, 0);
    hp_run_config cfg;
    OK(hp_run_config_load_string(text, strlen(text), "reference", &cfg));
    hp_rl *rl = NULL;
    hp_status st = hp_rl_new(&cfg, NULL, NULL, &rl);
    CHECK(st == HP_STATUS_OK, "reference: %s", hp_error_message());
    if (st == HP_STATUS_OK) OK(hp_rl_step(rl, &g_ref));
    CHECK(g_ref.reward_mean > 0 && g_ref.grad_norm > 1e-3, "reference: reward %g, gradient norm %g: nothing to "
          "compare", g_ref.reward_mean, g_ref.grad_norm);
    hp_rl_free(rl);
    hp_run_config_free(&cfg);
}

/* groups: learner's ranks and mesh/strategy text ("" for one rank), actor's ranks and mesh ("" for one). */
static hp_rl_step_metrics g_steps[1]; /* step 1 of the last run (on the controller) */

static void run(hp_comm *world, const char *what, const char *groups, int off_policy, const char *mode, bool one_actor) {
    char text[4096];
    int n = snprintf(text, sizeof text, g_base, STEPS, off_policy);
    snprintf(text + n, sizeof text - (size_t)n, "%s", groups);
    hp_run_config cfg;
    OK(hp_run_config_load_string(text, strlen(text), what, &cfg));
    hp_rl_opts o = HP_RL_OPTS_DEFAULT;
    o.verify_sync = true;
    hp_rl *rl = NULL;
    hp_status st = hp_rl_new(&cfg, world, &o, &rl);
    CHECK(st == HP_STATUS_OK, "%s: hp_rl_new: %s", what, hp_error_message());
    if (st != HP_STATUS_OK) {
        hp_run_config_free(&cfg);
        return;
    }
    CHECK(strcmp(hp_rl_mode(rl), mode) == 0, "%s: mode %s, expected %s", what, hp_rl_mode(rl), mode);
    int checked = 0, mismatched = 0, syncs = 0;
    for (int i = 0; i < STEPS && st == HP_STATUS_OK; i++) {
        hp_rl_step_metrics m;
        st = hp_rl_step(rl, &m);
        CHECK(st == HP_STATUS_OK, "%s: step %d: %s", what, i + 1, hp_error_message());
        checked += m.sync_checked, mismatched += m.sync_mismatch, syncs += m.sync_checked > 0;
        if (i == 0) g_steps[0] = m;
        if (i == 0 && one_actor && hp_rl_is_controller(rl)) {
            CHECK(m.reward_mean == g_ref.reward_mean, "%s: step 1 reward %g, one rank %g", what, m.reward_mean,
                  g_ref.reward_mean);
            CHECK(fabs(m.loss - g_ref.loss) <= 1e-5 * fabs(g_ref.loss) + 1e-7, "%s: step 1 loss %.9g, one rank %.9g",
                  what, m.loss, g_ref.loss);
            CHECK(fabs(m.grad_norm - g_ref.grad_norm) <= 1e-5 * g_ref.grad_norm, "%s: step 1 gradient norm %.9g, one "
                  "rank %.9g", what, m.grad_norm, g_ref.grad_norm);
        }
        if (hp_rl_is_controller(rl)) CHECK(m.step == i + 1 && m.samples == 16, "%s: step %lld samples %lld", what,
                                           (long long)m.step, (long long)m.samples);
    }
    double acc;
    OK(hp_rl_eval(rl, &acc));
    if (hp_rl_is_controller(rl)) {
        int want = off_policy ? STEPS - 2 : STEPS - 1; /* a sync before every later generation */
        CHECK(syncs == want, "%s: %d syncs verified, expected %d", what, syncs, want);
        CHECK(checked > 0 && mismatched == 0, "%s: %d of %d parameters differ between the actor and the learner", what,
              mismatched, checked);
        CHECK(acc >= 0.0 && acc <= 1.0, "%s: accuracy %g", what, acc);
        printf("%s: %d syncs, %d parameter comparisons, %d differ\n", what, syncs, checked, mismatched);
    }
    hp_rl_free(rl);
    hp_run_config_free(&cfg);
}

#define FSDP(n) "mesh: {device_matrix: [" #n "], alias_name: [fsdp]}, strategy: {inputs: {tokens: [fsdp, none], " \
                "targets: [fsdp, none]}, params: [{match: \"*\", tensor_map: [fsdp]}]}"
#define DP(n) "mesh: {device_matrix: [" #n "], alias_name: [dp]}, strategy: {inputs: {tokens: [dp, none], " \
              "targets: [dp, none]}}"

/* Megatron tensor parallelism for the actor: one replica over its ranks, the heads split. */
#define TP(n) "mesh: {device_matrix: [" #n "], alias_name: [tp]}, strategy: {params: [" \
              "{match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}, " \
              "{match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}, " \
              "{match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}, " \
              "{match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}, " \
              "{match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}, " \
              "{match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}]}"

/* The same with expert parallelism: each rank of the actor holds half the experts. */
#define TPEP "mesh: {device_matrix: [2], alias_name: [tp]}, strategy: {params: [" \
             "{match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}, " \
             "{match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}, " \
             "{match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}, " \
             "{match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}, " \
             "{match: \"*.experts.fc.weight\", tensor_map: [tp, none, none]}, " \
             "{match: \"*.experts.proj.weight\", tensor_map: [tp, none, none]}]}"

#define DPTP "mesh: {device_matrix: [2, 2], alias_name: [dp, tp]}, strategy: {params: [" \
             "{match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}, " \
             "{match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}, " \
             "{match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}, " \
             "{match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}]}"

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int p = hp_comm_size(world);
    reference();
    if (p == 2) {
        run(world, "co-located learner fsdp2, actor tp2 [0,1]",
            "groups:\n  learner: {kind: learner, ranks: [0, 1], " FSDP(2) "}\n"
            "  actor: {kind: actor, ranks: [0, 1], " TP(2) "}\n", 1, "co-located", true);
    }
    if (p == 3) {
        run(world, "learner fsdp2 [0,1], actor [2], off-policy",
            "groups:\n  learner: {kind: learner, ranks: [0, 1], " FSDP(2) "}\n  actor: {kind: actor, ranks: [2]}\n", 1,
            "disjoint", true);
        run(world, "learner [2], actor dp2 [0,1], synchronous",
            "groups:\n  actor: {kind: actor, ranks: [0, 1], mesh: {device_matrix: [2], alias_name: [dp]}}\n"
            "  learner: {kind: learner, ranks: [2]}\n", 0, "disjoint", false);
        run(world, "co-located fsdp3 [0,1,2]",
            "groups:\n  learner: {kind: learner, ranks: [0, 1, 2], " FSDP(3) "}\n"
            "  actor: {kind: actor, ranks: [0, 1, 2], mesh: {device_matrix: [3], alias_name: [dp]}}\n", 1, "co-located",
            false);
    } else if (p == 4) {
        run(world, "learner dp2 [0,1], actor dp2 [2,3], off-policy",
            "groups:\n  learner: {kind: learner, ranks: [0, 1], " DP(2) "}\n"
            "  actor: {kind: actor, ranks: [2, 3], mesh: {device_matrix: [2], alias_name: [dp]}}\n", 1, "disjoint", false);
        run(world, "learner fsdp3 [1,2,3], actor [0], synchronous",
            "groups:\n  actor: {kind: actor, ranks: [0]}\n  learner: {kind: learner, ranks: [1, 2, 3], " FSDP(3) "}\n", 0,
            "disjoint", true);
        run(world, "learner fsdp2 [0,1], actor tp2 [2,3], off-policy",
            "groups:\n  learner: {kind: learner, ranks: [0, 1], " FSDP(2) "}\n"
            "  actor: {kind: actor, ranks: [2, 3], " TP(2) "}\n", 1, "disjoint", true);
        run(world, "learner fsdp2 [2,3], actor tp2 [0,1], synchronous",
            "groups:\n  actor: {kind: actor, ranks: [0, 1], " TP(2) "}\n"
            "  learner: {kind: learner, ranks: [2, 3], " FSDP(2) "}\n", 0, "disjoint", true);
        run(world, "co-located learner fsdp over [dp, tp], actor dp2 x tp2 [0,1,2,3]",
            "groups:\n  learner: {kind: learner, ranks: [0, 1, 2, 3], mesh: {device_matrix: [2, 2], alias_name: [dp, tp]}, "
            "strategy: {inputs: {tokens: [[dp, tp], none], targets: [[dp, tp], none]}, params: [{match: \"*\", "
            "tensor_map: [[dp, tp]]}]}}\n"
            "  actor: {kind: actor, ranks: [0, 1, 2, 3], " DPTP "}\n", 1, "co-located", true);
        run(world, "co-located fsdp4 without groups",
            "strategy: {mesh: {device_matrix: [4], alias_name: [fsdp]}, inputs: {tokens: [fsdp, none]}, "
            "params: [{match: \"*\", tensor_map: [fsdp]}]}\n", 0, "co-located", false);
        g_base = BASE_MOE; /* an MoE policy: the actor expert-parallel (2 of 4 experts a rank) after an fsdp2 learner */
        run(world, "MoE: learner fsdp2 [0,1], actor tp2 + ep2 [2,3], off-policy",
            "groups:\n  learner: {kind: learner, ranks: [0, 1], " FSDP(2) "}\n"
            "  actor: {kind: actor, ranks: [2, 3], " TPEP "}\n", 1, "disjoint", false);
        g_base = BASE;
    }
    if (p == 5) { /* two tp2 replicas: each generates its share of the batch, heads split in each */
        g_base = BASE_STRONG;
        run(world, "learner fsdp3 [0,1,2], actor dp2 [3,4], synchronous",
            "groups:\n  learner: {kind: learner, ranks: [0, 1, 2], " FSDP(3) "}\n"
            "  actor: {kind: actor, ranks: [3, 4], mesh: {device_matrix: [2], alias_name: [dp]}}\n", 0, "disjoint",
            false);
        hp_rl_step_metrics dp2 = g_steps[0];
        run(world, "learner [0], actor dp2 x tp2 [1,2,3,4], synchronous",
            "groups:\n  learner: {kind: learner, ranks: [0]}\n"
            "  actor: {kind: actor, ranks: [1, 2, 3, 4], " DPTP "}\n", 0, "disjoint", false);
        /* the same shares and draws as two whole replicas: the same samples of the start weights, so
         * the same first update up to the learners' float summation order. The strong start scores
         * in every group, so a replica sampling another share's prompts would change the reward. */
        const hp_rl_step_metrics *t = &g_steps[0];
        if (g_rank == 0) {
            CHECK(dp2.reward_mean >= 0.25, "dp2 actor: step 1 reward %g: too weak a start to compare", dp2.reward_mean);
            CHECK(t->reward_mean == dp2.reward_mean, "dp2 x tp2 actor: step 1 reward %g, dp2 actor %g", t->reward_mean,
                  dp2.reward_mean);
            /* absolute floors: where every sample scores (reward 1, as with an AVX-512 OpenBLAS under the
             * sanitizer build) the advantages are all 0, and the loss and norm are rounding noise */
            CHECK(fabs(t->loss - dp2.loss) <= 1e-5 * fabs(dp2.loss) + 1e-7 &&
                  fabs(t->grad_norm - dp2.grad_norm) <= 1e-5 * dp2.grad_norm + 1e-7, "dp2 x tp2 actor: step 1 loss %.9g, "
                  "gradient norm %.9g; dp2 actor %.9g, %.9g", t->loss, t->grad_norm, dp2.loss, dp2.grad_norm);
            printf("step 1 reward: dp2 x tp2 actor %g, dp2 actor %g\n", t->reward_mean, dp2.reward_mean);
        }
        g_base = BASE;
    }
    int failed = g_failed;
    hp_comm_all_reduce(world, &g_failed, &failed, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    if (g_rank == 0) printf(failed ? "test_rl_sync: FAILED\n" : "test_rl_sync: ok\n");
    return failed ? 1 : 0;
}
