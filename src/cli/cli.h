/* Internal to the CLI: one function per subcommand; each returns the process exit code. */
#ifndef HP_CLI_H
#define HP_CLI_H

#include "hp/core.h"

int hp_cli_train(int argc, char **argv);
int hp_cli_generate(int argc, char **argv);
int hp_cli_plan(int argc, char **argv);

/* Prints "hp: error: <what>: <message> (<status>)" to stderr and returns 1. */
int hp_cli_fail(hp_status st, const char *what);

#endif
