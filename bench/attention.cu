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
 *   fused    zl_gpt_flash_forward (kernels/cuda/gpt_flash.cu), FlashAttention-2's forward: one CTA per (query tile of 64
 *            rows, head, sequence) reads its rows of q, k and v straight from qkv, walks the key
 *            tiles up to the diagonal on tensor cores (mma.sync m16n8k16: fp16 in, fp32 accumulate)
 *            with an online softmax, and writes out in place. No T×T matrix exists: each query row
 *            keeps its logsumexp (B·H·T floats), from which the backward recomputes P.
 *
 * Backward, from dout (R×D) to dqkv (R×3D: dq | dk | dv, qkv's layout):
 *   strided  zl_gpt_attention_backward, the model's: permute dout, dP = dO·vᵀ (strided-batched),
 *            the softmax backward in place (dS), dq = dS·k, dk = dSᵀ·q, dv = Pᵀ·dO (three more),
 *            unpermute; reads the saved P, writes and reads dP (B·H·T·T halves).
 *   fused    zl_gpt_flash_backward, FlashAttention-2's backward made deterministic (no float
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
#include "timing.cuh"      /* bench_best_ms */
#include "gpt_kernels.h" /* zl_gpt_dims, zl_gpt_attention_forward / backward, zl_gpt_workspace_bytes / set_workspace */
#include "kernels.h"     /* zl_kernels_set_dtype, zl_storage_from_float / to_float */

/* The fused kernels are the trainer's own (kernels/cuda/gpt_flash.cu: zl_gpt_flash_forward /
 * zl_gpt_flash_backward): what is timed here is what `--attention fused` runs. */
#define HD 64 /* head dim of the fused kernels: gpt2-124m (768/12) and gpt2-1.5b (1600/25) */
#define BR 64 /* their query tile: the row sample below probes its edges */

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
static void run_fused(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    zl_gpt_flash_forward(x->qkv, x->out_f, x->lse, d, (zl_stream)st);
}
/* The backwards read what their forward left (qkvr and P; out_f and lse), which no call changes. */
static void run_strided_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    zl_gpt_attention_backward(x->qkvr, x->P, x->dout, x->dout_r, x->dP, x->dqkvr, x->dqkv_s, d, (zl_stream)st);
}
static void run_fused_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    zl_gpt_flash_backward(x->qkv, x->out_f, x->lse, x->dout, x->Dl, x->dqkv_f, d, (zl_stream)st);
}
static void run_strided_fwd_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    run_strided(x, d, st);
    run_strided_bwd(x, d, st);
}
static void run_fused_fwd_bwd(const buffers *x, zl_gpt_dims d, cudaStream_t st) {
    run_fused(x, d, st);
    run_fused_bwd(x, d, st);
}

/* ms per call (timing.cuh: best of 3 rounds of `iters` calls, after 2 warm-ups). */
static double time_ms(void (*fn)(const buffers *, zl_gpt_dims, cudaStream_t), const buffers *x, zl_gpt_dims d,
                      int iters, cudaStream_t st) {
    return bench_best_ms([&] { fn(x, d, st); }, iters, st);
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
           "fused    zl_gpt_flash_forward (mma.sync)", ms_f, flops / ms_f * 1e-9, mib(pb.lse));
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

/* --help: the usage on stdout, exit 0; a bad flag: on stderr, exit 2 */
static int usage(const char *prog, int asked) {
    fprintf(asked ? stdout : stderr,
            "usage: %s [--shape B,T,D,H]... [--iters N]\n"
            "  default shapes: gpt2-124m (D=768, H=12) B=8 and 32; gpt2-1.5b (D=1600, H=25) B=4 and 8; T=1024.\n"
            "  The fused kernel needs head dim D/H = %d.\n",
            prog, HD);
    return asked ? 0 : 2;
}

int main(int argc, char **argv) {
    enum { MAX_SHAPES = 16 };
    shape shapes[MAX_SHAPES] = {
        {"gpt2-124m", {8, 1024, 768, 12, 0, 0, 0}},
        {"gpt2-124m", {32, 1024, 768, 12, 0, 0, 0}},
        {"gpt2-1.5b", {4, 1024, 1600, 25, 0, 0, 0}},
        {"gpt2-1.5b", {8, 1024, 1600, 25, 0, 0, 0}},
    };
    int nshapes = 4, custom = 0, iters = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) return usage(argv[0], 1);
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atoi(argv[++i]);
            if (iters < 1) return usage(argv[0], 0);
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            zl_gpt_dims d = {0, 0, 0, 0, 0, 0, 0};
            if (sscanf(argv[++i], "%d,%d,%d,%d", &d.B, &d.T, &d.D, &d.H) != 4 || d.B < 1 || d.T < 1 || d.H < 1 ||
                d.D != d.H * HD || (custom && nshapes >= MAX_SHAPES))
                return usage(argv[0], 0);
            if (!custom) nshapes = 0, custom = 1;
            shapes[nshapes].name = "custom";
            shapes[nshapes++].d = d;
        } else {
            return usage(argv[0], 0);
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
