/* watchdog.h — no rank waits forever.
 *
 * A rank whose peer has stopped (crashed, SIGSTOPped, stuck in a driver) waits in a
 * collective that never completes; without help it spins until someone kills the job.
 * Every rank therefore runs a watchdog thread that watches a progress mark, moved by
 * start-up, every training step, every collective issued, checkpoint I/O and shut-down. If the mark has not
 * moved for --timeout seconds, the thread prints one line naming this rank, the step
 * and what it is waiting in (the first collective that has not completed), tells the
 * backend to abort its communicator (ncclCommAbort: a hung NCCL kernel cannot block
 * the exit) and ends the whole job with MPI_Abort, exit code 5.
 * It also polls the backend for asynchronous communicator errors (NCCL) once a second. */
#ifndef ZL_WATCHDOG_H
#define ZL_WATCHDOG_H

#include <stddef.h>

/* Start the thread (timeout_s = 0: progress is still tracked but nothing fires). */
void zl_watchdog_start(const char *prog, int rank, int timeout_s);
void zl_watchdog_stop(void);
/* Before the backend's and MPI's finalize, which may wait on a peer that never comes: the watchdog
 * keeps watching (stopped after MPI_Finalize), and if it fires it exits this process with 5,
 * without MPI_Abort; the backend's asynchronous errors are no longer polled. */
void zl_watchdog_finalizing(void);

/* Progress marks: a clock read and a few stores; `what` must be a string literal.
 * zl_progress_in marks a phase of the rank's own (checkpoint I/O, shut-down): past --timeout
 * the line says "while <what>" rather than the collective it last waited in. */
void zl_progress_mark(const char *what);
void zl_progress_in(const char *what);
void zl_progress_step(int step); /* step 1.. (0 = not training yet) */

/* What this rank waits in, written into buf ("" if unknown): comm.c installs one. */
typedef void (*zl_wait_describer)(char *buf, size_t n);
void zl_watchdog_set_describer(zl_wait_describer fn);

#endif
