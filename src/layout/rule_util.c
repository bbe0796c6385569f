/* Layout algebra helpers for the operators' sharding rules (declared in layout/layout_algebra.h). */
#include "layout/layout_algebra.h"

#include <string.h>

uint32_t hp__lay_dim_axes(const hp_layout *l, int d) {
    uint32_t m = 0;
    for (int k = 0; k < l->nmap[d]; k++) m |= 1u << l->map[d][k];
    return m;
}

uint32_t hp__lay_all_axes(const hp_layout *l) {
    uint32_t m = 0;
    for (int d = 0; d < l->ndim; d++) m |= hp__lay_dim_axes(l, d);
    return m;
}

void hp__lay_drop_axes(hp_layout *l, uint32_t axes) {
    for (int d = 0; d < l->ndim; d++) {
        int w = 0;
        for (int k = 0; k < l->nmap[d]; k++)
            if (!(axes & (1u << l->map[d][k]))) l->map[d][w++] = l->map[d][k];
        l->nmap[d] = w;
    }
}

void hp__lay_clear_partial(hp_layout *l) { l->partial = 0; }

void hp__lay_unshard_dim(hp_layout *l, int d) { l->nmap[d] = 0; }

void hp__lay_copy_dim(hp_layout *dst, int dd, const hp_layout *src, int sd) {
    dst->nmap[dd] = src->nmap[sd];
    memcpy(dst->map[dd], src->map[sd], sizeof src->map[sd]);
}

void hp__lay_set_partial(hp_layout *l, uint32_t axes, hp_reduce_op op) {
    l->partial |= axes;
    if (axes) l->partial_op = op;
}

hp_layout hp__lay_replicated(int ndim) {
    hp_layout l;
    hp_layout_init(&l, ndim);
    return l;
}

hp_layout hp__lay_broadcast_operand(const hp_layout *out, const hp_shape *out_shape, const hp_shape *in_shape) {
    hp_layout l = hp__lay_replicated(in_shape->ndim);
    for (int i = 0; i < in_shape->ndim; i++) {
        int o = out_shape->ndim - in_shape->ndim + i;
        if (o >= 0 && in_shape->dim[i] == out_shape->dim[o] && in_shape->dim[i] != 1) hp__lay_copy_dim(&l, i, out, o);
    }
    return l;
}
