/* cuda_check.h — fail-fast checks for CUDA runtime, cuBLASLt and NCCL calls.
 *
 * Every failing call prints "file:line: <the call>: <library's message>" and aborts the
 * whole MPI job: a rank that limps on after a GPU error only deadlocks its peers in the
 * next collective. Shared by kernels_cuda.cu (C++) and backend_cuda.c (C11); the abort
 * itself lives in backend_cuda.c so that the .cu file needs no MPI include path.
 * The macros only expand where used, so include cublasLt.h / nccl.h before using
 * cublasCheck / ncclCheck. */
#ifndef ZL_CUDA_CHECK_H
#define ZL_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Prints "[zerolab cuda] file:line: what: detail" to stderr and calls MPI_Abort. */
void zl_cuda_fatal(const char *file, int line, const char *what, const char *detail);

#ifdef __cplusplus
}
#endif

#define cudaCheck(call)                                                                          \
    do {                                                                                         \
        cudaError_t zl_err_ = (call);                                                            \
        if (zl_err_ != cudaSuccess) zl_cuda_fatal(__FILE__, __LINE__, #call, cudaGetErrorString(zl_err_)); \
    } while (0)

/* After a kernel launch: catches bad launch configurations at once (and, as a side effect,
 * any earlier asynchronous error, which is then reported against this launch). */
#define cudaLaunchCheck(kernel_name)                                                             \
    do {                                                                                         \
        cudaError_t zl_err_ = cudaGetLastError();                                                \
        if (zl_err_ != cudaSuccess)                                                              \
            zl_cuda_fatal(__FILE__, __LINE__, "launch of " kernel_name, cudaGetErrorString(zl_err_)); \
    } while (0)

#define cublasCheck(call)                                                                        \
    do {                                                                                         \
        cublasStatus_t zl_st_ = (call);                                                          \
        if (zl_st_ != CUBLAS_STATUS_SUCCESS)                                                     \
            zl_cuda_fatal(__FILE__, __LINE__, #call, cublasLtGetStatusString(zl_st_));           \
    } while (0)

#define ncclCheck(call)                                                                          \
    do {                                                                                         \
        ncclResult_t zl_nr_ = (call);                                                            \
        if (zl_nr_ != ncclSuccess) zl_cuda_fatal(__FILE__, __LINE__, #call, ncclGetErrorString(zl_nr_)); \
    } while (0)

#endif
