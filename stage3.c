/* stage3.c — ZeRO-3, P_os+g+p: optimizer-state, gradient and parameter partitioning (paper §5.3).
 *
 * ZeRO-2 still keeps all fp16 parameters (2Ψ) on every rank. Here rank r keeps only its
 * slice of every unit, so all model states shrink by N:
 *     (fp16 params 2Ψ + fp16 grads 2Ψ + 12Ψ) / N  =  16Ψ/N bytes, plus 2 buckets, 1 + P gather buffers
 * A unit's full parameters exist only while they are used: forward all-gathers unit u into a
 * gather buffer, computes, and releases the buffer; backward gathers it again, computes,
 * releases it, and reduce-scatters the unit's gradients (from a bucket, as in stage 2).
 * --prefetch P gathers P visits ahead (a visit: a use of a unit, forward or backward), with 1 + P gather
 * buffers in a ring (constant size: the largest unit). Adam (at the next step's start, unit u's
 * gathers waiting for its update; --offload: on the host, as in stage 2) writes the new fp16
 * values straight into the rank's parameter shard: nothing to gather after the step.
 *
 * Traffic per step and rank: all-gather fwd + all-gather bwd + reduce-scatter, each (N-1)/N·2Ψ_pad
 * = 3(N-1)/N·2Ψ_pad, 1.5× DDP (paper §7.2.2; a unit used twice, the GPT's tied embedding, is
 * gathered twice each way); the final gather for param_hash is reported apart.
 * --accum K runs K micro-batches a step, each gathering for its forward and backward and
 * reduce-scattering into the shard: all traffic ×K, 3K(N-1)/N·2Ψ_pad; the ring runs on.
 *
 * Run: mpiexec -n N build/cpu/stage3 --preset demo --prefetch 1   (or build/cuda/stage3). */
#include <stdio.h>
#include <stdlib.h>

#include "common/alloc.h"    /* zl_mem_alloc: every buffer, by category */
#include "common/ckpt.h"     /* zl_ckpt_*: --save / --resume, this rank's checkpoint file */
#include "common/comm.h"     /* zl_allreduce, zl_reduce_scatter, zl_allgather: logged collectives */
#include "common/events.h"   /* zl_events_create: one event per unit or slot */
#include "common/numerics.h" /* zl_numerics: loss scale, overflow verdict, clipping, Adam's step */
#include "common/offload.h"  /* zl_offload_*: --offload, optimizer states and Adam on the host */
#include "common/preflight.h" /* zl_preflight: does the run fit? (before any allocation) */
#include "common/report.h"   /* zl_report: measured beside formulas, at the end */
#include "common/runtime.h"  /* zl_runtime_start: MPI, flags, backend; the param digest */
#include "common/util.h"     /* zl_fatal, zl_wall_seconds */
#include "kernels/kernels.h" /* zl_half_to_float_array; streams and events (backend.h) */
#include "model/model.h"     /* zl_model_*: the network behind its shard units */

enum { STAGE = 3 };

typedef struct {
    zl_runtime rt;
    zl_model_shape shape; /* which model, its size, rows per rank */
    zl_model *model;   /* batch, activations, loss: everything but parameters and gradients */
    zl_partition part; /* the model's shard units, padded to multiples of N (every stage's layout) */
    int n_units, n_uses; /* a pass reads units in the model's order of uses (model.h) */

    /* model states: only this rank's slices (unit u at part.slice_off[u]) of everything */
    zl_half *params;
    zl_half *grads;
    float *master, *adam_m, *adam_v;
    zl_half *bucket[2]; /* one full padded unit of gradients each, alternating */
    int n_slots;        /* 1 + prefetch */
    zl_half **gather;   /* n_slots buffers of one full padded unit of fp16 params each */

    zl_offload *off;  /* --offload: master, m, v above are its host buffers (offload.h); else NULL */
    zl_half *staging; /* host, one unit: for param_hash */
    double *stats;    /* 2 fp64: Σg² and the non-finite count of the gradient this rank owns */
    zl_numerics num;  /* loss scale, clip factor, Adam's step, the per-step record */
    zl_dtype half;    /* the 16-bit format of params, grads and activations (--dtype) */
    zl_ckpt *ckpt;          /* --save / --resume: the checkpoint staging buffer */
    zl_ckpt_progress start; /* where this run starts: step 0, or the checkpoint's (--resume) */

    zl_stream compute, comm, optim;
    zl_event *grads_ready;  /* one per unit: its gradients are final */
    zl_event *grads_synced; /* one per unit: its reduce-scatter is done */
    zl_event *slice_updated; /* one per unit: Adam has written this rank's fp16 slice */
    zl_event *gathered;     /* one per gather slot: its all-gather is done */
    zl_event *slot_free;    /* one per gather slot: the visit that read it is done */
    zl_event *bucket_free; /* two: the reduce-scatter that last read bucket b is done */
    zl_event loss_ready;
    int update_pending; /* the last step's verdict was "apply": its update runs at the next step's start */
    int early; /* --offload, update known before the verdict (numerics.h): host Adam beside the backward */
} Trainer;

/* The unit whose parameters use k reads (model.h). */
static int unit_of_use(Trainer *t, int k) { return zl_model_unit_of_use(t->shape, k); }
/* This rank's parameter / gradient slice of unit u in its shards. */
static zl_half *my_params(Trainer *t, int u) { return t->params + t->part.slice_off[u]; }
static zl_half *my_grads(Trainer *t, int u) { return t->grads + t->part.slice_off[u]; }
/* Reduce-scatter bucket b, holding unit u's gradients of micro-batch j, into this rank's
 * gradient shard. Micro-batch 0 writes the shard; a later one reduce-scatters in place (the
 * sum lands in this rank's slice of the bucket) and adds that into the shard. */
static void reduce_scatter_into_shard(Trainer *t, int b, int u, int micro) {
    size_t len = t->part.slice_len[u];
    /* backward wrote n(u) elements: zero the padding, where a larger unit's gradient may lie */
    zl_memset_async(t->bucket[b] + t->part.n[u], 0, 2 * (t->part.n_pad[u] - t->part.n[u]), t->comm);
    if (micro == 0) {
        zl_reduce_scatter(t->bucket[b], my_grads(t, u), len, t->half, ZL_P_GRAD_SYNC, u, t->comm);
        return;
    }
    zl_half *landed = t->bucket[b] + (size_t)t->rt.rank * len;
    zl_reduce_scatter(t->bucket[b], landed, len, t->half, ZL_P_GRAD_SYNC, u, t->comm);
    zl_add_into(my_grads(t, u), landed, len, t->comm);
}

/* Every buffer the run will use, allocated before step 1: the loop allocates nothing (pre-allocation: ZeRO-R's M_D). */
static void allocate(Trainer *t) {
    size_t shard = t->part.shard_len;
    t->params = zl_mem_alloc(ZL_MEM_PARAMS_FP16, 2 * shard, "fp16 params (this rank's slices)");
    t->grads = zl_mem_alloc(ZL_MEM_GRADS_FP16, 2 * shard, "fp16 grads (this rank's slices)");
    if (t->rt.cfg.offload) { /* ZeRO-Offload: the optimizer states live on the host */
        t->off = zl_offload_create(&t->part, t->half, t->rt.host_threads);
        t->master = t->off->master, t->adam_m = t->off->m, t->adam_v = t->off->v;
    } else {
        t->master = zl_mem_alloc(ZL_MEM_MASTER_FP32, 4 * shard, "fp32 master params (this rank's slices)");
        t->adam_m = zl_mem_alloc(ZL_MEM_ADAM_M, 4 * shard, "Adam m (this rank's slices)");
        t->adam_v = zl_mem_alloc(ZL_MEM_ADAM_V, 4 * shard, "Adam v (this rank's slices)");
    }
    for (int b = 0; b < 2; b++) /* sized for the largest unit: constant, whatever the model's depth */
        t->bucket[b] = zl_mem_alloc(ZL_MEM_GRAD_BUCKET, 2 * t->part.max_unit_pad, "gradient bucket");
    for (int k = 0; k < t->n_slots; k++) /* likewise constant: (1 + prefetch) units */
        t->gather[k] = zl_mem_alloc(ZL_MEM_PARAM_GATHER, 2 * t->part.max_unit_pad, "parameter gather buffer");
    t->model = zl_model_create(t->shape); /* activations, scratch, kernel workspace */
    t->stats = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * sizeof(double), "gradient statistics");
    t->staging = zl_mem_alloc(ZL_MEM_HOST_STAGING, 2 * t->part.max_unit, "host staging for param_hash");
    t->ckpt = zl_ckpt_create(&t->rt, &t->part, t->shape, STAGE);
}

/* Each rank initialises only its slices — the same values DDP has there, since init is
 * a function of the seed and the global index; fp32 master = exact copy of them; Adam
 * moments and the buckets' padding start at zero. */
static void initialise(Trainer *t) {
    for (int u = 0; u < t->n_units; u++) {
        size_t begin, end;
        zl_partition_slice_range(&t->part, u, t->rt.rank, &begin, &end);
        zl_model_init_range(t->model, u, begin, end, t->rt.cfg.seed, my_params(t, u), t->compute);
        if (t->off) zl_offload_master_from(t->off, u, my_params(t, u), t->compute); /* on the host */
        else zl_half_to_float_array(t->master + t->part.slice_off[u], my_params(t, u), t->part.slice_len[u],
                                    t->compute);
    }
    for (int k = 0; k < t->n_slots; k++) zl_event_record(t->slot_free[k], t->compute);
    zl_memset_async(t->adam_m, 0, 4 * t->part.shard_len, t->compute);
    zl_memset_async(t->adam_v, 0, 4 * t->part.shard_len, t->compute);
    for (int b = 0; b < 2; b++) {
        zl_memset_async(t->bucket[b], 0, 2 * t->part.max_unit_pad, t->compute);
        zl_event_record(t->bucket_free[b], t->comm);
    }
    zl_stream_sync(t->compute);
}

/* A micro-batch visits the model's uses twice: forward, visit w = k for use k = 0 ..
 * n_uses-1, then backward, visit w = 2·n_uses-1-k; micro-batch j's visits are numbered
 * v = j·2·n_uses + w. Each visit gathers its unit into gather slot v % (1 + prefetch). */
static int visits_per_micro(Trainer *t) { return 2 * t->n_uses; }
static int n_visits(Trainer *t) { return t->rt.cfg.accum * visits_per_micro(t); }
static int visit_of(Trainer *t, int micro, int w) { return micro * visits_per_micro(t) + w; }
static int is_forward_visit(Trainer *t, int v) { return v % visits_per_micro(t) < t->n_uses; }
static int use_of_visit(Trainer *t, int v) {
    int w = v % visits_per_micro(t);
    return w < t->n_uses ? w : visits_per_micro(t) - 1 - w;
}
static int slot_of_visit(Trainer *t, int v) { return v % t->n_slots; }

/* All-gather the unit of visit v into its slot, once the visit that last read the slot is
 * done. Issued 1 + prefetch visits ahead: with prefetch ≥ 1 it overlaps earlier visits' compute. */
static void gather_for_visit(Trainer *t, int v) {
    if (v >= n_visits(t)) return;
    int u = unit_of_use(t, use_of_visit(t, v)), slot = slot_of_visit(t, v);
    zl_stream_wait_event(t->comm, t->slot_free[slot]);
    zl_stream_wait_event(t->comm, t->slice_updated[u]);
    zl_allgather(my_params(t, u), t->gather[slot], t->part.slice_len[u], t->half,
                 is_forward_visit(t, v) ? ZL_P_GATHER_FWD : ZL_P_GATHER_BWD, u, t->comm);
    zl_event_record(t->gathered[slot], t->comm);
}

/* Wait for visit v's gather, return its buffer. */
static const zl_half *acquire(Trainer *t, int v) {
    zl_stream_wait_event(t->compute, t->gathered[slot_of_visit(t, v)]);
    return t->gather[slot_of_visit(t, v)];
}

/* Visit v is done with its buffer: release it and gather into it for visit v + 1 + prefetch. */
static void release(Trainer *t, int v) {
    zl_event_record(t->slot_free[slot_of_visit(t, v)], t->compute);
    gather_for_visit(t, v + t->n_slots);
}

/* Gather, compute, release — use by use (its first 1 + prefetch gathers: at step start, or in the backward of micro − 1). */
static void forward(Trainer *t, int micro) {
    for (int k = 0; k < t->n_uses; k++) {
        int v = visit_of(t, micro, k);
        zl_model_forward(t->model, k, acquire(t, v), t->compute);
        release(t, v);
    }
}

/* Adam on this rank's slice of unit u, the new fp16 values into dst: on the optimizer stream,
 * or with --offload on the host and copied back (offload.h); then slice_updated[u] says dst
 * holds them. grad_mult = 1/(loss_scale·N) (unscale, sum -> mean), times the clip factor.
 * t->early: backward calls this before the verdict has counted the step, hence Adam step + 1. */
static void update_slice(Trainer *t, int u, zl_half *dst) {
    size_t off = t->part.slice_off[u];
    int adam_step = t->num.adam_step + t->early;
    zl_stream_wait_event(t->optim, t->grads_synced[u]);
    if (t->off) /* the optimizer stream waits for the copy back */
        zl_stream_wait_event(t->optim, zl_offload_adam(t->off, u, dst, t->num.grad_mult, adam_step, t->num.hp));
    else
        zl_numerics_adam(&t->num, u, t->master + off, t->adam_m + off, t->adam_v + off, dst, my_grads(t, u),
                         t->part.slice_len[u], t->optim);
    zl_event_record(t->slice_updated[u], t->optim);
}

/* Backward from the last use to the first: gather the unit again, compute into
 * alternating buckets, release the parameters, and, once unit u's gradients are final,
 * reduce-scatter the bucket into this rank's gradient shard while backward goes on with
 * the unit before it (as in stage 2). Every micro-batch does so (--offload: as in stage 2). */
static void backward_and_reduce_scatter(Trainer *t, int micro) {
    for (int k = t->n_uses - 1; k >= 0; k--) {
        int u = unit_of_use(t, k), b = u % 2, v = visit_of(t, micro, visits_per_micro(t) - 1 - k);
        zl_stream_wait_event(t->compute, t->bucket_free[b]);
        zl_model_backward(t->model, k, acquire(t, v), t->bucket[b], ZL_GRADS_WRITE, t->compute);
        release(t, v);
        if (!zl_model_grads_final(t->shape, k)) continue; /* a tied unit: more to come */
        if (u == 0 && micro == t->rt.cfg.accum - 1 && zl_numerics_inject_now(&t->num)) /* --inject-overflow: rank N-1's +inf */
            zl_inject_inf(t->bucket[b], t->compute);
        zl_event_record(t->grads_ready[u], t->compute);
        zl_stream_wait_event(t->comm, t->grads_ready[u]);
        reduce_scatter_into_shard(t, b, u, micro);
        zl_event_record(t->grads_synced[u], t->comm);
        if (t->off && micro == t->rt.cfg.accum - 1) { /* final: to the host, while backward goes on */
            zl_offload_grads_to_host(t->off, u, my_grads(t, u), t->grads_synced[u]);
            if (t->early) update_slice(t, u, my_params(t, u)); /* and host Adam: no verdict to wait for */
        }
        zl_event_record(t->bucket_free[b], t->comm);
    }
}

/* Each rank updates only its slice of each unit and writes the new fp16 values straight
 * into its parameter shard: the gathers of unit u wait for slice_updated[u] and fetch them. */
static void optimizer_step(Trainer *t) {
    for (int u = 0; u < t->n_units && !t->early; u++) update_slice(t, u, my_params(t, u)); /* early: done */
}

/* Did the step overflow, and how large is the gradient? Each rank owns only slices, so neither
 * has a local answer: every rank measures its own (Σg², non-finite count), one 16-byte all-reduce
 * adds them up, and all reach the same verdict (apply, skip, diverged) and clip factor from the same numbers. */
static zl_step_verdict check_gradients(Trainer *t, int step, float *loss) {
    zl_grad_stats_zero(t->stats, t->comm);
    for (int u = 0; u < t->n_units; u++) zl_grad_stats(my_grads(t, u), t->part.slice_len[u], t->stats, t->comm);
    if (t->num.consensus) zl_allreduce(t->stats, 2, ZL_F64, ZL_P_CONTROL, -1, t->comm);
    *loss = zl_model_loss_sum(t->model, t->comm) / (float)(t->rt.world * t->rt.cfg.accum); /* one wait, both */
    return zl_numerics_decide(&t->num, step, t->stats, *loss, t->comm);
}

/* Micro-batch j (0..K-1) of step s: forward on this rank's rows, the loss (its all-reduce
 * overlaps backward), backward. Rank r's K·B rows of step s start at global row
 * ((s-1)·N + r)·K·B — the rows --accum 1 --batch K·B would give it — and micro-batch j
 * takes B of them from j·B on: a function of (seed, step, rank, j) only. The loss seeds
 * backward scaled by 1/K, so the K gradients sum to the gradient of the mean over K·B rows. */
static void micro_batch(Trainer *t, int step, int j, float scale) {
    const zl_config *c = &t->rt.cfg;
    uint64_t B = (uint64_t)t->shape.rows, K = (uint64_t)c->accum; /* + where a resumed run's data stands */
    uint64_t row0 = t->start.data_rows + (((uint64_t)(step - 1) * t->rt.world + t->rt.rank) * K + (uint64_t)j) * B;
    zl_model_load_batch(t->model, c->seed, row0, t->compute);
    forward(t, j);
    float *loss = zl_model_loss(t->model, j, scale / (float)K, t->compute); /* and dL/d(output) */
    zl_event_record(t->loss_ready, t->compute);
    zl_stream_wait_event(t->comm, t->loss_ready);
    zl_allreduce(loss, 1, ZL_F32, ZL_P_CONTROL, -1, t->comm); /* sum of per-rank means */
    backward_and_reduce_scatter(t, j);
}

/* The pending update, now, and wait: in a step saved next or a run's only, timed one (in_step), else after. */
static void finish_update(Trainer *t, int in_step) {
    if (!t->update_pending) return;
    optimizer_step(t);
    t->update_pending = 0;
    zl_stream_sync(t->optim);
    if (!in_step) zl_comm_end_extra();
}

/* One training step: the update the last step decided on, K micro-batches, then the
 * verdict on this step's gradient. An update runs at the start of the next step, not at the
 * end of its own: there each unit's gathers wait only for that unit's update, so the rest
 * overlaps the forward. Returns the mean loss over all N·K·B rows. */
static float train_step(Trainer *t, int step) {
    const zl_config *c = &t->rt.cfg;
    zl_comm_step_begin();
    if (t->update_pending) optimizer_step(t);
    for (int v = 0; v < t->n_slots; v++) gather_for_visit(t, v);
    float scale = zl_numerics_step_begin(&t->num, step); /* this step's loss scale */
    for (int j = 0; j < c->accum; j++) micro_batch(t, step, j, scale);
    float loss; /* apply if the gradient is finite; else: skipped, or diverged */
    t->update_pending = check_gradients(t, step, &loss) == ZL_STEP_APPLY;
    if (t->off) zl_offload_sync(t->off); /* every copy done: the next step reuses the staging */
    if (zl_ckpt_due_mid_run(t->ckpt, step) || c->steps == 1) finish_update(t, 1); /* saved next, or timed alone */
    zl_stream_sync(t->comm);
    zl_stream_sync(t->compute);
    zl_comm_step_end(step > 1 || c->steps == 1); /* step 1 is warm-up for timing */
    return loss;
}

/* The full parameters exist nowhere: gather each unit once more (reported apart from
 * the per-step traffic) to hash it. Every rank takes part in the gathers. */
static uint64_t param_hash(Trainer *t) {
    zl_param_digest d;
    zl_digest_begin(&d, &t->rt);
    zl_comm_step_begin();
    for (int u = 0; u < t->n_units; u++) {
        zl_allgather(my_params(t, u), t->gather[0], t->part.slice_len[u], t->half, ZL_P_GATHER_FINAL, u, t->comm);
        zl_stream_sync(t->comm);
        zl_digest_unit(&d, t->gather[0], t->part.n[u], t->staging, t->comm);
    }
    zl_comm_end_extra();
    return zl_digest_end(&d);
}

/* ---- checkpoints: what this rank owns -------------------------------------------------- */

/* Its slices of everything: the fp32 master, Adam m, v, and the fp16 params, whose only
 * copy is this rank's slice. */
static zl_ckpt_owned owned(Trainer *t) {
    return (zl_ckpt_owned){t->master, t->adam_m, t->adam_v, ZL_CKPT_SLICES, t->params, ZL_CKPT_SLICES};
}
static void resume(Trainer *t) {
    t->start = zl_ckpt_resume(t->ckpt, owned(t), t->compute);
    if (t->rt.cfg.resume_dir[0]) zl_numerics_resume(&t->num, t->start.adam_step, &t->start.scaler);
}
static void save_checkpoint(Trainer *t, int step) {
    if (!zl_ckpt_due(t->ckpt, step) || t->num.diverged) return; /* diverged: DIR keeps its last good checkpoint */
    finish_update(t, 0); /* the checkpoint holds the state after this step's update */
    zl_ckpt_save_if_due(t->ckpt, owned(t), step, t->num.adam_step, &t->num.scaler, t->compute);
}

/* ---- main: set up, train, report, tear down ------------------------------------------ */

int main(int argc, char **argv) {
    Trainer t = {0};
    zl_runtime_start(&t.rt, STAGE, argc, argv); /* exits on bad flags, before any allocation */
    const zl_config *c = &t.rt.cfg;
    t.shape = zl_model_shape_of(c);
    t.half = c->dtype;
    if (zl_model_partition(&t.part, t.shape, t.rt.world)) zl_fatal("model too large: byte counts overflow");
    t.n_units = t.part.n_units, t.n_uses = zl_model_n_uses(t.shape);

    t.compute = zl_stream_create(), t.comm = zl_stream_create(), t.optim = zl_stream_create();
    t.n_slots = 1 + c->prefetch;
    t.gather = zl_host_calloc((size_t)t.n_slots, sizeof(zl_half *));
    t.grads_ready = zl_events_create(t.n_units);
    t.grads_synced = zl_events_create(t.n_units);
    t.slice_updated = zl_events_create(t.n_units);
    t.gathered = zl_events_create(t.n_slots), t.slot_free = zl_events_create(t.n_slots);
    t.bucket_free = zl_events_create(2);
    t.loss_ready = zl_event_create();
    int grad_syncs = c->accum * t.n_units, param_gathers = n_visits(&t), control_syncs = c->accum + 1; /* K losses, grad stats */
    int copies = c->offload ? 2 * t.n_units : 0; /* --offload: each unit's grads d2h, params h2d */
    zl_comm_init(t.rt.world, grad_syncs + param_gathers + control_syncs + copies); /* per step (and the final gathers) */

    /* every buffer before step 1, then training with allocation frozen */
    zl_report rep = {.rt = &t.rt, .part = &t.part, .steps = c->steps};
    rep.device_known = zl_dev_mem_used(&rep.device_baseline, &rep.device_total);
    zl_mem_init(zl_dev_alloc, zl_dev_free);
    rep.fc = (zl_formula_config){.stage = STAGE, .model = t.shape, .offload = c->offload, .prefetch = c->prefetch,
                                 .workspace_bytes = zl_model_workspace_bytes(t.shape)};
    zl_preflight(&t.rt, &t.part, &rep.fc); /* exits 2, nothing allocated, if it cannot fit */
    allocate(&t);
    zl_dev_mem_used(&rep.device_after_alloc, &rep.device_total);
    initialise(&t);
    zl_numerics_init(&t.num, &t.rt);
    resume(&t); /* --resume DIR: the checkpoint's state replaces it (written by any stage, at any N) */
    t.early = rep.fc.early_update = c->offload && zl_numerics_update_known(&t.num); /* its scaler too */

    float *losses = zl_host_calloc((size_t)c->steps, sizeof(float));
    double timed_ms = 0;
    zl_mem_freeze(); /* from here to the end of training, no allocation */
    for (int step = 1; step <= c->steps && !t.num.diverged; step++) { /* every rank stops at the same step */
        double t0 = zl_wall_seconds();
        losses[step - 1] = train_step(&t, step);
        double ms = (zl_wall_seconds() - t0) * 1e3;
        if (step > 1 || c->steps == 1) timed_ms += ms;
        zl_report_step(&t.rt, step, c->steps, losses[step - 1], t.num.scales[step - 1], t.num.norms[step - 1],
                       t.num.n_skipped && t.num.skipped[t.num.n_skipped - 1] == step, ms);
        save_checkpoint(&t, step); /* --save DIR: after every --save-every steps and the last */
    }
    finish_update(&t, 0);
    zl_mem_unfreeze();
    zl_dev_mem_used(&rep.device_end, &rep.device_total);

    /* the report: measured beside the formulas (a collective: every rank takes part) */
    char variant[64];
    snprintf(variant, sizeof variant, "gather per unit, prefetch %d (%d gather buffers)", c->prefetch, t.n_slots);
    rep.variant = variant;
    rep.losses = losses;
    zl_numerics_report(&t.num, &rep); /* dtype, status, scales, norms, skipped steps */
    rep.ms_per_step = timed_ms / (rep.steps > 1 ? rep.steps - 1 : 1);
    rep.no_hash_why = zl_numerics_final_params_lost(&t.num, t.early); /* early: the bad step was applied */
    if (!c->no_param_hash && !rep.no_hash_why) rep.param_hash = param_hash(&t); /* else: JSON null */
    int status = zl_report_final(&rep); /* 0, 1 (an output lost), 3 (diverged), 4 (--check) */

    /* tear down */
    free(losses);
    zl_numerics_free(&t.num);
    zl_model_free(t.model);
    free(t.gather);
    zl_event_destroy(t.loss_ready);
    zl_stream_destroy(t.compute), zl_stream_destroy(t.comm), zl_stream_destroy(t.optim);
    zl_ckpt_free(t.ckpt);
    zl_offload_free(t.off);
    zl_partition_free(&t.part);
    return zl_runtime_finish(&t.rt, status);
}
