/*
 * Mixture-of-Experts on one rank (hp/moe.h): a dense GPT against MoE GPTs of equal active
 * parameters per token, trained the same steps on the same KJV batches (the trainer, as `hp train`
 * runs it), and the experts' load with and without balancing. One JSON line per variant:
 *   tokens_per_s (mean over the steps after the first 5), train and val loss (the trainer's eval over
 *   eval_batches), params, active params per token, and, for MoE variants, tokens per expert
 *   max / mean per MoE layer over held-out windows after training (1.0 = perfectly balanced),
 *   plus the first steps' mean of the same from the training graph's routing (untrained router);
 * then a summary line with each MoE variant's tokens/s relative to the dense model (goal >= 0.8).
 *
 * Variants (vocab 256, context 128, 4 layers, 4 heads, width 128, batch 16 by default):
 *   dense            MLP 128 -> 512 -> 128 in every layer
 *   moe_softmax      8 experts of width 256, top-2, every layer, no balancing loss
 *   moe_balance      the same with the Switch/GShard balancing loss, alpha 0.01
 *   moe_sigmoid_bias DeepSeek-V3's sigmoid router with bias balancing (u = 1e-3), no loss
 * Each MoE token uses 2 experts x 2 x 128 x 256 weights = the dense MLP's 2 x 128 x 512.
 * With --family llama the same variants are Llama-family models (RMSNorm, RoPE, GQA with 2 kv
 * heads, untied head): the dense SwiGLU MLP 128 -> 512 -> 128 (3 x 128 x 512 weights), the experts
 * SwiGLU of width 256 (2 x 3 x 128 x 256 per token: equal).
 *
 *   OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE ./build/bench/bench_moe --steps 300 [--family llama]
 */
#include "hp/config.h"
#include "hp/moe.h"
#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct variant {
    const char *name;
    const char *moe; /* the model.moe value, or NULL for the dense model */
} variant;

static const variant VARIANTS[] = {
    {"dense", NULL},
    {"moe_softmax", "{experts: 8, top_k: 2, expert_width: 256, every: 1, router: softmax}"},
    {"moe_balance", "{experts: 8, top_k: 2, expert_width: 256, every: 1, router: softmax, balance_loss: 0.01}"},
    {"moe_sigmoid_bias", "{experts: 8, top_k: 2, expert_width: 256, every: 1, router: sigmoid_bias}"},
};

/* The held-out bytes of the corpus (the last val_fraction, as the trainer splits it), malloc'd. */
static unsigned char *val_bytes(const char *path, double frac, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    size_t take = (size_t)((double)len * frac);
    fseek(f, len - (long)take, SEEK_SET);
    unsigned char *b = malloc(take + 1);
    *n = b ? fread(b, 1, take, f) : 0;
    fclose(f);
    return b;
}

/*
 * Routes `windows` held-out windows (B rows each) through the trained model (a forward graph with the
 * trainer's weights) and writes, per MoE layer, the mean over batches of max_e count_e / mean_e
 * count_e into ratio[]; returns the number of MoE layers.
 */
static int load_balance(hp_trainer *t, const hp_run_config *cfg, const unsigned char *val, size_t nval, int batches,
                        double *ratio) {
    const int B = (int)cfg->train.batch, T = (int)cfg->model.context;
    hp_gpt_config gc = hp_gpt_config_from_model(&cfg->model);
    hp_graph *g = hp_graph_new();
    hp_gpt gpt;
    if (hp_gpt_build(g, &gc, B, T, false, &gpt) != HP_STATUS_OK) return -1;
    hp_tid counts[64];
    int nl = 0;
    for (int i = 0; i < hp_graph_n_nodes(g) && nl < 64; i++)
        if (hp_graph_node(g, i)->op == HP_OP_MOE_DISPATCH) counts[nl++] = hp_graph_node(g, i)->out[1];
    hp_program *p;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = counts;
    o.n_keep = nl;
    if (hp_program_new(g, &o, &p) != HP_STATUS_OK) return -1;
    hp_tid params[512];
    int np = hp_graph_params(g, params, 512);
    for (int i = 0; i < np; i++) {
        int64_t n;
        const float *w = hp_trainer_param(t, hp_graph_tensor(g, params[i])->name, &n);
        if (!w) return -1;
        memcpy(hp_program_data(p, params[i]), w, sizeof(float) * (size_t)n);
    }
    for (int l = 0; l < nl; l++) ratio[l] = 0;
    int32_t *tok = hp_program_data(p, gpt.tokens);
    const int E = cfg->model.moe.experts;
    for (int b = 0; b < batches; b++) {
        for (int r = 0; r < B; r++) {
            size_t start = ((size_t)(b * B + r) * (size_t)T) % (nval - (size_t)T);
            for (int i = 0; i < T; i++) tok[r * T + i] = val[start + (size_t)i];
        }
        if (hp_program_run(p) != HP_STATUS_OK) return -1;
        for (int l = 0; l < nl; l++) {
            const int32_t *c = hp_program_data(p, counts[l]);
            double mx = 0, sum = 0;
            for (int e = 0; e < E; e++) sum += c[e], mx = c[e] > mx ? c[e] : mx;
            ratio[l] += mx / (sum / E) / batches;
        }
    }
    hp_program_free(p);
    hp_graph_free(g);
    return nl;
}

int main(int argc, char **argv) {
    int steps = 300, batches = 8;
    const char *only = NULL, *family = "gpt2";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--family") && i + 1 < argc) family = argv[++i];
        else {
            fprintf(stderr, "usage: bench_moe [--steps N] [--variant NAME] [--family gpt2|llama]\n");
            return 2;
        }
    }
    const bool llama = !strcmp(family, "llama");
    double dense_tps = 0, tps_of[8] = {0};
    size_t nval = 0;
    unsigned char *val = val_bytes("data/kjv.txt", 0.05, &nval);
    if (!val || nval < 4096) {
        fprintf(stderr, "bench_moe: cannot read data/kjv.txt (run from the repository root)\n");
        return 1;
    }
    for (size_t v = 0; v < sizeof VARIANTS / sizeof VARIANTS[0]; v++) {
        if (only && strcmp(only, VARIANTS[v].name)) continue;
        char text[2048], moe[300] = "";
        if (VARIANTS[v].moe) snprintf(moe, sizeof moe, ", moe: %s", VARIANTS[v].moe);
        snprintf(text, sizeof text,
                 "model: {vocab: 256, context: 128, layers: 4, heads: 4, width: 128%s%s}\n"
                 "data: {corpus: data/kjv.txt, val_fraction: 0.05}\n"
                 "train: {steps: %d, batch: 16, seed: 1, eval_batches: 16, checkpoint_dir: /tmp/unused}\n"
                 "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 50, weight_decay: 0.1, grad_clip: 1.0}\n",
                 llama ? ", family: llama, kv_heads: 2, ffn_width: 512" : "", moe, steps);
        hp_run_config cfg;
        hp_trainer *t = NULL;
        if (hp_run_config_load_string(text, strlen(text), VARIANTS[v].name, &cfg) != HP_STATUS_OK ||
            hp_trainer_new(&cfg, &t) != HP_STATUS_OK) {
            fprintf(stderr, "bench_moe %s: %s\n", VARIANTS[v].name, hp_error_message());
            return 1;
        }
        double secs = 0, loss = 0;
        int timed = 0;
        for (int s = 0; s < steps; s++) {
            hp_step_metrics m;
            if (hp_trainer_step(t, &m) != HP_STATUS_OK) {
                fprintf(stderr, "bench_moe %s: %s\n", VARIANTS[v].name, hp_error_message());
                return 1;
            }
            if (s >= 5) secs += m.seconds, timed++;
            loss = m.loss;
        }
        double vloss = 0;
        if (hp_trainer_eval(t, &vloss) != HP_STATUS_OK) {
            fprintf(stderr, "bench_moe %s: %s\n", VARIANTS[v].name, hp_error_message());
            return 1;
        }
        const int64_t tokens = cfg.train.batch * cfg.model.context;
        double tps = timed ? (double)tokens * timed / secs : 0;
        hp_gpt_config gc = hp_gpt_config_from_model(&cfg.model);
        int64_t params = hp_gpt_n_params(&gc);
        double fpt = hp_gpt_train_flops_per_token(&gc, 128);
        printf("{\"bench\": \"moe_step\", \"family\": \"%s\", \"variant\": \"%s\", \"tokens_per_s\": %.1f, \"train_loss\": %.4f, "
               "\"val_loss\": %.4f, \"steps\": %d, \"params\": %lld, \"train_flops_per_token\": %.0f",
               family, VARIANTS[v].name, tps, loss, vloss, steps, (long long)params, fpt);
        if (cfg.model.moe.experts > 0) {
            double ratio[64];
            int nl = load_balance(t, &cfg, val, nval, batches, ratio);
            if (nl < 0) {
                fprintf(stderr, "bench_moe %s: load stats: %s\n", VARIANTS[v].name, hp_error_message());
                return 1;
            }
            double mean = 0;
            printf(", \"load_max_over_mean\": [");
            for (int l = 0; l < nl; l++) printf("%s%.3f", l ? ", " : "", ratio[l]), mean += ratio[l] / nl;
            printf("], \"load_max_over_mean_avg\": %.3f, \"load_batches\": %d", mean, batches);
        }
        printf("}\n");
        fflush(stdout);
        if (v == 0) dense_tps = tps;
        tps_of[v] = tps;
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
    }
    if (dense_tps > 0) {
        printf("{\"bench\": \"moe_step_summary\", \"family\": \"%s\", \"goal\": 0.8", family);
        for (size_t v = 1; v < sizeof VARIANTS / sizeof VARIANTS[0]; v++)
            if (tps_of[v] > 0) printf(", \"%s_vs_dense\": %.3f", VARIANTS[v].name, tps_of[v] / dense_tps);
        printf("}\n");
    }
    free(val);
    return 0;
}
