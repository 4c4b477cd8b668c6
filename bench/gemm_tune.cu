/* gemm_tune.cu — would timing cuBLASLt's top heuristic candidates beat its first choice on the
 * MLP block's GEMMs? (issue 15: "cuBLASLt algorithm selection by timing the heuristic's top
 * candidates once at start-up"). Numbers first: this program changes nothing in the trainer.
 *
 * The GEMMs of one block, as zl_block_forward / zl_block_backward issue them with the default
 * epilogues (kernels/cuda/kernels_cuda.cu; column-major, F = 4D, R rows, WRITE mode):
 *   fwd W1   aᵀ  [F×R] = gelu(W1ᵀ·xᵀ + b1), hᵀ as aux   GELU_AUX_BIAS  m=F n=R k=D  op N,N
 *   fwd W2   yᵀ  [D×R] = W2ᵀ·aᵀ + b2 + xᵀ (C = x)       BIAS           m=D n=R k=F  op N,N
 *   bwd dW2  dW2ᵀ[D×F] = dyᵀ·a, db2 = Σ_rows dy          BGRADA         m=D n=F k=R  op N,T
 *   bwd dh   dhᵀ [F×R] = gelu'(hᵀ) ⊙ (W2·dyᵀ)            DGELU          m=F n=R k=D  op T,N
 *   bwd dW1  dW1ᵀ[F×D] = dhᵀ·x                           none           m=F n=D k=R  op N,T
 *   bwd dx   dxᵀ [D×R] = W1·dhᵀ + dyᵀ (C = dy)           none           m=D n=R k=F  op T,N
 * ZL_CUBLASLT_EPILOGUES is honoured the way the trainer honours it (a fused epilogue off, or
 * without an algorithm, falls back to the plain GEMM), so the DGELU_BGRAD variant can be measured.
 *
 * Descriptors and preference are a copy of kernels_cuda.cu's plan_create (it is static there,
 * and kernels/ is not this program's to change): fp32 compute and scale, 16-bit A/B/C/D,
 * epilogue pointers set before the heuristic, a 32 MiB workspace, reduction schemes NONE or
 * COMPUTE_TYPE only (split-K partial sums stay fp32), minimum alignments = the pointers'
 * alignment classes capped at 16 bytes. For each GEMM the program asks the heuristic for its
 * first algorithm (what the trainer runs: "default") and for its top --algos (16), then:
 *   1. check: each candidate runs once into outputs pre-filled with NaN; every output it writes
 *      (D, and the aux h or bias gradient where the epilogue writes one) is compared with the
 *      default's: max|Δ| / max|ref| and the count of elements whose bits differ;
 *   2. timing: CUDA events around each launch, launches back to back on one stream, the same
 *      buffers for all; --rounds rounds, each of --warmup untimed then --reps timed launches per
 *      candidate, candidates interleaved round by round so clock drift hits all alike. Best and
 *      median of the rounds·reps samples; TFLOP/s = 2·m·n·k / best (epilogue work not counted);
 *   3. repeat: after its timing each candidate runs twice more, and the two outputs must agree
 *      bit for bit (a candidate that does not repeat itself cannot serve a reproducible trainer).
 * The trainer's own path (zl_cu_gemm, linked from kernels_cuda.cu) is checked and timed beside
 * them: its bits must equal the copied default's, else the copy has drifted from plan_create and
 * the program exits 4 after printing everything.
 *
 * "best" is the fastest candidate that ran, repeats its bits, and stays within 1e-2 of max|ref|
 * (a loose bound: it only rejects a broken kernel; the bits column says how close it really is).
 * The step estimate multiplies by the launches of one lab-1b step: forward L × (W1, W2),
 * backward L × (dW2, dh, dW1) + (L−1) × dx (block 0 computes no input gradient).
 *
 *   build/cuda/bench_gemm_tune                    lab-1b: --dim 4096 --rows 8192 --layers 8, fp16
 *   build/cuda/bench_gemm_tune [--dim D] [--rows R] [--layers L] [--bf16] [--algos N] [--reps N]
 *                              [--rounds N] [--warmup N] [--sustain S [--table PATH [--table-margin P]]]
 * --sustain S adds a fourth part (the "sustained" section below): each candidate with the default's
 * bits alone for S seconds, its time a launch and energy a launch at the clock it holds by itself.
 * --table PATH writes the sustained choices for the trainer's ZL_GEMM_TABLE (common/gemm_table.h;
 * table_entry below says which make it).
 * One GPU (the first visible), no mpiexec, and nothing else on it: beside a training process the
 * --sustain loop lost its GPU channel (Xid 43, "unspecified launch failure") in 2 of 3 runs on
 * H200, the trainer unhurt, cause not found (results/gpu/verify-665aa25-2xH200/). The defaults
 * take under a second of load, before a busy H100/H200 reaches its power cap; to time at the
 * clock a training step runs at, run one copy per GPU at once with --reps 50 --rounds 6
 * --warmup 20 (docs/performance.md).
 * Exit: 0 ok · 1 CUDA error, or the table could not be written · 2 bad input or does not fit · 4 the
 * trainer's path gave other bits than the copied default (no table written then). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh" /* gemm_args, zl_cu_gemm(_make), zl_cu_epilogue_mask, EPI_*, h2f, LAUNCH16 */
#include "kernels.h"            /* zl_kernels_set_dtype, zl_block_forward, zl_mse_loss_backward, ... */
#include "backend.h"            /* zl_backend_clock_read: NVML's clock, power and energy counter */
extern "C" {                    /* C headers without C++ guards */
#include "model/mlp.h"          /* the model's init scales */
#include "common/clocks.h"      /* zl_clock_summarize: median clock, power-cap share, power timed by the counter's moves */
#include "common/util.h"        /* zl_wall_seconds: how long a sustained block has run */
}
#include "workspace.h"          /* ZL_LT_WS_BYTES: the trainer's cuBLASLt workspace size */

#define MAX_ALGOS 64
#define MAX_GEMMS 6 /* a block's: forward W1, W2; backward dW2, dh, dW1, dx */
#define TOLERANCE 1e-2 /* max|Δ| / max|ref| above which a candidate is called broken */

typedef struct {
    int dim, rows, layers, bf16, algos, reps, rounds, warmup;
    double sustain;    /* seconds of one candidate alone a block (--sustain), 0: off */
    const char *table; /* --table PATH: the sustained choices for ZL_GEMM_TABLE (common/gemm_table.h) */
    double table_margin; /* --table-margin P: how much faster alone than the default, in %, to make the table */
} options;

/* ---- device buffers ---------------------------------------------------------------------- */

/* What a GEMM writes: D, and the aux (GELU_AUX_BIAS: h) or bias gradient (BGRADA, DGELU_BGRAD)
 * when its epilogue writes one. Three sets: the candidate's, the default's (reference), and the
 * candidate's first run (for the repeat check). */
typedef struct {
    zl_half *d, *aux, *bias;
} outputs;

typedef struct {
    zl_half *x, *t, *y, *dy;      /* R×D */
    zl_half *W1, *W2;             /* D×F, F×D */
    zl_half *b1, *b2;             /* F, D */
    zl_half *h, *a, *dh;          /* R×F */
    float *loss;                  /* 1 */
    outputs out, ref, prev;       /* d: max(R·F, D·F), aux: R·F, bias: F */
    void *lt_ws;                  /* this program's cuBLASLt workspace, ZL_LT_WS_BYTES */
    void *zl_ws;                  /* the trainer's kernel workspace (zl_kernels_set_workspace) */
} buffers;

static size_t elems_rd(const options *o) { return (size_t)o->rows * o->dim; }
static size_t elems_rf(const options *o) { return (size_t)o->rows * 4 * o->dim; }
static size_t elems_df(const options *o) { return (size_t)o->dim * 4 * o->dim; }
static size_t elems_out_d(const options *o) { return elems_rf(o) > elems_df(o) ? elems_rf(o) : elems_df(o); }

static size_t bytes_needed(const options *o) {
    size_t F = 4 * (size_t)o->dim, h = sizeof(zl_half);
    size_t inputs = 4 * elems_rd(o) + 2 * elems_df(o) + F + o->dim + 3 * elems_rf(o);
    size_t outs = 3 * (elems_out_d(o) + elems_rf(o) + F);
    return (inputs + outs) * h + ZL_LT_WS_BYTES + zl_kernels_workspace_bytes(o->rows, o->dim) + 64;
}

static void *dalloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes));
    return p;
}

static void alloc_buffers(buffers *b, const options *o) {
    size_t F = 4 * (size_t)o->dim, h = sizeof(zl_half);
    b->x = (zl_half *)dalloc(elems_rd(o) * h);
    b->t = (zl_half *)dalloc(elems_rd(o) * h);
    b->y = (zl_half *)dalloc(elems_rd(o) * h);
    b->dy = (zl_half *)dalloc(elems_rd(o) * h);
    b->W1 = (zl_half *)dalloc(elems_df(o) * h);
    b->W2 = (zl_half *)dalloc(elems_df(o) * h);
    b->b1 = (zl_half *)dalloc(F * h);
    b->b2 = (zl_half *)dalloc((size_t)o->dim * h);
    b->h = (zl_half *)dalloc(elems_rf(o) * h);
    b->a = (zl_half *)dalloc(elems_rf(o) * h);
    b->dh = (zl_half *)dalloc(elems_rf(o) * h);
    b->loss = (float *)dalloc(sizeof(float));
    outputs *sets[3] = {&b->out, &b->ref, &b->prev};
    for (int i = 0; i < 3; i++) {
        sets[i]->d = (zl_half *)dalloc(elems_out_d(o) * h);
        sets[i]->aux = (zl_half *)dalloc(elems_rf(o) * h);
        sets[i]->bias = (zl_half *)dalloc(F * h);
    }
    b->lt_ws = dalloc(ZL_LT_WS_BYTES);
    size_t zl_bytes = zl_kernels_workspace_bytes(o->rows, o->dim);
    b->zl_ws = dalloc(zl_bytes);
    zl_kernels_set_workspace(b->zl_ws, zl_bytes);
}

/* Realistic operands, made by the trainer's own kernels: the synthetic batch, W1 and W2 at the
 * model's init scales, h and a from zl_block_forward, dy from the MSE loss (at fp16's initial loss
 * scale, 1 for bf16, as the trainer's defaults), a recomputed by zl_gelu_stored as backward
 * does, and dh from zl_block_backward (its other outputs land in scratch that the GEMMs below
 * overwrite; dh gets its own buffer where the trainer reuses a's). Biases are small and non-zero (the model starts them at 0) so that the bias epilogue is
 * not a no-op in the comparison. Values matter little to the time, but zeros or garbage would
 * make the bitwise comparison weaker. */
static void make_operands(buffers *b, const options *o, cudaStream_t st) {
    const int D = o->dim, R = o->rows, F = 4 * D;
    zl_stream s = (zl_stream)st;
    zl_data_generate(b->x, b->t, 1, 0, R, D, s);
    zl_init_uniform(b->W1, elems_df(o), 2, 0, zl_mlp_init_scale_log2_W1(D), s);
    zl_init_uniform(b->W2, elems_df(o), 3, 0, zl_mlp_init_scale_log2_W2(D), s);
    zl_init_uniform(b->b1, (size_t)F, 4, 0, 6, s);
    zl_init_uniform(b->b2, (size_t)D, 5, 0, 6, s);
    zl_block_forward(b->x, b->W1, b->b1, b->W2, b->b2, b->h, b->a, b->y, R, D, s);
    zl_mse_loss_backward(b->y, b->t, b->dy, b->loss, R, D, o->bf16 ? 1.0f : 65536.0f, s);
    zl_gelu_stored(b->h, b->a, elems_rf(o), s);
    zl_block_backward(b->x, b->h, b->a, b->W1, b->W2, b->dy, b->dh, b->ref.d, b->ref.bias, b->prev.d, b->prev.bias,
                      b->out.d, ZL_GRADS_WRITE, R, D, s);
    cudaCheck(cudaStreamSynchronize(st));
}

/* ---- the block's GEMMs ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int forward;  /* 1: forward pass, 0: backward */
    int per_step; /* launches in one step: L, or L−1 for dx */
    gemm_args g;  /* D, aux and bias outputs point into buffers.out */
    cublasLtEpilogue_t tries[3]; /* the trainer's order: fused first, plain last */
    int ntries;
    int writes_aux, writes_bias; /* of the epilogue finally used */
} block_gemm;

/* Points the epilogue's vectors where the trainer points them: bias/aux inputs at the operands,
 * bias-gradient and aux outputs into `out`. */
static void set_epilogue(block_gemm *bg, cublasLtEpilogue_t e, const buffers *b, int F) {
    gemm_args *g = &bg->g;
    g->epilogue = e;
    g->bias = NULL;
    g->aux = NULL;
    g->ldaux = 0;
    bg->writes_aux = bg->writes_bias = 0;
    switch (e) {
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: /* fwd W1: b1 in, h out */
        g->bias = b->b1, g->aux = b->out.aux, g->ldaux = F, bg->writes_aux = 1;
        break;
    case CUBLASLT_EPILOGUE_BIAS: /* fwd W2: b2 in */
        g->bias = b->b2;
        break;
    case CUBLASLT_EPILOGUE_BGRADA: /* bwd dW2: db2 out */
        g->bias = b->out.bias, bg->writes_bias = 1;
        break;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: /* bwd dh: h in, db1 out */
        g->aux = b->h, g->ldaux = F, g->bias = b->out.bias, bg->writes_bias = 1;
        break;
    case CUBLASLT_EPILOGUE_DGELU: /* bwd dh: h in */
        g->aux = b->h, g->ldaux = F;
        break;
    default:
        break;
    }
}

/* The six GEMMs with the operands, transposes, leading dimensions and betas of
 * zl_block_forward / zl_block_backward (WRITE mode), and the epilogues the mask allows. */
static int make_gemms(block_gemm *out, const buffers *b, const options *o) {
    const int D = o->dim, R = o->rows, F = 4 * D, L = o->layers, epi = zl_cu_epilogue_mask();
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const cublasLtEpilogue_t PLAIN = CUBLASLT_EPILOGUE_DEFAULT;
    block_gemm *q = out;
    memset(out, 0, 6 * sizeof *out);

    q->name = "fwd W1", q->forward = 1, q->per_step = L;
    q->g = zl_cu_gemm_make("forward h = x·W1 + b1, a = gelu(h)", N, N, F, R, D, b->W1, F, b->x, D, 0.0f, NULL,
                           b->out.d, F);
    if ((epi & EPI_GELU_AUX_BIAS) && F % 8 == 0) q->tries[q->ntries++] = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    q->tries[q->ntries++] = PLAIN;
    q++;

    q->name = "fwd W2", q->forward = 1, q->per_step = L;
    q->g = zl_cu_gemm_make("forward y = x + a·W2 + b2", N, N, D, R, F, b->W2, D, b->a, F, 1.0f, b->x, b->out.d, D);
    if (epi & EPI_BIAS) q->tries[q->ntries++] = CUBLASLT_EPILOGUE_BIAS;
    q->tries[q->ntries++] = PLAIN;
    q++;

    q->name = "bwd dW2", q->forward = 0, q->per_step = L;
    q->g = zl_cu_gemm_make("backward dW2 = aᵀ·dy, db2", N, T, D, F, R, b->dy, D, b->a, F, 0.0f, NULL, b->out.d, D);
    if (epi & EPI_BGRADA) q->tries[q->ntries++] = CUBLASLT_EPILOGUE_BGRADA;
    q->tries[q->ntries++] = PLAIN;
    q++;

    q->name = "bwd dh", q->forward = 0, q->per_step = L;
    q->g = zl_cu_gemm_make("backward dh = (dy·W2ᵀ) ⊙ gelu'(h)", T, N, F, R, D, b->W2, D, b->dy, D, 0.0f, NULL,
                           b->out.d, F);
    if (F % 8 == 0 && (epi & EPI_DGELU_BGRAD)) q->tries[q->ntries++] = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    if (F % 8 == 0 && (epi & EPI_DGELU)) q->tries[q->ntries++] = CUBLASLT_EPILOGUE_DGELU;
    q->tries[q->ntries++] = PLAIN;
    q++;

    q->name = "bwd dW1", q->forward = 0, q->per_step = L;
    q->g = zl_cu_gemm_make("backward dW1 = xᵀ·dh", N, T, F, D, R, b->dh, F, b->x, D, 0.0f,
                           NULL, b->out.d, F);
    q->tries[q->ntries++] = PLAIN;
    q++;

    q->name = "bwd dx", q->forward = 0, q->per_step = L - 1;
    q->g = zl_cu_gemm_make("backward dx = dy + dh·W1ᵀ", T, N, D, R, F, b->W1, F, b->dh, F, 1.0f, b->dy,
                           b->out.d, D);
    q->tries[q->ntries++] = PLAIN;
    q++;
    return (int)(q - out);
}

/* ---- the copy of plan_create --------------------------------------------------------------- */

typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lcd;
    cublasLtMatmulPreference_t pref;
} lt_plan;

/* align_class, operand_align: cuda_common.cuh, as the trainer's plans use them */

static void plan_build(lt_plan *p, const gemm_args *g) {
    uint32_t epi = (uint32_t)g->epilogue;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->transa, sizeof g->transa));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->transb, sizeof g->transb));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    /* set before the heuristic, as the trainer does: it reads their alignment */
    if (g->bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                   sizeof g->bias));
    if (g->aux) {
        int64_t ld = g->ldaux;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                                   sizeof g->aux));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    int a_rows = g->transa == CUBLAS_OP_N ? g->m : g->k, a_cols = g->transa == CUBLAS_OP_N ? g->k : g->m;
    int b_rows = g->transb == CUBLAS_OP_N ? g->k : g->n, b_cols = g->transb == CUBLAS_OP_N ? g->n : g->k;
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, g->type, (uint64_t)a_rows, (uint64_t)a_cols, g->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, g->type, (uint64_t)b_rows, (uint64_t)b_cols, g->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lcd, g->type, (uint64_t)g->m, (uint64_t)g->n, g->ldd));

    uint64_t ws_bytes = ZL_LT_WS_BYTES;
    uint32_t al_a = (uint32_t)operand_align(g->A, g->lda, g->stride_a, g->batch),
             al_b = (uint32_t)operand_align(g->B, g->ldb, g->stride_b, g->batch),
             al_c = (uint32_t)operand_align(g->C ? g->C : g->D, g->ldd, g->stride_d, g->batch),
             al_d = (uint32_t)operand_align(g->D, g->ldd, g->stride_d, g->batch);
    /* split-K partial sums must stay fp32: no INPLACE / OUTPUT_TYPE reductions (16-bit) */
    uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasCheck(cublasLtMatmulPreferenceCreate(&p->pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                     sizeof ws_bytes));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                     &reductions, sizeof reductions));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                     sizeof al_a));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                     sizeof al_b));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                                     sizeof al_c));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                     sizeof al_d));
}

static void plan_destroy(lt_plan *p) {
    cublasCheck(cublasLtMatmulPreferenceDestroy(p->pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lcd));
    cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}

/* The heuristic's first `count` answers that it marks usable; 0 when it has none. */
static int heuristic(cublasLtHandle_t lt, const lt_plan *p, int count, cublasLtMatmulHeuristicResult_t *res) {
    int found = 0;
    memset(res, 0, (size_t)count * sizeof *res);
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lcd, p->lcd, p->pref, count, res, &found);
    if (st != CUBLAS_STATUS_SUCCESS) return 0;
    int n = 0;
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) res[n++] = res[i];
    return n;
}

/* ---- algorithm descriptions ------------------------------------------------------------------ */

/* zl_cu_algo_config (cuda_common.cuh) reads an algorithm's configuration: the GEMM table's too. */

/* Names of the enum values (cublasLt.h; the values are ABI, so a table by value holds for every
 * version). Only the common ones: anything else prints as #value. */
static const char *const TILE_NAMES[] = {
    "undef", "8x8", "8x16", "16x8", "8x32", "16x16", "32x8", "8x64", "16x32", "32x16", "64x8", "32x32",
    "32x64", "64x32", "32x128", "64x64", "128x32", "64x128", "128x64", "64x256", "128x128", "256x64",
    "64x512", "128x256", "256x128", "512x64", "64x96", "96x64", "96x128", "128x160", "160x128", "192x128",
    "128x192", "128x96", "32x256", "256x32"};
static const char *const STAGE_NAMES[] = {
    "undef", "16x1", "16x2", "16x3", "16x4", "16x5", "16x6", "32x1", "32x2", "32x3", "32x4", "32x5", "32x6",
    "64x1", "64x2", "64x3", "64x4", "64x5", "64x6", "128x1", "128x2", "128x3", "128x4", "128x5", "128x6",
    "32x10", "8x4", "16x10", "8x5", NULL, NULL, "8x3", "8xAUTO", "16xAUTO", "32xAUTO", "64xAUTO", "128xAUTO",
    "256xAUTO", "768xAUTO"};
static const char *const CLUSTER_NAMES[] = {"auto", NULL, "1x1x1", "2x1x1", "4x1x1", "1x2x1", "2x2x1", "4x2x1",
                                            "1x4x1", "2x4x1", "4x4x1", "8x1x1", "1x8x1", "8x2x1", "2x8x1",
                                            "16x1x1", "1x16x1"};

static const char *enum_name(char *buf, size_t len, const char *const *names, size_t n, unsigned v) {
    if (v < n && names[v]) return names[v];
    snprintf(buf, len, "#%u", v);
    return buf;
}

/* "id 66 tile 128x256 stages 64xAUTO splitK 1 red 0 swz 0 cust 0 cluster 2x1x1" */
static void describe_algo(char *buf, size_t len, const cublasLtMatmulAlgo_t *a) {
    zl_gemm_algo c = zl_cu_algo_config(a);
    char t[16], s[16], k[16];
    snprintf(buf, len, "id %-3d tile %-8s stages %-8s splitK %-2d red %d swz %d cust %-2d cluster %s", c.id,
             enum_name(t, sizeof t, TILE_NAMES, sizeof TILE_NAMES / sizeof *TILE_NAMES, c.tile),
             enum_name(s, sizeof s, STAGE_NAMES, sizeof STAGE_NAMES / sizeof *STAGE_NAMES, c.stages), c.splitk,
             c.reduction, c.swizzle, c.custom,
             enum_name(k, sizeof k, CLUSTER_NAMES, sizeof CLUSTER_NAMES / sizeof *CLUSTER_NAMES, c.cluster));
}

/* ---- comparison ------------------------------------------------------------------------------ */

typedef struct {
    unsigned max_diff, max_ref; /* float bits: non-negative floats order as unsigned integers */
    unsigned long long unequal;
} diff_acc;

/* max|x−ref|, max|ref| and the count of elements whose bits differ. A NaN or inf difference
 * (an element a candidate never wrote keeps its NaN fill) counts as an infinite one. */
template <int BF> __global__ void diff_kernel(const zl_half *x, const zl_half *ref, size_t n, diff_acc *acc) {
    float md = 0.0f, mr = 0.0f;
    unsigned long long ne = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        zl_half a = x[i], b = ref[i];
        float r = fabsf(h2f<BF>(b));
        if (r <= FLT_MAX) mr = fmaxf(mr, r);
        if (a == b) continue;
        ne++;
        float d = fabsf(h2f<BF>(a) - h2f<BF>(b));
        md = fmaxf(md, d <= FLT_MAX ? d : INFINITY);
    }
    for (int o = 16; o > 0; o >>= 1) {
        md = fmaxf(md, __shfl_down_sync(0xffffffffu, md, o));
        mr = fmaxf(mr, __shfl_down_sync(0xffffffffu, mr, o));
        ne += __shfl_down_sync(0xffffffffu, ne, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax(&acc->max_diff, __float_as_uint(md));
        atomicMax(&acc->max_ref, __float_as_uint(mr));
        atomicAdd(&acc->unequal, ne);
    }
}

typedef struct {
    double rel;                 /* max|Δ| / max|ref| over every output */
    unsigned long long unequal; /* elements whose bits differ, over every output */
} verdict;

static void diff_one(const zl_half *x, const zl_half *ref, size_t n, diff_acc *dacc, verdict *v, cudaStream_t st) {
    diff_acc h;
    cudaCheck(cudaMemsetAsync(dacc, 0, sizeof *dacc, st));
    LAUNCH16(diff_kernel, zl_cu_grid_for(n, 256), 256, st, x, ref, n, dacc);
    cudaCheck(cudaMemcpyAsync(&h, dacc, sizeof h, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    float md, mr;
    memcpy(&md, &h.max_diff, sizeof md);
    memcpy(&mr, &h.max_ref, sizeof mr);
    double rel = md == 0.0f ? 0.0 : mr > 0.0f ? (double)md / mr : INFINITY;
    if (rel > v->rel) v->rel = rel;
    v->unequal += h.unequal;
}

/* Element counts of what the GEMM writes. */
typedef struct {
    size_t d, aux, bias;
} out_sizes;

static out_sizes sizes_of(const block_gemm *bg) {
    out_sizes z;
    z.d = (size_t)bg->g.m * bg->g.n; /* ldd = m */
    z.aux = bg->writes_aux ? (size_t)bg->g.ldaux * bg->g.n : 0;
    z.bias = bg->writes_bias ? (size_t)bg->g.m : 0;
    return z;
}

static verdict compare(const outputs *x, const outputs *ref, out_sizes z, diff_acc *dacc, cudaStream_t st) {
    verdict v = {0.0, 0};
    diff_one(x->d, ref->d, z.d, dacc, &v, st);
    if (z.aux) diff_one(x->aux, ref->aux, z.aux, dacc, &v, st);
    if (z.bias) diff_one(x->bias, ref->bias, z.bias, dacc, &v, st);
    return v;
}

/* All bytes 0xFF: NaN in fp16 and bf16, so an element left unwritten cannot pass as equal. */
static void fill_nan(const outputs *o, out_sizes z, cudaStream_t st) {
    cudaCheck(cudaMemsetAsync(o->d, 0xFF, z.d * sizeof(zl_half), st));
    if (z.aux) cudaCheck(cudaMemsetAsync(o->aux, 0xFF, z.aux * sizeof(zl_half), st));
    if (z.bias) cudaCheck(cudaMemsetAsync(o->bias, 0xFF, z.bias * sizeof(zl_half), st));
}

static void copy_outputs(const outputs *dst, const outputs *src, out_sizes z, cudaStream_t st) {
    const cudaMemcpyKind k = cudaMemcpyDeviceToDevice;
    cudaCheck(cudaMemcpyAsync(dst->d, src->d, z.d * sizeof(zl_half), k, st));
    if (z.aux) cudaCheck(cudaMemcpyAsync(dst->aux, src->aux, z.aux * sizeof(zl_half), k, st));
    if (z.bias) cudaCheck(cudaMemcpyAsync(dst->bias, src->bias, z.bias * sizeof(zl_half), k, st));
}

/* ---- candidates: run, check, time ------------------------------------------------------------ */

typedef struct {
    int rank;    /* place in the heuristic's top-N answer, from 0; −1: the trainer's path; −2: the
                  * default when the top-N answer does not contain it */
    int is_default;
    cublasLtMatmulHeuristicResult_t res;
    int ok;      /* every launch returned success */
    verdict vs_default;
    int repeats; /* its second run gave its first run's bits */
    float *ms;   /* timed samples */
    int nms;
    double best_ms, median_ms;
} candidate;

typedef struct {
    cublasLtHandle_t lt;
    lt_plan plan;
    const block_gemm *bg;
    const buffers *b;
    cudaStream_t st;
} gemm_ctx;

static void launch(const gemm_ctx *x, candidate *c) {
    const gemm_args *g = &x->bg->g;
    if (c->rank < 0) { /* the trainer's own path: plan cache, attribute update, launch */
        zl_cu_gemm(g, 1, x->st);
        return;
    }
    float alpha = g->alpha, beta = g->beta;
    const void *C = g->C ? g->C : g->D;
    cublasStatus_t s = cublasLtMatmul(x->lt, x->plan.desc, &alpha, g->A, x->plan.la, g->B, x->plan.lb, &beta, C,
                                      x->plan.lcd, g->D, x->plan.lcd, &c->res.algo, x->b->lt_ws, ZL_LT_WS_BYTES, x->st);
    if (s != CUBLAS_STATUS_SUCCESS) c->ok = 0; /* a candidate may fail: it is reported, not fatal */
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One round: warm-up launches, then `reps` back-to-back launches between event pairs. */
static void time_round(const gemm_ctx *x, candidate *c, const options *o, cudaEvent_t *ev) {
    for (int i = 0; i < o->warmup; i++) launch(x, c);
    for (int i = 0; i < o->reps; i++) {
        cudaCheck(cudaEventRecord(ev[2 * i], x->st));
        launch(x, c);
        cudaCheck(cudaEventRecord(ev[2 * i + 1], x->st));
    }
    cudaCheck(cudaEventSynchronize(ev[2 * o->reps - 1]));
    for (int i = 0; i < o->reps; i++) cudaCheck(cudaEventElapsedTime(&c->ms[c->nms++], ev[2 * i], ev[2 * i + 1]));
}

static void summarize_times(candidate *c) {
    qsort(c->ms, (size_t)c->nms, sizeof *c->ms, cmp_float);
    c->best_ms = c->ms[0];
    c->median_ms = c->nms % 2 ? c->ms[c->nms / 2] : 0.5 * (c->ms[c->nms / 2 - 1] + c->ms[c->nms / 2]);
}

/* What one GEMM's measurement gives the step estimate. */
typedef struct {
    int measured;
    double flops, default_ms, best_ms;
    double same_bits_ms; /* the fastest candidate whose bits equal the default's (at worst the default) */
    int best_bitwise;    /* the best candidate's bits equal the default's */
    int trainer_mismatch;
    double sustained_default_ms, sustained_best_ms; /* --sustain: a launch alone, the default and the fastest with its bits */
    int in_table;        /* --table: the fastest sustained one goes into the table (entry) */
    zl_gemm_entry entry;
    char best_rank[16], best_algo[160], default_algo[160];
} gemm_result;

static double tflops(double flops, double ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; }

static void rank_label(char *buf, size_t len, const candidate *c) {
    if (c->rank >= 0) snprintf(buf, len, "%d", c->rank);
    else snprintf(buf, len, "%s", c->rank == -1 ? "zl" : "1st");
}

static void print_row(const candidate *c, const candidate *def, double flops) {
    char algo[160];
    if (c->rank < 0)
        snprintf(algo, sizeof algo, "%-78s", "the trainer's path: zl_cu_gemm (kernels_cuda.cu)");
    else
        describe_algo(algo, sizeof algo, &c->res.algo);
    char rank[16];
    rank_label(rank, sizeof rank, c);
    if (!c->ok) {
        printf("  %3s%s %s  failed to run\n", rank, c->is_default ? "*" : " ", algo);
        return;
    }
    printf("  %3s%s %s  ws %5.1f MiB waves %5.2f | %7.3f %7.3f ms %6.1f TFLOP/s %5.3fx | %8.1e %s %s\n", rank,
           c->is_default ? "*" : " ", algo, c->res.workspaceSize / 1048576.0, c->res.wavesCount, c->best_ms,
           c->median_ms, tflops(flops, c->best_ms), def->best_ms / c->best_ms, c->vs_default.rel,
           c->vs_default.unequal == 0 ? "bits=default" : "bits differ ", c->repeats ? "repeats" : "DOES NOT REPEAT");
}

/* ---- sustained: each candidate alone for seconds, at the clock it holds by itself ----------------
 * A busy H100/H200 runs lab-1b at its power limit, and the controller sets the clock over tens
 * of milliseconds: in step 2's interleaved rounds every candidate runs at the clock the mix of
 * them holds, so one that draws more power a launch looks as fast as it would be with the GPU
 * to itself. Here each candidate runs alone, back to back, for --sustain seconds (after one
 * block of the default to bring the GPU to its limit), two rounds, the second in reverse order;
 * NVML is read between batches of launches (every ≈ 15 ms on lab-1b, ≥ 10 ms apart), and the
 * energy a launch is the board's power, timed by the energy counter's moves (common/clocks.h),
 * times the time a launch.
 * At the power limit that power is the limit for every candidate, so the energy a launch mostly
 * restates the time a launch; the power still moves by a couple of per cent from block to block,
 * so two candidates less than that apart may rank one way by time and the other by energy. */

#define SUSTAIN_BATCH 8        /* launches between two waits for the GPU */
#define SUSTAIN_READINGS 8192 /* one every ≥ 10 ms: 60 s */
#define SUSTAIN_ROUNDS 2       /* the second in reverse order, so a drift hits both ends alike */

typedef struct {
    int launches;
    double ms, watts, sm_mhz, cap; /* a launch; by the counter; median; share of readings at the power cap */
    int moves;                     /* the energy counter's moves: fewer than 2 give no power */
} sustained;

/* Launches batch after batch, at most two batches ahead of the GPU, for `seconds`. */
static sustained sustain_block(const gemm_ctx *x, candidate *c, double seconds) {
    static zl_clock_reading r[SUSTAIN_READINGS];
    int nr = 0;
    char why[160] = "";
    cudaEvent_t start, stop, done[3];
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    for (int i = 0; i < 3; i++) cudaCheck(cudaEventCreate(&done[i]));
    sustained s;
    memset(&s, 0, sizeof s);
    cudaCheck(cudaEventRecord(start, x->st));
    double t0 = zl_wall_seconds(), t_read = 0;
    for (int k = 0; zl_wall_seconds() - t0 < seconds; k++) {
        if (k >= 2) cudaCheck(cudaEventSynchronize(done[(k - 2) % 3]));
        if (nr < SUSTAIN_READINGS && zl_wall_seconds() - t_read >= 0.010) { /* small GEMMs: not every batch */
            t_read = zl_wall_seconds();
            if (zl_backend_clock_read(&r[nr], why, sizeof why) == 0) nr++;
        }
        for (int i = 0; i < SUSTAIN_BATCH; i++) launch(x, c);
        s.launches += SUSTAIN_BATCH;
        cudaCheck(cudaEventRecord(done[k % 3], x->st));
    }
    cudaCheck(cudaEventRecord(stop, x->st));
    cudaCheck(cudaEventSynchronize(stop));
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop));
    s.ms = ms / s.launches;
    s.watts = -1;
    if (nr >= 2) {
        zl_clock_summary z = zl_clock_summarize(r, nr);
        s.watts = z.energy_w, s.moves = z.energy_updates, s.sm_mhz = z.sm_mhz_median, s.cap = z.power_cap;
    } else if (why[0]) {
        printf("  (no NVML readings: %s)\n", why);
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    for (int i = 0; i < 3; i++) cudaCheck(cudaEventDestroy(done[i]));
    return s;
}

/* The default (always: it is the reference) and every candidate with its bits that repeats
 * them; returns the fastest one's mean ms a launch over the rounds (the default's in *def_ms). */
static double sustain_candidates(const gemm_ctx *x, candidate *c, int n, const options *o, double *def_ms,
                                 double *mean_of) {
    int idx[MAX_ALGOS + 2], m = 0;
    for (int i = 1; i < n; i++)
        if (i == 1 || (c[i].ok && c[i].repeats && c[i].vs_default.unequal == 0)) idx[m++] = i;
    sustained res[MAX_ALGOS + 2][SUSTAIN_ROUNDS];
    sustain_block(x, &c[1], o->sustain); /* to the power limit first */
    for (int round = 0; round < SUSTAIN_ROUNDS; round++)
        for (int j = 0; j < m; j++) {
            int k = round % 2 ? m - 1 - j : j;
            res[k][round] = sustain_block(x, &c[idx[k]], o->sustain);
        }
    printf("  sustained: each candidate with the default's bits alone for %.1f s, %d rounds (the 2nd in reverse "
           "order): ms a launch, board W by the energy counter (moves), mJ a launch, median SM MHz, power-cap "
           "share\n",
           o->sustain, SUSTAIN_ROUNDS);
    double best = 0;
    *def_ms = 0;
    for (int j = 0; j < m; j++) {
        char rank[16], algo[160];
        rank_label(rank, sizeof rank, &c[idx[j]]);
        if (c[idx[j]].rank < 0) /* launch() runs it through zl_cu_gemm, as print_row says */
            snprintf(algo, sizeof algo, "%-78s", "the trainer's path: zl_cu_gemm (kernels_cuda.cu)");
        else
            describe_algo(algo, sizeof algo, &c[idx[j]].res.algo);
        double mean_ms = 0;
        printf("  %3s%s %s", rank, c[idx[j]].is_default ? "*" : " ", algo);
        for (int round = 0; round < SUSTAIN_ROUNDS; round++) {
            const sustained *s = &res[j][round];
            mean_ms += s->ms / SUSTAIN_ROUNDS;
            printf(" | %7.4f ms %5.0f W (%2d) %6.1f mJ %4.0f MHz %3.0f%%", s->ms, s->watts, s->moves,
                   s->watts > 0 ? s->watts * s->ms : -1.0, s->sm_mhz, 100 * s->cap);
        }
        printf(" | mean %7.4f ms\n", mean_ms);
        if (c[idx[j]].is_default) *def_ms = mean_ms;
        if (best == 0 || mean_ms < best) best = mean_ms;
        mean_of[idx[j]] = mean_ms;
    }
    return best;
}

/* --table: the fastest candidate alone at the cap goes into the table if the trainer could take
 * it and it gained: one of the heuristic's (the trainer's path is the default), not the default's
 * own configuration (a candidate may repeat it: the first answer need not be in the top N), splitting
 * k as the default does (the trainer refuses others), faster alone than the default by margin % or
 * more (2 by default: two rounds of one GEMM alone vary by about 1 %; a negative margin takes it even
 * when slower, up to 1 − margin/100 times the default's time, for the tests of the trainer's side),
 * on a GEMM large enough for the trainer to take anything but the first answer (ZL_GEMM_MIN_OUTPUTS).
 * first_ms is the default row's time: the first answer's, run through the trainer's path where the
 * heuristic's list lacks it (ZL_GEMM_TUNE=0 keeps that path on the first answer too). */
static void table_entry(gemm_result *r, const block_gemm *bg, const candidate *c, int n, const double *mean_of,
                        double margin) {
    const gemm_args *g = &bg->g;
    zl_gemm_algo def = zl_cu_algo_config(&c[1].res.algo);
    int b = -1;
    for (int i = 2; i < n; i++) {
        zl_gemm_algo a = zl_cu_algo_config(&c[i].res.algo);
        if (mean_of[i] > 0 && c[i].rank >= 0 && !c[i].is_default && memcmp(&a, &def, sizeof a) &&
            zl_cu_same_split(&c[i].res.algo, &c[1].res.algo) && (b < 0 || mean_of[i] < mean_of[b]))
            b = i;
    }
    if (b < 0 || mean_of[b] > (1 - margin / 100) * r->sustained_default_ms ||
        (long long)g->m * g->n < ZL_GEMM_MIN_OUTPUTS)
        return;
    r->in_table = 1;
    zl_gemm_entry *e = &r->entry;
    snprintf(e->what, sizeof e->what, "%s", bg->name);
    e->shape = zl_cu_gemm_shape(g);
    e->algo = zl_cu_algo_config(&c[b].res.algo);
    e->first_ms = r->sustained_default_ms, e->ms = mean_of[b];
}

/* Everything for one GEMM: plan, heuristic, check, timing, the table. */
static gemm_result tune_gemm(cublasLtHandle_t lt, block_gemm *bg, const buffers *b, const options *o,
                             diff_acc *dacc, cudaStream_t st) {
    gemm_result r;
    memset(&r, 0, sizeof r);
    const int F = 4 * o->dim;
    gemm_ctx x;
    x.lt = lt, x.bg = bg, x.b = b, x.st = st;

    /* The trainer's fallback chain: the first epilogue with an algorithm wins. */
    cublasLtMatmulHeuristicResult_t first;
    int have = 0, t = 0;
    for (; t < bg->ntries && !have; t++) {
        set_epilogue(bg, bg->tries[t], b, F);
        plan_build(&x.plan, &bg->g);
        have = heuristic(lt, &x.plan, 1, &first);
        if (!have) plan_destroy(&x.plan);
    }
    const gemm_args *g = &bg->g;
    r.flops = 2.0 * g->m * (double)g->n * g->k;
    printf("\n%s: %s\n  m=%d n=%d k=%d op(A)=%c op(B)=%c lda=%d ldb=%d ldd=%d beta=%g epilogue=%d%s\n", bg->name,
           g->what, g->m, g->n, g->k, g->transa == CUBLAS_OP_T ? 'T' : 'N', g->transb == CUBLAS_OP_T ? 'T' : 'N',
           g->lda, g->ldb, g->ldd, g->beta, (int)g->epilogue,
           have && t > 1 ? " (the trainer's fallback: no algorithm for the epilogue(s) tried first)" : "");
    if (!have) {
        printf("  cuBLASLt has no algorithm for this GEMM\n");
        return r;
    }

    static cublasLtMatmulHeuristicResult_t top[MAX_ALGOS];
    int ntop = heuristic(lt, &x.plan, o->algos, top);

    /* entries: the trainer's path, the default, then the other candidates in heuristic order */
    candidate *c = (candidate *)calloc((size_t)ntop + 2, sizeof *c);
    float *samples = (float *)malloc(((size_t)ntop + 2) * o->rounds * o->reps * sizeof *samples);
    if (!c || !samples) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    int n = 0, default_rank = -1;
    c[n].rank = -1, c[n].res = first, n++;
    c[n].rank = -2, c[n].is_default = 1, c[n].res = first, n++;
    for (int i = 0; i < ntop; i++) {
        if (memcmp(&top[i].algo, &first.algo, sizeof first.algo) == 0 && default_rank < 0) {
            default_rank = c[1].rank = i; /* the default, not timed twice */
            continue;
        }
        c[n].rank = i;
        c[n].res = top[i];
        n++;
    }
    if (default_rank < 0)
        printf("  note: the heuristic's first algorithm is not among its top %d (asked for %d at once)\n", ntop,
               o->algos);
    else if (default_rank > 0)
        printf("  note: the heuristic's first algorithm is #%d of its top %d when asked for %d at once\n",
               default_rank + 1, ntop, o->algos);
    for (int i = 0; i < n; i++) c[i].ms = samples + (size_t)i * o->rounds * o->reps, c[i].ok = 1;

    out_sizes z = sizes_of(bg);
    /* the default's bits are the reference */
    fill_nan(&b->out, z, st);
    launch(&x, &c[1]);
    if (!c[1].ok) {
        printf("  the heuristic's first algorithm failed to run\n");
        return r;
    }
    copy_outputs(&b->ref, &b->out, z, st);

    /* 1. check: each candidate's first run against the default's */
    for (int i = 0; i < n; i++) {
        fill_nan(&b->out, z, st);
        launch(&x, &c[i]);
        if (!c[i].ok) continue;
        c[i].vs_default = compare(&b->out, &b->ref, z, dacc, st);
    }

    /* 2. timing, candidates interleaved round by round */
    cudaEvent_t *ev = (cudaEvent_t *)malloc(2 * (size_t)o->reps * sizeof *ev);
    if (!ev) exit(1);
    for (int i = 0; i < 2 * o->reps; i++) cudaCheck(cudaEventCreate(&ev[i]));
    for (int round = 0; round < o->rounds; round++)
        for (int i = 0; i < n; i++)
            if (c[i].ok) time_round(&x, &c[i], o, ev);
    for (int i = 0; i < 2 * o->reps; i++) cudaCheck(cudaEventDestroy(ev[i]));
    free(ev);

    /* 3. repeat: a fresh first run, then one more, bit for bit */
    for (int i = 0; i < n; i++) {
        if (!c[i].ok) continue;
        fill_nan(&b->out, z, st);
        launch(&x, &c[i]);
        copy_outputs(&b->prev, &b->out, z, st);
        fill_nan(&b->out, z, st);
        launch(&x, &c[i]);
        if (c[i].ok) c[i].repeats = compare(&b->out, &b->prev, z, dacc, st).unequal == 0;
        summarize_times(&c[i]);
    }

    printf("  %d candidates. rank in the heuristic's top %d (* = its first algorithm, the default; zl = the trainer's "
           "zl_cu_gemm), algorithm | best, median ms, TFLOP/s at best, speedup over the default | max|Δ|/max|ref| "
           "vs the default, bits, self-repeat\n",
           ntop, o->algos);
    for (int i = 0; i < n; i++) print_row(&c[i], &c[1], r.flops);

    /* best: any usable candidate; same_bits: only those whose bits equal the default's, which a
     * trainer could adopt without changing a single result */
    const candidate *best = &c[1], *same_bits = &c[1];
    for (int i = 2; i < n; i++) {
        if (!(c[i].ok && c[i].repeats && c[i].vs_default.rel <= TOLERANCE)) continue;
        if (c[i].best_ms < best->best_ms) best = &c[i];
        if (c[i].vs_default.unequal == 0 && c[i].best_ms < same_bits->best_ms) same_bits = &c[i];
    }
    r.same_bits_ms = same_bits->best_ms;
    r.trainer_mismatch = !c[0].ok || c[0].vs_default.unequal != 0;
    r.measured = 1;
    r.default_ms = c[1].best_ms;
    r.best_ms = best->best_ms;
    r.best_bitwise = best->vs_default.unequal == 0;
    describe_algo(r.best_algo, sizeof r.best_algo, &best->res.algo);
    describe_algo(r.default_algo, sizeof r.default_algo, &c[1].res.algo);
    rank_label(r.best_rank, sizeof r.best_rank, best);
    printf("  => default %.1f TFLOP/s, best %.1f TFLOP/s (rank %s%s), speedup %.3fx, best's bits %s the default's\n"
           "     default: %s\n     best:    %s\n",
           tflops(r.flops, r.default_ms), tflops(r.flops, r.best_ms), r.best_rank,
           best == &c[1] ? ", the default" : "", r.default_ms / r.best_ms, r.best_bitwise ? "EQUAL" : "DIFFER from",
           r.default_algo, r.best_algo);
    if (same_bits != best && same_bits != &c[1])
        printf("     fastest with the default's bits: %.1f TFLOP/s, speedup %.3fx\n", tflops(r.flops, r.same_bits_ms),
               r.default_ms / r.same_bits_ms);
    if (r.trainer_mismatch)
        printf("  !! the trainer's path gave other bits than the copied default (%llu elements): the copy of "
               "plan_create has drifted\n",
               c[0].vs_default.unequal);
    if (!c[1].repeats) printf("  !! the default algorithm does not repeat its own bits\n");
    if (o->sustain > 0) {
        double mean_of[MAX_ALGOS + 2] = {0}; /* 0: not run alone */
        r.sustained_best_ms = sustain_candidates(&x, c, n, o, &r.sustained_default_ms, mean_of);
        table_entry(&r, bg, c, n, mean_of, o->table_margin);
    }

    plan_destroy(&x.plan);
    free(samples);
    free(c);
    return r;
}

/* ---- the step estimate ----------------------------------------------------------------------- */

/* A table for docs/performance.md, then the sums over one step. */
static void print_step(const block_gemm *bg, const gemm_result *r, int n, const options *o) {
    printf("\nsummary: TFLOP/s at the best time of each\n"
           "| GEMM | default | best | speedup | best's bits = default | fastest with the default's bits | best "
           "(rank: algorithm) |\n|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++)
        if (r[i].measured)
            printf("| %s | %.1f | %.1f | %.3fx | %s | %.1f | %s: %s |\n", bg[i].name, tflops(r[i].flops, r[i].default_ms),
                   tflops(r[i].flops, r[i].best_ms), r[i].default_ms / r[i].best_ms, r[i].best_bitwise ? "yes" : "no",
                   tflops(r[i].flops, r[i].same_bits_ms), r[i].best_rank, r[i].best_algo);

    /* [pass][default, best, fastest with the default's bits]; pass 0 = forward */
    double ms[2][3] = {{0, 0, 0}, {0, 0, 0}}, fl[2] = {0, 0};
    int all = 1;
    for (int i = 0; i < n; i++) {
        if (!r[i].measured) {
            all = 0;
            continue;
        }
        int p = bg[i].forward ? 0 : 1;
        ms[p][0] += bg[i].per_step * r[i].default_ms;
        ms[p][1] += bg[i].per_step * r[i].best_ms;
        ms[p][2] += bg[i].per_step * r[i].same_bits_ms;
        fl[p] += bg[i].per_step * r[i].flops;
    }
    printf("\nper step, GEMMs only (L = %d: forward %d × (W1, W2); backward %d × (dW2, dh, dW1) + %d × dx)%s\n",
           o->layers, o->layers, o->layers, o->layers - 1, all ? "" : " — GEMMs without an algorithm left out");
    const char *names[3] = {"forward ", "backward", "total   "};
    for (int p = 0; p < 3; p++) {
        double v[3], f = p < 2 ? fl[p] : fl[0] + fl[1];
        for (int k = 0; k < 3; k++) v[k] = p < 2 ? ms[p][k] : ms[0][k] + ms[1][k];
        printf("  %s  default %8.3f ms (%6.1f TFLOP/s)   best %8.3f ms (%6.1f TFLOP/s, %+.2f %%)   "
               "same bits %8.3f ms (%6.1f TFLOP/s, %+.2f %%)\n",
               names[p], v[0], tflops(f, v[0]), v[1], tflops(f, v[1]), v[0] > 0 ? 100.0 * (v[1] - v[0]) / v[0] : 0.0,
               v[2], tflops(f, v[2]), v[0] > 0 ? 100.0 * (v[2] - v[0]) / v[0] : 0.0);
    }
    if (o->sustain <= 0) return;
    double sd = 0, sb = 0, f = fl[0] + fl[1];
    for (int i = 0; i < n; i++)
        if (r[i].measured) sd += bg[i].per_step * r[i].sustained_default_ms, sb += bg[i].per_step * r[i].sustained_best_ms;
    printf("  sustained (each alone for %.1f s, mean of %d rounds): default %8.3f ms (%6.1f TFLOP/s)   fastest with "
           "the default's bits %8.3f ms (%6.1f TFLOP/s, %+.2f %%)\n",
           o->sustain, SUSTAIN_ROUNDS, sd, tflops(f, sd), sb, tflops(f, sb), sd > 0 ? 100.0 * (sb - sd) / sd : 0.0);
}

/* ---- the table (--table) ----------------------------------------------------------------------- */

/* The GEMMs whose sustained choice made the table, for ZL_GEMM_TABLE; 0, or 1 on a failed write. */
static int write_table(const char *path, const gemm_result *r, int n, const cudaDeviceProp *prop, int argc,
                       char **argv) {
    zl_gemm_table t;
    zl_gemm_entry e[MAX_GEMMS];
    memset(&t, 0, sizeof t);
    snprintf(t.gpu, sizeof t.gpu, "%s", prop->name);
    t.cublaslt_version = (int)cublasLtGetVersion();
    for (int i = 0, at = 0; i < argc && at < (int)sizeof t.made_by - 1; i++) /* the command that made it */
        at += snprintf(t.made_by + at, sizeof t.made_by - (size_t)at, "%s%s", i ? " " : "", argv[i]);
    t.e = e;
    for (int i = 0; i < n; i++)
        if (r[i].in_table) e[t.n++] = r[i].entry;
    char err[512];
    if (zl_gemm_table_save(path, &t, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("\ntable: %s, %d GEMM(s) for ZL_GEMM_TABLE:", path, t.n);
    for (int i = 0; i < t.n; i++) printf(" %s (%.4f -> %.4f ms alone)", e[i].what, e[i].first_ms, e[i].ms);
    printf("\n");
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

/* --help: the usage on stdout, exit 0; a bad flag: on stderr, exit 2 */
static int usage(const char *argv0, int asked) {
    fprintf(asked ? stdout : stderr,
            "usage: %s [--dim D] [--rows R] [--layers L] [--bf16] [--algos N] [--reps N] [--rounds N] [--warmup N]\n"
            "          [--sustain S [--table PATH [--table-margin P]]]\n"
            "  defaults: lab-1b (--dim 4096 --rows 8192 --layers 8), fp16, --algos 16 (1..%d), --reps 10,\n"
            "  --rounds 3, --warmup 3, --sustain 0 (off; S in [0, 60]: seconds each candidate with the default's\n"
            "  bits runs alone, its power read from NVML); --table PATH writes the sustained choices that beat the\n"
            "  default by P %% (--table-margin, 2; in [-100, 100]) or more for the trainer (ZL_GEMM_TABLE=PATH).\n"
            "  ZL_CUBLASLT_EPILOGUES selects the epilogues as in the trainer.\n",
            argv0, MAX_ALGOS);
    return asked ? 0 : 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

static int parse_args(int argc, char **argv, options *o) {
    int margin_given = 0;
    o->dim = 4096, o->rows = 8192, o->layers = 8, o->bf16 = 0, o->algos = 16, o->reps = 10, o->rounds = 3,
    o->warmup = 3, o->sustain = 0, o->table = NULL, o->table_margin = 2;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(f, "--bf16")) {
            o->bf16 = 1;
            continue;
        }
        if (!v) return 0;
        if (!strcmp(f, "--dim")) ok = parse_int(v, 1, 1 << 27, &o->dim); /* F = 4D stays an int */
        else if (!strcmp(f, "--rows")) ok = parse_int(v, 1, 1 << 29, &o->rows);
        else if (!strcmp(f, "--layers")) ok = parse_int(v, 1, 1 << 20, &o->layers);
        else if (!strcmp(f, "--algos")) ok = parse_int(v, 1, MAX_ALGOS, &o->algos);
        else if (!strcmp(f, "--reps")) ok = parse_int(v, 1, 1000, &o->reps);
        else if (!strcmp(f, "--rounds")) ok = parse_int(v, 1, 100, &o->rounds);
        else if (!strcmp(f, "--warmup")) ok = parse_int(v, 0, 1000, &o->warmup);
        else if (!strcmp(f, "--sustain")) ok = parse_double(v, 0, 60, &o->sustain);
        else if (!strcmp(f, "--table")) o->table = v, ok = *v != '\0';
        else if (!strcmp(f, "--table-margin")) ok = parse_double(v, -100, 100, &o->table_margin), margin_given = 1;
        else ok = 0;
        if (!ok) return 0;
        i++;
    }
    /* the table holds sustained choices; a margin without a table would do nothing */
    return (!o->table || o->sustain > 0) && (o->table || !margin_given);
}

int main(int argc, char **argv) {
    options o;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help")) return usage(argv[0], 1);
    if (!parse_args(argc, argv, &o)) return usage(argv[0], 0);
    unsetenv("ZL_GEMM_TABLE"); /* the trainer's path here is the reference: no table may steer it */
    if (o.table) { /* a path that cannot be written: now, not after minutes of timing */
        FILE *f = fopen(o.table, "a");
        if (!f) {
            fprintf(stderr, "--table %s: cannot write there\n", o.table);
            return 2;
        }
        long at = ftell(f);
        fclose(f);
        if (at == 0) remove(o.table); /* made empty just now: no file until the table is ready */
    }
    zl_kernels_set_dtype(o.bf16 ? ZL_BF16 : ZL_F16);

    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    printf("gemm_tune: %s, %d SMs, cuBLASLt %zu; %s, D=%d F=%d R=%d rows, L=%d; epilogue mask %d; "
           "top %d, %d rounds × (%d warm-up + %d timed)\n",
           prop.name, prop.multiProcessorCount, cublasLtGetVersion(), o.bf16 ? "bf16" : "fp16", o.dim, 4 * o.dim,
           o.rows, o.layers, zl_cu_epilogue_mask(), o.algos, o.rounds, o.warmup, o.reps);
    size_t need = bytes_needed(&o);
    if (need > free_b) {
        printf("does not fit: needs %.1f MiB, %.1f MiB free\n", need / 1048576.0, free_b / 1048576.0);
        return 2;
    }

    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    buffers b;
    alloc_buffers(&b, &o);
    diff_acc *dacc = (diff_acc *)dalloc(sizeof *dacc);
    make_operands(&b, &o, st);
    cublasLtHandle_t lt;
    cublasCheck(cublasLtCreate(&lt));

    block_gemm gemms[MAX_GEMMS];
    int n = make_gemms(gemms, &b, &o);
    gemm_result r[MAX_GEMMS];
    int mismatch = 0;
    for (int i = 0; i < n; i++) {
        r[i] = tune_gemm(lt, &gemms[i], &b, &o, dacc, st);
        mismatch |= r[i].trainer_mismatch;
    }
    print_step(gemms, r, n, &o);
    cublasCheck(cublasLtDestroy(lt));
    if (!mismatch && o.table && write_table(o.table, r, n, &prop, argc, argv)) return 1;
    if (mismatch) {
        printf("the trainer's path differs from the copied default: the numbers above are not the trainer's\n");
        return 4;
    }
    return 0;
}
