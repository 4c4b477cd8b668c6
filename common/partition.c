/* partition.c — partition math for shard units and their slices (pure arithmetic; see partition.h). */
#include "partition.h"

#include <stdlib.h>

int zl_partition_init(zl_partition *p, const size_t *unit_sizes, int n_units, int world) {
    *p = (zl_partition){.n_units = n_units, .world = world};
    size_t nu = (size_t)n_units;
    p->n = calloc(nu, sizeof(size_t));
    p->n_pad = calloc(nu, sizeof(size_t));
    p->slice_len = calloc(nu, sizeof(size_t));
    p->off = calloc(nu, sizeof(size_t));
    p->off_pad = calloc(nu, sizeof(size_t));
    p->slice_off = calloc(nu, sizeof(size_t));
    if (!p->n || !p->n_pad || !p->slice_len || !p->off || !p->off_pad || !p->slice_off) return -1;
    size_t N = (size_t)world;
    for (size_t u = 0; u < nu; u++) {
        size_t n = unit_sizes[u];
        size_t slice_len = n / N + (n % N != 0); /* ceil(n/N) without overflow */
        size_t n_pad;
        if (__builtin_mul_overflow(slice_len, N, &n_pad)) return -1;
        p->n[u] = n;
        p->n_pad[u] = n_pad;
        p->slice_len[u] = slice_len;
        p->off[u] = p->psi;
        p->off_pad[u] = p->full_len;
        p->slice_off[u] = p->shard_len;
        if (__builtin_add_overflow(p->psi, n, &p->psi)) return -1;
        if (__builtin_add_overflow(p->psi_pad, n_pad, &p->psi_pad)) return -1;
        p->shard_len += slice_len;
        size_t n_full = n_pad + (ZL_UNIT_ALIGN - n_pad % ZL_UNIT_ALIGN) % ZL_UNIT_ALIGN; /* the next unit's line */
        if (n_full < n_pad || __builtin_add_overflow(p->full_len, n_full, &p->full_len)) return -1;
        if (n_pad > p->max_unit_pad) p->max_unit_pad = n_pad;
        if (n > p->max_unit) p->max_unit = n;
    }
    size_t bytes;
    if (__builtin_mul_overflow(p->full_len, (size_t)16, &bytes)) return -1;
    return 0;
}

void zl_partition_free(zl_partition *p) {
    free(p->n);
    free(p->n_pad);
    free(p->slice_len);
    free(p->off);
    free(p->off_pad);
    free(p->slice_off);
    *p = (zl_partition){0};
}

void zl_partition_slice_range(const zl_partition *p, int u, int r, size_t *begin, size_t *end) {
    *begin = (size_t)r * p->slice_len[u];
    *end = *begin + p->slice_len[u];
}
