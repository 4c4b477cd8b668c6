/* offload.c — host optimizer states, host Adam and the copies around it (see offload.h). */
#include "offload.h"

#include <stdlib.h>

#include "alloc.h"
#include "../kernels/cpu/adam_host.h"
#include "comm.h"
#include "events.h"
#include "trace.h"
#include "util.h"

/* What one unit's host function needs; o->jobs[u], rewritten each step (the last step's
 * functions have all run: zl_offload_sync). */
struct zl_offload_job {
    zl_offload *o;
    size_t off, n;
    float grad_mult;
    int adam_step;
    zl_adam_hparams hp;
};

zl_offload *zl_offload_create(const zl_partition *p, zl_dtype half, int threads) {
    zl_offload *o = zl_host_calloc(1, sizeof *o);
    size_t shard = p->shard_len;
    o->part = p, o->half = half;
    zl_mem_init_pinned(zl_host_alloc_pinned, zl_host_free_pinned);
    o->master = zl_mem_alloc(ZL_MEM_HOST_MASTER_FP32, 4 * shard, "host fp32 master params (this rank's slices)");
    o->m = zl_mem_alloc(ZL_MEM_HOST_ADAM_M, 4 * shard, "host Adam m (this rank's slices)");
    o->v = zl_mem_alloc(ZL_MEM_HOST_ADAM_V, 4 * shard, "host Adam v (this rank's slices)");
    o->staging = zl_mem_alloc(ZL_MEM_OFFLOAD_STAGING, 2 * shard, "offload staging (16-bit slices)");
    o->down = zl_stream_create(), o->up = zl_stream_create();
    o->host = zl_stream_create();
    o->grads_landed = zl_events_create(p->n_units);
    o->params_landed = zl_events_create(p->n_units);
    o->adam_done = zl_events_create(p->n_units);
    o->jobs = zl_host_calloc((size_t)p->n_units, sizeof *o->jobs);
    o->threads = threads;
    return o;
}

/* Each CPU of this rank's mask counts 1/k, k the node's ranks whose masks hold it: only a
 * shared CPU is divided, so a set a launcher gave the rank alone is not divided again. */
int zl_offload_threads(const unsigned char *masks, size_t bytes, int ranks, int me) {
    const unsigned char *mine = masks + (size_t)me * bytes;
    double share = 0;
    for (size_t c = 0; c < 8 * bytes; c++) {
        unsigned char bit = (unsigned char)(1u << (c % 8));
        if (!(mine[c / 8] & bit)) continue;
        int k = 0;
        for (int r = 0; r < ranks; r++) k += (masks[(size_t)r * bytes + c / 8] & bit) != 0;
        share += 1.0 / k;
    }
    int threads = (int)(share + 1e-9); /* 3 x 1/3 is 1 */
    return threads > 0 ? threads : 1;
}

void zl_offload_free(zl_offload *o) {
    if (!o) return;
    /* grads_landed, params_landed, adam_done: with every event array, by zl_events_destroy_all */
    zl_stream_destroy(o->down), zl_stream_destroy(o->up);
    zl_stream_destroy(o->host);
    free(o->jobs);
    free(o);
}

void zl_offload_master_from(zl_offload *o, int u, const zl_half *dev_params, zl_stream s) {
    size_t off = o->part->slice_off[u], n = o->part->slice_len[u];
    zl_memcpy_d2h(o->staging + off, dev_params, 2 * n, s); /* waits for s: the init kernels are done */
    zl_cpu_half_to_float_array(o->master + off, o->staging + off, n);
}

void zl_offload_grads_to_host(zl_offload *o, int u, const zl_half *dev_grads, zl_event final) {
    size_t off = o->part->slice_off[u];
    zl_stream_wait_event(o->down, final);
    zl_copy_d2h(o->staging + off, dev_grads, o->part->slice_len[u], o->half, ZL_P_OFFLOAD_GRADS, u, o->down);
    zl_event_record(o->grads_landed[u], o->down);
}

/* The host update (the CPU reference's results, vectorised, over the threads: adam_host.h) of
 * [off, off + n), in place: element i's gradient is read before its parameter is written. */
static void run_job(void *arg) {
    struct zl_offload_job *j = arg;
    zl_offload *o = j->o;
    zl_half *slice = o->staging + j->off;
    zl_host_adam_update_threads(o->master + j->off, o->m + j->off, o->v + j->off, slice, slice, j->n, j->grad_mult,
                                j->adam_step, j->hp, o->threads);
}

zl_event zl_offload_adam(zl_offload *o, int u, zl_half *dev_params, float grad_mult, int adam_step,
                         zl_adam_hparams hp) {
    size_t off = o->part->slice_off[u], n = o->part->slice_len[u];
    o->jobs[u] = (struct zl_offload_job){o, off, n, grad_mult, adam_step, hp};
    zl_stream_wait_event(o->host, o->grads_landed[u]);
    zl_trace_begin(ZL_PHASE_OPTIMIZER, u, o->host); /* the span of the host function itself */
    zl_stream_launch_host(o->host, run_job, &o->jobs[u]);
    zl_trace_end(ZL_PHASE_OPTIMIZER, u, o->host);
    zl_event_record(o->adam_done[u], o->host);
    zl_stream_wait_event(o->up, o->adam_done[u]);
    zl_copy_h2d(dev_params, o->staging + off, n, o->half, ZL_P_OFFLOAD_PARAMS, u, o->up);
    zl_event_record(o->params_landed[u], o->up);
    return o->params_landed[u];
}

void zl_offload_sync(zl_offload *o) {
    zl_stream_sync(o->host);
    zl_stream_sync(o->down);
    zl_stream_sync(o->up);
}
