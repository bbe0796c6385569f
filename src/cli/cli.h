/* Internal to the CLI: one function per subcommand; each returns the process exit code. */
#ifndef HP_CLI_H
#define HP_CLI_H

#include "hp/comm.h"
#include "hp/core.h"

int hp_cli_train(int argc, char **argv);
int hp_cli_generate(int argc, char **argv);
int hp_cli_plan(int argc, char **argv);
int hp_cli_check(int argc, char **argv);
int hp_cli_calibrate(int argc, char **argv);

/* The world communicator: MPI when the process was started by mpirun (or another MPI launcher),
 * otherwise NULL (one rank, no MPI runtime needed); *mpi says whether MPI was initialised. */
hp_status hp_cli_world(hp_comm **out, bool *mpi);
/* Frees the world and finalises MPI (aborting every rank when rc is not 0). */
void hp_cli_world_end(hp_comm *world, bool mpi, int rc);

/* main's argc/argv (MPI_Init may consume arguments) and this process's rank (-1: one process). */
extern int *hp_cli_argc;
extern char ***hp_cli_argv;
extern int hp_cli_rank;

/* Prints "[rank R] hp: error: <what>: <message> (<status>)" to stderr and returns 1. */
int hp_cli_fail(hp_status st, const char *what);

#endif
