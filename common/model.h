/* model.h — deterministic parameter initialisation for the residual MLP (see partition.h
 * for its shape and shard units). */
#ifndef ZL_MODEL_H
#define ZL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"
#include "partition.h"

/* Initialise elements [begin, end) of unit u (padded-unit coordinates) into dst:
 * W1 and W2 uniform with a power-of-two scale ~ 1/sqrt(fan_in) (W2 halved again so
 * blocks start near the identity), biases and padding zero. A function of the seed
 * and the global unpadded index only — never of N or rank. */
void zl_model_init_range(zl_half *dst, const zl_partition *p, zl_model_shape m, int u, size_t begin, size_t end,
                         uint64_t seed, zl_stream s);

/* The power-of-two init scales (exposed for tests). */
int zl_init_scale_log2_W1(int dim);
int zl_init_scale_log2_W2(int dim);

#endif
