/* test_loud.c — failing loudly and early, end to end (spawns mpiexec as a child):
 * output paths refused before anything is allocated, outputs written beside and renamed (a cut
 * write keeps the earlier file), write failures that still print the report, the preflight's
 * numbers, the watchdog against a SIGSTOPped rank, float flags that narrow, --help on one rank of
 * an MPMD launch, two ranks on one GPU, a launcher that starts singletons, --check's exit 4, and
 * the documented exit codes. ZL_BUILD picks build/cpu or build/cuda (zl_test_util.h). */
#include "zl_test_util.h" /* first: it defines _GNU_SOURCE */

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A run that would take well over a minute (demo model, 100000 steps) must be refused
 * in well under 5 s, with exit 2 and one line naming the flag, the path and the reason. */
static void expect_output_refused(const char *flags, const char *flag, const char *path, const char *reason) {
    zl_run_result r;
    double t0 = now();
    zl_run(&r, "-n 2 {stage2} --preset demo --steps 100000 --quiet %s", flags);
    double secs = now() - t0;
    cr_expect_eq(r.exit_code, 2, "%s: exit %d, stderr %s", flags, r.exit_code, r.err);
    cr_expect(secs < 5, "%s: refused only after %.1f s", flags, secs);
    cr_expect(strstr(r.err, flag) && strstr(r.err, path) && strstr(r.err, reason),
              "%s: stderr '%s' lacks the flag, the path or '%s'", flags, r.err, reason);
    cr_expect_eq(zl_program_lines(r.err, "stage2"), 1, "%s: not one line: %s", flags, r.err);
    cr_expect(strstr(r.out, "step ") == NULL, "%s: training started", flags);
}

Test(outputs, bad_paths_are_refused_before_training) {
    expect_output_refused("--json /nonexistent-dir/r.json", "--json", "/nonexistent-dir/r.json",
                          "No such file or directory");
    expect_output_refused("--json /tmp", "--json", "/tmp", "Is a directory");
    expect_output_refused("--dump-params /dev/full", "--dump-params", "/dev/full", "No space left on device");
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/zl_same_%d.json", getpid());
    snprintf(b, sizeof b, "/tmp/./zl_same_%d.json", getpid());
    char flags[256];
    snprintf(flags, sizeof flags, "--json %s --dump-params %s", a, b);
    expect_output_refused(flags, "--dump-params", b, "the same file");
    snprintf(flags, sizeof flags, "--json=%s --dump-params=%s", a, a);
    expect_output_refused(flags, "--json and --dump-params", a, "same path");
    unlink(a);
    if (geteuid() != 0) { /* root may write a 0444 file; the case is only meaningful for users */
        FILE *f = fopen(a, "w");
        cr_assert(f);
        fclose(f);
        chmod(a, 0444);
        snprintf(flags, sizeof flags, "--json %s", a);
        expect_output_refused(flags, "--json", a, "Permission denied");
        unlink(a);
    } else {
        fprintf(stderr, "test_loud: as root, the read-only (0444) output case is not run (root writes through the mode)\n");
    }
}

/* A refused run leaves an earlier result alone: outputs are truncated only when written. */
Test(outputs, refused_run_keeps_the_old_file) {
    char a[64];
    snprintf(a, sizeof a, "/tmp/zl_keep_%d.json", getpid());
    FILE *f = fopen(a, "w");
    fputs("{\"earlier\": 1}\n", f);
    fclose(f);
    zl_run_result r;
    zl_run(&r, "-n 1 {stage1} --json %s --dump-params /nonexistent-dir/p.bin", a);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    char buf[64];
    zl_read_file(a, buf, sizeof buf);
    cr_expect_str_eq(buf, "{\"earlier\": 1}\n");
    unlink(a);
}

/* ...and creates none: a file the refused run had to create is gone again (no empty result). */
Test(outputs, refused_run_leaves_no_new_file) {
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/zl_new_%d.json", getpid());
    snprintf(b, sizeof b, "/tmp/zl_new_%d.trace", getpid());
    unlink(a), unlink(b);
    /* 1000 blocks of D = 2048 (the preflight tests below): 268 GB of model states per rank at
     * N = 2 even for ZeRO-3, more than any one device or this host has */
    zl_run_result r;
    zl_run(&r, "-n 2 {stage3} --layers 1000 --dim 2048 --batch 64 --quiet --json %s --trace %s", a, b);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "needs") != NULL, "not the preflight's refusal: %s", r.err);
    cr_expect(access(a, F_OK) != 0, "the refused run left %s", a);
    cr_expect(access(b, F_OK) != 0, "the refused run left %s", b);
    unlink(a), unlink(b);
}

/* ...also when a rank fails at run time at N = 2, where MPI_Abort ends the ranks without their
 * exit handlers: a new output exists only once the run writes it. The failure: out of memory
 * with the preflight off (CPU: a pretend 100 kB device). */
Test(outputs, runtime_error_at_N2_leaves_no_new_file) {
    if (zl_max_world() < 2) cr_skip_test("ZL_MAX_WORLD < 2");
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/zl_rt_%d.json", getpid());
    snprintf(b, sizeof b, "/tmp/zl_rt_%d.bin", getpid());
    unlink(a), unlink(b);
    if (!zl_build_is_cuda()) setenv("ZL_CPU_DEVICE_BYTES", "100000", 1);
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} --layers 1000 --dim 2048 --batch 64 --quiet --no-preflight --json %s --dump-params %s", a,
           b);
    unsetenv("ZL_CPU_DEVICE_BYTES");
    cr_expect_eq(r.exit_code, 1, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "out of memory"), "not the out-of-memory failure: %s", r.err);
    cr_expect(access(a, F_OK) != 0, "the failed run left %s", a);
    cr_expect(access(b, F_OK) != 0, "the failed run left %s", b);
    unlink(a), unlink(b);
}

/* An output must not be a file the run reads (--data, a --resume checkpoint's files) nor lie in
 * the --save directory (the save replaces it): refused up front, the input untouched. */
Test(outputs, an_input_or_the_save_directory_is_refused) {
    char text[64], ck[64], flags[512];
    snprintf(text, sizeof text, "/tmp/zl_in_%d.txt", getpid());
    snprintf(ck, sizeof ck, "/tmp/zl_in_ck_%d", getpid());
    FILE *f = fopen(text, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++) fputs("some text to train on, long enough for a few sequences. ", f);
    fclose(f);
    zl_run_result r;
    zl_run(&r, "-n 1 {stage2} --preset gpt-tiny --steps 1 --quiet --data %s --json %s", text, text);
    cr_expect_eq(r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "is a file this run reads (--data)"), "%s", r.err);
    struct stat st;
    cr_expect(!stat(text, &st) && st.st_size == 200 * 56, "the --data file changed: %lld bytes",
              (long long)st.st_size);
    zl_run(&r, "-n 1 {stage2} --preset tiny --steps 1 --quiet --save %s", ck);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    snprintf(flags, sizeof flags, "--preset tiny --resume %s --dump-params %s/rank-00000.bin", ck, ck);
    zl_run(&r, "-n 1 {stage2} --steps 1 --quiet %s", flags);
    cr_expect_eq(r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "is a file this run reads (--resume)"), "%s", r.err);
    zl_run_plain(&r, "%s/../zlckpt verify %s", zl_build_dir(), ck);
    cr_expect_eq(r.exit_code, 0, "the checkpoint was damaged: %s", r.err);
    snprintf(flags, sizeof flags, "--save %s --json %s/report.json", ck, ck);
    expect_output_refused(flags, "--json", "report.json", "is (inside) the --save directory");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", ck, text);
    cr_expect_eq(system(cmd), 0);
}

/* Outputs that lost a result with exit 0 or hung (a report-only review): --json naming the --save
 * directory before it exists (trained, then failed: "Is a directory") or its DIR.zl-tmp (which
 * the save writes); a GEMM table (ZL_GEMM_TABLE, an input) overwritten by the report; an output
 * that is the file stdout goes to (the report wrote over it); a FIFO no one reads (blocked for
 * ever, before the watchdog starts). Each refused up front, exit 2, the file as it was. */
Test(outputs, outputs_that_lost_a_result_are_refused) {
    char ck[64], tmp[80], table[64], out[64], fifo[64], flags[512], cmd[400];
    snprintf(ck, sizeof ck, "/tmp/zl_save_%d", getpid());
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", ck);
    snprintf(table, sizeof table, "/tmp/zl_table_%d.json", getpid());
    snprintf(out, sizeof out, "/tmp/zl_stdout_%d.txt", getpid());
    snprintf(fifo, sizeof fifo, "/tmp/zl_fifo_%d", getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s %s %s", ck, tmp, table, out, fifo);
    cr_assert_eq(system(cmd), 0);
    snprintf(flags, sizeof flags, "--save %s --json %s", ck, ck);
    expect_output_refused(flags, "--json", ck, "is (inside) the --save directory");
    cr_expect(access(ck, F_OK) != 0, "the refused run left %s", ck);
    snprintf(flags, sizeof flags, "--save %s --json %s", ck, tmp);
    expect_output_refused(flags, "--json", tmp, "DIR.zl-tmp");
    snprintf(cmd, sizeof cmd, "cp tables/lab-1b-h200.json %s", table);
    cr_assert_eq(system(cmd), 0);
    struct stat before, after;
    cr_assert_eq(stat(table, &before), 0);
    setenv("ZL_GEMM_TABLE", table, 1);
    snprintf(flags, sizeof flags, "--json %s", table);
    expect_output_refused(flags, "--json", table, "is a file this run reads (ZL_GEMM_TABLE)");
    unsetenv("ZL_GEMM_TABLE");
    cr_expect(!stat(table, &after) && after.st_size == before.st_size, "the table changed");
    FILE *f = fopen(out, "w");
    cr_assert(f);
    fclose(f);
    zl_run_result r;
    zl_run_plain_stdout(&r, out, "{stage2} --preset tiny --steps 1 --quiet --json %s", out);
    cr_expect_eq(r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "is the file this run's stdout goes to"), "%s", r.err);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    zl_run(&r, "-n 1 {stage2} --preset tiny --steps 1 --quiet --trace %s", fifo);
    cr_expect_eq(r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "is a FIFO no process reads"), "%s", r.err);
    zl_run(&r, "-n 1 {stage2} --preset gpt-tiny --steps 1 --quiet --data %s", fifo); /* an input: blocked too */
    cr_expect(r.exit_code == 2 && strstr(r.err, "not a regular file"), "--data FIFO: exit %d: %s", r.exit_code, r.err);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s %s %s", ck, tmp, table, out, fifo);
    cr_expect_eq(system(cmd), 0);
}

/* A regular output is written beside it (PATH.zl-tmp) and renamed over it once whole: a run ended
 * while it writes leaves the earlier result as it was. The cut: a file-size limit under the
 * --dump-params write (2Ψ = 100 MB; MPI's own shared-memory files need well under the 64 MB).
 * Killed by SIGXFSZ, the earlier file stands and the cut PATH.zl-tmp is left; with SIGXFSZ
 * ignored the write fails (EFBIG): exit 1, the earlier file stands, the leftover is cleared.
 * Before, the file was truncated and written in place: 64 MB of a cut result. */
static void run_with_file_limit(zl_run_result *r, rlim_t bytes, int ignore_xfsz, const char *out) {
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old, lim.rlim_cur = bytes;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    void (*was)(int) = signal(SIGXFSZ, ignore_xfsz ? SIG_IGN : SIG_DFL); /* inherited through exec */
    zl_run_plain(r, "{stage2} --dim 1024 --layers 6 --batch 8 --steps 1 --quiet --dump-params %s", out);
    signal(SIGXFSZ, was);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
}

Test(outputs, a_write_cut_short_keeps_the_earlier_file) {
    char a[64], tmp[80], buf[64];
    snprintf(a, sizeof a, "/tmp/zl_cut_%d.bin", getpid());
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", a);
    unlink(tmp);
    FILE *f = fopen(a, "w");
    cr_assert(f);
    fputs("earlier\n", f);
    fclose(f);
    zl_run_result r;
    run_with_file_limit(&r, 64 << 20, 0, a);
    cr_expect_neq(r.exit_code, 0, "a run killed while writing exited 0");
    zl_read_file(a, buf, sizeof buf);
    cr_expect_str_eq(buf, "earlier\n", "killed while writing --dump-params: the earlier file is now %zu bytes",
                     strlen(buf));
    struct stat st;
    cr_expect(!stat(tmp, &st) && st.st_size == 64 << 20, "no cut %s beside it", tmp);
    run_with_file_limit(&r, 64 << 20, 1, a);
    cr_expect_eq(r.exit_code, 1, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "--dump-params: writing") && strstr(r.err, "File too large") &&
                  strstr(r.err, "the earlier file is kept as it was"),
              "%s", r.err);
    zl_read_file(a, buf, sizeof buf);
    cr_expect_str_eq(buf, "earlier\n");
    cr_expect(access(tmp, F_OK) != 0, "the failed write left %s", tmp);
    unlink(a), unlink(tmp);
}

/* Written whole, the output replaces the file: its permissions kept, a symbolic link's target
 * replaced (the link stays a link), nothing left beside it. A file with a second hard link is
 * written in place, so both names see the result. */
Test(outputs, a_finished_output_replaces_the_file_a_link_names) {
    char target[64], slink[64], other[64], tmp[80], buf[64];
    snprintf(target, sizeof target, "/tmp/zl_target_%d.json", getpid());
    snprintf(slink, sizeof slink, "/tmp/zl_link_%d.json", getpid());
    snprintf(other, sizeof other, "/tmp/zl_hard_%d.json", getpid());
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", target);
    unlink(target), unlink(slink), unlink(other);
    FILE *f = fopen(target, "w");
    cr_assert(f);
    fputs("earlier\n", f);
    fclose(f);
    cr_assert_eq(chmod(target, 0604), 0);
    cr_assert_eq(symlink(target, slink), 0);
    zl_run_result r;
    zl_run(&r, "-n 1 {stage1} --preset tiny --steps 1 --quiet --json %s", slink);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    struct stat st;
    cr_expect(!lstat(slink, &st) && S_ISLNK(st.st_mode), "%s is no longer a link", slink);
    cr_expect(!stat(target, &st) && (st.st_mode & 07777) == 0604, "mode %o", st.st_mode & 07777);
    zl_read_file(target, buf, sizeof buf);
    cr_expect(buf[0] == '{', "the target holds '%s'", buf);
    cr_expect(access(tmp, F_OK) != 0, "%s left", tmp);
    cr_assert_eq(link(target, other), 0);
    cr_assert(truncate(target, 0) == 0);
    zl_run(&r, "-n 1 {stage1} --preset tiny --steps 1 --quiet --json %s", other);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    zl_read_file(target, buf, sizeof buf);
    cr_expect(buf[0] == '{', "a hard-linked output was not written in place: the other name holds '%s'", buf);
    unlink(target), unlink(slink), unlink(other);
}

/* /proc/version opens for writing as root and fails at the write (EIO): the report is
 * printed first, then one line names the flag and the error, exit 1. */
Test(outputs, write_failure_after_training_prints_the_report_then_exits_1) {
    if (geteuid() != 0) cr_skip_test("needs root (as a user /proc/version cannot even be opened: exit 2)");
    zl_run_result r;
    zl_run(&r, "-n 2 {stage1} --quiet --json /proc/version");
    cr_expect_eq(r.exit_code, 1, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.out, "memory per rank") && strstr(r.out, "final loss"), "the report was lost: %s", r.out);
    cr_expect(strstr(r.err, "--json: writing '/proc/version' failed: Input/output error"), "%s", r.err);
}

/* Without a launcher (N = 1) stdout is the file itself: a full disk must not exit 0. */
Test(outputs, stdout_to_dev_full_exits_1) {
    char prog[256];
    snprintf(prog, sizeof prog, "%s/stage0_ddp", zl_build_dir());
    char *argv[] = {prog, "--quiet", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/full", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, prog, &fa, NULL, argv, environ), 0);
    int status;
    waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&fa);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
    zl_run_result r; /* --help's usage is its result: lost, exit 1 (it exited 0) */
    zl_run_plain_stdout(&r, "/dev/full", "{stage1} --help");
    cr_expect(r.exit_code == 1 && strstr(r.err, "--help: writing to stdout failed"), "--help: exit %d: %s", r.exit_code,
              r.err);
}

/* ---- preflight ------------------------------------------------------------------ */

/* 1000 blocks of D = 2048: Ψ = 1000·(8·2048² + 5·2048) = 33,564,672,000, so DDP's model
 * states are 16Ψ = 537 GB per rank — more host memory than a CI machine has. */
Test(preflight, a_model_that_does_not_fit_is_refused_with_numbers) {
    struct { const char *prog; double states_gb; } cases[] = {{"stage0_ddp", 16 * 33564672000.0 / 1e9},
                                                            {"stage2", (2 + 14.0 / 2) * 33564672000.0 / 1e9}};
    for (int i = 0; i < 2; i++) {
        zl_run_result r;
        double t0 = now();
        zl_run(&r, "-n 2 {%s} --layers 1000 --dim 2048 --batch 64 --quiet", cases[i].prog);
        cr_expect_eq(r.exit_code, 2, "%s: exit %d (%s)", cases[i].prog, r.exit_code, r.err);
        cr_expect(now() - t0 < 10, "%s: the preflight took %.1f s", cases[i].prog, now() - t0);
        char states[64];
        snprintf(states, sizeof states, "model states %.1f", cases[i].states_gb);
        cr_expect(strstr(r.err, "needs") && strstr(r.err, states) && (strstr(r.err, "available") || strstr(r.err, "free")),
                  "%s: stderr lacks '%s': %s", cases[i].prog, states, r.err);
        cr_expect(strstr(r.err, " at N >= "), "%s: no suggestion: %s", cases[i].prog, r.err);
        cr_expect_eq(zl_program_lines(r.err, cases[i].prog), 1, "%s", r.err);
    }
}

/* --trace keeps every span of every timed step (at most 1 GiB a rank): a run whose timeline would
 * not fit is refused at start-up, exit 2, with --no-preflight too (it was exit 1 once the comm
 * lane had been reserved). tiny at K = 64, N = 1, stage 2, per step: collectives K·units + units
 * + K + 1 = 195, compute spans K·(batch + 2 uses × 2 + loss) + units = 386; 999,999 timed steps
 * × 581 spans × 32 bytes a record = 17,730 MiB. */
Test(preflight, a_timeline_too_large_for_trace_is_refused_at_start_up) {
    char path[] = "/tmp/zl_trace_XXXXXX";
    cr_assert(mkdtemp(path));
    char file[64];
    snprintf(file, sizeof file, "%s/t.json", path);
    const char *more[] = {"", "--no-preflight"};
    for (int i = 0; i < 2; i++) {
        zl_run_result r;
        double t0 = now();
        zl_run(&r, "-n 1 {stage2} --preset tiny --steps 1000000 --accum 64 --quiet --trace %s %s", file, more[i]);
        cr_expect_eq(r.exit_code, 2, "%s: exit %d (%s)", more[i], r.exit_code, r.err);
        cr_expect(now() - t0 < 10, "%s: refused after %.1f s", more[i], now() - t0);
        cr_expect(strstr(r.err, "--trace: 999999 timed steps of 581 spans need 17730 MiB"), "%s: %s", more[i], r.err);
        cr_expect_eq(zl_program_lines(r.err, "stage2"), 1, "%s", r.err);
        cr_expect(access(file, F_OK) != 0, "%s: %s was created", more[i], file);
    }
    /* rank 0 gathers every rank's records in one MPI_Gatherv of int byte counts: at N = 3 a rank
     * may keep (2^31 - 1)/3 bytes, 682 MiB (tiny, K = 8: 77 spans a step, 399,999 timed steps, 939
     * MiB) — this passed the start-up check once and ended the run after training, report lost */
    if (zl_max_world() >= 3) {
        zl_run_result r;
        zl_run(&r, "-n 3 {stage2} --preset tiny --steps 400000 --accum 8 --quiet --trace %s", file);
        cr_expect_eq(r.exit_code, 2, "N = 3: exit %d (%s)", r.exit_code, r.err);
        cr_expect(strstr(r.err, "need 939 MiB per rank (at most 682 at N = 3)"), "%s", r.err);
    }
    rmdir(path);
}

/* zerocalc --max-layers answers the preflight's question: on a pretend device of 2e6 bytes
 * (ZL_CPU_DEVICE_BYTES, the CPU backend's test hook) the L it predicts trains, L + 1 is refused
 * by the preflight (exit 2) and, without it, runs out of memory while allocating (exit 1) —
 * the CPU run of scripts/gpu-table2.sh's three runs. */
Test(preflight, zerocalc_max_layers_is_the_preflights_answer) {
    if (zl_build_is_cuda()) cr_skip_test("ZL_CPU_DEVICE_BYTES is the CPU backend's hook; on GPUs scripts/gpu-table2.sh");
    setenv("ZL_CPU_DEVICE_BYTES", "2000000", 1);
    const char *cases[][2] = {{"stage0_ddp", "0"}, {"stage3", "3"}, {"stage2", "2 --offload"}};
    for (int i = 0; i < 3; i++) {
        const char *prog = cases[i][0], *stage = cases[i][1], *off = strstr(stage, "--offload") ? "--offload" : "";
        zl_run_result r;
        zl_run_plain(&r, "build/zerocalc --max-layers --dim 32 --batch 8 --ranks 2 --backend cpu --memory 2e6 --json "
                         "--stage %s", stage);
        cr_assert_eq(r.exit_code, 0, "%s", r.err);
        cJSON *calc = cJSON_Parse(r.out);
        cr_assert(calc, "not JSON: %s", r.out);
        int L = (int)zl_num(cJSON_GetArrayItem(zl_get(calc, "stages"), 0), "max_layers");
        cJSON_Delete(calc);
        cr_assert(L >= 2, "%s: L = %d", prog, L);
        char json[] = "/tmp/zl_maxl_XXXXXX";
        close(mkstemp(json));
        zl_run(&r, "-n 2 {%s} --dim 32 --batch 8 --layers %d --steps 1 --check --quiet --json %s %s", prog, L, json, off);
        cr_expect_eq(r.exit_code, 0, "%s at L = %d: exit %d (%s)", prog, L, r.exit_code, r.err);
        cJSON *j = zl_load_json(json);
        cr_assert(j, "%s: no report", prog);
        cJSON *pf = zl_get(cJSON_GetArrayItem(zl_get(j, "ranks"), 0), "memory.preflight");
        cr_expect(pf && zl_num(pf, "device_free") == 2e6, "%s: memory.preflight.device_free", prog);
        cJSON_Delete(j);
        unlink(json);
        zl_run(&r, "-n 2 {%s} --dim 32 --batch 8 --layers %d --steps 1 --quiet %s", prog, L + 1, off);
        cr_expect_eq(r.exit_code, 2, "%s at L + 1 = %d with the preflight: exit %d (%s)", prog, L + 1, r.exit_code, r.err);
        zl_run(&r, "-n 2 {%s} --dim 32 --batch 8 --layers %d --steps 1 --quiet --no-preflight %s", prog, L + 1, off);
        cr_expect_eq(r.exit_code, 1, "%s at L + 1 = %d without: exit %d (%s)", prog, L + 1, r.exit_code, r.err);
        cr_expect(strstr(r.err, "out of memory allocating"), "%s: %s", prog, r.err);
    }
}

/* ---- watchdog ------------------------------------------------------------------- */

/* The pid of the process whose command line holds `tag` and whose environment says it is
 * MPI rank `rank` (PMI_RANK: MPICH's Hydra; OMPI_COMM_WORLD_RANK: Open MPI). */
static pid_t find_rank(const char *tag, int rank) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;
    char want1[32], want2[48];
    snprintf(want1, sizeof want1, "PMI_RANK=%d", rank);
    snprintf(want2, sizeof want2, "OMPI_COMM_WORLD_RANK=%d", rank);
    while (d && !found && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64];
        static char buf[1 << 17]; /* a whole environment */
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        int is_launcher = strstr(buf, "mpiexec") || strstr(buf, "mpirun"); /* argv[0] only, before the NULs go */
        for (size_t i = 0; i < n; i++) buf[i] = buf[i] ? buf[i] : ' ';
        if (!strstr(buf, tag) || is_launcher) continue;
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        if (!(f = fopen(path, "r"))) continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (size_t i = 0; i < n;) {
            if (!strcmp(buf + i, want1) || !strcmp(buf + i, want2)) found = pid;
            i += strlen(buf + i) + 1;
        }
    }
    if (d) closedir(d);
    return found;
}

/* CPU seconds a process has used (utime + stime). */
static double cpu_seconds(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    zl_read_file(path, buf, sizeof buf);
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p) sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* mpiexec with argv (argv[0] "mpiexec"), stdout and stderr into the files out and err, not waited for. */
static pid_t spawn_job(char *const argv[], const char *out, const char *err) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t launcher;
    cr_assert_eq(posix_spawnp(&launcher, "mpiexec", &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return launcher;
}

Test(watchdog, a_stopped_rank_ends_the_job_with_exit_5, .timeout = 60) {
    char tag[64], out[64], err[64];
    snprintf(tag, sizeof tag, "--seed %d", 100000 + getpid()); /* finds our ranks among others */
    snprintf(out, sizeof out, "/tmp/zl_wd_out_%d", getpid());
    snprintf(err, sizeof err, "/tmp/zl_wd_err_%d", getpid());
    char prog[256], seed[32];
    snprintf(prog, sizeof prog, "%s/stage2", zl_build_dir());
    snprintf(seed, sizeof seed, "%d", 100000 + getpid());
    char *argv[] = {"mpiexec", "-n", "2", prog, "--dim", "64", "--layers", "3", "--steps", "1000000", "--timeout", "5",
                    "--seed", seed, NULL};
    pid_t launcher = spawn_job(argv, out, err);
    pid_t r0 = 0, r1 = 0;
    for (int i = 0; i < 100 && !(r0 && r1); i++) { /* the ranks start within a few seconds */
        usleep(100000);
        r0 = find_rank(tag, 0), r1 = find_rank(tag, 1);
    }
    if (!(r0 && r1)) {
        char e[4096];
        zl_read_file(err, e, sizeof e);
        kill(launcher, SIGTERM);
        cr_assert_fail("did not find both ranks of the job (rank 0 pid %d, rank 1 pid %d); stderr: %s", (int)r0,
                       (int)r1, e);
    }
    char progress[1 << 12];
    int training = 0;
    for (int i = 0; i < 300 && !training; i++) { /* training, not start-up: a step line has been printed */
        zl_read_file(out, progress, sizeof progress);
        training = strstr(progress, "step    3/") != NULL;
        if (!training) usleep(100000);
    }
    if (!training) { /* a stop during start-up would test another wait than a step's */
        char e[4096];
        zl_read_file(err, e, sizeof e);
        kill(launcher, SIGKILL), kill(r0, SIGKILL), kill(r1, SIGKILL);
        waitpid(launcher, NULL, 0);
        cr_assert_fail("no 'step    3/' line in 30 s: the job never reached training; stdout: %.500s; stderr: %s",
                       progress, e);
    }
    cr_assert_eq(kill(r1, SIGSTOP), 0);
    double t0 = now();
    usleep(1000000);
    double c0 = cpu_seconds(r0); /* rank 0 now waits for rank 1: it should sleep, not spin */
    usleep(2000000);
    double busy = (cpu_seconds(r0) - c0) / 2.0;
    int status = 0;
    pid_t done = 0;
    while (!(done = waitpid(launcher, &status, WNOHANG)) && now() - t0 < 40) usleep(100000);
    double secs = now() - t0;
    char e[4096];
    zl_read_file(err, e, sizeof e);
    kill(r1, SIGKILL); /* not SIGCONT: a resumed orphan would write to stderr after the fact */
    if (!done) {
        kill(launcher, SIGKILL), kill(r0, SIGKILL);
        waitpid(launcher, &status, 0);
        cr_assert_fail("the job was still running 40 s after a rank stopped");
    }
    unlink(out), unlink(err);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 5, "status %d, stderr %s", status, e);
    cr_expect(secs < 30, "ended %.1f s after the stop", secs);
    cr_expect(strstr(e, "stage2: rank 0: no progress for") && strstr(e, "in step") && strstr(e, "waiting in"),
              "stderr: %s", e);
    cr_expect_eq(zl_program_lines(e, "stage2"), 1, "one line: %s", e);
    /* The CPU backend waits politely; on CUDA the host spins in cudaStreamSynchronize by design. */
    if (strstr(zl_build_dir(), "cpu"))
        cr_expect(busy < 0.5, "rank 0 used %.0f%% of a core while waiting for the stopped rank", 100 * busy);
}

/* A rank stopped after the report, while the ranks finalize: MPI_Finalize waits on it, and the
 * watchdog used to be off by then — the job never ended. Now it watches through MPI_Finalize and
 * exits 5 (no MPI_Abort from a finalizing MPI: the launcher ends the rest). The stop must land
 * after rank 0's last line and before rank 1 leaves MPI: if rank 1 was already gone (the job ends
 * 0), or stopped past MPI_Finalize (rank 0 gone with 0, the launcher waiting on a stopped process:
 * nothing a rank can end), the attempt is made again. Under MPICH rank 1 used to leave before its
 * launcher forwarded rank 0's last line, every time: the test hook holds it a second there. */
Test(watchdog, a_rank_stopped_while_finalizing_ends_the_job_with_exit_5, .timeout = 120) {
    setenv("ZL_TEST_HOLD_FINALIZE", "1:1000", 1); /* rank 1 waits 1 s (of --timeout 2) before MPI_Finalize */
    char out[64], err[64], prog[256], seed[32], tag[64], e[4096] = "", o[1 << 14];
    snprintf(out, sizeof out, "/tmp/zl_wdf_out_%d", getpid());
    snprintf(err, sizeof err, "/tmp/zl_wdf_err_%d", getpid());
    snprintf(prog, sizeof prog, "%s/stage1", zl_build_dir());
    int status = 0, stopped_in_time = 0;
    for (int attempt = 0; attempt < 3 && !stopped_in_time; attempt++) {
        snprintf(seed, sizeof seed, "%d", 200000 + 10 * getpid() % 100000 + attempt);
        snprintf(tag, sizeof tag, "--seed %s", seed);
        char *argv[] = {"mpiexec", "-n", "2", prog, "--dim", "24", "--layers", "2", "--steps", "3000", "--timeout",
                        "2", "--seed", seed, "--quiet", NULL};
        pid_t launcher = spawn_job(argv, out, err);
        pid_t r1 = 0;
        int ended = 0;
        for (int i = 0; i < 60000 && !ended; i++) { /* the report's last line, then stop rank 1 at once */
            if (!r1) r1 = find_rank(tag, 1);
            zl_read_file(out, o, sizeof o);
            if (r1 && strstr(o, "\ncheck:")) break;
            ended = waitpid(launcher, &status, WNOHANG) == launcher;
            usleep(500);
        }
        if (ended) continue;
        if (r1) kill(r1, SIGSTOP);
        double t0 = now();
        pid_t done = 0;
        while (!(done = waitpid(launcher, &status, WNOHANG)) && now() - t0 < 30) usleep(50000);
        zl_read_file(err, e, sizeof e);
        int rank0_gone = !find_rank(tag, 0); /* rank 1 stopped after MPI_Finalize: the launcher's to wait */
        if (r1) kill(r1, SIGKILL);
        if (!done) {
            kill(launcher, SIGKILL);
            waitpid(launcher, &status, 0);
            if (rank0_gone) continue; /* rank 0 left with 0: too late a stop, not a hang of ours */
            cr_assert_fail("the job was still running 30 s after rank 1 stopped while finalizing; stderr: %s", e);
        }
        stopped_in_time = !(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* 0: rank 1 had left already */
    }
    unlink(out), unlink(err);
    if (!stopped_in_time) cr_skip_test("rank 1 left before the stop in 3 attempts");
    /* rank 0 exits 5; the launcher then ends the stopped rank by a signal, and which of the two
     * it reports can depend on the order it sees them in (MPICH's hydra returns a signal's number) */
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) != 0, "status %d, stderr %s", status, e);
    cr_expect(strstr(e, "stage1: rank 0: no progress for") && strstr(e, "while finishing (MPI_Finalize"),
              "stderr: %s", e);
}

/* ---- flags ---------------------------------------------------------------------- */

static void expect_refused(const char *launch, const char *expect) {
    zl_run_result r;
    zl_run(&r, "%s", launch);
    cr_expect_eq(r.exit_code, 2, "'%s' exited %d, stderr: %s", launch, r.exit_code, r.err);
    cr_expect(strstr(r.err, expect) != NULL, "'%s': stderr '%s' lacks '%s'", launch, r.err, expect);
    int ours = 0; /* lines from the program; launchers may add banners of their own */
    for (int s = 0; s < 4; s++) ours += zl_program_lines(r.err, (const char *[]){"stage0_ddp", "stage1", "stage2", "stage3"}[s]);
    cr_expect_eq(ours, 1, "'%s': not one line from the program: '%s'", launch, r.err);
}

/* Two ranks on one GPU — mpiexec -n 2 on a one-GPU machine: NCCL would refuse it deep in its
 * set-up (exit 1). It is a launch mistake: exit 2, one line naming the ranks, before training,
 * and no --json left behind; one rank on that device runs. On a GPU, CUDA_VISIBLE_DEVICES=0 makes
 * every rank see one device, the same; the CPU backend has none to share, so there its test hook
 * ZL_TEST_ONE_DEVICE=1 gives every rank the same one. */
/* A launcher that cannot start the library's ranks (Ubuntu 24.04's mpich: its mpiexec and its
 * PMIx-built library) starts N singletons, each reporting a one-rank run and exiting 0. The
 * launcher's own count (PMI_SIZE from Hydra or Slurm, OMPI_COMM_WORLD_SIZE from Open MPI) gives
 * it away: exit 2, one line. Here a singleton run is given the variable a 4-rank launch sets. */
Test(launch, a_launcher_that_starts_singletons_is_refused) {
    static const char *const vars[] = {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"};
    for (int i = 0; i < 2; i++) {
        setenv(vars[i], "4", 1);
        zl_run_result r;
        zl_run_plain(&r, "{stage1} --preset tiny --steps 1 --quiet");
        unsetenv(vars[i]);
        cr_expect_eq(r.exit_code, 2, "%s=4: exit %d, %s", vars[i], r.exit_code, r.err);
        cr_expect(strstr(r.err, "the launcher started 4 processes") && strstr(r.err, "MPI_COMM_WORLD has 1"), "%s",
                  r.err);
        cr_expect_eq(zl_program_lines(r.err, "stage1"), 1, "%s", r.err);
        cr_expect(strstr(r.out, "memory per rank") == NULL, "%s=4: the run went on", vars[i]);
    }
    zl_run_result r;
    zl_run_plain(&r, "{stage1} --preset tiny --steps 1 --quiet");
    cr_expect_eq(r.exit_code, 0, "a singleton run: exit %d, %s", r.exit_code, r.err);
}

Test(launch, two_ranks_on_one_device_are_refused) {
    const char *var = zl_build_is_cuda() ? "CUDA_VISIBLE_DEVICES" : "ZL_TEST_ONE_DEVICE";
    setenv(var, zl_build_is_cuda() ? "0" : "1", 1);
    char json[64];
    snprintf(json, sizeof json, "/tmp/zl_one_device_%d.json", getpid());
    unlink(json);
    char launch[160];
    for (int n = 2; n <= 3; n++) {
        snprintf(launch, sizeof launch, "-n %d {stage%d} --preset tiny --steps 2 --quiet --json %s", n, n, json);
        expect_refused(launch, "ranks 0 and 1 on this node would both use device");
        cr_expect(access(json, F_OK) != 0, "%s: a refused run left %s", launch, json);
    }
    zl_run_result r;
    zl_run(&r, "-n 1 {stage2} --preset tiny --steps 2 --quiet");
    cr_expect_eq(r.exit_code, 0, "one rank on the one device: exit %d, %s", r.exit_code, r.err);
    unsetenv(var);
}

/* NCCL_COMM_BLOCKING=0 would make NCCL's calls return before they are done, which zerolab does not
 * wait for: on GPUs it is refused like a bad flag (backend_cuda.c), and values NCCL reads as
 * "blocking" run. The CPU backend has no NCCL, so there the variable is nobody's business. */
Test(launch, a_non_blocking_nccl_is_refused) {
    if (!zl_build_is_cuda()) cr_skip_test("NCCL_COMM_BLOCKING concerns the CUDA build only");
    setenv("NCCL_COMM_BLOCKING", "0x0", 1); /* NCCL reads it with strtoll, base 0 */
    expect_refused("-n 2 {stage1} --preset tiny --steps 2 --quiet", "NCCL_COMM_BLOCKING=0x0 makes NCCL's calls non-blocking");
    setenv("NCCL_COMM_BLOCKING", "1", 1);
    zl_run_result r;
    zl_run(&r, "-n 2 {stage1} --preset tiny --steps 2 --quiet");
    cr_expect_eq(r.exit_code, 0, "NCCL_COMM_BLOCKING=1: exit %d, %s", r.exit_code, r.err);
    unsetenv("NCCL_COMM_BLOCKING");
}

Test(flags, values_that_narrow_to_0_or_1_in_a_float_are_refused) {
    expect_refused("-n 1 {stage0_ddp} --beta2 0.99999999999", "--beta2: expected a number in [0, 1)");
    expect_refused("-n 1 {stage0_ddp} --beta1=0.999999999999", "(1 as a 32-bit float)");
    expect_refused("-n 1 {stage0_ddp} --lr 1e-50", "--lr: expected a number in (0, 10], got '1e-50' (0 as a");
    expect_refused("-n 2 {stage0_ddp} --loss-scale 1e-46", "--loss-scale");
    expect_refused("-n 1 {stage0_ddp} --eps 1e-60", "--eps");
}

/* strtol and strtod skip leading white space and strtol takes a '+': the flags take what --seed
 * and the ZL_ knobs take, digits (a '-' first at most; a float's own forms). (A tab: the
 * harness splits its command line at spaces.) */
Test(flags, a_number_with_leading_space_or_plus_is_refused) {
    expect_refused("-n 1 {stage0_ddp} --batch=\t3", "--batch: expected an integer in [1, 1048576], got '\\t3'");
    expect_refused("-n 1 {stage1} --steps +2", "--steps: expected an integer in [1, 1000000], got '+2'");
    expect_refused("-n 1 {stage2} --loss-scale=\t1", "--loss-scale: expected dynamic or a number");
    expect_refused("-n 1 {stage3} --lr=\t1e-3", "--lr: expected a number in (0, 10], got '\\t1e-3'");
    zl_run_result r;
    zl_run(&r, "-n 1 {stage2} --batch 04 --lr +1e-3 --steps 2 --quiet"); /* digits and a float's sign are fine */
    cr_expect_eq(r.exit_code, 0, "exit %d: %s", r.exit_code, r.err);
}

Test(flags, control_characters_are_escaped) {
    expect_refused("-n 1 {stage0_ddp} --dim 1\n2", "got '1\\n2'");
    expect_refused("-n 1 {stage0_ddp} --preset x\ty", "got 'x\\ty'");
}

Test(flags, flag_equals_value_and_default_prefetch) {
    zl_run_result r;
    zl_run(&r, "-n 2 {stage3} --layers=1 --steps=2 --quiet");
    cr_expect_eq(r.exit_code, 0, "stage3 with one layer (default --prefetch 0): %s", r.err);
    cr_expect(strstr(r.out, "prefetch 0"), "%s", r.out);
    zl_run(&r, "-n 1 {stage3} --layers 3 --steps 1 --quiet");
    cr_expect(strstr(r.out, "prefetch 1"), "%s", r.out);
    expect_refused("-n 1 {stage3} --layers 1 --prefetch 1", "--prefetch: expected an integer in [0, 0]");
    expect_refused("-n 1 {stage1} --quiet=1", "--quiet takes no value");
}

/* The ZL_ knobs are input like the flags: a bad value is refused by every rank in one line,
 * exit 2, before the backend starts (args.c); the words and both ends of each range run. */
static void set_knobs(const char *const values[4]) { /* zl_knobs' values in order; NULL: unset */
    for (int k = 0; k < 4; k++) values[k] ? setenv(zl_knobs[k], values[k], 1) : unsetenv(zl_knobs[k]);
}
Test(flags, bad_environment_knobs_are_refused_before_anything_is_allocated) {
    static const char *const bad[][2] = {
        {"ZL_GEMM_TUNE", "yes"},         {"ZL_CUBLASLT_EPILOGUES", "32"}, {"ZL_NCCL_CTA_POLICY", "-1"},
        {"ZL_NCCL_WINDOWS", "01"},       {"ZL_NCCL_WINDOWS", "1 "},       {"ZL_NCCL_CTA_POLICY", "3"},
        {"ZL_NCCL_CTA_POLICY", "+2"},    {"ZL_CUBLASLT_EPILOGUES", "99999999999999999999"},
        {"ZL_CPU_DEVICE_BYTES", "abc"},  {"ZL_CPU_DEVICE_BYTES", "-5"}, /* a test hook's typo, not ignored */
    };
    char expect[128];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        snprintf(expect, sizeof expect, "%s=%s: want ", bad[i][0], bad[i][1]);
        expect_refused("-n 2 {stage2} --steps 2 --quiet", expect);
        unsetenv(bad[i][0]);
    }
    static const char *const good[][4] = {{"log", "31", "2", "0"}, {"0", "0", "0", "1"}, {"1", "", "1", ""}};
    for (int g = 0; g < 3; g++) {
        set_knobs(good[g]);
        zl_run_result r;
        zl_run(&r, "-n 2 {stage2} --steps 2 --quiet");
        cr_expect_eq(r.exit_code, 0, "good knob values (set %d) refused: %s", g, r.err);
        cr_expect(!strstr(r.err, "warning"), "set %d: %s", g, r.err);
    }
    set_knobs((const char *const[4]){NULL, NULL, NULL, NULL});
}

/* ZL_GEMM_TABLE (common/gemm_table.h) is input too: a table that does not load, or one beside
 * ZL_GEMM_TUNE=0, is refused in one line, exit 2, before anything is allocated; one that loads but
 * was made on another GPU runs with the first answers, and the report says the table was not used
 * and why (JSON run.gemm_table). */
Test(flags, a_gemm_table_is_checked_and_one_for_another_gpu_is_not_used) {
    char path[64], json[64];
    snprintf(path, sizeof path, "/tmp/zl_loud_table_%d.json", getpid());
    snprintf(json, sizeof json, "/tmp/zl_loud_table_%d.report.json", getpid());
    setenv("ZL_GEMM_TABLE", "/nonexistent/table.json", 1);
    expect_refused("-n 2 {stage2} --steps 2 --quiet", "ZL_GEMM_TABLE: cannot open /nonexistent/table.json");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"format\": \"zerolab gemm table 1\", \"gpu\": \"no such GPU\", \"cublaslt_version\": 1}", f);
    fclose(f);
    setenv("ZL_GEMM_TABLE", path, 1);
    expect_refused("-n 2 {stage2} --steps 2 --quiet",
                   "want \"gpu\" (a name), \"cublaslt_version\" (a number) and \"gemms\"");
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"format\": \"zerolab gemm table 1\", \"gpu\": \"no such GPU\", \"cublaslt_version\": 1, "
          "\"gemms\": []}", f);
    fclose(f);
    setenv("ZL_GEMM_TUNE", "0", 1); /* 0 keeps every first answer: the table would do nothing */
    expect_refused("-n 2 {stage2} --steps 2 --quiet", "with ZL_GEMM_TUNE=0: 0 keeps every first answer");
    unsetenv("ZL_GEMM_TUNE");
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} --steps 2 --json %s", json);
    unsetenv("ZL_GEMM_TABLE");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    const char *why = zl_build_is_cuda() ? "made on another GPU or cuBLASLt" : "the CPU backend has no cuBLASLt";
    char line[256];
    snprintf(line, sizeof line, "gemm table: %s: not used (%s)", path, why);
    cr_expect(strstr(r.out, line), "no '%s' in: %s", line, r.out);
    cJSON *j = zl_load_json(json);
    cr_expect(cJSON_IsFalse(zl_get(j, "run.gemm_table.in_use")));
    cr_expect_str_eq(zl_get(j, "run.gemm_table.path")->valuestring, path);
    cr_expect_str_eq(zl_get(j, "run.gemm_table.why_not")->valuestring, why);
    cr_expect_eq(zl_num(j, "run.gemm_table.taken"), 0);
    cr_expect_eq(zl_num(j, "run.gemm_table.entries"), 0);
    cJSON_Delete(j);
    unlink(path), unlink(json);
}

/* A misspelt knob would change nothing: rank 0 names it (one line) and the run goes on. */
Test(flags, an_unknown_zl_variable_is_named_once) {
    setenv("ZL_GEMM_TUNES", "0", 1);
    zl_run_result r;
    zl_run(&r, "-n 2 {stage1} --steps 1 --quiet");
    unsetenv("ZL_GEMM_TUNES");
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    const char *w = strstr(r.err, "warning: ZL_GEMM_TUNES is set but is no variable zerolab reads");
    cr_expect(w && !strstr(strchr(w, '\n') ? strchr(w, '\n') : w, "ZL_GEMM_TUNES"), "one warning from rank 0 expected: '%s'",
              r.err);
}

/* Ranks whose knobs differ would issue different collectives (ZL_NCCL_WINDOWS registers
 * buffers collectively): refused like different flags. Unset and set to the default are the
 * same, but for the CTA policy, whose default is NCCL's (NCCL_CTA_POLICY may move it), and the
 * windows, whose default is the stage's (on for ZeRO-1/2 where NCCL can: backend.h). */
Test(flags, ranks_with_different_knobs_are_refused) {
    /* the second rank of each launch takes the knobs from this environment: none, whatever the
     * suite was run under (test-gpu.sh can export a knob to every run) */
    set_knobs((const char *const[4]){NULL});
    expect_refused("-n 1 env ZL_NCCL_WINDOWS=1 {stage0_ddp} : -n 1 {stage0_ddp}", "every rank must get the same flags and ZL_ knobs");
    /* what the ranks compare is what a knob means: one rank setting a default runs */
    zl_run_result r;
    zl_run(&r, "-n 1 env ZL_GEMM_TUNE=1 ZL_CUBLASLT_EPILOGUES=27 {stage0_ddp} --steps 2 --quiet : "
               "-n 1 {stage0_ddp} --steps 2 --quiet");
    cr_expect_eq(r.exit_code, 0, "a default set on one rank only: exit %d: %s", r.exit_code, r.err);
    expect_refused("-n 1 env ZL_NCCL_CTA_POLICY=0 {stage0_ddp} : -n 1 {stage0_ddp}", "every rank must get the same");
    expect_refused("-n 1 env ZL_NCCL_WINDOWS=0 {stage1} : -n 1 {stage1}", "every rank must get the same");
}

Test(flags, help_on_one_rank_of_an_mpmd_launch_does_not_hang) {
    zl_run_result r;
    double t0 = now();
    zl_run(&r, "-n 1 {stage1} --help : -n 1 {stage1}");
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(now() - t0 < 20);
    const char *first = strstr(r.out, "usage:");
    cr_expect(first && !strstr(first + 1, "usage:"), "usage printed %s", first ? "twice" : "never");
    cr_expect(strstr(r.out, "exit codes: 0 ok | 1 runtime error"), "--help documents the exit codes: %s", r.out);
}

/* ---- --check ---------------------------------------------------------------------- */

static void run_check(const char *prog, int N, const char *perturb, int expect_exit) {
    char json[96];
    snprintf(json, sizeof json, "/tmp/zl_check_%s_%d.json", prog, getpid());
    if (perturb) setenv("ZL_TEST_PERTURB_FORMULA", perturb, 1);
    else unsetenv("ZL_TEST_PERTURB_FORMULA");
    zl_run_result r;
    zl_run(&r, "-n %d {%s} --layers 2 --dim 31 --batch 3 --steps 2 --quiet --check --json %s", N, prog, json);
    unsetenv("ZL_TEST_PERTURB_FORMULA");
    cr_expect_eq(r.exit_code, expect_exit, "%s N=%d perturb %s: exit %d, %s", prog, N, perturb ? perturb : "-",
                 r.exit_code, r.err);
    cJSON *j = zl_load_json(json);
    cJSON *ok = zl_get(j, "check.ok");
    cr_expect(expect_exit ? cJSON_IsFalse(ok) : cJSON_IsTrue(ok));
    int n = cJSON_GetArraySize(zl_get(j, "check.mismatches"));
    if (expect_exit) {
        cr_expect(n >= N, "every rank's mismatch is listed (%d)", n);
        const char *first = cJSON_GetArrayItem(zl_get(j, "check.mismatches"), 0)->valuestring;
        cr_expect(strstr(first, perturb), "first mismatch '%s' names %s", first, perturb);
        cr_expect(strstr(r.out, "check: MISMATCH"), "%s", r.out);
        cr_expect(strstr(r.err, "--check: ") && strstr(r.err, perturb) && zl_program_lines(r.err, prog) == 1,
                  "exit 4 with one line on stderr naming %s: '%s'", perturb, r.err); /* it had none */
    } else {
        cr_expect_eq(n, 0);
    }
    cJSON_Delete(j);
    unlink(json);
}

Test(check, exit_0_when_everything_matches_every_stage) {
    const char *zl_progs[] = {"stage0_ddp", "stage1", "stage2", "stage3"};
    for (int s = 0; s < 4; s++) run_check(zl_progs[s], 2, NULL, 0);
}

Test(check, exit_4_when_a_formula_is_perturbed) {
    run_check("stage2", 2, "activations", 4);
    const char *m = getenv("ZL_MAX_WORLD");
    run_check("stage3", m && atoi(m) < 3 ? 2 : 3, "param_gather", 4);
    run_check("stage0_ddp", 1, "adam_v", 4);
    /* the traffic side: one byte a step more in a purpose's formula */
    run_check("stage2", 2, "grad_sync", 4);
    run_check("stage3", 2, "param_gather_bwd", 4);
    run_check("stage1", 2, "control", 4);
}

/* A diverged run whose --check also fails exits 3 (the first of 1, 3, 4), and says both. */
Test(check, divergence_outranks_a_mismatch) {
    setenv("ZL_TEST_PERTURB_FORMULA", "adam_m", 1);
    zl_run_result r;
    zl_run(&r, "-n 2 {stage2} --steps 2 --loss-scale 4 --inject-overflow 2 --check --quiet");
    unsetenv("ZL_TEST_PERTURB_FORMULA");
    cr_expect_eq(r.exit_code, 3, "%s", r.err);
    cr_expect(strstr(r.err, "diverged at step 2") && strstr(r.err, "--check:"), "%s", r.err);
}

/* Without --check a mismatch is reported but the exit code stays 0. */
Test(check, mismatch_without_check_only_reports) {
    setenv("ZL_TEST_PERTURB_FORMULA", "scratch", 1);
    zl_run_result r;
    zl_run(&r, "-n 1 {stage1} --steps 2 --quiet");
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "check: MISMATCH"), "%s", r.out);
    cr_expect(!strstr(r.err, "--check:"), "no failure to report on stderr: %s", r.err);
}
