/* gpt_layout.c — the transformer's byte formulas (gpt.h), pure arithmetic: zerocalc links it. */
#include "gpt.h"

/* Without checkpointing: what forward saves for backward, component by component. */
static int saved_terms(zl_gpt_dims d, int layers, zl_gpt_term *t) {
    double L = layers, R = (double)d.B * d.T, RD = R * d.D, BHT = (double)d.B * d.H * d.T, BHTT = BHT * d.T;
    int n = 0;
    t[n++] = (zl_gpt_term){"block inputs x (L+1)·R·D", 2 * (L + 1) * RD};
    t[n++] = (zl_gpt_term){"LN1 + LN2 outputs 2·L·R·D", 2 * 2 * L * RD};
    t[n++] = (zl_gpt_term){"LN1 + LN2 mean, rstd (fp32) 4·L·R", 4 * 4 * L * R};
    t[n++] = (zl_gpt_term){"q, k, v 3·L·R·D", 2 * 3 * L * RD};
    t[n++] = d.flash ? (zl_gpt_term){"attention row log-sum-exps (fp32) L·B·H·T", 4 * L * BHT}
                     : (zl_gpt_term){"attention probabilities L·B·H·T²", 2 * L * BHTT};
    t[n++] = (zl_gpt_term){"attention output L·R·D", 2 * L * RD};
    t[n++] = (zl_gpt_term){"residual x_mid L·R·D", 2 * L * RD};
    t[n++] = (zl_gpt_term){"MLP h + gelu(h) 8·L·R·D", 2 * 8 * L * RD};
    t[n++] = (zl_gpt_term){"final LN output R·D", 2 * RD};
    t[n++] = (zl_gpt_term){"final LN mean, rstd (fp32) 2·R", 4 * 2 * R};
    t[n++] = (zl_gpt_term){"logits R·Vp", 2 * R * d.Vp};
    return n;
}

int zl_gpt_activation_terms(zl_gpt_dims d, int layers, int checkpoint, zl_gpt_term *out) {
    if (!checkpoint) return saved_terms(d, layers, out);
    /* Checkpointed: the block inputs and the head as before; of the per-block terms, one
     * block's worth (the one being recomputed) instead of L. */
    zl_gpt_term one[ZL_GPT_MAX_TERMS];
    int n_one = saved_terms(d, 1, one), n = 0;
    double R = (double)d.B * d.T, RD = R * d.D, block = 0;
    for (int i = 1; i <= 7; i++) block += one[i].bytes; /* the seven per-block terms at L = 1 */
    (void)n_one;
    out[n++] = (zl_gpt_term){"checkpoints: block inputs (L+1)·R·D", 2 * ((double)layers + 1) * RD};
    out[n++] = (zl_gpt_term){d.flash ? "one block recomputed: 15·R·D (+ fp32 stats, lse)"
                                     : "one block recomputed: 15·R·D + B·H·T² (+ fp32 stats)", block};
    out[n++] = (zl_gpt_term){"final LN output R·D", 2 * RD};
    out[n++] = (zl_gpt_term){"final LN mean, rstd (fp32) 2·R", 4 * 2 * R};
    out[n++] = (zl_gpt_term){"logits R·Vp", 2 * R * d.Vp};
    return n;
}

double zl_gpt_activation_sum(zl_gpt_dims d, int layers, int checkpoint) {
    zl_gpt_term t[ZL_GPT_MAX_TERMS];
    int n = zl_gpt_activation_terms(d, layers, checkpoint, t);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i].bytes;
    return sum;
}

/* Fused attention needs neither the per-head copies (3·R·D) nor dP (B·H·T²), only Dl (B·H·T
 * floats, backward's row dot products dout·out). */
size_t zl_gpt_scratch_bytes(zl_gpt_dims d, size_t micro_batches) {
    size_t R = (size_t)d.B * d.T, RD = R * d.D, BHT = (size_t)d.B * d.H * d.T, BHTT = BHT * d.T, Vp = (size_t)d.Vp;
    size_t attention = d.flash ? 4 * BHT : 2 * (3 * RD + BHTT);
    return 2 * (9 * RD + Vp * d.D) + attention + 4 * (3 * R + Vp + 1) + 4 * (R + micro_batches);
}

size_t zl_gpt_host_bytes(zl_gpt_dims d) { return 4 * (3 * (size_t)d.B * d.T + (size_t)d.Vp + 1); }
