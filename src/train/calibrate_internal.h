/* Internal to the calibration probe (calibrate.c, calibrate_comm.c). */
#ifndef HP_TRAIN_CALIBRATE_INTERNAL_H
#define HP_TRAIN_CALIBRATE_INTERNAL_H

#include "hp/calibrate.h"

#include <stdarg.h>

typedef struct hp__probe {
    hp_comm *world;              /* NULL: one rank */
    const hp_calibrate_opts *o;
    int size;                    /* ranks */
    bool lead;                   /* rank 0: reports progress */
    bool by_node;                /* time kernels node by node (a multi-rank run's mode), else in a team */
    double window;               /* seconds each timed run of a probe lasts at least (repeating the
                                    program): > 0 where ranks share the cores */
} hp__probe;

/* Reports progress through opts.progress on rank 0. */
void hp__calib_say(const hp__probe *pr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A barrier over the world (nothing with one rank). */
hp_status hp__calib_barrier(const hp__probe *pr);
/* v[0..n) reduced over the ranks with op (through f32), in place. */
hp_status hp__calib_reduce(const hp__probe *pr, double *v, int n, hp_reduce_op op);
/* The median of v[0..n) (n >= 1; sorts v). */
double hp__calib_median(double *v, int n);
/* The communicator part: alpha-beta fits per operation and group size into c. */
hp_status hp__calibrate_comm(const hp__probe *pr, hp_calibration *c);

#endif
