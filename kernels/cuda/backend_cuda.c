/* backend_cuda.c — backend.h on one CUDA device per rank: cudaMalloc memory, CUDA streams
 * and events, NCCL collectives bootstrapped over MPI.
 *
 * A zl_stream is a cudaStream_t and a zl_event a cudaEvent_t, cast to the opaque handle
 * types; kernels_cuda.cu casts them back. Plain C11 over the CUDA runtime and NCCL C APIs. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#if !defined(__CUDA_BF16_TYPES_EXIST__) && NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
/* Older headers name bf16 only for C++ code that included cuda_bf16.h first; the library has
 * summed it (type 9) since NCCL 2.10. */
#define ncclBfloat16 ((ncclDataType_t)9)
#endif

#include "../../common/util.h" /* zl_is_ending: the watchdog is ending the job; zl_abort_job */
#include "backend.h"
#include "cuda_check.h"
#include "gpu_select.h"

/* The communicator: the main thread creates, uses and destroys it; the watchdog's thread polls
 * its asynchronous error and may abort it. g_comm_lock orders those: g_comm is set only once
 * ncclCommInitRankConfig has succeeded (NCCL publishes a half-built one, and frees it on a
 * failure), taken away before ncclCommDestroy, and an aborted one is never destroyed. */
static ncclComm_t g_comm = NULL;
static pthread_mutex_t g_comm_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_comm_aborted;
static int g_device = -1;
static int g_rank, g_world_size; /* this rank and N, from zl_backend_init */
static char g_device_name[256] = "cuda (not initialised)";
static char g_pci_bus_id[32] = "unknown";
static char g_nccl_version[32] = "NCCL (unknown version)";

static cudaStream_t as_stream(zl_stream s) { return (cudaStream_t)s; }
static cudaEvent_t as_event(zl_event e) { return (cudaEvent_t)e; }

/* A kernel's fault (a bad address, a trap, an ECC error) is reported by whichever later call
 * looks: the file:line is where it was noticed, not where it happened. */
static int is_kernel_fault(cudaError_t e) {
    return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorMisalignedAddress ||
           e == cudaErrorIllegalInstruction || e == cudaErrorHardwareStackError || e == cudaErrorInvalidPc ||
           e == cudaErrorInvalidAddressSpace || e == cudaErrorAssert || e == cudaErrorECCUncorrectable;
}

void zl_cuda_fatal(const char *file, int line, const char *what, const char *detail) {
    if (zl_is_ending()) zl_wait_for_the_end(); /* the watchdog aborted NCCL under us: it reports, exit 5 */
    int rank = -1, inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "[zerolab cuda] rank %d, %s:%d: %s failed: %s%s\n", rank, file, line, what,
            detail ? detail : "(no detail)",
            is_kernel_fault(cudaPeekAtLastError())
                ? " (a kernel's fault, noticed here: it may come from earlier work; CUDA_LAUNCH_BLOCKING=1 or "
                  "compute-sanitizer names the kernel)"
                : "");
    zl_abort_job(1);
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

/* Every rank reaches the same verdict, so the job ends with one line (from the lowest rank
 * that failed) and a plain exit code instead of one MPI_Abort trace per rank. */
static void agree_on_device(int rank, int world, const char *prog, int device, const char *why, int code) {
    int first_bad = device < 0 ? rank : world;
    if (MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
        zl_cuda_fatal(__FILE__, __LINE__, "MPI_Allreduce(device verdict)", "MPI error");
    if (first_bad == world) return;
    if (MPI_Bcast(&code, 1, MPI_INT, first_bad, MPI_COMM_WORLD) != MPI_SUCCESS) /* its exit code */
        zl_cuda_fatal(__FILE__, __LINE__, "MPI_Bcast(exit code)", "MPI error");
    if (rank == first_bad) {
        fprintf(stderr, "%s: rank %d: %s\n", prog ? prog : "zerolab", rank, why);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(code);
}

/* The device this rank uses: -1 with the reason in why[] when there is none. Exit code
 * 1 when CUDA sees no device at all (runtime), 2 when the launch shares GPUs (input). */
static int pick_device(const char *prog, int local_rank, int local_size, char *why, size_t whylen, int *code) {
    int count = 0;
    cudaError_t st = cudaGetDeviceCount(&count);
    if (st != cudaSuccess || count < 1) {
        (void)cudaGetLastError(); /* clear it */
        char cpu_build[160] = "";
        if (prog) snprintf(cpu_build, sizeof cpu_build, "; run build/cpu/%s instead", prog);
        snprintf(why, whylen, "no CUDA device visible (cudaGetDeviceCount: %s)%s",
                 st != cudaSuccess ? cudaGetErrorString(st) : "0 devices", cpu_build);
        *code = 1;
        return -1;
    }
    *code = 2;
    int dev = zl_select_device(count, local_rank, local_size, why, whylen);
    /* The build's kernels are for sm_80 and sm_90 (cp.async, mma.sync m16n8k16 in the fused
     * attention): an older GPU would fail at its first launch with "no kernel image". */
    struct cudaDeviceProp prop;
    if (dev >= 0 && cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major < 8) {
        snprintf(why, whylen, "device %d (%s) has compute capability %d.%d; zerolab's kernels need 8.0 or newer "
                 "(A100, A10, L4, L40S, H100, H200, ...)", dev, prop.name, prop.major, prop.minor);
        return -1;
    }
    return dev;
}

/* NCCL_COMM_BLOCKING=0 overrides the communicator's configuration: its calls would return
 * ncclInProgress before they are done, which nothing here waits for (an opaque exit 1). Read
 * as NCCL reads it (strtoll, base 0); a setting in nccl.conf is not seen here. */
static int nccl_made_non_blocking(char *why, size_t whylen) {
    const char *blocking = getenv("NCCL_COMM_BLOCKING");
    if (!blocking || !*blocking || strtoll(blocking, NULL, 0) != 0) return 0;
    snprintf(why, whylen, "NCCL_COMM_BLOCKING=%s makes NCCL's calls non-blocking, which zerolab does not handle: "
             "unset it", blocking);
    return 1;
}

void zl_backend_device_key(int rank, int local_rank, int local_size, char *key, size_t n) {
    (void)rank;
    char why[512]; /* unused: zl_backend_init makes the same choice and reports a failed one */
    int code;
    int dev = pick_device(NULL, local_rank, local_size, why, sizeof why, &code);
    if (dev < 0 || cudaDeviceGetPCIBusId(key, (int)n, dev) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it */
        key[0] = '\0';
    }
}

/* Where the all-gathers run (backend.h: zl_backend_init's copy_engine_gathers). By default, for a
 * caller that asks (ZeRO-1/2; ZeRO-3 at N = 2: common/runtime.c), on the copy engines: their
 * buffers NCCL symmetric windows (zl_dev_alloc_collective) under NCCL's zero-CTA policy, so the
 * GEMMs beside them keep every SM — for ZeRO-1/2 over six leases 0.3–1.9 % off lab-1b's median
 * step at N = 4, from 0.4 % slower to 2.1 % faster at N = 2, 4–5 % off the fill model's (H200,
 * docs/performance.md). Only where that was measured to work: NCCL >= 2.28 (the zero-CTA policy),
 * N > 1, every rank on one host and its GPU on NVLink (NVML says; NCCL's symmetric memory needs
 * it; a window across hosts was never tried).
 * ZL_NCCL_WINDOWS and ZL_NCCL_CTA_POLICY, when set, decide instead: policy 1 is NCCL's
 * "efficiency" (fewer SMs for its kernels; within noise on lab-1b), 2 zero-CTA, and windows under
 * NCCL's default policy run the gathers as its symmetric kernels on the SMs. Every rank must
 * choose the same (one rank registering a window alone would hang): agreed over MPI. */
int zl_nvml_nvlink_active(void); /* nvml.c */
static int g_windows_on;    /* the all-gathers' buffers are symmetric windows */
static int g_cta_policy = -1; /* the communicator's CTA policy; -1: NCCL's default */
static void choose_allgather_engine(int world, int local_size, int nccl_version, int copy_engine_gathers,
                                    ncclConfig_t *cfg) {
    long pol = -1, win = 0;
    int have_pol = zl_env_int("ZL_NCCL_CTA_POLICY", 0, 2, &pol), have_win = zl_env_int("ZL_NCCL_WINDOWS", 0, 1, &win);
    if (have_pol < 0) zl_cuda_fatal(__FILE__, __LINE__, "ZL_NCCL_CTA_POLICY", "want 0, 1 or 2");
    if (have_win < 0) zl_cuda_fatal(__FILE__, __LINE__, "ZL_NCCL_WINDOWS", "want 0 or 1");
    int copy_engines = copy_engine_gathers && world > 1 && local_size == world &&
                       NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && nccl_version >= 22800 && zl_nvml_nvlink_active();
    if (MPI_Allreduce(MPI_IN_PLACE, &copy_engines, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
        zl_cuda_fatal(__FILE__, __LINE__, "MPI_Allreduce(copy-engine gathers)", "MPI error");
    g_windows_on = have_win > 0 ? (int)win : copy_engines;
    g_cta_policy = have_pol > 0 ? (int)pol : copy_engines && g_windows_on ? 2 : -1;
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 27, 0) /* windows and the CTA policy came in 2.27 */
    if (g_windows_on) zl_cuda_fatal(__FILE__, __LINE__, "ZL_NCCL_WINDOWS=1", "needs NCCL 2.27 or later");
    if (g_cta_policy > 0) zl_cuda_fatal(__FILE__, __LINE__, "ZL_NCCL_CTA_POLICY", "needs NCCL >= 2.27");
#else
    if (g_cta_policy == 2 && NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)) /* the zero-CTA policy came in 2.28 */
        zl_cuda_fatal(__FILE__, __LINE__, "ZL_NCCL_CTA_POLICY=2", "needs NCCL >= 2.28 (zero-CTA)");
    if (g_cta_policy >= 0) cfg->CTAPolicy = g_cta_policy;
#endif
    (void)cfg; /* NCCL < 2.27: no CTA policy to set */
}

static int g_window_declined; /* NCCL took a window without symmetric support: its kernels gather */
const char *zl_backend_allgather_engine(void) {
    return g_windows_on && g_cta_policy == 2 && !g_window_declined ? "copy_engines" : "sm_kernels";
}

void zl_backend_init(int rank, int world, int local_rank, int local_size, const char *prog, int copy_engine_gathers) {
    char why[512] = "";
    int code = 1;
    g_rank = rank, g_world_size = world;
    g_device = pick_device(prog, local_rank, local_size, why, sizeof why, &code);
    if (g_device >= 0 && nccl_made_non_blocking(why, sizeof why)) g_device = -1, code = 2;
    agree_on_device(rank, world, prog, g_device, why, code);
    cudaCheck(cudaSetDevice(g_device));
    struct cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, g_device));
    snprintf(g_device_name, sizeof g_device_name, "%s", prop.name);
    cudaCheck(cudaDeviceGetPCIBusId(g_pci_bus_id, (int)sizeof g_pci_bus_id, g_device));
    int v = 0; /* NCCL >= 2.9 encodes major·10000 + minor·100 + patch */
    ncclCheck(ncclGetVersion(&v));
    snprintf(g_nccl_version, sizeof g_nccl_version, "NCCL %d.%d.%d", v / 10000, v % 10000 / 100, v % 100);

    /* NCCL bootstrap: rank 0 makes the unique id, MPI carries it to everyone. */
    ncclUniqueId id;
    if (rank == 0) ncclCheck(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        zl_cuda_fatal(__FILE__, __LINE__, "MPI_Bcast(ncclUniqueId)", "MPI error");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    choose_allgather_engine(world, local_size, v, copy_engine_gathers, &cfg);
    ncclComm_t comm = NULL;
    ncclCheckComm(ncclCommInitRankConfig(&comm, world, id, rank, &cfg));
    pthread_mutex_lock(&g_comm_lock);
    g_comm = comm;
    pthread_mutex_unlock(&g_comm_lock);
}

void zl_backend_finalize(void) {
    if (g_comm == NULL) return;
    cudaCheck(cudaDeviceSynchronize()); /* no collective may still be in flight */
    pthread_mutex_lock(&g_comm_lock);
    ncclComm_t comm = g_comm;
    int aborted = g_comm_aborted;
    g_comm = NULL;
    pthread_mutex_unlock(&g_comm_lock);
    if (aborted) zl_wait_for_the_end(); /* the watchdog's abort has it: the job is ending */
    ncclCheckComm(ncclCommDestroy(comm));
}

const char *zl_backend_name(void) { return "cuda"; }
const char *zl_backend_device_name(void) { return g_device_name; }
/* The chosen device's; a program that does not start the backend (bench_gemm_tune, on one GPU)
 * has none chosen and gets CUDA's current device's, or "unknown" if CUDA cannot say. */
const char *zl_backend_device_pci_bus_id(void) {
    int dev = 0;
    if (g_device < 0 && (cudaGetDevice(&dev) != cudaSuccess ||
                         cudaDeviceGetPCIBusId(g_pci_bus_id, (int)sizeof g_pci_bus_id, dev) != cudaSuccess))
        (void)cudaGetLastError(), snprintf(g_pci_bus_id, sizeof g_pci_bus_id, "unknown");
    return g_pci_bus_id;
}
const char *zl_backend_nccl_version(void) { return g_nccl_version; }

/* ncclCommAbort ends this rank's outstanding NCCL kernels. It runs on a helper thread
 * with a 3 s allowance: the watchdog must reach MPI_Abort even if the driver is wedged. */
static atomic_int g_abort_done;
static void *abort_comm(void *arg) {
    ncclComm_t comm = (ncclComm_t)arg;
    ncclCommAbort(comm);
    atomic_store(&g_abort_done, 1);
    return NULL;
}

void zl_backend_abort(void) {
    pthread_mutex_lock(&g_comm_lock);
    ncclComm_t comm = g_comm;
    g_comm_aborted = comm != NULL;
    pthread_mutex_unlock(&g_comm_lock);
    if (comm == NULL) return; /* none yet (or destroyed): MPI_Abort alone ends the job */
    pthread_t t;
    if (pthread_create(&t, NULL, abort_comm, comm)) return;
    pthread_detach(t);
    for (int i = 0; i < 300 && !atomic_load(&g_abort_done); i++) {
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
}

int zl_backend_async_error(char *msg, size_t n) {
    ncclResult_t async = ncclSuccess;
    pthread_mutex_lock(&g_comm_lock); /* not while the main thread creates or destroys it */
    ncclComm_t comm = g_comm;
    int failed = comm != NULL && !g_comm_aborted && ncclCommGetAsyncError(comm, &async) == ncclSuccess &&
                 async != ncclSuccess && async != ncclInProgress;
    if (failed)
        snprintf(msg, n, "NCCL asynchronous error: %s (%s)", ncclGetErrorString(async), ncclGetLastError(comm));
    pthread_mutex_unlock(&g_comm_lock);
    return failed;
}

/* ---- memory -------------------------------------------------------------------------- */

void *zl_dev_alloc(size_t bytes) {
    void *p = NULL;
    /* cudaMalloc(0) "succeeds" with NULL, which the caller would read as out of memory. */
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) { /* the caller names the buffer; this line, the CUDA cause and what is free */
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError(); /* clear it, or the next launch check would report it */
        char free_s[96] = "unknown (the device reports an error)";
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            snprintf(free_s, sizeof free_s, "%.3f GiB free of %.3f (every process on it counted)",
                     free_b / 1073741824.0, total_b / 1073741824.0);
        else
            (void)cudaGetLastError();
        fprintf(stderr, "[zerolab cuda] cudaMalloc(%zu bytes): %s; the device: %s\n", bytes, cudaGetErrorString(e),
                free_s);
        return NULL;
    }
    return p;
}

void zl_dev_free(void *p) {
    if (p) cudaCheck(cudaFree(p));
}

static void require_comm(const char *op); /* collectives, below */

/* The all-gathers' buffers as NCCL symmetric windows where choose_allgather_engine says so
 * (backend.h). A window is registered collectively, so every rank must allocate these buffers
 * in the same order and sizes — which the stages do — and the communicator must exist. */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
enum { MAX_WINDOWS = 64 };
static struct {
    void *ptr;
    ncclWindow_t win;
} g_windows[MAX_WINDOWS];
static int g_n_windows;

/* NCCL 2.28 sets its copy-engine collectives up inside the first one (its log says "Init CE"):
 * 56 ms traced in ZeRO-1's first gather at N = 4, up to 245 ms in a step (4 × H200,
 * docs/performance.md), which would land in step 2, the first timed one. Paid here instead, at
 * set-up, once: an in-place all-gather of up to 1 MiB a rank inside the first window, while its
 * contents are still nothing (the stage fills the buffer after allocating it). Set-up traffic
 * like NCCL's own, so not in the report's collectives (README, ZL_NCCL_WINDOWS). */
static void set_up_copy_engines(void *window, size_t bytes) {
    size_t per_rank = bytes / (size_t)g_world_size;
    if (per_rank > ((size_t)1 << 20)) per_rank = (size_t)1 << 20;
    if (per_rank == 0) return;
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    char *base = window;
    ncclCheckComm(ncclAllGather(base + (size_t)g_rank * per_rank, base, per_rank, ncclInt8, g_comm, s));
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaStreamDestroy(s));
}

/* A communicator without symmetric support (GPUs without direct P2P between them, NCCL_WIN_ENABLE=0,
 * NCCL_CUMEM_ENABLE=0) still takes the registration: NCCL 2.28 hands back its local registration's
 * handle — host memory — or NULL, where a symmetric window is a struct NCCL keeps in device memory
 * (dev_runtime.cc, symWindowCreate). Its all-gathers then run as NCCL's kernels, and the report must
 * say so; test_report holds this against NCCL's own log with NCCL_WIN_ENABLE=0. */
static int window_is_symmetric(ncclWindow_t win) {
    if (win == NULL) return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, (const void *)win) != cudaSuccess) {
        (void)cudaGetLastError(); /* not a pointer CUDA knows: clear the error it left */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice;
}

void *zl_dev_alloc_collective(size_t bytes) {
    if (!g_windows_on || bytes == 0) return zl_dev_alloc(bytes);
    require_comm("zl_dev_alloc_collective");
    if (g_n_windows == MAX_WINDOWS) zl_cuda_fatal(__FILE__, __LINE__, "zl_dev_alloc_collective", "too many windows");
    void *p = NULL;
    if (ncclMemAlloc(&p, bytes) != ncclSuccess) return NULL; /* out of memory: the tracker says so */
    g_windows[g_n_windows].win = NULL;
    ncclCheckComm(ncclCommWindowRegister(g_comm, p, bytes, &g_windows[g_n_windows].win, NCCL_WIN_COLL_SYMMETRIC));
    if (!window_is_symmetric(g_windows[g_n_windows].win)) g_window_declined = 1;
    g_windows[g_n_windows++].ptr = p;
    static int copy_engines_set_up;
    if (g_cta_policy == 2 && !g_window_declined && !copy_engines_set_up)
        set_up_copy_engines(p, bytes), copy_engines_set_up = 1;
    return p;
}

void zl_dev_free_collective(void *p) {
    for (int i = 0; i < g_n_windows; i++) {
        if (g_windows[i].ptr != p) continue;
        ncclCheckComm(ncclCommWindowDeregister(g_comm, g_windows[i].win));
        ncclCheckComm(ncclMemFree(p));
        g_windows[i] = g_windows[--g_n_windows];
        return;
    }
    zl_dev_free(p); /* not a window: none chosen, or zero bytes */
}
#else
void *zl_dev_alloc_collective(size_t bytes) { return zl_dev_alloc(bytes); } /* no windows before NCCL 2.27 */
void zl_dev_free_collective(void *p) { zl_dev_free(p); }
#endif

/* cudaMemcpyDefault: the pointers say where they live (unified addressing), so a "device"
 * buffer that --offload keeps in pinned host memory (the master, Adam m and v, which the
 * checkpoint code reads and writes through these calls) copies correctly too. */
void zl_memcpy_d2h(void *host, const void *dev, size_t bytes, zl_stream s) {
    if (bytes == 0) return;
    cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDefault, as_stream(s)));
    cudaCheck(cudaStreamSynchronize(as_stream(s)));
}

void zl_memcpy_h2d(void *dev, const void *host, size_t bytes, zl_stream s) {
    if (bytes == 0) return;
    cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyDefault, as_stream(s)));
    cudaCheck(cudaStreamSynchronize(as_stream(s)));
}

static int is_host_memory(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* an unregistered host pointer on old runtimes: clear the error */
        return 1;
    }
    return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeUnregistered;
}

/* A buffer --offload keeps on the host (Adam's moments at init or resume) is set there. */
void zl_memset_async(void *dev, int value, size_t bytes, zl_stream s) {
    if (bytes == 0) return;
    if (is_host_memory(dev)) {
        cudaCheck(cudaStreamSynchronize(as_stream(s)));
        memset(dev, value, bytes);
        return;
    }
    cudaCheck(cudaMemsetAsync(dev, value, bytes, as_stream(s)));
}

void *zl_host_alloc_pinned(size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void zl_host_free_pinned(void *p) {
    if (p) cudaCheck(cudaFreeHost(p));
}

void zl_memcpy_d2h_async(void *host, const void *dev, size_t bytes, zl_stream s) {
    if (bytes) cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, as_stream(s)));
}

void zl_memcpy_h2d_async(void *dev, const void *host, size_t bytes, zl_stream s) {
    if (bytes) cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, as_stream(s)));
}

int zl_dev_mem_free(size_t *free_bytes) {
    size_t total_b = 0;
    cudaCheck(cudaMemGetInfo(free_bytes, &total_b));
    return 1;
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

int zl_event_done(zl_event e) {
    /* The watchdog's thread asks, which started before the device was chosen: without this it
     * would query (and make a context on) device 0 */
    if (g_device >= 0 && cudaSetDevice(g_device) != cudaSuccess) return (void)cudaGetLastError(), -1;
    cudaError_t r = cudaEventQuery(as_event(e));
    return r == cudaSuccess ? 1 : r == cudaErrorNotReady ? 0 : -1;
}

void zl_event_sync(zl_event e) { cudaCheck(cudaEventSynchronize(as_event(e))); }

void zl_stream_wait_event(zl_stream s, zl_event e) {
    cudaCheck(cudaStreamWaitEvent(as_stream(s), as_event(e), 0));
}

void zl_stream_launch_host(zl_stream s, void (*fn)(void *), void *arg) {
    cudaCheck(cudaLaunchHostFunc(as_stream(s), fn, arg));
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
