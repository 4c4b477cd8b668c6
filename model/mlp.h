/* mlp.h — the residual MLP, the first model behind the unit interface (model.h).
 *
 * L blocks of width D, one shard unit each, used once per pass (use k = block k):
 *     h = x·W1 + b1,  a = gelu(h),  y = x + a·W2 + b2      (kernels/kernels.h)
 * and MSE against the teacher's targets. A unit holds W1 (D×4D, row-major), b1 (4D),
 * W2 (4D×D), b2 (D): 8D² + 5D elements. Backward needs x, h and a of every block.
 *
 * What forward keeps (the activation policy):
 *   default      x and h of every block; backward recomputes a = gelu(h) into a one-block
 *                buffer (one elementwise pass) instead of keeping a for all L blocks.
 *   checkpoint   x of every block only (--checkpoint-activations); backward first recomputes
 *                the block's h = x·W1 + b1 into a one-block buffer, then a as above. The
 *                recompute is the first GEMM only: y is not needed again.
 *   keep         x, h and a of every block (--keep-activations), what PyTorch's autograd saves
 *                for this block: backward recomputes nothing, and writes dh over the block's
 *                own a once dW2 has read it. 2·(L−1)·B·4D bytes more than the default buys back
 *                the default's elementwise pass a block (a read of h, a write of a).
 * The default and checkpoint run backward on the same bits: a is gelu of the stored 16-bit h
 * (zl_gelu_stored), and the recomputed h is the same GEMM on the same inputs, so the trained
 * parameters are bitwise identical. keep hands backward the a forward used, which the GEMM
 * epilogue took from the unrounded fp32 h: it can differ in the last bit, so a run that keeps
 * trains to its own param_hash (the same in all four stages), as the GPT, which keeps a too.
 * The loss and backward pass an activation gradient (B×D) from block to block through two
 * buffers that take turns.
 *
 * defines: zl_mlp_* (sizes and tensor offsets inline; buffers and kernels in mlp.c). */
#ifndef ZL_MLP_H
#define ZL_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/kernels.h" /* zl_grads_mode */

/* ---- layout ---------------------------------------------------------------------------- */
static inline size_t zl_mlp_unit_params(size_t dim) { return 8 * dim * dim + 5 * dim; }
/* Offsets of the block's tensors inside its unit. */
static inline size_t zl_mlp_off_W1(size_t dim) { (void)dim; return 0; }
static inline size_t zl_mlp_off_b1(size_t dim) { return 4 * dim * dim; }
static inline size_t zl_mlp_off_W2(size_t dim) { return 4 * dim * dim + 4 * dim; }
static inline size_t zl_mlp_off_b2(size_t dim) { return 8 * dim * dim + 4 * dim; }

/* Activations, fp16: every block's input x and the output ((L+1)·B·D), h (B·4D) of every
 * block (default, keep) or of one block (checkpoint), and a (B·4D) of one block (default,
 * checkpoint) or of every block (keep); backward reuses the block's a for dh once dW2 has
 * read it:
 *     default     2·B·D·[(L+1) + 4L + 4]
 *     checkpoint  2·B·D·[(L+1) + 4 + 4]
 *     keep        2·B·D·[(L+1) + 4L + 4L]                                                 */
static inline size_t zl_mlp_activation_bytes(size_t layers, size_t dim, size_t rows, int checkpoint, int keep) {
    size_t BD = rows * dim, h_blocks = checkpoint ? 1 : layers, a_blocks = keep ? layers : 1;
    return 2 * BD * ((layers + 1) + 4 * h_blocks + 4 * a_blocks);
}
/* Scratch: targets (B·D) and two activation gradients (2·B·D), all fp16, plus one fp32
 * loss per micro-batch: 2·3·B·D + 4·K. (dh lives in a's buffer.) */
static inline size_t zl_mlp_scratch_bytes(size_t dim, size_t rows, size_t micro_batches) {
    return 2 * 3 * rows * dim + 4 * micro_batches;
}

/* The power-of-two init scales: 2^-k with k = round(log2(sqrt(fan_in))). */
int zl_mlp_init_scale_log2_W1(int dim);
int zl_mlp_init_scale_log2_W2(int dim);

/* ---- running ----------------------------------------------------------------------------- */
typedef struct {
    int L, D, B, K;
    int checkpoint;     /* 1: h of one block only, recomputed in backward */
    int keep;           /* 1: a of every block, nothing recomputed */
    zl_half *x;         /* (L+1)·B·D: block u's input at u·B·D; block L-1's output last */
    zl_half *h;         /* L·B·4D (block u at u·B·4D), or B·4D when checkpointing: pre-activations */
    zl_half *a;         /* B·4D: gelu(h) of the block being computed, or L·B·4D when keeping (block
                         * u at u·B·4D); backward writes the block's dh there after its last read */
    zl_half *target;    /* B·D */
    zl_half *dx[2];     /* B·D each: activation gradients, taking turns */
    int dy;             /* dx[dy] holds dL/d(output) of the next block backward runs */
    float *loss;        /* K: one per micro-batch of the step (device) */
    float *loss_host;   /* K: their copy on the host */
    void *workspace;    /* zl_kernels_workspace_bytes(B, D) */
} zl_mlp;

void zl_mlp_create(zl_mlp *m, int layers, int dim, int rows, int micro_batches, int checkpoint, int keep);
void zl_mlp_free(zl_mlp *m);
void zl_mlp_init_range(int dim, size_t unit_off, size_t begin, size_t end, uint64_t seed, zl_half *dst,
                       zl_stream s);
void zl_mlp_load_batch(zl_mlp *m, uint64_t seed, uint64_t row0, zl_stream s);
void zl_mlp_forward(zl_mlp *m, int u, const zl_half *p, zl_stream s);
float *zl_mlp_loss(zl_mlp *m, int micro, float loss_scale, zl_stream s);
float zl_mlp_loss_sum(zl_mlp *m, zl_stream s);
void zl_mlp_backward(zl_mlp *m, int u, const zl_half *p, zl_half *g, zl_grads_mode mode, zl_stream s);

#endif
