/* HyperOffload manual API: tensor handles moved between tiers, saved-tensor pack/unpack hooks. */
#include "hp/offload.h"

#include "hp/tier.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct storage {
    hp_tier tier;
    bool valid;
    void *ptr;        /* DEVICE/HOST */
    bool pooled;      /* ptr came from ctx->pool[tier] */
    uint64_t disk_off; /* DISK */
} storage;

typedef struct hook_user {
    hp_offload_ctx *ctx;
    hp_tier tier;
} hook_user;

struct hp_offload_ctx {
    hp_pool *pool[HP_TIER_COUNT]; /* DEVICE/HOST budgets; NULL: unbounded */
    hp_copy_engine *ce;
    bool own_ce, own_disk;
    hp_disk *disk;
    char disk_dir[400];
    bool has_dir;
    size_t disk_capacity;
    pthread_mutex_t mu;
    size_t in_use[HP_TIER_COUNT], peak[HP_TIER_COUNT];
    hp_tensor_handle *handles; /* all live handles (for reclaim) */
    hook_user hook_users[HP_TIER_COUNT];
};

struct hp_tensor_handle {
    hp_offload_ctx *ctx;
    hp_tensor_handle *prev, *next;
    size_t bytes;
    storage cur;
    storage old;    /* source of the pending move; invalid when none */
    bool pending;
    hp_event *ev;
};

/* ---------------------------------------------------------------- storage */

static void count(hp_offload_ctx *ctx, hp_tier t, size_t bytes, bool add) {
    pthread_mutex_lock(&ctx->mu);
    if (add) {
        ctx->in_use[t] += bytes;
        if (ctx->in_use[t] > ctx->peak[t]) ctx->peak[t] = ctx->in_use[t];
    } else {
        ctx->in_use[t] -= bytes;
    }
    pthread_mutex_unlock(&ctx->mu);
}

static hp_status ensure_disk(hp_offload_ctx *ctx) {
    pthread_mutex_lock(&ctx->mu);
    hp_status st = HP_STATUS_OK;
    if (!ctx->disk) {
        hp_disk_config dc = HP_DISK_CONFIG_INIT;
        dc.dir = ctx->has_dir ? ctx->disk_dir : NULL;
        dc.capacity = ctx->disk_capacity;
        st = hp_disk_open(&dc, &ctx->disk);
        if (st == HP_STATUS_OK) ctx->own_disk = true;
    }
    pthread_mutex_unlock(&ctx->mu);
    return st;
}

static hp_status alloc_once(hp_offload_ctx *ctx, hp_tier t, size_t bytes, storage *s) {
    *s = (storage){.tier = t};
    if (t == HP_TIER_DISK) {
        HP_CHECK(ensure_disk(ctx));
        HP_CHECK(hp_disk_alloc(ctx->disk, bytes, &s->disk_off));
    } else if (ctx->pool[t]) {
        size_t off;
        HP_CHECK(hp_pool_alloc(ctx->pool[t], bytes, &off));
        s->ptr = hp_pool_ptr(ctx->pool[t], off);
        s->pooled = true;
    } else {
        s->ptr = hp_mem_alloc(t, bytes);
        if (!s->ptr) return HP_STATUS_OUT_OF_MEMORY;
    }
    s->valid = true;
    count(ctx, t, bytes, true);
    return HP_STATUS_OK;
}

/* Allocates; when a budget is exceeded, releases the sources of completed moves, then of all moves
 * (waiting for the copy stream), and retries (a caching allocator's "free cached blocks and retry"). */
static hp_status alloc_storage(hp_offload_ctx *ctx, hp_tier t, size_t bytes, storage *s) {
    hp_status st = alloc_once(ctx, t, bytes, s);
    if (st != HP_STATUS_OUT_OF_MEMORY || t == HP_TIER_DISK) return st;
    if (hp_offload_ctx_reclaim(ctx) == HP_STATUS_OK) {
        if (alloc_once(ctx, t, bytes, s) == HP_STATUS_OK) return HP_STATUS_OK;
    }
    if (hp_copy_engine_synchronize(ctx->ce) == HP_STATUS_OK && hp_offload_ctx_reclaim(ctx) == HP_STATUS_OK)
        return alloc_once(ctx, t, bytes, s);
    return alloc_once(ctx, t, bytes, s); /* report the allocation's own error */
}

static void free_storage(hp_offload_ctx *ctx, storage *s, size_t bytes) {
    if (!s->valid) return;
    if (s->tier == HP_TIER_DISK) hp_disk_free(ctx->disk, s->disk_off);
    else if (s->pooled) hp_pool_free(ctx->pool[s->tier], hp_pool_offset_of(ctx->pool[s->tier], s->ptr));
    else hp_mem_free(s->tier, s->ptr, bytes);
    count(ctx, s->tier, bytes, false);
    s->valid = false;
}

static hp_loc loc_of(const hp_offload_ctx *ctx, const storage *s) {
    return s->tier == HP_TIER_DISK ? hp_loc_disk(ctx->disk, s->disk_off) : hp_loc_mem(s->tier, s->ptr);
}

/* ---------------------------------------------------------------- context */

hp_status hp_offload_ctx_new(const hp_offload_config *cfg_in, hp_offload_ctx **out) {
    *out = NULL;
    hp_offload_config cfg = HP_OFFLOAD_CONFIG_INIT;
    if (cfg_in) cfg = *cfg_in;
    hp_offload_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: cannot allocate a context");
    pthread_mutex_init(&ctx->mu, NULL);
    hp_status st = HP_STATUS_OK;
    if (cfg.disk_dir) {
        if (strlen(cfg.disk_dir) >= sizeof ctx->disk_dir) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "offload: disk_dir '%s' is too long", cfg.disk_dir);
            goto fail;
        }
        strcpy(ctx->disk_dir, cfg.disk_dir);
        ctx->has_dir = true;
    }
    ctx->disk_capacity = cfg.disk_capacity;
    ctx->disk = cfg.disk;
    size_t caps[HP_TIER_COUNT] = {cfg.device_capacity, cfg.host_capacity, 0};
    for (int t = 0; t < HP_TIER_DISK; t++) {
        if (caps[t] == 0) continue;
        /* 4096-aligned blocks so disk I/O from pooled memory needs no bounce buffer. */
        HP_CHECK_GOTO(hp_pool_new((hp_tier)t, caps[t], HP_DISK_ALIGN, true, &ctx->pool[t]), st, fail);
    }
    if (cfg.copy_engine) {
        ctx->ce = cfg.copy_engine;
    } else {
        HP_CHECK_GOTO(hp_copy_engine_new(&ctx->ce), st, fail);
        ctx->own_ce = true;
    }
    for (int t = 0; t < HP_TIER_COUNT; t++) ctx->hook_users[t] = (hook_user){ctx, (hp_tier)t};
    *out = ctx;
    return HP_STATUS_OK;
fail:
    for (int t = 0; t < HP_TIER_COUNT; t++) hp_pool_destroy(ctx->pool[t]);
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
    return st;
}

void hp_offload_ctx_free(hp_offload_ctx *ctx) {
    if (!ctx) return;
    hp_copy_engine_synchronize(ctx->ce);
    while (ctx->handles) hp_tensor_handle_free(ctx->handles); /* leaked handles: free them */
    if (ctx->own_ce) hp_copy_engine_free(ctx->ce);
    if (ctx->own_disk) hp_disk_close(ctx->disk);
    for (int t = 0; t < HP_TIER_COUNT; t++) hp_pool_destroy(ctx->pool[t]);
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

hp_copy_engine *hp_offload_ctx_copy_engine(hp_offload_ctx *ctx) { return ctx->ce; }
hp_disk *hp_offload_ctx_disk(hp_offload_ctx *ctx) { return ctx->disk; }

size_t hp_offload_ctx_in_use(hp_offload_ctx *ctx, hp_tier t) {
    pthread_mutex_lock(&ctx->mu);
    size_t v = ctx->in_use[t];
    pthread_mutex_unlock(&ctx->mu);
    return v;
}

size_t hp_offload_ctx_peak(hp_offload_ctx *ctx, hp_tier t) {
    pthread_mutex_lock(&ctx->mu);
    size_t v = ctx->peak[t];
    pthread_mutex_unlock(&ctx->mu);
    return v;
}

/* ---------------------------------------------------------------- handles */

/* Finishes the pending move if its copy is done (or, with `block`, waits for it). On success the
 * source is released; on failure the handle goes back to the source and the destination is freed. */
static hp_status settle(hp_tensor_handle *h, bool block) {
    /* Without a pending move the event may still cover a copy into the handle (the default pack
     * hook's), so a blocking settle waits for it too. */
    if (!h->pending) return block ? hp_event_wait(h->ev) : HP_STATUS_OK;
    hp_status st;
    if (block) {
        st = hp_event_wait(h->ev);
    } else {
        bool done = false;
        st = hp_event_query(h->ev, &done);
        if (!done) return HP_STATUS_OK;
    }
    if (st == HP_STATUS_OK) {
        free_storage(h->ctx, &h->old, h->bytes);
    } else {
        /* The copy failed (or was skipped after an earlier failure): the data is still in the
         * source. Later queued copies of this handle cannot exist (one pending move per handle). */
        free_storage(h->ctx, &h->cur, h->bytes);
        h->cur = h->old;
        h->old.valid = false;
    }
    h->pending = false;
    return st;
}

hp_status hp_offload_ctx_reclaim(hp_offload_ctx *ctx) {
    hp_status first = HP_STATUS_OK;
    pthread_mutex_lock(&ctx->mu);
    hp_tensor_handle *list = ctx->handles;
    pthread_mutex_unlock(&ctx->mu);
    /* Handles are not used from two threads at once (header contract), and the list is only
     * changed by new/free of handles, which the caller does not run concurrently with reclaim. */
    for (hp_tensor_handle *h = list; h; h = h->next) {
        hp_status st = settle(h, false);
        if (first == HP_STATUS_OK) first = st;
    }
    return first;
}

hp_status hp_tensor_handle_new(hp_offload_ctx *ctx, size_t bytes, hp_tier tier, hp_tensor_handle **out) {
    *out = NULL;
    if (bytes == 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_tensor_handle_new: 0 bytes");
    if ((int)tier < 0 || tier >= HP_TIER_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_tensor_handle_new: tier %d is not a tier", (int)tier);
    hp_tensor_handle *h = calloc(1, sizeof *h);
    if (!h) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_tensor_handle_new: cannot allocate a handle");
    hp_status st = hp_event_new(&h->ev);
    if (st == HP_STATUS_OK) st = alloc_storage(ctx, tier, bytes, &h->cur);
    if (st != HP_STATUS_OK) {
        hp_event_free(h->ev);
        free(h);
        return st;
    }
    h->ctx = ctx;
    h->bytes = bytes;
    pthread_mutex_lock(&ctx->mu);
    h->next = ctx->handles;
    if (ctx->handles) ctx->handles->prev = h;
    ctx->handles = h;
    pthread_mutex_unlock(&ctx->mu);
    *out = h;
    return HP_STATUS_OK;
}

void hp_tensor_handle_free(hp_tensor_handle *h) {
    if (!h) return;
    hp_offload_ctx *ctx = h->ctx;
    settle(h, true);
    free_storage(ctx, &h->cur, h->bytes);
    pthread_mutex_lock(&ctx->mu);
    if (h->prev) h->prev->next = h->next;
    else ctx->handles = h->next;
    if (h->next) h->next->prev = h->prev;
    pthread_mutex_unlock(&ctx->mu);
    hp_event_free(h->ev);
    free(h);
}

hp_tier hp_tensor_handle_tier(const hp_tensor_handle *h) { return h->cur.tier; }
size_t hp_tensor_handle_bytes(const hp_tensor_handle *h) { return h->bytes; }
hp_loc hp_tensor_handle_loc(const hp_tensor_handle *h) { return loc_of(h->ctx, &h->cur); }
hp_event *hp_tensor_handle_event(hp_tensor_handle *h) { return h->ev; }

hp_status hp_tensor_handle_wait(hp_tensor_handle *h) { return settle(h, true); }

hp_status hp_tensor_handle_data(hp_tensor_handle *h, void **data) {
    *data = NULL;
    HP_CHECK(settle(h, true));
    if (h->cur.tier == HP_TIER_DISK)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "tensor handle of %zu bytes is on the disk tier (%s); prefetch it first",
                        h->bytes, hp_disk_path(h->ctx->disk));
    *data = h->cur.ptr;
    return HP_STATUS_OK;
}

static hp_status move(hp_tensor_handle *h, hp_tier dst, bool slower, const char *fname) {
    if ((int)dst < 0 || dst >= HP_TIER_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: tier %d is not a tier", fname, (int)dst);
    HP_CHECK(settle(h, true)); /* one pending move per handle */
    hp_tier src = h->cur.tier;
    if (dst == src) return HP_STATUS_OK;
    if ((dst > src) != slower)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: the tensor is on the %s tier and %s is not %s",
                        fname, hp_tier_name(src), hp_tier_name(dst), slower ? "slower" : "faster");
    storage to;
    HP_CHECK(alloc_storage(h->ctx, dst, h->bytes, &to));
    hp_copy_engine *ce = h->ctx->ce;
    hp_status st = hp_copy_async(ce, loc_of(h->ctx, &to), loc_of(h->ctx, &h->cur), h->bytes);
    if (st == HP_STATUS_OK) st = hp_event_record(h->ev, ce);
    if (st != HP_STATUS_OK) {
        /* Nothing queued (or the copy is queued but unrecorded: wait it out before freeing). */
        hp_copy_engine_synchronize(ce);
        free_storage(h->ctx, &to, h->bytes);
        return st;
    }
    h->old = h->cur;
    h->cur = to;
    h->pending = true;
    return HP_STATUS_OK;
}

hp_status hp_offload_tensor(hp_tensor_handle *h, hp_tier dst) {
    return move(h, dst, true, "hp_offload_tensor");
}

hp_status hp_prefetch_tensor(hp_tensor_handle *h, hp_tier dst) {
    return move(h, dst, false, "hp_prefetch_tensor");
}

/* ---------------------------------------------------------------- saved-tensor hooks */

#define MAX_HOOKS 16

static _Thread_local hp_saved_tensor_hooks tl_hooks[MAX_HOOKS];
static _Thread_local int tl_nhooks;

struct hp_saved_tensor {
    bool hooked;
    hp_saved_tensor_hooks hooks;
    void *packed; /* hooked: the hook's object; otherwise the caller's data */
    size_t bytes;
};

hp_status hp_saved_tensor_hooks_push(const hp_saved_tensor_hooks *hooks) {
    if (!hooks || !hooks->pack || !hooks->unpack || !hooks->release)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "hp_saved_tensor_hooks_push: pack, unpack and release must be non-NULL");
    if (tl_nhooks >= MAX_HOOKS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_saved_tensor_hooks_push: stack full (%d hooks)",
                        MAX_HOOKS);
    tl_hooks[tl_nhooks++] = *hooks;
    return HP_STATUS_OK;
}

hp_status hp_saved_tensor_hooks_pop(void) {
    if (tl_nhooks == 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_saved_tensor_hooks_pop: no hooks pushed");
    tl_nhooks--;
    return HP_STATUS_OK;
}

hp_status hp_saved_tensor_pack(const void *data, size_t bytes, hp_saved_tensor **out,
                               hp_event **keep_until) {
    *out = NULL;
    if (keep_until) *keep_until = NULL;
    if (!data || bytes == 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_saved_tensor_pack: data %p, %zu bytes", data, bytes);
    hp_saved_tensor *s = calloc(1, sizeof *s);
    if (!s) return hp_error(HP_STATUS_OUT_OF_MEMORY, "hp_saved_tensor_pack: cannot allocate");
    s->bytes = bytes;
    if (tl_nhooks == 0) {
        s->packed = (void *)data;
    } else {
        s->hooked = true;
        s->hooks = tl_hooks[tl_nhooks - 1];
        hp_event *ku = NULL;
        hp_status st = s->hooks.pack(s->hooks.user, data, bytes, &s->packed, &ku);
        if (st != HP_STATUS_OK) {
            free(s);
            return st;
        }
        if (keep_until) *keep_until = ku;
    }
    *out = s;
    return HP_STATUS_OK;
}

hp_status hp_saved_tensor_prefetch(hp_saved_tensor *s) {
    if (!s->hooked || !s->hooks.prefetch) return HP_STATUS_OK;
    return s->hooks.prefetch(s->hooks.user, s->packed);
}

hp_status hp_saved_tensor_unpack(hp_saved_tensor *s, const void **data) {
    if (!s->hooked) {
        *data = s->packed;
        return HP_STATUS_OK;
    }
    return s->hooks.unpack(s->hooks.user, s->packed, data);
}

size_t hp_saved_tensor_bytes(const hp_saved_tensor *s) { return s->bytes; }

void hp_saved_tensor_free(hp_saved_tensor *s) {
    if (!s) return;
    if (s->hooked) s->hooks.release(s->hooks.user, s->packed);
    free(s);
}

/* The default pair: a handle on the offload tier. */

static hp_status default_pack(void *user, const void *data, size_t bytes, void **packed,
                              hp_event **keep_until) {
    hook_user *hu = user;
    hp_tensor_handle *h;
    HP_CHECK(hp_tensor_handle_new(hu->ctx, bytes, hu->tier, &h));
    hp_copy_engine *ce = hu->ctx->ce;
    hp_status st = hp_copy_async(ce, hp_tensor_handle_loc(h), hp_loc_mem(HP_TIER_DEVICE, (void *)data), bytes);
    if (st == HP_STATUS_OK) st = hp_event_record(h->ev, ce);
    if (st != HP_STATUS_OK) {
        hp_tensor_handle_free(h);
        return st;
    }
    *packed = h;
    *keep_until = h->ev;
    return HP_STATUS_OK;
}

static hp_status default_prefetch(void *user, void *packed) {
    (void)user;
    hp_tensor_handle *h = packed;
    /* The pack copy must finish before the handle moves (its event would be overwritten). */
    HP_CHECK(hp_event_wait(h->ev));
    return hp_prefetch_tensor(h, HP_TIER_DEVICE);
}

static hp_status default_unpack(void *user, void *packed, const void **data) {
    (void)user;
    hp_tensor_handle *h = packed;
    HP_CHECK(hp_event_wait(h->ev));
    if (h->cur.tier != HP_TIER_DEVICE) HP_CHECK(hp_prefetch_tensor(h, HP_TIER_DEVICE));
    void *p;
    HP_CHECK(hp_tensor_handle_data(h, &p));
    *data = p;
    return HP_STATUS_OK;
}

static void default_release(void *user, void *packed) {
    (void)user;
    hp_tensor_handle_free(packed);
}

hp_saved_tensor_hooks hp_offload_default_hooks(hp_offload_ctx *ctx, hp_tier tier) {
    if ((int)tier < 0 || tier >= HP_TIER_COUNT) tier = HP_TIER_HOST;
    return (hp_saved_tensor_hooks){
        /* .pack = */ default_pack,
        /* .prefetch = */ default_prefetch,
        /* .unpack = */ default_unpack,
        /* .release = */ default_release,
        /* .user = */ &ctx->hook_users[tier],
    };
}
