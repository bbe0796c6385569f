/* Internal to the CLI: one function per subcommand; each returns the process exit code. */
#ifndef HP_CLI_H
#define HP_CLI_H

#include "hp/comm.h"
#include "hp/config.h"
#include "hp/core.h"

int hp_cli_train(int argc, char **argv);
/* hp train for model.family multimodal (train_mm.c); frees cfg, starts and ends the world itself;
 * trace_path NULL: no trace. */
int hp_cli_train_mm(hp_run_config *cfg, const char *metrics_path, const char *trace_path);
int hp_cli_generate(int argc, char **argv);
int hp_cli_plan(int argc, char **argv);
/* hp plan for a config with groups: (plan_pipeline.c); ranks 0: the groups' own count; calibration
 * NULL: hp calibrate's cache. */
int hp_cli_plan_pipeline(const hp_run_config *cfg, int ranks, const char *calibration);
/* hp plan for model.family multimodal (plan_mm.c); ranks 0: the groups' count (3 without groups). */
int hp_cli_plan_mm(const hp_run_config *cfg, int ranks, const char *calibration);
int hp_cli_check(int argc, char **argv);
int hp_cli_ckpt(int argc, char **argv);
int hp_cli_trace_view(int argc, char **argv);
int hp_cli_calibrate(int argc, char **argv);
int hp_cli_eval(int argc, char **argv);
int hp_cli_plot(int argc, char **argv);
int hp_cli_data(int argc, char **argv);
int hp_cli_tokenizer(int argc, char **argv);
int hp_cli_convert(int argc, char **argv);
int hp_cli_rl(int argc, char **argv);

/* The world communicator: MPI when the process was started by mpirun (or another MPI launcher),
 * otherwise NULL (one rank, no MPI runtime needed); *mpi says whether MPI was initialised. */
hp_status hp_cli_world(hp_comm **out, bool *mpi);
/* Frees the world and finalises MPI (aborting every rank when rc is not 0). */
void hp_cli_world_end(hp_comm *world, bool mpi, int rc);
/* After a failure under MPI (rc != 0), before anything the step used is freed: with `report` (this
 * rank's own error, not one every rank reached alike) the other ranks are sent its message
 * (hp_comm_report_failure) and given 0.5 s to print it; then, when a rank of the job failed, is gone
 * or stalled (longer than comm_timeout seconds), ends the job with MPI_Abort here, freeing nothing:
 * abandoned transfers may still write into the buffers. Returns in every other case. */
void hp_cli_world_fault(hp_comm *world, bool mpi, int rc, bool report, double comm_timeout);

/* main's argc/argv (MPI_Init may consume arguments) and this process's rank (-1: one process). */
extern int *hp_cli_argc;
extern char ***hp_cli_argv;
extern int hp_cli_rank;

/* Prints "[rank R] hp: error: <what>: <message> (<status>)" to stderr and returns 1. */
int hp_cli_fail(hp_status st, const char *what);

/* Command-line numbers: every value an option takes is range-checked before use. Each parses the
 * whole of `text` (decimal; no sign for the unsigned one, a finite number for the double) into *out
 * and returns true when it lies in [lo, hi]; otherwise prints "hp: error: OPT wants ..., got 'TEXT'"
 * and returns false (the caller exits 2). */
/* The most ranks a job may have: a strategy's mesh holds at most 2^30 devices (hp/strategy.h). */
#define HP_CLI_MAX_RANKS ((int64_t)1 << 30)

bool hp_cli_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out);
bool hp_cli_u64(const char *opt, const char *text, uint64_t *out);
bool hp_cli_double(const char *opt, const char *text, double lo, double hi, double *out);

/* True when option argv[i] has a value after it; otherwise prints "hp: error: OPT needs a value". */
bool hp_cli_has_value(int argc, char **argv, int i);

/* Progress of long set-up work (train_setup.c): with `print`, a thread writes "still WHAT (N s)"
 * to stderr 5 s after the start and every 10 s after that, until hp_cli_ticker_stop (NULL: none). */
typedef struct hp_cli_ticker hp_cli_ticker;
hp_cli_ticker *hp_cli_ticker_start(const char *what, bool print);
void hp_cli_ticker_stop(hp_cli_ticker *t);

/* `hp train`'s memory check before the trainer is built (hp/fit.h), collective over `world` (NULL:
 * one process): every rank plans its memory and compares it with what it can have; the lowest rank
 * that does not fit prints the estimate and what to change, and every rank returns its error
 * (HP_STATUS_OUT_OF_MEMORY, or the planner's) to stop together. With `force` a verdict that the run
 * does not fit is printed as a warning and the run goes on (a planning error still stops it).
 * When it fits, the lead prints one "memory:" line with the estimate and the limit. */
hp_status hp_cli_check_memory(const hp_run_config *cfg, hp_comm *world, bool force, bool lead);

#endif
