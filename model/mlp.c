/* mlp.c — the residual MLP's buffers, init and kernels, one block per unit (see mlp.h). */
#include "mlp.h"

#include "../common/alloc.h"
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
void zl_mlp_create(zl_mlp *m, int layers, int dim, int rows) {
    size_t L = (size_t)layers, BD = (size_t)rows * (size_t)dim;
    *m = (zl_mlp){.L = layers, .D = dim, .B = rows};
    m->x = zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * (L + 1) * BD, "block inputs x");
    m->h = zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * L * 4 * BD, "pre-activations h");
    m->a = zl_mem_alloc(ZL_MEM_ACTIVATIONS, 2 * L * 4 * BD, "activations a = gelu(h)");
    m->target = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "targets");
    m->dx[0] = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "activation grad 0");
    m->dx[1] = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * BD, "activation grad 1");
    m->dh = zl_mem_alloc(ZL_MEM_SCRATCH, 2 * 4 * BD, "dh");
    m->loss = zl_mem_alloc(ZL_MEM_SCRATCH, sizeof(float), "loss");
    size_t ws = zl_kernels_workspace_bytes(rows, dim);
    m->workspace = zl_mem_alloc(ZL_MEM_WORKSPACE, ws, "kernel workspace");
    zl_kernels_set_workspace(m->workspace, ws);
}

void zl_mlp_free(zl_mlp *m) {
    void *bufs[] = {m->x, m->h, m->a, m->target, m->dx[0], m->dx[1], m->dh, m->loss, m->workspace};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zl_mem_free(bufs[i]);
    *m = (zl_mlp){0};
}

/* ---- compute ---------------------------------------------------------------------------- */

static zl_half *x_of(zl_mlp *m, int u) { return m->x + (size_t)u * m->B * m->D; }
static zl_half *h_of(zl_mlp *m, int u) { return m->h + (size_t)u * m->B * 4 * m->D; }
static zl_half *a_of(zl_mlp *m, int u) { return m->a + (size_t)u * m->B * 4 * m->D; }

void zl_mlp_load_batch(zl_mlp *m, uint64_t seed, uint64_t row0, zl_stream s) {
    zl_data_generate(x_of(m, 0), m->target, seed, row0, m->B, m->D, s);
}

/* Block u's forward, reading its parameters from the unit at p (W1, b1, W2, b2). */
void zl_mlp_forward(zl_mlp *m, int u, const zl_half *p, zl_stream s) {
    size_t D = (size_t)m->D;
    zl_block_forward(x_of(m, u), p + zl_mlp_off_W1(D), p + zl_mlp_off_b1(D), p + zl_mlp_off_W2(D),
                     p + zl_mlp_off_b2(D), h_of(m, u), a_of(m, u), x_of(m, u + 1), m->B, m->D, s);
}

/* MSE of the last block's output; its gradient seeds backward in dx[0]. */
float *zl_mlp_loss(zl_mlp *m, float loss_scale, zl_stream s) {
    zl_mse_loss_backward(x_of(m, m->L), m->target, m->dx[0], m->loss, m->B, m->D, loss_scale, s);
    m->dy = 0;
    return m->loss;
}

/* Block u's backward: parameters from unit p, gradients written into unit g; dL/d(input)
 * goes to the other activation-gradient buffer, ready for block u-1. */
void zl_mlp_backward(zl_mlp *m, int u, const zl_half *p, zl_half *g, zl_stream s) {
    size_t D = (size_t)m->D;
    zl_half *dx = u > 0 ? m->dx[m->dy ^ 1] : NULL; /* block 0: the input needs no gradient */
    zl_block_backward(x_of(m, u), h_of(m, u), a_of(m, u), p + zl_mlp_off_W1(D), p + zl_mlp_off_W2(D), m->dx[m->dy],
                      m->dh, g + zl_mlp_off_W1(D), g + zl_mlp_off_b1(D), g + zl_mlp_off_W2(D), g + zl_mlp_off_b2(D), dx,
                      m->B, m->D, s);
    m->dy ^= 1;
}
