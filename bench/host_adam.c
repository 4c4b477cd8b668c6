/* host_adam.c — throughput of the host Adam (--offload) on this CPU: the scalar reference
 * (zl_cpu_adam_update) and the vectorised update (zl_host_adam_update), each as offload.c
 * runs it (32K-element chunks over OpenMP threads), fp16 and bf16, 1 and 2 threads.
 *
 *   build/bench_host_adam [--elements N] [--reps R]   elements/s and GB/s (28 bytes an element:
 *                                                     grad 2 + m, v, master 4 in; m, v, master 4 + param 2 out)
 *   build/bench_host_adam --verify-all                 zl_host_round_array == zl_round_storage on all
 *                                                     2^32 floats, both formats (a minute or so) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels/cpu/adam_host.h"

enum { CHUNK = 1 << 15 };
typedef void (*adam_fn)(float *, float *, float *, zl_half *, const zl_half *, size_t, float, int, zl_adam_hparams);

static void run(adam_fn f, float *w, float *m, float *v, zl_half *s, size_t n, int threads, int t) {
    zl_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long k = 0; k < chunks; k++) {
        size_t i = (size_t)k * CHUNK, len = n - i < CHUNK ? n - i : CHUNK;
        f(w + i, m + i, v + i, s + i, s + i, len, 0x1p-10f, t, hp);
    }
}

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

int main(int argc, char **argv) {
    size_t n = 1u << 24;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--verify-all")) return verify_all();
        if (!strcmp(argv[i], "--elements") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else return fprintf(stderr, "usage: %s [--elements N] [--reps R] | --verify-all\n", argv[0]), 2;
    }
    float *w = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    zl_half *s = malloc(n * 2);
    if (!w || !m || !v || !s) return fprintf(stderr, "out of memory\n"), 1;
    printf("host Adam, %zu elements, best of %d, 28 B/element\n", n, reps);
    for (int bf = 0; bf < 2; bf++) {
        zl_kernels_set_dtype(bf ? ZL_BF16 : ZL_F16);
        const struct { const char *name; adam_fn f; } impl[2] = {{"scalar reference", zl_cpu_adam_update},
                                                                   {zl_host_simd_name(), zl_host_adam_update}};
        for (int threads = 1; threads <= 2; threads++)
            for (int k = 0; k < 2; k++) {
                for (size_t i = 0; i < n; i++) /* first touch by the threads that time it: fresh state */
                    w[i] = 0.01f * (float)(i % 97), m[i] = 0, v[i] = 0, s[i] = zl_round_storage(1e-3f * (float)(i % 89), bf);
                double best = 1e30;
                for (int r = 0; r < reps + 1; r++) {
                    double t0 = omp_get_wtime();
                    run(impl[k].f, w, m, v, s, n, threads, r + 1);
                    double dt = omp_get_wtime() - t0;
                    if (r > 0 && dt < best) best = dt; /* rep 0 warms up */
                }
                printf("%-5s %-17s threads %d: %8.2f ms  %7.1f M elements/s  %6.2f GB/s\n", bf ? "bf16" : "fp16",
                       impl[k].name, threads, best * 1e3, (double)n / best / 1e6, 28.0 * (double)n / best / 1e9);
            }
    }
    free(w), free(m), free(v), free(s);
    return 0;
}
