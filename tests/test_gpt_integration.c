/* test_gpt_integration.c — the four stage programs with --model gpt (gpt-tiny), end to end
 * under mpiexec: measured memory == formula to the byte for every category and rank, and
 * == this file's own count of Ψ, Ψ_pad and the activations; measured wire bytes == formula,
 * with ZeRO-3 gathering the tied embedding twice forward and twice backward (counted here
 * from the unit sizes); the four stages train the same model (bitwise at N = 1, 2; 1e-3 at
 * N = 3, 4); N × B rows == 1 × N·B; the loss falls on the shipped text. The same for the fused
 * attention on a head-dimension-64 shape (its buffers, bitwise stages, zerocalc).
 *
 * ZL_BUILD selects build/cpu or build/cuda; ZL_MAX_WORLD (default 4) caps N. */
#include "zl_test_util.h"


static const char *const categories[] = {"params_fp16", "grads_fp16", "master_fp32", "adam_m", "adam_v",
                                         "grad_bucket", "param_gather", "activations", "scratch", "workspace",
                                         "host_staging", "model_states", "peak_total"};

/* The shape under test: gpt-tiny (L = 2, D = 32, H = 2, T = 32, V = 256: no padding, B = 4;
 * head dimension 16, so the strided attention) unless a test switches to the fused one (head
 * dimension 64, --attention fused: P is not kept, one log-sum-exp a row is). */
typedef struct {
    int L, D, H, T, V, B, flash;
    const char *flags;
} gpt_shape;
static const gpt_shape tiny = {2, 32, 2, 32, 256, 4, 0, "--preset gpt-tiny"};
static const gpt_shape fused = {2, 128, 2, 24, 256, 2, 1,
                                "--model gpt --layers 2 --dim 128 --heads 2 --seq 24 --vocab 256 --batch 2 --attention fused"};
static gpt_shape sh = tiny;
#define L sh.L
#define D sh.D
#define H sh.H
#define T sh.T
#define V sh.V
#define B sh.B
#define TEXT "data/persuasion.txt"

/* Unit sizes, counted here: embedding (V+T)·D, blocks 12D² + 13D, final LN 2D. */
static double unit_size(int u) { return u == 0 ? (double)(V + T) * D : u <= L ? 12.0 * D * D + 13.0 * D : 2.0 * D; }
static double slice(int u, int N) { return ceil(unit_size(u) / N); }

/* The kernels' workspace for R = B·T rows, counted here from the layouts the backends document
 * (kernels/cpu/gpt_cpu.c, kernels/cuda/gpt_cuda.cu), not from the program's formula. CPU: 64
 * bytes to align, then three fp32 GEMM panels of max(R, D)·max(4D, Vp) floats (Vp: V rounded up
 * to 64), each rounded up to 64 bytes. CUDA: the MLP kernels' layout for R rows (256 to align,
 * cuBLASLt's 32 MiB, 1024 + 2 × 1024 doubles, 16 × 4D floats of column sums), then 256 to align
 * and LayerNorm's dg and db partials, one row of D floats per chunk of 256 rows each. */
static double expected_workspace(void) {
    double R = (double)B * T, Vp = ceil(V / 64.0) * 64;
    if (zl_build_is_cuda())
        return 256 + 32.0 * 1024 * 1024 + 8 * (1024 + 2 * 1024) + 4 * 16 * 4.0 * D + 256 + 4 * 2 * ceil(R / 256) * D;
    double panel = 4 * fmax(R, D) * fmax(4.0 * D, Vp);
    return 64 + 3 * 64 * ceil(panel / 64);
}

/* extra: " --accum K" (K micro-batches: ZeRO-2/3 sync and gather per micro-batch, K losses)
 * and/or " --checkpoint-activations" (the per-block activations of one block only). */
static void check_exact_with(int stage, int N, const char *extra) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    const char *acc = strstr(extra, "--accum ");
    int K = acc ? atoi(acc + 8) : 1, ckpt = strstr(extra, "--checkpoint-activations") != NULL;
    char json[128];
    snprintf(json, sizeof json, "/tmp/zl_gpt_%d_%d_%d.json", stage, N, getpid());
    zl_run_result r;
    zl_run(&r, "-n %d {%s} %s --steps 3 --quiet --data " TEXT " --json %s%s", N, zl_progs[stage], sh.flags, json, extra);
    cr_assert_eq(r.exit_code, 0, "%s N=%d failed (exit %d):\n%s\n%s", zl_progs[stage], N, r.exit_code, r.out, r.err);
    cJSON *j = zl_load_json(json);
    double psi = 0, psi_pad = 0, psi_full = 0, gathers = 0; /* Ψ_full: units on 16-byte lines */
    for (int u = 0; u < L + 2; u++)
        psi += unit_size(u), psi_pad += slice(u, N) * N, psi_full += ceil(slice(u, N) * N / 8) * 8;
    for (int u = 0; u < L + 2; u++) gathers += slice(u, N);
    gathers += slice(0, N); /* the LM head reads the embedding again */
    cr_assert_eq(zl_num(j, "params"), psi);
    cr_assert_eq(zl_num(j, "params_padded"), psi_pad);
    cr_assert_eq(zl_num(j, "params_full"), psi_full);
    cr_expect_str_eq(zl_get(j, "config.attention")->valuestring, sh.flash ? "fused" : "strided");
    double R = B * T, RD = R * D;
    double nb = ckpt ? 1 : L, BHT = (double)B * H * T, BHTT = BHT * T; /* nb: blocks whose activations are kept */
    /* per block, strided: P (B·H·T² 16-bit); fused: the row log-sum-exps (B·H·T fp32) */
    double per_block_attention = sh.flash ? 4 * nb * BHT : 2 * nb * BHTT;
    double act = 2 * ((L + 1) * RD + 15 * nb * RD + RD + R * V) + per_block_attention + 4 * (4 * nb * R + 2 * R);
    /* scratch: dres, dln, dh (4), qkv|dqkv (3), the LM head's wte part; strided: a second 3·R·D
     * buffer and dP (B·H·T²), fused: Dl (B·H·T fp32); tokens, targets, order, bucket (int32);
     * row losses, K losses; the 16-byte gradient statistics */
    double attention_scratch = sh.flash ? 4 * BHT : 2 * (3 * RD + BHTT);
    double scratch = 2 * (9 * RD + (double)V * D) + attention_scratch + 4 * (3 * R + V + 1) + 4 * (R + K) + 16;
    cJSON *ranks = zl_get(j, "ranks");
    for (int rank = 0; rank < N; rank++) {
        cJSON *rk = cJSON_GetArrayItem(ranks, rank);
        for (size_t c = 0; c < sizeof categories / sizeof categories[0]; c++) {
            char m[96], f[96];
            snprintf(m, sizeof m, "memory.measured.%s", categories[c]);
            snprintf(f, sizeof f, "memory.formula.%s", categories[c]);
            cr_expect_eq(zl_num(rk, m), zl_num(rk, f), "%s N=%d rank %d %s: measured %.0f formula %.0f", zl_progs[stage],
                         N, rank, categories[c], zl_num(rk, m), zl_num(rk, f));
        }
        cr_expect_float_eq(zl_num(rk, "memory.formula.model_states"), zl_states_for(stage, psi_full, psi_pad, N), 1e-6);
        cr_expect_eq(zl_num(rk, "memory.measured.activations"), act, "activations: %.0f, counted here %.0f",
                     zl_num(rk, "memory.measured.activations"), act);
        cr_expect_eq(zl_num(rk, "memory.formula.scratch"), scratch);
        cr_expect_eq(zl_num(rk, "memory.measured.workspace"), expected_workspace(), "workspace: %.0f, counted here %.0f",
                     zl_num(rk, "memory.measured.workspace"), expected_workspace());
        cr_expect_eq(zl_num(rk, "memory.allocations_in_step"), 0, "the step loop allocated");
        /* the buffers sized by the largest padded unit (here the embedding's or a block's), and the
         * measured totals against the counts here, not only against the formula (as test_integration) */
        double max_pad = 0;
        for (int u = 0; u < L + 2; u++) max_pad = fmax(max_pad, slice(u, N) * N);
        double bucket = stage >= 2 ? 2 * 2 * max_pad : 0, gather = stage == 3 ? (1 + 1) * 2 * max_pad : 0;
        cr_expect_eq(zl_num(rk, "memory.measured.grad_bucket"), bucket, "grad_bucket, counted here %.0f", bucket);
        cr_expect_eq(zl_num(rk, "memory.measured.param_gather"), gather, "param_gather, counted here %.0f", gather);
        double states = zl_states_for(stage, psi_full, psi_pad, N);
        cr_expect_float_eq(zl_num(rk, "memory.measured.model_states"), states, 1e-6);
        double peak = states + bucket + gather + act + scratch + expected_workspace();
        cr_expect_float_eq(zl_num(rk, "memory.measured.peak_total"), peak, 1e-6, "measured peak %.0f, counted here %.0f",
                           zl_num(rk, "memory.measured.peak_total"), peak);
        zl_expect_traffic_by_purpose(rk, zl_progs[stage], stage, N, K);
        /* gradients: DDP all-reduces, ZeRO-1 reduce-scatters once per step, ZeRO-2/3 once per micro-batch */
        double sync = (stage == 0 ? 2.0 : stage == 1 ? 1.0 : K) * (N - 1) * 2.0 * psi_pad / N;
        cr_expect_float_eq(zl_num(rk, "comm.measured.by_purpose.grad_sync"), sync, 1e-9 * (1 + sync));
        /* ZeRO-3: n_units + 1 gathers each way per micro-batch, the embedding's twice */
        double want = stage == 3 ? K * (N - 1) * 2.0 * gathers : 0;
        cr_expect_float_eq(zl_num(rk, "comm.measured.by_purpose.param_gather_fwd"), want, 1e-9 * (1 + want));
        cr_expect_float_eq(zl_num(rk, "comm.measured.by_purpose.param_gather_bwd"), want, 1e-9 * (1 + want));
    }
    cJSON_Delete(j);
    unlink(json);
}

static void check_exact(int stage, int N) { check_exact_with(stage, N, ""); }

#define EXACT_TESTS(s)                                                                                           \
    Test(gpt_exact, stage##s##_N1) { check_exact(s, 1); }                                                      \
    Test(gpt_exact, stage##s##_N2) { check_exact(s, 2); }                                                      \
    Test(gpt_exact, stage##s##_N3) { check_exact(s, 3); }                                                      \
    Test(gpt_exact, stage##s##_N4) { check_exact(s, 4); }                                                      \
    Test(gpt_exact, stage##s##_N2_accum2) { check_exact_with(s, 2, " --accum 2"); }                            \
    Test(gpt_exact, stage##s##_N2_accum2_checkpoint) {                                                         \
        check_exact_with(s, 2, " --accum 2 --checkpoint-activations");                                         \
    }
EXACT_TESTS(0)
EXACT_TESTS(1)
EXACT_TESTS(2)
EXACT_TESTS(3)

/* The fused attention's buffers, every stage (N = 2; ZeRO-3 also N = 3, checkpointed). */
#define FUSED_EXACT_TESTS(s)                                                                                     \
    Test(gpt_exact_fused_attention, stage##s##_N2) {                                                           \
        sh = fused;                                                                                            \
        check_exact(s, 2);                                                                                     \
    }
FUSED_EXACT_TESTS(0)
FUSED_EXACT_TESTS(1)
FUSED_EXACT_TESTS(2)
FUSED_EXACT_TESTS(3)
Test(gpt_exact_fused_attention, stage3_N3_checkpoint) {
    sh = fused;
    check_exact_with(3, 3, " --checkpoint-activations");
}

/* ---- the four stages are one training run -------------------------------------------- */

typedef struct {
    cJSON *json[4];
    double *params[4];
    size_t n;
} stage_runs;

static void run_all_stages(stage_runs *sr, int N, const char *extra) {
    for (int s = 0; s < 4; s++) {
        char json[128], dump[128];
        snprintf(json, sizeof json, "/tmp/zl_gst%d_%d_%d.json", s, N, getpid());
        snprintf(dump, sizeof dump, "/tmp/zl_gst%d_%d_%d.bin", s, N, getpid());
        zl_run_result r;
        zl_run(&r, "-n %d {%s} %s --steps 5 --quiet --json %s --dump-params %s%s", N, zl_progs[s], sh.flags, json,
               dump, extra);
        cr_assert_eq(r.exit_code, 0, "%s N=%d: %s", zl_progs[s], N, r.err);
        sr->json[s] = zl_load_json(json);
        sr->params[s] = zl_load_params(dump, &sr->n);
        unlink(json), unlink(dump);
    }
}

static double rel_diff(const double *a, const double *b, size_t n) {
    double d = 0, norm = 0;
    for (size_t i = 0; i < n; i++) d += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
    return sqrt(d / norm);
}

/* N = 1, 2: every sum has one order, so the hashes agree bit for bit; N = 3: 1e-3. */
static void check_stages(int N, int bitwise) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    stage_runs sr;
    run_all_stages(&sr, N, " --data " TEXT);
    for (int s = 1; s < 4; s++) {
        if (bitwise)
            cr_expect_str_eq(zl_get(sr.json[s], "param_hash")->valuestring,
                             zl_get(sr.json[0], "param_hash")->valuestring, "stage %d at N=%d", s, N);
        double rel = rel_diff(sr.params[s], sr.params[0], sr.n);
        cr_expect(rel <= 1e-3, "stage %d N=%d: |p - p_DDP|/|p_DDP| = %.3g", s, N, rel);
    }
    for (int s = 0; s < 4; s++) cJSON_Delete(sr.json[s]), free(sr.params[s]);
}
Test(gpt_equivalence, all_stages_bitwise_equal_N1) { check_stages(1, 1); }
Test(gpt_equivalence, all_stages_bitwise_equal_N2) { check_stages(2, 1); }
Test(gpt_equivalence, all_stages_bitwise_equal_N2_fused_attention) {
    sh = fused;
    check_stages(2, 1);
}
/* Units of different sizes, some odd, so padded at N = 2 (D = 33, T = 9): ZeRO-2/3 share two
 * gradient buckets between units, and
 * a smaller unit's padding once held a larger one's gradient, reduce-scattered into the last
 * rank's slice — stages 2 and 3 ended with another hash than 0 and 1 (clipping made the norm
 * show it). The padding is zeroed before each reduce-scatter now. */
Test(gpt_equivalence, all_stages_bitwise_equal_N2_padded_units_of_two_sizes) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    char hash[4][17];
    for (int s = 0; s < 4; s++) {
        cJSON *j = zl_run_json(0, "-n 2 {%s} --model gpt --layers 2 --dim 33 --heads 3 --seq 9 --batch 2 --steps 3 "
                                  "--clip-grad-norm 0.01 --check", zl_progs[s]);
        snprintf(hash[s], sizeof hash[s], "%s", zl_hash_of(j));
        cJSON_Delete(j);
    }
    for (int s = 1; s < 4; s++) cr_expect_str_eq(hash[s], hash[0], "%s against stage0_ddp", zl_progs[s]);
}
Test(gpt_equivalence, all_stages_close_N3) { check_stages(3, 0); }
Test(gpt_equivalence, all_stages_close_N4) { check_stages(4, 0); }

/* --checkpoint-activations recomputes each block in backward from the same inputs with the
 * same kernels: every stage trains bitwise the same, also when accumulating. */
Test(gpt_equivalence, checkpointing_is_bitwise_the_same_in_every_stage_N2_accum2) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    stage_runs plain, ckpt;
    run_all_stages(&plain, 2, " --accum 2");
    run_all_stages(&ckpt, 2, " --accum 2 --checkpoint-activations");
    for (int s = 0; s < 4; s++) {
        cr_expect_str_eq(zl_get(ckpt.json[s], "param_hash")->valuestring,
                         zl_get(plain.json[s], "param_hash")->valuestring, "%s", zl_progs[s]);
        cJSON_Delete(plain.json[s]), cJSON_Delete(ckpt.json[s]), free(plain.params[s]), free(ckpt.params[s]);
    }
}

/* N × K × B rows == N × 1 × K·B rows: accumulation sees the same rows (close, not bitwise:
 * the sums are split differently). Loss scale 4096 as below. */
Test(gpt_equivalence, accum2_equals_twice_the_rows_every_stage_N2) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    stage_runs acc, wide;
    run_all_stages(&acc, 2, " --batch 2 --accum 2 --loss-scale-init 4096");
    run_all_stages(&wide, 2, " --batch 4 --loss-scale-init 4096");
    for (int s = 0; s < 4; s++) {
        double rel = rel_diff(acc.params[s], wide.params[s], acc.n);
        cr_expect(rel <= 1e-3, "%s: |p_K2 - p_B4|/|p_B4| = %.3g", zl_progs[s], rel);
        /* the same step-1 gradient (the 1/K: Adam nearly undoes a gradient twice too large) */
        double na = cJSON_GetArrayItem(zl_get(acc.json[s], "grad_norm"), 0)->valuedouble;
        double nb = cJSON_GetArrayItem(zl_get(wide.json[s], "grad_norm"), 0)->valuedouble;
        cr_expect(fabs(na - nb) <= 1e-3 * nb, "%s: step-1 grad norm %.6g with K=2, %.6g with 4 rows", zl_progs[s], na,
                  nb);
        cr_expect_eq(cJSON_GetArraySize(zl_get(acc.json[s], "skipped_steps")), 0, "%s", zl_progs[s]);
        cJSON_Delete(acc.json[s]), cJSON_Delete(wide.json[s]), free(acc.params[s]), free(wide.params[s]);
    }
}

/* N ranks × B sequences see the same global batches as 1 rank × N·B. The loss scale starts
 * at 4096: at 65536 a rank's half-batch fp16 gradient of the embedding overflows in step 1
 * where the full batch's does not, and the skipped step (correct, but only on one side)
 * would be compared with a step taken. */
Test(gpt_equivalence, two_ranks_equal_one_rank_with_twice_the_rows) {
    char d1[128], d2[128], j1[128], j2[128];
    snprintf(d1, sizeof d1, "/tmp/zl_geq1_%d.bin", getpid()), snprintf(d2, sizeof d2, "/tmp/zl_geq2_%d.bin", getpid());
    snprintf(j1, sizeof j1, "/tmp/zl_geq1_%d.json", getpid()), snprintf(j2, sizeof j2, "/tmp/zl_geq2_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "-n 1 {stage0_ddp} --preset gpt-tiny --batch 8 --steps 5 --quiet --data " TEXT
               " --loss-scale-init 4096 --dump-params %s --json %s", d1, j1);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    zl_run(&r, "-n 2 {stage3} --preset gpt-tiny --batch 4 --steps 5 --quiet --data " TEXT
               " --loss-scale-init 4096 --dump-params %s --json %s", d2, j2);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    size_t n1, n2;
    double *p1 = zl_load_params(d1, &n1), *p2 = zl_load_params(d2, &n2);
    cr_assert_eq(n1, n2);
    cr_expect(rel_diff(p2, p1, n1) <= 1e-3, "|dp|/|p| = %.3g", rel_diff(p2, p1, n1));
    zl_expect_trained(d1, 1e-2, "-n 1 {stage0_ddp} --preset gpt-tiny --batch 8 --data " TEXT " --loss-scale-init 4096");
    cJSON *a = zl_load_json(j1), *b = zl_load_json(j2);
    for (int i = 0; i < 5; i++) {
        double la = cJSON_GetArrayItem(zl_get(a, "loss"), i)->valuedouble;
        double lb = cJSON_GetArrayItem(zl_get(b, "loss"), i)->valuedouble;
        cr_expect(fabs(la - lb) <= 1e-3 * fabs(la), "step %d loss %.6f vs %.6f", i + 1, la, lb);
    }
    free(p1), free(p2), cJSON_Delete(a), cJSON_Delete(b);
    unlink(d1), unlink(d2), unlink(j1), unlink(j2);
}

/* On the shipped text: mean of the last 3 of 30 steps below 80% of the first 3. */
Test(gpt_loss, falls_on_the_text_N2) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    char json[128];
    snprintf(json, sizeof json, "/tmp/zl_gloss_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} --preset gpt-tiny --steps 30 --lr 3e-3 --quiet --data " TEXT " --json %s", json);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = zl_load_json(json), *loss = zl_get(j, "loss");
    int n = cJSON_GetArraySize(loss);
    double first = 0, last = 0;
    for (int i = 0; i < 3; i++)
        first += cJSON_GetArrayItem(loss, i)->valuedouble / 3, last += cJSON_GetArrayItem(loss, n - 1 - i)->valuedouble / 3;
    cr_expect(last < 0.8 * first, "loss did not fall: first %.4f, last %.4f", first, last);
    cJSON_Delete(j);
    unlink(json);
}

/* ---- bad input --------------------------------------------------------------------------- */
static void expect_refused(const char *launch, const char *expect) {
    zl_run_result r;
    zl_run(&r, "%s", launch);
    cr_expect_eq(r.exit_code, 2, "'%s' exited %d, stderr: %s", launch, r.exit_code, r.err);
    cr_expect(strstr(r.err, expect) != NULL, "'%s': stderr '%s' lacks '%s'", launch, r.err, expect);
}

Test(gpt_bad_input, flags_exit_2) {
    expect_refused("-n 1 {stage0_ddp} --preset gpt-tiny --heads 3", "--heads: must divide --dim");
    expect_refused("-n 1 {stage1} --seq 16", "--seq: only --model gpt takes this flag");
    expect_refused("-n 1 {stage2} --model gpt2", "--model: expected mlp or gpt, got 'gpt2'");
    expect_refused("-n 1 {stage3} --model gpt --vocab 1", "--vocab: expected an integer in [2, 1048576]");
    /* a text's tokens are its bytes: under 256 they were folded modulo V into other text */
    expect_refused("-n 1 {stage2} --preset gpt-tiny --vocab 255 --data data/persuasion.txt",
                   "--data: its tokens are the text's bytes, 0..255: --vocab must be at least 256 (got 255)");
    expect_refused("-n 1 {stage3} --preset gpt-tiny --attention fused", "--attention fused: needs head dimension 64");
    expect_refused("-n 1 {stage3} --preset gpt2-124m --dtype bf16 --attention fused",
                   "--attention fused: fp16 only (got --dtype bf16)"); /* the head dimension is 64 here */
    expect_refused("-n 1 {stage1} --attention strided", "--attention: only --model gpt takes this flag");
    expect_refused("-n 1 {stage2} --preset gpt-tiny --attention flash", "--attention: expected strided or fused");
    expect_refused("-n 1 {stage2} --model gpt --dim 64 --heads 1 --seq 1 --batch 70000 --attention fused",
                   "--attention fused: --batch at most 65535");
}

/* ---- zerocalc --model gpt is the answer key: the program's measured numbers ---------------- */
/* K = 1 and 2; the checkpointed activations against a run with --checkpoint-activations */
static void check_zerocalc(int K, int ckpt) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    char json[128];
    snprintf(json, sizeof json, "/tmp/zl_gcalc_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "-n 2 {stage3} %s --steps 2 --quiet --accum %d --json %s%s", sh.flags, K, json,
           ckpt ? " --checkpoint-activations" : "");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *run = zl_load_json(json), *rk = cJSON_GetArrayItem(zl_get(run, "ranks"), 0);
    zl_run_plain(&r, "build/zerocalc --model gpt --layers %d --dim %d --heads %d --seq %d --vocab %d --batch %d "
                     "--accum %d --attention %s --ranks 2 --stage 3 --json", L, D, H, T, V, B, K,
                 sh.flash ? "fused" : "strided");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *calc = cJSON_Parse(r.out);
    cr_assert(calc, "zerocalc printed no JSON: %s", r.out);
    const char *act = ckpt ? "activations_checkpointed.total" : "activations.total";
    cr_expect_eq(zl_num(calc, act), zl_num(rk, "memory.measured.activations"));
    cr_expect_eq(zl_num(calc, "params"), zl_num(run, "params"));
    double wire = cJSON_GetObjectItem(cJSON_GetArrayItem(zl_get(calc, "stages"), 0), "wire_bytes_per_step_exact")->valuedouble;
    cr_expect_float_eq(wire, zl_num(rk, "comm.measured.wire_bytes_per_step"), 1e-9 * wire);
    cr_expect(zl_num(calc, "activations_checkpointed.total") < zl_num(calc, "activations.total"));
    cJSON_Delete(run), cJSON_Delete(calc);
    unlink(json);
}
Test(gpt_zerocalc, activations_and_zero3_traffic_match_the_program_N2) { check_zerocalc(1, 0); }
Test(gpt_zerocalc, accum2_checkpointed_match_the_program_N2) { check_zerocalc(2, 1); }
Test(gpt_zerocalc, fused_attention_matches_the_program_N2) {
    sh = fused;
    check_zerocalc(1, 0);
    check_zerocalc(2, 1);
}

/* A --data file that cannot be trained on is bad input: exit 2 before anything is allocated, one
 * line naming the file and why (it was a runtime error from the allocation, exit 1, with no errno). */
Test(gpt_bad_input, an_unusable_data_file_exits_2) {
    char empty[64], cases[3][80];
    snprintf(empty, sizeof empty, "/tmp/zl_empty_%d.txt", getpid());
    FILE *f = fopen(empty, "w");
    cr_assert(f);
    fputs("short", f);
    fclose(f);
    const char *why[3] = {"cannot open: No such file or directory", "5 bytes; it needs more than --seq 32",
                          "not a regular file"};
    snprintf(cases[0], sizeof cases[0], "/tmp/zl_missing_%d.txt", getpid());
    snprintf(cases[1], sizeof cases[1], "%s", empty);
    snprintf(cases[2], sizeof cases[2], "/tmp");
    for (int i = 0; i < 3; i++) {
        zl_run_result r;
        zl_run(&r, "-n 2 {stage2} --preset gpt-tiny --steps 1 --quiet --data %s", cases[i]);
        cr_expect_eq(r.exit_code, 2, "%s: exit %d: %s", cases[i], r.exit_code, r.err);
        cr_expect(strstr(r.err, cases[i]) && strstr(r.err, why[i]), "%s: '%s' lacks '%s'", cases[i], r.err, why[i]);
        cr_expect_eq(zl_program_lines(r.err, "stage2"), 1, "%s: not one line: %s", cases[i], r.err);
    }
    unlink(empty);
}
