/* Internal: the multimodal runner's state, shared by mm_train.c (one device, data, evaluation) and
 * mm_groups.c (the sub-models on their groups). */
#ifndef HP_TRAIN_MM_INTERNAL_H
#define HP_TRAIN_MM_INTERNAL_H

#include "hp/compile.h"
#include "hp/multimodal.h"
#include "hp/runtime.h"
#include "hp/store.h"

/* One sub-model's training graph for a micro-batch (forward, surrogate root, backward, gradient
 * accumulation into the OPT_STATE "grad_acc.<param>"). */
typedef struct hp_mm_sub {
    hp_graph *g;
    int f_end, n_nodes;  /* encoders: F nodes [0, f_end), B [f_end, n_nodes); decoder: f_end its forward */
    hp_tid x_in;         /* encoders: the patches */
    hp_tid y_out, dy;    /* encoders: the output and its gradient input */
    hp_tid pre[2], dpre[2], tokens, targets, loss; /* decoder: prefixes, their gradients, captions, loss */
} hp_mm_sub;

/* Builds role's graph for micro-batches of `rows` rows, the decoder's loss scaled by loss_scale in the
 * root of the backward (mm_groups.c). */
hp_status hp__mm_sub_build(const hp_mm_config *mc, int role, int rows, float loss_scale, hp_mm_sub *out);

struct hp_mm_runner {
    const hp_run_config *cfg;
    hp_mm_config mc;
    hp_comm *world;      /* borrowed; NULL on one device */
    int role;            /* HP_MM_ROLE_*, -1 on one device */
    const int *ranks_of[HP_MM_ROLES]; /* each group's world ranks (the run config's) */
    int ksize[HP_MM_ROLES]; /* each group's ranks: they split every micro-batch's rows (data parallel) */
    int gi;              /* this rank's index in its group */
    int lrows;           /* this rank's rows of a micro-batch: rows / ksize[role] */
    hp_comm *group_comm; /* this rank's group (gradient all-reduce); NULL for a group of one rank */
    hp_mm_mode mode;
    int m, batch, rows;  /* micro-batches, rows per step, rows per micro-batch */
    int64_t step;        /* steps done */
    hp_mm_data train, test;
    hp_store *store;
    int64_t *idx;        /* [batch]: the step's image indices */
    /* one device: the whole model's training step */
    hp_graph *g;
    hp_mm_model model;
    hp_train_step ts;
    hp_program *p;
    /* groups: this rank's sub-model, one program instance per micro-batch */
    hp_mm_sub sub;
    hp_program **slot;   /* [m] */
    hp_graph *ng, *og;
    hp_program *norm_p, *opt_p;
    hp_tid norm_out, opt_lr, opt_step, opt_grad_sq;
    double t_f[HP_MM_ROLES], t_b[HP_MM_ROLES]; /* measured seconds per pass (the scheduler's input) */
    float *buf;          /* transfer buffers */
    hp_comm_request **reqs;
    int n_reqs, cap_reqs;
    hp_trace *trace;     /* borrowed; NULL: off */
};

/* The step's image indices into r->idx (the same on every rank). */
void hp__mm_step_rows(hp_mm_runner *r, int64_t step);
/* Inputs of rows [row0, row0 + n) of r->idx: patches of encoder e, or tokens and targets. */
hp_status hp__mm_patches(hp_mm_runner *r, int e, int row0, int n, float *out);
hp_status hp__mm_captions(hp_mm_runner *r, int row0, int n, int32_t *tokens, int32_t *targets);
/* The groups path (mm_groups.c). */
hp_status hp__mm_groups_new(hp_mm_runner *r);
void hp__mm_groups_free(hp_mm_runner *r);
hp_status hp__mm_groups_step(hp_mm_runner *r, hp_mm_step_stats *st);
/* Moves the encoders' parameters into the decoder rank's store (collective over the world). */
hp_status hp__mm_groups_gather(hp_mm_runner *r);
/* Writes the initial values of every PARAM of g into the store. */
hp_status hp__mm_init_store(hp_mm_runner *r, const hp_graph *g);

#endif
