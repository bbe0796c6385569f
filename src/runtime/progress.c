/* How the communication queues make progress (hp/runtime.h: hp_progress). */
#include "hp/runtime.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static const char *const g_names[HP_PROGRESS_COUNT] = {"auto", "block", "yield", "sleep", "inorder", "compute"};

const char *hp_progress_name(hp_progress p) { return p >= 0 && p < HP_PROGRESS_COUNT ? g_names[p] : "?"; }

/* What AUTO picks with more busy threads than cores (docs/benchmarks.md: the measured options). */
#define OVERSUBSCRIBED HP_PROGRESS_YIELD

static hp_progress from_cores(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long ranks = local ? strtol(local, NULL, 10) : 1;
    if (ranks < 1) ranks = 1;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    return cpus > 0 && ranks * (threads + 1) <= cpus ? HP_PROGRESS_BLOCK : OVERSUBSCRIBED;
}

hp_status hp_progress_auto(hp_progress *out) {
    const char *env = getenv("HP_PROGRESS");
    *out = from_cores();
    if (!env || !*env || !strcmp(env, "auto")) return HP_STATUS_OK;
    for (int p = HP_PROGRESS_BLOCK; p < HP_PROGRESS_COUNT; p++)
        if (!strcmp(env, g_names[p])) {
            *out = (hp_progress)p;
            return HP_STATUS_OK;
        }
    return hp_error(HP_STATUS_INVALID_ARGUMENT,
                    "HP_PROGRESS='%s' is not a progress mode (auto, block, yield, sleep, inorder, compute)", env);
}
