/* test_offload.c — ZeRO-Offload end to end (spawns mpiexec as a child): with --offload the
 * parameters come out bitwise those of the run without it (stage 2 and 3, N = 1 and 2, also
 * across skipped steps, clipping and accumulation); device and host memory and the
 * transfer bytes equal their formulas on every rank, N = 1..4, checked here against the
 * formulas written out from Ψ_pad and N alone; checkpoints save and resume through the host
 * buffers; the copies appear on the timeline's copy lane; the offload model's fields (device
 * work, host Adam, copies not overlapped, the predictions) are present and consistent with the
 * timeline and with Ψ_pad and N; with a static loss scale and no clipping host Adam runs in
 * the backward (same bits, and a diverged step leaves no checkpoint, hash or dump); stage 0 and 1 refuse
 * the flag. */
#include "zl_test_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <sched.h>




/* ---- bitwise: host Adam is the device Adam ------------------------------------------ */

/* The same run with and without --offload: the same parameters, bit for bit, and the same
 * skipped steps and loss scales. `extra` adds numerics flags. */
static void check_same_as_on_device(int stage, int N, const char *extra) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    const char *p = zl_progs[stage];
    cJSON *dev = zl_run_json(0, "-n %d {%s} --steps 6 %s", N, p, extra);
    cJSON *off = zl_run_json(0, "-n %d {%s} --steps 6 %s --offload --check", N, p, extra);
    cr_expect_str_eq(zl_hash_of(off), zl_hash_of(dev), "%s N=%d %s: --offload changed the parameters", p, N, extra);
    cr_expect_eq(cJSON_GetArraySize(zl_get(off, "skipped_steps")), cJSON_GetArraySize(zl_get(dev, "skipped_steps")));
    cJSON *sd = zl_get(dev, "loss_scale"), *so = zl_get(off, "loss_scale");
    for (int k = 0; k < 6; k++)
        cr_expect_eq(cJSON_GetArrayItem(so, k)->valuedouble, cJSON_GetArrayItem(sd, k)->valuedouble, "scale %d", k);
    cr_expect(cJSON_IsTrue(zl_get(off, "config.offload")));
    cr_expect(cJSON_IsTrue(zl_get(off, "check.ok")), "%s N=%d %s: --check", p, N, extra);
    cJSON_Delete(dev), cJSON_Delete(off);
}

/* Steps 2 and 4 overflow (injected) and are skipped; the gradient norm is clipped to 0.05,
 * below the tiny model's norms, so clipping acts on every applied step. */
#define NUMERICS "--inject-overflow 2,4 --clip-grad-norm 0.05"

#define BITWISE_TESTS(s)                                                                                    \
    Test(bitwise, stage##s##_N1) { check_same_as_on_device(s, 1, ""); }                                     \
    Test(bitwise, stage##s##_N2) { check_same_as_on_device(s, 2, ""); }                                     \
    Test(bitwise, stage##s##_N1_skips_and_clipping) { check_same_as_on_device(s, 1, NUMERICS); }            \
    Test(bitwise, stage##s##_N2_skips_and_clipping) { check_same_as_on_device(s, 2, NUMERICS); }            \
    Test(bitwise, stage##s##_N1_accum2) { check_same_as_on_device(s, 1, "--accum 2"); }                     \
    Test(bitwise, stage##s##_N2_accum2) { check_same_as_on_device(s, 2, "--accum 2"); }
BITWISE_TESTS(2)
BITWISE_TESTS(3)

/* The numerics flags above do something, else the tests above could not fail for them. */
Test(bitwise, the_numerics_flags_act) {
    cJSON *j = zl_run_json(0, "-n 2 {stage2} --steps 6 " NUMERICS " --offload");
    cr_expect_eq(cJSON_GetArraySize(zl_get(j, "skipped_steps")), 2);
    int clipped = 0;
    cJSON *norms = zl_get(j, "grad_norm");
    for (int k = 0; k < 6; k++) {
        cJSON *v = cJSON_GetArrayItem(norms, k);
        if (!cJSON_IsNull(v) && v->valuedouble > 0.05) clipped++;
    }
    cr_expect_eq(clipped, 4, "every applied step's norm is above the clip threshold (%d of 4)", clipped);
    cJSON *plain = zl_run_json(0, "-n 2 {stage2} --steps 6 --offload");
    cr_expect_str_neq(zl_hash_of(j), zl_hash_of(plain), "skips and clipping leave the parameters unchanged?");
    cJSON_Delete(j), cJSON_Delete(plain);
}

/* ---- host Adam before the verdict: a static loss scale, no clipping --------------------- */

/* The verdict can then only be "apply" or "stop" (numerics.h), so the stages start host Adam
 * in the backward, unit by unit; the parameters stay bit for bit the device Adam's. */
Test(early, stage2_N1_static_scale) { check_same_as_on_device(2, 1, "--loss-scale 1024"); }
Test(early, stage2_N2_static_scale) { check_same_as_on_device(2, 2, "--loss-scale 1024"); }
Test(early, stage3_N1_static_scale) { check_same_as_on_device(3, 1, "--loss-scale 1024"); }
Test(early, stage3_N2_static_scale) { check_same_as_on_device(3, 2, "--loss-scale 1024"); }
Test(early, stage2_N2_bf16) { check_same_as_on_device(2, 2, "--dtype bf16"); }
Test(early, stage3_N2_static_scale_accum2) { check_same_as_on_device(3, 2, "--loss-scale 1024 --accum 2"); }
/* GPT-2's tied embedding: its gradient is final only after its second use (the LM head's, first
 * in the backward, then the lookup's), and only then may its host Adam run */
Test(early, stage2_N2_gpt_tied_embedding) { check_same_as_on_device(2, 2, "--preset gpt-tiny --loss-scale 512"); }
Test(early, stage3_N2_gpt_tied_embedding) { check_same_as_on_device(3, 2, "--preset gpt-tiny --loss-scale 512"); }

/* The number of host Adam spans inside the last backward (zl_test_util.h) and the units, and
 * the JSON's word on where host Adam runs. Eight layers: on a GPU the first update's lead over
 * the backward's last unit is the six units' backward between them (below). */
static int optimizer_spans_in_last_backward(int stage, const char *extra, const char *beside, int *units) {
    char trace[96];
    snprintf(trace, sizeof trace, "/tmp/zl_offload_early_%d.json", getpid());
    cJSON *j = zl_run_json(0, "-n 2 {%s} --layers 8 --steps 3 --offload %s --trace %s", zl_progs[stage], extra, trace);
    cr_expect_str_eq(zl_get(j, "offload_model.host_adam_beside")->valuestring, beside, "%s", extra);
    int inside = zl_optimizer_spans_in_last_backward(trace);
    unlink(trace);
    *units = (int)zl_num(j, "units");
    cJSON_Delete(j);
    return inside;
}
/* Where the update waits for the verdict, no span starts before the backward's last unit: the
 * verdict comes after it. Where it does not, a unit's update starts once its gradients are on
 * the host. The CPU backend runs a rank's lanes in issue order, so that is before the next
 * unit's backward: every unit but unit 0 (the last to land). On a GPU the lanes run side by
 * side and a unit's update waits for its reduce-scatter, its copy down and the previous unit's
 * host function, while the compute lane goes on: on 4 × H100 (2026-11-27, eight layers) units
 * 7 to 2 or 3 started before unit 0's backward (unit 7 by 426–645 µs), units 1 and 0 after it.
 * Only the first to land (unit L − 1) is sure to, so there the test asks for that one. */
static void check_where_host_adam_runs(int stage) {
    int units;
    int early = optimizer_spans_in_last_backward(stage, "--loss-scale 1024", "backward", &units);
    if (zl_build_is_cuda())
        cr_expect_geq(early, 1, "static scale: the first unit's host Adam starts in the backward (%d)", early);
    else
        cr_expect_eq(early, units - 1, "static scale: all but the first unit's host Adam in the backward (%d of %d)",
                     early, units);
    int late = optimizer_spans_in_last_backward(stage, "", "next forward", &units);
    cr_expect_eq(late, 0, "dynamic scale: host Adam waits for the verdict");
    const char *clip = "--loss-scale 1024 --clip-grad-norm 1";
    int clipped = optimizer_spans_in_last_backward(stage, clip, "next forward", &units);
    cr_expect_eq(clipped, 0, "clipping: host Adam waits for the verdict's norm");
}
Test(early, stage2_host_adam_runs_in_the_backward) { check_where_host_adam_runs(2); }
Test(early, stage3_host_adam_runs_in_the_backward) { check_where_host_adam_runs(3); }

/* A step that diverges under a static scale stops training (exit 3) after its host Adam ran:
 * that step's checkpoint is not written (the last one is the step before, its state intact),
 * and --check holds: the formula counts that step's copies up, not its gathers. */
Test(early, a_diverged_step_writes_no_checkpoint) {
    char dir[128], cmd[160];
    snprintf(dir, sizeof dir, "/tmp/zl_offload_early_ckpt_%d", getpid());
    cJSON *j = zl_run_json(3, "-n 2 {stage2} --steps 4 --loss-scale 1024 --inject-overflow 3 --offload --check "
                              "--save %s --save-every 1", dir);
    cr_expect_str_eq(zl_get(j, "status")->valuestring, "diverged");
    cr_expect(cJSON_IsTrue(zl_get(j, "check.ok")), "--check on the diverged run");
    snprintf(cmd, sizeof cmd, "%s/manifest.json", dir);
    cJSON *m = zl_load_json(cmd);
    cr_expect_eq(zl_num(m, "step"), 2, "the last checkpoint is step 2's");
    cr_expect_eq(zl_num(m, "adam_step"), 2);
    cJSON *resumed = zl_run_json(0, "-n 2 {stage3} --steps 1 --loss-scale 1024 --resume %s", dir);
    cJSON *three = zl_run_json(0, "-n 2 {stage2} --steps 3 --loss-scale 1024");
    cr_expect_str_eq(zl_hash_of(resumed), zl_hash_of(three), "step 2's checkpoint + 1 step = 3 steps");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
    cJSON_Delete(j), cJSON_Delete(m), cJSON_Delete(resumed), cJSON_Delete(three);
}

/* ...and its parameters are no completed step's (host Adam applied the diverged step, and a copy
 * to undo it would cost 12Ψ/N of host memory): no param_hash (JSON null and a note saying why),
 * no --dump-params file, and --check holds without the hash's gathers (ZeRO-3). On the device
 * Adam waits for the verdict, so the same diverged run there ends with step 2's parameters. */
Test(early, a_diverged_step_leaves_no_hash_and_no_dump) {
    char dump[96];
    snprintf(dump, sizeof dump, "/tmp/zl_offload_early_dump_%d.bin", getpid());
    unlink(dump);
    cJSON *j = zl_run_json(3, "-n 2 {stage3} --steps 4 --loss-scale 1024 --inject-overflow 3 --offload --check "
                              "--dump-params %s", dump);
    cr_expect(cJSON_IsNull(zl_get(j, "param_hash")), "a hash of parameters no step completed");
    cr_expect(strstr(zl_get(j, "param_hash_note")->valuestring, "no completed step's"), "no note on why");
    cr_expect(cJSON_IsTrue(zl_get(j, "check.ok")), "--check on the diverged run");
    cr_expect(access(dump, F_OK) != 0, "the diverged run dumped parameters no step completed");
    cJSON *device = zl_run_json(3, "-n 2 {stage3} --steps 4 --loss-scale 1024 --inject-overflow 3");
    cJSON *two = zl_run_json(0, "-n 2 {stage3} --steps 2 --loss-scale 1024");
    cr_expect_str_eq(zl_hash_of(device), zl_hash_of(two), "device Adam: the diverged run keeps step 2's parameters");
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(device, "param_hash_note"));
    unlink(dump);
    cJSON_Delete(j), cJSON_Delete(device), cJSON_Delete(two);
}

/* ---- exactness: device, host and PCIe bytes from Ψ_pad and N ------------------------- */

/* --steps 4 with step 3 skipped: every step copies the gradient slices down (2Ψ_pad/N),
 * 3 of 4 copy the new parameter slices back. Written out here from the model's shape and N
 * (Ψ_pad counted here too), not taken from the program's formula module. */
static void check_exact(int stage, int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    const char *p = zl_progs[stage];
    cJSON *j = zl_run_json(0, "-n %d {%s} --steps 4 --inject-overflow 3 --offload --check", N, p);
    cJSON *dev = zl_run_json(0, "-n %d {%s} --steps 4 --inject-overflow 3", N, p);
    /* the default (tiny) model: L = 2 blocks of D = 32, each 8D² + 5D parameters, padded to a multiple of N */
    double units = 2, per_unit = 8 * 32 * 32 + 5 * 32, psi_pad = units * ceil(per_unit / N) * N;
    cr_expect_eq(zl_num(j, "units"), units, "%s N=%d: units", p, N);
    cr_expect_eq(zl_num(j, "params_padded"), psi_pad, "%s N=%d: Psi_pad", p, N);
    double shard = psi_pad / N, full = units * ceil(psi_pad / units / 8) * 8; /* Ψ_pad/N; Ψ_full: equal blocks */
    cr_expect_eq(zl_num(j, "params_full"), full, "%s N=%d: Psi_full", p, N);
    double device_states = stage == 2 ? 2 * full + 2 * shard : 4 * shard; /* full fp16 params, 16-byte lines */
    cr_expect(cJSON_IsTrue(zl_get(j, "check.ok")), "%s N=%d: --check", p, N);
    for (int r = 0; r < N; r++) {
        cJSON *rk = cJSON_GetArrayItem(zl_get(j, "ranks"), r);
        cJSON *rd = cJSON_GetArrayItem(zl_get(dev, "ranks"), r);
        const char *m = "memory.measured.";
        char key[96];
#define MEM(name) (snprintf(key, sizeof key, "%s%s", m, name), zl_num(rk, key))
        cr_expect_eq(MEM("model_states"), device_states, "%s N=%d rank %d: device model states", p, N, r);
        cr_expect_eq(MEM("master_fp32") + MEM("adam_m") + MEM("adam_v"), 0, "nothing of Adam on the device");
        cr_expect_eq(MEM("host_master_fp32"), 4 * shard, "%s N=%d rank %d", p, N, r);
        cr_expect_eq(MEM("host_adam_m"), 4 * shard);
        cr_expect_eq(MEM("host_adam_v"), 4 * shard);
        cr_expect_eq(MEM("host_states"), 12 * shard);
        cr_expect_eq(MEM("offload_staging"), 2 * shard);
#undef MEM
        /* the device saves exactly the optimizer state: 12Ψ_pad/N */
        cr_expect_eq(zl_num(rd, "memory.measured.peak_total") - zl_num(rk, "memory.measured.peak_total"), 12 * shard,
                     "%s N=%d rank %d: device peak falls by 12 Psi_pad/N", p, N, r);
        double d2h = 2 * shard, h2d = 2 * shard * 3.0 / 4.0; /* bytes per step: 16-bit slices */
        cr_expect_eq(zl_num(rk, "comm.measured.by_purpose.offload_grads"), d2h, "%s N=%d rank %d", p, N, r);
        cr_expect_eq(zl_num(rk, "comm.measured.by_purpose.offload_params"), h2d, "%s N=%d rank %d", p, N, r);
        cr_expect_eq(zl_num(rk, "comm.measured.transfer_bytes_per_step"), d2h + h2d);
        cr_expect_eq(zl_num(rk, "comm.measured.wire_bytes_per_step"), zl_num(rd, "comm.measured.wire_bytes_per_step"),
                     "copies are not network traffic");
    }
    cJSON_Delete(j), cJSON_Delete(dev);
}

#define EXACT_TESTS(s)                                                                                      \
    Test(exact, stage##s##_N1) { check_exact(s, 1); }                                                       \
    Test(exact, stage##s##_N2) { check_exact(s, 2); }                                                       \
    Test(exact, stage##s##_N3) { check_exact(s, 3); }                                                       \
    Test(exact, stage##s##_N4) { check_exact(s, 4); }
EXACT_TESTS(2)
EXACT_TESTS(3)

/* The summary line (make demo reads it) gives the paper's model states as the memory table does:
 * with --offload the device keeps 2Ψ + 2Ψ/N (ZeRO-2) or 4Ψ/N (ZeRO-3) and the host 12Ψ/N
 * (ZeRO-Offload); it printed the device-only run's figure once. Ψ from the JSON, the rest here. */
static void check_summary_paper(int stage) {
    zl_run_result r;
    char json[96];
    snprintf(json, sizeof json, "/tmp/zl_summary_%d_%d.json", getpid(), stage);
    zl_run(&r, "-n 2 {%s} --preset tiny --steps 2 --offload --json %s", zl_progs[stage], json);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = zl_load_json(json);
    unlink(json);
    double psi = zl_num(j, "params"), N = 2;
    double device = stage == 2 ? 2 * psi + 2 * psi / N : 4 * psi / N, host = 12 * psi / N;
    const char *line = strstr(r.out, "summary: ");
    cr_assert(line, "no summary line: %s", r.out);
    double states = -1, host_states = -1;
    const char *a = strstr(line, "states_paper="), *b = strstr(line, "host_states_paper=");
    if (a) sscanf(a, "states_paper=%lf", &states);
    if (b) sscanf(b, "host_states_paper=%lf", &host_states);
    cr_expect_eq(states, device, "stage %d: summary states_paper %.0f, paper's device states %.0f", stage, states, device);
    cr_expect_eq(host_states, host, "stage %d: summary host_states_paper %.0f, 12 Psi/N %.0f", stage, host_states, host);
    cr_expect_eq(zl_num(cJSON_GetArrayItem(zl_get(j, "ranks"), 0), "memory.paper.model_states"), device);
    cJSON_Delete(j);
}
Test(exact, the_summary_line_gives_the_tables_paper_states_stage2) { check_summary_paper(2); }
Test(exact, the_summary_line_gives_the_tables_paper_states_stage3) { check_summary_paper(3); }

/* A formula off by one byte in a host category fails --check with exit 4: the comparison
 * of the host lines is live. */
Test(exact, a_wrong_host_formula_fails_the_check) {
    setenv("ZL_TEST_PERTURB_FORMULA", "host_adam_v", 1);
    cJSON *j = zl_run_json(4, "-n 2 {stage3} --steps 2 --offload --check");
    unsetenv("ZL_TEST_PERTURB_FORMULA");
    cr_expect(!cJSON_IsTrue(zl_get(j, "check.ok")));
    cJSON_Delete(j);
}

/* ---- checkpoints, timeline, refusal ---------------------------------------------------- */

/* 4 steps straight == 2 steps saved with --offload + 2 resumed (with and without it, by the
 * other stage): the checkpoint carries the host master, m and v. */
Test(ckpt, save_and_resume_through_the_host_buffers) {
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/zl_offload_ckpt_%d", getpid());
    cJSON *straight = zl_run_json(0, "-n 2 {stage2} --steps 4 --offload");
    cJSON *saved = zl_run_json(0, "-n 2 {stage2} --steps 2 --offload --save %s", dir);
    cJSON *resumed = zl_run_json(0, "-n 2 {stage3} --steps 2 --offload --resume %s", dir);
    cJSON *on_device = zl_run_json(0, "-n 2 {stage2} --steps 2 --resume %s", dir);
    cr_expect_str_eq(zl_hash_of(resumed), zl_hash_of(straight), "stage3 --offload resumed from stage2 --offload");
    cr_expect_str_eq(zl_hash_of(on_device), zl_hash_of(straight), "stage2 (device Adam) resumed from --offload");
    zl_run_result r;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
    (void)r;
    cJSON_Delete(straight), cJSON_Delete(saved), cJSON_Delete(resumed), cJSON_Delete(on_device);
}

/* --trace: every unit's d2h and h2d copy of every timed step is a span on the copy lane, and
 * the bytes up are 2 per element of the rank's slices. */
Test(trace, the_copies_are_on_the_copy_lane) {
    char trace[96];
    snprintf(trace, sizeof trace, "/tmp/zl_offload_trace_%d.json", getpid());
    cJSON *j = zl_run_json(0, "-n 2 {stage3} --steps 3 --offload --trace %s", trace);
    cJSON *t = zl_load_json(trace);
    unlink(trace);
    cJSON *events = zl_get(t, "traceEvents");
    int d2h = 0, h2d = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, events) {
        cJSON *cat = cJSON_GetObjectItem(e, "cat"), *name = cJSON_GetObjectItem(e, "name");
        if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "copy")) continue;
        /* each direction on its own thread (2 down, 4 up): two streams, whose spans may overlap */
        int tid = (int)zl_num(e, "tid");
        if (!strncmp(name->valuestring, "copy_d2h", 8)) {
            d2h++;
            cr_expect_eq(tid, 2, "a copy down on tid %d", tid);
        }
        if (!strncmp(name->valuestring, "copy_h2d", 8)) {
            h2d++;
            cr_expect_eq(tid, 4, "a copy up on tid %d", tid);
        }
    }
    int units = (int)zl_num(j, "units"), timed = 2, ranks = 2;
    cr_expect_eq(d2h, units * timed * ranks, "d2h spans");
    cr_expect_eq(h2d, units * timed * ranks, "h2d spans");
    cJSON *rank0 = cJSON_GetArrayItem(zl_get(j, "ranks"), 0);
    cr_expect_eq(zl_num(rank0, "comm.measured.by_purpose.offload_params"), 2.0 * zl_num(j, "params_padded") / ranks,
                 "h2d bytes a step: 2 Psi_pad / N");
    cJSON_Delete(j), cJSON_Delete(t);
}

/* ---- the offload model ------------------------------------------------------------------- */

static double finite_nonneg(cJSON *o, const char *key, const char *where) {
    double v = zl_num(o, key);
    cr_expect(isfinite(v) && v >= 0, "%s: %s = %g", where, key, v);
    return v;
}

/* --steps 4, step 3 skipped: the timed steps 2..4 run host Adam twice. Every rank's model
 * (and the top level's, rank 0's) is built from its own timeline; the predictions are the
 * formulas of the parts; host Adam's bytes are 28 per element of the shard on applied steps,
 * written out here from Ψ_pad and N; its threads are this machine's processors / N. On the
 * CPU backend every lane runs on the rank's one thread, so the parts do not overlap: their
 * sum fits within the step's span, and the measured step is at least that sum. The pipelined
 * prediction (host Adam beside the next forward) lies between the two, its forward part of the
 * device's work. The report prints every number exactly (report.c, json_number), so each
 * relation between the parts is redone here bit for bit, in the program's order of operations. */
static void check_model(int stage, int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    const char *p = zl_progs[stage];
    cJSON *j = zl_run_json(0, "-n %d {%s} --steps 4 --inject-overflow 3 --offload", N, p);
    cJSON *plain = zl_run_json(0, "-n %d {%s} --steps 2", N, p);
    cr_expect(!cJSON_GetObjectItem(plain, "offload_model"), "without --offload: no offload_model");
    cr_expect(!cJSON_GetObjectItem(cJSON_GetArrayItem(zl_get(plain, "ranks"), 0), "offload_model"));
    double shard = zl_num(j, "params_padded") / N;
    cpu_set_t set;
    int procs = sched_getaffinity(0, sizeof set, &set) ? 1 : CPU_COUNT(&set), threads = procs / N > 0 ? procs / N : 1;
    int cpu = !strcmp(zl_get(j, "backend")->valuestring, "cpu");
    for (int r = 0; r < N; r++) {
        cJSON *rk = cJSON_GetArrayItem(zl_get(j, "ranks"), r), *m = zl_get(rk, "offload_model");
        char where[64];
        snprintf(where, sizeof where, "%s N=%d rank %d", p, N, r);
        double D = finite_nonneg(m, "device_ms", where), A = finite_nonneg(m, "host_adam_ms", where);
        double T = finite_nonneg(m, "transfers_not_overlapped_ms", where), P = finite_nonneg(m, "predicted_ms", where);
        double S = finite_nonneg(m, "serial_ms", where), M = finite_nonneg(m, "measured_ms", where);
        cr_expect_eq(D, zl_num(rk, "timeline.model_comm_busy_ms_per_step"), "%s: device = model + collectives", where);
        cr_expect_eq(A, zl_num(rk, "timeline.optimizer_ms_per_step"), "%s: host Adam = the optimizer spans", where);
        cr_expect_eq(T, zl_num(rk, "timeline.exposed_copy_ms_per_step"), "%s", where);
        cr_expect_eq(zl_num(m, "copy_busy_ms"), zl_num(rk, "timeline.copy_busy_ms_per_step"), "%s", where);
        cr_expect(D > 0 && A > 0 && zl_num(m, "copy_busy_ms") > 0, "%s: every part ran (D %g, A %g)", where, D, A);
        cr_expect(T <= zl_num(m, "copy_busy_ms") + 1e-9, "%s: exposed copies %g > copy busy", where, T);
        cr_expect_eq(P, fmax(D, A + T), "%s: predicted = max(D, A + T)", where);
        cr_expect_eq(S, D + A + T, "%s: serial = D + A + T", where);
        cr_expect_eq(M, zl_num(rk, "ms_per_step"), "%s: measured = ms_per_step", where);
        cr_expect_eq(zl_num(m, "measured_over_predicted"), M / P, "%s", where);
        cr_expect_eq(zl_num(m, "measured_over_serial"), M / S, "%s", where);
        /* pipelined: host Adam after the verdict, beside the next step's forward */
        double F = finite_nonneg(m, "forward_ms", where), Q = finite_nonneg(m, "pipelined_ms", where);
        cr_expect_eq(F, zl_num(rk, "timeline.forward_ms_per_step"), "%s: forward from the timeline", where);
        cr_expect(F > 0 && F < D, "%s: the forward is part of the device's work (F %g, D %g)", where, F, D);
        cr_expect_eq(Q, D - F + fmax(F, A + T), "%s: pipelined = D - F + max(F, A + T)", where);
        cr_expect_eq(zl_num(m, "measured_over_pipelined"), M / Q, "%s", where);
        cr_expect_eq(zl_num(m, "host_adam_bytes_per_step"), 28 * shard * 2.0 / 3.0, "%s: 28 B x shard, 2 of 3 "
                     "timed steps applied", where);
        cr_expect(fabs(zl_num(m, "host_adam_GBps") - 28 * shard * 2.0 / 3.0 / (A * 1e-3) / 1e9) <=
                  1e-9 * zl_num(m, "host_adam_GBps"), "%s", where);
        cr_expect_eq(zl_num(m, "host_adam_threads"), threads, "%s: %d processors / %d ranks", where, procs, N);
        if (cpu) {
            cr_expect(S <= zl_num(rk, "timeline.span_ms_per_step") + 1e-6, "%s: parts overlap on one thread? S %g, "
                      "span %g", where, S, zl_num(rk, "timeline.span_ms_per_step"));
            cr_expect(M >= S, "%s: measured %g < serial %g", where, M, S);
        }
    }
    cJSON *top = zl_get(j, "offload_model"), *m0 = zl_get(cJSON_GetArrayItem(zl_get(j, "ranks"), 0), "offload_model");
    const char *keys[] = {"device_ms", "host_adam_ms", "transfers_not_overlapped_ms", "predicted_ms", "serial_ms",
                          "measured_ms", "host_adam_GBps", "forward_ms", "pipelined_ms"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        cr_expect_eq(zl_num(top, keys[k]), zl_num(m0, keys[k]), "top-level offload_model.%s is rank 0's", keys[k]);
    cJSON_Delete(j), cJSON_Delete(plain);
}

Test(model, stage2_N2) { check_model(2, 2); }
Test(model, stage3_N2) { check_model(3, 2); }
Test(model, stage3_N1) { check_model(3, 1); }

/* The report prints the model beside the measurement, only with --offload. */
Test(model, printed_with_offload_only) {
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} --steps 3 --offload");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "offload model, rank 0, per step: device work") && strstr(r.out, "-> predicted max(") &&
                  strstr(r.out, "-> pipelined (host Adam waits for the verdict"),
              "%s", r.out);
    zl_run(&r, "-n 2 {stage2} --steps 3");
    cr_expect(!strstr(r.out, "offload model"), "without --offload");
}

Test(refuse, stage0_and_stage1_refuse_offload_by_name) {
    for (int stage = 0; stage < 2; stage++) {
        zl_run_result r;
        zl_run(&r, "-n 1 {%s} --offload", zl_progs[stage]);
        cr_expect_eq(r.exit_code, 2, "%s --offload: exit %d", zl_progs[stage], r.exit_code);
        cr_expect(strstr(r.err, "--offload: only stage2 and stage3 take this flag") != NULL, "%s: %s", zl_progs[stage],
                  r.err);
    }
}
