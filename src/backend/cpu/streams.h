/* Internal: the CPU backend's stream, event, asynchronous copy and workspace methods (streams.c);
 * the contracts are hp_backend_i's (hp/backend.h). */
#ifndef HP_BACKEND_CPU_STREAMS_H
#define HP_BACKEND_CPU_STREAMS_H

#include "hp/backend.h"

hp_status hp__cpu_stream_new(hp_backend_t b, hp_backend_stream_t *out);
void hp__cpu_stream_free(hp_backend_t b, hp_backend_stream_t s);
hp_status hp__cpu_event_new(hp_backend_t b, hp_backend_event_t *out);
void hp__cpu_event_free(hp_backend_t b, hp_backend_event_t e);
hp_status hp__cpu_event_record(hp_backend_t b, hp_backend_event_t e, hp_backend_stream_t s);
hp_status hp__cpu_stream_wait_event(hp_backend_t b, hp_backend_stream_t s, hp_backend_event_t e);
hp_status hp__cpu_event_synchronize(hp_backend_t b, hp_backend_event_t e);
hp_status hp__cpu_memcpy_async(hp_backend_t b, void *dst, const void *src, size_t bytes, hp_copy_dir dir,
                               hp_backend_stream_t s);
size_t hp__cpu_workspace_bytes(hp_backend_t b, const hp_graph *g, const hp_node *n);

#endif
