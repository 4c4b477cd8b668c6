/* model.h — the model behind a unit interface: all a stage file knows of the network it trains.
 *
 * A model is a row of *shard units*, the grain of ZeRO's sharding, gathering and gradient sync;
 * its parameters are one flat fp16 vector, unit after unit. A forward pass visits *uses*
 * k = 0 .. n_uses-1, in order; use k reads the parameters of unit zl_model_unit_of_use(k).
 * Backward visits the same uses in reverse. The MLP uses unit k at use k, once each; a model
 * with a tied weight (GPT-2's token embedding, read again by the LM head) uses that unit
 * twice, and its gradient is final only after the unit's last backward use
 * (zl_model_grads_final): earlier uses keep their part inside the model.
 *
 * Who owns what. The stage files decide where each unit's parameters and gradients live and
 * when they move (DDP: full buffers; ZeRO-3: a gather slot and a bucket) and hand the model
 * pointers to one unit at a time. The model owns the rest: the batch, the activations it
 * saves for backward, the activation gradient passed from use to use, the loss, the kernel
 * workspace — and the formulas for those bytes.
 *
 * Two halves:
 *   layout   (model/layout.c)  pure arithmetic: units, uses, byte formulas. No MPI, no device:
 *                              zerocalc and formulas.c link it.
 *   running  (model/model.c)   buffers from the tracked allocator, kernels on a stream.
 * Each dispatches on the kind to one implementation: the residual MLP (model/mlp.h) or the
 * GPT-2-like transformer (model/gpt.h), whose tied embedding is the unit used twice.
 *
 * defines: zl_model_shape, zl_model_* (layout and running), zl_model (opaque handle). */
#ifndef ZL_MODEL_H
#define ZL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/args.h"
#include "../common/partition.h"
#include "../kernels/backend.h"
#include "../kernels/gpt_kernels.h"

typedef enum { ZL_MODEL_MLP = 0, ZL_MODEL_GPT = 1 } zl_model_kind;

/* Which model, how large, and how many rows one rank runs per step. */
typedef struct {
    zl_model_kind kind;
    int layers, dim; /* L blocks of width D */
    int rows;        /* B: rows per rank per step (GPT: sequences of seq tokens) */
    int seq, heads, vocab; /* GPT only: T, H, V (unpadded; gpt.h pads it) */
    const char *data;      /* GPT only: a text file to train on, or NULL: the synthetic stream */
} zl_model_shape;

/* ---- layout: pure arithmetic ------------------------------------------------------- */

zl_model_shape zl_model_shape_of(const zl_config *c); /* from the command line */
zl_gpt_dims zl_model_gpt_dims(zl_model_shape s);      /* GPT: the kernels' call shape */
int zl_model_n_units(zl_model_shape s);
size_t zl_model_unit_params(zl_model_shape s, int u); /* n(u), unpadded */
size_t zl_model_unit_offset(zl_model_shape s, int u); /* Σ n(v) for v < u: where unit u starts */
/* The model's units, each padded to a multiple of N (partition.h). Returns 0, or -1 when a
 * byte count overflows. */
int zl_model_partition(zl_partition *p, zl_model_shape s, int world);

int zl_model_n_uses(zl_model_shape s);
int zl_model_unit_of_use(zl_model_shape s, int k);
/* 1 when backward use k leaves its unit's gradient final (it is the unit's last backward use). */
int zl_model_grads_final(zl_model_shape s, int k);

/* Bytes the running model allocates: activations (saved for backward) and scratch (batch
 * targets, activation gradients, the loss). measured == these, to the byte. */
size_t zl_model_activation_bytes(zl_model_shape s);
size_t zl_model_scratch_bytes(zl_model_shape s);
/* Host memory the running model allocates (category host staging: the GPT batch is prepared
 * on the host); 0 for the MLP. */
size_t zl_model_host_bytes(zl_model_shape s);

/* ---- running: buffers and kernels ------------------------------------------------------
 * Every call runs on the stream it is given, in the order called. */
typedef struct zl_model zl_model;

/* Allocate the activations, scratch and kernel workspace through the tracked allocator
 * (categories activations, scratch, workspace): call before zl_mem_freeze. */
zl_model *zl_model_create(zl_model_shape s);
void zl_model_free(zl_model *m); /* releases its buffers too */
/* What the kernels declare they need (the workspace category's formula). */
size_t zl_model_workspace_bytes(zl_model_shape s);

/* Initialise elements [begin, end) of unit u (unit coordinates; end may reach into the
 * padding, which is zeroed) into dst. A function of the seed and the global unpadded index
 * only — never of N or rank — so any rank can initialise any slice. */
void zl_model_init_range(const zl_model *m, int u, size_t begin, size_t end, uint64_t seed, zl_half *dst,
                         zl_stream s);

/* This rank's batch: global rows [row0, row0 + rows) of the sample stream of `seed`. */
void zl_model_load_batch(zl_model *m, uint64_t seed, uint64_t row0, zl_stream s);
/* Forward use k with the parameters of its unit. */
void zl_model_forward(zl_model *m, int k, const zl_half *params, zl_stream s);
/* The loss of the last forward (mean over this rank's rows, fp32, device memory; the
 * returned buffer is the model's) and the gradient of loss_scale·loss that seeds backward. */
float *zl_model_loss(zl_model *m, float loss_scale, zl_stream s);
/* Backward use k: reads the parameters of its unit, writes (overwrites) the unit's whole
 * gradient into grads when zl_model_grads_final(k), and passes the activation gradient on
 * to use k-1 inside the model. When zl_model_grads_final(k) is 0 (an earlier backward use of
 * a tied unit: GPT-2's LM head) the model keeps that use's gradient part in its own scratch
 * and does not touch grads at all — the stage may hand it a buffer that another unit's
 * gradient reuses before the unit's last use (stage 2 and 3 alternate two buckets). */
void zl_model_backward(zl_model *m, int k, const zl_half *params, zl_half *grads, zl_stream s);

#endif
