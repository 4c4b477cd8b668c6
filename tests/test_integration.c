/* test_integration.c — the stage programs end to end, launched under mpiexec as child
 * processes: measured memory == formula to the byte for every category and rank,
 * measured wire bytes == formula, the loss falls, N ranks × B rows train the same model
 * as 1 rank × N·B rows, and every bad input exits 2 with a one-line message.
 *
 * ZL_BUILD selects build/cpu or build/cuda; ZL_MAX_WORLD (default 4) caps N (2 on a
 * two-GPU machine). */
#include "zl_test_util.h"

static int max_world(void) {
    const char *m = getenv("ZL_MAX_WORLD");
    return m && *m ? atoi(m) : 4;
}

static const char *const categories[] = {"params_fp16", "grads_fp16", "master_fp32", "adam_m",
                                         "adam_v", "grad_bucket", "param_gather", "activations",
                                         "scratch", "workspace", "host_staging", "model_states",
                                         "peak_total"};

/* Independent of the program: Ψ and Ψ_pad for L blocks of width D over N ranks. */
static void expected_sizes(int L, int D, int N, double *psi, double *psi_pad) {
    double n = 8.0 * D * D + 5.0 * D;
    *psi = L * n;
    *psi_pad = L * ceil(n / N) * N;
}

static void check_memory_and_traffic(const char *prog, int stage, int N, int L, int D, int B) {
    char json[128];
    snprintf(json, sizeof json, "/tmp/zl_it_%s_%d_%d.json", prog, N, getpid());
    zl_run_result r;
    zl_run(&r, "-n %d {%s} --layers %d --dim %d --batch %d --steps 3 --quiet --json %s", N, prog, L, D, B, json);
    cr_assert_eq(r.exit_code, 0, "%s N=%d failed (exit %d):\n%s\n%s", prog, N, r.exit_code, r.out, r.err);
    cJSON *j = zl_load_json(json);
    double psi, psi_pad;
    expected_sizes(L, D, N, &psi, &psi_pad);
    cr_assert_eq(zl_num(j, "stage"), stage);
    cr_assert_eq(zl_num(j, "world"), N);
    cr_assert_eq(zl_num(j, "params"), psi);
    cr_assert_eq(zl_num(j, "params_padded"), psi_pad);
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
        double states = stage == 0 ? 16 * psi_pad : 0;
        if (stage == 0) cr_expect_eq(zl_num(rk, "memory.formula.model_states"), states);
        cr_expect_float_eq(zl_num(rk, "memory.paper.model_states"), stage == 0 ? 16 * psi : 0, 1e-6);
        cr_expect_eq(zl_num(rk, "memory.allocations_in_step"), 0, "the step loop allocated");
        double wm = zl_num(rk, "comm.measured.wire_bytes_per_step");
        double wf = zl_num(rk, "comm.formula.wire_bytes_per_step");
        cr_expect_float_eq(wm, wf, 1e-9 * (1 + wf), "%s N=%d rank %d wire bytes %.0f vs formula %.0f", prog, N, rank,
                           wm, wf);
        if (stage == 0) cr_expect_float_eq(wf, 2.0 * (N - 1) / N * 2 * psi_pad, 1e-6);
    }
    cJSON_Delete(j);
    unlink(json);
}

/* D = 31 makes a block 7843 elements: padded differently for N = 2, 3, 4. */
Test(stage0, memory_and_traffic_exact_N1) { check_memory_and_traffic("stage0_ddp", 0, 1, 2, 31, 3); }
Test(stage0, memory_and_traffic_exact_N2) { check_memory_and_traffic("stage0_ddp", 0, 2, 2, 31, 3); }
Test(stage0, memory_and_traffic_exact_N3) {
    if (max_world() < 3) cr_skip_test("ZL_MAX_WORLD < 3");
    check_memory_and_traffic("stage0_ddp", 0, 3, 3, 31, 2);
}
Test(stage0, memory_and_traffic_exact_N4) {
    if (max_world() < 4) cr_skip_test("ZL_MAX_WORLD < 4");
    check_memory_and_traffic("stage0_ddp", 0, 4, 2, 31, 2);
}

Test(stage0, loss_falls) {
    char json[128];
    snprintf(json, sizeof json, "/tmp/zl_it_loss_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "-n 2 {stage0_ddp} --preset tiny --steps 20 --quiet --json %s", json);
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
    cr_expect(last < 0.85 * first, "loss did not fall: first %.5f, last %.5f", first, last);
    cr_expect(isfinite(last));
    cJSON_Delete(j);
    unlink(json);
}

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
    size_t n1, nN;
    double *p1 = zl_load_params(d1, &n1), *pN = zl_load_params(dN, &nN);
    cr_assert_eq(n1, nN);
    cJSON *a = zl_load_json(j1), *b = zl_load_json(jN);
    cr_assert_eq(n1, (size_t)zl_num(a, "params"), "the dump holds the unpadded vector");
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n1; i++) diff += (p1[i] - pN[i]) * (p1[i] - pN[i]), norm += p1[i] * p1[i];
    double rel = sqrt(diff / norm);
    cr_expect(norm > 0);
    cr_expect(rel <= 1e-3, "N=%d x B=%d vs N=1 x B=%d: |dp|/|p| = %.3g", N, B, N * B, rel);
    /* The initial parameters are identical, so something must have trained. */
    cr_expect(strcmp(zl_get(a, "param_hash")->valuestring, "cbf29ce484222325") != 0);
    for (int i = 0; i < 10; i++) {
        double la = cJSON_GetArrayItem(zl_get(a, "loss"), i)->valuedouble;
        double lb = cJSON_GetArrayItem(zl_get(b, "loss"), i)->valuedouble;
        cr_expect(fabs(la - lb) <= 1e-3 * fabs(la) + 1e-6, "step %d loss %.6f vs %.6f", i + 1, la, lb);
    }
    free(p1), free(pN);
    cJSON_Delete(a), cJSON_Delete(b);
    unlink(d1), unlink(dN), unlink(j1), unlink(jN);
}

Test(stage0, two_ranks_equal_one_rank_with_twice_the_rows) { check_equivalence(2, 4); }

Test(stage0, same_run_same_hash) {
    char a[128], b[128];
    snprintf(a, sizeof a, "/tmp/zl_det_a_%d.json", getpid());
    snprintf(b, sizeof b, "/tmp/zl_det_b_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "-n 2 {stage0_ddp} --steps 3 --quiet --json %s", a);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    zl_run(&r, "-n 2 {stage0_ddp} --steps 3 --quiet --json %s", b);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *ja = zl_load_json(a), *jb = zl_load_json(b);
    cr_expect_str_eq(zl_get(ja, "param_hash")->valuestring, zl_get(jb, "param_hash")->valuestring);
    cJSON_Delete(ja), cJSON_Delete(jb);
    unlink(a), unlink(b);
}

/* ---- bad input: exit 2, one line naming the flag, before anything is allocated ---- */

static void expect_refused(const char *launch, const char *expect) {
    zl_run_result r;
    zl_run(&r, "%s", launch);
    cr_expect_eq(r.exit_code, 2, "'%s' exited %d, stderr: %s", launch, r.exit_code, r.err);
    cr_expect(strstr(r.err, expect) != NULL, "'%s': stderr '%s' lacks '%s'", launch, r.err, expect);
    char *nl = strchr(r.err, '\n');
    cr_expect(nl && nl[1] == '\0', "'%s': expected exactly one line on stderr, got '%s'", launch, r.err);
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
