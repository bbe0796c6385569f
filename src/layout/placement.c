/* The Shard/Replicate/Partial per-mesh-axis view of a layout, both ways. */
#include "hp/mesh.h"

#include <stdio.h>
#include <string.h>

hp_status hp_layout_to_placements(const hp_layout *l, const hp_mesh *m, hp_placement *out) {
    int na = hp_mesh_naxes(m);
    for (int a = 0; a < na; a++) {
        out[a] = (hp_placement){.kind = HP_PLACEMENT_REPLICATE, .dim = -1, .order = -1, .op = HP_REDUCE_SUM};
        if (l->partial & (1u << a)) {
            out[a].kind = HP_PLACEMENT_PARTIAL;
            out[a].op = l->partial_op;
        }
    }
    for (int d = 0; d < l->ndim; d++) {
        for (int k = 0; k < l->nmap[d]; k++) {
            int a = l->map[d][k];
            if (a < 0 || a >= na) return hp_error(HP_STATUS_INVALID_ARGUMENT, "tensor_map[%d] names mesh axis %d of a %d-axis mesh", d, a, na);
            out[a].kind = HP_PLACEMENT_SHARD;
            out[a].dim = d;
            out[a].order = k;
        }
    }
    return HP_STATUS_OK;
}

hp_status hp_layout_from_placements(const hp_placement *p, const hp_mesh *m, int ndim, hp_layout *out) {
    if (ndim < 0 || ndim > HP_MAX_DIMS) return hp_error(HP_STATUS_INVALID_ARGUMENT, "tensor rank %d out of range", ndim);
    int na = hp_mesh_naxes(m);
    hp_layout l;
    hp_layout_init(&l, ndim);
    bool have_op = false;
    for (int a = 0; a < na; a++) {
        if (p[a].kind == HP_PLACEMENT_PARTIAL) {
            if ((int)p[a].op < 0 || p[a].op >= HP_REDUCE_COUNT)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "placement on axis '%s' has invalid op %d", hp_mesh_axis_name(m, a), (int)p[a].op);
            if (have_op && p[a].op != l.partial_op)
                return hp_error(HP_STATUS_UNSUPPORTED, "partial placements with different ops (%s on '%s', %s before)",
                                hp_reduce_op_name(p[a].op), hp_mesh_axis_name(m, a), hp_reduce_op_name(l.partial_op));
            l.partial |= 1u << a;
            l.partial_op = p[a].op;
            have_op = true;
        } else if (p[a].kind == HP_PLACEMENT_SHARD) {
            if (p[a].dim < 0 || p[a].dim >= ndim)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "Shard(%d) on axis '%s' for a %d-d tensor", p[a].dim, hp_mesh_axis_name(m, a), ndim);
        } else if (p[a].kind != HP_PLACEMENT_REPLICATE) {
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "placement kind %d on axis '%s'", (int)p[a].kind, hp_mesh_axis_name(m, a));
        }
    }
    /* Per dim: explicit orders first (by order), then the rest by mesh axis order. */
    for (int d = 0; d < ndim; d++) {
        int slot[HP_MESH_MAX_AXES];
        int n = 0;
        for (int a = 0; a < na; a++)
            if (p[a].kind == HP_PLACEMENT_SHARD && p[a].dim == d) n++;
        for (int k = 0; k < n; k++) slot[k] = -1;
        for (int a = 0; a < na; a++) {
            if (p[a].kind != HP_PLACEMENT_SHARD || p[a].dim != d || p[a].order < 0) continue;
            if (p[a].order >= n || slot[p[a].order] >= 0)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "Shard(%d) on axis '%s' has order %d, out of range or repeated",
                                d, hp_mesh_axis_name(m, a), p[a].order);
            slot[p[a].order] = a;
        }
        int k = 0;
        for (int a = 0; a < na; a++) {
            if (p[a].kind != HP_PLACEMENT_SHARD || p[a].dim != d || p[a].order >= 0) continue;
            while (slot[k] >= 0) k++;
            slot[k] = a;
        }
        l.nmap[d] = n;
        memcpy(l.map[d], slot, (size_t)n * sizeof *slot);
    }
    HP_CHECK(hp_layout_validate(&l, m, NULL));
    *out = l;
    return HP_STATUS_OK;
}

char *hp_placements_str(const hp_placement *p, int naxes, char *buf, size_t n) {
    size_t k = 0;
    if (n) buf[0] = 0;
    for (int a = 0; a < naxes; a++) {
        const char *sep = a ? ", " : "";
        if (p[a].kind == HP_PLACEMENT_SHARD)
            k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%sS(%d)", sep, p[a].dim);
        else if (p[a].kind == HP_PLACEMENT_PARTIAL)
            k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%sP(%s)", sep, hp_reduce_op_name(p[a].op));
        else
            k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%sR", sep);
    }
    return buf;
}
