/* Bump allocator for metadata (ggml's context idea): chained blocks, freed all at once. */
#include "hp/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct block {
    struct block *next;
    size_t cap, used;
    _Alignas(64) unsigned char data[];
} block;

struct hp_arena {
    block *head;
    size_t block_bytes;
    size_t total_used;
};

hp_arena *hp_arena_new(size_t block_bytes) {
    hp_arena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->block_bytes = block_bytes ? block_bytes : 64 * 1024;
    return a;
}

void hp_arena_free(hp_arena *a) {
    if (!a) return;
    for (block *b = a->head, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(a);
}

void *hp_arena_alloc(hp_arena *a, size_t bytes, size_t align) {
    if (align == 0) align = 8;
    HP_ASSERT((align & (align - 1)) == 0 && align <= 4096);
    block *b = a->head;
    if (b) {
        uintptr_t base = (uintptr_t)b->data;
        size_t off = (size_t)(((base + b->used + align - 1) & ~(uintptr_t)(align - 1)) - base);
        if (off + bytes <= b->cap) {
            b->used = off + bytes;
            a->total_used += bytes;
            memset(b->data + off, 0, bytes);
            return b->data + off;
        }
    }
    size_t cap = bytes + align > a->block_bytes ? bytes + align : a->block_bytes;
    b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->cap = cap;
    b->next = a->head;
    a->head = b;
    size_t off = ((uintptr_t)b->data % align) ? align - (uintptr_t)b->data % align : 0;
    b->used = off + bytes;
    a->total_used += bytes;
    memset(b->data + off, 0, bytes);
    return b->data + off;
}

char *hp_arena_strdup(hp_arena *a, const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = hp_arena_alloc(a, n, 1);
    if (d) memcpy(d, s, n);
    return d;
}

char *hp_arena_printf(hp_arena *a, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *d = n >= 0 ? hp_arena_alloc(a, (size_t)n + 1, 1) : NULL;
    if (d) vsnprintf(d, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return d;
}

size_t hp_arena_used(const hp_arena *a) { return a->total_used; }
