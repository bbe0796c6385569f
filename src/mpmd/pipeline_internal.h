/* Internal: the pipeline's per-rank state, shared by pipeline.c (building) and pipeline_run.c. */
#ifndef HP_MPMD_PIPELINE_INTERNAL_H
#define HP_MPMD_PIPELINE_INTERNAL_H

#include "hp/pipeline.h"
#include "hp/runtime.h"

/* One program instance of a chunk: the activations of one micro-batch in flight. */
typedef struct pp_slot {
    hp_program *p;
    hp_comm_request *recv;   /* pending receive into x_in (RECV_F) or dy (RECV_B) */
    hp_comm_request *send_f; /* pending send of x_out */
    hp_comm_request *send_b; /* pending send of dx */
} pp_slot;

/* One virtual stage held by this rank. */
typedef struct pp_chunk {
    int stage;
    hp_gpt_stage part;
    hp_graph *g;
    hp_gpt gpt;
    hp_tid dy;        /* input: the output gradient (not on the last stage) */
    hp_tid dx;        /* the input gradient (not on the first stage) */
    int f_end, b_end; /* phases: F nodes [0, f_end), B [f_end, b_end), W [b_end, n_nodes) */
    int n_nodes;
    int n_slots;
    pp_slot *slots;
    size_t act_bytes; /* bytes of x_in / x_out / dy / dx: one micro-batch's (rows, seq, C) f32 */
} pp_chunk;

/* Per action of this rank's list: the chunk and slot it uses and, for a receive, the action after
 * which it may be posted (the one that freed its slot; -1: from the start). */
typedef struct pp_action_plan {
    int chunk, slot, post_after;
} pp_action_plan;

struct hp_pipeline {
    hp_gpt_config model;
    hp_optim_config optim;
    const hp_schedule *sched;
    hp_comm *comm;
    int rank, p, m, rows, seq; /* rows: batch rows per micro-batch */
    hp_store *store;
    int n_chunks;
    pp_chunk *chunks;
    int *chunk_of_stage;    /* [n_stages] this rank's chunk of a stage, or -1 */
    pp_action_plan *plan;   /* [n_actions of this rank] */
    bool *posted;           /* [n_actions] per step: a receive posted */
    /* the optimizer: squared norm of the accumulators this rank owns, then clip + AdamW + zeroing */
    hp_graph *norm_g, *opt_g;
    hp_program *norm_p, *opt_p;
    hp_tid norm_out, opt_grad_sq, opt_lr, opt_step;
    bool tied_exchange;     /* this rank holds one of the two copies of a tied embedding on two ranks */
    int tied_peer;          /* the rank holding the other copy */
    int64_t step;           /* optimizer steps taken */
    hp_trace *trace;        /* hp_pipeline_set_trace; NULL: off */
    int trace_track;        /* the compute thread's track */
    int32_t trace_name[6];  /* "send F", "send B", "recv F", "recv B", "all_reduce loss", "all_reduce grad_sq" */
};

/* pipeline_run.c: the static slot assignment and receive posting points of this rank's list. */
hp_status hp__pp_plan_actions(hp_pipeline *pp);

#endif
