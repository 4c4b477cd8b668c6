/* test_ckpt.c — sharded checkpoints end to end (spawns mpiexec as a child): a run of S
 * steps equals S1 steps, saved, then resumed for S − S1 (param_hash, every stage, N = 1..4);
 * a checkpoint resumed by another stage and at another N; a job killed in the middle of
 * a save, or a run that diverges, leaves the previous checkpoint verifiable and loadable;
 * zlckpt inspect / verify / export; every kind of bad checkpoint refused with exit 2 and one line naming the file,
 * before training; the --save directory checked before training.
 *
 * ZL_BUILD picks build/cpu or build/cuda (zl_test_util.h); ZL_MAX_WORLD (default 4) caps N;
 * zlckpt is found next to the build directory (build/zlckpt). */
#include "zl_test_util.h" /* first: it defines _GNU_SOURCE */

#include <errno.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "zl_ref_bf16.h" /* ref_f2bf: the bf16 reference the unit tests check by hand */

static const char *const TINY = "--layers 2 --dim 31 --quiet"; /* units of 7843: padded differently for N = 2, 3, 4 */

/* The world the zlckpt and refusal tests save at: 3, where a unit's 7843 elements do not split
 * evenly, or 2 where ZL_MAX_WORLD is 2 (a two-GPU machine); they resume at N = 2. */
static int save_world(void) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    return zl_max_world() < 3 ? 2 : 3;
}


static void tmp_path(char *out, size_t n, const char *tag) { snprintf(out, n, "/tmp/zl_ck_%s_%d", tag, getpid()); }

static void rm_rf(const char *path) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.zl-tmp' '%s.zl-old' '%s.zl-lock'", path, path, path, path);
    cr_assert_eq(system(cmd), 0);
}

/* A run that must succeed; returns its param_hash (16 hex digits) in hash. */
static void run_ok(char hash[17], const char *fmt, ...) {
    char line[4096], json[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    snprintf(json, sizeof json, "/tmp/zl_ck_run_%d.json", getpid());
    zl_run_result r;
    zl_run(&r, "%s --json %s", line, json);
    cr_assert_eq(r.exit_code, 0, "'%s' failed (exit %d):\n%s\n%s", line, r.exit_code, r.out, r.err);
    cJSON *j = zl_load_json(json);
    snprintf(hash, 17, "%s", zl_get(j, "param_hash")->valuestring);
    /* the checkpoint staging is a tracked buffer like any other, and the loop allocated nothing */
    cJSON *rk = cJSON_GetArrayItem(zl_get(j, "ranks"), 0);
    cr_expect_eq(zl_num(rk, "memory.measured.ckpt_staging"), zl_num(rk, "memory.formula.ckpt_staging"));
    cr_expect_eq(zl_num(rk, "memory.allocations_in_step"), 0, "'%s': the step loop allocated", line);
    cJSON_Delete(j);
    unlink(json);
}

static cJSON *manifest_of(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    return zl_load_json(path);
}

/* ---- bitwise resume ----------------------------------------------------------------- */

/* S = 5 steps straight == 3 steps (saved at 2 by --save-every, then at 3, the last) + 2 resumed. */
static void check_resume_bitwise(int stage, int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    char dir[256], straight[17], resumed[17], unused[17];
    tmp_path(dir, sizeof dir, "bitwise");
    rm_rf(dir);
    const char *p = zl_progs[stage];
    run_ok(straight, "-n %d {%s} %s --batch 2 --steps 5", N, p, TINY);
    run_ok(unused, "-n %d {%s} %s --batch 2 --steps 3 --save %s --save-every 2", N, p, TINY, dir);
    cJSON *m = manifest_of(dir);
    cr_expect_eq(zl_num(m, "step"), 3);
    cr_expect_eq(zl_num(m, "adam_step"), 3);
    cr_expect_eq(zl_num(m, "data_rows"), 3 * N * 2);
    cr_expect_eq(zl_num(m, "world"), N);
    cr_expect_eq(zl_num(m, "stage"), stage);
    cr_expect_eq(cJSON_GetArraySize(zl_get(m, "categories")), stage == 3 ? 4 : 3);
    cJSON_Delete(m);
    run_ok(resumed, "-n %d {%s} %s --batch 2 --steps 2 --resume %s", N, p, TINY, dir);
    cr_expect_str_eq(resumed, straight, "%s N=%d: 3 + 2 resumed steps differ from 5 steps", p, N);
    rm_rf(dir);
}

#define RESUME_TESTS(s)                                                                                             \
    Test(resume, stage##s##_N1) { check_resume_bitwise(s, 1); }                                                     \
    Test(resume, stage##s##_N2) { check_resume_bitwise(s, 2); }                                                     \
    Test(resume, stage##s##_N3) { check_resume_bitwise(s, 3); }                                                     \
    Test(resume, stage##s##_N4) { check_resume_bitwise(s, 4); }
RESUME_TESTS(0)
RESUME_TESTS(1)
RESUME_TESTS(2)
RESUME_TESTS(3)

/* The loss scaler and Adam's step count cross the boundary too: a step skipped on overflow
 * just before the save (Adam's t stays 2 after 3 steps, the scale is halved) and one after
 * it, with a doubling window of 2 and 2 micro-batches per step, resume bit for bit. The
 * resumed run counts its own steps: its step 2 is global step 5. */
static void check_resume_with_skips(int stage, int N) {
    if (zl_max_world() < N) cr_skip_test("ZL_MAX_WORLD < %d", N);
    char dir[256], straight[17], resumed[17], unused[17];
    tmp_path(dir, sizeof dir, "skips");
    rm_rf(dir);
    const char *p = zl_progs[stage], *common = "--batch 2 --accum 2 --loss-scale-window 2";
    run_ok(straight, "-n %d {%s} %s %s --steps 6 --inject-overflow 3,5", N, p, TINY, common);
    run_ok(unused, "-n %d {%s} %s %s --steps 3 --inject-overflow 3 --save %s", N, p, TINY, common, dir);
    cJSON *m = manifest_of(dir);
    cr_expect_eq(zl_num(m, "step"), 3);
    cr_expect_eq(zl_num(m, "adam_step"), 2, "the skipped step 3 did not count for Adam");
    cr_expect_eq(zl_num(m, "data_rows"), 3 * N * 2 * 2, "N·K·B rows per step");
    cr_expect_eq(zl_num(m, "loss_scaler.skipped"), 1);
    cr_expect_eq(zl_num(m, "loss_scaler.scale"), 65536.0 * 2 / 2, "doubled after steps 1-2, halved at 3");
    cJSON_Delete(m);
    run_ok(resumed, "-n %d {%s} %s %s --steps 3 --inject-overflow 2 --resume %s", N, p, TINY, common, dir);
    cr_expect_str_eq(resumed, straight, "%s N=%d: skipped steps and the scaler did not survive the resume", p, N);
    rm_rf(dir);
}
/* The scaler's clean-step count crosses too, saved where it is not 0: with a window of 2 the
 * scale doubles after steps 2 and 4, so a save after step 3 holds clean_steps 1, and the resumed
 * run's scales are the straight run's steps 4..6. (param_hash cannot show it: power-of-two scales
 * leave every update bitwise the same; a resume that dropped the count doubled one step late.) */
Test(resume, the_scalers_clean_steps_cross_the_resume) {
    char dir[256];
    tmp_path(dir, sizeof dir, "clean");
    rm_rf(dir);
    const char *common = "--layers 2 --dim 31 --loss-scale-window 2";
    cJSON *straight = zl_run_json(0, "-n 2 {stage2} %s --steps 6", common);
    cJSON *saved = zl_run_json(0, "-n 2 {stage2} %s --steps 3 --save %s", common, dir);
    cJSON *m = manifest_of(dir);
    cr_expect_eq(zl_num(m, "loss_scaler.clean_steps"), 1, "one clean step since the doubling after step 2");
    cr_expect_eq(zl_num(m, "loss_scaler.scale"), 131072);
    cJSON *resumed = zl_run_json(0, "-n 2 {stage2} %s --steps 3 --resume %s", common, dir);
    for (int i = 0; i < 3; i++) {
        double a = cJSON_GetArrayItem(zl_get(straight, "loss_scale"), 3 + i)->valuedouble;
        double b = cJSON_GetArrayItem(zl_get(resumed, "loss_scale"), i)->valuedouble;
        cr_expect_eq(b, a, "global step %d: resumed scale %g, straight %g", 4 + i, b, a);
    }
    cJSON_Delete(straight), cJSON_Delete(saved), cJSON_Delete(m), cJSON_Delete(resumed);
    rm_rf(dir);
}
Test(resume, scaler_and_skipped_steps_stage0_N2) { check_resume_with_skips(0, 2); }
Test(resume, scaler_and_skipped_steps_stage1_N3) { check_resume_with_skips(1, 3); }
Test(resume, scaler_and_skipped_steps_stage2_N2) { check_resume_with_skips(2, 2); }
Test(resume, scaler_and_skipped_steps_stage3_N1) { check_resume_with_skips(3, 1); }

/* A run that diverges writes no checkpoint: neither at its last step nor at a --save-every
 * multiple, with a dynamic scale (whose state after divergence, a scale below 1, no scaler
 * can hold: such a manifest was written and then refused by verify and --resume) or a static
 * one (the step's state was saved under its number, as if skipped). The good checkpoint in DIR
 * stays byte for byte, verifies and resumes; stderr says nothing was saved. */
static void check_divergence_keeps_checkpoint(int stage, const char *scale, const char *resume_scale) {
    char dir[256], copy[300], unused[17], cmd[1200];
    tmp_path(dir, sizeof dir, "diverged");
    snprintf(copy, sizeof copy, "%s_good", dir);
    rm_rf(dir), rm_rf(copy);
    const char *p = zl_progs[stage];
    run_ok(unused, "-n 2 {%s} %s --batch 2 --steps 2 %s --save %s", p, TINY, scale, dir);
    snprintf(cmd, sizeof cmd, "cp -a %s %s", dir, copy);
    cr_assert_eq(system(cmd), 0);
    /* global step 4 diverges: the last step, then a --save-every 2 multiple mid-run */
    const char *const ways[2] = {"--steps 2", "--steps 3 --save-every 2"};
    for (int w = 0; w < 2; w++) {
        zl_run_result r;
        zl_run(&r, "-n 2 {%s} %s --batch 2 %s %s --resume %s --save %s --inject-overflow 2", p, TINY, ways[w],
               resume_scale, dir, dir);
        cr_expect_eq(r.exit_code, 3, "%s %s %s: exit %d: %s", p, scale, ways[w], r.exit_code, r.err);
        cr_expect(strstr(r.err, "nothing saved at the diverged step"), "%s %s %s: '%s'", p, scale, ways[w], r.err);
        snprintf(cmd, sizeof cmd, "diff -r %s %s >/dev/null", dir, copy);
        cr_expect_eq(system(cmd), 0, "%s %s %s: the diverged run replaced the checkpoint", p, scale, ways[w]);
        zl_run_plain(&r, "%s/../zlckpt verify %s", zl_build_dir(), dir);
        cr_expect_eq(r.exit_code, 0, "%s %s %s: verify: %s", p, scale, ways[w], r.err);
        snprintf(cmd, sizeof cmd, "rm -rf %s && cp -a %s %s", dir, copy, dir); /* the next way starts whole */
        cr_assert_eq(system(cmd), 0);
    }
    run_ok(unused, "-n 2 {%s} %s --batch 2 --steps 1 %s --resume %s", p, TINY, resume_scale, dir);
    rm_rf(dir), rm_rf(copy);
}
#define DIVERGED_TESTS(s)                                                                                           \
    Test(diverged, stage##s##_dynamic_scale_keeps_the_checkpoint) {                                                 \
        check_divergence_keeps_checkpoint(s, "--loss-scale-init 1", "");                                            \
    }                                                                                                               \
    Test(diverged, stage##s##_static_scale_keeps_the_checkpoint) {                                                  \
        check_divergence_keeps_checkpoint(s, "--loss-scale 1024", "--loss-scale 1024");                             \
    }
DIVERGED_TESTS(0)
DIVERGED_TESTS(1)
DIVERGED_TESTS(2)
DIVERGED_TESTS(3)

/* The transformer too: its manifest names the model (kind gpt, T, H, V beside L and D), and 2
 * steps saved by ZeRO-2 then 2 resumed by ZeRO-3 equal 4 steps of ZeRO-3 (the stages are bitwise
 * equal without accumulation). A GPT checkpoint was once written as the MLP's and refused on
 * resume. */
Test(resume, gpt_saved_by_stage2_resumed_by_stage3) {
    int N = zl_max_world() < 2 ? 1 : 2;
    char dir[256], straight[17], resumed[17], unused[17];
    tmp_path(dir, sizeof dir, "gpt");
    rm_rf(dir);
    const char *gpt = "--preset gpt-tiny --quiet";
    run_ok(straight, "-n %d {stage3} %s --steps 4", N, gpt);
    run_ok(unused, "-n %d {stage2} %s --steps 2 --save %s", N, gpt, dir);
    cJSON *m = manifest_of(dir);
    cr_expect_str_eq(zl_get(m, "model.kind")->valuestring, "gpt");
    cr_expect(zl_num(m, "model.seq") == 32 && zl_num(m, "model.heads") == 2 && zl_num(m, "model.vocab") == 256);
    cJSON_Delete(m);
    run_ok(resumed, "-n %d {stage3} %s --steps 2 --resume %s", N, gpt, dir);
    cr_expect_str_eq(resumed, straight, "GPT N=%d: 2 saved + 2 resumed steps differ from 4 steps", N);
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt inspect %s", zl_build_dir(), dir);
    cr_expect(r.exit_code == 0 && strstr(r.out, "gpt with L = 2, D = 32, T = 32, H = 2, V = 256"), "%d: %s",
              r.exit_code, r.out);
    zl_run(&r, "-n %d {stage3} %s --heads 4 --steps 1 --resume %s", N, gpt, dir);
    cr_expect_eq(r.exit_code, 2, "another head count resumed: exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "H = 2, V = 256; this run has the gpt with L = 2, D = 32, T = 32, H = 4"), "%s", r.err);
    rm_rf(dir);
}

/* The GPT's data stream is the seed's walk over its --data text: a resume that read another text,
 * or none, continued from the same row of other data and exited 0. The manifest records the text
 * (its size and XXH3-64, or "synthetic"); the same text resumes bit for bit, another is refused. */
Test(resume, a_gpt_resumes_on_its_own_data_only) {
    int N = zl_max_world() < 2 ? 1 : 2;
    char dir[256], synth[256], other[256], straight[17], resumed[17], unused[17], cmd[700];
    tmp_path(dir, sizeof dir, "gptdata");
    tmp_path(synth, sizeof synth, "gptsynth");
    tmp_path(other, sizeof other, "other.txt");
    rm_rf(dir), rm_rf(synth);
    const char *gpt = "--preset gpt-tiny --quiet --data data/persuasion.txt";
    run_ok(straight, "-n %d {stage1} %s --steps 4", N, gpt);
    run_ok(unused, "-n %d {stage1} %s --steps 2 --save %s", N, gpt, dir);
    struct stat st;
    cr_assert_eq(stat("data/persuasion.txt", &st), 0);
    cJSON *m = manifest_of(dir);
    cr_expect(zl_num(m, "data.bytes") == (double)st.st_size, "data.bytes %.0f, the text has %lld",
              zl_num(m, "data.bytes"), (long long)st.st_size);
    cr_expect(zl_get(m, "data.xxh3_64") && strlen(zl_get(m, "data.xxh3_64")->valuestring) == 16);
    cJSON_Delete(m);
    /* the same text by another path: the bytes decide, not the name */
    run_ok(resumed, "-n %d {stage2} --preset gpt-tiny --quiet --data ./data/../data/persuasion.txt --steps 2 --resume %s",
           N, dir);
    cr_expect_str_eq(resumed, straight, "GPT on a text, N=%d: 2 saved + 2 resumed steps differ from 4 steps", N);
    zl_run_result r;
    char want[96];
    snprintf(want, sizeof want, "data        a --data text of %lld bytes, XXH3-64 ", (long long)st.st_size);
    zl_run_plain(&r, "%s/../zlckpt inspect %s", zl_build_dir(), dir);
    cr_expect(r.exit_code == 0 && strstr(r.out, want), "zlckpt inspect: %d: %s", r.exit_code, r.out);
    snprintf(cmd, sizeof cmd, "head -c 5000 data/persuasion.txt > %s", other);
    cr_assert_eq(system(cmd), 0);
    static const struct {
        const char *flags, *why;
    } bad[] = {{"", "this run reads the synthetic token stream without --data (give --data the same text"},
               {"--data %s", "of 5000 bytes, XXH3-64 "}};
    for (int i = 0; i < 2; i++) {
        char flags[400];
        snprintf(flags, sizeof flags, bad[i].flags, other);
        zl_run(&r, "-n %d {stage1} --preset gpt-tiny --quiet %s --steps 1 --resume %s", N, flags, dir);
        cr_expect_eq(r.exit_code, 2, "'%s': exit %d: %s", flags, r.exit_code, r.err);
        cr_expect(strstr(r.err, "trained on a --data text of") && strstr(r.err, bad[i].why), "'%s': %s", flags, r.err);
        cr_expect_eq(zl_program_lines(r.err, "stage1"), 1, "'%s': not one line: %s", flags, r.err);
    }
    run_ok(unused, "-n %d {stage1} --preset gpt-tiny --quiet --steps 1 --save %s", N, synth);
    m = manifest_of(synth);
    cr_expect(zl_get(m, "data") && cJSON_IsString(zl_get(m, "data")) &&
              !strcmp(zl_get(m, "data")->valuestring, "synthetic"));
    cJSON_Delete(m);
    zl_run(&r, "-n %d {stage1} --preset gpt-tiny --quiet --data %s --steps 1 --resume %s", N, other, synth);
    cr_expect(r.exit_code == 2 && strstr(r.err, "trained on the synthetic token stream") &&
              strstr(r.err, "(drop --data to continue it)"), "exit %d: %s", r.exit_code, r.err);
    rm_rf(dir), rm_rf(synth), unlink(other);
}

/* ---- reshard ------------------------------------------------------------------------ */

/* A checkpoint saved by `from` after `saved` steps at from_n ranks (from_b rows each), continued
 * by `to` at to_n ranks (to_b rows each, the same rows a step) to `steps` in all, against `to`
 * run from the start: the same data and the same updates, so the parameters agree to 1e-3; only
 * the order of the per-step sums before the save differs. Says whether they agree bitwise. */
static void check_continued_at_another_n(const char *from, int from_n, int from_b, const char *to, int to_n,
                                         int to_b, int saved, int steps) {
    char dir[256], a[17], b[17], unused[17], dump_a[128], dump_b[128];
    tmp_path(dir, sizeof dir, "reshard");
    rm_rf(dir);
    snprintf(dump_a, sizeof dump_a, "/tmp/zl_ck_dump_a_%d", getpid());
    snprintf(dump_b, sizeof dump_b, "/tmp/zl_ck_dump_b_%d", getpid());
    run_ok(a, "-n %d {%s} %s --batch %d --steps %d --dump-params %s", to_n, to, TINY, to_b, steps, dump_a);
    run_ok(unused, "-n %d {%s} %s --batch %d --steps %d --save %s", from_n, from, TINY, from_b, saved, dir);
    run_ok(b, "-n %d {%s} %s --batch %d --steps %d --resume %s --dump-params %s", to_n, to, TINY, to_b, steps - saved,
           dir, dump_b);
    double rel = zl_param_relative_diff(dump_b, dump_a, NULL);
    cr_expect(rel <= 1e-3, "|p - p_N%d| / |p_N%d| = %.3g", to_n, to_n, rel);
    printf("reshard %s N=%d -> %s N=%d: relative difference %.3g (%s)\n", from, from_n, to, to_n, rel,
           strcmp(a, b) ? "not bitwise: other sum order" : "bitwise");
    unlink(dump_a), unlink(dump_b);
    rm_rf(dir);
}

/* ZeRO-3 at N = 3 (B = 2) continued by ZeRO-1 at N = 2 (B = 3): another stage and another N. */
Test(reshard, stage3_N3_continued_as_stage1_N2) {
    if (zl_max_world() < 3) cr_skip_test("ZL_MAX_WORLD < 3");
    check_continued_at_another_n("stage3", 3, 2, "stage1", 2, 3, 3, 6);
}

/* Another stage at the same N and B: the sums are the same, so the result is bitwise. */
static void check_other_stage_bitwise(int from, int to, int N) {
    char dir[256], straight[17], resumed[17], unused[17];
    tmp_path(dir, sizeof dir, "xstage");
    rm_rf(dir);
    run_ok(straight, "-n %d {%s} %s --batch 2 --steps 4", N, zl_progs[to], TINY);
    run_ok(unused, "-n %d {%s} %s --batch 2 --steps 2 --save %s", N, zl_progs[from], TINY, dir);
    run_ok(resumed, "-n %d {%s} %s --batch 2 --steps 2 --resume %s", N, zl_progs[to], TINY, dir);
    cr_expect_str_eq(resumed, straight, "%s -> %s at N=%d", zl_progs[from], zl_progs[to], N);
    rm_rf(dir);
}
Test(reshard, stage3_to_stage1_same_N_bitwise) { check_other_stage_bitwise(3, 1, 2); }
Test(reshard, stage0_to_stage3_same_N_bitwise) { check_other_stage_bitwise(0, 3, 2); }
Test(reshard, stage2_to_stage0_same_N_bitwise) { check_other_stage_bitwise(2, 0, 2); }

/* The "checkpoint: resumed ..." line counts the bytes read from the checkpoint's files: a
 * ZeRO-2 rank at N = 2 reads its slices of master, m, v (3 x 4 B x 3922 elements of each of
 * the two units of 7843 on rank 0, 3921 on rank 1) and, for its full fp16 copy, the whole
 * unpadded vector (Ψ = 15686): the checkpoint's params (2 B an element) where it has them
 * (stage 3), else the master again (4 B), rounded. The master read a second time was left out,
 * and padding counted. */
static void expect_resume_bytes(const char *saver, double params_bytes) {
    char dir[256], unused[17];
    tmp_path(dir, sizeof dir, "readcount");
    rm_rf(dir);
    const double psi = 2 * 7843.0, rank0_slices = 2 * 3922.0;
    run_ok(unused, "-n 2 {%s} %s --batch 2 --steps 1 --save %s", saver, TINY, dir);
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} %s --batch 2 --steps 1 --resume %s", TINY, dir);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    const char *line = strstr(r.out, "checkpoint: resumed step 1 from "), *at = line ? strstr(line, dir) : NULL;
    double rank0 = -1, all = -1;
    cr_assert(at && sscanf(at + strlen(dir), ": %lf bytes on rank 0, %lf in all", &rank0, &all) == 2,
              "no resumed line: %s", r.out);
    cr_expect_eq(rank0, 3 * 4 * rank0_slices + params_bytes * psi, "from %s: rank 0 read %.0f bytes", saver, rank0);
    cr_expect_eq(all, 3 * 4 * psi + 2 * params_bytes * psi, "from %s: %.0f bytes in all", saver, all);
    rm_rf(dir);
}
Test(reshard, the_resumed_line_counts_the_master_read_for_the_params) { expect_resume_bytes("stage2", 4); }
Test(reshard, the_resumed_line_counts_the_params_read) { expect_resume_bytes("stage3", 2); }

/* N = 4 -> N = 2 with the global batch kept (the lab in docs/labs.md). */
Test(reshard, stage3_N4_continued_as_stage3_N2) {
    if (zl_max_world() < 4) cr_skip_test("ZL_MAX_WORLD < 4");
    check_continued_at_another_n("stage3", 4, 2, "stage3", 2, 4, 2, 4);
}

/* ---- killed in the middle of a save ------------------------------------------------ */

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* A file of someone else's: path holding text. */
static void write_foreign_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot create %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* A save that outlasts --timeout (held 15 s by the test hook, as a slow disk would; --timeout 6,
 * above a GPU's start-up under load, which counts too) is named as
 * what it is, not as a collective that never completed: the watchdog's line says the rank was
 * writing its checkpoint file. (A disk that keeps writing moves the progress mark each chunk.) */
Test(atomic, a_save_past_the_timeout_is_named_as_a_save, .timeout = 60) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    char dir[256];
    tmp_path(dir, sizeof dir, "slow");
    rm_rf(dir);
    setenv("ZL_CKPT_TEST_SLEEP_MS", "15000", 1);
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} %s --batch 2 --steps 2 --timeout 6 --save %s", TINY, dir);
    unsetenv("ZL_CKPT_TEST_SLEEP_MS");
    cr_expect_eq(r.exit_code, 5, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "in step 2 while writing its checkpoint file (--timeout 6)"), "%s", r.err);
    rm_rf(dir);
}

Test(atomic, a_save_killed_midway_leaves_the_previous_checkpoint, .timeout = 120) {
    char dir[256], straight[17], resumed[17], unused[17], probe[300];
    tmp_path(dir, sizeof dir, "kill");
    rm_rf(dir);
    run_ok(unused, "-n 2 {stage2} %s --batch 2 --steps 2 --save %s", TINY, dir);
    /* The second job saves at step 4 and is held between its rank files and the manifest. */
    char line[1024];
    snprintf(line, sizeof line, "timeout 60 %s -n 2 %s/stage2 %s --batch 2 --steps 4 --save %s",
             getenv("ZL_MPIEXEC") && *getenv("ZL_MPIEXEC") ? getenv("ZL_MPIEXEC") : "mpiexec", zl_build_dir(), TINY,
             dir);
    char *argv[64];
    int argc = 0;
    for (char *tok = strtok(line, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    setenv("ZL_CKPT_TEST_SLEEP_MS", "20000", 1);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP); /* its own group: the kill reaches every rank */
    posix_spawnattr_setpgroup(&at, 0);
    pid_t pid;
    cr_assert_eq(posix_spawnp(&pid, argv[0], NULL, &at, argv, environ), 0);
    unsetenv("ZL_CKPT_TEST_SLEEP_MS");
    snprintf(probe, sizeof probe, "%s.zl-tmp/rank-00001.bin", dir);
    for (int i = 0; i < 600 && !exists(probe); i++) usleep(50000);
    cr_assert(exists(probe), "the second save never started");
    usleep(200000);
    kill(-pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    usleep(200000);
    /* DIR: still the step-2 checkpoint, whole */
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt verify %s", zl_build_dir(), dir);
    cr_expect_eq(r.exit_code, 0, "verify after the kill: %s%s", r.out, r.err);
    cJSON *m = manifest_of(dir);
    cr_expect_eq(zl_num(m, "step"), 2);
    cJSON_Delete(m);
    cr_expect(exists(probe), "the killed save's files should still sit in DIR.zl-tmp");
    /* it loads, and training continues as if nothing happened */
    run_ok(straight, "-n 2 {stage2} %s --batch 2 --steps 4", TINY);
    run_ok(resumed, "-n 2 {stage2} %s --batch 2 --steps 2 --resume %s", TINY, dir);
    cr_expect_str_eq(resumed, straight);
    /* and the next save clears the leftovers and replaces DIR */
    run_ok(unused, "-n 2 {stage2} %s --batch 2 --steps 3 --save %s", TINY, dir);
    m = manifest_of(dir);
    cr_expect_eq(zl_num(m, "step"), 3);
    cJSON_Delete(m);
    cr_expect(!exists(probe), "DIR.zl-tmp left behind after a good save");
    rm_rf(dir);
}

/* ---- zlckpt ----------------------------------------------------------------------- */

static long size_of(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

Test(zlckpt, inspect_verify_export) {
    char dir[256], dump[128], e16[128], e32[128], ebf[128], unused[17];
    tmp_path(dir, sizeof dir, "tool");
    rm_rf(dir);
    snprintf(dump, sizeof dump, "/tmp/zl_ck_tool_dump_%d", getpid());
    snprintf(e16, sizeof e16, "/tmp/zl_ck_e16_%d", getpid());
    snprintf(e32, sizeof e32, "/tmp/zl_ck_e32_%d", getpid());
    snprintf(ebf, sizeof ebf, "/tmp/zl_ck_ebf_%d", getpid());
    int N = save_world();
    run_ok(unused, "-n %d {stage3} %s --batch 2 --steps 3 --save %s --dump-params %s", N, TINY, dir, dump);
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt inspect %s", zl_build_dir(), dir);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    /* 2 units of 7843 -> slices of 2615 at N = 3 (3922 at N = 2); a rank's file holds its two
     * slices S as fp32 master, m and v and fp16 params: 3·4·S + 2·S bytes (73220 at N = 3) */
    long S = 2 * ((7843 + N - 1) / N);
    char at[32], master[48], params[48], file[48];
    snprintf(at, sizeof at, "stage3 at N = %d", N);
    snprintf(master, sizeof master, "master_fp32 %ld B", 4 * S);
    snprintf(params, sizeof params, "params %ld B", 2 * S);
    snprintf(file, sizeof file, "= %ld B per file", 14 * S);
    cr_expect(strstr(r.out, at) && strstr(r.out, "step 3") && strstr(r.out, "15686 params"), "%s", r.out);
    cr_expect(strstr(r.out, master) && strstr(r.out, params) && strstr(r.out, file), "%s lacks %s, %s or %s", r.out,
              master, params, file);
    zl_run_plain(&r, "%s/../zlckpt verify %s", zl_build_dir(), dir);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "ok: "), "%s", r.out);
    /* export fp16 == the run's own fp16 params (Adam writes param = fp16(master)) */
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s --dtype fp16", zl_build_dir(), dir, e16);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    char cmp[600];
    snprintf(cmp, sizeof cmp, "cmp -s %s %s", dump, e16);
    cr_expect_eq(system(cmp), 0, "export --dtype fp16 differs from --dump-params");
    /* export fp32: the master itself; each value rounds to the fp16 param and sits within half an fp16 ulp */
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s", zl_build_dir(), dir, e32);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect_eq(size_of(e32), 4 * 15686);
    size_t n;
    double *p16 = zl_load_params(dump, &n);
    FILE *f = fopen(e32, "rb");
    float *p32 = malloc(n * sizeof(float));
    cr_assert_eq(fread(p32, sizeof(float), n, f), n);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs((double)p32[i] - p16[i]) <= fabs(p16[i]) * 0x1p-11 + 0x1p-25, "element %zu: %g vs %g", i,
                  (double)p32[i], p16[i]);
    free(p16);
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s --dtype bf16", zl_build_dir(), dir, ebf);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect_eq(size_of(ebf), 2 * 15686);
    /* export bf16: each value the master's, rounded to nearest even */
    unsigned short *pbf = malloc(n * sizeof *pbf);
    f = fopen(ebf, "rb");
    cr_assert(f && fread(pbf, 2, n, f) == n);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(pbf[i], ref_f2bf(p32[i]), "element %zu: bf16 0x%04x, master %.9g", i, pbf[i], (double)p32[i]);
    free(pbf), free(p32);
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s --dtype fp8", zl_build_dir(), dir, ebf);
    cr_expect_eq(r.exit_code, 2);
    unlink(dump), unlink(e16), unlink(e32), unlink(ebf);
    rm_rf(dir);
}

/* zlckpt with at most `max_fds` descriptors (RLIMIT_NOFILE; the child keeps only 0, 1, 2, the
 * rest closed), stdout and stderr to /dev/null and err_path; its exit code. */
static int zlckpt_with_fds(int max_fds, const char *args, const char *err_path) {
    char tool[256], line[1200];
    snprintf(tool, sizeof tool, "%s/../zlckpt", zl_build_dir());
    snprintf(line, sizeof line, "%s", args);
    char *argv[16] = {tool};
    int argc = 1;
    for (char *tok = strtok(line, " "); tok && argc < 15; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int out = open("/dev/null", O_WRONLY), err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
        for (int fd = 3; fd < 1024; fd++) close(fd);
        struct rlimit lim = {(rlim_t)max_fds, (rlim_t)max_fds};
        if (setrlimit(RLIMIT_NOFILE, &lim)) _exit(126);
        execv(tool, argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The range reader keeps at most a few rank files open, and only one when the descriptors run
 * out: a checkpoint of more ranks than `ulimit -n` allows (1024 is common) exports and
 * reshards. It kept every old rank's file open until the end, so with 5 descriptors (stdin,
 * stdout, stderr, the --out file and one rank file) exporting a checkpoint of 2 or 3 ranks
 * failed: "rank-00001.bin: Too many open files". */
Test(zlckpt, export_works_under_a_low_descriptor_limit) {
    char dir[256], out[128], ref[128], err[128], args[600], unused[17], cmd[400], text[1024];
    tmp_path(dir, sizeof dir, "fds");
    rm_rf(dir);
    snprintf(out, sizeof out, "/tmp/zl_ck_fds_out_%d", getpid());
    snprintf(ref, sizeof ref, "/tmp/zl_ck_fds_ref_%d", getpid());
    snprintf(err, sizeof err, "/tmp/zl_ck_fds_err_%d", getpid());
    int N = save_world();
    run_ok(unused, "-n %d {stage3} %s --batch 2 --steps 1 --save %s", N, TINY, dir);
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s", zl_build_dir(), dir, ref);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    snprintf(args, sizeof args, "export %s --out %s", dir, out);
    int rc = zlckpt_with_fds(5, args, err);
    zl_read_file(err, text, sizeof text);
    cr_expect_eq(rc, 0, "N = %d, 5 descriptors: exit %d: %s", N, rc, text);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", out, ref);
    cr_expect_eq(system(cmd), 0, "the export under 5 descriptors differs from the one without");
    unlink(out), unlink(ref), unlink(err);
    rm_rf(dir);
}

/* A small checkpoint for the zlckpt command-line tests: one rank, one step; 4 units of 7843, so
 * that its export (125488 B) overflows a pipe's 64 KiB buffer (a reader gone early is EPIPE). */
static void small_checkpoint(char *dir, size_t n, const char *tag) {
    char unused[17];
    tmp_path(dir, n, tag);
    rm_rf(dir);
    run_ok(unused, "-n 1 {stage2} --layers 4 --dim 31 --quiet --batch 2 --steps 1 --save %s", dir);
}

static unsigned mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) ? 0u : (unsigned)(st.st_mode & 07777);
}

/* An export that replaces a file gives the new one the old one's permissions: a private 0600
 * file stayed 0644 after `zlckpt export --out` (a temporary file created with the umask's
 * mode, renamed into place); 0640 stays 0640 too. */
Test(zlckpt, export_keeps_the_permissions_of_the_file_it_replaces) {
    char dir[256], out[128];
    small_checkpoint(dir, sizeof dir, "tool_mode");
    snprintf(out, sizeof out, "/tmp/zl_ck_mode_out_%d", getpid());
    const unsigned modes[2] = {0600, 0640};
    for (int i = 0; i < 2; i++) {
        unlink(out);
        FILE *f = fopen(out, "w");
        cr_assert(f && fputs("private", f) >= 0 && !fclose(f));
        cr_assert_eq(chmod(out, modes[i]), 0);
        zl_run_result r;
        zl_run_plain(&r, "%s/../zlckpt export %s --out %s", zl_build_dir(), dir, out);
        cr_expect_eq(r.exit_code, 0, "%s", r.err);
        cr_expect_eq(size_of(out), 4 * 4 * 7843, "the export did not replace the file");
        cr_expect_eq(mode_of(out), modes[i], "--out of mode %o is now %o", modes[i], mode_of(out));
    }
    unlink(out);
    rm_rf(dir);
}

/* A report lost on the way to stdout (a full disk: /dev/full) exits 1 naming strerror, never 0. */
Test(zlckpt, stdout_full_exits_1) {
    if (access("/dev/full", W_OK)) cr_skip_test("no /dev/full");
    char dir[256], out[128];
    small_checkpoint(dir, sizeof dir, "tool_full");
    snprintf(out, sizeof out, "/tmp/zl_ck_full_out_%d", getpid());
    const char *const cmds[3] = {"inspect %s", "verify %s", "export %s --out %s"};
    for (int i = 0; i < 3; i++) {
        char args[600];
        snprintf(args, sizeof args, cmds[i], dir, out);
        zl_run_result r;
        zl_run_plain_stdout(&r, "/dev/full", "%s/../zlckpt %s", zl_build_dir(), args);
        cr_expect_eq(r.exit_code, 1, "zlckpt %s > /dev/full: exit %d: '%s'", args, r.exit_code, r.err);
        cr_expect(strstr(r.err, "zlckpt: writing the report to stdout failed: No space left on device"),
                  "zlckpt %s > /dev/full: '%s'", args, r.err);
    }
    unlink(out);
    rm_rf(dir);
}

/* `zlckpt export DIR --out OUT` that would destroy something is refused up front: exit 2, one
 * line naming why, the checkpoint byte for byte as it was (diff -r against a copy: no file
 * changed, none added, no .zl-tmp left), nothing created. */
static void expect_export_refused(const char *dir, const char *copy, const char *out, const char *why) {
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s", zl_build_dir(), dir, out);
    cr_expect_eq(r.exit_code, 2, "--out %s: exit %d: '%s'", out, r.exit_code, r.err);
    cr_expect(strstr(r.err, why), "--out %s: '%s' lacks '%s'", out, r.err, why);
    char *nl = strchr(r.err, '\n');
    cr_expect(nl && nl[1] == '\0', "--out %s: one line expected, got '%s'", out, r.err);
    cr_expect_str_eq(r.out, "", "--out %s: printed a summary", out);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "diff -r %s %s >/dev/null", dir, copy);
    if (!system(cmd)) return;
    cr_expect_fail("--out %s changed the checkpoint", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -a %s %s", dir, copy, dir); /* the next case starts whole */
    cr_assert_eq(system(cmd), 0);
}

Test(zlckpt, export_refuses_an_out_that_would_destroy) {
    char dir[256], copy[300], out[600], other[128], link[128], cmd[1400];
    small_checkpoint(dir, sizeof dir, "tool_out");
    snprintf(copy, sizeof copy, "%s_copy", dir);
    snprintf(other, sizeof other, "/tmp/zl_ck_outdir_%d", getpid());
    snprintf(link, sizeof link, "/tmp/zl_ck_outlink_%d", getpid());
    rm_rf(copy), rm_rf(other), unlink(link);
    snprintf(cmd, sizeof cmd, "cp -a %s %s && mkdir %s", dir, copy, other);
    cr_assert_eq(system(cmd), 0);
    /* a rank file, the manifest, a new name inside, a rank file spelled through .. */
    snprintf(out, sizeof out, "%s/rank-00000.bin", dir);
    expect_export_refused(dir, copy, out, "inside the checkpoint directory");
    snprintf(out, sizeof out, "%s/manifest.json", dir);
    expect_export_refused(dir, copy, out, "inside the checkpoint directory");
    snprintf(out, sizeof out, "%s/params.f32", dir);
    expect_export_refused(dir, copy, out, "inside the checkpoint directory");
    snprintf(out, sizeof out, "%s/../%s/rank-00000.bin", dir, strrchr(dir, '/') + 1);
    expect_export_refused(dir, copy, out, "inside the checkpoint directory");
    /* a symbolic link to a rank file: written through, it would replace the rank file */
    snprintf(out, sizeof out, "%s/rank-00000.bin", dir);
    cr_assert_eq(symlink(out, link), 0);
    expect_export_refused(dir, copy, link, "inside the checkpoint directory");
    unlink(link);
    /* the checkpoint directory itself, another directory (left empty: nothing renamed into it) */
    expect_export_refused(dir, copy, dir, "a directory");
    expect_export_refused(dir, copy, other, "a directory");
    cr_expect_eq(rmdir(other), 0, "the directory --out named is no longer empty");
    rm_rf(copy);
    rm_rf(dir);
}

/* Run `zlckpt export DIR --out FIFO` beside `reader` (a shell command reading the FIFO) with
 * SIGPIPE ignored, so a reader that leaves early shows as EPIPE; zlckpt's stderr -> err_path.
 * Both under timeout: a zlckpt that never opens the FIFO leaves the reader waiting. */
static int export_to_fifo(const char *dir, const char *fifo, const char *reader, const char *err_path) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd,
             "trap '' PIPE; timeout 20 sh -c '%s' & timeout 60 %s/../zlckpt export %s --out %s >/dev/null 2>%s; "
             "rc=$?; wait; exit $rc",
             reader, zl_build_dir(), dir, fifo, err_path);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int is_kind(const char *path, mode_t kind) {
    struct stat st;
    return !stat(path, &st) && (st.st_mode & S_IFMT) == kind;
}

/* A device is written in place, never renamed over: /dev/null takes the export (exit 0),
 * /dev/full refuses it (exit 1, ENOSPC), and both are still character devices. */
static void expect_device_written(const char *dir, const char *dev, int code, const char *why) {
    struct stat st;
    if (stat(dev, &st) || !S_ISCHR(st.st_mode)) {
        cr_log_warn("%s is not a character device here: not tested", dev);
        return;
    }
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s", zl_build_dir(), dir, dev);
    cr_expect_eq(r.exit_code, code, "--out %s: exit %d: '%s'", dev, r.exit_code, r.err);
    cr_expect(strstr(code ? r.err : r.out, why), "--out %s: '%s%s' lacks '%s'", dev, r.out, r.err, why);
    cr_expect(!stat(dev, &st) && S_ISCHR(st.st_mode), "--out %s: no longer a character device", dev);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", dev);
    cr_expect(access(tmp, F_OK), "--out %s left %s", dev, tmp);
}

/* Devices and pipes take the export in place, never renamed over: a FIFO streams exactly the
 * file export's bytes and stays a FIFO, also when its reader leaves early (exit 1, EPIPE); then
 * /dev/null (exit 0) and /dev/full (exit 1, ENOSPC) stay character devices. The FIFO goes
 * first and stops the test if it was replaced or removed: a zlckpt that renames over its --out
 * must not meet /dev/null as root. */
Test(zlckpt, export_writes_devices_and_pipes_in_place) {
    char dir[256], fifo[128], got[160], ref[128], err[160], reader[400], tmp[160];
    small_checkpoint(dir, sizeof dir, "tool_dev");
    snprintf(fifo, sizeof fifo, "/tmp/zl_ck_fifo_%d", getpid());
    snprintf(got, sizeof got, "%s.got", fifo);
    snprintf(err, sizeof err, "%s.err", fifo);
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", fifo);
    snprintf(ref, sizeof ref, "/tmp/zl_ck_fifo_ref_%d", getpid());
    unlink(fifo), unlink(got), unlink(ref), unlink(tmp);
    cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo: %s", strerror(errno));
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt export %s --out %s", zl_build_dir(), dir, ref);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);

    snprintf(reader, sizeof reader, "cat %s > %s", fifo, got);
    int rc = export_to_fifo(dir, fifo, reader, err);
    cr_assert(is_kind(fifo, S_IFIFO), "--out FIFO: no longer a FIFO (renamed over)");
    cr_expect_eq(rc, 0, "--out FIFO: exit %d", rc);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", got, ref);
    cr_expect_eq(system(cmd), 0, "--out FIFO: the bytes read differ from the file export");

    snprintf(reader, sizeof reader, ": < %s", fifo); /* opens, then leaves without reading */
    rc = export_to_fifo(dir, fifo, reader, err);
    cr_assert(is_kind(fifo, S_IFIFO), "--out FIFO, reader gone: the FIFO was replaced or removed");
    cr_expect_eq(rc, 1, "--out FIFO, reader gone: exit %d", rc);
    char text[1024];
    zl_read_file(err, text, sizeof text);
    cr_expect(strstr(text, "Broken pipe"), "--out FIFO, reader gone: '%s'", text);
    cr_expect(access(tmp, F_OK), "--out FIFO left %s", tmp);

    expect_device_written(dir, "/dev/null", 0, "exported");
    expect_device_written(dir, "/dev/full", 1, "No space left on device");
    unlink(fifo), unlink(got), unlink(ref), unlink(err);
    rm_rf(dir);
}

/* ---- refused checkpoints ------------------------------------------------------------ */


/* --resume DIR (and zlckpt verify DIR) refuse it: exit 2, one line naming `file`, no step run. */
static void expect_resume_refused(const char *dir, const char *flags, const char *file, const char *reason) {
    zl_run_result r;
    zl_run(&r, "-n 2 {stage1} %s --batch 2 --steps 2 --resume %s%s", TINY, dir, flags);
    cr_expect_eq(r.exit_code, 2, "%s: exit %d: %s", reason, r.exit_code, r.err);
    cr_expect_eq(zl_program_lines(r.err, "stage1"), 1, "%s: not one line: %s", reason, r.err);
    cr_expect(strstr(r.err, file) && strstr(r.err, reason), "%s: stderr '%s' lacks '%s'", reason, r.err, file);
    cr_expect(strstr(r.out, "step ") == NULL, "%s: training started", reason);
    if (*flags) return; /* a model mismatch is not the checkpoint's fault */
    zl_run_plain(&r, "%s/../zlckpt verify %s", zl_build_dir(), dir);
    cr_expect_eq(r.exit_code, 2, "zlckpt verify, %s: exit %d", reason, r.exit_code);
    cr_expect(strstr(r.err, file), "zlckpt verify, %s: '%s'", reason, r.err);
}

static void reseal_version(const char *man, int version) {
    char *cmdless;
    size_t len;
    FILE *f = fopen(man, "rb");
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    cmdless = malloc(len + 1);
    cr_assert_eq(fread(cmdless, 1, len, f), len);
    cmdless[len] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(cmdless);
    free(cmdless);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "version", cJSON_CreateNumber(version));
    cJSON_DeleteItemFromObjectCaseSensitive(j, "manifest_xxh3_64");
    char *body = cJSON_Print(j);
    cJSON_Delete(j);
    size_t n = strlen(body);
    while (n && body[n - 1] != '}') n--;
    n--;
    while (n && (body[n - 1] == '\n' || body[n - 1] == '\t')) n--;
    f = fopen(man, "wb");
    char *prefix = malloc(n + 8);
    int plen = sprintf(prefix, "%.*s,\n\t", (int)n, body);
    fprintf(f, "%s\"manifest_xxh3_64\":\t\"%016llx\"\n}\n", prefix,
            (unsigned long long)XXH3_64bits(prefix, (size_t)plen));
    fclose(f);
    free(prefix), free(body);
}

/* 22 trainer launches (7 saves, 15 resumes) and 7 zlckpt runs: 2.5 s on the CPU build, but each
 * launch on GPUs pays CUDA's and NCCL's start-up — 73 s alone on 4 × H200 (2026-11-27), past 120 s
 * with another test beside it (test_ckpt -j2). */
Test(refused, every_bad_checkpoint_exits_2_with_one_line, .timeout = 360) {
    char dir[256], man[300], rank1[300], unused[17], cmd[800];
    tmp_path(dir, sizeof dir, "bad");
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    snprintf(rank1, sizeof rank1, "%s/rank-00001.bin", dir);
    int N = save_world();
#define FRESH() (rm_rf(dir), run_ok(unused, "-n %d {stage3} %s --batch 2 --steps 1 --save %s", N, TINY, dir))
    FRESH();
    unlink(rank1);
    expect_resume_refused(dir, "", rank1, "missing");
    FRESH();
    cr_assert_eq(truncate(rank1, size_of(rank1) - 7), 0);
    expect_resume_refused(dir, "", rank1, "truncated");
    FRESH();
    snprintf(cmd, sizeof cmd, "printf '\\001' | dd of=%s bs=1 seek=1000 conv=notrunc 2>/dev/null", rank1);
    cr_assert_eq(system(cmd), 0);
    expect_resume_refused(dir, "", rank1, "checksum mismatch");
    FRESH();
    snprintf(cmd, sizeof cmd, "sed -i 's/\"world\":\\t%d/\"world\":\\t4/' %s", N, man);
    cr_assert_eq(system(cmd), 0);
    expect_resume_refused(dir, "", man, "damaged");
    FRESH();
    reseal_version(man, 99);
    expect_resume_refused(dir, "", man, "unknown format version 99");
    FRESH();
    snprintf(cmd, sizeof cmd, "head -c 300 /dev/urandom > %s", man);
    cr_assert_eq(system(cmd), 0);
    expect_resume_refused(dir, "", man, "manifest.json");
    FRESH();
    expect_resume_refused(dir, " --dim 32", dir, "D = 31");
    expect_resume_refused(dir, " --layers 3", dir, "L = 2");
    expect_resume_refused(dir, " --model gpt --heads 1", dir, "this run has the gpt with L = 2, D = 31, T = 32, H = 1");
    expect_resume_refused(dir, " --dtype bf16", dir, "a checkpoint with fp16 params; this run stores bf16");
    /* what the resumed run would continue, not what the flags say: refused, the flag to give named */
    expect_resume_refused(dir, " --seed 5", dir, "trained with --seed 1234, this run has --seed 5 (give --seed 1234");
    expect_resume_refused(dir, " --loss-scale 128", dir, "trained with --loss-scale dynamic, this run has --loss-scale 128");
    expect_resume_refused(dir, " --loss-scale-init 1024", dir, "continues at the checkpoint's scale 65536 (drop");
    expect_resume_refused(dir, " --loss-scale-window 7", dir, "give --loss-scale-window 1000");
    { /* a flag that says what the checkpoint says is no contradiction */
        zl_run_result r;
        zl_run(&r, "-n 2 {stage1} %s --batch 2 --steps 2 --resume %s --loss-scale-init 65536", TINY, dir);
        cr_expect_eq(r.exit_code, 0, "--loss-scale-init at the checkpoint's own scale: exit %d: %s", r.exit_code, r.err);
    }
    rm_rf(dir);
    expect_resume_refused(dir, "", man, "cannot open");
}

/* Where the file system has no RENAME_EXCHANGE a save renames DIR to DIR.zl-old, then
 * DIR.zl-tmp to DIR: a job killed between the two leaves no DIR. --resume DIR and zlckpt said
 * only "cannot open"; they now name DIR.zl-old (and DIR.zl-tmp when it has a manifest). */
/* Two jobs saving into one DIR at once shared DIR.zl-tmp: one exited 0 over a checkpoint that
 * mixed both. A job holds an flock on DIR.zl-lock while it runs: here this test holds it, and a
 * run saving into DIR is refused at start-up, exit 2, naming the lock; released, the run saves. */
Test(refused, a_save_dir_another_job_saves_into_is_refused) {
    char dir[256], lock[300], unused[17];
    tmp_path(dir, sizeof dir, "locked");
    rm_rf(dir);
    snprintf(lock, sizeof lock, "%s.zl-lock", dir);
    int fd = open(lock, O_RDWR | O_CREAT, 0666);
    cr_assert(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "cannot lock %s: %s", lock, strerror(errno));
    zl_run_result r;
    zl_run(&r, "-n 2 {stage1} %s --batch 2 --steps 1 --save %s", TINY, dir);
    cr_expect_eq(r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "another running job saves into") && strstr(r.err, lock), "stderr: %s", r.err);
    cr_expect_eq(zl_program_lines(r.err, "stage1"), 1, "not one line: %s", r.err);
    close(fd); /* the lock goes with it */
    run_ok(unused, "-n 2 {stage1} %s --batch 2 --steps 1 --save %s", TINY, dir);
    rm_rf(dir);
}

Test(refused, a_save_cut_between_its_renames_names_the_checkpoints_left) {
    char dir[256], old[300], tmp[300], cmd[1000], want[700], unused[17];
    tmp_path(dir, sizeof dir, "cut");
    rm_rf(dir);
    snprintf(old, sizeof old, "%s.zl-old", dir);
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", dir);
    run_ok(unused, "-n 2 {stage1} %s --batch 2 --steps 1 --save %s", TINY, dir);
    cr_assert_eq(rename(dir, old), 0);
    snprintf(want, sizeof want, "'%s' holds the checkpoint before it: rename it to '%s'", old, dir);
    expect_resume_refused(dir, "", "cannot open", want);
    snprintf(cmd, sizeof cmd, "cp -a %s %s", old, tmp);
    cr_assert_eq(system(cmd), 0);
    snprintf(want, sizeof want, "'%s' holds the checkpoint before it, '%s' the one it was saving", old, tmp);
    expect_resume_refused(dir, "", "cannot open", want);
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt verify %s", zl_build_dir(), dir);
    cr_expect(r.exit_code == 2 && strstr(r.err, want), "zlckpt verify: exit %d: '%s'", r.exit_code, r.err);
    rm_rf(dir);
}

/* ---- the --save directory, checked before training ------------------------------- */

static void expect_save_refused(const char *flags, const char *reason) {
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} --preset demo --steps 100000 --quiet %s", flags);
    cr_expect_eq(r.exit_code, 2, "%s: exit %d: %s", flags, r.exit_code, r.err);
    cr_expect_eq(zl_program_lines(r.err, "stage2"), 1, "%s: not one line: %s", flags, r.err);
    cr_expect(strstr(r.err, reason), "%s: '%s' lacks '%s'", flags, r.err, reason);
}

Test(save_dir, unwritable_or_foreign_directories_are_refused_before_training) {
    char dir[256], flags[600];
    tmp_path(dir, sizeof dir, "foreign");
    rm_rf(dir);
    mkdir(dir, 0777);
    char keep[320];
    snprintf(keep, sizeof keep, "%s/notes.txt", dir);
    write_foreign_file(keep, "mine");
    snprintf(flags, sizeof flags, "--save %s", dir);
    expect_save_refused(flags, "is not a zerolab checkpoint");
    cr_expect(exists(keep), "a foreign directory was touched");
    snprintf(flags, sizeof flags, "--save %s/no/such/parent/ckpt", dir);
    expect_save_refused(flags, "cannot write");
    expect_save_refused("--save-every 5", "--save-every: needs --save DIR");
    /* what the save's renames would trip over after training: a temporary directory holding
     * files a save did not write, a symbolic link (replaced, not followed), a name like "." */
    char tmp[280], link[300];
    snprintf(tmp, sizeof tmp, "%s/ck.zl-tmp", dir);
    mkdir(tmp, 0777);
    snprintf(keep, sizeof keep, "%s/notes.txt", tmp);
    write_foreign_file(keep, "");
    snprintf(flags, sizeof flags, "--save %s/ck", dir);
    expect_save_refused(flags, "holds 'notes.txt', which a save does not write");
    cr_expect(exists(keep), "a foreign file was removed");
    snprintf(link, sizeof link, "%s/link", dir);
    cr_assert_eq(symlink(tmp, link), 0);
    snprintf(flags, sizeof flags, "--save %s/", link);
    expect_save_refused(flags, "is a symbolic link");
    snprintf(flags, sizeof flags, "--save %s/.", dir);
    expect_save_refused(flags, "by its name, not");
    rm_rf(dir);
}

/* A save cut between its two renames (no RENAME_EXCHANGE) leaves no DIR, the checkpoint before it
 * in DIR.zl-old and perhaps the one it was saving in DIR.zl-tmp; a first save ended between its
 * manifest and its rename leaves a whole DIR.zl-tmp. A fresh --save DIR then cleared them (exit 0,
 * the newer checkpoint gone): refused before training now, every directory kept. */
Test(save_dir, a_save_after_a_cut_one_keeps_what_it_left) {
    char dir[256], old[300], tmp[300], cmd[1200], flags[300], unused[17], probe[340];
    tmp_path(dir, sizeof dir, "cutsave");
    rm_rf(dir);
    snprintf(old, sizeof old, "%s.zl-old", dir);
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", dir);
    run_ok(unused, "-n 2 {stage1} %s --batch 2 --steps 1 --save %s", TINY, dir);
    snprintf(cmd, sizeof cmd, "cp -a %s %s && mv %s %s", dir, tmp, dir, old);
    cr_assert_eq(system(cmd), 0);
    snprintf(flags, sizeof flags, "--save %s", dir);
    expect_save_refused(flags, "a save was cut short");
    snprintf(probe, sizeof probe, "%s/manifest.json", old);
    cr_expect(exists(probe), "DIR.zl-old lost its checkpoint");
    snprintf(probe, sizeof probe, "%s/manifest.json", tmp);
    cr_expect(exists(probe), "DIR.zl-tmp lost its checkpoint");
    rm_rf(old);
    expect_save_refused(flags, "holds a whole checkpoint no save put in place");
    cr_expect(exists(probe), "DIR.zl-tmp lost its checkpoint");
    rm_rf(tmp);
    rm_rf(dir);
}

/* A save clears DIR.zl-tmp before writing: a --resume of DIR.zl-tmp itself with --save DIR lost
 * that checkpoint when the job was cut during the save, and a whole DIR.zl-tmp newer than DIR (a
 * save ended between its manifest and its rename) was cleared by the next --save DIR. Both are
 * refused before training now, DIR.zl-tmp kept; one no newer than DIR (what a swap left when its
 * job ended before removing it) is cleared as before. */
Test(save_dir, a_save_never_clears_the_checkpoint_it_needs) {
    char dir[256], tmp[300], cmd[1000], flags[700], unused[17], probe[340];
    tmp_path(dir, sizeof dir, "scratch");
    rm_rf(dir);
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", dir);
    snprintf(probe, sizeof probe, "%s/manifest.json", tmp);
    run_ok(unused, "-n 2 {stage1} %s --batch 2 --steps 1 --save %s", TINY, dir);
    cJSON *m = manifest_of(dir); /* an MLP's data is its seed's alone: nothing recorded */
    cr_expect(m && !cJSON_GetObjectItemCaseSensitive(m, "data"), "an MLP's manifest names data");
    cJSON_Delete(m);
    snprintf(cmd, sizeof cmd, "cp -a %s %s", dir, tmp);
    cr_assert_eq(system(cmd), 0);
    snprintf(flags, sizeof flags, "--layers 2 --dim 31 --batch 2 --resume %s --save %s", tmp, dir);
    expect_save_refused(flags, "may clear this directory");
    cr_expect(exists(probe), "DIR.zl-tmp lost its checkpoint");
    rm_rf(tmp); /* DIR.zl-tmp one step ahead of DIR */
    snprintf(cmd, sizeof cmd, "%s.later", dir);
    run_ok(unused, "-n 2 {stage1} %s --batch 2 --steps 1 --resume %s --save %s", TINY, dir, cmd);
    cr_assert_eq(rename(cmd, tmp), 0);
    snprintf(flags, sizeof flags, "--layers 2 --dim 31 --batch 2 --resume %s --save %s", dir, dir);
    expect_save_refused(flags, "holds a whole checkpoint at step 2, newer than");
    cr_expect(exists(probe), "DIR.zl-tmp lost its checkpoint");
    rm_rf(tmp);
    snprintf(cmd, sizeof cmd, "cp -a %s %s", dir, tmp); /* as old as DIR: cleared, the save goes on */
    cr_assert_eq(system(cmd), 0);
    run_ok(unused, "-n 2 {stage1} %s --batch 2 --steps 1 --resume %s --save %s", TINY, dir, dir);
    cr_expect(!exists(probe), "DIR.zl-tmp left behind");
    rm_rf(dir);
}

/* A save that replaces DIR gives the new directory DIR's permissions: a checkpoint chmod 700
 * came back 0755 (DIR.zl-tmp made with the umask's mode, renamed into place). 0751, which no
 * umask makes of 0777, shows they are copied, not merely narrowed. */
Test(save_dir, a_save_keeps_the_directory_permissions) {
    char dir[256], unused[17];
    small_checkpoint(dir, sizeof dir, "ckmode");
    const unsigned modes[2] = {0700, 0751};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(chmod(dir, modes[i]), 0);
        run_ok(unused, "-n 2 {stage2} %s --batch 2 --steps 1 --save %s", TINY, dir);
        cr_expect_eq(mode_of(dir), modes[i], "DIR of mode %o is now %o after a save", modes[i], mode_of(dir));
    }
    rm_rf(dir);
}

/* A checkpoint with a file of someone else's beside it: the save's swap would carry that file
 * into DIR.zl-tmp, which no save may clear, and the next save (here --save-every 1's second)
 * failed mid-run with exit 1 ("cannot create 'DIR.zl-tmp': File exists"). Refused up front
 * now, the file named; the checkpoint and the file untouched. */
Test(save_dir, a_checkpoint_holding_a_foreign_file_is_refused_before_training) {
    char dir[256], keep[320], flags[600], unused[17];
    small_checkpoint(dir, sizeof dir, "ckforeign");
    snprintf(keep, sizeof keep, "%s/notes.txt", dir);
    write_foreign_file(keep, "mine");
    snprintf(flags, sizeof flags, "--save %s --save-every 1", dir);
    expect_save_refused(flags, "holds 'notes.txt', which a save does not write");
    cr_expect(exists(keep), "the foreign file was moved or removed");
    zl_run_result r;
    zl_run_plain(&r, "%s/../zlckpt verify %s", zl_build_dir(), dir);
    cr_expect_eq(r.exit_code, 0, "the checkpoint changed: %s", r.err);
    unlink(keep); /* without it the same directory is saved to, twice */
    run_ok(unused, "-n 2 {stage2} %s --batch 2 --steps 2 --save %s --save-every 1", TINY, dir);
    rm_rf(dir);
}
