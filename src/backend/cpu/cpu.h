/*
 * Internal: CPU kernels. One kernel per operator, named hp__cpu_<lowercase op name>, defined in
 * the operator family's file in src/backend/cpu/ (k_<family>.c). Kernels parallelize with OpenMP
 * (the process's single thread pool, shared with OpenBLAS's OpenMP build) and call OpenBLAS for
 * GEMM. A kernel never allocates: scratch comes from args->workspace (sized by the operator's
 * workspace rule).
 */
#ifndef HP_BACKEND_CPU_H
#define HP_BACKEND_CPU_H

#include "hp/ir.h"
#include "hp/ops.h"

typedef struct hp_kernel_args {
    const hp_graph *g;
    const hp_node *node;
    void *in[HP_MAX_NODE_INPUTS];   /* data of node->in[i], NULL for an absent optional input */
    void *out[HP_MAX_NODE_OUTPUTS]; /* data of node->out[j] */
    void *workspace;                /* 64-byte aligned scratch, workspace_bytes long */
    size_t workspace_bytes;
} hp_kernel_args;

typedef hp_status (*hp_cpu_kernel)(const hp_kernel_args *a);

#define HP_CPU_KERNEL_DECL_(name, lower) hp_status hp__cpu_##lower(const hp_kernel_args *a);
HP_OP_LIST(HP_CPU_KERNEL_DECL_)
#undef HP_CPU_KERNEL_DECL_

/* The CPU kernel of `op`. */
hp_cpu_kernel hp__cpu_kernel(hp_op op);

/*
 * AdamW's per-element update over n elements: the one definition the in-memory kernel (ADAMW) and
 * the streamed one over slow-tier states (ADAMW_STREAM) share, so their results are bitwise equal.
 * c1, c2 are the bias corrections 1 / (1 - beta^t); sc scales the gradient (clipping).
 */
typedef struct hp__adamw_coef {
    float lr, sc, b1, b2, eps, wd, c1, c2;
} hp__adamw_coef;
void hp__adamw_update(const hp__adamw_coef *c, float *p, const float *g, float *m, float *v, int64_t n);

/* Runs the node's runtime instruction (hp_instr of hp/backend.h) with the backend's services ctx
 * (may be NULL); HP_STATUS_INVALID_ARGUMENT when the node has none. */
struct hp_exec_ctx;
hp_status hp__cpu_run_instr(const hp_kernel_args *a, const struct hp_exec_ctx *ctx);

/* Shape of the node's input i / output j. */
static inline const hp_shape *hp__in_shape(const hp_kernel_args *a, int i) {
    return &hp_graph_tensor(a->g, a->node->in[i])->shape;
}
static inline const hp_shape *hp__out_shape(const hp_kernel_args *a, int j) {
    return &hp_graph_tensor(a->g, a->node->out[j])->shape;
}

#endif
