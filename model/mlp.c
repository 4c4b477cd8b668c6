/* mlp.c — the residual MLP's buffers, init and kernels, one block per unit (see mlp.h). */
#include "mlp.h"

#include <stdlib.h>

#include "../common/alloc.h"
#include "../common/util.h" /* zl_host_calloc */
#include "../kernels/kernels.h"

/* ---- init: a function of the seed and the global parameter index only ---------------- */

static int floor_log2(unsigned long x) {
    int l = 0;
    while (x >>= 1) l++;
    return l;
}
/* 2^-k with k = round(log2(sqrt(fan_in))): the nearest power of two to 1/sqrt(fan_in). */
int zl_mlp_init_scale_log2_W1(int dim) { return (floor_log2((unsigned long)dim) + 1) / 2; }
int zl_mlp_init_scale_log2_W2(int dim) { return (floor_log2(4ul * (unsigned long)dim) + 1) / 2 + 1; }

/* Write the part of tensor [t0, t1) (unit coordinates) that overlaps [begin, end):
 * uniform values with scale 2^-scale_log2, or zeros when scale_log2 < 0. */
static void init_segment(zl_half *dst, size_t begin, size_t end, size_t t0, size_t t1, uint64_t seed,
                         size_t unit_off, int scale_log2, zl_stream s) {
    size_t lo = begin > t0 ? begin : t0, hi = end < t1 ? end : t1;
    if (lo >= hi) return;
    if (scale_log2 < 0)
        zl_memset_async(dst + (lo - begin), 0, (hi - lo) * sizeof(zl_half), s);
    else
        zl_init_uniform(dst + (lo - begin), hi - lo, seed, unit_off + lo, scale_log2, s);
}

/* W1 and W2 uniform with a power-of-two scale ~ 1/sqrt(fan_in) (W2 halved again so blocks
 * start near the identity), biases and padding zero. */
void zl_mlp_init_range(int dim, size_t unit_off, size_t begin, size_t end, uint64_t seed, zl_half *dst,
                       zl_stream s) {
    size_t D = (size_t)dim;
    int W1_scale = zl_mlp_init_scale_log2_W1(dim), W2_scale = zl_mlp_init_scale_log2_W2(dim), zero = -1;
    init_segment(dst, begin, end, zl_mlp_off_W1(D), zl_mlp_off_b1(D), seed, unit_off, W1_scale, s);
    init_segment(dst, begin, end, zl_mlp_off_b1(D), zl_mlp_off_W2(D), seed, unit_off, zero, s);
    init_segment(dst, begin, end, zl_mlp_off_W2(D), zl_mlp_off_b2(D), seed, unit_off, W2_scale, s);
    init_segment(dst, begin, end, zl_mlp_off_b2(D), end, seed, unit_off, zero, s); /* b2 and any padding */
}

/* ---- buffers ---------------------------------------------------------------------------- */

/* Allocated in the order the report lists them; the byte formulas are in mlp.h. */
void zl_mlp_create(zl_mlp *m, int layers, int dim, int rows, int micro_batches, int checkpoint, int keep) {
    size_t L = (size_t)layers, BD = (size_t)rows * (size_t)dim, K = (size_t)micro_batches;
    *m = (zl_mlp){.L = layers, .D = dim, .B = rows, .K = micro_batches, .checkpoint = checkpoint, .keep = keep};
    m->x = zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * (L + 1) * BD, "block inputs x");
    m->h = checkpoint ? zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * 4 * BD, "pre-activations h (one block, recomputed)")
                      : zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * L * 4 * BD, "pre-activations h");
    m->a = keep ? zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * L * 4 * BD, "activations a = gelu(h)")
                : zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * 4 * BD, "activations a = gelu(h) (one block, recomputed)");
    m->target = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "targets");
    m->dx[0] = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "activation grad 0");
    m->dx[1] = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "activation grad 1");
    m->loss = zl_mem_alloc(ZL_MEM_SCRATCH, K * sizeof(float), "loss (one per micro-batch)");
    m->loss_host = zl_host_calloc(K, sizeof(float));
    size_t ws = zl_kernels_workspace_bytes(rows, dim);
    m->workspace = zl_mem_alloc(ZL_MEM_WORKSPACE, ws, "kernel workspace");
    zl_kernels_set_workspace(m->workspace, ws);
}

void zl_mlp_free(zl_mlp *m) {
    void *bufs[] = {m->x, m->h, m->a, m->target, m->dx[0], m->dx[1], m->loss, m->workspace};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zl_mem_free(bufs[i]);
    free(m->loss_host);
    *m = (zl_mlp){0};
}

/* ---- compute ---------------------------------------------------------------------------- */

static zl_half *x_of(zl_mlp *m, int u) { return m->x + (size_t)u * m->B * m->D; }
/* Block u's h: its own place, or the one-block buffer when checkpointing. */
static zl_half *h_of(zl_mlp *m, int u) { return m->h + (m->checkpoint ? 0 : (size_t)u * m->B * 4 * m->D); }
/* Block u's a: its own place when keeping, else the one-block buffer. */
static zl_half *a_of(zl_mlp *m, int u) { return m->a + (m->keep ? (size_t)u * m->B * 4 * m->D : 0); }

void zl_mlp_load_batch(zl_mlp *m, uint64_t seed, uint64_t row0, zl_stream s) {
    zl_data_generate(x_of(m, 0), m->target, seed, row0, m->B, m->D, s);
}

/* Block u's forward, reading its parameters from the unit at p (W1, b1, W2, b2). y = NULL
 * stops after h and a: the recompute of a checkpointed block. */
static void block_forward(zl_mlp *m, int u, const zl_half *p, zl_half *y, zl_stream s) {
    size_t D = (size_t)m->D;
    zl_block_forward(x_of(m, u), p + zl_mlp_off_W1(D), p + zl_mlp_off_b1(D), p + zl_mlp_off_W2(D),
                     p + zl_mlp_off_b2(D), h_of(m, u), a_of(m, u), y, m->B, m->D, s);
}

void zl_mlp_forward(zl_mlp *m, int u, const zl_half *p, zl_stream s) { block_forward(m, u, p, x_of(m, u + 1), s); }

/* MSE of the last block's output into micro-batch `micro`'s loss; its gradient seeds
 * backward in dx[0]. */
float *zl_mlp_loss(zl_mlp *m, int micro, float loss_scale, zl_stream s) {
    zl_mse_loss_backward(x_of(m, m->L), m->target, m->dx[0], m->loss + micro, m->B, m->D, loss_scale, s);
    m->dy = 0;
    return m->loss + micro;
}

/* Σ of the K losses, added on the host in micro-batch order (waits for the stream). */
float zl_mlp_loss_sum(zl_mlp *m, zl_stream s) {
    zl_memcpy_d2h(m->loss_host, m->loss, (size_t)m->K * sizeof(float), s);
    float sum = 0.0f;
    for (int j = 0; j < m->K; j++) sum += m->loss_host[j];
    return sum;
}

/* Block u's backward: parameters from unit p, gradients stored into unit g as `mode` says;
 * dL/d(input) goes to the other activation-gradient buffer, ready for block u-1. First the
 * activations forward did not keep: h (checkpointing: the block's first GEMM again), then
 * a = gelu(h) — one elementwise pass, unless forward kept every block's a. dh is written
 * over a once dW2 has read it (kernels.h): one B·4D buffer, not two. */
void zl_mlp_backward(zl_mlp *m, int u, const zl_half *p, zl_half *g, zl_grads_mode mode, zl_stream s) {
    size_t D = (size_t)m->D;
    zl_half *a = a_of(m, u);
    if (m->checkpoint) block_forward(m, u, p, NULL, s);
    if (!m->keep) zl_gelu_stored(h_of(m, u), a, (size_t)m->B * 4 * D, s);
    zl_half *dx = u > 0 ? m->dx[m->dy ^ 1] : NULL; /* block 0: the input needs no gradient */
    zl_block_backward(x_of(m, u), h_of(m, u), a, p + zl_mlp_off_W1(D), p + zl_mlp_off_W2(D), m->dx[m->dy], a,
                      g + zl_mlp_off_W1(D), g + zl_mlp_off_b1(D), g + zl_mlp_off_W2(D), g + zl_mlp_off_b2(D), dx, mode,
                      m->B, m->D, s);
    m->dy ^= 1;
}
