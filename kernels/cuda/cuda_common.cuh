/* cuda_common.cuh — what the CUDA kernel files share (kernels_cuda.cu: the MLP and the
 * optimizer; gpt_cuda.cu: the transformer; bench/gemm_tune.cu): the storage-format templates
 * (h2f / f2h, LAUNCH16), the operands' alignment classes the GEMM plans are made for
 * (operand_align), the cuBLASLt GEMM with its plan cache (zl_cu_gemm, defined in kernels_cuda.cu),
 * the deterministic column sum and block reduction, and the shared workspace's accessors.
 * C++ only (nvcc). */
#ifndef ZL_CUDA_COMMON_CUH
#define ZL_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../../common/gemm_table.h" /* zl_gemm_algo, zl_gemm_shape: a GEMM table's key and value */
#include "cuda_check.h"
#include "kernels.h"

static inline cudaStream_t as_stream(zl_stream s) { return (cudaStream_t)s; }

/* ---- the GEMM plans' alignment (kernels_cuda.cu's plan cache, bench_gemm_tune) ---- */

/* Alignment class of a pointer, capped at 16 bytes (what the tensor-core kernels' vector
 * and TMA loads need). The cap keeps the chosen algorithm, hence the bits of the result,
 * the same whether a buffer sits at a 16- or a 256-byte boundary. */
static inline int align_class(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int c = 16;
    while (c > 1 && (a & (uintptr_t)(c - 1))) c >>= 1;
    return c;
}

/* The alignment an operand is planned for (the key below, and the minimum the heuristic is
 * told): its pointer's class, lowered to the class of its leading dimension and, batched, of
 * its batch stride, in bytes. Column j of product i starts at p + (i·stride + j·ld) elements,
 * so that is what every column of every product has; it never claims more than the pointer
 * has, so whatever the heuristic answers runs on it. Nor does it change when p moves by whole
 * columns or products: with L the lowered class of ld and stride, p + k·L keeps p's class if
 * that is below L and stays a multiple of L if it is not. The models keep block b's
 * activations b·R rows of their width into their buffers (the attention's q, k, v and P: b·B·H
 * whole products) and, checkpointing, every block's at 0 (model/gpt.c slot(), model/mlp.c
 * h_of): slot 0 and slot b get one plan, one algorithm, the same bits, also where R·width·2
 * is no multiple of 16. Where ld and stride are multiples of 8 elements (16 bytes: lab-1b, the
 * GPT-2 presets, any width divisible by 8) it is the pointer's class, as before: the same keys,
 * the same preferences, the same algorithms. */
static inline int operand_align(const void *p, int ld, long long stride, int batch) {
    const long long elem = (long long)sizeof(zl_half);
    int c = align_class(p), l = align_class((const void *)(uintptr_t)((long long)ld * elem));
    if (l < c) c = l;
    if (batch > 1) {
        int s = align_class((const void *)(uintptr_t)(stride * elem)); /* 0 (one matrix for all): 16 */
        if (s < c) c = s;
    }
    return c;
}

/* ---- 16-bit helpers: zl_half is the raw bits of the storage format BF; the hardware
 * conversions round to nearest even, exactly like zl_math.h's zl_float_to_half and
 * zl_float_to_bf16 (NaN payloads aside). ---------------------------------------------------- */
template <int BF> __device__ __forceinline__ float h2f(zl_half h);
template <> __device__ __forceinline__ float h2f<0>(zl_half h) { return __half2float(__ushort_as_half(h)); }
template <> __device__ __forceinline__ float h2f<1>(zl_half h) { return __bfloat162float(__ushort_as_bfloat16(h)); }
template <int BF> __device__ __forceinline__ zl_half f2h(float f);
template <> __device__ __forceinline__ zl_half f2h<0>(float f) { return __half_as_ushort(__float2half_rn(f)); }
template <> __device__ __forceinline__ zl_half f2h<1>(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/* Two adjacent values from one 4-byte load. */
template <int BF> __device__ __forceinline__ float2 h2f_pair(const zl_half *p);
template <> __device__ __forceinline__ float2 h2f_pair<0>(const zl_half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}
template <> __device__ __forceinline__ float2 h2f_pair<1>(const zl_half *p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}

static inline int storage_is_bf16(void) { return zl_kernels_dtype() == ZL_BF16; }

/* Launch the instance of a BF-templated kernel that matches the storage format. */
#define LAUNCH16(kernel, grid, block, stream, ...)                                                                     \
    do {                                                                                                               \
        if (storage_is_bf16())                                                                                         \
            kernel<1><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);                                                  \
        else                                                                                                           \
            kernel<0><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);                                                  \
        cudaLaunchCheck(#kernel);                                                                                      \
    } while (0)

/* One GEMM, column-major: D[m×n] = op(A)[m×k]·op(B)[k×n] + beta·C (+ epilogue).
 * C, when used, has D's layout. */
typedef struct {
    const char *what; /* names the GEMM in error messages */
    cublasOperation_t transa, transb;
    int m, n, k;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    float beta;
    const void *C; /* NULL when beta == 0 */
    void *D;
    int ldd;
    cudaDataType_t type; /* of A, B, C, D: the storage format (CUDA_R_16F or CUDA_R_16BF) */
    cublasLtEpilogue_t epilogue;
    void *bias; /* bias (BIAS, GELU_AUX_BIAS) or bias-gradient output (DGELU_BGRAD, BGRADA) */
    void *aux;  /* GELU input: written by GELU_AUX_BIAS, read by DGELU / DGELU_BGRAD */
    int ldaux;
    float alpha;   /* 1 unless set (attention scores: 1/sqrt(hd)) */
    int batch;     /* strided-batched when > 1: batch products, operands stride_* elements apart */
    long long stride_a, stride_b, stride_d; /* C, when used, strides like D */
} gemm_args;

/* One attribute of an algorithm's configuration, of the size cublasLt.h gives it (a wrong size
 * makes the call fail and leaves the buffer as it was): 1 if read. */
static inline int zl_cu_algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,
                                  size_t size) {
    size_t written = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(a, attr, buf, size, &written) == CUBLAS_STATUS_SUCCESS &&
           written == size;
}

/* The configuration of a cuBLASLt algorithm as a GEMM table records it (common/gemm_table.h);
 * attributes an older cuBLASLt does not know stay 0 (zl_cu_algo_attr leaves what it cannot read). */
static inline zl_gemm_algo zl_cu_algo_config(const cublasLtMatmulAlgo_t *a) {
    int32_t id = 0, splitk = 0;
    uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0, custom = 0;
    uint16_t inner = 0, cluster = 0;
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof swizzle);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &inner, sizeof inner);
    zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster);
    zl_gemm_algo c = {id, (int)tile, (int)stages, splitk, (int)reduction, (int)swizzle, (int)custom, inner, cluster};
    return c;
}

/* Split-K changes the order in which each output's products are added; candidates must split
 * (or not) as the first answer does. Where the first answer splits, the tile and cluster shape
 * must match too: a split count of -1 leaves the split to cuBLASLt, which may size it from the
 * number of tiles, so two candidates that both say -1 need not split alike (a precaution, not a
 * measured case: it only narrows the candidates). An attribute that cannot be read counts as a
 * difference. */
static inline int zl_cu_same_split(const cublasLtMatmulAlgo_t *a, const cublasLtMatmulAlgo_t *b) {
    int32_t sa, sb;      /* SPLITK_NUM */
    uint32_t ra, rb;     /* REDUCTION_SCHEME */
    uint32_t ta, tb;     /* TILE_ID */
    uint16_t ca, cb;     /* CLUSTER_SHAPE_ID */
    if (!zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sa, sizeof sa) ||
        !zl_cu_algo_attr(b, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sb, sizeof sb) ||
        !zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &ra, sizeof ra) ||
        !zl_cu_algo_attr(b, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &rb, sizeof rb) || sa != sb || ra != rb)
        return 0;
    if (sa == 1) return 1;
    return zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &ta, sizeof ta) &&
           zl_cu_algo_attr(b, CUBLASLT_ALGO_CONFIG_TILE_ID, &tb, sizeof tb) &&
           zl_cu_algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &ca, sizeof ca) &&
           zl_cu_algo_attr(b, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cb, sizeof cb) && ta == tb && ca == cb;
}

/* The table's key of a GEMM (common/gemm_table.h). */
static inline zl_gemm_shape zl_cu_gemm_shape(const gemm_args *g) {
    zl_gemm_shape s = {g->m, g->n, g->k, g->transa == CUBLAS_OP_T, g->transb == CUBLAS_OP_T, (int)g->epilogue,
                       g->type == CUDA_R_16BF};
    return s;
}

/* Runs the GEMM and returns 1, or returns 0 when cuBLASLt has no algorithm for it and the
 * caller has a fallback (required = 0). A required GEMM without an algorithm is fatal. */
int zl_cu_gemm(const gemm_args *g, int required, cudaStream_t s);
/* A GEMM with no epilogue, alpha 1, batch 1. */
gemm_args zl_cu_gemm_make(const char *what, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const void *A, int lda, const void *B, int ldb, float beta, const void *C, void *D, int ldd);
/* out[c] = Σ_r X[r][c], fp32 in a fixed order, rounded once (the bias gradients);
 * ZL_GRADS_ADD: out[c] + that sum, rounded once. */
void zl_cu_colsum(const zl_half *X, zl_half *out, int rows, int cols, zl_grads_mode mode, cudaStream_t s);
/* Which cuBLASLt epilogues to use, a bit mask (ZL_CUBLASLT_EPILOGUES in the environment,
 * decimal; 0 = none, which tests the fallback kernels). Where a bit is off, or cuBLASLt
 * has no algorithm, the GEMM runs plain and the kernels below do the rest. */
enum {
    EPI_GELU_AUX_BIAS = 1, /* forward W1 */
    EPI_BIAS = 2,          /* forward W2 */
    EPI_DGELU_BGRAD = 4,   /* backward dh and db1 in one GEMM: off by default, see below */
    EPI_BGRADA = 8,        /* backward dW2 and db2 in one GEMM */
    EPI_DGELU = 16,        /* backward dh; db1 by colsum_* (when DGELU_BGRAD is off or fails) */
    /* DGELU_BGRAD measured 0.6 ms slower per block backward than DGELU + colsum at
     * rows 8192, D 4096 on H200 (cuBLAS 13.0): its cross-CTA bias reduction costs more
     * than one extra read of dh. */
    EPI_DEFAULT_MASK = EPI_GELU_AUX_BIAS | EPI_BIAS | EPI_BGRADA | EPI_DGELU
};

int zl_cu_epilogue_mask(void);
/* Grid for a grid-stride loop over n items. */
unsigned zl_cu_grid_for(size_t n, unsigned threads);
/* Fatal unless zl_kernels_set_workspace has been called. */
void zl_cu_require_workspace(const char *fn);

/* Sum over the block in a fixed tree order; the result is valid in thread 0. */
static __device__ __forceinline__ double zl_cu_block_sum(double v) {
    __shared__ double warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    int nwarps = (blockDim.x + 31) >> 5;
    v = threadIdx.x < nwarps ? warp_sums[threadIdx.x] : 0.0;
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

#endif
