/* model.c — partition math for shard units and deterministic parameter init. */
#include "model.h"

#include <stdlib.h>

#include "../kernels/kernels.h"
#include "util.h"

int zl_partition_init(zl_partition *p, const size_t *unit_sizes, int n_units, int world) {
    *p = (zl_partition){.n_units = n_units, .world = world};
    size_t nu = (size_t)n_units;
    p->n = calloc(nu, sizeof(size_t));
    p->n_pad = calloc(nu, sizeof(size_t));
    p->shard = calloc(nu, sizeof(size_t));
    p->off = calloc(nu, sizeof(size_t));
    p->off_pad = calloc(nu, sizeof(size_t));
    p->shard_off = calloc(nu, sizeof(size_t));
    if (!p->n || !p->n_pad || !p->shard || !p->off || !p->off_pad || !p->shard_off)
        zl_fatal("out of host memory for the partition of %d units", n_units);
    size_t N = (size_t)world;
    for (size_t u = 0; u < nu; u++) {
        size_t n = unit_sizes[u];
        size_t shard = n / N + (n % N != 0); /* ceil(n/N) without overflow */
        size_t n_pad;
        if (__builtin_mul_overflow(shard, N, &n_pad)) return -1;
        p->n[u] = n;
        p->n_pad[u] = n_pad;
        p->shard[u] = shard;
        p->off[u] = p->psi;
        p->off_pad[u] = p->psi_pad;
        p->shard_off[u] = p->shard_total;
        if (__builtin_add_overflow(p->psi, n, &p->psi)) return -1;
        if (__builtin_add_overflow(p->psi_pad, n_pad, &p->psi_pad)) return -1;
        p->shard_total += shard;
        if (n_pad > p->max_unit_pad) p->max_unit_pad = n_pad;
        if (n > p->max_unit) p->max_unit = n;
    }
    size_t bytes;
    if (__builtin_mul_overflow(p->psi_pad, (size_t)16, &bytes)) return -1;
    return 0;
}

void zl_partition_free(zl_partition *p) {
    free(p->n);
    free(p->n_pad);
    free(p->shard);
    free(p->off);
    free(p->off_pad);
    free(p->shard_off);
    *p = (zl_partition){0};
}

void zl_partition_shard_range(const zl_partition *p, int u, int r, size_t *begin, size_t *end) {
    *begin = (size_t)r * p->shard[u];
    *end = *begin + p->shard[u];
}

int zl_model_partition(zl_partition *p, zl_model_shape m, int world) {
    size_t *sizes = malloc((size_t)m.layers * sizeof(size_t));
    if (!sizes) zl_fatal("out of host memory");
    for (int u = 0; u < m.layers; u++) sizes[u] = zl_block_params((size_t)m.dim);
    int rc = zl_partition_init(p, sizes, m.layers, world);
    free(sizes);
    return rc;
}

static int floor_log2(unsigned long x) {
    int l = 0;
    while (x >>= 1) l++;
    return l;
}
/* 2^-k with k = round(log2(sqrt(fan_in))): the nearest power of two to 1/sqrt(fan_in). */
int zl_init_scale_log2_W1(int dim) { return (floor_log2((unsigned long)dim) + 1) / 2; }
int zl_init_scale_log2_W2(int dim) { return (floor_log2(4ul * (unsigned long)dim) + 1) / 2 + 1; }

/* Copy the part of tensor [t0, t1) (unit coordinates) that overlaps [begin, end). */
static void init_segment(zl_half *dst, size_t begin, size_t end, size_t t0, size_t t1, uint64_t seed,
                         size_t unit_off, int scale_log2, zl_stream s) {
    size_t lo = begin > t0 ? begin : t0, hi = end < t1 ? end : t1;
    if (lo >= hi) return;
    if (scale_log2 < 0)
        zl_memset_async(dst + (lo - begin), 0, (hi - lo) * sizeof(zl_half), s);
    else
        zl_init_uniform(dst + (lo - begin), hi - lo, seed, unit_off + lo, scale_log2, s);
}

void zl_model_init_range(zl_half *dst, const zl_partition *p, zl_model_shape m, int u, size_t begin, size_t end,
                         uint64_t seed, zl_stream s) {
    size_t D = (size_t)m.dim, off = p->off[u];
    init_segment(dst, begin, end, zl_off_W1(D), zl_off_b1(D), seed, off, zl_init_scale_log2_W1(m.dim), s);
    init_segment(dst, begin, end, zl_off_b1(D), zl_off_W2(D), seed, off, -1, s);
    init_segment(dst, begin, end, zl_off_W2(D), zl_off_b2(D), seed, off, zl_init_scale_log2_W2(m.dim), s);
    init_segment(dst, begin, end, zl_off_b2(D), p->n_pad[u], seed, off, -1, s); /* b2 and padding */
}
