/* kernels_cpu.c — CPU reference implementation of the model's compute (kernels.h).
 *
 * These are the zl_cpu_* functions: the CPU backend dispatches to them, and the GPU
 * tests compare the CUDA kernels against them. Conventions, shared with CUDA:
 *   - tensors are 16-bit (zl_half) in the storage format (kernels/storage.c: fp16 or
 *     bf16), converted with zl_math.h's canonical (bit-exact) zl_widen_storage /
 *     zl_round_storage; each entry point reads the format once into `bf`;
 *   - every GEMM and reduction accumulates in fp32 and each output is rounded to the
 *     storage format exactly once;
 *   - no allocation: all scratch lives in the workspace handed over by
 *     zl_cpu_set_workspace (the stages check that a training step allocates nothing);
 *   - deterministic: single-threaded, and every sum runs in a fixed order (the GEMM
 *     below always accumulates k = 0..K-1, whatever tile an element falls in).
 *
 * How the GEMMs are done: each 16-bit operand is converted once per call into an fp32
 * panel of the workspace (transposing it on the way when the math needs Wᵀ or xᵀ), so
 * every product becomes C += A·B on row-major fp32 with a small register tile that gcc
 * vectorizes from plain C (no intrinsics, no -march flags needed). */
#include "kernels.h"
#include "cpu/sgemm.h"
#include "workspace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- workspace ------------------------------------------------------------------
 * Layout (each region rounded up to 64 bytes, plus 64 bytes to align the base):
 *   P_w  4·D·D floats  one weight matrix (W1, W2, their transposes) or a weight gradient
 *   P_a  4·R·D floats  one activation panel (h/a/dh, or aᵀ)
 *   P_x    R·D floats  x, xᵀ
 *   P_y    R·D floats  y accumulator, dy, dx accumulator
 * For D=256, R=64 that is 1.38 MiB. */
#define ZL_WS_ALIGN ZL_WS_CPU_ALIGN /* the byte formula: kernels/workspace.h */

static void *g_ws;
static size_t g_ws_bytes;

static size_t round_up(size_t n) { return zl_ws_cpu_round_up(n); }

size_t zl_cpu_workspace_bytes(int rows, int dim) { return zl_workspace_bytes_cpu(rows, dim); }

void zl_cpu_set_workspace(void *ws, size_t bytes) {
    g_ws = ws;
    g_ws_bytes = bytes;
}

typedef struct {
    float *w, *a, *x, *y;
} ws_panels;

/* Carve the workspace for (rows, dim); abort with the caller's name if it is missing or
 * too small, since silently allocating would break the "a step allocates nothing" rule. */
static ws_panels ws_get(const char *fn, int rows, int dim) {
    size_t need = zl_cpu_workspace_bytes(rows, dim);
    if (!g_ws || g_ws_bytes < need) {
        fprintf(stderr, "%s: CPU kernel workspace %s (have %zu bytes, need %zu for rows=%d dim=%d)\n", fn,
                g_ws ? "too small" : "not set", g_ws ? g_ws_bytes : (size_t)0, need, rows, dim);
        abort();
    }
    size_t R = (size_t)rows, D = (size_t)dim, f = sizeof(float);
    uintptr_t base = ((uintptr_t)g_ws + ZL_WS_ALIGN - 1) & ~(uintptr_t)(ZL_WS_ALIGN - 1);
    ws_panels p;
    p.w = (float *)base;
    base += round_up(4 * D * D * f);
    p.a = (float *)base;
    base += round_up(4 * R * D * f);
    p.x = (float *)base;
    base += round_up(R * D * f);
    p.y = (float *)base;
    return p;
}

/* ---- 16-bit <-> fp32 panels ---------------------------------------------------------
 * The format test sits outside the loops, so each loop body is one plain conversion. */

static int storage_is_bf16(void) { return zl_kernels_dtype() == ZL_BF16; }

/* dst[i] = float(src[i]) for a contiguous panel */
static void h2f(float *restrict dst, const zl_half *restrict src, size_t n, int bf) {
    if (bf)
        for (size_t i = 0; i < n; i++) dst[i] = zl_bf16_to_float(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = zl_half_to_float(src[i]);
}

/* dst (cols×rows) = float(src (rows×cols))ᵀ. Blocked so both sides stay in cache. */
static void h2f_transpose(float *restrict dst, const zl_half *restrict src, int rows, int cols, int bf) {
    enum { TB = 32 };
    for (int i0 = 0; i0 < rows; i0 += TB) {
        int i1 = i0 + TB < rows ? i0 + TB : rows;
        for (int j0 = 0; j0 < cols; j0 += TB) {
            int j1 = j0 + TB < cols ? j0 + TB : cols;
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1; j++)
                    dst[(size_t)j * rows + i] = zl_widen_storage(src[(size_t)i * cols + j], bf);
        }
    }
}

static void f2h(zl_half *restrict dst, const float *restrict src, size_t n, int bf) {
    if (bf)
        for (size_t i = 0; i < n; i++) dst[i] = zl_float_to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = zl_float_to_half(src[i]);
}

/* A gradient leaves fp32: written, or (ZL_GRADS_ADD) added to the stored value first, so
 * the sum is rounded once — what a GEMM with beta = 1 does on the GPU. */
static void store_grad(zl_half *restrict dst, const float *restrict src, size_t n, int bf, zl_grads_mode mode) {
    if (mode == ZL_GRADS_WRITE) {
        f2h(dst, src, n, bf);
        return;
    }
    for (size_t i = 0; i < n; i++) dst[i] = zl_round_storage(src[i] + zl_widen_storage(dst[i], bf), bf);
}

/* ---- fp32 GEMM: C[M×N] += A[M×K]·B[K×N], row-major ---------------------------------
 * Register tile of MR rows × NR columns; the k loop is innermost so the tile's
 * accumulators stay in registers. Columns are the outer loop, so the K×NR strip of B
 * (≤ 64 KiB for K ≤ 1024) stays in L1 while all row blocks stream past it.
 * Every element of C sees the same sequence c += a_ik·b_kj for k = 0..K-1 in whichever
 * path (full tile, row remainder, column remainder) it lands: bits independent of shape. */
enum { MR = 4, NR = 16 };

static void tile_full(int K, const float *restrict A, int lda, const float *restrict B, int ldb,
                      float *restrict C, int ldc) {
    float c0[NR], c1[NR], c2[NR], c3[NR];
    for (int j = 0; j < NR; j++) {
        c0[j] = C[j];
        c1[j] = C[ldc + j];
        c2[j] = C[2 * ldc + j];
        c3[j] = C[3 * ldc + j];
    }
    const float *a0 = A, *a1 = A + lda, *a2 = A + 2 * lda, *a3 = A + 3 * lda;
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
        for (int j = 0; j < NR; j++) {
            c0[j] += x0 * b[j];
            c1[j] += x1 * b[j];
            c2[j] += x2 * b[j];
            c3[j] += x3 * b[j];
        }
    }
    for (int j = 0; j < NR; j++) {
        C[j] = c0[j];
        C[ldc + j] = c1[j];
        C[2 * ldc + j] = c2[j];
        C[3 * ldc + j] = c3[j];
    }
}

static void tile_row(int K, const float *restrict A, const float *restrict B, int ldb, float *restrict C) {
    float c[NR];
    for (int j = 0; j < NR; j++) c[j] = C[j];
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        float x = A[k];
        for (int j = 0; j < NR; j++) c[j] += x * b[j];
    }
    for (int j = 0; j < NR; j++) C[j] = c[j];
}

static void sgemm_acc(int M, int N, int K, const float *restrict A, int lda, const float *restrict B, int ldb,
                      float *restrict C, int ldc) {
    int j0 = 0;
    for (; j0 + NR <= N; j0 += NR) {
        int i0 = 0;
        for (; i0 + MR <= M; i0 += MR)
            tile_full(K, A + (size_t)i0 * lda, lda, B + j0, ldb, C + (size_t)i0 * ldc + j0, ldc);
        for (; i0 < M; i0++) tile_row(K, A + (size_t)i0 * lda, B + j0, ldb, C + (size_t)i0 * ldc + j0);
    }
    if (j0 < N) { /* column remainder (only for dims not a multiple of NR, i.e. tests) */
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            for (int k = 0; k < K; k++) {
                float x = A[(size_t)i * lda + k];
                const float *b = B + (size_t)k * ldb;
                for (int j = j0; j < N; j++) c[j] += x * b[j];
            }
        }
    }
}

/* Exported for the transformer's CPU kernels (kernels/cpu/gpt_cpu.c): the same GEMM, so
 * both models' CPU products share one summation order. */
void zl_cpu_sgemm_acc(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    sgemm_acc(M, N, K, A, lda, B, ldb, C, ldc);
}

/* ---- GELU ------------------------------------------------------------------------
 * gelu(x) = 0.5x(1 + tanh u),  u = sqrt(2/pi)(x + 0.044715x³)  (tanh approximation).
 * Evaluated through the identity 0.5(1 + tanh u) = s := 1/(1 + e^(-2u)), which is the
 * same function but costs one expf instead of glibc's much slower tanhf (tanhf was ~15%
 * of a training step), and stays accurate in both tails (no 1 - tanh cancellation):
 *   gelu(x)  = x·s
 *   gelu'(x) = 0.5(1 + tanh u) + 0.5x(1 - tanh²u)·u' = s + 2x·s(1 - s)·u',
 *   u' = sqrt(2/pi)(1 + 3·0.044715x²).
 * For u → -inf expf overflows to inf and s becomes 0, the correct limit. */
#define ZL_SQRT_2_OVER_PI 0.7978845608028654f
#define ZL_GELU_C 0.044715f

static float gelu_sigmoid(float x) {
    float u = ZL_SQRT_2_OVER_PI * (x + ZL_GELU_C * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

float zl_cpu_gelu(float x) { return x * gelu_sigmoid(x); }

float zl_cpu_gelu_grad(float x) {
    float s = gelu_sigmoid(x);
    float du = ZL_SQRT_2_OVER_PI * (1.0f + 3.0f * ZL_GELU_C * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du;
}

/* ---- block forward -----------------------------------------------------------------
 *   h = x·W1 + b1 (fp32 acc, rounded once);  a = gelu(h) evaluated on the fp32
 *   accumulator (so a is also rounded once);  y = x + a·W2 + b2 with a the stored 16-bit
 *   values. Backward differentiates through gelu of the stored 16-bit h (zl_gelu_stored),
 *   which differs from this a in the last bit in about a quarter of the elements (kernels.h). */
void zl_cpu_block_forward(const zl_half *x, const zl_half *W1, const zl_half *b1, const zl_half *W2,
                          const zl_half *b2, zl_half *h, zl_half *a, zl_half *y, int rows, int dim) {
    ws_panels p = ws_get("zl_cpu_block_forward", rows, dim);
    const int R = rows, D = dim, H = 4 * dim, bf = storage_is_bf16();

    /* h = x·W1 + b1: P_a is the accumulator, initialised with the bias */
    h2f(p.x, x, (size_t)R * D, bf);
    h2f(p.w, W1, (size_t)D * H, bf);
    h2f(p.a, b1, (size_t)H, bf);
    for (int i = 1; i < R; i++)
        for (int j = 0; j < H; j++) p.a[(size_t)i * H + j] = p.a[j];
    sgemm_acc(R, H, D, p.x, D, p.w, H, p.a, H);

    /* round h, apply gelu, and keep fp32(a as stored) in place as the next GEMM's A */
    for (size_t i = 0; i < (size_t)R * H; i++) {
        float hv = p.a[i];
        h[i] = zl_round_storage(hv, bf);
        zl_half av = zl_round_storage(zl_cpu_gelu(hv), bf);
        a[i] = av;
        p.a[i] = zl_widen_storage(av, bf);
    }

    /* y = x + (b2 + a·W2); y = NULL: a recompute for backward, which needs only h and a */
    if (!y) return;
    h2f(p.w, W2, (size_t)H * D, bf);
    h2f(p.y, b2, (size_t)D, bf);
    for (int i = 1; i < R; i++)
        for (int j = 0; j < D; j++) p.y[(size_t)i * D + j] = p.y[j];
    sgemm_acc(R, D, H, p.a, H, p.w, D, p.y, D);
    for (size_t i = 0; i < (size_t)R * D; i++) y[i] = zl_round_storage(p.y[i] + p.x[i], bf);
}

/* column sums of an fp32 rows×cols panel, in row order, rounded to the storage format */
static void colsum_to_half(zl_half *out, const float *P, int rows, int cols, float *acc, int bf,
                           zl_grads_mode mode) {
    for (int j = 0; j < cols; j++) acc[j] = 0.0f;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) acc[j] += P[(size_t)i * cols + j];
    store_grad(out, acc, (size_t)cols, bf, mode);
}

/* a = gelu(h) of the stored 16-bit h: what backward recomputes when forward kept h only. */
void zl_cpu_gelu_stored(const zl_half *h, zl_half *a, size_t n) {
    const int bf = storage_is_bf16();
    for (size_t i = 0; i < n; i++) a[i] = zl_round_storage(zl_cpu_gelu(zl_widen_storage(h[i], bf)), bf);
}

/* dst += src, the sum in fp32 rounded once (gradient accumulation into a shard). */
void zl_cpu_add_into(zl_half *dst, const zl_half *src, size_t n) {
    const int bf = storage_is_bf16();
    for (size_t i = 0; i < n; i++)
        dst[i] = zl_round_storage(zl_widen_storage(dst[i], bf) + zl_widen_storage(src[i], bf), bf);
}

/* ---- block backward ----------------------------------------------------------------
 * Panel schedule (P_w/P_a/P_x/P_y are the workspace regions):
 *   1. P_y = dy                          db2 = colsum(dy)
 *   2. P_a = aᵀ, P_w = 0 += aᵀ·dy         dW2
 *   3. P_w = W2ᵀ, P_a = 0 += dy·W2ᵀ = da   dh = round(da ⊙ gelu'(h)); P_a = float(dh); db1
 *   4. P_x = xᵀ, P_w = 0 += xᵀ·dh          dW1
 *   5. P_w = W1ᵀ, P_y (= dy) += dh·W1ᵀ     dx
 * The GEMMs downstream of dh use its stored 16-bit value, like the GPU path. */
void zl_cpu_block_backward(const zl_half *x, const zl_half *h, const zl_half *a, const zl_half *W1,
                           const zl_half *W2, const zl_half *dy, zl_half *dh, zl_half *dW1, zl_half *db1,
                           zl_half *dW2, zl_half *db2, zl_half *dx, zl_grads_mode mode, int rows, int dim) {
    ws_panels p = ws_get("zl_cpu_block_backward", rows, dim);
    const int R = rows, D = dim, H = 4 * dim, bf = storage_is_bf16();
    const size_t RD = (size_t)R * D, RH = (size_t)R * H, DH = (size_t)D * H;

    /* 1. dy panel and db2 */
    h2f(p.y, dy, RD, bf);
    colsum_to_half(db2, p.y, R, D, p.w, bf, mode); /* P_w is free until step 2 */

    /* 2. dW2 = aᵀ·dy  (H×D, K = rows) */
    h2f_transpose(p.a, a, R, H, bf);
    for (size_t i = 0; i < DH; i++) p.w[i] = 0.0f;
    sgemm_acc(H, D, R, p.a, R, p.y, D, p.w, D);
    store_grad(dW2, p.w, DH, bf, mode);

    /* 3. da = dy·W2ᵀ, dh = da ⊙ gelu'(h), db1 */
    h2f_transpose(p.w, W2, H, D, bf); /* W2ᵀ: D×H */
    for (size_t i = 0; i < RH; i++) p.a[i] = 0.0f;
    sgemm_acc(R, H, D, p.y, D, p.w, H, p.a, H);
    for (size_t i = 0; i < RH; i++) {
        zl_half d = zl_round_storage(p.a[i] * zl_cpu_gelu_grad(zl_widen_storage(h[i], bf)), bf);
        dh[i] = d;
        p.a[i] = zl_widen_storage(d, bf);
    }
    colsum_to_half(db1, p.a, R, H, p.w, bf, mode); /* P_w is rewritten in step 4 anyway */

    /* 4. dW1 = xᵀ·dh  (D×H, K = rows) */
    h2f_transpose(p.x, x, R, D, bf);
    for (size_t i = 0; i < DH; i++) p.w[i] = 0.0f;
    sgemm_acc(D, H, R, p.x, R, p.a, H, p.w, H);
    store_grad(dW1, p.w, DH, bf, mode);

    /* 5. dx = dy + dh·W1ᵀ  (P_y still holds dy from step 1); skipped for the first block */
    if (!dx) return;
    h2f_transpose(p.w, W1, D, H, bf); /* W1ᵀ: H×D */
    sgemm_acc(R, D, H, p.a, H, p.w, D, p.y, D);
    f2h(dx, p.y, RD, bf);
}

/* ---- loss ---------------------------------------------------------------------------- */
void zl_cpu_mse_loss_backward(const zl_half *y, const zl_half *t, zl_half *dy, float *loss, int rows, int dim,
                              float loss_scale) {
    size_t n = (size_t)rows * (size_t)dim;
    /* the loss is reported, not trained on: a double sum keeps it order-insensitive enough
     * to compare across backends */
    double sum = 0.0;
    float scale = loss_scale * 2.0f / (float)n;
    const int bf = storage_is_bf16();
    for (size_t i = 0; i < n; i++) {
        float d = zl_widen_storage(y[i], bf) - zl_widen_storage(t[i], bf);
        sum += (double)d * (double)d;
        dy[i] = zl_round_storage(scale * d, bf);
    }
    *loss = n ? (float)(sum / (double)n) : 0.0f;
}

/* ---- optimizer ------------------------------------------------------------------------ */
void zl_cpu_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                        float grad_mult, int t, zl_adam_hparams hp) {
    /* bias corrections are per call (same t for every element) */
    const float bc1 = 1.0f - powf(hp.beta1, (float)t);
    const float bc2 = 1.0f - powf(hp.beta2, (float)t);
    const int bf = storage_is_bf16();
    for (size_t i = 0; i < n; i++) {
        float g = zl_widen_storage(grad[i], bf) * grad_mult;
        float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * g;
        float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        float w = master[i];
        w -= hp.lr * (mhat / (sqrtf(vhat) + hp.eps) + hp.weight_decay * w);
        master[i] = w;
        param[i] = zl_round_storage(w, bf);
    }
}

void zl_cpu_half_to_float_array(float *dst, const zl_half *src, size_t n) { h2f(dst, src, n, storage_is_bf16()); }

/* ---- gradient statistics ------------------------------------------------------------------
 * One double accumulator in index order; a non-finite value is counted and skipped. */
void zl_cpu_grad_stats(const zl_half *g, size_t n, double stats[2]) {
    const int bf = storage_is_bf16();
    double sum = 0.0, nonfinite = 0.0;
    for (size_t i = 0; i < n; i++) {
        float v = zl_widen_storage(g[i], bf);
        if (isfinite(v))
            sum += (double)v * (double)v;
        else
            nonfinite += 1.0;
    }
    stats[0] += sum;
    stats[1] += nonfinite;
}

/* ---- data and init ---------------------------------------------------------------------- */
void zl_cpu_data_generate(zl_half *x, zl_half *target, uint64_t seed, uint64_t row0, int rows, int dim) {
    const int bf = storage_is_bf16();
    for (int i = 0; i < rows; i++) {
        uint64_t r = row0 + (uint64_t)i;
        for (int j = 0; j < dim; j++) {
            x[(size_t)i * dim + j] = zl_sample_x(seed, r, (uint64_t)j, (uint64_t)dim, bf);
            target[(size_t)i * dim + j] = zl_sample_target(seed, r, (uint64_t)j, (uint64_t)dim, bf);
        }
    }
}

void zl_cpu_init_uniform(zl_half *dst, size_t n, uint64_t seed, uint64_t index0, int scale_log2) {
    const int bf = storage_is_bf16();
    for (size_t i = 0; i < n; i++) dst[i] = zl_init_value(seed, index0 + i, scale_log2, bf);
}
