/* layout.c — the model's pure arithmetic: units, uses, byte formulas (see model.h).
 * No MPI, no device: zerocalc and formulas.c link it. One case per model kind. */
#include "model.h"

#include <stdlib.h>

#include "mlp.h"

zl_model_shape zl_model_shape_of(const zl_config *c) {
    return (zl_model_shape){.kind = ZL_MODEL_MLP, .layers = c->layers, .dim = c->dim, .rows = c->batch,
                            .micro_batches = c->accum, .checkpoint = c->checkpoint_activations};
}

int zl_model_n_units(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return s.layers; /* one per block */
    }
    return 0;
}

size_t zl_model_unit_params(zl_model_shape s, int u) {
    (void)u;
    switch (s.kind) {
    case ZL_MODEL_MLP: return zl_mlp_unit_params((size_t)s.dim); /* every block alike */
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
    }
    return 0;
}

int zl_model_unit_of_use(zl_model_shape s, int k) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return k;
    }
    return 0;
}

int zl_model_grads_final(zl_model_shape s, int k) {
    switch (s.kind) {
    case ZL_MODEL_MLP: (void)k; return 1; /* no unit is used twice */
    }
    return 1;
}

size_t zl_model_activation_bytes(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP:
        return zl_mlp_activation_bytes((size_t)s.layers, (size_t)s.dim, (size_t)s.rows, s.checkpoint);
    }
    return 0;
}

size_t zl_model_scratch_bytes(zl_model_shape s) {
    switch (s.kind) {
    case ZL_MODEL_MLP: return zl_mlp_scratch_bytes((size_t)s.dim, (size_t)s.rows, (size_t)zl_model_micro_batches(s));
    }
    return 0;
}
