/* gpu_select.c — see gpu_select.h. */
#include "gpu_select.h"

#include <stdio.h>
#include <string.h>

int zl_select_device(int visible_devices, int local_rank, int local_size, char *err, size_t errlen) {
    if (local_size < 1 || local_rank < 0 || local_rank >= local_size) {
        snprintf(err, errlen, "node-local rank %d of %d ranks is not a valid position", local_rank, local_size);
        return -1;
    }
    if (visible_devices < 1) {
        snprintf(err, errlen, "no CUDA device visible to node-local rank %d", local_rank);
        return -1;
    }
    /* Each rank sees the whole node: one device per node-local rank. */
    if (visible_devices >= local_size) return local_rank;
    /* The launcher bound one device to each rank (--gpus-per-task=1): it is device 0. */
    if (visible_devices == 1) return 0;
    snprintf(err, errlen,
             "%d ranks on this node but this rank sees %d CUDA devices: launch one rank per GPU, each "
             "seeing at least %d devices or exactly 1 (e.g. srun --gpus-per-task=1)",
             local_size, visible_devices, local_size);
    return -1;
}

int zl_find_shared_device(const char *keys, size_t stride, int n, int *first, int *second) {
    for (int j = 1; j < n; j++) {
        const char *kj = keys + (size_t)j * stride;
        if (!kj[0]) continue;
        for (int i = 0; i < j; i++)
            if (!strcmp(keys + (size_t)i * stride, kj)) {
                *first = i, *second = j;
                return 1;
            }
    }
    return 0;
}
