/* trace.c — lanes of spans, per-step folding, exposed communication, the Chrome trace (see trace.h). */
#include "trace.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "outputs.h"
#include "util.h"
#include "watchdog.h" /* zl_progress_in: a slow --trace file is progress, not a hang */

static const char *const phase_names[ZL_NPHASES] = {"load_batch", "forward",  "loss",    "backward",
                                                    "optimizer",  "copy_d2h", "copy_h2d"};
static const char *const lane_names[ZL_NLANES] = {"compute", "communication", "copy"};

const char *zl_phase_name(zl_phase p) { return (unsigned)p < ZL_NPHASES ? phase_names[p] : "?"; }
const char *zl_lane_name(zl_lane l) { return (unsigned)l < ZL_NLANES ? lane_names[l] : "?"; }
zl_lane zl_lane_of_phase(zl_phase p) {
    return p == ZL_PHASE_COPY_D2H || p == ZL_PHASE_COPY_H2D ? ZL_LANE_COPY : ZL_LANE_COMPUTE;
}

/* ---- interval arithmetic --------------------------------------------------------- */

static int by_start(const void *a, const void *b) {
    double x = ((const zl_interval *)a)->t0, y = ((const zl_interval *)b)->t0;
    return (x > y) - (x < y);
}

double zl_union_ms(zl_interval *iv, int n, int *merged) {
    int m = 0;
    if (n > 0) {
        qsort(iv, (size_t)n, sizeof *iv, by_start);
        for (int i = 1; i < n; i++) {
            if (iv[i].t0 <= iv[m].t1) iv[m].t1 = fmax(iv[m].t1, iv[i].t1); /* overlaps: extend */
            else iv[++m] = iv[i];
        }
        m++;
    }
    double total = 0;
    for (int i = 0; i < m; i++) total += iv[i].t1 - iv[i].t0;
    if (merged) *merged = m;
    return total;
}

double zl_intersect_ms(const zl_interval *a, int na, const zl_interval *b, int nb) {
    double total = 0;
    for (int i = 0, j = 0; i < na && j < nb;) { /* both sorted and disjoint: each overlap once */
        double lo = fmax(a[i].t0, b[j].t0), hi = fmin(a[i].t1, b[j].t1);
        if (hi > lo) total += hi - lo;
        if (a[i].t1 < b[j].t1) i++;
        else j++;
    }
    return total;
}

int zl_subtract_intervals(const zl_interval *a, int na, const zl_interval *b, int nb, zl_interval *out) {
    int n = 0;
    for (int i = 0, j = 0; i < na; i++) {
        double lo = a[i].t0, hi = a[i].t1;
        while (j < nb && b[j].t1 <= lo) j++; /* b's that end before this piece of a: done with */
        for (int k = j; k < nb && b[k].t0 < hi; k++) {
            if (b[k].t0 > lo) out[n++] = (zl_interval){lo, b[k].t0};
            lo = fmax(lo, b[k].t1);
        }
        if (hi > lo) out[n++] = (zl_interval){lo, hi};
    }
    return n;
}

double zl_exposed_ms(zl_interval *compute, int n_compute, zl_interval *comm, int n_comm, zl_interval *pieces,
                     int *n_pieces) {
    int nc, nm;
    zl_union_ms(compute, n_compute, &nc);
    zl_union_ms(comm, n_comm, &nm);
    int n = zl_subtract_intervals(comm, nm, compute, nc, pieces);
    double exposed = 0;
    for (int i = 0; i < n; i++) exposed += pieces[i].t1 - pieces[i].t0;
    if (n_pieces) *n_pieces = n;
    return exposed;
}

double zl_clock_offset_ms(const zl_interval *mine, const double *ref_end, int n, double *scratch) {
    if (n < 1) return 0;
    for (int i = 0; i < n; i++) scratch[i] = mine[i].t1 - ref_end[i];
    return zl_median(scratch, (size_t)n); /* robust to a collective whose ends differ (a rank's late end event) */
}

void zl_join_wait_ms(const zl_interval *mine, const double *late, int n, const zl_interval *exposed, int ne,
                     zl_interval *scratch, double *wait_ms, double *exposed_wait_ms) {
    for (int i = 0; i < n; i++) /* from this rank's start to the last join, within the collective */
        scratch[i] = (zl_interval){mine[i].t0, fmin(fmax(late[i], mine[i].t0), mine[i].t1)};
    int m;
    *wait_ms = zl_union_ms(scratch, n, &m);
    *exposed_wait_ms = zl_intersect_ms(scratch, m, exposed, ne);
}

/* ---- state ------------------------------------------------------------------------- */

typedef struct {
    zl_phase phase;
    int unit;
    zl_event start, end;
} span_events; /* one compute- or copy-lane span of the current step */

typedef struct {
    double t0, t1; /* ms since the rank's origin event */
    int32_t step, unit;
    uint8_t lane, kind, purpose; /* kind: zl_phase (compute, copy) or zl_op (communication) */
} record;                        /* one span of a timed step, kept for --trace (sent as bytes) */

static int g_steps, g_recording, g_world = 1, g_step_no = 1;
static double *g_step_ms; /* [g_steps] */
static int g_reserved[ZL_NLANES]; /* spans per step, as reserved: what a timed step holds on average */
static int g_cap[ZL_NLANES];      /* room per step, twice that: a step about to be saved also runs its own
                                   * update, and the next none (zl_ckpt_due_mid_run), so the average holds */
static span_events *g_spans; /* [g_cap compute + copy] of this step, events created up front */
static int g_n_spans, g_open = -1;
static record *g_step_comm; /* [g_cap comm] collectives of this step */
static int g_n_comm;
static zl_interval *g_iv_compute, *g_iv_comm; /* scratch for the fold, same sizes */
static zl_interval *g_iv_opt, *g_iv_copy, *g_iv_busy, *g_iv_cover; /* more scratch: the optimizer and copy figures */
static zl_interval *g_iv_fwd; /* the busy intervals cut at the step's first loss span */
/* Times are milliseconds since the run's first event (the origin), a double, read from the
 * nearer of two events: this step's first (its anchor) and the step before's. A float of
 * milliseconds (cudaEventElapsedTime's) since the origin itself would coarsen as the run went
 * on (about 4 µs after a minute); from the anchor, under a step away, it keeps its ~0.1 µs, and
 * the anchors' own chain adds one float's rounding a step. */
static zl_event g_anchor[2];
static int g_at = -1;       /* g_anchor[g_at]: the latest anchor read; -1 before the run's first event */
static double g_anchor_ms;  /* its time since the origin */
static int g_anchored;      /* this step has its anchor (recorded, into g_anchor[!g_at] but at the origin) */
static int g_anchor_unread; /* ... and it is not read yet (at the step's end, when its events are done) */
static record *g_rec; /* recording: [timed steps × all lanes' caps] */
static size_t g_n_rec, g_rec_cap;
static zl_trace_summary g_sum;

/* What each timed step keeps for zl_trace_join_waits: its collectives in issue order and its
 * exposed intervals. Pools sized by zl_trace_reserve for what a step holds on average (the loop
 * allocates nothing); a step that does not fit ends the keeping, and the join figures cover
 * the steps before it (join_steps says how many). */
typedef struct {
    int step, n_comm, n_exposed;
    size_t at_comm, at_exposed; /* into the pools */
} join_step;
#define JOIN_MAX ((size_t)1 << 20) /* intervals a pool at most: 16 MiB */
static join_step *g_join;          /* [timed steps] */
static int g_n_join, g_join_stopped;
static zl_interval *g_join_comm, *g_join_exposed; /* the pools */
static size_t g_join_comm_cap, g_join_exposed_cap, g_join_comm_used, g_join_exposed_used;
static zl_interval *g_iv_exposed; /* scratch: a step's exposed intervals */

static int timed_steps(void) { return g_steps > 1 ? g_steps - 1 : 1; }
static int span_cap(void) { return g_cap[ZL_LANE_COMPUTE] + g_cap[ZL_LANE_COPY]; }
static int reserved_per_step(void) {
    return g_reserved[ZL_LANE_COMPUTE] + g_reserved[ZL_LANE_COPY] + g_reserved[ZL_LANE_COMM];
}

static void *grow(void *p, size_t n, size_t size, const char *what) {
    void *q = realloc(p, (n ? n : 1) * size);
    if (!q) zl_fatal("out of host memory for the timeline (%s, %zu entries)", what, n);
    return q;
}

void zl_trace_setup(int steps, int recording, int world) {
    g_steps = steps, g_recording = recording, g_world = world;
    g_step_ms = calloc((size_t)steps, sizeof *g_step_ms);
    if (!g_step_ms) zl_fatal("out of host memory for %d step times", steps);
    g_anchor[0] = zl_event_create(), g_anchor[1] = zl_event_create();
}

/* The join waits' pools (one rank has none to wait for): what a step holds on average. */
static void reserve_join_pools(void) {
    size_t steps = (size_t)timed_steps(), per_comm = (size_t)g_reserved[ZL_LANE_COMM];
    size_t per_exposed = per_comm + (size_t)g_reserved[ZL_LANE_COMPUTE] + (size_t)g_reserved[ZL_LANE_COPY];
    g_join = grow(g_join, steps, sizeof *g_join, "join steps");
    g_join_comm_cap = steps * per_comm < JOIN_MAX ? steps * per_comm : JOIN_MAX;
    g_join_exposed_cap = steps * per_exposed < JOIN_MAX ? steps * per_exposed : JOIN_MAX;
    g_join_comm = grow(g_join_comm, g_join_comm_cap, sizeof *g_join_comm, "join intervals");
    g_join_exposed = grow(g_join_exposed, g_join_exposed_cap, sizeof *g_join_exposed, "join intervals");
}

void zl_trace_reserve(zl_lane lane, int spans_per_step) {
    if (!g_step_ms) return;
    int old = span_cap();
    g_reserved[lane] += spans_per_step;
    g_cap[lane] += 2 * spans_per_step;
    g_spans = grow(g_spans, (size_t)span_cap(), sizeof *g_spans, "spans");
    for (int i = old; i < span_cap(); i++) g_spans[i] = (span_events){0, -1, zl_event_create(), zl_event_create()};
    int most = span_cap() > g_cap[ZL_LANE_COMM] ? span_cap() : g_cap[ZL_LANE_COMM];
    g_step_comm = grow(g_step_comm, (size_t)g_cap[ZL_LANE_COMM], sizeof *g_step_comm, "collectives");
    g_iv_compute = grow(g_iv_compute, (size_t)most, sizeof *g_iv_compute, "intervals");
    g_iv_comm = grow(g_iv_comm, (size_t)most, sizeof *g_iv_comm, "intervals");
    size_t all = (size_t)(span_cap() + g_cap[ZL_LANE_COMM]); /* every span of a step, whatever its lane */
    g_iv_opt = grow(g_iv_opt, all, sizeof *g_iv_opt, "intervals");
    g_iv_copy = grow(g_iv_copy, all, sizeof *g_iv_copy, "intervals");
    g_iv_busy = grow(g_iv_busy, all, sizeof *g_iv_busy, "intervals");
    g_iv_cover = grow(g_iv_cover, all, sizeof *g_iv_cover, "intervals");
    g_iv_fwd = grow(g_iv_fwd, all, sizeof *g_iv_fwd, "intervals");
    g_iv_exposed = grow(g_iv_exposed, all, sizeof *g_iv_exposed, "intervals");
    if (g_world > 1) reserve_join_pools();
    if (!g_recording) return;
    char err[160]; /* too many: zl_preflight refuses the run (exit 2) once the model's spans are known */
    if (zl_trace_records_too_many(0, err, sizeof err)) return;
    g_rec_cap = (size_t)timed_steps() * (size_t)reserved_per_step();
    g_rec = grow(g_rec, g_rec_cap, sizeof *g_rec, "--trace records");
}

/* The recording's ceiling a rank: 1 GiB of records (32 bytes a span; the file spends about 170
 * a span, so some 5 GB of JSON a rank at the ceiling), and rank 0 gathers every rank's with one
 * MPI_Gatherv of int byte counts: at most 2^31 - 1 bytes in all. */
static size_t records_max_bytes(void) {
    size_t gather = (size_t)INT32_MAX / (size_t)(g_world > 0 ? g_world : 1);
    return gather < ((size_t)1 << 30) ? gather : (size_t)1 << 30;
}

int zl_trace_records_too_many(int more_per_step, char *err, size_t n) {
    if (!g_recording) return 0;
    size_t per_step = (size_t)reserved_per_step() + (size_t)more_per_step;
    size_t bytes = (size_t)timed_steps() * per_step * sizeof(record);
    if (bytes <= records_max_bytes()) return 0;
    snprintf(err, n, "--trace: %d timed steps of %zu spans need %zu MiB per rank (at most %zu at N = %d): trace fewer "
             "--steps", timed_steps(), per_step, bytes >> 20, records_max_bytes() >> 20, g_world);
    return 1;
}

void zl_trace_finalize(void) {
    for (int i = 0; i < span_cap(); i++) {
        zl_event_destroy(g_spans[i].start);
        zl_event_destroy(g_spans[i].end);
    }
    for (int i = 0; i < 2; i++)
        if (g_anchor[i]) zl_event_destroy(g_anchor[i]);
    free(g_spans), free(g_step_comm), free(g_iv_compute), free(g_iv_comm), free(g_rec), free(g_step_ms);
    free(g_iv_opt), free(g_iv_copy), free(g_iv_busy), free(g_iv_cover), free(g_iv_fwd);
    free(g_iv_exposed), free(g_join), free(g_join_comm), free(g_join_exposed);
    g_spans = NULL, g_step_comm = NULL, g_iv_compute = g_iv_comm = NULL, g_rec = NULL, g_step_ms = NULL;
    g_iv_opt = g_iv_copy = g_iv_busy = g_iv_cover = g_iv_fwd = g_iv_exposed = NULL;
    g_join = NULL, g_join_comm = g_join_exposed = NULL;
    g_n_join = g_join_stopped = 0, g_join_comm_used = g_join_exposed_used = 0;
    g_anchor[0] = g_anchor[1] = NULL, g_at = -1, g_anchor_ms = 0, g_anchored = g_anchor_unread = 0;
    memset(g_cap, 0, sizeof g_cap);
}

/* ---- during a step -------------------------------------------------------------------- */

void zl_trace_anchor(zl_stream s) {
    if (g_anchored || !g_anchor[0]) return;
    g_anchored = 1;
    if (g_at < 0) { /* the run's first event: the origin, time 0 */
        zl_event_record(g_anchor[0], s);
        g_at = 0;
        return;
    }
    zl_event_record(g_anchor[!g_at], s);
    g_anchor_unread = 1;
}

static int origin_set(void) { return g_at >= 0; }

/* This step's anchor's time: the step before's and the float between them (its events are done). */
static void read_anchor(void) {
    if (!g_anchor_unread) return;
    g_anchor_ms += zl_event_elapsed_ms(g_anchor[g_at], g_anchor[!g_at]);
    g_at = !g_at, g_anchor_unread = 0;
}

void zl_trace_begin(zl_phase phase, int unit, zl_stream s) {
    if (!g_spans) return; /* no timeline: a unit test driving the model directly */
    if (g_open >= 0) zl_fatal("zl_trace_begin(%s) inside the %s span: spans do not nest", zl_phase_name(phase),
                              zl_phase_name(g_spans[g_open].phase));
    if (g_n_spans == span_cap())
        zl_fatal("more than %d compute spans in one step: zl_trace_reserve more", span_cap());
    zl_trace_anchor(s);
    span_events *e = &g_spans[g_n_spans];
    e->phase = phase, e->unit = unit;
    zl_event_record(e->start, s);
    g_open = g_n_spans++;
}

void zl_trace_end(zl_phase phase, int unit, zl_stream s) {
    if (!g_spans) return;
    if (g_open < 0 || g_spans[g_open].phase != phase || g_spans[g_open].unit != unit)
        zl_fatal("zl_trace_end(%s, unit %d) without its zl_trace_begin", zl_phase_name(phase), unit);
    zl_event_record(g_spans[g_open].end, s);
    g_open = -1;
}

void zl_trace_step_begin(void) { g_n_spans = 0, g_n_comm = 0, g_open = -1, g_anchored = 0; }

static double since_origin(zl_event e) {
    read_anchor();
    return g_anchor_ms + zl_event_elapsed_ms(g_anchor[g_at], e);
}

void zl_trace_comm(int op, int purpose, int unit, zl_event start, zl_event end) {
    if (!origin_set() || g_n_comm == g_cap[ZL_LANE_COMM]) return; /* comm.c's own cap stops a step first */
    if (zl_op_is_copy((zl_op)op)) { /* an offload copy: the copy lane, named by its phase */
        zl_phase ph = op == ZL_OP_D2H ? ZL_PHASE_COPY_D2H : ZL_PHASE_COPY_H2D;
        g_step_comm[g_n_comm++] = (record){since_origin(start), since_origin(end), g_step_no, unit, ZL_LANE_COPY,
                                           (uint8_t)ph, (uint8_t)purpose};
        return;
    }
    g_step_comm[g_n_comm++] = (record){since_origin(start), since_origin(end), g_step_no, unit, ZL_LANE_COMM,
                                       (uint8_t)op, (uint8_t)purpose};
}

/* A timed step's collectives for the join waits: 1 if kept (join_keep_exposed then completes the
 * step), 0 once the pools are full. */
static int join_keep_collectives(const zl_interval *comm, int n) {
    if (g_join_stopped || !g_join || g_n_join >= timed_steps() || g_join_comm_used + (size_t)n > g_join_comm_cap)
        return g_join_stopped = 1, 0;
    g_join[g_n_join] = (join_step){g_step_no, n, 0, g_join_comm_used, g_join_exposed_used};
    memcpy(g_join_comm + g_join_comm_used, comm, (size_t)n * sizeof *comm);
    return 1;
}
static void join_keep_exposed(const zl_interval *exposed, int n) {
    if (g_join_exposed_used + (size_t)n > g_join_exposed_cap) { /* the step is not kept */
        g_join_stopped = 1;
        return;
    }
    memcpy(g_join_exposed + g_join_exposed_used, exposed, (size_t)n * sizeof *exposed);
    join_step *k = &g_join[g_n_join++];
    k->n_exposed = n;
    g_join_comm_used += (size_t)k->n_comm, g_join_exposed_used += (size_t)n;
}

static void keep(record r) {
    if (g_recording && g_n_rec < g_rec_cap) g_rec[g_n_rec++] = r;
}

/* Fold one completed step: its spans become intervals, the intervals per-step figures.
 * Lists: compute (every compute-lane span), comm (collectives), opt (the optimizer spans:
 * with --offload the host's Adam), busy (compute spans but the optimizer's, and the
 * collectives: the model's work and the network's), copy (the copy lane), cover
 * (compute and comm: what a copy can hide behind) and fwd (busy, cut at the first loss span:
 * the forward, which the step before's host Adam can run beside). */
void zl_trace_step_end(int timed) {
    read_anchor(); /* every step, timed or not: the next step's anchor is read from this one */
    if (timed && g_spans && origin_set()) {
        int nc = 0, nm = 0, no = 0, nb = 0, ny = 0, nv = 0, nf = 0;
        double first = INFINITY, last = -INFINITY, loss = INFINITY;
        for (int i = 0; i < g_n_spans; i++) {
            const span_events *e = &g_spans[i];
            record r = {since_origin(e->start), since_origin(e->end), g_step_no, e->unit,
                        (uint8_t)zl_lane_of_phase(e->phase), (uint8_t)e->phase, 0};
            zl_interval x = {r.t0, r.t1};
            if (e->phase == ZL_PHASE_LOSS) loss = fmin(loss, r.t0);
            g_sum.phase_ms[e->phase] += r.t1 - r.t0;
            if (r.lane == ZL_LANE_COMPUTE) {
                g_iv_compute[nc++] = x, g_iv_cover[nv++] = x;
                if (e->phase == ZL_PHASE_OPTIMIZER) g_iv_opt[no++] = x;
                else g_iv_busy[nb++] = x;
            } else {
                g_iv_copy[ny++] = x; /* a copy phase bracketed by zl_trace_begin (offload's copies are logged: below) */
            }
            first = fmin(first, r.t0), last = fmax(last, r.t1);
            keep(r);
        }
        for (int i = 0; i < g_n_comm; i++) {
            zl_interval x = {g_step_comm[i].t0, g_step_comm[i].t1};
            if (g_step_comm[i].lane == ZL_LANE_COMM) /* copies are not communication */
                g_iv_comm[nm++] = x, g_iv_busy[nb++] = x, g_iv_cover[nv++] = x;
            else g_iv_copy[ny++] = x, g_sum.phase_ms[g_step_comm[i].kind] += x.t1 - x.t0; /* kind: a copy phase */
            first = fmin(first, g_step_comm[i].t0), last = fmax(last, g_step_comm[i].t1);
            keep(g_step_comm[i]);
        }
        for (int i = 0; i < nb; i++) /* before zl_union_ms reorders g_iv_busy */
            if (g_iv_busy[i].t0 < loss) g_iv_fwd[nf++] = (zl_interval){g_iv_busy[i].t0, fmin(g_iv_busy[i].t1, loss)};
        g_sum.steps++;
        g_sum.span_ms += last > first ? last - first : 0;
        int kept = join_keep_collectives(g_iv_comm, nm); /* in issue order: before zl_union_ms sorts them */
        int mm, mc, ne;
        g_sum.comm_busy_ms += zl_union_ms(g_iv_comm, nm, &mm);
        g_sum.compute_busy_ms += zl_union_ms(g_iv_compute, nc, &mc);
        /* on the merged lists: zl_exposed_ms sorts them again (cheap, and exact) */
        g_sum.exposed_comm_ms += zl_exposed_ms(g_iv_compute, mc, g_iv_comm, mm, g_iv_exposed, &ne);
        if (kept) join_keep_exposed(g_iv_exposed, ne);
        g_sum.optimizer_ms += zl_union_ms(g_iv_opt, no, NULL);
        g_sum.model_comm_busy_ms += zl_union_ms(g_iv_busy, nb, NULL);
        g_sum.copy_busy_ms += zl_union_ms(g_iv_copy, ny, NULL);
        g_sum.exposed_copy_ms += zl_exposed_ms(g_iv_cover, nv, g_iv_copy, ny, g_iv_exposed, NULL);
        g_sum.forward_ms += zl_union_ms(g_iv_fwd, nf, NULL);
    }
    g_step_no++;
    zl_trace_step_begin();
}

void zl_trace_step_ms(int step, double ms) {
    if (g_step_ms && step >= 1 && step <= g_steps) g_step_ms[step - 1] = ms;
}

zl_trace_summary zl_trace_get_summary(void) {
    zl_trace_summary s = g_sum;
    if (s.steps > 0) {
        s.compute_busy_ms /= s.steps, s.comm_busy_ms /= s.steps;
        s.exposed_comm_ms /= s.steps, s.span_ms /= s.steps;
        s.optimizer_ms /= s.steps, s.model_comm_busy_ms /= s.steps;
        s.copy_busy_ms /= s.steps, s.exposed_copy_ms /= s.steps, s.forward_ms /= s.steps;
        for (int p = 0; p < ZL_NPHASES; p++) s.phase_ms[p] /= s.steps;
    }
    return s;
}

const double *zl_trace_step_times(int *n) {
    *n = g_steps;
    return g_step_ms;
}

/* ---- join waits ---------------------------------------------------------------------------- */

/* The steps every rank kept, with the same collectives in each (NCCL needs that; a mismatch
 * would mean the figures pair different collectives): their count, else 0. Collective. */
static int join_steps_alike(size_t *total, int *most) {
    int n = g_n_join;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (n == 0) return 0;
    int *lo = zl_host_calloc(4 * (size_t)n, sizeof *lo), *hi = lo + 2 * n, alike = 1;
    for (int k = 0; k < n; k++)
        lo[2 * k] = hi[2 * k] = g_join[k].step, lo[2 * k + 1] = hi[2 * k + 1] = g_join[k].n_comm;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, lo, 2 * n, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, hi, 2 * n, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    *total = 0, *most = 0;
    for (int k = 0; k < 2 * n; k++) alike &= lo[k] == hi[k];
    for (int k = 0; k < n; k++)
        *total += (size_t)g_join[k].n_comm, *most = g_join[k].n_comm > *most ? g_join[k].n_comm : *most;
    free(lo);
    return alike && *total > 0 && *total <= INT32_MAX ? n : 0; /* the same answer on every rank */
}

typedef struct {
    double t;
    int rank;
} double_int; /* MPI_DOUBLE_INT's layout */

/* Step by step: this rank's clock offset against rank 0 (the median of its ends minus rank 0's,
 * ref), each collective's start moved onto rank 0's clock (last and first: to be reduced over
 * the ranks), and the ends' residuals once aligned. Returns the largest residual. */
static double align_on_rank0(int n, int rank, const double *ref, double *offset, double_int *last, double *first,
                             double *resid, double *scratch) {
    double most = 0;
    for (int k = 0, at = 0; k < n; at += g_join[k].n_comm, k++) {
        const zl_interval *mine = g_join_comm + g_join[k].at_comm;
        offset[k] = zl_clock_offset_ms(mine, ref + at, g_join[k].n_comm, scratch);
        for (int i = 0; i < g_join[k].n_comm; i++) {
            resid[at + i] = fabs(mine[i].t1 - offset[k] - ref[at + i]);
            most = fmax(most, resid[at + i]);
            last[at + i] = (double_int){mine[i].t0 - offset[k], rank};
            first[at + i] = mine[i].t0 - offset[k];
        }
    }
    return most;
}

/* With every collective's last and first join (rank 0's clock): this rank's waits, their exposed
 * part, the exposed time after the last joins, and how long after the first rank it joined the
 * collectives it joined last — what it kept the others waiting. Sums over the n steps. */
static void sum_join_figures(int n, int rank, const double *offset, const double_int *last, const double *first,
                             double *scratch, zl_interval *iv, double f[4]) {
    for (int k = 0, at = 0; k < n; at += g_join[k].n_comm, k++) {
        const join_step *js = &g_join[k];
        const zl_interval *exposed = g_join_exposed + js->at_exposed;
        for (int i = 0; i < js->n_comm; i++) {
            scratch[i] = last[at + i].t + offset[k]; /* back on this rank's clock */
            if (last[at + i].rank == rank) f[3] += last[at + i].t - first[at + i];
        }
        double w, ew, ex = 0;
        zl_join_wait_ms(g_join_comm + js->at_comm, scratch, js->n_comm, exposed, js->n_exposed, iv, &w, &ew);
        for (int i = 0; i < js->n_exposed; i++) ex += exposed[i].t1 - exposed[i].t0;
        f[0] += w, f[1] += ew, f[2] += ex - ew;
    }
}

void zl_trace_join_waits(int rank, int world) {
    if (!g_step_ms || world < 2) return; /* the same on every rank */
    size_t total;
    int most, n = join_steps_alike(&total, &most);
    if (n == 0) return;
    double *ref = zl_host_calloc(total, sizeof *ref), *resid = zl_host_calloc(total, sizeof *resid);
    double *first = zl_host_calloc(total, sizeof *first), *offset = zl_host_calloc((size_t)n, sizeof *offset);
    double *scratch = zl_host_calloc((size_t)most, sizeof *scratch);
    zl_interval *iv = zl_host_calloc((size_t)most, sizeof *iv);
    double_int *last = zl_host_calloc(total, sizeof *last);
    if (rank == 0)
        for (size_t i = 0; i < total; i++) ref[i] = g_join_comm[i].t1; /* the steps lie back to back in the pool */
    mpiCheck(MPI_Bcast(ref, (int)total, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    double resid_max = align_on_rank0(n, rank, ref, offset, last, first, resid, scratch);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, last, (int)total, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, first, (int)total, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
    double f[4] = {0}; /* wait, its exposed part, exposed after the last join, late join */
    sum_join_figures(n, rank, offset, last, first, scratch, iv, f);
    g_sum.join_steps = n;
    g_sum.join_wait_ms = f[0] / n, g_sum.exposed_join_wait_ms = f[1] / n;
    g_sum.exposed_after_join_ms = fmax(0, f[2]) / n, g_sum.late_join_ms = f[3] / n;
    g_sum.end_residual_max_us = 1e3 * resid_max;
    g_sum.end_residual_median_us = 1e3 * zl_median(resid, total);
    g_sum.clock_offset_ms = zl_median(offset, (size_t)n);
    free(ref), free(resid), free(first), free(offset), free(scratch), free(iv), free(last);
}

/* ---- the Chrome trace-event file --------------------------------------------------------- */

/* Print one JSON value (escaped by cJSON) and free it. Returns 0 on a failed write. */
static int put(FILE *f, cJSON *item, const char *sep) {
    char *text = cJSON_PrintUnformatted(item);
    cJSON_Delete(item);
    if (!text) zl_fatal("out of host memory writing --trace");
    int ok = fputs(sep, f) >= 0 && fputs(text, f) >= 0;
    free(text);
    return ok;
}

static cJSON *metadata(const char *name, int pid, int tid, const char *key, const char *text, double number) {
    cJSON *o = cJSON_CreateObject(), *args = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "ph", "M");
    cJSON_AddNumberToObject(o, "pid", pid);
    if (tid >= 0) cJSON_AddNumberToObject(o, "tid", tid);
    if (text) cJSON_AddStringToObject(args, key, text);
    else cJSON_AddNumberToObject(args, key, number);
    cJSON_AddItemToObject(o, "args", args);
    return o;
}

/* The file's thread of a span: its lane, but for the optimizer's spans, which run on a stream of
 * their own beside the forward (or on the host, --offload): a thread of their own, TID_OPTIMIZER,
 * since the trace-event format lets spans on one thread only nest, never overlap. The figures
 * count them with the compute lane. Likewise --offload's copies up (h2d) have their own thread,
 * TID_COPY_UP, beside those down (d2h, the copy lane's): two streams, one per direction of the
 * link, and a unit's parameters may go up while the next one's gradients come down. */
enum { TID_OPTIMIZER = ZL_NLANES, TID_COPY_UP, N_TIDS };
static int tid_of(const record *r) {
    if (r->lane == ZL_LANE_COMPUTE && r->kind == ZL_PHASE_OPTIMIZER) return TID_OPTIMIZER;
    if (r->lane == ZL_LANE_COPY && r->kind == ZL_PHASE_COPY_H2D) return TID_COPY_UP;
    return r->lane;
}
static const char *tid_name(int tid) {
    return tid == ZL_LANE_COPY ? "copy d2h (offload)" : tid == TID_COPY_UP ? "copy h2d (offload)"
           : tid == TID_OPTIMIZER ? "optimizer" : lane_names[tid];
}
/* top to bottom: compute, optimizer, communication, copies down, copies up */
static int tid_sort_index(int tid) { return tid == TID_OPTIMIZER ? 1 : tid == TID_COPY_UP ? 4 : tid ? tid + 1 : 0; }

/* Rank r's process in the file: r + 1, since trace viewers take pid 0 for the kernel's swapper
 * (Perfetto's maintainers ask synthesized traces to start at 1). */
static int pid_of(int rank) { return rank + 1; }

/* "forward 3", "reduce_scatter 3", "all_reduce control": phase or op, then the unit. */
static cJSON *span_event(const record *r, int pid, double origin_ms) {
    const char *what = r->lane == ZL_LANE_COMM ? zl_op_name((zl_op)r->kind) : zl_phase_name((zl_phase)r->kind);
    char name[64];
    if (r->unit >= 0) snprintf(name, sizeof name, "%s %d", what, r->unit);
    else if (r->lane == ZL_LANE_COMM) snprintf(name, sizeof name, "%s %s", what, zl_purpose_name((zl_purpose)r->purpose));
    else snprintf(name, sizeof name, "%s", what);
    cJSON *o = cJSON_CreateObject(), *args = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "cat", zl_lane_name((zl_lane)r->lane));
    cJSON_AddStringToObject(o, "ph", "X");
    cJSON_AddNumberToObject(o, "ts", (r->t0 - origin_ms) * 1e3); /* microseconds */
    cJSON_AddNumberToObject(o, "dur", (r->t1 - r->t0) * 1e3);
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddNumberToObject(o, "tid", tid_of(r));
    cJSON_AddNumberToObject(args, "step", r->step);
    cJSON_AddNumberToObject(args, "unit", r->unit);
    cJSON_AddStringToObject(args, r->lane == ZL_LANE_COMM ? "op" : "phase", what);
    if (r->lane == ZL_LANE_COMM) cJSON_AddStringToObject(args, "purpose", zl_purpose_name((zl_purpose)r->purpose));
    cJSON_AddItemToObject(o, "args", args);
    return o;
}

static void write_file(FILE *f, const record *all, const int *counts, int world, const char *const *rank_names,
                       int stage, const double *exposed, const double *offsets) {
    /* Each rank counts from its own origin (its first event, at the start of step 1), moved onto
     * rank 0's clock by zl_trace_write (the join waits' offset): shift so that the earliest span
     * starts at 0. */
    double origin = INFINITY;
    size_t total = 0;
    for (int r = 0; r < world; r++) total += (size_t)counts[r];
    for (size_t i = 0; i < total; i++) origin = fmin(origin, all[i].t0);
    if (!isfinite(origin)) origin = 0;

    cJSON *other = cJSON_CreateObject();
    cJSON_AddStringToObject(other, "format",
                            "zerolab trace 4: one event per span; pid = rank + 1, tid = lane (3: optimizer, counted "
                            "as compute; 4: --offload's copies up); each rank's times shifted by its clock_offset_ms "
                            "(the join waits' median over join_steps; 0 where join_steps is 0: the rank's own clock)");
    cJSON_AddNumberToObject(other, "stage", stage);
    cJSON_AddNumberToObject(other, "world", world);
    cJSON_AddNumberToObject(other, "first_step", g_steps > 1 ? 2 : 1);
    cJSON_AddNumberToObject(other, "last_step", g_step_no - 1); /* the steps that ran: fewer if training stopped */
    cJSON_AddItemToObject(other, "exposed_comm_ms_per_step", cJSON_CreateDoubleArray(exposed, world));
    /* what was subtracted from each rank's times: its clock offset against rank 0, the join
     * waits' median over steps (0 for rank 0 and at N = 1) */
    cJSON_AddItemToObject(other, "clock_offset_ms", cJSON_CreateDoubleArray(offsets, world));
    cJSON_AddNumberToObject(other, "join_steps", g_sum.join_steps); /* the same on every rank */
    int ok = fputs("{\"displayTimeUnit\": \"ms\",\n \"otherData\": ", f) >= 0 && put(f, other, "") &&
             fputs(",\n \"traceEvents\": [", f) >= 0;
    const char *sep = "\n  ";
    for (int r = 0; r < world && ok; r++) {
        ok = put(f, metadata("process_name", pid_of(r), -1, "name", rank_names[r], 0), sep) &&
             put(f, metadata("process_sort_index", pid_of(r), -1, "sort_index", NULL, r), ",\n  ");
        sep = ",\n  ";
        for (int l = 0; l < N_TIDS && ok; l++)
            ok = put(f, metadata("thread_name", pid_of(r), l, "name", tid_name(l), 0), sep) &&
                 put(f, metadata("thread_sort_index", pid_of(r), l, "sort_index", NULL, tid_sort_index(l)), sep);
    }
    for (size_t i = 0, r = 0, end = (size_t)counts[0]; i < total && ok; i++) {
        while (i >= end) end += (size_t)counts[++r];
        if (i % 4096 == 0) zl_progress_in("writing --trace"); /* a slow file is progress, not a hang */
        ok = put(f, span_event(&all[i], pid_of((int)r), origin), sep);
    }
    if (ok) ok = fputs("\n]}\n", f) >= 0 && fflush(f) == 0;
    if (!ok) zl_output_failed(ZL_OUT_TRACE, errno);
}

void zl_trace_write(int rank, int world, const char *const *rank_names, int stage) {
    int asked = g_recording;
    if (!asked) return; /* the same flags on every rank (runtime.h): all return here, or none */
    int n = (int)g_n_rec, *counts = NULL, *displs = NULL;
    double exposed = zl_trace_get_summary().exposed_comm_ms, *all_exposed = NULL, *all_offsets = NULL;
    for (size_t i = 0; i < g_n_rec; i++) /* onto rank 0's clock: one shift a rank keeps its spans' order */
        g_rec[i].t0 -= g_sum.clock_offset_ms, g_rec[i].t1 -= g_sum.clock_offset_ms;
    record *all = NULL;
    if (rank == 0) {
        counts = calloc((size_t)world, sizeof *counts), displs = calloc((size_t)world, sizeof *displs);
        all_exposed = calloc((size_t)world, sizeof *all_exposed);
        all_offsets = calloc((size_t)world, sizeof *all_offsets);
        if (!counts || !displs || !all_exposed || !all_offsets) zl_fatal("out of host memory gathering --trace");
    }
    mpiCheck(MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(&exposed, 1, MPI_DOUBLE, all_exposed, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(&g_sum.clock_offset_ms, 1, MPI_DOUBLE, all_offsets, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    int *bytes = NULL;
    if (rank == 0) {
        size_t total = 0;
        bytes = calloc((size_t)world, sizeof *bytes);
        if (!bytes) zl_fatal("out of host memory gathering --trace");
        for (int r = 0; r < world; r++) {
            if ((total + (size_t)counts[r]) * sizeof(record) > INT32_MAX)
                zl_fatal("--trace: more than 2 GiB of spans to gather: trace fewer --steps");
            displs[r] = (int)(total * sizeof(record)), bytes[r] = (int)((size_t)counts[r] * sizeof(record));
            total += (size_t)counts[r];
        }
        all = malloc((total ? total : 1) * sizeof *all);
        if (!all) zl_fatal("out of host memory gathering --trace");
    }
    mpiCheck(MPI_Gatherv(g_rec, n * (int)sizeof(record), MPI_BYTE, all, bytes, displs, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        FILE *f = zl_output_begin(ZL_OUT_TRACE); /* opened at start-up (outputs.h) */
        if (f) write_file(f, all, counts, world, rank_names, stage, all_exposed, all_offsets);
    }
    free(all), free(counts), free(displs), free(bytes), free(all_exposed), free(all_offsets);
}
