/*
 * `hp calibrate [-o FILE] [--reps N] [--fastest] [--quick] [--no-comm] [--show]`: measures this machine for the
 * cost model (hp/calibrate.h) with the thread count and ranks this process runs with (run it under
 * `mpirun -n N` as the training run will be, to also fit the collectives), and caches the result in
 * FILE under this machine's key (hp/costmodel.h). --fastest keeps each probe's fastest run instead of
 * the median (a machine shared with other work); --show prints the cached entry instead.
 */
#include "cli/cli.h"

#include "hp/calibrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void say(void *user, const char *what) {
    double *t0 = user;
    fprintf(stderr, "calibrate: [%6.1f s] %s\n", hp_now_seconds() - *t0, what);
}

int hp_cli_calibrate(int argc, char **argv) {
    const char *out = NULL;
    bool show = false;
    hp_calibrate_opts o = HP_CALIBRATE_OPTS_DEFAULT;
    for (int i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            char *end;
            long r = strtol(argv[++i], &end, 10);
            if (*end || r < 1 || r > 1000) {
                fprintf(stderr, "hp: error: --reps wants an integer in [1, 1000], got '%s'\n", argv[i]);
                return 2;
            }
            o.reps = (int)r;
        } else if (!strcmp(argv[i], "--quick")) {
            o.reps = 3;
            o.max_gemm = 128.0 * 512 * 512;
        } else if (!strcmp(argv[i], "--no-comm"))
            o.comm = false;
        else if (!strcmp(argv[i], "--show"))
            show = true;
        else {
            fprintf(stderr, "hp: error: unknown option '%s' for calibrate\n"
                            "usage: hp calibrate [-o FILE] [--reps N] [--fastest] [--quick] [--no-comm] [--show]\n", argv[i]);
            return 2;
        }
    }
    char path[4096];
    if (!out) {
        hp_status st = hp_calibration_default_path(path, sizeof path);
        if (st != HP_STATUS_OK) return hp_cli_fail(st, "calibrate");
        out = path;
    }
    hp_calibration *cal = malloc(sizeof *cal);
    if (!cal) return hp_cli_fail(hp_error(HP_STATUS_OUT_OF_MEMORY, "calibration"), "calibrate");
    int rc = 1;
    hp_comm *world = NULL;
    bool mpi = false;
    if (show) {
        hp_machine_key key;
        hp_status st = hp_machine_key_local(0, 0, &key);
        if (st == HP_STATUS_OK) st = hp_calibration_load(out, &key, 0, cal);
        if (st != HP_STATUS_OK) rc = hp_cli_fail(st, "calibrate --show");
        else {
            printf("calibration %s\n", out);
            hp_calibration_print(cal, stdout);
            rc = 0;
        }
        free(cal);
        return rc;
    }
    hp_status st = hp_cli_world(&world, &mpi);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, "starting MPI");
        goto done;
    }
    bool lead = !world || hp_comm_rank(world) == 0;
    if (world && hp_comm_size(world) > 1) hp_cli_rank = hp_comm_rank(world);
    double t0 = hp_now_seconds();
    o.progress = say;
    o.user = &t0;
    st = hp_calibrate(world, &o, cal);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, "calibrate");
        goto done;
    }
    if (lead) {
        st = hp_calibration_save(out, cal);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "calibrate");
            goto done;
        }
        hp_calibration_print(cal, stdout);
        char ks[256];
        printf("saved to %s (entry for %s)\n", out, hp_machine_key_str(&cal->key, ks, sizeof ks));
    }
    rc = 0;
done:
    free(cal);
    hp_cli_world_end(world, mpi, rc);
    return rc;
}
