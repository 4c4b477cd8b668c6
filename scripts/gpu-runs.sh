#!/bin/bash
# gpu-runs.sh OUTDIR [PRESET] — the measurement runs for the closing notes and results/:
# every stage on PRESET (default lab-1b) at N = 1 and N = 2 (when two GPUs are listed),
# each writing its JSON report and full text report into OUTDIR.
set -u
out=${1:?usage: gpu-runs.sh OUTDIR [PRESET]}; preset=${2:-lab-1b}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-runs: needs an NVIDIA GPU and nvidia-smi -L lists none; scripts/results-cpu.sh runs every stage on the CPU build" >&2; exit 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
gpus=$("$(dirname "$0")/gpu-count.sh") # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
for n in 1 2; do
    [ "$n" -le "$gpus" ] || continue
    for prog in stage0_ddp stage1 stage2 stage3; do
        $MPIEXEC -n $n build/cuda/$prog --preset "$preset" --quiet --json "$out/${prog}_${preset}_N$n.json" \
            > "$out/${prog}_${preset}_N$n.txt" 2>&1
        echo "$prog N=$n rc=$? $(grep '^summary:' "$out/${prog}_${preset}_N$n.txt")"
    done
done
