/* Internal to the CLI: one function per subcommand; each returns the process exit code. */
#ifndef HP_CLI_H
#define HP_CLI_H

#include "hp/config.h"
#include "hp/core.h"

int hp_cli_train(int argc, char **argv);
int hp_cli_generate(int argc, char **argv);
int hp_cli_plan(int argc, char **argv);
/* hp plan for a config with groups: (plan_pipeline.c); ranks 0: the groups' own count. */
int hp_cli_plan_pipeline(const hp_run_config *cfg, int ranks);
int hp_cli_check(int argc, char **argv);
int hp_cli_trace_view(int argc, char **argv);

/* main's argc/argv (MPI_Init may consume arguments) and this process's rank (-1: one process). */
extern int *hp_cli_argc;
extern char ***hp_cli_argv;
extern int hp_cli_rank;

/* Prints "[rank R] hp: error: <what>: <message> (<status>)" to stderr and returns 1. */
int hp_cli_fail(hp_status st, const char *what);

#endif
