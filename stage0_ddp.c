/* stage0_ddp.c — plain data parallelism (DDP), the baseline every ZeRO stage is measured against.
 *
 * Every rank holds the whole model state (the paper's §3, K = 12 mixed precision):
 *     fp16 params 2Ψ + fp16 grads 2Ψ + fp32 master 4Ψ + Adam m 4Ψ + Adam v 4Ψ = 16Ψ bytes
 * Each step: forward on this rank's B rows, backward unit by unit from the last, and
 * as soon as a unit's gradients exist they are all-reduced (summed) on the communication
 * stream while backward continues with the unit before it. Adam then runs on every
 * rank over the full, identical gradient: the same update, computed N times. That
 * redundancy is exactly what ZeRO removes (stage1.c, stage2.c, stage3.c). The update runs
 * at the start of the next step, unit by unit beside its forward (a step about to be saved
 * runs its own at its end; the last step's, after the loop).
 *
 * Traffic per step and rank: all-reduces of 2Ψ_pad bytes in all (one per unit) = 2(N-1)/N · 2Ψ_pad.
 *
 * --accum K runs K micro-batches of B rows before the step. Backward adds each micro-batch's
 * gradients into the full gradient buffer, and the all-reduces wait for the last one
 * (PyTorch DDP's no_sync): traffic per step does not grow with K.
 *
 * Run: mpiexec -n N build/cpu/stage0_ddp --preset demo   (or build/cuda/stage0_ddp). */
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

enum { STAGE = 0 };

typedef struct {
    zl_runtime rt;
    zl_model_shape shape; /* which model, its size, rows per rank */
    zl_model *model;   /* batch, activations, loss: everything but parameters and gradients */
    zl_partition part; /* the model's shard units, padded to multiples of N (every stage's layout) */
    int n_units, n_uses; /* a pass reads units in the model's order of uses (model.h) */

    /* model states: full copies, padded flat layout (unit u at part.off_pad[u]) */
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
    zl_event *grads_synced; /* one per unit: its all-reduce is done */
    zl_event *updated;      /* one per unit: Adam has written its new fp16 params */
    zl_event loss_ready;
    int update_pending; /* the last step's verdict was "apply": its update runs at the next step's start */
} Trainer;

/* Unit u inside a full padded buffer (params or grads). */
static zl_half *unit(Trainer *t, zl_half *buf, int u) { return buf + t->part.off_pad[u]; }
/* The unit whose parameters use k reads (model.h). */
static int unit_of_use(Trainer *t, int k) { return zl_model_unit_of_use(t->shape, k); }
/* Micro-batch j's backward writes a unit's gradients (j = 0) or adds to them. */
static zl_grads_mode grads_mode(int micro) { return micro == 0 ? ZL_GRADS_WRITE : ZL_GRADS_ADD; }

/* Every buffer the run will use, allocated before step 1: the loop allocates nothing (pre-allocation: ZeRO-R's M_D). */
static void allocate(Trainer *t) {
    size_t full = t->part.full_len; /* Ψ_full (partition.h) */
    t->params = zl_mem_alloc(ZL_MEM_PARAMS_FP16, 2 * full, "fp16 params");
    t->grads = zl_mem_alloc(ZL_MEM_GRADS_FP16, 2 * full, "fp16 grads");
    t->master = zl_mem_alloc(ZL_MEM_MASTER_FP32, 4 * full, "fp32 master params");
    t->adam_m = zl_mem_alloc(ZL_MEM_ADAM_M, 4 * full, "Adam m");
    t->adam_v = zl_mem_alloc(ZL_MEM_ADAM_V, 4 * full, "Adam v");
    t->model = zl_model_create(t->shape); /* activations, scratch, kernel workspace */
    t->stats = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * sizeof(double), "gradient statistics");
    t->staging = zl_mem_alloc(ZL_MEM_HOST_STAGING, 2 * t->part.max_unit, "host staging for param_hash");
    t->ckpt = zl_ckpt_create(&t->rt, &t->part, t->shape, STAGE);
}

/* Parameters from the seed alone; fp32 master = exact copy of the fp16 init; Adam
 * moments and gradient padding start at zero. */
static void initialise(Trainer *t) {
    zl_memset_async(t->params, 0, 2 * t->part.full_len, t->compute); /* the gaps between units */
    for (int u = 0; u < t->n_units; u++) {
        zl_model_init_range(t->model, u, 0, t->part.n_pad[u], t->rt.cfg.seed, unit(t, t->params, u), t->compute);
        zl_event_record(t->updated[u], t->optim); /* nothing to wait for at step 1 */
    }
    zl_half_to_float_array(t->master, t->params, t->part.full_len, t->compute);
    zl_memset_async(t->adam_m, 0, 4 * t->part.full_len, t->compute);
    zl_memset_async(t->adam_v, 0, 4 * t->part.full_len, t->compute);
    zl_memset_async(t->grads, 0, 2 * t->part.full_len, t->compute);
    zl_stream_sync(t->compute);
}

/* A use of unit u may start once the last step's update of unit u has been written: the
 * update of later units overlaps the forward of earlier ones. */
static void forward(Trainer *t) {
    for (int k = 0; k < t->n_uses; k++) {
        int u = unit_of_use(t, k);
        zl_stream_wait_event(t->compute, t->updated[u]);
        zl_model_forward(t->model, k, unit(t, t->params, u), t->compute);
    }
}

/* Backward from the last use to the first. In the step's last micro-batch, the moment unit
 * u's gradients are final, the communication stream is told (event) and all-reduces them,
 * overlapping with the backward of the unit before it on the compute stream; earlier
 * micro-batches only accumulate (no_sync). */
static void backward_and_allreduce(Trainer *t, int micro) {
    int last = micro == t->rt.cfg.accum - 1;
    for (int k = t->n_uses - 1; k >= 0; k--) {
        int u = unit_of_use(t, k);
        zl_model_backward(t->model, k, unit(t, t->params, u), unit(t, t->grads, u), grads_mode(micro), t->compute);
        if (!last || !zl_model_grads_final(t->shape, k)) continue; /* no_sync, or a tied unit: more to come */
        if (u == 0 && zl_numerics_inject_now(&t->num)) /* --inject-overflow: rank N-1's +inf */
            zl_inject_inf(unit(t, t->grads, u), t->compute);
        zl_event_record(t->grads_ready[u], t->compute);
        zl_stream_wait_event(t->comm, t->grads_ready[u]);
        /* The whole padded unit: padding is zero on every rank, so the sum keeps it zero. */
        zl_allreduce(unit(t, t->grads, u), t->part.n_pad[u], t->half, ZL_P_GRAD_SYNC, u, t->comm);
        zl_event_record(t->grads_synced[u], t->comm);
    }
}

/* Every rank runs the same Adam over the same summed gradient: 1/(loss_scale·N) turns the sum
 * of N scaled per-rank gradients into the unscaled mean, times the clip factor. Unit by unit on the
 * optimizer stream (Adam reads and writes memory, the GEMMs beside it mostly compute). */
static void optimizer_step(Trainer *t) {
    for (int u = 0; u < t->n_units; u++) {
        size_t off = t->part.off_pad[u];
        zl_stream_wait_event(t->optim, t->grads_synced[u]);
        zl_numerics_adam(&t->num, u, t->master + off, t->adam_m + off, t->adam_v + off, unit(t, t->params, u),
                         unit(t, t->grads, u), t->part.n_pad[u], t->optim);
        zl_event_record(t->updated[u], t->optim);
    }
}

/* Did the step overflow, and how large is the gradient? After the all-reduce every rank
 * holds the same summed gradient, so each rank answers alone — nothing to agree on. (From
 * ZeRO-1 on each rank holds a slice and the answers must be all-reduced: stage1.c.) */
static zl_step_verdict check_gradients(Trainer *t, int step, float *loss) {
    zl_grad_stats_zero(t->stats, t->comm);
    zl_grad_stats(t->grads, t->part.full_len, t->stats, t->comm); /* padding and gaps are zero */
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
    backward_and_allreduce(t, j);
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
 * end of its own: there each unit's forward waits only for that unit's update, so the rest
 * overlaps the forward. Returns the mean loss over all N·K·B rows. */
static float train_step(Trainer *t, int step) {
    const zl_config *c = &t->rt.cfg;
    zl_comm_step_begin();
    if (t->update_pending) optimizer_step(t);
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

/* Every rank holds full copies of everything, so each saves only its shard (its 1/N slice of each unit) of the
 * fp32 master and Adam m, v (ZeRO-1's slices: no byte is written twice); the fp16 params
 * are not saved but rebuilt from the master on resume. */
static zl_ckpt_owned owned(Trainer *t) {
    return (zl_ckpt_owned){t->master, t->adam_m, t->adam_v, ZL_CKPT_FULL, t->params, ZL_CKPT_FULL};
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
    t.updated = zl_events_create(t.n_units);
    t.loss_ready = zl_event_create();
    int grad_syncs = t.n_units, control_syncs = c->accum; /* the loss of each micro-batch */
    zl_comm_init(t.rt.world, grad_syncs + control_syncs); /* collectives per step */

    /* every buffer before step 1, then training with allocation frozen */
    zl_report rep = {.rt = &t.rt, .part = &t.part, .steps = c->steps};
    rep.device_known = zl_dev_mem_used(&rep.device_baseline, &rep.device_total);
    zl_mem_init(zl_dev_alloc, zl_dev_free);
    rep.fc = (zl_formula_config){.stage = STAGE, .model = t.shape,
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
