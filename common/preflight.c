/* preflight.c — needed vs free, before allocation (see preflight.h). */
#define _POSIX_C_SOURCE 200809L
#include "preflight.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "ckpt.h"
#include "util.h"
#include "../model/model.h"

static const char *const prog_of_stage[4] = {"stage0_ddp", "stage1", "stage2", "stage3"};

size_t zl_host_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

/* Bytes one rank allocates: on its device, and on the host (where CPU "device" buffers live too). */
typedef struct {
    double device, host, states, activations, buffers;
} need;

static need need_of(const zl_partition *p, const zl_formula_config *fc, int on_gpu) {
    zl_mem_formula mf;
    zl_formula_memory(p, fc, &mf);
    need n = {0};
    n.states = (double)mf.model_states;
    n.activations = (double)mf.bytes[ZL_MEM_ACTIVATIONS];
    n.buffers = (double)mf.peak_total - n.states - n.activations;
    n.device = on_gpu ? (double)mf.peak_total : 0;
    double host_buffers = 0; /* staging, and --offload's master, m, v and pinned staging */
    for (int c = 0; c < ZL_MEM_NCAT; c++)
        if (zl_mem_cat_is_host((zl_mem_cat)c)) host_buffers += (double)mf.bytes[c];
    n.host = host_buffers + (on_gpu ? 0 : (double)mf.peak_total);
    return n;
}

/* Does one rank's need fit in its share: the whole GPU, or 1/local_ranks of the node's host memory? */
static int fits(need n, int local_ranks, size_t dev_free, size_t host_avail) {
    int dev_ok = dev_free == 0 || n.device <= (double)dev_free;
    int host_ok = host_avail == 0 || n.host * local_ranks <= (double)host_avail;
    return dev_ok && host_ok;
}

static need need_at(const zl_formula_config *fc, int stage, int world, int on_gpu, int *ok) {
    zl_partition p;
    zl_formula_config c = *fc;
    c.stage = stage;
    if (stage == 3 && fc->stage != 3) c.prefetch = zl_model_n_uses(fc->model) > 1 ? 1 : 0; /* its default */
    *ok = zl_model_partition(&p, fc->model, world) == 0;
    need n = *ok ? need_of(&p, &c, on_gpu) : (need){0};
    zl_partition_free(&p);
    return n;
}

/* Smallest N > world at which this stage fits (0 if none up to 2^20): doubling, then
 * bisection (the need falls with N, up to padding of a few elements per unit). */
static int smallest_world(const zl_formula_config *fc, int stage, int world, int on_gpu, int local, size_t dev_free,
                          size_t host_avail) {
    if (stage == 0) return 0; /* DDP replicates everything: more ranks never help */
    int lo = world, hi = world, ok;
    do {
        if (hi >= (1 << 20)) return 0;
        lo = hi, hi *= 2;
    } while (!fits(need_at(fc, stage, hi, on_gpu, &ok), local, dev_free, host_avail) || !ok);
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fits(need_at(fc, stage, mid, on_gpu, &ok), local, dev_free, host_avail) && ok) hi = mid;
        else lo = mid;
    }
    return hi;
}

static double gb(double bytes) { return bytes / 1e9; }

int zl_preflight_verdict(const zl_partition *part, const zl_formula_config *fc, int on_gpu, int local_ranks,
                         size_t dev_free, size_t host_avail, char *msg, size_t n) {
    msg[0] = '\0';
    need mine = need_of(part, fc, on_gpu);
    if (fits(mine, local_ranks, dev_free, host_avail)) return 0;
    const char *prog = prog_of_stage[fc->stage];
    int dev_short = dev_free && mine.device > (double)dev_free;
    size_t len = 0;
    if (dev_short)
        len += (size_t)snprintf(msg + len, n - len,
                                "%s needs %.1f GB per GPU (model states %.1f, activations %.1f, buffers %.1f); "
                                "%.1f GB free on this GPU",
                                prog, gb(mine.device), gb(mine.states), gb(mine.activations), gb(mine.buffers),
                                gb((double)dev_free));
    else
        len += (size_t)snprintf(msg + len, n - len,
                                "%s needs %.1f GB of host memory per rank (model states %.1f, activations %.1f, "
                                "buffers %.1f), x %d rank(s) on this node = %.1f GB; %.1f GB available (MemAvailable)",
                                prog, gb(mine.host), gb(mine.states), gb(mine.activations), gb(mine.buffers),
                                local_ranks, gb(mine.host * local_ranks), gb((double)host_avail));
    const char *sep = " — ";
    for (int s = fc->stage + 1; s <= 3 && len < n; s++) {
        int ok;
        need other = need_at(fc, s, part->world, on_gpu, &ok);
        if (!ok || !fits(other, local_ranks, dev_free, host_avail)) continue;
        len += (size_t)snprintf(msg + len, n - len, "%s%s needs %.1f GB", sep, prog_of_stage[s],
                                gb(dev_short ? other.device : other.host));
        sep = "; or ";
        break;
    }
    /* More ranks: this stage if sharding helps it enough, else ZeRO-3, which shards everything. */
    for (int s = fc->stage; s <= 3 && len < n; s++) {
        int w = smallest_world(fc, s, part->world, on_gpu, local_ranks, dev_free, host_avail);
        if (!w) continue;
        len += (size_t)snprintf(msg + len, n - len, "%s%s at N >= %d", sep, prog_of_stage[s], w);
        sep = "; ";
        if (s == fc->stage || s == 3) break;
    }
    if (!strcmp(sep, " — ") && len < n) snprintf(msg + len, n - len, " — no stage fits at any N: a smaller model");
    return 1;
}

void zl_preflight(zl_runtime *rt, const zl_partition *part, const zl_formula_config *fc) {
    zl_ckpt_check_resume(rt, fc->model); /* --resume DIR: refused here, before any state exists */
    if (rt->cfg.no_preflight) return;
    size_t dev_free = 0, host_avail = zl_host_mem_available();
    int on_gpu = zl_dev_mem_free(&dev_free);
    char msg[1024];
    int bad = zl_preflight_verdict(part, fc, on_gpu, rt->local_size, dev_free, host_avail, msg, sizeof msg);
    int first_bad = bad ? rt->rank : rt->world;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first_bad == rt->world) return;
    if (rt->rank == first_bad) fprintf(stderr, "%s: rank %d: %s (--no-preflight to try anyway)\n", rt->prog, rt->rank, msg);
    zl_runtime_exit(rt, ZL_EXIT_INPUT);
}
