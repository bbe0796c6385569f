/*
 * Reverse-mode autodiff over the graph (tape walk in reverse program order; Griewank & Walther,
 * "Evaluating Derivatives", ch. 3). The backward graph is appended to the same graph, so the whole
 * training step is one graph that later passes (sharding, offload, pipeline) can see.
 */
#include "ir/op.h"

#include <stdlib.h>
#include <string.h>

hp_tid hp__grad_add(hp_graph *g, hp_tid g1, hp_tid g2) {
    if (g1 == HP_TID_NONE) return g2;
    if (g2 == HP_TID_NONE) return g1;
    return hp_add(g, g1, g2);
}

hp_status hp_autodiff(hp_graph *g, hp_tid loss, const hp_tid *wrt, int n, hp_tid *grads) {
    HP_CHECK(hp_graph_status(g));
    int nt = hp_graph_n_tensors(g);
    if (loss < 0 || loss >= nt)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "autodiff: loss id %d is not a tensor", (int)loss);
    const hp_tensor *L = hp_graph_tensor(g, loss);
    if (hp_shape_numel(&L->shape) != 1 || L->dtype != HP_DTYPE_F32)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "autodiff: loss '%s' must be an f32 scalar, is %s %s",
                        L->name ? L->name : "(anonymous)", hp_dtype_name(L->dtype), hp__shape_s(&L->shape));
    for (int i = 0; i < n; i++)
        if (wrt[i] < 0 || wrt[i] >= nt)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "autodiff: wrt[%d] = %d is not a tensor", i, (int)wrt[i]);

    int last = L->producer; /* nodes after the loss's producer cannot influence it */
    hp_tid *grad = malloc(sizeof *grad * (size_t)nt);
    bool *want = calloc((size_t)nt, 1); /* tensor lies on a path from a wrt tensor */
    if (!grad || !want) {
        free(grad);
        free(want);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "autodiff: out of memory for %d tensors", nt);
    }
    for (int t = 0; t < nt; t++) grad[t] = HP_TID_NONE;
    for (int i = 0; i < n; i++) want[wrt[i]] = true;
    for (int i = 0; i <= last; i++) {
        const hp_node *nd = hp_graph_node(g, i);
        bool any = false;
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] != HP_TID_NONE && want[nd->in[k]]) any = true;
        if (any)
            for (int j = 0; j < nd->n_out; j++) want[nd->out[j]] = true;
    }

    hp_status st = HP_STATUS_OK;
    hp_graph_set_node_flags(g, HP_NODE_FLAG_BACKWARD);
    grad[loss] = hp_fill(g, L->shape, 1.0f);
    for (int i = last; i >= 0 && st == HP_STATUS_OK; i--) {
        hp_node nd = *hp_graph_node(g, i); /* copy: adding nodes may move the table */
        hp_tid dout[HP_MAX_NODE_OUTPUTS], din[HP_MAX_NODE_INPUTS];
        bool need[HP_MAX_NODE_INPUTS], any_out = false, any_need = false;
        for (int j = 0; j < HP_MAX_NODE_OUTPUTS; j++) {
            dout[j] = j < nd.n_out ? grad[nd.out[j]] : HP_TID_NONE;
            if (dout[j] != HP_TID_NONE) any_out = true;
        }
        for (int k = 0; k < HP_MAX_NODE_INPUTS; k++) {
            din[k] = HP_TID_NONE;
            need[k] = k < nd.n_in && nd.in[k] != HP_TID_NONE && want[nd.in[k]];
            any_need |= need[k];
        }
        if (!any_out || !any_need) continue;
        const hp_op_def *d = hp__op_def(nd.op);
        if (!d->grad) {
            st = hp_error(HP_STATUS_UNSUPPORTED, "autodiff: operator %s (node %d in '%s') has no gradient rule",
                          d->name, i, nd.scope ? nd.scope : "");
            break;
        }
        st = d->grad(g, i, dout, need, din);
        if (st == HP_STATUS_OK) st = hp_graph_status(g);
        if (st != HP_STATUS_OK) {
            hp_error_prefix(st, "autodiff of %s (node %d in '%s'): ", d->name, i, nd.scope ? nd.scope : "");
            break;
        }
        for (int k = 0; k < nd.n_in; k++) {
            if (!need[k] || din[k] == HP_TID_NONE) continue;
            const hp_tensor *x = hp_graph_tensor(g, nd.in[k]), *dx = hp_graph_tensor(g, din[k]);
            if (!hp_shape_equal(&x->shape, &dx->shape)) {
                st = hp_error(HP_STATUS_INTERNAL, "autodiff: %s gradient for input %d is %s, input is %s",
                              d->name, k, hp__shape_s(&dx->shape), hp__shape_s(&x->shape));
                break;
            }
            grad[nd.in[k]] = hp__grad_add(g, grad[nd.in[k]], din[k]);
        }
    }
    hp_graph_set_node_flags(g, 0);
    if (st == HP_STATUS_OK) st = hp_graph_status(g);
    if (st == HP_STATUS_OK) {
        for (int i = 0; i < n; i++) {
            hp_tid gt = grad[wrt[i]];
            /* A gradient that is some other tensor's storage (e.g. passed straight through) gets
             * its own copy so that it can carry the gradient's name and role. */
            if (gt != HP_TID_NONE && (hp_graph_tensor(g, gt)->name || hp_graph_tensor(g, gt)->grad_of >= 0 ||
                                      hp_graph_tensor(g, gt)->producer < 0)) {
                hp_graph_set_node_flags(g, HP_NODE_FLAG_BACKWARD);
                gt = hp_copy(g, gt);
                hp_graph_set_node_flags(g, 0);
            }
            grads[i] = gt;
            if (gt == HP_TID_NONE) continue;
            hp_tensor *x = hp_graph_tensor(g, wrt[i]);
            hp_graph_tensor(g, gt)->grad_of = wrt[i];
            if (x->name) {
                char name[512];
                snprintf(name, sizeof name, "grad.%s", x->name);
                hp_graph_set_abs_name(g, gt, name);
            }
        }
        st = hp_graph_status(g);
    }
    free(grad);
    free(want);
    return st;
}
