/* test_numerics.c — unit tests for the mixed-precision numerics below the stage files:
 * the loss scaler's state machine (common/scaler.c) and the fused gradient statistics
 * (zl_cpu_grad_stats in kernels/cpu/kernels_cpu.c), when an update is known before its
 * verdict (zl_numerics_update_known), and the clipping factor zl_numerics_decide puts in
 * grad_mult (hand-computed values).
 *
 * References are written independently here: the scaler against hand-traced sequences
 * and an integer-exponent model of the protocol; the statistics against a naive double
 * loop over values decoded with GCC's _Float16 (fp16) or by shifting bits (bf16). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/numerics.h"
#include "common/scaler.h"
#include "kernels.h"

/* ==== loss scaler ===================================================================== */

static zl_loss_scaler make_scaler(int dynamic, float scale, int window) {
    zl_loss_scaler sc;
    cr_assert_eq(zl_scaler_init(&sc, dynamic, scale, window), 0, "init(%d, %g, %d) rejected", dynamic,
                 (double)scale, window);
    return sc;
}

Test(scaler, overflow_halves_and_skips) {
    zl_loss_scaler sc = make_scaler(1, 65536.0f, 1000);
    cr_assert_eq(zl_scaler_update(&sc, 1), ZL_STEP_SKIP);
    cr_assert_eq(sc.scale, 32768.0f);
    cr_assert_eq(sc.skipped, 1);
    cr_assert_eq(zl_scaler_update(&sc, 1), ZL_STEP_SKIP);
    cr_assert_eq(sc.scale, 16384.0f);
    cr_assert_eq(sc.skipped, 2);
    cr_assert_eq(zl_scaler_update(&sc, 0), ZL_STEP_APPLY);
    cr_assert_eq(sc.scale, 16384.0f, "one clean step must not change the scale");
    cr_assert_eq(sc.skipped, 2);
}

Test(scaler, doubles_after_exactly_window_clean_steps) {
    const int W = 5;
    zl_loss_scaler sc = make_scaler(1, 1024.0f, W);
    for (int round = 0; round < 3; round++) {
        float before = sc.scale;
        for (int i = 1; i < W; i++) {
            cr_assert_eq(zl_scaler_update(&sc, 0), ZL_STEP_APPLY);
            cr_assert_eq(sc.scale, before, "round %d: doubled after %d clean steps (window %d)", round, i, W);
        }
        cr_assert_eq(zl_scaler_update(&sc, 0), ZL_STEP_APPLY);
        cr_assert_eq(sc.scale, 2.0f * before, "round %d: not doubled after %d clean steps", round, W);
    }
    cr_assert_eq(sc.skipped, 0);
}

Test(scaler, overflow_restarts_the_window) {
    const int W = 5;
    zl_loss_scaler sc = make_scaler(1, 1024.0f, W);
    for (int i = 0; i < W - 1; i++) zl_scaler_update(&sc, 0); /* one step short of doubling */
    cr_assert_eq(zl_scaler_update(&sc, 1), ZL_STEP_SKIP);
    cr_assert_eq(sc.scale, 512.0f);
    for (int i = 1; i < W; i++) {
        zl_scaler_update(&sc, 0);
        cr_assert_eq(sc.scale, 512.0f, "doubled %d clean steps after an overflow (window %d)", i, W);
    }
    zl_scaler_update(&sc, 0);
    cr_assert_eq(sc.scale, 1024.0f);
}

Test(scaler, window_of_one_doubles_every_clean_step) {
    zl_loss_scaler sc = make_scaler(1, 1.0f, 1);
    for (int i = 1; i <= 10; i++) {
        zl_scaler_update(&sc, 0);
        cr_assert_eq(sc.scale, ldexpf(1.0f, i));
    }
}

Test(scaler, halving_below_one_is_divergence) {
    zl_loss_scaler sc = make_scaler(1, 4.0f, 10);
    cr_assert_eq(zl_scaler_update(&sc, 1), ZL_STEP_SKIP); /* 2 */
    cr_assert_eq(zl_scaler_update(&sc, 1), ZL_STEP_SKIP); /* 1: still a valid scale */
    cr_assert_eq(sc.scale, 1.0f);
    cr_assert_eq(zl_scaler_update(&sc, 1), ZL_STEP_DIVERGED);
    cr_assert(sc.scale < 1.0f);
    cr_assert_eq(sc.skipped, 2, "a diverged step is not counted as skipped");
}

Test(scaler, static_scale_never_changes_and_overflow_diverges) {
    zl_loss_scaler sc = make_scaler(0, 65536.0f, 0);
    for (int i = 0; i < 5000; i++) cr_assert_eq(zl_scaler_update(&sc, 0), ZL_STEP_APPLY);
    cr_assert_eq(sc.scale, 65536.0f);
    cr_assert_eq(zl_scaler_update(&sc, 1), ZL_STEP_DIVERGED);
    cr_assert_eq(sc.scale, 65536.0f);
    cr_assert_eq(sc.skipped, 0);
    /* bf16's default: a static scale of 1 (and static scales need not be powers of two or >= 1) */
    zl_loss_scaler one = make_scaler(0, 1.0f, 0);
    cr_assert_eq(zl_scaler_update(&one, 0), ZL_STEP_APPLY);
    cr_assert_eq(one.scale, 1.0f);
    make_scaler(0, 0.25f, 0);
    make_scaler(0, 1000.0f, 0);
}

Test(scaler, scale_is_capped) {
    zl_loss_scaler sc = make_scaler(1, ZL_SCALER_MAX / 2, 1);
    zl_scaler_update(&sc, 0);
    cr_assert_eq(sc.scale, ZL_SCALER_MAX);
    for (int i = 0; i < 300; i++) zl_scaler_update(&sc, 0); /* uncapped, 2^24 · 2^300 would be inf */
    cr_assert_eq(sc.scale, ZL_SCALER_MAX);
    cr_assert_eq(ZL_SCALER_MAX, 16777216.0f);
}

Test(scaler, bad_arguments_are_rejected) {
    zl_loss_scaler sc;
    memset(&sc, 0x5a, sizeof sc);
    zl_loss_scaler keep = sc;
    cr_assert_eq(zl_scaler_init(&sc, 1, 0.5f, 1000), -1); /* would diverge before step 1 */
    cr_assert_eq(zl_scaler_init(&sc, 1, 65536.0f, 0), -1);
    cr_assert_eq(zl_scaler_init(&sc, 1, 2.0f * ZL_SCALER_MAX, 1000), -1);
    cr_assert_eq(zl_scaler_init(&sc, 1, NAN, 1000), -1);
    cr_assert_eq(zl_scaler_init(&sc, 1, INFINITY, 1000), -1);
    cr_assert_eq(zl_scaler_init(&sc, 0, 0.0f, 0), -1);
    cr_assert_eq(zl_scaler_init(&sc, 0, -1.0f, 0), -1);
    cr_assert_eq(zl_scaler_init(&sc, 0, INFINITY, 0), -1);
    cr_assert(memcmp(&sc, &keep, sizeof sc) == 0, "a rejected init modified the scaler");
    cr_assert_str_eq(zl_step_verdict_name(ZL_STEP_APPLY), "apply");
    cr_assert_str_eq(zl_step_verdict_name(ZL_STEP_SKIP), "skip");
    cr_assert_str_eq(zl_step_verdict_name(ZL_STEP_DIVERGED), "diverged");
}

/* A long random overflow sequence against a model of the protocol kept as an integer
 * exponent (scale = 2^e) and an explicit list of the steps since the last event. */
Test(scaler, random_sequence_matches_integer_exponent_model) {
    const int W = 7;
    zl_loss_scaler sc = make_scaler(1, 256.0f, W);
    int e = 8, since_event = 0;
    long skipped = 0;
    int diverged = 0, capped = 0;
    uint64_t r = 0x1234567ull;
    for (int step = 0; step < 20000; step++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        /* overflow with probability 1/64 for 1000 steps (the scale climbs to the cap), then
         * 1/4 for 1000 (it falls to the floor), and so on */
        int overflow = (step / 1000) % 2 ? (r >> 62) == 0 : (r >> 58) == 0;
        zl_step_verdict v = zl_scaler_update(&sc, overflow);
        zl_step_verdict want;
        if (overflow) {
            e--, since_event = 0;
            want = e < 0 ? ZL_STEP_DIVERGED : ZL_STEP_SKIP;
            skipped += want == ZL_STEP_SKIP;
        } else {
            want = ZL_STEP_APPLY;
            if (++since_event == W) {
                since_event = 0;
                if (e < 24) e++;
                else capped++;
            }
        }
        cr_assert_eq(v, want, "step %d: verdict %s, model %s", step, zl_step_verdict_name(v),
                     zl_step_verdict_name(want));
        cr_assert_eq(sc.scale, ldexpf(1.0f, e), "step %d: scale %g, model 2^%d", step, (double)sc.scale, e);
        cr_assert_eq(sc.skipped, skipped);
        if (want == ZL_STEP_DIVERGED) { /* restart, as a new run would */
            diverged++;
            sc = make_scaler(1, 256.0f, W);
            e = 8, since_event = 0, skipped = 0;
        }
    }
    cr_assert(diverged > 0 && capped > 0, "the sequence never reached the floor (%d) or the cap (%d)", diverged,
              capped);
}

/* ==== gradient statistics ================================================================ */

/* Independent decoders: GCC's _Float16 for fp16, a 16-bit shift for bf16. */
static double decode16(uint16_t v, int bf16) {
    if (bf16) {
        uint32_t u = (uint32_t)v << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    _Float16 h;
    memcpy(&h, &v, 2);
    return (double)h;
}

/* n values: mostly random finite patterns (subnormals included), with every 97th an inf or
 * a NaN when with_nonfinite; returns the number of non-finite values placed. */
static size_t fill_grads(zl_half *g, size_t n, int bf16, int with_nonfinite, uint64_t seed) {
    uint64_t r = seed;
    size_t placed = 0;
    const uint16_t specials[] = {0x7c00, 0xfc00, 0x7e00, 0xfd01}; /* fp16 +inf, -inf, qNaN, sNaN */
    const uint16_t specials_bf[] = {0x7f80, 0xff80, 0x7fc0, 0xff81};
    for (size_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        uint16_t v = (uint16_t)(r >> 48);
        if (with_nonfinite && i % 97 == 5) {
            v = (bf16 ? specials_bf : specials)[(i / 97) % 4];
        } else {
            /* keep it finite: clear the top exponent bit when the pattern is inf/NaN */
            int nonfinite = bf16 ? (v & 0x7f80u) == 0x7f80u : (v & 0x7c00u) == 0x7c00u;
            if (nonfinite) v &= bf16 ? 0xbfffu : 0xbbffu;
            if (i % 13 == 0) v &= bf16 ? 0x807fu : 0x83ffu; /* a subnormal (or zero) */
        }
        placed += !isfinite(decode16(v, bf16));
        g[i] = v;
    }
    return placed;
}

static void naive_stats(const zl_half *g, size_t n, int bf16, double out[2]) {
    out[0] = out[1] = 0;
    for (size_t i = 0; i < n; i++) {
        double v = decode16(g[i], bf16);
        if (isnan(v) || isinf(v))
            out[1] += 1;
        else
            out[0] += v * v;
    }
}

static void check_grad_stats(int bf16) {
    if (bf16) cr_assert_eq(zl_kernels_set_dtype(ZL_BF16), 0);
    const size_t n = 100003;
    zl_half *g = malloc(n * sizeof *g);
    cr_assert(g);
    for (int with_nonfinite = 0; with_nonfinite <= 1; with_nonfinite++) {
        size_t placed = fill_grads(g, n, bf16, with_nonfinite, 42 + (uint64_t)with_nonfinite);
        cr_assert_eq(placed > 0, with_nonfinite, "the fill did (not) place non-finite values");
        double want[2], got[2] = {0, 0};
        naive_stats(g, n, bf16, want);
        zl_cpu_grad_stats(g, n, got);
        cr_assert(isfinite(got[0]), "a non-finite value leaked into the sum");
        cr_assert(want[0] > 0);
        cr_assert(fabs(got[0] - want[0]) <= 1e-12 * want[0], "sum %.17g, naive %.17g", got[0], want[0]);
        cr_assert_eq(got[1], (double)placed, "non-finite count %g, want %zu", got[1], placed);
        /* accumulates: two pieces add up to the whole */
        double parts[2] = {0, 0};
        zl_cpu_grad_stats(g, 12345, parts);
        zl_cpu_grad_stats(g + 12345, n - 12345, parts);
        cr_assert(fabs(parts[0] - want[0]) <= 1e-12 * want[0]);
        cr_assert_eq(parts[1], want[1]);
    }
    free(g);
}

Test(grad_stats, fp16_matches_naive_double_loop) { check_grad_stats(0); }
Test(grad_stats, bf16_matches_naive_double_loop) { check_grad_stats(1); }

/* Hand-computed: squares of exactly known values, one inf and one NaN counted, the largest
 * fp16 (65504² ≈ 4.3e9) does not overflow anything (subnormals: the random tests above). */
Test(grad_stats, hand_computed_values) {
    zl_half g[] = {0x3c00 /* 1 */, 0xc000 /* -2 */, 0x7bff /* 65504 */, 0x0001 /* 2^-24 */, 0x7c00 /* inf */,
                   0x7e00 /* NaN */, 0x8000 /* -0 */};
    double st[2] = {0.5, 1}; /* accumulated into, not overwritten */
    zl_cpu_grad_stats(g, sizeof g / sizeof g[0], st);
    cr_assert_eq(st[0], 0.5 + 1.0 + 4.0 + 65504.0 * 65504.0 + 0x1p-48);
    cr_assert_eq(st[1], 1 + 2);
    cr_assert_eq(zl_kernels_set_dtype(ZL_BF16), 0);
    zl_half b[] = {0x3f80 /* 1 */, 0x4040 /* 3 */, 0x7f7f /* largest bf16 */, 0xff80 /* -inf */};
    double sb[2] = {0, 0};
    zl_cpu_grad_stats(b, 4, sb);
    double big = 0x1.fep+127;
    cr_assert_eq(sb[0], 1.0 + 9.0 + big * big, "the square of bf16's largest value fits a double");
    cr_assert_eq(sb[1], 1);
}

Test(grad_stats, zero_helper_clears_both) {
    double st[2] = {3, 4};
    zl_grad_stats_zero(st, NULL); /* CPU streams are tokens; memset is synchronous */
    cr_assert_eq(st[0], 0.0);
    cr_assert_eq(st[1], 0.0);
    zl_grad_stats(NULL, 0, st, NULL);
    cr_assert_eq(st[0], 0.0);
}

/* ==== the update known before the verdict (common/numerics.c) ========================= */

/* A static scale and no clipping: the verdict can only be apply or diverged, and the grad_mult
 * set when the step begins is, bit for bit, the one the verdict sets; a dynamic scale (a step
 * may be skipped) or clipping (the norm rescales it) leave the update to the verdict. */
static zl_runtime runtime_with(int dynamic, float scale, float clip) {
    zl_runtime rt = {.rank = 0, .world = 3}; /* 1/(s·3) and 1/s/3 differ in the last bit at s = 1000 */
    rt.cfg.steps = 3, rt.cfg.loss_scale_dynamic = dynamic, rt.cfg.loss_scale = scale;
    rt.cfg.loss_scale_window = 1000, rt.cfg.clip_grad_norm = clip, rt.cfg.lr = 1e-3f;
    return rt;
}
Test(numerics, update_known_only_without_skip_or_clip) {
    zl_runtime rt = runtime_with(0, 1000.0f, 0.0f);
    zl_numerics n;
    zl_numerics_init(&n, &rt);
    cr_assert_eq(zl_numerics_update_known(&n), 1);
    cr_expect_eq(zl_numerics_step_begin(&n, 1), 1000.0f);
    float early = n.grad_mult, want = 1.0f / (1000.0f * 3.0f);
    cr_expect_eq(memcmp(&early, &want, sizeof early), 0, "grad_mult set when the step begins: %a", (double)early);
    double stats[2] = {16.0, 0.0}; /* Σg² of the scaled, summed gradient; no non-finite value */
    cr_expect_eq(zl_numerics_decide(&n, 1, stats, 0.5f, NULL), ZL_STEP_APPLY);
    cr_expect_eq(memcmp(&early, &n.grad_mult, sizeof early), 0, "the verdict's grad_mult, bit for bit");
    cr_expect_eq(n.adam_step, 1, "the verdict counts the step: an early update ran at adam_step + 1");
    zl_numerics_step_begin(&n, 2);
    double inf_stats[2] = {16.0, 1.0};
    cr_expect_eq(zl_numerics_decide(&n, 2, inf_stats, 0.5f, NULL), ZL_STEP_DIVERGED, "static: overflow stops");
    zl_numerics_free(&n);

    rt = runtime_with(1, 1024.0f, 0.0f);
    zl_numerics_init(&n, &rt);
    cr_expect_eq(zl_numerics_update_known(&n), 0, "dynamic scale: the verdict may skip the step");
    zl_numerics_free(&n);
    rt = runtime_with(0, 1024.0f, 1.0f);
    zl_numerics_init(&n, &rt);
    cr_expect_eq(zl_numerics_update_known(&n), 0, "clipping: the verdict's norm rescales the update");
    zl_numerics_free(&n);
}

/* ==== the clipping factor (zl_numerics_decide) ======================================== */

/* grad_mult for agreed statistics {Σg², 0} of the scaled gradient summed over the ranks:
 * norm = √Σg² · unscale with unscale = 1/(scale·N); above C the update is scaled by C/norm,
 * so grad_mult = unscale·C/norm; at or below C it is unscale, bit for bit. */
static float grad_mult_for(float scale, float clip, double sum_sq, float *norm) {
    zl_runtime rt = runtime_with(0, scale, clip);
    rt.world = 2;
    zl_numerics n;
    zl_numerics_init(&n, &rt);
    zl_numerics_step_begin(&n, 1);
    double stats[2] = {sum_sq, 0.0};
    cr_assert_eq(zl_numerics_decide(&n, 1, stats, 0.5f, NULL), ZL_STEP_APPLY);
    float mult = n.grad_mult;
    *norm = n.norms[0];
    zl_numerics_free(&n);
    return mult;
}

Test(numerics, clipping_scales_by_threshold_over_norm_above_it_only) {
    /* scale 4, N = 2: unscale = 1/8; Σg² = 256: the norm is 16/8 = 2 (all exact in binary) */
    float norm;
    cr_expect_eq(grad_mult_for(4.0f, 0.5f, 256.0, &norm), 1.0f / 32, "norm 2 > C = 0.5: (1/8)·(0.5/2) = 1/32");
    cr_expect_eq(norm, 2.0f, "the recorded norm is the unscaled one");
    cr_expect_eq(grad_mult_for(4.0f, 1.0f, 256.0, &norm), 1.0f / 16, "norm 2 > C = 1: (1/8)·(1/2) = 1/16");
    cr_expect_eq(grad_mult_for(4.0f, 2.0f, 256.0, &norm), 1.0f / 8, "norm == C: not clipped, 1/8");
    cr_expect_eq(grad_mult_for(4.0f, 3.0f, 256.0, &norm), 1.0f / 8, "norm 2 < C = 3: not clipped, 1/8");
    cr_expect_eq(grad_mult_for(4.0f, 0.0f, 256.0, &norm), 1.0f / 8, "no clipping (C = 0): 1/8");
    /* a scale and norm that are not powers of two: unscale·C/norm = C/√Σg² whatever the scale */
    double sum_sq = 1e6 * 1e6 * 7.0; /* √ = 2645751.31…; scale 1000, N = 2: norm ≈ 1322.9 */
    float clipped = grad_mult_for(1000.0f, 10.0f, sum_sq, &norm);
    double want = 10.0 / sqrt(sum_sq);
    cr_expect(fabs(clipped - want) <= 1e-6 * want, "grad_mult %.9g, C/√Σg² = %.9g", (double)clipped, want);
    cr_expect(fabs(norm - sqrt(sum_sq) / 2000.0) <= 1e-6 * norm, "norm %.9g", (double)norm);
}
