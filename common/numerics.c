/* numerics.c — gradient statistics to verdicts, the per-step record, fault injection. */
#include "numerics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "trace.h"
#include "util.h"
#include "../kernels/kernels.h"

void zl_numerics_init(zl_numerics *n, const zl_runtime *rt) {
    const zl_config *c = &rt->cfg;
    memset(n, 0, sizeof *n);
    n->cfg = c;
    n->world = rt->world, n->rank = rt->rank;
    n->clip = c->clip_grad_norm;
    n->hp = (zl_adam_hparams){c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    /* TEST ONLY: lets the tests show that without the agreement the ranks drift apart. */
    const char *off = getenv("ZL_TEST_NO_OVERFLOW_CONSENSUS");
    n->consensus = !(off && !strcmp(off, "1"));
    if (zl_scaler_init(&n->scaler, c->loss_scale_dynamic, c->loss_scale, c->loss_scale_window))
        zl_fatal("loss scaler: bad settings (scale %g, window %d)", c->loss_scale, c->loss_scale_window);
    n->scales = zl_host_calloc((size_t)c->steps, sizeof(float));
    n->norms = zl_host_calloc((size_t)c->steps, sizeof(float));
    n->skipped = zl_host_calloc((size_t)c->steps, sizeof(int));
}

void zl_numerics_adam(const zl_numerics *n, int unit, float *master, float *m, float *v, zl_half *params,
                      const zl_half *grads, size_t len, zl_stream s) {
    zl_trace_begin(ZL_PHASE_OPTIMIZER, unit, s);
    zl_adam_update(master, m, v, params, grads, len, n->grad_mult, n->adam_step, n->hp, s);
    zl_trace_end(ZL_PHASE_OPTIMIZER, unit, s);
}

void zl_numerics_free(zl_numerics *n) {
    free(n->scales), free(n->norms), free(n->skipped);
    n->scales = n->norms = NULL, n->skipped = NULL;
}

void zl_numerics_resume(zl_numerics *n, int adam_step, const zl_loss_scaler *scaler) {
    n->adam_step = adam_step;
    n->scaler = *scaler;
}

/* unscale the sum over N ranks' gradients to the mean gradient, as this step's scale says */
static float unscale_of(const zl_numerics *n) { return 1.0f / (n->step_scale * (float)n->world); }

int zl_numerics_update_known(const zl_numerics *n) { return !n->scaler.dynamic && !(n->clip > 0); }

const char *zl_numerics_final_params_lost(const zl_numerics *n, int early) {
    return n->diverged && early ? "the diverged step's update had run beside the backward (host Adam, --offload), so "
                                  "the parameters are no completed step's: none hashed, none dumped"
                                : NULL;
}

float zl_numerics_step_begin(zl_numerics *n, int step) {
    n->step = step;
    n->step_scale = n->scaler.scale;
    if (zl_numerics_update_known(n)) n->grad_mult = unscale_of(n); /* what the verdict will set */
    return n->step_scale;
}

int zl_numerics_inject_now(const zl_numerics *n) {
    if (n->rank != n->world - 1) return 0;
    for (int i = 0; i < n->cfg->n_inject; i++)
        if (n->cfg->inject_steps[i] == n->step) return 1;
    return 0;
}

void zl_inject_inf(zl_half *grad, zl_stream s) {
    zl_half inf = zl_storage_from_float(INFINITY);
    zl_memcpy_h2d(grad, &inf, sizeof inf, s);
}

zl_step_verdict zl_numerics_decide(zl_numerics *n, int step, const double *dev_stats, float loss, zl_stream s) {
    double st[2];
    zl_memcpy_d2h(st, dev_stats, sizeof st, s);
    if (zl_is_ending()) zl_wait_for_the_end(); /* numbers read after a watchdog abort mean nothing */
    float unscale = unscale_of(n); /* sum over ranks -> mean, and unscale */
    int overflow = st[1] > 0;
    double norm = overflow ? NAN : sqrt(st[0]) * (double)unscale;
    n->grad_mult = unscale;
    if (n->clip > 0 && norm > n->clip) n->grad_mult = (float)((double)unscale * (n->clip / norm));
    zl_step_verdict v = zl_scaler_update(&n->scaler, overflow);
    /* A non-finite loss is divergence whatever the gradients did: the loss is the forward's,
     * before any scaling, so no loss scale can cure it (a dynamic scaler would only skip the
     * step and halve, and a run shorter than the halvings to 1 ended "ok" with a NaN loss). */
    if (v != ZL_STEP_DIVERGED && !isfinite(loss)) v = ZL_STEP_DIVERGED;
    int i = step - 1;
    n->scales[i] = n->step_scale, n->norms[i] = (float)norm;
    n->steps_done = step;
    if (v == ZL_STEP_SKIP) n->skipped[n->n_skipped++] = step;
    if (v == ZL_STEP_APPLY) n->adam_step++;
    n->diverged = v == ZL_STEP_DIVERGED;
    if (v == ZL_STEP_DIVERGED) {
        if (n->scaler.dynamic && overflow && isfinite(loss))
            snprintf(n->diverged_why, sizeof n->diverged_why,
                     "diverged at step %d: the gradient still overflows with the dynamic loss scale below 1 "
                     "(loss = %g); try a smaller --lr",
                     step, loss);
        else
            snprintf(n->diverged_why, sizeof n->diverged_why,
                     "diverged at step %d: loss = %g%s with %s loss scale %g; try %sa smaller --lr", step, loss,
                     overflow ? " and a non-finite gradient" : "", n->scaler.dynamic ? "dynamic" : "static",
                     n->step_scale, n->scaler.dynamic || n->cfg->dtype == ZL_BF16 ? "" : "--loss-scale dynamic or ");
    }
    return v;
}

void zl_numerics_report(const zl_numerics *n, struct zl_report *r) {
    r->dtype = zl_dtype_name(n->cfg->dtype);
    r->status = n->diverged ? "diverged" : "ok";
    r->steps = r->steps_done = n->steps_done;
    r->loss_scale = n->scales, r->grad_norm = n->norms;
    r->skipped_steps = n->skipped, r->n_skipped = n->n_skipped;
    r->fc.steps = n->steps_done, r->fc.skipped_steps = n->n_skipped + n->diverged; /* neither updated */
    r->fc.diverged = n->diverged; /* (but with fc.early_update a diverged step's host Adam ran) */
    if (n->diverged && n->rank == 0) {
        fprintf(stderr, "%s: %s\n", r->rt->prog, n->diverged_why);
        if (n->cfg->save_dir[0]) /* the stage files save no diverged step: its state is no training's */
            fprintf(stderr,
                    "%s: --save %s: nothing saved at the diverged step (the directory keeps its last checkpoint, "
                    "if any)\n", r->rt->prog, n->cfg->save_dir);
        fflush(stderr);
    }
}
