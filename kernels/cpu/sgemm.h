/* sgemm.h — the CPU backend's fp32 GEMM, shared by the MLP's and the transformer's CPU kernels.
 * C[M×N] += A[M×K]·B[K×N], row-major with leading dimensions; every element of C accumulates
 * k = 0..K-1 in order, whatever the shape (kernels_cpu.c). */
#ifndef ZL_CPU_SGEMM_H
#define ZL_CPU_SGEMM_H

void zl_cpu_sgemm_acc(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc);

#endif
