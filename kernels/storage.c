/* storage.c — the kernels' storage format (fp16 or bf16), one process-wide setting.
 *
 * Linked by both backends: the CPU kernels and the CUDA launchers read it through
 * zl_kernels_dtype() on every call and pick the matching conversions (the CUDA kernels
 * are instantiated once per format), so one zl_kernels_set_dtype() switches all of them,
 * and the zl_cpu_* references the GPU tests compare against. */
#include "kernels.h"

static zl_dtype g_storage = ZL_F16;

int zl_kernels_set_dtype(zl_dtype t) {
    if (t != ZL_F16 && t != ZL_BF16) return -1;
    g_storage = t;
    return 0;
}

zl_dtype zl_kernels_dtype(void) { return g_storage; }

zl_half zl_storage_from_float(float f) { return zl_round_storage(f, g_storage == ZL_BF16); }

float zl_storage_to_float(zl_half v) { return zl_widen_storage(v, g_storage == ZL_BF16); }
