/* model.c — the running model: buffers and kernels, one case per model kind (see model.h). */
#include "model.h"

#include <stdint.h>
#include <stdlib.h>

#include "../common/trace.h"
#include "../common/util.h"
#include "../kernels/kernels.h"
#include "gpt.h"
#include "mlp.h"

struct zl_model {
    zl_model_shape shape;
    zl_mlp mlp; /* kind ZL_MODEL_MLP */
    zl_gpt gpt; /* kind ZL_MODEL_GPT */
};

int zl_model_check_inputs(zl_model_shape s, char *err, size_t n) {
    return s.kind == ZL_MODEL_GPT && s.data && s.data[0] ? zl_gpt_check_data(s.data, s.seq, err, n) : 0;
}

/* The timeline's compute lane, per step: per micro-batch the batch, a forward and a backward
 * span per use, the loss; then the stage's optimizer (at most one Adam call per unit). */
int zl_model_spans_per_step(zl_model_shape s) {
    return zl_model_micro_batches(s) * (1 + 2 * zl_model_n_uses(s) + 1) + zl_model_n_units(s);
}

zl_model *zl_model_create(zl_model_shape s) {
    zl_model *m = zl_host_calloc(1, sizeof *m);
    m->shape = s;
    zl_trace_reserve(ZL_LANE_COMPUTE, zl_model_spans_per_step(s));
    switch (s.kind) {
    case ZL_MODEL_MLP:
        zl_mlp_create(&m->mlp, s.layers, s.dim, s.rows, zl_model_micro_batches(s), s.checkpoint, s.keep);
        break;
    case ZL_MODEL_GPT:
        zl_gpt_create(&m->gpt, s.layers, zl_model_gpt_dims(s), zl_model_micro_batches(s), s.checkpoint, s.data);
        break;
    }
    return m;
}

void zl_model_free(zl_model *m) {
    if (!m) return;
    switch (m->shape.kind) {
    case ZL_MODEL_MLP: zl_mlp_free(&m->mlp); break;
    case ZL_MODEL_GPT: zl_gpt_free(&m->gpt); break;
    }
    free(m);
}

size_t zl_model_workspace_bytes(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return zl_kernels_workspace_bytes(s.rows, s.dim);
    case ZL_MODEL_GPT: return zl_gpt_workspace_bytes(zl_model_gpt_dims(s));
    }
    return 0;
}

void zl_model_init_range(const zl_model *m, int u, size_t begin, size_t end, uint64_t seed, zl_half *dst,
                         zl_stream s) {
    size_t unit_off = zl_model_unit_offset(m->shape, u);
    switch (m->shape.kind) {
    case ZL_MODEL_MLP: zl_mlp_init_range(m->shape.dim, unit_off, begin, end, seed, dst, s); break;
    case ZL_MODEL_GPT:
        zl_gpt_init_range(m->shape.layers, zl_model_gpt_dims(m->shape), u, unit_off, begin, end, seed, dst, s);
        break;
    }
}

/* Each running call is one span on the timeline's compute lane (common/trace.h). */
void zl_model_load_batch(zl_model *m, uint64_t seed, uint64_t row0, zl_stream s) {
    zl_trace_begin(ZL_PHASE_BATCH, -1, s);
    switch (m->shape.kind) {
    case ZL_MODEL_MLP: zl_mlp_load_batch(&m->mlp, seed, row0, s); break;
    case ZL_MODEL_GPT: zl_gpt_load_batch(&m->gpt, seed, row0, s); break;
    }
    zl_trace_end(ZL_PHASE_BATCH, -1, s);
}

/* Every stage must hand a unit at the same alignment: cuBLASLt picks its kernels (hence the
 * bits) by the operands' alignment, and its unaligned ones run at half speed. Full buffers put
 * every unit on a 16-byte line (partition.h), buckets and gather buffers start on one. */
static void expect_on_line(const void *p, int u, const char *what) {
    if ((uintptr_t)p % 16)
        zl_fatal("internal: unit %d's %s at %p: not on a 16-byte line (common/partition.h)", u, what, p);
}

void zl_model_forward(zl_model *m, int k, const zl_half *params, zl_stream s) {
    int u = zl_model_unit_of_use(m->shape, k);
    expect_on_line(params, u, "parameters");
    zl_trace_begin(ZL_PHASE_FORWARD, u, s);
    switch (m->shape.kind) {
    case ZL_MODEL_MLP: zl_mlp_forward(&m->mlp, k, params, s); break;
    case ZL_MODEL_GPT: zl_gpt_forward(&m->gpt, k, params, s); break;
    }
    zl_trace_end(ZL_PHASE_FORWARD, u, s);
}

float *zl_model_loss(zl_model *m, int micro, float loss_scale, zl_stream s) {
    float *loss = NULL;
    zl_trace_begin(ZL_PHASE_LOSS, -1, s);
    switch (m->shape.kind) {
    case ZL_MODEL_MLP: loss = zl_mlp_loss(&m->mlp, micro, loss_scale, s); break;
    case ZL_MODEL_GPT: loss = zl_gpt_loss(&m->gpt, micro, loss_scale, s); break;
    }
    zl_trace_end(ZL_PHASE_LOSS, -1, s);
    return loss;
}

float zl_model_loss_sum(zl_model *m, zl_stream s) {
    switch (m->shape.kind) {
    case ZL_MODEL_MLP: return zl_mlp_loss_sum(&m->mlp, s);
    case ZL_MODEL_GPT: return zl_gpt_loss_sum(&m->gpt, s);
    }
    return 0.0f;
}

void zl_model_backward(zl_model *m, int k, const zl_half *params, zl_half *grads, zl_grads_mode mode, zl_stream s) {
    int u = zl_model_unit_of_use(m->shape, k);
    expect_on_line(params, u, "parameters");
    expect_on_line(grads, u, "gradients");
    zl_trace_begin(ZL_PHASE_BACKWARD, u, s);
    switch (m->shape.kind) {
    case ZL_MODEL_MLP: zl_mlp_backward(&m->mlp, k, params, grads, mode, s); break;
    case ZL_MODEL_GPT: zl_gpt_backward(&m->gpt, k, params, grads, mode, s); break;
    }
    zl_trace_end(ZL_PHASE_BACKWARD, u, s);
}
