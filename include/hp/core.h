/*
 * hp/core.h — status codes, error messages, logging, arenas, dtypes and shapes.
 *
 * Every fallible library function returns an hp_status. On failure it also leaves a message in a
 * thread-local buffer that names the offending value (read it with hp_error_message()). Library code
 * never prints and never exits; the caller (usually src/cli/) decides what the user sees.
 *
 *     hp_status st = hp_config_load("run.yaml", &cfg);
 *     if (st != HP_STATUS_OK)
 *         fprintf(stderr, "error: %s: %s\n", hp_status_str(st), hp_error_message());
 *
 * Pattern (after NCCL's NCCLCHECK / NCCLCHECKGOTO):
 *     HP_CHECK(expr);                      // return the status of expr if it failed
 *     HP_CHECK_GOTO(expr, st, cleanup);    // store it in st and jump to cleanup if it failed
 */
#ifndef HP_CORE_H
#define HP_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

typedef enum hp_status {
    HP_STATUS_OK = 0,
    HP_STATUS_INVALID_ARGUMENT, /* a caller-supplied value is out of range or inconsistent */
    HP_STATUS_SHAPE,            /* tensor shapes that do not fit the operation */
    HP_STATUS_OUT_OF_MEMORY,    /* an allocation failed, or a memory budget cannot be met */
    HP_STATUS_IO,               /* a file could not be opened, read, written or renamed */
    HP_STATUS_CORRUPT,          /* a file's contents are malformed (checkpoint, config, data) */
    HP_STATUS_CONFIG,           /* a run configuration is malformed or names unknown keys */
    HP_STATUS_UNSUPPORTED,      /* valid request that this build or backend does not implement */
    HP_STATUS_COMM,             /* a communicator (MPI/NCCL) operation failed */
    HP_STATUS_NOT_FOUND,        /* a named object (tensor, parameter, key) does not exist */
    HP_STATUS_INTERNAL,         /* an invariant failed inside the library (a bug) */
    HP_STATUS_NONFINITE,        /* a computation gave NaN or Inf (a training step's loss or gradients) */
    HP_STATUS_TIMEOUT,          /* a transfer waited longer than its communicator's timeout (a stalled rank) */
    HP_STATUS_COUNT
} hp_status;

/* The name of a status code ("invalid argument", ...). Never NULL; static storage. */
const char *hp_status_str(hp_status st);

/*
 * Records a failure: formats the message (printf-style) into the calling thread's error buffer and
 * returns `code` unchanged, so callers write `return hp_error(HP_STATUS_SHAPE, "...%d", x);`.
 * The message should name the bad value and, where there is one, the file or tensor.
 * Messages longer than 1023 bytes are truncated.
 */
hp_status hp_error(hp_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Prepends context to the current message ("loading ckpt/model.safetensors: " + old message) and
 * returns `code`. Use when passing an error up through a layer that knows more (a file name).
 */
hp_status hp_error_prefix(hp_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's last error message ("" if none). Valid until the next hp_error on the thread. */
const char *hp_error_message(void);

/* Clears the calling thread's error message. */
void hp_error_clear(void);

/*
 * The first failure of a sequence of steps that must all run even after one fails (draining
 * streams before their buffers go away):
 *
 *     hp_first_error fe = {HP_STATUS_OK, ""};
 *     hp_first_error_add(&fe, hp_copy_engine_synchronize(a));
 *     hp_first_error_add(&fe, hp_copy_engine_synchronize(b));
 *     return hp_first_error_status(&fe);   // the first failure, with its message restored
 */
typedef struct hp_first_error {
    hp_status st;
    char msg[1024];
} hp_first_error;
/* Keeps st and the thread's current message if st is the first failure; returns st. */
hp_status hp_first_error_add(hp_first_error *fe, hp_status st);
/* The first failure (its message made the thread's current one again), or HP_STATUS_OK. */
hp_status hp_first_error_status(const hp_first_error *fe);

#define HP_CHECK(expr)                                                                             \
    do {                                                                                           \
        hp_status hp_check_st_ = (expr);                                                           \
        if (hp_check_st_ != HP_STATUS_OK) return hp_check_st_;                                     \
    } while (0)

#define HP_CHECK_GOTO(expr, st, label)                                                             \
    do {                                                                                           \
        (st) = (expr);                                                                             \
        if ((st) != HP_STATUS_OK) goto label;                                                      \
    } while (0)

/*
 * Always-on assertion for broken invariants (bugs, never bad input): reports file, line and the
 * condition through the log sink, then aborts. Bad input must return a status instead.
 */
#define HP_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) hp__assert_fail(__FILE__, __LINE__, #cond);                                   \
    } while (0)
_Noreturn void hp__assert_fail(const char *file, int line, const char *cond);

/* ---------------------------------------------------------------- logging */

typedef enum hp_log_level {
    HP_LOG_LEVEL_DEBUG = 0,
    HP_LOG_LEVEL_INFO,
    HP_LOG_LEVEL_WARN,
    HP_LOG_LEVEL_ERROR,
} hp_log_level;

/*
 * A log sink receives one finished line (no trailing newline), already prefixed with
 * "[rank R] " once hp_log_set_rank() has been called with R >= 0. The default sink is NULL: the
 * library is silent until the application installs one (the CLI installs a stderr sink).
 */
typedef void (*hp_log_sink)(hp_log_level level, const char *line, void *user);

void hp_log_set_sink(hp_log_sink sink, void *user);
/* Messages below `level` are dropped. Default HP_LOG_LEVEL_INFO. */
void hp_log_set_level(hp_log_level level);
/* Rank prefix for every line; -1 (the default) means no prefix. */
void hp_log_set_rank(int rank);
void hp_log(hp_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Seconds on the monotonic clock (CLOCK_MONOTONIC) from an arbitrary origin: for durations only. */
double hp_now_seconds(void);

/* ---------------------------------------------------------------- arenas */

/*
 * A bump allocator for metadata that dies with its owner (ggml's context). Blocks are chained;
 * nothing is freed individually. Not thread-safe.
 */
typedef struct hp_arena hp_arena;

/* New arena whose blocks are at least `block_bytes` (0 picks 64 KiB). NULL when out of memory. */
hp_arena *hp_arena_new(size_t block_bytes);
/* Frees every block. NULL is allowed. */
void hp_arena_free(hp_arena *a);
/* `bytes` zeroed bytes aligned to `align` (a power of two, at most 4096). NULL when out of memory. */
void *hp_arena_alloc(hp_arena *a, size_t bytes, size_t align);
/* Copy of the NUL-terminated `s` in the arena; NULL when out of memory or when s is NULL. */
char *hp_arena_strdup(hp_arena *a, const char *s);
/* printf into the arena. */
char *hp_arena_printf(hp_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Bytes handed out so far (for reports). */
size_t hp_arena_used(const hp_arena *a);

/* ---------------------------------------------------------------- tracked memory */

/*
 * Memory tiers. The fast tier is where kernels compute (host DRAM on the CPU backend, HBM on
 * CUDA); the others are the HyperOffload tiers.
 */
typedef enum hp_tier {
    HP_TIER_DEVICE = 0,
    HP_TIER_HOST,
    HP_TIER_DISK,
    HP_TIER_COUNT
} hp_tier;

const char *hp_tier_name(hp_tier t);

/*
 * Aligned (64-byte) data allocation counted against `tier`, so reports can give bytes in use and
 * peaks per tier (Redis's zmalloc_used_memory). Returns NULL on failure and records an error.
 * Thread-safe. Free with hp_mem_free, passing the same tier and size.
 */
void *hp_mem_alloc(hp_tier tier, size_t bytes);
void hp_mem_free(hp_tier tier, void *p, size_t bytes);
/* Bytes in use now / the highest bytes in use since start or the last reset. */
size_t hp_mem_in_use(hp_tier tier);
size_t hp_mem_peak(hp_tier tier);
void hp_mem_reset_peak(hp_tier tier);

/* ---------------------------------------------------------------- dtypes */

typedef enum hp_dtype {
    HP_DTYPE_F32 = 0,
    HP_DTYPE_BF16, /* storage type; kernels compute in f32 (designed in, not yet used by kernels) */
    HP_DTYPE_I32,
    HP_DTYPE_COUNT
} hp_dtype;

/* Bytes per element; 0 for an invalid dtype. */
size_t hp_dtype_size(hp_dtype dt);
/* "f32", "bf16", "i32"; "?" for an invalid dtype. */
const char *hp_dtype_name(hp_dtype dt);
/* Parses "f32"/"F32", "bf16"/"BF16", "i32"/"I32". HP_STATUS_INVALID_ARGUMENT names the string. */
hp_status hp_dtype_parse(const char *s, hp_dtype *out);

/* bf16 <-> f32 conversion (round-to-nearest-even on the way down). */
uint16_t hp_f32_to_bf16(float x);
float hp_bf16_to_f32(uint16_t x);

/* ---------------------------------------------------------------- shapes */

#define HP_MAX_DIMS 8

/* A dense row-major shape. dim[i] >= 0. A scalar has ndim 0 and numel 1. */
typedef struct hp_shape {
    int ndim;
    int64_t dim[HP_MAX_DIMS];
} hp_shape;

/* Builds a shape from ndim values. ndim must be in [0, HP_MAX_DIMS] (asserted). */
hp_shape hp_shape_make(int ndim, const int64_t *dims);
/* Convenience: HP_SHAPE(2, 3) is the shape [2, 3]. */
#define HP_SHAPE(...)                                                                              \
    hp_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
#define HP_SHAPE_SCALAR hp_shape_make(0, NULL)

/* Product of the dims (1 for a scalar). */
int64_t hp_shape_numel(const hp_shape *s);
bool hp_shape_equal(const hp_shape *a, const hp_shape *b);
/* Contiguous row-major strides in elements: strides[ndim-1] = 1. */
void hp_shape_strides(const hp_shape *s, int64_t *strides);
/* Writes "[2, 3, 4]" into buf (always NUL-terminated); returns buf. */
char *hp_shape_str(const hp_shape *s, char *buf, size_t n);
/* Product of dims [from, to). */
int64_t hp_shape_prod(const hp_shape *s, int from, int to);

#ifdef __cplusplus
}
#endif
#endif /* HP_CORE_H */
