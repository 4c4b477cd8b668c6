/* partition.h — the residual MLP's shape and its partition into shard units.
 *
 * Parameters live in one flat fp16 vector, block after block; a block is a *shard
 * unit*. For ZeRO every unit is padded to a multiple of N elements, so that rank r
 * owns the r-th 1/N slice of every unit:
 *     n_pad(u) = ceil(n(u)/N)·N,  shard(u) = n_pad(u)/N,  Ψ_pad = Σ n_pad(u).
 * Buffers that hold full units use the padded layout (offset off_pad[u]); buffers
 * that hold only this rank's slices concatenate them (offset shard_off[u]).
 * The partition math is generic in the unit sizes (tests use ragged sizes); the
 * model just happens to have L equal units of 8D²+5D elements. Pure arithmetic: no MPI, no
 * device (zerocalc links it). */
#ifndef ZL_PARTITION_H
#define ZL_PARTITION_H

#include <stddef.h>
#include <stdint.h>


typedef struct {
    int n_units;
    int world;         /* N */
    size_t *n;         /* elements in unit u (unpadded) */
    size_t *n_pad;     /* ceil(n/N)·N */
    size_t *shard;     /* n_pad/N: elements of unit u each rank owns */
    size_t *off;       /* offset of unit u in the unpadded vector (for init and the hash) */
    size_t *off_pad;   /* offset of unit u in a full padded buffer */
    size_t *shard_off; /* offset of unit u's slice in a rank's concatenated shard buffer */
    size_t psi;        /* Ψ = Σ n */
    size_t psi_pad;    /* Ψ_pad = Σ n_pad */
    size_t shard_total; /* Ψ_pad / N */
    size_t max_unit_pad; /* largest n_pad: the size of a bucket or gather buffer */
    size_t max_unit;     /* largest n */
} zl_partition;

/* Build the partition for arbitrary unit sizes. Returns 0, or -1 if a byte count
 * (16·Ψ_pad) would overflow size_t or host memory runs out. The arrays are host
 * bookkeeping (malloc); zl_partition_free releases them in either case. */
int zl_partition_init(zl_partition *p, const size_t *unit_sizes, int n_units, int world);
void zl_partition_free(zl_partition *p);

/* Rank r's slice of unit u, in element offsets within the padded unit: [begin, end). */
void zl_partition_shard_range(const zl_partition *p, int u, int r, size_t *begin, size_t *end);

/* ---- the model ---- */
typedef struct {
    int layers, dim; /* L, D */
} zl_model_shape;

static inline size_t zl_block_params(size_t dim) { return 8 * dim * dim + 5 * dim; }
/* Offsets of the block's tensors inside its unit (row-major W1: D×4D, W2: 4D×D). */
static inline size_t zl_off_W1(size_t dim) { (void)dim; return 0; }
static inline size_t zl_off_b1(size_t dim) { return 4 * dim * dim; }
static inline size_t zl_off_W2(size_t dim) { return 4 * dim * dim + 4 * dim; }
static inline size_t zl_off_b2(size_t dim) { return 8 * dim * dim + 4 * dim; }

/* Partition of the model: L units of 8D²+5D. */
int zl_model_partition(zl_partition *p, zl_model_shape m, int world);

#endif
