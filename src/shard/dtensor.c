/* The eager DTensor: a local block with its mesh, layout and global shape. */
#include "hp/dtensor.h"

#include <stdlib.h>
#include <string.h>

struct hp_dtensor {
    hp_mesh *mesh;
    hp_layout layout;
    hp_shape global, local;
    hp_dtype dtype;
    void *data;
    size_t bytes;
    int64_t moved;
};

static hp_status make(hp_mesh *m, const hp_layout *l, const hp_shape *shape, hp_dtype dt, hp_dtensor **out) {
    *out = NULL;
    if (!hp_dtype_size(dt)) return hp_error(HP_STATUS_INVALID_ARGUMENT, "invalid dtype %d", (int)dt);
    HP_CHECK(hp_layout_validate(l, m, shape));
    int me = hp_mesh_my_index(m);
    if (me < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "dtensor: mesh not attached or this rank is not in it");
    hp_dtensor *t = calloc(1, sizeof *t);
    if (!t) return hp_error(HP_STATUS_OUT_OF_MEMORY, "dtensor");
    t->mesh = m;
    t->layout = *l;
    t->global = *shape;
    t->dtype = dt;
    hp_status st = hp_layout_local_shape(l, m, shape, me, &t->local);
    t->bytes = (size_t)hp_shape_numel(&t->local) * hp_dtype_size(dt);
    if (st == HP_STATUS_OK && !(t->data = hp_mem_alloc(HP_TIER_HOST, t->bytes ? t->bytes : 1))) st = HP_STATUS_OUT_OF_MEMORY;
    if (st != HP_STATUS_OK) {
        free(t);
        return st;
    }
    *out = t;
    return HP_STATUS_OK;
}

void hp_dtensor_free(hp_dtensor *t) {
    if (!t) return;
    hp_mem_free(HP_TIER_HOST, t->data, t->bytes ? t->bytes : 1);
    free(t);
}

hp_status hp_dtensor_distribute(hp_mesh *m, const hp_layout *l, const hp_shape *shape, hp_dtype dt,
                                const void *global, hp_dtensor **out) {
    hp_dtensor *t;
    HP_CHECK(make(m, l, shape, dt, &t));
    int me = hp_mesh_my_index(m), nd = shape->ndim;
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS], zero[HP_MAX_DIMS] = {0};
    hp_layout_slice_of(l, m, shape, me, start, len);
    hp_copy_box(t->data, &t->local, zero, global, shape, start, len, hp_dtype_size(dt));
    (void)nd;
    if (l->partial && l->partial_op == HP_REDUCE_SUM) {
        int c[HP_MESH_MAX_AXES];
        hp_mesh_coords(m, me, c);
        for (int a = 0; a < hp_mesh_naxes(m); a++)
            if ((l->partial & (1u << a)) && c[a] != 0) memset(t->data, 0, t->bytes);
    }
    *out = t;
    return HP_STATUS_OK;
}

hp_status hp_dtensor_from_local(hp_mesh *m, const hp_layout *l, const hp_shape *shape, hp_dtype dt,
                                const void *local, hp_dtensor **out) {
    hp_dtensor *t;
    HP_CHECK(make(m, l, shape, dt, &t));
    if (t->bytes) memcpy(t->data, local, t->bytes);
    *out = t;
    return HP_STATUS_OK;
}

hp_status hp_dtensor_redistribute(const hp_dtensor *t, const hp_layout *l, hp_dtensor **out) {
    hp_redistribute_plan p;
    HP_CHECK(hp_redistribute_plan_make(t->mesh, &t->layout, l, &t->global, t->dtype, &p));
    hp_dtensor *o;
    HP_CHECK(make(t->mesh, l, &t->global, t->dtype, &o));
    hp_status st = hp_redistribute_execute(&p, t->mesh, t->data, o->data);
    if (st != HP_STATUS_OK) {
        hp_dtensor_free(o);
        return st;
    }
    o->moved = p.bytes;
    *out = o;
    return HP_STATUS_OK;
}

hp_status hp_dtensor_full_tensor(const hp_dtensor *t, void *global) {
    hp_layout r;
    hp_layout_init(&r, t->global.ndim);
    hp_dtensor *o;
    HP_CHECK(hp_dtensor_redistribute(t, &r, &o));
    memcpy(global, o->data, o->bytes);
    hp_dtensor_free(o);
    return HP_STATUS_OK;
}

const void *hp_dtensor_to_local(const hp_dtensor *t, hp_shape *local_shape) {
    if (local_shape) *local_shape = t->local;
    return t->data;
}
void *hp_dtensor_data(hp_dtensor *t) { return t->data; }
hp_shape hp_dtensor_global_shape(const hp_dtensor *t) { return t->global; }
hp_shape hp_dtensor_local_shape(const hp_dtensor *t) { return t->local; }
const hp_layout *hp_dtensor_layout(const hp_dtensor *t) { return &t->layout; }
hp_mesh *hp_dtensor_mesh(const hp_dtensor *t) { return t->mesh; }
hp_dtype hp_dtensor_dtype(const hp_dtensor *t) { return t->dtype; }
int64_t hp_dtensor_bytes_moved(const hp_dtensor *t) { return t->moved; }
