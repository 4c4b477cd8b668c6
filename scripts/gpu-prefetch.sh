#!/bin/bash
# gpu-prefetch.sh OUTDIR — ZeRO-3 on lab-1b at N = 2 for --prefetch 0..3 (docs/labs.md,
# exercise 5): OUTDIR/stage3_lab-1b_prefetch<K>_N2.json|txt.
set -u
out=${1:?usage: gpu-prefetch.sh OUTDIR}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-prefetch: needs an NVIDIA GPU and nvidia-smi -L lists none; timing overlap needs a GPU; results/gpu/stage3_lab-1b_prefetch*_N2.txt are committed runs" >&2; exit 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
for k in 0 1 2 3; do
    $MPIEXEC -n 2 build/cuda/stage3 --preset lab-1b --prefetch $k --quiet \
        --json "$out/stage3_lab-1b_prefetch${k}_N2.json" > "$out/stage3_lab-1b_prefetch${k}_N2.txt" 2>&1
    echo "prefetch $k rc=$? $(grep -E '^summary' "$out/stage3_lab-1b_prefetch${k}_N2.txt")"
done
