/* alloc.h — the tracked allocator: every buffer a stage owns, by category.
 *
 * This is where the report's "measured" memory comes from. Each allocation names
 * its category; the tracker keeps current and peak bytes per category and the peak
 * of the device total. All buffers are allocated before step 1 (pre-allocation, as the
 * paper's M_D does for checkpoints and gradients, ZeRO-R §6.3 — not C_B's constant-size
 * buffers, §6.2: the gradient buckets and gather buffers are one unit each, so they grow
 * with the largest unit); zl_mem_freeze() marks that point and any later allocation is
 * counted as a violation (reported, and failed by the tests). */
#ifndef ZL_ALLOC_H
#define ZL_ALLOC_H

#include <stddef.h>

typedef enum {
    ZL_MEM_PARAMS_FP16 = 0, /* fp16 parameters (full, or the rank's shard in stage 3) */
    ZL_MEM_GRADS_FP16,      /* fp16 gradients (full, or the rank's shard from stage 2) */
    ZL_MEM_MASTER_FP32,     /* fp32 master weights */
    ZL_MEM_ADAM_M,          /* fp32 Adam first moment */
    ZL_MEM_ADAM_V,          /* fp32 Adam second moment */
    ZL_MEM_GRAD_BUCKET,     /* stage 2: per-unit gradient buckets before reduce-scatter */
    ZL_MEM_PARAM_GATHER,    /* stage 3: buffers units are all-gathered into */
    ZL_MEM_ACTIVATIONS,     /* forward activations the model saves for backward (model/model.h) */
    ZL_MEM_SCRATCH,         /* the model's targets, activation gradients, loss */
    ZL_MEM_WORKSPACE,       /* kernel workspace (cuBLASLt, CPU fp32 panels) */
    ZL_MEM_HOST_STAGING,    /* host-side buffer for param_hash/dump; not device memory */
    ZL_MEM_CKPT_STAGING,    /* host: every checkpoint byte passes through it (ckpt.h); ZL_CKPT_CHUNK_ELEMS fp32 at most */
    /* --offload (common/offload.h): this rank's optimizer states in pinned host memory */
    ZL_MEM_HOST_MASTER_FP32, /* fp32 master weights, this rank's slices */
    ZL_MEM_HOST_ADAM_M,      /* fp32 Adam first moment, this rank's slices */
    ZL_MEM_HOST_ADAM_V,      /* fp32 Adam second moment, this rank's slices */
    ZL_MEM_OFFLOAD_STAGING,  /* 16-bit gradient slices in, new 16-bit parameter slices out (in place) */
    ZL_MEM_NCAT
} zl_mem_cat;

#define ZL_MEM_N_MODEL_STATES 5 /* the first five categories are the paper's model states */

const char *zl_mem_cat_name(zl_mem_cat c);
/* Checkpoint I/O goes through a fixed staging buffer of this many fp32 elements at most
 * (fewer for a model whose largest padded unit is smaller). */
#define ZL_CKPT_CHUNK_ELEMS ((size_t)1 << 21)

/* Host categories are not counted in peak_total (device); everything from
 * ZL_MEM_HOST_STAGING on lives on the host, the offload categories in pinned memory. */
static inline int zl_mem_cat_is_host(zl_mem_cat c) { return c >= ZL_MEM_HOST_STAGING; }
static inline int zl_mem_cat_is_pinned(zl_mem_cat c) { return c >= ZL_MEM_HOST_MASTER_FP32; }
static inline int zl_mem_cat_is_device(zl_mem_cat c) { return !zl_mem_cat_is_host(c); }

typedef struct {
    size_t current[ZL_MEM_NCAT];
    size_t peak[ZL_MEM_NCAT];
    size_t current_total; /* device categories only */
    size_t peak_total;
    long allocations;           /* number of live + freed allocations made */
    long allocations_after_freeze;
    int frozen;
} zl_mem_stats;

/* Raw allocation functions the tracker sits on. The stage programs use the backend's
 * (zl_dev_alloc/zl_dev_free); unit tests may install malloc/free. Host staging always
 * uses malloc. */
typedef void *(*zl_raw_alloc_fn)(size_t);
typedef void (*zl_raw_free_fn)(void *);
void zl_mem_init(zl_raw_alloc_fn dev_alloc, zl_raw_free_fn dev_free);
/* Pinned host memory for the offload categories (default malloc/free; the offload module
 * installs zl_host_alloc_pinned / zl_host_free_pinned). */
void zl_mem_init_pinned(zl_raw_alloc_fn host_alloc, zl_raw_free_fn host_free);
/* The buffers all-gathers read and write — params_fp16 and param_gather — through these
 * (default: the device pair above; the runtime installs zl_dev_alloc_collective /
 * zl_dev_free_collective, backend.h). Same bytes tracked either way. */
void zl_mem_init_collective(zl_raw_alloc_fn dev_alloc, zl_raw_free_fn dev_free);
static inline int zl_mem_cat_is_collective(zl_mem_cat c) { return c == ZL_MEM_PARAMS_FP16 || c == ZL_MEM_PARAM_GATHER; }

/* Allocate `bytes` in category `c`, abort with a clear message (what, how much,
 * category) if the device is out of memory. Zero bytes returns NULL and records 0. */
void *zl_mem_alloc(zl_mem_cat c, size_t bytes, const char *what);
void zl_mem_free(void *p);

void zl_mem_free_all(void); /* teardown: release every live allocation */
void zl_mem_freeze(void);   /* from here on, any allocation is a violation */
void zl_mem_unfreeze(void); /* after the step loop (teardown and report are free to allocate) */
const zl_mem_stats *zl_mem_get_stats(void);
void zl_mem_reset(void); /* for unit tests: forget everything (all buffers must be freed) */

#endif
