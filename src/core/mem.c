/* Data allocations counted per memory tier, with peaks (for reports and budgets). */
#include "hp/core.h"

#include <stdatomic.h>
#include <stdlib.h>

static _Atomic size_t g_in_use[HP_TIER_COUNT];
static _Atomic size_t g_peak[HP_TIER_COUNT];

const char *hp_tier_name(hp_tier t) {
    switch (t) {
    case HP_TIER_DEVICE: return "device";
    case HP_TIER_HOST: return "host";
    case HP_TIER_DISK: return "disk";
    default: return "?";
    }
}

void *hp_mem_alloc(hp_tier tier, size_t bytes) {
    HP_ASSERT(tier >= 0 && tier < HP_TIER_COUNT);
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) {
        hp_error(HP_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes on the %s tier", bytes,
                 hp_tier_name(tier));
        return NULL;
    }
    size_t now = atomic_fetch_add(&g_in_use[tier], bytes) + bytes;
    size_t peak = atomic_load(&g_peak[tier]);
    while (now > peak && !atomic_compare_exchange_weak(&g_peak[tier], &peak, now)) {
    }
    return p;
}

void hp_mem_free(hp_tier tier, void *p, size_t bytes) {
    if (!p) return;
    HP_ASSERT(tier >= 0 && tier < HP_TIER_COUNT);
    atomic_fetch_sub(&g_in_use[tier], bytes);
    free(p);
}

size_t hp_mem_in_use(hp_tier tier) { return atomic_load(&g_in_use[tier]); }
size_t hp_mem_peak(hp_tier tier) { return atomic_load(&g_peak[tier]); }
void hp_mem_reset_peak(hp_tier tier) { atomic_store(&g_peak[tier], atomic_load(&g_in_use[tier])); }
