/* report.h — the end-of-run report: measured vs formula vs paper, per rank.
 *
 * Rank 0 gathers every rank's tracked-allocator peaks, device memory readings and
 * collective logs, prints two tables (memory by component, traffic by collective)
 * plus time per step, and writes the same data as JSON with --json. */
#ifndef ZL_REPORT_H
#define ZL_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "formulas.h"
#include "runtime.h"

typedef struct zl_report {
    const zl_runtime *rt;
    const zl_partition *part;
    zl_formula_config fc;
    const float *losses; /* one global mean loss per step */
    int steps;
    double ms_per_step;  /* this rank's mean over timed steps (all but the first when steps > 1) */
    uint64_t param_hash;
    const char *no_hash_why; /* set when the stage took no param_hash (nor --dump-params) for a reason
                              * of the run, not a flag: why (JSON "param_hash_note") */
    int device_known;    /* 1 when the backend reports device memory (CUDA) */
    size_t device_baseline, device_after_alloc, device_end, device_total;
    const char *variant; /* a word on what ran, e.g. "reduce-scatter" (may be NULL) */

    /* mixed precision (the numerics issue). JSON: "dtype", "status", "loss_scale": [...],
     * "grad_norm": [...], "skipped_steps": [...]; steps_done <= steps when training stopped. */
    const char *dtype;        /* "fp16" or "bf16" */
    const char *status;       /* "ok" or "diverged" */
    int steps_done;           /* steps completed (the arrays' length) */
    const float *loss_scale;  /* [steps_done] scale each step ran with */
    const float *grad_norm;   /* [steps_done] global L2 norm of the unscaled gradient; NaN where not computed */
    const int *skipped_steps; /* [n_skipped] step numbers skipped on overflow */
    int n_skipped;
} zl_report;

/* One progress line (rank 0, unless --quiet): loss, loss scale, gradient norm, skipped. */
void zl_report_step(const zl_runtime *rt, int step, int steps, float loss, float scale, float norm, int skipped,
                    double ms);
/* Collective: every rank must call it. Prints the report (rank 0), writes --json,
 * closes the outputs and returns the exit status every rank agrees on: 1 if an
 * output could not be written, 3 if training diverged, 4 on a --check mismatch, else 0. */
int zl_report_final(const zl_report *r);

/* --check's rule: memory (integral bytes) must be equal; bytes a step, equal within 0.01 byte. */
int zl_check_equal(int integral_bytes, double measured, double formula);

#endif
