/* preflight.c — needed vs free, before allocation (see preflight.h). */
#define _POSIX_C_SOURCE 200809L
#include "preflight.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "ckpt.h"
#include "trace.h"
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

static zl_need need_at(const zl_formula_config *fc, int stage, int world, int on_gpu, int *ok) {
    zl_partition p;
    zl_formula_config c = *fc;
    c.stage = stage;
    if (stage == 3 && fc->stage != 3) c.prefetch = zl_model_n_uses(fc->model) > 1 ? 1 : 0; /* its default */
    *ok = zl_model_partition(&p, fc->model, world) == 0;
    zl_need n = *ok ? zl_formula_need(&p, &c, on_gpu) : (zl_need){0};
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
    } while (!zl_need_fits(need_at(fc, stage, hi, on_gpu, &ok), local, dev_free, host_avail) || !ok);
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (zl_need_fits(need_at(fc, stage, mid, on_gpu, &ok), local, dev_free, host_avail) && ok) hi = mid;
        else lo = mid;
    }
    return hi;
}

/* The line's unit: GB, or MB / kB for a small model on a pretend device (ZL_CPU_DEVICE_BYTES),
 * where every figure in GB read "0.0". One unit for the whole line, from its largest figure. */
static const char *unit_for(double largest, double *bytes) {
    *bytes = largest >= 1e9 ? 1e9 : largest >= 1e6 ? 1e6 : 1e3;
    return largest >= 1e9 ? "GB" : largest >= 1e6 ? "MB" : "kB";
}

int zl_preflight_verdict(const zl_partition *part, const zl_formula_config *fc, int on_gpu, int local_ranks,
                         size_t dev_free, size_t host_avail, char *msg, size_t n) {
    msg[0] = '\0';
    zl_need mine = zl_formula_need(part, fc, on_gpu);
    if (zl_need_fits(mine, local_ranks, dev_free, host_avail)) return 0;
    const char *prog = prog_of_stage[fc->stage];
    int dev_short = dev_free && mine.device > (double)dev_free;
    double unit, need = dev_short ? mine.device : mine.host * local_ranks;
    const char *U = unit_for(fmax(need, (double)(dev_short ? dev_free : host_avail)), &unit);
    size_t len = 0;
    if (dev_short)
        len += (size_t)snprintf(msg + len, n - len,
                                "%s needs %.1f %s per GPU (model states %.1f, activations %.1f, buffers %.1f); "
                                "%.1f %s free on this GPU",
                                prog, mine.device / unit, U, mine.states / unit, mine.activations / unit,
                                mine.buffers / unit, (double)dev_free / unit, U);
    else if (on_gpu) /* the host holds --offload's optimizer states and the staging buffers */
        len += (size_t)snprintf(msg + len, n - len,
                                "%s needs %.1f %s of host memory per rank (optimizer states %.1f, staging %.1f), "
                                "x %d rank(s) on this node = %.1f %s; %.1f %s available (MemAvailable)",
                                prog, mine.host / unit, U, mine.host_states / unit,
                                (mine.host - mine.host_states) / unit, local_ranks, mine.host * local_ranks / unit, U,
                                (double)host_avail / unit, U);
    else { /* the CPU backend: every buffer is host memory, --offload's optimizer states too */
        double host_side = mine.host - mine.states - mine.activations - mine.buffers;
        char offloaded[64] = "";
        if (fc->offload) snprintf(offloaded, sizeof offloaded, "offloaded optimizer states %.1f, ", mine.host_states / unit);
        len += (size_t)snprintf(msg + len, n - len,
                                "%s needs %.1f %s of host memory per rank (model states %.1f, activations %.1f, "
                                "buffers %.1f, %shost staging %.1f), x %d rank(s) on this node = %.1f %s; "
                                "%.1f %s available (MemAvailable)",
                                prog, mine.host / unit, U, mine.states / unit, mine.activations / unit,
                                mine.buffers / unit, offloaded, (host_side - (fc->offload ? mine.host_states : 0)) / unit,
                                local_ranks, mine.host * local_ranks / unit, U, (double)host_avail / unit, U);
    }
    const char *sep = " — ";
    for (int s = fc->stage + 1; s <= 3 && len < n; s++) {
        int ok;
        zl_need other = need_at(fc, s, part->world, on_gpu, &ok);
        if (!ok || !zl_need_fits(other, local_ranks, dev_free, host_avail)) continue;
        len += (size_t)snprintf(msg + len, n - len, "%s%s needs %.1f %s", sep, prog_of_stage[s],
                                (dev_short ? other.device : other.host) / unit, U);
        sep = "; or ";
        break;
    }
    /* More ranks: this stage if sharding helps it enough, else ZeRO-3, which shards everything
     * (unless ZeRO-3 fits at this N already: named above). */
    for (int i = 0, s = fc->stage; i < 2 && len < n; i++, s = 3) {
        int ok, w;
        if (i == 1 && (fc->stage == 3 || (zl_need_fits(need_at(fc, 3, part->world, on_gpu, &ok), local_ranks,
                                                       dev_free, host_avail) && ok)))
            break;
        if (!(w = smallest_world(fc, s, part->world, on_gpu, local_ranks, dev_free, host_avail))) continue;
        len += (size_t)snprintf(msg + len, n - len, "%s%s at N >= %d", sep, prog_of_stage[s], w);
        sep = "; ";
        break;
    }
    if (!strcmp(sep, " — ") && len < n) snprintf(msg + len, n - len, " — no stage fits at any N: a smaller model");
    return 1;
}

static zl_preflight_inputs last;
const zl_preflight_inputs *zl_preflight_last(void) { return &last; }

void zl_preflight(zl_runtime *rt, const zl_partition *part, const zl_formula_config *fc) {
    zl_ckpt_check_resume(rt, fc->model); /* --resume DIR: refused here, before any state exists */
    char err[ZL_PATH_MAX + 128] = "";    /* --data FILE, the same way */
    zl_runtime_refuse_if_any(rt, zl_model_check_inputs(fc->model, err, sizeof err), err);
    /* --trace's records: the collectives are reserved (zl_comm_init), the model's spans not yet */
    zl_runtime_refuse_if_any(rt, zl_trace_records_too_many(zl_model_spans_per_step(fc->model), err, sizeof err), err);
    if (rt->cfg.no_preflight) return;
    size_t dev_free = 0, host_avail = zl_host_mem_available();
    int on_gpu = zl_dev_mem_free(&dev_free);
    zl_need mine = zl_formula_need(part, fc, on_gpu);
    last = (zl_preflight_inputs){.checked = 1, .on_gpu = on_gpu, .local_ranks = rt->local_size,
                                 .dev_free = (double)dev_free, .host_avail = (double)host_avail,
                                 .need_device = mine.device, .need_host = mine.host};
    char msg[1024];
    int bad = zl_preflight_verdict(part, fc, on_gpu, rt->local_size, dev_free, host_avail, msg, sizeof msg);
    char line[sizeof msg + 64] = "";
    if (bad) snprintf(line, sizeof line, "rank %d: %s (--no-preflight to try anyway)", rt->rank, msg);
    zl_runtime_refuse_if_any(rt, bad, line);
}
