/*
 * hp/runtime.h — compile a graph into a per-rank program and run it.
 *
 * A program binds storage to every tensor of a graph and runs its nodes in program order with the
 * backend's kernels. Persistent tensors (params, optimizer state, inputs, constants, and any
 * tensor listed in opts.keep) get their own buffers that live as long as the program; every other
 * tensor (activations, gradients) lives in one arena at an offset planned from liveness, so the
 * steady-state step allocates nothing (ggml's gallocr: reserve, then assign offsets).
 *
 *     hp_program *p;
 *     hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
 *     o.keep = &loss; o.n_keep = 1;
 *     HP_CHECK(hp_program_new(g, &o, &p));
 *     memcpy(hp_program_data(p, tokens), batch, bytes);
 *     HP_CHECK(hp_program_run(p));
 *     float l = *(float *)hp_program_data(p, loss);
 */
#ifndef HP_RUNTIME_H
#define HP_RUNTIME_H

#include "hp/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_program hp_program;

typedef struct hp_program_opts {
    const hp_tid *keep; /* activations whose values must be readable after hp_program_run */
    int n_keep;
    bool plan_memory;   /* true: activations share one liveness-planned arena; false: one buffer each */
    bool profile;       /* time every node (seconds per operator kind in the stats) */
} hp_program_opts;
#define HP_PROGRAM_OPTS_DEFAULT ((hp_program_opts){NULL, 0, true, false})

/*
 * Compiles `g` (which must verify) into a program: allocates persistent buffers (zeroed) and the
 * activation arena. The graph must outlive the program and must not change after this call.
 * Errors: the graph's sticky error; HP_STATUS_OUT_OF_MEMORY naming the bytes requested.
 */
hp_status hp_program_new(const hp_graph *g, const hp_program_opts *opts, hp_program **out);
/* Frees all buffers. NULL is allowed. */
void hp_program_free(hp_program *p);

/*
 * Storage of tensor t: valid for persistent and kept tensors for the program's lifetime; NULL for
 * planned activations (their storage is reused).
 */
void *hp_program_data(hp_program *p, hp_tid t);

/* Runs every node once in program order. Errors: the first kernel error, prefixed with the node. */
hp_status hp_program_run(hp_program *p);

typedef struct hp_program_stats {
    size_t persistent_bytes; /* params, optimizer state, inputs, kept tensors */
    size_t arena_bytes;      /* the planned activation arena */
    size_t workspace_bytes;  /* the largest kernel scratch */
    size_t naive_bytes;      /* what the activations would take with one buffer each */
    int n_nodes;             /* nodes run per step (after dead-code elimination) */
    double op_seconds[HP_OP_COUNT]; /* with opts.profile: accumulated time per operator kind */
    int op_calls[HP_OP_COUNT];
} hp_program_stats;

void hp_program_get_stats(const hp_program *p, hp_program_stats *s);

#ifdef __cplusplus
}
#endif
#endif /* HP_RUNTIME_H */
