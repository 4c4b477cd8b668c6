/* attention.cu — zerolab's causal attention forward beside a fused kernel of our own, on one GPU
 * (issue 11: is the strided-batched cuBLASLt path the right one for attention?).
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
 *            keeps its logsumexp (B·H·T floats), from which a backward would recompute P.
 *            Forward only — this file has no fused backward.
 *
 * Before any time is printed, the outputs are checked (exit 4 on a mismatch, so a wrong kernel
 * cannot report a speed):
 *   fused vs strided, every element:   max|Δ| ≤ 2e-2 · max|O_strided|
 *   both vs a double-precision host reference on sampled rows, same bound; the fused logsumexp
 *   to 1e-3 relative.
 *
 * FLOPs. Attention's two products are 4·B·H·T²·hd FLOPs over the whole T×T square; causal
 * attention needs only the lower half, so both paths are credited with 2·B·H·T²·hd "useful"
 * FLOPs (as FlashAttention's papers count causal attention). The strided path executes twice
 * that; the fused kernel executes the lower half plus the diagonal tiles. Same count for both:
 * the TFLOP/s ratio is the speed ratio.
 *
 *   build/cuda/bench_attention                       the preset shapes: gpt2-124m B = 8, 32;
 *                                                    gpt2-1.5b B = 4, 8 (T = 1024, hd = 64)
 *   build/cuda/bench_attention [--shape B,T,D,H]... [--iters N]
 * One GPU, no mpiexec. Storage fp16 (zerolab's default format). Exit: 0 ok · 1 CUDA error ·
 * 2 bad shape or does not fit · 4 outputs disagree. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"     /* zl_half, zl_stream */
#include "cuda/cuda_check.h" /* cudaCheck, cudaLaunchCheck */
#include "gpt_kernels.h" /* zl_gpt_dims, zl_gpt_attention_forward, zl_gpt_workspace_bytes / set_workspace */
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
    size_t lse;       /* fused: B·H·T floats, the row logsumexps (kept for a backward) */
} path_bytes;

static path_bytes bytes_of(zl_gpt_dims d) {
    size_t R = (size_t)d.B * d.T, BHT = (size_t)d.B * d.H * d.T;
    path_bytes p = {3 * R * d.D * 2, BHT * d.T * 2, BHT * (d.D / d.H) * 2, zl_gpt_workspace_bytes(d),
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
    long nonfinite;           /* elements of a that are NaN or ±inf */
} diff;

static void diff_add(diff *df, double a, double ref) {
    if (!isfinite(a)) df->nonfinite++;
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
} buffers;

static void run_strided(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    zl_gpt_attention_forward(x->qkv, x->qkvr, x->P, x->scratch_r, x->out_s, d, (zl_stream)st);
}
static void run_fused(const buffers *x, zl_gpt_dims d, cudaStream_t st) { flash_forward(x->qkv, x->out_f, x->lse, d, st); }

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

/* Returns 0, 2 (does not fit) or 4 (outputs disagree). */
static int bench_shape(shape sh, int iters, cudaStream_t st) {
    zl_gpt_dims d = sh.d;
    const size_t R = (size_t)d.B * d.T;
    path_bytes pb = bytes_of(d);
    const size_t io = R * 3 * d.D * 2 + 2 * R * d.D * 2;
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = io + pb.qkvr + pb.probs + pb.scratch_r + pb.workspace + pb.lse;
    printf("\n%s: B=%d T=%d D=%d H=%d hd=%d (fp16)\n", sh.name, d.B, d.T, d.D, d.H, d.D / d.H);
    if (need > free_b) {
        printf("  does not fit: needs %.1f MiB, %.1f MiB free\n", mib(need), mib(free_b));
        return 2;
    }

    buffers x;
    x.qkv = (zl_half *)dalloc(R * 3 * d.D * 2);
    x.qkvr = (zl_half *)dalloc(pb.qkvr);
    x.P = (zl_half *)dalloc(pb.probs);
    x.scratch_r = (zl_half *)dalloc(pb.scratch_r);
    x.ws = dalloc(pb.workspace);
    x.out_s = (zl_half *)dalloc(R * d.D * 2);
    x.out_f = (zl_half *)dalloc(R * d.D * 2);
    x.lse = (float *)dalloc(pb.lse);
    zl_gpt_set_workspace(x.ws, pb.workspace, d);

    zl_half *h_qkv = (zl_half *)malloc(R * 3 * d.D * 2), *h_s = (zl_half *)malloc(R * d.D * 2),
            *h_f = (zl_half *)malloc(R * d.D * 2);
    float *h_lse = (float *)malloc(pb.lse);
    if (!h_qkv || !h_s || !h_f || !h_lse) {
        fprintf(stderr, "bench_attention: out of host memory\n");
        exit(1);
    }
    fill_random(h_qkv, R * 3 * d.D, 11);
    cudaCheck(cudaMemcpy(x.qkv, h_qkv, R * 3 * d.D * 2, cudaMemcpyHostToDevice));
    /* poison both outputs (0xFFFF is an fp16 NaN): an unwritten element fails the check */
    cudaCheck(cudaMemset(x.out_s, 0xFF, R * d.D * 2));
    cudaCheck(cudaMemset(x.out_f, 0xFF, R * d.D * 2));
    cudaCheck(cudaMemset(x.lse, 0xFF, pb.lse));

    run_strided(&x, d, st);
    run_fused(&x, d, st);
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaMemcpy(h_s, x.out_s, R * d.D * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(h_f, x.out_f, R * d.D * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(h_lse, x.lse, pb.lse, cudaMemcpyDeviceToHost));
    int ok = check_outputs(h_qkv, h_s, h_f, h_lse, d);

    if (ok) {
        const double flops = 2.0 * d.B * d.H * (double)d.T * d.T * (d.D / d.H); /* causal half of 4·B·H·T²·hd */
        double ms_s = time_ms(run_strided, &x, d, iters, st), ms_f = time_ms(run_fused, &x, d, iters, st);
        printf("  useful FLOPs 2·B·H·T²·hd = %.3e (the strided path executes 2× that)\n", flops);
        printf("  %-44s %8.3f ms  %6.1f TFLOP/s  memory: qkvr %.1f + P %.1f + scratch_r %.1f + workspace %.1f MiB\n",
               "strided  zl_gpt_attention_forward (cuBLASLt)", ms_s, flops / ms_s * 1e-9, mib(pb.qkvr), mib(pb.probs),
               mib(pb.scratch_r), mib(pb.workspace));
        printf("  %-44s %8.3f ms  %6.1f TFLOP/s  memory: lse %.2f MiB (B·H·T·4 bytes, vs P's B·H·T·T·2)\n",
               "fused    flash_forward_kernel (mma.sync)", ms_f, flops / ms_f * 1e-9, mib(pb.lse));
        printf("summary: %s B=%d T=%d D=%d H=%d strided_ms=%.4f fused_ms=%.4f speedup=%.2f P_MiB=%.1f lse_MiB=%.2f\n",
               sh.name, d.B, d.T, d.D, d.H, ms_s, ms_f, ms_s / ms_f, mib(pb.probs), mib(pb.lse));
    } else {
        printf("  outputs disagree: no timings for this shape\n");
    }
    cudaCheck(cudaFree(x.qkv));
    cudaCheck(cudaFree(x.qkvr));
    cudaCheck(cudaFree(x.P));
    cudaCheck(cudaFree(x.scratch_r));
    cudaCheck(cudaFree(x.ws));
    cudaCheck(cudaFree(x.out_s));
    cudaCheck(cudaFree(x.out_f));
    cudaCheck(cudaFree(x.lse));
    free(h_qkv), free(h_s), free(h_f), free(h_lse);
    return ok ? 0 : 4;
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
    printf("bench_attention: %s, causal attention forward, fp16, %d timed calls a round\n", prop.name, iters);
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
