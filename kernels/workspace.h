/* workspace.h — how many bytes of kernel workspace each backend declares for blocks of
 * `rows` rows and width `dim`: pure arithmetic, so that zerocalc can give a run's exact
 * peak for a machine it does not run on. The regions are described where they are used:
 * kernels/cpu/kernels_cpu.c and kernels/cuda/kernels_cuda.cu (workspace sections).
 *
 * defines: zl_workspace_bytes_cpu, zl_workspace_bytes_cuda and the CUDA layout's sizes. */
#ifndef ZL_WORKSPACE_H
#define ZL_WORKSPACE_H

#include <stddef.h>

/* ---- CPU: four fp32 panels, each rounded up to 64 bytes, plus 64 to align the base ---- */
#define ZL_WS_CPU_ALIGN ((size_t)64)

static inline size_t zl_ws_cpu_round_up(size_t n) {
    return (n + ZL_WS_CPU_ALIGN - 1) / ZL_WS_CPU_ALIGN * ZL_WS_CPU_ALIGN;
}

/* P_w 4·D·D, P_a 4·R·D, P_x R·D, P_y R·D floats */
static inline size_t zl_workspace_bytes_cpu(int rows, int dim) {
    size_t R = rows > 0 ? (size_t)rows : 0, D = dim > 0 ? (size_t)dim : 0, f = sizeof(float);
    return ZL_WS_CPU_ALIGN + zl_ws_cpu_round_up(4 * D * D * f) + zl_ws_cpu_round_up(4 * R * D * f) +
           zl_ws_cpu_round_up(R * D * f) + zl_ws_cpu_round_up(R * D * f);
}

/* ---- CUDA: [ slack to align | cuBLASLt 32 MiB | loss partials | gradient-statistics
 * partials | column-sum partials (ZL_COLSUM_CHUNKS row chunks of a rows×4D matrix) ] ---- */
#define ZL_WS_CUDA_ALIGN ((size_t)256)
#define ZL_LT_WS_BYTES ((size_t)32 << 20)
#define ZL_LOSS_MAX_BLOCKS 1024
#define ZL_STATS_MAX_BLOCKS 1024
#define ZL_COLSUM_CHUNKS 16
#define ZL_FIXED_PARTIALS_BYTES (ZL_LOSS_MAX_BLOCKS * sizeof(double) + 2 * ZL_STATS_MAX_BLOCKS * sizeof(double))

static inline size_t zl_ws_colsum_floats(int dim) { return (size_t)ZL_COLSUM_CHUNKS * 4 * (size_t)(dim > 0 ? dim : 0); }

static inline size_t zl_workspace_bytes_cuda(int rows, int dim) {
    (void)rows; /* nothing here grows with the rows */
    return ZL_WS_CUDA_ALIGN + ZL_LT_WS_BYTES + ZL_FIXED_PARTIALS_BYTES + zl_ws_colsum_floats(dim) * sizeof(float);
}

#endif
