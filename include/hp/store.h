/*
 * hp/store.h — the state store: parameters and optimizer states by name, shared by programs.
 *
 * A rank may hold several programs over one set of weights (training step, evaluation, sampling;
 * later pipeline stages and RL actor/learner). The store keeps each named tensor once: its logical
 * (global) shape, dtype, layout over the store's mesh, and this rank's block with the tier and
 * storage it lives in. Entries outlive programs. A program built with hp_program_opts.store binds
 * its persistent PARAM and OPT_STATE tensors to the store by name instead of allocating its own:
 *
 *     hp_store *s;
 *     HP_CHECK(hp_store_new(mesh, NULL, &s));               // mesh attached; NULL: one device
 *     hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
 *     o.store = s;
 *     HP_CHECK(hp_program_new(train_graph, &o, &train));     // creates the entries it binds
 *     HP_CHECK(hp_store_declare(s, "h0.attn.w", HP_DTYPE_F32, &global, &layout)); // shape + layout
 *     HP_CHECK(hp_program_new(eval_graph, &o, &eval));       // same buffers: no copy
 *     HP_CHECK(hp_program_run(train));                       // bumps the version of what it writes
 *     HP_CHECK(hp_program_run(eval));                        // reads the new values, no sync call
 *     void *full;
 *     HP_CHECK(hp_store_view(s, "h0.attn.w", &replicated, &full)); // collective; planner-refreshed
 *     ...
 *     hp_program_free(eval); hp_program_free(train); hp_store_free(s);
 *
 * How a program's tensor binds (name, dtype and this rank's local shape must match):
 *   - entry on the device tier, same local shape: the program uses the entry's buffer (no copy;
 *     hp_program_data of every bound program returns the same pointer);
 *   - the program keeps the tensor on a slower tier (HyperOffload, hp_program_opts.ext): the
 *     program's pass owns the storage (its "home"); the entry records the tier and reads and writes
 *     through the pass (hp_program_ext.read/write). Only the first program to bind a name may be its
 *     home. When the home program is freed, the entry's values are copied into store memory on the
 *     device tier, so they outlive it;
 *   - entry on a slower tier, program without offload for it (evaluation): the program keeps its
 *     own buffer and, at the start of each hp_program_run where the entry's version changed, copies
 *     the values in through the home (the documented copy path; counted in the program's
 *     persistent bytes and in hp_store_stats.n_copies);
 *   - different local shape (another layout: the single-device sampling program of a sharded
 *     training run): the program binds to a view of that shape made by hp_store_view (read-only);
 *     without one the bind fails naming both shapes. hp_program_run does NOT refresh views (a
 *     refresh is collective and a run of one program on one rank is not): the caller calls
 *     hp_store_view or hp_store_views_refresh on every rank before running a program bound to a
 *     view whose entry changed (the trainer does so before evaluation and sampling).
 * Binding is by name and local shape: a program's tensor binds to the entry of its name when the
 * local shapes agree; the program's own layout is not compared with the entry's (two layouts with
 * the same block on this rank share the bytes, which is right only if they also agree on which
 * block: the caller keeps one layout per name and uses views for the others). Views are over the
 * store's own mesh; a view for another mesh (a pipeline stage's or an actor group's) is not built
 * yet.
 * A name not in the store is created by the first program that binds it, recorded as replicated
 * with the program's local shape as its logical shape; hp_store_declare then records the real
 * logical shape and layout (which must give the same local block). A trainer may also declare
 * every entry up front: the storage is allocated at the first bind (or first write).
 *
 * Versions. Every entry has a version, bumped when a program that writes it (an in-place update:
 * AdamW, the partitioner's ASSIGN, or the offload pass over its home) starts a run, and by
 * hp_store_write / hp_store_touch / hp_program_set_input. Readers use it: a bound program waits
 * for the writer's deferred work (hp_program_ext.sync) and refreshes copy-path tensors only when
 * the version moved; a view is refreshed only when it is older than its entry.
 *
 * Memory. Bytes bound to the store are not in a program's persistent_bytes (they are in
 * hp_program_stats.store_bytes); the store reports its own (hp_store_get_stats), so parameter
 * memory is counted once.
 *
 * Threads: a store and the programs bound to it are used by one thread at a time. The store must
 * outlive every program bound to it. Views and hp_store_views_refresh are collective over the mesh.
 */
#ifndef HP_STORE_H
#define HP_STORE_H

#include "hp/backend.h"
#include "hp/mesh.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_store hp_store;

/* What the store knows about one entry (a copy; pointers are owned by the store and stay valid
 * until the entry's storage changes: a home program freed, or hp_store_free). */
typedef struct hp_store_entry_info {
    const char *name;
    hp_dtype dtype;
    hp_shape shape;        /* logical (global) shape */
    hp_layout layout;      /* over the store's mesh */
    hp_shape local_shape;  /* this rank's block under `layout` */
    size_t bytes;          /* bytes of this rank's block */
    hp_tier tier;          /* DEVICE: store memory; HOST or DISK: a program's offload home */
    void *data;            /* DEVICE: the block; HOST: its host address; DISK or no storage yet: NULL */
    bool has_storage;      /* false for a declared entry no program or write has materialized yet */
    bool declared;         /* false while the entry is as a program created it (replicated) */
    uint64_t version;      /* see "Versions" above; 0 for a new entry */
} hp_store_entry_info;

typedef struct hp_store_stats {
    int n_entries;
    size_t bytes[HP_TIER_COUNT]; /* entries' block bytes per tier (DEVICE: store memory) */
    int n_views;
    size_t view_bytes;           /* store memory held by views */
    int64_t n_refresh;           /* view refreshes (each a redistribution plan run, or a copy) */
    int64_t refresh_bytes;       /* bytes those plans received on this rank (hp_redistribute_plan.bytes) */
    int64_t n_copies;            /* copy-path refreshes of slow-tier entries into bound programs */
} hp_store_stats;

/*
 * New empty store. `mesh` (borrowed, must outlive the store) is attached (hp_mesh_attach) and this
 * rank is in it; NULL: one device, every layout replicated. `backend` (borrowed) allocates the
 * entries' device-tier blocks and must address the same memory as the backends of the programs
 * bound to the store (every CPU backend does); NULL: a CPU backend owned by the store.
 * Errors: HP_STATUS_INVALID_ARGUMENT when the mesh is not attached or this rank is not in it;
 * HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_store_new(hp_mesh *mesh, hp_backend_t backend, hp_store **out);

/*
 * Moves one tensor between two layouts over `mesh` (collective over the mesh): `in` holds this
 * rank's block of a tensor of logical `shape` and `dt` under `from`, `out` receives its block under
 * `to`; *bytes_received (may be NULL) gets the bytes this rank received. hp_redistribute_tensor
 * (hp/redistribute.h: the redistribution planner, then its executor) has this type.
 */
typedef hp_status (*hp_store_redistribute_fn)(hp_mesh *mesh, const hp_layout *from, const hp_layout *to,
                                              const hp_shape *shape, hp_dtype dt, const void *in, void *out,
                                              int64_t *bytes_received);

/*
 * Sets how the store refreshes a view of another layout than its entry's (hp_store_view). The
 * store lives in the runtime, below the passes, so the planner comes in from above: the trainer
 * passes hp_redistribute_tensor. Without one, such a view fails with HP_STATUS_INVALID_ARGUMENT
 * naming the entry. `fn` NULL unsets it.
 */
void hp_store_set_redistribute(hp_store *s, hp_store_redistribute_fn fn);
/* Frees the store's memory (entries, views). Programs bound to it must be freed first. NULL is allowed. */
void hp_store_free(hp_store *s);
/*
 * Marks the store as about to be freed: a program freed after this call does not copy the values of
 * the entries its offload pass holds on slower tiers into store memory (teardown would otherwise
 * read every disk-tier tensor once for nothing); those entries lose their storage.
 */
void hp_store_closing(hp_store *s);

/*
 * Declares entry `name` (copied) of logical `shape` and `dt`, laid out by `layout` over the
 * store's mesh (NULL: replicated). A new entry gets no storage until a program binds it or it is
 * written. An entry a program created (undeclared) takes this shape and layout, which must give
 * the block the program bound; declaring an entry again with the same values is a no-op.
 * Errors: HP_STATUS_INVALID_ARGUMENT for an empty name, an invalid layout (hp_layout_validate), a
 * sharded layout without a mesh, or a redeclaration with another dtype, shape or layout (named);
 * HP_STATUS_SHAPE when the layout's block differs from the one a program bound (both named).
 */
hp_status hp_store_declare(hp_store *s, const char *name, hp_dtype dt, const hp_shape *shape,
                           const hp_layout *layout);

/* Number of entries, and the name of entry i (in creation order, which is the same on every rank
 * of an SPMD job); NULL when i is out of range. */
int hp_store_n_entries(const hp_store *s);
const char *hp_store_name(const hp_store *s, int i);

/* Fills *out for entry `name`. Errors: HP_STATUS_NOT_FOUND naming it. */
hp_status hp_store_info(const hp_store *s, const char *name, hp_store_entry_info *out);

/*
 * This rank's block of `name` (backend memory; host memory on the CPU backend): the device-tier
 * buffer, the host address of a HOST-tier home, or NULL for a DISK-tier home, an unknown name or
 * when waiting for the writer's deferred work failed (the thread's error says why). Materializes a
 * declared entry (zeroed). Waits first for deferred work of the program that writes it. A caller
 * that writes through the pointer calls hp_store_touch afterwards.
 */
void *hp_store_data(hp_store *s, const char *name);

/*
 * Copy this rank's block of `name` out of / into host memory, wherever it lives (through the home
 * for a slow tier). hp_store_write bumps the version. Errors: HP_STATUS_NOT_FOUND; HP_STATUS_
 * INVALID_ARGUMENT when `bytes` differs from the block's (both named); the home's I/O errors.
 */
hp_status hp_store_read(hp_store *s, const char *name, void *dst, size_t bytes);
hp_status hp_store_write(hp_store *s, const char *name, const void *src, size_t bytes);
/* Bumps the version of `name` after a write through hp_store_data. Errors: HP_STATUS_NOT_FOUND. */
hp_status hp_store_touch(hp_store *s, const char *name);

/*
 * This rank's block of `name` under `layout` (NULL: replicated) in *data. The entry's own layout on
 * the device tier: its buffer, no copy. Otherwise a view the store keeps (one per entry and layout,
 * read-only for callers), refreshed by the redistribution planner (hp_redistribute_plan_make +
 * hp_redistribute_execute; a plain copy through the home for a slow-tier entry of the same layout)
 * only when the entry's version changed since the last refresh. Collective over the mesh when a
 * refresh is needed: every rank calls it for the same names in the same order (versions move in
 * step under SPMD). A program later built with the store binds a tensor of the view's local shape
 * to the view. Errors: HP_STATUS_NOT_FOUND; layout errors (hp_layout_validate); the planner's and
 * the communicator's; HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_store_view(hp_store *s, const char *name, const hp_layout *layout, void **data);

/* Refreshes every view older than its entry, entries in creation order (collective over the mesh,
 * as hp_store_view). Errors: as hp_store_view. */
hp_status hp_store_views_refresh(hp_store *s);

void hp_store_get_stats(const hp_store *s, hp_store_stats *out);

/* One line: "memory: state store N entries: device B bytes, host B, disk B; V views B bytes; R view
 * refreshes (B bytes), C copies". Write errors are ignored (the caller owns `f`). */
void hp_store_report_memory(const hp_store *s, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* HP_STORE_H */
