/*
 * hp/tier.h — HyperOffload memory tiers: descriptors, a bandwidth probe and fixed-capacity pools.
 *
 * HyperOffload treats the fast memory that kernels compute from as a cache over slower, larger
 * tiers (the HyperParallel paper, section 3.2; ZeRO-Offload, Ren et al., ATC 2021; ZeRO-Infinity,
 * Rajbhandari et al., SC 2021). The planner only sees a list of tiers, each with a capacity and a
 * read/write bandwidth; the runtime gives each tier a pool that counts the bytes in use and the peak.
 *
 * On the CPU backend the tiers are: DEVICE = DRAM under a user-set budget (what kernels use), HOST =
 * the rest of DRAM, DISK = an SSD file (see hp/disk.h). On CUDA they are HBM, pinned host and SSD.
 *
 *     hp_tier_list tiers;
 *     hp_tier_list_init(&tiers);                       // unbounded, bandwidths unknown (0)
 *     tiers.tier[HP_TIER_DEVICE].capacity = 1 << 30;   // 1 GiB device budget
 *     HP_CHECK(hp_tier_probe(&tiers, HP_TIER_HOST, NULL, 0));   // measure memcpy bandwidth
 *
 *     hp_pool *pool;
 *     HP_CHECK(hp_pool_new(HP_TIER_DEVICE, 1 << 30, 64, true, &pool));
 *     size_t off;
 *     HP_CHECK(hp_pool_alloc(pool, 4096, &off));       // HP_STATUS_OUT_OF_MEMORY over budget
 *     float *x = hp_pool_ptr(pool, off);
 *     hp_pool_free(pool, off);
 *     hp_pool_destroy(pool);
 */
#ifndef HP_TIER_H
#define HP_TIER_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tier descriptors */

/* One memory tier as the offload planner sees it. */
typedef struct hp_tier_desc {
    hp_tier kind;      /* HP_TIER_DEVICE, HP_TIER_HOST or HP_TIER_DISK */
    size_t capacity;   /* bytes the tier may hold; SIZE_MAX means unbounded */
    double read_bw;    /* bytes/s moving data out of this tier into the device tier; 0 = unknown */
    double write_bw;   /* bytes/s moving data from the device tier into this tier; 0 = unknown */
    bool measured;     /* true when read_bw/write_bw come from hp_tier_probe, false if configured */
} hp_tier_desc;

/* The tiers of one rank, indexed by hp_tier. */
typedef struct hp_tier_list {
    hp_tier_desc tier[HP_TIER_COUNT];
} hp_tier_list;

/* Fills every tier with kind = its index, capacity = SIZE_MAX, bandwidths 0 (unknown). */
void hp_tier_list_init(hp_tier_list *list);

/*
 * Measures read and write bandwidth of tier `kind` and stores them in list->tier[kind] (measured =
 * true). DEVICE and HOST: a memcpy of `probe_bytes` between two fresh buffers, best of three.
 * DISK: an O_DIRECT write then read of `probe_bytes` through a temporary disk store in `disk_dir`
 * (NULL: $TMPDIR, then /tmp); the file is removed afterwards. probe_bytes = 0 picks 64 MiB for
 * memory and 16 MiB for disk, so the probe stays under about a second; it is capped at 256 MiB.
 * Errors: HP_STATUS_INVALID_ARGUMENT (bad kind), HP_STATUS_OUT_OF_MEMORY, HP_STATUS_IO (disk; the
 * message names the path). Not thread-safe with respect to `list`.
 */
hp_status hp_tier_probe(hp_tier_list *list, hp_tier kind, const char *disk_dir, size_t probe_bytes);

/*
 * Predicted seconds to move `bytes` from tier `src` to tier `dst` using the list's bandwidths:
 * bytes / read_bw(src) when dst is DEVICE, bytes / write_bw(dst) when src is DEVICE, and the sum of
 * both legs otherwise (HOST <-> DISK goes through one staging hop on CPU). Returns 0 when a needed
 * bandwidth is unknown (0) or src == dst.
 */
double hp_tier_transfer_seconds(const hp_tier_list *list, hp_tier src, hp_tier dst, size_t bytes);

/* ---------------------------------------------------------------- pools */

/*
 * A fixed-capacity pool over one region of `capacity` bytes: blocks are offsets into the region,
 * found best-fit in an offset-sorted segment list, split on allocation and coalesced with free
 * neighbours on release (the classic boundary-tag allocator, Knuth TAOCP 2.5). The pool counts bytes
 * in use and the peak; requests are rounded up to the pool's alignment and counted rounded.
 *
 * With `with_memory` the pool owns a real region, allocated once through hp_mem_alloc(tier, ...)
 * (so hp_mem_in_use(tier) counts the whole budget) and aligned to max(alignment, 64); without it the
 * pool only hands out offsets (used by the disk store for extents in its file).
 *
 * Thread-safe: every function takes the pool's mutex.
 */
typedef struct hp_pool hp_pool;

/*
 * New pool for `tier` of `capacity` bytes (> 0) whose offsets are multiples of `alignment` (a power
 * of two, 1..1 MiB; 0 picks 64). Errors: HP_STATUS_INVALID_ARGUMENT naming the bad value,
 * HP_STATUS_OUT_OF_MEMORY when the region cannot be allocated.
 */
hp_status hp_pool_new(hp_tier tier, size_t capacity, size_t alignment, bool with_memory,
                      hp_pool **out);
/* Frees the region and the pool. Outstanding blocks become invalid. NULL is allowed. */
void hp_pool_destroy(hp_pool *pool);

/*
 * Reserves `bytes` (> 0, rounded up to the alignment) and stores the block's offset in *offset.
 * Errors: HP_STATUS_INVALID_ARGUMENT for bytes == 0; HP_STATUS_OUT_OF_MEMORY when no free segment is
 * large enough — the message names the tier, the request, the free bytes and the largest free
 * segment (free bytes can exceed the request when the pool is fragmented).
 */
hp_status hp_pool_alloc(hp_pool *pool, size_t bytes, size_t *offset);

/*
 * Releases the block that starts at `offset`. Errors: HP_STATUS_INVALID_ARGUMENT when no allocated
 * block starts there (double free or a wrong offset); the pool is unchanged then.
 */
hp_status hp_pool_free(hp_pool *pool, size_t offset);

/* Pointer to `offset` inside the region; NULL for a pool without memory. */
void *hp_pool_ptr(const hp_pool *pool, size_t offset);
/* Offset of a pointer inside the region, or SIZE_MAX if it is not inside (or there is no memory). */
size_t hp_pool_offset_of(const hp_pool *pool, const void *p);

hp_tier hp_pool_tier(const hp_pool *pool);
size_t hp_pool_capacity(const hp_pool *pool);   /* bytes */
size_t hp_pool_alignment(const hp_pool *pool);  /* bytes */
size_t hp_pool_in_use(const hp_pool *pool);     /* bytes in allocated blocks now (rounded sizes) */
size_t hp_pool_peak(const hp_pool *pool);       /* highest in_use since creation or the last reset */
size_t hp_pool_largest_free(const hp_pool *pool); /* bytes in the largest free segment */
/* Size in bytes (rounded) of the allocated block at `offset`, 0 if none starts there. */
size_t hp_pool_block_size(const hp_pool *pool, size_t offset);
void hp_pool_reset_peak(hp_pool *pool);

#ifdef __cplusplus
}
#endif
#endif /* HP_TIER_H */
