/*
 * hp/mesh.h — device meshes, tensor layouts (tensor_map + partial axes) and placements.
 *
 * A mesh is an N-d grid of ranks with named axes (`device_matrix` [2, 4], `alias_name` [dp, tp]),
 * optionally over an explicit rank list. A layout says, for each tensor dimension, which mesh axes
 * split it (an ordered list, possibly empty), and which mesh axes hold a pending reduction.
 *
 *     hp_mesh *m;
 *     HP_CHECK(hp_mesh_new(2, (int[]){2, 4}, (const char *[]){"dp", "tp"}, NULL, 0, &m));
 *     hp_layout l;
 *     HP_CHECK(hp_layout_parse("[dp, tp]", m, &l));        // rows over dp, columns over tp
 *     int64_t start[2], len[2];
 *     HP_CHECK(hp_layout_slice_of(&l, m, &HP_SHAPE(6, 10), 5, start, len));
 *     // mesh index 5 = coords (1, 1): rows [3, 6), columns [3, 6)
 *
 * Semantics (after MindSpore's tensor_map / device_matrix and PyTorch DTensor placements):
 *  - Mesh index i (0..size-1) maps to coordinates in row-major order: the last axis varies fastest.
 *    Mesh index i is the rank ranks[i] of the communicator the mesh is attached to.
 *  - tensor_map[d] = [a0, a1, ...] splits dimension d over prod(dim[a_k]) shards; the shard index
 *    is the mixed-radix number of the coordinates (a0 slowest, last-listed fastest).
 *  - Uneven sizes use block distribution: with n elements and k shards, b = ceil(n / k) and shard i
 *    holds [i*b, min((i+1)*b, n)), so the last shards may be shorter or empty.
 *  - A mesh axis appears at most once per tensor. Axes that split no dimension are replicated,
 *    unless listed as partial: then the global value is op over that axis of the local values.
 */
#ifndef HP_MESH_H
#define HP_MESH_H

#include "hp/comm.h"
#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HP_MESH_MAX_AXES 8
#define HP_MESH_MAX_NAME 32

/* ---------------------------------------------------------------- mesh */

typedef struct hp_mesh hp_mesh;

/*
 * New mesh of `naxes` axes (1..HP_MESH_MAX_AXES) with sizes dims[] (>= 1) and names[] (unique,
 * non-empty, at most 31 characters, not "none"). `ranks` lists the communicator rank of each mesh
 * index (nranks entries, distinct, >= 0); NULL means ranks 0..size-1 (nranks ignored).
 * Errors (HP_STATUS_INVALID_ARGUMENT, message names the value): bad axis count, size or name,
 * duplicate name, nranks != product of dims ("mesh [2, 4] has 8 devices but 6 ranks were given"),
 * duplicate or negative rank. The caller owns *out (hp_mesh_free).
 */
hp_status hp_mesh_new(int naxes, const int *dims, const char *const *names, const int *ranks,
                      int nranks, hp_mesh **out);
/* Frees the mesh and the communicators it created. NULL is allowed. */
void hp_mesh_free(hp_mesh *m);

int hp_mesh_naxes(const hp_mesh *m);
int hp_mesh_dim(const hp_mesh *m, int axis);          /* size of one axis */
const char *hp_mesh_axis_name(const hp_mesh *m, int axis);
int hp_mesh_size(const hp_mesh *m);                   /* number of devices (product of dims) */
/* Axis index of `name`; HP_STATUS_NOT_FOUND names the alias and lists the mesh's axes. */
hp_status hp_mesh_axis_index(const hp_mesh *m, const char *name, int *axis);
/* The communicator rank of mesh index i. */
int hp_mesh_rank(const hp_mesh *m, int index);
/* The mesh index holding communicator rank r, or -1 when r is not in the mesh. */
int hp_mesh_index_of(const hp_mesh *m, int rank);
/* Row-major coordinates of mesh index i (naxes entries) and back. */
void hp_mesh_coords(const hp_mesh *m, int index, int *coords);
int hp_mesh_index(const hp_mesh *m, const int *coords);
/* Same axes (sizes and names) and same rank list. */
bool hp_mesh_equal(const hp_mesh *a, const hp_mesh *b);
/* "[2, 4] (dp, tp)" into buf (NUL-terminated); returns buf. */
char *hp_mesh_str(const hp_mesh *m, char *buf, size_t n);

/*
 * Binds the mesh to a communicator: creates (by hp_comm_split of `parent`) the mesh communicator
 * whose rank i is mesh index i. Collective over `parent`; call once on every rank of `parent`
 * (ranks outside the mesh get no mesh communicator). The mesh keeps a borrowed pointer to parent
 * and owns the new communicator. Errors: a mesh rank >= size of parent; already attached.
 */
hp_status hp_mesh_attach(hp_mesh *m, hp_comm *parent);
/* The communicator the mesh was attached to (NULL before hp_mesh_attach). */
hp_comm *hp_mesh_parent_comm(const hp_mesh *m);
/* This process's mesh index, or -1 when not attached or not in the mesh. */
int hp_mesh_my_index(const hp_mesh *m);

/*
 * The sub-communicator over the listed mesh axes (in the given order; rank = mixed-radix number of
 * the coordinates on those axes, the last listed fastest) among the devices sharing this process's
 * coordinates on every other axis. naxes == 0 gives a one-rank communicator; all axes in mesh
 * order give the mesh communicator. Created on first use by splitting the mesh communicator
 * (collective over the mesh: every mesh rank must ask for the same axes in the same order of
 * calls), then cached; the mesh owns it. Errors: not attached, caller not in the mesh, an axis out
 * of range or repeated.
 */
hp_status hp_mesh_axes_comm(hp_mesh *m, int naxes, const int *axes, hp_comm **out);

/* ---------------------------------------------------------------- layout */

/*
 * A tensor layout on a mesh (plain struct; hp_layout_init then set). Validity is checked by
 * hp_layout_validate; every query below assumes a valid layout.
 */
typedef struct hp_layout {
    int ndim;                                  /* tensor rank, 0..HP_MAX_DIMS */
    int nmap[HP_MAX_DIMS];                     /* number of mesh axes splitting dim d */
    int map[HP_MAX_DIMS][HP_MESH_MAX_AXES];    /* the axes, first listed = slowest */
    uint32_t partial;                          /* bit a: mesh axis a holds a pending reduction */
    hp_reduce_op partial_op;                   /* the reduction of every partial axis */
    /*
     * Ragged split (MoE expert parallelism, docs/design.md): bit a set means mesh axis a, the last
     * axis of tensor_map[0], splits dim 0 by run-time counts instead of by blocks. The rows of
     * groups 0..E-1 (E = the length of the i32 tensor `ragged_by`, a tensor id of the graph the
     * layout belongs to) are held by the axis's coordinate that holds the group in a block
     * distribution of the E groups over the axis (the expert weights' layout); each rank's rows are
     * the groups' rows it holds, group-major. The number of rows is known at run time only, so the
     * local extent of dim 0 is the static capacity: the block as if the ragged axis did not split
     * (every row of the group could come to one rank); rows past the run-time count are zero.
     * 0: an ordinary block layout (ragged_by then ignored).
     */
    uint32_t ragged;
    int32_t ragged_by;
} hp_layout;

/* Fully replicated layout of `ndim` dims (asserts 0 <= ndim <= HP_MAX_DIMS). */
void hp_layout_init(hp_layout *l, int ndim);
/*
 * Sets tensor_map[dim] from alias names (n of them, first = slowest; n == 0 replicates the dim).
 * Errors: dim out of range, unknown alias (HP_STATUS_NOT_FOUND naming it), an alias used twice in
 * this layout ("alias 'tp' appears twice in the tensor_map").
 */
hp_status hp_layout_set(hp_layout *l, const hp_mesh *m, int dim, int n, const char *const *names);
/* Marks the named axes partial with `op` (replacing any previous partial set). Errors as above, and
 * an axis that already splits a dimension. */
hp_status hp_layout_set_partial(hp_layout *l, const hp_mesh *m, hp_reduce_op op, int n,
                                const char *const *names);
/*
 * Checks the layout against the mesh (and, if `shape` is not NULL, its rank equals shape->ndim).
 * Errors (HP_STATUS_INVALID_ARGUMENT, message names the axis by alias): axis out of range, an axis
 * used twice, a partial axis that also shards a dimension, an invalid partial op, ndim mismatch.
 */
hp_status hp_layout_validate(const hp_layout *l, const hp_mesh *m, const hp_shape *shape);

/*
 * Text form. Grammar:  layout := '[' [entry (',' entry)*] ']' [ 'partial' '=' op '(' names ')' ]
 *                      entry  := alias | 'none' | '[' [alias (',' alias)*] ']'
 * e.g. "[dp, none]", "[[dp, tp], none] ", "[none, tp] partial=sum(dp)", "[]" for a scalar.
 * hp_layout_parse validates; errors name the bad token or alias (HP_STATUS_INVALID_ARGUMENT,
 * HP_STATUS_NOT_FOUND for an unknown alias).
 */
hp_status hp_layout_parse(const char *text, const hp_mesh *m, hp_layout *out);
/* Writes the text form (bare alias for one axis, [a, b] for several, none for zero); returns buf. */
char *hp_layout_format(const hp_layout *l, const hp_mesh *m, char *buf, size_t n);
bool hp_layout_equal(const hp_layout *a, const hp_layout *b);
/* Bit mask of the axes used by tensor_map (not the partial ones). */
uint32_t hp_layout_sharded_axes(const hp_layout *l);

/* Number of shards of dimension d: product of the sizes of its axes (1 when none). A ragged axis
 * counts here too (the rows are divided among its coordinates, just not in blocks). */
int64_t hp_layout_shards(const hp_layout *l, const hp_mesh *m, int d);
/* Block distribution of n elements over k shards: shard i is [*start, *start + *len). */
void hp_block_range(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len);
/*
 * The global slice held by mesh index `index`: start[d], len[d] for d < shape->ndim (elements).
 * A ragged axis (hp_layout.ragged) is skipped in dim 0: the slice is the capacity block. This is pure (no communicator), so checkpoint loaders can use it. Errors: index out of range,
 * shape rank != layout rank.
 */
hp_status hp_layout_slice_of(const hp_layout *l, const hp_mesh *m, const hp_shape *shape,
                             int index, int64_t *start, int64_t *len);
/* The local shape at mesh index `index` (the lens of hp_layout_slice_of). */
hp_status hp_layout_local_shape(const hp_layout *l, const hp_mesh *m, const hp_shape *shape,
                                int index, hp_shape *out);
/* Intersection of two boxes of ndim dims; returns false (and zero lens) when empty. */
bool hp_slice_intersect(int ndim, const int64_t *a_start, const int64_t *a_len,
                        const int64_t *b_start, const int64_t *b_len, int64_t *out_start,
                        int64_t *out_len);

/* ---------------------------------------------------------------- placements */

typedef enum hp_placement_kind {
    HP_PLACEMENT_REPLICATE = 0,
    HP_PLACEMENT_SHARD,
    HP_PLACEMENT_PARTIAL,
} hp_placement_kind;

/*
 * The per-mesh-axis view of a layout (PyTorch DTensor's Shard(dim) / Replicate() / Partial(op)).
 * For several axes sharding one dim, `order` is the axis's position in tensor_map[dim] (0 =
 * slowest); order -1 in input means "by mesh axis order", PyTorch's convention.
 */
typedef struct hp_placement {
    hp_placement_kind kind;
    int dim;          /* SHARD: the tensor dimension */
    int order;        /* SHARD: position in tensor_map[dim], or -1 */
    hp_reduce_op op;  /* PARTIAL: the reduction */
} hp_placement;

/* Writes hp_mesh_naxes(m) placements. Always succeeds for a valid layout. */
hp_status hp_layout_to_placements(const hp_layout *l, const hp_mesh *m, hp_placement *out);
/*
 * Builds a layout of `ndim` dims from one placement per mesh axis. Errors: a shard dim out of
 * range, partial placements with different ops, duplicate or out-of-range orders.
 */
hp_status hp_layout_from_placements(const hp_placement *p, const hp_mesh *m, int ndim, hp_layout *out);
/* "S(0)", "R", "P(sum)" joined with ", " into buf; returns buf. */
char *hp_placements_str(const hp_placement *p, int naxes, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* HP_MESH_H */
