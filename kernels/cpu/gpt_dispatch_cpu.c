/* gpt_dispatch_cpu.c — the CPU backend's gpt_kernels.h entry points: each runs its zl_cpu_gpt_*
 * reference to completion and ignores the stream (CPU streams are synchronous, backend.h). */
#include "gpt_kernels.h"

size_t zl_gpt_workspace_bytes(zl_gpt_dims d) { return zl_cpu_gpt_workspace_bytes(d); }
void zl_gpt_set_workspace(void *ws, size_t bytes, zl_gpt_dims d) {
    (void)d;
    zl_cpu_gpt_set_workspace(ws, bytes);
}

void zl_gpt_fill(zl_half *dst, size_t n, float value, zl_stream s) {
    (void)s;
    zl_cpu_gpt_fill(dst, n, value);
}
void zl_gpt_embed_forward(const int32_t *tokens, const zl_half *wte, const zl_half *wpe, zl_half *x, zl_gpt_dims d,
                          zl_stream s) {
    (void)s;
    zl_cpu_gpt_embed_forward(tokens, wte, wpe, x, d);
}
void zl_gpt_embed_backward(const int32_t *order, const int32_t *bucket, const zl_half *dx, const zl_half *head,
                           zl_half *dwte, zl_half *dwpe, zl_grads_mode mode, zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_embed_backward(order, bucket, dx, head, dwte, dwpe, mode, d);
}
void zl_gpt_layernorm_forward(const zl_half *x, const zl_half *g, const zl_half *b, zl_half *y, float *mean,
                              float *rstd, int rows, int dim, zl_stream s) {
    (void)s;
    zl_cpu_gpt_layernorm_forward(x, g, b, y, mean, rstd, rows, dim);
}
void zl_gpt_layernorm_backward(const zl_half *x, const zl_half *g, const float *mean, const float *rstd,
                               const zl_half *dy, zl_half *dres, zl_half *dg, zl_half *db, zl_grads_mode mode,
                               int rows, int dim, zl_stream s) {
    (void)s;
    zl_cpu_gpt_layernorm_backward(x, g, mean, rstd, dy, dres, dg, db, mode, rows, dim);
}
void zl_gpt_linear_forward(const zl_half *x, const zl_half *W, const zl_half *b, const zl_half *residual,
                           zl_half *y, int rows, int din, int dout, zl_stream s) {
    (void)s;
    zl_cpu_gpt_linear_forward(x, W, b, residual, y, rows, din, dout);
}
void zl_gpt_linear_gelu_forward(const zl_half *x, const zl_half *W, const zl_half *b, zl_half *h, zl_half *a,
                                int rows, int din, int dout, zl_stream s) {
    (void)s;
    zl_cpu_gpt_linear_gelu_forward(x, W, b, h, a, rows, din, dout);
}
void zl_gpt_linear_backward(const zl_half *x, const zl_half *W, const zl_half *dy, const zl_half *gelu_h,
                            zl_half *dx, zl_half *dW, zl_half *db, zl_grads_mode mode, int rows, int din, int dout,
                            zl_stream s) {
    (void)s;
    zl_cpu_gpt_linear_backward(x, W, dy, gelu_h, dx, dW, db, mode, rows, din, dout);
}
void zl_gpt_attention_forward(const zl_half *qkv, zl_half *qkvr, zl_half *P, zl_half *scratch_r, zl_half *out,
                              zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_attention_forward(qkv, qkvr, P, scratch_r, out, d);
}
void zl_gpt_attention_backward(const zl_half *qkvr, const zl_half *P, const zl_half *dout, zl_half *dout_r,
                               zl_half *dP, zl_half *dqkvr, zl_half *dqkv, zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_attention_backward(qkvr, P, dout, dout_r, dP, dqkvr, dqkv, d);
}
void zl_gpt_flash_forward(const zl_half *qkv, zl_half *out, float *lse, zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_flash_forward(qkv, out, lse, d);
}
void zl_gpt_flash_backward(const zl_half *qkv, const zl_half *out, const float *lse, const zl_half *dout, float *Dl,
                           zl_half *dqkv, zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_flash_backward(qkv, out, lse, dout, Dl, dqkv, d);
}
void zl_gpt_logits_forward(const zl_half *x, const zl_half *wte, zl_half *logits, zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_logits_forward(x, wte, logits, d);
}
void zl_gpt_crossentropy(zl_half *logits, const int32_t *targets, float *row_loss, float *loss, float loss_scale,
                         zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_crossentropy(logits, targets, row_loss, loss, loss_scale, d);
}
void zl_gpt_logits_backward(const zl_half *dlogits, const zl_half *x, const zl_half *wte, zl_half *dx,
                            zl_half *head, zl_gpt_dims d, zl_stream s) {
    (void)s;
    zl_cpu_gpt_logits_backward(dlogits, x, wte, dx, head, d);
}
