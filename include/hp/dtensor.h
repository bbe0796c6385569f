/*
 * hp/dtensor.h — the eager DTensor API: a local block + mesh + layout + global shape
 * (after PyTorch's torch.distributed.tensor.DTensor).
 *
 *     hp_dtensor *x, *y;
 *     HP_CHECK(hp_dtensor_distribute(mesh, &row_sharded, &shape, HP_DTYPE_F32, global, &x));
 *     HP_CHECK(hp_dtensor_redistribute(x, &replicated, &y));       // an all-gather
 *     const float *full = hp_dtensor_data(y);                      // the whole tensor
 *     hp_dtensor_free(x); hp_dtensor_free(y);
 *
 * The mesh must be attached (hp_mesh_attach) and outlive the DTensor; the calling rank must be in
 * it. Calls that communicate are collective over the mesh. Local data lives on HP_TIER_HOST
 * (hp_mem_alloc) and is owned by the DTensor.
 */
#ifndef HP_DTENSOR_H
#define HP_DTENSOR_H

#include "hp/mesh.h"
#include "hp/redistribute.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_dtensor hp_dtensor;

/*
 * Slices `global` (row-major, shape `shape`, present on every rank) into this rank's block under
 * `layout`. Partial axes: with sum, the ranks at coordinate 0 on every partial axis hold the value
 * and the others zeros; with avg, max and min every rank holds the value. No communication.
 * Errors: invalid layout or shape, mesh not attached or rank not in mesh, out of memory.
 */
hp_status hp_dtensor_distribute(hp_mesh *m, const hp_layout *layout, const hp_shape *shape, hp_dtype dt,
                                const void *global, hp_dtensor **out);
/* Wraps a copy of this rank's block `local` (hp_layout_local_shape elements) as a DTensor. */
hp_status hp_dtensor_from_local(hp_mesh *m, const hp_layout *layout, const hp_shape *shape, hp_dtype dt,
                                const void *local, hp_dtensor **out);
/* A new DTensor with the same global value under `layout` (plans and runs a redistribution;
 * collective). */
hp_status hp_dtensor_redistribute(const hp_dtensor *t, const hp_layout *layout, hp_dtensor **out);
/* Writes the whole global tensor (reduced if partial) into `global` on every rank (collective). */
hp_status hp_dtensor_full_tensor(const hp_dtensor *t, void *global);
void hp_dtensor_free(hp_dtensor *t);

/* This rank's block: data (owned by t), its shape and bytes. */
const void *hp_dtensor_to_local(const hp_dtensor *t, hp_shape *local_shape);
void *hp_dtensor_data(hp_dtensor *t);
hp_shape hp_dtensor_global_shape(const hp_dtensor *t);
hp_shape hp_dtensor_local_shape(const hp_dtensor *t);
const hp_layout *hp_dtensor_layout(const hp_dtensor *t);
hp_mesh *hp_dtensor_mesh(const hp_dtensor *t);
hp_dtype hp_dtensor_dtype(const hp_dtensor *t);
/* Bytes the last redistribution that produced t received on the busiest rank (0 otherwise). */
int64_t hp_dtensor_bytes_moved(const hp_dtensor *t);

#ifdef __cplusplus
}
#endif
#endif /* HP_DTENSOR_H */
