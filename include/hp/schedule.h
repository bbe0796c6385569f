/*
 * hp/schedule.h — HyperMPMD pipeline schedules (src/mpmd/): per-rank ordered lists of forward (F),
 * backward (B), weight-gradient (W), send and receive actions for GPipe, 1F1B, interleaved 1F1B,
 * ZB-H1, ZB-V and DualPipeV; a validator (completeness, dependencies, deadlock, activation memory);
 * a discrete-event simulator (start and end of every action, step time, bubble fraction) with the
 * schedules' theoretical bubble formulas; and a text table (one row per rank, one column per time
 * slot) that is both the rendering and the format of a user-written schedule.
 *
 * This module is pure: it builds and checks lists, it runs nothing. The runtime executes a rank's
 * list in order; `hp plan` and the trace read the simulated timeline.
 *
 *     hp_schedule s;
 *     HP_CHECK(hp_schedule_build(HP_SCHED_KIND_ZB_V, 4, 8, 0, &s));      // p=4 ranks, m=8, v=2
 *     hp_sched_check_opts co = HP_SCHED_CHECK_OPTS_INIT;
 *     co.max_inflight = 8;                                               // per rank budget
 *     hp_status st = hp_schedule_validate(&s, &co, NULL, NULL);          // deadlock, memory, ...
 *     hp_sched_costs c = HP_SCHED_COSTS_INIT;                            // F = B = W = 1 s
 *     hp_sched_timeline tl;
 *     if (st == HP_STATUS_OK) st = hp_schedule_simulate(&s, &c, &tl);
 *     // tl.step_time, tl.bubble; hp_schedule_render(&s, &tl, &text) draws it
 *     hp_sched_timeline_free(&tl);
 *     hp_schedule_free(&s);
 *
 * Terms. The model is cut into n_stages (virtual) stages 0..n_stages-1 in forward order; rank r of
 * the pipeline holds v of them, its chunks 0..v-1 (chunk c of rank r is stage_rank/stage_chunk's
 * inverse). Placements: "loop" (stage s on rank s % p, chunk s / p: GPipe, 1F1B, interleaved 1F1B,
 * ZB-H1) and "V" (stage s < p on rank s, stage s >= p on rank 2p-1-s, so rank 0 holds the first and
 * the last stage: ZB-V, DualPipeV). The global batch is split into m micro-batches 0..m-1. Every
 * (stage, micro-batch) runs F once, then its backward either as one full backward (B with
 * HP_SCHED_FLAG_FULL_BACKWARD: input and weight gradients together, no W) or split (Qi et al.,
 * "Zero Bubble Pipeline Parallelism", ICLR 2024): B computes the input gradient, which the previous
 * stage waits for, and W the weight gradient, which nobody waits for and so fills bubbles.
 *
 * Sources: GPipe (Huang et al., NeurIPS 2019); 1F1B (PipeDream-Flush: Narayanan et al., ICML 2021);
 * interleaved 1F1B (Narayanan et al., SC 2021, Megatron-LM); ZB-H1 and ZB-V (Qi et al., ICLR 2024,
 * sections 2.1 and 6); DualPipeV (DeepSeek-V3 technical report, 2024, and the V variant of the
 * DualPipe repository, as in PyTorch's torch.distributed.pipelining.ScheduleDualPipeV).
 */
#ifndef HP_SCHEDULE_H
#define HP_SCHEDULE_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- schedules */

typedef enum hp_sched_kind {
    HP_SCHED_KIND_GPIPE = 0,        /* all F, then all full B (loop placement, v = 1) */
    HP_SCHED_KIND_1F1B,             /* p-1-r warm-up F, then one F one full B (v = 1) */
    HP_SCHED_KIND_INTERLEAVED_1F1B, /* 1F1B over v chunks per rank, loop placement */
    HP_SCHED_KIND_ZB_H1,            /* 1F1B with split B/W, W delayed to fill the tail (v = 1) */
    HP_SCHED_KIND_ZB_V,             /* zero bubble, V placement, v = 2, split B/W */
    HP_SCHED_KIND_DUALPIPE_V,       /* DualPipeV: V placement, v = 2, overlapped F&B pairs */
    HP_SCHED_KIND_USER,             /* parsed from a table (hp_schedule_parse) or built by hand */
    HP_SCHED_KIND_COUNT
} hp_sched_kind;

/* "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v", "user". Static storage;
 * "?" for a value out of range. */
const char *hp_sched_kind_name(hp_sched_kind kind);
/* The kind named `name` (the names above, case-insensitive; the config's "interleaved" and
 * "dualpipev" are also accepted).
 * Errors: HP_STATUS_INVALID_ARGUMENT naming `name` and listing the names. */
hp_status hp_sched_kind_parse(const char *name, hp_sched_kind *out);

typedef enum hp_sched_op {
    HP_SCHED_OP_F = 0, /* forward of (stage, mb) */
    HP_SCHED_OP_B,     /* backward of (stage, mb): input gradient, or full with FULL_BACKWARD */
    HP_SCHED_OP_W,     /* weight gradient of (stage, mb); only after a split B */
    HP_SCHED_OP_SEND_F, /* send the activation that F(stage, mb) produced to stage+1's rank */
    HP_SCHED_OP_RECV_F, /* receive the input of F(stage, mb) from stage-1's rank */
    HP_SCHED_OP_SEND_B, /* send the input gradient B(stage, mb) produced to stage-1's rank */
    HP_SCHED_OP_RECV_B, /* receive the output gradient B(stage, mb) needs from stage+1's rank */
    HP_SCHED_OP_COUNT
} hp_sched_op;

/* "F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"; "?" out of range. Static storage. */
const char *hp_sched_op_name(hp_sched_op op);

/* On B: the full backward (input and weight gradients in one action); no W of (stage, mb) exists. */
#define HP_SCHED_FLAG_FULL_BACKWARD 1u
/* On F: this F and the next compute action of the rank (a B of another chunk) are one overlapped
 * F&B pair (DualPipe: the forward's communication hides behind the backward's compute and the
 * other way). The pair's two actions keep their own dependencies; the simulator runs them back to
 * back (it does not model the all-to-all the overlap hides). */
#define HP_SCHED_FLAG_OVERLAP 2u

/* One step of a rank's list. Sends and receives name the stage of the rank that performs them:
 * SEND_F(s) on stage s's rank matches RECV_F(s+1) on stage s+1's rank (same mb), SEND_B(s) matches
 * RECV_B(s-1). A message is keyed by (source rank, destination rank, kind, mb, chunk), as in the
 * runtime's point-to-point queue. */
typedef struct hp_sched_action {
    uint8_t op;    /* hp_sched_op */
    uint8_t flags; /* HP_SCHED_FLAG_* */
    int16_t chunk; /* the stage's chunk on this rank, 0..v-1 */
    int32_t stage; /* virtual stage, 0..n_stages-1 */
    int32_t mb;    /* micro-batch, 0..m-1 */
    int32_t peer;  /* send/recv: the other rank; -1 for F, B, W */
} hp_sched_action;

/*
 * A schedule: for each of p ranks the ordered list of its actions. A plain struct (built by
 * hp_schedule_build / hp_schedule_parse / hp_schedule_from_compute, read by everything else);
 * every array is owned by the struct and freed by hp_schedule_free.
 */
typedef struct hp_schedule {
    hp_sched_kind kind;
    int p;                     /* ranks (pipeline stages in the usual sense) */
    int m;                     /* micro-batches per step */
    int v;                     /* chunks per rank (the largest count for a user schedule) */
    int n_stages;              /* virtual stages: p * v for the built schedules */
    int *stage_rank;           /* [n_stages] the rank holding each stage */
    int *stage_chunk;          /* [n_stages] its chunk index on that rank */
    bool split_backward;       /* some B is an input-gradient B followed later by its W */
    int *n_actions;            /* [p] */
    hp_sched_action **actions; /* [p][n_actions[r]] */
} hp_schedule;

/*
 * Builds the schedule `kind` for p ranks, m micro-batches and v chunks per rank (0: the kind's
 * default: 2 for interleaved 1F1B, ZB-V and DualPipeV, 1 otherwise), with its sends and receives
 * (hp_schedule_from_compute's placement rule). Every result passes hp_schedule_validate with eager
 * point-to-point semantics.
 *   GPipe, 1F1B, ZB-H1: v = 1; any m >= 1.
 *   interleaved 1F1B: any v >= 1 and m >= 1. Micro-batches go in max(1, m/p) rounds whose sizes
 *     differ by at most one (larger first), so a round holds at least p of them unless m < p
 *     (Megatron-LM's order; PyTorch instead requires m to be a multiple of its round count): the
 *     forwards run a round through chunks 0..v-1, the backwards through v-1..0; rank r warms up
 *     with min((v-1)*g + 2(p-1-r), v*m) forwards, g the first round's size.
 *   ZB-V, DualPipeV: v = 2 (V placement). Any m >= 1: below 2p-1 (ZB-V) or 2p (DualPipeV)
 *     micro-batches the schedule is built for that many and the extra micro-batches' actions are
 *     removed (as PyTorch's ScheduleZBVZeroBubble does), which keeps it valid but leaves bubbles.
 * Errors (HP_STATUS_INVALID_ARGUMENT, naming the value): p or m below 1, v below 0, a v the kind does
 * not allow (v != 1 for GPipe/1F1B/ZB-H1, v != 2 for ZB-V/DualPipeV), KIND_USER, p*v*m above 2^26;
 * HP_STATUS_OUT_OF_MEMORY. On success free *out with hp_schedule_free.
 */
hp_status hp_schedule_build(hp_sched_kind kind, int p, int m, int v, hp_schedule *out);

/*
 * Builds a schedule from compute actions only (F, B, W; sends and receives in `compute` are
 * rejected) and inserts the point-to-point actions: RECV_F right before each F whose stage-1 is on
 * another rank, SEND_F right after each F whose stage+1 is on another rank, RECV_B right before each
 * B whose stage+1 is on another rank, SEND_B right after each B whose stage-1 is on another rank.
 * Stages on the same rank hand over locally (the V turn on rank p-1). `stage_rank` [n_stages] maps
 * stages to ranks 0..p-1 (each rank may hold any number of stages; chunks are numbered by stage
 * order on the rank and v is the largest count); compute[r][0..n_compute[r]) is rank r's list, read
 * for op, flags, stage and mb (chunk and peer are filled in). Nothing else is checked here: run
 * hp_schedule_validate. Errors: HP_STATUS_INVALID_ARGUMENT (p, m, n_stages < 1, a stage_rank out
 * of range, a rank holding no stage, an action with a bad op or stage, or on another rank's
 * stage), HP_STATUS_OUT_OF_MEMORY. The inputs are copied; free *out with hp_schedule_free.
 */
hp_status hp_schedule_from_compute(hp_sched_kind kind, int p, int m, int n_stages, const int *stage_rank,
                                   const hp_sched_action *const *compute, const int *n_compute,
                                   hp_schedule *out);

/* Frees every array and zeroes *s. NULL or an already freed (zeroed) value is allowed. */
void hp_schedule_free(hp_schedule *s);

/* Number of compute actions (F, B, W) of rank r, and of the whole schedule (r = -1). */
int hp_schedule_count_compute(const hp_schedule *s, int r);

/* ---------------------------------------------------------------- validation */

typedef enum hp_sched_p2p {
    /* A send completes when issued (non-blocking, buffered: the runtime's point-to-point queue); a
     * receive blocks until the matching send has been issued. */
    HP_SCHED_P2P_EAGER = 0,
    /* A send also blocks until the peer reaches the matching receive (MPI_Ssend). The built
     * schedules place sends and receives for eager semantics and may deadlock under this mode. */
    HP_SCHED_P2P_RENDEZVOUS,
} hp_sched_p2p;

/*
 * Options of hp_schedule_validate. In-flight activations of a rank: the micro-batch activations
 * of its stages held at a point of its list: F(s, mb) adds one (act_bytes[s] bytes); the full B,
 * or else the W, of (s, mb) removes it. Bytes: a split B frees (1 - w_fraction) of act_bytes[s],
 * its W the rest (W needs the stage's inputs and output gradients, less than B; Qi et al. Table 1).
 */
typedef struct hp_sched_check_opts {
    hp_sched_p2p p2p;             /* default HP_SCHED_P2P_EAGER */
    int max_inflight;             /* per rank budget in micro-batch stage activations; 0: none */
    const double *act_bytes;      /* [n_stages] one micro-batch's activation bytes per stage, or NULL */
    double w_fraction;            /* share of act_bytes kept from a split B until its W; default 1 */
    double max_bytes;             /* per rank byte budget (needs act_bytes); 0: none */
    const double *max_bytes_rank; /* [p] per rank byte budgets overriding max_bytes, or NULL */
} hp_sched_check_opts;

#define HP_SCHED_CHECK_OPTS_INIT                                                                   \
    { /* .p2p = */ HP_SCHED_P2P_EAGER, /* .max_inflight = */ 0, /* .act_bytes = */ NULL,            \
      /* .w_fraction = */ 1.0, /* .max_bytes = */ 0.0, /* .max_bytes_rank = */ NULL }

/*
 * Checks a schedule before it runs, in this order, and returns the first failure:
 *  1. shape: p, m, n_stages, stage_rank/stage_chunk consistent; every action's op, stage (on this
 *     rank), chunk, mb in [0, m), flags, and peer (the neighbouring stage's rank) in range;
 *  2. completeness: for every (stage, mb) exactly one F and one B, and exactly one W after a split
 *     B, none after a full B; every send and receive exactly once where a remote hand-over needs it
 *     and nowhere else;
 *  3. local order: F after F(stage-1) or its RECV_F; B after F(stage) and after B(stage+1) or its
 *     RECV_B; W after its B; SEND_F after its F; SEND_B after its B;
 *  4. deadlock: a discrete-event run of all ranks' lists with sends and receives matched per
 *     (source, destination, kind, mb, chunk) under opts->p2p;
 *  5. memory: peak in-flight activations (and bytes) per rank against the budgets.
 * Writes each rank's peak count to peak_inflight[p] and peak bytes to peak_bytes[p] when not NULL
 * (also on a memory-budget failure). opts may be NULL (defaults).
 * Errors: HP_STATUS_INVALID_ARGUMENT naming the rank, the action index, the action and what is
 * wrong or what it waits for (a deadlock names each blocked rank's action and the message it needs);
 * HP_STATUS_OUT_OF_MEMORY naming the rank, the peak, the action where it is reached and the budget
 * (also for an allocation failure).
 */
hp_status hp_schedule_validate(const hp_schedule *s, const hp_sched_check_opts *opts, int *peak_inflight,
                               double *peak_bytes);

/* ---------------------------------------------------------------- simulation */

/*
 * Per-stage times in seconds for one micro-batch. b is the input-gradient part; a full backward
 * takes b + w. Where a per-stage array is NULL the scalar is used for every stage. A send's data
 * reaches the receiver p2p_latency seconds after the send is issued (sends cost the sender nothing);
 * stages on the same rank hand over at no cost.
 */
typedef struct hp_sched_costs {
    double f, b, w;
    const double *f_stage, *b_stage, *w_stage; /* [n_stages] or NULL */
    double p2p_latency;
} hp_sched_costs;

#define HP_SCHED_COSTS_INIT                                                                        \
    { /* .f = */ 1.0, /* .b = */ 1.0, /* .w = */ 1.0, /* .f_stage = */ NULL, /* .b_stage = */ NULL, \
      /* .w_stage = */ NULL, /* .p2p_latency = */ 0.0 }

/*
 * The simulated step: every rank starts at 0 and runs its list in order; a compute action starts
 * when the previous action of the rank ends; a receive ends at max(when the rank reaches it, the
 * send's issue time + latency). Times in seconds from the step's start. Arrays owned by the struct.
 *   bubble:      idle / total device time over the synchronous step: 1 - sum(busy) / (p*step_time)
 *                (a barrier or global-norm clip ends every step).
 *   bubble_span: the same with each rank's time counted from its first compute start to its last
 *                compute end, against the longest such span: 1 - sum(busy) / (p * max span). The
 *                measure under which ZB-H2 and ZB-V are "zero bubble" (Qi et al. section 5, steps
 *                overlapping under optimizer post-validation); an ideal: a rank's first forward
 *                of the next step still waits for its own update, so overlapping per-step lists
 *                does not reach it (measured, docs/design.md "Overlapping steps").
 */
typedef struct hp_sched_timeline {
    int p;
    int *n_actions;       /* [p] as in the schedule */
    double **start;       /* [p][n_actions[r]] start of each action (a receive: when reached) */
    double **end;         /* [p][n_actions[r]] end (a send: its issue time; a receive: data in) */
    double *busy;         /* [p] compute seconds */
    double *first_start;  /* [p] first compute action's start (0 for a rank without compute) */
    double *last_end;     /* [p] last action's end */
    double step_time;     /* max last_end */
    double bubble;        /* see above, in [0, 1) */
    double bubble_span;   /* see above */
} hp_sched_timeline;

/*
 * Simulates the schedule under `costs` (NULL: HP_SCHED_COSTS_INIT, F = B = W = 1 s). The schedule
 * should have passed hp_schedule_validate; the simulation only needs its lists to match and to run.
 * Errors: HP_STATUS_INVALID_ARGUMENT for a negative or non-finite time or latency (naming it), or a
 * deadlock (as in hp_schedule_validate); HP_STATUS_OUT_OF_MEMORY. Free *out with
 * hp_sched_timeline_free.
 */
hp_status hp_schedule_simulate(const hp_schedule *s, const hp_sched_costs *costs, hp_sched_timeline *out);
/* Frees the arrays; zeroes *tl. NULL or an already freed value is allowed. */
void hp_sched_timeline_free(hp_sched_timeline *tl);

/* A bubble fraction under the two measures of hp_sched_timeline. */
typedef struct hp_sched_bubble {
    double sync; /* idle / total over a synchronous step (hp_sched_timeline.bubble) */
    double span; /* idle / total over each rank's own span (hp_sched_timeline.bubble_span) */
} hp_sched_bubble;

/*
 * Theoretical bubble of `kind` for p ranks, m micro-batches, v chunks (0: the kind's default) and
 * uniform per-stage (per chunk) times f, b (input gradient), w (weight gradient), as Tb / (Tc + Tb)
 * where Tc is one rank's compute and Tb its idle time:
 *   GPipe, 1F1B:      Tc = m(f+b+w), Tb = (p-1)(f+b+w), so (p-1)/(m+p-1) (Huang et al.;
 *                     Narayanan et al. 2021). Both measures.
 *   interleaved 1F1B: Tc = v m(f+b+w), Tb = (p-1)(f+b+w), so (p-1)/(v m+p-1): Megatron's
 *                     (p-1)/(v m) bubble-to-compute ratio (Narayanan et al., SC 2021). For m < p
 *                     each of the v-1 chunk hand-overs from the last rank back to rank 0 waits
 *                     p-m more slots: Tb = (p-1 + (v-1)(p-m))(f+b+w).
 *   ZB-H1:            Tc = m(f+b+w), Tb = (p-1) max(f+b-w, f, b): Qi et al.'s (p-1)(F+B-W), which
 *                     holds while W <= min(F, B); a larger W cannot shorten the fill ramp (p-1)f nor
 *                     the return of the last input gradient (p-1)b.
 *   ZB-V:             Tc = 2m(f+b+w); span: Tb = (p-1) max(f+b-2w, 0), zero at f = b = w (Qi et
 *                     al. section 6, with the optimizer post-validation of section 5 that lets steps
 *                     overlap); sync: Tb = (p-1) max(f+b-2w, f), since rank r cannot start before
 *                     r*f while every rank's work is the same.
 *   DualPipeV:        Tc = 2m(f+b+w), Tb = (p-1) max(f+b-w, f), both measures. This is the built
 *                     order's bubble without overlap credit (the simulator runs an F&B pair as F
 *                     then B); DeepSeek's (PP/2-1)(F&B+B-3W), with PP = 2p chunks and F&B the
 *                     overlapped pair's time, counts the pair as one unit shorter than F + B.
 * The closed forms match hp_schedule_simulate (zero latency) exactly for GPipe and 1F1B at any m
 * and times; for interleaved 1F1B at f = b = w and any m; for ZB-H1 at m >= p; for ZB-V and
 * DualPipeV at m >= 2p with f = b = w (and w <= f = b). Elsewhere (the V orders are made for
 * f = b = w, as PyTorch notes for ScheduleZBVZeroBubble) they are lower bounds and the simulator is
 * the reference. Both fields are NaN for KIND_USER, p or m < 1, or a negative time.
 */
hp_sched_bubble hp_schedule_bubble_formula(hp_sched_kind kind, int p, int m, int v, double f, double b, double w);

/*
 * Peak in-flight activations (hp_sched_check_opts' unit: one micro-batch's activations of one
 * stage, a chunk for v > 1) of rank r under hp_schedule_build's order for `kind`:
 *   GPipe m; 1F1B min(p-r, m); interleaved min((v-1)g + 2(p-1-r) + 1, v m), g the first round's
 *   size (hp_schedule_build); ZB-H1 min(p, m) on every rank (W is held back so that every rank
 *   keeps p, Qi et al. 2.1; its bytes are less, see w_fraction); ZB-V min(m+1+r, 2m, 2p) (2p
 *   chunks = p full stages, 1F1B's rank 0, for m >= 2p-1); DualPipeV min(m+1+r, 2m, 2p+1) (PP+1
 *   chunks in DeepSeek's table for m >= 2p).
 * Returns -1 for KIND_USER or bad arguments.
 */
int hp_schedule_peak_formula(hp_sched_kind kind, int p, int m, int v, int r);

/* ---------------------------------------------------------------- text */

/*
 * Draws the schedule as a table, one row per rank and one column per time slot, from a simulated
 * timeline (NULL: simulated here with F = B = W = 1 s, no latency):
 *
 *     schedule 1f1b p=2 m=3 v=1
 *     rank 0: F0  F1  .   .   BW0 -   F2  BW1 -   .   BW2 -
 *     rank 1: .   F0  BW0 -   F1  BW1 -   F2  BW2 -   .   .
 *
 * A slot is the shortest compute action's time; an action takes round(time / slot) columns (at
 * least 1): its token, then "-" for each further column; "." is an idle slot (here F = 1 s and a
 * full backward 2 s). Columns are padded to the widest token. Tokens: [stage]OPmb,
 * OP one of F, B (input gradient), W, BW (full backward); the stage prefix is left out when every
 * rank holds exactly its own stage (stage = rank). An overlapped F&B pair is one token "F3&BW1"
 * (prefixes on each half). Sends and receives are not drawn (hp_schedule_parse re-inserts them).
 * *out is a NUL-terminated string allocated with malloc; the caller frees it with free().
 * Errors: those of hp_schedule_simulate; HP_STATUS_INVALID_ARGUMENT for a timeline of another
 * schedule (different p or action counts); HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_schedule_render(const hp_schedule *s, const hp_sched_timeline *tl, char **out);

/*
 * Parses a table in hp_schedule_render's format into a schedule of kind HP_SCHED_KIND_USER.
 * Lines: blank and "#..." lines are skipped; an optional header "schedule NAME p=P m=M [v=V]" (NAME
 * is informative; P and M are checked against the rows and tokens, and M fixes m); then one line
 * "rank R: TOKEN TOKEN ..." for each rank 0..p-1 (any order, each once). Tokens "." and "-" are
 * skipped; the others are compute actions in list order. Without a stage prefix a token's stage is
 * its row's rank. Stages must be 0..n_stages-1, each held by one rank; m is the header's M or else
 * the largest micro-batch + 1. Sends and receives are inserted as in hp_schedule_from_compute; run
 * hp_schedule_validate on the result. `name` (a file name, or NULL) prefixes error messages.
 * Errors: HP_STATUS_CORRUPT naming name:line, the token and what is wrong (unknown token, a rank
 * out of range or repeated, a stage on two ranks, a missing stage or rank row, header mismatch);
 * HP_STATUS_OUT_OF_MEMORY. On success free *out with hp_schedule_free.
 */
hp_status hp_schedule_parse(const char *text, const char *name, hp_schedule *out);
/* Reads `path` and parses it (hp_schedule_parse). Errors: HP_STATUS_IO naming the path, and those
 * of hp_schedule_parse. */
hp_status hp_schedule_load(const char *path, hp_schedule *out);

#ifdef __cplusplus
}
#endif

#endif /* HP_SCHEDULE_H */
