/*
 * hp/redistribute.h — changing a tensor's layout: the planner, the executor, the cross-mesh path.
 *
 *     hp_redistribute_plan p;
 *     HP_CHECK(hp_redistribute_plan_make(mesh, &src, &dst, &shape, HP_DTYPE_F32, &p));
 *     // p.steps[0] = {ALL_GATHER over 'tp', dim 1, bytes 3072}, p.bytes = total per rank
 *     HP_CHECK(hp_redistribute_execute(&p, mesh, local_in, local_out));   // collective over mesh
 *
 * Same mesh. A plan is a sequence of steps, each changing the layout by one mesh axis:
 *   LOCAL_SLICE     append an unused axis a to tensor_map[d]: keep my block (no communication)
 *   LOCAL_PARTIAL   make an unused axis partial (sum: ranks with coordinate != 0 hold zeros)
 *   ALL_GATHER      remove the last axis a of tensor_map[d] (all-gather over a)
 *   ALL_TO_ALL      move the last axis a of tensor_map[i] to the end of tensor_map[j]
 *   REDUCE_SCATTER  a partial axis a becomes the last axis of tensor_map[d]
 *   ALL_REDUCE      a partial axis a becomes replicated
 *   ALL_TO_ALLV     any layout to the target's tensor_map in one exchange over the whole mesh, each
 *                   rank receiving the intersections of its target slice with the slices others hold
 *                   (the general fallback; also the only choice for some uneven sizes)
 * The planner runs a shortest-path search (Dijkstra) over layouts with these steps as edges and
 * the bytes received per rank as the cost, ties broken by fewer and cheaper steps; this finds the
 * transitions of PyTorch DTensor's redistribute (shard->replicate = all-gather, partial->shard =
 * reduce-scatter, shard(i)->shard(j) = all-to-all) and chains of them for multi-axis tensor_map
 * entries, as in GSPMD's resharding (Xu et al., 2021, section 3.5). Uneven sizes (block
 * distribution) are supported: group collectives pad every block to the largest one in the group,
 * and a step is offered only where the blocks of one group tile the target exactly.
 *
 * Across meshes (pipeline hand-off, training to inference, checkpoint resharding): each
 * destination slice is intersected with the distinct source slices; each piece comes from one
 * holder (the destination itself when it holds it, else holders in turn) and moves by send/recv.
 * The same intersections (hp_redistribute_transfers) serve the same-mesh ALL_TO_ALLV step and can
 * be used by a checkpoint loader with no communicator at all.
 *
 * Bytes are per rank: the most bytes any one rank receives in a step (padding included).
 * ALL_REDUCE counts the ring algorithm's 2 (n-1)/n of the buffer.
 */
#ifndef HP_REDISTRIBUTE_H
#define HP_REDISTRIBUTE_H

#include "hp/comm.h"
#include "hp/mesh.h"
#include "hp/redist_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* hp_redist_kind, hp_redist_step, hp_redistribute_plan and hp_redist_kind_name: hp/redist_plan.h. */

/*
 * Plans src -> dst on mesh m for a tensor of `shape` and `dt`. Pure (no communication); every rank
 * computes the same plan. Errors: invalid layouts (as hp_layout_validate), rank mismatch with
 * shape, a search that exceeds its state budget (HP_STATUS_INTERNAL; not expected below 6 axes).
 */
hp_status hp_redistribute_plan_make(const hp_mesh *m, const hp_layout *src, const hp_layout *dst,
                                    const hp_shape *shape, hp_dtype dt, hp_redistribute_plan *out);

/* One line per step: "all_gather tp dim 1: [dp, tp] -> [dp, none] (3072 bytes)". Returns buf. */
char *hp_redistribute_plan_str(const hp_redistribute_plan *p, const hp_mesh *m, char *buf, size_t n);

/*
 * Runs the plan on this rank: `in` holds the local block under p->src (hp_layout_local_shape at
 * hp_mesh_my_index(m)), `out` receives the local block under p->dst; they must not overlap.
 * Collective over the mesh: every mesh rank calls it with the same plan. The mesh must be attached
 * (hp_mesh_attach). Temporaries are malloc'ed and freed before return.
 * Errors: not attached or not in the mesh, out of memory, communicator failures.
 */
hp_status hp_redistribute_execute(const hp_redistribute_plan *p, hp_mesh *m, const void *in, void *out);

/*
 * As hp_redistribute_execute, for plans whose step is a RAGGED_ALL_TO_ALLV (to or from a ragged
 * split, hp_layout.ragged; other plans run as hp_redistribute_execute does): `counts` (n_groups
 * i32) are this rank's rows per group (MoE: its tokens per expert, the ragged_by tensor's local
 * addend), its block rows being grouped by group in order. The members of the ragged axis
 * all-gather their counts, then exchange the rows by one all-to-allv; the ragged side holds its
 * groups' rows group-major (within a group by source member), zero past the received rows.
 * Errors: those of hp_redistribute_execute, counts NULL or negative, counts that do not add up to
 * the blocks.
 */
hp_status hp_redistribute_execute_counts(const hp_redistribute_plan *p, hp_mesh *m, const void *in,
                                         const int32_t *counts, int64_t n_groups, void *out);

/* Bytes this process has received from other ranks in RAGGED_ALL_TO_ALLV steps since it started
 * (the run-time count the plan's bytes only estimate; benchmarks read it). */
int64_t hp_redistribute_ragged_bytes(void);

/*
 * Plans and runs one redistribution: hp_redistribute_plan_make(m, src, dst, shape, dt), then
 * hp_redistribute_execute. *bytes_received (may be NULL) gets the plan's bytes received per rank.
 * Collective over the mesh. Errors: those of the two calls. Of type hp_store_redistribute_fn, so
 * the state store refreshes its views through the planner without depending on it.
 */
hp_status hp_redistribute_tensor(hp_mesh *m, const hp_layout *src, const hp_layout *dst, const hp_shape *shape,
                                 hp_dtype dt, const void *in, void *out, int64_t *bytes_received);

/*
 * The analytic minimum bytes received per rank for the standard transitions on a group of n ranks
 * (Chan et al., "Collective communication: theory, practice, and experience", 2007), given the
 * bytes each rank holds before the step: ALL_GATHER (n-1) X; REDUCE_SCATTER and ALL_TO_ALL
 * (n-1) X / n; ALL_REDUCE 2 (n-1) X / n; local steps 0. -1 for other kinds.
 */
int64_t hp_redistribute_min_bytes(hp_redist_kind kind, int64_t local_bytes, int n);

/* ---------------------------------------------------------------- slice intersections */

/* One piece to move: the global box [start, start + len) from src mesh index to dst mesh index. */
typedef struct hp_transfer {
    int src_index, dst_index;
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
} hp_transfer;

/*
 * The pieces that build every destination slice of `dst` on dst_mesh from the slices of `src` on
 * src_mesh (pure; no communicator). Each destination element comes from exactly one source:
 * same mesh -> the holder sharing the destination's coordinates on the axes src does not shard
 * (so partial pieces stay on their partial coordinate, and a rank reuses what it holds); different
 * meshes -> the destination's own rank when it holds the piece (by communicator rank), else the
 * holders in turn. Partial axes of dst are ignored (the caller applies them). Ordered by
 * destination, then source. *out is malloc'ed (free with free()); *n its length.
 * Errors: invalid layouts, shape rank mismatch, a partial src on a different mesh (UNSUPPORTED:
 * reduce on the source mesh first).
 */
hp_status hp_redistribute_transfers(const hp_mesh *src_mesh, const hp_layout *src,
                                    const hp_mesh *dst_mesh, const hp_layout *dst,
                                    const hp_shape *shape, hp_transfer **out, int *n);

/* Copies a box of `len` elements per dim from src (row-major, shape src_shape, box at src_off)
 * into dst (shape dst_shape, box at dst_off). Element size es bytes. */
void hp_copy_box(void *dst, const hp_shape *dst_shape, const int64_t *dst_off, const void *src,
                 const hp_shape *src_shape, const int64_t *src_off, const int64_t *len, size_t es);

/*
 * Cross-mesh redistribution by send/recv on `world`, whose ranks the meshes' rank lists name.
 * Every rank of world in either mesh calls it (others may too, and do nothing). `in` is this
 * rank's block under src (ignored, may be NULL, when not in src_mesh); `out` receives its block
 * under dst (may be NULL when not in dst_mesh). dst partial axes are applied locally (sum: only
 * coordinate 0 keeps the value). *bytes (may be NULL) receives the most bytes any rank receives.
 * Meshes need not be attached. Errors: as hp_redistribute_transfers, communicator failures.
 */
hp_status hp_redistribute_cross(hp_comm *world, const hp_mesh *src_mesh, const hp_layout *src,
                                const void *in, const hp_mesh *dst_mesh, const hp_layout *dst,
                                void *out, const hp_shape *shape, hp_dtype dt, int64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif /* HP_REDISTRIBUTE_H */
