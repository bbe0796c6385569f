/* Internal to src/rl: the GRPO job of hp/rl.h (rl.c builds it, rl_step.c runs its steps). */
#ifndef HP_RL_INTERNAL_H
#define HP_RL_INTERNAL_H

#include "hp/compile.h"
#include "hp/generate.h"
#include "hp/rl.h"
#include "hp/store.h"
#include "hp/strategy.h"

struct hp_rl {
    hp_run_config cfg; /* shallow copy: the caller's config outlives the job */
    hp_rl_config r;
    hp_rl_opts opts;
    hp_gpt_config gc;
    hp_comm *world, *world_own;
    int rank, size;
    int *actors, n_actors, *learners, n_learners; /* world ranks, in mesh order */
    bool colocated, is_actor, is_learner, is_ctrl;
    int controller, actor_index;  /* the controller's world rank; this rank's place among the actors or -1 */
    int B, T, M, V;               /* sequences per step, learner rows' length, completion length, vocabulary */
    /* learner */
    hp_comm *lcomm;               /* the learner ranks (rank 0: the controller); NULL elsewhere */
    hp_strategy *strategy;
    hp_store *lstore;
    hp_graph *lg;
    hp_compiled *lc;
    hp_gpt lgpt;
    hp_tid in[6];                 /* tokens, targets, old_logp, ref_logp, adv, weight (logical ids) */
    hp_train_step step;
    int n_params;
    const char **pname;           /* the parameters (names in lg's arena) */
    hp_shape *pshape;
    hp_layout *play;              /* their learner layouts */
    bool any_sharded;             /* a parameter is not replicated on the learner mesh */
    hp_mesh *lmesh_w, *amesh_w, *cmesh_w; /* learner, actor, controller meshes numbered by world ranks */
    /* actor */
    bool tp_actor;                /* the actor group is tensor-parallel (its strategy's params rules) */
    int tp, n_rep;                /* its degree (the mesh's last axis; 1 without tp) and its replicas
                                   * (n_actors / tp: the first axis of a [dp, tp] mesh) */
    hp_strategy *astrategy;       /* that strategy (on every rank: the syncs need its mesh); NULL otherwise */
    hp_comm *acomm;               /* the actor ranks (tp_actor only; NULL elsewhere) */
    hp_layout *alay;              /* the actor's layout of every parameter (replicated without tp) */
    hp_store *astore, *astore_own;
    hp_generator *gen;
    int share0, share;            /* this actor's sequences [share0, share0 + share) of a step */
    int32_t *my_comp;             /* (share, M) sampled tokens */
    float *my_logp, *gen_logits;  /* (share, M) their log-probs; (share, M, V) scratch */
    /* controller: the reference policy and the assembled batch */
    hp_store *rstore;
    hp_graph *rg;
    hp_program *rp;
    hp_gpt rgpt;
    int32_t *comp, *tok, *tgt;    /* (B, M); (B, T); (B, T) */
    float *comp_logp, *old, *ref, *adv, *w; /* (B, M); (B, T) x 4 */
    double batch_reward, batch_kl;
    int64_t steps_done;
    int64_t actor_updates;        /* updates in the actor's weights (steps_done when in sync) */
};

/* Per-rank storage of logical tensor t of the learner's program. */
void *hp__rl_ldata(hp_rl *rl, hp_tid t);
/* Moves every parameter from the learner to the actor (see hp/rl.h) and optionally verifies it;
 * adds the figures to m (NULL: none). Collective over world. */
hp_status hp__rl_sync(hp_rl *rl, hp_rl_step_metrics *m);

#endif
