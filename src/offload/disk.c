/* The disk tier: one O_DIRECT file per store, extents from an offset pool, io_uring or pread. */
#include "hp/disk.h"

#include "hp/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HP_HAVE_URING
typedef struct hp__uring hp__uring;
int hp__uring_init(hp__uring **out, unsigned depth);
void hp__uring_exit(hp__uring *u);
int hp__uring_submit(hp__uring *u, int fd, bool write, void *buf, size_t len, uint64_t off,
                     uint64_t tag);
int hp__uring_wait(hp__uring *u, uint64_t *tag, int *res);
#endif

#define ALIGN_UP(x) (((x) + HP_DISK_ALIGN - 1) & ~(uint64_t)(HP_DISK_ALIGN - 1))

typedef struct req {
    uint64_t id;        /* 0: free slot */
    bool write, done, submitted;
    int err;            /* errno of the failure, 0 on success */
    uint64_t offset;
    unsigned char *user; /* caller buffer */
    size_t bytes;        /* caller length */
    unsigned char *io;   /* buffer given to the kernel: user or bounce */
    size_t io_bytes;     /* length given to the kernel */
    size_t transferred;  /* bytes completed so far */
    unsigned char *bounce;
} req;

struct hp_disk {
    char path[512];
    int fd;
    bool direct, keep;
    hp_pool *extents; /* offsets into the file */
    uint64_t file_bytes;
    pthread_mutex_t mu;
    req *reqs;
    size_t nreq;
    uint64_t next_id;
    unsigned inflight, depth;
    int fault_err, fault_after;
    uint64_t bytes_read, bytes_written, requests, bounced;
#ifdef HP_HAVE_URING
    hp__uring *ring;
#endif
};

static atomic_uint g_store_counter;

static hp_status io_error(const hp_disk *d, const char *what, uint64_t off, size_t bytes, int err) {
    return hp_error(HP_STATUS_IO, "disk tier %s: %s of %zu bytes at offset %llu failed: %s",
                    d->path, what, bytes, (unsigned long long)off, strerror(err));
}

/* Checks that O_DIRECT works for real I/O (some file systems accept the flag at open and refuse
 * the I/O with EINVAL); clears O_DIRECT when it does not. */
static hp_status check_direct(hp_disk *d) {
    void *blk = NULL;
    if (posix_memalign(&blk, HP_DISK_ALIGN, HP_DISK_ALIGN) != 0)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "disk tier %s: cannot allocate a probe block", d->path);
    memset(blk, 0, HP_DISK_ALIGN);
    ssize_t n = pwrite(d->fd, blk, HP_DISK_ALIGN, 0);
    int err = errno;
    free(blk);
    if (n < 0 && err == EINVAL && d->direct) {
        int fl = fcntl(d->fd, F_GETFL);
        if (fl < 0 || fcntl(d->fd, F_SETFL, fl & ~O_DIRECT) < 0)
            return hp_error(HP_STATUS_IO, "disk tier %s: cannot clear O_DIRECT: %s", d->path,
                            strerror(errno));
        d->direct = false;
    } else if (n < 0) {
        return io_error(d, "probe write", 0, HP_DISK_ALIGN, err);
    }
    if (ftruncate(d->fd, 0) != 0)
        return hp_error(HP_STATUS_IO, "disk tier %s: cannot truncate: %s", d->path, strerror(errno));
    return HP_STATUS_OK;
}

hp_status hp_disk_open(const hp_disk_config *cfg_in, hp_disk **out) {
    *out = NULL;
    hp_disk_config cfg = HP_DISK_CONFIG_INIT;
    if (cfg_in) cfg = *cfg_in;
    const char *dir = cfg.dir;
    if (!dir || !*dir) dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    if (cfg.queue_depth <= 0 || cfg.queue_depth > 4096)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "disk tier: queue_depth %d is not in [1, 4096]",
                        cfg.queue_depth);
    size_t cap = cfg.capacity ? cfg.capacity : (size_t)1 << 40;
    cap = ALIGN_UP(cap);
    hp_disk *d = calloc(1, sizeof *d);
    if (!d) return hp_error(HP_STATUS_OUT_OF_MEMORY, "disk tier: cannot allocate the store");
    d->fd = -1;
    d->keep = cfg.keep_file;
    d->depth = (unsigned)cfg.queue_depth;
    d->next_id = 1;
    int len = snprintf(d->path, sizeof d->path, "%s/hp-offload-%ld-%u.bin", dir, (long)getpid(),
                       atomic_fetch_add(&g_store_counter, 1));
    if (len < 0 || (size_t)len >= sizeof d->path) {
        free(d);
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "disk tier: directory path '%s' is too long", dir);
    }
    hp_status st = hp_pool_new(HP_TIER_DISK, cap, HP_DISK_ALIGN, false, &d->extents);
    if (st != HP_STATUS_OK) {
        free(d);
        return st;
    }
    int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    d->direct = cfg.use_direct;
    d->fd = open(d->path, flags | (d->direct ? O_DIRECT : 0), 0600);
    if (d->fd < 0 && d->direct && errno == EINVAL) { /* e.g. tmpfs refuses O_DIRECT */
        d->direct = false;
        d->fd = open(d->path, flags, 0600);
    }
    if (d->fd < 0) {
        st = hp_error(HP_STATUS_IO, "disk tier: cannot create store file %s: %s", d->path,
                      strerror(errno));
        hp_pool_destroy(d->extents);
        free(d);
        return st;
    }
    pthread_mutex_init(&d->mu, NULL);
    st = check_direct(d);
    if (st != HP_STATUS_OK) {
        hp_disk_close(d);
        return st;
    }
#ifdef HP_HAVE_URING
    if (cfg.use_uring) {
        if (hp__uring_init(&d->ring, d->depth) != 0) d->ring = NULL; /* fall back to pread/pwrite */
    }
#endif
    *out = d;
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- request table */

static req *find_req(hp_disk *d, uint64_t id) {
    for (size_t i = 0; i < d->nreq; i++)
        if (d->reqs[i].id == id) return &d->reqs[i];
    return NULL;
}

static req *new_req(hp_disk *d) {
    for (size_t i = 0; i < d->nreq; i++)
        if (d->reqs[i].id == 0) return &d->reqs[i];
    size_t n = d->nreq ? d->nreq * 2 : 16;
    req *r = realloc(d->reqs, n * sizeof *r);
    if (!r) return NULL;
    memset(r + d->nreq, 0, (n - d->nreq) * sizeof *r);
    d->reqs = r;
    size_t first = d->nreq;
    d->nreq = n;
    return &d->reqs[first];
}

static void release_req(req *r) {
    free(r->bounce);
    memset(r, 0, sizeof *r);
}

/* Synchronous transfer of the rest of r (pread/pwrite, retrying short transfers). */
static void run_sync(hp_disk *d, req *r) {
    while (r->transferred < r->io_bytes) {
        size_t left = r->io_bytes - r->transferred;
        ssize_t n = r->write ? pwrite(d->fd, r->io + r->transferred, left, (off_t)(r->offset + r->transferred))
                             : pread(d->fd, r->io + r->transferred, left, (off_t)(r->offset + r->transferred));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            r->err = errno;
            break;
        }
        if (n == 0) { /* end of file on read, or a write that makes no progress */
            r->err = r->write ? ENOSPC : EIO;
            break;
        }
        r->transferred += (size_t)n;
    }
    r->done = true;
}

#ifdef HP_HAVE_URING
/* Processes one completion from the ring. Caller holds the mutex. */
static int reap_one(hp_disk *d) {
    uint64_t tag = 0;
    int res = 0;
    int rc = hp__uring_wait(d->ring, &tag, &res);
    if (rc < 0) return rc;
    d->inflight--;
    req *r = find_req(d, tag);
    if (!r) return 0; /* a completion for a request whose slot was released (cannot happen) */
    if (res < 0) {
        r->err = -res;
        r->done = true;
    } else if (res == 0) {
        r->err = r->write ? ENOSPC : EIO;
        r->done = true;
    } else {
        r->transferred += (size_t)res;
        if (r->transferred >= r->io_bytes) {
            r->done = true;
        } else {
            int s = hp__uring_submit(d->ring, d->fd, r->write, r->io + r->transferred,
                                     r->io_bytes - r->transferred, r->offset + r->transferred, r->id);
            if (s < 0) run_sync(d, r); /* finish the short transfer synchronously */
            else d->inflight++;
        }
    }
    return 0;
}
#endif

static hp_status submit(hp_disk *d, bool write, uint64_t offset, void *buf, size_t bytes,
                        uint64_t *id) {
    *id = 0;
    const char *what = write ? "write" : "read";
    if (offset % HP_DISK_ALIGN != 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "disk tier %s: %s offset %llu is not a multiple of %u", d->path, what,
                        (unsigned long long)offset, HP_DISK_ALIGN);
    if (bytes == 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "disk tier %s: %s of 0 bytes", d->path, what);
    if (!buf) return hp_error(HP_STATUS_INVALID_ARGUMENT, "disk tier %s: %s with a NULL buffer", d->path, what);
    pthread_mutex_lock(&d->mu);
    hp_status st = HP_STATUS_OK;
    if (offset + bytes > d->file_bytes) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT,
                      "disk tier %s: %s of %zu bytes at offset %llu is outside the file (%llu bytes)",
                      d->path, what, bytes, (unsigned long long)offset,
                      (unsigned long long)d->file_bytes);
        goto out;
    }
    req *r = new_req(d);
    if (!r) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "disk tier %s: cannot grow the request table", d->path);
        goto out;
    }
    *r = (req){.id = d->next_id++, .write = write, .offset = offset, .user = buf, .bytes = bytes,
               .io = buf, .io_bytes = bytes};
    bool aligned = ((uintptr_t)buf % HP_DISK_ALIGN) == 0 && bytes % HP_DISK_ALIGN == 0;
    if (d->direct && !aligned) {
        r->io_bytes = ALIGN_UP(bytes);
        void *b = NULL;
        if (posix_memalign(&b, HP_DISK_ALIGN, r->io_bytes) != 0) {
            release_req(r);
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "disk tier %s: cannot allocate a %zu-byte bounce buffer",
                          d->path, ALIGN_UP(bytes));
            goto out;
        }
        r->bounce = b;
        r->io = b;
        if (write) {
            memcpy(b, buf, bytes);
            memset(r->bounce + bytes, 0, r->io_bytes - bytes);
        }
        d->bounced++;
    }
    *id = r->id;
    if (d->fault_err != 0) {
        if (d->fault_after == 0) {
            r->err = d->fault_err;
            r->done = true;
            d->fault_err = 0;
            goto out;
        }
        d->fault_after--;
    }
#ifdef HP_HAVE_URING
    if (d->ring) {
        while (d->inflight >= d->depth) {
            if (reap_one(d) < 0) break;
        }
        int rc = hp__uring_submit(d->ring, d->fd, write, r->io, r->io_bytes, offset, r->id);
        if (rc == 0) {
            d->inflight++;
            goto out;
        }
        /* The ring refused (full or broken): do this one synchronously. */
    }
#endif
    run_sync(d, r);
out:
    pthread_mutex_unlock(&d->mu);
    return st;
}

hp_status hp_disk_write_async(hp_disk *d, uint64_t offset, const void *buf, size_t bytes,
                              uint64_t *req_id) {
    return submit(d, true, offset, (void *)buf, bytes, req_id);
}

hp_status hp_disk_read_async(hp_disk *d, uint64_t offset, void *buf, size_t bytes, uint64_t *req_id) {
    return submit(d, false, offset, buf, bytes, req_id);
}

hp_status hp_disk_wait(hp_disk *d, uint64_t id) {
    pthread_mutex_lock(&d->mu);
    req *r = find_req(d, id);
    if (!r || id == 0) {
        pthread_mutex_unlock(&d->mu);
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "disk tier %s: unknown request id %llu", d->path,
                        (unsigned long long)id);
    }
    while (!r->done) {
#ifdef HP_HAVE_URING
        int rc = d->ring ? reap_one(d) : -EINVAL;
        if (rc < 0) {
            r->err = -rc;
            r->done = true;
        }
        r = find_req(d, id); /* reap_one does not move slots, but stay safe */
#else
        r->done = true;
#endif
    }
    hp_status st = HP_STATUS_OK;
    if (r->err != 0) {
        st = io_error(d, r->write ? "write" : "read", r->offset, r->bytes, r->err);
    } else {
        if (!r->write && r->bounce) memcpy(r->user, r->bounce, r->bytes);
        if (r->write) d->bytes_written += r->bytes;
        else d->bytes_read += r->bytes;
    }
    d->requests++;
    release_req(r);
    pthread_mutex_unlock(&d->mu);
    return st;
}

hp_status hp_disk_write(hp_disk *d, uint64_t offset, const void *buf, size_t bytes) {
    uint64_t id;
    HP_CHECK(hp_disk_write_async(d, offset, buf, bytes, &id));
    return hp_disk_wait(d, id);
}

hp_status hp_disk_read(hp_disk *d, uint64_t offset, void *buf, size_t bytes) {
    uint64_t id;
    HP_CHECK(hp_disk_read_async(d, offset, buf, bytes, &id));
    return hp_disk_wait(d, id);
}

/* ---------------------------------------------------------------- extents */

hp_status hp_disk_alloc(hp_disk *d, size_t bytes, uint64_t *offset) {
    size_t off = 0;
    hp_status st = hp_pool_alloc(d->extents, bytes, &off);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "store %s: ", d->path);
    uint64_t end = off + ALIGN_UP(bytes);
    pthread_mutex_lock(&d->mu);
    if (end > d->file_bytes) {
        struct stat sb;
        if (fstat(d->fd, &sb) != 0) {
            st = hp_error(HP_STATUS_IO, "disk tier %s: fstat failed: %s", d->path, strerror(errno));
        } else if (sb.st_nlink == 0) {
            st = hp_error(HP_STATUS_IO, "disk tier %s: the store file was removed while in use: %s",
                          d->path, strerror(ENOENT));
        } else {
            /* Reserve real blocks so a full disk shows here rather than in a later write. */
            int rc = posix_fallocate(d->fd, (off_t)d->file_bytes, (off_t)(end - d->file_bytes));
            if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(d->fd, (off_t)end) == 0 ? 0 : errno;
            if (rc != 0)
                st = hp_error(HP_STATUS_IO, "disk tier %s: cannot grow the file to %llu bytes: %s",
                              d->path, (unsigned long long)end, strerror(rc));
            else d->file_bytes = end;
        }
    }
    pthread_mutex_unlock(&d->mu);
    if (st != HP_STATUS_OK) {
        hp_pool_free(d->extents, off);
        return st;
    }
    *offset = off;
    return HP_STATUS_OK;
}

hp_status hp_disk_free(hp_disk *d, uint64_t offset) {
    hp_status st = hp_pool_free(d->extents, (size_t)offset);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "store %s: ", d->path);
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- misc */

void hp_disk_close(hp_disk *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
#ifdef HP_HAVE_URING
    while (d->ring && d->inflight > 0) {
        if (reap_one(d) < 0) break;
    }
    hp__uring_exit(d->ring);
#endif
    for (size_t i = 0; i < d->nreq; i++)
        if (d->reqs[i].id) release_req(&d->reqs[i]);
    pthread_mutex_unlock(&d->mu);
    if (d->fd >= 0) close(d->fd);
    if (!d->keep) unlink(d->path); /* may already be gone; nothing to report from a destructor */
    pthread_mutex_destroy(&d->mu);
    hp_pool_destroy(d->extents);
    free(d->reqs);
    free(d);
}

void hp_disk_get_stats(hp_disk *d, hp_disk_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&d->mu);
    snprintf(out->path, sizeof out->path, "%s", d->path);
    out->direct = d->direct;
#ifdef HP_HAVE_URING
    out->uring = d->ring != NULL;
#endif
    out->capacity = hp_pool_capacity(d->extents);
    out->in_use = hp_pool_in_use(d->extents);
    out->peak = hp_pool_peak(d->extents);
    out->file_bytes = (size_t)d->file_bytes;
    out->bytes_read = d->bytes_read;
    out->bytes_written = d->bytes_written;
    out->requests = d->requests;
    out->bounced = d->bounced;
    pthread_mutex_unlock(&d->mu);
}

const char *hp_disk_path(const hp_disk *d) { return d->path; }

void hp_disk_inject_fault(hp_disk *d, int errnum, int after) {
    pthread_mutex_lock(&d->mu);
    d->fault_err = errnum;
    d->fault_after = after < 0 ? 0 : after;
    pthread_mutex_unlock(&d->mu);
}
