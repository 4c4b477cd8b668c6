#!/bin/bash
# gpu-fill.sh OUTDIR — a model that nearly fills one GPU under DDP, run through all four
# stages at N = 1 and 2, plus a model DDP cannot hold but ZeRO can (N = 2).
# D = 8192, 1024 rows per rank; L = 14 (Ψ = 7.52e9, DDP model states 120.3 GB: the paper's
# 7.5B example) on a GPU of more than 100 GB, L = 8 (Ψ = 4.3e9, 68.7 GB) on an 80 GB GPU.
# Files: OUTDIR/<prog>_fill_N<n>.json|txt and <prog>_over_N2.json|txt.
set -u
out=${1:?usage: gpu-fill.sh OUTDIR}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-fill: needs an NVIDIA GPU and nvidia-smi -L lists none; the CPU build (build/cpu/) shows the same memory per rank at a small size" >&2; exit 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
gpus=$("$(dirname "$0")/gpu-count.sh") # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
if [ "$mib" -gt 100000 ]; then fill=14; over=20; else fill=8; over=11; fi
echo "GPU memory ${mib} MiB: fill = $fill layers, over = $over layers (D = 8192, 1024 rows)"
run() { # name n prog layers
    $MPIEXEC -n "$2" "build/cuda/$3" --layers "$4" --dim 8192 --batch 1024 --steps 3 --quiet \
        --json "$out/${3}_$1_N$2.json" > "$out/${3}_$1_N$2.txt" 2>&1
    # the summary, the out-of-memory line (--no-preflight), or the preflight's refusal (exit 2)
    echo "$3 $1 N=$2 L=$4 rc=$? $(grep -E '^summary:|out of memory| needs [0-9.]+ GB' "$out/${3}_$1_N$2.txt" | head -1)"
}
for n in 1 2; do
    [ "$n" -le "$gpus" ] || continue
    for prog in stage0_ddp stage1 stage2 stage3; do run fill $n $prog $fill; done
done
if [ "$gpus" -ge 2 ]; then
    for prog in stage0_ddp stage1 stage2 stage3; do run over 2 $prog $over; done
fi
