/* Public wrappers of the backend interface (hp/backend.h): argument checks and the defaults of
 * optional methods, so every backend implements only what it needs. */
#include "hp/backend.h"

#include <stdlib.h>

const char *hp_backend_name(hp_backend_t b) { return b && b->iface.get_name ? b->iface.get_name(b) : "?"; }

void hp_backend_free(hp_backend_t b) {
    if (!b) return;
    if (b->iface.free) b->iface.free(b);
    free(b);
}

hp_status hp_backend_alloc(hp_backend_t b, size_t bytes, void **out) {
    *out = NULL;
    return b->iface.buffer_alloc(b, bytes, out);
}

void hp_backend_buffer_free(hp_backend_t b, void *data, size_t bytes) {
    if (data) b->iface.buffer_free(b, data, bytes);
}

hp_status hp_backend_set(hp_backend_t b, void *dst, const void *src_host, size_t bytes) {
    if (bytes == 0) return HP_STATUS_OK;
    if (!dst || !src_host)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: copy of %zu bytes to %p from %p", hp_backend_name(b), bytes,
                        dst, src_host);
    return b->iface.set(b, dst, src_host, bytes);
}

hp_status hp_backend_get(hp_backend_t b, void *dst_host, const void *src, size_t bytes) {
    if (bytes == 0) return HP_STATUS_OK;
    if (!dst_host || !src)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: copy of %zu bytes to %p from %p", hp_backend_name(b), bytes,
                        dst_host, src);
    return b->iface.get(b, dst_host, src, bytes);
}

bool hp_backend_supports_op(hp_backend_t b, const hp_graph *g, const hp_node *n) {
    return b->iface.supports_op ? b->iface.supports_op(b, g, n) : true;
}

hp_status hp_backend_run_node(hp_backend_t b, const hp_node_args *a) { return b->iface.run_node(b, a); }

hp_status hp_backend_run_each(hp_backend_t b, const hp_node_args *a, int n, double *seconds, int *failed) {
    *failed = -1;
    for (int i = 0; i < n; i++) {
        double t0 = seconds ? hp_now_seconds() : 0;
        hp_status st = b->iface.run_node(b, &a[i]);
        if (st != HP_STATUS_OK) {
            *failed = i;
            return st;
        }
        if (seconds) seconds[i] = hp_now_seconds() - t0;
    }
    return HP_STATUS_OK;
}

hp_status hp_backend_run_nodes(hp_backend_t b, const hp_node_args *a, int n, double *seconds, int *failed) {
    *failed = -1;
    return b->iface.run_nodes ? b->iface.run_nodes(b, a, n, seconds, failed) : hp_backend_run_each(b, a, n, seconds, failed);
}

hp_status hp_backend_synchronize(hp_backend_t b) {
    return b->iface.synchronize ? b->iface.synchronize(b) : HP_STATUS_OK;
}
