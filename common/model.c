/* model.c — deterministic parameter initialisation (a function of the seed and the global
 * parameter index only). */
#include "model.h"

#include "../kernels/kernels.h"

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
