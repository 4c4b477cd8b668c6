/* partition.h — a flat parameter vector cut into shard units, and each unit into N slices.
 *
 * Parameters live in one flat fp16 vector, unit after unit (the model says what a unit
 * is: model/model.h). For ZeRO every unit is padded to a multiple of N elements, so that
 * rank r owns the r-th 1/N *slice* of every unit; a rank's *shard* is its slices, one per
 * unit, end to end:
 *     n_pad(u) = ceil(n(u)/N)·N,  slice_len(u) = n_pad(u)/N,  Ψ_pad = Σ n_pad(u),
 *     shard_len = Σ slice_len(u) = Ψ_pad/N.
 * Buffers that hold full units use the padded layout (unit u at off_pad[u]); buffers
 * that hold only this rank's shard put unit u's slice at slice_off[u].
 * In a full buffer every unit starts on a 16-byte line (off_pad a multiple of
 * ZL_UNIT_ALIGN = 8 elements): a unit that starts 4 bytes into a line gets other cuBLASLt
 * kernels than the same unit in ZeRO-3's gather buffer — other bits, and at N = 3 on
 * lab-1b (n_pad not a multiple of 8) twice the step time (docs/performance.md). So
 *     n_full(u) = ceil(n_pad(u)/8)·8,  Ψ_full = Σ n_full(u)  (= Ψ_pad when 8 | every n_pad).
 * The collectives still move n_pad(u) per unit: the alignment gaps never travel.
 * Generic in the unit sizes (tests use ragged sizes). Pure arithmetic: no MPI, no
 * device (zerocalc links it). */
#ifndef ZL_PARTITION_H
#define ZL_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#define ZL_UNIT_ALIGN 8 /* elements: a unit of a full buffer starts on a 16-byte line (fp16) */

typedef struct {
    int n_units;
    int world;         /* N */
    size_t *n;         /* elements in unit u (unpadded) */
    size_t *n_pad;     /* ceil(n/N)·N */
    size_t *slice_len; /* n_pad/N: elements of unit u each rank owns */
    size_t *off;       /* offset of unit u in the unpadded vector (for init and the hash) */
    size_t *off_pad;   /* offset of unit u in a full buffer: Σ_{v<u} n_full(v), a multiple of 8 */
    size_t *slice_off; /* offset of unit u's slice in a rank's shard */
    size_t psi;        /* Ψ = Σ n */
    size_t psi_pad;    /* Ψ_pad = Σ n_pad */
    size_t shard_len;  /* Ψ_pad / N: elements of a rank's shard */
    size_t full_len;   /* Ψ_full = Σ n_full(u): elements of a full buffer (params, grads, DDP's states) */
    size_t max_unit_pad; /* largest n_pad: the size of a bucket or gather buffer */
    size_t max_unit;     /* largest n */
} zl_partition;

/* Build the partition for arbitrary unit sizes. Returns 0, or -1 if a byte count
 * (16·Ψ_full) would overflow size_t or host memory runs out. The arrays are host
 * bookkeeping (malloc); zl_partition_free releases them in either case. */
int zl_partition_init(zl_partition *p, const size_t *unit_sizes, int n_units, int world);
void zl_partition_free(zl_partition *p);

/* Rank r's slice of unit u, in element offsets within the padded unit: [begin, end). */
void zl_partition_slice_range(const zl_partition *p, int u, int r, size_t *begin, size_t *end);

#endif
