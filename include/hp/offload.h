/*
 * hp/offload.h — HyperOffload's manual API (dynamic mode): move tensors between tiers explicitly,
 * and pack/unpack hooks for tensors saved for backward.
 *
 * The offload planner inserts prefetch/offload operators into the graph; code outside the planner
 * (custom layers, an eager training loop) uses this API instead. A tensor handle owns the tensor's
 * bytes on exactly one tier at a time and knows where they are; moves are non-blocking, run on the
 * copy stream (hp/copy_engine.h) and complete with an event. The hooks follow PyTorch's
 * saved_tensors_hooks (torch.autograd.graph.saved_tensors_hooks / save_on_cpu): what autodiff saves
 * for backward is passed through pack at save time and unpack at use time, so activations can live
 * on the host or disk between forward and backward (activation offloading as in ZeRO-Offload and
 * ZeRO-Infinity; the HyperParallel paper, section 3.2).
 *
 *     hp_offload_config cfg = HP_OFFLOAD_CONFIG_INIT;
 *     cfg.device_capacity = 256 << 20;            // the device budget, bytes
 *     hp_offload_ctx *ctx;
 *     HP_CHECK(hp_offload_ctx_new(&cfg, &ctx));
 *     hp_tensor_handle *h;
 *     HP_CHECK(hp_tensor_handle_new(ctx, bytes, HP_TIER_DEVICE, &h));
 *     void *x;
 *     HP_CHECK(hp_tensor_handle_data(h, &x));      // fill x ...
 *     HP_CHECK(hp_offload_tensor(h, HP_TIER_DISK)); // returns at once; device bytes freed later
 *     ...                                          // compute something else
 *     HP_CHECK(hp_prefetch_tensor(h, HP_TIER_DEVICE));
 *     HP_CHECK(hp_tensor_handle_data(h, &x));      // waits for the prefetch
 *     hp_tensor_handle_free(h);
 *     hp_offload_ctx_free(ctx);
 *
 * Thread-safety: a context may be used from several threads; one handle must not be used from two
 * threads at once. Saved-tensor hook stacks are per thread.
 */
#ifndef HP_OFFLOAD_H
#define HP_OFFLOAD_H

#include "hp/copy_engine.h"
#include "hp/core.h"
#include "hp/disk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_offload_config {
    size_t device_capacity;      /* device-tier budget in bytes (a pool); 0: unbounded */
    size_t host_capacity;        /* host-tier budget in bytes (a pool); 0: unbounded */
    const char *disk_dir;        /* directory of the disk store; NULL: $TMPDIR, then /tmp */
    size_t disk_capacity;        /* disk budget in bytes; 0: see hp_disk_config */
    hp_copy_engine *copy_engine; /* copy stream to use (not owned); NULL: the context makes one */
    hp_disk *disk;               /* disk store to use (not owned); NULL: opened on first disk use */
} hp_offload_config;

#define HP_OFFLOAD_CONFIG_INIT                                                                     \
    { .device_capacity = 0, .host_capacity = 0, .disk_dir = NULL, .disk_capacity = 0,             \
      .copy_engine = NULL, .disk = NULL }

typedef struct hp_offload_ctx hp_offload_ctx;
typedef struct hp_tensor_handle hp_tensor_handle;

/*
 * A context: budgets (pools) for the memory tiers, the disk store, the copy stream. Errors:
 * HP_STATUS_OUT_OF_MEMORY (a budget region cannot be allocated), HP_STATUS_INVALID_ARGUMENT.
 */
hp_status hp_offload_ctx_new(const hp_offload_config *cfg, hp_offload_ctx **out);
/* Waits for all copies, then frees the context. Every handle must be freed first. NULL allowed. */
void hp_offload_ctx_free(hp_offload_ctx *ctx);
hp_copy_engine *hp_offload_ctx_copy_engine(hp_offload_ctx *ctx);
/* The disk store, or NULL when none is open yet. */
hp_disk *hp_offload_ctx_disk(hp_offload_ctx *ctx);
/* Bytes held by handles on `tier` now / at the peak (storage of pending moves included). */
size_t hp_offload_ctx_in_use(hp_offload_ctx *ctx, hp_tier tier);
size_t hp_offload_ctx_peak(hp_offload_ctx *ctx, hp_tier tier);
/*
 * Releases the source storage of every completed move (moves release their source lazily, when the
 * handle is next used or here). Returns the first failed move's error. Called automatically when an
 * allocation on a budgeted tier does not fit.
 */
hp_status hp_offload_ctx_reclaim(hp_offload_ctx *ctx);

/* ---------------------------------------------------------------- tensor handles */

/*
 * A handle that owns `bytes` (> 0) of uninitialized storage on `tier`. Errors:
 * HP_STATUS_OUT_OF_MEMORY naming the tier, the request and the free bytes (budgets, disk capacity),
 * HP_STATUS_IO (disk store), HP_STATUS_INVALID_ARGUMENT.
 */
hp_status hp_tensor_handle_new(hp_offload_ctx *ctx, size_t bytes, hp_tier tier, hp_tensor_handle **out);
/* Waits for a pending move and releases all storage. NULL is allowed. */
void hp_tensor_handle_free(hp_tensor_handle *h);

/* The tier the handle lives on (the destination of the last move, even while it is in flight). */
hp_tier hp_tensor_handle_tier(const hp_tensor_handle *h);
size_t hp_tensor_handle_bytes(const hp_tensor_handle *h);
/* Where the bytes are (an address, or a store and offset). */
hp_loc hp_tensor_handle_loc(const hp_tensor_handle *h);
/* The event of the last move (never NULL; complete when there was none). Owned by the handle. */
hp_event *hp_tensor_handle_event(hp_tensor_handle *h);

/* Blocks until the last move has completed and releases its source; returns the move's error
 * (the handle then stays where it was before the failed move, its data intact). */
hp_status hp_tensor_handle_wait(hp_tensor_handle *h);

/*
 * The address of the bytes on a memory tier, after waiting for a pending move. Valid until the next
 * move or free. Errors: HP_STATUS_INVALID_ARGUMENT when the handle is on the disk tier (prefetch it
 * first), a failed move's error.
 */
hp_status hp_tensor_handle_data(hp_tensor_handle *h, void **data);

/*
 * Moves the handle to the slower tier `dst` (DEVICE -> HOST -> DISK), non-blocking: allocates on
 * `dst`, queues the copy, and records the handle's event; the source storage is released once the
 * copy completes (lazily: see hp_offload_ctx_reclaim). A move on a handle whose previous move is
 * still pending first waits for it. Moving to the tier it is on is a no-op. Errors:
 * HP_STATUS_INVALID_ARGUMENT when `dst` is not slower; HP_STATUS_OUT_OF_MEMORY / HP_STATUS_IO from
 * the allocation on `dst` (the handle is unchanged then).
 */
hp_status hp_offload_tensor(hp_tensor_handle *h, hp_tier dst);
/* Moves the handle to the faster tier `dst`; otherwise as hp_offload_tensor. */
hp_status hp_prefetch_tensor(hp_tensor_handle *h, hp_tier dst);

/* ---------------------------------------------------------------- saved-tensor hooks */

/*
 * A pack/unpack pair for tensors saved for backward.
 *  pack:     called at save time with the tensor's bytes; returns an opaque `packed` object. The
 *            caller may reuse `data` once *keep_until completes (NULL: at once); the event is owned
 *            by the packed object.
 *  prefetch: optional hint, called ahead of use (e.g. one layer early in backward) to start
 *            bringing the tensor back; may be NULL.
 *  unpack:   called at use time; returns the tensor's bytes in device-tier memory owned by the packed
 *            object, valid until release. May block until the bytes are there.
 *  release:  frees the packed object (after unpack, or when backward never comes).
 */
typedef struct hp_saved_tensor_hooks {
    hp_status (*pack)(void *user, const void *data, size_t bytes, void **packed, hp_event **keep_until);
    hp_status (*prefetch)(void *user, void *packed);
    hp_status (*unpack)(void *user, void *packed, const void **data);
    void (*release)(void *user, void *packed);
    void *user;
} hp_saved_tensor_hooks;

/*
 * Pushes / pops hooks on the calling thread's stack (at most 16 deep; torch's context manager).
 * Errors: HP_STATUS_INVALID_ARGUMENT (pack, unpack or release NULL; stack full; pop on empty).
 */
hp_status hp_saved_tensor_hooks_push(const hp_saved_tensor_hooks *hooks);
hp_status hp_saved_tensor_hooks_pop(void);

/* A saved tensor: the packed object and the hooks that were on top of the stack when it was saved. */
typedef struct hp_saved_tensor hp_saved_tensor;

/*
 * Saves `bytes` at `data` for backward through the top hooks; with no hooks the saved tensor just
 * refers to `data` (which must then stay valid and unchanged until unpack). *keep_until (may be NULL
 * when not wanted) receives the event after which `data` may be reused, or NULL for at once.
 */
hp_status hp_saved_tensor_pack(const void *data, size_t bytes, hp_saved_tensor **out,
                               hp_event **keep_until);
/* Starts bringing the tensor back (no-op without a prefetch hook). */
hp_status hp_saved_tensor_prefetch(hp_saved_tensor *s);
/* The tensor's bytes (device-tier memory), valid until hp_saved_tensor_free. */
hp_status hp_saved_tensor_unpack(hp_saved_tensor *s, const void **data);
size_t hp_saved_tensor_bytes(const hp_saved_tensor *s);
/* Releases the packed object. NULL is allowed. */
void hp_saved_tensor_free(hp_saved_tensor *s);

/*
 * The default pair: pack copies the tensor into a handle on `tier` (HOST or DISK) asynchronously
 * (keep_until = the copy's event); prefetch starts the move back to the device tier; unpack waits
 * for it (prefetching first when the hint was not given); release frees the handle. `ctx` must
 * outlive every tensor packed with these hooks.
 */
hp_saved_tensor_hooks hp_offload_default_hooks(hp_offload_ctx *ctx, hp_tier tier);

#ifdef __cplusplus
}
#endif
#endif /* HP_OFFLOAD_H */
