/* report.c — gathers per-rank measurements to rank 0, prints the tables, writes JSON (cJSON). */
#define _POSIX_C_SOURCE 200809L
#include "report.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "args.h" /* zl_args_knob_set: the ZL_ knobs a run names (run.knobs) */
#include "clocks.h" /* each rank's GPU clocks through the timed steps */
#include "comm.h"
#include "../kernels/kernels.h" /* zl_kernels_gemm_table_used: what ZL_GEMM_TABLE changed */
#include "gemm_table.h"
#include "offload.h"
#include "outputs.h"
#include "preflight.h" /* zl_preflight_last: what the preflight compared */
#include "throughput.h"
#include "trace.h"
#include "util.h"
#include "watchdog.h" /* zl_progress_in: writing the report is progress, waiting for it a named phase */

/* The median of rank 0's timed steps (2..S; step 1 when S = 1), over the steps that ran: the
 * mean (ms_per_step) is what a run cost, the median what a typical step takes — a few slow
 * steps (a GPU's clocks falling under sustained load, another job on the host) move the first,
 * not the second. A run that diverged in step 1 of S > 1 timed none: 0, as its mean. */
static double median_step_ms(const double *step_ms, int steps_done, int steps_asked) {
    int first = steps_asked > 1 ? 1 : 0, n = steps_done - first;
    if (n <= 0) return 0;
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) zl_fatal("out of host memory for the report");
    memcpy(v, step_ms + first, (size_t)n * sizeof *v);
    double m = zl_median(v, (size_t)n);
    free(v);
    return m;
}

#ifndef ZL_GIT_COMMIT /* set by the Makefile: git describe --always --dirty at build time */
#define ZL_GIT_COMMIT "unknown"
#endif

enum { C_CALLS, C_S, C_WIRE, C_MS, C_TIMED_S, C_TIMED_CALLS, C_N };

/* Everything one rank contributes, as doubles so one MPI_Gather carries it. */
typedef struct {
    double mem_measured[ZL_MEM_NCAT], mem_formula[ZL_MEM_NCAT];
    double states_measured, states_formula, peak_measured, peak_formula;
    double host_states_measured, host_states_formula; /* --offload: master + m + v on the host */
    double transfer_measured, transfer_formula;       /* --offload: d2h + h2d bytes per step */
    double allocations_in_step;
    double dev_baseline, dev_after_alloc, dev_end, dev_total;
    double pre_checked, pre_dev_free, pre_host_avail, pre_local, pre_need_device, pre_need_host; /* preflight.h */
    double comm[ZL_NOPS][ZL_NPURPOSES][ZL_NDTYPES][C_N];
    double comm_formula[ZL_NPURPOSES];
    double wire_measured, wire_formula; /* per step, excluding control */
    double wire_by_purpose[ZL_NPURPOSES]; /* measured, per step (the final gather: once) */
    double ms_per_step, steps, timed_steps;
    double skipped; /* steps this rank skipped on overflow (every rank must agree) */
    double timeline_steps, compute_busy_ms, comm_busy_ms, exposed_comm_ms, span_ms; /* per step (trace.h) */
    double optimizer_ms, model_comm_busy_ms, copy_busy_ms, exposed_copy_ms, forward_ms; /* per step (trace.h) */
    double phase_ms[ZL_NPHASES]; /* per step: time in each phase's spans (trace.h) */
    double join_steps, join_wait_ms, exposed_join_wait_ms, exposed_after_join_ms; /* trace.h: join waits */
    double late_join_ms, clock_offset_ms, end_residual_median_us, end_residual_max_us;
    double gemm_taken, gemm_refused; /* ZL_GEMM_TABLE's entries taken, refused (kernels.h; taken < 0: why none) */
    double host_adam_bytes, host_threads; /* --offload: bytes host Adam moves per timed step; its OpenMP threads */
} rank_summary;

/* TEST ONLY: ZL_TEST_PERTURB_FORMULA=<memory category> adds one byte to that formula, and
 * =<collective purpose> (grad_sync, control, offload_grads, ...) one byte a step to that
 * purpose's traffic, so the tests can show that --check fails when measured and formula disagree. */
static void perturb_comm_for_tests(zl_comm_formula *cf) {
    const char *what = getenv("ZL_TEST_PERTURB_FORMULA");
    if (!what || !*what) return;
    for (int p = 0; p < ZL_NPURPOSES; p++)
        if (!strcmp(what, zl_purpose_name((zl_purpose)p))) {
            cf->bytes[p] += 1;
            if (zl_purpose_in_step_total((zl_purpose)p)) cf->total += 1;
            if (p == ZL_P_OFFLOAD_GRADS || p == ZL_P_OFFLOAD_PARAMS) cf->transfer_total += 1;
        }
}

static void perturb_for_tests(zl_mem_formula *mf) {
    const char *cat = getenv("ZL_TEST_PERTURB_FORMULA");
    if (!cat || !*cat) return;
    for (int c = 0; c < ZL_MEM_NCAT; c++)
        if (!strcmp(cat, zl_mem_cat_name((zl_mem_cat)c))) {
            mf->bytes[c] += 1;
            if (c < ZL_MEM_N_MODEL_STATES) mf->model_states += 1;
            if (zl_mem_cat_is_device((zl_mem_cat)c)) mf->peak_total += 1;
        }
}

static void summarize(const zl_report *r, rank_summary *s) {
    memset(s, 0, sizeof *s);
    const zl_mem_stats *ms = zl_mem_get_stats();
    zl_mem_formula mf;
    zl_formula_memory(r->part, &r->fc, &mf);
    perturb_for_tests(&mf);
    for (int c = 0; c < ZL_MEM_NCAT; c++) {
        s->mem_measured[c] = (double)ms->peak[c];
        s->mem_formula[c] = (double)mf.bytes[c];
        if (c < ZL_MEM_N_MODEL_STATES) s->states_measured += (double)ms->peak[c];
    }
    s->states_formula = (double)mf.model_states;
    s->host_states_measured = (double)(ms->peak[ZL_MEM_HOST_MASTER_FP32] + ms->peak[ZL_MEM_HOST_ADAM_M] +
                                       ms->peak[ZL_MEM_HOST_ADAM_V]);
    s->host_states_formula = (double)mf.host_states;
    s->peak_measured = (double)ms->peak_total;
    s->peak_formula = (double)mf.peak_total;
    s->allocations_in_step = (double)ms->allocations_after_freeze;
    s->dev_baseline = r->device_known ? (double)r->device_baseline : -1;
    s->dev_after_alloc = r->device_known ? (double)r->device_after_alloc : -1;
    s->dev_end = r->device_known ? (double)r->device_end : -1;
    s->dev_total = r->device_known ? (double)r->device_total : -1;
    const zl_preflight_inputs *pi = zl_preflight_last();
    s->pre_checked = pi->checked, s->pre_dev_free = pi->dev_free, s->pre_host_avail = pi->host_avail;
    s->pre_local = pi->local_ranks, s->pre_need_device = pi->need_device, s->pre_need_host = pi->need_host;
    double steps = (double)zl_comm_steps();
    for (int o = 0; o < ZL_NOPS; o++)
        for (int p = 0; p < ZL_NPURPOSES; p++)
            for (int t = 0; t < ZL_NDTYPES; t++) {
                const zl_comm_stat *st = zl_comm_get((zl_op)o, (zl_purpose)p, (zl_dtype)t);
                double *c = s->comm[o][p][t];
                c[C_CALLS] = (double)st->calls, c[C_S] = st->S_bytes, c[C_WIRE] = st->wire_bytes;
                c[C_MS] = st->ms, c[C_TIMED_S] = st->timed_S_bytes, c[C_TIMED_CALLS] = (double)st->timed_calls;
                if (zl_purpose_in_step_total((zl_purpose)p) && steps > 0) s->wire_measured += st->wire_bytes / steps;
            }
    for (int p = 0; p < ZL_NPURPOSES; p++) {
        double w = 0, n = p == ZL_P_GATHER_FINAL ? 1 : steps;
        for (int o = 0; o < ZL_NOPS; o++)
            for (int t = 0; t < ZL_NDTYPES; t++) w += s->comm[o][p][t][C_WIRE];
        s->wire_by_purpose[p] = n > 0 ? w / n : 0;
    }
    zl_comm_formula cf;
    zl_formula_config fc = r->fc;
    fc.no_param_hash = r->rt->cfg.no_param_hash || r->no_hash_why; /* no param_hash, and no gathers for it */
    zl_formula_comm(r->part, &fc, &cf);
    perturb_comm_for_tests(&cf);
    memcpy(s->comm_formula, cf.bytes, sizeof cf.bytes);
    s->wire_formula = cf.total;
    s->transfer_measured = s->wire_by_purpose[ZL_P_OFFLOAD_GRADS] + s->wire_by_purpose[ZL_P_OFFLOAD_PARAMS];
    s->transfer_formula = cf.transfer_total;
    s->ms_per_step = r->ms_per_step;
    s->skipped = r->n_skipped;
    s->steps = steps;
    s->timed_steps = (double)zl_comm_timed_steps();
    zl_trace_summary ts = zl_trace_get_summary();
    s->timeline_steps = ts.steps, s->compute_busy_ms = ts.compute_busy_ms, s->comm_busy_ms = ts.comm_busy_ms;
    s->exposed_comm_ms = ts.exposed_comm_ms, s->span_ms = ts.span_ms;
    s->optimizer_ms = ts.optimizer_ms, s->model_comm_busy_ms = ts.model_comm_busy_ms;
    s->copy_busy_ms = ts.copy_busy_ms, s->exposed_copy_ms = ts.exposed_copy_ms, s->forward_ms = ts.forward_ms;
    memcpy(s->phase_ms, ts.phase_ms, sizeof ts.phase_ms);
    s->join_steps = ts.join_steps, s->join_wait_ms = ts.join_wait_ms, s->exposed_join_wait_ms = ts.exposed_join_wait_ms;
    s->exposed_after_join_ms = ts.exposed_after_join_ms, s->late_join_ms = ts.late_join_ms;
    s->clock_offset_ms = ts.clock_offset_ms, s->end_residual_median_us = ts.end_residual_median_us;
    s->end_residual_max_us = ts.end_residual_max_us;
    int entries, refused;
    s->gemm_taken = zl_kernels_gemm_table_used(&entries, &refused), s->gemm_refused = refused;
    if (r->fc.offload) {
        /* Host Adam moves 28 bytes an element (gradient 2 + master, m, v 4 read; master, m, v 4 +
         * parameter 2 written) over the elements whose parameters it copies up: 14 per h2d byte. */
        double up = 0;
        for (int t = 0; t < ZL_NDTYPES; t++) up += s->comm[ZL_OP_H2D][ZL_P_OFFLOAD_PARAMS][t][C_TIMED_S];
        s->host_adam_bytes = s->timed_steps > 0 ? 14.0 * up / s->timed_steps : 0;
        s->host_threads = r->rt->host_threads;
    }
}

/* ---- the offload model -------------------------------------------------------------- */

/* With --offload a step has three parts, each measured on the timeline of the same run
 * (per step, means over steps 2..S; docs/ARCHITECTURE.md "The offload model"):
 *   device  the model's spans and the collectives (compute lane without the optimizer,
 *           communication lane): the GPU's work, as without offload but for Adam;
 *   host    host Adam's wall time (the optimizer spans: one per unit, run one after another);
 *   copies  the d2h / h2d copies nothing else hides: |∪copy \ (∪compute ∪ ∪comm)|.
 * Were host Adam and its copies fully overlapped with the device's work, a step would take
 * predicted = max(device, host + copies). Run one after the other: serial = device + host +
 * copies. This implementation sits between: host Adam needs the verdict, hence every unit's
 * gradient, so it cannot run beside the backward, but the next step's forward (forward: the
 * device's work before the first loss span) runs beside it, each unit waiting only for its own
 * parameters: pipelined = (device - forward) + max(forward, host + copies). Where the update
 * is known before the verdict (fc.early_update: a static loss scale, no clipping), host Adam
 * runs beside the backward instead, and predicted is that run's model. The report prints
 * them all beside the measured step time. */
typedef struct {
    double device_ms, host_adam_ms, copies_ms, predicted_ms, serial_ms, measured_ms, host_adam_GBps, threads;
    double forward_ms, pipelined_ms;
} offload_model;

static offload_model offload_model_of(const rank_summary *s) {
    offload_model m = {s->model_comm_busy_ms, s->optimizer_ms, s->exposed_copy_ms, 0, 0, s->ms_per_step, 0,
                       s->host_threads, s->forward_ms, 0};
    m.predicted_ms = fmax(m.device_ms, m.host_adam_ms + m.copies_ms);
    m.serial_ms = m.device_ms + m.host_adam_ms + m.copies_ms;
    m.pipelined_ms = m.device_ms - m.forward_ms + fmax(m.forward_ms, m.host_adam_ms + m.copies_ms);
    m.host_adam_GBps = m.host_adam_ms > 0 ? s->host_adam_bytes / (m.host_adam_ms * 1e-3) / 1e9 : 0;
    return m;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static const char *const stage_names[4] = {"DDP (stage 0)", "ZeRO-1 P_os (stage 1)", "ZeRO-2 P_os+g (stage 2)",
                                           "ZeRO-3 P_os+g+p (stage 3)"};

static void print_bytes_cell(double v) {
    if (v < 0) printf(" %16s |", "-");
    else printf(" %16.0f |", v);
}

/* The paper's model states on the device (bytes[0..4]; returns their sum); with --offload the
 * master, m and v (12Ψ/N, *host) are on the host instead (ZeRO-Offload). */
static double paper_device_states(const zl_report *r, double bytes[5], double *host) {
    double total = zl_paper_model_states((double)r->part->psi, r->rt->world, r->fc.stage, bytes);
    *host = 0;
    if (!r->fc.offload) return total;
    for (int k = 2; k < 5; k++) *host += bytes[k], total -= bytes[k], bytes[k] = 0;
    return total;
}

/* Memory table for one rank (or the first of a group of identical ranks). */
static void print_memory(const zl_report *r, const rank_summary *s, const char *who) {
    double paper[5], paper_host;
    paper_device_states(r, paper, &paper_host);
    printf("\nmemory per rank, bytes — %s\n", who);
    printf("%-23s | %16s | %16s | %16s | %12s\n", "component", "measured", "formula", "paper", "diff");
    printf("------------------------+------------------+------------------+------------------+-------------\n");
    for (int c = 0; c < ZL_MEM_NCAT; c++) {
        if (c == ZL_MEM_N_MODEL_STATES) {
            double ps = paper[0] + paper[1] + paper[2] + paper[3] + paper[4];
            printf("%-23s |", "= model_states");
            print_bytes_cell(s->states_measured);
            print_bytes_cell(s->states_formula);
            print_bytes_cell(ps);
            printf(" %12.0f\n", s->states_measured - s->states_formula);
        }
        if (c == ZL_MEM_HOST_STAGING) {
            printf("%-23s |", "= peak_total (device)");
            print_bytes_cell(s->peak_measured);
            print_bytes_cell(s->peak_formula);
            printf(" %16s | %12.0f\n", "", s->peak_measured - s->peak_formula);
        }
        if (zl_mem_cat_is_pinned((zl_mem_cat)c) && !r->fc.offload) continue; /* --offload's lines */
        char name[40];
        snprintf(name, sizeof name, "%s%s", zl_mem_cat_name((zl_mem_cat)c),
                 zl_mem_cat_is_host((zl_mem_cat)c) ? " (host)" : "");
        printf("%-23s |", name);
        print_bytes_cell(s->mem_measured[c]);
        print_bytes_cell(s->mem_formula[c]);
        if (c < ZL_MEM_N_MODEL_STATES) print_bytes_cell(paper[c]);
        else printf(" %16s |", "");
        printf(" %12.0f\n", s->mem_measured[c] - s->mem_formula[c]);
    }
    if (r->fc.offload) {
        printf("%-23s |", "= offloaded (host)");
        print_bytes_cell(s->host_states_measured);
        print_bytes_cell(s->host_states_formula);
        print_bytes_cell(paper_host);
        printf(" %12.0f\n", s->host_states_measured - s->host_states_formula);
        printf("--offload: device model states %s + 2Psi_pad/N, host 12Psi_pad/N + 2Psi_pad/N pinned staging\n",
               r->fc.stage >= 3 ? "2Psi_pad/N" : "2Psi_full");
    }
    double pad = (double)(r->part->psi_pad - r->part->psi);
    double gaps = r->fc.stage < 3 ? (double)(r->part->full_len - r->part->psi_pad) : 0; /* ZeRO-3: no full buffer */
    printf("padding: Psi_pad - Psi = %.0f elements", pad);
    if (gaps > 0) printf(", full buffers' alignment gaps Psi_full - Psi_pad = %.0f (units start on 16-byte lines)", gaps);
    printf("; formula - paper on model states is %s\n", gaps > 0 ? "those" : "that padding");
    if (s->dev_baseline >= 0) {
        printf("%-23s | %16.0f |  cudaMemGetInfo after CUDA+NCCL init, before any buffer\n", "device baseline",
               s->dev_baseline);
        printf("%-23s | %16.0f |  after all buffers (tracked %.0f)\n", "device used (alloc)",
               s->dev_after_alloc, s->peak_measured);
        printf("%-23s | %16.0f |  at the end of training\n", "device used (end)", s->dev_end);
        printf("%-23s | %16.0f |  used - baseline - tracked (allocation granularity, cuBLASLt/NCCL lazy buffers)\n",
               "overhead beyond tracked", s->dev_end - s->dev_baseline - s->peak_measured);
    }
    if (s->allocations_in_step > 0)
        printf("WARNING: %.0f allocations happened inside the step loop\n", s->allocations_in_step);
}

static double per_step(double total, double steps) { return steps > 0 ? total / steps : 0; }

/* Steps a purpose's totals are divided by: the final gather happens once, not per step. */
static double steps_of(const rank_summary *s, int purpose) {
    return purpose == ZL_P_GATHER_FINAL ? 1 : s->steps;
}

/* One collective row (op, purpose, dtype) as both the table and the JSON show it. */
typedef struct {
    double calls_per_step, bytes_per_call, wire_per_step, ms_per_step, algbw, busbw; /* GB/s */
} collective_row;

static collective_row collective_of(const rank_summary *s, int o, int p, int t, int world) {
    const double *c = s->comm[o][p][t];
    double steps = steps_of(s, p), secs = c[C_MS] * 1e-3;
    collective_row row = {per_step(c[C_CALLS], steps), c[C_S] / c[C_CALLS], per_step(c[C_WIRE], steps),
                          per_step(c[C_MS], s->timed_steps), secs > 0 ? c[C_TIMED_S] / secs / 1e9 : 0, 0};
    row.busbw = row.algbw * zl_busbw_factor((zl_op)o, world);
    return row;
}

static void print_comm(const zl_report *r, const rank_summary *s) {
    int N = r->rt->world;
    printf("\ncollectives per step, rank 0 (ring wire bytes sent per rank; busbw per nccl-tests)\n");
    printf("%-15s | %-18s | %-5s | %6s | %14s | %16s | %16s | %9s | %9s\n", "collective", "purpose", "dtype",
           "calls", "S per call", "wire bytes/step", "formula", "ms/step", "busbw GB/s");
    printf("----------------+--------------------+-------+--------+----------------+------------------+------------------+-----------+-----------\n");
    for (int p = 0; p < ZL_NPURPOSES; p++) {
        int first = 1; /* the formula is the purpose's: on its first row, not beside each part of it */
        for (int o = 0; o < ZL_NOPS; o++)
            for (int t = 0; t < ZL_NDTYPES; t++) {
                if (s->comm[o][p][t][C_CALLS] == 0) continue;
                collective_row row = collective_of(s, o, p, t, N);
                char formula[24] = "";
                if (first) snprintf(formula, sizeof formula, "%.0f", s->comm_formula[p]);
                first = 0;
                /* calls a step: a mean, fractional where some steps issue fewer (skipped steps) */
                printf("%-15s | %-18s | %-5s | %6.4g | %14.0f | %16.0f | %16s | %9.3f | %9.2f\n",
                       zl_op_name((zl_op)o), zl_purpose_name((zl_purpose)p), zl_dtype_name((zl_dtype)t),
                       row.calls_per_step, row.bytes_per_call, row.wire_per_step, formula, row.ms_per_step,
                       row.busbw);
            }
    }
    double paper = zl_paper_wire_bytes((double)r->part->psi, N, r->fc.stage);
    printf("total (grads + params, control excluded): measured %.0f, formula %.0f, paper %.0f bytes/step per rank\n",
           s->wire_measured, s->wire_formula, paper);
    if (s->wire_by_purpose[ZL_P_GATHER_FINAL] > 0) /* its row's figures are the run's, not a step's */
        printf("param_gather_final: once per run, after the last step (the full parameters for param_hash): its "
               "row is the run's, in no per-step total\n");
    if (r->fc.offload) /* PCIe, not the network: d2h every step, h2d on applied steps */
        printf("transfers (d2h + h2d, device <-> host, not network): measured %.0f, formula %.0f bytes/step per rank\n",
               s->transfer_measured, s->transfer_formula);
}

static int summaries_identical(const rank_summary *all, int n) {
    for (int i = 1; i < n; i++) {
        if (memcmp(all[i].mem_measured, all[0].mem_measured, sizeof all[0].mem_measured)) return 0;
        if (memcmp(all[i].mem_formula, all[0].mem_formula, sizeof all[0].mem_formula)) return 0;
    }
    return 1;
}

static void print_minmax_row(const char *name, const rank_summary *all, int n, size_t measured_off,
                             size_t formula_off) {
    double lo = INFINITY, hi = -INFINITY, flo = INFINITY, fhi = -INFINITY, worst = 0;
    for (int i = 0; i < n; i++) {
        double m = *(const double *)((const char *)&all[i] + measured_off);
        double f = *(const double *)((const char *)&all[i] + formula_off);
        lo = fmin(lo, m), hi = fmax(hi, m), flo = fmin(flo, f), fhi = fmax(fhi, f);
        worst = fmax(worst, fabs(m - f));
    }
    printf("%-23s | %16.0f | %16.0f | %16.0f | %16.0f | %12.0f\n", name, lo, hi, flo, fhi, worst);
}

/* N > 8: min and max over ranks of each line, and the largest |measured - formula|. */
static void print_minmax(const rank_summary *all, int n) {
    printf("\nmemory per rank, bytes — min / max over %d ranks\n", n);
    printf("%-23s | %16s | %16s | %16s | %16s | %12s\n", "component", "measured min", "measured max", "formula min",
           "formula max", "max |diff|");
    printf("------------------------+------------------+------------------+------------------+------------------+-------------\n");
    for (int c = 0; c < ZL_MEM_NCAT; c++) {
        if (c == ZL_MEM_N_MODEL_STATES)
            print_minmax_row("= model_states", all, n, offsetof(rank_summary, states_measured),
                             offsetof(rank_summary, states_formula));
        if (c == ZL_MEM_HOST_STAGING)
            print_minmax_row("= peak_total (device)", all, n, offsetof(rank_summary, peak_measured),
                             offsetof(rank_summary, peak_formula));
        print_minmax_row(zl_mem_cat_name((zl_mem_cat)c), all, n, offsetof(rank_summary, mem_measured[c]),
                         offsetof(rank_summary, mem_formula[c]));
    }
}

/* ---- --check: every measured number against its formula ------------------------- */

#define MAX_MISMATCHES 16
typedef struct {
    int ok, compared, n;
    char what[MAX_MISMATCHES][160];
} check_result;

/* Memory is integral bytes: equal, or a mismatch. Bytes a step (wire, transfers) are means of
 * sums of (N-1)/N·S terms in doubles: equal to well within a hundredth of a byte (a relative
 * tolerance would let whole bytes pass at 1e9 and more: 17 on lab-1b's model states). */
int zl_check_equal(int integral_bytes, double measured, double formula) {
    return integral_bytes ? measured == formula : fabs(measured - formula) < 0.01;
}

static void compare(check_result *c, int rank, const char *kind, const char *name, double measured, double formula) {
    c->compared++;
    if (zl_check_equal(!strcmp(kind, "memory"), measured, formula)) return;
    c->ok = 0;
    if (c->n < MAX_MISMATCHES)
        snprintf(c->what[c->n++], sizeof c->what[0], "rank %d %s %s: measured %.0f, formula %.0f", rank, kind, name,
                 measured, formula);
}

static check_result check_all(const rank_summary *all, int world) {
    check_result c = {.ok = 1};
    for (int i = 0; i < world; i++) {
        const rank_summary *s = &all[i];
        for (int k = 0; k < ZL_MEM_NCAT; k++)
            compare(&c, i, "memory", zl_mem_cat_name((zl_mem_cat)k), s->mem_measured[k], s->mem_formula[k]);
        compare(&c, i, "memory", "model_states", s->states_measured, s->states_formula);
        compare(&c, i, "memory", "peak_total", s->peak_measured, s->peak_formula);
        compare(&c, i, "memory", "host_states", s->host_states_measured, s->host_states_formula);
        compare(&c, i, "transfer bytes/step", "total", s->transfer_measured, s->transfer_formula);
        for (int p = 0; p < ZL_NPURPOSES; p++)
            compare(&c, i, "wire bytes/step", zl_purpose_name((zl_purpose)p), s->wire_by_purpose[p],
                    s->comm_formula[p]);
        compare(&c, i, "wire bytes/step", "total", s->wire_measured, s->wire_formula);
        if (s->allocations_in_step > 0) {
            c.ok = 0;
            if (c.n < MAX_MISMATCHES)
                snprintf(c.what[c.n++], sizeof c.what[0], "rank %d allocated %.0f buffers inside the step loop", i,
                         s->allocations_in_step);
        }
    }
    return c;
}

static void print_check(const check_result *c, int enforced, const char *prog) {
    if (c->ok) {
        printf("check: ok — %d measured numbers equal their formulas%s\n", c->compared,
               enforced ? "" : " (--check makes a mismatch exit 4)");
        return;
    }
    printf("check: MISMATCH — %d number(s) differ from their formulas; first: %s\n", c->n, c->what[0]);
    for (int i = 1; i < c->n; i++) printf("check:   %s\n", c->what[i]);
    if (enforced) /* exit 4, said where every other failure is (stdout may be a file no one reads) */
        fprintf(stderr, "%s: --check: %d measured number(s) differ from their formulas; first: %s\n", prog, c->n,
                c->what[0]);
}

/* ---- who ran where ---------------------------------------------------------------- */

/* One rank's host and device, and what the device ran at, gathered to rank 0 as bytes. */
typedef struct {
    char hostname[256], device[256], pci_bus_id[64];
    zl_clock_summary clocks; /* through steps 2..S (clocks.h); why none were read, or why they stopped early */
} rank_identity;

static void identify(rank_identity *id, const zl_clock_summary *clk) {
    memset(id, 0, sizeof *id);
    id->clocks = *clk;
    if (gethostname(id->hostname, sizeof id->hostname - 1)) snprintf(id->hostname, sizeof id->hostname, "unknown");
    snprintf(id->device, sizeof id->device, "%s", zl_backend_device_name());
    snprintf(id->pci_bus_id, sizeof id->pci_bus_id, "%s", zl_backend_device_pci_bus_id());
}

/* The MPI library's own version text (several lines on MPICH), trailing blanks removed. */
static void mpi_library(char *buf, size_t n) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) snprintf(v, sizeof v, "unknown");
    size_t end = strnlen(v, sizeof v - 1);
    while (end > 0 && isspace((unsigned char)v[end - 1])) end--;
    snprintf(buf, n, "%.*s", (int)end, v);
}

/* argv as one line a POSIX shell turns back into the same argv: words with anything but
 * [A-Za-z0-9_./=:,+-] in single quotes (a newline inside quotes stays a newline). The
 * exact strings are in "argv" as well. */
static char *command_line(int argc, char *const *argv) {
    size_t cap = 1;
    for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
    char *out = malloc(cap), *p = out;
    if (!out) zl_fatal("out of host memory");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = *a != '\0';
        for (const char *c = a; *c; c++)
            if (!isalnum((unsigned char)*c) && !strchr("_./=:,+-", *c)) plain = 0;
        if (i) *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') p += sprintf(p, "'\\''"); /* close, escaped quote, reopen */
            else *p++ = *c;
        }
        *p++ = '\'';
    }
    *p = '\0';
    return out;
}

static const char *first_line(const char *text, char *buf, size_t n) {
    snprintf(buf, n, "%.*s", (int)strcspn(text, "\n"), text);
    return buf;
}

/* One rank's clocks through the timed steps, at the end of its "rank r:" line: the median SM
 * clock and its range, power against the limit (the median reading: NVML's power is a one-second
 * mean on H100/H200, so it trails a short run's rise from idle), how often the power cap (or
 * heat) held the clock down, and the energy a step with the mean power the energy counter gives
 * (clocks.h). The CPU backend has none to print; a GPU whose clocks could not be read says why. */
static void print_clocks(const zl_clock_summary *c) {
    if (c->readings == 0) {
        if (strcmp(zl_backend_name(), "cpu")) printf(" | clocks not read: %s", c->why);
        return;
    }
    printf(" | SM %.0f MHz median (%.0f-%.0f), %.0f W of %.0f, power cap %.0f%% of %d readings", c->sm_mhz_median,
           c->sm_mhz_min, c->sm_mhz_max, c->power_w_median, c->power_limit_w, 100 * c->power_cap, c->readings);
    if (c->thermal > 0) printf(", thermal slowdown %.0f%%", 100 * c->thermal);
    if (c->hw_slowdown > 0) printf(", HW slowdown %.0f%%", 100 * c->hw_slowdown);
    if (c->energy_j >= 0 && c->energy_steps > 0)
        printf(", %.1f J a step (%.0f W by the energy counter)", c->energy_j / c->energy_steps, c->energy_w);
    else if (c->energy_j >= 0) printf(", %.1f J over the readings (%.0f W by the energy counter)", c->energy_j, c->energy_w);
    else if (c->energy_updates >= 0) printf(", energy counter moved %d time(s): too few for a figure", c->energy_updates);
    if (c->why[0]) printf(" (reading stopped early: %s)", c->why);
}

/* ---- ZL_GEMM_TABLE: what it changed ------------------------------------------------------- */

static const char *gemm_table_path(void) {
    const char *p = getenv("ZL_GEMM_TABLE");
    return p && *p ? p : NULL;
}
static int gemm_table_entries(const char *path) { /* the file's, read once for the line and the JSON */
    static int n = -1;
    if (n < 0) {
        zl_gemm_table t;
        char err[512];
        n = 0; /* args.c has checked that it loads */
        if (!zl_gemm_table_load(path, &t, err, sizeof err)) n = t.n, zl_gemm_table_free(&t);
    }
    return n;
}
static const char *why_no_table(double taken) {
    return taken == -2 ? "made on another GPU or cuBLASLt" : taken == -1 ? "the CPU backend has no cuBLASLt"
                                                                          : "no GEMM ran";
}

/* One line: how many of the table's entries each rank took (the same on every rank, or the least
 * and the most) and refused, or why it was not used. */
static void print_gemm_table(const rank_summary *all, int N) {
    const char *path = gemm_table_path();
    if (!path) return;
    int lo = 0, hi = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        if (all[i].gemm_taken < all[lo].gemm_taken) lo = i;
        if (all[i].gemm_taken > all[hi].gemm_taken) hi = i;
        refused += all[i].gemm_refused > 0;
    }
    int n = gemm_table_entries(path);
    if (all[0].gemm_taken < 0) printf("gemm table: %s: not used (%s)\n", path, why_no_table(all[0].gemm_taken));
    else if (all[lo].gemm_taken == all[hi].gemm_taken)
        printf("gemm table: %s: %.0f of its %d entries taken on every rank%s\n", path, all[0].gemm_taken, n,
               refused ? "; some refused on some ranks (stderr says which and why)" : "");
    else
        printf("gemm table: %s: %d entries; ranks took different numbers: %.0f (rank %d) to %.0f (rank %d)\n", path, n,
               all[lo].gemm_taken, lo, all[hi].gemm_taken, hi);
}

/* run.allgather_engine (backend.h) in words, for the run line. */
static const char *allgather_engine_words(const char *engine) {
    if (!strcmp(engine, "copy_engines")) return "copy engines (NCCL zero-CTA policy, symmetric windows)";
    if (!strcmp(engine, "sm_kernels")) return "NCCL kernels on the SMs";
    return !strcmp(engine, "mpi") ? "MPI" : engine;
}

static void print_who(const zl_report *r, const rank_identity *ids, const char *mpi_lib) {
    int N = r->rt->world;
    char line[160];
    printf("\nrun: commit %s | %s%s%s | all-gathers: %s", ZL_GIT_COMMIT, first_line(mpi_lib, line, sizeof line),
           zl_backend_nccl_version() ? " | " : "", zl_backend_nccl_version() ? zl_backend_nccl_version() : "",
           allgather_engine_words(zl_backend_allgather_engine()));
    const char *name, *value, *sep = " | knobs:"; /* the ZL_ knobs set (the same on every rank: zl_args_hash) */
    for (size_t i = 0; (name = zl_args_knob_set(i, &value)); i++)
        if (value) printf("%s %s=%s", sep, name, value), sep = "";
    printf("\n");
    for (int i = 0; i < N && i < 8; i++) {
        printf("rank %d: host %s | device %s | %s", i, ids[i].hostname, ids[i].device, ids[i].pci_bus_id);
        print_clocks(&ids[i].clocks);
        printf("\n");
    }
    if (N > 8) printf("... and %d more ranks (every rank in the JSON)\n", N - 8);
}

/* Exposed communication over the ranks. A collective ends when the last rank has joined, so a
 * rank that reaches it early waits, and its timeline counts the wait as exposed communication:
 * the spread between ranks is their difference in speed, which the join waits measure. */
static void print_exposed_over_ranks(const rank_summary *all, int N) {
    int lo = 0, hi = 0;
    for (int i = 1; i < N; i++) {
        if (all[i].exposed_comm_ms < all[lo].exposed_comm_ms) lo = i;
        if (all[i].exposed_comm_ms > all[hi].exposed_comm_ms) hi = i;
    }
    printf("  over ranks: least %.3f ms (rank %d, compute busy %.3f ms), most %.3f ms (rank %d, compute busy %.3f ms):\n"
           "  a rank that reaches a collective before a slower one counts its wait there (the join waits below)\n",
           all[lo].exposed_comm_ms, lo, all[lo].compute_busy_ms, all[hi].exposed_comm_ms, hi, all[hi].compute_busy_ms);
}

/* How much of each rank's exposed communication is waiting for a slower rank to join a
 * collective (trace.h, join waits), what is exposed after the last joins, and which rank the
 * others waited for: the one that joined latest, by the time it trailed the first to join. */
static void print_join_waits(const rank_summary *all, int N) {
    if (all[0].join_steps <= 0) {
        printf("  join waits: not measured (no timed step kept alike on every rank)\n");
        return;
    }
    int lo = 0, hi = 0, late = 0;
    double med = 0, most = 0;
    for (int i = 0; i < N; i++) {
        if (all[i].exposed_after_join_ms < all[lo].exposed_after_join_ms) lo = i;
        if (all[i].exposed_after_join_ms > all[hi].exposed_after_join_ms) hi = i;
        if (all[i].late_join_ms > all[late].late_join_ms) late = i;
        med = fmax(med, all[i].end_residual_median_us), most = fmax(most, all[i].end_residual_max_us);
    }
    printf("  join waits (a collective cannot end before its last rank joins it): rank 0 waited %.3f ms, %.3f ms of\n"
           "  it exposed; exposed after the last joins: least %.3f ms (rank %d), most %.3f ms (rank %d); the others\n"
           "  waited most for rank %d: in the collectives it joined last, %.3f ms after the first rank\n"
           "  (clocks aligned per step on the collectives' ends, which then agree within %.1f us, the worst rank's\n"
           "  median, %.1f us at most, over %.0f timed step(s))\n",
           all[0].join_wait_ms, all[0].exposed_join_wait_ms, all[lo].exposed_after_join_ms, lo,
           all[hi].exposed_after_join_ms, hi, late, all[late].late_join_ms, med, most, all[0].join_steps);
}

static void print_timeline(const rank_summary *all, int N) {
    const rank_summary *s = &all[0];
    if (s->timeline_steps == 0) { /* a run that diverged at step 1: zeros would read as measurements */
        printf("timeline: no timed step (the run ended at step 1, the warm-up)\n");
        return;
    }
    printf("timeline per step, mean over %.0f timed step(s), rank 0: compute busy %.3f ms, communication busy %.3f "
           "ms,\n  exposed communication %.3f ms (communication while the compute lane is idle)\n",
           s->timeline_steps, s->compute_busy_ms, s->comm_busy_ms, s->exposed_comm_ms);
    if (N > 1) print_exposed_over_ranks(all, N), print_join_waits(all, N);
    /* Where the compute lane's time goes, phase by phase: the roofline's measured side (set the
     * forward and backward against their GEMMs' time alone). The optimizer's spans run on their
     * own stream, beside the next forward, so the phases may add up to more than the busy time. */
    const char *sep = "  in spans, per step:";
    for (int p = 0; p < ZL_NPHASES; p++)
        if (s->phase_ms[p] > 0 || zl_lane_of_phase((zl_phase)p) == ZL_LANE_COMPUTE)
            printf("%s %s %.3f ms", sep, zl_phase_name((zl_phase)p), s->phase_ms[p]), sep = ",";
    printf("\n");
}

static void print_offload_model(const rank_summary *s, int early) {
    offload_model m = offload_model_of(s);
    printf("offload: host Adam %s\n", early ? "beside the backward, unit by unit as gradients land (the update is "
                                              "known before the verdict: static loss scale, no clipping)"
                                            : "after the verdict (it needs every gradient: overflow, clipping)");
    printf("offload model, rank 0, per step: device work %.3f ms (model spans + collectives), "
           "host Adam %.3f ms (threads %.0f, %.2f GB/s at 28 B/element), "
           "transfers not overlapped %.3f ms (of %.3f ms copying)\n"
           "  -> predicted max(%.3f, %.3f + %.3f) = %.3f ms; measured %.3f ms (M/P = %.3f); serial sum %.3f ms "
           "(M/S = %.3f)\n",
           m.device_ms, m.host_adam_ms, m.threads, m.host_adam_GBps, m.copies_ms, s->copy_busy_ms, m.device_ms,
           m.host_adam_ms, m.copies_ms, m.predicted_ms, m.measured_ms, ratio(m.measured_ms, m.predicted_ms),
           m.serial_ms, ratio(m.measured_ms, m.serial_ms));
    if (!early) /* the model of host Adam after the verdict */
        printf("  -> pipelined (host Adam waits for the verdict, then runs beside the next forward, %.3f ms): "
               "%.3f - %.3f + max(%.3f, %.3f + %.3f) = %.3f ms (M/pipelined = %.3f)\n",
               m.forward_ms, m.device_ms, m.forward_ms, m.forward_ms, m.host_adam_ms, m.copies_ms, m.pipelined_ms,
               ratio(m.measured_ms, m.pipelined_ms));
}

/* ---- JSON (cJSON: every string escaped) ------------------------------------------------ */

/* Bump when a key changes meaning or goes; adding keys does not (README "JSON schema"). */
enum { SCHEMA_VERSION = 2 };

/* A number as the shortest text that reads back as the same double; NaN and infinities as
 * null (JSON has neither). cJSON's own printing stops at 15 digits whenever they read back
 * within DBL_EPSILON, which loses the last bit of about one double in five (cJSON 1.7.15): a
 * reader recomputing max(D, A + T) from the printed parts could then disagree with the printed
 * result. With every number exact, what the JSON says equals what the program computed. */
static cJSON *json_number(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char text[32];
    for (int digits = 15; digits <= 17; digits++) { /* 17 always reads back exactly */
        snprintf(text, sizeof text, "%.*g", digits, v);
        if (strtod(text, NULL) == v) break;
    }
    return cJSON_CreateRaw(text);
}

static void add_number(cJSON *o, const char *key, double v) { cJSON_AddItemToObject(o, key, json_number(v)); }

static cJSON *add_object(cJSON *parent, const char *key) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(parent, key, o);
    return o;
}

static cJSON *json_mem_object(const double *cat, double states, double peak, double host_states) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < ZL_MEM_NCAT; c++) add_number(o, zl_mem_cat_name((zl_mem_cat)c), cat[c]);
    add_number(o, "model_states", states);
    add_number(o, "peak_total", peak);
    add_number(o, "host_states", host_states); /* --offload: master + m + v on the host */
    return o;
}

static cJSON *float_array(const float *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, json_number(v[i]));
    return a;
}

static cJSON *double_array(const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, json_number(v[i]));
    return a;
}

static cJSON *string_or_null(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

static cJSON *json_timeline(const rank_summary *s) {
    cJSON *o = cJSON_CreateObject();
    add_number(o, "steps", s->timeline_steps);
    add_number(o, "compute_busy_ms_per_step", s->compute_busy_ms);
    add_number(o, "comm_busy_ms_per_step", s->comm_busy_ms);
    add_number(o, "exposed_comm_ms_per_step", s->exposed_comm_ms);
    add_number(o, "span_ms_per_step", s->span_ms);
    add_number(o, "optimizer_ms_per_step", s->optimizer_ms);
    add_number(o, "model_comm_busy_ms_per_step", s->model_comm_busy_ms);
    add_number(o, "copy_busy_ms_per_step", s->copy_busy_ms);
    add_number(o, "exposed_copy_ms_per_step", s->exposed_copy_ms);
    add_number(o, "forward_ms_per_step", s->forward_ms);
    add_number(o, "join_steps", s->join_steps); /* join waits (trace.h): 0 at N = 1 */
    add_number(o, "join_wait_ms_per_step", s->join_wait_ms);
    add_number(o, "exposed_join_wait_ms_per_step", s->exposed_join_wait_ms);
    add_number(o, "exposed_after_join_ms_per_step", s->exposed_after_join_ms);
    add_number(o, "late_join_ms_per_step", s->late_join_ms);
    add_number(o, "clock_offset_ms", s->clock_offset_ms);
    add_number(o, "end_residual_median_us", s->end_residual_median_us);
    add_number(o, "end_residual_max_us", s->end_residual_max_us);
    cJSON *ph = cJSON_CreateObject();
    for (int p = 0; p < ZL_NPHASES; p++) add_number(ph, zl_phase_name((zl_phase)p), s->phase_ms[p]);
    cJSON_AddItemToObject(o, "phase_ms_per_step", ph);
    return o;
}

/* The offload model's parts and predictions (--offload only; offload_model above). */
static cJSON *json_offload_model(const rank_summary *s, int early) {
    offload_model m = offload_model_of(s);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "host_adam_beside", early ? "backward" : "next forward");
    add_number(o, "device_ms", m.device_ms);
    add_number(o, "host_adam_ms", m.host_adam_ms);
    add_number(o, "transfers_not_overlapped_ms", m.copies_ms);
    add_number(o, "copy_busy_ms", s->copy_busy_ms);
    add_number(o, "predicted_ms", m.predicted_ms);
    add_number(o, "serial_ms", m.serial_ms);
    add_number(o, "measured_ms", m.measured_ms);
    add_number(o, "measured_over_predicted", ratio(m.measured_ms, m.predicted_ms));
    add_number(o, "measured_over_serial", ratio(m.measured_ms, m.serial_ms));
    add_number(o, "forward_ms", m.forward_ms);
    add_number(o, "pipelined_ms", m.pipelined_ms);
    add_number(o, "measured_over_pipelined", ratio(m.measured_ms, m.pipelined_ms));
    add_number(o, "host_adam_bytes_per_step", s->host_adam_bytes);
    add_number(o, "host_adam_GBps", m.host_adam_GBps);
    add_number(o, "host_adam_threads", m.threads);
    return o;
}

static cJSON *json_comm(const zl_report *r, const rank_summary *s) {
    int N = r->rt->world;
    cJSON *comm = cJSON_CreateObject();
    cJSON *measured = add_object(comm, "measured");
    add_number(measured, "wire_bytes_per_step", s->wire_measured);
    cJSON *by = add_object(measured, "by_purpose");
    for (int p = 0; p < ZL_NPURPOSES; p++) {
        double w = 0;
        for (int o = 0; o < ZL_NOPS; o++)
            for (int t = 0; t < ZL_NDTYPES; t++) w += s->comm[o][p][t][C_WIRE];
        add_number(by, zl_purpose_name((zl_purpose)p), per_step(w, steps_of(s, p)));
    }
    add_number(measured, "transfer_bytes_per_step", s->transfer_measured); /* --offload: PCIe */
    cJSON *formula = add_object(comm, "formula");
    add_number(formula, "wire_bytes_per_step", s->wire_formula);
    add_number(formula, "transfer_bytes_per_step", s->transfer_formula);
    by = add_object(formula, "by_purpose");
    for (int p = 0; p < ZL_NPURPOSES; p++) add_number(by, zl_purpose_name((zl_purpose)p), s->comm_formula[p]);
    add_number(add_object(comm, "paper"), "wire_bytes_per_step",
                            zl_paper_wire_bytes((double)r->part->psi, N, r->fc.stage));
    cJSON *list = cJSON_AddArrayToObject(comm, "collectives");
    for (int p = 0; p < ZL_NPURPOSES; p++)
        for (int o = 0; o < ZL_NOPS; o++)
            for (int t = 0; t < ZL_NDTYPES; t++) {
                if (s->comm[o][p][t][C_CALLS] == 0) continue;
                collective_row row = collective_of(s, o, p, t, N);
                cJSON *c = cJSON_CreateObject();
                cJSON_AddStringToObject(c, "op", zl_op_name((zl_op)o));
                cJSON_AddStringToObject(c, "purpose", zl_purpose_name((zl_purpose)p));
                cJSON_AddStringToObject(c, "dtype", zl_dtype_name((zl_dtype)t));
                add_number(c, "calls_per_step", row.calls_per_step);
                add_number(c, "bytes_per_call", row.bytes_per_call);
                add_number(c, "wire_bytes_per_step", row.wire_per_step);
                add_number(c, "ms_per_step", row.ms_per_step);
                add_number(c, "algbw_GBps", row.algbw);
                add_number(c, "busbw_GBps", row.busbw);
                cJSON_AddItemToArray(list, c);
            }
    return comm;
}

/* clocks.h's summary: what the GPU ran at through steps 2..S; "why" where nothing was read. */
static cJSON *json_clocks(const zl_clock_summary *s) {
    cJSON *c = cJSON_CreateObject();
    add_number(c, "readings", s->readings);
    add_number(c, "period_ms", ZL_CLOCK_PERIOD_MS);
    if (s->why[0]) cJSON_AddStringToObject(c, "why", s->why); /* none, or why they stopped early */
    if (s->readings == 0) return c;
    add_number(c, "sm_mhz_median", s->sm_mhz_median);
    add_number(c, "sm_mhz_min", s->sm_mhz_min);
    add_number(c, "sm_mhz_max", s->sm_mhz_max);
    add_number(c, "power_w_median", s->power_w_median);
    add_number(c, "power_limit_w", s->power_limit_w);
    add_number(c, "temp_c_max", s->temp_c_max);
    add_number(c, "power_cap_fraction", s->power_cap);
    add_number(c, "thermal_slowdown_fraction", s->thermal);
    add_number(c, "hw_slowdown_fraction", s->hw_slowdown);
    if (s->energy_updates < 0) return c; /* the device keeps no energy counter */
    add_number(c, "energy_updates", s->energy_updates);
    if (s->energy_j < 0) return c; /* it moved too few times to time */
    add_number(c, "energy_w", s->energy_w);
    add_number(c, "energy_j", s->energy_j);
    if (s->energy_steps > 0) {
        add_number(c, "energy_steps", s->energy_steps);
        add_number(c, "energy_j_per_step", s->energy_j / s->energy_steps);
    }
    return c;
}

static cJSON *json_rank(const zl_report *r, const rank_summary *s, const rank_identity *id, const double *step_ms,
                        int rank) {
    double paper[5];
    double paper_host, paper_states = paper_device_states(r, paper, &paper_host);
    cJSON *o = cJSON_CreateObject();
    add_number(o, "rank", rank);
    cJSON_AddStringToObject(o, "hostname", id->hostname);
    cJSON_AddStringToObject(o, "device", id->device);
    cJSON_AddStringToObject(o, "pci_bus_id", id->pci_bus_id);
    if (gemm_table_path()) { /* this rank's take of ZL_GEMM_TABLE: each rank checks its own bits */
        cJSON *gt = add_object(o, "gemm_table");
        add_number(gt, "taken", s->gemm_taken >= 0 ? s->gemm_taken : 0);
        add_number(gt, "refused", s->gemm_refused);
    }
    cJSON *mem = add_object(o, "memory");
    cJSON_AddItemToObject(mem, "measured", json_mem_object(s->mem_measured, s->states_measured, s->peak_measured,
                                                                s->host_states_measured));
    cJSON_AddItemToObject(mem, "formula", json_mem_object(s->mem_formula, s->states_formula, s->peak_formula,
                                                               s->host_states_formula));
    cJSON *pp = add_object(mem, "paper");
    const char *const paper_keys[5] = {"params_fp16", "grads_fp16", "master_fp32", "adam_m", "adam_v"};
    for (int k = 0; k < 5; k++) add_number(pp, paper_keys[k], paper[k]);
    add_number(pp, "model_states", paper_states);
    add_number(pp, "host_states", paper_host);
    if (s->dev_baseline >= 0) {
        add_number(mem, "device_baseline", s->dev_baseline);
        add_number(mem, "device_used", s->dev_end);
        add_number(mem, "device_used_after_alloc", s->dev_after_alloc);
        add_number(mem, "device_total", s->dev_total);
    }
    if (s->pre_checked) { /* what the preflight compared: zerocalc --max-layers --memory/--host-memory */
        cJSON *pf = add_object(mem, "preflight");
        add_number(pf, "device_free", s->pre_dev_free);
        add_number(pf, "host_available", s->pre_host_avail);
        add_number(pf, "local_ranks", s->pre_local);
        add_number(pf, "need_device", s->pre_need_device);
        add_number(pf, "need_host", s->pre_need_host);
    }
    add_number(mem, "allocations_in_step", s->allocations_in_step);
    cJSON_AddItemToObject(o, "comm", json_comm(r, s));
    add_number(o, "skipped_steps", s->skipped); /* this rank's count: every rank must agree */
    add_number(o, "ms_per_step", s->ms_per_step);
    cJSON_AddItemToObject(o, "step_ms", double_array(step_ms, r->steps));
    cJSON_AddItemToObject(o, "timeline", json_timeline(s));
    cJSON_AddItemToObject(o, "clocks", json_clocks(&id->clocks));
    if (r->fc.offload) cJSON_AddItemToObject(o, "offload_model", json_offload_model(s, r->fc.early_update));
    return o;
}

/* run.gemm_table: rank 0's figures and the file's entries (each rank's: ranks[].gemm_table). */
static cJSON *json_gemm_table(const rank_summary *s) {
    const char *path = gemm_table_path();
    if (!path) return cJSON_CreateNull();
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "path", path);
    cJSON_AddBoolToObject(t, "in_use", s->gemm_taken >= 0);
    if (s->gemm_taken < 0) cJSON_AddStringToObject(t, "why_not", why_no_table(s->gemm_taken));
    add_number(t, "entries", gemm_table_entries(path));
    add_number(t, "taken", s->gemm_taken >= 0 ? s->gemm_taken : 0);
    add_number(t, "refused", s->gemm_refused);
    return t;
}

static cJSON *json_run(const zl_report *r, const char *mpi_lib) {
    cJSON *run = cJSON_CreateObject();
    cJSON_AddStringToObject(run, "git_commit", ZL_GIT_COMMIT);
    cJSON_AddStringToObject(run, "mpi_library", mpi_lib);
    cJSON_AddItemToObject(run, "nccl_version", string_or_null(zl_backend_nccl_version()));
    cJSON_AddStringToObject(run, "allgather_engine", zl_backend_allgather_engine());
    char *line = command_line(r->rt->argc, r->rt->argv);
    cJSON_AddStringToObject(run, "command_line", line);
    free(line);
    cJSON *argv = cJSON_AddArrayToObject(run, "argv");
    for (int i = 0; i < r->rt->argc; i++) cJSON_AddItemToArray(argv, cJSON_CreateString(r->rt->argv[i]));
    cJSON_AddItemToObject(run, "trace", string_or_null(r->rt->cfg.trace_path[0] ? r->rt->cfg.trace_path : NULL));
    cJSON *knobs = cJSON_AddObjectToObject(run, "knobs"); /* the ZL_ knobs set, as given; {}: every default */
    const char *name, *value;
    for (size_t i = 0; (name = zl_args_knob_set(i, &value)); i++)
        if (value) cJSON_AddStringToObject(knobs, name, value);
    return run;
}

/* The numerics fields, each written when the stage set it. */
static void json_mixed_precision(cJSON *j, const zl_report *r) {
    if (r->dtype) cJSON_AddStringToObject(j, "dtype", r->dtype);
    if (r->status) cJSON_AddStringToObject(j, "status", r->status);
    if (r->loss_scale || r->grad_norm || r->skipped_steps) add_number(j, "steps_done", r->steps_done);
    if (r->loss_scale) cJSON_AddItemToObject(j, "loss_scale", float_array(r->loss_scale, r->steps_done));
    if (r->grad_norm) cJSON_AddItemToObject(j, "grad_norm", float_array(r->grad_norm, r->steps_done));
    if (r->skipped_steps) cJSON_AddItemToObject(j, "skipped_steps", cJSON_CreateIntArray(r->skipped_steps, r->n_skipped));
}

typedef struct {
    const rank_summary *all;
    const rank_identity *ids;
    const double *step_ms; /* [world × steps] */
    double median_ms;      /* of rank 0's timed steps (median_step_ms) */
    const char *mpi_lib;
} gathered;

/* --model gpt: tokens/s per GPU, model FLOPs per token and MFU (throughput.h); MFU and the
 * peak are null when the peak is unknown. */
static cJSON *json_throughput(const zl_throughput *t) {
    cJSON *o = cJSON_CreateObject();
    add_number(o, "tokens_per_step_per_gpu", t->tokens_per_step);
    add_number(o, "tokens_per_s_per_gpu", t->tokens_per_s);
    add_number(o, "flops_per_token", t->flops_per_token);
    add_number(o, "attention_flops_per_token", t->attention_flops_per_token);
    cJSON_AddStringToObject(o, "flops_per_token_formula", "6*Psi + 12*L*T*D (PaLM appendix B; full T^2, no recompute)");
    add_number(o, "model_tflops_per_gpu", t->tflops);
    cJSON_AddItemToObject(o, "peak_tflops", t->peak_tflops > 0 ? json_number(t->peak_tflops) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "peak_source", string_or_null(t->peak_source));
    cJSON_AddItemToObject(o, "mfu", json_number(t->mfu));
    return o;
}

static cJSON *json_report(const zl_report *r, const gathered *g, const check_result *chk, double ms, double samples_s,
                          double tflops, const zl_throughput *gpt) {
    const zl_config *c = &r->rt->cfg;
    char when[32] = "unknown", hash[20];
    time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    cJSON *j = cJSON_CreateObject();
    add_number(j, "schema_version", SCHEMA_VERSION);
    add_number(j, "stage", c->stage);
    add_number(j, "world", r->rt->world);
    cJSON_AddStringToObject(j, "backend", zl_backend_name());
    cJSON_AddStringToObject(j, "device", zl_backend_device_name());
    cJSON_AddStringToObject(j, "date", when);
    if (r->variant) cJSON_AddStringToObject(j, "variant", r->variant);
    add_number(j, "params", (double)r->part->psi);
    add_number(j, "params_padded", (double)r->part->psi_pad);
    add_number(j, "params_full", (double)r->part->full_len);
    add_number(j, "units", r->part->n_units);
    cJSON *cf = add_object(j, "config");
    cJSON_AddStringToObject(cf, "preset", c->preset);
    cJSON_AddStringToObject(cf, "model", c->model == 1 ? "gpt" : "mlp");
    if (c->model == 1) { /* the transformer's shape and data (model/gpt.h) */
        add_number(cf, "seq", c->seq);
        add_number(cf, "heads", c->heads);
        add_number(cf, "vocab", c->vocab);
        cJSON_AddStringToObject(cf, "attention", c->attention == ZL_ATTENTION_FUSED ? "fused" : "strided");
        cJSON_AddItemToObject(cf, "data", string_or_null(c->data_path[0] ? c->data_path : NULL));
    }
    add_number(cf, "layers", c->layers);
    add_number(cf, "dim", c->dim);
    add_number(cf, "batch", c->batch);
    add_number(cf, "seed", (double)c->seed); /* exact: --seed is at most 2^53 (args.c) */
    add_number(cf, "loss_scale", c->loss_scale);
    add_number(cf, "lr", c->lr);
    add_number(cf, "beta1", c->beta1);
    add_number(cf, "beta2", c->beta2);
    add_number(cf, "eps", c->eps);
    add_number(cf, "weight_decay", c->weight_decay);
    add_number(cf, "prefetch", c->stage == 3 ? c->prefetch : 0);
    add_number(cf, "accum", c->accum);
    cJSON_AddBoolToObject(cf, "offload", c->offload);
    cJSON_AddBoolToObject(cf, "checkpoint_activations", c->checkpoint_activations);
    cJSON_AddBoolToObject(cf, "keep_activations", c->keep_activations);
    cJSON_AddStringToObject(cf, "dtype", zl_dtype_name(c->dtype));
    cJSON_AddStringToObject(cf, "loss_scale_mode", c->loss_scale_dynamic ? "dynamic" : "static");
    add_number(cf, "clip_grad_norm", c->clip_grad_norm);
    cJSON *run = json_run(r, g->mpi_lib);
    cJSON_AddItemToObject(run, "gemm_table", json_gemm_table(&g->all[0]));
    cJSON_AddItemToObject(j, "run", run);
    add_number(j, "steps", r->steps);
    cJSON_AddItemToObject(j, "loss", float_array(r->losses, r->steps));
    json_mixed_precision(j, r);
    add_number(j, "ms_per_step", ms);
    add_number(j, "ms_per_step_median", g->median_ms);
    cJSON_AddItemToObject(j, "step_ms", double_array(g->step_ms, r->steps));
    add_number(j, "exposed_comm_ms_per_step", g->all[0].exposed_comm_ms);
    if (c->offload) /* rank 0's */
        cJSON_AddItemToObject(j, "offload_model", json_offload_model(&g->all[0], r->fc.early_update));
    add_number(j, "samples_per_s", samples_s);
    add_number(j, "tflops_per_gpu", tflops);
    if (gpt) cJSON_AddItemToObject(j, "throughput", json_throughput(gpt));
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)r->param_hash);
    if (c->no_param_hash || r->no_hash_why) cJSON_AddNullToObject(j, "param_hash"); /* not computed */
    else cJSON_AddStringToObject(j, "param_hash", hash);
    if (r->no_hash_why) cJSON_AddStringToObject(j, "param_hash_note", r->no_hash_why);
    cJSON *ck = add_object(j, "check");
    cJSON_AddBoolToObject(ck, "ok", chk->ok);
    cJSON_AddBoolToObject(ck, "enforced", c->check);
    add_number(ck, "compared", chk->compared);
    cJSON *mm = cJSON_AddArrayToObject(ck, "mismatches");
    for (int i = 0; i < chk->n; i++) cJSON_AddItemToArray(mm, cJSON_CreateString(chk->what[i]));
    cJSON *ranks = cJSON_AddArrayToObject(j, "ranks");
    for (int i = 0; i < r->rt->world; i++)
        cJSON_AddItemToArray(ranks, json_rank(r, &g->all[i], &g->ids[i], g->step_ms + (size_t)i * r->steps, i));
    return j;
}

static void write_json(const zl_report *r, const gathered *g, const check_result *chk, double ms, double samples_s,
                       double tflops, const zl_throughput *gpt) {
    FILE *f = zl_output_begin(ZL_OUT_JSON); /* opened at start-up (outputs.h) */
    if (!f) return;
    zl_progress_in("writing --json"); /* a slow file: past --timeout the watchdog names it */
    cJSON *j = json_report(r, g, chk, ms, samples_s, tflops, gpt);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) zl_fatal("out of host memory printing the JSON report");
    if (fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f)) zl_output_failed(ZL_OUT_JSON, errno);
    free(text); /* a failure is reported by zl_outputs_close, after the report */
}

void zl_report_step(const zl_runtime *rt, int step, int steps, float loss, float scale, float norm, int skipped,
                    double ms) {
    zl_trace_step_ms(step, ms); /* every rank: the JSON's step_ms */
    if (step == 1 && steps > 1) zl_clocks_start(); /* the timed steps' clocks (clocks.h) */
    if (step == steps) zl_clocks_end(steps - 1);
    if (rt->rank || rt->cfg.quiet) return;
    printf("step %4d/%d | loss %.6f | scale %8g | grad norm %10.4g | %9.3f ms%s\n", step, steps, loss, scale, norm, ms,
           skipped ? " | skipped (overflow)" : "");
    zl_stdout_flush();
}

static int print_and_write(const zl_report *r);
int zl_report_final(const zl_report *r) {
    int status = print_and_write(r);
    if (r->rt->rank) zl_progress_in("waiting for rank 0 to write the report and its files");
    status = zl_outputs_close() ? ZL_EXIT_RUNTIME : status; /* a lost result outranks a mismatch */
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return status;
}

/* Every rank's summary, identity and step times to rank 0 (NULL arrays elsewhere). */
static gathered gather_all(const zl_report *r, rank_summary *mine, const zl_clock_summary *clk) {
    int N = r->rt->world, root = r->rt->rank == 0, n_steps;
    gathered g = {0};
    rank_identity me;
    identify(&me, clk);
    const double *my_steps = zl_trace_step_times(&n_steps);
    if (n_steps < r->steps) zl_fatal("step times for %d steps, the report has %d", n_steps, r->steps);
    /* a run that diverged reports the steps it completed: the first r->steps of the times */
    rank_summary *all = NULL;
    rank_identity *ids = NULL;
    double *step_ms = NULL;
    if (root) {
        all = malloc((size_t)N * sizeof *all), ids = malloc((size_t)N * sizeof *ids);
        step_ms = malloc((size_t)N * (size_t)r->steps * sizeof *step_ms);
        if (!all || !ids || !step_ms) zl_fatal("out of host memory for the report");
    }
    mpiCheck(MPI_Gather(mine, (int)(sizeof *mine / sizeof(double)), MPI_DOUBLE, all,
                        (int)(sizeof *mine / sizeof(double)), MPI_DOUBLE, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(&me, (int)sizeof me, MPI_BYTE, ids, (int)sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD));
    mpiCheck(MPI_Gather(my_steps, r->steps, MPI_DOUBLE, step_ms, r->steps, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    g.all = all, g.ids = ids, g.step_ms = step_ms;
    if (root) g.median_ms = median_step_ms(step_ms, r->steps, r->rt->cfg.steps); /* rank 0 prints and writes */
    return g;
}

/* Collective: the --trace file, each rank's row labelled with where it ran. */
static void write_trace(const zl_report *r, const gathered *g) {
    int N = r->rt->world;
    char (*labels)[640] = NULL; /* "rank r · host · device (pci)" */
    const char **names = NULL;
    if (g->ids) {
        labels = malloc((size_t)N * sizeof *labels), names = malloc((size_t)N * sizeof *names);
        if (!labels || !names) zl_fatal("out of host memory");
        for (int i = 0; i < N; i++) {
            snprintf(labels[i], sizeof labels[i], "rank %d · %s · %s (%s)", i, g->ids[i].hostname, g->ids[i].device,
                     g->ids[i].pci_bus_id);
            names[i] = labels[i];
        }
    }
    zl_trace_write(r->rt->rank, N, names, r->rt->cfg.stage);
    free(labels), free(names);
}

/* --model gpt: one line of tokens/s, model FLOPs and MFU, each with its formula (throughput.h). */
static void print_throughput(const zl_throughput *t, const zl_config *c, const char *per) {
    printf("throughput: %.0f tokens/s per %s (K*B*T = %.0f tokens/step) | model FLOPs/token 6*Psi + 12*L*T*D = "
           "%.4g (PaLM; attention %.4g, full T^2%s) | %.4g TFLOP/s per %s | ",
           t->tokens_per_s, per, t->tokens_per_step, t->flops_per_token, t->attention_flops_per_token,
           c->checkpoint_activations ? ", recompute not counted" : "", t->tflops, per);
    if (isfinite(t->mfu)) printf("MFU %.1f%% of %.4g TFLOP/s (%s)\n", 100 * t->mfu, t->peak_tflops, t->peak_source);
    else printf("MFU: peak unknown (--peak-tflops P)\n");
    printf("attention: %s\n", c->attention == ZL_ATTENTION_FUSED
                                   ? "fused (FlashAttention-2-style: P recomputed in backward, one log-sum-exp a row kept)"
                                   : "strided (batched GEMMs over the B*H heads: P = B*H*T^2 kept for backward)");
}

/* Rank 0 prints and writes; returns ZL_EXIT_CHECK on a --check mismatch, else 0. */
static int print_and_write(const zl_report *r) {
    zl_clock_summary clk = zl_clocks_summary(); /* what training ran at (steps 2..S) */
    rank_summary mine;
    zl_trace_join_waits(r->rt->rank, r->rt->world); /* collective: before summarize reads its figures */
    summarize(r, &mine);
    gathered g = gather_all(r, &mine, &clk);
    write_trace(r, &g);
    if (r->rt->rank) return 0;
    const rank_summary *all = g.all;
    char mpi_lib[MPI_MAX_LIBRARY_VERSION_STRING];
    mpi_library(mpi_lib, sizeof mpi_lib);
    g.mpi_lib = mpi_lib;
    check_result chk = check_all(all, r->rt->world);

    int N = r->rt->world;
    const zl_config *c = &r->rt->cfg;
    double ms = all[0].ms_per_step;
    double rows = (double)c->batch * c->accum; /* per rank per step: K micro-batches of B */
    double samples_s = ms > 0 ? (double)N * rows / (ms * 1e-3) : 0;
    /* 6·Ψ flops per token (forward 2, backward 4; attention's T² terms not counted): a GPT row
     * is a sequence of T tokens, an MLP row one sample. */
    double tokens = rows * (c->model == 1 ? (double)c->seq : 1.0);
    double tflops = ms > 0 ? 6.0 * (double)r->part->psi * tokens / (ms * 1e-3) / 1e12 : 0;
    const char *per = zl_backend_name()[1] == 'u' ? "GPU" : "rank";
    zl_throughput gpt_t = zl_throughput_of(c, (double)r->part->psi, ms, zl_backend_device_name());
    const zl_throughput *gpt = c->model == 1 ? &gpt_t : NULL;

    printf("\n== %s | backend %s (%s) | N = %d | Psi = %zu | Psi_pad = %zu | Psi_full = %zu | %d units ==\n",
           stage_names[c->stage], zl_backend_name(), zl_backend_device_name(), N, r->part->psi, r->part->psi_pad,
           r->part->full_len, r->part->n_units);
    if (r->variant) printf("variant: %s\n", r->variant);
    if (c->accum > 1 || c->checkpoint_activations || c->keep_activations)
        printf("%d micro-batch%s of %d rows per rank per step%s\n", c->accum, c->accum > 1 ? "es" : "", c->batch,
               c->checkpoint_activations ? "; activations checkpointed (each block's input kept, recomputed)"
               : c->keep_activations    ? "; activations kept (gelu(h) of every block too: nothing recomputed)"
                                        : "");
    if (N > 8) {
        print_minmax(all, N); /* one column per rank would not fit; the JSON has every rank */
    } else if (summaries_identical(all, N)) {
        char who[64];
        snprintf(who, sizeof who, N == 1 ? "rank 0" : "every rank (all %d identical)", N);
        print_memory(r, &all[0], who);
    } else {
        for (int i = 0; i < N; i++) {
            char who[32];
            snprintf(who, sizeof who, "rank %d", i);
            print_memory(r, &all[i], who);
        }
    }
    print_comm(r, &all[0]);
    if (r->status && !strcmp(r->status, "diverged"))
        printf("\nDIVERGED: training stopped at step %d of %d (exit 3)\n", r->steps_done, c->steps);
    if (r->n_skipped * 10 > r->steps_done)
        printf("\nWARNING: %d of %d steps were skipped on overflow (more than 10%%): the loss scale keeps "
               "overflowing; a smaller --loss-scale-init or --lr may help\n",
               r->n_skipped, r->steps_done);
    if (r->dtype) printf("\nmixed precision: %s, loss scale %s (last %g), %d step(s) skipped%s\n", r->dtype,
                         c->loss_scale_dynamic ? "dynamic" : "static",
                         r->steps_done ? r->loss_scale[r->steps_done - 1] : c->loss_scale, r->n_skipped,
                         c->clip_grad_norm > 0 ? ", gradient norm clipped" : "");
    print_timeline(all, N);
    if (c->offload) print_offload_model(&all[0], r->fc.early_update);
    print_who(r, g.ids, mpi_lib);
    print_gemm_table(all, N);
    char hash[24] = "not computed";
    int hashed = !c->no_param_hash && !r->no_hash_why;
    if (hashed) snprintf(hash, sizeof hash, "%016llx", (unsigned long long)r->param_hash);
    if (r->no_hash_why) printf("\nno param_hash: %s\n", r->no_hash_why);
    printf("\nfinal loss %.6f (first %.6f) | %.3f ms/step (median %.3f) | %.1f samples/s | %.4g TFLOP/s per %s "
           "(6*Psi*tokens/step) | param_hash %s\n",
           r->losses[r->steps - 1], r->losses[0], ms, g.median_ms, samples_s, tflops, per, hash);
    if (gpt) print_throughput(gpt, c, per);
    /* One machine-readable line for scripts (make demo's comparison table). */
    double paper[5], paper_host, paper_states = paper_device_states(r, paper, &paper_host); /* as the table's */
    printf("summary: stage=%d world=%d states_measured=%.0f states_formula=%.0f states_paper=%.0f peak=%.0f "
           "wire=%.0f ms=%.3f tflops=%.4g loss=%.6f hash=%s",
           c->stage, N, all[0].states_measured, all[0].states_formula, paper_states, all[0].peak_measured,
           all[0].wire_measured, ms, tflops, r->losses[r->steps - 1], hashed ? hash : "none");
    if (c->offload) printf(" host_states_paper=%.0f", paper_host);
    if (gpt) printf(" tokens_s=%.0f model_tflops=%.4g mfu=%.4f", gpt->tokens_per_s, gpt->tflops, gpt->mfu);
    printf("\n");
    print_check(&chk, c->check, r->rt->prog);
    zl_stdout_flush();
    write_json(r, &g, &chk, ms, samples_s, tflops, gpt);
    free((void *)g.all), free((void *)g.ids), free((void *)g.step_ms);
    if (r->status && !strcmp(r->status, "diverged")) return ZL_EXIT_DIVERGED;
    return c->check && !chk.ok ? ZL_EXIT_CHECK : ZL_EXIT_OK;
}
