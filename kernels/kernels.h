/* kernels.h — the model's compute, backend-neutral.
 *
 * The model is a residual MLP; one block (one shard unit) is
 *     h = x·W1 + b1          x: rows×D, W1: D×4D (row-major), b1: 4D
 *     a = gelu(h)            tanh approximation
 *     y = x + a·W2 + b2      W2: 4D×D (row-major), b2: D
 * and the loss is MSE against the teacher's targets. All zl_half tensors (data, parameters,
 * activations, gradients) are 16-bit in memory, in one storage format: fp16 (the default,
 * the paper's) or bf16 (zl_kernels_set_dtype); GEMMs and reductions accumulate in fp32.
 * Each function has one implementation per backend (kernels/cpu, kernels/cuda) and runs on
 * the stream it is given. The CPU versions are also exported as zl_cpu_* so GPU tests can
 * compare the two. */
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

/* ---- storage format (kernels/storage.c, linked by both backends) ----------------------
 * ZL_F16: IEEE binary16, 10 mantissa bits, max 65504 (needs a loss scale; the default).
 * ZL_BF16: bfloat16, fp32's 8 exponent bits and 7 mantissa bits: fp32's range (no loss
 * scale needed), 8× coarser rounding. Same 2 bytes an element, so every memory and traffic
 * formula holds for both. One process-wide setting, read by every kernel below on both
 * backends (and by the zl_cpu_* references): set it once, before the first kernel runs.
 * Conversions round to nearest even (zl_math.h). */
int zl_kernels_set_dtype(zl_dtype t); /* 0, or -1 (format unchanged) unless t is ZL_F16 or ZL_BF16 */
zl_dtype zl_kernels_dtype(void);      /* ZL_F16 until set */
zl_half zl_storage_from_float(float f); /* host: f rounded to the current format */
float zl_storage_to_float(zl_half v);   /* host: the stored value, exact */

/* Scratch the kernels may use (cuBLASLt workspace, loss partials, CPU fp32 panels).
 * The stage allocates exactly this many bytes through the tracked allocator
 * (category "workspace") before step 1 and hands them over. */
size_t zl_kernels_workspace_bytes(int rows, int dim);
void zl_kernels_set_workspace(void *ws, size_t bytes);

/* The entries of ZL_GEMM_TABLE (common/gemm_table.h) whose algorithm some GEMM configuration has
 * taken so far; *refused: those some configuration did not take (the first answer kept; said on
 * stderr); *entries: the file's. Or why none were: -1 no table given (the CPU backend: always),
 * -2 made on another GPU or cuBLASLt, -3 no GEMM has run yet. */
int zl_kernels_gemm_table_used(int *entries, int *refused);

/* Synthetic batch: rows [row0, row0+rows) of the global sample stream (zl_math.h). */
void zl_data_generate(zl_half *x, zl_half *target, uint64_t seed, uint64_t row0, int rows, int dim,
                      zl_stream s);

/* dst[i] = zl_init_value(seed, index0 + i, scale_log2) for i < n. */
void zl_init_uniform(zl_half *dst, size_t n, uint64_t seed, uint64_t index0, int scale_log2, zl_stream s);

/* Forward of one block. Writes h (pre-activation) and a (= gelu(h)); y = NULL skips the
 * second GEMM (a recompute for backward, which needs h and a only). */
void zl_block_forward(const zl_half *x, const zl_half *W1, const zl_half *b1, const zl_half *W2,
                      const zl_half *b2, zl_half *h, zl_half *a, zl_half *y, int rows, int dim, zl_stream s);

/* How backward stores a parameter gradient. WRITE overwrites it; ADD adds this batch's
 * gradient to what is there (accumulation over micro-batches): the new gradient and the
 * stored value are summed in fp32 and rounded once (a GEMM with beta = 1 on the GPU). */
typedef enum { ZL_GRADS_WRITE = 0, ZL_GRADS_ADD = 1 } zl_grads_mode;

/* Backward of one block, given dy (rows×D). Stores dW1, db1, dW2, db2 as `mode` says, and
 * writes dx = dy + (dh)·W1ᵀ. dh (rows×4D) is scratch; it may alias a, which is read (for
 * dW2) before dh is first written. dx must not alias dy; dx = NULL skips
 * that GEMM (block 0: nobody needs the gradient of the input). */
void zl_block_backward(const zl_half *x, const zl_half *h, const zl_half *a, const zl_half *W1,
                       const zl_half *W2, const zl_half *dy, zl_half *dh, zl_half *dW1, zl_half *db1,
                       zl_half *dW2, zl_half *db2, zl_half *dx, zl_grads_mode mode, int rows, int dim,
                       zl_stream s);

/* a[i] = gelu(h[i]) of the stored 16-bit h, rounded once: the activation backward
 * recomputes when forward kept h only. Deterministic: the same h gives the same bits.
 * (Forward's GEMM epilogue takes gelu of the unrounded fp32 h, so a stored a could differ
 * from this in the last bit; backward uses this one in every activation policy.) */
void zl_gelu_stored(const zl_half *h, zl_half *a, size_t n, zl_stream s);

/* dst[i] += src[i] (fp32 sum, rounded once): a micro-batch's reduced gradient slice added
 * into the gradient shard. Uses no workspace, so it may run on the communication stream. */
void zl_add_into(zl_half *dst, const zl_half *src, size_t n, zl_stream s);

/* MSE: *loss = mean over rows·dim of (y - t)^2 (fp32, device memory);
 * dy = loss_scale · 2(y - t)/(rows·dim), the gradient of loss_scale·loss. */
void zl_mse_loss_backward(const zl_half *y, const zl_half *t, zl_half *dy, float *loss, int rows, int dim,
                          float loss_scale, zl_stream s);

/* Fused mixed-precision AdamW over a flat range of n elements:
 *   g = float(grad[i]) * grad_mult         (grad_mult = 1/(loss_scale·N): unscale and average;
 *                                           gradient clipping folds its factor in here too)
 *   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²
 *   master -= lr·( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd·master )
 *   param[i] = storage(master)             (round to nearest even, fp16 or bf16)
 * step t starts at 1. */
void zl_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                    float grad_mult, int t, zl_adam_hparams hp, zl_stream s);

/* dst[i] = float(src[i]) — used to create the fp32 master copy from the 16-bit init. */
void zl_half_to_float_array(float *dst, const zl_half *src, size_t n, zl_stream s);

/* Gradient statistics in one pass over n stored values (for the overflow check and the
 * global gradient norm):
 *   stats[0] += Σ float(g[i])²  over the finite g[i]
 *   stats[1] += the number of non-finite g[i] (±inf, NaN)
 * stats: 2 doubles in device memory, accumulated into, so that the ranges a rank owns
 * (units, slices) add up; zero them first with zl_grad_stats_zero. Double because the
 * squares of 16-bit values are exact in it and a sum over billions of them stays exact to
 * ~1e-16 relative; the count is exact below 2^53. A non-finite value is counted, never
 * added, so a count > 0 is the overflow verdict and stats[0] stays the sum of the rest.
 * The values are the loss-scaled gradient sums: the unscaled norm is
 * sqrt(stats[0])·grad_mult. Repeatable bits (fixed summation order for a given n and
 * alignment). On CUDA it uses its own part of the workspace, so it may run on another
 * stream beside the block kernels, but not beside another zl_grad_stats. */
void zl_grad_stats(const zl_half *g, size_t n, double *stats, zl_stream s);
static inline void zl_grad_stats_zero(double *stats, zl_stream s) { zl_memset_async(stats, 0, 2 * sizeof(double), s); }

/* CPU reference implementations (same contracts, no stream). Always built. */
size_t zl_cpu_workspace_bytes(int rows, int dim);
void zl_cpu_set_workspace(void *ws, size_t bytes);
void zl_cpu_data_generate(zl_half *x, zl_half *target, uint64_t seed, uint64_t row0, int rows, int dim);
void zl_cpu_init_uniform(zl_half *dst, size_t n, uint64_t seed, uint64_t index0, int scale_log2);
void zl_cpu_block_forward(const zl_half *x, const zl_half *W1, const zl_half *b1, const zl_half *W2,
                          const zl_half *b2, zl_half *h, zl_half *a, zl_half *y, int rows, int dim);
void zl_cpu_block_backward(const zl_half *x, const zl_half *h, const zl_half *a, const zl_half *W1,
                           const zl_half *W2, const zl_half *dy, zl_half *dh, zl_half *dW1, zl_half *db1,
                           zl_half *dW2, zl_half *db2, zl_half *dx, zl_grads_mode mode, int rows, int dim);
void zl_cpu_gelu_stored(const zl_half *h, zl_half *a, size_t n);
void zl_cpu_add_into(zl_half *dst, const zl_half *src, size_t n);
void zl_cpu_mse_loss_backward(const zl_half *y, const zl_half *t, zl_half *dy, float *loss, int rows, int dim,
                              float loss_scale);
void zl_cpu_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                        float grad_mult, int t, zl_adam_hparams hp);
void zl_cpu_half_to_float_array(float *dst, const zl_half *src, size_t n);
void zl_cpu_grad_stats(const zl_half *g, size_t n, double stats[2]); /* stats in host memory */
float zl_cpu_gelu(float x);      /* tanh approximation */
float zl_cpu_gelu_grad(float x); /* its derivative */

#ifdef __cplusplus
}
#endif
#endif
