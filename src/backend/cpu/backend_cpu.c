/* The CPU backend (hp/backend.h): host memory counted against HP_TIER_DEVICE (the CPU's compute
 * tier), synchronous copies, and dispatch to the kernels of cpu.h. */
#include "hp/backend.h"

#include "backend/cpu/cpu.h"
#include "backend/cpu/streams.h"
#include "backend/cpu/team.h"

#include <stdlib.h>
#include <string.h>

static const char *cpu_get_name(hp_backend_t b) {
    (void)b;
    return "cpu";
}

static hp_status cpu_buffer_alloc(hp_backend_t b, size_t bytes, void **out) {
    (void)b;
    void *p = hp_mem_alloc(HP_TIER_DEVICE, bytes);
    if (!p) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cpu backend: cannot allocate %zu bytes", bytes);
    memset(p, 0, bytes);
    *out = p;
    return HP_STATUS_OK;
}

static void cpu_buffer_free(hp_backend_t b, void *data, size_t bytes) {
    (void)b;
    hp_mem_free(HP_TIER_DEVICE, data, bytes);
}

static hp_status cpu_copy(hp_backend_t b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (dst != src) memmove(dst, src, bytes);
    return HP_STATUS_OK;
}

static bool cpu_supports_op(hp_backend_t b, const hp_graph *g, const hp_node *n) {
    (void)b, (void)g;
    return n->op >= 0 && n->op < HP_OP_COUNT;
}

/* hp_kernel_args mirrors hp_node_args field for field; the copy keeps cpu.h free of the public
 * interface (kernels stay backend-internal). */
hp_status hp__cpu_run_args(const hp_node_args *a) {
    hp_kernel_args k;
    k.g = a->g;
    k.node = a->node;
    memcpy(k.in, a->in, sizeof k.in);
    memcpy(k.out, a->out, sizeof k.out);
    k.workspace = a->workspace;
    k.workspace_bytes = a->workspace_bytes;
    return hp__cpu_kernel(a->node->op)(&k);
}

static hp_status cpu_run_node(hp_backend_t b, const hp_node_args *a) {
    (void)b;
    return hp__cpu_run_args(a);
}

_Static_assert(sizeof(((hp_kernel_args *)0)->in) == sizeof(((hp_node_args *)0)->in), "input slots differ");
_Static_assert(sizeof(((hp_kernel_args *)0)->out) == sizeof(((hp_node_args *)0)->out), "output slots differ");

static const hp_backend_i cpu_iface = {
    /* .get_name     = */ cpu_get_name,
    /* .free         = */ NULL,
    /* .buffer_alloc = */ cpu_buffer_alloc,
    /* .buffer_free  = */ cpu_buffer_free,
    /* .set          = */ cpu_copy,
    /* .get          = */ cpu_copy,
    /* .supports_op  = */ cpu_supports_op,
    /* .run_node     = */ cpu_run_node,
    /* .synchronize  = */ NULL,
    /* .run_nodes    = */ hp__cpu_run_nodes,
    /* .stream_new        = */ hp__cpu_stream_new,
    /* .stream_free       = */ hp__cpu_stream_free,
    /* .event_new         = */ hp__cpu_event_new,
    /* .event_free        = */ hp__cpu_event_free,
    /* .event_record      = */ hp__cpu_event_record,
    /* .stream_wait_event = */ hp__cpu_stream_wait_event,
    /* .event_synchronize = */ hp__cpu_event_synchronize,
    /* .memcpy_async      = */ hp__cpu_memcpy_async,
    /* .workspace_bytes   = */ hp__cpu_workspace_bytes,
};

hp_status hp_backend_cpu_new(hp_backend_t *out) {
    *out = NULL;
    hp_backend_t b = calloc(1, sizeof *b);
    if (!b) return hp_error(HP_STATUS_OUT_OF_MEMORY, "cpu backend: out of memory");
    b->iface = cpu_iface;
    b->context = NULL;
    *out = b;
    return HP_STATUS_OK;
}

hp_status hp_backend_cpu_set_threads(int n, int *previous) {
    if (n < 1 || n > 4096)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "cpu backend: %d compute threads is outside [1, 4096]", n);
    if (previous) *previous = omp_get_max_threads();
    omp_set_num_threads(n);
    return HP_STATUS_OK;
}

int hp_backend_cpu_threads(void) { return omp_get_max_threads(); }
