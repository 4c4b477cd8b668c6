/* host_adam.c — throughput of the host Adam (--offload) on this CPU beside the memory
 * bandwidth the same threads reach: the scalar reference (zl_cpu_adam_update) and the
 * vectorised update (zl_host_adam_update), each as offload.c runs it (32K-element chunks over
 * OpenMP threads, static schedule), fp16 and bf16; and a STREAM-triad-like kernel,
 * a[i] = b[i] + s·c[i] over floats, on the same thread counts. Host Adam is memory-bound from
 * a few threads on, so its GB/s as a fraction of the triad's is how close it runs to the
 * machine's limit.
 *
 *   build/bench_host_adam [--threads 1,16,64] [--elements N] [--triad-elements N] [--reps R]
 *                         [--vector-only]
 *   build/bench_host_adam --verify-all    zl_host_round_array == zl_round_storage on all
 *                                         2^32 floats, both formats (a minute or so)
 *
 * Counting. Host Adam: 28 bytes an element (gradient 2 + master, m, v 4 read; master, m, v 4
 * + parameter 2 written; every line it writes it has read, so there is no hidden traffic).
 * Triad: 12 bytes an element, STREAM's counting (b, c read, a written); a CPU without
 * streaming stores also reads a's lines before writing them (write-allocate), 4 bytes more
 * that STREAM, and this figure, leave out — so the fraction is, if anything, low.
 * Sizes: by default every triad array, and host Adam's data, are at least 4× the sum of the
 * last-level caches (STREAM's rule; /sys/devices/system/cpu), at least 2^24 elements.
 * First touch: each thread count allocates fresh arrays and its threads write them first,
 * with the same schedule that times them, so pages sit on the timing threads' NUMA nodes.
 * Timing: best of R after one warm-up rep. Thread placement is the OpenMP runtime's
 * (OMP_PROC_BIND, OMP_PLACES). */
#define _DEFAULT_SOURCE /* glob.h's GLOB_NOSORT, strdup */
#include <glob.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels/cpu/adam_host.h"

enum { CHUNK = ZL_HOST_ADAM_CHUNK, MAX_THREAD_COUNTS = 32 }; /* offload.c's chunks (adam_host.h) */
typedef void (*adam_fn)(float *, float *, float *, zl_half *, const zl_half *, size_t, float, int, zl_adam_hparams);

/* ---- sizes ------------------------------------------------------------------------------ */

/* Sum of the last-level caches of this machine: the highest cache level of cpu0, every
 * distinct instance of it (shared_cpu_list) counted once. 0 when sysfs says nothing. */
static size_t llc_bytes(void) {
    glob_t g;
    if (glob("/sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*", GLOB_NOSORT, NULL, &g)) return 0;
    int top = 0;
    size_t total = 0, n_seen = 0;
    char **seen = calloc(g.gl_pathc, sizeof *seen);
    for (int pass = 0; pass < 2 && seen; pass++) /* pass 0: the top level; pass 1: its instances */
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char path[512], shared[256] = "", unit = 0;
            int level = 0;
            unsigned long size = 0;
            FILE *f;
            snprintf(path, sizeof path, "%s/level", g.gl_pathv[i]);
            if (!(f = fopen(path, "r"))) continue;
            if (fscanf(f, "%d", &level) != 1) level = 0;
            fclose(f);
            if (pass == 0) {
                if (level > top) top = level;
                continue;
            }
            if (level != top) continue;
            snprintf(path, sizeof path, "%s/shared_cpu_list", g.gl_pathv[i]);
            if (!(f = fopen(path, "r"))) continue;
            if (!fgets(shared, sizeof shared, f)) shared[0] = 0;
            fclose(f);
            int dup = 0;
            for (size_t k = 0; k < n_seen; k++) dup |= !strcmp(seen[k], shared);
            if (dup) continue;
            snprintf(path, sizeof path, "%s/size", g.gl_pathv[i]);
            if (!(f = fopen(path, "r"))) continue;
            if (fscanf(f, "%lu%c", &size, &unit) < 1) size = 0;
            fclose(f);
            total += size << (unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0);
            seen[n_seen++] = strdup(shared);
        }
    for (size_t k = 0; k < n_seen; k++) free(seen[k]);
    free(seen);
    globfree(&g);
    return total;
}

static size_t at_least(size_t bytes, size_t per_element) {
    size_t n = (bytes + per_element - 1) / per_element;
    return n > (1u << 24) ? n : 1u << 24;
}

/* ---- STREAM triad ------------------------------------------------------------------------ */

static void triad(float *restrict a, const float *restrict b, const float *restrict c, size_t n, float s,
                  int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

/* Best GB/s (12 B/element) of the triad on `threads` threads, arrays first touched by them. */
static double triad_GBps(size_t n, int threads, int reps) {
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    if (!a || !b || !c) return fprintf(stderr, "out of memory (triad, 3 x %zu floats)\n", n), exit(1), 0;
#pragma omp parallel for simd num_threads(threads) schedule(static) /* first touch: the triad's schedule */
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = omp_get_wtime();
        triad(a, b, c, n, 3.0f, threads);
        double dt = omp_get_wtime() - t0;
        if (r > 0 && dt < best) best = dt; /* rep 0 warms up */
    }
    if (a[n / 2] != 7.0f) return fprintf(stderr, "triad: wrong result %g\n", a[n / 2]), exit(1), 0;
    free(a), free(b), free(c);
    return 12.0 * (double)n / best / 1e9;
}

/* ---- host Adam ------------------------------------------------------------------------- */

static void run(adam_fn f, float *w, float *m, float *v, zl_half *s, size_t n, int threads, int t) {
    zl_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long k = 0; k < chunks; k++) {
        size_t i = (size_t)k * CHUNK, len = n - i < CHUNK ? n - i : CHUNK;
        f(w + i, m + i, v + i, s + i, s + i, len, 0x1p-10f, t, hp);
    }
}

/* Best seconds of one update over n elements; fresh arrays, first touched chunk by chunk
 * by the threads that then update them (offload.c's schedule). */
static double adam_seconds(adam_fn f, size_t n, int threads, int reps, int bf) {
    float *w = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    zl_half *s = malloc(n * 2);
    if (!w || !m || !v || !s) return fprintf(stderr, "out of memory (host Adam, %zu elements)\n", n), exit(1), 0;
    long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long k = 0; k < chunks; k++)
        for (size_t i = (size_t)k * CHUNK; i < n && i < (size_t)(k + 1) * CHUNK; i++)
            w[i] = 0.01f * (float)(i % 97), m[i] = 0, v[i] = 0, s[i] = zl_round_storage(1e-3f * (float)(i % 89), bf);
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = omp_get_wtime();
        run(f, w, m, v, s, n, threads, r + 1);
        double dt = omp_get_wtime() - t0;
        if (r > 0 && dt < best) best = dt; /* rep 0 warms up */
    }
    free(w), free(m), free(v), free(s);
    return best;
}

/* ---- --verify-all --------------------------------------------------------------------- */

static int verify_all(void) {
    enum { B = 1 << 20 };
    float *f = malloc(B * sizeof *f);
    zl_half *h = malloc(B * sizeof *h);
    for (int bf = 0; bf < 2; bf++) {
        zl_kernels_set_dtype(bf ? ZL_BF16 : ZL_F16);
        unsigned long long bad = 0;
        for (uint64_t base = 0; base < (1ull << 32); base += B) {
            for (uint32_t i = 0; i < B; i++) f[i] = zl_bits_f32((uint32_t)(base + i));
            zl_host_round_array(h, f, B);
            for (uint32_t i = 0; i < B; i++)
                if (h[i] != zl_round_storage(f[i], bf) && bad++ < 5)
                    printf("mismatch %s 0x%08x: 0x%04x\n", bf ? "bf16" : "fp16", (uint32_t)(base + i), h[i]);
        }
        printf("verify-all: %s (%s) rounding of all 2^32 floats: %llu mismatches\n", bf ? "bf16" : "fp16",
               zl_host_simd_name(), bad);
        if (bad) return 1;
    }
    free(f), free(h);
    return 0;
}

/* "1,16,64" -> counts[]; returns how many, 0 on bad input. */
static int parse_threads(const char *list, int *counts) {
    int n = 0;
    for (const char *p = list; *p && n < MAX_THREAD_COUNTS;) {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > 4096 || (*end && *end != ',')) return 0;
        counts[n++] = (int)t;
        p = *end ? end + 1 : end;
    }
    return n;
}

#define USAGE "usage: %s [--threads 1,16,64] [--elements N] [--triad-elements N] [--reps R] [--vector-only] | --verify-all\n"

int main(int argc, char **argv) {
    size_t llc = llc_bytes(), n = at_least(4 * llc, 14), n_triad = at_least(4 * llc, 4); /* 4x LLC (header) */
    int reps = 5, vector_only = 0, counts[MAX_THREAD_COUNTS], n_counts = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--verify-all")) return verify_all();
        if (!strcmp(argv[i], "--help")) return printf(USAGE, argv[0]), 0;
        if (!strcmp(argv[i], "--elements") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--triad-elements") && i + 1 < argc) n_triad = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && (n_counts = parse_threads(argv[++i], counts)))
            continue;
        else if (!strcmp(argv[i], "--vector-only")) vector_only = 1;
        else
            return fprintf(stderr, USAGE, argv[0]), 2;
    }
    if (n == 0 || n_triad == 0 || reps < 1) return fprintf(stderr, "--elements, --triad-elements, --reps: > 0\n"), 2;
    if (!n_counts) { /* default: one thread, and all OpenMP would use */
        counts[n_counts++] = 1;
        if (omp_get_max_threads() > 1) counts[n_counts++] = omp_get_max_threads();
    }
    printf("host Adam: %zu elements (28 B each: %.2f GB), 32K-element chunks; triad: 3 arrays of %zu floats "
           "(12 B each: %.2f GB); last-level caches %.1f MiB in all; %d processors; best of %d\n",
           n, 28e-9 * (double)n, n_triad, 12e-9 * (double)n_triad, (double)llc / (1 << 20), omp_get_num_procs(), reps);
    for (int c = 0; c < n_counts; c++) {
        int threads = counts[c];
        double triad_bw = triad_GBps(n_triad, threads, reps), adam_bw[2] = {0, 0};
        printf("triad             threads %3d: %8.2f GB/s (12 B/element)\n", threads, triad_bw);
        for (int bf = 0; bf < 2; bf++) {
            zl_kernels_set_dtype(bf ? ZL_BF16 : ZL_F16);
            const struct { const char *name; adam_fn f; } impl[2] = {{"scalar reference", zl_cpu_adam_update},
                                                                       {zl_host_simd_name(), zl_host_adam_update}};
            for (int k = vector_only; k < 2; k++) {
                double best = adam_seconds(impl[k].f, n, threads, reps, bf), gbps = 28.0 * (double)n / best / 1e9;
                if (k == 1) adam_bw[bf] = gbps;
                printf("%-5s %-17s threads %3d: %8.2f ms  %7.1f M elements/s  %7.2f GB/s  = %.2f of triad\n",
                       bf ? "bf16" : "fp16", impl[k].name, threads, best * 1e3, (double)n / best / 1e6, gbps,
                       gbps / triad_bw);
            }
        }
        /* One line for scripts (scripts/gpu-offload.sh): the vectorised update against the triad. */
        printf("summary: threads=%d triad_GBps=%.2f adam_fp16_GBps=%.2f adam_bf16_GBps=%.2f fp16_of_triad=%.3f "
               "bf16_of_triad=%.3f\n",
               threads, triad_bw, adam_bw[0], adam_bw[1], adam_bw[0] / triad_bw, adam_bw[1] / triad_bw);
    }
    return 0;
}
