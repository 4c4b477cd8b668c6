/* timing.cuh — the benches' timer (bench_attention, bench_gpt_step): ms per call of `call`, the
 * best of 3 rounds of `iters` back-to-back calls on stream st (CUDA events around each round),
 * after 2 warm-up calls (the cuBLASLt plan cache, and its same-bits choice, fill on the first). */
#ifndef ZL_BENCH_TIMING_CUH
#define ZL_BENCH_TIMING_CUH

#include <cuda_runtime.h>
#include <math.h>

#include "cuda/cuda_check.h" /* cudaCheck */

template <typename F> static double bench_best_ms(F call, int iters, cudaStream_t st) {
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    for (int i = 0; i < 2; i++) call();
    double best = INFINITY;
    for (int round = 0; round < 3; round++) {
        cudaCheck(cudaEventRecord(t0, st));
        for (int i = 0; i < iters; i++) call();
        cudaCheck(cudaEventRecord(t1, st));
        cudaCheck(cudaEventSynchronize(t1));
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, t0, t1));
        best = fmin(best, ms / iters);
    }
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    return best;
}

#endif
