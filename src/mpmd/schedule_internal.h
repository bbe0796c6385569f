/* Internal helpers of the pipeline schedule module (src/mpmd/schedule*.c). */
#ifndef HP_MPMD_SCHEDULE_INTERNAL_H
#define HP_MPMD_SCHEDULE_INTERNAL_H

#include "hp/schedule.h"

/* Per-rank growable lists of compute actions, filled by a generator and turned into a schedule by
 * hp__sched_list_finish. The first failure (out of memory) is sticky in `st`. */
typedef struct hp__sched_lists {
    int p;
    hp_sched_action **a; /* [p] */
    int *n, *cap;        /* [p] */
    hp_status st;
} hp__sched_lists;

hp_status hp__sched_lists_init(hp__sched_lists *l, int p);
void hp__sched_lists_free(hp__sched_lists *l);
/* Appends a compute action to rank r's list. */
void hp__sched_push(hp__sched_lists *l, int r, hp_sched_op op, int stage, int mb, unsigned flags);
/* Removes every action whose mb >= m (the padded micro-batches of ZB-V and DualPipeV) and clears
 * the overlap flag of an F whose partner went. */
void hp__sched_lists_truncate(hp__sched_lists *l, int m);

/* Stage -> rank maps: loop (s % p) and V (s < p: s, else 2p-1-s). Fill map[n_stages]. */
void hp__sched_place_loop(int p, int v, int *map);
void hp__sched_place_v(int p, int *map);

/* The generators: fill `l` (already initialised with p lists) with compute actions. */
void hp__sched_gen_gpipe(hp__sched_lists *l, int p, int m);
void hp__sched_gen_1f1b(hp__sched_lists *l, int p, int m);
void hp__sched_gen_interleaved(hp__sched_lists *l, int p, int m, int v);
void hp__sched_gen_zb_h1(hp__sched_lists *l, int p, int m);
void hp__sched_gen_zb_v(hp__sched_lists *l, int p, int m);
void hp__sched_gen_dualpipe_v(hp__sched_lists *l, int p, int m);

/* True for F, B, W. */
static inline bool hp__sched_is_compute(int op) { return op >= HP_SCHED_OP_F && op <= HP_SCHED_OP_W; }

/* Compute time of action a under costs c (full backward: b + w; comm: 0). */
double hp__sched_cost(const hp_sched_costs *c, const hp_sched_action *a);

/* Runs the lists as a discrete-event simulation. With `costs` NULL every compute takes 0 s. With
 * `start`/`end` non-NULL ([p][n_actions]) the times are written. Returns a deadlock error naming
 * the blocked ranks. */
hp_status hp__sched_run(const hp_schedule *s, hp_sched_p2p mode, const hp_sched_costs *costs, double **start,
                        double **end);

/* Formats an action as "F stage 3 mb 2" / "RECV_B stage 0 mb 1 from rank 1" into buf. */
const char *hp__sched_action_str(const hp_sched_action *a, char *buf, size_t n);

#endif
