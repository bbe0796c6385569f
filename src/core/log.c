/* Leveled logging through an application-installed sink; silent by default. */
#include "hp/core.h"

#include <stdio.h>
#include <time.h>

static hp_log_sink g_sink;
static void *g_sink_user;
static hp_log_level g_level = HP_LOG_LEVEL_INFO;
static int g_rank = -1;

void hp_log_set_sink(hp_log_sink sink, void *user) {
    g_sink = sink;
    g_sink_user = user;
}

void hp_log_set_level(hp_log_level level) { g_level = level; }

void hp_log_set_rank(int rank) { g_rank = rank; }

void hp_log(hp_log_level level, const char *fmt, ...) {
    if (!g_sink || level < g_level) return;
    char line[2048];
    int off = 0;
    if (g_rank >= 0) off = snprintf(line, sizeof line, "[rank %d] ", g_rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + off, sizeof line - (size_t)off, fmt, ap);
    va_end(ap);
    g_sink(level, line, g_sink_user);
}

double hp_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
