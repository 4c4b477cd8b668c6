/* comm.c — recording wrappers around the backend's collectives (see comm.h). */
#include "comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "trace.h"
#include "util.h"
#include "watchdog.h"

static const char *const op_names[ZL_NOPS] = {"all_reduce", "reduce_scatter", "all_gather", "d2h", "h2d"};
static const char *const purpose_names[ZL_NPURPOSES] = {
    "grad_sync", "param_gather_fwd", "param_gather_bwd", "param_gather_step", "control", "param_gather_final",
    "offload_grads", "offload_params"};

const char *zl_op_name(zl_op op) { return (unsigned)op < ZL_NOPS ? op_names[op] : "?"; }
const char *zl_purpose_name(zl_purpose p) { return (unsigned)p < ZL_NPURPOSES ? purpose_names[p] : "?"; }

double zl_busbw_factor(zl_op op, int world) {
    double N = world;
    if (zl_op_is_copy(op)) return 1.0; /* a copy moves its S bytes once, whatever N */
    return op == ZL_OP_ALLREDUCE ? 2.0 * (N - 1) / N : (N - 1) / N;
}
double zl_wire_bytes(zl_op op, double S, int world) { return zl_busbw_factor(op, world) * S; }

typedef struct {
    zl_op op;
    zl_purpose why;
    zl_dtype dtype;
    int unit;     /* shard unit, -1 for none */
    int returned; /* the backend call has returned (on CUDA: enqueued; done when `end` is) */
    double S;
    zl_event start, end;
} log_entry;

static int g_world, g_cap;
static volatile int g_n; /* read by the watchdog thread */
static log_entry *g_log; /* g_cap entries, events created up front */
static zl_comm_stat g_stat[ZL_NOPS][ZL_NPURPOSES][ZL_NDTYPES];
static long g_steps, g_timed_steps;

/* The watchdog's question "what is this rank waiting in?": the first collective of
 * this step that has not completed, or the last one issued if all have. */
static void describe_wait(char *buf, size_t n) {
    int count = g_n;
    if (count == 0 || !g_log) return;
    int i = 0, done;
    while (i < count - 1 && g_log[i].returned && zl_event_done(g_log[i].end) == 1) i++;
    const log_entry *e = &g_log[i];
    char unit[32] = "";
    if (e->unit >= 0) snprintf(unit, sizeof unit, " of unit %d", e->unit);
    done = e->returned ? zl_event_done(e->end) : 0;
    snprintf(buf, n, "%s %s%s (collective %d of this step%s)", zl_op_name(e->op), zl_purpose_name(e->why), unit,
             i + 1, done == 1 ? ", completed" : done < 0 ? "; the device reports an error" : "");
}

/* TEST ONLY: ZL_TEST_HOLD_RANK=r:ms holds rank r for ms before each step (and before stage 3's
 * final gathers, which open a step of their own), so that the others reach the step's first
 * collective that much earlier: the join waits' known answer. Read once, in zl_comm_init. */
static int g_hold_ms;

static void read_hold(void) {
    int me;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    g_hold_ms = zl_test_hold_ms("ZL_TEST_HOLD_RANK", me);
}

void zl_comm_init(int world, int max_per_step) {
    g_world = world;
    read_hold();
    /* Twice the stage's count: a step followed by a save also runs its own update at its end
     * (zl_ckpt_due_mid_run), so it holds two updates' gathers and copies. */
    g_cap = 2 * max_per_step;
    g_n = 0;
    g_log = calloc((size_t)g_cap, sizeof(log_entry));
    if (!g_log) zl_fatal("out of host memory for the collective log");
    for (int i = 0; i < g_cap; i++) {
        g_log[i].start = zl_event_create();
        g_log[i].end = zl_event_create();
    }
    zl_watchdog_set_describer(describe_wait);
    zl_trace_reserve(ZL_LANE_COMM, max_per_step); /* the timeline's communication lane (it doubles the room too) */
}

void zl_comm_finalize(void) {
    for (int i = 0; i < g_cap; i++) {
        zl_event_destroy(g_log[i].start);
        zl_event_destroy(g_log[i].end);
    }
    free(g_log);
    g_log = NULL;
    g_cap = 0;
}

static log_entry *begin_entry(zl_op op, zl_purpose why, zl_dtype t, int unit, size_t full_count, zl_stream s) {
    /* After the watchdog aborted the communicator, collectives return without data: stop here. */
    if (zl_is_ending()) zl_wait_for_the_end();
    if (g_n == g_cap) zl_fatal("more than %d collectives in one step: raise max_per_step", g_cap);
    log_entry *e = &g_log[g_n];
    e->op = op;
    e->why = why;
    e->dtype = t;
    e->unit = unit;
    e->returned = 0;
    e->S = (double)full_count * (double)zl_dtype_size(t);
    zl_trace_anchor(s); /* the timeline's zero, or this step's anchor, if this is its first event */
    zl_event_record(e->start, s);
    g_n = g_n + 1;
    zl_progress_mark("a collective");
    return e;
}

static void end_entry(log_entry *e, zl_stream s) {
    zl_event_record(e->end, s);
    e->returned = 1;
    zl_progress_mark("a collective");
}

void zl_allreduce(void *buf, size_t count, zl_dtype t, zl_purpose why, int unit, zl_stream s) {
    log_entry *e = begin_entry(ZL_OP_ALLREDUCE, why, t, unit, count, s);
    zl_backend_allreduce(buf, count, t, s);
    end_entry(e, s);
}

void zl_reduce_scatter(const void *send, void *recv, size_t recv_count, zl_dtype t, zl_purpose why, int unit,
                       zl_stream s) {
    log_entry *e = begin_entry(ZL_OP_REDUCE_SCATTER, why, t, unit, recv_count * (size_t)g_world, s);
    zl_backend_reduce_scatter(send, recv, recv_count, t, s);
    end_entry(e, s);
}

void zl_allgather(const void *send, void *recv, size_t send_count, zl_dtype t, zl_purpose why, int unit,
                  zl_stream s) {
    log_entry *e = begin_entry(ZL_OP_ALLGATHER, why, t, unit, send_count * (size_t)g_world, s);
    zl_backend_allgather(send, recv, send_count, t, s);
    end_entry(e, s);
}

void zl_copy_d2h(void *host, const void *dev, size_t count, zl_dtype t, zl_purpose why, int unit, zl_stream s) {
    log_entry *e = begin_entry(ZL_OP_D2H, why, t, unit, count, s);
    zl_memcpy_d2h_async(host, dev, count * zl_dtype_size(t), s);
    end_entry(e, s);
}

void zl_copy_h2d(void *dev, const void *host, size_t count, zl_dtype t, zl_purpose why, int unit, zl_stream s) {
    log_entry *e = begin_entry(ZL_OP_H2D, why, t, unit, count, s);
    zl_memcpy_h2d_async(dev, host, count * zl_dtype_size(t), s);
    end_entry(e, s);
}

void zl_comm_step_begin(void) {
    if (g_hold_ms) nanosleep(&(struct timespec){g_hold_ms / 1000, (g_hold_ms % 1000) * 1000000L}, NULL);
    g_n = 0;
    zl_trace_step_begin();
    zl_progress_step((int)g_steps + 1);
}

static void fold(int timed);
void zl_comm_step_end(int timed) {
    fold(timed);
    zl_trace_step_end(timed);
    g_steps++;
    if (timed) g_timed_steps++;
}
void zl_comm_end_extra(void) { fold(0); }

static void fold(int timed) {
    for (int i = 0; i < g_n; i++) {
        log_entry *e = &g_log[i];
        zl_comm_stat *st = &g_stat[e->op][e->why][e->dtype];
        st->calls++;
        st->S_bytes += e->S;
        st->wire_bytes += zl_wire_bytes(e->op, e->S, g_world);
        if (timed) {
            st->ms += zl_event_elapsed_ms(e->start, e->end);
            st->timed_S_bytes += e->S;
            st->timed_calls++;
            zl_trace_comm(e->op, e->why, e->unit, e->start, e->end); /* the communication lane */
        }
    }
    g_n = 0;
}

const zl_comm_stat *zl_comm_get(zl_op op, zl_purpose why, zl_dtype t) { return &g_stat[op][why][t]; }
long zl_comm_steps(void) { return g_steps; }
long zl_comm_timed_steps(void) { return g_timed_steps; }
