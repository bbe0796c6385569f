/* Shared by pipeline_split.c and pipeline_predict.c (hp/pipeline_plan.h); nothing else includes it. */
#ifndef HP_MPMD_PIPELINE_PLAN_INTERNAL_H
#define HP_MPMD_PIPELINE_PLAN_INTERNAL_H

#include "hp/pipeline_plan.h"

/* What one stage costs a process of group r of o per micro-batch, as the runtime builds it: the
 * stage partitioned over the group's mesh when the group has model-parallel ranks and a strategy
 * (hp_pipeline_plan_stage_group: its seconds and bytes one process's), else the whole stage with
 * its seconds divided by the group's tp. */
typedef struct pp_stage_cost {
    hp_pipeline_stage_plan plan; /* seconds of F, B, W; bytes */
    size_t act;                  /* one micro-batch's activations in the order the schedule runs them */
    size_t state;                /* parameters, accumulators, inputs, kept tensors and AdamW's moments */
    size_t embedding_state;      /* of state, the token embedding's (0 when the stage has none) */
} pp_stage_cost;

/* Errors: the stage planners'. */
hp_status hp__pp_stage_cost(const hp_pipeline_plan_opts *o, int r, const hp_gpt_stage *part, pp_stage_cost *out);

#endif
