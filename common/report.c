/* report.c — gathers per-rank measurements to rank 0, prints the tables, writes JSON. */
#define _POSIX_C_SOURCE 200809L
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "comm.h"
#include "outputs.h"
#include "util.h"

enum { C_CALLS, C_S, C_WIRE, C_MS, C_TIMED_S, C_TIMED_CALLS, C_N };

/* Everything one rank contributes, as doubles so one MPI_Gather carries it. */
typedef struct {
    double mem_measured[ZL_MEM_NCAT], mem_formula[ZL_MEM_NCAT];
    double states_measured, states_formula, peak_measured, peak_formula;
    double allocations_in_step;
    double dev_baseline, dev_after_alloc, dev_end, dev_total;
    double comm[ZL_NOPS][ZL_NPURPOSES][ZL_NDTYPES][C_N];
    double comm_formula[ZL_NPURPOSES];
    double wire_measured, wire_formula; /* per step, excluding control */
    double wire_by_purpose[ZL_NPURPOSES]; /* measured, per step (the final gather: once) */
    double ms_per_step, steps, timed_steps;
    double skipped; /* steps this rank skipped on overflow (every rank must agree) */
} rank_summary;

/* TEST ONLY: ZL_TEST_PERTURB_FORMULA=<memory category> adds one byte to that formula, so
 * the tests can show that --check fails when measured and formula disagree. */
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
    s->peak_measured = (double)ms->peak_total;
    s->peak_formula = (double)mf.peak_total;
    s->allocations_in_step = (double)ms->allocations_after_freeze;
    s->dev_baseline = r->device_known ? (double)r->device_baseline : -1;
    s->dev_after_alloc = r->device_known ? (double)r->device_after_alloc : -1;
    s->dev_end = r->device_known ? (double)r->device_end : -1;
    s->dev_total = r->device_known ? (double)r->device_total : -1;
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
    zl_formula_comm(r->part, &r->fc, &cf);
    memcpy(s->comm_formula, cf.bytes, sizeof cf.bytes);
    s->wire_formula = cf.total;
    s->ms_per_step = r->ms_per_step;
    s->skipped = r->n_skipped;
    s->steps = steps;
    s->timed_steps = (double)zl_comm_timed_steps();
}

static const char *const stage_names[4] = {"DDP (stage 0)", "ZeRO-1 P_os (stage 1)", "ZeRO-2 P_os+g (stage 2)",
                                           "ZeRO-3 P_os+g+p (stage 3)"};

static void print_bytes_cell(double v) {
    if (v < 0) printf(" %16s |", "-");
    else printf(" %16.0f |", v);
}

/* Memory table for one rank (or the first of a group of identical ranks). */
static void print_memory(const zl_report *r, const rank_summary *s, const char *who) {
    double paper[5];
    zl_paper_model_states((double)r->part->psi, r->rt->world, r->fc.stage, paper);
    printf("\nmemory per rank, bytes — %s\n", who);
    printf("%-22s | %16s | %16s | %16s | %12s\n", "component", "measured", "formula", "paper", "diff");
    printf("-----------------------+------------------+------------------+------------------+-------------\n");
    for (int c = 0; c < ZL_MEM_NCAT; c++) {
        if (c == ZL_MEM_N_MODEL_STATES) {
            double ps = paper[0] + paper[1] + paper[2] + paper[3] + paper[4];
            printf("%-22s |", "= model_states");
            print_bytes_cell(s->states_measured);
            print_bytes_cell(s->states_formula);
            print_bytes_cell(ps);
            printf(" %12.0f\n", s->states_measured - s->states_formula);
        }
        if (c == ZL_MEM_HOST_STAGING) {
            printf("%-22s |", "= peak_total (device)");
            print_bytes_cell(s->peak_measured);
            print_bytes_cell(s->peak_formula);
            printf(" %16s | %12.0f\n", "", s->peak_measured - s->peak_formula);
        }
        char name[40];
        snprintf(name, sizeof name, "%s%s", zl_mem_cat_name((zl_mem_cat)c),
                 zl_mem_cat_is_host((zl_mem_cat)c) ? " (host)" : "");
        printf("%-22s |", name);
        print_bytes_cell(s->mem_measured[c]);
        print_bytes_cell(s->mem_formula[c]);
        if (c < ZL_MEM_N_MODEL_STATES) print_bytes_cell(paper[c]);
        else printf(" %16s |", "");
        printf(" %12.0f\n", s->mem_measured[c] - s->mem_formula[c]);
    }
    double pad = (double)(r->part->psi_pad - r->part->psi);
    printf("padding: Psi_pad - Psi = %.0f elements; formula - paper on model states is that padding\n", pad);
    if (s->dev_baseline >= 0) {
        printf("%-22s | %16.0f |  cudaMemGetInfo after CUDA+NCCL init, before any buffer\n", "device baseline",
               s->dev_baseline);
        printf("%-22s | %16.0f |  after all buffers (tracked %.0f)\n", "device used (alloc)",
               s->dev_after_alloc, s->peak_measured);
        printf("%-22s | %16.0f |  at the end of training\n", "device used (end)", s->dev_end);
        printf("%-22s | %16.0f |  used - baseline - tracked (allocation granularity, cuBLASLt/NCCL lazy buffers)\n",
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
    for (int p = 0; p < ZL_NPURPOSES; p++)
        for (int o = 0; o < ZL_NOPS; o++)
            for (int t = 0; t < ZL_NDTYPES; t++) {
                if (s->comm[o][p][t][C_CALLS] == 0) continue;
                collective_row row = collective_of(s, o, p, t, N);
                printf("%-15s | %-18s | %-5s | %6.0f | %14.0f | %16.0f | %16.0f | %9.3f | %9.2f\n",
                       zl_op_name((zl_op)o), zl_purpose_name((zl_purpose)p), zl_dtype_name((zl_dtype)t),
                       row.calls_per_step, row.bytes_per_call, row.wire_per_step, s->comm_formula[p], row.ms_per_step,
                       row.busbw);
            }
    double paper = zl_paper_wire_bytes((double)r->part->psi, N, r->fc.stage);
    printf("total (grads + params, control excluded): measured %.0f, formula %.0f, paper %.0f bytes/step per rank\n",
           s->wire_measured, s->wire_formula, paper);
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
    printf("%-22s | %16.0f | %16.0f | %16.0f | %16.0f | %12.0f\n", name, lo, hi, flo, fhi, worst);
}

/* N > 8: min and max over ranks of each line, and the largest |measured - formula|. */
static void print_minmax(const rank_summary *all, int n) {
    printf("\nmemory per rank, bytes — min / max over %d ranks\n", n);
    printf("%-22s | %16s | %16s | %16s | %16s | %12s\n", "component", "measured min", "measured max", "formula min",
           "formula max", "max |diff|");
    printf("-----------------------+------------------+------------------+------------------+------------------+-------------\n");
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

static void compare(check_result *c, int rank, const char *kind, const char *name, double measured, double formula) {
    c->compared++;
    /* Memory is integral bytes (exact); wire bytes are sums of (N-1)/N·S terms in doubles. */
    if (fabs(measured - formula) <= 1e-9 * fabs(formula)) return;
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

static void print_check(const check_result *c, int enforced) {
    if (c->ok) {
        printf("check: ok — %d measured numbers equal their formulas%s\n", c->compared,
               enforced ? "" : " (--check makes a mismatch exit 4)");
        return;
    }
    printf("check: MISMATCH — %d number(s) differ from their formulas; first: %s\n", c->n, c->what[0]);
    for (int i = 1; i < c->n; i++) printf("check:   %s\n", c->what[i]);
}

/* ---- JSON ---------------------------------------------------------------------- */

static void json_mem_object(FILE *f, const double *cat, double states, double peak) {
    fprintf(f, "{");
    for (int c = 0; c < ZL_MEM_NCAT; c++) fprintf(f, "\"%s\": %.0f, ", zl_mem_cat_name((zl_mem_cat)c), cat[c]);
    fprintf(f, "\"model_states\": %.0f, \"peak_total\": %.0f}", states, peak);
}

static void json_rank(FILE *f, const zl_report *r, const rank_summary *s, int rank) {
    int N = r->rt->world;
    double paper[5];
    double paper_states = zl_paper_model_states((double)r->part->psi, N, r->fc.stage, paper);
    fprintf(f, "    {\"rank\": %d,\n     \"memory\": {\"measured\": ", rank);
    json_mem_object(f, s->mem_measured, s->states_measured, s->peak_measured);
    fprintf(f, ",\n       \"formula\": ");
    json_mem_object(f, s->mem_formula, s->states_formula, s->peak_formula);
    fprintf(f, ",\n       \"paper\": {\"params_fp16\": %.17g, \"grads_fp16\": %.17g, \"master_fp32\": %.17g, "
               "\"adam_m\": %.17g, \"adam_v\": %.17g, \"model_states\": %.17g}",
            paper[0], paper[1], paper[2], paper[3], paper[4], paper_states);
    if (s->dev_baseline >= 0)
        fprintf(f, ",\n       \"device_baseline\": %.0f, \"device_used\": %.0f, \"device_used_after_alloc\": %.0f, "
                   "\"device_total\": %.0f",
                s->dev_baseline, s->dev_end, s->dev_after_alloc, s->dev_total);
    fprintf(f, ",\n       \"allocations_in_step\": %.0f},\n", s->allocations_in_step);
    fprintf(f, "     \"comm\": {\"measured\": {\"wire_bytes_per_step\": %.17g, \"by_purpose\": {", s->wire_measured);
    int first = 1;
    for (int p = 0; p < ZL_NPURPOSES; p++) {
        double w = 0, steps = steps_of(s, p);
        for (int o = 0; o < ZL_NOPS; o++)
            for (int t = 0; t < ZL_NDTYPES; t++) w += s->comm[o][p][t][C_WIRE];
        fprintf(f, "%s\"%s\": %.17g", first ? "" : ", ", zl_purpose_name((zl_purpose)p), per_step(w, steps));
        first = 0;
    }
    fprintf(f, "}},\n       \"formula\": {\"wire_bytes_per_step\": %.17g, \"by_purpose\": {", s->wire_formula);
    for (int p = 0; p < ZL_NPURPOSES; p++)
        fprintf(f, "%s\"%s\": %.17g", p ? ", " : "", zl_purpose_name((zl_purpose)p), s->comm_formula[p]);
    fprintf(f, "}},\n       \"paper\": {\"wire_bytes_per_step\": %.17g},\n       \"collectives\": [",
            zl_paper_wire_bytes((double)r->part->psi, N, r->fc.stage));
    first = 1;
    for (int p = 0; p < ZL_NPURPOSES; p++)
        for (int o = 0; o < ZL_NOPS; o++)
            for (int t = 0; t < ZL_NDTYPES; t++) {
                if (s->comm[o][p][t][C_CALLS] == 0) continue;
                collective_row row = collective_of(s, o, p, t, N);
                fprintf(f,
                        "%s\n        {\"op\": \"%s\", \"purpose\": \"%s\", \"dtype\": \"%s\", \"calls_per_step\": "
                        "%.17g, \"bytes_per_call\": %.17g, \"wire_bytes_per_step\": %.17g, \"ms_per_step\": %.17g, "
                        "\"algbw_GBps\": %.17g, \"busbw_GBps\": %.17g}",
                        first ? "" : ",", zl_op_name((zl_op)o), zl_purpose_name((zl_purpose)p),
                        zl_dtype_name((zl_dtype)t), row.calls_per_step, row.bytes_per_call, row.wire_per_step,
                        row.ms_per_step, row.algbw, row.busbw);
                first = 0;
            }
    fprintf(f, "]},\n     \"skipped_steps\": %.0f,\n     \"ms_per_step\": %.17g}", s->skipped, s->ms_per_step);
}

static void write_json(const zl_report *r, const rank_summary *all, const check_result *chk, double ms,
                       double samples_s, double tflops) {
    const zl_config *c = &r->rt->cfg;
    FILE *f = zl_output_begin(ZL_OUT_JSON); /* opened at start-up (outputs.h) */
    if (!f) return;
    char when[32] = "unknown";
    time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    fprintf(f, "{\n  \"stage\": %d,\n  \"world\": %d,\n  \"backend\": \"%s\",\n  \"device\": \"%s\",\n",
            c->stage, r->rt->world, zl_backend_name(), zl_backend_device_name());
    fprintf(f, "  \"date\": \"%s\",\n", when);
    if (r->variant) fprintf(f, "  \"variant\": \"%s\",\n", r->variant);
    fprintf(f, "  \"params\": %zu,\n  \"params_padded\": %zu,\n  \"units\": %d,\n", r->part->psi, r->part->psi_pad,
            r->part->n_units);
    fprintf(f,
            "  \"config\": {\"preset\": \"%s\", \"layers\": %d, \"dim\": %d, \"batch\": %d, \"seed\": %llu, "
            "\"loss_scale\": %.9g, \"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, "
            "\"weight_decay\": %.9g, \"prefetch\": %d, \"accum\": %d, \"checkpoint_activations\": %s},\n",
            c->preset, c->layers, c->dim, c->batch, (unsigned long long)c->seed, c->loss_scale, c->lr, c->beta1,
            c->beta2, c->eps, c->weight_decay, c->stage == 3 ? c->prefetch : 0, c->accum,
            c->checkpoint_activations ? "true" : "false");
    fprintf(f, "  \"steps\": %d,\n  \"loss\": [", r->steps);
    for (int i = 0; i < r->steps; i++) { /* JSON has no NaN or inf: a diverged loss is null */
        if (isfinite(r->losses[i])) fprintf(f, "%s%.9g", i ? ", " : "", r->losses[i]);
        else fprintf(f, "%snull", i ? ", " : "");
    }
    fprintf(f, "],\n  \"ms_per_step\": %.17g,\n  \"samples_per_s\": %.17g,\n  \"tflops_per_gpu\": %.17g,\n", ms,
            samples_s, tflops);
    fprintf(f, "  \"param_hash\": \"%016llx\",\n", (unsigned long long)r->param_hash);
    if (r->dtype) {
        fprintf(f, "  \"dtype\": \"%s\",\n  \"status\": \"%s\",\n  \"steps_done\": %d,\n", r->dtype, r->status,
                r->steps_done);
        fprintf(f, "  \"loss_scale_mode\": \"%s\",\n  \"clip_grad_norm\": %.9g,\n", c->loss_scale_dynamic ? "dynamic" : "static",
                c->clip_grad_norm);
        const float *arrays[2] = {r->loss_scale, r->grad_norm};
        const char *names[2] = {"loss_scale", "grad_norm"};
        for (int a = 0; a < 2; a++) {
            fprintf(f, "  \"%s\": [", names[a]);
            for (int i = 0; i < r->steps_done; i++) {
                if (isfinite(arrays[a][i])) fprintf(f, "%s%.9g", i ? ", " : "", arrays[a][i]);
                else fprintf(f, "%snull", i ? ", " : "");
            }
            fprintf(f, "],\n");
        }
        fprintf(f, "  \"skipped_steps\": [");
        for (int i = 0; i < r->n_skipped; i++) fprintf(f, "%s%d", i ? ", " : "", r->skipped_steps[i]);
        fprintf(f, "],\n");
    }
    fprintf(f, "  \"check\": {\"ok\": %s, \"enforced\": %s, \"compared\": %d, \"mismatches\": [", chk->ok ? "true" : "false",
            c->check ? "true" : "false", chk->compared);
    for (int i = 0; i < chk->n; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", chk->what[i]);
    fprintf(f, "]},\n  \"ranks\": [\n");
    for (int i = 0; i < r->rt->world; i++) {
        json_rank(f, r, &all[i], i);
        fprintf(f, "%s\n", i + 1 < r->rt->world ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fflush(f)) zl_output_failed(ZL_OUT_JSON, errno); /* reported by zl_outputs_close, after the report */
}

void zl_report_step(const zl_runtime *rt, int step, int steps, float loss, float scale, float norm, int skipped,
                    double ms) {
    if (rt->rank || rt->cfg.quiet) return;
    printf("step %4d/%d | loss %.6f | scale %8g | grad norm %10.4g | %9.3f ms%s\n", step, steps, loss, scale, norm, ms,
           skipped ? " | skipped (overflow)" : "");
    zl_stdout_flush();
}

static int print_and_write(const zl_report *r);
int zl_report_final(const zl_report *r) {
    int status = print_and_write(r);
    status = zl_outputs_close() ? ZL_EXIT_RUNTIME : status; /* a lost result outranks a mismatch */
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return status;
}

/* Rank 0 prints and writes; returns ZL_EXIT_CHECK on a --check mismatch, else 0. */
static int print_and_write(const zl_report *r) {
    rank_summary mine, *all = NULL;
    summarize(r, &mine);
    int n_doubles = (int)(sizeof mine / sizeof(double));
    if (r->rt->rank == 0) {
        all = malloc((size_t)r->rt->world * sizeof *all);
        if (!all) zl_fatal("out of host memory for the report");
    }
    mpiCheck(MPI_Gather(&mine, n_doubles, MPI_DOUBLE, all, n_doubles, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (r->rt->rank) return 0;
    check_result chk = check_all(all, r->rt->world);

    int N = r->rt->world;
    const zl_config *c = &r->rt->cfg;
    double ms = all[0].ms_per_step;
    double rows = (double)c->batch * c->accum; /* per rank per step: K micro-batches of B */
    double samples_s = ms > 0 ? (double)N * rows / (ms * 1e-3) : 0;
    double tflops = ms > 0 ? 6.0 * (double)r->part->psi * rows / (ms * 1e-3) / 1e12 : 0;

    printf("\n== %s | backend %s (%s) | N = %d | Psi = %zu | Psi_pad = %zu | %d units ==\n", stage_names[c->stage],
           zl_backend_name(), zl_backend_device_name(), N, r->part->psi, r->part->psi_pad, r->part->n_units);
    if (r->variant) printf("variant: %s\n", r->variant);
    if (c->accum > 1 || c->checkpoint_activations)
        printf("%d micro-batch%s of %d rows per rank per step%s\n", c->accum, c->accum > 1 ? "es" : "", c->batch,
               c->checkpoint_activations ? "; activations checkpointed (each block's input kept, recomputed)" : "");
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
    printf("\nfinal loss %.6f (first %.6f) | %.3f ms/step | %.1f samples/s | %.4g TFLOP/s per %s (6*Psi*rows/step) "
           "| param_hash %016llx\n",
           r->losses[r->steps - 1], r->losses[0], ms, samples_s, tflops, zl_backend_name()[1] == 'u' ? "GPU" : "rank",
           (unsigned long long)r->param_hash);
    /* One machine-readable line for scripts (make demo's comparison table). */
    double paper_states = zl_paper_model_states((double)r->part->psi, N, c->stage, NULL);
    printf("summary: stage=%d world=%d states_measured=%.0f states_formula=%.0f states_paper=%.0f peak=%.0f "
           "wire=%.0f ms=%.3f tflops=%.4g loss=%.6f hash=%016llx\n",
           c->stage, N, all[0].states_measured, all[0].states_formula, paper_states, all[0].peak_measured,
           all[0].wire_measured, ms, tflops, r->losses[r->steps - 1], (unsigned long long)r->param_hash);
    print_check(&chk, c->check);
    zl_stdout_flush();
    write_json(r, all, &chk, ms, samples_s, tflops);
    free(all);
    if (r->status && !strcmp(r->status, "diverged")) return ZL_EXIT_DIVERGED;
    return c->check && !chk.ok ? ZL_EXIT_CHECK : ZL_EXIT_OK;
}
