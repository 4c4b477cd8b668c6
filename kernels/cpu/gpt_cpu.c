/* gpt_cpu.c — CPU reference implementation of the transformer's kernels (gpt_kernels.h).
 *
 * Same conventions as kernels_cpu.c: 16-bit tensors widened exactly, fp32 accumulation in a
 * fixed order, each output rounded once, no allocation (the GEMM panels live in the
 * workspace), single-threaded. The big products go through the shared fp32 GEMM
 * (cpu/sgemm.h) on panels converted once per call; attention, LayerNorm, the embedding and
 * the cross-entropy are plain loops. Where CUDA rounds an intermediate to 16 bits (the
 * attention scores, dP, dS), this code rounds it too, so the two agree to rounding. */
#include "gpt_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/sgemm.h"
#include "kernels.h"

/* ---- workspace: three fp32 panels (A, B, C of a GEMM), each of P floats --------------
 * P = max(R, D)·max(4D, Vp) bounds every operand: x (R×4D at most), W (4D×D), the logits
 * (R×Vp), wte (Vp×D) and their transposes. */
#define ZL_GPT_WS_ALIGN 64u

static void *g_ws;
static size_t g_ws_bytes;

static size_t panel_floats(zl_gpt_dims d) {
    size_t R = (size_t)d.B * (size_t)d.T, D = (size_t)d.D, V = (size_t)d.Vp;
    size_t rows = R > D ? R : D, cols = 4 * D > V ? 4 * D : V;
    return rows * cols;
}
static size_t round_up(size_t n) { return (n + ZL_GPT_WS_ALIGN - 1) / ZL_GPT_WS_ALIGN * ZL_GPT_WS_ALIGN; }

size_t zl_cpu_gpt_workspace_bytes(zl_gpt_dims d) { return ZL_GPT_WS_ALIGN + 3 * round_up(panel_floats(d) * 4); }

void zl_cpu_gpt_set_workspace(void *ws, size_t bytes) {
    g_ws = ws;
    g_ws_bytes = bytes;
}

typedef struct {
    float *a, *b, *c;
    size_t n; /* floats in each */
} panels;

static panels ws_panels(const char *fn) {
    if (!g_ws) {
        fprintf(stderr, "%s: GPT CPU workspace not set (zl_gpt_set_workspace)\n", fn);
        abort();
    }
    size_t each = (g_ws_bytes - ZL_GPT_WS_ALIGN) / 3 / ZL_GPT_WS_ALIGN * ZL_GPT_WS_ALIGN;
    uintptr_t base = ((uintptr_t)g_ws + ZL_GPT_WS_ALIGN - 1) & ~(uintptr_t)(ZL_GPT_WS_ALIGN - 1);
    panels p = {(float *)base, (float *)(base + each), (float *)(base + 2 * each), each / 4};
    return p;
}

static void need(const panels *p, size_t floats, const char *fn) {
    if (floats > p->n) {
        fprintf(stderr, "%s: GPT CPU workspace too small (%zu floats a panel, need %zu)\n", fn, p->n, floats);
        abort();
    }
}

static int bf16(void) { return zl_kernels_dtype() == ZL_BF16; }

/* dst = float(src), src rows×cols; transposed (dst cols×rows) when t. */
static void widen(float *dst, const zl_half *src, int rows, int cols, int t, int bf) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float v = zl_widen_storage(src[(size_t)i * cols + j], bf);
            if (t) dst[(size_t)j * rows + i] = v;
            else dst[(size_t)i * cols + j] = v;
        }
}

/* p.c[M×N] += op(A)·op(B): A stored M×K (or K×M when tA), B stored K×N (or N×K when tB). */
static void gemm16(const panels *p, int M, int N, int K, const zl_half *A, int tA, const zl_half *B, int tB, int bf) {
    need(p, (size_t)M * K > (size_t)K * N ? (size_t)M * K : (size_t)K * N, "gemm16");
    need(p, (size_t)M * N, "gemm16");
    widen(p->a, A, tA ? K : M, tA ? M : K, tA, bf);
    widen(p->b, B, tB ? N : K, tB ? K : N, tB, bf);
    zl_cpu_sgemm_acc(M, N, K, p->a, K, p->b, N, p->c, N);
}

static void zero(float *c, size_t n) {
    for (size_t i = 0; i < n; i++) c[i] = 0.0f;
}
static void narrow(zl_half *dst, const float *src, size_t n, int bf) {
    for (size_t i = 0; i < n; i++) dst[i] = zl_round_storage(src[i], bf);
}

/* A parameter gradient leaves fp32: written, or (ZL_GRADS_ADD) added to the stored value
 * first so the sum is rounded once — as kernels_cpu.c's store and a GEMM with beta = 1 do. */
static zl_half grad_value(float acc, const zl_half *dst, int bf, zl_grads_mode mode) {
    return zl_round_storage(mode == ZL_GRADS_ADD ? acc + zl_widen_storage(*dst, bf) : acc, bf);
}
static void store_grad(zl_half *dst, const float *src, size_t n, int bf, zl_grads_mode mode) {
    for (size_t i = 0; i < n; i++) dst[i] = grad_value(src[i], &dst[i], bf, mode);
}

/* ---- fill and embedding ------------------------------------------------------------- */
void zl_cpu_gpt_fill(zl_half *dst, size_t n, float value) {
    zl_half v = zl_round_storage(value, bf16());
    for (size_t i = 0; i < n; i++) dst[i] = v;
}

void zl_cpu_gpt_embed_forward(const int32_t *tokens, const zl_half *wte, const zl_half *wpe, zl_half *x,
                              zl_gpt_dims d) {
    const int bf = bf16();
    for (int b = 0; b < d.B; b++)
        for (int t = 0; t < d.T; t++) {
            size_t i = (size_t)b * d.T + t;
            const zl_half *e = wte + (size_t)tokens[i] * d.D, *p = wpe + (size_t)t * d.D;
            for (int j = 0; j < d.D; j++)
                x[i * d.D + j] = zl_round_storage(zl_widen_storage(e[j], bf) + zl_widen_storage(p[j], bf), bf);
        }
}

void zl_cpu_gpt_embed_backward(const int32_t *order, const int32_t *bucket, const zl_half *dx, const zl_half *head,
                               zl_half *dwte, zl_half *dwpe, zl_grads_mode mode, zl_gpt_dims d) {
    const int bf = bf16();
    const size_t D = (size_t)d.D;
    for (int v = 0; v < d.Vp; v++)
        for (size_t j = 0; j < D; j++) {
            float acc = head ? zl_widen_storage(head[(size_t)v * D + j], bf) : 0.0f;
            for (int k = bucket[v]; k < bucket[v + 1]; k++) acc += zl_widen_storage(dx[(size_t)order[k] * D + j], bf);
            dwte[(size_t)v * D + j] = grad_value(acc, &dwte[(size_t)v * D + j], bf, mode);
        }
    for (int t = 0; t < d.T; t++)
        for (size_t j = 0; j < D; j++) {
            float acc = 0.0f;
            for (int b = 0; b < d.B; b++) acc += zl_widen_storage(dx[((size_t)b * d.T + t) * D + j], bf);
            dwpe[(size_t)t * D + j] = grad_value(acc, &dwpe[(size_t)t * D + j], bf, mode);
        }
}

/* ---- LayerNorm ------------------------------------------------------------------------ */
void zl_cpu_gpt_layernorm_forward(const zl_half *x, const zl_half *g, const zl_half *b, zl_half *y, float *mean,
                                  float *rstd, int rows, int dim) {
    const int bf = bf16();
    for (int r = 0; r < rows; r++) {
        const zl_half *xr = x + (size_t)r * dim;
        float s = 0.0f;
        for (int j = 0; j < dim; j++) s += zl_widen_storage(xr[j], bf);
        float m = s / (float)dim, v = 0.0f;
        for (int j = 0; j < dim; j++) {
            float c = zl_widen_storage(xr[j], bf) - m;
            v += c * c;
        }
        float rs = 1.0f / sqrtf(v / (float)dim + ZL_GPT_LN_EPS);
        for (int j = 0; j < dim; j++) {
            float n = (zl_widen_storage(xr[j], bf) - m) * rs;
            y[(size_t)r * dim + j] = zl_round_storage(n * zl_widen_storage(g[j], bf) + zl_widen_storage(b[j], bf), bf);
        }
        mean[r] = m, rstd[r] = rs;
    }
}

/* dx = rstd·(dy·g - mean(dy·g) - x̂·mean(dy·g·x̂)), the LayerNorm input gradient. */
void zl_cpu_gpt_layernorm_backward(const zl_half *x, const zl_half *g, const float *mean, const float *rstd,
                                   const zl_half *dy, zl_half *dres, zl_half *dg, zl_half *db, zl_grads_mode mode,
                                   int rows, int dim) {
    panels p = ws_panels("zl_cpu_gpt_layernorm_backward");
    need(&p, (size_t)dim, "zl_cpu_gpt_layernorm_backward");
    const int bf = bf16();
    float *sg = p.a, *sb = p.b;
    zero(sg, (size_t)dim), zero(sb, (size_t)dim);
    for (int r = 0; r < rows; r++) {
        const zl_half *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        float m1 = 0.0f, m2 = 0.0f;
        for (int j = 0; j < dim; j++) {
            float xh = (zl_widen_storage(xr[j], bf) - mean[r]) * rstd[r];
            float dyg = zl_widen_storage(dyr[j], bf) * zl_widen_storage(g[j], bf);
            m1 += dyg, m2 += dyg * xh;
        }
        m1 /= (float)dim, m2 /= (float)dim;
        for (int j = 0; j < dim; j++) {
            float xh = (zl_widen_storage(xr[j], bf) - mean[r]) * rstd[r], d = zl_widen_storage(dyr[j], bf);
            float dx = rstd[r] * (d * zl_widen_storage(g[j], bf) - m1 - xh * m2);
            size_t i = (size_t)r * dim + j;
            dres[i] = zl_round_storage(zl_widen_storage(dres[i], bf) + dx, bf);
            sg[j] += d * xh, sb[j] += d;
        }
    }
    store_grad(dg, sg, (size_t)dim, bf, mode), store_grad(db, sb, (size_t)dim, bf, mode);
}

/* ---- linear layers --------------------------------------------------------------------- */
static void bias_rows(float *c, const zl_half *b, int rows, int cols, int bf) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) c[(size_t)i * cols + j] = zl_widen_storage(b[j], bf);
}

void zl_cpu_gpt_linear_forward(const zl_half *x, const zl_half *W, const zl_half *b, const zl_half *residual,
                               zl_half *y, int rows, int din, int dout) {
    panels p = ws_panels("zl_cpu_gpt_linear_forward");
    const int bf = bf16();
    need(&p, (size_t)rows * dout, "zl_cpu_gpt_linear_forward");
    bias_rows(p.c, b, rows, dout, bf);
    gemm16(&p, rows, dout, din, x, 0, W, 0, bf);
    size_t n = (size_t)rows * dout;
    for (size_t i = 0; i < n; i++)
        y[i] = zl_round_storage(residual ? p.c[i] + zl_widen_storage(residual[i], bf) : p.c[i], bf);
}

void zl_cpu_gpt_linear_gelu_forward(const zl_half *x, const zl_half *W, const zl_half *b, zl_half *h, zl_half *a,
                                    int rows, int din, int dout) {
    panels p = ws_panels("zl_cpu_gpt_linear_gelu_forward");
    const int bf = bf16();
    need(&p, (size_t)rows * dout, "zl_cpu_gpt_linear_gelu_forward");
    bias_rows(p.c, b, rows, dout, bf);
    gemm16(&p, rows, dout, din, x, 0, W, 0, bf);
    size_t n = (size_t)rows * dout;
    for (size_t i = 0; i < n; i++) {
        h[i] = zl_round_storage(p.c[i], bf);
        a[i] = zl_round_storage(zl_cpu_gelu(p.c[i]), bf);
    }
}

void zl_cpu_gpt_linear_backward(const zl_half *x, const zl_half *W, const zl_half *dy, const zl_half *gelu_h,
                                zl_half *dx, zl_half *dW, zl_half *db, zl_grads_mode mode, int rows, int din,
                                int dout) {
    panels p = ws_panels("zl_cpu_gpt_linear_backward");
    const int bf = bf16();
    /* db = Σ_rows dy, in row order */
    need(&p, (size_t)dout, "zl_cpu_gpt_linear_backward");
    zero(p.c, (size_t)dout);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < dout; j++) p.c[j] += zl_widen_storage(dy[(size_t)i * dout + j], bf);
    store_grad(db, p.c, (size_t)dout, bf, mode);
    /* dW = xᵀ·dy */
    need(&p, (size_t)din * dout, "zl_cpu_gpt_linear_backward");
    zero(p.c, (size_t)din * dout);
    gemm16(&p, din, dout, rows, x, 1, dy, 0, bf);
    store_grad(dW, p.c, (size_t)din * dout, bf, mode);
    if (!dx) return;
    /* dx = dy·Wᵀ (⊙ gelu'(h)) */
    need(&p, (size_t)rows * din, "zl_cpu_gpt_linear_backward");
    zero(p.c, (size_t)rows * din);
    gemm16(&p, rows, din, dout, dy, 0, W, 1, bf);
    size_t n = (size_t)rows * din;
    for (size_t i = 0; i < n; i++)
        dx[i] = zl_round_storage(gelu_h ? p.c[i] * zl_cpu_gelu_grad(zl_widen_storage(gelu_h[i], bf)) : p.c[i], bf);
}

/* ---- attention ---------------------------------------------------------------------------
 * qkvr index of (part c, batch b, head h, time t, channel i). */
static size_t r_index(zl_gpt_dims d, int c, int b, int h, int t, int i) {
    int hd = d.D / d.H;
    return ((((size_t)c * d.B + b) * d.H + h) * d.T + t) * hd + i;
}

/* permute: [B,T,parts·D] -> [parts][B][H][T][hd]; back = 1 the other way. Copies, no rounding. */
static void permute(const zl_half *src, zl_half *dst, zl_gpt_dims d, int parts, int back) {
    int hd = d.D / d.H;
    for (int b = 0; b < d.B; b++)
        for (int t = 0; t < d.T; t++)
            for (int c = 0; c < parts; c++)
                for (int h = 0; h < d.H; h++)
                    for (int i = 0; i < hd; i++) {
                        size_t flat = ((size_t)b * d.T + t) * parts * d.D + (size_t)c * d.D + (size_t)h * hd + i;
                        size_t r = r_index(d, c, b, h, t, i);
                        if (back) dst[flat] = src[r];
                        else dst[r] = src[flat];
                    }
}

static float attn_scale(zl_gpt_dims d) { return 1.0f / sqrtf((float)(d.D / d.H)); }

void zl_cpu_gpt_attention_forward(const zl_half *qkv, zl_half *qkvr, zl_half *P, zl_half *scratch_r, zl_half *out,
                                  zl_gpt_dims d) {
    panels p = ws_panels("zl_cpu_gpt_attention_forward");
    need(&p, (size_t)d.T, "zl_cpu_gpt_attention_forward");
    const int bf = bf16(), T = d.T, hd = d.D / d.H;
    const float scale = attn_scale(d);
    permute(qkv, qkvr, d, 3, 0);
    float *row = p.a;
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++) {
            const zl_half *q = qkvr + r_index(d, 0, b, h, 0, 0), *k = qkvr + r_index(d, 1, b, h, 0, 0),
                          *v = qkvr + r_index(d, 2, b, h, 0, 0);
            zl_half *Pbh = P + ((size_t)b * d.H + h) * T * T, *o = scratch_r + r_index(d, 0, b, h, 0, 0);
            for (int i = 0; i < T; i++) {
                float mx = -INFINITY, sum = 0.0f;
                for (int j = 0; j <= i; j++) { /* scores, rounded like the GEMM's output */
                    float s = 0.0f;
                    for (int c = 0; c < hd; c++)
                        s += zl_widen_storage(q[(size_t)i * hd + c], bf) * zl_widen_storage(k[(size_t)j * hd + c], bf);
                    row[j] = zl_widen_storage(zl_round_storage(scale * s, bf), bf);
                    mx = row[j] > mx ? row[j] : mx;
                }
                for (int j = 0; j <= i; j++) sum += (row[j] = expf(row[j] - mx));
                for (int j = 0; j < T; j++) Pbh[(size_t)i * T + j] = j <= i ? zl_round_storage(row[j] / sum, bf) : 0;
            }
            for (int i = 0; i < T; i++)
                for (int c = 0; c < hd; c++) {
                    float s = 0.0f;
                    for (int j = 0; j <= i; j++)
                        s += zl_widen_storage(Pbh[(size_t)i * T + j], bf) * zl_widen_storage(v[(size_t)j * hd + c], bf);
                    o[(size_t)i * hd + c] = zl_round_storage(s, bf);
                }
        }
    permute(scratch_r, out, d, 1, 1);
}

/* dP = dO·vᵀ, dS = P ⊙ (dP - Σ_j P·dP), dq = scale·dS·k, dk = scale·dSᵀ·q, dv = Pᵀ·dO. */
void zl_cpu_gpt_attention_backward(const zl_half *qkvr, const zl_half *P, const zl_half *dout, zl_half *dout_r,
                                   zl_half *dP, zl_half *dqkvr, zl_half *dqkv, zl_gpt_dims d) {
    const int bf = bf16(), T = d.T, hd = d.D / d.H;
    const float scale = attn_scale(d);
    permute(dout, dout_r, d, 1, 0);
#define W16(p, i) zl_widen_storage((p)[i], bf)
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++) {
            const zl_half *q = qkvr + r_index(d, 0, b, h, 0, 0), *k = qkvr + r_index(d, 1, b, h, 0, 0),
                          *v = qkvr + r_index(d, 2, b, h, 0, 0), *Pbh = P + ((size_t)b * d.H + h) * T * T;
            const zl_half *dO = dout_r + r_index(d, 0, b, h, 0, 0);
            zl_half *dS = dP + ((size_t)b * d.H + h) * T * T;
            zl_half *dq = dqkvr + r_index(d, 0, b, h, 0, 0), *dk = dqkvr + r_index(d, 1, b, h, 0, 0),
                    *dv = dqkvr + r_index(d, 2, b, h, 0, 0);
            for (int i = 0; i < T; i++) {
                float dot = 0.0f;
                for (int j = 0; j < T; j++) { /* dP, rounded like the GEMM's output */
                    float s = 0.0f;
                    if (j <= i)
                        for (int c = 0; c < hd; c++) s += W16(dO, (size_t)i * hd + c) * W16(v, (size_t)j * hd + c);
                    dS[(size_t)i * T + j] = zl_round_storage(s, bf);
                    if (j <= i) dot += W16(Pbh, (size_t)i * T + j) * W16(dS, (size_t)i * T + j);
                }
                for (int j = 0; j < T; j++) {
                    size_t ij = (size_t)i * T + j;
                    dS[ij] = j <= i ? zl_round_storage(W16(Pbh, ij) * (W16(dS, ij) - dot), bf) : 0;
                }
            }
            for (int t = 0; t < T; t++)
                for (int c = 0; c < hd; c++) {
                    float sq = 0.0f, sk = 0.0f, sv = 0.0f;
                    for (int j = 0; j < T; j++) sq += W16(dS, (size_t)t * T + j) * W16(k, (size_t)j * hd + c);
                    for (int i = 0; i < T; i++) {
                        sk += W16(dS, (size_t)i * T + t) * W16(q, (size_t)i * hd + c);
                        sv += W16(Pbh, (size_t)i * T + t) * W16(dO, (size_t)i * hd + c);
                    }
                    dq[(size_t)t * hd + c] = zl_round_storage(scale * sq, bf);
                    dk[(size_t)t * hd + c] = zl_round_storage(scale * sk, bf);
                    dv[(size_t)t * hd + c] = zl_round_storage(sv, bf);
                }
        }
#undef W16
    permute(dqkvr, dqkv, d, 3, 1);
}

/* ---- fused attention (zl_gpt_flash_*): what the CUDA kernels compute, in plain loops ------
 * Element (b, t, part, h, c) of qkv (R×3D) and of the R×D tensors (part 0). */
static size_t qkv_at(zl_gpt_dims d, int parts, int b, int t, int part, int h) {
    return ((size_t)b * d.T + t) * (size_t)parts * d.D + (size_t)part * d.D + (size_t)h * (d.D / d.H);
}

/* s_j = q_i·k_j (fp32, j ≤ i), e_j = exp(scale·(s_j - max s)), out_i = Σ_j e_j·v_j / Σ_j e_j with
 * each e_j rounded to 16 bits as the P·v product's operand (the tensor cores' fp16 input), the
 * sum of e_j unrounded; lse_i = log Σ e_j + scale·max s. */
void zl_cpu_gpt_flash_forward(const zl_half *qkv, zl_half *out, float *lse, zl_gpt_dims d) {
    panels p = ws_panels("zl_cpu_gpt_flash_forward");
    const int bf = bf16(), T = d.T, hd = d.D / d.H;
    need(&p, (size_t)T + (size_t)hd, "zl_cpu_gpt_flash_forward");
    const float scale = attn_scale(d);
    float *e = p.a, *acc = p.a + T;
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++)
            for (int i = 0; i < T; i++) {
                const zl_half *q = qkv + qkv_at(d, 3, b, i, 0, h);
                float mx = -INFINITY, sum = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const zl_half *k = qkv + qkv_at(d, 3, b, j, 1, h);
                    float s = 0.0f;
                    for (int c = 0; c < hd; c++) s += zl_widen_storage(q[c], bf) * zl_widen_storage(k[c], bf);
                    e[j] = s, mx = s > mx ? s : mx;
                }
                for (int c = 0; c < hd; c++) acc[c] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    float ej = expf(scale * (e[j] - mx)), e16 = zl_widen_storage(zl_round_storage(ej, bf), bf);
                    const zl_half *v = qkv + qkv_at(d, 3, b, j, 2, h);
                    sum += ej;
                    for (int c = 0; c < hd; c++) acc[c] += e16 * zl_widen_storage(v[c], bf);
                }
                zl_half *o = out + qkv_at(d, 1, b, i, 0, h);
                for (int c = 0; c < hd; c++) o[c] = zl_round_storage(acc[c] / sum, bf);
                lse[((size_t)b * d.H + h) * T + i] = logf(sum) + scale * mx;
            }
}

/* Dl_i = dout_i·out_i; P_ij = exp(scale·q_i·k_j - lse_i); dS_ij = P_ij·(dout_i·v_j - Dl_i);
 * dq_i = scale·Σ_j dS_ij·k_j, dk_j = scale·Σ_i dS_ij·q_i, dv_j = Σ_i P_ij·dout_i, with P and dS
 * rounded to 16 bits as product operands and every sum fp32 in index order. */
void zl_cpu_gpt_flash_backward(const zl_half *qkv, const zl_half *out, const float *lse, const zl_half *dout,
                               float *Dl, zl_half *dqkv, zl_gpt_dims d) {
    panels p = ws_panels("zl_cpu_gpt_flash_backward");
    const int bf = bf16(), T = d.T, hd = d.D / d.H;
    need(&p, (size_t)T * hd, "zl_cpu_gpt_flash_backward");
    need(&p, 2 * (size_t)T + hd, "zl_cpu_gpt_flash_backward");
    const float scale = attn_scale(d);
    float *dk = p.a, *dv = p.b, *P = p.c, *dS = p.c + T, *dq = p.c + 2 * T;
#define W16(p, i) zl_widen_storage((p)[i], bf)
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++) {
            for (size_t n = 0; n < (size_t)T * hd; n++) dk[n] = dv[n] = 0.0f;
            for (int i = 0; i < T; i++) {
                const zl_half *q = qkv + qkv_at(d, 3, b, i, 0, h), *dO = dout + qkv_at(d, 1, b, i, 0, h),
                              *o = out + qkv_at(d, 1, b, i, 0, h);
                const size_t row = ((size_t)b * d.H + h) * T + i;
                float dl = 0.0f;
                for (int c = 0; c < hd; c++) dl += W16(dO, c) * W16(o, c);
                Dl[row] = dl;
                for (int j = 0; j <= i; j++) {
                    const zl_half *k = qkv + qkv_at(d, 3, b, j, 1, h), *v = qkv + qkv_at(d, 3, b, j, 2, h);
                    float s = 0.0f, dp = 0.0f;
                    for (int c = 0; c < hd; c++) s += W16(q, c) * W16(k, c), dp += W16(dO, c) * W16(v, c);
                    P[j] = expf(scale * s - lse[row]);
                    dS[j] = zl_widen_storage(zl_round_storage(P[j] * (dp - dl), bf), bf);
                    P[j] = zl_widen_storage(zl_round_storage(P[j], bf), bf);
                }
                for (int c = 0; c < hd; c++) dq[c] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const zl_half *k = qkv + qkv_at(d, 3, b, j, 1, h);
                    for (int c = 0; c < hd; c++) {
                        dq[c] += dS[j] * W16(k, c);
                        dk[(size_t)j * hd + c] += dS[j] * W16(q, c);
                        dv[(size_t)j * hd + c] += P[j] * W16(dO, c);
                    }
                }
                zl_half *dqi = dqkv + qkv_at(d, 3, b, i, 0, h);
                for (int c = 0; c < hd; c++) dqi[c] = zl_round_storage(scale * dq[c], bf);
            }
            for (int j = 0; j < T; j++) {
                zl_half *dkj = dqkv + qkv_at(d, 3, b, j, 1, h), *dvj = dqkv + qkv_at(d, 3, b, j, 2, h);
                for (int c = 0; c < hd; c++) {
                    dkj[c] = zl_round_storage(scale * dk[(size_t)j * hd + c], bf);
                    dvj[c] = zl_round_storage(dv[(size_t)j * hd + c], bf);
                }
            }
        }
#undef W16
}

/* ---- LM head and loss ------------------------------------------------------------------ */
void zl_cpu_gpt_logits_forward(const zl_half *x, const zl_half *wte, zl_half *logits, zl_gpt_dims d) {
    panels p = ws_panels("zl_cpu_gpt_logits_forward");
    const int bf = bf16(), R = d.B * d.T;
    need(&p, (size_t)R * d.Vp, "zl_cpu_gpt_logits_forward");
    zero(p.c, (size_t)R * d.Vp);
    gemm16(&p, R, d.Vp, d.D, x, 0, wte, 1, bf);
    narrow(logits, p.c, (size_t)R * d.Vp, bf);
}

void zl_cpu_gpt_crossentropy(zl_half *logits, const int32_t *targets, float *row_loss, float *loss, float loss_scale,
                             zl_gpt_dims d) {
    const int bf = bf16(), R = d.B * d.T;
    const float f = loss_scale / (float)R; /* the CUDA kernel's factor, computed the same way */
    double total = 0.0;
    for (int r = 0; r < R; r++) {
        zl_half *l = logits + (size_t)r * d.Vp;
        float mx = -INFINITY, sum = 0.0f;
        for (int v = 0; v < d.V; v++) mx = fmaxf(mx, zl_widen_storage(l[v], bf));
        for (int v = 0; v < d.V; v++) sum += expf(zl_widen_storage(l[v], bf) - mx);
        row_loss[r] = mx + logf(sum) - zl_widen_storage(l[targets[r]], bf);
        total += (double)row_loss[r];
        for (int v = 0; v < d.Vp; v++) {
            float pv = v < d.V ? expf(zl_widen_storage(l[v], bf) - mx) / sum : 0.0f;
            float g = pv - (v == targets[r] ? 1.0f : 0.0f);
            l[v] = zl_round_storage(f * g, bf);
        }
    }
    *loss = R ? (float)(total / (double)R) : 0.0f;
}

void zl_cpu_gpt_logits_backward(const zl_half *dlogits, const zl_half *x, const zl_half *wte, zl_half *dx,
                                zl_half *head, zl_gpt_dims d) {
    panels p = ws_panels("zl_cpu_gpt_logits_backward");
    const int bf = bf16(), R = d.B * d.T;
    need(&p, (size_t)R * d.D, "zl_cpu_gpt_logits_backward");
    zero(p.c, (size_t)R * d.D);
    gemm16(&p, R, d.D, d.Vp, dlogits, 0, wte, 0, bf);
    narrow(dx, p.c, (size_t)R * d.D, bf);
    need(&p, (size_t)d.Vp * d.D, "zl_cpu_gpt_logits_backward");
    zero(p.c, (size_t)d.Vp * d.D);
    gemm16(&p, d.Vp, d.D, R, dlogits, 1, x, 0, bf);
    narrow(head, p.c, (size_t)d.Vp * d.D, bf);
}
