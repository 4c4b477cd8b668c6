/* mlp.h — the residual MLP, the first model behind the unit interface (model.h).
 *
 * L blocks of width D, one shard unit each, used once per pass (use k = block k):
 *     h = x·W1 + b1,  a = gelu(h),  y = x + a·W2 + b2      (kernels/kernels.h)
 * and MSE against the teacher's targets. A unit holds W1 (D×4D, row-major), b1 (4D),
 * W2 (4D×D), b2 (D): 8D² + 5D elements. Backward needs x, h and a of every block, so
 * forward saves them; the loss and backward pass an activation gradient (B×D) from block
 * to block through two buffers that take turns.
 *
 * defines: zl_mlp_* (sizes and tensor offsets inline; buffers and kernels in mlp.c). */
#ifndef ZL_MLP_H
#define ZL_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"

/* ---- layout ---------------------------------------------------------------------------- */
static inline size_t zl_mlp_unit_params(size_t dim) { return 8 * dim * dim + 5 * dim; }
/* Offsets of the block's tensors inside its unit. */
static inline size_t zl_mlp_off_W1(size_t dim) { (void)dim; return 0; }
static inline size_t zl_mlp_off_b1(size_t dim) { return 4 * dim * dim; }
static inline size_t zl_mlp_off_W2(size_t dim) { return 4 * dim * dim + 4 * dim; }
static inline size_t zl_mlp_off_b2(size_t dim) { return 8 * dim * dim + 4 * dim; }

/* Saved activations, fp16: per block x (B·D), h and a (B·4D each), plus the output (B·D):
 * 2·[(L+1)·B·D + 8·L·B·D]. */
static inline size_t zl_mlp_activation_bytes(size_t layers, size_t dim, size_t rows) {
    size_t BD = rows * dim;
    return 2 * ((layers + 1) * BD + 8 * layers * BD);
}
/* Scratch: targets (B·D), two activation gradients (2·B·D), dh (4·B·D), all fp16, plus
 * one fp32 loss: 2·7·B·D + 4. */
static inline size_t zl_mlp_scratch_bytes(size_t dim, size_t rows) { return 2 * 7 * rows * dim + 4; }

/* The power-of-two init scales: 2^-k with k = round(log2(sqrt(fan_in))). */
int zl_mlp_init_scale_log2_W1(int dim);
int zl_mlp_init_scale_log2_W2(int dim);

/* ---- running ----------------------------------------------------------------------------- */
typedef struct {
    int L, D, B;
    zl_half *x;         /* (L+1)·B·D: block u's input at u·B·D; block L-1's output last */
    zl_half *h, *a;     /* L·B·4D each: pre-activations and gelu(h), block u at u·B·4D */
    zl_half *target;    /* B·D */
    zl_half *dx[2];     /* B·D each: activation gradients, taking turns */
    int dy;             /* dx[dy] holds dL/d(output) of the next block backward runs */
    zl_half *dh;        /* B·4D */
    float *loss;        /* 1 */
    void *workspace;    /* zl_kernels_workspace_bytes(B, D) */
} zl_mlp;

void zl_mlp_create(zl_mlp *m, int layers, int dim, int rows);
void zl_mlp_free(zl_mlp *m);
void zl_mlp_init_range(int dim, size_t unit_off, size_t begin, size_t end, uint64_t seed, zl_half *dst,
                       zl_stream s);
void zl_mlp_load_batch(zl_mlp *m, uint64_t seed, uint64_t row0, zl_stream s);
void zl_mlp_forward(zl_mlp *m, int u, const zl_half *p, zl_stream s);
float *zl_mlp_loss(zl_mlp *m, float loss_scale, zl_stream s);
void zl_mlp_backward(zl_mlp *m, int u, const zl_half *p, zl_half *g, zl_stream s);

#endif
