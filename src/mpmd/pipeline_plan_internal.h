/* Shared by pipeline_split.c and pipeline_predict.c (hp/pipeline_plan.h); nothing else includes it. */
#ifndef HP_MPMD_PIPELINE_PLAN_INTERNAL_H
#define HP_MPMD_PIPELINE_PLAN_INTERNAL_H

#include "hp/pipeline_plan.h"

/* Bytes of the parameters of `part` of `model` (each counted once), from its stage graph built for
 * one token. Errors: the builder's; HP_STATUS_OUT_OF_MEMORY. */
hp_status hp__pp_param_bytes(const hp_gpt_config *model, const hp_gpt_stage *part, double *out);

#endif
