/* pinned_copy.c — pinned host <-> device copy bandwidth, one rank per GPU, the way --offload
 * copies (cudaMemcpyAsync from and to page-locked host memory): each GPU alone, then every
 * GPU of the node at once, which is what N ranks of stage2/stage3 --offload do. A host's
 * PCIe switches, root complexes and memory are shared, so the concurrent figure per GPU can
 * be well below the one-GPU figure; --offload's copies should be judged against it.
 *
 *   mpirun -n 4 build/cuda/bench_pinned_copy [--bytes S] [--reps R] [--split K] [--load-threads T [--load triad|adam]]
 *
 * Each rank takes a GPU as the programs do (kernels/gpu_select.h), allocates S bytes
 * (default 256 MiB) of pinned host memory twice (cudaHostAlloc; its pages are on the NUMA
 * node of the rank's main thread) and two device buffers, and times three directions with
 * the host clock around the copies (MPI_Barrier before every rep, so in the concurrent phase
 * all ranks start together): h2d, d2h, and both at once on two streams (each direction moves
 * S bytes; GB/s is S / the time both took, per direction). Best of R after one warm-up
 * (the loaded phase: the median of R, see GBps).
 * Phase "alone": ranks one after another, the others wait; phase "together": all ranks.
 * Phase "loaded" (--load-threads T, T > 0): all ranks together again, while each rank also
 * loads host memory on T threads of its own: --load triad (the default) runs a STREAM-like
 * triad a[i] = b[i] + s·c[i] over 3 × 256 MiB; --load adam runs host Adam itself
 * (zl_host_adam_update, as --offload does, 32K-element chunks) over 64 Mi elements, 1.75 GiB
 * of master, m, v, gradient and parameter — the DRAM traffic while --offload copies the new
 * parameters up. Host memory bandwidth is shared, so this is the bound for copies that
 * overlap host Adam; with --load adam the same load, not a stand-in for it.
 * --split K (1..4, default 1): each direction's S bytes go as K copies of S/K at once, on K
 * streams — more reads in flight from host memory, which may matter when host Adam makes DRAM
 * slow to answer (a question for the "loaded" phase; --offload copies with one stream).
 * Rank 0 prints one row per rank and phase, GB/s = 1e9 bytes/s, and the node's sum. */
#include <cuda_runtime.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"            /* zl_median, zl_wall_seconds */
#include "kernels/cpu/adam_host.h" /* zl_host_adam_update_threads: --load adam */

#include "gpu_select.h"

#define CUDA_OK(call)                                                                                         \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                     \
        }                                                                                                     \
    } while (0)

enum { H2D, D2H, BOTH, NDIR };

enum { MAX_SPLIT = 4 };

typedef struct {
    void *host_in, *host_out, *dev_in, *dev_out; /* h2d: host_in -> dev_in; d2h: dev_out -> host_out */
    cudaStream_t up[MAX_SPLIT], down[MAX_SPLIT];
    size_t bytes;
    int split; /* copies per direction, at once, each on its own stream */
} buffers;

/* Seconds for one copy in direction d (both: the two at once, until both are done). */
static double time_copy(const buffers *b, int d) {
    MPI_Barrier(MPI_COMM_WORLD); /* together: every rank starts now (alone: the others wait here too) */
    double t0 = MPI_Wtime();
    for (int k = 0; k < b->split; k++) { /* piece k: [k·S/K, (k+1)·S/K) */
        size_t at = b->bytes * (size_t)k / (size_t)b->split, n = b->bytes * (size_t)(k + 1) / (size_t)b->split - at;
        if (d != D2H)
            CUDA_OK(cudaMemcpyAsync((char *)b->dev_in + at, (char *)b->host_in + at, n, cudaMemcpyHostToDevice,
                                    b->up[k]));
        if (d != H2D)
            CUDA_OK(cudaMemcpyAsync((char *)b->host_out + at, (char *)b->dev_out + at, n, cudaMemcpyDeviceToHost,
                                    b->down[k]));
    }
    for (int k = 0; k < b->split; k++) {
        CUDA_OK(cudaStreamSynchronize(b->up[k]));
        CUDA_OK(cudaStreamSynchronize(b->down[k]));
    }
    return MPI_Wtime() - t0;
}

/* GB/s per direction of `reps` timed copies after one warm-up: the best one's (alone, together:
 * what the link can do), or (median) the median one's — the loaded phase's, where the load
 * varies over time (its OpenMP regions end and start again between sweeps) and the best of R
 * would be the copy in the load's quietest moment, not a typical one. `active` says whether
 * this rank copies (alone: only one rank does; the others still join the barriers). */
static double GBps(const buffers *b, int d, int reps, int active, int median) {
    double *t = malloc(sizeof *t * (size_t)reps);
    if (!t) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int r = 0; r < reps + 1; r++) {
        double dt = active ? time_copy(b, d) : (MPI_Barrier(MPI_COMM_WORLD), 1e30);
        if (r > 0) t[r - 1] = dt;
    }
    double pick = t[0]; /* the best: the shortest time */
    if (median) pick = zl_median(t, (size_t)reps);
    else for (int r = 1; r < reps; r++) pick = fmin(pick, t[r]);
    free(t);
    return active ? (double)b->bytes / pick / 1e9 : 0;
}

/* ---- the host-memory load: a triad or host Adam on its own threads until told to stop ------ */
typedef struct {
    int threads, adam;
    atomic_int stop;
    double *a, *b, *c;             /* triad: n doubles each */
    float *master, *m, *v;         /* adam: n floats each */
    zl_half *param;                /* adam: n 16-bit values, the gradient in, the parameter out */
    size_t n;
    double GBps; /* what the load itself moved: whole sweeps' bytes / their time (set when it stops) */
} host_load;

/* One pass of the load over its buffers: host Adam's step `step`, or one triad. */
static void load_sweep(host_load *t, int step) {
    const zl_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
    if (t->adam) { /* as --offload runs it: in place, chunks over the threads */
        zl_host_adam_update_threads(t->master, t->m, t->v, t->param, t->param, t->n, 1.0f, step, hp, t->threads);
        return;
    }
#pragma omp parallel for num_threads(t->threads) schedule(static)
    for (size_t i = 0; i < t->n; i++) t->a[i] = t->b[i] + 3.0 * t->c[i];
}

static void *run_load(void *arg) {
    host_load *t = arg;
    double t0 = zl_wall_seconds(), t_end = t0; /* a monotonic clock: this thread makes no MPI call */
    int sweeps = 0;
    for (int step = 2; !atomic_load(&t->stop); step++, sweeps++, t_end = zl_wall_seconds()) load_sweep(t, step);
    /* bytes per element: host Adam 28 (master, m, v read and written; 16-bit in and out), the triad 24 */
    t->GBps = sweeps ? (double)sweeps * (double)t->n * (t->adam ? 28.0 : 24.0) / (t_end - t0) / 1e9 : 0;
    return NULL;
}

/* The load's buffers, mapped by one untimed sweep on the load's own threads; exits if out of
 * memory. The sweep is needed: the compiler may turn a malloc followed by a loop of zeros into
 * calloc, whose pages stay unmapped until written — the first sweep then faults in 512 MiB and
 * runs ~14x slower than the next (2026-11-26: the loaded phase beside "host Adam" measured a load
 * of 4-5 GB/s, page faults rather than the memory traffic it was meant to add). */
static void load_alloc(host_load *t) {
    int bad = 0;
    if (t->adam) {
        t->n = (size_t)64 << 20;
        t->master = malloc(t->n * 4), t->m = malloc(t->n * 4), t->v = malloc(t->n * 4), t->param = malloc(t->n * 2);
        bad = !t->master || !t->m || !t->v || !t->param;
        for (size_t i = 0; !bad && i < t->n; i++) t->master[i] = 1.0f, t->m[i] = t->v[i] = 0.0f, t->param[i] = 0x2e66;
    } else {
        t->n = ((size_t)256 << 20) / sizeof(double);
        size_t each = t->n * sizeof(double);
        t->a = malloc(each), t->b = malloc(each), t->c = malloc(each);
        bad = !t->a || !t->b || !t->c;
        for (size_t i = 0; !bad && i < t->n; i++) t->a[i] = 0, t->b[i] = 1, t->c[i] = 2;
    }
    if (bad) MPI_Abort(MPI_COMM_WORLD, 1);
    load_sweep(t, 1);
}

static void load_free(host_load *t) {
    free(t->a), free(t->b), free(t->c), free(t->master), free(t->m), free(t->v), free(t->param);
}

static int parse(int argc, char **argv, size_t *bytes, int *reps, int *load_threads, int *adam, int *split) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc) *bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) *reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--load-threads") && i + 1 < argc) *load_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--split") && i + 1 < argc) *split = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--load") && i + 1 < argc && !strcmp(argv[i + 1], "triad")) *adam = 0, i++;
        else if (!strcmp(argv[i], "--load") && i + 1 < argc && !strcmp(argv[i + 1], "adam")) *adam = 1, i++;
        else return 0;
    }
    return *bytes > 0 && *reps > 0 && *load_threads >= 0 && *split >= 1 && *split <= MAX_SPLIT;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world, local_rank, local_size, visible = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    size_t bytes = (size_t)256 << 20;
    int reps = 10, load_threads = 0, adam = 0, split = 1;
    int asked = 0; /* --help: the usage on stdout, exit 0; a bad flag: on stderr, exit 2 */
    for (int i = 1; i < argc; i++) asked |= !strcmp(argv[i], "--help");
    if (asked || !parse(argc, argv, &bytes, &reps, &load_threads, &adam, &split)) {
        if (!rank)
            fprintf(asked ? stdout : stderr,
                    "usage: %s [--bytes S] [--reps R] [--split 1..4] [--load-threads T [--load triad|adam]]   (under "
                    "mpirun, one rank per GPU)\n",
                    argv[0]);
        MPI_Finalize();
        return asked ? 0 : 2;
    }
    char err[256];
    CUDA_OK(cudaGetDeviceCount(&visible));
    int dev = zl_select_device(visible, local_rank, local_size, err, sizeof err);
    if (dev < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    CUDA_OK(cudaSetDevice(dev));
    char bus[64] = "";
    CUDA_OK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
    buffers b = {.bytes = bytes, .split = split};
    CUDA_OK(cudaHostAlloc(&b.host_in, bytes, cudaHostAllocDefault));
    CUDA_OK(cudaHostAlloc(&b.host_out, bytes, cudaHostAllocDefault));
    memset(b.host_in, 1, bytes), memset(b.host_out, 0, bytes); /* touched: no page faults in the timing */
    CUDA_OK(cudaMalloc(&b.dev_in, bytes));
    CUDA_OK(cudaMalloc(&b.dev_out, bytes));
    CUDA_OK(cudaMemset(b.dev_out, 2, bytes));
    for (int k = 0; k < split; k++) {
        CUDA_OK(cudaStreamCreateWithFlags(&b.up[k], cudaStreamNonBlocking));
        CUDA_OK(cudaStreamCreateWithFlags(&b.down[k], cudaStreamNonBlocking));
    }
    CUDA_OK(cudaDeviceSynchronize());

    double mine[3][NDIR] = {{0}}; /* [alone, together, loaded][direction] */
    double load_GBps = 0;          /* what the load moved while the loaded copies ran */
    for (int d = 0; d < NDIR; d++)
        for (int r = 0; r < world; r++) { /* alone: rank r copies, the others wait at the barriers */
            double g = GBps(&b, d, reps, rank == r, 0);
            if (rank == r) mine[0][d] = g;
        }
    for (int d = 0; d < NDIR; d++) mine[1][d] = GBps(&b, d, reps, 1, 0);
    if (load_threads > 0) {
        host_load t = {.threads = load_threads, .adam = adam};
        load_alloc(&t);
        atomic_init(&t.stop, 0);
        pthread_t th;
        if (pthread_create(&th, NULL, run_load, &t)) MPI_Abort(MPI_COMM_WORLD, 1);
        for (int d = 0; d < NDIR; d++) mine[2][d] = GBps(&b, d, reps, 1, 1);
        atomic_store(&t.stop, 1);
        pthread_join(th, NULL);
        load_GBps = t.GBps;
        load_free(&t);
    }

    double *all = rank ? NULL : malloc(sizeof mine * (size_t)world);
    char *buses = rank ? NULL : malloc(sizeof bus * (size_t)world);
    MPI_Gather(mine, 3 * NDIR, MPI_DOUBLE, all, 3 * NDIR, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double *loads = rank ? NULL : malloc(sizeof(double) * (size_t)world);
    MPI_Gather(&load_GBps, 1, MPI_DOUBLE, loads, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(bus, sizeof bus, MPI_CHAR, buses, sizeof bus, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!rank) {
        printf("pinned copies, %zu bytes each (as %d cop%s at once), best of %d (loaded: median), %d rank(s), one GPU "
               "each; GB/s per direction%s\n",
               bytes, split, split > 1 ? "ies" : "y", reps, world,
               load_threads <= 0 ? ""
               : adam           ? "; loaded = together, beside host Adam on --load-threads threads a rank"
                                : "; loaded = together, beside a host triad on --load-threads threads a rank");
        printf("%-4s | %-16s | %-8s | %8s | %8s | %15s\n", "rank", "GPU (PCI)", "phase", "h2d", "d2h",
               "both, each way");
        double sum[NDIR] = {0};
        for (int r = 0; r < world; r++)
            for (int p = 0; p < (load_threads > 0 ? 3 : 2); p++) {
                const double *g = all + (size_t)r * 3 * NDIR + p * NDIR;
                printf("%-4d | %-16s | %-8s | %8.2f | %8.2f | %15.2f\n", r, buses + r * sizeof bus,
                       p == 2 ? "loaded" : p ? "together" : "alone", g[H2D], g[D2H], g[BOTH]);
                for (int d = 0; p == 1 && d < NDIR; d++) sum[d] += g[d];
            }
        printf("node, together: h2d %.2f, d2h %.2f, both %.2f + %.2f GB/s (sum over ranks)\n", sum[H2D], sum[D2H],
               sum[BOTH], sum[BOTH]);
        for (int r = 0; load_threads > 0 && r < world; r++) /* is the load as heavy as training's? */
            printf("load beside the loaded copies, rank %d: %s at %.2f GB/s\n", r, adam ? "host Adam" : "triad", loads[r]);
        /* One line per rank for scripts (scripts/gpu-offload.sh). */
        for (int r = 0; r < world; r++) {
            const double *g = all + (size_t)r * 3 * NDIR;
            printf("summary: world=%d rank=%d bytes=%zu split=%d alone_h2d=%.2f alone_d2h=%.2f alone_both=%.2f "
                   "together_h2d=%.2f together_d2h=%.2f together_both=%.2f",
                   world, r, bytes, split, g[H2D], g[D2H], g[BOTH], g[NDIR + H2D], g[NDIR + D2H], g[NDIR + BOTH]);
            if (load_threads > 0)
                printf(" load=%s load_threads=%d load_GBps=%.2f loaded_h2d=%.2f loaded_d2h=%.2f loaded_both=%.2f",
                       adam ? "adam" : "triad", load_threads, loads[r], g[2 * NDIR + H2D], g[2 * NDIR + D2H],
                       g[2 * NDIR + BOTH]);
            printf("\n");
        }
    }
    free(all), free(buses), free(loads);
    cudaFreeHost(b.host_in), cudaFreeHost(b.host_out), cudaFree(b.dev_in), cudaFree(b.dev_out);
    MPI_Finalize();
    return 0;
}
