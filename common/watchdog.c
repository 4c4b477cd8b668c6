/* watchdog.c — progress marks and the thread that watches them (see watchdog.h). */
#define _POSIX_C_SOURCE 200809L
#include "watchdog.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "util.h"
#include "../kernels/backend.h"

static _Atomic double g_last_progress; /* zl_wall_seconds() of the last mark */
static _Atomic int g_step;
static const char *_Atomic g_what = "start-up";
static atomic_int g_in_phase; /* the last mark was zl_progress_in: a phase of its own, not a wait */
static atomic_int g_stop;
static atomic_int g_finalizing; /* in MPI_Finalize: no MPI_Abort, the process exits by itself */
static zl_wait_describer g_describe;
static pthread_t g_thread;
static int g_running, g_rank, g_timeout_s;
static const char *g_prog = "zerolab";

void zl_progress_mark(const char *what) {
    atomic_store(&g_in_phase, 0);
    atomic_store(&g_what, what);
    atomic_store(&g_last_progress, zl_wall_seconds());
}

void zl_progress_in(const char *what) {
    zl_progress_mark(what);
    atomic_store(&g_in_phase, 1);
}

void zl_progress_step(int step) {
    if (zl_is_ending()) zl_wait_for_the_end(); /* no step after the watchdog fired */
    atomic_store(&g_step, step);
    zl_progress_mark("training step");
}

void zl_watchdog_set_describer(zl_wait_describer fn) { g_describe = fn; }

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fire(double idle_s) {
    zl_set_ending();
    char waiting[192] = "";
    if (g_describe) g_describe(waiting, sizeof waiting);
    int step = atomic_load(&g_step);
    char where[64];
    if (step > 0) snprintf(where, sizeof where, "in step %d", step);
    else snprintf(where, sizeof where, "before training (%s)", atomic_load(&g_what));
    /* The collectives' log names the wait, unless the last mark was a phase of its own (checkpoint
     * I/O: "while writing its checkpoint file"). */
    const char *what = atomic_load(&g_what);
    if (step > 0 && atomic_load(&g_in_phase))
        fprintf(stderr, "%s: rank %d: no progress for %.0f s %s while %s (--timeout %d); ending the job\n", g_prog,
                g_rank, idle_s, where, what, g_timeout_s);
    else
        fprintf(stderr, "%s: rank %d: no progress for %.0f s %s, waiting in %s (--timeout %d); ending the job\n", g_prog,
                g_rank, idle_s, where, waiting[0] ? waiting : what, g_timeout_s);
    if (atomic_load(&g_finalizing)) { /* the backend going, MPI finalizing: end this process, the launcher
                                         * the others (a stopped peer, whom MPI_Finalize waited on) */
        fflush(stderr);
        _exit(ZL_EXIT_WATCHDOG);
    }
    zl_backend_abort(); /* NCCL: abort the communicator so no kernel keeps the GPU */
    zl_abort_job(ZL_EXIT_WATCHDOG); /* after a pause: the launcher must forward the line first */
}

void zl_watchdog_finalizing(void) {
    zl_progress_in("finishing (MPI_Finalize waits for every rank)");
    atomic_store(&g_finalizing, 1);
}

/* Ranks fire in rank order (500 ms apart, beyond zl_abort_job's 250 ms pause and a 100 ms
 * tick): the lowest waiting rank speaks, its MPI_Abort ends the others before they repeat the
 * line. Modulo 16, so that no rank waits more than 7.5 s beyond --timeout (at N > 16 a line
 * may then come from one rank in each 16). */
static void *watch(void *arg) {
    (void)arg;
    double stagger = 0.5 * (g_rank % 16), last_tick = zl_wall_seconds();
    int ticks = 0;
    while (!atomic_load(&g_stop)) {
        sleep_ms(100);
        /* A tick that took seconds means this process itself was stopped (SIGSTOP, a debugger)
         * and has just been resumed — Open MPI resumes a stopped rank with SIGCONT to kill it.
         * The idle time is then ours, not a peer's: start counting again instead of blaming. */
        double now = zl_wall_seconds();
        if (now - last_tick > 2.0) atomic_store(&g_last_progress, now);
        last_tick = now;
        char msg[256];
        if (++ticks % 10 == 0 && !atomic_load(&g_finalizing) && zl_backend_async_error(msg, sizeof msg)) {
            zl_set_ending();
            fprintf(stderr, "%s: rank %d: communicator failed: %s; ending the job\n", g_prog, g_rank, msg);
            zl_backend_abort();
            zl_abort_job(ZL_EXIT_RUNTIME);
        }
        double idle = zl_wall_seconds() - atomic_load(&g_last_progress);
        if (g_timeout_s > 0 && idle > g_timeout_s + stagger) fire(idle);
    }
    return NULL;
}

void zl_watchdog_start(const char *prog, int rank, int timeout_s) {
    g_prog = prog, g_rank = rank, g_timeout_s = timeout_s;
    zl_progress_mark("start-up");
    atomic_store(&g_stop, 0);
    if (pthread_create(&g_thread, NULL, watch, NULL)) zl_fatal("cannot start the watchdog thread");
    g_running = 1;
}

void zl_watchdog_stop(void) {
    if (!g_running) return;
    atomic_store(&g_stop, 1);
    pthread_join(g_thread, NULL);
    g_running = 0;
}
