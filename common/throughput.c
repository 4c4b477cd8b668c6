/* throughput.c — tokens/s, model FLOPs per token and MFU (throughput.h), pure arithmetic. */
#include "throughput.h"

#include <math.h>
#include <string.h>

double zl_known_peak_tflops(const char *device_name, const char **family) {
    *family = NULL;
    if (!device_name) return 0;
    /* SXM parts only: the PCIe and NVL cards run lower clocks and power (756 and 835 TFLOP/s). */
    if (strstr(device_name, "H100") && strstr(device_name, "HBM3") && !strstr(device_name, "PCIe") &&
        !strstr(device_name, "NVL"))
        *family = "NVIDIA H100 SXM, dense fp16/bf16";
    else if (strstr(device_name, "H200") && !strstr(device_name, "NVL"))
        *family = "NVIDIA H200 SXM, dense fp16/bf16";
    return *family ? ZL_PEAK_H100_H200_SXM : 0;
}

zl_throughput zl_throughput_of(const zl_config *c, double psi, double ms_per_step, const char *device_name) {
    zl_throughput t = {0};
    double L = c->layers, T = c->seq, D = c->dim, secs = ms_per_step * 1e-3;
    t.tokens_per_step = (double)c->accum * c->batch * T;
    t.tokens_per_s = secs > 0 ? t.tokens_per_step / secs : 0;
    t.attention_flops_per_token = 12.0 * L * T * D;
    t.flops_per_token = 6.0 * psi + t.attention_flops_per_token;
    t.tflops = t.flops_per_token * t.tokens_per_s / 1e12;
    if (c->peak_tflops > 0) t.peak_tflops = c->peak_tflops, t.peak_source = "--peak-tflops";
    else t.peak_tflops = zl_known_peak_tflops(device_name, &t.peak_source);
    t.mfu = t.peak_tflops > 0 ? t.tflops / t.peak_tflops : NAN;
    return t;
}
