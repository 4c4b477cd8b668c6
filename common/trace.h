/* trace.h — a rank's timeline: what ran when, on which lane, and how much communication
 * the compute lane had to wait for.
 *
 * Each rank has lanes: compute (the model's forward, loss and backward, the optimizer),
 * communication (every collective comm.h issues) and copy (reserved for offload). A span
 * on a lane is a pair of events around the work, recorded on the stream that runs it: CUDA
 * events on GPU, wall-clock stamps on CPU (backend.h). The model records its own spans
 * (model/model.c); comm.c hands over its log of collectives; zl_numerics_adam and the host
 * Adam of offload.c bracket each Adam call with zl_trace_begin / zl_trace_end (one span each).
 *
 * After every timed step (2..S) the spans are folded, allocation-free, into per-step
 * figures: compute busy (union of compute spans), communication busy (union of
 * communication spans) and *exposed communication* — the time communication runs while
 * the compute lane is idle, i.e. |∪comm \ ∪compute|. That is the part of the communication
 * the overlap did not hide. The same fold gives the offload model's parts (report.c): the
 * optimizer spans' union, the model's and the network's busy time without them, the copy
 * lane's busy time and its *exposed* part — copies that nothing on the other lanes hides —
 * and the time in each phase's spans (forward, backward, optimizer, ...: the roofline's
 * measured side).
 * A rank that reaches a collective before a slower one waits there, and that wait is exposed
 * communication too: each timed step also keeps its collectives and exposed intervals, and after
 * the run zl_trace_join_waits aligns the ranks' clocks on their collectives' ends and measures
 * the *join wait* — from a rank's start of a collective to the last rank's — and its exposed part.
 * The report prints their means; with --trace PATH every span of
 * steps 2..S of every rank also goes to PATH as Chrome trace-event JSON on rank 0's clock (rank
 * 0 gathers them): open it in https://ui.perfetto.dev or chrome://tracing.
 *
 * Everything is sized before step 1 (zl_trace_reserve): the step loop allocates nothing.
 *
 * defines: zl_phase, zl_lane, zl_trace_* (spans, folding, summary, join waits, the trace file),
 *          zl_interval, zl_exposed_ms and the join-wait arithmetic (unit-tested). */
#ifndef ZL_TRACE_H
#define ZL_TRACE_H

#include "../kernels/backend.h"

/* What a compute- or copy-lane span is doing. Collectives are named by their op (comm.h). */
typedef enum {
    ZL_PHASE_BATCH = 0, /* load this rank's batch */
    ZL_PHASE_FORWARD,   /* forward of one use of a unit */
    ZL_PHASE_LOSS,      /* loss and the gradient that seeds backward */
    ZL_PHASE_BACKWARD,  /* backward of one use of a unit */
    ZL_PHASE_OPTIMIZER, /* one Adam call: one unit (DDP) or one unit's slice */
    ZL_PHASE_COPY_D2H,  /* offload: device to host (copy lane) */
    ZL_PHASE_COPY_H2D,  /* offload: host to device (copy lane) */
    ZL_NPHASES
} zl_phase;

typedef enum { ZL_LANE_COMPUTE = 0, ZL_LANE_COMM, ZL_LANE_COPY, ZL_NLANES } zl_lane;

const char *zl_phase_name(zl_phase p); /* "forward", "backward", "optimizer", ... */
const char *zl_lane_name(zl_lane l);   /* "compute", "communication", "copy" */
zl_lane zl_lane_of_phase(zl_phase p);

/* ---- set-up (before step 1) ------------------------------------------------------ */
/* steps = the run's step count; recording = 1 when --trace asks for the file; world = N. */
void zl_trace_setup(int steps, int recording, int world);
/* Room for spans_per_step more spans per step on `lane`, before zl_mem_freeze. Whoever
 * records spans reserves them: zl_model_create (its own, and one optimizer span per unit
 * for the stage file), zl_comm_init (its collectives). A step gets room for twice as many
 * (a step about to be saved also runs its own update); --trace keeps as many as reserved
 * per timed step, which is what they hold on average. Without zl_trace_setup (a unit
 * test driving the model directly) this and every other zl_trace_* call does nothing. */
void zl_trace_reserve(zl_lane lane, int spans_per_step);
/* 1 (and why, in err) if --trace's records, with more_per_step spans a step beyond those
 * reserved so far, would pass their ceiling (1 GiB a rank): zl_preflight refuses that, exit 2. */
int zl_trace_records_too_many(int more_per_step, char *err, size_t n);
void zl_trace_finalize(void);

/* ---- during a step ---------------------------------------------------------------- */
/* One span of `phase` for unit u (-1: none), on stream s. Spans do not nest. */
void zl_trace_begin(zl_phase phase, int unit, zl_stream s);
void zl_trace_end(zl_phase phase, int unit, zl_stream s);
/* For comm.c. anchor: the step's first event (the run's first is the timeline's zero; times are
 * taken from the step's anchor, see trace.c); step_begin
 * starts a step's log; comm adds one completed collective; step_end folds the step (all
 * events completed). timed = 0 for the warm-up step: nothing is kept. */
void zl_trace_anchor(zl_stream s);
void zl_trace_step_begin(void);
void zl_trace_comm(int op, int purpose, int unit, zl_event start, zl_event end);
void zl_trace_step_end(int timed);
/* Wall-clock time of step `step` (1-based) on this rank, as the stage measured it. */
void zl_trace_step_ms(int step, double ms);

/* ---- results ---------------------------------------------------------------------- */
typedef struct {
    int steps;                 /* timed steps folded in */
    double compute_busy_ms;    /* per step, means over the timed steps */
    double comm_busy_ms;
    double exposed_comm_ms;    /* communication while the compute lane is idle */
    double span_ms;            /* first event to last event of the step */
    /* The figures of the offload model (report.c; with or without --offload): */
    double optimizer_ms;       /* union of the optimizer spans (--offload: the host's Adam, wall time) */
    double model_comm_busy_ms; /* union of the compute lane without the optimizer and the communication lane */
    double copy_busy_ms;       /* union of the copy lane (--offload's d2h, h2d) */
    double exposed_copy_ms;    /* copies while neither compute nor communication runs: */
                               /* |∪copy \ (∪compute ∪ ∪comm)| */
    double forward_ms;         /* the model's work and the collectives before the step's first loss span */
                               /* (batch, forward): what the step before's host Adam can run beside */
    double phase_ms[ZL_NPHASES]; /* time in the spans of each phase, summed (not a union: the */
                                 /* optimizer's spans run beside the forward's on another stream) */
    /* Join waits (zl_trace_join_waits; 0 at N = 1). A collective cannot end before the last
     * rank joins it, so from this rank's start of a collective to that join it waits for a
     * slower rank: not the collective's own cost. Per step, means over join_steps: */
    double join_steps;           /* timed steps analysed: all, or the first ones if their record filled */
    double join_wait_ms;         /* |∪ [start, last rank's join]| over this rank's collectives */
    double exposed_join_wait_ms; /* its part while the compute lane is idle: of exposed_comm_ms */
    double exposed_after_join_ms; /* the rest of the exposed communication: after the last joins */
    double late_join_ms;         /* over the collectives this rank joined last, how long after the */
                                 /* first rank it joined: what it kept the others waiting */
    double clock_offset_ms;      /* a moment on this rank's timeline minus the same on rank 0's (median) */
    double end_residual_median_us, end_residual_max_us; /* |end − rank 0's end| once aligned */
} zl_trace_summary;
zl_trace_summary zl_trace_get_summary(void);
const double *zl_trace_step_times(int *n); /* this rank's wall ms per step, [steps] (0 where not run) */

/* Collective, every rank, before zl_trace_get_summary's join figures are read: the join waits.
 * The ranks' clocks are aligned per step on their collectives' ends — a collective ends on every
 * rank at about the same moment, once the last data arrives (the residuals say how closely) —
 * so each rank's start of a collective can be set against the last rank's. Exchanges rank 0's
 * ends and the latest joins with MPI (host memory, after the run: not in the comm tables). */
void zl_trace_join_waits(int rank, int world);

/* Collective: rank 0 gathers every rank's spans and writes the --trace file (if asked).
 * rank_names[r] (rank 0 only; NULL elsewhere) label the ranks' rows. */
void zl_trace_write(int rank, int world, const char *const *rank_names, int stage);

/* ---- interval arithmetic ------------------------------------------------------------ */
typedef struct {
    double t0, t1; /* ms, t0 <= t1 */
} zl_interval;
/* Length of the union of iv[0..n); sorts and merges iv in place, returns the number of
 * disjoint intervals left in iv through *merged (may be NULL). */
double zl_union_ms(zl_interval *iv, int n, int *merged);
/* |∪comm \ ∪compute|: communication time not covered by compute. Reorders both arrays; the
 * uncovered pieces go to pieces (room for n_compute + n_comm; their count to *n_pieces if not
 * NULL), sorted and disjoint: what the join waits keep of a step. */
double zl_exposed_ms(zl_interval *compute, int n_compute, zl_interval *comm, int n_comm, zl_interval *pieces,
                     int *n_pieces);
/* For sorted, disjoint a and b (zl_union_ms's output): the pieces of a that b does not cover,
 * into out (room for na + nb), sorted and disjoint; returns how many. And |a ∩ b|. */
int zl_subtract_intervals(const zl_interval *a, int na, const zl_interval *b, int nb, zl_interval *out);
double zl_intersect_ms(const zl_interval *a, int na, const zl_interval *b, int nb);

/* The join-wait arithmetic of one rank's step (pure; zl_trace_join_waits feeds it, MPI between).
 * mine[0..n): its collectives in issue order, on its clock. The clock offset: the median over
 * collectives of mine[i].t1 − ref_end[i] (rank 0's ends). late[i]: the last rank's join of
 * collective i on this rank's clock; the wait: |∪ [mine[i].t0, late[i] clamped to mine[i]]|,
 * and its part inside exposed[0..ne) (sorted, disjoint). scratch: room for n. */
double zl_clock_offset_ms(const zl_interval *mine, const double *ref_end, int n, double *scratch);
void zl_join_wait_ms(const zl_interval *mine, const double *late, int n, const zl_interval *exposed, int ne,
                     zl_interval *scratch, double *wait_ms, double *exposed_wait_ms);

#endif
