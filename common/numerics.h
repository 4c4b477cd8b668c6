/* numerics.h — mixed precision that survives: what a stage file needs around the
 * optimizer step (the mechanics; the decisions stay in the stage files).
 *
 * Per step, each rank measures the gradient it owns with one fused pass (zl_grad_stats:
 * Σg² and the number of non-finite values, into a device pair of doubles). From ZeRO-1 on
 * no rank owns the whole gradient, so the stage file all-reduces that pair (16 bytes,
 * purpose control) before anyone decides; DDP's ranks all hold the same all-reduced
 * gradient and decide alone. zl_numerics_decide() then reads the agreed pair, computes the
 * global norm of the unscaled gradient, the clipping factor and the scaler's verdict:
 *   apply    -> run the optimizer with grad_mult (unscale, mean over N, clip) at adam_step
 *   skip     -> nothing changes: params, master, m, v and Adam's step counter
 *   diverged -> stop training (exit 3)
 * Every rank runs the same arithmetic on the same agreed numbers, so they agree without
 * more traffic. It also keeps the per-step record (scale, norm, skipped steps) for the
 * report, and the fault injection of --inject-overflow (a test and lab tool). */
#ifndef ZL_NUMERICS_H
#define ZL_NUMERICS_H

#include "runtime.h"
#include "scaler.h"
#include "../kernels/kernels.h" /* zl_adam_hparams, zl_half, streams */

typedef struct {
    zl_loss_scaler scaler;
    float clip;       /* --clip-grad-norm, 0 = off */
    int world, rank;
    int adam_step;    /* Adam's t: steps applied so far (a skipped step does not count) */
    float grad_mult;  /* for this step's optimizer: clip/(norm) · 1/(scale·N), or 1/(scale·N) */
    zl_adam_hparams hp; /* --lr, --beta1, --beta2, --eps, --weight-decay */
    float step_scale; /* the scale this step's backward ran with */
    int consensus;    /* 1; 0 only under the test-only ZL_TEST_NO_OVERFLOW_CONSENSUS=1 */
    int diverged;     /* the last verdict was ZL_STEP_DIVERGED: training stops */
    int step;         /* the step under way */
    const zl_config *cfg;
    /* per-step record, [steps]: */
    float *scales, *norms;
    int *skipped;
    int n_skipped, steps_done;
    char diverged_why[256];
} zl_numerics;

/* Host bookkeeping for `steps` steps (before step 1). */
void zl_numerics_init(zl_numerics *n, const zl_runtime *rt);
void zl_numerics_free(zl_numerics *n);

/* Adam over n elements of one unit's (slice of) model states on stream s, with the step's
 * grad_mult and Adam's step count: a span on the timeline's optimizer phase. */
void zl_numerics_adam(const zl_numerics *n, int unit, float *master, float *m, float *v, zl_half *params,
                      const zl_half *grads, size_t len, zl_stream s);

/* --resume: continue from a checkpoint's Adam step count and loss-scaler state. */
void zl_numerics_resume(zl_numerics *n, int adam_step, const zl_loss_scaler *scaler);

/* A step begins: returns the loss scale for its backward (fixed until zl_numerics_decide). */
float zl_numerics_step_begin(zl_numerics *n, int step);

/* 1 when a step's update is known before its verdict: a static loss scale (fp16 with
 * --loss-scale K; bf16) never skips a step, and without --clip-grad-norm nothing rescales the
 * gradient, so the verdict can only be "apply" or "diverged" (training stops). Then
 * zl_numerics_step_begin has set grad_mult to what the verdict will set, and the update runs
 * at Adam step adam_step + 1 (the verdict counts it later). Stages 2 and 3 may then start
 * host Adam (--offload) without waiting for the verdict. */
int zl_numerics_update_known(const zl_numerics *n);
/* After training: NULL, or why the final parameters are no completed step's — the run diverged
 * and `early` (the update known before the verdict, --offload) had already applied that step. */
const char *zl_numerics_final_params_lost(const zl_numerics *n, int early);

/* --inject-overflow: 1 if this rank (N-1) writes +inf into a gradient in this step. */
int zl_numerics_inject_now(const zl_numerics *n);
/* Write +inf (in the run's dtype) into one gradient element, on stream s. */
void zl_inject_inf(zl_half *grad, zl_stream s);

/* Read the agreed statistics (device double[2]) once stream s has them, record the step
 * with its agreed mean loss, return the verdict. */
zl_step_verdict zl_numerics_decide(zl_numerics *n, int step, const double *dev_stats, float loss, zl_stream s);

/* Hand the record to the report (dtype, status, per-step scale/norm, skipped steps; the
 * formulas learn how many steps skipped their update); rank 0 prints the divergence line. */
struct zl_report;
void zl_numerics_report(const zl_numerics *n, struct zl_report *r);

#endif
