/* attention.cu — zerolab's causal attention forward and backward beside fused kernels of our own,
 * on one GPU (issue 11: is the strided-batched cuBLASLt path the right one for attention?).
 *
 * Both compute out = unpermute(softmax_causal(q·kᵀ/sqrt(hd))·v) (R×D, R = B·T) from the fused
 * QKV projection's output qkv (R×3D: q | k | v, head h at columns h·hd of each):
 *   strided  zl_gpt_attention_forward, the very function the model calls (kernels/cuda/gpt_cuda.cu):
 *            permute qkv -> qkvr, S = q·kᵀ/sqrt(hd) as one cuBLASLt strided-batched GEMM over the
 *            B·H (sequence, head) pairs, the causal softmax kernel in place, O = P·v as a second
 *            one, unpermute. All B·H·T·T probabilities P are written and read (the model keeps them
 *            for backward), and both GEMMs also compute the masked upper triangle.
 *   fused    flash_forward_kernel below, FlashAttention-2's forward: one CTA per (query tile of 64
 *            rows, head, sequence) reads its rows of q, k and v straight from qkv, walks the key
 *            tiles up to the diagonal on tensor cores (mma.sync m16n8k16: fp16 in, fp32 accumulate)
 *            with an online softmax, and writes out in place. No T×T matrix exists: each query row
 *            keeps its logsumexp (B·H·T floats), from which the backward recomputes P.
 *
 * Backward, from dout (R×D) to dqkv (R×3D: dq | dk | dv, qkv's layout):
 *   strided  zl_gpt_attention_backward, the model's: permute dout, dP = dO·vᵀ (strided-batched),
 *            the softmax backward in place (dS), dq = dS·k, dk = dSᵀ·q, dv = Pᵀ·dO (three more),
 *            unpermute; reads the saved P, writes and reads dP (B·H·T·T halves).
 *   fused    flash_backward below, FlashAttention-2's backward made deterministic (no float
 *            atomics, as zerolab's bitwise repeatability needs): Dl = rowsum(dO ⊙ O) in a small
 *            kernel, then dk, dv per key tile (walking the query tiles) and dq per query tile
 *            (walking the key tiles), each recomputing P from q, k and the saved logsumexp.
 *
 * Before any time is printed, outputs and gradients are checked (exit 4 on a mismatch, so a wrong
 * kernel cannot report a speed); every output is poisoned with NaN first, so an unwritten element
 * fails:
 *   forward   fused vs strided, every element: max|Δ| ≤ 2e-2 · max|O_strided|; both vs a
 *             double-precision host reference on sampled rows, same bound; the fused logsumexp
 *             to 1e-3 relative.
 *   backward  fused vs strided, every element of dq, dk, dv: max|Δ| ≤ 2e-2 · max|ref| each; both
 *             vs a double host backward of whole (sequence, head) pairs, same bound; the fused
 *             backward run twice, bitwise identical.
 *
 * FLOPs. Attention's two products are 4·B·H·T²·hd FLOPs over the whole T×T square; causal
 * attention needs only the lower half, so both paths are credited with 2·B·H·T²·hd "useful"
 * FLOPs (as FlashAttention's papers count causal attention). The strided path executes twice
 * that; the fused kernel executes the lower half plus the diagonal tiles. Same count for both:
 * the TFLOP/s ratio is the speed ratio. Forward + backward: 7·B·H·T²·hd, FlashAttention-2's
 * count (backward = 2.5 × forward: S recomputed, dP, dV, dQ, dK, each B·H·T²·hd on the causal
 * half). The strided backward executes 4 products over the whole square (8·B·H·T²·hd, no
 * recompute); the fused one 7 over the lower half and diagonal (S and dP in both kernels).
 *
 *   build/cuda/bench_attention                       the preset shapes: gpt2-124m B = 8, 32;
 *                                                    gpt2-1.5b B = 4, 8 (T = 1024, hd = 64)
 *   build/cuda/bench_attention [--shape B,T,D,H]... [--iters N]
 * One GPU, no mpiexec. Storage fp16 (zerolab's default format). Exit: 0 ok · 1 CUDA error ·
 * 2 bad shape or does not fit · 4 outputs or gradients disagree. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"     /* zl_half, zl_stream */
#include "cuda/cuda_check.h" /* cudaCheck, cudaLaunchCheck */
#include "gpt_kernels.h" /* zl_gpt_dims, zl_gpt_attention_forward / backward, zl_gpt_workspace_bytes / set_workspace */
#include "kernels.h"     /* zl_kernels_set_dtype, zl_storage_from_float / to_float */

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

/* ---- host side ---------------------------------------------------------------------------- */
typedef struct {
    const char *name;
    zl_gpt_dims d;
} shape;

/* What each path allocates beyond qkv (input) and out (output), in bytes. */
typedef struct {
    size_t qkvr;      /* strided: 3·R·D halves, q, k, v per (sequence, head) */
    size_t probs;     /* strided: B·H·T·T halves, P (the model keeps one per layer for backward) */
    size_t scratch_r; /* strided: B·H·T·hd halves, O before the unpermute */
    size_t workspace; /* strided: zl_gpt_workspace_bytes (cuBLASLt's 32 MiB and friends) */
    size_t lse;       /* fused: B·H·T floats, the row logsumexps (kept for the backward) */
    size_t dout_r;    /* strided backward: B·H·T·hd halves, dout per (sequence, head) */
    size_t dP;        /* strided backward: B·H·T·T halves, dP, then dS in place */
    size_t dqkvr;     /* strided backward: 3·R·D halves, dq, dk, dv per (sequence, head) */
    size_t Dl;        /* fused backward: B·H·T floats, the rows' dO·O */
} path_bytes;

static path_bytes bytes_of(zl_gpt_dims d) {
    size_t R = (size_t)d.B * d.T, BHT = (size_t)d.B * d.H * d.T;
    path_bytes p = {3 * R * d.D * 2,    BHT * d.T * 2,      BHT * (d.D / d.H) * 2, zl_gpt_workspace_bytes(d),
                    BHT * sizeof(float), BHT * (d.D / d.H) * 2, BHT * d.T * 2,      3 * R * d.D * 2,
                    BHT * sizeof(float)};
    return p;
}

static double mib(size_t b) { return (double)b / (1 << 20); }

static void *dalloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes));
    return p;
}

/* Uniform in [-2, 2), rounded to fp16: scores q·k/8 then spread over about ±6 (std ≈ 1.3), so the
 * softmax is neither flat nor one-hot and the online max really moves from tile to tile. */
static void fill_random(zl_half *x, size_t n, uint64_t seed) {
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = zl_storage_from_float((float)((double)(st >> 40) / (double)(1 << 24) * 4.0 - 2.0));
    }
}

/* One query row of one head in double: O (HD values) and the natural-log logsumexp of the scaled
 * scores — an independent reference for both paths. */
static double host_row(const zl_half *qkv, zl_gpt_dims d, int b, int h, int i, double *o) {
    const int D = d.D, hd = D / d.H;
    const size_t ld = 3 * (size_t)D;
    const zl_half *q = qkv + ((size_t)b * d.T + i) * ld + (size_t)h * hd;
    double *s = (double *)malloc(sizeof(double) * (size_t)(i + 1)); /* the scaled scores of keys 0..i */
    double mx = -INFINITY, sum = 0.0;
    if (!s) exit(1);
    for (int j = 0; j <= i; j++) {
        const zl_half *k = qkv + ((size_t)b * d.T + j) * ld + D + (size_t)h * hd;
        double dot = 0.0;
        for (int e = 0; e < hd; e++) dot += (double)zl_storage_to_float(q[e]) * zl_storage_to_float(k[e]);
        s[j] = dot / sqrt((double)hd);
        mx = fmax(mx, s[j]);
    }
    for (int e = 0; e < hd; e++) o[e] = 0.0;
    for (int j = 0; j <= i; j++) {
        const zl_half *v = qkv + ((size_t)b * d.T + j) * ld + 2 * (size_t)D + (size_t)h * hd;
        double p = exp(s[j] - mx);
        sum += p;
        for (int e = 0; e < hd; e++) o[e] += p * zl_storage_to_float(v[e]);
    }
    for (int e = 0; e < hd; e++) o[e] /= sum;
    free(s);
    return mx + log(sum);
}

typedef struct {
    double max_diff, max_ref; /* max|a - ref|, max|ref| */
    long nonfinite;           /* pairs where a or ref is NaN or ±inf (a poisoned, unwritten element) */
} diff;

static void diff_add(diff *df, double a, double ref) {
    if (!isfinite(a) || !isfinite(ref)) df->nonfinite++;
    else df->max_diff = fmax(df->max_diff, fabs(a - ref));
    df->max_ref = fmax(df->max_ref, fabs(ref));
}

static int diff_ok(diff df, double tol) { return df.nonfinite == 0 && df.max_ref > 0 && df.max_diff <= tol * df.max_ref; }

#define TOL_OUT 2e-2 /* of max|O|: fp16 storage of S and P on the strided path, of P here */
#define TOL_LSE 1e-3 /* relative: the logsumexp is summed in fp32 from exact fp16 inputs */
#define SAMPLED_ROWS 48

/* Fused vs strided on every element, then both (and lse) against host_row on sampled rows. */
static int check_outputs(const zl_half *qkv, const zl_half *o_strided, const zl_half *o_fused, const float *lse,
                         zl_gpt_dims d) {
    const size_t n = (size_t)d.B * d.T * d.D;
    const int hd = d.D / d.H;
    diff all = {0, 0, 0}, hs = {0, 0, 0}, hf = {0, 0, 0};
    double lse_rel = 0.0;
    for (size_t i = 0; i < n; i++) diff_add(&all, zl_storage_to_float(o_fused[i]), zl_storage_to_float(o_strided[i]));
    double o[HD];
    for (int r = 0; r < SAMPLED_ROWS; r++) {
        /* the first and last rows, the rows either side of tile edges, the rest spread out */
        int b = r % d.B, h = (r * 7) % d.H;
        int i = r == 0 ? 0 : r == 1 ? d.T - 1 : r == 2 ? BR - 1 : r == 3 ? (BR < d.T ? BR : 0) : (int)((r * 2654435761u) % (unsigned)d.T);
        double ref_lse = host_row(qkv, d, b, h, i, o);
        for (int e = 0; e < hd; e++) {
            size_t at = ((size_t)b * d.T + i) * d.D + (size_t)h * hd + e;
            diff_add(&hs, zl_storage_to_float(o_strided[at]), o[e]);
            diff_add(&hf, zl_storage_to_float(o_fused[at]), o[e]);
        }
        double got = lse[((size_t)b * d.H + h) * d.T + i];
        lse_rel = isfinite(got) ? fmax(lse_rel, fabs(got - ref_lse) / fmax(1.0, fabs(ref_lse))) : INFINITY;
    }
    int ok_all = diff_ok(all, TOL_OUT), ok_hs = diff_ok(hs, TOL_OUT), ok_hf = diff_ok(hf, TOL_OUT),
        ok_lse = lse_rel <= TOL_LSE;
    printf("  check fused vs strided, all %zu outputs: max|Δ| %.3e, max|O| %.3e, ratio %.2e (≤ %.0e), %ld non-finite: %s\n",
           n, all.max_diff, all.max_ref, all.max_diff / all.max_ref, TOL_OUT, all.nonfinite, ok_all ? "PASS" : "FAIL");
    printf("  check vs host double, %d rows: strided ratio %.2e %s, fused ratio %.2e %s, fused lse rel %.2e (≤ %.0e) %s\n",
           SAMPLED_ROWS, hs.max_diff / hs.max_ref, ok_hs ? "PASS" : "FAIL", hf.max_diff / hf.max_ref,
           ok_hf ? "PASS" : "FAIL", lse_rel, TOL_LSE, ok_lse ? "PASS" : "FAIL");
    return ok_all && ok_hs && ok_hf && ok_lse;
}

/* ---- backward checks ---------------------------------------------------------------------- */
#define TOL_GRAD 2e-2 /* of max|dQ|, max|dK|, max|dV| each: dS in fp16 on both paths */
#define HOST_PAIRS 3  /* (sequence, head) pairs the host recomputes in full */

/* T × HD doubles: head h's columns of one part (0 q, 1 k, 2 v; or dout with parts = 1) of
 * sequence b, from a B·T × parts·D matrix. */
static double *head_to_double(const zl_half *x, zl_gpt_dims d, int parts, int part, int b, int h) {
    double *y = (double *)malloc(sizeof(double) * (size_t)d.T * HD);
    if (!y) exit(1);
    for (int t = 0; t < d.T; t++)
        for (int e = 0; e < HD; e++)
            y[(size_t)t * HD + e] =
                zl_storage_to_float(x[((size_t)b * d.T + t) * parts * d.D + (size_t)part * d.D + (size_t)h * HD + e]);
    return y;
}

static double dot_hd(const double *a, const double *b) {
    double s = 0.0;
    for (int e = 0; e < HD; e++) s += a[e] * b[e];
    return s;
}

/* grad[part] (T × HD each: dq, dk, dv) of one (sequence, head), in double, straight from the
 * formulas: a fresh softmax per row, Dl_i = dO_i·O_i from the double O. Independent of both paths. */
static void host_backward_pair(const zl_half *qkv, const zl_half *dout, zl_gpt_dims d, int b, int h,
                               double *grad[3]) {
    const int T = d.T;
    const double scale = 1.0 / sqrt((double)HD);
    double *q = head_to_double(qkv, d, 3, 0, b, h), *k = head_to_double(qkv, d, 3, 1, b, h),
           *v = head_to_double(qkv, d, 3, 2, b, h), *dO = head_to_double(dout, d, 1, 0, b, h);
    double *p = (double *)malloc(sizeof(double) * (size_t)T); /* row i's probabilities, keys 0..i */
    if (!p) exit(1);
    for (int part = 0; part < 3; part++) memset(grad[part], 0, sizeof(double) * (size_t)T * HD);
    for (int i = 0; i < T; i++) {
        const double *qi = q + (size_t)i * HD, *dOi = dO + (size_t)i * HD;
        double mx = -INFINITY, sum = 0.0, o[HD] = {0}, Di;
        for (int j = 0; j <= i; j++) mx = fmax(mx, p[j] = dot_hd(qi, k + (size_t)j * HD) * scale);
        for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - mx);
        for (int j = 0; j <= i; j++) {
            p[j] /= sum;
            for (int e = 0; e < HD; e++) o[e] += p[j] * v[(size_t)j * HD + e];
        }
        Di = dot_hd(dOi, o);
        for (int j = 0; j <= i; j++) {
            const double ds = p[j] * (dot_hd(dOi, v + (size_t)j * HD) - Di);
            for (int e = 0; e < HD; e++) {
                grad[0][(size_t)i * HD + e] += scale * ds * k[(size_t)j * HD + e];
                grad[1][(size_t)j * HD + e] += scale * ds * qi[e];
                grad[2][(size_t)j * HD + e] += p[j] * dOi[e];
            }
        }
    }
    free(q), free(k), free(v), free(dO), free(p);
}

/* df[part] over every element of two dqkv (B·T × 3D), part = dq, dk, dv. */
static void diff_dqkv(diff df[3], const zl_half *a, const zl_half *ref, zl_gpt_dims d) {
    const size_t R = (size_t)d.B * d.T;
    for (size_t row = 0; row < R; row++)
        for (int part = 0; part < 3; part++)
            for (int col = 0; col < d.D; col++) {
                size_t at = row * 3 * d.D + (size_t)part * d.D + col;
                diff_add(&df[part], zl_storage_to_float(a[at]), zl_storage_to_float(ref[at]));
            }
}

/* Both dqkv against host_backward_pair on HOST_PAIRS (sequence, head) pairs: the first, the last,
 * one between. */
static void diff_vs_host(diff hs[3], diff hf[3], const zl_half *qkv, const zl_half *dout, const zl_half *g_strided,
                         const zl_half *g_fused, zl_gpt_dims d) {
    double *grad[3];
    for (int part = 0; part < 3; part++)
        if (!(grad[part] = (double *)malloc(sizeof(double) * (size_t)d.T * HD))) exit(1);
    const int pb[HOST_PAIRS] = {0, d.B - 1, d.B / 2}, ph[HOST_PAIRS] = {0, d.H - 1, d.H / 2};
    for (int s = 0; s < HOST_PAIRS; s++) {
        host_backward_pair(qkv, dout, d, pb[s], ph[s], grad);
        for (int part = 0; part < 3; part++)
            for (int t = 0; t < d.T; t++)
                for (int e = 0; e < HD; e++) {
                    size_t at = ((size_t)pb[s] * d.T + t) * 3 * d.D + (size_t)part * d.D + (size_t)ph[s] * HD + e;
                    double ref = grad[part][(size_t)t * HD + e];
                    diff_add(&hs[part], zl_storage_to_float(g_strided[at]), ref);
                    diff_add(&hf[part], zl_storage_to_float(g_fused[at]), ref);
                }
    }
    for (int part = 0; part < 3; part++) free(grad[part]);
}

static double ratio(diff df) { return df.max_ref > 0 ? df.max_diff / df.max_ref : INFINITY; }

/* Fused vs strided on every element of dq, dk, dv; both vs the host on sampled pairs; the second
 * fused run (g_again) bitwise equal to the first. */
static int check_grads(const zl_half *qkv, const zl_half *dout, const zl_half *g_strided, const zl_half *g_fused,
                       const zl_half *g_again, zl_gpt_dims d) {
    const size_t n = (size_t)d.B * d.T * 3 * d.D;
    diff all[3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, hs[3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
         hf[3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
    diff_dqkv(all, g_fused, g_strided, d);
    diff_vs_host(hs, hf, qkv, dout, g_strided, g_fused, d);
    int ok_all = 1, ok_host = 1;
    long bad = 0;
    for (int part = 0; part < 3; part++) {
        ok_all &= diff_ok(all[part], TOL_GRAD);
        ok_host &= diff_ok(hs[part], TOL_GRAD) && diff_ok(hf[part], TOL_GRAD);
        bad += hs[part].nonfinite + hf[part].nonfinite;
    }
    const int same = memcmp(g_fused, g_again, n * sizeof(zl_half)) == 0;
    printf("  check bwd fused vs strided, all %zu of each: max|Δ|/max|ref| dQ %.2e dK %.2e dV %.2e (≤ %.0e), "
           "%ld non-finite: %s\n",
           n / 3, ratio(all[0]), ratio(all[1]), ratio(all[2]), TOL_GRAD,
           all[0].nonfinite + all[1].nonfinite + all[2].nonfinite, ok_all ? "PASS" : "FAIL");
    printf("  check bwd vs host double, %d (sequence, head) pairs: strided dQ %.2e dK %.2e dV %.2e, fused dQ %.2e "
           "dK %.2e dV %.2e (≤ %.0e), %ld non-finite: %s\n",
           HOST_PAIRS, ratio(hs[0]), ratio(hs[1]), ratio(hs[2]), ratio(hf[0]), ratio(hf[1]), ratio(hf[2]), TOL_GRAD,
           bad, ok_host ? "PASS" : "FAIL");
    printf("  check bwd repeat: a second fused backward is bitwise identical (%zu values): %s\n", n,
           same ? "PASS" : "FAIL");
    return ok_all && ok_host && same;
}

/* ---- one shape ---------------------------------------------------------------------------- */
/* The device buffers of one shape. */
typedef struct {
    zl_half *qkv;       /* B·T × 3D: the input of both paths */
    zl_half *qkvr;      /* [3][B][H][T][hd]: strided */
    zl_half *P;         /* B·H·T·T: strided */
    zl_half *scratch_r; /* B·H·T·hd: strided */
    void *ws;           /* zl_gpt_workspace_bytes: strided */
    zl_half *out_s;     /* B·T × D: strided's output */
    zl_half *out_f;     /* B·T × D: fused's output */
    float *lse;         /* B·H·T: fused */
    zl_half *dout;      /* B·T × D: the gradient of out, the input of both backwards */
    zl_half *dout_r;    /* B·H·T·hd: strided backward */
    zl_half *dP;        /* B·H·T·T: strided backward */
    zl_half *dqkvr;     /* [3][B][H][T][hd]: strided backward */
    zl_half *dqkv_s;    /* B·T × 3D: strided's gradient of qkv */
    zl_half *dqkv_f;    /* B·T × 3D: fused's gradient of qkv */
    float *Dl;          /* B·H·T: fused backward */
} buffers;

/* Bytes of the inputs and outputs both paths share or mirror: qkv, out ×2, dout, dqkv ×2. */
static size_t io_bytes(zl_gpt_dims d) {
    const size_t RD2 = (size_t)d.B * d.T * d.D * 2;
    return 3 * RD2 + 2 * RD2 + RD2 + 2 * 3 * RD2;
}

static buffers alloc_buffers(zl_gpt_dims d, path_bytes pb) {
    const size_t RD2 = (size_t)d.B * d.T * d.D * 2;
    buffers x = {(zl_half *)dalloc(3 * RD2),    (zl_half *)dalloc(pb.qkvr),   (zl_half *)dalloc(pb.probs),
                 (zl_half *)dalloc(pb.scratch_r), dalloc(pb.workspace),        (zl_half *)dalloc(RD2),
                 (zl_half *)dalloc(RD2),        (float *)dalloc(pb.lse),      (zl_half *)dalloc(RD2),
                 (zl_half *)dalloc(pb.dout_r),  (zl_half *)dalloc(pb.dP),     (zl_half *)dalloc(pb.dqkvr),
                 (zl_half *)dalloc(3 * RD2),    (zl_half *)dalloc(3 * RD2),   (float *)dalloc(pb.Dl)};
    zl_gpt_set_workspace(x.ws, pb.workspace, d);
    return x;
}

static void free_buffers(buffers *x) {
    void *all[] = {x->qkv, x->qkvr, x->P,     x->scratch_r, x->ws,     x->out_s,  x->out_f, x->lse,
                   x->dout, x->dout_r, x->dP, x->dqkvr,     x->dqkv_s, x->dqkv_f, x->Dl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cudaCheck(cudaFree(all[i]));
}

static void run_strided(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    zl_gpt_attention_forward(x->qkv, x->qkvr, x->P, x->scratch_r, x->out_s, d, (zl_stream)st);
}
static void run_fused(const buffers *x, zl_gpt_dims d, cudaStream_t st) { flash_forward(x->qkv, x->out_f, x->lse, d, st); }
/* The backwards read what their forward left (qkvr and P; out_f and lse), which no call changes. */
static void run_strided_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    zl_gpt_attention_backward(x->qkvr, x->P, x->dout, x->dout_r, x->dP, x->dqkvr, x->dqkv_s, d, (zl_stream)st);
}
static void run_fused_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    flash_backward(x->qkv, x->out_f, x->lse, x->dout, x->Dl, x->dqkv_f, d, st);
}
static void run_strided_fwd_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    run_strided(x, d, st);
    run_strided_bwd(x, d, st);
}
static void run_fused_fwd_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    run_fused(x, d, st);
    run_fused_bwd(x, d, st);
}

/* ms per call: the best of 3 rounds of `iters` back-to-back calls (CUDA events around each round),
 * after 2 warm-up calls (the cuBLASLt plan cache fills on the first). */
static double time_ms(void (*fn)(const buffers *, zl_gpt_dims, cudaStream_t), const buffers *x, zl_gpt_dims d,
                      int iters, cudaStream_t st) {
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    for (int i = 0; i < 2; i++) fn(x, d, st);
    double best = INFINITY;
    for (int round = 0; round < 3; round++) {
        cudaCheck(cudaEventRecord(t0, st));
        for (int i = 0; i < iters; i++) fn(x, d, st);
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

static void *hmalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_attention: out of host memory\n");
        exit(1);
    }
    return p;
}

static void copy_out(void *host, const void *dev, size_t bytes) {
    cudaCheck(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* Both forwards from random qkv (h_qkv, filled here), outputs poisoned first; checked. */
static int forward_and_check(const buffers *x, zl_half *h_qkv, zl_gpt_dims d, path_bytes pb, cudaStream_t st) {
    const size_t R = (size_t)d.B * d.T;
    zl_half *h_s = (zl_half *)hmalloc(R * d.D * 2), *h_f = (zl_half *)hmalloc(R * d.D * 2);
    float *h_lse = (float *)hmalloc(pb.lse);
    fill_random(h_qkv, R * 3 * d.D, 11);
    cudaCheck(cudaMemcpy(x->qkv, h_qkv, R * 3 * d.D * 2, cudaMemcpyHostToDevice));
    /* poison both outputs (0xFFFF is an fp16 NaN): an unwritten element fails the check */
    cudaCheck(cudaMemset(x->out_s, 0xFF, R * d.D * 2));
    cudaCheck(cudaMemset(x->out_f, 0xFF, R * d.D * 2));
    cudaCheck(cudaMemset(x->lse, 0xFF, pb.lse));
    run_strided(x, d, st);
    run_fused(x, d, st);
    cudaCheck(cudaStreamSynchronize(st));
    copy_out(h_s, x->out_s, R * d.D * 2);
    copy_out(h_f, x->out_f, R * d.D * 2);
    copy_out(h_lse, x->lse, pb.lse);
    int ok = check_outputs(h_qkv, h_s, h_f, h_lse, d);
    free(h_s), free(h_f), free(h_lse);
    return ok;
}

/* Both backwards from random dout, after forward_and_check (each reads its own forward's saved
 * tensors); every dqkv poisoned first; the fused one run twice. Checked. */
static int backward_and_check(const buffers *x, const zl_half *h_qkv, zl_gpt_dims d, cudaStream_t st) {
    const size_t R = (size_t)d.B * d.T, g_bytes = R * 3 * d.D * 2;
    zl_half *h_dout = (zl_half *)hmalloc(R * d.D * 2), *h_gs = (zl_half *)hmalloc(g_bytes),
            *h_gf = (zl_half *)hmalloc(g_bytes), *h_again = (zl_half *)hmalloc(g_bytes);
    fill_random(h_dout, R * d.D, 12);
    cudaCheck(cudaMemcpy(x->dout, h_dout, R * d.D * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(x->dqkv_s, 0xFF, g_bytes));
    cudaCheck(cudaMemset(x->dqkv_f, 0xFF, g_bytes));
    cudaCheck(cudaMemset(x->Dl, 0xFF, (size_t)d.B * d.H * d.T * sizeof(float)));
    run_strided_bwd(x, d, st);
    run_fused_bwd(x, d, st);
    cudaCheck(cudaStreamSynchronize(st));
    copy_out(h_gs, x->dqkv_s, g_bytes);
    copy_out(h_gf, x->dqkv_f, g_bytes);
    cudaCheck(cudaMemset(x->dqkv_f, 0xFF, g_bytes)); /* the repeat must write every element again */
    run_fused_bwd(x, d, st);
    cudaCheck(cudaStreamSynchronize(st));
    copy_out(h_again, x->dqkv_f, g_bytes);
    int ok = check_grads(h_qkv, h_dout, h_gs, h_gf, h_again, d);
    free(h_dout), free(h_gs), free(h_gf), free(h_again);
    return ok;
}

/* Times and prints both paths, forward alone, backward alone and forward + backward. */
static void time_and_report(shape sh, const buffers *x, path_bytes pb, int iters, cudaStream_t st) {
    const zl_gpt_dims d = sh.d;
    const double unit = (double)d.B * d.H * (double)d.T * d.T * (d.D / d.H); /* one product, causal half */
    const double flops = 2.0 * unit, flops_fb = 7.0 * unit;
    double ms_s = time_ms(run_strided, x, d, iters, st), ms_f = time_ms(run_fused, x, d, iters, st);
    double bwd_s = time_ms(run_strided_bwd, x, d, iters, st), bwd_f = time_ms(run_fused_bwd, x, d, iters, st);
    double fb_s = time_ms(run_strided_fwd_bwd, x, d, iters, st), fb_f = time_ms(run_fused_fwd_bwd, x, d, iters, st);
    printf("  useful FLOPs 2·B·H·T²·hd = %.3e (the strided path executes 2× that)\n", flops);
    printf("  %-44s %8.3f ms  %6.1f TFLOP/s  memory: qkvr %.1f + P %.1f + scratch_r %.1f + workspace %.1f MiB\n",
           "strided  zl_gpt_attention_forward (cuBLASLt)", ms_s, flops / ms_s * 1e-9, mib(pb.qkvr), mib(pb.probs),
           mib(pb.scratch_r), mib(pb.workspace));
    printf("  %-44s %8.3f ms  %6.1f TFLOP/s  memory: lse %.2f MiB (B·H·T·4 bytes, vs P's B·H·T·T·2)\n",
           "fused    flash_forward_kernel (mma.sync)", ms_f, flops / ms_f * 1e-9, mib(pb.lse));
    printf("  useful FLOPs forward + backward 7·B·H·T²·hd = %.3e (2 products forward, 5 backward: FlashAttention-2's\n"
           "    count, S recomputed; the strided backward executes 4 over the whole square, 8·B·H·T²·hd)\n",
           flops_fb);
    printf("  %-44s %8.3f ms  %6.1f TFLOP/s  (backward alone %.3f ms)  memory: + dout_r %.1f + dP %.1f + dqkvr %.1f MiB\n",
           "strided  attention forward + backward", fb_s, flops_fb / fb_s * 1e-9, bwd_s, mib(pb.dout_r), mib(pb.dP),
           mib(pb.dqkvr));
    printf("  %-44s %8.3f ms  %6.1f TFLOP/s  (backward alone %.3f ms)  memory: + Dl %.2f MiB\n",
           "fused    flash forward + backward", fb_f, flops_fb / fb_f * 1e-9, bwd_f, mib(pb.Dl));
    printf("summary: %s B=%d T=%d D=%d H=%d strided_ms=%.4f fused_ms=%.4f speedup=%.2f P_MiB=%.1f lse_MiB=%.2f "
           "strided_bwd_ms=%.4f fused_bwd_ms=%.4f strided_fwdbwd_ms=%.4f fused_fwdbwd_ms=%.4f fwdbwd_speedup=%.2f\n",
           sh.name, d.B, d.T, d.D, d.H, ms_s, ms_f, ms_s / ms_f, mib(pb.probs), mib(pb.lse), bwd_s, bwd_f, fb_s, fb_f,
           fb_s / fb_f);
}

/* Returns 0, 2 (does not fit) or 4 (outputs or gradients disagree). */
static int bench_shape(shape sh, int iters, cudaStream_t st) {
    zl_gpt_dims d = sh.d;
    path_bytes pb = bytes_of(d);
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = io_bytes(d) + pb.qkvr + pb.probs + pb.scratch_r + pb.workspace + pb.lse + pb.dout_r + pb.dP +
                        pb.dqkvr + pb.Dl;
    printf("\n%s: B=%d T=%d D=%d H=%d hd=%d (fp16)\n", sh.name, d.B, d.T, d.D, d.H, d.D / d.H);
    if (need > free_b) {
        printf("  does not fit: needs %.1f MiB, %.1f MiB free\n", mib(need), mib(free_b));
        return 2;
    }
    buffers x = alloc_buffers(d, pb);
    zl_half *h_qkv = (zl_half *)hmalloc((size_t)d.B * d.T * 3 * d.D * 2);
    int ok_fwd = forward_and_check(&x, h_qkv, d, pb, st);
    int ok_bwd = backward_and_check(&x, h_qkv, d, st);
    if (ok_fwd && ok_bwd) time_and_report(sh, &x, pb, iters, st);
    else printf("  outputs or gradients disagree: no timings for this shape\n");
    free_buffers(&x);
    free(h_qkv);
    return ok_fwd && ok_bwd ? 0 : 4;
}

static int usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [--shape B,T,D,H]... [--iters N]\n"
            "  default shapes: gpt2-124m (D=768, H=12) B=8 and 32; gpt2-1.5b (D=1600, H=25) B=4 and 8; T=1024.\n"
            "  The fused kernel needs head dim D/H = %d.\n",
            prog, HD);
    return 2;
}

int main(int argc, char **argv) {
    enum { MAX_SHAPES = 16 };
    shape shapes[MAX_SHAPES] = {
        {"gpt2-124m", {8, 1024, 768, 12, 0, 0}},
        {"gpt2-124m", {32, 1024, 768, 12, 0, 0}},
        {"gpt2-1.5b", {4, 1024, 1600, 25, 0, 0}},
        {"gpt2-1.5b", {8, 1024, 1600, 25, 0, 0}},
    };
    int nshapes = 4, custom = 0, iters = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atoi(argv[++i]);
            if (iters < 1) return usage(argv[0]);
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            zl_gpt_dims d = {0, 0, 0, 0, 0, 0};
            if (sscanf(argv[++i], "%d,%d,%d,%d", &d.B, &d.T, &d.D, &d.H) != 4 || d.B < 1 || d.T < 1 || d.H < 1 ||
                d.D != d.H * HD || (custom && nshapes >= MAX_SHAPES))
                return usage(argv[0]);
            if (!custom) nshapes = 0, custom = 1;
            shapes[nshapes].name = "custom";
            shapes[nshapes++].d = d;
        } else {
            return usage(argv[0]);
        }
    }
    if (zl_kernels_set_dtype(ZL_F16) != 0) return 1;
    int dev = 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    printf("bench_attention: %s, causal attention forward and backward, fp16, %d timed calls a round\n", prop.name, iters);
    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    int rc = 0;
    for (int s = 0; s < nshapes; s++) {
        int r = bench_shape(shapes[s], iters, st);
        if (r > rc) rc = r; /* 4 (disagree) outranks 2 (does not fit) */
    }
    cudaCheck(cudaStreamDestroy(st));
    return rc;
}
