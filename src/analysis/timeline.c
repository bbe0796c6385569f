/*
 * Queries on the compute timeline (hp/liveness.h): when an overlapped transfer must start, or can
 * be done. Moved from the offload planner, which places its prefetches and offloads with them.
 */
#include "hp/liveness.h"

/* Latest p in [lo, use] with compute(p .. use-1) >= x; lo when even lo is too late. */
int32_t hp_timeline_latest_start(const hp_timeline *tl, int32_t lo, int32_t use, double x) {
    if (tl->at[use] - tl->at[lo] < x) return lo;
    int32_t a = lo, b = use; /* invariant: at[use] - at[a] >= x */
    while (a < b) {
        int32_t m = a + (b - a + 1) / 2;
        if (tl->at[use] - tl->at[m] >= x) a = m;
        else b = m - 1;
    }
    return a;
}

/* Earliest w in [def, cap] with compute(def+1 .. w) >= x; cap when none. */
int32_t hp_timeline_earliest_end(const hp_timeline *tl, int32_t def, int32_t cap, double x) {
    if (cap <= def) return def;
    int32_t a = def, b = cap;
    if (tl->at[cap + 1] - tl->at[def + 1] < x) return cap;
    while (a < b) {
        int32_t m = a + (b - a) / 2;
        if (tl->at[m + 1] - tl->at[def + 1] >= x) b = m;
        else a = m + 1;
    }
    return a;
}
