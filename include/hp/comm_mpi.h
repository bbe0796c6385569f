/*
 * hp/comm_mpi.h — the MPI communicator (OpenMPI). Linked from the separate `hp_mpi` library; the
 * core `hp` library never includes mpi.h.
 *
 *     int main(int argc, char **argv) {
 *         hp_comm *world;
 *         if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
 *         hp_comm_mpi_world(&world);
 *         ...                                  // hp_comm_* calls, hp_comm_split, ...
 *         hp_comm_free(world);
 *         hp_comm_mpi_finalize();
 *     }
 *
 * Collectives map onto MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoallv,
 * MPI_Bcast, MPI_Send/MPI_Recv and MPI_Barrier; the non-blocking variants onto the MPI_I* calls
 * (MPI-3). bf16 travels as MPI_UINT16_T with user-defined sum/max/min operators. Counts above
 * INT_MAX elements return HP_STATUS_UNSUPPORTED. MPI errors return HP_STATUS_COMM with MPI's text.
 *
 * Stalls (hp_comm_set_timeout): every communicator keeps a duplicate of its MPI communicator for
 * arrival notices. A member that has waited in collective number k for min(timeout / 8, 1 s)
 * sends each other member a zero-byte message tagged k mod 32768 (MPI_Isend, then
 * MPI_Request_free: nothing to wait for, and no buffer); a member whose wait times out receives
 * what has come (MPI_Improbe/MPI_Mrecv) and reports those without a notice for k or later as not
 * arrived. Collectives that complete within the notice delay send nothing; old notices are
 * drained by the next slow wait of the receiver, or freed with the communicator. Only MPI-3
 * point-to-point calls are used, so it works with any transport of Open MPI (no one-sided RMA,
 * which over TCP would need the stopped rank's own progress). The world ranks of the group come
 * from MPI_Group_translate_ranks.
 *
 * Faults (hp/comm.h: hp_comm_report_failure, hp_comm_i.fault): the first hp_comm_mpi_world makes
 * one fault channel for the process, a duplicate of MPI_COMM_WORLD plus every world rank's process
 * id and host name (one MPI_Allgather); hp_comm_mpi_finalize frees it. A failure report is an
 * MPI_Isend of the message to every other world rank on it (MPI_Request_free: no wait). A waiting
 * thread asks every 10 ms whether a report came (MPI_Improbe/MPI_Mrecv) and, at most every 50 ms
 * per process, whether the process of every rank on this host (same host name) is still there
 * (kill(pid, 0), and /proc/PID/stat not a zombie): a killed or exited rank is found within about
 * 60 ms, before Open MPI's mpirun ends the job (it sends the other ranks SIGTERM about 1 s after a
 * rank dies, SIGKILL 1 s later). A dead rank on another host is not seen (mpirun still ends the
 * job, without this message); a stopped (SIGSTOP) process is alive: that is a stall (the timeout).
 */
#ifndef HP_COMM_MPI_H
#define HP_COMM_MPI_H

#include "hp/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initialises MPI (MPI_Init_thread with MPI_THREAD_MULTIPLE: the runtime's communication queues,
 * one thread per communicator group plus one for point-to-point, call MPI concurrently on
 * different communicators) unless already initialised, and sets MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD. Safe to call more than once. HP_STATUS_COMM on failure, or when the MPI library
 * provides a lower thread level. */
hp_status hp_comm_mpi_init(int *argc, char ***argv);

/* A new communicator over a duplicate of MPI_COMM_WORLD (caller owns it; free with hp_comm_free
 * before hp_comm_mpi_finalize). HP_STATUS_INVALID_ARGUMENT when MPI is not initialised. */
hp_status hp_comm_mpi_world(hp_comm **out);

/* Finalises MPI if this library initialised it. Every hp_comm from MPI must be freed first. The
 * MPI communicators of those that were freed with an abandoned send or collective still pending
 * (hp_comm_free) were kept unfreed until here, since Open MPI's libnbc crashes progressing a
 * nonblocking collective on a freed communicator: MPI_Finalize frees them; their request records
 * are released after it. */
hp_status hp_comm_mpi_finalize(void);

/*
 * Ends every process of the job (MPI_Abort on MPI_COMM_WORLD with `code`). For the application's
 * top level only (the CLI after a rank failed, so the other ranks are not left blocked in a
 * collective); library code never calls it.
 */
void hp_comm_mpi_abort(int code);

#ifdef __cplusplus
}
#endif
#endif /* HP_COMM_MPI_H */
