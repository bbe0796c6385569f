/* HyperOffload tiers: descriptors, bandwidth probe, fixed-capacity best-fit pools. */
#include "hp/tier.h"

#include "hp/disk.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- descriptors */

void hp_tier_list_init(hp_tier_list *list) {
    for (int t = 0; t < HP_TIER_COUNT; t++) {
        list->tier[t] = (hp_tier_desc){.kind = (hp_tier)t, .capacity = SIZE_MAX};
    }
}

static hp_status probe_memory(hp_tier kind, size_t bytes, double *rd, double *wr) {
    unsigned char *a = hp_mem_alloc(kind, bytes);
    if (!a) return HP_STATUS_OUT_OF_MEMORY;
    unsigned char *b = hp_mem_alloc(kind, bytes);
    if (!b) {
        hp_mem_free(kind, a, bytes);
        return HP_STATUS_OUT_OF_MEMORY;
    }
    memset(a, 1, bytes); /* touch the pages so the timing does not count page faults */
    memset(b, 2, bytes);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = hp_now_seconds();
        memcpy(rep % 2 ? a : b, rep % 2 ? b : a, bytes);
        double dt = hp_now_seconds() - t0;
        if (dt > 0 && (best == 0 || dt < best)) best = dt;
    }
    hp_mem_free(kind, a, bytes);
    hp_mem_free(kind, b, bytes);
    double bw = best > 0 ? (double)bytes / best : 0;
    *rd = bw;
    *wr = bw;
    return HP_STATUS_OK;
}

static hp_status probe_disk(const char *dir, size_t bytes, double *rd, double *wr) {
    hp_disk_config cfg = HP_DISK_CONFIG_INIT;
    cfg.dir = dir;
    cfg.capacity = bytes;
    hp_disk *d = NULL;
    HP_CHECK(hp_disk_open(&cfg, &d));
    hp_status st = HP_STATUS_OK;
    unsigned char *raw = hp_mem_alloc(HP_TIER_HOST, bytes + HP_DISK_ALIGN);
    if (!raw) {
        hp_disk_close(d);
        return HP_STATUS_OUT_OF_MEMORY;
    }
    unsigned char *buf =
        (unsigned char *)(((uintptr_t)raw + HP_DISK_ALIGN - 1) & ~(uintptr_t)(HP_DISK_ALIGN - 1));
    memset(buf, 0x5a, bytes);
    uint64_t off = 0;
    HP_CHECK_GOTO(hp_disk_alloc(d, bytes, &off), st, done);
    /* Requests of 1 MiB, several in flight, like the copy engine issues them. */
    const size_t piece = (size_t)1 << 20;
    size_t n = (bytes + piece - 1) / piece;
    uint64_t *reqs = calloc(n, sizeof *reqs);
    if (!reqs) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "disk probe: cannot allocate %zu request ids", n);
        goto done;
    }
    for (int pass = 0; pass < 2 && st == HP_STATUS_OK; pass++) {
        double t0 = hp_now_seconds();
        size_t submitted = 0;
        for (size_t i = 0; i < n; i++) {
            size_t len = bytes - i * piece < piece ? bytes - i * piece : piece;
            st = pass == 0 ? hp_disk_write_async(d, off + i * piece, buf + i * piece, len, &reqs[i])
                           : hp_disk_read_async(d, off + i * piece, buf + i * piece, len, &reqs[i]);
            if (st != HP_STATUS_OK) break;
            submitted++;
        }
        for (size_t i = 0; i < submitted; i++) {
            hp_status s2 = hp_disk_wait(d, reqs[i]);
            if (st == HP_STATUS_OK) st = s2;
        }
        double dt = hp_now_seconds() - t0;
        double bw = dt > 0 ? (double)bytes / dt : 0;
        if (pass == 0) *wr = bw;
        else *rd = bw;
    }
    free(reqs);
done:
    hp_mem_free(HP_TIER_HOST, raw, bytes + HP_DISK_ALIGN);
    hp_disk_close(d);
    return st;
}

hp_status hp_tier_probe(hp_tier_list *list, hp_tier kind, const char *disk_dir, size_t probe_bytes) {
    if ((int)kind < 0 || kind >= HP_TIER_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_tier_probe: tier %d is not a tier", (int)kind);
    const size_t cap = (size_t)256 << 20;
    if (probe_bytes == 0) probe_bytes = kind == HP_TIER_DISK ? (size_t)16 << 20 : (size_t)64 << 20;
    if (probe_bytes > cap) probe_bytes = cap;
    double rd = 0, wr = 0;
    if (kind == HP_TIER_DISK) {
        probe_bytes = (probe_bytes + HP_DISK_ALIGN - 1) & ~(size_t)(HP_DISK_ALIGN - 1);
        HP_CHECK(probe_disk(disk_dir, probe_bytes, &rd, &wr));
    } else {
        HP_CHECK(probe_memory(kind, probe_bytes, &rd, &wr));
    }
    list->tier[kind].read_bw = rd;
    list->tier[kind].write_bw = wr;
    list->tier[kind].measured = true;
    return HP_STATUS_OK;
}

double hp_tier_transfer_seconds(const hp_tier_list *list, hp_tier src, hp_tier dst, size_t bytes) {
    if (src == dst || (int)src < 0 || src >= HP_TIER_COUNT || (int)dst < 0 || dst >= HP_TIER_COUNT)
        return 0;
    double s = 0;
    if (src != HP_TIER_DEVICE) {
        double bw = list->tier[src].read_bw;
        if (bw <= 0) return 0;
        s += (double)bytes / bw;
    }
    if (dst != HP_TIER_DEVICE) {
        double bw = list->tier[dst].write_bw;
        if (bw <= 0) return 0;
        s += (double)bytes / bw;
    }
    return s;
}

/* ---------------------------------------------------------------- pools */

typedef struct seg {
    size_t off, size;
    bool used;
} seg;

struct hp_pool {
    hp_tier tier;
    size_t capacity, align;
    unsigned char *raw, *base; /* raw: what hp_mem_alloc returned; base: aligned start */
    size_t raw_bytes;
    seg *segs; /* sorted by offset, covering [0, capacity) */
    size_t nseg, segcap;
    size_t in_use, peak;
    pthread_mutex_t mu;
};

hp_status hp_pool_new(hp_tier tier, size_t capacity, size_t alignment, bool with_memory,
                      hp_pool **out) {
    *out = NULL;
    if ((int)tier < 0 || tier >= HP_TIER_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_pool_new: tier %d is not a tier", (int)tier);
    if (alignment == 0) alignment = 64;
    if ((alignment & (alignment - 1)) != 0 || alignment > ((size_t)1 << 20))
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "hp_pool_new: alignment %zu is not a power of two in [1, 1 MiB]", alignment);
    if (capacity == 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_pool_new: %s pool capacity is 0 bytes",
                        hp_tier_name(tier));
    capacity &= ~(alignment - 1);
    if (capacity == 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "hp_pool_new: %s pool capacity is smaller than the alignment %zu",
                        hp_tier_name(tier), alignment);
    hp_pool *p = calloc(1, sizeof *p);
    if (!p) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_pool_new: cannot allocate the pool");
    p->tier = tier;
    p->capacity = capacity;
    p->align = alignment;
    p->segcap = 16;
    p->segs = malloc(p->segcap * sizeof *p->segs);
    if (!p->segs) {
        free(p);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_pool_new: cannot allocate the segment list");
    }
    p->segs[0] = (seg){0, capacity, false};
    p->nseg = 1;
    if (with_memory) {
        size_t a = alignment > 64 ? alignment : 64;
        p->raw_bytes = capacity + (a > 64 ? a : 0);
        p->raw = hp_mem_alloc(tier, p->raw_bytes);
        if (!p->raw) {
            free(p->segs);
            free(p);
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_pool_new: cannot allocate the %s region of %zu bytes",
                            hp_tier_name(tier), capacity);
        }
        p->base = (unsigned char *)(((uintptr_t)p->raw + a - 1) & ~(uintptr_t)(a - 1));
    }
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return HP_STATUS_OK;
}

void hp_pool_destroy(hp_pool *p) {
    if (!p) return;
    if (p->raw) hp_mem_free(p->tier, p->raw, p->raw_bytes);
    pthread_mutex_destroy(&p->mu);
    free(p->segs);
    free(p);
}

static bool seg_reserve(hp_pool *p) {
    if (p->nseg < p->segcap) return true;
    size_t nc = p->segcap * 2;
    seg *s = realloc(p->segs, nc * sizeof *s);
    if (!s) return false;
    p->segs = s;
    p->segcap = nc;
    return true;
}

static size_t largest_free_locked(const hp_pool *p) {
    size_t best = 0;
    for (size_t i = 0; i < p->nseg; i++)
        if (!p->segs[i].used && p->segs[i].size > best) best = p->segs[i].size;
    return best;
}

hp_status hp_pool_alloc(hp_pool *p, size_t bytes, size_t *offset) {
    if (bytes == 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_pool_alloc: request of 0 bytes on the %s tier",
                        hp_tier_name(p->tier));
    if (bytes > p->capacity)
        return hp_error(HP_STATUS_OUT_OF_MEMORY,
                        "%s tier: request of %zu bytes exceeds the pool capacity of %zu bytes (%zu free)",
                        hp_tier_name(p->tier), bytes, p->capacity, p->capacity - hp_pool_in_use(p));
    size_t need = (bytes + p->align - 1) & ~(p->align - 1);
    pthread_mutex_lock(&p->mu);
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < p->nseg; i++) {
        const seg *s = &p->segs[i];
        if (!s->used && s->size >= need && (best == SIZE_MAX || s->size < p->segs[best].size)) best = i;
    }
    if (best == SIZE_MAX) {
        size_t fr = p->capacity - p->in_use, lf = largest_free_locked(p);
        pthread_mutex_unlock(&p->mu);
        return hp_error(HP_STATUS_OUT_OF_MEMORY,
                        "%s tier: cannot allocate %zu bytes: %zu of %zu bytes free, largest free "
                        "block %zu bytes",
                        hp_tier_name(p->tier), bytes, fr, p->capacity, lf);
    }
    if (p->segs[best].size > need) {
        if (!seg_reserve(p)) {
            pthread_mutex_unlock(&p->mu);
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "%s tier: cannot grow the pool's segment list",
                            hp_tier_name(p->tier));
        }
        memmove(&p->segs[best + 2], &p->segs[best + 1], (p->nseg - best - 1) * sizeof(seg));
        p->segs[best + 1] = (seg){p->segs[best].off + need, p->segs[best].size - need, false};
        p->segs[best].size = need;
        p->nseg++;
    }
    p->segs[best].used = true;
    p->in_use += need;
    if (p->in_use > p->peak) p->peak = p->in_use;
    *offset = p->segs[best].off;
    pthread_mutex_unlock(&p->mu);
    return HP_STATUS_OK;
}

/* Index of the segment that starts at `off`, or SIZE_MAX. Caller holds the mutex. */
static size_t find_seg(const hp_pool *p, size_t off) {
    size_t lo = 0, hi = p->nseg;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->segs[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->nseg && p->segs[lo].off == off ? lo : SIZE_MAX;
}

hp_status hp_pool_free(hp_pool *p, size_t offset) {
    pthread_mutex_lock(&p->mu);
    size_t i = find_seg(p, offset);
    if (i == SIZE_MAX || !p->segs[i].used) {
        pthread_mutex_unlock(&p->mu);
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "%s tier: no allocated block starts at offset %zu (double free?)",
                        hp_tier_name(p->tier), offset);
    }
    p->segs[i].used = false;
    p->in_use -= p->segs[i].size;
    if (i + 1 < p->nseg && !p->segs[i + 1].used) { /* merge the right neighbour */
        p->segs[i].size += p->segs[i + 1].size;
        memmove(&p->segs[i + 1], &p->segs[i + 2], (p->nseg - i - 2) * sizeof(seg));
        p->nseg--;
    }
    if (i > 0 && !p->segs[i - 1].used) { /* merge into the left neighbour */
        p->segs[i - 1].size += p->segs[i].size;
        memmove(&p->segs[i], &p->segs[i + 1], (p->nseg - i - 1) * sizeof(seg));
        p->nseg--;
    }
    pthread_mutex_unlock(&p->mu);
    return HP_STATUS_OK;
}

void *hp_pool_ptr(const hp_pool *p, size_t offset) {
    return p->base && offset < p->capacity ? p->base + offset : NULL;
}

size_t hp_pool_offset_of(const hp_pool *p, const void *ptr) {
    if (!p->base) return SIZE_MAX;
    uintptr_t a = (uintptr_t)ptr, b = (uintptr_t)p->base;
    return a >= b && a < b + p->capacity ? (size_t)(a - b) : SIZE_MAX;
}

hp_tier hp_pool_tier(const hp_pool *p) { return p->tier; }
size_t hp_pool_capacity(const hp_pool *p) { return p->capacity; }
size_t hp_pool_alignment(const hp_pool *p) { return p->align; }

#define LOCKED_GET(expr)                                                                           \
    do {                                                                                           \
        hp_pool *mp_ = (hp_pool *)p;                                                               \
        pthread_mutex_lock(&mp_->mu);                                                              \
        size_t v_ = (expr);                                                                        \
        pthread_mutex_unlock(&mp_->mu);                                                            \
        return v_;                                                                                 \
    } while (0)

size_t hp_pool_in_use(const hp_pool *p) { LOCKED_GET(p->in_use); }
size_t hp_pool_peak(const hp_pool *p) { LOCKED_GET(p->peak); }
size_t hp_pool_largest_free(const hp_pool *p) { LOCKED_GET(largest_free_locked(p)); }

size_t hp_pool_block_size(const hp_pool *p, size_t offset) {
    hp_pool *mp = (hp_pool *)p;
    pthread_mutex_lock(&mp->mu);
    size_t i = find_seg(p, offset);
    size_t v = i != SIZE_MAX && p->segs[i].used ? p->segs[i].size : 0;
    pthread_mutex_unlock(&mp->mu);
    return v;
}

void hp_pool_reset_peak(hp_pool *p) {
    pthread_mutex_lock(&p->mu);
    p->peak = p->in_use;
    pthread_mutex_unlock(&p->mu);
}
