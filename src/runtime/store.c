/*
 * The state store: named entries (logical shape, dtype, layout, this rank's block and where it
 * lives), views of entries in other layouts kept fresh by the redistribution planner, and the
 * binding of programs' persistent tensors (store_internal.h).
 */
#include "runtime/store_internal.h"


#include <stdlib.h>
#include <string.h>

typedef struct store_view {
    hp_layout layout;
    hp_shape local;
    size_t bytes;
    void *data;       /* store memory (backend) */
    uint64_t version; /* the entry version it holds; UINT64_MAX: never filled */
} store_view;

struct hp__store_entry {
    char *name;
    hp_dtype dtype;
    hp_shape shape, local;
    hp_layout layout;
    size_t bytes;
    bool declared;
    bool has_storage;
    hp_tier tier;
    void *data;                 /* DEVICE: store memory; HOST: the home's host address; DISK: NULL */
    const hp_program_ext *home; /* slow tier: the pass holding it, and its tensor id there */
    hp_tid home_tid;
    const hp_program_ext *writer; /* the pass of the last program bound as a writer (its deferred work) */
    hp_tid writer_tid;
    uint64_t version;
    int n_views;
    store_view *views;
};

struct hp_store {
    hp_mesh *mesh; /* borrowed; NULL: one device */
    int index;     /* this rank's mesh index */
    hp_backend_t be;
    bool own_be;
    int n, cap;
    hp__store_entry **e;
    int64_t n_refresh, refresh_bytes, n_copies;
    bool closing; /* hp_store_closing: homes are not copied out when their programs are freed */
    hp_store_redistribute_fn redistribute; /* refreshes views of another layout; NULL: none */
};

static size_t block_bytes(const hp_shape *s, hp_dtype dt) { return (size_t)hp_shape_numel(s) * hp_dtype_size(dt); }

static char *shape_text(const hp_shape *s, char *buf, size_t n) { return hp_shape_str(s, buf, n); }

hp_status hp_store_new(hp_mesh *mesh, hp_backend_t backend, hp_store **out) {
    *out = NULL;
    if (mesh && hp_mesh_my_index(mesh) < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "store: the mesh is not attached or this rank is not in it");
    hp_store *s = calloc(1, sizeof *s);
    if (!s) return hp_error(HP_STATUS_OUT_OF_MEMORY, "store: out of memory");
    s->mesh = mesh;
    s->index = mesh ? hp_mesh_my_index(mesh) : 0;
    s->be = backend;
    if (!s->be) {
        hp_status st = hp_backend_cpu_new(&s->be);
        if (st != HP_STATUS_OK) {
            free(s);
            return st;
        }
        s->own_be = true;
    }
    *out = s;
    return HP_STATUS_OK;
}

static void free_storage(hp_store *s, hp__store_entry *e) {
    if (e->has_storage && e->tier == HP_TIER_DEVICE) hp_backend_buffer_free(s->be, e->data, e->bytes);
    e->data = NULL;
    e->has_storage = false;
    e->home = NULL;
    e->tier = HP_TIER_DEVICE;
}

void hp_store_free(hp_store *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        hp__store_entry *e = s->e[i];
        free_storage(s, e);
        for (int v = 0; v < e->n_views; v++) hp_backend_buffer_free(s->be, e->views[v].data, e->views[v].bytes);
        free(e->views);
        free(e->name);
        free(e);
    }
    free(s->e);
    if (s->own_be) hp_backend_free(s->be);
    free(s);
}

void hp_store_closing(hp_store *s) {
    if (s) s->closing = true;
}

static hp__store_entry *find(const hp_store *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->e[i]->name, name) == 0) return s->e[i];
    return NULL;
}

static hp_status not_found(const char *name) {
    return hp_error(HP_STATUS_NOT_FOUND, "store: no entry named '%s'", name ? name : "(null)");
}

static bool replicated(const hp_layout *l) {
    for (int d = 0; d < l->ndim; d++)
        if (l->nmap[d]) return false;
    return l->partial == 0;
}

/* This rank's block of `shape` under layout l (validated). */
static hp_status local_shape(const hp_store *s, const hp_layout *l, const hp_shape *shape, hp_shape *out) {
    if (l->ndim != shape->ndim)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "store: layout of %d dims for a tensor of %d", l->ndim,
                        shape->ndim);
    if (!s->mesh) {
        if (!replicated(l))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "store: a store without a mesh holds replicated tensors only");
        *out = *shape;
        return HP_STATUS_OK;
    }
    HP_CHECK(hp_layout_validate(l, s->mesh, shape));
    return hp_layout_local_shape(l, s->mesh, shape, s->index, out);
}

static hp_status add_entry(hp_store *s, const char *name, hp_dtype dt, const hp_shape *shape, const hp_layout *l,
                           const hp_shape *local, bool declared, hp__store_entry **out) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        hp__store_entry **ne = realloc(s->e, (size_t)cap * sizeof *ne);
        if (!ne) return hp_error(HP_STATUS_OUT_OF_MEMORY, "store: out of memory for %d entries", cap);
        s->e = ne;
        s->cap = cap;
    }
    hp__store_entry *e = calloc(1, sizeof *e);
    char *nm = malloc(strlen(name) + 1);
    if (!e || !nm) {
        free(e);
        free(nm);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "store: out of memory for entry '%s'", name);
    }
    strcpy(nm, name);
    *e = (hp__store_entry){.name = nm, .dtype = dt, .shape = *shape, .local = *local, .layout = *l,
                           .bytes = block_bytes(local, dt), .declared = declared, .tier = HP_TIER_DEVICE};
    s->e[s->n++] = e;
    *out = e;
    return HP_STATUS_OK;
}

hp_status hp_store_declare(hp_store *s, const char *name, hp_dtype dt, const hp_shape *shape,
                           const hp_layout *layout) {
    if (!name || !*name) return hp_error(HP_STATUS_INVALID_ARGUMENT, "store: an entry needs a name");
    hp_layout rep;
    if (!layout) {
        hp_layout_init(&rep, shape->ndim);
        layout = &rep;
    }
    hp_shape local;
    hp_status lst = local_shape(s, layout, shape, &local);
    if (lst != HP_STATUS_OK) return hp_error_prefix(lst, "store: entry '%s': ", name);
    hp__store_entry *e = find(s, name);
    if (!e) return add_entry(s, name, dt, shape, layout, &local, true, &e);
    char a[128], b[128];
    if (e->dtype != dt)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "store: entry '%s' is %s, declared again as %s", name,
                        hp_dtype_name(e->dtype), hp_dtype_name(dt));
    if (e->declared) {
        if (!hp_shape_equal(&e->shape, shape) || !hp_layout_equal(&e->layout, layout))
            return hp_error(HP_STATUS_INVALID_ARGUMENT,
                            "store: entry '%s' of shape %s declared again with shape %s or another layout", name,
                            shape_text(&e->shape, a, sizeof a), shape_text(shape, b, sizeof b));
        return HP_STATUS_OK;
    }
    if (!hp_shape_equal(&e->local, &local))
        return hp_error(HP_STATUS_SHAPE,
                        "store: entry '%s' was bound with local shape %s, but shape %s under the declared layout "
                        "gives %s on this rank",
                        name, shape_text(&e->local, a, sizeof a), shape_text(shape, b, sizeof b),
                        shape_text(&local, (char[128]){0}, 128));
    e->shape = *shape;
    e->layout = *layout;
    e->declared = true;
    return HP_STATUS_OK;
}

int hp_store_n_entries(const hp_store *s) { return s->n; }

const char *hp_store_name(const hp_store *s, int i) { return i >= 0 && i < s->n ? s->e[i]->name : NULL; }

hp_status hp_store_info(const hp_store *s, const char *name, hp_store_entry_info *out) {
    const hp__store_entry *e = name ? find(s, name) : NULL;
    if (!e) return not_found(name);
    *out = (hp_store_entry_info){.name = e->name, .dtype = e->dtype, .shape = e->shape, .layout = e->layout,
                                 .local_shape = e->local, .bytes = e->bytes, .tier = e->tier, .data = e->data,
                                 .has_storage = e->has_storage, .declared = e->declared, .version = e->version};
    return HP_STATUS_OK;
}

/* Zeroed device-tier storage for an entry that has none. */
static hp_status materialize(hp_store *s, hp__store_entry *e) {
    if (e->has_storage) return HP_STATUS_OK;
    hp_status st = hp_backend_alloc(s->be, e->bytes, &e->data);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "store: %zu bytes for '%s': ", e->bytes, e->name);
    e->tier = HP_TIER_DEVICE;
    e->has_storage = true;
    return HP_STATUS_OK;
}

/* Waits for the writer's deferred work on the entry (HyperOffload's deferred updates). */
static hp_status entry_sync(hp__store_entry *e) {
    const hp_program_ext *w = e->writer;
    return w && w->sync ? w->sync(w->user, e->writer_tid) : HP_STATUS_OK;
}

/* Reads a slow-tier entry through its home into host memory. */
static hp_status home_read(hp__store_entry *e, void *dst) {
    HP_CHECK(entry_sync(e));
    const hp_program_ext *h = e->home;
    if (h->sync) HP_CHECK(h->sync(h->user, e->home_tid));
    return h->read(h->user, e->home_tid, dst, e->bytes);
}

/* Reads an entry's block into host memory, wherever it lives. */
static hp_status entry_read_host(hp_store *s, hp__store_entry *e, void *dst) {
    if (e->tier != HP_TIER_DEVICE) return home_read(e, dst);
    HP_CHECK(entry_sync(e));
    HP_CHECK(hp_backend_get(s->be, dst, e->data, e->bytes));
    return hp_backend_synchronize(s->be);
}

/* Reads an entry's block into store backend memory `dst` (through host staging). */
static hp_status entry_read_backend(hp_store *s, hp__store_entry *e, void *dst) {
    void *host = malloc(e->bytes + 1);
    if (!host) return hp_error(HP_STATUS_OUT_OF_MEMORY, "store: %zu bytes staging '%s'", e->bytes, e->name);
    hp_status st = entry_read_host(s, e, host);
    if (st == HP_STATUS_OK) st = hp_backend_set(s->be, dst, host, e->bytes);
    if (st == HP_STATUS_OK) st = hp_backend_synchronize(s->be);
    free(host);
    return st;
}

void hp__store_bump(hp__store_entry *e) { e->version++; }

hp_status hp__store_sync(hp__store_entry *e) { return entry_sync(e); }

void *hp_store_data(hp_store *s, const char *name) {
    hp__store_entry *e = name ? find(s, name) : NULL;
    if (!e) {
        not_found(name);
        return NULL;
    }
    if (materialize(s, e) != HP_STATUS_OK || entry_sync(e) != HP_STATUS_OK) return NULL;
    return e->data;
}

static hp_status check_bytes(const hp__store_entry *e, size_t bytes, const char *what) {
    if (bytes != e->bytes)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: %zu bytes given for '%s', whose block holds %zu", what,
                        bytes, e->name, e->bytes);
    return HP_STATUS_OK;
}

hp_status hp_store_read(hp_store *s, const char *name, void *dst, size_t bytes) {
    hp__store_entry *e = name ? find(s, name) : NULL;
    if (!e) return not_found(name);
    HP_CHECK(check_bytes(e, bytes, "hp_store_read"));
    HP_CHECK(materialize(s, e));
    return entry_read_host(s, e, dst);
}

hp_status hp_store_write(hp_store *s, const char *name, const void *src, size_t bytes) {
    hp__store_entry *e = name ? find(s, name) : NULL;
    if (!e) return not_found(name);
    HP_CHECK(check_bytes(e, bytes, "hp_store_write"));
    HP_CHECK(materialize(s, e));
    HP_CHECK(entry_sync(e));
    e->version++;
    if (e->tier != HP_TIER_DEVICE) {
        const hp_program_ext *h = e->home;
        if (h->sync) HP_CHECK(h->sync(h->user, e->home_tid));
        return h->write(h->user, e->home_tid, src, bytes);
    }
    HP_CHECK(hp_backend_set(s->be, e->data, src, bytes));
    return hp_backend_synchronize(s->be);
}

hp_status hp_store_touch(hp_store *s, const char *name) {
    hp__store_entry *e = name ? find(s, name) : NULL;
    if (!e) return not_found(name);
    e->version++;
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- views */

/* Brings view v of e up to the entry's version: a redistribution plan from the entry's layout
 * (collective over the mesh), or a copy through the home for a slow tier of the same layout. */
static hp_status refresh_view(hp_store *s, hp__store_entry *e, store_view *v) {
    if (v->version == e->version) return HP_STATUS_OK;
    HP_CHECK(materialize(s, e));
    bool same = hp_layout_equal(&v->layout, &e->layout);
    hp_status st = HP_STATUS_OK;
    if (same) { /* only a slow-tier entry has a view of its own layout */
        st = entry_read_backend(s, e, v->data);
    } else {
        void *src = e->data, *staged = NULL;
        if (e->tier != HP_TIER_DEVICE) {
            if (!(staged = malloc(e->bytes + 1)))
                return hp_error(HP_STATUS_OUT_OF_MEMORY, "store: %zu bytes staging '%s'", e->bytes, e->name);
            st = home_read(e, staged);
            src = staged;
        } else {
            st = entry_sync(e);
        }
        int64_t bytes = 0;
        if (st == HP_STATUS_OK && !s->redistribute)
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "the store has no redistribution function "
                                                      "(hp_store_set_redistribute) to change its layout");
        if (st == HP_STATUS_OK)
            st = s->redistribute(s->mesh, &e->layout, &v->layout, &e->shape, e->dtype, src, v->data, &bytes);
        if (st == HP_STATUS_OK) s->refresh_bytes += bytes;
        free(staged);
    }
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "store: refreshing a view of '%s': ", e->name);
    v->version = e->version;
    s->n_refresh++;
    return HP_STATUS_OK;
}

void hp_store_set_redistribute(hp_store *s, hp_store_redistribute_fn fn) {
    if (s) s->redistribute = fn;
}

hp_status hp_store_view(hp_store *s, const char *name, const hp_layout *layout, void **data) {
    *data = NULL;
    hp__store_entry *e = name ? find(s, name) : NULL;
    if (!e) return not_found(name);
    hp_layout rep;
    if (!layout) {
        hp_layout_init(&rep, e->shape.ndim);
        layout = &rep;
    }
    hp_shape local;
    hp_status lst = local_shape(s, layout, &e->shape, &local);
    if (lst != HP_STATUS_OK) return hp_error_prefix(lst, "store: view of '%s': ", name);
    HP_CHECK(materialize(s, e));
    if (e->tier == HP_TIER_DEVICE && hp_layout_equal(layout, &e->layout)) {
        HP_CHECK(entry_sync(e));
        *data = e->data;
        return HP_STATUS_OK;
    }
    store_view *v = NULL;
    for (int k = 0; k < e->n_views && !v; k++)
        if (hp_layout_equal(&e->views[k].layout, layout)) v = &e->views[k];
    if (!v) {
        store_view *nv = realloc(e->views, ((size_t)e->n_views + 1) * sizeof *nv);
        if (!nv) return hp_error(HP_STATUS_OUT_OF_MEMORY, "store: out of memory for a view of '%s'", name);
        e->views = nv;
        v = &e->views[e->n_views];
        *v = (store_view){.layout = *layout, .local = local, .bytes = block_bytes(&local, e->dtype),
                          .version = UINT64_MAX};
        hp_status st = hp_backend_alloc(s->be, v->bytes, &v->data);
        if (st != HP_STATUS_OK) return hp_error_prefix(st, "store: %zu bytes for a view of '%s': ", v->bytes, name);
        e->n_views++;
    }
    HP_CHECK(refresh_view(s, e, v));
    *data = v->data;
    return HP_STATUS_OK;
}

hp_status hp_store_views_refresh(hp_store *s) {
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->e[i]->n_views; k++) HP_CHECK(refresh_view(s, s->e[i], &s->e[i]->views[k]));
    return HP_STATUS_OK;
}

void hp_store_get_stats(const hp_store *s, hp_store_stats *out) {
    *out = (hp_store_stats){.n_entries = s->n, .n_refresh = s->n_refresh, .refresh_bytes = s->refresh_bytes,
                            .n_copies = s->n_copies};
    for (int i = 0; i < s->n; i++) {
        const hp__store_entry *e = s->e[i];
        if (e->has_storage) out->bytes[e->tier] += e->bytes;
        out->n_views += e->n_views;
        for (int k = 0; k < e->n_views; k++) out->view_bytes += e->views[k].bytes;
    }
}

void hp_store_report_memory(const hp_store *s, FILE *f) {
    hp_store_stats st;
    hp_store_get_stats(s, &st);
    fprintf(f,
            "memory: state store %d entries: device %zu bytes, host %zu, disk %zu; %d views %zu bytes; "
            "%lld view refreshes (%lld bytes), %lld copies\n",
            st.n_entries, st.bytes[HP_TIER_DEVICE], st.bytes[HP_TIER_HOST], st.bytes[HP_TIER_DISK], st.n_views,
            st.view_bytes, (long long)st.n_refresh, (long long)st.refresh_bytes, (long long)st.n_copies);
}

/* ---------------------------------------------------------------- program binding */

hp_status hp__store_bind(hp_store *s, const char *name, hp_dtype dt, const hp_shape *local, hp_tier ext_tier,
                         const hp_program_ext *ext, hp_tid t, bool writes, bool dry, hp__store_binding *b,
                         void **data) {
    *data = NULL;
    char a[128], c[128];
    hp__store_entry *e = find(s, name);
    bool slow = ext_tier != HP_TIER_DEVICE;
    *b = (hp__store_binding){.e = e, .t = t, .writes = writes, .ext = ext, .bytes = block_bytes(local, dt),
                             .seen = UINT64_MAX, .kind = slow ? HP__STORE_HOME : HP__STORE_DIRECT};
    if (!e) {
        if (dry) return HP_STATUS_OK;
        hp_layout rep;
        hp_layout_init(&rep, local->ndim);
        HP_CHECK(add_entry(s, name, dt, local, &rep, local, false, &e));
        b->e = e;
    }
    if (e->dtype != dt)
        return hp_error(HP_STATUS_SHAPE, "store: tensor '%s' is %s in the store but %s in the program", name,
                        hp_dtype_name(e->dtype), hp_dtype_name(dt));
    if (!hp_shape_equal(&e->local, local)) {
        for (int k = 0; k < e->n_views; k++)
            if (hp_shape_equal(&e->views[k].local, local)) {
                if (writes)
                    return hp_error(HP_STATUS_UNSUPPORTED,
                                    "store: tensor '%s' would bind to a view (local shape %s), but the program "
                                    "writes it; views are read-only",
                                    name, shape_text(local, a, sizeof a));
                b->kind = HP__STORE_VIEW;
                *data = e->views[k].data;
                return HP_STATUS_OK;
            }
        return hp_error(HP_STATUS_SHAPE,
                        "store: tensor '%s' has local shape %s in the store (logical %s) but %s in the program, "
                        "and the store has no view of that shape (hp_store_view)",
                        name, shape_text(&e->local, a, sizeof a), shape_text(&e->shape, c, sizeof c),
                        shape_text(local, (char[128]){0}, 128));
    }
    if (slow) {
        if (e->has_storage)
            return hp_error(HP_STATUS_UNSUPPORTED,
                            "store: tensor '%s' already has storage on tier %s; a program that keeps it on tier "
                            "%s must be the first to bind it",
                            name, hp_tier_name(e->tier), hp_tier_name(ext_tier));
        if (dry) return HP_STATUS_OK;
        e->tier = ext_tier;
        e->data = ext->data[t];
        e->home = ext;
        e->home_tid = t;
        e->has_storage = true;
    } else if (e->has_storage && e->tier != HP_TIER_DEVICE) {
        if (writes)
            return hp_error(HP_STATUS_UNSUPPORTED,
                            "store: tensor '%s' lives on tier %s in another program's offload home; a program "
                            "that writes it must keep it there too",
                            name, hp_tier_name(e->tier));
        b->kind = HP__STORE_COPY;
        return HP_STATUS_OK;
    } else {
        if (dry) return HP_STATUS_OK;
        HP_CHECK(materialize(s, e));
        *data = e->data;
    }
    if (writes) {
        e->writer = ext;
        e->writer_tid = t;
    }
    return HP_STATUS_OK;
}

hp_status hp__store_before_run(hp_store *s, hp__store_binding *b, int n, hp_backend_t be) {
    for (int i = 0; i < n; i++) {
        hp__store_entry *e = b[i].e;
        if (b[i].writes) {
            e->version++;
            b[i].seen = e->version;
            continue;
        }
        if (b[i].seen == e->version) continue;
        if (b[i].kind == HP__STORE_COPY) {
            void *host = malloc(e->bytes + 1);
            if (!host) return hp_error(HP_STATUS_OUT_OF_MEMORY, "store: %zu bytes staging '%s'", e->bytes, e->name);
            hp_status st = entry_read_host(s, e, host);
            if (st == HP_STATUS_OK) st = hp_backend_set(be, b[i].dst, host, e->bytes);
            free(host);
            if (st != HP_STATUS_OK) return hp_error_prefix(st, "store: copying '%s' from its home: ", e->name);
            s->n_copies++;
        } else if (b[i].ext != e->writer) {
            HP_CHECK(entry_sync(e));
        }
        b[i].seen = e->version;
    }
    return hp_backend_synchronize(be);
}

void hp__store_unbind(hp_store *s, hp__store_binding *b, int n, bool keep_values) {
    for (int i = 0; i < n; i++) {
        hp__store_entry *e = b[i].e;
        if (b[i].kind == HP__STORE_HOME && e->home == b[i].ext && e->home_tid == b[i].t) {
            void *dev = NULL;
            hp_status st = keep_values && !s->closing ? hp_backend_alloc(s->be, e->bytes, &dev) : HP_STATUS_INVALID_ARGUMENT;
            if (st == HP_STATUS_OK) st = entry_read_backend(s, e, dev);
            e->home = NULL;
            e->data = NULL;
            e->has_storage = false;
            e->tier = HP_TIER_DEVICE;
            if (st == HP_STATUS_OK) {
                e->data = dev;
                e->has_storage = true;
            } else {
                hp_backend_buffer_free(s->be, dev, e->bytes);
            }
        }
        if (b[i].writes && e->writer == b[i].ext && e->writer_tid == b[i].t) e->writer = NULL;
    }
}
