/* Internal: the per-family implementations behind the hp_gpt_* interface of hp/nn.h. */
#ifndef HP_NN_INTERNAL_H
#define HP_NN_INTERNAL_H

#include "hp/nn.h"

/* Llama (llama.c): the same contracts as the hp_gpt_* functions of hp/nn.h. */
hp_status hp__llama_config_check(const hp_gpt_config *c);
hp_status hp__llama_build_stage(hp_graph *g, const hp_gpt_config *c, const hp_gpt_stage *s, int batch, int seq,
                                bool with_loss, hp_gpt *out);
hp_status hp__llama_init_param(const hp_gpt_config *c, const char *name, uint64_t seed, int64_t first, int64_t n,
                               float *data);
int64_t hp__llama_n_params(const hp_gpt_config *c);
double hp__llama_train_flops_per_token(const hp_gpt_config *c, int seq);

#endif
