/* The `hp` command: train, generate, plan, check, calibrate. Only this layer prints and chooses exit codes. */
#include "cli/cli.h"

#include "hp/comm.h"
#ifdef HP_HAVE_MPI
#include "hp/comm_mpi.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: hp <command> [options]\n"
            "\n"
            "commands:\n"
            "  train RUN.yaml [--metrics FILE] [--resume [CKPT] | --overwrite] [--steps N]\n"
            "                       train the model the config describes; checkpoints go to\n"
            "                       train.checkpoint_dir, which must not hold another run's checkpoints\n"
            "                       unless --resume continues from them (from CKPT, default the dir's\n"
            "                       latest) or --overwrite deletes them (latest and every step_*; other\n"
            "                       files stay) before the first step\n"
            "  generate CKPT [--prompt TEXT] [--tokens N] [--temp T] [--top-k K] [--seed S]\n"
            "                       sample text from a checkpoint (a run dir or a step dir)\n"
            "  plan RUN.yaml [--ranks N] [--rank R] [--dump-after PASS] [--calibration FILE]\n"
            "                       print the plan (layouts, collectives, memory, predicted step time,\n"
            "                       compile pass times) without training; the prediction uses the\n"
            "                       calibration (default: the cache of `hp calibrate`) when it has an\n"
            "                       entry for this machine, else a flat model; --dump-after\n"
            "                       autodiff|shard|offload|memplan prints the IR after that pass instead\n"
            "  calibrate [-o FILE] [--reps N] [--fastest] [--quick] [--no-comm] [--show]\n"
            "                       measure this machine for the cost model (GEMM rates by shape,\n"
            "                       memory-bound kernels, attention; under mpirun also the collectives'\n"
            "                       latency and bandwidth per group size) and cache it in FILE (default\n"
            "                       $HP_CALIBRATION or ~/.cache/hyperparallel/calibration.json), keyed by\n"
            "                       CPU, cores, threads and ranks per node; --show prints the cached entry\n"
            "  check RUN.yaml [--ranks N]\n"
            "                       validate the config (and its strategy for N ranks) without building\n"
            "                       anything; prints nothing and exits 0 when it is good, else the error\n"
            "                       with file:line and exits 1\n"
            "  help                 this text\n");
}

static void log_sink(hp_log_level level, const char *line, void *user) {
    (void)user;
    static const char *names[] = {"debug", "info", "warning", "error"};
    if (level >= HP_LOG_LEVEL_WARN)
        fprintf(stderr, "hp: %s: %s\n", names[level], line);
    else
        fprintf(stderr, "%s\n", line);
}

int *hp_cli_argc;
char ***hp_cli_argv;
int hp_cli_rank = -1;

int hp_cli_fail(hp_status st, const char *what) {
    char prefix[32] = "";
    if (hp_cli_rank >= 0) snprintf(prefix, sizeof prefix, "[rank %d] ", hp_cli_rank);
    fprintf(stderr, "%shp: error: %s%s%s (%s)\n", prefix, what ? what : "", what ? ": " : "", hp_error_message(),
            hp_status_str(st));
    return 1;
}

hp_status hp_cli_world(hp_comm **out, bool *mpi) {
    *out = NULL;
    *mpi = false;
#ifdef HP_HAVE_MPI
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
        /* The communication thread waits inside MPI while compute runs: Open MPI's default
         * busy-polling would take a core from the compute threads (measured: the overlapped
         * step 40% slower on 2 cores). A user's own setting wins. */
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        HP_CHECK(hp_comm_mpi_init(hp_cli_argc, hp_cli_argv));
        *mpi = true;
        return hp_comm_mpi_world(out);
    }
#endif
    return HP_STATUS_OK;
}

void hp_cli_world_end(hp_comm *world, bool mpi, int rc) {
    if (world) hp_comm_free(world);
#ifdef HP_HAVE_MPI
    if (mpi) {
        if (rc != 0) hp_comm_mpi_abort(rc); /* one failed rank must not leave the others waiting */
        hp_comm_mpi_finalize();
    }
#else
    (void)mpi, (void)rc;
#endif
}

int main(int argc, char **argv) {
    hp_log_set_sink(log_sink, NULL);
    hp_cli_argc = &argc;
    hp_cli_argv = &argv;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return hp_cli_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return hp_cli_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return hp_cli_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "check")) return hp_cli_check(argc - 2, argv + 2);
    if (!strcmp(cmd, "calibrate")) return hp_cli_calibrate(argc - 2, argv + 2);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "hp: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
