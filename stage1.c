/* stage1.c — ZeRO-1, P_os: optimizer-state partitioning (paper §5.1).
 *
 * In DDP every rank runs the same Adam update over the whole model, so the fp32 master
 * weights and Adam m, v (12Ψ bytes, K = 12) are replicated N times. Here rank r keeps,
 * of every shard unit, only its r-th 1/N slice of master/m/v:
 *     fp16 params 2Ψ + fp16 grads 2Ψ + (4Ψ + 4Ψ + 4Ψ)/N  =  4Ψ + 12Ψ/N bytes
 * Each step: forward and backward as in DDP, but each unit's gradients are
 * reduce-scattered, in place, as soon as backward has produced them: only this rank's
 * slice of the sum is needed, because only this rank updates that slice. Adam updates
 * the slice (master/m/v) and writes the new fp16 values into the slice's place in the
 * full param buffer; then each unit is all-gathered, in place, so every rank again holds
 * all fp16 params for the next forward. Both run at the start of the next step, unit by
 * unit beside its forward, each unit's forward waiting only for its own gather — no GEMM waits
 * on a gather while it runs, so on CUDA the gathers take the copy engines, not the SMs, where
 * NCCL can (common/runtime.c).
 *
 * Traffic per step and rank: reduce-scatter (N-1)/N·2Ψ_pad + all-gather (N-1)/N·2Ψ_pad =
 * 2(N-1)/N·2Ψ_pad, the same as DDP's all-reduce (which *is* a reduce-scatter followed by
 * an all-gather). --grad-sync allreduce runs the PyTorch from-scratch post's variant
 * instead: all-reduce the full gradient (then use only the slice) + all-gather = 1.5× DDP's
 * traffic.
 *
 * --accum K runs K micro-batches of B rows before the step. The full gradient buffer is
 * still here, so gradients accumulate in it locally, and the reduce-scatters wait for the
 * last micro-batch: one per unit per step, traffic as with K = 1.
 *
 * Run: mpiexec -n N build/cpu/stage1 --preset demo   (or build/cuda/stage1). */
#include <stdlib.h>

#include "common/alloc.h"    /* zl_mem_alloc: every buffer, by category */
#include "common/ckpt.h"     /* zl_ckpt_*: --save / --resume, this rank's checkpoint file */
#include "common/comm.h"     /* zl_allreduce, zl_reduce_scatter, zl_allgather: logged collectives */
#include "common/events.h"   /* zl_events_create: one event per unit or slot */
#include "common/numerics.h" /* zl_numerics: loss scale, overflow verdict, clipping, Adam's step */
#include "common/preflight.h" /* zl_preflight: does the run fit? (before any allocation) */
#include "common/report.h"   /* zl_report: measured beside formulas, at the end */
#include "common/runtime.h"  /* zl_runtime_start: MPI, flags, backend; the param digest */
#include "common/util.h"     /* zl_fatal, zl_wall_seconds */
#include "kernels/kernels.h" /* zl_half_to_float_array; streams and events (backend.h) */
#include "model/model.h"     /* zl_model_*: the network behind its shard units */

enum { STAGE = 1 };

typedef struct {
    zl_runtime rt;
    zl_model_shape shape; /* which model, its size, rows per rank */
    zl_model *model;   /* batch, activations, loss: everything but parameters and gradients */
    zl_partition part; /* the model's shard units, padded to multiples of N (every stage's layout) */
    int n_units, n_uses; /* a pass reads units in the model's order of uses (model.h) */

    /* model states. Full fp16 params and grads (padded layout, unit u at part.off_pad[u]);
     * fp32 master, m, v only for this rank's slices (unit u at part.slice_off[u]). */
    zl_half *params;
    zl_half *grads;
    float *master, *adam_m, *adam_v;

    zl_half *staging; /* host, one unit: for param_hash */
    double *stats;    /* 2 fp64: Σg² and the non-finite count of the gradient this rank owns */
    zl_numerics num;  /* loss scale, clip factor, Adam's step, the per-step record */
    zl_dtype half;    /* the 16-bit format of params, grads and activations (--dtype) */
    zl_ckpt *ckpt;          /* --save / --resume: the checkpoint staging buffer */
    zl_ckpt_progress start; /* where this run starts: step 0, or the checkpoint's (--resume) */

    zl_stream compute, comm, optim;
    zl_event *grads_ready;  /* one per unit: its gradients are final */
    zl_event *grads_synced; /* one per unit: its reduce-scatter (or all-reduce) is done */
    zl_event *slice_updated; /* one per unit: Adam has written this rank's fp16 slice */
    zl_event *params_gathered; /* one per unit: its all-gather is done */
    zl_event loss_ready;
    int update_pending; /* the last step's verdict was "apply": its update runs at the next step's start */
} Trainer;

/* Unit u inside a full padded buffer (params or grads). */
static zl_half *unit(Trainer *t, zl_half *buf, int u) { return buf + t->part.off_pad[u]; }
/* The unit whose parameters use k reads (model.h). */
static int unit_of_use(Trainer *t, int k) { return zl_model_unit_of_use(t->shape, k); }
/* This rank's slice of unit u inside a full padded buffer. */
static zl_half *my_slice(Trainer *t, zl_half *buf, int u) {
    return buf + t->part.off_pad[u] + (size_t)t->rt.rank * t->part.slice_len[u];
}
/* Micro-batch j's backward writes a unit's gradients (j = 0) or adds to them. */
static zl_grads_mode grads_mode(int micro) { return micro == 0 ? ZL_GRADS_WRITE : ZL_GRADS_ADD; }

/* Every buffer the run will use, allocated before step 1: the loop allocates nothing (pre-allocation: ZeRO-R's M_D). */
static void allocate(Trainer *t) {
    size_t full = t->part.full_len, shard = t->part.shard_len; /* Ψ_full (partition.h), Ψ_pad/N */
    t->params = zl_mem_alloc(ZL_MEM_PARAMS_FP16, 2 * full, "fp16 params");
    t->grads = zl_mem_alloc(ZL_MEM_GRADS_FP16, 2 * full, "fp16 grads");
    t->master = zl_mem_alloc(ZL_MEM_MASTER_FP32, 4 * shard, "fp32 master params (this rank's slices)");
    t->adam_m = zl_mem_alloc(ZL_MEM_ADAM_M, 4 * shard, "Adam m (this rank's slices)");
    t->adam_v = zl_mem_alloc(ZL_MEM_ADAM_V, 4 * shard, "Adam v (this rank's slices)");
    t->model = zl_model_create(t->shape); /* activations, scratch, kernel workspace */
    t->stats = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * sizeof(double), "gradient statistics");
    t->staging = zl_mem_alloc(ZL_MEM_HOST_STAGING, 2 * t->part.max_unit, "host staging for param_hash");
    t->ckpt = zl_ckpt_create(&t->rt, &t->part, t->shape, STAGE);
}

/* Parameters from the seed alone (the same full vector as DDP); fp32 master = exact copy
 * of this rank's fp16 slices; Adam moments and gradient padding start at zero. */
static void initialise(Trainer *t) {
    for (int u = 0; u < t->n_units; u++) {
        zl_model_init_range(t->model, u, 0, t->part.n_pad[u], t->rt.cfg.seed, unit(t, t->params, u), t->compute);
        zl_half_to_float_array(t->master + t->part.slice_off[u], my_slice(t, t->params, u), t->part.slice_len[u],
                               t->compute);
        zl_event_record(t->params_gathered[u], t->comm); /* nothing to wait for at step 1 */
    }
    zl_memset_async(t->adam_m, 0, 4 * t->part.shard_len, t->compute);
    zl_memset_async(t->adam_v, 0, 4 * t->part.shard_len, t->compute);
    zl_memset_async(t->grads, 0, 2 * t->part.full_len, t->compute);
    zl_stream_sync(t->compute);
}

/* A use of unit u may start once the all-gather of unit u's last applied update has landed:
 * the gathers of later units overlap the forward of earlier ones. */
static void forward(Trainer *t) {
    for (int k = 0; k < t->n_uses; k++) {
        int u = unit_of_use(t, k);
        zl_stream_wait_event(t->compute, t->params_gathered[u]);
        zl_model_forward(t->model, k, unit(t, t->params, u), t->compute);
    }
}

/* Backward from the last use to the first. In the step's last micro-batch, the moment unit
 * u's gradients are final, the communication stream reduce-scatters them in place: this
 * rank's slice of the sum over ranks lands in its own place of the full gradient buffer
 * (the rest is left stale, nobody reads it; --grad-sync allreduce sums it all). Overlaps the
 * backward of the unit before it. Earlier micro-batches only accumulate (no_sync). */
static void backward_and_reduce_scatter(Trainer *t, int micro) {
    int last = micro == t->rt.cfg.accum - 1;
    for (int k = t->n_uses - 1; k >= 0; k--) {
        int u = unit_of_use(t, k);
        zl_model_backward(t->model, k, unit(t, t->params, u), unit(t, t->grads, u), grads_mode(micro), t->compute);
        if (!last || !zl_model_grads_final(t->shape, k)) continue; /* no_sync, or a tied unit: more to come */
        if (u == 0 && zl_numerics_inject_now(&t->num)) /* --inject-overflow: rank N-1's +inf */
            zl_inject_inf(unit(t, t->grads, u), t->compute);
        zl_event_record(t->grads_ready[u], t->compute);
        zl_stream_wait_event(t->comm, t->grads_ready[u]);
        if (t->rt.cfg.grad_sync_allreduce) /* the from-scratch post's variant: the full sum; we use 1/N */
            zl_allreduce(unit(t, t->grads, u), t->part.n_pad[u], t->half, ZL_P_GRAD_SYNC, u, t->comm);
        else
            zl_reduce_scatter(unit(t, t->grads, u), my_slice(t, t->grads, u), t->part.slice_len[u], t->half,
                              ZL_P_GRAD_SYNC, u, t->comm);
        zl_event_record(t->grads_synced[u], t->comm);
    }
}

/* Each rank updates only its slice of each unit — 1/N of DDP's optimizer work and state —
 * and writes the new fp16 values into that slice of the full param buffer. Then the unit
 * is all-gathered in place, so every rank holds every new fp16 param again; the gather of
 * unit u overlaps the update of unit u+1. grad_mult = 1/(loss_scale·N) (unscale, sum -> mean), times the clip factor. */
static void optimizer_step_and_allgather(Trainer *t) {
    for (int u = 0; u < t->n_units; u++) {
        size_t off = t->part.slice_off[u];
        zl_stream_wait_event(t->optim, t->grads_synced[u]);
        zl_numerics_adam(&t->num, u, t->master + off, t->adam_m + off, t->adam_v + off, my_slice(t, t->params, u),
                         my_slice(t, t->grads, u), t->part.slice_len[u], t->optim);
        zl_event_record(t->slice_updated[u], t->optim);
        zl_stream_wait_event(t->comm, t->slice_updated[u]);
        zl_allgather(my_slice(t, t->params, u), unit(t, t->params, u), t->part.slice_len[u], t->half,
                     ZL_P_GATHER_STEP, u, t->comm);
        zl_event_record(t->params_gathered[u], t->comm);
    }
}

/* Did the step overflow, and how large is the gradient? Each rank owns only slices, so neither
 * has a local answer: every rank measures its own (Σg², non-finite count), one 16-byte all-reduce
 * adds them up, and all reach the same verdict (apply, skip, diverged) and clip factor from the same numbers. */
static zl_step_verdict check_gradients(Trainer *t, int step, float *loss) {
    zl_grad_stats_zero(t->stats, t->comm);
    for (int u = 0; u < t->n_units; u++) zl_grad_stats(my_slice(t, t->grads, u), t->part.slice_len[u], t->stats, t->comm);
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
    forward(t);
    float *loss = zl_model_loss(t->model, j, scale / (float)K, t->compute); /* and dL/d(output) */
    zl_event_record(t->loss_ready, t->compute);
    zl_stream_wait_event(t->comm, t->loss_ready);
    zl_allreduce(loss, 1, ZL_F32, ZL_P_CONTROL, -1, t->comm); /* sum of per-rank means */
    backward_and_reduce_scatter(t, j);
}

/* The pending update, now, and wait: in a step saved next or a run's only, timed one (in_step), else after. */
static void finish_update(Trainer *t, int in_step) {
    if (!t->update_pending) return;
    optimizer_step_and_allgather(t);
    t->update_pending = 0;
    zl_stream_sync(t->optim);
    zl_stream_sync(t->comm);
    if (!in_step) zl_comm_end_extra();
}

/* One training step: the update the last step decided on, K micro-batches, then the
 * verdict on this step's gradient. An update runs at the start of the next step, not at the
 * end of its own: there each unit's forward waits only for that unit's update and all-gather, so the rest
 * overlaps the forward. Returns the mean loss over all N·K·B rows. */
static float train_step(Trainer *t, int step) {
    const zl_config *c = &t->rt.cfg;
    zl_comm_step_begin();
    if (t->update_pending) optimizer_step_and_allgather(t);
    float scale = zl_numerics_step_begin(&t->num, step); /* this step's loss scale */
    for (int j = 0; j < c->accum; j++) micro_batch(t, step, j, scale);
    float loss; /* apply if the gradient is finite; else: skipped, or diverged */
    t->update_pending = check_gradients(t, step, &loss) == ZL_STEP_APPLY;
    if (zl_ckpt_due_mid_run(t->ckpt, step) || c->steps == 1) finish_update(t, 1); /* saved next, or timed alone */
    zl_stream_sync(t->comm);
    zl_stream_sync(t->compute);
    zl_comm_step_end(step > 1 || c->steps == 1); /* step 1 is warm-up for timing */
    return loss;
}

static uint64_t param_hash(Trainer *t) {
    zl_param_digest d;
    zl_digest_begin(&d, &t->rt);
    for (int u = 0; u < t->n_units; u++)
        zl_digest_unit(&d, unit(t, t->params, u), t->part.n[u], t->staging, t->compute);
    return zl_digest_end(&d);
}

/* ---- checkpoints: what this rank owns -------------------------------------------------- */

/* Its slices of the fp32 master and Adam m, v. The fp16 params are a full copy on every
 * rank: not saved, rebuilt from the master on resume. */
static zl_ckpt_owned owned(Trainer *t) {
    return (zl_ckpt_owned){t->master, t->adam_m, t->adam_v, ZL_CKPT_SLICES, t->params, ZL_CKPT_FULL};
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
    t.grads_ready = zl_events_create(t.n_units);
    t.grads_synced = zl_events_create(t.n_units);
    t.slice_updated = zl_events_create(t.n_units);
    t.params_gathered = zl_events_create(t.n_units);
    t.loss_ready = zl_event_create();
    int grad_syncs = t.n_units, param_gathers = t.n_units, control_syncs = c->accum + 1; /* K losses, grad stats */
    zl_comm_init(t.rt.world, grad_syncs + param_gathers + control_syncs); /* collectives per step */

    /* every buffer before step 1, then training with allocation frozen */
    zl_report rep = {.rt = &t.rt, .part = &t.part, .steps = c->steps};
    rep.device_known = zl_dev_mem_used(&rep.device_baseline, &rep.device_total);
    zl_mem_init(zl_dev_alloc, zl_dev_free);
    rep.fc = (zl_formula_config){.stage = STAGE, .model = t.shape,
                                 .grad_sync_allreduce = c->grad_sync_allreduce,
                                 .workspace_bytes = zl_model_workspace_bytes(t.shape)};
    zl_preflight(&t.rt, &t.part, &rep.fc); /* exits 2, nothing allocated, if it cannot fit */
    allocate(&t);
    zl_dev_mem_used(&rep.device_after_alloc, &rep.device_total);
    initialise(&t);
    zl_numerics_init(&t.num, &t.rt);
    resume(&t); /* --resume DIR: the checkpoint's state replaces it (written by any stage, at any N) */

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
    rep.variant = c->grad_sync_allreduce ? "all-reduce + all-gather (the PyTorch from-scratch post; 1.5x DDP traffic)"
                                         : "reduce-scatter + all-gather (in place; DDP traffic)";
    rep.losses = losses;
    zl_numerics_report(&t.num, &rep); /* dtype, status, scales, norms, skipped steps */
    rep.ms_per_step = timed_ms / (rep.steps > 1 ? rep.steps - 1 : 1);
    if (!c->no_param_hash) rep.param_hash = param_hash(&t); /* else: JSON null (--no-param-hash) */
    int status = zl_report_final(&rep); /* 0, 1 (an output lost), 3 (diverged), 4 (--check) */

    /* tear down */
    free(losses);
    zl_numerics_free(&t.num);
    zl_model_free(t.model);
    zl_event_destroy(t.loss_ready);
    zl_stream_destroy(t.compute), zl_stream_destroy(t.comm), zl_stream_destroy(t.optim);
    zl_ckpt_free(t.ckpt);
    zl_partition_free(&t.part);
    return zl_runtime_finish(&t.rt, status);
}
