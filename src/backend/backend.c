/* Public wrappers of the backend interface (hp/backend.h): argument checks and the defaults of
 * optional methods, so every backend implements only what it needs. */
#include "hp/backend.h"

#include "hp/ops.h"

#include <stdlib.h>
#include <string.h>

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

/* ---------------------------------------------------------------- streams and events */

/* Without the stream methods a backend runs everything at once on the caller: a stream is a
 * placeholder handle, an event is complete as soon as it is recorded. */
static char g_placeholder;

static bool has_streams(hp_backend_t b) { return b->iface.stream_new && b->iface.memcpy_async; }

hp_status hp_backend_stream_new(hp_backend_t b, hp_backend_stream_t *out) {
    *out = NULL;
    if (!has_streams(b)) {
        *out = (hp_backend_stream_t)(void *)&g_placeholder;
        return HP_STATUS_OK;
    }
    return b->iface.stream_new(b, out);
}

void hp_backend_stream_free(hp_backend_t b, hp_backend_stream_t s) {
    if (s && has_streams(b) && b->iface.stream_free) b->iface.stream_free(b, s);
}

hp_status hp_backend_event_new(hp_backend_t b, hp_backend_event_t *out) {
    *out = NULL;
    if (!has_streams(b) || !b->iface.event_new) {
        *out = (hp_backend_event_t)(void *)&g_placeholder;
        return HP_STATUS_OK;
    }
    return b->iface.event_new(b, out);
}

void hp_backend_event_free(hp_backend_t b, hp_backend_event_t e) {
    if (e && has_streams(b) && b->iface.event_new && b->iface.event_free) b->iface.event_free(b, e);
}

hp_status hp_backend_event_record(hp_backend_t b, hp_backend_event_t e, hp_backend_stream_t s) {
    if (!e) return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: event_record of a NULL event", hp_backend_name(b));
    return has_streams(b) && b->iface.event_record ? b->iface.event_record(b, e, s) : HP_STATUS_OK;
}

hp_status hp_backend_stream_wait_event(hp_backend_t b, hp_backend_stream_t s, hp_backend_event_t e) {
    if (!e) return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: stream_wait_event on a NULL event", hp_backend_name(b));
    return has_streams(b) && b->iface.stream_wait_event ? b->iface.stream_wait_event(b, s, e) : HP_STATUS_OK;
}

hp_status hp_backend_event_synchronize(hp_backend_t b, hp_backend_event_t e) {
    if (!e) return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: event_synchronize of a NULL event", hp_backend_name(b));
    return has_streams(b) && b->iface.event_synchronize ? b->iface.event_synchronize(b, e) : HP_STATUS_OK;
}

hp_status hp_backend_memcpy_async(hp_backend_t b, void *dst, const void *src, size_t bytes, hp_copy_dir dir,
                                  hp_backend_stream_t s) {
    if ((int)dir < 0 || dir >= HP_COPY_DIR_COUNT)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: copy direction %d", hp_backend_name(b), (int)dir);
    if (bytes == 0) return HP_STATUS_OK;
    if (!dst || !src)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s: copy of %zu bytes to %p from %p", hp_backend_name(b), bytes,
                        dst, src);
    if (has_streams(b)) return b->iface.memcpy_async(b, dst, src, bytes, dir, s);
    switch (dir) { /* at once, through the synchronous copies */
    case HP_COPY_HOST_TO_DEVICE: return hp_backend_set(b, dst, src, bytes);
    case HP_COPY_DEVICE_TO_HOST: return hp_backend_get(b, dst, src, bytes);
    case HP_COPY_DEVICE_TO_DEVICE: return b->iface.set(b, dst, src, bytes); /* set/get copy within memory */
    default: memmove(dst, src, bytes); return HP_STATUS_OK;
    }
}

size_t hp_backend_workspace_bytes(hp_backend_t b, const hp_graph *g, const hp_node *n) {
    return b->iface.workspace_bytes ? b->iface.workspace_bytes(b, g, n) : hp_op_workspace(g, n);
}
