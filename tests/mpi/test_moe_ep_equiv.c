/* ranks: 2 4 */
/*
 * Expert parallelism as a layout equals the single-rank run. The expert weights' experts dim is
 * split over the mesh axis `ep` that also splits the tokens (DeepSpeed-MoE's EP over the data-
 * parallel axis); the MoE operators' sharding rules make dispatch's rows go to their experts'
 * ranks by an all-to-all-v with run-time counts and come back by the inverse one (forward and
 * backward). For each MoE variant and strategy:
 *   - gradients: a first step with AdamW at lr 1, eps 1, no decay or clipping moves every element
 *     by g / (|g| + 1), a strictly monotone function of its gradient g, so each parameter's step-1
 *     change (gathered over the ranks) is compared with the single-rank run's: within 1e-5
 *     relative to the tensor's norm (plus 1e-7 per element, float rounding of tiny gradients that
 *     are sums of cancelling terms), every parameter compared; also the loss and gradient norm;
 *   - trajectory: 50 steps at the usual settings, every loss within 1e-4 relative.
 * Variants: softmax top-2 with the balancing loss; top-1 over experts that do not divide the ranks
 * (3 experts: ranks holding 2/1 or 1/1/1/0); sigmoid_bias with a shared expert; a router
 * initialised to zero, so every token picks experts 0 and 1 (skewed counts: ranks holding other
 * experts receive nothing); 6 experts (2, 2, 2, 0 on 4 ranks); the experts over 2 and 4 chunks of
 * positions (hp_moe_config.chunks). Strategies: ep (mesh [n]), ep with
 * FSDP over the dense parameters (every other parameter's dim 0 over ep too), and on 4 ranks
 * dp2 x ep2 (mesh [2, 2], tokens over both axes, experts over ep, replicated over dp) and TP-EP
 * tp2 x ep2 (mesh [2, 2] (ep, tp), tokens over ep, each expert's F dim over tp: fc [ep, tp, none],
 * proj [ep, none, tp]).
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/redistribute.h"
#include "hp/shard.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 50
#define OK_ON_FAIL break

#include "mpi_check.h"

typedef struct variant {
    const char *moe;
    bool zero_router; /* skewed: the router's weights zeroed before step 1 */
    int E, F;         /* experts and expert width, as in moe */
} variant;

static const variant k_var[] = {
    {"{experts: 4, top_k: 2, expert_width: 16, every: 1, router: softmax, balance_loss: 0.05}", false, 4, 16},
    {"{experts: 3, top_k: 1, expert_width: 24, layers: [1], router: softmax, balance_loss: 0.01}", false, 3, 24},
    {"{experts: 4, top_k: 2, expert_width: 16, shared_experts: 1, every: 1, router: sigmoid_bias, bias_update_rate: 0.01}",
     false, 4, 16},
    {"{experts: 4, top_k: 2, expert_width: 16, every: 1, router: softmax, balance_loss: 0.05}", true, 4, 16},
    {"{experts: 6, top_k: 2, expert_width: 8, layers: [0], router: softmax, balance_loss: 0.01}", false, 6, 8},
    /* chunked (the dispatch of chunk i+1 before the experts of chunk i): the balancing loss and the
     * bias update sum the chunks' counts */
    {"{experts: 4, top_k: 2, expert_width: 16, every: 1, router: softmax, balance_loss: 0.05, chunks: 2}", false, 4, 16},
    {"{experts: 4, top_k: 2, expert_width: 16, every: 1, router: sigmoid_bias, bias_update_rate: 0.01, chunks: 4}",
     false, 4, 16},
};
#define WIDTH 32
static const variant *g_var;  /* the variant being compared */
static const char *g_strategy; /* the strategy being compared ("" for the reference) */

/* The parameters compared (L = 0, 1; absent ones are skipped on every rank alike). */
static const char *const k_params[] = {
    "mlp.router.weight", "mlp.router.bias", "mlp.experts.fc.weight", "mlp.experts.proj.weight",
    "mlp.shared.fc.weight", "mlp.shared.proj.weight", "mlp.fc.weight", "attn.q.weight", "ln2.weight",
};
#define N_NAMES (2 * (int)(sizeof k_params / sizeof k_params[0]) + 2)

static void param_name(int i, char *buf, size_t n) {
    int per = (int)(sizeof k_params / sizeof k_params[0]);
    if (i == 2 * per) snprintf(buf, n, "wte.weight");
    else if (i == 2 * per + 1) snprintf(buf, n, "lm_head.weight");
    else snprintf(buf, n, "blocks.%d.%s", i / per, k_params[i % per]);
}

static hp_status load(const char *moe, const char *strategy, int n, bool grad_step, hp_run_config *cfg) {
    char text[4096], corpus[1024];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    int off = snprintf(text, sizeof text,
                       "model: {vocab: 256, context: 32, layers: 2, heads: 4, width: 32, tied_head: false, moe: %s}\n"
                       "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                       "train: {steps: %d, batch: 8, seed: 3, eval_batches: 2, checkpoint_dir: /tmp/unused}\n%s",
                       moe, corpus, STEPS,
                       grad_step ? "optim: {lr: 1.0, min_lr: 1.0, warmup: 0, weight_decay: 0.0, eps: 1.0, grad_clip: 0.0}\n"
                                 : "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 5, weight_decay: 0.1, grad_clip: 1.0}\n");
    if (!strcmp(strategy, "tp2xep2")) /* TP-EP: each expert's F over tp inside its ep group */
        off += snprintf(text + off, sizeof text - (size_t)off,
                        "strategy:\n  mesh: {device_matrix: [2, 2], alias_name: [ep, tp]}\n"
                        "  inputs: {tokens: [ep, none], targets: [ep, none]}\n"
                        "  params:\n    - {match: \"*.experts.fc.weight\", tensor_map: [ep, tp, none]}\n"
                        "    - {match: \"*.experts.proj.weight\", tensor_map: [ep, none, tp]}\n");
    else if (!strcmp(strategy, "dp2xep2"))
        off += snprintf(text + off, sizeof text - (size_t)off,
                        "strategy:\n  mesh: {device_matrix: [2, 2], alias_name: [dp, ep]}\n"
                        "  inputs: {tokens: [[dp, ep], none], targets: [[dp, ep], none]}\n"
                        "  params:\n    - {match: \"*.experts.*\", tensor_map: [ep, none, none]}\n");
    else if (strategy[0])
        off += snprintf(text + off, sizeof text - (size_t)off,
                        "strategy:\n  mesh: {device_matrix: [%d], alias_name: [ep]}\n"
                        "  inputs: {tokens: [ep, none], targets: [ep, none]}\n"
                        "  params:\n    - {match: \"*.experts.*\", tensor_map: [ep, none, none]}\n%s",
                        n, !strcmp(strategy, "ep_fsdp") ? "    - {match: \"*\", tensor_map: [ep]}\n" : "");
    return hp_run_config_load_string(text, strlen(text), strategy[0] ? strategy : "single", cfg);
}

/* The full tensors of the compared parameters (NULL where absent): this rank's blocks, gathered
 * in rank order when they are split (dim 0 over the mesh's last axis, so the first ranks' blocks
 * tile the tensor). ref_numel: the single-rank sizes (0 where absent), or NULL for the reference. */
static float **snapshot(hp_trainer *t, hp_comm *world, const int64_t *ref_numel, int64_t *numel_out) {
    float **out = calloc(N_NAMES, sizeof *out);
    int P = world ? hp_comm_size(world) : 1;
    for (int i = 0; i < N_NAMES; i++) {
        char name[96];
        param_name(i, name, sizeof name);
        int64_t n = 0;
        const float *p = hp_trainer_param(t, name, &n);
        if (!ref_numel) {
            numel_out[i] = p ? n : 0;
            if (p) {
                out[i] = malloc(sizeof(float) * (size_t)n + 1);
                memcpy(out[i], p, sizeof(float) * (size_t)n);
            }
            continue;
        }
        int64_t R = ref_numel[i];
        if (R == 0) continue;
        int split = p && n != R, any = 0;
        hp_comm_all_reduce(world, &split, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
        out[i] = calloc((size_t)R + 1, sizeof(float));
        if (!any) {
            if (p) memcpy(out[i], p, sizeof(float) * (size_t)R);
            continue;
        }
        float *send = calloc((size_t)R + 1, sizeof(float)), *all = calloc((size_t)(R * P) + 1, sizeof(float));
        int32_t *sizes = calloc((size_t)P, sizeof *sizes), mine = p ? (int32_t)n : 0;
        if (p) memcpy(send, p, sizeof(float) * (size_t)n);
        hp_comm_all_gather(world, send, all, (size_t)R, HP_DTYPE_F32);
        hp_comm_all_gather(world, &mine, sizes, 1, HP_DTYPE_I32);
        int64_t at = 0;
        const char *tm = !strcmp(g_strategy, "tp2xep2") ? strstr(name, "experts.fc") ? "[ep, tp, none]"
                                                          : strstr(name, "experts.proj") ? "[ep, none, tp]" : NULL
                                                        : NULL;
        if (tm) { /* blocks of a 2-D split: placed by their slices */
            hp_mesh *mm;
            hp_layout l;
            hp_shape full = strstr(name, "fc") ? HP_SHAPE(g_var->E, g_var->F, WIDTH) : HP_SHAPE(g_var->E, WIDTH, g_var->F);
            hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"ep", "tp"}, NULL, 0, &mm);
            hp_layout_parse(tm, mm, &l);
            for (int r = 0; r < P; r++) {
                int64_t st[HP_MAX_DIMS], ln[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
                hp_layout_slice_of(&l, mm, &full, r, st, ln);
                hp_shape box = hp_shape_make(3, ln);
                hp_copy_box(out[i], &full, st, all + (int64_t)r * R, &box, zero, ln, sizeof(float));
                at += hp_shape_numel(&box);
            }
            hp_mesh_free(mm);
        } else {
            for (int r = 0; r < P && at < R; r++) {
                memcpy(out[i] + at, all + (int64_t)r * R, sizeof(float) * (size_t)sizes[r]);
                at += sizes[r];
            }
        }
        CHECK(at == R, "%s: the ranks' blocks hold %lld of %lld elements", name, (long long)at, (long long)R);
        free(send);
        free(all);
        free(sizes);
    }
    return out;
}

static void free_snap(float **s) {
    for (int i = 0; s && i < N_NAMES; i++) free(s[i]);
    free(s);
}

/* Zeroes the router weights of every MoE layer (this rank's blocks; replicated or not). */
static void zero_router(hp_trainer *t) {
    for (int l = 0; l < 2; l++) {
        char name[64];
        snprintf(name, sizeof name, "blocks.%d.mlp.router.weight", l);
        int64_t n = 0;
        float *p = (float *)hp_trainer_param(t, name, &n);
        if (p) memset(p, 0, sizeof(float) * (size_t)n);
    }
}

static bool close_rel(double a, double b, double rtol) { return fabs(a - b) <= rtol * fabs(b) + 1e-7; }

/* The step-1 change of every compared parameter: before - after. */
static float **step_delta(hp_trainer *t, hp_comm *world, const int64_t *ref_numel, int64_t *numel, bool skew,
                          hp_step_metrics *m) {
    if (skew) zero_router(t);
    float **before = snapshot(t, world, ref_numel, numel);
    if (hp_trainer_step(t, m) != HP_STATUS_OK) {
        fprintf(stderr, "[rank %d] step: %s\n", g_rank, hp_error_message());
        g_failed = 1;
    }
    float **after = snapshot(t, world, ref_numel, numel);
    const int64_t *sz = ref_numel ? ref_numel : numel;
    for (int i = 0; i < N_NAMES; i++)
        for (int64_t k = 0; before[i] && k < sz[i]; k++) before[i][k] -= after[i][k];
    free_snap(after);
    return before;
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int n = hp_comm_size(world);
    const char *strategies[] = {"ep", "ep_fsdp", "dp2xep2", "tp2xep2"};
    int n_strat = n == 4 ? 4 : 2;
    for (size_t v = 0; v < sizeof k_var / sizeof k_var[0]; v++) {
        const variant *var = &k_var[v];
        g_var = var;
        g_strategy = "";
        hp_run_config cfg;
        hp_trainer *t = NULL;
        double ref[STEPS], loss[STEPS];
        hp_step_metrics m1, r1;
        int64_t ref_numel[N_NAMES];
        /* reference: one gradient step, then the trajectory */
        if (load(var->moe, "", 1, true, &cfg) != HP_STATUS_OK || hp_trainer_new_dist(&cfg, NULL, &t) != HP_STATUS_OK) {
            fprintf(stderr, "[rank %d] reference %zu: %s\n", g_rank, v, hp_error_message());
            g_failed = 1;
            break;
        }
        float **ref_d = step_delta(t, NULL, NULL, ref_numel, var->zero_router, &r1);
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
        if (load(var->moe, "", 1, false, &cfg) != HP_STATUS_OK || hp_trainer_new_dist(&cfg, NULL, &t) != HP_STATUS_OK) {
            g_failed = 1;
            free_snap(ref_d);
            break;
        }
        if (var->zero_router) zero_router(t);
        for (int i = 0; i < STEPS; i++) {
            hp_step_metrics m = {0};
            if (hp_trainer_step(t, &m) != HP_STATUS_OK) {
                fprintf(stderr, "[rank %d] moe %zu step %d: %s\n", g_rank, v, i + 1, hp_error_message());
                g_failed = 1;
            }
            ref[i] = m.loss;
        }
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
        for (int s = 0; s < n_strat; s++) {
            const char *st = strategies[s];
            g_strategy = st;
            if (load(var->moe, st, n, true, &cfg) != HP_STATUS_OK || hp_trainer_new_dist(&cfg, world, &t) != HP_STATUS_OK) {
                fprintf(stderr, "[rank %d] moe %zu %s: %s\n", g_rank, v, st, hp_error_message());
                g_failed = 1;
                continue;
            }
            int64_t dummy[N_NAMES];
            float **d = step_delta(t, world, ref_numel, dummy, var->zero_router, &m1);
            CHECK(close_rel(m1.loss, r1.loss, 1e-5), "moe %zu %s/%d: step 1 loss %.9g vs single-rank %.9g", v, st, n,
                  m1.loss, r1.loss);
            CHECK(close_rel(m1.grad_norm, r1.grad_norm, 1e-5), "moe %zu %s/%d: gradient norm %.9g vs single-rank %.9g",
                  v, st, n, m1.grad_norm, r1.grad_norm);
            int compared = 0;
            for (int i = 0; i < N_NAMES; i++) {
                if (!ref_numel[i]) continue;
                double diff = 0.0, norm = 0.0;
                for (int64_t k = 0; k < ref_numel[i]; k++) {
                    double a = d[i][k], b = ref_d[i][k];
                    diff += (a - b) * (a - b);
                    norm += b * b;
                }
                char name[96];
                param_name(i, name, sizeof name);
                /* 1e-5 of the tensor's norm, or 1e-7 per element (RMS): float rounding of a gradient
                 * that is a sum of cancelling terms (the skewed router's attention gradients, norm
                 * 4e-4; a LayerNorm gain's, 2e-3, in the build without -march=native), as in plain DP */
                CHECK(sqrt(diff) <= 1e-5 * sqrt(norm) + 1e-7 * sqrt((double)ref_numel[i]), "moe %zu %s/%d: %s's gradient step differs by %.3g (norm %.3g)",
                      v, st, n, name, sqrt(diff), sqrt(norm));
                compared++;
            }
            CHECK(compared >= 6, "moe %zu: only %d parameters compared", v, compared);
            free_snap(d);
            hp_trainer_free(t);
            hp_run_config_free(&cfg);
            /* the trajectory */
            if (load(var->moe, st, n, false, &cfg) != HP_STATUS_OK || hp_trainer_new_dist(&cfg, world, &t) != HP_STATUS_OK) {
                g_failed = 1;
                continue;
            }
            if (var->zero_router) zero_router(t);
            for (int i = 0; i < STEPS; i++) {
                hp_step_metrics m;
                OK(hp_trainer_step(t, &m));
                loss[i] = m.loss;
            }
            int bad = -1;
            for (int i = 0; i < STEPS && bad < 0; i++)
                if (!close_rel(loss[i], ref[i], 1e-4)) bad = i;
            CHECK(bad < 0, "moe %zu %s/%d: step %d loss %.9g vs single-rank %.9g", v, st, n, bad + 1,
                  bad >= 0 ? loss[bad] : 0.0, bad >= 0 ? ref[bad] : 0.0);
            if (g_rank == 0)
                printf("moe %zu %-7s %d ranks: %d parameters' gradients match; loss %.6f -> %.6f (single rank %.6f -> "
                       "%.6f), %lld bytes/rank/step planned\n", v, st, n, compared, loss[0], loss[STEPS - 1], ref[0],
                       ref[STEPS - 1], (long long)hp_partition_bytes(hp_trainer_partition(t)));
            hp_trainer_free(t);
            hp_run_config_free(&cfg);
        }
        free_snap(ref_d);
    }
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "expert parallelism matches the single-rank run");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
