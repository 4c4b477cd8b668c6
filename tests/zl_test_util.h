/* zl_test_util.h — helpers for integration tests: run `mpiexec -n N build/<backend>/<prog> ...`
 * as a child process (posix_spawn; a Criterion test binary must never itself run under
 * mpiexec), capture its exit status, stdout and stderr, and load its JSON report.
 *
 * Environment: ZL_BUILD (default build/cpu) picks the programs; ZL_MPIEXEC (default
 * "mpiexec") is the launcher and may carry options, e.g. "mpirun --oversubscribe". */
#ifndef ZL_TEST_UTIL_H
#define ZL_TEST_UTIL_H

#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct {
    int exit_code; /* -1 if killed by a signal */
    char out[1 << 16];
    char err[1 << 14];
} zl_run_result;

static inline const char *zl_build_dir(void) {
    const char *b = getenv("ZL_BUILD");
    return b && *b ? b : "build/cpu";
}

/* The CUDA build (ZL_BUILD=build/cuda): the CPU backend's test hooks (ZL_CPU_DEVICE_BYTES) do
 * not reach it, and zerocalc's answer for it is --backend cuda. */
static inline int zl_build_is_cuda(void) { return strstr(zl_build_dir(), "cuda") != NULL; }

static inline void zl_read_file(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Run a launcher command line. `segments` is the part after "mpiexec": e.g.
 * "-n 2 {prog} --preset tiny"; every {P} is replaced by ZL_BUILD/P. Words are separated
 * by single spaces (test arguments contain no spaces). A timeout (timeout(1)) guards
 * against hangs. stdout goes to r->out, or with stdout_path to that file (opened, not
 * created: a device such as /dev/full). */
static inline void zl_run_line_to(zl_run_result *r, int use_launcher, const char *line, const char *stdout_path) {
    char expanded[8192];
    /* expand {prog} */
    char *o = expanded;
    for (const char *p = line; *p;) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            o += sprintf(o, "%s/%.*s", zl_build_dir(), (int)(close - p - 1), p + 1);
            p = close + 1;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    const char *launcher = getenv("ZL_MPIEXEC");
    if (!launcher || !*launcher) launcher = "mpiexec";
    if (!use_launcher) launcher = "";
    char cmd[8192 + 512];
    snprintf(cmd, sizeof cmd, "timeout 300 %s %s", launcher, expanded);

    char *argv[256];
    int argc = 0;
    for (char *tok = strtok(cmd, " "); tok && argc < 255; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;

    char out_path[] = "/tmp/zl_out_XXXXXX", err_path[] = "/tmp/zl_err_XXXXXX";
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    cr_assert(fo >= 0 && fe >= 0, "mkstemp failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (stdout_path) posix_spawn_file_actions_addopen(&fa, 1, stdout_path, O_WRONLY, 0);
    else posix_spawn_file_actions_adddup2(&fa, fo, 1);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    cr_assert_eq(rc, 0, "posix_spawnp(%s) failed: %s", argv[0], strerror(rc));
    int status = 0;
    waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fo), close(fe);
    r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    zl_read_file(out_path, r->out, sizeof r->out);
    zl_read_file(err_path, r->err, sizeof r->err);
    unlink(out_path), unlink(err_path);
}

static inline void zl_run_line(zl_run_result *r, int use_launcher, const char *line) {
    zl_run_line_to(r, use_launcher, line, NULL);
}

static inline void zl_run(zl_run_result *r, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    zl_run_line(r, 1, line);
}

/* Run a program without the MPI launcher: "{zerocalc} --params 1e9" (relative to build/). */
static inline void zl_run_plain(zl_run_result *r, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    zl_run_line(r, 0, line);
}

/* zl_run_plain with the program's stdout opened on `path` (an existing file or device, e.g.
 * /dev/full: a full disk), not captured: r->out stays empty. */
static inline void zl_run_plain_stdout(zl_run_result *r, const char *path, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    zl_run_line_to(r, 0, line, path);
}

static inline cJSON *zl_load_json(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "no JSON report at %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(fread(buf, 1, (size_t)n, f) == (size_t)n);
    buf[n] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    cr_assert(j, "JSON report %s does not parse", path);
    free(buf);
    return j;
}

/* j["a"]["b"]... ; fails the test if a key is missing. */
static inline cJSON *zl_get(cJSON *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k; k = strtok(NULL, ".")) {
        cJSON *next = cJSON_GetObjectItemCaseSensitive(j, k);
        cr_assert(next, "JSON key '%s' missing (path %s)", k, path);
        j = next;
    }
    return j;
}
static inline double zl_num(cJSON *j, const char *path) {
    cJSON *v = zl_get(j, path);
    cr_assert(cJSON_IsNumber(v), "JSON %s is not a number", path);
    return v->valuedouble;
}

/* Read a raw fp16 dump into doubles. */
static inline double *zl_load_params(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "no parameter dump at %s", path);
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    *n = (size_t)bytes / 2;
    unsigned short *h = malloc((size_t)bytes);
    cr_assert(fread(h, 2, *n, f) == *n);
    fclose(f);
    double *d = malloc(*n * sizeof(double));
    for (size_t i = 0; i < *n; i++) {
        unsigned s = h[i] >> 15, e = (h[i] >> 10) & 31, m = h[i] & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? NAN : ldexp(1024 + m, (int)e - 25);
        d[i] = s ? -v : v;
    }
    free(h);
    return d;
}

/* ZL_MAX_WORLD caps N (2 on a two-GPU machine; default 4). */
static inline int zl_max_world(void) {
    const char *m = getenv("ZL_MAX_WORLD");
    return m && *m ? atoi(m) : 4;
}

static const char *const zl_progs[4] = {"stage0_ddp", "stage1", "stage2", "stage3"};
/* README's ZL_ knobs (ZL_GEMM_TABLE aside: a file, with its own tests), written out here */
static const char *const zl_knobs[4] = {"ZL_GEMM_TUNE", "ZL_CUBLASLT_EPILOGUES", "ZL_NCCL_CTA_POLICY", "ZL_NCCL_WINDOWS"};

/* Lines on stderr that come from the program ("stageK: ..."), not from the launcher. */
static inline int zl_program_lines(const char *err, const char *prog) {
    int n = 0;
    size_t len = strlen(prog);
    for (const char *l = err; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, prog, len) && l[len] == ':') n++;
    return n;
}

/* Run a launcher line with --quiet --json, expect an exit code, load the report (the
 * caller frees it; the file is removed). */
static inline cJSON *zl_run_json(int expect_exit, const char *fmt, ...) {
    char line[2048], json[96];
    static int serial;
    snprintf(json, sizeof json, "/tmp/zl_json_%d_%d.json", getpid(), serial++);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    zl_run_result r;
    zl_run(&r, "%s --quiet --json %s", line, json);
    cr_assert_eq(r.exit_code, expect_exit, "'%s': exit %d (expected %d)\n%s\n%s", line, r.exit_code, expect_exit,
                 r.out, r.err);
    cJSON *j = zl_load_json(json);
    unlink(json);
    return j;
}

/* One rank's JSON report (rk): the control traffic's formula (K fp32 losses, and from ZeRO-1 on
 * the 16-byte gradient statistics) and, for every purpose, measured wire bytes == formula. */
static inline void zl_expect_traffic_by_purpose(cJSON *rk, const char *prog, int stage, int N, int K) {
    cr_expect_float_eq(zl_num(rk, "comm.formula.by_purpose.control"),
                       2.0 * (N - 1) / N * (4 * K + (stage >= 1 ? 16 : 0)), 1e-9);
    static const char *const purposes[] = {"grad_sync", "param_gather_fwd", "param_gather_bwd",
                                           "param_gather_step", "control", "param_gather_final"};
    for (size_t p = 0; p < sizeof purposes / sizeof purposes[0]; p++) {
        char m[96], f[96];
        snprintf(m, sizeof m, "comm.measured.by_purpose.%s", purposes[p]);
        snprintf(f, sizeof f, "comm.formula.by_purpose.%s", purposes[p]);
        cr_expect_float_eq(zl_num(rk, m), zl_num(rk, f), 1e-9 * (1 + zl_num(rk, f)), "%s N=%d %s: %.0f vs %.0f", prog,
                           N, purposes[p], zl_num(rk, m), zl_num(rk, f));
    }
}

/* Model states per rank, counted here from the stage alone: full copies of `full` elements
 * (Ψ_full — every padded unit rounded up to a 16-byte line; the paper: Ψ) and slices of
 * shard/N (Ψ_pad/N; the paper: Ψ/N). */
static inline double zl_states_for(int stage, double full, double shard, int N) {
    switch (stage) {
    case 0: return 16 * full;
    case 1: return 4 * full + 12 * shard / N;
    case 2: return 2 * full + 14 * shard / N;
    default: return 16 * shard / N;
    }
}

static inline const char *zl_hash_of(cJSON *j) { return zl_get(j, "param_hash")->valuestring; }

/* A --trace file's process of a rank: rank + 1 (trace format 4; viewers take pid 0 for the kernel's). */
#define ZL_TRACE_PID(rank) ((rank) + 1)

static inline int zl_is_rank0_span(cJSON *e) {
    cJSON *ph = cJSON_GetObjectItem(e, "ph");
    return cJSON_IsString(ph) && !strcmp(ph->valuestring, "X") && zl_num(e, "pid") == ZL_TRACE_PID(0);
}

/* In a --trace file: rank 0's optimizer spans that start after the last loss span and before
 * the last backward span — the updates that ran inside the last step's backward. The CPU
 * backend runs a rank's lanes in the order they were issued, so span order is issue order. */
static inline int zl_optimizer_spans_in_last_backward(const char *trace) {
    cJSON *t = zl_load_json(trace);
    cJSON *events = zl_get(t, "traceEvents"), *e;
    double last_loss = -1, last_backward = -1;
    cJSON_ArrayForEach(e, events) {
        if (!zl_is_rank0_span(e)) continue;
        const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
        double ts = zl_num(e, "ts");
        if (!strcmp(name, "loss") && ts > last_loss) last_loss = ts;
        if (!strncmp(name, "backward", 8) && ts > last_backward) last_backward = ts;
    }
    int inside = 0;
    cJSON_ArrayForEach(e, events) {
        if (!zl_is_rank0_span(e) || strncmp(cJSON_GetObjectItem(e, "name")->valuestring, "optimizer", 9)) continue;
        double ts = zl_num(e, "ts");
        inside += ts > last_loss && ts < last_backward;
    }
    cr_expect(last_loss >= 0 && last_backward > last_loss, "%s: a last step with a backward", trace);
    cJSON_Delete(t);
    return inside;
}

/* ‖p − p_ref‖ / ‖p_ref‖ between two raw fp16 dumps (--dump-params) of the same length; the
 * reference must not be all zeros. *n (may be NULL) gets the element count. */
static inline double zl_param_relative_diff(const char *path, const char *ref_path, size_t *n) {
    size_t na, nr;
    double *p = zl_load_params(path, &na), *ref = zl_load_params(ref_path, &nr);
    cr_assert_eq(na, nr, "%s holds %zu values, %s %zu", path, na, ref_path, nr);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < na; i++) diff += (p[i] - ref[i]) * (p[i] - ref[i]), norm += ref[i] * ref[i];
    cr_assert(norm > 0, "%s: the reference parameters are all zero", ref_path);
    free(p), free(ref);
    if (n) *n = na;
    return sqrt(diff / norm);
}

/* Training moved the parameters: the dump `final` (--dump-params) differs from the initial
 * parameters by more than min_rel, norm-relative. The initial ones are dumped by `launch` (the
 * run's own mpiexec arguments, program and model flags, without --steps) with one step whose
 * update is skipped: an overflow injected into step 1 leaves the parameters as initialised
 * (test_mixed: inject/a_skipped_step_leaves_the_parameters_bitwise_unchanged). */
static inline void zl_expect_trained(const char *final, double min_rel, const char *fmt, ...) {
    char launch[2048], init[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(launch, sizeof launch, fmt, ap);
    va_end(ap);
    snprintf(init, sizeof init, "/tmp/zl_init_%d.bin", getpid());
    zl_run_result r;
    zl_run(&r, "%s --steps 1 --inject-overflow 1 --quiet --dump-params %s", launch, init);
    cr_assert_eq(r.exit_code, 0, "'%s' (the initial parameters): exit %d\n%s", launch, r.exit_code, r.err);
    double moved = zl_param_relative_diff(final, init, NULL);
    cr_expect(moved > min_rel, "%s: training moved the parameters by %.3g of their norm, no more than %.3g", final,
              moved, min_rel);
    unlink(init);
}

#endif
