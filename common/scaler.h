/* scaler.h — the loss scaler: the state machine that decides, once per step, whether the
 * update is applied, skipped, or whether training has diverged.
 *
 * Why a loss scale: fp16 gradients of a small loss underflow to zero, so backward starts
 * from loss_scale·loss and the optimizer divides the scale out again (grad_mult in
 * kernels.h). Too large a scale overflows fp16 instead (max 65504): the gradient holds
 * inf/NaN. The protocol ("Mixed Precision and ZeRO: Training Large Models Without Running
 * Out of Memory"), dynamic scaling:
 *   overflow            -> skip the step entirely, halve the scale, restart the window
 *   `window` clean steps -> double the scale (up to ZL_SCALER_MAX), restart the window
 *   scale below 1       -> diverged: a scale < 1 shrinks gradients, it cannot cure an
 *                          overflow that is not caused by the scale
 * A static scale never changes; an overflow under it is divergence (nothing would change
 * on the next step, so skipping would only hide the failure).
 *
 * The caller passes the overflow flag the ranks already agreed on (under ZeRO no rank
 * holds the whole gradient, so the flag is all-reduced first); every rank then runs the
 * same update on the same input and the scalers stay identical without further traffic.
 *
 *   zl_loss_scaler sc;
 *   if (zl_scaler_init(&sc, 1, 65536.0f, 1000)) -> bad arguments (exit 2)
 *   each step:  float scale = sc.scale;          backward from scale·loss
 *               overflow = (agreed count of non-finite gradient values) > 0
 *               switch (zl_scaler_update(&sc, overflow)) {
 *               case ZL_STEP_APPLY: optimizer step with grad_mult = 1/(scale·N)
 *               case ZL_STEP_SKIP: nothing changes (params, master, m, v, Adam's t)
 *               case ZL_STEP_DIVERGED: stop, exit 3 }
 * Note grad_mult must use the scale the gradients were computed with (read sc.scale
 * before the update), since an update may double it. */
#ifndef ZL_SCALER_H
#define ZL_SCALER_H

/* 2^24, the largest scale a dynamic scaler reaches (Apex's default max_loss_scale). Without
 * a cap a run whose gradients never overflow (all-zero gradients, or bf16 with a dynamic
 * scale) doubles forever and reaches float inf after 128 windows — then scale·loss is inf
 * and the scaler itself causes the NaN it exists to prevent. At 2^24 any fp16 gradient of
 * magnitude ≥ 2^-8 already overflows (2^-8·2^24 = 2^16 > 65504), so larger scales would
 * only buy skipped steps. */
#define ZL_SCALER_MAX 16777216.0f

typedef enum {
    ZL_STEP_APPLY = 0,   /* no overflow: run the optimizer */
    ZL_STEP_SKIP = 1,    /* overflow under a dynamic scale: skip the step, the scale was halved */
    ZL_STEP_DIVERGED = 2 /* overflow under a static scale, or a dynamic scale halved below 1 */
} zl_step_verdict;

typedef struct {
    int dynamic;     /* 1: halve on overflow, double after `window` clean steps; 0: static */
    float scale;     /* the loss scale for the next step; > 0 */
    int window;      /* clean steps before the scale doubles (dynamic only); >= 1 */
    int clean_steps; /* consecutive clean steps since the last overflow or doubling, < window */
    long skipped;    /* steps skipped so far (verdict ZL_STEP_SKIP) */
} zl_loss_scaler;

/* Returns 0, or -1 (scaler untouched) when init_scale is not a finite value in
 * [1, ZL_SCALER_MAX] for a dynamic scaler (> 0 for a static one) or when a dynamic
 * scaler's window is < 1. A static scaler ignores window. */
int zl_scaler_init(zl_loss_scaler *sc, int dynamic, float init_scale, int window);

/* One step's verdict from the agreed overflow flag (0 or nonzero), and the state update
 * described above. After ZL_STEP_DIVERGED the scale holds the value that fell below 1
 * (dynamic) or the unchanged static scale. */
zl_step_verdict zl_scaler_update(zl_loss_scaler *sc, int overflow);

const char *zl_step_verdict_name(zl_step_verdict v); /* "apply", "skip", "diverged" */

#endif
