/* stage3.c — ZeRO-3, P_os+g+p: optimizer-state, gradient and parameter partitioning (paper §5.3).
 *
 * ZeRO-2 still keeps all fp16 parameters (2Ψ) on every rank. Here rank r keeps only its
 * slice of every unit, so all model states shrink by N:
 *     (fp16 params 2Ψ + fp16 grads 2Ψ + 12Ψ) / N  =  16Ψ/N bytes
 * A unit's full parameters exist only while they are used: forward all-gathers unit u
 * into a gather buffer, computes, and releases the buffer; backward gathers it again,
 * computes, reduce-scatters the unit's gradients (from a bucket, as in stage 2) and
 * releases. --prefetch K gathers the next K units while the current one computes, with
 * 1 + K gather buffers in a ring (constant size: the largest unit). Adam writes the new
 * fp16 values straight into the rank's parameter shard: nothing to gather after the step.
 *
 * Traffic per step and rank: all-gather fwd + all-gather bwd + reduce-scatter, each
 * (N-1)/N·2Ψ_pad = 3(N-1)/N·2Ψ_pad, 1.5× DDP (paper §7.2.2). The gather of the final
 * parameters for param_hash is reported apart.
 *
 * Run: mpiexec -n N build/cpu/stage3 --preset demo --prefetch 1   (or build/cuda/stage3). */
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

enum { STAGE = 3 };

typedef struct {
    zl_runtime rt;
    zl_model_shape shape;
    zl_partition part; /* L shard units, padded to multiples of N (DDP uses the same layout) */
    int B, D, L;

    /* model states: only this rank's slices (unit u at part.shard_off[u]) of everything */
    zl_half *params;
    zl_half *grads;
    float *master, *adam_m, *adam_v;
    zl_half *bucket[2]; /* one full padded unit of gradients each, alternating */
    int n_slots;        /* 1 + prefetch */
    zl_half **gather;   /* n_slots buffers of one full padded unit of fp16 params each */

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
    zl_event *gathered;     /* one per gather slot: its all-gather has landed */
    zl_event *slot_free;    /* one per gather slot: the block that read it is done */
    zl_event bucket_free[2]; /* the reduce-scatter that last read bucket b is done */
    zl_event adam_done;      /* the parameter shards hold this step's values */
    zl_event loss_ready;
} Trainer;

static zl_half *x_of(Trainer *t, int u) { return t->act_x + (size_t)u * t->B * t->D; }
static zl_half *h_of(Trainer *t, int u) { return t->act_h + (size_t)u * t->B * 4 * t->D; }
static zl_half *a_of(Trainer *t, int u) { return t->act_a + (size_t)u * t->B * 4 * t->D; }
/* This rank's parameter / gradient slice of unit u in its shards. */
static zl_half *my_params(Trainer *t, int u) { return t->params + t->part.shard_off[u]; }
static zl_half *my_grads(Trainer *t, int u) { return t->grads + t->part.shard_off[u]; }

/* Every buffer the run will ever use, allocated once before step 1 (ZeRO-R's
 * constant-size buffers): the step loop itself allocates nothing. */
static void allocate(Trainer *t) {
    size_t shard = t->part.shard_total, BD = (size_t)t->B * t->D, L = (size_t)t->L;
    t->params = zl_mem_alloc(ZL_MEM_PARAMS_FP16, 2 * shard, "fp16 params (this rank's slices)");
    t->grads = zl_mem_alloc(ZL_MEM_GRADS_FP16, 2 * shard, "fp16 grads (this rank's slices)");
    t->master = zl_mem_alloc(ZL_MEM_MASTER_FP32, 4 * shard, "fp32 master params (this rank's slices)");
    t->adam_m = zl_mem_alloc(ZL_MEM_ADAM_M, 4 * shard, "Adam m (this rank's slices)");
    t->adam_v = zl_mem_alloc(ZL_MEM_ADAM_V, 4 * shard, "Adam v (this rank's slices)");
    for (int b = 0; b < 2; b++) /* sized for the largest unit: constant, whatever the model's depth */
        t->bucket[b] = zl_mem_alloc(ZL_MEM_GRAD_BUCKET, 2 * t->part.max_unit_pad, "gradient bucket");
    for (int k = 0; k < t->n_slots; k++) /* likewise constant: (1 + prefetch) units */
        t->gather[k] = zl_mem_alloc(ZL_MEM_PARAM_GATHER, 2 * t->part.max_unit_pad, "parameter gather buffer");
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

/* Each rank initialises only its slices — the same values DDP has there, since init is
 * a function of the seed and the global index; fp32 master = exact copy of them; Adam
 * moments and the buckets' padding start at zero. */
static void initialise(Trainer *t) {
    for (int u = 0; u < t->L; u++) {
        size_t begin, end;
        zl_partition_shard_range(&t->part, u, t->rt.rank, &begin, &end);
        zl_model_init_range(my_params(t, u), &t->part, t->shape, u, begin, end, t->rt.cfg.seed, t->compute);
        zl_half_to_float_array(t->master + t->part.shard_off[u], my_params(t, u), t->part.shard[u], t->compute);
    }
    for (int k = 0; k < t->n_slots; k++) zl_event_record(t->slot_free[k], t->compute);
    zl_event_record(t->adam_done, t->compute);
    zl_memset_async(t->adam_m, 0, 4 * t->part.shard_total, t->compute);
    zl_memset_async(t->adam_v, 0, 4 * t->part.shard_total, t->compute);
    for (int b = 0; b < 2; b++) {
        zl_memset_async(t->bucket[b], 0, 2 * t->part.max_unit_pad, t->compute); /* padding stays zero */
        zl_event_record(t->bucket_free[b], t->comm);
    }
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

/* A step uses units in the order 0, 1, ..., L-1 (forward), L-1, ..., 0 (backward): use
 * k = 0 .. 2L-1. Use k reads gather slot k % (1 + prefetch). */
static int unit_of_use(Trainer *t, int k) { return k < t->L ? k : 2 * t->L - 1 - k; }
static int slot_of_use(Trainer *t, int k) { return k % t->n_slots; }

/* All-gather the unit of use k into its slot, once the block that last read the slot is
 * done. Issued 1 + prefetch uses ahead, so it overlaps the compute of earlier blocks. */
static void gather_for_use(Trainer *t, int k) {
    if (k >= 2 * t->L) return;
    int u = unit_of_use(t, k), slot = slot_of_use(t, k);
    zl_stream_wait_event(t->comm, t->slot_free[slot]);
    zl_allgather(my_params(t, u), t->gather[slot], t->part.shard[u], ZL_F16,
                 k < t->L ? ZL_P_GATHER_FWD : ZL_P_GATHER_BWD, u, t->comm);
    zl_event_record(t->gathered[slot], t->comm);
}

/* Wait for use k's gather, return its buffer. */
static const zl_half *acquire(Trainer *t, int k) {
    zl_stream_wait_event(t->compute, t->gathered[slot_of_use(t, k)]);
    return t->gather[slot_of_use(t, k)];
}

/* Use k is done with its buffer: release it and gather into it for use k + 1 + prefetch. */
static void release(Trainer *t, int k) {
    zl_event_record(t->slot_free[slot_of_use(t, k)], t->compute);
    gather_for_use(t, k + t->n_slots);
}

/* Gather, compute, release — block by block. The first 1 + prefetch gathers were issued
 * at the start of the step. */
static void forward(Trainer *t) {
    for (int u = 0; u < t->L; u++) {
        forward_block(t, u, acquire(t, u));
        release(t, u);
    }
}

/* Backward from the last block to the first: gather the unit again, compute into
 * alternating buckets, release the parameters, and reduce-scatter the bucket into this
 * rank's gradient shard while backward goes on with block u-1 (as in stage 2). */
static void backward_and_reduce_scatter(Trainer *t) {
    int cur = 0; /* dx[cur] holds dL/d(output of block u) */
    for (int u = t->L - 1; u >= 0; u--) {
        int b = u % 2;
        int k = 2 * t->L - 1 - u;
        zl_stream_wait_event(t->compute, t->bucket_free[b]);
        zl_half *dx = u > 0 ? t->dx[cur ^ 1] : NULL; /* block 0: the input needs no gradient */
        backward_block(t, u, acquire(t, k), t->bucket[b], t->dx[cur], dx);
        release(t, k);
        cur ^= 1;
        zl_event_record(t->grads_ready[u], t->compute);
        zl_stream_wait_event(t->comm, t->grads_ready[u]);
        zl_reduce_scatter(t->bucket[b], my_grads(t, u), t->part.shard[u], ZL_F16, ZL_P_GRAD_SYNC, u, t->comm);
        zl_event_record(t->grads_synced[u], t->comm);
        zl_event_record(t->bucket_free[b], t->comm);
    }
}

/* Each rank updates only its slice of each unit and writes the new fp16 values straight
 * into its parameter shard: the next step's gathers fetch them. 1/(loss_scale·N):
 * unscale, and sum -> mean. */
static void optimizer_step(Trainer *t, int step) {
    const zl_config *c = &t->rt.cfg;
    zl_adam_hparams hp = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    for (int u = 0; u < t->L; u++) {
        size_t off = t->part.shard_off[u];
        zl_stream_wait_event(t->compute, t->grads_synced[u]);
        zl_adam_update(t->master + off, t->adam_m + off, t->adam_v + off, my_params(t, u), my_grads(t, u),
                       t->part.shard[u], 1.0f / (c->loss_scale * (float)t->rt.world), step, hp, t->compute);
    }
    zl_event_record(t->adam_done, t->compute);
}

/* One training step; returns the mean loss over all N·B rows. */
static float train_step(Trainer *t, int step) {
    const zl_config *c = &t->rt.cfg;
    /* Step s uses global rows [s·N·B, (s+1)·N·B); this rank takes its B of them. */
    uint64_t row0 = ((uint64_t)(step - 1) * t->rt.world + t->rt.rank) * (uint64_t)t->B;
    zl_comm_step_begin();
    zl_stream_wait_event(t->comm, t->adam_done); /* the shards hold last step's update */
    for (int k = 0; k < t->n_slots; k++) gather_for_use(t, k);
    zl_data_generate(x_of(t, 0), t->target, c->seed, row0, t->B, t->D, t->compute);
    forward(t);
    zl_mse_loss_backward(x_of(t, t->L), t->target, t->dx[0], t->loss, t->B, t->D, c->loss_scale, t->compute);
    zl_event_record(t->loss_ready, t->compute);
    zl_stream_wait_event(t->comm, t->loss_ready);
    zl_allreduce(t->loss, 1, ZL_F32, ZL_P_CONTROL, -1, t->comm); /* sum of per-rank means */
    backward_and_reduce_scatter(t);
    optimizer_step(t, step);
    float loss_sum;
    zl_stream_sync(t->comm);
    zl_memcpy_d2h(&loss_sum, t->loss, sizeof loss_sum, t->compute); /* also waits for Adam */
    zl_comm_step_end(step > 1 || c->steps == 1);                  /* step 1 is warm-up for timing */
    return loss_sum / (float)t->rt.world;
}

/* The full parameters exist nowhere: gather each unit once more (reported apart from
 * the per-step traffic) to hash it. Every rank takes part in the gathers. */
static uint64_t param_hash(Trainer *t) {
    zl_param_digest d;
    zl_digest_begin(&d, &t->rt);
    zl_comm_step_begin();
    zl_stream_wait_event(t->comm, t->adam_done);
    for (int u = 0; u < t->L; u++) {
        zl_allgather(my_params(t, u), t->gather[0], t->part.shard[u], ZL_F16, ZL_P_GATHER_FINAL, u, t->comm);
        zl_stream_sync(t->comm);
        zl_digest_unit(&d, t->gather[0], t->part.n[u], t->staging, t->comm);
    }
    zl_comm_end_extra();
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
    t.n_slots = 1 + c->prefetch;
    t.gather = calloc((size_t)t.n_slots, sizeof(zl_half *));
    zl_event **events[] = {&t.grads_ready, &t.grads_synced, &t.gathered, &t.slot_free};
    int counts[] = {t.L, t.L, t.n_slots, t.n_slots};
    for (int k = 0; k < 4; k++) {
        *events[k] = malloc((size_t)counts[k] * sizeof(zl_event));
        if (!*events[k] || !t.gather) zl_fatal("out of host memory");
        for (int i = 0; i < counts[k]; i++) (*events[k])[i] = zl_event_create();
    }
    for (int b = 0; b < 2; b++) t.bucket_free[b] = zl_event_create();
    t.adam_done = zl_event_create();
    t.loss_ready = zl_event_create();
    zl_comm_init(t.rt.world, 3 * t.L + 4);

    zl_report rep = {.rt = &t.rt, .part = &t.part, .steps = c->steps};
    rep.device_known = zl_dev_mem_used(&rep.device_baseline, &rep.device_total);
    zl_mem_init(zl_dev_alloc, zl_dev_free);
    rep.fc = (zl_formula_config){.stage = STAGE, .rows = t.B, .dim = t.D, .layers = t.L, .prefetch = c->prefetch,
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

    char variant[64];
    snprintf(variant, sizeof variant, "gather per unit, prefetch %d (%d gather buffers)", c->prefetch, t.n_slots);
    rep.variant = variant;
    rep.losses = losses;
    rep.ms_per_step = timed_ms / (c->steps > 1 ? c->steps - 1 : 1);
    rep.param_hash = param_hash(&t);
    int status = zl_report_final(&rep);

    free(losses);
    zl_mem_free_all();
    zl_comm_finalize();
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < counts[k]; i++) zl_event_destroy((*events[k])[i]);
        free(*events[k]);
    }
    free(t.gather);
    for (int b = 0; b < 2; b++) zl_event_destroy(t.bucket_free[b]);
    zl_event_destroy(t.adam_done);
    zl_event_destroy(t.loss_ready);
    zl_stream_destroy(t.compute);
    zl_stream_destroy(t.comm);
    zl_partition_free(&t.part);
    return zl_runtime_finish(&t.rt, status);
}
