/* offload.h — ZeRO-Offload's mechanics: the optimizer states of this rank's shard on the
 * host, Adam on the host, and the copies that feed it (stage2 / stage3 --offload).
 *
 * What moves, per step and rank (the stage files show when):
 *   device -> host  each unit's 16-bit gradient slice, as soon as it is final (after its
 *                   last reduce-scatter), on the stream of copies down: it overlaps the
 *                   backward of the units before it. Every step, 2Ψ_pad/N bytes.
 *   host            once the ranks agreed the step is applied (the verdict needs every
 *                   unit) — or, where the update is known before the verdict (a static
 *                   loss scale, no clipping: numerics.h), as soon as the unit's gradient has
 *                   landed, beside the backward — Adam over the slice with OpenMP threads, in
 *                   place: the staging slice that held the gradient receives the new 16-bit
 *                   parameters. It runs as a host function on its own stream
 *                   (zl_stream_launch_host), unit after unit, so the caller returns at once:
 *                   the next step's forward is issued behind it and unit u's forward starts
 *                   as soon as unit u is back, while the host updates the units after it.
 *   host -> device  the new parameter slice, on the stream of copies up: it overlaps Adam of
 *                   the next unit. Only on applied steps, 2Ψ_pad/N bytes. Up and down have a
 *                   stream each, so when host Adam runs beside the backward (a static loss
 *                   scale and no clipping; stage2.c, stage3.c) a copy down never queues
 *                   behind a copy up that waits for host Adam. (Each copy up split over 2
 *                   streams, for more reads in flight from host memory, was measured on H200
 *                   and changed nothing: not kept.)
 * The copies go through comm.h (op d2h / h2d, purpose offload_grads / offload_params):
 * logged, timed, and drawn on the timeline's copy lane, but not counted as network bytes.
 *
 * Host Adam is zl_host_adam_update (kernels/cpu/adam_host.h): the results of
 * zl_cpu_adam_update (kernels.h), vectorised; that CPU reference the CUDA kernel matches
 * bit for bit: with or without --offload, the parameters come out identical. On the CPU
 * backend the copies are plain memcpys, so CI runs this same code path.
 *
 * Memory (alloc.h, host categories, pinned): host_master_fp32, host_adam_m, host_adam_v
 * 4Ψ_pad/N each, offload_staging 2Ψ_pad/N. The device keeps the 16-bit params and grads.
 *
 * defines: zl_offload, zl_offload_create/free, zl_offload_master_from,
 *          zl_offload_grads_to_host, zl_offload_adam, zl_offload_sync, zl_offload_threads. */
#ifndef ZL_OFFLOAD_H
#define ZL_OFFLOAD_H

#include "partition.h"
#include "../kernels/kernels.h" /* zl_adam_hparams; streams and events (backend.h) */

typedef struct {
    const zl_partition *part;
    zl_dtype half;
    float *master, *m, *v;  /* host, pinned: shard_len fp32 each, unit u at part->slice_off[u] */
    zl_half *staging;       /* host, pinned: shard_len 16-bit; gradient slice in, parameter slice out */
    zl_stream down;         /* every d2h copy, in issue order */
    zl_stream up;           /* every h2d copy, in issue order */
    zl_stream host;         /* host Adam, one host function a unit, in issue order */
    zl_event *grads_landed; /* one per unit: its gradient slice is in staging */
    zl_event *params_landed; /* one per unit: its new parameter slice is back on the device */
    zl_event *adam_done;    /* one per unit: host Adam has written its new slice into staging */
    struct zl_offload_job *jobs; /* one per unit: the arguments of its host function */
    int threads;            /* OpenMP threads for host Adam: this rank's share of the node's cores */
} zl_offload;

/* OpenMP threads host Adam runs on: this rank's share of its node's CPUs. masks: the CPU
 * affinity masks of the node's `ranks` ranks, `bytes` each (CPU c is bit c % 8 of byte c / 8),
 * masks + me·bytes this rank's. Each CPU of its mask counts 1/k, k the ranks whose masks hold
 * it; the sum, rounded down, at least 1. Unbound ranks (every mask the whole node) get the
 * node's CPUs / ranks; ranks a launcher bound to sets of their own (Slurm --cpus-per-task, Open
 * MPI PE=n) their whole set; a rank bound to one core 1 (Open MPI's default for 2 ranks or
 * fewer: run with --bind-to none); ranks bound to one socket share its cores. Pure: the
 * runtime gathers the masks at start-up (zl_runtime.host_threads). */
int zl_offload_threads(const unsigned char *masks, size_t bytes, int ranks, int me);

/* Allocate the host buffers (tracked, pinned), the copy streams and the events; before step 1.
 * threads: host Adam's (zl_offload_threads). */
zl_offload *zl_offload_create(const zl_partition *p, zl_dtype half, int threads);
void zl_offload_free(zl_offload *o); /* the buffers go with zl_mem_free_all */

/* Initialisation: unit u's fp32 master = its 16-bit parameter slice on the device, widened
 * (the same values zl_half_to_float_array gives without offload). */
void zl_offload_master_from(zl_offload *o, int u, const zl_half *dev_params, zl_stream s);

/* Copy unit u's final gradient slice to the host once `final` (recorded after its last
 * reduce-scatter) has fired; returns at once. */
void zl_offload_grads_to_host(zl_offload *o, int u, const zl_half *dev_grads, zl_event final);

/* Issue Adam on unit u's slice on the host (after its gradients landed; the host stream),
 * then the copy of the new 16-bit slice to dev_params (the stream of copies up); returns at
 * once. Returns the event that says it has landed there; the copies up run in order, so the
 * last unit's event covers all of them. */
zl_event zl_offload_adam(zl_offload *o, int u, zl_half *dev_params, float grad_mult, int adam_step,
                         zl_adam_hparams hp);

/* The host waits for every Adam and copy issued (end of a step: the next one reuses staging;
 * before anyone reads master, m or v). */
void zl_offload_sync(zl_offload *o);

#endif
