/* The trainer: one job from a run config — data, step graph, programs, eval, sampling. */
#include "train/trainer_internal.h"

#include "hp/ops.h"
#include "hp/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

hp_gpt_config hp__gpt_config_from(const hp_model_config *m) {
    hp_gpt_config c = {(int)m->vocab, (int)m->context, (int)m->layers, (int)m->heads, (int)m->width, m->tied_head};
    return c;
}

/* A forward graph (+ optional loss) compiled into a program, for eval and sampling. */
static hp_status build_forward(hp_trainer_fwd *f, const hp_gpt_config *c, int batch, bool with_loss) {
    f->g = hp_graph_new();
    if (!f->g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory building a graph");
    HP_CHECK(hp_gpt_build(f->g, c, batch, c->context, with_loss, &f->gpt));
    hp_tid keep = with_loss ? f->gpt.loss : f->gpt.logits;
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &keep;
    o.n_keep = 1;
    return hp_program_new(f->g, &o, &f->p);
}

static void free_forward(hp_trainer_fwd *f) {
    hp_program_free(f->p);
    hp_graph_free(f->g);
    memset(f, 0, sizeof *f);
}

/* Copies every parameter of the training program into the forward program, by name. */
static void sync_params(hp_trainer *t, hp_trainer_fwd *f) {
    for (int i = 0; i < t->step.n_params; i++) {
        const hp_tensor *x = hp_graph_tensor(t->g, t->step.params[i]);
        hp_tid d = hp_graph_find(f->g, x->name);
        HP_ASSERT(d != HP_TID_NONE);
        memcpy(hp_program_data(f->p, d), hp_program_data(t->p, t->step.params[i]),
               (size_t)hp_shape_numel(&x->shape) * sizeof(float));
    }
    f->synced_at = t->steps_done;
}

hp_status hp_trainer_new(const hp_run_config *cfg, hp_trainer **out) {
    *out = NULL;
    hp_trainer *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the trainer");
    t->cfg = *cfg;
    t->gcfg = hp__gpt_config_from(&cfg->model);
    hp_status st;
    HP_CHECK_GOTO(hp_gpt_config_check(&t->gcfg), st, fail);
    HP_CHECK_GOTO(hp_corpus_load(cfg->data.corpus, &t->corpus), st, fail);
    hp_loader_options lo = hp_loader_options_default();
    lo.batch = cfg->train.batch;
    lo.context = cfg->model.context;
    lo.val_fraction = cfg->data.val_fraction;
    lo.seed = (uint64_t)cfg->train.seed;
    HP_CHECK_GOTO(hp_loader_new(t->corpus, &lo, &t->loader), st, fail);

    t->g = hp_graph_new();
    if (!t->g) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory building the step graph");
        goto fail;
    }
    HP_CHECK_GOTO(hp_gpt_build(t->g, &t->gcfg, (int)cfg->train.batch, (int)cfg->model.context, true, &t->gpt), st,
                  fail);
    HP_CHECK_GOTO(hp_train_step_build(t->g, t->gpt.loss, &cfg->optim, &t->step), st, fail);
    hp_tid keep[2] = {t->step.loss, t->step.grad_sq};
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = keep;
    o.n_keep = 2;
    HP_CHECK_GOTO(hp_program_new(t->g, &o, &t->p), st, fail);
    for (int i = 0; i < t->step.n_params; i++) {
        const hp_tensor *x = hp_graph_tensor(t->g, t->step.params[i]);
        HP_CHECK_GOTO(hp_gpt_init_param(&t->gcfg, x->name, (uint64_t)cfg->train.seed, 0, hp_shape_numel(&x->shape),
                                        hp_program_data(t->p, t->step.params[i])),
                      st, fail);
    }
    t->unigram = hp_corpus_unigram_entropy(t->corpus, 0, hp_loader_train_tokens(t->loader));
    *out = t;
    return HP_STATUS_OK;
fail:
    hp_trainer_free(t);
    return st;
}

void hp_trainer_free(hp_trainer *t) {
    if (!t) return;
    free_forward(&t->eval);
    free_forward(&t->sample);
    hp_program_free(t->p);
    hp_graph_free(t->g);
    hp_loader_free(t->loader);
    hp_corpus_free(t->corpus);
    free(t);
}

int64_t hp_trainer_steps_done(const hp_trainer *t) { return t->steps_done; }
double hp_trainer_unigram_entropy(const hp_trainer *t) { return t->unigram; }

hp_status hp_trainer_step(hp_trainer *t, hp_step_metrics *m) {
    double t0 = now_s();
    int64_t s = t->steps_done; /* 0-based batch index; the optimizer step is s + 1 */
    HP_CHECK(hp_loader_batch(t->loader, s, hp_program_data(t->p, t->gpt.tokens),
                             hp_program_data(t->p, t->gpt.targets)));
    double lr = hp_lr_at(&t->cfg.optim, s + 1, t->cfg.train.steps);
    *(float *)hp_program_data(t->p, t->step.lr) = (float)lr;
    *(float *)hp_program_data(t->p, t->step.step) = (float)(s + 1);
    HP_CHECK(hp_program_run(t->p));
    t->steps_done++;
    double dt = now_s() - t0;
    m->step = t->steps_done;
    m->loss = *(float *)hp_program_data(t->p, t->step.loss);
    m->lr = lr;
    m->grad_norm = sqrt(*(float *)hp_program_data(t->p, t->step.grad_sq));
    m->seconds = dt;
    m->tokens_per_s = (double)t->cfg.train.batch * (double)t->cfg.model.context / dt;
    return HP_STATUS_OK;
}

hp_status hp_trainer_eval(hp_trainer *t, double *val_loss) {
    if (!t->eval.p) HP_CHECK(build_forward(&t->eval, &t->gcfg, (int)t->cfg.train.batch, true));
    if (t->eval.synced_at != t->steps_done || !t->eval.ever_synced) {
        sync_params(t, &t->eval);
        t->eval.ever_synced = true;
    }
    double sum = 0;
    for (int64_t b = 0; b < t->cfg.train.eval_batches; b++) {
        HP_CHECK(hp_loader_val_batch(t->loader, b, hp_program_data(t->eval.p, t->eval.gpt.tokens),
                                     hp_program_data(t->eval.p, t->eval.gpt.targets)));
        HP_CHECK(hp_program_run(t->eval.p));
        sum += *(float *)hp_program_data(t->eval.p, t->eval.gpt.loss);
    }
    *val_loss = sum / (double)t->cfg.train.eval_batches;
    return HP_STATUS_OK;
}

const float *hp_trainer_param(hp_trainer *t, const char *name, int64_t *numel) {
    hp_tid id = hp_graph_find(t->g, name);
    if (id == HP_TID_NONE) return NULL;
    const hp_tensor *x = hp_graph_tensor(t->g, id);
    if (x->kind != HP_TENSOR_KIND_PARAM && x->kind != HP_TENSOR_KIND_OPT_STATE) return NULL;
    if (numel) *numel = hp_shape_numel(&x->shape);
    return hp_program_data(t->p, id);
}

hp_status hp__sample_logits(const float *logits, int V, float temp, int top_k, uint64_t key, uint64_t counter,
                            int *out) {
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best]) best = j;
    if (temp <= 0.0f) {
        *out = best;
        return HP_STATUS_OK;
    }
    /* Threshold for top-k: the k-th largest logit (O(V k), fine for the sizes sampled here). */
    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float prev = INFINITY;
        for (int r = 0; r < top_k; r++) {
            float cur = -INFINITY;
            for (int j = 0; j < V; j++)
                if (logits[j] < prev && logits[j] > cur) cur = logits[j];
            prev = cur;
        }
        thresh = prev;
    }
    double z = 0;
    for (int j = 0; j < V; j++)
        if (logits[j] >= thresh) z += exp((double)(logits[j] - logits[best]) / temp);
    double u = hp_rng_uniform(key, counter) * z, acc = 0;
    for (int j = 0; j < V; j++) {
        if (logits[j] < thresh) continue;
        acc += exp((double)(logits[j] - logits[best]) / temp);
        if (acc >= u) {
            *out = j;
            return HP_STATUS_OK;
        }
    }
    *out = best;
    return HP_STATUS_OK;
}

hp_status hp_trainer_sample(hp_trainer *t, const char *prompt, int n_tokens, float temp, int top_k, uint64_t seed,
                            char **text_out) {
    *text_out = NULL;
    if (!t->sample.p) HP_CHECK(build_forward(&t->sample, &t->gcfg, 1, false));
    if (t->sample.synced_at != t->steps_done || !t->sample.ever_synced) {
        sync_params(t, &t->sample);
        t->sample.ever_synced = true;
    }
    return hp__generate(t->sample.g, t->sample.p, &t->sample.gpt, prompt, n_tokens, temp, top_k, seed, text_out);
}

hp_status hp__generate(const hp_graph *g, hp_program *p, const hp_gpt *gpt, const char *prompt, int n_tokens,
                       float temp, int top_k, uint64_t seed, char **text_out) {
    (void)g;
    int T = gpt->seq, V = gpt->cfg.vocab;
    size_t plen = strlen(prompt);
    char *text = malloc(plen + (size_t)n_tokens + 1);
    if (!text) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %d sampled tokens", n_tokens);
    memcpy(text, prompt, plen);
    size_t len = plen;
    int32_t *tok = hp_program_data(p, gpt->tokens);
    const float *logits = hp_program_data(p, gpt->logits);
    uint64_t key = hp_rng_hash("sample") ^ seed;
    for (int i = 0; i < n_tokens; i++) {
        /* The last T bytes (or fewer) of the text, left-aligned; causal attention makes the
         * padding after them irrelevant to the logits at the last real position. */
        size_t start = len > (size_t)T ? len - (size_t)T : 0, n = len - start;
        memset(tok, 0, sizeof *tok * (size_t)T);
        for (size_t j = 0; j < n; j++) tok[j] = (unsigned char)text[start + j];
        if (n == 0) n = 1; /* empty prompt: condition on a zero byte */
        hp_status st = hp_program_run(p);
        if (st != HP_STATUS_OK) {
            free(text);
            return st;
        }
        int next;
        hp__sample_logits(logits + (n - 1) * (size_t)V, V, temp, top_k, key, (uint64_t)i, &next);
        text[len++] = (char)(next & 0xff);
    }
    text[len] = '\0';
    *text_out = text;
    return HP_STATUS_OK;
}
