/* Internal: the pipeline's per-rank state, shared by pipeline.c (building) and pipeline_run.c. */
#ifndef HP_MPMD_PIPELINE_INTERNAL_H
#define HP_MPMD_PIPELINE_INTERNAL_H

#include "hp/pipeline.h"
#include "hp/offload_plan.h"
#include "hp/runtime.h"
#include "hp/shard.h"
#include "hp/strategy.h"

/* Transfers in flight for one buffer: one per rank of the other stage's group whose rows overlap. */
typedef struct pp_reqs {
    hp_comm_request **r;
    int n;
} pp_reqs;

/* One program instance of a chunk: the activations of one micro-batch in flight. */
typedef struct pp_slot {
    hp_program *p;
    hp_graph *g;       /* the graph p runs: the chunk's, or with offload the slot's own */
    hp_graph *lg;      /* the slot's own logical graph when partitioned (g belongs to partition); else NULL */
    hp_partition *partition;
    hp_offload_state *ofl; /* with offload: the slot's pass state (homes, copy stream); else NULL */
    int f_end, b_end, n_nodes; /* phases of g: F [0, f_end), B [f_end, b_end), W [b_end, n_nodes) */
    float *xin, *dyin; /* with partitioned rows not handed by blocks (sequence parallelism): the
                        * replica's rows received, before this rank's block is copied into the
                        * program (NULL: received into the program's input) */
    pp_reqs recv;   /* pending receives into x_in (RECV_F) or dy (RECV_B) */
    pp_reqs send_f; /* pending sends of x_out */
    pp_reqs send_b; /* pending sends of dx */
} pp_slot;

/* One virtual stage held by this rank. */
typedef struct pp_chunk {
    int stage;
    hp_gpt_stage part;
    hp_graph *g;      /* the graph the programs run: the logical one, or its partition's per-rank graph */
    hp_graph *lg;     /* with model-parallel axes: the logical graph (g belongs to partition); else NULL */
    hp_partition *partition; /* with model-parallel axes: the stage graph partitioned; else NULL */
    hp_gpt gpt;
    hp_tid dy;        /* input: the output gradient (not on the last stage) */
    hp_tid row0;      /* with dropout: input "stage.row0", the micro-batch's first row in the batch; else NONE */
    int blk0, blkn;   /* this rank's rows [blk0, blk0 + blkn) of the replica's rows (partitioned-row axes) */
    int sq0, sqn;     /* and its positions [sq0, sq0 + sqn) of each row (sequence parallelism; else 0, seq) */
    hp_tid dx;        /* the input gradient (not on the first stage) */
    hp_tid dx_b;      /* the gradient the B phase computes: dx, or on the first stage the gradient of the
                       * embeddings' output (Qi et al.'s B: every activation gradient; W: the weights') */
    bool whole_backward; /* the schedule never runs B and W apart: the backward in autodiff order (each
                          * activation gradient freed as soon as its layer's weight gradient read it),
                          * all of it B, W empty; else ordered B then W */
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
    int rank, p, m, rows, seq; /* rank: the pipeline rank (stage group); rows: this rank's rows of a micro-batch */
    int rows_mb;            /* rows of a micro-batch (batch / m) */
    int row0;               /* this rank's first row within a micro-batch */
    int me;                 /* this process's rank in comm */
    int *grp_size, *grp_off, *grp_ranks; /* [p], [p], [sum]: each pipeline rank's group, in comm ranks */
    int replica;            /* this process's data-parallel replica index in its group */
    int pi;                 /* this process's index among its replica's partitioned ranks (0 without) */
    int *grp_dp, *grp_pn;   /* [p]: each group's replicas (the manual row split) and partitioned ranks per
                             * replica (model-parallel and partitioned-row axes: the partitioner's);
                             * grp_ranks[grp_off[r] + j * grp_pn[r] + i] is process (j, i) of group r */
    int *grp_b0, *grp_bn;   /* [sum], indexed as grp_ranks: the block [b0, b0 + bn) of its replica's rows
                             * each process's stage output and input gradient hold (and it receives) */
    bool hand_blocks;       /* this group's are blocks of rows (rows split, sequence not: FSDP); else
                             * every process holds its replica's whole rows */
    int n_row_axes;         /* the group's partitioned-row axes (its inputs rules' dim 0) ... */
    int row_axes[HP_CONFIG_MAX_AXES]; /* ... as mesh axis indices, slowest first */
    int n_seq_axes;         /* the axes the inputs rules split the sequence (dim 1) over: sequence parallelism */
    int seq_axes[HP_CONFIG_MAX_AXES];
    hp_comm *stage_comm;    /* the group's data-parallel replicas of this model-parallel index; NULL: one */
    hp_comm *group_comm;    /* with model-parallel axes: the whole group, the mesh's parent; else NULL */
    hp_strategy *strategy;  /* with model-parallel axes or ZeRO: the group's strategy (owns the mesh); else NULL */
    hp_mesh *mesh;          /* hp_strategy_mesh(strategy), attached to group_comm; else NULL */
    hp_comm *tied_comm;     /* the groups of the first and last stage (a tied head on other ranks) */
    int max_group;          /* the largest group: transfers per buffer at most */
    hp_store *store;
    bool offload;           /* HyperOffload inside the stages (hp_pipeline_opts.offload) */
    hp_offload_plan_config offload_cfg; /* its plan config: activations only, the budget per slot */
    int n_chunks;
    pp_chunk *chunks;
    int *chunk_of_stage;    /* [n_stages] this rank's chunk of a stage, or -1 */
    pp_action_plan *plan;   /* [n_actions of this rank] */
    bool *posted;           /* [n_actions] per step: a receive posted */
    /* the optimizer: squared norm of the accumulators this rank owns, then clip + AdamW + zeroing */
    hp_graph *norm_g, *opt_g; /* opt_g: with a group mesh, opt_part's per-rank graph */
    hp_graph *opt_lg;         /* with a group mesh: the logical update graph; else NULL */
    hp_partition *opt_part;   /* with a group mesh: the update graph partitioned; else NULL */
    hp_program *norm_p, *opt_p;
    hp_tid norm_out, opt_grad_sq, opt_lr, opt_step;
    bool tied_exchange;     /* this group holds one of the two copies of a tied embedding on two groups */
    int64_t step;           /* optimizer steps taken */
    hp_pipeline_stats stats; /* since the last hp_pipeline_reset_stats */
    hp_trace *trace;        /* hp_pipeline_set_trace; NULL: off */
    int trace_track;        /* the compute thread's track */
    int32_t trace_name[9];  /* "send F", "send B", "recv F", "recv B", "all_reduce loss", "all_reduce grad_sq",
                               "all_reduce grad", "post-validation copy", "post-validation restore" */
    struct {                /* a post-validated step's pending check (pipeline_post.c) */
        bool pending;       /* its all-reduce is in flight and its update applied optimistically */
        float send[2], res[2]; /* this rank's loss share and squared norm; their sums */
        hp_comm_request *req;
        float lr;           /* the step's learning rate (a redo's) */
        int64_t step_before; /* optimizer steps before its update */
        unsigned char *backup; /* the store's entries before its update */
        size_t backup_bytes;   /* allocated */
        size_t backup_used;    /* copied, from backup_n entries */
        int backup_n;
    } post;
};

/* pipeline_run.c: the static slot assignment and receive posting points of this rank's list. */
hp_status hp__pp_plan_actions(hp_pipeline *pp);

/* The leaf layouts of a graph under this rank's group strategy (*out: hp_graph_n_tensors entries,
 * malloc'd, freed by the caller even on error): the strategy's annotation, each "grad_acc.<param>"
 * laid out as its parameter, everything else replicated (ndim -1). */
hp_status hp__pp_leaf_layouts(const hp_pipeline *pp, const hp_graph *g, hp_layout **out);
/* The same under any group strategy (planning, hp_pipeline_plan_stage_group). */
hp_status hp__pp_leaf_layouts_of(const hp_strategy *strategy, const hp_graph *g, hp_layout **out);

/* pipeline_run.c: one step's pieces. run_schedule runs this rank's list (a failed action stops
 * every rank, hp_pipeline_forward_backward) and gives this rank's share of the step's mean loss;
 * reduce_gradients sums the accumulators over the group's replicas and a tied embedding's copies;
 * local_sq runs the norm program (this rank's share of the squared norm); apply_update runs the
 * update program with `grad_sq` as the global squared norm (its clip) and counts the step;
 * zero_accumulators is a skipped step's. */
hp_status hp__pp_run_schedule(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, double *loss_out);
hp_status hp__pp_reduce_gradients(hp_pipeline *pp);
hp_status hp__pp_local_sq(hp_pipeline *pp, float *sq);
hp_status hp__pp_apply_update(hp_pipeline *pp, float lr, float grad_sq);
hp_status hp__pp_zero_accumulators(hp_pipeline *pp);

/* pipeline_post.c: the pending post-validated check. post_idle: HP_STATUS_INVALID_ARGUMENT while
 * one is pending (what must not run then refuses with it). post_drop: gives it up, its all-reduce
 * waited for (its optimistic update stays). post_after_failure: after a failed step, settles it
 * when its all-reduce has completed (every rank joined it before the failure), else leaves it to
 * post_drop after the drain. post_free: drops it and frees the copy. */
hp_status hp__pp_post_idle(const hp_pipeline *pp);
void hp__pp_post_drop(hp_pipeline *pp);
void hp__pp_post_after_failure(hp_pipeline *pp);
void hp__pp_post_free(hp_pipeline *pp);

/* pipeline_optim.c: the norm and update programs (after the stages' programs bound the store). */
hp_status hp__pp_build_optimizer(hp_pipeline *pp);

/* Waits for every request of the set and empties it; the first error. */
hp_status hp__pp_reqs_wait(pp_reqs *q);

/* Rows [*r0, *r1) of a micro-batch of `rows` rows that replica j of a group of d takes (the first
 * rows % d replicas one more). */
static inline void hp__pp_rows(int rows, int d, int j, int *r0, int *r1) {
    int base = rows / d, extra = rows % d;
    *r0 = j * base + (j < extra ? j : extra);
    *r1 = *r0 + base + (j < extra);
}

#endif
