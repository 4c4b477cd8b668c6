/* gpt_kernels.h — the transformer's compute (model/gpt.h), backend-neutral, like kernels.h.
 *
 * Conventions (shared with kernels.h): tensors are 16-bit in the storage format (fp16 or
 * bf16, zl_kernels_set_dtype), row-major; GEMMs and reductions accumulate in fp32 and each
 * output is rounded once; LayerNorm statistics are fp32. R = B·T rows (B sequences of T
 * tokens), D = model width, H heads of hd = D/H, Vp = padded vocabulary (V real entries).
 * Token ids are int32. Every reduction runs in a fixed order (no float atomics): the
 * results repeat bit for bit, which the stages' bitwise equivalence relies on.
 *
 * Each function has one implementation per backend (kernels/cpu/gpt_cpu.c via
 * gpt_dispatch_cpu.c, kernels/cuda/gpt_cuda.cu) and a CPU reference zl_cpu_gpt_* with the
 * same contract and no stream, which the GPU tests compare against.
 *
 * Attention layout. The fused QKV projection writes qkv (R×3D: q | k | v, head h at columns
 * h·hd of each); the strided attention permutes it to qkvr = [3][B][H][T][hd] so every (b, h)
 * is one contiguous T×hd matrix — one strided-batched GEMM over B·H on CUDA — and keeps P; the
 * fused one (zl_gpt_flash_*) reads qkv as it is and keeps one log-sum-exp per query row. */
#ifndef ZL_GPT_KERNELS_H
#define ZL_GPT_KERNELS_H

#include "backend.h"
#include "kernels.h" /* zl_grads_mode */
#include "zl_math.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZL_GPT_LN_EPS 1e-5f

/* Shape of one call (what the kernels need to know of the model). */
typedef struct {
    int B, T, D, H, V, Vp;
    int flash; /* 1: attention by zl_gpt_flash_* (lse kept); 0: strided-batched (P kept) */
} zl_gpt_dims;

/* Scratch the GPT kernels use (CUDA: kernels.h's workspace for (R, D) plus LayerNorm
 * partial sums; CPU: three fp32 GEMM panels). The model allocates exactly this (category
 * workspace) and hands it over with zl_gpt_set_workspace, which also serves kernels.h. */
size_t zl_gpt_workspace_bytes(zl_gpt_dims d);
void zl_gpt_set_workspace(void *ws, size_t bytes, zl_gpt_dims d);

/* dst[i] = storage(value) for i < n (LayerNorm gains start at 1). */
void zl_gpt_fill(zl_half *dst, size_t n, float value, zl_stream s);

/* x[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] */
void zl_gpt_embed_forward(const int32_t *tokens, const zl_half *wte, const zl_half *wpe, zl_half *x, zl_gpt_dims d,
                          zl_stream s);
/* The tied embedding's whole gradient, deterministic (no atomics):
 *   dwte[v] = head[v] + Σ dx[i] over the positions i with tokens[i] == v, in increasing i
 *   dwpe[t] = Σ_b dx[b,t]  in increasing b
 * order (R) lists the positions sorted by token, stably; bucket (Vp+1) has the start of
 * each token's run in order (bucket[Vp] = R): both prepared on the host with the batch.
 * head (Vp×D, the LM head's part) may be NULL (zero). All sums in fp32, rounded once;
 * ZL_GRADS_ADD adds the stored dwte, dwpe to the sums before that one rounding. */
void zl_gpt_embed_backward(const int32_t *order, const int32_t *bucket, const zl_half *dx, const zl_half *head,
                           zl_half *dwte, zl_half *dwpe, zl_grads_mode mode, zl_gpt_dims d, zl_stream s);

/* y = (x - mean)·rstd·g + b over each row of D; saves mean and rstd (fp32, R each). */
void zl_gpt_layernorm_forward(const zl_half *x, const zl_half *g, const zl_half *b, zl_half *y, float *mean,
                              float *rstd, int rows, int dim, zl_stream s);
/* Given dy: dres += dx (dres is the residual stream's gradient: read, added to, rounded
 * once); dg = Σ_rows dy·x̂, db = Σ_rows dy, stored as `mode` says (kernels.h: WRITE
 * overwrites, ADD adds to the stored value, rounded once). x̂ = (x - mean)·rstd. */
void zl_gpt_layernorm_backward(const zl_half *x, const zl_half *g, const float *mean, const float *rstd,
                               const zl_half *dy, zl_half *dres, zl_half *dg, zl_half *db, zl_grads_mode mode,
                               int rows, int dim, zl_stream s);

/* y = x·W + b (+ residual when not NULL): x rows×din, W din×dout, b dout. */
void zl_gpt_linear_forward(const zl_half *x, const zl_half *W, const zl_half *b, const zl_half *residual,
                           zl_half *y, int rows, int din, int dout, zl_stream s);
/* h = x·W + b, a = gelu(h) (tanh GELU of the fp32 sum; both saved). */
void zl_gpt_linear_gelu_forward(const zl_half *x, const zl_half *W, const zl_half *b, zl_half *h, zl_half *a,
                                int rows, int din, int dout, zl_stream s);
/* dW = xᵀ·dy, db = Σ_rows dy, stored as `mode` says; dx = dy·Wᵀ, or dx = (dy·Wᵀ) ⊙ gelu'(gelu_h)
 * when gelu_h is not NULL (the input of this layer was a = gelu(gelu_h)). dx NULL: skipped. */
void zl_gpt_linear_backward(const zl_half *x, const zl_half *W, const zl_half *dy, const zl_half *gelu_h,
                            zl_half *dx, zl_half *dW, zl_half *db, zl_grads_mode mode, int rows, int din, int dout,
                            zl_stream s);

/* Causal multi-head attention, scale 1/sqrt(hd):
 *   qkvr = permute(qkv);  P = softmax_causal(scale·q·kᵀ) (B·H·T·T, saved; P[i][j] = 0 for j > i)
 *   out = unpermute(P·v) (R×D).  scratch_r: B·H·T·hd. */
void zl_gpt_attention_forward(const zl_half *qkv, zl_half *qkvr, zl_half *P, zl_half *scratch_r, zl_half *out,
                              zl_gpt_dims d, zl_stream s);
/* From dout (R×D): dqkv (R×3D). Scratch: dout_r (B·H·T·hd), dP (B·H·T·T), dqkvr (3·R·D). */
void zl_gpt_attention_backward(const zl_half *qkvr, const zl_half *P, const zl_half *dout, zl_half *dout_r,
                               zl_half *dP, zl_half *dqkvr, zl_half *dqkv, zl_gpt_dims d, zl_stream s);

/* The same attention, fused (FlashAttention-2's algorithm; CUDA: kernels/cuda/gpt_flash.cu):
 * straight from qkv (R×3D) to out (R×D), keeping only lse (B·H·T floats, [B][H][T]: each query
 * row's log-sum-exp of scale·q·kᵀ) — no T×T matrix is stored. Backward recomputes
 * P = exp(scale·q·kᵀ - lse) tile by tile: Dl (B·H·T floats of scratch) = rowsum(dout ⊙ out),
 * dS = P ⊙ (dout·vᵀ - Dl), dq = scale·dS·k, dk = scale·dSᵀ·q, dv = Pᵀ·dout, into dqkv (R×3D,
 * qkv's layout). P and dS are rounded to 16 bits before their products (the tensor cores'
 * operands); S, dP and the sums stay fp32. Deterministic (no float atomics). CUDA needs head
 * dimension 64 and fp16 (zl_gpt_flash_supported); the CPU reference takes any shape. */
static inline int zl_gpt_flash_supported(int dim, int heads, int bf16) {
    return !bf16 && heads > 0 && dim % heads == 0 && dim / heads == 64;
}
/* The fused kernels' grid has one z-block a sequence: B at most CUDA's z extent. */
#define ZL_GPT_FLASH_MAX_BATCH 65535
/* --attention left to the shape (the programs and zerocalc): fused where its kernels run. */
static inline int zl_gpt_flash_by_shape(int dim, int heads, int bf16, int batch) {
    return zl_gpt_flash_supported(dim, heads, bf16) && batch <= ZL_GPT_FLASH_MAX_BATCH;
}
void zl_gpt_flash_forward(const zl_half *qkv, zl_half *out, float *lse, zl_gpt_dims d, zl_stream s);
void zl_gpt_flash_backward(const zl_half *qkv, const zl_half *out, const float *lse, const zl_half *dout, float *Dl,
                           zl_half *dqkv, zl_gpt_dims d, zl_stream s);

/* logits = x·wteᵀ (R×Vp): the LM head, tied to the token embedding. */
void zl_gpt_logits_forward(const zl_half *x, const zl_half *wte, zl_half *logits, zl_gpt_dims d, zl_stream s);
/* Cross-entropy fused with the softmax of the logits, over the V real entries of each row:
 *   row_loss[i] = log Σ_v e^{l_v} - l_{target_i};  *loss = mean over rows (fp32, device)
 *   logits ← dlogits = loss_scale·(softmax - onehot(target))/R  (padding columns 0)
 * row_loss: R floats of scratch. */
void zl_gpt_crossentropy(zl_half *logits, const int32_t *targets, float *row_loss, float *loss, float loss_scale,
                         zl_gpt_dims d, zl_stream s);
/* dx = dlogits·wte (R×D), head = dlogitsᵀ·x (Vp×D): the LM head's part of wte's gradient. */
void zl_gpt_logits_backward(const zl_half *dlogits, const zl_half *x, const zl_half *wte, zl_half *dx,
                            zl_half *head, zl_gpt_dims d, zl_stream s);

/* CPU references (same contracts, no stream). */
size_t zl_cpu_gpt_workspace_bytes(zl_gpt_dims d);
void zl_cpu_gpt_set_workspace(void *ws, size_t bytes);
void zl_cpu_gpt_fill(zl_half *dst, size_t n, float value);
void zl_cpu_gpt_embed_forward(const int32_t *tokens, const zl_half *wte, const zl_half *wpe, zl_half *x,
                              zl_gpt_dims d);
void zl_cpu_gpt_embed_backward(const int32_t *order, const int32_t *bucket, const zl_half *dx, const zl_half *head,
                               zl_half *dwte, zl_half *dwpe, zl_grads_mode mode, zl_gpt_dims d);
void zl_cpu_gpt_layernorm_forward(const zl_half *x, const zl_half *g, const zl_half *b, zl_half *y, float *mean,
                                  float *rstd, int rows, int dim);
void zl_cpu_gpt_layernorm_backward(const zl_half *x, const zl_half *g, const float *mean, const float *rstd,
                                   const zl_half *dy, zl_half *dres, zl_half *dg, zl_half *db, zl_grads_mode mode,
                                   int rows, int dim);
void zl_cpu_gpt_linear_forward(const zl_half *x, const zl_half *W, const zl_half *b, const zl_half *residual,
                               zl_half *y, int rows, int din, int dout);
void zl_cpu_gpt_linear_gelu_forward(const zl_half *x, const zl_half *W, const zl_half *b, zl_half *h, zl_half *a,
                                    int rows, int din, int dout);
void zl_cpu_gpt_linear_backward(const zl_half *x, const zl_half *W, const zl_half *dy, const zl_half *gelu_h,
                                zl_half *dx, zl_half *dW, zl_half *db, zl_grads_mode mode, int rows, int din,
                                int dout);
void zl_cpu_gpt_attention_forward(const zl_half *qkv, zl_half *qkvr, zl_half *P, zl_half *scratch_r, zl_half *out,
                                  zl_gpt_dims d);
void zl_cpu_gpt_attention_backward(const zl_half *qkvr, const zl_half *P, const zl_half *dout, zl_half *dout_r,
                                   zl_half *dP, zl_half *dqkvr, zl_half *dqkv, zl_gpt_dims d);
void zl_cpu_gpt_flash_forward(const zl_half *qkv, zl_half *out, float *lse, zl_gpt_dims d);
void zl_cpu_gpt_flash_backward(const zl_half *qkv, const zl_half *out, const float *lse, const zl_half *dout,
                               float *Dl, zl_half *dqkv, zl_gpt_dims d);
void zl_cpu_gpt_logits_forward(const zl_half *x, const zl_half *wte, zl_half *logits, zl_gpt_dims d);
void zl_cpu_gpt_crossentropy(zl_half *logits, const int32_t *targets, float *row_loss, float *loss, float loss_scale,
                             zl_gpt_dims d);
void zl_cpu_gpt_logits_backward(const zl_half *dlogits, const zl_half *x, const zl_half *wte, zl_half *dx,
                                zl_half *head, zl_gpt_dims d);

#ifdef __cplusplus
}
#endif
#endif
