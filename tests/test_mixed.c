/* test_mixed.c — mixed precision that survives, end to end (spawns mpiexec as a child):
 * injected overflows skipped by every rank of every stage, the agreement that makes that
 * possible (and what happens without it), dynamic scaling recovering from a real overflow,
 * the global gradient norm against an independent double-precision reference and across
 * stages, clipping, bf16, and divergence stopping the run with exit 3. */
#include "zl_test_util.h" /* first: it defines _GNU_SOURCE */

#include "kernels/zl_math.h" /* the seed -> data and init functions (bit-exact, shared) */




/* ---- injected overflow ---------------------------------------------------------- */

/* Steps 2 and 4 get a +inf from rank N-1 in a slice rank 0 owns: exactly those steps are
 * skipped, the scale halves at each, and the run ends where it would have without them. */
static void check_injected(int stage, int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    cJSON *j = zl_run_json(0, "-n %d {%s} --steps 6 --inject-overflow 2,4 --check", N, zl_progs[stage]);
    cJSON *skipped = zl_get(j, "skipped_steps");
    cr_expect_eq(cJSON_GetArraySize(skipped), 2, "%s N=%d", zl_progs[stage], N);
    cr_expect_eq(cJSON_GetArrayItem(skipped, 0)->valueint, 2);
    cr_expect_eq(cJSON_GetArrayItem(skipped, 1)->valueint, 4);
    cJSON *scale = zl_get(j, "loss_scale");
    double s1 = cJSON_GetArrayItem(scale, 0)->valuedouble;
    cr_expect_eq(cJSON_GetArrayItem(scale, 1)->valuedouble, s1);     /* step 2 ran at s1 and overflowed */
    cr_expect_eq(cJSON_GetArrayItem(scale, 2)->valuedouble, s1 / 2); /* halved */
    cr_expect_eq(cJSON_GetArrayItem(scale, 4)->valuedouble, s1 / 4);
    cr_expect(cJSON_IsNull(cJSON_GetArrayItem(zl_get(j, "grad_norm"), 1)), "an overflowed step has no norm");
    for (int r = 0; r < N; r++) { /* every rank skipped the same steps */
        cJSON *rk = cJSON_GetArrayItem(zl_get(j, "ranks"), r);
        cr_expect_eq(zl_num(rk, "skipped_steps"), 2, "%s N=%d rank %d", zl_progs[stage], N, r);
    }
    cr_expect_str_eq(zl_get(j, "status")->valuestring, "ok");
    cr_expect(cJSON_IsTrue(zl_get(j, "check.ok")), "traffic with skipped steps still equals its formula");
    cJSON_Delete(j);
}

/* The transformer: the same agreement, the tied embedding's gradient in the checked slices. */
Test(inject, gpt_tiny_every_stage_N2) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    for (int stage = 0; stage < 4; stage++) {
        cJSON *j = zl_run_json(0, "-n 2 {%s} --preset gpt-tiny --steps 3 --loss-scale-init 4096 --inject-overflow 2 --check",
                            zl_progs[stage]);
        cJSON *skipped = zl_get(j, "skipped_steps");
        cr_expect_eq(cJSON_GetArraySize(skipped), 1, "%s", zl_progs[stage]);
        cr_expect_eq(cJSON_GetArrayItem(skipped, 0)->valueint, 2, "%s", zl_progs[stage]);
        cJSON *scale = zl_get(j, "loss_scale");
        cr_expect_eq(cJSON_GetArrayItem(scale, 2)->valuedouble, cJSON_GetArrayItem(scale, 1)->valuedouble / 2);
        for (int r = 0; r < 2; r++)
            cr_expect_eq(zl_num(cJSON_GetArrayItem(zl_get(j, "ranks"), r), "skipped_steps"), 1, "%s rank %d",
                         zl_progs[stage], r);
        cr_expect(cJSON_IsTrue(zl_get(j, "check.ok")), "%s: traffic with a skipped step equals its formula",
                  zl_progs[stage]);
        cJSON_Delete(j);
    }
}

#define INJECT_TESTS(s)                                                                                         \
    Test(inject, stage##s##_N1) { check_injected(s, 1); }                                                      \
    Test(inject, stage##s##_N2) { check_injected(s, 2); }                                                      \
    Test(inject, stage##s##_N3) { check_injected(s, 3); }
INJECT_TESTS(0)
INJECT_TESTS(1)
INJECT_TESTS(2)
INJECT_TESTS(3)

/* A skipped step changes nothing: the parameters after steps 1-2 with step 2 skipped are
 * bitwise those after step 1. */
Test(inject, a_skipped_step_leaves_the_parameters_bitwise_unchanged) {
    for (int stage = 0; stage < 4; stage++) {
        cJSON *a = zl_run_json(0, "-n 2 {%s} --steps 1", zl_progs[stage]);
        cJSON *b = zl_run_json(0, "-n 2 {%s} --steps 2 --inject-overflow 2", zl_progs[stage]);
        cr_expect_str_eq(zl_hash_of(a), zl_hash_of(b), "%s", zl_progs[stage]);
        cJSON_Delete(a), cJSON_Delete(b);
    }
}

Test(inject, all_four_stages_end_equal_at_N2) {
    cJSON *j0 = zl_run_json(0, "-n 2 {stage0_ddp} --steps 6 --inject-overflow 3,4");
    for (int stage = 1; stage < 4; stage++) {
        cJSON *j = zl_run_json(0, "-n 2 {%s} --steps 6 --inject-overflow 3,4", zl_progs[stage]);
        cr_expect_str_eq(zl_hash_of(j), zl_hash_of(j0), "%s vs DDP", zl_progs[stage]);
        cJSON_Delete(j);
    }
    cJSON_Delete(j0);
}

/* Without the agreement (test-only switch) rank 0 skips a step the others apply. ZeRO-3
 * then trains a different model; ZeRO-2 does not even issue the same collectives (rank 0
 * has no update to all-gather) and hangs until the watchdog ends it, or fails in MPI. */
Test(inject, without_the_agreement_the_ranks_drift_apart) {
    if (zl_max_world() < 3) cr_skip_test("ZL_MAX_WORLD < 3");
    cJSON *agreed = zl_run_json(0, "-n 3 {stage3} --steps 4 --inject-overflow 2");
    setenv("ZL_TEST_NO_OVERFLOW_CONSENSUS", "1", 1);
    cJSON *alone = zl_run_json(0, "-n 3 {stage3} --steps 4 --inject-overflow 2");
    cr_expect_str_neq(zl_hash_of(alone), zl_hash_of(agreed), "the test cannot tell agreement from its absence");
    zl_run_result r;
    zl_run(&r, "-n 3 {stage2} --steps 4 --inject-overflow 2 --quiet --timeout 3");
    /* Mismatched collectives are erroneous MPI: MPICH hangs until the watchdog ends it (5); Open
     * MPI's non-blocking collectives may see the mismatch (MPI_ERR_TRUNCATE) and abort. */
    cr_expect(r.exit_code == 5 || (r.exit_code != 0 && strstr(r.err, "MPI")), "stage2 without agreement: exit %d, %s",
              r.exit_code, r.err);
    unsetenv("ZL_TEST_NO_OVERFLOW_CONSENSUS");
    cJSON_Delete(agreed), cJSON_Delete(alone);
}

/* ---- real overflow, divergence ---------------------------------------------------- */

/* D = 1, B = 1, 4 layers at scale 65536 overflows fp16 within a few steps. */
Test(dynamic, a_real_overflow_is_survived_and_the_loss_falls) {
    cJSON *j = zl_run_json(0, "-n 2 {stage2} --dim 1 --batch 1 --layers 4 --steps 40");
    cr_expect(cJSON_GetArraySize(zl_get(j, "skipped_steps")) >= 1, "no overflow happened: the test proves nothing");
    cJSON *loss = zl_get(j, "loss");
    int n = cJSON_GetArraySize(loss);
    cr_expect_eq(n, 40);
    double first = cJSON_GetArrayItem(loss, 0)->valuedouble, last = cJSON_GetArrayItem(loss, n - 1)->valuedouble;
    cr_expect(last < first, "loss %g -> %g", first, last);
    cJSON_Delete(j);
}

static void check_diverged(int N) {
    cJSON *j = zl_run_json(3, "-n %d {stage1} --dim 1 --batch 1 --layers 4 --steps 40 --loss-scale 65536", N);
    cr_expect_str_eq(zl_get(j, "status")->valuestring, "diverged");
    int done = (int)zl_num(j, "steps_done");
    cr_expect(done >= 1 && done < 40, "stopped at step %d", done);
    cr_expect_eq(cJSON_GetArraySize(zl_get(j, "loss")), done, "the completed steps are in the report");
    cJSON_Delete(j);
    zl_run_result r;
    zl_run(&r, "-n %d {stage1} --dim 1 --batch 1 --layers 4 --steps 40 --loss-scale 65536 --quiet", N);
    cr_expect(strstr(r.err, "diverged at step") && strstr(r.err, "static loss scale 65536") &&
                  strstr(r.err, "--loss-scale dynamic"),
              "%s", r.err);
    cr_expect(strstr(r.out, "memory per rank"), "the report is still printed");
}
/* --lr 10 leaves finite parameters after step 1 (about 10 at most) whose fp16 forward overflows:
 * the loss is NaN from step 2 on. The loss comes before any scaling, so a dynamic scale that
 * skips and halves cannot cure it: divergence at once (a 6-step run exited 0, "ok", NaN loss). */
Test(diverged, a_non_finite_loss_is_divergence_under_a_dynamic_scale) {
    cJSON *j = zl_run_json(3, "-n 2 {stage2} --preset tiny --steps 6 --lr 10");
    cr_expect_str_eq(zl_get(j, "status")->valuestring, "diverged");
    int done = (int)zl_num(j, "steps_done");
    cJSON *loss = zl_get(j, "loss");
    cr_expect(done >= 2 && done < 6, "stopped at step %d", done);
    cr_expect(cJSON_IsNumber(cJSON_GetArrayItem(loss, 0)), "step 1's loss is finite");
    cr_expect(cJSON_IsNull(cJSON_GetArrayItem(loss, done - 1)), "the last step's loss is not finite");
    cr_expect_eq(cJSON_GetArraySize(zl_get(j, "skipped_steps")), 0, "no step skipped first");
    cJSON_Delete(j);
}
Test(diverged, exit_3_N1) { check_diverged(1); }
Test(diverged, exit_3_N2) { check_diverged(2); }

/* ---- the gradient norm ------------------------------------------------------------ */

/* Independent reference: the tiny MLP's step-1 gradient in double precision from the same
 * fp16 inputs and initial parameters (zl_math.h), over all N·B rows. */
static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
static int floor_log2(unsigned long v) {
    int r = -1;
    while (v) v >>= 1, r++;
    return r;
}

static double reference_norm(int L, int D, int R, uint64_t seed) {
    size_t n = 8 * (size_t)D * D + 5 * (size_t)D, H = 4 * (size_t)D;
    double *p = calloc(n * L, sizeof *p), *g = calloc(n * L, sizeof *g);
    double *x = calloc((size_t)(L + 1) * R * D, sizeof *x), *h = calloc((size_t)L * R * H, sizeof *h);
    double *dy = calloc((size_t)R * D, sizeof *dy), *dh = calloc((size_t)R * H, sizeof *dh);
    int s1 = (floor_log2((unsigned long)D) + 1) / 2, s2 = (floor_log2(4ul * D) + 1) / 2 + 1;
    for (int u = 0; u < L; u++)
        for (size_t i = 0; i < n; i++) {
            int in_W1 = i < D * H, in_W2 = i >= D * H + H && i < 2 * D * H + H;
            if (in_W1 || in_W2) p[u * n + i] = zl_half_to_float(zl_init_value(seed, u * n + i, in_W1 ? s1 : s2, 0));
        }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < D; c++) x[(size_t)r * D + c] = zl_half_to_float(zl_sample_x(seed, r, c, D, 0));
    for (int u = 0; u < L; u++) { /* forward: h = x W1 + b1, y = x + gelu(h) W2 + b2 */
        const double *W1 = p + u * n, *b1 = W1 + D * H, *W2 = b1 + H, *b2 = W2 + H * D;
        double *xi = x + (size_t)u * R * D, *xo = xi + (size_t)R * D, *hu = h + (size_t)u * R * H;
        for (int r = 0; r < R; r++) {
            for (size_t j = 0; j < H; j++) {
                double a = b1[j];
                for (int c = 0; c < D; c++) a += xi[(size_t)r * D + c] * W1[c * H + j];
                hu[r * H + j] = a;
            }
            for (int c = 0; c < D; c++) {
                double a = xi[(size_t)r * D + c] + b2[c];
                for (size_t j = 0; j < H; j++) a += gelu(hu[r * H + j]) * W2[j * D + c];
                xo[(size_t)r * D + c] = a;
            }
        }
    }
    for (int r = 0; r < R; r++) /* MSE over R·D: dL/dy = 2(y - t)/(R·D) */
        for (int c = 0; c < D; c++)
            dy[(size_t)r * D + c] = 2 * (x[(size_t)L * R * D + (size_t)r * D + c] -
                                         zl_half_to_float(zl_sample_target(seed, r, c, D, 0))) / ((double)R * D);
    for (int u = L - 1; u >= 0; u--) {
        const double *W1 = p + u * n, *W2 = W1 + D * H + H;
        double *gW1 = g + u * n, *gb1 = gW1 + D * H, *gW2 = gb1 + H, *gb2 = gW2 + H * D;
        const double *xi = x + (size_t)u * R * D, *hu = h + (size_t)u * R * H;
        for (int r = 0; r < R; r++)
            for (size_t j = 0; j < H; j++) {
                double da = 0;
                for (int c = 0; c < D; c++) {
                    da += dy[(size_t)r * D + c] * W2[j * D + c];
                    gW2[j * D + c] += gelu(hu[r * H + j]) * dy[(size_t)r * D + c];
                }
                dh[r * H + j] = da * gelu_grad(hu[r * H + j]);
                gb1[j] += dh[r * H + j];
                for (int c = 0; c < D; c++) gW1[c * H + j] += xi[(size_t)r * D + c] * dh[r * H + j];
            }
        for (int r = 0; r < R; r++)
            for (int c = 0; c < D; c++) {
                gb2[c] += dy[(size_t)r * D + c];
                double dx = 0;
                for (size_t j = 0; j < H; j++) dx += dh[r * H + j] * W1[c * H + j];
                dy[(size_t)r * D + c] += dx; /* residual: dL/dx = dL/dy + dh W1ᵀ */
            }
    }
    double sq = 0;
    for (size_t i = 0; i < n * L; i++) sq += g[i] * g[i];
    free(p), free(g), free(x), free(h), free(dy), free(dh);
    return sqrt(sq);
}

/* Compare two runs' per-step norms. same_sums: the two add the ranks' gradients in the same
 * order — ZeRO-1..3 among themselves (the same reduce-scatters), and DDP with them at N <= 2
 * (two terms add alike in either order); at N >= 3 an all-reduce may add in another order than
 * the reduce-scatter (NCCL's ring; MPICH's algorithms on the CPU backend too, at N = 4), and
 * same_sums must then be 0 — a pair that claims it and differs fails. With the same sums and
 * bit-identical models only the norm's own arithmetic can differ: 1e-6 at every step. Else only step 1 —
 * the same parameters, gradients that differ in the last bits (1e-4); an equal param_hash
 * then does not mean equal gradients (16-bit parameters can round Adam's differences away). */
static void expect_same_norms(cJSON *a, cJSON *b, const char *what, int N, int same_sums) {
    int same_model = !strcmp(zl_hash_of(a), zl_hash_of(b)), all_steps = same_model && same_sums;
    for (int s = 0; s < (all_steps ? 5 : 1); s++) {
        double x = cJSON_GetArrayItem(zl_get(a, "grad_norm"), s)->valuedouble;
        double y = cJSON_GetArrayItem(zl_get(b, "grad_norm"), s)->valuedouble;
        double tol = all_steps ? 1e-6 : 1e-4;
        cr_expect(fabs(x - y) <= tol * y, "%s, N=%d step %d: %.9g vs %.9g", what, N, s + 1, x, y);
    }
    cr_expect(same_model || N > 2, "%s: different models at N = %d", what, N);
    cr_expect(same_model || !same_sums, "%s: the same sums, yet different models at N = %d", what, N);
}

/* The step-1 norm of every stage at N = 1..4 against the reference (fp16 rounding: 1e-3;
 * measured within 1e-4), with K micro-batches of B rows a rank (the reference sums over all
 * N·K·B rows of step 1, so a missing or doubled 1/K shows); the stages that add the same sums
 * against each other to 1e-6 at every N — ZeRO-1, -2 and -3 at K = 1 (the same reduce-scatters),
 * ZeRO-2 and -3 at K > 1 (one a micro-batch) — and DDP against ZeRO-1 where its all-reduce
 * sums coincide. Clipping is on. Each rank sums squares over what it owns, in double; ZeRO's
 * ranks all-reduce those sums. */
static void check_norms(int K) {
    int L = 2, D = 16, B = 2;
    for (int N = 1; N <= 4 && N <= zl_max_world(); N++) {
        double ref = reference_norm(L, D, N * K * B, 1234);
        cJSON *j[4];
        for (int stage = 0; stage < 4; stage++) {
            j[stage] = zl_run_json(0, "-n %d {%s} --layers %d --dim %d --batch %d --accum %d --steps 5 "
                                      "--clip-grad-norm 0.05", N, zl_progs[stage], L, D, B, K);
            double n1 = cJSON_GetArrayItem(zl_get(j[stage], "grad_norm"), 0)->valuedouble;
            cr_expect(fabs(n1 - ref) <= 1e-3 * ref, "%s N=%d K=%d: step-1 norm %.6g, reference %.6g (%.2g relative)",
                      zl_progs[stage], N, K, n1, ref, fabs(n1 - ref) / ref);
        }
        if (K == 1) { /* with K > 1 ZeRO-1 reduce-scatters the accumulated gradient, ZeRO-2 each micro-batch's */
            cr_expect_str_eq(zl_hash_of(j[2]), zl_hash_of(j[1]), "ZeRO-2 vs ZeRO-1 at N = %d", N);
            expect_same_norms(j[2], j[1], "ZeRO-2 vs ZeRO-1", N, 1);
        }
        cr_expect_str_eq(zl_hash_of(j[3]), zl_hash_of(j[2]), "ZeRO-3 vs ZeRO-2 at N = %d, K = %d", N, K);
        expect_same_norms(j[3], j[2], "ZeRO-3 vs ZeRO-2", N, 1);
        expect_same_norms(j[1], j[0], "ZeRO-1 vs DDP", N, N <= 2);
        for (int stage = 0; stage < 4; stage++) cJSON_Delete(j[stage]);
    }
}
Test(norm, equals_an_independent_reference_and_agrees_across_stages) { check_norms(1); }
Test(norm, equals_an_independent_reference_and_agrees_across_stages_accum2) { check_norms(2); }

/* Clipping changes the update when the norm exceeds C and only then. */
Test(norm, clipping_acts_only_above_the_threshold) {
    cJSON *plain = zl_run_json(0, "-n 2 {stage1} --steps 3");
    double n1 = cJSON_GetArrayItem(zl_get(plain, "grad_norm"), 0)->valuedouble;
    cJSON *loose = zl_run_json(0, "-n 2 {stage1} --steps 3 --clip-grad-norm %g", 10 * n1);
    cJSON *tight = zl_run_json(0, "-n 2 {stage1} --steps 3 --clip-grad-norm %g", n1 / 10);
    cr_expect_str_eq(zl_hash_of(loose), zl_hash_of(plain), "a threshold above the norm changed the update");
    cr_expect_str_neq(zl_hash_of(tight), zl_hash_of(plain), "a threshold below the norm did not clip");
    cJSON_Delete(plain), cJSON_Delete(loose), cJSON_Delete(tight);
}

/* ---- bf16 ---------------------------------------------------------------------- */

Test(bf16, every_stage_exact_loss_falls_and_stages_agree) {
    cJSON *j0 = NULL;
    for (int stage = 0; stage < 4; stage++) {
        cJSON *j = zl_run_json(0, "-n 2 {%s} --dtype bf16 --steps 20 --check", zl_progs[stage]);
        cr_expect_str_eq(zl_get(j, "dtype")->valuestring, "bf16");
        cr_expect(cJSON_IsTrue(zl_get(j, "check.ok")), "%s bf16: memory and traffic equal their formulas", zl_progs[stage]);
        cr_expect_eq(cJSON_GetArrayItem(zl_get(j, "loss_scale"), 0)->valuedouble, 1, "bf16 defaults to scale 1");
        cJSON *loss = zl_get(j, "loss");
        cr_expect(cJSON_GetArrayItem(loss, 19)->valuedouble < 0.85 * cJSON_GetArrayItem(loss, 0)->valuedouble,
                  "%s bf16: the loss did not fall", zl_progs[stage]);
        if (!j0) {
            j0 = j;
            continue;
        }
        cr_expect_str_eq(zl_hash_of(j), zl_hash_of(j0), "%s bf16 vs DDP", zl_progs[stage]);
        cJSON_Delete(j);
    }
    cJSON *f16 = zl_run_json(0, "-n 2 {stage0_ddp} --steps 20");
    cr_expect_str_neq(zl_hash_of(f16), zl_hash_of(j0), "bf16 and fp16 trained bit-identical models: --dtype did nothing");
    cJSON_Delete(j0), cJSON_Delete(f16);
}
