/* backend.h — the device a rank runs on: memory, streams, events and collectives.
 *
 * Two implementations link against the same stage programs:
 *   kernels/cpu/backend_cpu.c   host memory, synchronous "streams", MPI collectives
 *   kernels/cuda/backend_cuda.c cudaMalloc, CUDA streams and events, NCCL collectives
 * A stage file only ever calls these functions, so it contains no backend #ifdef.
 *
 * Ordering model (identical on both backends): work issued on one stream runs in
 * issue order; work on two streams is ordered only through events
 * (zl_event_record on the producer, zl_stream_wait_event on the consumer). On CPU
 * every call completes before it returns, so the events are just timestamps. */
#ifndef ZL_BACKEND_H
#define ZL_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t zl_half; /* 16-bit stored value, fp16 or bf16 bits (also in zl_math.h) */
typedef struct zl_stream_s *zl_stream;
typedef struct zl_event_s *zl_event;

/* Element types of collectives (and, ZL_F16 / ZL_BF16, the kernels' storage format). Sums of
 * 16-bit types add in fp32 and round once, on both backends. ZL_NDTYPES sizes tables. */
typedef enum { ZL_F16 = 0, ZL_F32 = 1, ZL_F64 = 2, ZL_BF16 = 3, ZL_NDTYPES = 4 } zl_dtype;

static inline size_t zl_dtype_size(zl_dtype t) { return t == ZL_F16 || t == ZL_BF16 ? 2 : t == ZL_F32 ? 4 : 8; }
static inline const char *zl_dtype_name(zl_dtype t) {
    return t == ZL_F16 ? "fp16" : t == ZL_BF16 ? "bf16" : t == ZL_F32 ? "fp32" : "fp64";
}

/* An integer knob from the environment (the ZL_ knobs, checked with the flags in args.c): 0
 * when `name` is unset or empty, 1 with *value set when it is a non-negative integer in [lo, hi]
 * written plainly (digits only, no sign, space or leading zero: "01" is a typo too), -1
 * otherwise — then the caller stops the run with one line: a typo must not pass unseen. */
static inline int zl_env_int(const char *name, long lo, long hi, long *value) {
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    if (e[0] < '0' || e[0] > '9' || (e[0] == '0' && e[1])) return -1;
    char *end;
    long v = strtol(e, &end, 10);
    if (*end || v < lo || v > hi) return -1;
    *value = v;
    return 1;
}

/* ---- lifetime -------------------------------------------------------------------
 * Called after MPI_Init, by every rank. Picks the device from the node-local rank
 * (kernels/gpu_select.h) and, on CUDA, bootstraps NCCL over MPI_COMM_WORLD. prog (e.g.
 * "stage2", or NULL) names the CPU build to suggest when no GPU is visible: then every
 * rank exits 1 after one line from the lowest such rank. */
void zl_backend_init(int rank, int world, int local_rank, int local_size, const char *prog, int copy_engine_gathers);
/* copy_engine_gathers: the SMs the caller's all-gathers would take are worth more to the GEMMs
 * beside them than the gathers' speed (common/runtime.c says for which stages and N: ZeRO-1/2,
 * whose gathers run well ahead of the work that reads them, and ZeRO-3 at N = 2, where each
 * gather copies from one peer). On CUDA with NCCL >= 2.28, N > 1,
 * every rank on one host and its GPU on NVLink, the all-gathers' buffers are then NCCL
 * symmetric windows under NCCL's zero-CTA policy — the all-gathers run on the copy engines —
 * unless ZL_NCCL_WINDOWS or ZL_NCCL_CTA_POLICY says otherwise. Where the all-gathers run, for
 * the report: "copy_engines", "sm_kernels" (NCCL's kernels), or "mpi" (the CPU backend). */
const char *zl_backend_allgather_engine(void);
/* Before zl_backend_init: the device this rank will take, as a key naming it on its node (CUDA:
 * its PCI bus id), in key[n]; "" where none can be chosen (zl_backend_init then says why). Two
 * equal keys on a node are two ranks on one GPU, which NCCL refuses (common/runtime.c refuses it
 * first, as bad input). The CPU backend has nothing to share: one key per rank — or, under the
 * test hook ZL_TEST_ONE_DEVICE=1, "host" for every rank, as a one-GPU machine would give. */
void zl_backend_device_key(int rank, int local_rank, int local_size, char *key, size_t n);
void zl_backend_finalize(void);
const char *zl_backend_name(void);            /* "cpu" or "cuda" */
/* Called by the watchdog thread before it ends the job: abort the communicator so a
 * hung collective cannot keep the device (ncclCommAbort; nothing on CPU). */
void zl_backend_abort(void);
/* An asynchronous communicator error (ncclCommGetAsyncError) as text: returns 1 and
 * fills msg if there is one, else 0. Safe to call from another thread. */
int zl_backend_async_error(char *msg, size_t n);
const char *zl_backend_device_name(void);     /* e.g. "NVIDIA H100 80GB HBM3" or "host" */
/* e.g. "0000:19:00.0" (cudaDeviceGetPCIBusId; before zl_backend_init, CUDA's current device's), or "cpu" */
const char *zl_backend_device_pci_bus_id(void);
/* The collective library's version, e.g. "NCCL 2.21.5" (ncclGetVersion); NULL on CPU, where
 * the MPI library (MPI_Get_library_version) is the collective library. */
const char *zl_backend_nccl_version(void);

/* ---- clocks ---------------------------------------------------------------------
 * What the device runs at now. A busy GPU runs below its highest clock when its power or
 * temperature limit holds it down, and then its GEMMs do too: the report prints what each
 * rank's GPU held through the timed steps (common/clocks.h). */
typedef struct {
    double sm_mhz, power_w, power_limit_w, temp_c; /* SM clock, board power and its enforced limit, GPU die */
    unsigned long long reasons; /* why the clock is below its highest: NVML's clock-event bits (0x4: power cap) */
    double energy_j; /* the board's energy counter, J since the driver loaded; < 0 where the device keeps none */
    double t_s;      /* when it was read, s on a monotonic clock: the counter moves only every so often
                      * (every 100 ms on H100 and H200), so clocks.c times its moves */
} zl_clock_reading;
/* One reading: 0, or -1 with why[n] (the CPU backend: no GPU; CUDA: NVML missing or failing).
 * CUDA reads NVML (libnvidia-ml.so.1, opened on the first call). One thread at a time. */
int zl_backend_clock_read(zl_clock_reading *r, char *why, size_t n);

/* ---- memory ---------------------------------------------------------------------
 * Raw device allocation. Stage code never calls these directly: it goes through the
 * tracked allocator (common/alloc.h), which records every byte by category. */
void *zl_dev_alloc(size_t bytes); /* NULL on failure */
void zl_dev_free(void *p);
/* The same for the buffers all-gathers read and write (alloc.h: params_fp16, param_gather).
 * On CUDA with ZL_NCCL_WINDOWS=1 they are NCCL symmetric windows (ncclMemAlloc, then
 * ncclCommWindowRegister on every rank: allocate them in the same order and sizes
 * everywhere, as the stages do), which with ZL_NCCL_CTA_POLICY=2 (NCCL's zero-CTA policy)
 * lets NCCL run the all-gathers on the copy engines instead of the SMs — a lever for the
 * GEMMs they overlap (docs/performance.md); otherwise, and on the CPU, zl_dev_alloc. */
void *zl_dev_alloc_collective(size_t bytes);
void zl_dev_free_collective(void *p);
void zl_memcpy_d2h(void *host, const void *dev, size_t bytes, zl_stream s); /* returns when done */
void zl_memcpy_h2d(void *dev, const void *host, size_t bytes, zl_stream s); /* returns when done */
void zl_memset_async(void *dev, int value, size_t bytes, zl_stream s);
/* Device-level memory in use (total - free), from cudaMemGetInfo on CUDA.
 * Returns 0 and sets *used = 0 where the backend cannot tell (CPU, unless ZL_CPU_DEVICE_BYTES
 * gives it a pretend device: kernels/cpu/backend_cpu.c). */
int zl_dev_mem_used(size_t *used, size_t *total);
/* Device memory free now (cudaMemGetInfo). Returns 0 where device memory is host
 * memory (CPU): the preflight then counts device buffers against the host
 * (ZL_CPU_DEVICE_BYTES, a test hook, makes the CPU backend report a device of that size). */
int zl_dev_mem_free(size_t *free_bytes);

/* ---- host memory for offload ---------------------------------------------------------
 * Pinned (page-locked) host memory, which the copy engines read and write directly, so
 * the async copies below really overlap compute (cudaMallocHost; malloc on CPU). NULL on
 * failure. The copies return at once on CUDA (done when an event recorded after them on s
 * is); host must stay untouched until then. On CPU they are plain memcpys. */
void *zl_host_alloc_pinned(size_t bytes);
void zl_host_free_pinned(void *p);
void zl_memcpy_d2h_async(void *host, const void *dev, size_t bytes, zl_stream s);
void zl_memcpy_h2d_async(void *dev, const void *host, size_t bytes, zl_stream s);

/* ---- streams and events ---------------------------------------------------------- */
zl_stream zl_stream_create(void);
void zl_stream_destroy(zl_stream s);
void zl_stream_sync(zl_stream s);
zl_event zl_event_create(void);
void zl_event_destroy(zl_event e);
void zl_event_record(zl_event e, zl_stream s);
void zl_stream_wait_event(zl_stream s, zl_event e);
float zl_event_elapsed_ms(zl_event start, zl_event end); /* both must have completed */
/* 1 if the work before the event has completed, 0 if not yet, -1 if the device reports an
 * error — returned, not raised: the watchdog's thread asks, after the job began to end, when a
 * fatal error would wait for that end forever (never blocks) */
int zl_event_done(zl_event e);
void zl_event_sync(zl_event e); /* the host waits until the work before the event has completed */
/* Run fn(arg) on a host thread once the work issued before it on s is done; s's later work
 * waits for fn to return (CUDA: cudaLaunchHostFunc; fn must not call the backend). On CPU:
 * runs now, on the caller's thread. */
void zl_stream_launch_host(zl_stream s, void (*fn)(void *), void *arg);

/* ---- collectives (sum reductions), issued on stream s -----------------------------
 * Counts are elements. In-place forms follow NCCL's rules:
 *   reduce-scatter: recv == send + rank*recv_count
 *   all-gather:     send == recv + rank*send_count
 * Raw calls: use common/comm.h, which records op, bytes and time for the report. */
void zl_backend_allreduce(void *buf, size_t count, zl_dtype t, zl_stream s);
void zl_backend_reduce_scatter(const void *send, void *recv, size_t recv_count, zl_dtype t, zl_stream s);
void zl_backend_allgather(const void *send, void *recv, size_t send_count, zl_dtype t, zl_stream s);

#ifdef __cplusplus
}
#endif
#endif
