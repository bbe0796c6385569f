/* Helpers shared by operator files (declared in src/ops/op.h). */
#include "ops/op.h"

hp_status hp__broadcast_shape(const hp_shape *a, const hp_shape *b, hp_shape *out) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    hp_shape r = hp_shape_make(nd, (int64_t[HP_MAX_DIMS]){0});
    for (int i = 0; i < nd; i++) {
        int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
        int64_t da = ia >= 0 ? a->dim[ia] : 1, db = ib >= 0 ? b->dim[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return hp_error(HP_STATUS_SHAPE, "shapes %s and %s do not broadcast (axis %d: %lld vs %lld)",
                            hp__shape_s(a), hp__shape_s(b), i, (long long)da, (long long)db);
        r.dim[i] = da == 1 ? db : da;
    }
    *out = r;
    return HP_STATUS_OK;
}

int hp__axis(int axis, int ndim) {
    if (axis < 0) axis += ndim;
    return (axis >= 0 && axis < ndim) ? axis : -1;
}
