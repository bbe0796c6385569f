/*
 * hp/backend.h — the compute backend interface: where tensor data lives and who runs the kernels.
 *
 * A backend is a struct of function pointers plus a context (ggml's ggml_backend_i): the runtime
 * allocates data buffers through it, copies between host memory and backend memory, asks whether
 * it supports a node and runs nodes on it. The CPU backend (host memory, OpenMP/OpenBLAS kernels)
 * is always built; a CUDA backend is another instance chosen at run time, built only with
 * -DHP_CUDA=ON. Core code sees only this header, never CUDA or BLAS headers.
 *
 *     hp_backend_t be;
 *     HP_CHECK(hp_backend_cpu_new(&be));
 *     void *buf;
 *     HP_CHECK(hp_backend_alloc(be, bytes, &buf));      // zeroed, 64-byte aligned
 *     HP_CHECK(hp_backend_set(be, buf, host, bytes));   // host -> backend
 *     ...
 *     hp_backend_buffer_free(be, buf, bytes);
 *     hp_backend_free(be);
 *
 * A backend object is used by one thread at a time (the program that owns it).
 */
#ifndef HP_BACKEND_H
#define HP_BACKEND_H

#include "hp/instr.h"
#include "hp/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hp_backend *hp_backend_t;

/* Streams and events of a backend (opaque; CUDA: cudaStream_t and cudaEvent_t). A NULL stream is the
 * compute stream: work queued on it runs in program order with the nodes (on the CPU: at once, on
 * the calling thread). */
typedef struct hp_backend_stream *hp_backend_stream_t;
typedef struct hp_backend_event *hp_backend_event_t;

/* Direction of an asynchronous copy (cudaMemcpyKind without the default). */
typedef enum hp_copy_dir {
    HP_COPY_HOST_TO_DEVICE = 0,
    HP_COPY_DEVICE_TO_HOST,
    HP_COPY_DEVICE_TO_DEVICE,
    HP_COPY_HOST_TO_HOST,
    HP_COPY_DIR_COUNT
} hp_copy_dir;

/*
 * The interface. Methods marked optional may be NULL; the public wrappers below supply the default.
 * Errors are returned as hp_status with the message recorded by hp_error.
 */
typedef struct hp_backend_i {
    /* "cpu", "cuda:0", ... ; static or context-owned storage. */
    const char *(*get_name)(hp_backend_t b);
    /* Frees the context (not the struct itself; hp_backend_free does that). Optional. */
    void (*free)(hp_backend_t b);
    /* `bytes` of zeroed, 64-byte-aligned backend memory (bytes may be 0: a valid unique pointer). */
    hp_status (*buffer_alloc)(hp_backend_t b, size_t bytes, void **out);
    /* Frees a buffer from buffer_alloc; `bytes` is the size requested. NULL data is allowed. */
    void (*buffer_free)(hp_backend_t b, void *data, size_t bytes);
    /* Copies host -> backend and backend -> host (may be asynchronous; see synchronize). */
    hp_status (*set)(hp_backend_t b, void *dst, const void *src_host, size_t bytes);
    hp_status (*get)(hp_backend_t b, void *dst_host, const void *src, size_t bytes);
    /* Whether run_node can run this node. Optional (default: true). */
    bool (*supports_op)(hp_backend_t b, const hp_graph *g, const hp_node *n);
    /* Runs one node (kernel dispatch). May be asynchronous. */
    hp_status (*run_node)(hp_backend_t b, const hp_node_args *a);
    /* Waits until every queued operation is done. Optional (default: nothing to wait for). */
    hp_status (*synchronize)(hp_backend_t b);
    /* Runs nodes a[0..n) in order, with the results run_node would give one by one, as one batch
     * (the CPU backend: one thread team for the whole sequence instead of a parallel region per
     * kernel). seconds (optional, n entries) receives each node's wall time. On an error, *failed
     * is the index of the failing node and the later nodes have not run. Optional (default: a
     * loop over run_node). */
    hp_status (*run_nodes)(hp_backend_t b, const hp_node_args *a, int n, double *seconds, int *failed);

    /* Streams, events, asynchronous copies: one to one onto cudaStreamCreate/Destroy,
     * cudaEventCreate/Destroy, cudaEventRecord, cudaStreamWaitEvent, cudaEventSynchronize and
     * cudaMemcpyAsync. All optional, as a group: without them the wrappers run everything at once
     * on the caller (streams are placeholders, events complete when recorded). Contracts:
     *   stream_new         an ordered queue of work, independent of the compute stream.
     *   event_record       marks the current end of `s` (NULL: the compute stream); re-recording
     *                      moves the mark; an event never recorded is complete.
     *   stream_wait_event  work queued on `s` after this call starts only once `e` completed
     *                      (the caller does not block).
     *   event_synchronize  blocks the caller until `e` completed; returns the error of any work
     *                      before the mark on its stream (sticky, as on CUDA).
     *   memcpy_async       queues a copy of `bytes` on `s`; the ranges must stay valid and `src`
     *                      unchanged until an event recorded after it completes; no overlap. */
    hp_status (*stream_new)(hp_backend_t b, hp_backend_stream_t *out);
    /* stream_free waits for its work first; events recorded on it stay valid (cudaStreamDestroy). */
    void (*stream_free)(hp_backend_t b, hp_backend_stream_t s);
    hp_status (*event_new)(hp_backend_t b, hp_backend_event_t *out);
    void (*event_free)(hp_backend_t b, hp_backend_event_t e);
    hp_status (*event_record)(hp_backend_t b, hp_backend_event_t e, hp_backend_stream_t s);
    hp_status (*stream_wait_event)(hp_backend_t b, hp_backend_stream_t s, hp_backend_event_t e);
    hp_status (*event_synchronize)(hp_backend_t b, hp_backend_event_t e);
    hp_status (*memcpy_async)(hp_backend_t b, void *dst, const void *src, size_t bytes, hp_copy_dir dir,
                              hp_backend_stream_t s);
    /* Scratch bytes run_node needs for node n (all threads together). Optional (default: the
     * operator's workspace rule, hp_op_workspace). */
    size_t (*workspace_bytes)(hp_backend_t b, const hp_graph *g, const hp_node *n);
} hp_backend_i;

struct hp_backend {
    hp_backend_i iface;
    void *context;
};

/* The CPU backend: host memory counted against HP_TIER_DEVICE, kernels of src/backend/cpu/. */
hp_status hp_backend_cpu_new(hp_backend_t *out);

/*
 * The CPU backend's compute threads: the OpenMP team that runs a program's kernels, which also sets
 * how many threads OpenBLAS uses (its OpenMP build sizes itself by omp_get_max_threads()). Sets
 * `n` (>= 1) threads for programs run by the CALLING thread (OpenMP's nthreads-var is per thread;
 * the trainer calls it on the thread that runs its steps) and for programs built after the call
 * (kernel workspaces are sized for the thread count at build). Returns the previous count.
 * Errors: HP_STATUS_INVALID_ARGUMENT for n < 1 or n > 4096 (nothing is changed).
 */
hp_status hp_backend_cpu_set_threads(int n, int *previous);
/* The compute threads programs run by the calling thread get (omp_get_max_threads()). */
int hp_backend_cpu_threads(void);

/* Public wrappers (they check arguments and supply the defaults of optional methods). */
const char *hp_backend_name(hp_backend_t b);
/* Frees the backend; NULL is allowed. Buffers must have been freed first. */
void hp_backend_free(hp_backend_t b);
hp_status hp_backend_alloc(hp_backend_t b, size_t bytes, void **out);
void hp_backend_buffer_free(hp_backend_t b, void *data, size_t bytes);
hp_status hp_backend_set(hp_backend_t b, void *dst, const void *src_host, size_t bytes);
hp_status hp_backend_get(hp_backend_t b, void *dst_host, const void *src, size_t bytes);
bool hp_backend_supports_op(hp_backend_t b, const hp_graph *g, const hp_node *n);
hp_status hp_backend_run_node(hp_backend_t b, const hp_node_args *a);
hp_status hp_backend_synchronize(hp_backend_t b);
/* Streams and events (see hp_backend_i for the contracts). *out is NULL on an error; free
 * functions accept NULL. Errors: HP_STATUS_OUT_OF_MEMORY, HP_STATUS_INTERNAL (a thread or device
 * stream that cannot start), HP_STATUS_INVALID_ARGUMENT (NULL pointers with bytes > 0, a bad
 * direction), and the sticky error of failed queued work from event_synchronize. */
hp_status hp_backend_stream_new(hp_backend_t b, hp_backend_stream_t *out);
void hp_backend_stream_free(hp_backend_t b, hp_backend_stream_t s);
hp_status hp_backend_event_new(hp_backend_t b, hp_backend_event_t *out);
void hp_backend_event_free(hp_backend_t b, hp_backend_event_t e);
hp_status hp_backend_event_record(hp_backend_t b, hp_backend_event_t e, hp_backend_stream_t s);
hp_status hp_backend_stream_wait_event(hp_backend_t b, hp_backend_stream_t s, hp_backend_event_t e);
hp_status hp_backend_event_synchronize(hp_backend_t b, hp_backend_event_t e);
hp_status hp_backend_memcpy_async(hp_backend_t b, void *dst, const void *src, size_t bytes, hp_copy_dir dir,
                                  hp_backend_stream_t s);
/* Scratch bytes for node n: the workspace_bytes method or the operator's rule. */
size_t hp_backend_workspace_bytes(hp_backend_t b, const hp_graph *g, const hp_node *n);
/* Runs nodes a[0..n) one by one through run_node, with run_nodes' arguments and errors: the default
 * of run_nodes, and a backend's fallback from its own. */
hp_status hp_backend_run_each(hp_backend_t b, const hp_node_args *a, int n, double *seconds, int *failed);
/* The run_nodes method (see hp_backend_i), or hp_backend_run_each without it. */
hp_status hp_backend_run_nodes(hp_backend_t b, const hp_node_args *a, int n, double *seconds, int *failed);

#ifdef __cplusplus
}
#endif
#endif /* HP_BACKEND_H */
