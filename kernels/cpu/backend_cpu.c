/* backend_cpu.c — the CPU backend: host memory, synchronous streams, MPI collectives.
 *
 * Every call completes before it returns, so a "stream" is only a token and an
 * event is a timestamp taken when it is recorded. fp16 and bf16 sums go through user-defined
 * MPI_Ops that add in fp32 and round once (what NCCL's half and bfloat16 sums do too).
 *
 * Collectives are issued non-blocking and waited for politely: MPICH's blocking calls
 * busy-poll, so a rank waiting for a stopped peer burns 100% of a core forever, and
 * with more ranks than cores the pollers steal the cycles the working ranks need.
 * wait_politely() polls with MPI_Test for ~50 µs, then sleeps between polls (backing
 * off to 1 ms); measured on 2 cores, 4 ranks: see README "Watchdog". */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/util.h"
#include "../backend.h"
#include "../zl_math.h"

struct zl_stream_s {
    int id;
};
struct zl_event_s {
    double t;
};

static int g_rank, g_world;
static MPI_Op g_half_sum = MPI_OP_NULL, g_bf16_sum = MPI_OP_NULL;

/* MPI_User_function: inout[i] = fp16(float(in[i]) + float(inout[i])). */
static void half_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const zl_half *a = in;
    zl_half *b = inout;
    for (int i = 0; i < *len; i++) b[i] = zl_float_to_half(zl_half_to_float(a[i]) + zl_half_to_float(b[i]));
}

/* MPI_User_function: inout[i] = bf16(float(in[i]) + float(inout[i])). */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const zl_half *a = in;
    zl_half *b = inout;
    for (int i = 0; i < *len; i++) b[i] = zl_float_to_bf16(zl_bf16_to_float(a[i]) + zl_bf16_to_float(b[i]));
}

void zl_backend_init(int rank, int world, int local_rank, int local_size, const char *prog, int copy_engine_gathers) {
    (void)local_rank, (void)local_size, (void)prog, (void)copy_engine_gathers; /* MPI's all-gathers run on the host */
    g_rank = rank, g_world = world;
    mpiCheck(MPI_Op_create(half_sum, 1, &g_half_sum));
    mpiCheck(MPI_Op_create(bf16_sum, 1, &g_bf16_sum));
}

void zl_backend_device_key(int rank, int local_rank, int local_size, char *key, size_t n) {
    (void)local_rank, (void)local_size;
    const char *one = getenv("ZL_TEST_ONE_DEVICE"); /* TEST ONLY: every rank on one device */
    if (one && !strcmp(one, "1"))
        snprintf(key, n, "host");
    else
        snprintf(key, n, "cpu rank %d", rank);
}

void zl_backend_finalize(void) {
    if (g_half_sum != MPI_OP_NULL) MPI_Op_free(&g_half_sum);
    if (g_bf16_sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_sum);
}

const char *zl_backend_name(void) { return "cpu"; }
const char *zl_backend_device_name(void) { return "host"; }
const char *zl_backend_device_pci_bus_id(void) { return "cpu"; }
const char *zl_backend_nccl_version(void) { return NULL; }
const char *zl_backend_allgather_engine(void) { return "mpi"; }
/* TEST ONLY: ZL_TEST_CLOCKS=1 reads a known sequence, so the reader thread, its summary and the
 * report's clock line run without a GPU: reading k has SM 1400 + 15·(k mod 5) MHz, 690 W of 700,
 * the power cap on even k, and an energy counter at 13.8·k J read at 0.020·k s (690 W). */
int zl_backend_clock_read(zl_clock_reading *r, char *why, size_t n) {
    static int k;
    const char *test = getenv("ZL_TEST_CLOCKS");
    if (test && !strcmp(test, "1")) {
        *r = (zl_clock_reading){.sm_mhz = 1400 + 15 * (k % 5), .power_w = 690, .power_limit_w = 700, .temp_c = 50,
                                .reasons = k % 2 ? 0 : 0x4, .energy_j = 13.8 * k, .t_s = 0.020 * k};
        k++;
        return 0;
    }
    snprintf(why, n, "the CPU backend has no GPU clocks");
    return -1;
}
void zl_backend_abort(void) {}
int zl_backend_async_error(char *msg, size_t n) {
    (void)msg, (void)n;
    return 0;
}

/* TEST ONLY: ZL_CPU_DEVICE_BYTES=B makes this backend act as a device of B bytes: device
 * buffers count against B (one past it fails, as cudaMalloc does: out of memory, exit 1), and
 * zl_dev_mem_free / zl_dev_mem_used report it, so the preflight checks it as it checks a GPU.
 * The fits / refused / out-of-memory paths of scripts/gpu-table2.sh then run on CI. */
enum { FAKE_HEADER = 16 }; /* keeps malloc's 16-byte alignment */
static size_t fake_used;
static size_t fake_device_bytes(void) {
    static int read;
    static size_t limit;
    if (!read) {
        const char *e = getenv("ZL_CPU_DEVICE_BYTES");
        limit = e && *e ? (size_t)strtod(e, NULL) : 0;
        read = 1;
    }
    return limit;
}

void *zl_dev_alloc(size_t bytes) {
    size_t limit = fake_device_bytes();
    if (!limit) return malloc(bytes);
    if (bytes > limit - fake_used) return NULL;
    char *p = malloc(bytes + FAKE_HEADER);
    if (!p) return NULL;
    memcpy(p, &bytes, sizeof bytes);
    fake_used += bytes;
    return p + FAKE_HEADER;
}
void *zl_dev_alloc_collective(size_t bytes) { return zl_dev_alloc(bytes); } /* one kind of memory here */
void zl_dev_free_collective(void *p) { zl_dev_free(p); }
void zl_dev_free(void *p) {
    if (!fake_device_bytes() || !p) {
        free(p);
        return;
    }
    size_t bytes;
    memcpy(&bytes, (char *)p - FAKE_HEADER, sizeof bytes);
    fake_used -= bytes;
    free((char *)p - FAKE_HEADER);
}
void zl_memcpy_d2h(void *host, const void *dev, size_t bytes, zl_stream s) { (void)s, memcpy(host, dev, bytes); }
void zl_memcpy_h2d(void *dev, const void *host, size_t bytes, zl_stream s) { (void)s, memcpy(dev, host, bytes); }
void zl_memset_async(void *dev, int value, size_t bytes, zl_stream s) { (void)s, memset(dev, value, bytes); }
void *zl_host_alloc_pinned(size_t bytes) { return malloc(bytes); }
void zl_host_free_pinned(void *p) { free(p); }
void zl_memcpy_d2h_async(void *host, const void *dev, size_t bytes, zl_stream s) { (void)s, memcpy(host, dev, bytes); }
void zl_memcpy_h2d_async(void *dev, const void *host, size_t bytes, zl_stream s) { (void)s, memcpy(dev, host, bytes); }
int zl_dev_mem_used(size_t *used, size_t *total) {
    *used = fake_used, *total = fake_device_bytes();
    return *total > 0; /* a device only under ZL_CPU_DEVICE_BYTES */
}
int zl_dev_mem_free(size_t *free_bytes) {
    *free_bytes = fake_device_bytes() - fake_used;
    return fake_device_bytes() > 0;
}

zl_stream zl_stream_create(void) {
    zl_stream s = malloc(sizeof *s);
    if (!s) zl_fatal("out of host memory creating a stream");
    s->id = 0;
    return s;
}
void zl_stream_destroy(zl_stream s) { free(s); }
void zl_stream_sync(zl_stream s) { (void)s; }
zl_event zl_event_create(void) {
    zl_event e = calloc(1, sizeof *e);
    if (!e) zl_fatal("out of host memory creating an event");
    return e;
}
void zl_event_destroy(zl_event e) { free(e); }
void zl_event_record(zl_event e, zl_stream s) { (void)s, e->t = zl_wall_seconds(); }
void zl_stream_wait_event(zl_stream s, zl_event e) { (void)s, (void)e; }
void zl_stream_launch_host(zl_stream s, void (*fn)(void *), void *arg) {
    (void)s;
    fn(arg);
}
float zl_event_elapsed_ms(zl_event a, zl_event b) { return (float)((b->t - a->t) * 1e3); }
int zl_event_done(zl_event e) { return (void)e, 1; }
void zl_event_sync(zl_event e) { (void)e; }

/* Spin briefly (small collectives finish in microseconds), then sleep between polls. */
static void wait_politely(MPI_Request *req) {
    int done = 0;
    double t0 = zl_wall_seconds();
    long nap_ns = 2000;
    for (;;) {
        mpiCheck(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (zl_wall_seconds() - t0 < 50e-6) continue;
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 1000000) nap_ns *= 2;
    }
}

static MPI_Datatype mpi_type(zl_dtype t) {
    return t == ZL_F16 || t == ZL_BF16 ? MPI_UINT16_T : t == ZL_F32 ? MPI_FLOAT : MPI_DOUBLE;
}
static MPI_Op mpi_sum(zl_dtype t) { return t == ZL_F16 ? g_half_sum : t == ZL_BF16 ? g_bf16_sum : MPI_SUM; }

/* MPI counts are int: split large all-reduces into chunks. */
void zl_backend_allreduce(void *buf, size_t count, zl_dtype t, zl_stream s) {
    (void)s;
    const size_t chunk = (size_t)1 << 30;
    for (size_t done = 0; done < count; done += chunk) {
        size_t n = count - done < chunk ? count - done : chunk;
        MPI_Request req;
        mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + done * zl_dtype_size(t), (int)n, mpi_type(t), mpi_sum(t),
                                MPI_COMM_WORLD, &req));
        wait_politely(&req);
    }
}

void zl_backend_reduce_scatter(const void *send, void *recv, size_t recv_count, zl_dtype t, zl_stream s) {
    (void)s;
    if (recv_count > INT_MAX / 2) zl_fatal("reduce-scatter of %zu elements per rank exceeds MPI's int count", recv_count);
    size_t esz = zl_dtype_size(t);
    MPI_Request req;
    if ((const char *)recv == (const char *)send + (size_t)g_rank * recv_count * esz) {
        /* NCCL's in-place form (our slice stays where it is). MPI's in-place form leaves
         * the result at the start of the buffer instead, so move it into our slot; the
         * other slots hold no meaningful data afterwards on either backend. */
        void *full = (void *)send;
        mpiCheck(MPI_Ireduce_scatter_block(MPI_IN_PLACE, full, (int)recv_count, mpi_type(t), mpi_sum(t),
                                           MPI_COMM_WORLD, &req));
        wait_politely(&req);
        if (g_rank) memmove(recv, full, recv_count * esz);
    } else {
        mpiCheck(MPI_Ireduce_scatter_block(send, recv, (int)recv_count, mpi_type(t), mpi_sum(t), MPI_COMM_WORLD, &req));
        wait_politely(&req);
    }
}

void zl_backend_allgather(const void *send, void *recv, size_t send_count, zl_dtype t, zl_stream s) {
    (void)s;
    if (send_count > INT_MAX / 2) zl_fatal("all-gather of %zu elements per rank exceeds MPI's int count", send_count);
    size_t esz = zl_dtype_size(t);
    MPI_Request req;
    if ((const char *)send == (const char *)recv + (size_t)g_rank * send_count * esz)
        mpiCheck(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)send_count, mpi_type(t), MPI_COMM_WORLD,
                                &req));
    else
        mpiCheck(MPI_Iallgather(send, (int)send_count, mpi_type(t), recv, (int)send_count, mpi_type(t),
                                MPI_COMM_WORLD, &req));
    wait_politely(&req);
}
