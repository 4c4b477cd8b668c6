/* gpt.c — the transformer's buffers, init, data loading and forward/backward per use (gpt.h). */
#define _GNU_SOURCE /* O_CLOEXEC */
#include "gpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/util.h"
#include "../kernels/kernels.h"

/* ---- init: a function of the seed and the global parameter index only ----------------- */

static int floor_log2(unsigned long x) {
    int l = 0;
    while (x >>= 1) l++;
    return l;
}

enum { ZERO = -1, ONE = -2 }; /* init kinds besides a uniform scale 2^-k */

/* Write the part of tensor [t0, t1) (unit coordinates) that overlaps [begin, end). */
static void init_segment(zl_half *dst, size_t begin, size_t end, size_t t0, size_t t1, uint64_t seed,
                         size_t unit_off, int kind, zl_stream s) {
    size_t lo = begin > t0 ? begin : t0, hi = end < t1 ? end : t1;
    if (lo >= hi) return;
    if (kind == ZERO) zl_memset_async(dst + (lo - begin), 0, (hi - lo) * sizeof(zl_half), s);
    else if (kind == ONE) zl_gpt_fill(dst + (lo - begin), hi - lo, 1.0f, s);
    else zl_init_uniform(dst + (lo - begin), hi - lo, seed, unit_off + lo, kind, s);
}

/* GPT-2's init with power-of-two uniform scales: weights ±2^-5 (std 0.018 ≈ 0.02), wpe
 * ±2^-6, the two residual projections scaled down again by ~sqrt(2L); LayerNorm gains 1,
 * biases, LayerNorm shifts, wte's padding rows and the unit padding 0. */
void zl_gpt_init_range(int layers, zl_gpt_dims d, int u, size_t unit_off, size_t begin, size_t end, uint64_t seed,
                       zl_half *dst, zl_stream s) {
    size_t D = (size_t)d.D;
    const int W = 5, resid = 5 + (floor_log2(2ul * (unsigned long)layers) + 1) / 2;
    if (u == 0) {
        size_t wte_real = (size_t)d.V * D, wpe0 = (size_t)d.Vp * D;
        init_segment(dst, begin, end, 0, wte_real, seed, unit_off, W, s);
        init_segment(dst, begin, end, wte_real, wpe0, seed, unit_off, ZERO, s);
        init_segment(dst, begin, end, wpe0, wpe0 + (size_t)d.T * D, seed, unit_off, W + 1, s);
        init_segment(dst, begin, end, wpe0 + (size_t)d.T * D, end, seed, unit_off, ZERO, s);
        return;
    }
    if (u == layers + 1) { /* final LayerNorm: g, b */
        init_segment(dst, begin, end, 0, D, seed, unit_off, ONE, s);
        init_segment(dst, begin, end, D, end, seed, unit_off, ZERO, s);
        return;
    }
    const struct {
        size_t off;
        int kind;
    } seg[] = {{zl_gpt_off_ln1_g(D), ONE}, {zl_gpt_off_ln1_b(D), ZERO}, {zl_gpt_off_Wqkv(D), W},
               {zl_gpt_off_bqkv(D), ZERO}, {zl_gpt_off_Wo(D), resid},   {zl_gpt_off_bo(D), ZERO},
               {zl_gpt_off_ln2_g(D), ONE}, {zl_gpt_off_ln2_b(D), ZERO}, {zl_gpt_off_Wfc(D), W},
               {zl_gpt_off_bfc(D), ZERO},  {zl_gpt_off_Wproj(D), resid}, {zl_gpt_off_bproj(D), ZERO}};
    int n = (int)(sizeof seg / sizeof seg[0]);
    for (int i = 0; i < n; i++)
        init_segment(dst, begin, end, seg[i].off, i + 1 < n ? seg[i + 1].off : end, seed, unit_off, seg[i].kind, s);
}

/* ---- buffers ---------------------------------------------------------------------------- */

/* The checks map_text's mmap relies on, on an open descriptor (shared with zl_gpt_check_data). */
static int text_fits(int fd, const char *path, int T, size_t *len, char *err, size_t n) {
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode))
        return snprintf(err, n, "--data %s: not a regular file", path), -1;
    if ((size_t)st.st_size <= (size_t)T)
        return snprintf(err, n, "--data %s: %lld bytes; it needs more than --seq %d", path, (long long)st.st_size, T),
               -1;
    *len = (size_t)st.st_size;
    return 0;
}

int zl_gpt_check_data(const char *path, int T, char *err, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO would block until a writer came */
    if (fd < 0) return snprintf(err, n, "--data %s: cannot open: %s", path, strerror(errno)), -1;
    size_t len;
    int rc = text_fits(fd, path, T, &len, err, n);
    close(fd);
    return rc;
}

static void map_text(zl_gpt *m, const char *path) {
    char err[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) zl_fatal("--data %s: cannot open: %s", path, strerror(errno));
    size_t len;
    if (text_fits(fd, path, m->d.T, &len, err, sizeof err)) zl_fatal("%s", err); /* changed since the preflight */
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) zl_fatal("--data %s: mmap failed: %s", path, strerror(e));
    m->text = p, m->text_len = len;
}

/* Allocated in the order the report lists them; the byte formulas are in gpt_layout.c.
 * Checkpointing: the per-block activations hold one block (nb = 1), recomputed in backward. */
void zl_gpt_create(zl_gpt *m, int layers, zl_gpt_dims d, int micro_batches, int checkpoint, const char *data_path) {
    *m = (zl_gpt){.L = layers, .K = micro_batches, .checkpoint = checkpoint, .d = d};
    size_t L = (size_t)layers, R = (size_t)d.B * d.T, RD = R * d.D, BHT = (size_t)d.B * d.H * d.T, BHTT = BHT * d.T;
    size_t Vp = (size_t)d.Vp, h2 = sizeof(zl_half), f4 = sizeof(float), i4 = sizeof(int32_t);
    size_t nb = checkpoint ? 1 : L; /* blocks whose activations are kept at once */
    if (data_path && data_path[0]) map_text(m, data_path);
    m->x = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * (L + 1) * RD, "block inputs x");
    m->ln1 = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * RD, "LN1 outputs");
    m->ln1_stat = zl_mem_alloc(ZL_MEM_ACTIVATIONS, f4 * nb * 2 * R, "LN1 mean, rstd");
    m->qkvr = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * 3 * RD, d.flash ? "q, k, v" : "q, k, v per head");
    if (d.flash) m->lse = zl_mem_alloc(ZL_MEM_ACTIVATIONS, f4 * nb * BHT, "attention row log-sum-exps");
    else m->P = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * BHTT, "attention probabilities");
    m->atty = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * RD, "attention outputs");
    m->xmid = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * RD, "residual x_mid");
    m->ln2 = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * RD, "LN2 outputs");
    m->ln2_stat = zl_mem_alloc(ZL_MEM_ACTIVATIONS, f4 * nb * 2 * R, "LN2 mean, rstd");
    m->h = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * 4 * RD, "MLP pre-activations h");
    m->a = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * nb * 4 * RD, "MLP activations gelu(h)");
    m->lnf = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * RD, "final LN output");
    m->lnf_stat = zl_mem_alloc(ZL_MEM_ACTIVATIONS, f4 * 2 * R, "final LN mean, rstd");
    m->logits = zl_mem_alloc(ZL_MEM_ACTIVATIONS, h2 * R * Vp, "logits (then their gradient)");
    m->tokens = zl_mem_alloc(ZL_MEM_SCRATCH, i4 * R, "tokens");
    m->targets = zl_mem_alloc(ZL_MEM_SCRATCH, i4 * R, "targets");
    m->order = zl_mem_alloc(ZL_MEM_SCRATCH, i4 * R, "positions by token");
    m->bucket = zl_mem_alloc(ZL_MEM_SCRATCH, i4 * (Vp + 1), "token run starts");
    m->dres = zl_mem_alloc(ZL_MEM_SCRATCH, h2 * RD, "residual gradient");
    m->dln = zl_mem_alloc(ZL_MEM_SCRATCH, h2 * RD, "LayerNorm output gradient");
    m->dh = zl_mem_alloc(ZL_MEM_SCRATCH, h2 * 4 * RD, "MLP gradient dh");
    m->buf3 = zl_mem_alloc(ZL_MEM_SCRATCH, h2 * 3 * RD, "qkv / dqkv");
    if (d.flash) m->Dl = zl_mem_alloc(ZL_MEM_SCRATCH, f4 * BHT, "attention row dout·out");
    else {
        m->buf3r = zl_mem_alloc(ZL_MEM_SCRATCH, h2 * 3 * RD, "per-head attention out / dqkv");
        m->dP = zl_mem_alloc(ZL_MEM_SCRATCH, h2 * BHTT, "attention gradient dP");
    }
    m->head = zl_mem_alloc(ZL_MEM_SCRATCH, h2 * Vp * d.D, "LM head part of the wte gradient");
    m->row_loss = zl_mem_alloc(ZL_MEM_SCRATCH, f4 * R, "row losses");
    m->loss = zl_mem_alloc(ZL_MEM_SCRATCH, f4 * (size_t)micro_batches, "loss (one per micro-batch)");
    m->loss_host = zl_host_calloc((size_t)micro_batches, f4);
    size_t ws = zl_gpt_workspace_bytes(d);
    m->workspace = zl_mem_alloc(ZL_MEM_WORKSPACE, ws, "kernel workspace");
    zl_gpt_set_workspace(m->workspace, ws, d);
    m->host = zl_mem_alloc(ZL_MEM_HOST_STAGING, i4 * (3 * R + Vp + 1), "host batch: tokens, targets, order");
}

void zl_gpt_free(zl_gpt *m) {
    void *bufs[] = {m->x,      m->ln1,    m->ln1_stat, m->qkvr,    m->P,     m->lse,      m->atty,     m->xmid,
                    m->ln2,    m->ln2_stat, m->h,      m->a,       m->lnf,   m->lnf_stat, m->logits,
                    m->tokens, m->targets, m->order,   m->bucket,  m->dres,  m->dln,      m->dh,
                    m->buf3,   m->buf3r,  m->dP,       m->Dl,      m->head,    m->row_loss, m->loss,  m->workspace,
                    m->host};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zl_mem_free(bufs[i]);
    free(m->loss_host);
    if (m->text) munmap((void *)m->text, m->text_len);
    *m = (zl_gpt){0};
}

/* ---- data ------------------------------------------------------------------------------- */

/* Rows [row0, row0 + B) on the host: inputs, targets and the token order, then one copy. */
void zl_gpt_load_batch(zl_gpt *m, uint64_t seed, uint64_t row0, zl_stream s) {
    const int B = m->d.B, T = m->d.T, R = B * T;
    int32_t *tok = m->host, *tgt = tok + R, *order = tgt + R, *bucket = order + R;
    int32_t window[T + 1];
    for (int b = 0; b < B; b++) {
        zl_gpt_sample_row(m->text, m->text_len, seed, row0 + (uint64_t)b, T, m->d.V, window);
        for (int t = 0; t < T; t++) tok[b * T + t] = window[t], tgt[b * T + t] = window[t + 1];
    }
    zl_gpt_token_order(tok, R, m->d.Vp, order, bucket);
    /* device tokens, targets, order, bucket are four allocations: four copies */
    zl_memcpy_h2d(m->tokens, tok, 4 * (size_t)R, s);
    zl_memcpy_h2d(m->targets, tgt, 4 * (size_t)R, s);
    zl_memcpy_h2d(m->order, order, 4 * (size_t)R, s);
    zl_memcpy_h2d(m->bucket, bucket, 4 * ((size_t)m->d.Vp + 1), s);
}

/* ---- compute ---------------------------------------------------------------------------- */

static size_t RD(const zl_gpt *m) { return (size_t)m->d.B * m->d.T * m->d.D; }
static size_t BHT(const zl_gpt *m) { return (size_t)m->d.B * m->d.H * m->d.T; }
static size_t BHTT(const zl_gpt *m) { return BHT(m) * m->d.T; }
static int rows(const zl_gpt *m) { return m->d.B * m->d.T; }
/* Where block b's activations live: their own place, or the one-block buffers when checkpointing. */
static size_t slot(const zl_gpt *m, int b) { return m->checkpoint ? 0 : (size_t)b; }

/* The QKV projection and attention of the block in slot i, from its LN1 output. Fused: qkv
 * goes straight into its saved place, where the kernel reads it, and each query row keeps its
 * log-sum-exp. Strided: qkv in scratch, permuted per head into the saved place, P kept. */
static void attention_forward(zl_gpt *m, size_t i, const zl_half *ln1, const zl_half *p, zl_stream s) {
    const int R = rows(m), D = m->d.D;
    const size_t rd = RD(m), Dz = (size_t)D;
    const zl_half *Wqkv = p + zl_gpt_off_Wqkv(Dz), *bqkv = p + zl_gpt_off_bqkv(Dz);
    if (m->d.flash) {
        zl_gpt_linear_forward(ln1, Wqkv, bqkv, NULL, m->qkvr + i * 3 * rd, R, D, 3 * D, s);
        zl_gpt_flash_forward(m->qkvr + i * 3 * rd, m->atty + i * rd, m->lse + i * BHT(m), m->d, s);
    } else {
        zl_gpt_linear_forward(ln1, Wqkv, bqkv, NULL, m->buf3, R, D, 3 * D, s);
        zl_gpt_attention_forward(m->buf3, m->qkvr + i * 3 * rd, m->P + i * BHTT(m), m->buf3r, m->atty + i * rd, m->d,
                                 s);
    }
}

/* dqkv (into buf3) of the block in slot i from dL/d(attention output) in dln. Fused: P
 * recomputed from q, k and the saved log-sum-exps (Dl as scratch); strided: from the saved P
 * (dh, dP and buf3r as scratch). */
static void attention_backward(zl_gpt *m, size_t i, zl_stream s) {
    const size_t rd = RD(m);
    if (m->d.flash)
        zl_gpt_flash_backward(m->qkvr + i * 3 * rd, m->atty + i * rd, m->lse + i * BHT(m), m->dln, m->Dl, m->buf3,
                              m->d, s);
    else
        zl_gpt_attention_backward(m->qkvr + i * 3 * rd, m->P + i * BHTT(m), m->dln, m->dh, m->dP, m->buf3r, m->buf3,
                                  m->d, s);
}

/* Block b's forward: x[b] -> x[b+1]; p is its unit (gpt.h's offsets). y = NULL stops before
 * the last GEMM: the recompute of a checkpointed block, whose output x[b+1] is kept. */
static void block_forward(zl_gpt *m, int b, const zl_half *p, zl_half *y, zl_stream s) {
    const int R = rows(m), D = m->d.D;
    const size_t rd = RD(m), Dz = (size_t)D, i = slot(m, b);
    zl_half *x = m->x + b * rd, *ln1 = m->ln1 + i * rd, *xmid = m->xmid + i * rd, *ln2 = m->ln2 + i * rd;
    float *st1 = m->ln1_stat + i * 2 * R, *st2 = m->ln2_stat + i * 2 * R;
    zl_gpt_layernorm_forward(x, p + zl_gpt_off_ln1_g(Dz), p + zl_gpt_off_ln1_b(Dz), ln1, st1, st1 + R, R, D, s);
    attention_forward(m, i, ln1, p, s);
    zl_gpt_linear_forward(m->atty + i * rd, p + zl_gpt_off_Wo(Dz), p + zl_gpt_off_bo(Dz), x, xmid, R, D, D, s);
    zl_gpt_layernorm_forward(xmid, p + zl_gpt_off_ln2_g(Dz), p + zl_gpt_off_ln2_b(Dz), ln2, st2, st2 + R, R, D, s);
    zl_gpt_linear_gelu_forward(ln2, p + zl_gpt_off_Wfc(Dz), p + zl_gpt_off_bfc(Dz), m->h + i * 4 * rd,
                               m->a + i * 4 * rd, R, D, 4 * D, s);
    if (!y) return;
    zl_gpt_linear_forward(m->a + i * 4 * rd, p + zl_gpt_off_Wproj(Dz), p + zl_gpt_off_bproj(Dz), xmid, y, R, 4 * D,
                          D, s);
}

/* Use k's forward: 0 the embedding, 1..L the blocks, L+1 the final LN, L+2 the LM head. */
void zl_gpt_forward(zl_gpt *m, int k, const zl_half *p, zl_stream s) {
    const int R = rows(m), D = m->d.D, L = m->L;
    if (k == 0) zl_gpt_embed_forward(m->tokens, p, p + (size_t)m->d.Vp * D, m->x, m->d, s);
    else if (k <= L) block_forward(m, k - 1, p, m->x + (size_t)k * RD(m), s);
    else if (k == L + 1)
        zl_gpt_layernorm_forward(m->x + (size_t)L * RD(m), p, p + D, m->lnf, m->lnf_stat, m->lnf_stat + R, R, D, s);
    else zl_gpt_logits_forward(m->lnf, p, m->logits, m->d, s);
}

/* Cross-entropy of the logits into micro-batch `micro`'s loss; their gradient (scaled)
 * replaces them and seeds backward. */
float *zl_gpt_loss(zl_gpt *m, int micro, float loss_scale, zl_stream s) {
    zl_gpt_crossentropy(m->logits, m->targets, m->row_loss, m->loss + micro, loss_scale, m->d, s);
    zl_memset_async(m->dres, 0, 2 * RD(m), s); /* the final LN's backward adds into it */
    return m->loss + micro;
}

/* Σ of the K losses, added on the host in micro-batch order (waits for the stream). */
float zl_gpt_loss_sum(zl_gpt *m, zl_stream s) {
    zl_memcpy_d2h(m->loss_host, m->loss, (size_t)m->K * sizeof(float), s);
    float sum = 0.0f;
    for (int j = 0; j < m->K; j++) sum += m->loss_host[j];
    return sum;
}

/* Block b's backward: dres holds dL/d(x[b+1]) and leaves holding dL/d(x[b]); gradients are
 * stored into unit g as `mode` says. Checkpointing: the block's forward runs again first. */
static void block_backward(zl_gpt *m, int b, const zl_half *p, zl_half *g, zl_grads_mode mode, zl_stream s) {
    const int R = rows(m), D = m->d.D;
    const size_t rd = RD(m), Dz = (size_t)D, i = slot(m, b);
    if (m->checkpoint) block_forward(m, b, p, NULL, s);
    const float *st1 = m->ln1_stat + i * 2 * R, *st2 = m->ln2_stat + i * 2 * R;
    /* MLP branch: dh = (dres·W_projᵀ) ⊙ gelu'(h), then LN2's input gradient into dres */
    zl_gpt_linear_backward(m->a + i * 4 * rd, p + zl_gpt_off_Wproj(Dz), m->dres, m->h + i * 4 * rd, m->dh,
                           g + zl_gpt_off_Wproj(Dz), g + zl_gpt_off_bproj(Dz), mode, R, 4 * D, D, s);
    zl_gpt_linear_backward(m->ln2 + i * rd, p + zl_gpt_off_Wfc(Dz), m->dh, NULL, m->dln, g + zl_gpt_off_Wfc(Dz),
                           g + zl_gpt_off_bfc(Dz), mode, R, D, 4 * D, s);
    zl_gpt_layernorm_backward(m->xmid + i * rd, p + zl_gpt_off_ln2_g(Dz), st2, st2 + R, m->dln, m->dres,
                              g + zl_gpt_off_ln2_g(Dz), g + zl_gpt_off_ln2_b(Dz), mode, R, D, s);
    /* attention branch: projection, attention (into buf3), QKV, LN1 */
    zl_gpt_linear_backward(m->atty + i * rd, p + zl_gpt_off_Wo(Dz), m->dres, NULL, m->dln, g + zl_gpt_off_Wo(Dz),
                           g + zl_gpt_off_bo(Dz), mode, R, D, D, s);
    attention_backward(m, i, s);
    zl_gpt_linear_backward(m->ln1 + i * rd, p + zl_gpt_off_Wqkv(Dz), m->buf3, NULL, m->dln, g + zl_gpt_off_Wqkv(Dz),
                           g + zl_gpt_off_bqkv(Dz), mode, R, D, 3 * D, s);
    zl_gpt_layernorm_backward(m->x + b * rd, p + zl_gpt_off_ln1_g(Dz), st1, st1 + R, m->dln, m->dres,
                              g + zl_gpt_off_ln1_g(Dz), g + zl_gpt_off_ln1_b(Dz), mode, R, D, s);
}

/* Use k's backward. The LM head (k = L+2) keeps wte's gradient part in m->head and writes
 * nothing into g (its unit's gradient is not final yet); use 0 stores wte's and wpe's whole
 * gradient (head + the lookup's scatter) as `mode` says. */
void zl_gpt_backward(zl_gpt *m, int k, const zl_half *p, zl_half *g, zl_grads_mode mode, zl_stream s) {
    const int R = rows(m), D = m->d.D, L = m->L;
    if (k == L + 2) zl_gpt_logits_backward(m->logits, m->lnf, p, m->dln, m->head, m->d, s);
    else if (k == L + 1)
        zl_gpt_layernorm_backward(m->x + (size_t)L * RD(m), p, m->lnf_stat, m->lnf_stat + R, m->dln, m->dres, g,
                                  g + D, mode, R, D, s);
    else if (k >= 1) block_backward(m, k - 1, p, g, mode, s);
    else zl_gpt_embed_backward(m->order, m->bucket, m->dres, m->head, g, g + (size_t)m->d.Vp * D, mode, m->d, s);
}
