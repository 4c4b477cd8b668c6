/* preflight.h — does the run fit? Asked before the first buffer is allocated.
 *
 * Without it, a model that is too large fails at whichever buffer happens not to fit
 * ("out of memory allocating fp32 master…"), once per rank, and nobody learns how far
 * off it was. Here every rank compares the formula total it is about to allocate —
 * the same formulas the report checks the allocations against — with what is free:
 *   device: cudaMemGetInfo's free bytes (CUDA); on the CPU backend device buffers are
 *           host memory, so they are counted with the host;
 *   host:   /proc/meminfo MemAvailable, shared by the ranks of one node.
 * If anything does not fit, every rank stops with exit 2 and the lowest such rank
 * prints one line: what is needed (model states, activations, buffers), what is free,
 * and what would fit — a later stage at this N, or the smallest N for this stage —
 * computed from the same formulas. --no-preflight skips the check.
 * A checkpoint to --resume from is checked here too (ckpt.h), even with --no-preflight:
 * a bad one is refused before anything is allocated. */
#ifndef ZL_PREFLIGHT_H
#define ZL_PREFLIGHT_H

#include "formulas.h"
#include "partition.h"
#include "runtime.h"

/* Collective. Returns if the run fits (or --no-preflight); otherwise every rank exits 2. */
void zl_preflight(zl_runtime *rt, const zl_partition *part, const zl_formula_config *fc);

/* What this rank's preflight compared (the report's memory.preflight, and what zerocalc
 * --max-layers takes as --memory and --host-memory): free device bytes (cudaMemGetInfo),
 * MemAvailable, the ranks sharing the node, and the need. checked = 0 with --no-preflight. */
typedef struct {
    int checked, on_gpu, local_ranks;
    double dev_free, host_avail, need_device, need_host;
} zl_preflight_inputs;
const zl_preflight_inputs *zl_preflight_last(void);

/* Host memory available (MemAvailable, bytes); 0 if unknown. */
size_t zl_host_mem_available(void);

/* What does not fit, as one line, or "" if everything fits; `dev_free` and `host_avail`
 * are per GPU and per node (0 = unknown: not checked); `on_gpu` = 0 on the CPU backend.
 * Pure function of its inputs (unit-tested). Returns 1 if something does not fit. */
int zl_preflight_verdict(const zl_partition *part, const zl_formula_config *fc, int on_gpu, int local_ranks,
                         size_t dev_free, size_t host_avail, char *msg, size_t n);

#endif
