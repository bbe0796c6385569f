/* Data-movement operators: RESHAPE, TRANSPOSE, SLICE, PAD, CONCAT. */
#include "ops/op.h"

hp_tid hp_reshape(hp_graph *g, hp_tid a, hp_shape shape) {
    hp_attrs at = {0};
    at.shape = shape;
    return hp_graph_add_node(g, HP_OP_RESHAPE, &a, 1, &at);
}

static hp_status reshape_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    const hp_shape *a = hp__shp(g, n->in[0]);
    if (hp_shape_numel(a) != hp_shape_numel(&n->attr.shape))
        return hp_error(HP_STATUS_SHAPE, "cannot reshape %s (%lld elements) to %s (%lld elements)", hp__shape_s(a),
                        (long long)hp_shape_numel(a), hp__shape_s(&n->attr.shape),
                        (long long)hp_shape_numel(&n->attr.shape));
    dt[0] = hp_graph_tensor(g, n->in[0])->dtype;
    s[0] = n->attr.shape;
    return HP_STATUS_OK;
}

static hp_status reshape_grad(hp_graph *g, int node, const hp_tid *dout, const bool *need, hp_tid *din) {
    hp_tid in = hp_graph_node(g, node)->in[0];
    if (need[0]) din[0] = hp_reshape(g, dout[0], *hp__shp(g, in));
    return hp_graph_status(g);
}

const hp_op_def hp__op_def_reshape = {"reshape", 1, 1, 1, reshape_infer, reshape_grad, NULL, NULL};
