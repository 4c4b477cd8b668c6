/* kernels_dispatch_cpu.c — the CPU backend's kernels.h entry points.
 *
 * On CPU every "stream" is synchronous (backend.h), so each entry point simply ignores
 * its stream and runs the zl_cpu_* reference implementation (kernels_cpu.c) to
 * completion. Keeping these wrappers separate lets the CUDA build link its own entry
 * points while still exporting zl_cpu_* for the GPU-vs-CPU tests. */
#include "kernels.h"

int zl_kernels_gemm_table_used(int *entries, int *refused) { /* the CPU has no cuBLASLt: a table is not used */
    *entries = 0, *refused = 0;
    return -1;
}

size_t zl_kernels_workspace_bytes(int rows, int dim) { return zl_cpu_workspace_bytes(rows, dim); }

void zl_kernels_set_workspace(void *ws, size_t bytes) { zl_cpu_set_workspace(ws, bytes); }

void zl_data_generate(zl_half *x, zl_half *target, uint64_t seed, uint64_t row0, int rows, int dim,
                      zl_stream s) {
    (void)s;
    zl_cpu_data_generate(x, target, seed, row0, rows, dim);
}

void zl_init_uniform(zl_half *dst, size_t n, uint64_t seed, uint64_t index0, int scale_log2, zl_stream s) {
    (void)s;
    zl_cpu_init_uniform(dst, n, seed, index0, scale_log2);
}

void zl_block_forward(const zl_half *x, const zl_half *W1, const zl_half *b1, const zl_half *W2,
                      const zl_half *b2, zl_half *h, zl_half *a, zl_half *y, int rows, int dim, zl_stream s) {
    (void)s;
    zl_cpu_block_forward(x, W1, b1, W2, b2, h, a, y, rows, dim);
}

void zl_block_backward(const zl_half *x, const zl_half *h, const zl_half *a, const zl_half *W1,
                       const zl_half *W2, const zl_half *dy, zl_half *dh, zl_half *dW1, zl_half *db1,
                       zl_half *dW2, zl_half *db2, zl_half *dx, zl_grads_mode mode, int rows, int dim,
                       zl_stream s) {
    (void)s;
    zl_cpu_block_backward(x, h, a, W1, W2, dy, dh, dW1, db1, dW2, db2, dx, mode, rows, dim);
}

void zl_gelu_stored(const zl_half *h, zl_half *a, size_t n, zl_stream s) {
    (void)s;
    zl_cpu_gelu_stored(h, a, n);
}

void zl_add_into(zl_half *dst, const zl_half *src, size_t n, zl_stream s) {
    (void)s;
    zl_cpu_add_into(dst, src, n);
}

void zl_mse_loss_backward(const zl_half *y, const zl_half *t, zl_half *dy, float *loss, int rows, int dim,
                          float loss_scale, zl_stream s) {
    (void)s;
    zl_cpu_mse_loss_backward(y, t, dy, loss, rows, dim, loss_scale);
}

void zl_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                    float grad_mult, int t, zl_adam_hparams hp, zl_stream s) {
    (void)s;
    zl_cpu_adam_update(master, m, v, param, grad, n, grad_mult, t, hp);
}

void zl_half_to_float_array(float *dst, const zl_half *src, size_t n, zl_stream s) {
    (void)s;
    zl_cpu_half_to_float_array(dst, src, n);
}

void zl_grad_stats(const zl_half *g, size_t n, double *stats, zl_stream s) {
    (void)s;
    zl_cpu_grad_stats(g, n, stats);
}
