/* Internal: trainer state shared by trainer.c and trainer_ckpt.c. */
#ifndef HP_TRAIN_TRAINER_INTERNAL_H
#define HP_TRAIN_TRAINER_INTERNAL_H

#include "hp/data.h"
#include "hp/nn.h"
#include "hp/runtime.h"
#include "hp/train.h"

typedef struct hp_trainer_fwd {
    hp_graph *g;
    hp_program *p;
    hp_gpt gpt;
    int64_t synced_at;
    bool ever_synced;
} hp_trainer_fwd;

struct hp_trainer {
    hp_run_config cfg;
    hp_gpt_config gcfg;
    hp_corpus *corpus;
    hp_loader *loader;
    hp_graph *g;
    hp_gpt gpt;
    hp_train_step step;
    hp_program *p;
    hp_trainer_fwd eval, sample;
    int64_t steps_done;
    double unigram;
};

hp_gpt_config hp__gpt_config_from(const hp_model_config *m);

/* Samples one token id from logits (V) with temperature and top-k; deterministic in (key, counter). */
hp_status hp__sample_logits(const float *logits, int V, float temp, int top_k, uint64_t key, uint64_t counter,
                            int *out);

/* Autoregressive sampling with a forward program built for batch 1 and seq = context. */
hp_status hp__generate(const hp_graph *g, hp_program *p, const hp_gpt *gpt, const char *prompt, int n_tokens,
                       float temp, int top_k, uint64_t seed, char **text_out);

#endif
