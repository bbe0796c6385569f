/*
 * The checks of the tests run under mpirun: each process records failures (a message naming its
 * rank) and goes on, so every rank reaches the final all-reduce of g_failed; OK() stops the current
 * function (OK_ON_FAIL: `return` by default; define it before including, e.g. as `goto out`).
 */
#ifndef HP_TESTS_MPI_CHECK_H
#define HP_TESTS_MPI_CHECK_H

#include "hp/core.h"

#include <stdio.h>

static int g_rank, g_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_failed = 1;                                                                          \
        }                                                                                          \
    } while (0)

#ifndef OK_ON_FAIL
#define OK_ON_FAIL return
#endif

#define OK(expr)                                                                                   \
    do {                                                                                           \
        hp_status st_ = (expr);                                                                    \
        if (st_ != HP_STATUS_OK) {                                                                 \
            fprintf(stderr, "[rank %d] FAIL %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #expr,   \
                    hp_error_message());                                                           \
            g_failed = 1;                                                                          \
            OK_ON_FAIL;                                                                            \
        }                                                                                          \
    } while (0)

#endif
