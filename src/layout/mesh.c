/* Device mesh: axes, rank list, coordinates, mesh and axis sub-communicators. */
#include "hp/mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct axes_comm {
    int naxes;
    int axes[HP_MESH_MAX_AXES];
    hp_comm *comm;
} axes_comm;

struct hp_mesh {
    int naxes;
    int dims[HP_MESH_MAX_AXES];
    char names[HP_MESH_MAX_AXES][HP_MESH_MAX_NAME];
    int size;
    int *ranks;
    hp_comm *parent;     /* borrowed */
    hp_comm *comm;       /* owned; rank i = mesh index i; NULL outside the mesh */
    int my_index;
    axes_comm *cache;
    int ncache, cap;
};

hp_status hp_mesh_new(int naxes, const int *dims, const char *const *names, const int *ranks,
                      int nranks, hp_mesh **out) {
    *out = NULL;
    if (naxes < 1 || naxes > HP_MESH_MAX_AXES)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh has %d axes (expected 1..%d)", naxes, HP_MESH_MAX_AXES);
    int64_t size = 1;
    for (int a = 0; a < naxes; a++) {
        const char *nm = names ? names[a] : NULL;
        if (dims[a] < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh axis %d ('%s') has size %d", a, nm ? nm : "?", dims[a]);
        if (!nm || !nm[0] || strlen(nm) >= HP_MESH_MAX_NAME || strcmp(nm, "none") == 0)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh axis %d has invalid alias_name '%s'", a, nm ? nm : "(null)");
        for (const char *p = nm; *p; p++)
            if (!(*p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh alias_name '%s' has a character other than letters, digits, '_'", nm);
        for (int b = 0; b < a; b++)
            if (strcmp(names[b], nm) == 0)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh alias_name '%s' is used for axes %d and %d", nm, b, a);
        size *= dims[a];
        if (size > (1 << 24)) return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh has more than 2^24 devices");
    }
    if (ranks && nranks != size) {
        char buf[128];
        hp_mesh tmp = {.naxes = naxes};
        memcpy(tmp.dims, dims, (size_t)naxes * sizeof *dims);
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh %s has %lld devices but %d ranks were given",
                        hp_mesh_str(&tmp, buf, sizeof buf), (long long)size, nranks);
    }
    if (ranks) {
        for (int i = 0; i < nranks; i++) {
            if (ranks[i] < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh rank list entry %d is negative (%d)", i, ranks[i]);
            for (int j = 0; j < i; j++)
                if (ranks[j] == ranks[i])
                    return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d appears twice in the mesh rank list", ranks[i]);
        }
    }
    hp_mesh *m = calloc(1, sizeof *m);
    if (m) m->ranks = malloc((size_t)size * sizeof *m->ranks);
    if (!m || !m->ranks) {
        free(m);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate a mesh");
    }
    m->naxes = naxes;
    m->size = (int)size;
    m->my_index = -1;
    for (int a = 0; a < naxes; a++) {
        m->dims[a] = dims[a];
        snprintf(m->names[a], HP_MESH_MAX_NAME, "%s", names[a]);
    }
    for (int i = 0; i < m->size; i++) m->ranks[i] = ranks ? ranks[i] : i;
    *out = m;
    return HP_STATUS_OK;
}

void hp_mesh_free(hp_mesh *m) {
    if (!m) return;
    for (int i = 0; i < m->ncache; i++) hp_comm_free(m->cache[i].comm);
    free(m->cache);
    hp_comm_free(m->comm);
    free(m->ranks);
    free(m);
}

int hp_mesh_naxes(const hp_mesh *m) { return m->naxes; }
int hp_mesh_dim(const hp_mesh *m, int axis) { return axis >= 0 && axis < m->naxes ? m->dims[axis] : 0; }
const char *hp_mesh_axis_name(const hp_mesh *m, int axis) {
    return axis >= 0 && axis < m->naxes ? m->names[axis] : "?";
}
int hp_mesh_size(const hp_mesh *m) { return m->size; }

hp_status hp_mesh_axis_index(const hp_mesh *m, const char *name, int *axis) {
    for (int a = 0; a < m->naxes; a++) {
        if (name && strcmp(m->names[a], name) == 0) {
            *axis = a;
            return HP_STATUS_OK;
        }
    }
    char buf[160];
    return hp_error(HP_STATUS_NOT_FOUND, "unknown mesh alias '%s' (mesh axes: %s)", name ? name : "(null)",
                    hp_mesh_str(m, buf, sizeof buf));
}

int hp_mesh_rank(const hp_mesh *m, int index) { return m->ranks[index]; }

int hp_mesh_index_of(const hp_mesh *m, int rank) {
    for (int i = 0; i < m->size; i++)
        if (m->ranks[i] == rank) return i;
    return -1;
}

void hp_mesh_coords(const hp_mesh *m, int index, int *coords) {
    for (int a = m->naxes - 1; a >= 0; a--) {
        coords[a] = index % m->dims[a];
        index /= m->dims[a];
    }
}

int hp_mesh_index(const hp_mesh *m, const int *coords) {
    int idx = 0;
    for (int a = 0; a < m->naxes; a++) idx = idx * m->dims[a] + coords[a];
    return idx;
}

bool hp_mesh_equal(const hp_mesh *a, const hp_mesh *b) {
    if (a == b) return true;
    if (a->naxes != b->naxes || a->size != b->size) return false;
    for (int i = 0; i < a->naxes; i++)
        if (a->dims[i] != b->dims[i] || strcmp(a->names[i], b->names[i]) != 0) return false;
    return memcmp(a->ranks, b->ranks, (size_t)a->size * sizeof *a->ranks) == 0;
}

char *hp_mesh_str(const hp_mesh *m, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "[");
    for (int a = 0; a < m->naxes; a++) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%d", a ? ", " : "", m->dims[a]);
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "]");
    if (m->names[0][0]) {
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, " (");
        for (int a = 0; a < m->naxes; a++)
            k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s", a ? ", " : "", m->names[a]);
        snprintf(buf + k, k < n ? n - k : 0, ")");
    }
    return buf;
}

hp_status hp_mesh_attach(hp_mesh *m, hp_comm *parent) {
    if (m->parent) return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh is already attached to a communicator");
    int psize = hp_comm_size(parent);
    for (int i = 0; i < m->size; i++)
        if (m->ranks[i] >= psize)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh rank %d is outside the communicator of %d ranks",
                            m->ranks[i], psize);
    int idx = hp_mesh_index_of(m, hp_comm_rank(parent));
    hp_comm *c = NULL;
    HP_CHECK(hp_comm_split(parent, idx >= 0 ? 0 : HP_COMM_COLOR_NONE, idx, &c));
    m->parent = parent;
    m->comm = c;
    m->my_index = idx;
    return HP_STATUS_OK;
}

hp_comm *hp_mesh_parent_comm(const hp_mesh *m) { return m->parent; }
int hp_mesh_my_index(const hp_mesh *m) { return m->comm ? m->my_index : -1; }

hp_status hp_mesh_axes_comm(hp_mesh *m, int naxes, const int *axes, hp_comm **out) {
    *out = NULL;
    if (!m->parent) return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh is not attached to a communicator");
    if (!m->comm) return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d is not in the mesh", hp_comm_rank(m->parent));
    if (naxes < 0 || naxes > m->naxes) return hp_error(HP_STATUS_INVALID_ARGUMENT, "%d axes requested of a %d-axis mesh", naxes, m->naxes);
    uint32_t used = 0;
    for (int k = 0; k < naxes; k++) {
        if (axes[k] < 0 || axes[k] >= m->naxes) return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh axis %d out of range", axes[k]);
        if (used & (1u << axes[k])) return hp_error(HP_STATUS_INVALID_ARGUMENT, "mesh axis '%s' listed twice", m->names[axes[k]]);
        used |= 1u << axes[k];
    }
    bool all_in_order = naxes == m->naxes;
    for (int k = 0; k < naxes && all_in_order; k++) all_in_order = axes[k] == k;
    if (all_in_order) {
        *out = m->comm;
        return HP_STATUS_OK;
    }
    for (int i = 0; i < m->ncache; i++) {
        if (m->cache[i].naxes == naxes && memcmp(m->cache[i].axes, axes, (size_t)naxes * sizeof *axes) == 0) {
            *out = m->cache[i].comm;
            return HP_STATUS_OK;
        }
    }
    int coords[HP_MESH_MAX_AXES];
    hp_mesh_coords(m, m->my_index, coords);
    int color = 0, key = 0;
    for (int a = 0; a < m->naxes; a++)
        if (!(used & (1u << a))) color = color * m->dims[a] + coords[a];
    for (int k = 0; k < naxes; k++) key = key * m->dims[axes[k]] + coords[axes[k]];
    if (m->ncache == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        axes_comm *nc = realloc(m->cache, (size_t)cap * sizeof *nc);
        if (!nc) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot grow the mesh communicator cache");
        m->cache = nc;
        m->cap = cap;
    }
    hp_comm *c = NULL;
    HP_CHECK(hp_comm_split(m->comm, color, key, &c));
    axes_comm *e = &m->cache[m->ncache++];
    memset(e, 0, sizeof *e);
    e->naxes = naxes;
    memcpy(e->axes, axes, (size_t)naxes * sizeof *axes);
    e->comm = c;
    *out = c;
    return HP_STATUS_OK;
}
