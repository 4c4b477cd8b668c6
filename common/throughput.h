/* throughput.h — what a step's time means in model FLOPs (--model gpt): tokens/s per GPU, the
 * model FLOPs per token, the achieved model TFLOP/s and the model FLOPs utilisation (MFU).
 *
 * Model FLOPs per token, PaLM's convention (Chowdhery et al., "PaLM: Scaling Language Modeling
 * with Pathways", Appendix B; nanoGPT's estimate_mfu uses the same):
 *     6Ψ + 12·L·T·D
 * 6Ψ: every parameter in one multiply-add (2 FLOPs) forward and two backward (the input's and
 * the weight's gradient). Ψ is zerolab's Ψ: all parameters, the padded vocabulary included —
 * wte is the LM head's GEMM (tied), while wpe, the biases and LayerNorms are counted although
 * they are no GEMM (< 1% at gpt2-124m). 12·L·T·D: attention's two T×T products per layer, q·kᵀ
 * and P·v, each 2·T·D FLOPs per token forward and twice that backward; the full T² is counted,
 * not the causal half a kernel that skips the masked blocks would do (PaLM counts it so).
 * Megatron-LM's formula (Narayanan et al. 2021) differs by counting the LM head apart and the
 * recompute; here --checkpoint-activations' recompute is *not* counted: model FLOPs, not
 * hardware FLOPs, so MFU stays comparable with and without it.
 *
 * MFU = achieved model TFLOP/s per GPU / peak. The peak is --peak-tflops P when given, else one
 * known from the device name: NVIDIA H100 SXM ("H100 80GB HBM3") and H200 SXM ("H200", not
 * NVL): 989 TFLOP/s dense fp16/bf16 Tensor Core (half the datasheets' 1,979 with 2:4 sparsity).
 * Any other device (PCIe, NVL, other GPUs, the CPU backend): unknown, and no MFU is printed.
 *
 * defines: zl_throughput, zl_throughput_of, zl_known_peak_tflops. */
#ifndef ZL_THROUGHPUT_H
#define ZL_THROUGHPUT_H

#include "args.h"

#define ZL_PEAK_H100_H200_SXM 989.0 /* TFLOP/s, dense fp16/bf16 */

typedef struct {
    double tokens_per_step;           /* per rank: K·B·T */
    double tokens_per_s;              /* per rank (per GPU on CUDA) */
    double flops_per_token;           /* 6Ψ + 12·L·T·D */
    double attention_flops_per_token; /* 12·L·T·D */
    double tflops;                    /* achieved model TFLOP/s per rank */
    double peak_tflops;               /* 0: unknown */
    const char *peak_source;          /* "--peak-tflops", a device family, or NULL when unknown */
    double mfu;                       /* tflops / peak_tflops (a fraction); NaN when the peak is unknown */
} zl_throughput;

/* The dense fp16/bf16 peak of a device by its name (backend.h zl_backend_device_name), or 0;
 * *family names what matched. */
double zl_known_peak_tflops(const char *device_name, const char **family);
/* Step time (ms, per rank) and Ψ to throughput, for the GPT configuration c. */
zl_throughput zl_throughput_of(const zl_config *c, double psi, double ms_per_step, const char *device_name);

#endif
