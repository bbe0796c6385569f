/*
 * hp/disk.h — the disk tier of HyperOffload: one file per store, O_DIRECT, asynchronous I/O.
 *
 * ZeRO-Infinity (Rajbhandari et al., SC 2021) offloads model states to NVMe with direct,
 * asynchronous, aligned I/O so the page cache does not quietly keep the data in DRAM and several
 * requests are in flight at once. A store here is one file in a user-chosen directory, opened with
 * O_DIRECT; space is handed out as 4096-aligned extents by an offset pool (hp/tier.h). I/O goes
 * through io_uring (liburing) when the build has it and the kernel allows it, and through
 * pread/pwrite otherwise (containers often forbid io_uring).
 *
 *     hp_disk_config cfg = HP_DISK_CONFIG_INIT;
 *     cfg.dir = "/scratch";                  // NULL: $TMPDIR, then /tmp
 *     cfg.capacity = 8ull << 30;             // the disk budget, bytes
 *     hp_disk *d;
 *     HP_CHECK(hp_disk_open(&cfg, &d));
 *     uint64_t off;
 *     HP_CHECK(hp_disk_alloc(d, bytes, &off));
 *     uint64_t w;
 *     HP_CHECK(hp_disk_write_async(d, off, buf, bytes, &w));
 *     HP_CHECK(hp_disk_wait(d, w));          // HP_STATUS_IO names the path and errno text
 *     hp_disk_close(d);                      // removes the file
 *
 * Alignment. Offsets given to read/write must be multiples of HP_DISK_ALIGN. Any length and any
 * buffer address are accepted: when the buffer or the length is not aligned the store goes through
 * an aligned bounce buffer. With O_DIRECT, a write whose length is not a multiple of HP_DISK_ALIGN
 * zero-fills the rest of its last block, so write whole extents or block-multiple pieces of them.
 *
 * Faults. Every I/O error returns HP_STATUS_IO with the file's path and strerror text. The store
 * grows its file when an extent beyond the current end is allocated (ftruncate); at that point it
 * also checks that the file still has a name (fstat st_nlink) — a store whose file was removed
 * mid-run fails there with HP_STATUS_IO "... was removed". (Unlinking an open file does not break
 * I/O on Linux, so data already written stays readable.) A store whose directory is gone fails at
 * hp_disk_open. The disk budget (capacity) gives HP_STATUS_OUT_OF_MEMORY naming the path; a full
 * file system or RLIMIT_FSIZE (ENOSPC/EFBIG) gives HP_STATUS_IO. hp_disk_inject_fault forces an errno
 * on a later I/O, for tests.
 *
 * Thread-safety: every function may be called from any thread; I/O calls on one store are
 * serialized by the store's mutex (the copy engine's single worker is the usual caller).
 */
#ifndef HP_DISK_H
#define HP_DISK_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Offset, length and buffer alignment for O_DIRECT, bytes. */
#define HP_DISK_ALIGN 4096u

typedef struct hp_disk_config {
    const char *dir;   /* directory for the store file; NULL: $TMPDIR, then /tmp */
    size_t capacity;   /* disk budget in bytes; 0: 1 TiB (practically the file system's size) */
    bool use_direct;   /* try O_DIRECT (default true); falls back when the file system refuses */
    bool use_uring;    /* try io_uring (default true); falls back to pread/pwrite */
    int queue_depth;   /* io_uring submission queue entries (default 64) */
    bool keep_file;    /* do not remove the file at close (default false) */
} hp_disk_config;

#define HP_DISK_CONFIG_INIT                                                                        \
    { .dir = NULL, .capacity = 0, .use_direct = true, .use_uring = true, .queue_depth = 64,        \
      .keep_file = false }

typedef struct hp_disk hp_disk;

typedef struct hp_disk_stats {
    char path[512];          /* the store file */
    bool direct;             /* O_DIRECT in effect (false: the file system refused it, e.g. tmpfs) */
    bool uring;              /* io_uring in effect (false: pread/pwrite) */
    size_t capacity;         /* bytes (the budget) */
    size_t in_use;           /* bytes in allocated extents */
    size_t peak;             /* highest in_use */
    size_t file_bytes;       /* current file length */
    uint64_t bytes_read;     /* since open */
    uint64_t bytes_written;  /* since open */
    uint64_t requests;       /* I/O requests completed */
    uint64_t bounced;        /* requests that used a bounce buffer (unaligned buffer or length) */
} hp_disk_stats;

/*
 * Creates the store file "<dir>/hp-offload-<pid>-<n>.bin" and opens it. Errors: HP_STATUS_IO naming
 * the path and errno text (missing directory, permissions), HP_STATUS_INVALID_ARGUMENT (bad config),
 * HP_STATUS_OUT_OF_MEMORY. *out owns the file until hp_disk_close.
 */
hp_status hp_disk_open(const hp_disk_config *cfg, hp_disk **out);

/* Waits for in-flight requests, closes the file and (unless keep_file) removes it. NULL allowed. */
void hp_disk_close(hp_disk *d);

/*
 * Reserves an extent of `bytes` (> 0, rounded up to HP_DISK_ALIGN) and returns its file offset.
 * Grows the file when needed. Errors: HP_STATUS_OUT_OF_MEMORY over the budget (names the path,
 * request and free bytes); HP_STATUS_IO when the file cannot grow or was removed.
 */
hp_status hp_disk_alloc(hp_disk *d, size_t bytes, uint64_t *offset);
/* Releases the extent at `offset`. HP_STATUS_INVALID_ARGUMENT if none starts there. */
hp_status hp_disk_free(hp_disk *d, uint64_t offset);

/*
 * Starts writing `bytes` from `buf` at file `offset` (a multiple of HP_DISK_ALIGN) and returns a
 * request id in *req. `buf` must stay valid and unchanged until hp_disk_wait(req) returns. With the
 * pread/pwrite fallback the I/O is done before this returns (the id is then already complete).
 * Errors: HP_STATUS_INVALID_ARGUMENT (misaligned offset, range outside the file), HP_STATUS_IO.
 * Every successful submission must be waited for exactly once.
 */
hp_status hp_disk_write_async(hp_disk *d, uint64_t offset, const void *buf, size_t bytes,
                              uint64_t *req);
/* Starts reading `bytes` at `offset` into `buf`; same rules as hp_disk_write_async. */
hp_status hp_disk_read_async(hp_disk *d, uint64_t offset, void *buf, size_t bytes, uint64_t *req);

/*
 * Waits for request `req` and returns its status: HP_STATUS_IO naming the path, the operation, the
 * offset and errno text (short transfers are retried; a zero-length read past the end is an error).
 * HP_STATUS_INVALID_ARGUMENT for an unknown id.
 */
hp_status hp_disk_wait(hp_disk *d, uint64_t req);

/* Synchronous forms: submit and wait. */
hp_status hp_disk_write(hp_disk *d, uint64_t offset, const void *buf, size_t bytes);
hp_status hp_disk_read(hp_disk *d, uint64_t offset, void *buf, size_t bytes);

/* A snapshot of the store's counters. */
void hp_disk_get_stats(hp_disk *d, hp_disk_stats *out);
/* The store file's path (valid until close). */
const char *hp_disk_path(const hp_disk *d);

/*
 * Test hook: the `after`-th next I/O request (0 = the next one) fails with `errnum` (e.g. EIO,
 * ENOSPC) instead of touching the file. errnum = 0 clears a pending fault.
 */
void hp_disk_inject_fault(hp_disk *d, int errnum, int after);

#ifdef __cplusplus
}
#endif
#endif /* HP_DISK_H */
