/*
 * Static arena planning over lifetime intervals (hp/liveness.h, hp_memplan_assign).
 *
 * Greedy by size with best fit, as TensorFlow Lite's ArenaPlanner + SimpleMemoryArena (Pisarchyk &
 * Lee, "Efficient Memory Management for Deep Neural Net Inference", 2020) and, online, ggml's
 * gallocr (ggml-alloc.c: a free-block list, best fit, then the arena's high-water mark): the
 * largest blocks are placed first, because they fragment the arena most; each block then goes into
 * the smallest hole left between the already placed blocks that are live at the same time as it.
 *
 * The placed blocks are kept sorted by offset, so one linear walk per block finds every hole:
 * O(n^2) for n blocks, a few milliseconds for the ~10^4 tensors of a training step.
 */
#include "hp/liveness.h"

#include <stdlib.h>

static size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

/* Sort key: qsort has no context argument in C17, so each entry carries what the order needs. */
typedef struct {
    size_t bytes;
    int32_t start;
    int idx;
} sort_key;

static int by_size_desc(const void *pa, const void *pb) {
    const sort_key *x = pa, *y = pb;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static bool overlaps(const hp_mem_interval *x, const hp_mem_interval *y) {
    return x->start <= y->end && y->start <= x->end;
}

hp_status hp_memplan_assign(hp_mem_interval *blocks, int n, size_t align, size_t *arena_bytes) {
    *arena_bytes = 0;
    if (align == 0 || (align & (align - 1)) != 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "memplan: alignment %zu is not a power of two", align);
    if (n < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "memplan: %d blocks", n);
    for (int i = 0; i < n; i++) {
        if (blocks[i].start < 0 || blocks[i].end < blocks[i].start)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "memplan: block %d has interval [%d, %d]", i,
                            (int)blocks[i].start, (int)blocks[i].end);
        if (blocks[i].bytes > SIZE_MAX / 2)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "memplan: block %d asks for %zu bytes", i, blocks[i].bytes);
    }
    sort_key *order = malloc(((size_t)n + 1) * sizeof *order);
    int *placed = malloc(((size_t)n + 1) * sizeof *placed); /* placed blocks, by increasing offset */
    if (!order || !placed) {
        free(order);
        free(placed);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "memplan: out of memory for %d blocks", n);
    }
    for (int i = 0; i < n; i++) order[i] = (sort_key){blocks[i].bytes, blocks[i].start, i};
    qsort(order, (size_t)n, sizeof *order, by_size_desc);

    int n_placed = 0;
    size_t top = 0;
    for (int oi = 0; oi < n; oi++) {
        hp_mem_interval *b = &blocks[order[oi].idx];
        size_t need = align_up(b->bytes, align);
        if (need == 0) { /* an empty tensor occupies nothing */
            b->offset = 0;
            continue;
        }
        /* Walk the placed blocks live at the same time, in offset order; the holes between them
         * (and above the last) are the candidates. Keep the smallest hole that fits. */
        size_t lo = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
        int insert_at = n_placed;
        for (int k = 0; k < n_placed; k++) {
            const hp_mem_interval *p = &blocks[placed[k]];
            if (!overlaps(b, p)) continue;
            if (p->offset > lo) {
                size_t gap = p->offset - lo;
                if (gap >= need && gap < best_gap) {
                    best_gap = gap;
                    best = lo;
                }
            }
            size_t hi = p->offset + align_up(p->bytes, align);
            if (hi > lo) lo = hi;
        }
        if (best == SIZE_MAX) best = lo; /* above every conflicting block */
        b->offset = best;
        for (int k = 0; k < n_placed; k++) /* keep `placed` sorted by offset */
            if (blocks[placed[k]].offset > best) {
                insert_at = k;
                break;
            }
        for (int k = n_placed; k > insert_at; k--) placed[k] = placed[k - 1];
        placed[insert_at] = order[oi].idx;
        n_placed++;
        if (best + need > top) top = best + need;
    }
    free(order);
    free(placed);
    *arena_bytes = top;
    return HP_STATUS_OK;
}
