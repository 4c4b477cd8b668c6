/* gpt_cuda.cu — gpt_kernels.h on CUDA: every GEMM through cuBLASLt (zl_cu_gemm, the plan
 * cache of kernels_cuda.cu), the strided attention's as strided-batched GEMMs over the B·H
 * (sequence, head) pairs (the fused attention is gpt_flash.cu), plus small kernels: embedding
 * gather and its deterministic backward, LayerNorm forward/backward, causal softmax
 * forward/backward, permutes, the cross-entropy fused with the logits' softmax.
 *
 * Layout as in kernels_cuda.cu: row-major tensors are column-major transposes, so the
 * row-major C = A·B runs as Cᵀ = Bᵀ·Aᵀ with the operands swapped and nothing copied. The
 * products (m×n, inner k; column-major, op N or T; R = B·T):
 *   linear      yᵀ[dout×R]  = W(N, ld dout)·xᵀ(N, ld din)           (+ bias, + residual as C)
 *               dWᵀ[dout×din] = dyᵀ(N, ld dout)·x(T, ld din)         BGRADA: db = Σ_rows dy
 *               dxᵀ[din×R]  = W(T, ld dout)·dyᵀ(N, ld dout)          DGELU when gelu_h is given
 *   attention   Sᵀ[T×T]     = k(T, ld hd)·qᵀ(N, ld hd), alpha = 1/sqrt(hd)   (batch B·H)
 *               Oᵀ[hd×T]    = vᵀ(N, ld hd)·Pᵀ(N, ld T)
 *               dPᵀ         = v(T)·dOᵀ(N);  dqᵀ = α·kᵀ(N)·dSᵀ(N);  dkᵀ = α·qᵀ(N)·dS(T);  dvᵀ = dOᵀ(N)·P(T)
 *   LM head     logitsᵀ[Vp×R] = wte(T, ld D)·xᵀ(N, ld D)
 *               dxᵀ[D×R]    = wteᵀ(N, ld D)·dlogitsᵀ(N, ld Vp);  headᵀ[D×Vp] = xᵀ(N)·dlogits(T, ld Vp)
 * Reductions (LayerNorm statistics, softmax sums, the loss, gradient sums) run in a fixed
 * order with no atomics, so results repeat bit for bit; they agree with the CPU reference to
 * rounding (tests/gpu/test_kernels_gpu.c). The embedding backward adds in exactly the CPU's
 * order: bitwise equal to it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_common.cuh"
#include "gpt_kernels.h"

/* ---- workspace: kernels.h's (cuBLASLt, colsum partials) + LayerNorm dg/db partials ------ */
/* LayerNorm's dg, db are column sums over all rows: each chunk of ZL_LN_CHUNK_ROWS rows sums
 * into its own partial row, then one kernel adds the partials in chunk order. Enough chunks
 * to fill the GPU (128 at 32768 rows), a fixed order: the sums repeat bit for bit. */
#define ZL_LN_CHUNK_ROWS 256
#define ZL_GPT_ALIGN 256

static float *g_ln_partials; /* 2 × ln_chunks(R) × D floats: dg partials, then db partials */
static size_t g_ln_floats;

#define ZL_LN_MAX_CHUNKS 65535 /* a grid's y extent: past 16.7 M rows the chunks grow instead */
static int ln_chunk_rows(int rows) {
    int per = (rows + ZL_LN_MAX_CHUNKS - 1) / ZL_LN_MAX_CHUNKS;
    return per > ZL_LN_CHUNK_ROWS ? per : ZL_LN_CHUNK_ROWS;
}
static int ln_chunks(int rows) {
    int per = ln_chunk_rows(rows);
    return rows > 0 ? (rows + per - 1) / per : 1;
}
static size_t ln_partial_floats(int rows, int dim) { return 2 * (size_t)ln_chunks(rows) * (size_t)dim; }

static size_t base_bytes(zl_gpt_dims d) { return zl_kernels_workspace_bytes(d.B * d.T, d.D); }

size_t zl_gpt_workspace_bytes(zl_gpt_dims d) {
    return base_bytes(d) + ZL_GPT_ALIGN + ln_partial_floats(d.B * d.T, d.D) * sizeof(float);
}

void zl_gpt_set_workspace(void *ws, size_t bytes, zl_gpt_dims d) {
    size_t base = base_bytes(d);
    if (!ws || bytes < zl_gpt_workspace_bytes(d))
        zl_cuda_fatal(__FILE__, __LINE__, "zl_gpt_set_workspace", "workspace missing or smaller than zl_gpt_workspace_bytes");
    zl_kernels_set_workspace(ws, base);
    uintptr_t p = ((uintptr_t)ws + base + ZL_GPT_ALIGN - 1) & ~(uintptr_t)(ZL_GPT_ALIGN - 1);
    g_ln_partials = (float *)p;
    g_ln_floats = ln_partial_floats(d.B * d.T, d.D);
}

/* ---- small reductions ------------------------------------------------------------------- */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Block-wide sum or max (blockDim.x a multiple of 32, ≤ 1024), valid in every thread. */
template <int MAX> __device__ float block_reduce(float v) {
    __shared__ float part[32];
    __shared__ float result;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? part[lane] : (MAX ? -INFINITY : 0.0f);
        w = MAX ? warp_max(w) : warp_sum(w);
        if (lane == 0) result = w;
    }
    __syncthreads();
    float r = result;
    __syncthreads(); /* part and result may be reused by the next call */
    return r;
}

/* ---- fill, embedding --------------------------------------------------------------------- */
template <int BF> __global__ void fill_kernel(zl_half *dst, size_t n, float value) {
    zl_half v = f2h<BF>(value);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = v;
}

void zl_gpt_fill(zl_half *dst, size_t n, float value, zl_stream s) {
    if (n == 0) return;
    LAUNCH16(fill_kernel, zl_cu_grid_for(n, 256), 256, as_stream(s), dst, n, value);
}

template <int BF>
__global__ void embed_forward_kernel(const int32_t *tokens, const zl_half *wte, const zl_half *wpe, zl_half *x,
                                     size_t n, int T, int D) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / (size_t)D, j = i % (size_t)D;
        int t = (int)(row % (size_t)T);
        x[i] = f2h<BF>(h2f<BF>(wte[(size_t)tokens[row] * D + j]) + h2f<BF>(wpe[(size_t)t * D + j]));
    }
}

void zl_gpt_embed_forward(const int32_t *tokens, const zl_half *wte, const zl_half *wpe, zl_half *x, zl_gpt_dims d,
                          zl_stream s) {
    size_t n = (size_t)d.B * d.T * d.D;
    LAUNCH16(embed_forward_kernel, zl_cu_grid_for(n, 256), 256, as_stream(s), tokens, wte, wpe, x, n, d.T, d.D);
}

/* dwte[v][j]: head first, then token v's positions in increasing order — the CPU's order. */
template <int BF>
__global__ void embed_wte_backward_kernel(const int32_t *order, const int32_t *bucket, const zl_half *dx,
                                          const zl_half *head, zl_half *dwte, size_t n, int D, int add) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t v = i / (size_t)D, j = i % (size_t)D;
        float acc = head ? h2f<BF>(head[i]) : 0.0f;
        for (int k = bucket[v]; k < bucket[v + 1]; k++) acc += h2f<BF>(dx[(size_t)order[k] * D + j]);
        dwte[i] = f2h<BF>(add ? acc + h2f<BF>(dwte[i]) : acc);
    }
}

template <int BF>
__global__ void embed_wpe_backward_kernel(const zl_half *dx, zl_half *dwpe, size_t n, int B, int T, int D, int add) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int b = 0; b < B; b++) acc += h2f<BF>(dx[(size_t)b * T * D + i]);
        dwpe[i] = f2h<BF>(add ? acc + h2f<BF>(dwpe[i]) : acc);
    }
}

void zl_gpt_embed_backward(const int32_t *order, const int32_t *bucket, const zl_half *dx, const zl_half *head,
                           zl_half *dwte, zl_half *dwpe, zl_grads_mode mode, zl_gpt_dims d, zl_stream s) {
    cudaStream_t st = as_stream(s);
    size_t nv = (size_t)d.Vp * d.D, np = (size_t)d.T * d.D;
    int add = mode == ZL_GRADS_ADD;
    LAUNCH16(embed_wte_backward_kernel, zl_cu_grid_for(nv, 256), 256, st, order, bucket, dx, head, dwte, nv, d.D,
             add);
    LAUNCH16(embed_wpe_backward_kernel, zl_cu_grid_for(np, 256), 256, st, dx, dwpe, np, d.B, d.T, d.D, add);
}

/* ---- LayerNorm: one warp per row --------------------------------------------------------- */
/* VEC values a lane at a time: 8 (16-byte loads) when the row width is a multiple of 8 and
 * the activations are 16-byte aligned (always, in the model), else 1. The order of every sum
 * depends on VEC only, so on the shape: a LayerNorm's gain and shift sit in a shard unit at an
 * offset that differs between the stages (the flat parameter buffer of stages 0-2, the
 * gathered unit of stage 3), so where they are not aligned they are read one value at a time
 * (load_param) without changing which lane adds which value. */
template <int BF, int VEC> __device__ __forceinline__ void load_vec(const zl_half *p, float *v) {
    if (VEC == 8) {
        uint4 raw = *reinterpret_cast<const uint4 *>(p);
        const zl_half *h = reinterpret_cast<const zl_half *>(&raw);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = h2f<BF>(h[k]);
    } else {
        v[0] = h2f<BF>(p[0]);
    }
}
template <int BF, int VEC> __device__ __forceinline__ void store_vec(zl_half *p, const float *v) {
    if (VEC == 8) {
        uint4 raw;
        zl_half *h = reinterpret_cast<zl_half *>(&raw);
#pragma unroll
        for (int k = 0; k < 8; k++) h[k] = f2h<BF>(v[k]);
        *reinterpret_cast<uint4 *>(p) = raw;
    } else {
        p[0] = f2h<BF>(v[0]);
    }
}

/* A parameter vector's 8 values: one 16-byte load where aligned, else 8 loads; the same values. */
template <int BF, int VEC> __device__ __forceinline__ void load_param(const zl_half *p, float *v, int aligned) {
    if (VEC == 8 && !aligned) {
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = h2f<BF>(p[k]);
    } else {
        load_vec<BF, VEC>(p, v);
    }
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Launch kernel<BF, VEC> for the storage format and VEC = 8 or 1. */
#define LAUNCH16_VEC(kernel, vec8, grid, block, stream, ...)                                                           \
    do {                                                                                                               \
        if (storage_is_bf16())                                                                                         \
            (vec8) ? kernel<1, 8><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)                                       \
                   : kernel<1, 1><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);                                     \
        else                                                                                                           \
            (vec8) ? kernel<0, 8><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)                                       \
                   : kernel<0, 1><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);                                     \
        cudaLaunchCheck(#kernel);                                                                                      \
    } while (0)

template <int BF, int VEC>
__global__ void layernorm_forward_kernel(const zl_half *x, const zl_half *g, const zl_half *b, zl_half *y,
                                         float *mean, float *rstd, int rows, int D, int gb_aligned) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const zl_half *xr = x + (size_t)row * D;
    float s = 0.0f, v[VEC], gv[VEC], bv[VEC];
    for (int j = lane * VEC; j < D; j += 32 * VEC) {
        load_vec<BF, VEC>(xr + j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += v[k];
    }
    float m = warp_sum(s) / (float)D, var = 0.0f;
    for (int j = lane * VEC; j < D; j += 32 * VEC) {
        load_vec<BF, VEC>(xr + j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) var += (v[k] - m) * (v[k] - m);
    }
    float rs = 1.0f / sqrtf(warp_sum(var) / (float)D + ZL_GPT_LN_EPS);
    for (int j = lane * VEC; j < D; j += 32 * VEC) {
        load_vec<BF, VEC>(xr + j, v), load_param<BF, VEC>(g + j, gv, gb_aligned), load_param<BF, VEC>(b + j, bv, gb_aligned);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = (v[k] - m) * rs * gv[k] + bv[k];
        store_vec<BF, VEC>(y + (size_t)row * D + j, v);
    }
    if (lane == 0) mean[row] = m, rstd[row] = rs;
}

void zl_gpt_layernorm_forward(const zl_half *x, const zl_half *g, const zl_half *b, zl_half *y, float *mean,
                              float *rstd, int rows, int dim, zl_stream s) {
    if (rows <= 0) return;
    int vec8 = dim % 8 == 0 && aligned16(x) && aligned16(y);
    LAUNCH16_VEC(layernorm_forward_kernel, vec8, (unsigned)((rows + 7) / 8), 256, as_stream(s), x, g, b, y, mean, rstd,
                 rows, dim, aligned16(g) && aligned16(b));
}

template <int BF, int VEC>
__global__ void layernorm_dx_kernel(const zl_half *x, const zl_half *g, const float *mean, const float *rstd,
                                    const zl_half *dy, zl_half *dres, int rows, int D, int g_aligned) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const size_t o = (size_t)row * D;
    const float m = mean[row], rs = rstd[row];
    float m1 = 0.0f, m2 = 0.0f, xv[VEC], dv[VEC], gv[VEC], rv[VEC];
    for (int j = lane * VEC; j < D; j += 32 * VEC) {
        load_vec<BF, VEC>(x + o + j, xv), load_vec<BF, VEC>(dy + o + j, dv), load_param<BF, VEC>(g + j, gv, g_aligned);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float dyg = dv[k] * gv[k];
            m1 += dyg, m2 += dyg * ((xv[k] - m) * rs);
        }
    }
    m1 = warp_sum(m1) / (float)D, m2 = warp_sum(m2) / (float)D;
    for (int j = lane * VEC; j < D; j += 32 * VEC) {
        load_vec<BF, VEC>(x + o + j, xv), load_vec<BF, VEC>(dy + o + j, dv), load_param<BF, VEC>(g + j, gv, g_aligned);
        load_vec<BF, VEC>(dres + o + j, rv);
#pragma unroll
        for (int k = 0; k < VEC; k++) rv[k] += rs * (dv[k] * gv[k] - m1 - (xv[k] - m) * rs * m2);
        store_vec<BF, VEC>(dres + o + j, rv);
    }
}

/* dg, db partials of one chunk of rows (blockIdx.y) and 64 columns (blockIdx.x): lane l sums
 * columns l and l + 32 over the rows w, w + 8, … of its warp w; the 8 warps' sums are then
 * added in warp order. */
template <int BF>
__global__ void layernorm_dgb_partial_kernel(const zl_half *x, const float *mean, const float *rstd,
                                             const zl_half *dy, float *partials, int rows, int D, int per_chunk) {
    __shared__ float part[4][8][32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, chunk = blockIdx.y, chunks = gridDim.y;
    const int c0 = blockIdx.x * 64 + lane, c1 = c0 + 32;
    const int r1 = min(rows, (chunk + 1) * per_chunk);
    float g0 = 0.0f, b0 = 0.0f, g1 = 0.0f, b1 = 0.0f;
    for (int r = chunk * per_chunk + w; r < r1; r += 8) {
        const size_t o = (size_t)r * D;
        const float m = mean[r], rs = rstd[r];
        if (c0 < D) {
            float d = h2f<BF>(dy[o + c0]);
            g0 += d * ((h2f<BF>(x[o + c0]) - m) * rs), b0 += d;
        }
        if (c1 < D) {
            float d = h2f<BF>(dy[o + c1]);
            g1 += d * ((h2f<BF>(x[o + c1]) - m) * rs), b1 += d;
        }
    }
    part[0][w][lane] = g0, part[1][w][lane] = b0, part[2][w][lane] = g1, part[3][w][lane] = b1;
    __syncthreads();
    if (w >= 4) return;
    float sum = 0.0f; /* warp q < 4 adds quantity q over the 8 warps, in order */
    for (int k = 0; k < 8; k++) sum += part[w][k][lane];
    int c = w < 2 ? c0 : c1, is_b = w & 1;
    if (c < D) partials[((size_t)is_b * chunks + chunk) * D + c] = sum;
}

/* dg, db: the chunks' partials added in chunk order (warp w takes chunks w, w + 8, …; the 8
 * warps' sums then in warp order), plus the stored value under ZL_GRADS_ADD, rounded once. */
template <int BF>
__global__ void layernorm_dgb_final_kernel(const float *partials, zl_half *dg, zl_half *db, int chunks, int D,
                                           int add) {
    __shared__ float part[2][8][32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, c = blockIdx.x * 32 + lane;
    float sg = 0.0f, sb = 0.0f;
    if (c < D)
        for (int k = w; k < chunks; k += 8) sg += partials[(size_t)k * D + c], sb += partials[(size_t)(chunks + k) * D + c];
    part[0][w][lane] = sg, part[1][w][lane] = sb;
    __syncthreads();
    if (w >= 2 || c >= D) return;
    float sum = 0.0f;
    for (int k = 0; k < 8; k++) sum += part[w][k][lane];
    zl_half *out = w ? db : dg;
    if (add) sum += h2f<BF>(out[c]);
    out[c] = f2h<BF>(sum);
}

void zl_gpt_layernorm_backward(const zl_half *x, const zl_half *g, const float *mean, const float *rstd,
                               const zl_half *dy, zl_half *dres, zl_half *dg, zl_half *db, zl_grads_mode mode,
                               int rows, int dim, zl_stream s) {
    if (rows <= 0) return;
    cudaStream_t st = as_stream(s);
    if (!g_ln_partials || ln_partial_floats(rows, dim) > g_ln_floats)
        zl_cuda_fatal(__FILE__, __LINE__, "zl_gpt_layernorm_backward", "workspace not set for these rows and width");
    int vec8 = dim % 8 == 0 && aligned16(x) && aligned16(dy) && aligned16(dres);
    LAUNCH16_VEC(layernorm_dx_kernel, vec8, (unsigned)((rows + 7) / 8), 256, st, x, g, mean, rstd, dy, dres, rows, dim,
                 aligned16(g));
    const int chunks = ln_chunks(rows); /* depends on the shape only: a fixed order */
    dim3 grid((unsigned)((dim + 63) / 64), (unsigned)chunks);
    LAUNCH16(layernorm_dgb_partial_kernel, grid, 256, st, x, mean, rstd, dy, g_ln_partials, rows, dim,
             ln_chunk_rows(rows));
    LAUNCH16(layernorm_dgb_final_kernel, (unsigned)((dim + 31) / 32), 256, st, g_ln_partials, dg, db, chunks, dim,
             mode == ZL_GRADS_ADD);
}

/* ---- linear layers ------------------------------------------------------------------------ */
#define ZL_SQRT_2_OVER_PI 0.7978845608028654f
#define ZL_GELU_C 0.044715f
__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(ZL_SQRT_2_OVER_PI * (x + ZL_GELU_C * x * x * x)));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
    float t = tanhf(ZL_SQRT_2_OVER_PI * (x + ZL_GELU_C * x * x * x));
    float du = ZL_SQRT_2_OVER_PI * (1.0f + 3.0f * ZL_GELU_C * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* fallbacks when cuBLASLt has no fused epilogue */
template <int BF> __global__ void add_bias_kernel(zl_half *y, const zl_half *bias, size_t n, int cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = f2h<BF>(h2f<BF>(y[i]) + h2f<BF>(bias[i % (size_t)cols]));
}
template <int BF> __global__ void bias_gelu_kernel(zl_half *h, const zl_half *bias, zl_half *a, size_t n, int cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = h2f<BF>(h[i]) + h2f<BF>(bias[i % (size_t)cols]);
        h[i] = f2h<BF>(v), a[i] = f2h<BF>(gelu_tanh(v));
    }
}
template <int BF> __global__ void dgelu_kernel(zl_half *dh, const zl_half *h, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dh[i] = f2h<BF>(h2f<BF>(dh[i]) * gelu_tanh_grad(h2f<BF>(h[i])));
}

void zl_gpt_linear_forward(const zl_half *x, const zl_half *W, const zl_half *b, const zl_half *residual,
                           zl_half *y, int rows, int din, int dout, zl_stream s) {
    cudaStream_t st = as_stream(s);
    gemm_args g = zl_cu_gemm_make("gpt linear y = x·W + b (+ residual)", CUBLAS_OP_N, CUBLAS_OP_N, dout, rows, din, W,
                                  dout, x, din, residual ? 1.0f : 0.0f, residual, y, dout);
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
    g.bias = (void *)b;
    if ((zl_cu_epilogue_mask() & EPI_BIAS) && zl_cu_gemm(&g, 0, st)) return;
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    g.bias = NULL;
    g.what = "gpt linear x·W (+ residual) (unfused)";
    zl_cu_gemm(&g, 1, st);
    size_t n = (size_t)rows * dout;
    LAUNCH16(add_bias_kernel, zl_cu_grid_for(n, 256), 256, st, y, b, n, dout);
}

void zl_gpt_linear_gelu_forward(const zl_half *x, const zl_half *W, const zl_half *b, zl_half *h, zl_half *a,
                                int rows, int din, int dout, zl_stream s) {
    cudaStream_t st = as_stream(s);
    gemm_args g = zl_cu_gemm_make("gpt linear h = x·W + b, a = gelu(h)", CUBLAS_OP_N, CUBLAS_OP_N, dout, rows, din, W,
                                  dout, x, din, 0.0f, NULL, a, dout);
    g.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    g.bias = (void *)b;
    g.aux = h;
    g.ldaux = dout;
    if ((zl_cu_epilogue_mask() & EPI_GELU_AUX_BIAS) && dout % 8 == 0 && zl_cu_gemm(&g, 0, st)) return;
    gemm_args p = zl_cu_gemm_make("gpt linear x·W (unfused)", CUBLAS_OP_N, CUBLAS_OP_N, dout, rows, din, W, dout, x,
                                  din, 0.0f, NULL, h, dout);
    zl_cu_gemm(&p, 1, st);
    size_t n = (size_t)rows * dout;
    LAUNCH16(bias_gelu_kernel, zl_cu_grid_for(n, 256), 256, st, h, b, a, n, dout);
}

void zl_gpt_linear_backward(const zl_half *x, const zl_half *W, const zl_half *dy, const zl_half *gelu_h,
                            zl_half *dx, zl_half *dW, zl_half *db, zl_grads_mode mode, int rows, int din, int dout,
                            zl_stream s) {
    cudaStream_t st = as_stream(s);
    const int epi = zl_cu_epilogue_mask();
    const float beta = mode == ZL_GRADS_ADD ? 1.0f : 0.0f; /* ADD: dW += the new product, rounded once */
    /* dWᵀ[dout×din] = dyᵀ·x; BGRADA reduces dyᵀ over k = rows: db (it overwrites: WRITE only) */
    gemm_args gw = zl_cu_gemm_make("gpt linear dW = xᵀ·dy, db", CUBLAS_OP_N, CUBLAS_OP_T, dout, din, rows, dy, dout,
                                   x, din, beta, beta != 0.0f ? dW : NULL, dW, dout);
    gw.epilogue = CUBLASLT_EPILOGUE_BGRADA;
    gw.bias = db;
    if (!((epi & EPI_BGRADA) && mode == ZL_GRADS_WRITE && zl_cu_gemm(&gw, 0, st))) {
        gw.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        gw.bias = NULL;
        gw.what = "gpt linear dW = xᵀ·dy (unfused)";
        zl_cu_gemm(&gw, 1, st);
        zl_cu_colsum(dy, db, rows, dout, mode, st);
    }
    if (!dx) return;
    /* dxᵀ[din×rows] = W·dyᵀ, ⊙ gelu'(h) through DGELU when the input was gelu(h) */
    gemm_args gx = zl_cu_gemm_make("gpt linear dx = dy·Wᵀ", CUBLAS_OP_T, CUBLAS_OP_N, din, rows, dout, W, dout, dy,
                                   dout, 0.0f, NULL, dx, din);
    if (gelu_h) {
        gx.epilogue = CUBLASLT_EPILOGUE_DGELU;
        gx.aux = (void *)gelu_h;
        gx.ldaux = din;
        gx.what = "gpt linear dx = (dy·Wᵀ) ⊙ gelu'(h)";
        if ((epi & EPI_DGELU) && din % 8 == 0 && zl_cu_gemm(&gx, 0, st)) return;
        gx.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        gx.aux = NULL;
        gx.what = "gpt linear dx = dy·Wᵀ (unfused)";
    }
    zl_cu_gemm(&gx, 1, st);
    if (gelu_h) {
        size_t n = (size_t)rows * din;
        LAUNCH16(dgelu_kernel, zl_cu_grid_for(n, 256), 256, st, dx, gelu_h, n);
    }
}

/* ---- attention ----------------------------------------------------------------------------- */
/* [B,T,parts·D] <-> [parts][B][H][T][hd]: a copy of the 16-bit bits, either way. */
__global__ void permute_kernel(const zl_half *src, zl_half *dst, size_t n, int B, int T, int D, int H, int parts,
                               int back) {
    int hd = D / H;
    for (size_t f = blockIdx.x * (size_t)blockDim.x + threadIdx.x; f < n; f += (size_t)gridDim.x * blockDim.x) {
        size_t row = f / ((size_t)parts * D), col = f % ((size_t)parts * D);
        int b = (int)(row / T), t = (int)(row % T), c = (int)(col / D), h = (int)(col % D) / hd, i = (int)(col % D) % hd;
        size_t r = ((((size_t)c * B + b) * H + h) * T + t) * hd + i;
        if (back) dst[f] = src[r];
        else dst[r] = src[f];
    }
}

static void permute(const zl_half *src, zl_half *dst, zl_gpt_dims d, int parts, int back, cudaStream_t st) {
    size_t n = (size_t)d.B * d.T * d.D * parts;
    permute_kernel<<<zl_cu_grid_for(n, 256), 256, 0, st>>>(src, dst, n, d.B, d.T, d.D, d.H, parts, back);
    cudaLaunchCheck("permute_kernel");
}

/* One warp per row of scores (B·H·T rows of T): P = softmax over j ≤ i, 0 beyond; in place. */
template <int BF> __global__ void softmax_causal_kernel(zl_half *S, size_t rows, int T) {
    size_t row = blockIdx.x * (size_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int i = (int)(row % (size_t)T);
    zl_half *s = S + row * T;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, h2f<BF>(s[j]));
    mx = warp_max(mx);
    for (int j = lane; j <= i; j += 32) sum += expf(h2f<BF>(s[j]) - mx);
    sum = warp_sum(sum);
    for (int j = lane; j < T; j += 32) s[j] = j <= i ? f2h<BF>(expf(h2f<BF>(s[j]) - mx) / sum) : f2h<BF>(0.0f);
}

/* dS = P ⊙ (dP - Σ_j P·dP) over j ≤ i, 0 beyond; in place over dP. */
template <int BF> __global__ void softmax_backward_kernel(const zl_half *P, zl_half *dP, size_t rows, int T) {
    size_t row = blockIdx.x * (size_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int i = (int)(row % (size_t)T);
    const zl_half *p = P + row * T;
    zl_half *g = dP + row * T;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32) dot += h2f<BF>(p[j]) * h2f<BF>(g[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) g[j] = j <= i ? f2h<BF>(h2f<BF>(p[j]) * (h2f<BF>(g[j]) - dot)) : f2h<BF>(0.0f);
}

/* One strided-batched product over the B·H (sequence, head) pairs. */
static void batched(const char *what, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const zl_half *A,
                    int lda, long long sa, const zl_half *Bm, int ldb, long long sb, zl_half *Dm, int ldd, long long sd,
                    float alpha, int batch, cudaStream_t st) {
    gemm_args g = zl_cu_gemm_make(what, ta, tb, m, n, k, A, lda, Bm, ldb, 0.0f, NULL, Dm, ldd);
    g.alpha = alpha;
    g.batch = batch;
    g.stride_a = sa, g.stride_b = sb, g.stride_d = sd;
    zl_cu_gemm(&g, 1, st);
}

static unsigned warp_rows_grid(size_t rows) { return (unsigned)((rows + 7) / 8); } /* 8 warps a block */

void zl_gpt_attention_forward(const zl_half *qkv, zl_half *qkvr, zl_half *P, zl_half *scratch_r, zl_half *out,
                              zl_gpt_dims d, zl_stream s) {
    cudaStream_t st = as_stream(s);
    const int T = d.T, hd = d.D / d.H, BH = d.B * d.H;
    const size_t RD = (size_t)d.B * T * d.D, Thd = (size_t)T * hd, TT = (size_t)T * T;
    const zl_half *q = qkvr, *k = qkvr + RD, *v = qkvr + 2 * RD;
    permute(qkv, qkvr, d, 3, 0, st);
    batched("gpt attention S = q·kᵀ/sqrt(hd)", CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, k, hd, Thd, q, hd, Thd, P, T, TT,
            1.0f / sqrtf((float)hd), BH, st);
    size_t rows = (size_t)BH * T;
    LAUNCH16(softmax_causal_kernel, warp_rows_grid(rows), 256, st, P, rows, T);
    batched("gpt attention O = P·v", CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, v, hd, Thd, P, T, TT, scratch_r, hd, Thd, 1.0f,
            BH, st);
    permute(scratch_r, out, d, 1, 1, st);
}

void zl_gpt_attention_backward(const zl_half *qkvr, const zl_half *P, const zl_half *dout, zl_half *dout_r,
                               zl_half *dP, zl_half *dqkvr, zl_half *dqkv, zl_gpt_dims d, zl_stream s) {
    cudaStream_t st = as_stream(s);
    const int T = d.T, hd = d.D / d.H, BH = d.B * d.H;
    const size_t RD = (size_t)d.B * T * d.D, Thd = (size_t)T * hd, TT = (size_t)T * T;
    const zl_half *q = qkvr, *k = qkvr + RD, *v = qkvr + 2 * RD;
    const float scale = 1.0f / sqrtf((float)hd);
    permute(dout, dout_r, d, 1, 0, st);
    batched("gpt attention dP = dO·vᵀ", CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, v, hd, Thd, dout_r, hd, Thd, dP, T, TT,
            1.0f, BH, st);
    size_t rows = (size_t)BH * T;
    LAUNCH16(softmax_backward_kernel, warp_rows_grid(rows), 256, st, P, dP, rows, T);
    batched("gpt attention dq = dS·k", CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, k, hd, Thd, dP, T, TT, dqkvr, hd, Thd, scale,
            BH, st);
    batched("gpt attention dk = dSᵀ·q", CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, q, hd, Thd, dP, T, TT, dqkvr + RD, hd, Thd,
            scale, BH, st);
    batched("gpt attention dv = Pᵀ·dO", CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, dout_r, hd, Thd, P, T, TT, dqkvr + 2 * RD,
            hd, Thd, 1.0f, BH, st);
    permute(dqkvr, dqkv, d, 3, 1, st);
}

/* ---- LM head and loss ------------------------------------------------------------------------ */
void zl_gpt_logits_forward(const zl_half *x, const zl_half *wte, zl_half *logits, zl_gpt_dims d, zl_stream s) {
    gemm_args g = zl_cu_gemm_make("gpt logits = x·wteᵀ", CUBLAS_OP_T, CUBLAS_OP_N, d.Vp, d.B * d.T, d.D, wte, d.D, x,
                                  d.D, 0.0f, NULL, logits, d.Vp);
    zl_cu_gemm(&g, 1, as_stream(s));
}

/* One block per row: softmax over the V real logits, the row's loss, the gradient in place.
 * Two passes over the row: each thread keeps a running max and its sum of exponentials
 * (rescaled when the max grows, as FlashAttention's online softmax does), the block combines
 * them in a fixed tree; then the gradient is written. VEC as the LayerNorm's. */
template <int BF, int VEC>
__global__ void crossentropy_kernel(zl_half *logits, const int32_t *targets, float *row_loss, int V, int Vp, float f) {
    zl_half *l = logits + (size_t)blockIdx.x * Vp;
    const int t = targets[blockIdx.x];
    float mt = -INFINITY, st = 0.0f, v[VEC];
    for (int j = threadIdx.x * VEC; j < Vp; j += blockDim.x * VEC) {
        load_vec<BF, VEC>(l + j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            if (j + k >= V) break;
            if (v[k] > mt) st = st * expf(mt - v[k]) + 1.0f, mt = v[k];
            else st += expf(v[k] - mt);
        }
    }
    const float mx = block_reduce<1>(mt);
    const float sum = block_reduce<0>(mt == -INFINITY ? 0.0f : st * expf(mt - mx));
    if (threadIdx.x == 0) row_loss[blockIdx.x] = mx + logf(sum) - h2f<BF>(l[t]);
    __syncthreads(); /* l[t] is read above before it is overwritten below */
    for (int j = threadIdx.x * VEC; j < Vp; j += blockDim.x * VEC) {
        load_vec<BF, VEC>(l + j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float p = j + k < V ? expf(v[k] - mx) / sum : 0.0f;
            v[k] = f * (p - (j + k == t ? 1.0f : 0.0f));
        }
        store_vec<BF, VEC>(l + j, v);
    }
}

__global__ void mean_loss_kernel(const float *row_loss, int R, float *loss) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < R; i += blockDim.x) acc += (double)row_loss[i];
    acc = zl_cu_block_sum(acc);
    if (threadIdx.x == 0) *loss = (float)(acc / (double)R);
}

void zl_gpt_crossentropy(zl_half *logits, const int32_t *targets, float *row_loss, float *loss, float loss_scale,
                         zl_gpt_dims d, zl_stream s) {
    cudaStream_t st = as_stream(s);
    const int R = d.B * d.T;
    const float f = loss_scale / (float)R; /* the CPU's expression */
    LAUNCH16_VEC(crossentropy_kernel, d.Vp % 8 == 0 && aligned16(logits), (unsigned)R, 256, st, logits, targets,
                 row_loss, d.V, d.Vp, f);
    mean_loss_kernel<<<1, 256, 0, st>>>(row_loss, R, loss);
    cudaLaunchCheck("mean_loss_kernel");
}

void zl_gpt_logits_backward(const zl_half *dlogits, const zl_half *x, const zl_half *wte, zl_half *dx,
                            zl_half *head, zl_gpt_dims d, zl_stream s) {
    cudaStream_t st = as_stream(s);
    const int R = d.B * d.T;
    gemm_args gx = zl_cu_gemm_make("gpt logits backward dx = dlogits·wte", CUBLAS_OP_N, CUBLAS_OP_N, d.D, R, d.Vp, wte,
                                   d.D, dlogits, d.Vp, 0.0f, NULL, dx, d.D);
    zl_cu_gemm(&gx, 1, st);
    gemm_args gh = zl_cu_gemm_make("gpt logits backward head = dlogitsᵀ·x", CUBLAS_OP_N, CUBLAS_OP_T, d.D, d.Vp, R, x,
                                   d.D, dlogits, d.Vp, 0.0f, NULL, head, d.D);
    zl_cu_gemm(&gh, 1, st);
}
