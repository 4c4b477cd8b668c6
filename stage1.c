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
 * all fp16 params for the next forward.
 *
 * Traffic per step and rank: reduce-scatter (N-1)/N·2Ψ_pad + all-gather (N-1)/N·2Ψ_pad =
 * 2(N-1)/N·2Ψ_pad, the same as DDP's all-reduce (which *is* a reduce-scatter followed by
 * an all-gather). --grad-sync allreduce runs the PyTorch from-scratch post's variant instead:
 * all-reduce the full gradient (then use only the slice) + all-gather = 1.5× DDP's traffic.
 *
 * Run: mpiexec -n N build/cpu/stage1 --preset demo   (or build/cuda/stage1). */
#include <stdio.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/comm.h"
#include "common/formulas.h"
#include "common/model.h"
#include "common/preflight.h"
#include "common/report.h"
#include "common/runtime.h"
#include "common/util.h"
#include "kernels/kernels.h"

enum { STAGE = 1 };

typedef struct {
    zl_runtime rt;
    zl_model_shape shape;
    zl_partition part; /* L shard units, padded to multiples of N (DDP uses the same layout) */
    int B, D, L;

    /* model states. Full fp16 params and grads (padded layout, unit u at part.off_pad[u]);
     * fp32 master, m, v only for this rank's slices (unit u at part.shard_off[u]). */
    zl_half *params;
    zl_half *grads;
    float *master, *adam_m, *adam_v;

    /* activations saved for backward: x[u] is block u's input (x[L] = output), h and a per block */
    zl_half *act_x, *act_h, *act_a;
    /* scratch: targets, two activation-gradient buffers, dh, the loss */
    zl_half *target, *dx[2], *dh;
    float *loss;
    void *workspace;
    zl_half *staging; /* host */

    zl_stream compute, comm;
    zl_event *grads_ready;  /* one per unit: its gradients are written */
    zl_event *grads_synced; /* one per unit: its reduce-scatter is done */
    zl_event *slice_updated; /* one per unit: Adam has written this rank's fp16 slice */
    zl_event *params_gathered; /* one per unit: its all-gather is done */
    zl_event loss_ready;
} Trainer;

/* Unit u inside a full padded buffer (params or grads). */
static zl_half *unit(Trainer *t, zl_half *buf, int u) { return buf + t->part.off_pad[u]; }
static zl_half *x_of(Trainer *t, int u) { return t->act_x + (size_t)u * t->B * t->D; }
static zl_half *h_of(Trainer *t, int u) { return t->act_h + (size_t)u * t->B * 4 * t->D; }
static zl_half *a_of(Trainer *t, int u) { return t->act_a + (size_t)u * t->B * 4 * t->D; }
/* This rank's slice of unit u inside a full padded buffer. */
static zl_half *my_slice(Trainer *t, zl_half *buf, int u) {
    return buf + t->part.off_pad[u] + (size_t)t->rt.rank * t->part.shard[u];
}

/* Every buffer the run will ever use, allocated once before step 1 (ZeRO-R's
 * constant-size buffers): the step loop itself allocates nothing. */
static void allocate(Trainer *t) {
    size_t psi_pad = t->part.psi_pad, shard = t->part.shard_total, BD = (size_t)t->B * t->D, L = (size_t)t->L;
    t->params = zl_mem_alloc(ZL_MEM_PARAMS_FP16, 2 * psi_pad, "fp16 params");
    t->grads = zl_mem_alloc(ZL_MEM_GRADS_FP16, 2 * psi_pad, "fp16 grads");
    t->master = zl_mem_alloc(ZL_MEM_MASTER_FP32, 4 * shard, "fp32 master params (this rank's slices)");
    t->adam_m = zl_mem_alloc(ZL_MEM_ADAM_M, 4 * shard, "Adam m (this rank's slices)");
    t->adam_v = zl_mem_alloc(ZL_MEM_ADAM_V, 4 * shard, "Adam v (this rank's slices)");
    t->act_x = zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * (L + 1) * BD, "block inputs x");
    t->act_h = zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * L * 4 * BD, "pre-activations h");
    t->act_a = zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * L * 4 * BD, "activations a = gelu(h)");
    t->target = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "targets");
    t->dx[0] = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "activation grad 0");
    t->dx[1] = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "activation grad 1");
    t->dh = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * 4 * BD, "dh");
    t->loss = zl_mem_alloc(ZL_MEM_SCRATCH, sizeof(float), "loss");
    size_t ws = zl_kernels_workspace_bytes(t->B, t->D);
    t->workspace = zl_mem_alloc(ZL_MEM_WORKSPACE, ws, "kernel workspace");
    zl_kernels_set_workspace(t->workspace, ws);
    t->staging = zl_mem_alloc(ZL_MEM_HOST_STAGING, 2 * t->part.max_unit, "host staging for param_hash");
}

/* Parameters from the seed alone (the same full vector as DDP); fp32 master = exact copy
 * of this rank's fp16 slices; Adam moments and gradient padding start at zero. */
static void initialise(Trainer *t) {
    for (int u = 0; u < t->L; u++) {
        zl_model_init_range(unit(t, t->params, u), &t->part, t->shape, u, 0, t->part.n_pad[u],
                            t->rt.cfg.seed, t->compute);
        zl_half_to_float_array(t->master + t->part.shard_off[u], my_slice(t, t->params, u), t->part.shard[u],
                               t->compute);
        zl_event_record(t->params_gathered[u], t->comm); /* nothing to wait for at step 1 */
    }
    zl_memset_async(t->adam_m, 0, 4 * t->part.shard_total, t->compute);
    zl_memset_async(t->adam_v, 0, 4 * t->part.shard_total, t->compute);
    zl_memset_async(t->grads, 0, 2 * t->part.psi_pad, t->compute);
    zl_stream_sync(t->compute);
}

/* Block u's forward, reading its parameters from the unit at p (W1, b1, W2, b2). */
static void forward_block(Trainer *t, int u, const zl_half *p) {
    size_t D = (size_t)t->D;
    zl_block_forward(x_of(t, u), p + zl_off_W1(D), p + zl_off_b1(D), p + zl_off_W2(D), p + zl_off_b2(D), h_of(t, u),
                     a_of(t, u), x_of(t, u + 1), t->B, t->D, t->compute);
}

/* Block u's backward: parameters from unit p, gradients written into unit g, dy -> dx. */
static void backward_block(Trainer *t, int u, const zl_half *p, zl_half *g, const zl_half *dy, zl_half *dx) {
    size_t D = (size_t)t->D;
    zl_block_backward(x_of(t, u), h_of(t, u), a_of(t, u), p + zl_off_W1(D), p + zl_off_W2(D), dy, t->dh,
                      g + zl_off_W1(D), g + zl_off_b1(D), g + zl_off_W2(D), g + zl_off_b2(D), dx, t->B, t->D,
                      t->compute);
}

/* Block u may start once the previous step's all-gather of unit u has landed: the
 * gathers of later units overlap the forward of earlier ones. */
static void forward(Trainer *t) {
    for (int u = 0; u < t->L; u++) {
        zl_stream_wait_event(t->compute, t->params_gathered[u]);
        forward_block(t, u, unit(t, t->params, u));
    }
}

/* Backward from the last block to the first. The moment block u's gradients are
 * written, the communication stream reduce-scatters them in place: this rank's slice of
 * the sum over ranks lands in its own place of the full gradient buffer (the rest of the
 * unit's buffer is left stale; nobody reads it). Overlaps the backward of block u-1. */
static void backward_and_reduce_scatter(Trainer *t) {
    int cur = 0; /* dx[cur] holds dL/d(output of block u) */
    for (int u = t->L - 1; u >= 0; u--) {
        zl_half *dx = u > 0 ? t->dx[cur ^ 1] : NULL; /* block 0: the input needs no gradient */
        backward_block(t, u, unit(t, t->params, u), unit(t, t->grads, u), t->dx[cur], dx);
        cur ^= 1;
        zl_event_record(t->grads_ready[u], t->compute);
        zl_stream_wait_event(t->comm, t->grads_ready[u]);
        if (t->rt.cfg.grad_sync_allreduce) /* the from-scratch post's variant: the full sum; we use 1/N */
            zl_allreduce(unit(t, t->grads, u), t->part.n_pad[u], ZL_F16, ZL_P_GRAD_SYNC, u, t->comm);
        else
            zl_reduce_scatter(unit(t, t->grads, u), my_slice(t, t->grads, u), t->part.shard[u], ZL_F16,
                              ZL_P_GRAD_SYNC, u, t->comm);
        zl_event_record(t->grads_synced[u], t->comm);
    }
}

/* Each rank updates only its slice of each unit — 1/N of DDP's optimizer work and state —
 * and writes the new fp16 values into that slice of the full param buffer. Then the unit
 * is all-gathered in place, so every rank holds every new fp16 param again; the gather of
 * unit u overlaps the update of unit u+1. 1/(loss_scale·N): unscale, and sum -> mean. */
static void optimizer_step_and_allgather(Trainer *t, int step) {
    const zl_config *c = &t->rt.cfg;
    zl_adam_hparams hp = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    for (int u = 0; u < t->L; u++) {
        size_t off = t->part.shard_off[u];
        zl_stream_wait_event(t->compute, t->grads_synced[u]);
        zl_adam_update(t->master + off, t->adam_m + off, t->adam_v + off, my_slice(t, t->params, u),
                       my_slice(t, t->grads, u), t->part.shard[u], 1.0f / (c->loss_scale * (float)t->rt.world),
                       step, hp, t->compute);
        zl_event_record(t->slice_updated[u], t->compute);
        zl_stream_wait_event(t->comm, t->slice_updated[u]);
        zl_allgather(my_slice(t, t->params, u), unit(t, t->params, u), t->part.shard[u], ZL_F16,
                     ZL_P_GATHER_STEP, u, t->comm);
        zl_event_record(t->params_gathered[u], t->comm);
    }
}

/* One training step; returns the mean loss over all N·B rows. */
static float train_step(Trainer *t, int step) {
    const zl_config *c = &t->rt.cfg;
    /* Step s uses global rows [s·N·B, (s+1)·N·B); this rank takes its B of them. */
    uint64_t row0 = ((uint64_t)(step - 1) * t->rt.world + t->rt.rank) * (uint64_t)t->B;
    zl_comm_step_begin();
    zl_data_generate(x_of(t, 0), t->target, c->seed, row0, t->B, t->D, t->compute);
    forward(t);
    zl_mse_loss_backward(x_of(t, t->L), t->target, t->dx[0], t->loss, t->B, t->D, c->loss_scale, t->compute);
    zl_event_record(t->loss_ready, t->compute);
    zl_stream_wait_event(t->comm, t->loss_ready);
    zl_allreduce(t->loss, 1, ZL_F32, ZL_P_CONTROL, -1, t->comm); /* sum of per-rank means */
    backward_and_reduce_scatter(t);
    optimizer_step_and_allgather(t, step);
    float loss_sum;
    zl_stream_sync(t->comm);
    zl_memcpy_d2h(&loss_sum, t->loss, sizeof loss_sum, t->compute); /* also waits for Adam */
    zl_comm_step_end(step > 1 || c->steps == 1);                  /* step 1 is warm-up for timing */
    return loss_sum / (float)t->rt.world;
}

static uint64_t param_hash(Trainer *t) {
    zl_param_digest d;
    zl_digest_begin(&d, &t->rt);
    for (int u = 0; u < t->L; u++)
        zl_digest_unit(&d, unit(t, t->params, u), t->part.n[u], t->staging, t->compute);
    return zl_digest_end(&d);
}

int main(int argc, char **argv) {
    Trainer t = {0};
    zl_runtime_start(&t.rt, STAGE, argc, argv); /* exits on bad flags, before any allocation */
    const zl_config *c = &t.rt.cfg;
    t.L = c->layers, t.D = c->dim, t.B = c->batch;
    t.shape = (zl_model_shape){c->layers, c->dim};
    if (zl_model_partition(&t.part, t.shape, t.rt.world)) zl_fatal("model too large: byte counts overflow");

    t.compute = zl_stream_create();
    t.comm = zl_stream_create();
    zl_event **per_unit[] = {&t.grads_ready, &t.grads_synced, &t.slice_updated, &t.params_gathered};
    for (int k = 0; k < 4; k++) {
        *per_unit[k] = malloc((size_t)t.L * sizeof(zl_event));
        if (!*per_unit[k]) zl_fatal("out of host memory");
        for (int u = 0; u < t.L; u++) (*per_unit[k])[u] = zl_event_create();
    }
    t.loss_ready = zl_event_create();
    zl_comm_init(t.rt.world, 2 * t.L + 4);

    zl_report rep = {.rt = &t.rt, .part = &t.part, .steps = c->steps};
    rep.device_known = zl_dev_mem_used(&rep.device_baseline, &rep.device_total);
    zl_mem_init(zl_dev_alloc, zl_dev_free);
    rep.fc = (zl_formula_config){.stage = STAGE, .rows = t.B, .dim = t.D, .layers = t.L,
                                 .grad_sync_allreduce = c->grad_sync_allreduce,
                                 .workspace_bytes = zl_kernels_workspace_bytes(t.B, t.D)};
    zl_preflight(&t.rt, &t.part, &rep.fc, t.shape); /* exits 2, nothing allocated, if it cannot fit */
    allocate(&t);
    zl_dev_mem_used(&rep.device_after_alloc, &rep.device_total);
    initialise(&t);

    float *losses = malloc((size_t)c->steps * sizeof(float));
    if (!losses) zl_fatal("out of host memory");
    double timed_ms = 0;
    zl_mem_freeze(); /* from here to the end of training, no allocation */
    for (int step = 1; step <= c->steps; step++) {
        double t0 = zl_wall_seconds();
        losses[step - 1] = train_step(&t, step);
        double ms = (zl_wall_seconds() - t0) * 1e3;
        if (step > 1 || c->steps == 1) timed_ms += ms;
        zl_report_step(&t.rt, step, c->steps, losses[step - 1], ms);
    }
    zl_mem_unfreeze();
    zl_dev_mem_used(&rep.device_end, &rep.device_total);

    rep.variant = c->grad_sync_allreduce ? "all-reduce + all-gather (the PyTorch from-scratch post; 1.5x DDP traffic)"
                                         : "reduce-scatter + all-gather (in place; DDP traffic)";
    rep.losses = losses;
    rep.ms_per_step = timed_ms / (c->steps > 1 ? c->steps - 1 : 1);
    rep.param_hash = param_hash(&t);
    int status = zl_report_final(&rep);

    free(losses);
    zl_mem_free_all();
    zl_comm_finalize();
    for (int k = 0; k < 4; k++) {
        for (int u = 0; u < t.L; u++) zl_event_destroy((*per_unit[k])[u]);
        free(*per_unit[k]);
    }
    zl_event_destroy(t.loss_ready);
    zl_stream_destroy(t.compute);
    zl_stream_destroy(t.comm);
    zl_partition_free(&t.part);
    return zl_runtime_finish(&t.rt, status);
}
