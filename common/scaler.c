/* scaler.c — the loss scaler's state machine (the protocol is described in scaler.h). */
#include "scaler.h"

#include <math.h>

int zl_scaler_init(zl_loss_scaler *sc, int dynamic, float init_scale, int window) {
    if (!isfinite(init_scale) || init_scale <= 0.0f) return -1;
    if (dynamic && (init_scale < 1.0f || init_scale > ZL_SCALER_MAX || window < 1)) return -1;
    sc->dynamic = dynamic ? 1 : 0;
    sc->scale = init_scale;
    sc->window = dynamic ? window : 0;
    sc->clean_steps = 0;
    sc->skipped = 0;
    return 0;
}

/* A clean step: count it, and double the scale once a full window of them has passed. */
static zl_step_verdict clean_step(zl_loss_scaler *sc) {
    if (!sc->dynamic) return ZL_STEP_APPLY;
    if (++sc->clean_steps == sc->window) {
        sc->clean_steps = 0;
        sc->scale = 2.0f * sc->scale > ZL_SCALER_MAX ? ZL_SCALER_MAX : 2.0f * sc->scale;
    }
    return ZL_STEP_APPLY;
}

/* An overflow: halve (dynamic) and skip, or report divergence. */
static zl_step_verdict overflow_step(zl_loss_scaler *sc) {
    if (!sc->dynamic) return ZL_STEP_DIVERGED;
    sc->clean_steps = 0;
    sc->scale *= 0.5f;
    if (sc->scale < 1.0f) return ZL_STEP_DIVERGED;
    sc->skipped++;
    return ZL_STEP_SKIP;
}

zl_step_verdict zl_scaler_update(zl_loss_scaler *sc, int overflow) {
    return overflow ? overflow_step(sc) : clean_step(sc);
}

const char *zl_step_verdict_name(zl_step_verdict v) {
    switch (v) {
    case ZL_STEP_APPLY: return "apply";
    case ZL_STEP_SKIP: return "skip";
    case ZL_STEP_DIVERGED: return "diverged";
    }
    return "?";
}
