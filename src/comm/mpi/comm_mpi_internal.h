/*
 * Internal to src/comm/mpi/: the job's fault channel (comm_mpi_fault.c), shared by every MPI
 * communicator of the process (hp_comm_i.fault and report_fault).
 */
#ifndef HP_COMM_MPI_INTERNAL_H
#define HP_COMM_MPI_INTERNAL_H

#include "hp/comm.h"

#include <stddef.h>

/* Makes the channel (collective over MPI_COMM_WORLD) unless made: a duplicate of the world and
 * every rank's process id and host name. HP_STATUS_COMM, HP_STATUS_OUT_OF_MEMORY. */
hp_status hp__mpi_fault_init(void);
/* Frees the channel (before MPI_Finalize); unreceived notices are dropped. */
void hp__mpi_fault_fini(void);
/* The world rank of the first rank found failed (its notice came) or gone (its process on this
 * host ended), with what happened in msg; -1 when none. Thread-safe. */
int hp__mpi_fault(char *msg, size_t n);
/* Sends msg (its first 900 bytes) to every other rank of the job, once per process; no wait. */
void hp__mpi_report_fault(const char *msg);

#endif
