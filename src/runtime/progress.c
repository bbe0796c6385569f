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

hp_progress hp_progress_auto(void) {
    const char *env = getenv("HP_PROGRESS");
    for (int p = HP_PROGRESS_BLOCK; env && p < HP_PROGRESS_COUNT; p++)
        if (!strcmp(env, g_names[p])) return (hp_progress)p;
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
