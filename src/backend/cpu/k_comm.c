/* CPU kernels of the transfer operators and ASSIGN. A transfer node (REDISTRIBUTE, SEND, RECV,
 * PREFETCH, OFFLOAD, OFFLOAD_WAIT) carries the runtime instruction its pass attached (hp_instr,
 * hp/backend.h): the kernel only runs it, so the backend needs nothing of the passes. */
#include "backend/cpu/cpu.h"
#include "hp/backend.h"

#include <string.h>

/* Runs the node's instruction on the kernel's bound storage. */
hp_status hp__cpu_run_instr(const hp_kernel_args *a, const hp_exec_ctx *ctx) {
    hp_instr *x = hp_node_instr(a->node);
    if (!x || !x->execute)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s node without a runtime instruction (not from a pass)",
                        hp_op_name(a->node->op));
    hp_node_args na = {.g = a->g, .node = a->node, .workspace = a->workspace, .workspace_bytes = a->workspace_bytes};
    memcpy(na.in, a->in, sizeof na.in);
    memcpy(na.out, a->out, sizeof na.out);
    return x->execute(x, &na, ctx);
}

hp_status hp__cpu_redistribute(const hp_kernel_args *a) { return hp__cpu_run_instr(a, NULL); }
hp_status hp__cpu_send(const hp_kernel_args *a) { return hp__cpu_run_instr(a, NULL); }
hp_status hp__cpu_recv(const hp_kernel_args *a) { return hp__cpu_run_instr(a, NULL); }
hp_status hp__cpu_sendrecv(const hp_kernel_args *a) { return hp__cpu_run_instr(a, NULL); }
hp_status hp__cpu_prefetch(const hp_kernel_args *a) { return hp__cpu_run_instr(a, NULL); }
hp_status hp__cpu_offload(const hp_kernel_args *a) { return hp__cpu_run_instr(a, NULL); }
hp_status hp__cpu_offload_wait(const hp_kernel_args *a) { return hp__cpu_run_instr(a, NULL); }

hp_status hp__cpu_assign(const hp_kernel_args *a) {
    const hp_tensor *t = hp_graph_tensor(a->g, a->node->in[0]);
    size_t bytes = (size_t)hp_shape_numel(&t->shape) * hp_dtype_size(t->dtype);
    if (bytes && a->in[0] != a->in[1]) memcpy(a->in[0], a->in[1], bytes);
    return HP_STATUS_OK;
}
