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
 * Two things a stage never sees inside: what forward keeps for backward (the activation
 * policy: with checkpoint set, each unit's input only, and backward recomputes the unit's
 * forward first; with keep set, everything backward reads — the stage's calls do not
 * change), and a step of K micro-batches: the stage loads, runs forward and backward K
 * times, telling backward whether to write a unit's gradient or add to it (ZL_GRADS_WRITE /
 * ZL_GRADS_ADD), and the loss keeps one value per micro-batch.
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
#include "../kernels/gpt_kernels.h"
#include "../kernels/kernels.h" /* zl_grads_mode; streams (backend.h) */

typedef enum { ZL_MODEL_MLP = 0, ZL_MODEL_GPT = 1 } zl_model_kind;

/* Which model, how large, how many rows one rank runs, and what forward keeps. */
typedef struct {
    zl_model_kind kind;
    int layers, dim;       /* L blocks of width D */
    int rows;              /* B: rows per rank per micro-batch (GPT: sequences of seq tokens) */
    int micro_batches;     /* K: micro-batches per step (--accum); 0 counts as 1 */
    int checkpoint;        /* 1: keep each unit's input only, recompute in backward (--checkpoint-activations) */
    int keep;              /* MLP only: 1 keeps gelu(h) of every block too, recomputes nothing (--keep-activations) */
    int seq, heads, vocab; /* GPT only: T, H, V (unpadded; gpt.h pads it) */
    int flash_attention;   /* GPT only: 1 fused attention (lse kept), 0 strided (P kept): --attention */
    const char *data;      /* GPT only: a text file to train on, or NULL: the synthetic stream */
} zl_model_shape;

/* ---- layout: pure arithmetic ------------------------------------------------------- */

zl_model_shape zl_model_shape_of(const zl_config *c); /* from the command line */
zl_gpt_dims zl_model_gpt_dims(zl_model_shape s);      /* GPT: the kernels' call shape */
int zl_model_n_units(zl_model_shape s);
/* The files the model reads (GPT: --data) open and fit: 0, or -1 with one line in err. */
int zl_model_check_inputs(zl_model_shape s, char *err, size_t n);
size_t zl_model_unit_params(zl_model_shape s, int u); /* n(u), unpadded */
size_t zl_model_unit_offset(zl_model_shape s, int u); /* Σ n(v) for v < u: where unit u starts */
/* The model's units, each padded to a multiple of N (partition.h). Returns 0, or -1 when a
 * byte count overflows. */
int zl_model_partition(zl_partition *p, zl_model_shape s, int world);

int zl_model_n_uses(zl_model_shape s);
int zl_model_unit_of_use(zl_model_shape s, int k);
/* 1 when backward use k leaves its unit's gradient final (it is the unit's last backward use). */
int zl_model_grads_final(zl_model_shape s, int k);

/* K, with 0 read as 1. */
static inline int zl_model_micro_batches(zl_model_shape s) { return s.micro_batches > 0 ? s.micro_batches : 1; }

/* Bytes the running model allocates: activations (saved for backward, and the one-unit
 * buffers backward recomputes into) and scratch (batch targets, activation gradients, the
 * K losses). measured == these, to the byte. */
size_t zl_model_activation_bytes(zl_model_shape s);
size_t zl_model_scratch_bytes(zl_model_shape s);
/* Host memory the running model allocates (category host staging: the GPT batch is prepared
 * on the host); 0 for the MLP. */
size_t zl_model_host_bytes(zl_model_shape s);

/* ---- running: buffers and kernels ------------------------------------------------------
 * Every call runs on the stream it is given, in the order called. */
typedef struct zl_model zl_model;

/* Compute spans a step records on the timeline (what zl_model_create reserves). */
int zl_model_spans_per_step(zl_model_shape s);
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

/* This rank's batch (one micro-batch): global rows [row0, row0 + rows) of the sample
 * stream of `seed`. */
void zl_model_load_batch(zl_model *m, uint64_t seed, uint64_t row0, zl_stream s);
/* Forward use k with the parameters of its unit. params (and backward's grads) must start on
 * a 16-byte line — every stage hands a unit at the same alignment, so its GEMMs run the same
 * kernels (the same bits) in every stage; else exit 1 (an internal error). */
void zl_model_forward(zl_model *m, int k, const zl_half *params, zl_stream s);
/* The loss of the last forward (mean over this rank's rows, fp32) into micro-batch
 * `micro`'s place (0..K-1; device memory, the model's), which it returns, and the gradient
 * of loss_scale·loss that seeds backward. */
float *zl_model_loss(zl_model *m, int micro, float loss_scale, zl_stream s);
/* Σ over the step's K micro-batches of their loss values as they stand now (e.g. after an
 * all-reduce), on the host, in micro-batch order. Waits for the stream. */
float zl_model_loss_sum(zl_model *m, zl_stream s);
/* Backward use k: reads the parameters of its unit, stores the unit's whole gradient into
 * grads when zl_model_grads_final(k) — overwriting it (ZL_GRADS_WRITE) or adding to it
 * (ZL_GRADS_ADD: accumulation over micro-batches) — and passes the activation gradient on
 * to use k-1 inside the model. When zl_model_grads_final(k) is 0 (an earlier backward use of
 * a tied unit: GPT-2's LM head) the model keeps that use's gradient part in its own scratch
 * and does not touch grads at all — the stage may hand it a buffer that another unit's
 * gradient reuses before the unit's last use (stage 2 and 3 alternate two buckets); the
 * last use then stores the whole gradient (both parts) as `mode` says. */
void zl_model_backward(zl_model *m, int k, const zl_half *params, zl_half *grads, zl_grads_mode mode, zl_stream s);

#endif
