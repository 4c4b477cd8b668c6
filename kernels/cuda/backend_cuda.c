/* backend_cuda.c — backend.h on one CUDA device per rank: cudaMalloc memory, CUDA streams
 * and events, NCCL collectives bootstrapped over MPI.
 *
 * A zl_stream is a cudaStream_t and a zl_event a cudaEvent_t, cast to the opaque handle
 * types; kernels_cuda.cu casts them back. Plain C11 over the CUDA runtime and NCCL C APIs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "backend.h"
#include "cuda_check.h"

static ncclComm_t g_comm = NULL;
static int g_device = -1;
static char g_device_name[256] = "cuda (not initialised)";

static cudaStream_t as_stream(zl_stream s) { return (cudaStream_t)s; }
static cudaEvent_t as_event(zl_event e) { return (cudaEvent_t)e; }

void zl_cuda_fatal(const char *file, int line, const char *what, const char *detail) {
    int rank = -1, inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "[zerolab cuda] rank %d, %s:%d: %s failed: %s\n", rank, file, line, what,
            detail ? detail : "(no detail)");
    fflush(stderr);
    if (inited) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* NCCL errors: add ncclGetLastError, which names the actual cause (e.g. a failed socket). */
#define ncclCheckComm(call)                                                                      \
    do {                                                                                         \
        ncclResult_t zl_nr_ = (call);                                                            \
        if (zl_nr_ != ncclSuccess) {                                                             \
            char zl_msg_[512];                                                                   \
            snprintf(zl_msg_, sizeof zl_msg_, "%s (%s)", ncclGetErrorString(zl_nr_),             \
                     ncclGetLastError(g_comm));                                                  \
            zl_cuda_fatal(__FILE__, __LINE__, #call, zl_msg_);                                   \
        }                                                                                        \
    } while (0)

/* ---- lifetime ------------------------------------------------------------------------ */

void zl_backend_init(int rank, int world, int local_rank, int local_size) {
    int count = 0;
    cudaCheck(cudaGetDeviceCount(&count));
    if (count < 1 || local_size > count) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "%d ranks on this node but only %d visible CUDA device(s); launch at most one rank per GPU",
                 local_size, count);
        zl_cuda_fatal(__FILE__, __LINE__, "zl_backend_init", msg);
    }
    g_device = local_rank % count;
    cudaCheck(cudaSetDevice(g_device));
    struct cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, g_device));
    snprintf(g_device_name, sizeof g_device_name, "%s", prop.name);

    /* NCCL bootstrap: rank 0 makes the unique id, MPI carries it to everyone. */
    ncclUniqueId id;
    if (rank == 0) ncclCheck(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        zl_cuda_fatal(__FILE__, __LINE__, "MPI_Bcast(ncclUniqueId)", "MPI error");
    ncclCheckComm(ncclCommInitRank(&g_comm, world, id, rank));
}

void zl_backend_finalize(void) {
    if (g_comm == NULL) return;
    cudaCheck(cudaDeviceSynchronize()); /* no collective may still be in flight */
    ncclCheckComm(ncclCommDestroy(g_comm));
    g_comm = NULL;
}

const char *zl_backend_name(void) { return "cuda"; }
const char *zl_backend_device_name(void) { return g_device_name; }

/* ---- memory -------------------------------------------------------------------------- */

void *zl_dev_alloc(size_t bytes) {
    void *p = NULL;
    /* cudaMalloc(0) "succeeds" with NULL, which the caller would read as out of memory. */
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it, or the next launch check would report it */
        return NULL;
    }
    return p;
}

void zl_dev_free(void *p) {
    if (p) cudaCheck(cudaFree(p));
}

void zl_memcpy_d2h(void *host, const void *dev, size_t bytes, zl_stream s) {
    if (bytes == 0) return;
    cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, as_stream(s)));
    cudaCheck(cudaStreamSynchronize(as_stream(s)));
}

void zl_memcpy_h2d(void *dev, const void *host, size_t bytes, zl_stream s) {
    if (bytes == 0) return;
    cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, as_stream(s)));
    cudaCheck(cudaStreamSynchronize(as_stream(s)));
}

void zl_memset_async(void *dev, int value, size_t bytes, zl_stream s) {
    if (bytes == 0) return;
    cudaCheck(cudaMemsetAsync(dev, value, bytes, as_stream(s)));
}

int zl_dev_mem_used(size_t *used, size_t *total) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (used) *used = total_b - free_b;
    if (total) *total = total_b;
    return 1;
}

/* ---- streams and events -------------------------------------------------------------- */

zl_stream zl_stream_create(void) {
    cudaStream_t s;
    /* Non-blocking: never serialise against the legacy default stream. */
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return (zl_stream)s;
}

void zl_stream_destroy(zl_stream s) {
    if (s) cudaCheck(cudaStreamDestroy(as_stream(s)));
}

void zl_stream_sync(zl_stream s) { cudaCheck(cudaStreamSynchronize(as_stream(s))); }

zl_event zl_event_create(void) {
    cudaEvent_t e;
    cudaCheck(cudaEventCreate(&e)); /* timing enabled: zl_event_elapsed_ms needs it */
    return (zl_event)e;
}

void zl_event_destroy(zl_event e) {
    if (e) cudaCheck(cudaEventDestroy(as_event(e)));
}

void zl_event_record(zl_event e, zl_stream s) { cudaCheck(cudaEventRecord(as_event(e), as_stream(s))); }

void zl_stream_wait_event(zl_stream s, zl_event e) {
    cudaCheck(cudaStreamWaitEvent(as_stream(s), as_event(e), 0));
}

float zl_event_elapsed_ms(zl_event start, zl_event end) {
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, as_event(start), as_event(end)));
    return ms;
}

/* ---- collectives --------------------------------------------------------------------- */

static ncclDataType_t nccl_type(zl_dtype t) {
    switch (t) {
    case ZL_F16: return ncclFloat16;
    case ZL_F32: return ncclFloat32;
    case ZL_F64: return ncclFloat64;
    case ZL_BF16: return ncclBfloat16; /* NCCL sums bf16 in fp32 and rounds once, like fp16 */
    case ZL_NDTYPES: break;
    }
    zl_cuda_fatal(__FILE__, __LINE__, "nccl_type", "unknown zl_dtype");
    return ncclFloat32;
}

static void require_comm(const char *op) {
    if (g_comm == NULL) zl_cuda_fatal(__FILE__, __LINE__, op, "zl_backend_init has not been called");
}

void zl_backend_allreduce(void *buf, size_t count, zl_dtype t, zl_stream s) {
    require_comm("zl_backend_allreduce");
    ncclCheckComm(ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, g_comm, as_stream(s)));
}

void zl_backend_reduce_scatter(const void *send, void *recv, size_t recv_count, zl_dtype t, zl_stream s) {
    require_comm("zl_backend_reduce_scatter");
    ncclCheckComm(ncclReduceScatter(send, recv, recv_count, nccl_type(t), ncclSum, g_comm, as_stream(s)));
}

void zl_backend_allgather(const void *send, void *recv, size_t send_count, zl_dtype t, zl_stream s) {
    require_comm("zl_backend_allgather");
    ncclCheckComm(ncclAllGather(send, recv, send_count, nccl_type(t), g_comm, as_stream(s)));
}
