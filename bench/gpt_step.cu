/* gpt_step.cu — where one GPT training step's compute time goes, kernel call by kernel call, on
 * one GPU (issue 11: what stands between the measured MFU and 40 %).
 *
 * Every call below is the one the model makes (model/gpt.c → gpt_kernels.h), at one rank's
 * shape: B sequences of T tokens, so R = B·T rows. Each is timed alone (CUDA events around 20
 * back-to-back calls, best of 3 rounds, after 2 warm-ups) and multiplied by how often a step
 * runs it (L times for a block's calls, once for the embedding, final LN, LM head and loss).
 * The sum is the step's model compute without communication, the optimizer or the loss-scale
 * check; the trainer's report prints "compute busy" per step, the number to set this beside.
 *
 * Each line says how fast the call runs against what bounds it:
 *   GEMMs (cuBLASLt, with their fused epilogues): TFLOP/s of 2·m·n·k per product
 *   attention (fused, gpt_flash.cu): TFLOP/s of the causal half (FlashAttention's count: forward
 *       2·B·H·T²·hd, backward 2.5× that)
 *   everything else: GB/s of the bytes it must move at least (each input read once, each output
 *       written once), beside the device's memory bandwidth
 *
 *   build/cuda/bench_gpt_step                        gpt2-1.5b and gpt2-124m at B = 8 and 32
 *   build/cuda/bench_gpt_step [--shape L,B,T,D,H,V]... [--iters N]
 * One GPU, no mpiexec; fp16. Exit: 0 ok · 1 CUDA error · 2 bad shape or does not fit. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"         /* zl_half, zl_stream */
#include "cuda/cuda_check.h" /* cudaCheck */
#include "timing.cuh"      /* bench_best_ms */
#include "gpt_kernels.h"     /* every zl_gpt_* call timed here */
#include "kernels.h"         /* zl_kernels_set_dtype, zl_init_uniform */
extern "C" { /* C headers */
#include "../common/throughput.h" /* zl_throughput_of: the trainer's model FLOPs, peak and MFU */
#include "../model/gpt.h"         /* zl_gpt_padded_vocab, zl_gpt_token_order, the unit offsets */
#include "../model/model.h"       /* zl_model_unit_offset: Ψ of the shape */
}

typedef struct {
    const char *name;
    int L;
    zl_gpt_dims d;
} shape;

/* One block's and the head's buffers, as model/gpt.c lays them out for one block. */
typedef struct {
    zl_half *x, *ln, *qkv, *atty, *xmid, *h, *a, *y, *dres, *dln, *dh, *dqkv, *logits, *p, *g, *wte, *wpe, *head;
    float *stat, *lse, *Dl, *row_loss, *loss;
    int32_t *tokens, *targets, *order, *bucket;
    void *ws;
} buffers;

static void *dalloc(size_t bytes, size_t *total) {
    void *p = NULL;
    *total += bytes;
    cudaCheck(cudaMalloc(&p, bytes));
    return p;
}

/* The block's unit: the same offsets as the model (gpt.h), so each call sees its real operand. */
#define P(name) (x->p + zl_gpt_off_##name((size_t)d.D))
#define G(name) (x->g + zl_gpt_off_##name((size_t)d.D))

typedef enum { GEMM, ATTN, MEM } bound;
typedef struct {
    const char *what;
    bound kind;
    double work; /* FLOPs (GEMM, ATTN) or bytes (MEM) per call */
    int per_step; /* calls per step: L (a block's) or 1 */
} item;

static double time_ms(void (*fn)(const buffers *, zl_gpt_dims, cudaStream_t, int), const buffers *x, zl_gpt_dims d,
                      int which, int iters, cudaStream_t st) {
    return bench_best_ms([&] { fn(x, d, st, which); }, iters, st);
}

/* The calls of one step, in the order the model runs them. */
enum {
    LN1_FWD, QKV_FWD, ATTN_FWD, WO_FWD, LN2_FWD, FC_FWD, PROJ_FWD,
    PROJ_BWD, FC_BWD, LN2_BWD, WO_BWD, ATTN_BWD, QKV_BWD, LN1_BWD,
    EMBED_FWD, LNF_FWD, HEAD_FWD, LOSS, HEAD_BWD, LNF_BWD, EMBED_BWD,
    PROJ_BWD_DW, FC_BWD_DW, N_CALLS /* the last two: parts of PROJ_BWD, FC_BWD, not added to the step */
};

static void call(const buffers *x, zl_gpt_dims d, cudaStream_t cs, int which) {
    const int R = d.B * d.T, D = d.D;
    zl_stream s = (zl_stream)cs;
    float *mean = x->stat, *rstd = x->stat + R;
    const zl_grads_mode W = ZL_GRADS_WRITE;
    switch (which) {
    case LN1_FWD: zl_gpt_layernorm_forward(x->x, P(ln1_g), P(ln1_b), x->ln, mean, rstd, R, D, s); break;
    case QKV_FWD: zl_gpt_linear_forward(x->ln, P(Wqkv), P(bqkv), NULL, x->qkv, R, D, 3 * D, s); break;
    case ATTN_FWD: zl_gpt_flash_forward(x->qkv, x->atty, x->lse, d, s); break;
    case WO_FWD: zl_gpt_linear_forward(x->atty, P(Wo), P(bo), x->x, x->xmid, R, D, D, s); break;
    case LN2_FWD: zl_gpt_layernorm_forward(x->xmid, P(ln2_g), P(ln2_b), x->ln, mean, rstd, R, D, s); break;
    case FC_FWD: zl_gpt_linear_gelu_forward(x->ln, P(Wfc), P(bfc), x->h, x->a, R, D, 4 * D, s); break;
    case PROJ_FWD: zl_gpt_linear_forward(x->a, P(Wproj), P(bproj), x->xmid, x->y, R, 4 * D, D, s); break;
    case PROJ_BWD:
        zl_gpt_linear_backward(x->a, P(Wproj), x->dres, x->h, x->dh, G(Wproj), G(bproj), W, R, 4 * D, D, s);
        break;
    case FC_BWD: zl_gpt_linear_backward(x->ln, P(Wfc), x->dh, NULL, x->dln, G(Wfc), G(bfc), W, R, D, 4 * D, s); break;
    case LN2_BWD:
        zl_gpt_layernorm_backward(x->xmid, P(ln2_g), mean, rstd, x->dln, x->dres, G(ln2_g), G(ln2_b), W, R, D, s);
        break;
    case WO_BWD: zl_gpt_linear_backward(x->atty, P(Wo), x->dres, NULL, x->dln, G(Wo), G(bo), W, R, D, D, s); break;
    case ATTN_BWD: zl_gpt_flash_backward(x->qkv, x->atty, x->lse, x->dln, x->Dl, x->dqkv, d, s); break;
    case QKV_BWD:
        zl_gpt_linear_backward(x->ln, P(Wqkv), x->dqkv, NULL, x->dln, G(Wqkv), G(bqkv), W, R, D, 3 * D, s);
        break;
    case LN1_BWD:
        zl_gpt_layernorm_backward(x->x, P(ln1_g), mean, rstd, x->dln, x->dres, G(ln1_g), G(ln1_b), W, R, D, s);
        break;
    case EMBED_FWD: zl_gpt_embed_forward(x->tokens, x->wte, x->wpe, x->x, d, s); break;
    case LNF_FWD: zl_gpt_layernorm_forward(x->y, P(ln1_g), P(ln1_b), x->ln, mean, rstd, R, D, s); break;
    case HEAD_FWD: zl_gpt_logits_forward(x->ln, x->wte, x->logits, d, s); break;
    case LOSS: zl_gpt_crossentropy(x->logits, x->targets, x->row_loss, x->loss, 1.0f, d, s); break;
    case HEAD_BWD: zl_gpt_logits_backward(x->logits, x->ln, x->wte, x->dln, x->head, d, s); break;
    case LNF_BWD:
        zl_gpt_layernorm_backward(x->y, P(ln1_g), mean, rstd, x->dln, x->dres, G(ln1_g), G(ln1_b), W, R, D, s);
        break;
    case EMBED_BWD:
        zl_gpt_embed_backward(x->order, x->bucket, x->dres, x->head, x->wte, x->wpe, W, d, s);
        break;
    case PROJ_BWD_DW:
        zl_gpt_linear_backward(x->a, P(Wproj), x->dres, x->h, NULL, G(Wproj), G(bproj), W, R, 4 * D, D, s);
        break;
    case FC_BWD_DW: zl_gpt_linear_backward(x->ln, P(Wfc), x->dh, NULL, NULL, G(Wfc), G(bfc), W, R, D, 4 * D, s); break;
    }
}

static item describe(int which, int L, zl_gpt_dims d) {
    const double R = (double)d.B * d.T, D = d.D, RD2 = 2.0 * R * D, Vp = d.Vp;
    const double attn = 2.0 * d.B * d.H * (double)d.T * d.T * (D / d.H); /* causal half, forward */
    switch (which) {
    case LN1_FWD: return {"LN1 forward", MEM, 2 * RD2 + 8 * R, L};
    case QKV_FWD: return {"QKV x·W + b", GEMM, 2 * R * D * 3 * D, L};
    case ATTN_FWD: return {"attention forward (fused)", ATTN, attn, L};
    case WO_FWD: return {"out proj x·W + b + residual", GEMM, 2 * R * D * D, L};
    case LN2_FWD: return {"LN2 forward", MEM, 2 * RD2 + 8 * R, L};
    case FC_FWD: return {"MLP fc + bias + gelu (h, a)", GEMM, 2 * R * D * 4 * D, L};
    case PROJ_FWD: return {"MLP proj + bias + residual", GEMM, 2 * R * 4 * D * D, L};
    case PROJ_BWD: return {"MLP proj backward (dW, db, dx⊙gelu')", GEMM, 2 * 2 * R * 4 * D * D, L};
    case FC_BWD: return {"MLP fc backward (dW, db, dx)", GEMM, 2 * 2 * R * D * 4 * D, L};
    case LN2_BWD: return {"LN2 backward (dres +=, dg, db)", MEM, 4 * RD2 + 8 * R, L};
    case WO_BWD: return {"out proj backward", GEMM, 2 * 2 * R * D * D, L};
    case ATTN_BWD: return {"attention backward (fused)", ATTN, 2.5 * attn, L};
    case QKV_BWD: return {"QKV backward", GEMM, 2 * 2 * R * D * 3 * D, L};
    case LN1_BWD: return {"LN1 backward", MEM, 4 * RD2 + 8 * R, L};
    case EMBED_FWD: return {"embedding forward", MEM, 3 * RD2, 1};
    case LNF_FWD: return {"final LN forward", MEM, 2 * RD2 + 8 * R, 1};
    case HEAD_FWD: return {"LM head logits", GEMM, 2 * R * D * Vp, 1};
    case LOSS: return {"cross-entropy (+ dlogits)", MEM, 2 * 2 * R * Vp, 1};
    case HEAD_BWD: return {"LM head backward (dx, head)", GEMM, 2 * 2 * R * D * Vp, 1};
    case LNF_BWD: return {"final LN backward", MEM, 4 * RD2 + 8 * R, 1};
    case EMBED_BWD: return {"embedding backward (deterministic)", MEM, RD2 + 2 * 2 * Vp * D, 1};
    case PROJ_BWD_DW: return {"  of MLP proj backward: dW, db alone", GEMM, 2 * R * 4 * D * D, 0};
    case FC_BWD_DW: return {"  of MLP fc backward: dW, db alone", GEMM, 2 * R * D * 4 * D, 0};
    }
    return {"?", MEM, 0, 0};
}

/* What the trainer would report for a step of `ms` at this shape (N = 1, one micro-batch):
 * its Ψ, model FLOPs per token (6Ψ + 12·L·T·D) and the device's peak, all from throughput.h. */
static zl_throughput throughput_of(shape sh, double ms, const char *device) {
    zl_model_shape m = {};
    m.kind = ZL_MODEL_GPT, m.layers = sh.L, m.dim = sh.d.D, m.rows = sh.d.B, m.micro_batches = 1;
    m.seq = sh.d.T, m.heads = sh.d.H, m.vocab = sh.d.V, m.flash_attention = sh.d.flash;
    zl_config c = {};
    c.layers = sh.L, c.dim = sh.d.D, c.batch = sh.d.B, c.accum = 1, c.seq = sh.d.T;
    return zl_throughput_of(&c, (double)zl_model_unit_offset(m, zl_model_n_units(m)), ms, device);
}

static int bench_shape(shape sh, int iters, double peak_gbs, const char *device, cudaStream_t st) {
    zl_gpt_dims d = sh.d;
    const size_t R = (size_t)d.B * d.T, RD = R * d.D, Vp = (size_t)d.Vp, BHT = (size_t)d.B * d.H * d.T;
    const size_t unit = zl_gpt_block_params((size_t)d.D), h2 = sizeof(zl_half);
    buffers b;
    size_t total = 0;
    b.x = (zl_half *)dalloc(h2 * RD, &total), b.ln = (zl_half *)dalloc(h2 * RD, &total);
    b.qkv = (zl_half *)dalloc(h2 * 3 * RD, &total), b.atty = (zl_half *)dalloc(h2 * RD, &total);
    b.xmid = (zl_half *)dalloc(h2 * RD, &total), b.h = (zl_half *)dalloc(h2 * 4 * RD, &total);
    b.a = (zl_half *)dalloc(h2 * 4 * RD, &total), b.y = (zl_half *)dalloc(h2 * RD, &total);
    b.dres = (zl_half *)dalloc(h2 * RD, &total), b.dln = (zl_half *)dalloc(h2 * RD, &total);
    b.dh = (zl_half *)dalloc(h2 * 4 * RD, &total), b.dqkv = (zl_half *)dalloc(h2 * 3 * RD, &total);
    b.logits = (zl_half *)dalloc(h2 * R * Vp, &total);
    b.p = (zl_half *)dalloc(h2 * unit, &total), b.g = (zl_half *)dalloc(h2 * unit, &total);
    b.wte = (zl_half *)dalloc(h2 * Vp * d.D, &total), b.wpe = (zl_half *)dalloc(h2 * (size_t)d.T * d.D, &total);
    b.head = (zl_half *)dalloc(h2 * Vp * d.D, &total);
    b.stat = (float *)dalloc(8 * R, &total), b.lse = (float *)dalloc(4 * BHT, &total);
    b.Dl = (float *)dalloc(4 * BHT, &total), b.row_loss = (float *)dalloc(4 * R, &total);
    b.loss = (float *)dalloc(4, &total);
    b.tokens = (int32_t *)dalloc(4 * R, &total), b.targets = (int32_t *)dalloc(4 * R, &total);
    b.order = (int32_t *)dalloc(4 * R, &total), b.bucket = (int32_t *)dalloc(4 * (Vp + 1), &total);
    size_t ws = zl_gpt_workspace_bytes(d);
    b.ws = dalloc(ws, &total);
    zl_gpt_set_workspace(b.ws, ws, d);

    /* operands: small uniform values (the model's init scales), LayerNorm gains 1 */
    zl_stream s = (zl_stream)st;
    zl_half *fill[] = {b.x, b.atty, b.xmid, b.h, b.a, b.dres, b.dln, b.dh, b.dqkv, b.y, b.qkv, b.p, b.wte, b.wpe};
    size_t count[] = {RD, RD, RD, 4 * RD, 4 * RD, RD, RD, 4 * RD, 3 * RD, RD, 3 * RD, unit, Vp * d.D, (size_t)d.T * d.D};
    for (int i = 0; i < (int)(sizeof fill / sizeof fill[0]); i++) zl_init_uniform(fill[i], count[i], 7, 1000 * i, 5, s);
    zl_gpt_fill(b.p + zl_gpt_off_ln1_g((size_t)d.D), (size_t)d.D, 1.0f, s);
    zl_gpt_fill(b.p + zl_gpt_off_ln2_g((size_t)d.D), (size_t)d.D, 1.0f, s);
    int32_t *tok = (int32_t *)malloc(4 * (3 * R + Vp + 1));
    if (!tok) return 1;
    uint64_t r = 12345;
    for (size_t i = 0; i < 2 * R; i++) r = r * 6364136223846793005ull + 1442695040888963407ull, tok[i] = (int32_t)((r >> 33) % (uint64_t)d.V);
    zl_gpt_token_order(tok, (int)R, d.Vp, tok + 2 * R, tok + 3 * R);
    cudaCheck(cudaMemcpyAsync(b.tokens, tok, 4 * R, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(b.targets, tok + R, 4 * R, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(b.order, tok + 2 * R, 4 * R, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(b.bucket, tok + 3 * R, 4 * (Vp + 1), cudaMemcpyHostToDevice, st));
    /* statistics and lse from real forward calls, so the backward sees consistent inputs */
    call(&b, d, st, LN1_FWD);
    call(&b, d, st, QKV_FWD);
    call(&b, d, st, ATTN_FWD);
    cudaCheck(cudaStreamSynchronize(st));
    free(tok);

    printf("\n%s: L=%d B=%d T=%d D=%d H=%d V=%d (Vp %d), %zu tokens a step per GPU; buffers %.2f GB\n", sh.name, sh.L,
           d.B, d.T, d.D, d.H, d.V, d.Vp, R, total / 1e9);
    printf("  %-38s %9s %6s %10s %11s %6s\n", "call", "ms/call", "×step", "ms/step", "rate", "share");
    double ms[N_CALLS], sum = 0.0, by_kind[3] = {0, 0, 0}, work_kind[3] = {0, 0, 0};
    for (int c = 0; c < N_CALLS; c++) {
        ms[c] = time_ms(call, &b, d, c, iters, st);
        item it = describe(c, sh.L, d);
        sum += ms[c] * it.per_step;
        by_kind[it.kind] += ms[c] * it.per_step;
        work_kind[it.kind] += it.work * it.per_step;
    }
    for (int c = 0; c < N_CALLS; c++) {
        item it = describe(c, sh.L, d);
        double rate = it.work / (ms[c] * 1e-3) / (it.kind == MEM ? 1e9 : 1e12);
        if (it.per_step == 0) /* a part of the call above: its dx is the difference */
            printf("  %-38s %9.4f %6s %10s %7.1f %-5s (dx: %.4f ms)\n", it.what, ms[c], "", "", rate, "TF/s",
                   ms[c == PROJ_BWD_DW ? PROJ_BWD : FC_BWD] - ms[c]);
        else
            printf("  %-38s %9.4f %6d %10.2f %7.1f %-5s %5.1f%%\n", it.what, ms[c], it.per_step, ms[c] * it.per_step,
                   rate, it.kind == MEM ? "GB/s" : "TF/s", 100.0 * ms[c] * it.per_step / sum);
    }
    zl_throughput tp = throughput_of(sh, sum, device);
    printf("  sum %.2f ms a step: GEMMs %.2f (%.0f TFLOP/s), attention %.2f (%.0f TFLOP/s), memory-bound %.2f (%.0f GB/s"
           " of %.0f)\n", sum, by_kind[GEMM], work_kind[GEMM] / by_kind[GEMM] / 1e9, by_kind[ATTN],
           work_kind[ATTN] / by_kind[ATTN] / 1e9, by_kind[MEM], work_kind[MEM] / by_kind[MEM] / 1e6, peak_gbs);
    printf("summary: shape=%s L=%d B=%d model_ms=%.2f gemm_ms=%.2f attention_ms=%.2f memory_ms=%.2f"
           " mfu_if_model_only=%.4f (of %.0f TFLOP/s: %s)\n", sh.name, sh.L, d.B, sum, by_kind[GEMM], by_kind[ATTN],
           by_kind[MEM], tp.mfu, tp.peak_tflops, tp.peak_source ? tp.peak_source : "peak unknown");
    void *all[] = {b.x, b.ln, b.qkv, b.atty, b.xmid, b.h, b.a, b.y, b.dres, b.dln, b.dh, b.dqkv, b.logits, b.p, b.g,
                   b.wte, b.wpe, b.head, b.stat, b.lse, b.Dl, b.row_loss, b.loss, b.tokens, b.targets, b.order, b.bucket,
                   b.ws};
    for (int i = 0; i < (int)(sizeof all / sizeof all[0]); i++) cudaCheck(cudaFree(all[i]));
    return 0;
}

/* --help: the usage on stdout, exit 0; a bad flag: on stderr, exit 2 */
static int usage(const char *argv0, int asked) {
    fprintf(asked ? stdout : stderr, "usage: %s [--shape L,B,T,D,H,V]... [--iters N]   (head dimension D/H = 64)\n", argv0);
    return asked ? 0 : 2;
}

static shape preset(const char *name, int L, int B, int D, int H) {
    shape s = {name, L, {B, 1024, D, H, 50257, zl_gpt_padded_vocab(50257), 1}};
    return s;
}

int main(int argc, char **argv) {
    enum { MAX_SHAPES = 8 };
    shape shapes[MAX_SHAPES] = {preset("gpt2-1.5b", 48, 32, 1600, 25), preset("gpt2-1.5b", 48, 8, 1600, 25),
                                preset("gpt2-124m", 12, 32, 768, 12), preset("gpt2-124m", 12, 8, 768, 12)};
    int nshapes = 4, custom = 0, iters = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) return usage(argv[0], 1);
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            if ((iters = atoi(argv[++i])) < 1) return usage(argv[0], 0);
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            shape s = {"custom", 0, {0, 0, 0, 0, 0, 0, 1}};
            if (sscanf(argv[++i], "%d,%d,%d,%d,%d,%d", &s.L, &s.d.B, &s.d.T, &s.d.D, &s.d.H, &s.d.V) != 6 || s.L < 1 ||
                s.d.B < 1 || s.d.T < 1 || s.d.V < 1 || !zl_gpt_flash_supported(s.d.D, s.d.H, 0) ||
                (custom && nshapes >= MAX_SHAPES))
                return usage(argv[0], 0);
            s.d.Vp = zl_gpt_padded_vocab(s.d.V);
            if (!custom) nshapes = 0, custom = 1;
            shapes[nshapes++] = s;
        } else {
            return usage(argv[0], 0);
        }
    }
    if (zl_kernels_set_dtype(ZL_F16) != 0) return 1;
    cudaDeviceProp prop;
    int dev = 0, bus = 0, clock = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    cudaCheck(cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev));
    cudaCheck(cudaDeviceGetAttribute(&clock, cudaDevAttrMemoryClockRate, dev));
    double peak_gbs = 2.0 * clock * 1e3 * (bus / 8) / 1e9; /* DDR: two transfers a clock */
    printf("bench_gpt_step: %s, fp16, one block's calls and the head's, %d timed calls a round (best of 3)\n", prop.name,
           iters);
    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    int rc = 0;
    for (int i = 0; i < nshapes; i++) {
        int r = bench_shape(shapes[i], iters, peak_gbs, prop.name, st);
        if (r > rc) rc = r;
    }
    cudaCheck(cudaStreamDestroy(st));
    return rc;
}
