/* `hp train`'s set-up before the trainer: the memory check (hp/fit.h) and progress lines for long
 * set-up work. */
#include "cli/cli.h"

#include "hp/comm.h"
#include "hp/fit.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---------------------------------------------------------------- progress of long set-up work */

#define TICK_FIRST_S 5  /* the first line after this long */
#define TICK_EVERY_S 10 /* then one per this long */

struct hp_cli_ticker {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    const char *what;
};

static void *ticker_main(void *arg) {
    hp_cli_ticker *t = arg;
    struct timespec start, until;
    clock_gettime(CLOCK_REALTIME, &start);
    long next = TICK_FIRST_S;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        until = start;
        until.tv_sec += next;
        int rc = 0;
        while (!t->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->cv, &t->mu, &until);
        if (t->stop) break;
        fprintf(stderr, "still %s (%ld s)\n", t->what, next);
        next += TICK_EVERY_S;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

hp_cli_ticker *hp_cli_ticker_start(const char *what, bool print) {
    if (!print) return NULL;
    hp_cli_ticker *t = calloc(1, sizeof *t);
    if (!t) return NULL; /* no progress lines: not worth failing the run for */
    t->what = what;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&t->th, NULL, ticker_main, t) != 0) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(t);
        return NULL;
    }
    return t;
}

void hp_cli_ticker_stop(hp_cli_ticker *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->th, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* ---------------------------------------------------------------- the memory check */

/* "1.50 GiB", "12.0 MiB", "512 bytes" */
static const char *sz(uint64_t b, char *buf, size_t n) {
    const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(buf, n, "%llu bytes", (unsigned long long)b);
    else snprintf(buf, n, "%.*f %s", u >= 3 ? 2 : 1, v, unit[u]);
    return buf;
}

hp_status hp_cli_check_memory(const hp_run_config *cfg, hp_comm *world, bool force, bool lead) {
    int size = world ? hp_comm_size(world) : 1, rank = world ? hp_comm_rank(world) : 0;
    hp_run_memory need;
    hp_machine_memory have;
    hp_cli_ticker *tk = hp_cli_ticker_start("planning the memory of a step", lead);
    hp_status est = hp_run_memory_estimate(cfg, size, rank, &need);
    hp_cli_ticker_stop(tk);
    hp_status st = est;
    if (st == HP_STATUS_OK) st = hp_machine_memory_get(&have);
    if (st == HP_STATUS_OK) st = hp_run_memory_check(cfg, &need, &have);
    bool refuse = st != HP_STATUS_OK && !(force && est == HP_STATUS_OK);
    /* every rank learns the lowest rank that refuses (and that would, without --force), which alone
     * reports: a uniform run would otherwise print the same message once per rank; all then stop
     * together or go on together */
    int32_t first[2] = {refuse ? rank : size, st != HP_STATUS_OK ? rank : size};
    if (size > 1) {
        hp_status ast = hp_comm_all_reduce(world, first, first, 2, HP_DTYPE_I32, HP_REDUCE_MIN);
        if (ast != HP_STATUS_OK) {
            hp_cli_fail(ast, "memory check");
            return ast;
        }
    }
    if (first[0] < size) {
        if (rank == first[0]) hp_cli_fail(st, est == HP_STATUS_OK ? "memory check" : "memory estimate");
        return refuse ? st : HP_STATUS_OUT_OF_MEMORY;
    }
    if (first[1] < size) { /* --force: the verdict is a warning */
        char prefix[32] = "";
        if (hp_cli_rank >= 0) snprintf(prefix, sizeof prefix, "[rank %d] ", hp_cli_rank);
        if (rank == first[1]) fprintf(stderr, "%shp: warning: %s (--force: running anyway)\n", prefix, hp_error_message());
        return HP_STATUS_OK;
    }
    if (lead) {
        char a[32], b[32], c[32], d[32], e[32];
        fprintf(stderr, "memory: about %s per rank planned (fast tier %s", sz(need.ram, a, sizeof a), sz(need.fast, b, sizeof b));
        if (need.offload) fprintf(stderr, ", host tier %s, disk tier %s", sz(need.host, c, sizeof c), sz(need.disk, d, sizeof d));
        fprintf(stderr, ", corpus %s); this process can have %s (%s)\n", sz(need.corpus, e, sizeof e),
                have.limit ? sz(have.limit, a, sizeof a) : "?", have.limited_by);
    }
    return HP_STATUS_OK;
}
