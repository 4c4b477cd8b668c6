/* runtime.c — see runtime.h. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "runtime.h"

#include <errno.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"   /* zl_mem_free_all */
#include "comm.h"    /* zl_comm_finalize */
#include "events.h"  /* zl_events_destroy_all */
#include "offload.h" /* zl_offload_threads */
#include "outputs.h"
#include "../kernels/backend.h" /* zl_backend_device_key, zl_backend_init */
#include "../kernels/gpu_select.h" /* zl_find_shared_device */
#include "../kernels/kernels.h" /* zl_kernels_set_dtype */
#include "trace.h"
#include "util.h"
#include "watchdog.h"

static const char *const prog_names[4] = {"stage0_ddp", "stage1", "stage2", "stage3"};

void zl_runtime_refuse_if_any(zl_runtime *rt, int bad, const char *err) {
    int first_bad = bad ? rt->rank : rt->world;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first_bad == rt->world) return;
    if (rt->rank == first_bad) fprintf(stderr, "%s: %s\n", rt->prog, err);
    zl_runtime_exit(rt, ZL_EXIT_INPUT);
}

/* Every rank reaches the same verdict: the lowest rank with a bad flag prints its one
 * line; if all flags parsed but differ between ranks, rank 0 says so. Exit code 2. */
static void agree_on_arguments(zl_runtime *rt, int status, const char *err) {
    zl_runtime_refuse_if_any(rt, status == ZL_ARGS_ERROR, err);
    /* --help given to some ranks only (an MPMD launch) must not leave the others waiting. */
    int help = status == ZL_ARGS_HELP;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &help, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (help) {
        int lost = 0; /* the usage is the result here: lost on the way to stdout (a full disk), exit 1 */
        if (rt->rank == 0) zl_args_usage(rt->prog, rt->cfg.stage), lost = fflush(stdout) || ferror(stdout);
        if (lost) fprintf(stderr, "%s: --help: writing to stdout failed\n", rt->prog);
        MPI_Finalize();
        exit(lost ? ZL_EXIT_RUNTIME : ZL_EXIT_OK);
    }
    uint64_t h = zl_args_hash(&rt->cfg), lo = h, hi = h;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
    if (lo != hi) {
        if (rt->rank == 0)
            fprintf(stderr,
                    "%s: ranks were launched with different arguments (argument hash differs across %d ranks); "
                    "every rank must get the same flags and ZL_ knobs\n",
                    rt->prog, rt->world);
        MPI_Finalize();
        exit(ZL_EXIT_INPUT);
    }
}

/* Two ranks of a node on one GPU — each sees exactly one device, the same one: mpiexec -n 2 on a
 * one-GPU machine, CUDA_VISIBLE_DEVICES=0 for every rank. NCCL would refuse it deep in its set-up,
 * a runtime error (exit 1); it is a launch mistake, so it is refused here: exit 2, one line,
 * before any buffer. The ranks of the node compare the keys of the devices they will take. */
static void refuse_a_shared_device(zl_runtime *rt, MPI_Comm local) {
    enum { KEY = 64 };
    char mine[KEY] = "", err[384] = "";
    zl_backend_device_key(rt->rank, rt->local_rank, rt->local_size, mine, sizeof mine);
    char *keys = zl_host_calloc((size_t)rt->local_size, KEY);
    int *ranks = zl_host_calloc((size_t)rt->local_size, sizeof *ranks);
    mpiCheck(MPI_Allgather(mine, KEY, MPI_CHAR, keys, KEY, MPI_CHAR, local));
    mpiCheck(MPI_Allgather(&rt->rank, 1, MPI_INT, ranks, 1, MPI_INT, local));
    int i, j, shared = zl_find_shared_device(keys, KEY, rt->local_size, &i, &j);
    if (shared)
        snprintf(err, sizeof err,
                 "ranks %d and %d on this node would both use device %s (NCCL takes one rank per GPU): launch "
                 "at most as many ranks per node as it has GPUs, each with its own (e.g. srun --gpus-per-task=1)",
                 ranks[i], ranks[j], keys + (size_t)i * KEY);
    free(keys), free(ranks);
    zl_runtime_refuse_if_any(rt, shared, err);
}

/* Host Adam's threads (--offload): the ranks of the node compare their CPU affinity masks, so
 * that a CPU is divided among the ranks that share it and only those (a launcher that gave
 * each rank CPUs of its own has divided them already). A rank held to fewer than its even
 * share of the node's CPUs is named on stderr. */
static void share_cpus(zl_runtime *rt, MPI_Comm local) {
    /* The mask sized for the machine, not cpu_set_t's fixed 1024 CPUs: on a larger one
     * sched_getaffinity refuses a smaller buffer (EINVAL), so it doubles until the kernel's fits. */
    long online = sysconf(_SC_NPROCESSORS_ONLN), conf = sysconf(_SC_NPROCESSORS_CONF);
    int ncpu = conf > CPU_SETSIZE ? (int)conf : CPU_SETSIZE, known = 0, allowed = 0;
    cpu_set_t *set = NULL;
    for (; ncpu <= (1 << 22); ncpu *= 2) {
        set = CPU_ALLOC(ncpu);
        if (!set) zl_fatal("out of host memory for a CPU mask of %d CPUs", ncpu);
        if (!sched_getaffinity(0, CPU_ALLOC_SIZE(ncpu), set)) { known = 1; break; }
        int e = errno; /* before free, which may change it */
        CPU_FREE(set), set = NULL;
        if (e != EINVAL) break;
    }
    if (!known) ncpu = online > 0 ? (int)online : 1; /* unknown: every CPU the node has */
    int bytes = (ncpu + 7) / 8, most;
    mpiCheck(MPI_Allreduce(&bytes, &most, 1, MPI_INT, MPI_MAX, local)); /* one size for the exchange */
    unsigned char *mine = zl_host_calloc((size_t)most, 1);
    for (int c = 0; c < ncpu; c++)
        if (known ? CPU_ISSET_S(c, CPU_ALLOC_SIZE(ncpu), set) : c < online)
            mine[c / 8] |= (unsigned char)(1u << (c % 8)), allowed++;
    if (set) CPU_FREE(set);
    unsigned char *masks = zl_host_calloc((size_t)rt->local_size, (size_t)most);
    mpiCheck(MPI_Allgather(mine, most, MPI_BYTE, masks, most, MPI_BYTE, local));
    rt->host_threads = zl_offload_threads(masks, (size_t)most, rt->local_size, rt->local_rank);
    free(masks), free(mine);
    if (online > 0 && rt->host_threads < online / rt->local_size)
        fprintf(stderr, "zerolab: warning: host Adam gets %d thread(s): this rank may use %d of the node's %ld CPUs "
                        "(its CPU affinity; e.g. mpirun --bind-to none)\n", rt->host_threads, allowed, online);
}

/* A launcher that started N processes while MPI_COMM_WORLD holds fewer: the mpiexec does not
 * speak the MPI library's start-up protocol, and each process runs alone — N one-rank jobs, each
 * printing a report as if all were well. Hydra (MPICH's mpiexec) and Slurm's PMI set PMI_SIZE,
 * Open MPI's launcher OMPI_COMM_WORLD_SIZE. Seen with Ubuntu 24.04's MPICH package, built against
 * PMIx, which its own mpiexec does not speak (Launchpad bug 2072338). */
static void refuse_a_foreign_launcher(const zl_runtime *rt) {
    static const char *const vars[] = {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        long n = v ? strtol(v, NULL, 10) : 0;
        if (n <= rt->world) continue;
        fprintf(stderr, "%s: the launcher started %ld processes (%s=%s) but MPI_COMM_WORLD has %d: the mpiexec does "
                "not match the MPI library this program was built with (use the mpiexec beside mpicc; Ubuntu 24.04's "
                "mpich package has none that works: use Open MPI)\n", rt->prog, n, vars[i], v, rt->world);
        fflush(stderr);
        MPI_Finalize();
        exit(ZL_EXIT_INPUT);
    }
}

void zl_runtime_start(zl_runtime *rt, int stage, int argc, char **argv) {
    memset(rt, 0, sizeof *rt);
    rt->prog = prog_names[stage];
    /* The watchdog thread may call MPI_Abort while the main thread is inside MPI. */
    int provided;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "%s: MPI_Init failed\n", rt->prog);
        exit(ZL_EXIT_RUNTIME);
    }
    /* Return codes instead of MPI's default abort-without-context: mpiCheck adds file:line. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rt->argc = argc, rt->argv = argv; /* after MPI_Init, which may remove its own arguments */
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &rt->rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &rt->world));
    refuse_a_foreign_launcher(rt);

    char err[512];
    int status = zl_args_parse(&rt->cfg, stage, argc, argv, err, sizeof err);
    agree_on_arguments(rt, status, err);
    if (rt->rank == 0) zl_args_warn_unknown_knobs(rt->prog);
    if (provided < MPI_THREAD_MULTIPLE && rt->rank == 0) /* said, not refused: most runs never need it */
        fprintf(stderr, "%s: warning: this MPI library grants thread level %d, not MPI_THREAD_MULTIPLE (%d): the "
                "watchdog's MPI_Abort, from its own thread, may not end a hung job\n", rt->prog, provided,
                MPI_THREAD_MULTIPLE);
    zl_outputs_open(rt);
    zl_watchdog_start(rt->prog, rt->rank, rt->cfg.timeout_s);

    /* Node-local rank picks the GPU: ranks sharing memory share a node. */
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &rt->local_rank));
    mpiCheck(MPI_Comm_size(local, &rt->local_size));
    refuse_a_shared_device(rt, local);
    if (rt->cfg.offload) share_cpus(rt, local); /* every rank agreed on the flags: all or none exchange */
    mpiCheck(MPI_Comm_free(&local));
    /* ZeRO-1/2 gather each unit's new fp16 parameters at the start of the next step, beside the
     * forward of earlier units (stage1.c): no GEMM waits for a gather while it runs, so the SMs it
     * would take are worth more to the GEMMs than its speed — on CUDA it runs on the copy engines
     * where it can (backend.h). ZeRO-3's gathers are on the critical path, each just before its
     * unit's use: there a copy-engine gather from three peers was slower than NCCL's kernels (N = 4:
     * lab-1b +0.3 to +0.7 %, the 7.5 B fill model +6 to +8 %), one from a single peer faster (N = 2:
     * lab-1b -1.4 %, fill -8 %; H200, docs/performance.md), so ZeRO-3 asks at N = 2 only. DDP
     * gathers nothing. */
    int copy_engine_gathers = stage == 1 || stage == 2 || (stage == 3 && rt->world == 2);
    zl_backend_init(rt->rank, rt->world, rt->local_rank, rt->local_size, rt->prog, copy_engine_gathers);
    zl_mem_init_collective(zl_dev_alloc_collective, zl_dev_free_collective); /* backend.h: the all-gathers' buffers */
    if (zl_kernels_set_dtype(rt->cfg.dtype)) zl_fatal("--dtype %s: not a 16-bit storage format", zl_dtype_name(rt->cfg.dtype));
    zl_trace_setup(rt->cfg.steps, rt->cfg.trace_path[0] != '\0', rt->world); /* creates an event: after the backend */
}

/* TEST ONLY: ZL_TEST_HOLD_FINALIZE=r:ms holds rank r for ms just before MPI_Finalize, with the
 * watchdog already watching the finalize: a test can then stop that rank there in time. Without
 * it, under MPICH rank 1 leaves MPI_Finalize before the launcher forwards rank 0's last line. */
static void hold_before_finalize(int rank) {
    int ms = zl_test_hold_ms("ZL_TEST_HOLD_FINALIZE", rank);
    if (ms) usleep((useconds_t)ms * 1000);
}

int zl_runtime_finish(zl_runtime *rt, int status) {
    zl_progress_in("shutting down"); /* the watchdog: "... while shutting down" */
    zl_mem_free_all();       /* what the common modules still hold: buffers, */
    zl_comm_finalize();      /* the collectives' log, */
    zl_events_destroy_all(); /* the stage's event arrays */
    zl_trace_finalize(); /* its events, before the device goes */
    zl_watchdog_finalizing(); /* a rank stopped now would hold MPI_Finalize for ever */
    zl_backend_finalize();
    hold_before_finalize(rt->rank);
    MPI_Finalize();
    zl_watchdog_stop();
    return status;
}

void zl_runtime_exit(zl_runtime *rt, int code) {
    (void)rt;
    fflush(stdout);
    fflush(stderr);
    zl_trace_finalize();
    zl_watchdog_finalizing();
    zl_backend_finalize();
    MPI_Finalize();
    zl_watchdog_stop();
    exit(code);
}

void zl_digest_begin(zl_param_digest *d, const zl_runtime *rt) {
    d->hash = ZL_FNV_OFFSET;
    d->dump = NULL;
    (void)rt;
    d->dump = zl_output_begin(ZL_OUT_DUMP); /* opened at start-up; NULL unless requested on this rank */
}

void zl_digest_unit(zl_param_digest *d, const zl_half *dev_unit, size_t n, zl_half *host_staging, zl_stream s) {
    zl_memcpy_d2h(host_staging, dev_unit, n * sizeof(zl_half), s);
    /* Hash the values' little-endian bytes so the digest is the same on any host. */
    for (size_t i = 0; i < n; i++) {
        unsigned char b[2] = {(unsigned char)(host_staging[i] & 0xff), (unsigned char)(host_staging[i] >> 8)};
        d->hash = zl_fnv1a(d->hash, b, 2);
    }
    /* A failed write is remembered, not fatal: the report still gets printed (outputs.h). */
    if (d->dump && fwrite(host_staging, sizeof(zl_half), n, d->dump) != n) zl_output_failed(ZL_OUT_DUMP, errno);
}

uint64_t zl_digest_end(zl_param_digest *d) {
    if (d->dump && fflush(d->dump)) zl_output_failed(ZL_OUT_DUMP, errno);
    d->dump = NULL;
    return d->hash;
}
