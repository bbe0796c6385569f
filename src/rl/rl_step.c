/*
 * The steps of the GRPO job (hp/rl.h): the actor's generation, the samples' transfer to the
 * controller and the batch it assembles (rewards, group-relative advantages, reference log-probs,
 * token weights), the learner's update, the sync; and the greedy evaluation.
 *
 * Event order of step i (every rank does the events it takes part in, in this order, so the
 * point-to-point transfers and the syncs match between the groups):
 *   off_policy 0:  GEN(i) XFER(i) TRAIN(i) SYNC            (SYNC when a GEN follows)
 *   off_policy 1:  [i = 0: GEN(0) XFER(0)] GEN(i+1) TRAIN(i) XFER(i+1) SYNC
 * With disjoint groups GEN(i+1) on the actor ranks runs while TRAIN(i) runs on the learner ranks.
 */
#include "rl/rl_internal.h"

#include "hp/redistribute.h"
#include "hp/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAG_TOK 11
#define TAG_LOGP 12
#define TAG_EVAL 13

/* log softmax(x)[k] over V values, in double. */
static double log_prob(const float *x, int V, int k) {
    double m = -INFINITY, s = 0.0;
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < V; i++) s += exp((double)x[i] - m);
    return (double)x[k] - m - log(s);
}

static uint64_t prompt_seed(const hp_rl *rl) { return (uint64_t)rl->cfg.train.seed ^ 0x9a7e5ULL; }

/* Sequence j of batch `step`: its prompt (prompt index step * prompts + j / G). */
static int seq_prompt(const hp_rl *rl, int64_t step, int j, int32_t *out) {
    return hp_rl_prompt(&rl->r, prompt_seed(rl), step * rl->r.prompts + j / rl->r.group_size, out);
}

/* GEN: this actor's share of batch `step`, sampled, with each token's log-prob. */
static hp_status gen(hp_rl *rl, int64_t step, hp_rl_step_metrics *m) {
    if (!rl->is_actor) return HP_STATUS_OK;
    double t0 = hp_now_seconds();
    int32_t pbuf[64][32];
    const int32_t *prompts[64];
    int lens[64];
    const int chunk = 64;
    for (int c0 = 0; c0 < rl->share; c0 += chunk) {
        int n = rl->share - c0 < chunk ? rl->share - c0 : chunk;
        for (int j = 0; j < n; j++) {
            lens[j] = seq_prompt(rl, step, rl->share0 + c0 + j, pbuf[j]);
            prompts[j] = pbuf[j];
        }
        hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
        o.max_new_tokens = rl->M;
        o.temperature = (float)rl->r.temperature;
        o.seed = (uint64_t)rl->cfg.train.seed * 1000003ULL + (uint64_t)step * 4099ULL + (uint64_t)(rl->share0 + c0);
        o.logits = rl->gen_logits;
        int32_t *out = rl->my_comp + (size_t)c0 * (size_t)rl->M;
        HP_CHECK(hp_generate(rl->gen, n, prompts, lens, &o, out));
        /* the sampling policy's log-prob of each token: softmax of the logits at temperature 1 (the
         * policy itself; a temperature other than 1 samples from a tempered one, as in DeepSeekMath) */
        for (int j = 0; j < n; j++)
            for (int i = 0; i < rl->M; i++) {
                size_t k = (size_t)j * (size_t)rl->M + (size_t)i;
                rl->my_logp[(size_t)c0 * (size_t)rl->M + k] =
                    (float)log_prob(rl->gen_logits + k * (size_t)rl->V, rl->V, out[k]);
            }
    }
    if (m) m->gen_seconds += hp_now_seconds() - t0;
    return HP_STATUS_OK;
}

/* The controller turns the gathered samples into the learner's batch (see hp/rl.h). */
static hp_status assemble(hp_rl *rl, int64_t step) {
    const int B = rl->B, T = rl->T, M = rl->M, G = (int)rl->r.group_size;
    size_t bt = (size_t)B * (size_t)T;
    memset(rl->tok, 0, bt * sizeof(int32_t));
    memset(rl->tgt, 0, bt * sizeof(int32_t));
    memset(rl->old, 0, bt * sizeof(float));
    memset(rl->adv, 0, bt * sizeof(float));
    memset(rl->w, 0, bt * sizeof(float));
    double *reward = malloc(sizeof(double) * (size_t)B);
    int *plen = malloc(sizeof(int) * (size_t)B), *clen = malloc(sizeof(int) * (size_t)B);
    if (!reward || !plen || !clen) {
        free(reward), free(plen), free(clen);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "rl: out of memory for the rewards");
    }
    double rsum = 0.0;
    for (int j = 0; j < B; j++) {
        int32_t x[64] = {0};
        plen[j] = seq_prompt(rl, step, j, x);
        const int32_t *c = rl->comp + (size_t)j * (size_t)M;
        int n = M;
        for (int i = 0; i < M; i++)
            if (c[i] == '\n') {
                n = i + 1;
                break;
            }
        clen[j] = n;
        reward[j] = hp_rl_reward(&rl->r, x, plen[j], c, n);
        rsum += reward[j];
        memcpy(x + plen[j], c, sizeof(int32_t) * (size_t)n);
        for (int t = 0; t < T; t++) {
            rl->tok[(size_t)j * T + t] = x[t];
            rl->tgt[(size_t)j * T + t] = x[t + 1];
        }
    }
    rl->batch_reward = rsum / B;
    for (int g0 = 0; g0 < B; g0 += G) {
        double mean = 0.0, var = 0.0;
        for (int j = g0; j < g0 + G; j++) mean += reward[j];
        mean /= G;
        for (int j = g0; j < g0 + G; j++) var += (reward[j] - mean) * (reward[j] - mean);
        double sd = sqrt(var / (G - 1)); /* the sample std, as torch.std in DeepSeekMath's and TRL's GRPO */
        for (int j = g0; j < g0 + G; j++) {
            double a = sd > 1e-6 ? (reward[j] - mean) / sd : 0.0;
            for (int k = 0; k < clen[j]; k++) {
                size_t row = (size_t)j * T + (size_t)(plen[j] - 1 + k);
                rl->adv[row] = (float)a;
                rl->w[row] = (float)(1.0 / ((double)B * clen[j]));
                rl->old[row] = rl->comp_logp[(size_t)j * M + k];
            }
        }
    }
    /* the reference policy's log-probs of the same tokens, and the mean k3 KL of the samples */
    memcpy(hp_program_data(rl->rp, rl->rgpt.tokens), rl->tok, bt * sizeof(int32_t));
    hp_status st = hp_program_run(rl->rp);
    const float *logits = hp_program_data(rl->rp, rl->rgpt.logits);
    double kl = 0.0, nk = 0.0;
    for (size_t r = 0; st == HP_STATUS_OK && r < bt; r++) {
        if (rl->w[r] == 0.0f) {
            rl->ref[r] = 0.0f;
            continue;
        }
        rl->ref[r] = (float)log_prob(logits + r * (size_t)rl->V, rl->V, rl->tgt[r]);
        double d = (double)rl->ref[r] - rl->old[r];
        kl += exp(d) - d - 1.0;
        nk += 1.0;
    }
    rl->batch_kl = nk > 0 ? kl / nk : 0.0;
    free(reward), free(plen), free(clen);
    return st;
}

/* XFER: every actor's share to the controller, which assembles the batch. */
static hp_status xfer(hp_rl *rl, int64_t step, hp_rl_step_metrics *m) {
    size_t cnt = (size_t)rl->share * (size_t)rl->M;
    const int replicas = rl->n_rep; /* the ranks of a tp replica hold the same samples: its first sends */
    if (rl->is_actor && !rl->is_ctrl && rl->actor_index % rl->tp == 0) {
        HP_CHECK(hp_comm_send(rl->world, rl->my_comp, cnt, HP_DTYPE_I32, rl->controller, TAG_TOK));
        HP_CHECK(hp_comm_send(rl->world, rl->my_logp, cnt, HP_DTYPE_F32, rl->controller, TAG_LOGP));
    }
    if (!rl->is_ctrl) return HP_STATUS_OK;
    double t0 = hp_now_seconds();
    for (int a = 0; a < replicas; a++) {
        int64_t s0, n;
        hp_block_range(rl->B, replicas, a, &s0, &n);
        size_t off = (size_t)s0 * (size_t)rl->M, k = (size_t)n * (size_t)rl->M;
        const int from = rl->actors[a * rl->tp];
        if (from == rl->rank) {
            memcpy(rl->comp + off, rl->my_comp, k * sizeof(int32_t));
            memcpy(rl->comp_logp + off, rl->my_logp, k * sizeof(float));
            continue;
        }
        HP_CHECK(hp_comm_recv(rl->world, rl->comp + off, k, HP_DTYPE_I32, from, TAG_TOK));
        HP_CHECK(hp_comm_recv(rl->world, rl->comp_logp + off, k, HP_DTYPE_F32, from, TAG_LOGP));
    }
    if (m) m->wait_seconds += hp_now_seconds() - t0;
    return assemble(rl, step);
}

/* This rank's block of a (B, T) batch array into the learner program's input t. */
static void scatter(hp_rl *rl, hp_tid t, const void *src) {
    hp_partition *part = hp_compiled_partition(rl->lc);
    const hp_tensor *x = hp_graph_tensor(rl->lg, t);
    hp_layout rep;
    hp_layout_init(&rep, 2);
    const hp_layout *l = part ? hp_partition_layout(part, t) : &rep;
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    hp_status st = hp_layout_slice_of(l, hp_compiled_mesh(rl->lc), &x->shape, hp_compiled_index(rl->lc), start, len);
    HP_ASSERT(st == HP_STATUS_OK);
    hp_shape local = HP_SHAPE(len[0], len[1]);
    hp_copy_box(hp__rl_ldata(rl, t), &local, zero, src, &x->shape, start, len, 4);
}

/* TRAIN: the batch from the controller to the learner ranks, one optimizer step. */
static hp_status train(hp_rl *rl, int64_t step, hp_rl_step_metrics *m) {
    if (!rl->is_learner) return HP_STATUS_OK;
    double t0 = hp_now_seconds();
    size_t bt = (size_t)rl->B * (size_t)rl->T;
    void *arr[6] = {rl->tok, rl->tgt, rl->old, rl->ref, rl->adv, rl->w};
    for (int k = 0; k < 6; k++) {
        HP_CHECK(hp_comm_broadcast(rl->lcomm, arr[k], bt, k < 2 ? HP_DTYPE_I32 : HP_DTYPE_F32, 0));
        scatter(rl, rl->in[k], arr[k]);
    }
    /* rl.iterations AdamW updates on the batch (update u of steps x iterations: the schedule's lr
     * and AdamW's step), each against the same sampling log-probs `old`: from the second on the
     * policy has moved, so the ratio leaves 1 and the clip acts (DeepSeekMath's GRPO iterations) */
    hp_program *p = hp_compiled_program(rl->lc);
    const int64_t K = rl->r.iterations;
    for (int64_t k = 0; k < K; k++) {
        int64_t u = step * K + k + 1;
        *(float *)hp__rl_ldata(rl, rl->step.lr) = (float)hp_lr_at(&rl->cfg.optim, u, rl->r.steps * K);
        *(float *)hp__rl_ldata(rl, rl->step.step) = (float)u;
        HP_CHECK(hp_program_run(p));
        if (m && rl->is_ctrl && k == 0) m->loss_first = *(float *)hp_program_data(p, hp_compiled_loss(rl->lc));
    }
    if (m && rl->is_ctrl) {
        m->loss = *(float *)hp_program_data(p, hp_compiled_loss(rl->lc));
        m->grad_norm = sqrt(*(float *)hp_program_data(p, hp_compiled_grad_sq(rl->lc)));
        m->reward_mean = rl->batch_reward;
        m->kl = rl->batch_kl;
        m->train_seconds += hp_now_seconds() - t0;
    }
    return HP_STATUS_OK;
}

hp_status hp_rl_step(hp_rl *rl, hp_rl_step_metrics *m) {
    hp_rl_step_metrics local;
    if (!m) m = &local;
    memset(m, 0, sizeof *m);
    const int64_t i = rl->steps_done, N = rl->r.steps;
    if (i >= N) return hp_error(HP_STATUS_INVALID_ARGUMENT, "rl: all %lld steps are done", (long long)N);
    double t0 = hp_now_seconds();
    bool more;
    if (rl->r.off_policy == 0) {
        HP_CHECK(gen(rl, i, m));
        HP_CHECK(xfer(rl, i, m));
        HP_CHECK(train(rl, i, m));
        more = i + 1 < N;
    } else {
        if (i == 0) {
            HP_CHECK(gen(rl, 0, m));
            HP_CHECK(xfer(rl, 0, m));
        }
        if (i + 1 < N) HP_CHECK(gen(rl, i + 1, m)); /* with the weights before this update */
        double rw = 0; /* the metrics are batch i's: XFER(i+1) overwrites the assembled batch */
        HP_CHECK(train(rl, i, m));
        rw = rl->batch_reward;
        double kl = rl->batch_kl;
        if (i + 1 < N) HP_CHECK(xfer(rl, i + 1, m));
        if (rl->is_ctrl) m->reward_mean = rw, m->kl = kl;
        more = i + 2 < N;
    }
    rl->steps_done++;
    if (more) HP_CHECK(hp__rl_sync(rl, m));
    if (rl->is_ctrl) {
        m->step = i + 1;
        m->samples = rl->B;
        m->seconds = hp_now_seconds() - t0;
    } else {
        memset(m, 0, sizeof *m);
    }
    return HP_STATUS_OK;
}

hp_status hp_rl_eval(hp_rl *rl, double *accuracy) {
    *accuracy = 0.0;
    int32_t correct = 0;
    const int64_t n = rl->r.eval_prompts;
    if (rl->actor_updates != rl->steps_done) HP_CHECK(hp__rl_sync(rl, NULL)); /* the last updates */
    if (rl->is_actor && rl->actor_index < rl->tp) { /* the first replica (all its ranks with tp) */
        const uint64_t seed = (uint64_t)rl->cfg.train.seed ^ 0xe7a1e7a1ULL;
        int32_t pbuf[64][32];
        const int32_t *prompts[64];
        int lens[64];
        int64_t first, slots;
        hp_block_range(rl->B, rl->n_rep, 0, &first, &slots);
        int chunk = slots < 64 ? (int)slots : 64;
        int32_t *out = malloc(sizeof(int32_t) * (size_t)chunk * (size_t)rl->M);
        if (!out) return hp_error(HP_STATUS_OUT_OF_MEMORY, "rl: out of memory for the evaluation");
        hp_status st = HP_STATUS_OK;
        for (int64_t c0 = 0; c0 < n && st == HP_STATUS_OK; c0 += chunk) {
            int k = n - c0 < chunk ? (int)(n - c0) : chunk;
            for (int j = 0; j < k; j++) {
                lens[j] = hp_rl_prompt(&rl->r, seed, c0 + j, pbuf[j]);
                prompts[j] = pbuf[j];
            }
            hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
            o.max_new_tokens = rl->M;
            o.temperature = 0.0f;
            st = hp_generate(rl->gen, k, prompts, lens, &o, out);
            for (int j = 0; st == HP_STATUS_OK && j < k; j++)
                correct += hp_rl_reward(&rl->r, pbuf[j], lens[j], out + (size_t)j * (size_t)rl->M, rl->M) > 0.5;
        }
        free(out);
        HP_CHECK(st);
        if (!rl->is_ctrl && rl->rank == rl->actors[0])
            HP_CHECK(hp_comm_send(rl->world, &correct, 1, HP_DTYPE_I32, rl->controller, TAG_EVAL));
    }
    if (rl->is_ctrl && rl->actors[0] != rl->rank)
        HP_CHECK(hp_comm_recv(rl->world, &correct, 1, HP_DTYPE_I32, rl->actors[0], TAG_EVAL));
    if (rl->is_ctrl && n > 0) *accuracy = (double)correct / (double)n;
    return HP_STATUS_OK;
}
