/* gpu_select.h — which CUDA device a rank uses, from what it can see and how many ranks share
 * its node. Pure (no CUDA, no MPI), so the decision is unit-tested on a machine without a GPU.
 *
 * Launchers bind GPUs in two ways, and both must work:
 *   - every rank sees all of the node's GPUs (plain mpiexec, srun without GPU binding):
 *     rank k of the node takes device k;
 *   - each rank sees exactly one GPU (srun --gpus-per-task=1, --gpu-bind=single:1,
 *     CUDA_VISIBLE_DEVICES set per rank by a wrapper): every rank takes its device 0.
 * Anything in between (N ranks on a node, each seeing 1 < M < N devices) has no safe answer:
 * some ranks would share a GPU, which NCCL refuses. So does "each sees one" when it is the same
 * one (a one-GPU machine, CUDA_VISIBLE_DEVICES=0 for every rank): zl_find_shared_device finds
 * it from the ranks' device keys. */
#ifndef ZL_GPU_SELECT_H
#define ZL_GPU_SELECT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* visible_devices: cudaGetDeviceCount on this rank; local_rank / local_size: this rank's
 * index among, and the number of, ranks on its node. Returns the device index, or -1 with
 * one line (no trailing newline) naming the counts in err[errlen]. */
int zl_select_device(int visible_devices, int local_rank, int local_size, char *err, size_t errlen);

/* keys: n device keys (zl_backend_device_key) of one node's ranks, `stride` bytes apart, each
 * NUL-terminated. Returns 1 with *first < *second the first pair of equal, non-empty keys (the
 * lowest *second, then the lowest *first): two ranks on one device. Else 0. */
int zl_find_shared_device(const char *keys, size_t stride, int n, int *first, int *second);

#ifdef __cplusplus
}
#endif

#endif
