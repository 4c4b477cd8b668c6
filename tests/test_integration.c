/* test_integration.c — the stage programs end to end, launched under mpiexec as child
 * processes: measured memory == formula to the byte for every category and rank,
 * measured wire bytes == formula, the loss falls, N ranks × B rows train the same model
 * as 1 rank × N·B rows, the same command repeats bit for bit, and every bad input exits 2
 * with a one-line message.
 *
 * ZL_BUILD selects build/cpu or build/cuda; ZL_MAX_WORLD (default 4) caps N (2 on a
 * two-GPU machine). */
#include "zl_test_util.h"


static const char *const categories[] = {"params_fp16", "grads_fp16", "master_fp32", "adam_m",
                                         "adam_v", "grad_bucket", "param_gather", "activations",
                                         "scratch", "workspace", "host_staging", "model_states",
                                         "peak_total"};

/* Independent of the program: Ψ, Ψ_pad and Ψ_full (full buffers: every padded unit
 * rounded up to 8 elements, a 16-byte line) for L blocks of width D over N ranks. */
static void expected_sizes(int L, int D, int N, double *psi, double *psi_pad, double *psi_full) {
    double n = 8.0 * D * D + 5.0 * D, n_pad = ceil(n / N) * N;
    *psi = L * n;
    *psi_pad = L * n_pad;
    *psi_full = L * ceil(n_pad / 8) * 8;
}

/* The kernels' workspace for B rows of width D, counted here from the layouts the backends
 * document (kernels/cpu/kernels_cpu.c, kernels/cuda/kernels_cuda.cu), not from the program's
 * formula. CPU: 64 bytes to align the base, then four fp32 panels each rounded up to 64 bytes:
 * P_w 4·D², P_a 4·B·D, P_x and P_y B·D. CUDA: 256 bytes to align, cuBLASLt's 32 MiB, 1024 doubles
 * of loss partials and 2 × 1024 of gradient statistics, and 16 row chunks of column sums of a
 * B × 4D matrix (16·4D floats; nothing grows with B). */
static double expected_workspace(int B, int D) {
    if (zl_build_is_cuda()) return 256 + 32.0 * 1024 * 1024 + 8 * (1024 + 2 * 1024) + 4 * 16 * 4.0 * D;
    double P_w = 4 * 4.0 * D * D, P_a = 4 * 4.0 * B * D, P_xy = 4.0 * B * D;
    return 64 + 64 * (ceil(P_w / 64) + ceil(P_a / 64) + 2 * ceil(P_xy / 64));
}

/* The value of `--flag V` in extra, or def. */
static int extra_int(const char *extra, const char *flag, int def) {
    const char *p = strstr(extra, flag);
    return p ? atoi(p + strlen(flag)) : def;
}

/* Per-step wire bytes in units of (N-1)/N·2Ψ_pad, counted here from the stage and K alone:
 * DDP, ZeRO-1 2 (3 with --grad-sync allreduce); ZeRO-2 K + 1; ZeRO-3 3K. */
static double wire_factor(int stage, int K, const char *extra) {
    if (stage == 3) return 3.0 * K;
    if (stage == 2) return K + 1.0;
    return strstr(extra, "allreduce") ? 3.0 : 2.0;
}

static void check_memory_and_traffic_with(int stage, int N, int L, int D, int B, const char *extra) {
    const char *prog = zl_progs[stage];
    int K = extra_int(extra, "--accum", 1), ckpt = strstr(extra, "--checkpoint-activations") != NULL;
    char json[128];
    snprintf(json, sizeof json, "/tmp/zl_it_%s_%d_%d.json", prog, N, getpid());
    zl_run_result r;
    zl_run(&r, "-n %d {%s} --layers %d --dim %d --batch %d --steps 3 --quiet --json %s%s", N, prog, L, D, B, json,
           extra);
    cr_assert_eq(r.exit_code, 0, "%s N=%d failed (exit %d):\n%s\n%s", prog, N, r.exit_code, r.out, r.err);
    cJSON *j = zl_load_json(json);
    double psi, psi_pad, psi_full;
    expected_sizes(L, D, N, &psi, &psi_pad, &psi_full);
    cr_assert_eq(zl_num(j, "stage"), stage);
    cr_assert_eq(zl_num(j, "world"), N);
    cr_assert_eq(zl_num(j, "params"), psi);
    cr_assert_eq(zl_num(j, "params_padded"), psi_pad);
    cr_assert_eq(zl_num(j, "params_full"), psi_full);
    cr_assert_eq(cJSON_GetArraySize(zl_get(j, "loss")), 3);
    const char *hash = zl_get(j, "param_hash")->valuestring;
    cr_assert(hash && strlen(hash) == 16 && strspn(hash, "0123456789abcdef") == 16, "param_hash '%s'", hash);
    cJSON *ranks = zl_get(j, "ranks");
    cr_assert_eq(cJSON_GetArraySize(ranks), N);
    for (int rank = 0; rank < N; rank++) {
        cJSON *rk = cJSON_GetArrayItem(ranks, rank);
        for (size_t c = 0; c < sizeof categories / sizeof categories[0]; c++) {
            char m[96], f[96];
            snprintf(m, sizeof m, "memory.measured.%s", categories[c]);
            snprintf(f, sizeof f, "memory.formula.%s", categories[c]);
            cr_expect_eq(zl_num(rk, m), zl_num(rk, f), "%s N=%d rank %d %s: measured %.0f formula %.0f", prog, N,
                         rank, categories[c], zl_num(rk, m), zl_num(rk, f));
        }
        /* The formula itself, checked against an independent count for the model states. */
        cr_expect_float_eq(zl_num(rk, "memory.formula.model_states"), zl_states_for(stage, psi_full, psi_pad, N), 1e-6);
        cr_expect_float_eq(zl_num(rk, "memory.paper.model_states"), zl_states_for(stage, psi, psi, N), 1e-3);
        double unit_pad = psi_pad / L;
        cr_expect_eq(zl_num(rk, "memory.formula.grad_bucket"), stage >= 2 ? 2 * 2 * unit_pad : 0);
        int prefetch = strstr(extra, "--prefetch 2") ? 2 : strstr(extra, "--prefetch 0") ? 0 : 1;
        cr_expect_eq(zl_num(rk, "memory.formula.param_gather"), stage == 3 ? (1 + prefetch) * 2 * unit_pad : 0);
        cr_expect_eq(zl_num(rk, "memory.allocations_in_step"), 0, "the step loop allocated");
        double wm = zl_num(rk, "comm.measured.wire_bytes_per_step");
        double wf = zl_num(rk, "comm.formula.wire_bytes_per_step");
        cr_expect_float_eq(wm, wf, 1e-9 * (1 + wf), "%s N=%d rank %d wire bytes %.0f vs formula %.0f", prog, N, rank,
                           wm, wf);
        double wire = wire_factor(stage, K, extra) * (N - 1) / N * 2 * psi_pad; /* counted here */
        cr_expect_float_eq(wf, wire, 1e-6);
        cr_expect_float_eq(wm, wire, 1e-6, "%s N=%d rank %d: measured wire bytes %.0f, counted here %.0f", prog, N,
                           rank, wm, wire);
        /* Activations and scratch counted here: x of every block and the output, h of every
         * block (one when checkpointing), one block's a (also backward's dh); targets, 2 activation grads, K losses,
         * and the gradient statistics (2 fp64). Control: K fp32 losses, and from ZeRO-1 on the
         * 16-byte statistics all-reduce. */
        double BD = (double)B * D;
        cr_expect_eq(zl_num(rk, "memory.formula.activations"), 2 * BD * ((L + 1) + 4 * (ckpt ? 1 : L) + 4));
        cr_expect_eq(zl_num(rk, "memory.formula.scratch"), 2 * 3 * BD + 4 * K + 16);
        double ws = expected_workspace(B, D), ws_formula = zl_num(rk, "memory.formula.workspace");
        double ws_measured = zl_num(rk, "memory.measured.workspace");
        cr_expect_eq(ws_formula, ws, "%s N=%d rank %d: workspace formula %.0f, counted here %.0f", prog, N, rank,
                     ws_formula, ws);
        cr_expect_eq(ws_measured, ws, "%s N=%d rank %d: workspace measured %.0f, counted here %.0f", prog, N, rank,
                     ws_measured, ws);
        zl_expect_traffic_by_purpose(rk, prog, stage, N, K);
        /* The measured totals against the counts here too, not only against the formula: a
         * total written from the formula would pass measured == formula. Every device buffer is
         * allocated before step 1 and kept, so the peak is their sum. */
        double states = zl_states_for(stage, psi_full, psi_pad, N);
        cr_expect_float_eq(zl_num(rk, "memory.measured.model_states"), states, 1e-6, "%s N=%d rank %d: measured states",
                           prog, N, rank);
        double peak = states + zl_num(rk, "memory.formula.grad_bucket") + zl_num(rk, "memory.formula.param_gather") +
                      2 * BD * ((L + 1) + 4 * (ckpt ? 1 : L) + 4) + 2 * 3 * BD + 4 * K + 16 + ws;
        cr_expect_float_eq(zl_num(rk, "memory.measured.peak_total"), peak, 1e-6,
                           "%s N=%d rank %d: measured peak %.0f, counted here %.0f", prog, N, rank,
                           zl_num(rk, "memory.measured.peak_total"), peak);
    }
    cJSON_Delete(j);
    unlink(json);
}

static void check_memory_and_traffic(int stage, int N, int L, int D, int B) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    check_memory_and_traffic_with(stage, N, L, D, B, "");
}

/* D = 31 makes a block 7843 elements: padded differently for N = 2, 3, 4. */
#define EXACT_TESTS(s)                                                                                           \
    Test(exact, stage##s##_N1) { check_memory_and_traffic(s, 1, 2, 31, 3); }                                   \
    Test(exact, stage##s##_N2) { check_memory_and_traffic(s, 2, 2, 31, 3); }                                   \
    Test(exact, stage##s##_N3) { check_memory_and_traffic(s, 3, 3, 31, 2); }                                   \
    Test(exact, stage##s##_N4) { check_memory_and_traffic(s, 4, 2, 31, 2); }
EXACT_TESTS(0)
EXACT_TESTS(1)
EXACT_TESTS(2)
EXACT_TESTS(3)

Test(exact, stage1_allreduce_variant_N3) {
    if (zl_max_world() < 3) cr_skip_test("ZL_MAX_WORLD < 3");
    check_memory_and_traffic_with(1, 3, 2, 31, 2, " --grad-sync allreduce");
}
/* --accum K and --checkpoint-activations: every stage, N = 1..4, K = 2 and 3, both policies. */
#define EXACT_ACCUM_TESTS(s)                                                                                           \
    Test(exact, stage##s##_N1_accum3_checkpoint) {                                                                 \
        check_memory_and_traffic_with(s, 1, 2, 31, 2, " --accum 3 --checkpoint-activations");                      \
    }                                                                                                            \
    Test(exact, stage##s##_N2_accum2) { check_memory_and_traffic_with(s, 2, 2, 31, 3, " --accum 2"); }             \
    Test(exact, stage##s##_N3_accum3_checkpoint) {                                                                 \
        if (zl_max_world() < 3) cr_skip_test("ZL_MAX_WORLD < 3");                                                  \
        check_memory_and_traffic_with(s, 3, 3, 31, 2, " --accum 3 --checkpoint-activations");                      \
    }                                                                                                            \
    Test(exact, stage##s##_N4_accum2_checkpoint) {                                                                 \
        if (zl_max_world() < 4) cr_skip_test("ZL_MAX_WORLD < 4");                                                  \
        check_memory_and_traffic_with(s, 4, 2, 31, 2, " --accum 2 --checkpoint-activations");                      \
    }
EXACT_ACCUM_TESTS(0)
EXACT_ACCUM_TESTS(1)
EXACT_ACCUM_TESTS(2)
EXACT_ACCUM_TESTS(3)
Test(exact, stage1_allreduce_variant_accum3_N2) {
    check_memory_and_traffic_with(1, 2, 2, 31, 2, " --grad-sync allreduce --accum 3");
}
Test(exact, stage3_prefetch_2_accum2_N2) { check_memory_and_traffic_with(3, 2, 3, 31, 2, " --prefetch 2 --accum 2"); }

Test(exact, stage3_prefetch_2_N2) { check_memory_and_traffic_with(3, 2, 3, 31, 2, " --prefetch 2"); }
Test(exact, stage3_prefetch_0_N2) { check_memory_and_traffic_with(3, 2, 3, 31, 2, " --prefetch 0"); }

/* The loss falls, at every N: mean of the last 3 of 20 steps below 85% of the first 3. */
static void check_loss_falls(int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    char json[128];
    snprintf(json, sizeof json, "/tmp/zl_it_loss_%d_%d.json", N, getpid());
    zl_run_result r;
    zl_run(&r, "-n %d {stage0_ddp} --preset tiny --steps 20 --quiet --json %s", N, json);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = zl_load_json(json);
    cJSON *loss = zl_get(j, "loss");
    int n = cJSON_GetArraySize(loss);
    cr_assert_eq(n, 20);
    double first = 0, last = 0;
    for (int i = 0; i < 3; i++) {
        first += cJSON_GetArrayItem(loss, i)->valuedouble / 3;
        last += cJSON_GetArrayItem(loss, n - 1 - i)->valuedouble / 3;
    }
    cr_expect(last < 0.85 * first, "N=%d: loss did not fall: first %.5f, last %.5f", N, first, last);
    cr_expect(isfinite(last));
    cJSON_Delete(j);
    unlink(json);
}
Test(stage0, loss_falls_N1) { check_loss_falls(1); }
Test(stage0, loss_falls_N2) { check_loss_falls(2); }
Test(stage0, loss_falls_N3) { check_loss_falls(3); }
Test(stage0, loss_falls_N4) { check_loss_falls(4); }

/* N ranks × B rows see the same global batches as 1 rank × N·B rows, so the trained
 * parameters must agree up to the order of fp16 summation. */
static void check_equivalence(int N, int B) {
    char d1[128], dN[128], j1[128], jN[128];
    snprintf(d1, sizeof d1, "/tmp/zl_eq1_%d.bin", getpid());
    snprintf(dN, sizeof dN, "/tmp/zl_eq%d_%d.bin", N, getpid());
    snprintf(j1, sizeof j1, "/tmp/zl_eq1_%d.json", getpid());
    snprintf(jN, sizeof jN, "/tmp/zl_eq%d_%d.json", N, getpid());
    zl_run_result r;
    zl_run(&r, "-n 1 {stage0_ddp} --preset tiny --batch %d --steps 10 --quiet --dump-params %s --json %s", N * B, d1,
           j1);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    zl_run(&r, "-n %d {stage0_ddp} --preset tiny --batch %d --steps 10 --quiet --dump-params %s --json %s", N, B, dN,
           jN);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    size_t n1;
    double rel = zl_param_relative_diff(dN, d1, &n1);
    cJSON *a = zl_load_json(j1), *b = zl_load_json(jN);
    cr_assert_eq(n1, (size_t)zl_num(a, "params"), "the dump holds the unpadded vector");
    cr_expect(rel <= 1e-3, "N=%d x B=%d vs N=1 x B=%d: |dp|/|p| = %.3g", N, B, N * B, rel);
    /* Both start from the same parameters, so they must have trained: 10x the tolerance away. */
    zl_expect_trained(d1, 1e-2, "-n 1 {stage0_ddp} --preset tiny --batch %d", N * B);
    for (int i = 0; i < 10; i++) {
        double la = cJSON_GetArrayItem(zl_get(a, "loss"), i)->valuedouble;
        double lb = cJSON_GetArrayItem(zl_get(b, "loss"), i)->valuedouble;
        cr_expect(fabs(la - lb) <= 1e-3 * fabs(la) + 1e-6, "step %d loss %.6f vs %.6f", i + 1, la, lb);
    }
    cJSON_Delete(a), cJSON_Delete(b);
    unlink(d1), unlink(dN), unlink(j1), unlink(jN);
}

Test(stage0, two_ranks_equal_one_rank_with_twice_the_rows) { check_equivalence(2, 4); }

/* Gradient accumulation: N ranks × K micro-batches × B rows see the same rows as N × 1 ×
 * (K·B) and train the same model up to fp16 rounding: each micro-batch's gradient is
 * rounded to fp16 before the sum (ZeRO-2/3 also round each micro-batch's cross-rank sum), where
 * the K·B run rounds the fp32 sum once. */
static void check_accum_equivalence(int stage, int N, int K, int B) {
    char d1[128], dK[128], j1[128], jK[128];
    snprintf(d1, sizeof d1, "/tmp/zl_acc1_%d.bin", getpid());
    snprintf(dK, sizeof dK, "/tmp/zl_accK_%d.bin", getpid());
    snprintf(j1, sizeof j1, "/tmp/zl_acc1_%d.json", getpid());
    snprintf(jK, sizeof jK, "/tmp/zl_accK_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "-n %d {%s} --preset tiny --batch %d --steps 10 --quiet --dump-params %s --json %s", N, zl_progs[stage],
           K * B, d1, j1);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    zl_run(&r, "-n %d {%s} --preset tiny --batch %d --accum %d --steps 10 --quiet --check --dump-params %s --json %s",
           N, zl_progs[stage], B, K, dK, jK);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    double rel = zl_param_relative_diff(dK, d1, NULL);
    cJSON *a = zl_load_json(j1), *b = zl_load_json(jK);
    cr_expect_eq(zl_num(b, "config.accum"), K);
    cr_expect(rel <= 1e-3, "%s N=%d: K=%d x B=%d vs K=1 x B=%d: |dp|/|p| = %.3g", zl_progs[stage], N, K, B, K * B, rel);
    zl_expect_trained(d1, 1e-2, "-n %d {%s} --preset tiny --batch %d", N, zl_progs[stage], K * B);
    /* The same step-1 gradient: the K micro-batches' sum is the mean over K·B rows only with the 1/K
     * (Adam nearly undoes a gradient K times too large, so the parameters alone do not show it). */
    double na = cJSON_GetArrayItem(zl_get(a, "grad_norm"), 0)->valuedouble;
    double nb = cJSON_GetArrayItem(zl_get(b, "grad_norm"), 0)->valuedouble;
    cr_expect(fabs(nb - na) <= 1e-3 * na, "%s N=%d: step-1 gradient norm %.6g with K=%d, %.6g with K=1 x %d rows",
              zl_progs[stage], N, nb, K, na, K * B);
    for (int i = 0; i < 10; i++) {
        double la = cJSON_GetArrayItem(zl_get(a, "loss"), i)->valuedouble;
        double lb = cJSON_GetArrayItem(zl_get(b, "loss"), i)->valuedouble;
        cr_expect(fabs(la - lb) <= 1e-3 * fabs(la) + 1e-6, "%s step %d loss %.6f vs %.6f", zl_progs[stage], i + 1, la, lb);
    }
    cJSON_Delete(a), cJSON_Delete(b);
    unlink(d1), unlink(dK), unlink(j1), unlink(jK);
}

Test(accum, stage0_N2_K2_equals_K1_twice_the_rows) { check_accum_equivalence(0, 2, 2, 2); }
Test(accum, stage1_N2_K3_equals_K1_three_times_the_rows) { check_accum_equivalence(1, 2, 3, 2); }
Test(accum, stage2_N2_K2_equals_K1_twice_the_rows) { check_accum_equivalence(2, 2, 2, 2); }
Test(accum, stage3_N2_K3_equals_K1_three_times_the_rows) { check_accum_equivalence(3, 2, 3, 2); }

/* With --accum, dW1 = xᵀ·dh is written by a step's first micro-batch (beta = 0) and added into by
 * the others (beta = 1, C is D). The same-bits choice (kernels_cuda.cu) is made and checked on
 * the first; the adding call must not inherit it (its bits were never checked at beta = 1) and is
 * not tried itself (running it twice would add twice): it keeps the heuristic's first answer and,
 * under ZL_GEMM_TUNE=log, says so. And the bits equal those of ZL_GEMM_TUNE=0. D = 512 gives
 * dW1 4D·D = 2^20 outputs, the fewest a choice is made for. */
Test(accum, the_adding_gemm_keeps_the_first_answer_and_the_bits) {
    if (!zl_build_is_cuda()) cr_skip_test("the CPU backend has no cuBLASLt");
    char j0[128], j1[128];
    snprintf(j0, sizeof j0, "/tmp/zl_accg0_%d.json", getpid());
    snprintf(j1, sizeof j1, "/tmp/zl_accg1_%d.json", getpid());
    const char *cmd = "-n 1 {stage0_ddp} --dim 512 --layers 1 --batch 64 --accum 2 --steps 2 --quiet --json %s";
    zl_run_result r;
    unsetenv("ZL_GEMM_TABLE"); /* a table would change the log lines, and is refused beside ZL_GEMM_TUNE=0 */
    setenv("ZL_GEMM_TUNE", "log", 1);
    zl_run(&r, cmd, j1);
    setenv("ZL_GEMM_TUNE", "0", 1);
    zl_run_result r0;
    zl_run(&r0, cmd, j0);
    unsetenv("ZL_GEMM_TUNE");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_eq(r0.exit_code, 0, "%s", r0.err);
    const char *write = strstr(r.err, "gemm-tune: backward dW1 = xᵀ·dh m=2048 n=512 k=64: first answer");
    const char *add = strstr(r.err, "gemm-tune: backward dW1 = xᵀ·dh m=2048 n=512 k=64: it adds into its output "
                                    "(C is D): not tried, first answer kept");
    cr_expect(write, "no choice logged for the writing dW1: %s", r.err);
    cr_expect(add, "the adding dW1 logged no plan of its own: %s", r.err);
    cJSON *a = zl_load_json(j1), *b = zl_load_json(j0);
    cr_expect_str_eq(zl_get(a, "param_hash")->valuestring, zl_get(b, "param_hash")->valuestring,
                     "--accum 2: the same-bits choice changed the bits");
    cJSON_Delete(a), cJSON_Delete(b);
    unlink(j0), unlink(j1);
}

/* Activation checkpointing recomputes, deterministically: the same bits with and without. */
static void check_checkpoint_bitwise(int stage, int N, const char *extra) {
    char a[128], b[128];
    snprintf(a, sizeof a, "/tmp/zl_ck_a_%d.json", getpid());
    snprintf(b, sizeof b, "/tmp/zl_ck_b_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "-n %d {%s} --layers 3 --dim 24 --batch 3 --steps 4 --quiet --json %s%s", N, zl_progs[stage], a, extra);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    zl_run(&r, "-n %d {%s} --layers 3 --dim 24 --batch 3 --steps 4 --quiet --check --checkpoint-activations "
           "--json %s%s", N, zl_progs[stage], b, extra);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *ja = zl_load_json(a), *jb = zl_load_json(b);
    cr_expect_str_eq(zl_get(ja, "param_hash")->valuestring, zl_get(jb, "param_hash")->valuestring, "%s%s",
                     zl_progs[stage], extra);
    cr_expect(zl_get(jb, "config.checkpoint_activations")->type == cJSON_True);
    cJSON *ra = cJSON_GetArrayItem(zl_get(ja, "ranks"), 0), *rb = cJSON_GetArrayItem(zl_get(jb, "ranks"), 0);
    cr_expect_lt(zl_num(rb, "memory.measured.activations"), zl_num(ra, "memory.measured.activations"));
    cJSON_Delete(ja), cJSON_Delete(jb);
    unlink(a), unlink(b);
}
Test(checkpoint, stage0_bitwise_N2) { check_checkpoint_bitwise(0, 2, ""); }
Test(checkpoint, stage1_bitwise_N2_accum2) { check_checkpoint_bitwise(1, 2, " --accum 2"); }
Test(checkpoint, stage2_bitwise_N2) { check_checkpoint_bitwise(2, 2, ""); }
Test(checkpoint, stage3_bitwise_N2_accum2) { check_checkpoint_bitwise(3, 2, " --accum 2"); }

/* --keep-activations hands backward the a forward computed (from the unrounded fp32 h) instead
 * of gelu of the stored h, so it has bits of its own (model/mlp.h): the four stages must agree
 * on them, the loss must follow the default run's, and the activations grow by L-1 blocks of a. */
Test(checkpoint, keep_activations_same_bits_in_every_stage_N2) {
    char a[128], b[128];
    snprintf(a, sizeof a, "/tmp/zl_keep_a_%d.json", getpid());
    snprintf(b, sizeof b, "/tmp/zl_keep_b_%d.json", getpid());
    const char *shape = "--layers 3 --dim 24 --batch 3 --steps 6 --quiet --check";
    zl_run_result r;
    zl_run(&r, "-n 2 {%s} %s --json %s", zl_progs[0], shape, a);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *def = zl_load_json(a);
    double loss_def = cJSON_GetArrayItem(zl_get(def, "loss"), 5)->valuedouble;
    double act_def = zl_num(cJSON_GetArrayItem(zl_get(def, "ranks"), 0), "memory.measured.activations");
    char first[17] = "";
    for (int stage = 0; stage < 4; stage++) {
        unlink(b);
        zl_run(&r, "-n 2 {%s} %s --keep-activations --json %s", zl_progs[stage], shape, b);
        cr_assert_eq(r.exit_code, 0, "%s: %s", zl_progs[stage], r.err);
        cJSON *keep = zl_load_json(b);
        cr_expect(zl_get(keep, "config.keep_activations")->type == cJSON_True);
        if (stage == 0) snprintf(first, sizeof first, "%s", zl_hash_of(keep));
        else cr_expect_str_eq(zl_hash_of(keep), first, "%s kept other bits than DDP", zl_progs[stage]);
        double loss = cJSON_GetArrayItem(zl_get(keep, "loss"), 5)->valuedouble;
        cr_expect(fabs(loss - loss_def) <= 1e-3 * fabs(loss_def), "%s: final loss %.9g kept, %.9g by default",
                  zl_progs[stage], loss, loss_def);
        /* a of blocks 1..L-1 on top of the default's one block: 2 bytes · (L-1) · B·4D */
        cr_expect_eq(zl_num(cJSON_GetArrayItem(zl_get(keep, "ranks"), 0), "memory.measured.activations") - act_def,
                     2.0 * 2 * 3 * 4 * 24, "%s", zl_progs[stage]);
        cJSON_Delete(keep);
    }
    cJSON_Delete(def);
    unlink(a), unlink(b);
}

/* zerocalc is the answer key: its per-rank peak (and activations, wire bytes) for a shape is
 * what the program measures, without running it. policy: 0 the default, 1
 * --checkpoint-activations, 2 --keep-activations. */
static void check_zerocalc_matches(int stage, int N, int L, int D, int B, int K, int policy) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    char json[128], cmd[512], out[8192];
    snprintf(json, sizeof json, "/tmp/zl_zc_%d.json", getpid());
    const char *ck = policy == 1 ? " --checkpoint-activations" : policy == 2 ? " --keep-activations" : "";
    zl_run_result r;
    zl_run(&r, "-n %d {%s} --layers %d --dim %d --batch %d --accum %d --steps 2 --quiet --json %s%s", N,
           zl_progs[stage], L, D, B, K, json, ck);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    snprintf(cmd, sizeof cmd, "build/zerocalc --layers %d --dim %d --batch %d --accum %d --ranks %d --stage %d "
             "--backend %s --json%s", L, D, B, K, N, stage, zl_build_is_cuda() ? "cuda" : "cpu", ck);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "%s", cmd);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s: %s", cmd, out);
    cJSON *calc = cJSON_Parse(out), *run = zl_load_json(json);
    cr_assert(calc, "zerocalc printed no JSON: %s", out);
    cJSON *st = cJSON_GetArrayItem(zl_get(calc, "stages"), 0);
    for (int rank = 0; rank < N; rank++) {
        cJSON *rk = cJSON_GetArrayItem(zl_get(run, "ranks"), rank);
        cr_expect_eq(zl_num(st, "peak_total"), zl_num(rk, "memory.measured.peak_total"),
                     "%s N=%d L=%d D=%d B=%d K=%d%s rank %d", zl_progs[stage], N, L, D, B, K, ck, rank);
        cr_expect_eq(zl_num(st, "activations"), zl_num(rk, "memory.measured.activations"));
        double wire = zl_num(rk, "comm.measured.wire_bytes_per_step");
        cr_expect_float_eq(zl_num(st, "wire_bytes_per_step"), wire, 1e-9 * (1 + wire));
    }
    cJSON_Delete(calc), cJSON_Delete(run);
    unlink(json);
}
/* A grid of shapes, one test each (a shape above ZL_MAX_WORLD is reported skipped). */
Test(zerocalc, peak_equals_measured_stage0_N1_L2_D16_B4) { check_zerocalc_matches(0, 1, 2, 16, 4, 1, 0); }
Test(zerocalc, peak_equals_measured_stage1_N2_L3_D31_B2_accum2_checkpoint) {
    check_zerocalc_matches(1, 2, 3, 31, 2, 2, 1);
}
Test(zerocalc, peak_equals_measured_stage2_N3_L2_D17_B3_accum3) { check_zerocalc_matches(2, 3, 2, 17, 3, 3, 0); }
Test(zerocalc, peak_equals_measured_stage3_N2_L4_D24_B5_accum2_checkpoint) {
    check_zerocalc_matches(3, 2, 4, 24, 5, 2, 1);
}
Test(zerocalc, peak_equals_measured_stage3_N4_L3_D9_B1) { check_zerocalc_matches(3, 4, 3, 9, 1, 1, 0); }
Test(zerocalc, peak_equals_measured_stage2_N2_L3_D20_B3_accum2_keep) { check_zerocalc_matches(2, 2, 3, 20, 3, 2, 2); }

/* The same command gives the same bits every time — on a GPU too, where nothing (a GEMM
 * algorithm chosen by timing, a race between streams) may let a run depend on the machine's
 * timing. The model is test_ckpt's (D = 31, 2 rows a rank): on it the same-bits GEMM choice
 * once kept candidates whose bits matched the first answer's on step 1's operands only, and
 * one command ended with three different hashes in nine runs on 4 × H200. */
static void check_repeatable(int stage) {
    int N = zl_max_world() >= 2 ? 2 : 1;
    char json[128], first[17] = "";
    snprintf(json, sizeof json, "/tmp/zl_det_%d.json", getpid());
    for (int run = 0; run < 3; run++) {
        unlink(json); /* each run's own report: a run that wrote none must not be read as the one before */
        zl_run_result r;
        zl_run(&r, "-n %d {%s} --layers 2 --dim 31 --batch 2 --steps 5 --quiet --json %s", N, zl_progs[stage], json);
        cr_assert_eq(r.exit_code, 0, "%s", r.err);
        cJSON *j = zl_load_json(json);
        if (run == 0)
            snprintf(first, sizeof first, "%s", zl_hash_of(j));
        else
            cr_expect_str_eq(zl_hash_of(j), first, "%s N=%d: run %d ended with other bits than run 1",
                             zl_progs[stage], N, run + 1);
        cJSON_Delete(j);
    }
    unlink(json);
}
Test(repeatable, stage0_three_runs) { check_repeatable(0); }
Test(repeatable, stage1_three_runs) { check_repeatable(1); }
Test(repeatable, stage2_three_runs) { check_repeatable(2); }
Test(repeatable, stage3_three_runs) { check_repeatable(3); }

/* ---- bad input: exit 2, one line naming the flag, before anything is allocated ---- */

static void expect_refused(const char *launch, const char *expect) {
    zl_run_result r;
    zl_run(&r, "%s", launch);
    cr_expect_eq(r.exit_code, 2, "'%s' exited %d, stderr: %s", launch, r.exit_code, r.err);
    cr_expect(strstr(r.err, expect) != NULL, "'%s': stderr '%s' lacks '%s'", launch, r.err, expect);
    /* Exactly one line from the program; launchers (Open MPI) may add banners of their own. */
    int ours = 0;
    for (const char *line = r.err; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        for (int s = 0; s < 4; s++)
            if (!strncmp(line, zl_progs[s], strlen(zl_progs[s])) && line[strlen(zl_progs[s])] == ':') ours++;
    cr_expect_eq(ours, 1, "'%s': expected exactly one line from the program on stderr, got '%s'", launch, r.err);
    cr_expect(strstr(r.out, "memory per rank") == NULL, "'%s' ran anyway", launch);
}

Test(bad_input, each_path_exits_2_with_its_message) {
    expect_refused("-n 1 {stage0_ddp} --dim abc", "--dim: expected an integer in [1, 16777216], got 'abc'");
    expect_refused("-n 2 {stage0_ddp} --dim 0", "--dim: expected an integer");
    expect_refused("-n 1 {stage0_ddp} --layers -3", "--layers: expected an integer");
    expect_refused("-n 1 {stage0_ddp} --batch 12abc", "--batch: expected an integer");
    expect_refused("-n 1 {stage0_ddp} --steps 0", "--steps");
    expect_refused("-n 1 {stage0_ddp} --seed -1", "--seed");
    expect_refused("-n 1 {stage0_ddp} --loss-scale inf", "--loss-scale");
    expect_refused("-n 1 {stage0_ddp} --lr 0", "--lr");
    expect_refused("-n 1 {stage0_ddp} --beta2 1", "--beta2");
    expect_refused("-n 1 {stage0_ddp} --preset big", "--preset: expected one of tiny, demo, lab-1b");
    expect_refused("-n 2 {stage0_ddp} --bogus", "unknown flag '--bogus'");
    expect_refused("-n 1 {stage0_ddp} --prefetch 1", "--prefetch: only stage3 takes this flag");
    expect_refused("-n 1 {stage0_ddp} --grad-sync allreduce", "--grad-sync: only stage1 takes this flag");
    expect_refused("-n 1 {stage0_ddp} --dim 16777216 --layers 100000 --batch 1", "overflow");
    expect_refused("-n 1 {stage0_ddp} --dim 65536 --batch 8192", "--batch: rows*4*dim must be below 2^31");
    expect_refused("-n 1 {stage0_ddp} --json", "--json: missing value");
}

Test(bad_input, ranks_with_different_arguments_are_refused) {
    expect_refused("-n 1 {stage0_ddp} --seed 1 : -n 1 {stage0_ddp} --seed 2", "different arguments");
    /* A bad flag on rank 1 only: rank 1 reports it, rank 0 does not hang. */
    expect_refused("-n 1 {stage0_ddp} : -n 1 {stage0_ddp} --batch 0", "--batch: expected an integer");
}

Test(bad_input, help_exits_0) {
    zl_run_result r;
    zl_run(&r, "-n 1 {stage0_ddp} --help");
    cr_expect_eq(r.exit_code, 0);
    cr_expect(strstr(r.out, "--preset tiny|demo|lab-1b") != NULL, "%s", r.out);
}

/* ---- the four stages are the same training run ---------------------------------------- */

typedef struct {
    cJSON *json[5];
    double *params[5];
    size_t n;
} stage_runs;

/* Runs stage 0..3 (and stage 1 --grad-sync allreduce as index 4) on N ranks, tiny preset. */
static void run_all_stages(stage_runs *sr, int N, int steps) {
    for (int i = 0; i < 5; i++) {
        int stage = i < 4 ? i : 1;
        char json[128], dump[128];
        snprintf(json, sizeof json, "/tmp/zl_st%d_%d_%d.json", i, N, getpid());
        snprintf(dump, sizeof dump, "/tmp/zl_st%d_%d_%d.bin", i, N, getpid());
        zl_run_result r;
        zl_run(&r, "-n %d {%s} --preset tiny --steps %d --quiet --json %s --dump-params %s%s", N, zl_progs[stage], steps,
               json, dump, i == 4 ? " --grad-sync allreduce" : "");
        cr_assert_eq(r.exit_code, 0, "%s N=%d: %s", zl_progs[stage], N, r.err);
        sr->json[i] = zl_load_json(json);
        sr->params[i] = zl_load_params(dump, &sr->n);
        unlink(json), unlink(dump);
    }
}

static void free_stage_runs(stage_runs *sr) {
    for (int i = 0; i < 5; i++) cJSON_Delete(sr->json[i]), free(sr->params[i]);
}

static double wire_of(cJSON *j) {
    return zl_num(cJSON_GetArrayItem(zl_get(j, "ranks"), 0), "comm.measured.wire_bytes_per_step");
}

/* With one or two ranks every sum has one order, so all stages must agree bit for bit. */
static void check_bitwise(int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    stage_runs sr;
    run_all_stages(&sr, N, 10);
    const char *ddp = zl_get(sr.json[0], "param_hash")->valuestring;
    for (int i = 1; i < 5; i++) {
        cr_expect_str_eq(zl_get(sr.json[i], "param_hash")->valuestring, ddp, "run %d (stage %d) at N=%d", i,
                         i < 4 ? i : 1, N);
        for (int t = 0; t < 10; t++) { /* the reported loss too: each stage averages it over ranks itself */
            double a = cJSON_GetArrayItem(zl_get(sr.json[0], "loss"), t)->valuedouble;
            double b = cJSON_GetArrayItem(zl_get(sr.json[i], "loss"), t)->valuedouble;
            cr_expect(a == b, "run %d N=%d step %d: loss %.9g vs DDP %.9g", i, N, t + 1, b, a);
        }
    }
    if (N > 1) { /* measured traffic ratio to DDP */
        double base = wire_of(sr.json[0]);
        cr_expect_float_eq(wire_of(sr.json[1]) / base, 1.0, 1e-12);
        cr_expect_float_eq(wire_of(sr.json[2]) / base, 1.0, 1e-12);
        cr_expect_float_eq(wire_of(sr.json[3]) / base, 1.5, 1e-12);
        cr_expect_float_eq(wire_of(sr.json[4]) / base, 1.5, 1e-12);
    }
    free_stage_runs(&sr);
}
Test(equivalence, all_stages_bitwise_equal_N1) { check_bitwise(1); }
Test(equivalence, all_stages_bitwise_equal_N2) { check_bitwise(2); }

/* With 3 or 4 ranks the reduction order may differ between all-reduce and
 * reduce-scatter: parameters within 1e-3 (relative norm), losses within 1e-3. */
static void check_close(int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    stage_runs sr;
    run_all_stages(&sr, N, 10);
    for (int i = 1; i < 5; i++) {
        double diff = 0, norm = 0;
        for (size_t k = 0; k < sr.n; k++) {
            double d = sr.params[i][k] - sr.params[0][k];
            diff += d * d, norm += sr.params[0][k] * sr.params[0][k];
        }
        cr_expect(sqrt(diff / norm) <= 1e-3, "run %d at N=%d: |p - p_DDP|/|p_DDP| = %.3g", i, N, sqrt(diff / norm));
        for (int t = 0; t < 10; t++) {
            double a = cJSON_GetArrayItem(zl_get(sr.json[0], "loss"), t)->valuedouble;
            double b = cJSON_GetArrayItem(zl_get(sr.json[i], "loss"), t)->valuedouble;
            cr_expect(fabs(a - b) <= 1e-3 * fabs(a), "run %d N=%d step %d: loss %.7f vs DDP %.7f", i, N, t + 1, b, a);
        }
    }
    free_stage_runs(&sr);
}
Test(equivalence, all_stages_close_to_ddp_N3) { check_close(3); }
Test(equivalence, all_stages_close_to_ddp_N4) { check_close(4); }

Test(bad_input, stage_specific_flags) {
    expect_refused("-n 1 {stage3} --layers 2 --prefetch 2", "--prefetch: expected an integer in [0, 1] (this model's uses");
    expect_refused("-n 1 {stage3} --prefetch -1", "--prefetch: expected an integer in [0, 64]");
    expect_refused("-n 2 {stage1} --grad-sync ring", "--grad-sync: expected reducescatter or allreduce, got 'ring'");
    expect_refused("-n 1 {stage2} --prefetch 1", "--prefetch: only stage3 takes this flag; stage2 does not");
    expect_refused("-n 1 {stage3} --grad-sync allreduce", "--grad-sync: only stage1 takes this flag; stage3 does not");
    expect_refused("-n 1 {stage2} --grad-sync allreduce", "--grad-sync: only stage1 takes this flag");
    expect_refused("-n 1 {stage1} --prefetch 0", "--prefetch: only stage3 takes this flag");
}

/* ---- backends agree (make test-gpu: ZL_BUILD=build/cuda, ZL_REFERENCE_BUILD=build/cpu) ---- */

Test(backends, cuda_matches_cpu_on_tiny) {
    const char *ref = getenv("ZL_REFERENCE_BUILD");
    if (!ref || !*ref) cr_skip_test("set ZL_REFERENCE_BUILD to compare two builds");
    for (int stage = 0; stage < 4; stage++) {
        char ja[128], jb[128], da[128], db[128];
        snprintf(ja, sizeof ja, "/tmp/zl_be_a%d_%d.json", stage, getpid());
        snprintf(jb, sizeof jb, "/tmp/zl_be_b%d_%d.json", stage, getpid());
        snprintf(da, sizeof da, "/tmp/zl_be_a%d_%d.bin", stage, getpid());
        snprintf(db, sizeof db, "/tmp/zl_be_b%d_%d.bin", stage, getpid());
        zl_run_result r;
        zl_run(&r, "-n 1 {%s} --preset tiny --steps 10 --quiet --json %s --dump-params %s", zl_progs[stage], ja, da);
        cr_assert_eq(r.exit_code, 0, "%s", r.err);
        zl_run(&r, "-n 1 %s/%s --preset tiny --steps 10 --quiet --json %s --dump-params %s", ref, zl_progs[stage], jb, db);
        cr_assert_eq(r.exit_code, 0, "%s", r.err);
        cJSON *a = zl_load_json(ja), *b = zl_load_json(jb);
        cr_expect_str_neq(zl_get(a, "backend")->valuestring, zl_get(b, "backend")->valuestring);
        for (int t = 0; t < 10; t++) {
            double la = cJSON_GetArrayItem(zl_get(a, "loss"), t)->valuedouble;
            double lb = cJSON_GetArrayItem(zl_get(b, "loss"), t)->valuedouble;
            /* fp16 storage of every activation: agree to ~1%, not to the bit */
            cr_expect(fabs(la - lb) <= 1e-2 * fabs(lb), "%s step %d: loss %.6f vs reference %.6f", zl_progs[stage],
                      t + 1, la, lb);
        }
        double rel = zl_param_relative_diff(da, db, NULL);
        cr_expect(rel <= 1e-2, "%s: |p - p_ref|/|p_ref| = %.3g", zl_progs[stage], rel);
        cJSON_Delete(a), cJSON_Delete(b);
        unlink(ja), unlink(jb), unlink(da), unlink(db);
    }
}

/* N > 8: the printed memory table becomes min / max over ranks (the JSON keeps every rank). */
Test(exact, stage3_N9_min_max_report) {
    if (zl_max_world() < 9) cr_skip_test("ZL_MAX_WORLD < 9");
    check_memory_and_traffic_with(3, 9, 2, 31, 2, "");
    zl_run_result r;
    zl_run(&r, "-n 9 {stage3} --layers 2 --dim 31 --batch 2 --steps 1 --quiet");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "min / max over 9 ranks") != NULL, "%s", r.out);
}

/* ---- no GPU: the CUDA build says so in one line and names the CPU build -------------------- */

/* Runs build/cuda/<prog> (whatever ZL_BUILD says) with every device hidden, so it passes on
 * a machine without a GPU and on one with GPUs alike; skipped when the CUDA build is absent. */
static void check_no_gpu_message(int n, const char *prog) {
    char path[256];
    snprintf(path, sizeof path, "build/cuda/%s", prog);
    if (access(path, X_OK) != 0) cr_skip_test("%s not built (no nvcc here)", path);
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* this test's own process: Criterion forks each test */
    zl_run_result r;
    zl_run(&r, "-n %d %s --preset tiny --steps 1", n, path);
    char want[160];
    snprintf(want, sizeof want, "; run build/cpu/%s instead\n", prog);
    cr_expect_eq(r.exit_code, 1, "exit %d, stderr '%s'", r.exit_code, r.err);
    cr_expect(strstr(r.err, "no CUDA device visible (cudaGetDeviceCount: ") != NULL, "stderr '%s'", r.err);
    cr_expect(strstr(r.err, want) != NULL, "stderr '%s' lacks '%s'", r.err, want);
    int lines = 0;
    for (const char *p = r.err; (p = strstr(p, "no CUDA device visible")) != NULL; p++) lines++;
    cr_expect_eq(lines, 1, "one line from the whole job, got %d: '%s'", lines, r.err);
    cr_expect(strstr(r.err, "MPI_Abort") == NULL, "a plain exit, not an abort: '%s'", r.err);
    cr_expect(strstr(r.out, "memory per rank") == NULL, "it ran anyway: '%s'", r.out);
}

Test(no_gpu, cuda_stage0_names_the_cpu_build_N1) { check_no_gpu_message(1, "stage0_ddp"); }
Test(no_gpu, cuda_stage3_names_the_cpu_build_N2) { check_no_gpu_message(2, "stage3"); }
