/* The `hp` command: train, generate, plan, check, ckpt, trace-view, calibrate. Only this layer prints
 * and chooses exit codes. */
#include "cli/cli.h"

#include "hp/comm.h"
#ifdef HP_HAVE_MPI
#include "hp/comm_mpi.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: hp <command> [options]\n"
            "\n"
            "commands:\n"
            "  train RUN.yaml [--metrics FILE] [--resume [CKPT] | --overwrite] [--steps N] [--force]\n"
            "        [--dry-run]    train the model the config describes; checkpoints go to\n"
            "                       train.checkpoint_dir, which must not hold another run's checkpoints\n"
            "                       unless --resume continues from them (from CKPT, default the dir's\n"
            "                       latest) or --overwrite deletes them (latest and every step_*; other\n"
            "                       files stay) before the first step; one run per directory at a\n"
            "                       time (a lock on its .lock file, naming the holder's pid). A run\n"
            "                       whose planned memory per rank exceeds what the process can have\n"
            "                       stops before building anything (--force: a warning); --dry-run\n"
            "                       stops after these checks\n"
            "        [--trace FILE.json [--trace-capacity SPANS]]\n"
            "                       record a timeline of the training steps (every rank and stream:\n"
            "                       compute, communication queues, copy engines) as Chrome trace-event\n"
            "                       JSON (Perfetto, chrome://tracing); rank 0 writes one file. SPANS\n"
            "                       per stream are preallocated (default 262144); more are dropped\n"
            "                       and counted\n"
            "  generate CKPT [--prompt TEXT]... [--batch N] [--tokens N] [--temp T] [--top-k K] [--top-p P] [--seed S] [--no-cache] [--stats] [--strategy RUN.yaml]\n"
            "                       sample text from a checkpoint (a run dir or a step dir)\n"
            "  rl RUN.yaml [--steps N] [--verify-sync] [--metrics FILE.jsonl] [--quiet]\n"
            "                       GRPO on a verifiable task (rl: section) with actor and learner groups\n"
            "  eval CKPT [--data FILE] [--batch B] [--tokenizer T] [--json]\n"
            "                       loss (nats/token), perplexity and bits per byte of a checkpoint over\n"
            "                       the run's whole held-out split, or over FILE; windows of the model's\n"
            "                       context, stride = context; under mpirun the windows are split\n"
            "  plot METRICS.jsonl [MORE.jsonl ...] -o CURVES.svg [--width PX]\n"
            "                       draw training/validation loss, learning rate and tokens/s against\n"
            "                       step (hp train --metrics) as SVG, several runs overlaid\n"
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
            "  tokenizer train|encode|decode|info ...\n"
            "                       byte-level BPE tokenizers: train one on text files (a Hugging Face\n"
            "                       tokenizer.json), encode a file to ids, decode ids (hp tokenizer -h)\n"
            "  check RUN.yaml [--ranks N]\n"
            "                       validate the config (and its strategy or groups for N ranks) without\n"
            "                       building anything; prints nothing and exits 0 when it is good, else\n"
            "                       the error with file:line and exits 1\n"
            "  ckpt verify CKPT     check a checkpoint (a step dir, or a run dir's latest) without loading\n"
            "                       it into a model: every file's checksums, its binding to the step,\n"
            "                       rank and mesh, finite values, the config against the tensors; prints\n"
            "                       each file and exits 0, or names the fault and exits 1\n"
            "  ckpt list RUN_DIR    the run dir's checkpoints, each verified: ok, corrupt or incomplete,\n"
            "                       and which one latest names (exit 1 when that one is not ok)\n"
            "  trace-view FILE.json -o TIMELINE.svg [--step N] [--from MS] [--to MS] [--width PX]\n"
            "                       draw a trace (hp train --trace) as an SVG timeline: one row per\n"
            "                       rank and stream, spans coloured by kind (F, B, W, optimizer,\n"
            "                       collective, send/recv, copy, wait), a time axis in ms; --step N\n"
            "                       zooms on training step N, --from/--to on a window\n"
            "  data prepare CORPUS... --tokenizer T -o DIR [--shard-tokens N] [--threads N] [--val-fraction F]\n"
            "                       tokenize text files and JSONL ({\"text\": ...} per line) into token\n"
            "                       shards for data.shards (the held-out tail of the input is the\n"
            "                       validation split); `data verify DIR` checks a shard set\n"
            "  convert --from-hf HF_DIR -o RUN_DIR | --to-hf CKPT -o HF_DIR\n"
            "                       import a Hugging Face GPT-2 or Llama checkpoint (config.json +\n"
            "                       safetensors, sharded or not) as a run dir with run.yaml and a step-0\n"
            "                       checkpoint without optimizer state; or export a checkpoint to\n"
            "                       Hugging Face's layout (config.json + model.safetensors)\n"
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

bool hp_cli_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = text[0] && !isspace((unsigned char)text[0]) ? strtoll(text, &end, 10) : 0;
    if (!text[0] || isspace((unsigned char)text[0]) || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "hp: error: %s wants an integer in [%lld, %lld], got '%s'\n", opt, (long long)lo, (long long)hi,
                text);
        return false;
    }
    *out = v;
    return true;
}

bool hp_cli_u64(const char *opt, const char *text, uint64_t *out) {
    char *end;
    errno = 0;
    bool digit = isdigit((unsigned char)text[0]);
    unsigned long long v = digit ? strtoull(text, &end, 10) : 0;
    if (!digit || *end || errno == ERANGE) {
        fprintf(stderr, "hp: error: %s wants an integer in [0, %llu], got '%s'\n", opt, (unsigned long long)UINT64_MAX,
                text);
        return false;
    }
    *out = v;
    return true;
}

bool hp_cli_double(const char *opt, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = text[0] && !isspace((unsigned char)text[0]) ? strtod(text, &end) : NAN;
    if (!text[0] || isspace((unsigned char)text[0]) || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "hp: error: %s wants a number in [%g, %g], got '%s'\n", opt, lo, hi, text);
        return false;
    }
    *out = v;
    return true;
}

bool hp_cli_has_value(int argc, char **argv, int i) {
    if (i + 1 < argc) return true;
    fprintf(stderr, "hp: error: %s needs a value\n", argv[i]);
    return false;
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

void hp_cli_world_fault(hp_comm *world, bool mpi, int rc, bool report, double comm_timeout) {
#ifdef HP_HAVE_MPI
    if (!mpi || !world || rc == 0 || hp_comm_size(world) < 2) return;
    if (report && !hp_comm_stalled(world)) {
        /* The others stop with this rank's message: their waits see it within milliseconds; the
         * abort below would kill them before they print it, hence a short grace first. */
        hp_comm_report_failure(world, hp_error_message());
        nanosleep(&(struct timespec){0, 500000000L}, NULL);
    }
    char prefix[32] = "";
    if (hp_cli_rank >= 0) snprintf(prefix, sizeof prefix, "[rank %d] ", hp_cli_rank);
    if (hp_comm_peer_failed(world)) {
        fprintf(stderr, "%shp: a rank of the job failed or is gone: ending the job (MPI_Abort)\n", prefix);
        fflush(NULL);
        hp_comm_mpi_abort(1);
    }
    if (hp_comm_stalled(world)) {
        fprintf(stderr, "%shp: a rank stalled for longer than train.comm_timeout (%g s): ending the job (MPI_Abort); "
                "raise train.comm_timeout if such waits are expected, 0 for no limit\n", prefix, comm_timeout);
        fflush(NULL);
        hp_comm_mpi_abort(1);
    }
#else
    (void)world, (void)mpi, (void)rc, (void)report, (void)comm_timeout;
#endif
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
    if (!strcmp(cmd, "ckpt")) return hp_cli_ckpt(argc - 2, argv + 2);
    if (!strcmp(cmd, "trace-view")) return hp_cli_trace_view(argc - 2, argv + 2);
    if (!strcmp(cmd, "calibrate")) return hp_cli_calibrate(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return hp_cli_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "plot")) return hp_cli_plot(argc - 2, argv + 2);
    if (!strcmp(cmd, "data")) return hp_cli_data(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenizer")) return hp_cli_tokenizer(argc - 2, argv + 2);
    if (!strcmp(cmd, "convert")) return hp_cli_convert(argc - 2, argv + 2);
    if (!strcmp(cmd, "rl")) return hp_cli_rl(argc - 2, argv + 2);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "hp: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
