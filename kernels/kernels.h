/* kernels.h — the model's compute, backend-neutral.
 *
 * The model is a residual MLP; one block (one shard unit) is
 *     h = x·W1 + b1          x: rows×D, W1: D×4D (row-major), b1: 4D
 *     a = gelu(h)            tanh approximation
 *     y = x + a·W2 + b2      W2: 4D×D (row-major), b2: D
 * and the loss is MSE against the teacher's targets. All tensors are fp16 in memory;
 * GEMMs and reductions accumulate in fp32. Each function has one implementation per
 * backend (kernels/cpu, kernels/cuda) and runs on the stream it is given.
 * The CPU versions are also exported as zl_cpu_* so GPU tests can compare the two. */
#ifndef ZL_KERNELS_H
#define ZL_KERNELS_H

#include "backend.h"
#include "zl_math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} zl_adam_hparams;

/* Scratch the kernels may use (cuBLASLt workspace, loss partials, CPU fp32 panels).
 * The stage allocates exactly this many bytes through the tracked allocator
 * (category "workspace") before step 1 and hands them over. */
size_t zl_kernels_workspace_bytes(int rows, int dim);
void zl_kernels_set_workspace(void *ws, size_t bytes);

/* Synthetic batch: rows [row0, row0+rows) of the global sample stream (zl_math.h). */
void zl_data_generate(zl_half *x, zl_half *target, uint64_t seed, uint64_t row0, int rows, int dim,
                      zl_stream s);

/* dst[i] = zl_init_value(seed, index0 + i, scale_log2) for i < n. */
void zl_init_uniform(zl_half *dst, size_t n, uint64_t seed, uint64_t index0, int scale_log2, zl_stream s);

/* Forward of one block. Saves h (pre-activation) and a (= gelu(h)) for backward. */
void zl_block_forward(const zl_half *x, const zl_half *W1, const zl_half *b1, const zl_half *W2,
                      const zl_half *b2, zl_half *h, zl_half *a, zl_half *y, int rows, int dim, zl_stream s);

/* Backward of one block, given dy (rows×D). Writes (overwrites, never accumulates)
 * dW1, db1, dW2, db2 and dx = dy + (dh)·W1ᵀ. dh (rows×4D) is scratch. dx must not alias dy;
 * dx = NULL skips that GEMM (block 0: nobody needs the gradient of the input). */
void zl_block_backward(const zl_half *x, const zl_half *h, const zl_half *a, const zl_half *W1,
                       const zl_half *W2, const zl_half *dy, zl_half *dh, zl_half *dW1, zl_half *db1,
                       zl_half *dW2, zl_half *db2, zl_half *dx, int rows, int dim, zl_stream s);

/* MSE: *loss = mean over rows·dim of (y - t)^2 (fp32, device memory);
 * dy = loss_scale · 2(y - t)/(rows·dim), the gradient of loss_scale·loss. */
void zl_mse_loss_backward(const zl_half *y, const zl_half *t, zl_half *dy, float *loss, int rows, int dim,
                          float loss_scale, zl_stream s);

/* Fused mixed-precision AdamW over a flat range of n elements:
 *   g = float(grad[i]) * grad_mult         (grad_mult = 1/(loss_scale·N): unscale and average)
 *   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²
 *   master -= lr·( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd·master )
 *   param[i] = fp16(master)                (round to nearest even)
 * step t starts at 1. */
void zl_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                    float grad_mult, int t, zl_adam_hparams hp, zl_stream s);

/* dst[i] = float(src[i]) — used to create the fp32 master copy from the fp16 init. */
void zl_half_to_float_array(float *dst, const zl_half *src, size_t n, zl_stream s);

/* CPU reference implementations (same contracts, no stream). Always built. */
size_t zl_cpu_workspace_bytes(int rows, int dim);
void zl_cpu_set_workspace(void *ws, size_t bytes);
void zl_cpu_data_generate(zl_half *x, zl_half *target, uint64_t seed, uint64_t row0, int rows, int dim);
void zl_cpu_init_uniform(zl_half *dst, size_t n, uint64_t seed, uint64_t index0, int scale_log2);
void zl_cpu_block_forward(const zl_half *x, const zl_half *W1, const zl_half *b1, const zl_half *W2,
                          const zl_half *b2, zl_half *h, zl_half *a, zl_half *y, int rows, int dim);
void zl_cpu_block_backward(const zl_half *x, const zl_half *h, const zl_half *a, const zl_half *W1,
                           const zl_half *W2, const zl_half *dy, zl_half *dh, zl_half *dW1, zl_half *db1,
                           zl_half *dW2, zl_half *db2, zl_half *dx, int rows, int dim);
void zl_cpu_mse_loss_backward(const zl_half *y, const zl_half *t, zl_half *dy, float *loss, int rows, int dim,
                              float loss_scale);
void zl_cpu_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                        float grad_mult, int t, zl_adam_hparams hp);
float zl_cpu_gelu(float x);      /* tanh approximation */
float zl_cpu_gelu_grad(float x); /* its derivative */

#ifdef __cplusplus
}
#endif
#endif
