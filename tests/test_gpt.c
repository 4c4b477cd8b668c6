/* test_gpt.c — Criterion tests of the transformer (model/gpt.h) on the CPU kernels.
 *
 * The reference is written here, independently: a double-precision GPT-2 forward over the
 * same parameters and tokens, and central finite differences of its loss. The model, run
 * through the unit interface exactly as a stage runs it (uses forward, the loss, uses
 * backward, the tied embedding's gradient final only at use 0), must give
 *   - the loss of the double forward (to 16-bit rounding of the activations), and
 *   - the gradient of every parameter (norm-relative: whole, per unit, and per named tensor —
 *     ln1_g, ln1_b, Wqkv, ... of each block), the tied wte's gradient being the sum of its
 *     lookup and LM-head parts;
 * and the comparators must reject deliberately wrong gradients (a halved wte; each tensor
 * scaled, reversed, and every LayerNorm's γ and β swapped). Also: the token order used
 * by the deterministic embedding backward, and the data stream's independence of N.
 *
 * Build: part of build/tests/test_unit (make test). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "kernels/kernels.h"
#include "model/gpt.h"
#include "model/model.h"

/* ---- the double reference ------------------------------------------------------------- */

typedef struct {
    int L, D, H, T, V, Vp, B;
} dims;

static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }

/* y = LN(x)·g + b over rows of D */
static void ref_ln(const double *x, const double *g, const double *b, double *y, int rows, int D) {
    for (int r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < D; j++) m += x[r * D + j] / D;
        for (int j = 0; j < D; j++) v += (x[r * D + j] - m) * (x[r * D + j] - m) / D;
        for (int j = 0; j < D; j++) y[r * D + j] = (x[r * D + j] - m) / sqrt(v + 1e-5) * g[j] + b[j];
    }
}
/* y = x·W + b (x rows×din, W din×dout) */
static void ref_linear(const double *x, const double *W, const double *b, double *y, int rows, int din, int dout) {
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < dout; o++) {
            double s = b[o];
            for (int i = 0; i < din; i++) s += x[r * din + i] * W[i * dout + o];
            y[r * dout + o] = s;
        }
}

/* Mean next-token cross-entropy of the whole model; p is the flat unpadded parameter vector. */
static double ref_loss(dims d, const double *p, const int *tok, const int *tgt) {
    int R = d.B * d.T, D = d.D, hd = D / d.H;
    double *x = calloc((size_t)R * D, 8), *ln = calloc((size_t)R * D, 8), *qkv = calloc((size_t)R * 3 * D, 8),
           *att = calloc((size_t)R * D, 8), *o = calloc((size_t)R * D, 8), *h = calloc((size_t)R * 4 * D, 8);
    const double *wte = p, *wpe = p + (size_t)d.Vp * D;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < D; j++) x[r * D + j] = wte[tok[r] * D + j] + wpe[(r % d.T) * D + j];
    const double *u = p + (size_t)(d.Vp + d.T) * D;
    for (int l = 0; l < d.L; l++, u += 12 * D * D + 13 * D) {
        const double *ln1g = u, *ln1b = u + D, *Wqkv = u + 2 * D, *bqkv = Wqkv + 3 * D * D, *Wo = bqkv + 3 * D,
                     *bo = Wo + D * D, *ln2g = bo + D, *ln2b = ln2g + D, *Wfc = ln2b + D, *bfc = Wfc + 4 * D * D,
                     *Wp = bfc + 4 * D, *bp = Wp + 4 * D * D;
        ref_ln(x, ln1g, ln1b, ln, R, D);
        ref_linear(ln, Wqkv, bqkv, qkv, R, D, 3 * D);
        for (int b = 0; b < d.B; b++)
            for (int hh = 0; hh < d.H; hh++)
                for (int i = 0; i < d.T; i++) {
                    double s[64], mx = -1e300, z = 0;
                    const double *q = qkv + (size_t)(b * d.T + i) * 3 * D + hh * hd;
                    for (int j = 0; j <= i; j++) {
                        const double *k = qkv + (size_t)(b * d.T + j) * 3 * D + D + hh * hd;
                        s[j] = 0;
                        for (int c = 0; c < hd; c++) s[j] += q[c] * k[c] / sqrt((double)hd);
                        mx = fmax(mx, s[j]);
                    }
                    for (int j = 0; j <= i; j++) z += exp(s[j] - mx);
                    for (int c = 0; c < hd; c++) {
                        double acc = 0;
                        for (int j = 0; j <= i; j++)
                            acc += exp(s[j] - mx) / z * qkv[(size_t)(b * d.T + j) * 3 * D + 2 * D + hh * hd + c];
                        att[(b * d.T + i) * D + hh * hd + c] = acc;
                    }
                }
        ref_linear(att, Wo, bo, o, R, D, D);
        for (int i = 0; i < R * D; i++) x[i] += o[i];
        ref_ln(x, ln2g, ln2b, ln, R, D);
        ref_linear(ln, Wfc, bfc, h, R, D, 4 * D);
        for (int i = 0; i < R * 4 * D; i++) h[i] = gelu(h[i]);
        ref_linear(h, Wp, bp, o, R, 4 * D, D);
        for (int i = 0; i < R * D; i++) x[i] += o[i];
    }
    ref_ln(x, u, u + D, ln, R, D);
    double loss = 0;
    for (int r = 0; r < R; r++) {
        double lg[1024], mx = -1e300, z = 0;
        for (int v = 0; v < d.V; v++) {
            lg[v] = 0;
            for (int j = 0; j < D; j++) lg[v] += ln[r * D + j] * wte[v * D + j];
            mx = fmax(mx, lg[v]);
        }
        for (int v = 0; v < d.V; v++) z += exp(lg[v] - mx);
        loss += (mx + log(z) - lg[tgt[r]]) / R;
    }
    free(x), free(ln), free(qkv), free(att), free(o), free(h);
    return loss;
}

/* ---- the model, through the unit interface ---------------------------------------------- */

typedef struct {
    zl_model_shape s;
    dims d;
    int n_units;
    size_t psi;
    zl_half *params, *grads; /* flat, unpadded, unit after unit */
    float loss;              /* of the first micro-batch */
    float loss_sum;          /* zl_model_loss_sum over the K micro-batches */
} run;

/* 1: the model runs the fused attention (zl_gpt_flash_*) instead of the strided one. */
static int g_flash;

/* K micro-batches of the same rows, the first backward writing the gradients, the others
 * adding to them (a stage's accumulation); checkpoint: --checkpoint-activations. */
static void run_model_k(run *r, dims d, uint64_t seed, float loss_scale, int K, int checkpoint) {
    zl_mem_reset();
    zl_mem_init(malloc, free);
    r->d = d;
    r->s = (zl_model_shape){.kind = ZL_MODEL_GPT, .layers = d.L, .dim = d.D, .rows = d.B, .seq = d.T,
                            .heads = d.H, .vocab = d.V, .micro_batches = K, .checkpoint = checkpoint,
                            .flash_attention = g_flash};
    r->n_units = zl_model_n_units(r->s);
    r->psi = zl_model_unit_offset(r->s, r->n_units);
    r->params = calloc(r->psi, 2), r->grads = calloc(r->psi, 2);
    zl_model *m = zl_model_create(r->s);
    for (int u = 0; u < r->n_units; u++) {
        size_t off = zl_model_unit_offset(r->s, u), n = zl_model_unit_params(r->s, u);
        zl_model_init_range(m, u, 0, n, seed, r->params + off, NULL);
    }
    int n_uses = zl_model_n_uses(r->s);
    /* like stage 2/3: the non-final use gets a scratch buffer it must not rely on */
    zl_half *junk = malloc(2 * r->psi);
    for (int j = 0; j < K; j++) {
        zl_model_load_batch(m, seed, 7, NULL);
        for (int k = 0; k < n_uses; k++)
            zl_model_forward(m, k, r->params + zl_model_unit_offset(r->s, zl_model_unit_of_use(r->s, k)), NULL);
        float loss = *zl_model_loss(m, j, loss_scale, NULL);
        if (j == 0) r->loss = loss;
        for (int k = n_uses - 1; k >= 0; k--) {
            size_t off = zl_model_unit_offset(r->s, zl_model_unit_of_use(r->s, k));
            memset(junk, 0xff, 2 * r->psi); /* NaN: a model that read it would show */
            zl_model_backward(m, k, r->params + off, zl_model_grads_final(r->s, k) ? r->grads + off : junk,
                              j ? ZL_GRADS_ADD : ZL_GRADS_WRITE, NULL);
        }
    }
    r->loss_sum = zl_model_loss_sum(m, NULL);
    free(junk);
    zl_model_free(m);
}

static void run_model(run *r, dims d, uint64_t seed, float loss_scale) { run_model_k(r, d, seed, loss_scale, 1, 0); }

static void tokens_of(dims d, uint64_t seed, int *tok, int *tgt) {
    int32_t w[1024];
    for (int b = 0; b < d.B; b++) {
        zl_gpt_sample_row(NULL, 0, seed, 7 + (uint64_t)b, d.T, d.V, w);
        for (int t = 0; t < d.T; t++) tok[b * d.T + t] = w[t], tgt[b * d.T + t] = w[t + 1];
    }
}

/* ‖g - ref‖ / ‖ref‖ over [lo, hi) */
static double rel_err(const double *g, const double *ref, size_t lo, size_t hi) {
    double e = 0, n = 0;
    for (size_t i = lo; i < hi; i++) e += (g[i] - ref[i]) * (g[i] - ref[i]), n += ref[i] * ref[i];
    return n > 0 ? sqrt(e / n) : sqrt(e);
}

/* The parameter vector tensor by tensor, in the order ref_loss reads it: the embedding unit
 * (wte Vp×D, wpe T×D), each block (ln1 γ, β; Wqkv D×3D, bqkv; Wo D×D, bo; ln2 γ, β; Wfc D×4D,
 * bfc; Wproj 4D×D, bproj) and the final LayerNorm (γ, β). Returns the count. */
typedef struct {
    char name[24];
    size_t lo, n;
} tensor;
#define MAX_TENSORS 64
static void add_tensor(tensor *t, int *k, size_t *at, const char *name, size_t n) {
    cr_assert_lt(*k, MAX_TENSORS);
    snprintf(t[*k].name, sizeof t[*k].name, "%s", name);
    t[*k].lo = *at, t[*k].n = n, *at += n, ++*k;
}
static int tensors_of(dims d, tensor *t) {
    size_t D = (size_t)d.D, at = 0;
    int k = 0;
    add_tensor(t, &k, &at, "wte", (size_t)d.Vp * D);
    add_tensor(t, &k, &at, "wpe", (size_t)d.T * D);
    static const char *const names[] = {"ln1_g", "ln1_b", "Wqkv", "bqkv", "Wo", "bo",
                                        "ln2_g", "ln2_b", "Wfc", "bfc", "Wproj", "bproj"};
    const size_t sizes[] = {D, D, 3 * D * D, 3 * D, D * D, D, D, D, 4 * D * D, 4 * D, 4 * D * D, D};
    for (int l = 0; l < d.L; l++)
        for (int i = 0; i < 12; i++) {
            char name[24];
            snprintf(name, sizeof name, "block%d.%s", l, names[i]);
            add_tensor(t, &k, &at, name, sizes[i]);
        }
    add_tensor(t, &k, &at, "lnf_g", D);
    add_tensor(t, &k, &at, "lnf_b", D);
    return k;
}

/* Does the gradient g match the reference on tensor t? Norm-relative error below tol, and the
 * reference is not ~0 (a comparison with nothing cannot pass trivially). */
static int tensor_matches(const double *g, const double *ref, tensor t, double tol, double *err) {
    double e = 0, n = 0;
    for (size_t i = t.lo; i < t.lo + t.n; i++) e += (g[i] - ref[i]) * (g[i] - ref[i]), n += ref[i] * ref[i];
    *err = n > 0 ? sqrt(e / n) : INFINITY;
    return n > 1e-20 && *err < tol;
}

/* The per-tensor comparator must reject plausible bugs, tensor by tensor: the gradient scaled
 * by 1 + 3·tol, reversed, and every LayerNorm's γ and β gradients swapped. Made from the
 * tensors the comparator accepted (one it rejected is reported already). */
static void check_tensor_comparator_rejects_wrong(const double *g, const double *fd, size_t n, const tensor *t, int nt,
                                                  int layers, double tol) {
    double *w = malloc(n * 8), e;
    memcpy(w, g, n * 8);
    for (int k = 0; k < nt; k++) {
        if (!tensor_matches(g, fd, t[k], tol, &e)) continue;
        for (size_t i = t[k].lo; i < t[k].lo + t[k].n; i++) w[i] = (1 + 3 * tol) * g[i];
        cr_expect(!tensor_matches(w, fd, t[k], tol, &e), "%s: comparator accepted a gradient scaled by %g", t[k].name,
                  1 + 3 * tol);
        for (size_t i = 0; i < t[k].n; i++) w[t[k].lo + i] = g[t[k].lo + t[k].n - 1 - i];
        cr_expect(!tensor_matches(w, fd, t[k], tol, &e), "%s: comparator accepted a reversed gradient", t[k].name);
        memcpy(w + t[k].lo, g + t[k].lo, t[k].n * 8);
    }
    int swapped = 0;
    for (int k = 0; k + 1 < nt; k++) {
        size_t len = strlen(t[k].name);
        if (len < 2 || strcmp(t[k].name + len - 2, "_g") || t[k + 1].n != t[k].n) continue;
        swapped++;
        if (!tensor_matches(g, fd, t[k], tol, &e) || !tensor_matches(g, fd, t[k + 1], tol, &e)) continue;
        memcpy(w + t[k].lo, g + t[k + 1].lo, t[k].n * 8), memcpy(w + t[k + 1].lo, g + t[k].lo, t[k].n * 8);
        cr_expect(!tensor_matches(w, fd, t[k], tol, &e) && !tensor_matches(w, fd, t[k + 1], tol, &e),
                  "%s: comparator accepted γ and β swapped", t[k].name);
        memcpy(w + t[k].lo, g + t[k].lo, 2 * t[k].n * 8);
    }
    cr_expect_eq(swapped, 2 * layers + 1, "every LayerNorm's γ and β pair found");
    free(w);
}

/* tol: the allowed norm-relative error; measured ~5e-4 in fp16 (16-bit activations). */
static void check_gradients(dims d, uint64_t seed, double tol) {
    const float scale = 1024.0f;
    run r;
    run_model(&r, d, seed, scale);
    size_t n = r.psi;
    double *p = malloc(n * 8), *g = malloc(n * 8), *fd = malloc(n * 8);
    for (size_t i = 0; i < n; i++) p[i] = zl_storage_to_float(r.params[i]), g[i] = zl_storage_to_float(r.grads[i]) / scale;
    int R = d.B * d.T, *tok = malloc(R * sizeof(int)), *tgt = malloc(R * sizeof(int));
    tokens_of(d, seed, tok, tgt);
    double L0 = ref_loss(d, p, tok, tgt);
    cr_expect(fabs(L0 - r.loss) <= tol * L0, "loss: model %.6f, double reference %.6f", r.loss, L0);
    for (size_t i = 0; i < n; i++) { /* central differences, step relative to the value */
        double h = 1e-4, keep = p[i];
        p[i] = keep + h;
        double up = ref_loss(d, p, tok, tgt);
        p[i] = keep - h;
        double dn = ref_loss(d, p, tok, tgt);
        p[i] = keep;
        fd[i] = (up - dn) / (2 * h);
    }
    /* per unit and overall */
    double all = rel_err(g, fd, 0, n);
    cr_expect(all < tol, "whole gradient: |g - fd|/|fd| = %.3g", all);
    for (int u = 0; u < r.n_units; u++) {
        size_t lo = zl_model_unit_offset(r.s, u), hi = lo + zl_model_unit_params(r.s, u);
        double e = rel_err(g, fd, lo, hi);
        cr_expect(e < 2 * tol, "unit %d: |g - fd|/|fd| = %.3g", u, e);
    }
    /* per tensor, each within tol (measured up to a quarter of it): a gradient written to the
     * wrong tensor of a unit (a LayerNorm's γ and β swapped) can leave the unit's error small */
    tensor t[MAX_TENSORS];
    int nt = tensors_of(d, t);
    cr_assert_eq(t[nt - 1].lo + t[nt - 1].n, n, "the tensors cover the parameter vector");
    for (int k = 0; k < nt; k++) {
        double e;
        cr_expect(tensor_matches(g, fd, t[k], tol, &e), "%s: |g - fd|/|fd| = %.3g, bound %.3g", t[k].name, e, tol);
    }
    check_tensor_comparator_rejects_wrong(g, fd, n, t, nt, d.L, tol);
    /* wte's padding rows: never looked up, masked in the loss: exactly 0 */
    for (size_t i = (size_t)d.V * d.D; i < (size_t)d.Vp * d.D; i++) cr_assert_eq(r.grads[i], 0, "padding row %zu", i);
    /* the comparator rejects a wrong gradient: the LM head's part dropped (lookup part only) */
    double *wrong = malloc(n * 8);
    memcpy(wrong, g, n * 8);
    for (size_t i = 0; i < (size_t)d.V * d.D; i++) wrong[i] = 0.5 * g[i];
    cr_expect(rel_err(wrong, fd, 0, (size_t)d.Vp * d.D) > 0.1, "comparator accepts a halved wte gradient");
    free(wrong), free(p), free(g), free(fd), free(tok), free(tgt), free(r.params), free(r.grads);
}

Test(gpt_model, gradient_vs_finite_differences_one_block) { check_gradients((dims){1, 8, 2, 4, 16, 64, 2}, 11, 5e-3); }
Test(gpt_model, gradient_vs_finite_differences_two_blocks) { check_gradients((dims){2, 8, 4, 5, 20, 64, 1}, 12, 5e-3); }
/* Fused attention: P recomputed from the saved log-sum-exps (the CPU reference of the CUDA
 * kernels; any head dimension on the CPU). The double reference does not know which. */
Test(gpt_model, gradient_vs_finite_differences_fused_attention) {
    g_flash = 1;
    check_gradients((dims){2, 8, 4, 5, 20, 64, 1}, 12, 5e-3);
    check_gradients((dims){1, 8, 2, 4, 16, 64, 2}, 11, 5e-3);
}
/* bf16 storage: 8x coarser rounding, 8x the tolerance */
Test(gpt_model, gradient_vs_finite_differences_bf16) {
    cr_assert_eq(zl_kernels_set_dtype(ZL_BF16), 0);
    check_gradients((dims){1, 8, 2, 4, 16, 64, 2}, 13, 4e-2);
}

/* Accumulation: two micro-batches of the same rows, the second adding (ZL_GRADS_ADD), give
 * exactly twice one micro-batch's gradient (round(g + round(g)) = 2·round(g)) — in the tied
 * embedding too, whose LM-head part must be added once per micro-batch, neither dropped nor
 * carried over. */
Test(gpt_model, accumulate_two_micro_batches_doubles_the_gradient) {
    dims d = {2, 8, 2, 4, 16, 64, 2};
    run one, two;
    run_model_k(&one, d, 21, 256.0f, 1, 0);
    run_model_k(&two, d, 21, 256.0f, 2, 0);
    cr_expect_eq(two.loss_sum, 2 * one.loss, "K losses: %g vs 2 x %g", two.loss_sum, one.loss);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < one.psi; i++) {
        float want = 2 * zl_storage_to_float(one.grads[i]), got = zl_storage_to_float(two.grads[i]);
        if (want != got && !bad++) first = i;
    }
    cr_expect_eq(bad, 0, "%zu gradients differ from 2x one micro-batch's, first at %zu", bad, first);
    free(one.params), free(one.grads), free(two.params), free(two.grads);
}

/* --checkpoint-activations: backward recomputes each block from its input; the same bits. */
static void check_checkpointing_bitwise(void) {
    dims d = {3, 8, 2, 4, 16, 64, 2};
    run plain, ckpt;
    run_model_k(&plain, d, 22, 256.0f, 2, 0);
    run_model_k(&ckpt, d, 22, 256.0f, 2, 1);
    cr_expect_eq(ckpt.loss_sum, plain.loss_sum);
    cr_expect_eq(memcmp(plain.grads, ckpt.grads, 2 * plain.psi), 0, "gradients differ with checkpointing");
    free(plain.params), free(plain.grads), free(ckpt.params), free(ckpt.grads);
}
Test(gpt_model, checkpointing_gives_bitwise_the_same_gradient) { check_checkpointing_bitwise(); }
Test(gpt_model, checkpointing_gives_bitwise_the_same_gradient_fused_attention) {
    g_flash = 1;
    check_checkpointing_bitwise();
}

/* the tied unit: used at the start and the end; its gradient is final at use 0 only */
Test(gpt_model, uses_and_units) {
    zl_model_shape s = {.kind = ZL_MODEL_GPT, .layers = 3, .dim = 8, .rows = 1, .seq = 4, .heads = 2, .vocab = 50257};
    cr_assert_eq(zl_model_n_units(s), 5);
    cr_assert_eq(zl_model_n_uses(s), 6);
    int units[] = {0, 1, 2, 3, 4, 0};
    for (int k = 0; k < 6; k++) {
        cr_expect_eq(zl_model_unit_of_use(s, k), units[k], "use %d", k);
        cr_expect_eq(zl_model_grads_final(s, k), k != 5, "use %d", k);
    }
    cr_expect_eq(zl_model_unit_params(s, 0), (size_t)(50304 + 4) * 8, "vocabulary padded to 50304");
    cr_expect_eq(zl_model_unit_params(s, 1), (size_t)(12 * 64 + 13 * 8));
    cr_expect_eq(zl_model_unit_params(s, 4), (size_t)16);
}

/* GPT-2 small with the padded vocabulary: llm.c's 124,475,904 parameters */
Test(gpt_model, gpt2_small_parameter_count) {
    zl_model_shape s = {.kind = ZL_MODEL_GPT, .layers = 12, .dim = 768, .rows = 1, .seq = 1024, .heads = 12,
                        .vocab = 50257};
    cr_expect_eq(zl_model_unit_offset(s, zl_model_n_units(s)), (size_t)124475904);
}

Test(gpt_data, token_order_is_stable_and_complete) {
    int32_t tok[] = {3, 1, 3, 0, 1, 3, 2}, order[7], bucket[9];
    zl_gpt_token_order(tok, 7, 8, order, bucket);
    int32_t want_order[] = {3, 1, 4, 6, 0, 2, 5}, want_bucket[] = {0, 1, 3, 4, 7, 7, 7, 7, 7};
    cr_assert_arr_eq(order, want_order, sizeof order);
    cr_assert_arr_eq(bucket, want_bucket, sizeof bucket);
}

Test(gpt_data, rows_depend_on_seed_and_row_only) {
    int32_t a[17], b[17];
    unsigned char text[100];
    for (int i = 0; i < 100; i++) text[i] = (unsigned char)(i * 37);
    zl_gpt_sample_row(text, 100, 5, 42, 16, 256, a);
    zl_gpt_sample_row(text, 100, 5, 42, 16, 256, b);
    cr_assert_arr_eq(a, b, sizeof a);
    for (int t = 1; t <= 16; t++) cr_expect_eq(a[t], (int32_t)(unsigned char)(a[t - 1] + 37), "a window of the text");
    zl_gpt_sample_row(text, 100, 6, 42, 16, 256, b); /* another seed, another window */
    cr_expect(memcmp(a, b, sizeof a), "seed 6 drew seed 5's row 42");
    zl_gpt_sample_row(text, 100, 5, 43, 16, 256, b); /* another row, another window */
    cr_expect(memcmp(a, b, sizeof a), "row 43 drew row 42's window");
    zl_gpt_sample_row(NULL, 0, 5, 43, 16, 256, b);
    for (int t = 0; t <= 16; t++) cr_expect(b[t] >= 0 && b[t] < 256);
}
