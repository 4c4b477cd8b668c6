/* adam_host.h — the host Adam of ZeRO-Offload (common/offload.c): the CPU reference update
 * (zl_cpu_adam_update), vectorised where the CPU can (AVX2, and F16C for fp16), bit for bit.
 *
 * Every element sees the reference's float operations in the reference's order (separate
 * multiplies and adds, IEEE division and square root, which SIMD rounds exactly as scalar
 * code does); the 16-bit conversions are the hardware's (F16C) or integer code, checked
 * against zl_math.h's over every 16-bit value and a dense set of floats, with NaN lanes
 * fixed up to zl_math.h's bits. Without AVX2 (or F16C, for fp16) it is the reference.
 * One caveat, the reference's own: where two different NaNs meet in one operation, which
 * payload survives is the compiler's operand order, so a NaN output may carry another NaN
 * payload (still NaN; a skipped step never runs the update on non-finite gradients).
 *
 * defines: zl_host_adam_update, zl_host_adam_update_threads, zl_host_adam_team, ZL_HOST_ADAM_CHUNK, zl_host_widen_array,
 *          zl_host_round_array, zl_host_simd_name. */
#ifndef ZL_ADAM_HOST_H
#define ZL_ADAM_HOST_H

#include <stddef.h>

#include "../kernels.h"

/* zl_cpu_adam_update's contract and results (param may alias grad: in place). */
void zl_host_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                         float grad_mult, int t, zl_adam_hparams hp);

/* Elements per OpenMP work item: large enough to stream, small enough to balance. */
#define ZL_HOST_ADAM_CHUNK ((size_t)1 << 15)

/* zl_host_adam_update over n elements, ZL_HOST_ADAM_CHUNK at a time across `threads` OpenMP
 * threads (static schedule): how --offload runs it. Each element sees the same operations
 * whatever the chunking, so the result depends on neither the thread count nor the CPU. */
void zl_host_adam_update_threads(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                                 float grad_mult, int t, zl_adam_hparams hp, int threads);
/* The threads zl_host_adam_update_threads runs n elements on: `threads`, but no more than
 * the chunks and at least 1. */
int zl_host_adam_team(size_t n, int threads);

/* The conversions the update uses, in the current storage format: dst[i] =
 * zl_widen_storage(src[i]) and zl_round_storage(src[i]), exactly (exported for the tests). */
void zl_host_widen_array(float *dst, const zl_half *src, size_t n);
void zl_host_round_array(zl_half *dst, const float *src, size_t n);

/* "avx2+f16c" (fp16) / "avx2" (bf16) when the vector path runs, else "scalar". */
const char *zl_host_simd_name(void);

#endif
