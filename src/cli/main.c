/* The `hp` command: train, generate, plan, check, trace-view. Only this layer prints and chooses exit codes. */
#include "cli/cli.h"

#include <stdio.h>
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
            "        [--trace FILE.json [--trace-capacity SPANS]]\n"
            "                       record a timeline of the training steps (every rank and stream:\n"
            "                       compute, communication queues, copy engines) as Chrome trace-event\n"
            "                       JSON (Perfetto, chrome://tracing); rank 0 writes one file. SPANS\n"
            "                       per stream are preallocated (default 262144); more are dropped\n"
            "  generate CKPT [--prompt TEXT] [--tokens N] [--temp T] [--top-k K] [--seed S]\n"
            "                       sample text from a checkpoint (a run dir or a step dir)\n"
            "  plan RUN.yaml [--ranks N] [--rank R] [--dump-after PASS]\n"
            "                       print the plan (layouts, collectives, memory, compile pass times)\n"
            "                       without training; --dump-after autodiff|shard|offload|memplan\n"
            "                       prints the IR after that pass instead\n"
            "  check RUN.yaml [--ranks N]\n"
            "                       validate the config (and its strategy or groups for N ranks) without\n"
            "                       building anything; prints nothing and exits 0 when it is good, else\n"
            "                       the error with file:line and exits 1\n"
            "  trace-view FILE.json -o TIMELINE.svg [--step N] [--from MS] [--to MS] [--width PX]\n"
            "                       draw a trace (hp train --trace) as an SVG timeline: one row per\n"
            "                       rank and stream, spans coloured by kind (F, B, W, optimizer,\n"
            "                       collective, send/recv, copy, wait), a time axis in ms; --step N\n"
            "                       zooms on training step N, --from/--to on a window\n"
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
    if (!strcmp(cmd, "trace-view")) return hp_cli_trace_view(argc - 2, argv + 2);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "hp: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
