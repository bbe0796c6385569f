/* CPU kernels of the per-rank operators: REDISTRIBUTE (collectives through the mesh's
 * communicator) and ASSIGN. */
#include "backend/cpu/cpu.h"
#include "hp/redistribute.h"
#include "ops/redistribute_op.h"

#include <string.h>

hp_status hp__cpu_redistribute(const hp_kernel_args *a) {
    const hp__redist_extra *x = a->node->extra;
    if (!x) return hp_error(HP_STATUS_INTERNAL, "redistribute node without a plan");
    return hp_redistribute_execute(&x->plan, x->mesh, a->in[0], a->out[0]);
}

hp_status hp__cpu_assign(const hp_kernel_args *a) {
    const hp_tensor *t = hp_graph_tensor(a->g, a->node->in[0]);
    size_t bytes = (size_t)hp_shape_numel(&t->shape) * hp_dtype_size(t->dtype);
    if (bytes && a->in[0] != a->in[1]) memcpy(a->in[0], a->in[1], bytes);
    return HP_STATUS_OK;
}
