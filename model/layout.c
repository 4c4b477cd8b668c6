/* layout.c — the model's pure arithmetic: units, uses, byte formulas (see model.h).
 * No MPI, no device: zerocalc and formulas.c link it. One case per model kind. */
#include "model.h"

#include <stdlib.h>

#include "gpt.h"
#include "mlp.h"

zl_model_shape zl_model_shape_of(const zl_config *c) {
    zl_model_shape s = {.kind = ZL_MODEL_MLP, .layers = c->layers, .dim = c->dim, .rows = c->batch,
                        .micro_batches = c->accum, .checkpoint = c->checkpoint_activations,
                        .keep = c->keep_activations};
    if (c->model == ZL_MODEL_GPT) {
        s.kind = ZL_MODEL_GPT;
        s.seq = c->seq, s.heads = c->heads, s.vocab = c->vocab, s.flash_attention = c->attention == ZL_ATTENTION_FUSED;
        s.data = c->data_path[0] ? c->data_path : NULL;
    }
    return s;
}

/* The transformer's call shape. */
zl_gpt_dims zl_model_gpt_dims(zl_model_shape s) {
    return (zl_gpt_dims){.B = s.rows, .T = s.seq, .D = s.dim, .H = s.heads, .V = s.vocab,
                         .Vp = zl_gpt_padded_vocab(s.vocab), .flash = s.flash_attention};
}

int zl_model_n_units(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return s.layers; /* one per block */
    case ZL_MODEL_GPT: return s.layers + 2; /* embedding, blocks, final LN */
    }
    return 0;
}

size_t zl_model_unit_params(zl_model_shape s, int u) {
    size_t D = (size_t)s.dim;
    switch (s.kind) {
    case ZL_MODEL_MLP: return zl_mlp_unit_params(D); /* every block alike */
    case ZL_MODEL_GPT:
        if (u == 0) return zl_gpt_embed_params((size_t)zl_gpt_padded_vocab(s.vocab), (size_t)s.seq, D);
        return u <= s.layers ? zl_gpt_block_params(D) : zl_gpt_final_params(D);
    }
    return 0;
}

size_t zl_model_unit_offset(zl_model_shape s, int u) {
    size_t off = 0;
    for (int v = 0; v < u; v++) off += zl_model_unit_params(s, v);
    return off;
}

int zl_model_partition(zl_partition *p, zl_model_shape s, int world) {
    int n = zl_model_n_units(s);
    size_t *sizes = malloc((size_t)(n > 0 ? n : 1) * sizeof(size_t));
    if (!sizes) return -1;
    for (int u = 0; u < n; u++) sizes[u] = zl_model_unit_params(s, u);
    int rc = zl_partition_init(p, sizes, n, world);
    free(sizes);
    return rc;
}

int zl_model_n_uses(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return s.layers; /* each block once */
    case ZL_MODEL_GPT: return s.layers + 3; /* embedding, blocks, final LN, LM head (tied) */
    }
    return 0;
}

int zl_model_unit_of_use(zl_model_shape s, int k) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return k;
    case ZL_MODEL_GPT: return k == s.layers + 2 ? 0 : k; /* the LM head reads the embedding */
    }
    return 0;
}

int zl_model_grads_final(zl_model_shape s, int k) {
    switch (s.kind) {
    case ZL_MODEL_MLP: (void)k; return 1; /* no unit is used twice */
    case ZL_MODEL_GPT: return k != s.layers + 2; /* backward meets the LM head first, the lookup last */
    }
    return 1;
}

size_t zl_model_activation_bytes(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP:
        return zl_mlp_activation_bytes((size_t)s.layers, (size_t)s.dim, (size_t)s.rows, s.checkpoint, s.keep);
    case ZL_MODEL_GPT: return (size_t)zl_gpt_activation_sum(zl_model_gpt_dims(s), s.layers, s.checkpoint);
    }
    return 0;
}

size_t zl_model_scratch_bytes(zl_model_shape s) {
    size_t K = (size_t)zl_model_micro_batches(s);
    switch (s.kind) {
    case ZL_MODEL_MLP: return zl_mlp_scratch_bytes((size_t)s.dim, (size_t)s.rows, K);
    case ZL_MODEL_GPT: return zl_gpt_scratch_bytes(zl_model_gpt_dims(s), K);
    }
    return 0;
}

size_t zl_model_host_bytes(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return 0;
    case ZL_MODEL_GPT: return zl_gpt_host_bytes(zl_model_gpt_dims(s));
    }
    return 0;
}
