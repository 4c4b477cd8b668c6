/* gpt_flash.cu — the transformer's fused causal attention (gpt_kernels.h: zl_gpt_flash_*), the
 * FlashAttention-2 algorithm on tensor cores, made deterministic:
 *   forward   one CTA per (query tile of 64 rows, head, sequence) reads its rows of q, k and v
 *             straight from qkv (R×3D), walks the key tiles up to the diagonal with an online
 *             softmax (mma.sync m16n8k16: fp16 in, fp32 accumulate) and writes out (R×D) in place.
 *             No T×T matrix exists: each query row keeps its log-sum-exp (B·H·T floats).
 *   backward  P recomputed from q, k and the log-sum-exp; every output element has one writer
 *             and every sum a fixed order (no float atomics, unlike FlashAttention-2's dQ), so
 *             results repeat bit for bit — the stages' bitwise equality depends on it.
 * Head dimension 64 and fp16 storage only (zl_gpt_flash_supported); the strided-batched path of
 * gpt_cuda.cu serves every other shape. bench/attention.cu times both. */
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "gpt_kernels.h"

/* ---- the fused kernel -------------------------------------------------------------------------
 * Tiles: BR = 64 query rows per CTA, 4 warps of 16 rows each (one m16 MMA row block per warp);
 * key/value tiles of BC = 64 rows, double-buffered in shared memory through cp.async so the next
 * tile loads while this one computes. Shared rows are padded to 72 halves (144 bytes): the
 * 8 rows an ldmatrix reads then start in 8 different 16-byte bank groups, no conflicts.
 *
 * Fragment layouts of mma.sync.m16n8k16 (PTX ISA; g = lane/4, c = lane%4):
 *   A (16×16, row):  a0 = A[g][2c..2c+1]   a1 = A[g+8][2c..]   a2 = A[g][2c+8..]   a3 = A[g+8][2c+8..]
 *   B (16×8, col):   b0 = B[2c..2c+1][g]   b1 = B[2c+8..2c+9][g]
 *   C (16×8, f32):   c0,c1 = C[g][2c..2c+1]   c2,c3 = C[g+8][2c..2c+1]
 * S's C fragments of two adjacent 8-key tiles are exactly P's A fragment for one 16-key step:
 * the probabilities never leave registers. */
#define HD 64      /* head dim: gpt2-124m (768/12) and gpt2-1.5b (1600/25) */
#define BR 64      /* query rows per CTA */
#define BC 64      /* keys per tile; = BR, so query tile i needs key tiles 0..i, tile i masked */
#define WARPS (BR / 16)
#define THREADS (WARPS * 32)
#define LDS (HD + 8) /* halves per shared row: 144 bytes */

static __device__ __forceinline__ unsigned smem_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared without passing through registers; bytes = 0 zero-fills (rows ≥ T). */
static __device__ __forceinline__ void cp_async_16(void *dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Four 8×8 matrices of 16-bit values; lane l gives the address of row l%8 of matrix l/8.
 * Without .trans lane l receives row l/4, columns 2(l%4), +1 of each; with .trans, column l/4,
 * rows 2(l%4), +1 (the transpose). */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}
static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}

/* acc[16×8] += A[16×16]·B[16×8], fp16 operands, fp32 accumulators. */
static __device__ __forceinline__ void mma_16816(float acc[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi); /* lo in the low 16 bits: the lower column index */
    return *reinterpret_cast<uint32_t *>(&h);
}

/* rows [row0, row0+64) × HD columns of one of q, k, v (src: row 0 of this sequence and head,
 * rows ld elements apart) -> tile. 512 chunks of 16 bytes, 4 a thread. Rows ≥ T read as 0. */
static __device__ __forceinline__ void load_tile(zl_half (*tile)[LDS], const zl_half *src, int row0, int T,
                                                 int ld) {
    for (int chunk = threadIdx.x; chunk < 64 * (HD / 8); chunk += THREADS) {
        int r = chunk / (HD / 8), col = chunk % (HD / 8) * 8, row = row0 + r;
        int ok = row < T;
        cp_async_16(&tile[r][col], src + (size_t)(ok ? row : 0) * ld + col, ok ? 16 : 0);
    }
}

/* Grid (ceil(T/BR), H, B), THREADS threads. qkv: B·T × 3D; out: B·T × D; lse: [B][H][T] floats,
 * natural log of Σ_j e^{scale·q_i·k_j} over j ≤ i. scale_log2 = log2(e)/sqrt(HD): softmax in
 * base 2 (one ex2 per score) with the scale folded in. */
__global__ void __launch_bounds__(THREADS)
    flash_forward_kernel(const zl_half *__restrict__ qkv, zl_half *__restrict__ out, float *__restrict__ lse, int T,
                         int H, float scale_log2) {
    __shared__ __align__(16) zl_half Qs[BR][LDS];
    __shared__ __align__(16) zl_half Ks[2][BC][LDS];
    __shared__ __align__(16) zl_half Vs[2][BC][LDS];

    const int tile = gridDim.x - 1 - blockIdx.x; /* the longest (last) query tiles start first: a shorter tail */
    const int h = blockIdx.y, b = blockIdx.z, D = H * HD, ld = 3 * D;
    const int q0 = tile * BR, nkv = tile + 1; /* key tiles 0..tile */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const zl_half *q = qkv + (size_t)b * T * ld + h * HD, *k = q + D, *v = q + 2 * D;

    load_tile(Qs, q, q0, T, ld);
    load_tile(Ks[0], k, 0, T, ld);
    load_tile(Vs[0], v, 0, T, ld);
    cp_async_commit();

    uint32_t qa[HD / 16][4];             /* this warp's 16 query rows as A fragments, 4 k16 steps over HD */
    float o[HD / 8][4];                  /* O accumulators: 16 rows × HD, 8 n8 tiles */
    float m[2] = {-INFINITY, -INFINITY}; /* running max of the raw scores of rows g and g+8 */
    float l[2] = {0.0f, 0.0f};           /* this thread's part of their running Σ 2^{(s-m)·scale_log2} */
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int j = 0; j < nkv; j++) {
        const int buf = j & 1;
        if (j + 1 < nkv) { /* prefetch tile j+1 into the other buffer, then wait for tile j only */
            load_tile(Ks[buf ^ 1], k, (j + 1) * BC, T, ld);
            load_tile(Vs[buf ^ 1], v, (j + 1) * BC, T, ld);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) /* Q arrived with tile 0; matrices: rows 0-7 | 8-15 × columns +0 | +8 = a0..a3 */
            for (int kk = 0; kk < HD / 16; kk++)
                ldmatrix_x4(qa[kk], &Qs[warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][kk * 16 + (lane >> 4) * 8]);

        /* S = Q·Kᵀ (raw, unscaled), 16 × BC per warp. B[d][key] = K[key][d]: K's rows are B's columns,
         * so plain ldmatrix of K gives B fragments; matrices: keys 8n..8n+7 × d +0 | +8 (b0, b1 of key
         * tile n), then keys 8n+8..8n+15 (of tile n+1). */
        float s[BC / 8][4];
        for (int n = 0; n < BC / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        for (int kk = 0; kk < HD / 16; kk++)
            for (int n = 0; n < BC / 8; n += 2) {
                uint32_t kb[4];
                ldmatrix_x4(kb, &Ks[buf][n * 8 + (lane & 7) + (lane >> 4) * 8][kk * 16 + ((lane >> 3) & 1) * 8]);
                mma_16816(s[n], qa[kk], kb[0], kb[1]);
                mma_16816(s[n + 1], qa[kk], kb[2], kb[3]);
            }

        /* The causal mask, on the diagonal tile only (earlier tiles lie wholly below it): key > query
         * -> -inf, as zerolab's softmax gives those keys probability 0. Every row keeps key j·BC ≤ its
         * own index, so no row is all -inf and m stays finite after tile 0. */
        if (j == tile)
            for (int n = 0; n < BC / 8; n++)
                for (int e = 0; e < 4; e++) {
                    int key = j * BC + n * 8 + 2 * c + (e & 1), row = q0 + warp * 16 + g + (e >> 1) * 8;
                    if (key > row) s[n][e] = -INFINITY;
                }

        /* Online softmax for rows g (r = 0: c0, c1) and g+8 (r = 1: c2, c3). A row's 64 scores lie in
         * the 4 lanes of a quad: max over them by two xor-shuffles. O and l are rescaled by
         * 2^{(m_old - m_new)·scale_log2} so every term stays relative to the current max. */
        for (int r = 0; r < 2; r++) {
            float mx = m[r];
            for (int n = 0; n < BC / 8; n++) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float alpha = exp2f((m[r] - mx) * scale_log2), off = mx * scale_log2; /* alpha: 0 on tile 0 */
            float sum = 0.0f;
            for (int n = 0; n < BC / 8; n++)
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    s[n][e] = exp2f(fmaf(s[n][e], scale_log2, -off)); /* -inf -> 0 */
                    sum += s[n][e];
                }
            l[r] = l[r] * alpha + sum; /* the quad's lanes add their parts once, at the end */
            m[r] = mx;
            for (int n = 0; n < HD / 8; n++) o[n][2 * r] *= alpha, o[n][2 * r + 1] *= alpha;
        }

        /* O += P·V. P (fp16) from S's registers: key tiles 2kk, 2kk+1 form A's 16-key step kk.
         * B[key][d] = V[key][d] is row-major, so ldmatrix .trans; matrices: keys +0..7 | +8..15
         * (b0, b1) × d 8n..8n+7, then d 8n+8..8n+15. */
        for (int kk = 0; kk < BC / 16; kk++) {
            uint32_t pa[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                              pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            for (int n = 0; n < HD / 8; n += 2) {
                uint32_t vb[4];
                ldmatrix_x4_trans(vb, &Vs[buf][kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][n * 8 + (lane >> 4) * 8]);
                mma_16816(o[n], pa, vb[0], vb[1]);
                mma_16816(o[n + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads(); /* everyone is done with buffer buf before tile j+2 overwrites it */
    }

    /* out = O / l, straight into the unpermuted R×D layout; lse = ln l + m·scale. */
    for (int r = 0; r < 2; r++) {
        float sum = l[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int row = q0 + warp * 16 + g + r * 8;
        if (row >= T) continue;
        const float inv = 1.0f / sum;
        zl_half *dst = out + ((size_t)b * T + row) * D + h * HD + 2 * c;
        for (int n = 0; n < HD / 8; n++)
            *reinterpret_cast<__half2 *>(dst + n * 8) = __floats2half2_rn(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (c == 0) lse[((size_t)b * gridDim.y + h) * T + row] = logf(sum) + m[r] * scale_log2 * 0.6931471805599453f;
    }
}

static void flash_forward(const zl_half *qkv, zl_half *out, float *lse, zl_gpt_dims d, cudaStream_t st) {
    dim3 grid((unsigned)((d.T + BR - 1) / BR), (unsigned)d.H, (unsigned)d.B);
    flash_forward_kernel<<<grid, THREADS, 0, st>>>(qkv, out, lse, d.T, d.H, 1.4426950408889634f / sqrtf((float)HD));
    cudaLaunchCheck("flash_forward_kernel");
}

/* ---- the fused backward ------------------------------------------------------------------------
 * FlashAttention-2's backward from what the fused forward keeps (out, the row logsumexps) and dout:
 *   P = exp(scale·q·kᵀ - lse)      recomputed per tile, never stored
 *   dV = Pᵀ·dO    dP = dO·vᵀ    dS = P ⊙ (dP - Dl),  Dl_i = Σ_j P_ij·dP_ij = dO_i·O_i
 *   dQ = scale·dS·k    dK = scale·dSᵀ·q
 * FlashAttention-2 computes all three in one pass over key tiles and adds each tile's share of dQ
 * with float atomics, whose order changes from run to run. zerolab's results repeat bit for bit,
 * so here every output element has one writer and every sum a fixed order, at the price of
 * computing S and dP twice:
 *   flash_rowdot_kernel  Dl (B·H·T floats), 8 threads a (row, head), a fixed shuffle tree;
 *   flash_dkdv_kernel    one CTA per 64-key tile, each warp 16 keys: walks the query tiles from
 *                        the diagonal to the end; Pᵀ and dSᵀ are computed key-major (keys are the
 *                        MMA rows), so the C fragments of Pᵀ, dSᵀ are at once the A fragments of
 *                        dV += Pᵀ·dO and dK += dSᵀ·q, and a warp's keys need no other warp;
 *   flash_dq_kernel      one CTA per 64-query tile, each warp 16 queries: walks key tiles 0..the
 *                        diagonal as the forward does; dQ += dS·k.
 * Both write dqkv (B·T × 3D: dq | dk | dv, head h at columns h·hd of each), the layout
 * zl_gpt_attention_backward writes, with no permute. Static shared memory is capped at 48 KiB,
 * so the tiles a warp keeps in registers for the whole kernel (k, v or q, dO) arrive through
 * the second buffer before the loop first refills it. */

/* This warp's 16 rows of a tile as A fragments, HD/16 k16 steps (the forward's qa load). */
static __device__ __forceinline__ void load_a_fragments(uint32_t a[HD / 16][4], const zl_half (*tile)[LDS], int warp,
                                                        int lane) {
    for (int kk = 0; kk < HD / 16; kk++)
        ldmatrix_x4(a[kk], &tile[warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][kk * 16 + (lane >> 4) * 8]);
}

/* acc (16 × 64) = A (16 × HD) · tileᵀ: column n of the product is row n of the 64-row tile, so a
 * plain ldmatrix of the tile gives B fragments (the forward's S = Q·Kᵀ). */
static __device__ __forceinline__ void mma_a_by_tile_t(float acc[64 / 8][4], const uint32_t a[HD / 16][4],
                                                       const zl_half (*tile)[LDS], int lane) {
    for (int n = 0; n < 64 / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int kk = 0; kk < HD / 16; kk++)
        for (int n = 0; n < 64 / 8; n += 2) {
            uint32_t b[4];
            ldmatrix_x4(b, &tile[n * 8 + (lane & 7) + (lane >> 4) * 8][kk * 16 + ((lane >> 3) & 1) * 8]);
            mma_16816(acc[n], a[kk], b[0], b[1]);
            mma_16816(acc[n + 1], a[kk], b[2], b[3]);
        }
}

/* acc (16 × HD) += C (16 × 64, fp32 C fragments, rounded to fp16 here) · tile (64 × HD): C's
 * fragments of n8 tiles 2kk, 2kk+1 are A's k16 step kk; the tile is row-major B, so ldmatrix
 * .trans (the forward's O += P·V). */
static __device__ __forceinline__ void mma_c_by_tile(float acc[HD / 8][4], const float c[64 / 8][4],
                                                     const zl_half (*tile)[LDS], int lane) {
    for (int kk = 0; kk < 64 / 16; kk++) {
        uint32_t a[4] = {pack_half2(c[2 * kk][0], c[2 * kk][1]), pack_half2(c[2 * kk][2], c[2 * kk][3]),
                         pack_half2(c[2 * kk + 1][0], c[2 * kk + 1][1]), pack_half2(c[2 * kk + 1][2], c[2 * kk + 1][3])};
        for (int n = 0; n < HD / 8; n += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, &tile[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][n * 8 + (lane >> 4) * 8]);
            mma_16816(acc[n], a, b[0], b[1]);
            mma_16816(acc[n + 1], a, b[2], b[3]);
        }
    }
}

/* Rows g and g+8 of this warp's 16 × HD accumulator, times scale, to dst (row 0 of this
 * sequence, head and part; rows ld apart); rows ≥ T are padding and not written. */
static __device__ __forceinline__ void store_rows(zl_half *dst, const float acc[HD / 8][4], float scale, int row0,
                                                  int T, int ld, int lane) {
    const int g = lane >> 2, c = lane & 3;
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + r * 8;
        if (row >= T) continue;
        zl_half *p = dst + (size_t)row * ld + 2 * c;
        for (int n = 0; n < HD / 8; n++)
            *reinterpret_cast<__half2 *>(p + n * 8) = __floats2half2_rn(acc[n][2 * r] * scale, acc[n][2 * r + 1] * scale);
    }
}

/* Grid ceil(B·T·H·8 / 256) × 256 threads. Dl[b][h][t] = Σ_e dout·out over the head's HD columns:
 * 8 threads a (row, head), 8 products each in order, then xor-shuffles 4, 2, 1 (a fixed tree). */
__global__ void flash_rowdot_kernel(const zl_half *__restrict__ out, const zl_half *__restrict__ dout,
                                    float *__restrict__ Dl, int T, int H, size_t pairs) {
    const size_t f = blockIdx.x * (size_t)blockDim.x + threadIdx.x, pair = f / 8; /* pair = row·H + h */
    const int part = (int)(f % 8);
    float sum = 0.0f;
    if (pair < pairs) { /* no early return: every lane of the warp takes part in the shuffles */
        const size_t at = pair * HD + part * 8; /* = row·D + h·HD + part·8, D = H·HD */
        const uint4 o4 = *reinterpret_cast<const uint4 *>(out + at), d4 = *reinterpret_cast<const uint4 *>(dout + at);
        const __half2 *o2 = reinterpret_cast<const __half2 *>(&o4), *d2 = reinterpret_cast<const __half2 *>(&d4);
        for (int e = 0; e < 4; e++) {
            const float2 of = __half22float2(o2[e]), df = __half22float2(d2[e]);
            sum = fmaf(of.x, df.x, sum);
            sum = fmaf(of.y, df.y, sum);
        }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (pair < pairs && part == 0) {
        const size_t row = pair / H, b = row / T;
        const int h = (int)(pair % H), t = (int)(row % T);
        Dl[(b * H + h) * T + t] = sum;
    }
}

/* A query tile's rows of q (rows ld_q apart) and dO (ld_do) by cp.async, and its rows' lse·log2(e)
 * and Dl by plain stores (seen after the next __syncthreads). Rows ≥ T: q, dO zero, lse2 and Dl 0
 * (finite; masked anyway). */
static __device__ __forceinline__ void load_query_tile(zl_half (*Qt)[LDS], zl_half (*dOt)[LDS], float *lse2t,
                                                       float *Dt, const zl_half *q, const zl_half *dO,
                                                       const float *lse_bh, const float *D_bh, int row0, int T,
                                                       int ld_q, int ld_do) {
    load_tile(Qt, q, row0, T, ld_q);
    load_tile(dOt, dO, row0, T, ld_do);
    if (threadIdx.x < BR) {
        const int row = row0 + threadIdx.x;
        lse2t[threadIdx.x] = row < T ? lse_bh[row] * 1.4426950408889634f : 0.0f;
        Dt[threadIdx.x] = row < T ? D_bh[row] : 0.0f;
    }
}

/* Grid (ceil(T/BC), H, B), THREADS threads. Writes dk, dv of key tile blockIdx.x into dqkv. */
__global__ void __launch_bounds__(THREADS)
    flash_dkdv_kernel(const zl_half *__restrict__ qkv, const zl_half *__restrict__ dout, const float *__restrict__ lse,
                      const float *__restrict__ Dl, zl_half *__restrict__ dqkv, int T, int H, float scale_log2,
                      float scale) {
    __shared__ __align__(16) zl_half Qs[2][BR][LDS];  /* query tile j; buffer 1 first holds this CTA's k */
    __shared__ __align__(16) zl_half dOs[2][BR][LDS]; /* dO of query tile j; buffer 1 first holds v */
    __shared__ float lse2s[2][BR];                    /* lse·log2(e) of query tile j's rows */
    __shared__ float Ds[2][BR];                       /* Dl of query tile j's rows */

    const int ktile = blockIdx.x; /* the first key tiles meet the most query tiles: they start first */
    const int h = blockIdx.y, b = blockIdx.z, D = H * HD, ld = 3 * D, nq = gridDim.x;
    const int k0 = ktile * BC, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int key0 = k0 + warp * 16 + g; /* this thread's keys: key0 (C rows c0, c1) and key0 + 8 (c2, c3) */
    const zl_half *q = qkv + (size_t)b * T * ld + h * HD, *k = q + D, *v = q + 2 * D;
    const zl_half *dO = dout + (size_t)b * T * D + h * HD;
    const float *lse_bh = lse + ((size_t)b * H + h) * T, *D_bh = Dl + ((size_t)b * H + h) * T;

    load_tile(Qs[1], k, k0, T, ld);
    load_tile(dOs[1], v, k0, T, ld);
    load_query_tile(Qs[0], dOs[0], lse2s[0], Ds[0], q, dO, lse_bh, D_bh, ktile * BR, T, ld, D);
    cp_async_commit();

    uint32_t ka[HD / 16][4], va[HD / 16][4]; /* this warp's 16 keys of k and v as A fragments */
    float dk[HD / 8][4], dv[HD / 8][4];      /* 16 keys × HD each */
    for (int n = 0; n < HD / 8; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    for (int j = ktile; j < nq; j++) { /* query tiles below the diagonal see none of these keys */
        const int buf = (j - ktile) & 1, q0 = j * BR;
        cp_async_wait<0>();
        __syncthreads(); /* tile j is in buf, and everyone is done with buf ^ 1 (tile j-1) */
        if (j == ktile) {
            load_a_fragments(ka, Qs[1], warp, lane);
            load_a_fragments(va, dOs[1], warp, lane);
            __syncthreads(); /* k, v are in registers: buffer 1 may be refilled */
        }
        if (j + 1 < nq) { /* tile j+1 loads while tile j computes */
            load_query_tile(Qs[buf ^ 1], dOs[buf ^ 1], lse2s[buf ^ 1], Ds[buf ^ 1], q, dO, lse_bh, D_bh, q0 + BR, T,
                            ld, D);
            cp_async_commit();
        }

        float s[BR / 8][4], dp[BR / 8][4]; /* Sᵀ = k·qᵀ and dPᵀ = v·dOᵀ: 16 keys × 64 queries */
        mma_a_by_tile_t(s, ka, Qs[buf], lane);
        mma_a_by_tile_t(dp, va, dOs[buf], lane);
        /* Pᵀ in s, dSᵀ in dp. Masked: query < key (the causal mask; only on the diagonal tile)
         * and query ≥ T (padding rows of the last tile). */
        for (int n = 0; n < BR / 8; n++)
            for (int e = 0; e < 4; e++) {
                const int col = n * 8 + 2 * c + (e & 1), query = q0 + col, key = key0 + (e >> 1) * 8;
                const float p = query < key || query >= T ? 0.0f
                                                          : exp2f(fmaf(s[n][e], scale_log2, -lse2s[buf][col]));
                s[n][e] = p;
                dp[n][e] = p * (dp[n][e] - Ds[buf][col]);
            }
        mma_c_by_tile(dv, s, dOs[buf], lane); /* dV += Pᵀ·dO */
        mma_c_by_tile(dk, dp, Qs[buf], lane); /* dK += dSᵀ·q (scale applied once, at the store) */
    }
    zl_half *dst = dqkv + (size_t)b * T * ld + h * HD;
    store_rows(dst + D, dk, scale, k0 + warp * 16, T, ld, lane);
    store_rows(dst + 2 * D, dv, 1.0f, k0 + warp * 16, T, ld, lane);
}

/* Grid (ceil(T/BR), H, B), THREADS threads. Writes dq of query tile (the last first) into dqkv. */
__global__ void __launch_bounds__(THREADS)
    flash_dq_kernel(const zl_half *__restrict__ qkv, const zl_half *__restrict__ dout, const float *__restrict__ lse,
                    const float *__restrict__ Dl, zl_half *__restrict__ dqkv, int T, int H, float scale_log2,
                    float scale) {
    __shared__ __align__(16) zl_half Ks[2][BC][LDS]; /* key tile j; buffer 1 first holds this CTA's q */
    __shared__ __align__(16) zl_half Vs[2][BC][LDS]; /* value tile j; buffer 1 first holds dO */

    const int tile = gridDim.x - 1 - blockIdx.x; /* the longest (last) query tiles start first, as forward */
    const int h = blockIdx.y, b = blockIdx.z, D = H * HD, ld = 3 * D;
    const int q0 = tile * BR, nkv = tile + 1, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2,
              c = lane & 3;
    const zl_half *q = qkv + (size_t)b * T * ld + h * HD, *k = q + D, *v = q + 2 * D;
    const zl_half *dO = dout + (size_t)b * T * D + h * HD;

    load_tile(Ks[1], q, q0, T, ld);
    load_tile(Vs[1], dO, q0, T, D);
    load_tile(Ks[0], k, 0, T, ld);
    load_tile(Vs[0], v, 0, T, ld);
    cp_async_commit();

    float lse2[2], Dr[2]; /* lse·log2(e) and Dl of this thread's rows g, g+8 (0 for padding rows) */
    for (int r = 0; r < 2; r++) {
        const int row = q0 + warp * 16 + g + r * 8;
        const size_t at = ((size_t)b * H + h) * T + row;
        lse2[r] = row < T ? lse[at] * 1.4426950408889634f : 0.0f;
        Dr[r] = row < T ? Dl[at] : 0.0f;
    }
    uint32_t qa[HD / 16][4], da[HD / 16][4]; /* this warp's 16 queries of q and dO as A fragments */
    float dq[HD / 8][4];
    for (int n = 0; n < HD / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    for (int j = 0; j < nkv; j++) {
        const int buf = j & 1;
        cp_async_wait<0>();
        __syncthreads(); /* tile j is in buf, and everyone is done with buf ^ 1 (tile j-1) */
        if (j == 0) {
            load_a_fragments(qa, Ks[1], warp, lane);
            load_a_fragments(da, Vs[1], warp, lane);
            __syncthreads(); /* q, dO are in registers: buffer 1 may be refilled */
        }
        if (j + 1 < nkv) { /* tile j+1 loads while tile j computes */
            load_tile(Ks[buf ^ 1], k, (j + 1) * BC, T, ld);
            load_tile(Vs[buf ^ 1], v, (j + 1) * BC, T, ld);
            cp_async_commit();
        }

        float s[BC / 8][4], dp[BC / 8][4]; /* S = q·kᵀ and dP = dO·vᵀ: 16 queries × 64 keys */
        mma_a_by_tile_t(s, qa, Ks[buf], lane);
        mma_a_by_tile_t(dp, da, Vs[buf], lane);
        /* P in s, dS in dp; masked: key > query (the diagonal tile only) and query ≥ T. */
        for (int n = 0; n < BC / 8; n++)
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, key = j * BC + n * 8 + 2 * c + (e & 1), row = q0 + warp * 16 + g + r * 8;
                const float p = key > row || row >= T ? 0.0f : exp2f(fmaf(s[n][e], scale_log2, -lse2[r]));
                s[n][e] = p;
                dp[n][e] = p * (dp[n][e] - Dr[r]);
            }
        mma_c_by_tile(dq, dp, Ks[buf], lane); /* dQ += dS·k */
    }
    store_rows(dqkv + (size_t)b * T * ld + h * HD, dq, scale, q0 + warp * 16, T, ld, lane);
}

/* dqkv (B·T × 3D) from qkv, the fused forward's out and lse, and dout (B·T × D); Dl: B·H·T floats
 * of scratch. Three launches on one stream, each output element written once. */
static void flash_backward(const zl_half *qkv, const zl_half *out, const float *lse, const zl_half *dout, float *Dl,
                           zl_half *dqkv, zl_gpt_dims d, cudaStream_t st) {
    const size_t pairs = (size_t)d.B * d.T * d.H;
    const float scale = 1.0f / sqrtf((float)HD), scale_log2 = 1.4426950408889634f * scale;
    flash_rowdot_kernel<<<(unsigned)((pairs * 8 + 255) / 256), 256, 0, st>>>(out, dout, Dl, d.T, d.H, pairs);
    cudaLaunchCheck("flash_rowdot_kernel");
    dim3 grid((unsigned)((d.T + BR - 1) / BR), (unsigned)d.H, (unsigned)d.B);
    flash_dkdv_kernel<<<grid, THREADS, 0, st>>>(qkv, dout, lse, Dl, dqkv, d.T, d.H, scale_log2, scale);
    cudaLaunchCheck("flash_dkdv_kernel");
    flash_dq_kernel<<<grid, THREADS, 0, st>>>(qkv, dout, lse, Dl, dqkv, d.T, d.H, scale_log2, scale);
    cudaLaunchCheck("flash_dq_kernel");
}

/* ---- the API (gpt_kernels.h) --------------------------------------------------------------- */
extern "C" {
void zl_gpt_flash_forward(const zl_half *qkv, zl_half *out, float *lse, zl_gpt_dims d, zl_stream s) {
    flash_forward(qkv, out, lse, d, as_stream(s));
}
void zl_gpt_flash_backward(const zl_half *qkv, const zl_half *out, const float *lse, const zl_half *dout, float *Dl,
                           zl_half *dqkv, zl_gpt_dims d, zl_stream s) {
    flash_backward(qkv, out, lse, dout, Dl, dqkv, d, as_stream(s));
}
}
