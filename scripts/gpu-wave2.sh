#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --oversubscribe): split on purpose
# gpu-wave2.sh OUTDIR — the GPU measurements behind the wave-2 features (lab-1b, D = 4096,
# L = 8, 8192 rows per rank): every stage at N = 2 and 4 (as many as there are GPUs);
# dynamic vs static loss scaling (alternating order, to see drift); --accum 4 of 2048 rows
# vs one batch of 8192; --checkpoint-activations; and timelines (--trace) for DDP, ZeRO-2
# and ZeRO-3 at --prefetch 0 and 1. Each run writes OUTDIR/<name>.json and .txt.
set -u
out=${1:?usage: gpu-wave2.sh OUTDIR}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-wave2: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
gpus=$("$(dirname "$0")/gpu-count.sh") # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
run() { # name n prog flags...
    local name=$1 n=$2 prog=$3
    shift 3
    timeout 300 $MPIEXEC -n "$n" "build/cuda/$prog" --preset lab-1b --quiet --json "$out/$name.json" "$@" \
        > "$out/$name.txt" 2>&1
    echo "$name rc=$? $(grep -E '^summary:' "$out/$name.txt" | sed 's/states_paper=[0-9]* //')"
}
for n in 2 4; do
    [ "$n" -le "$gpus" ] || continue
    for p in stage0_ddp stage1 stage2 stage3; do run "${p}_lab-1b_N$n" "$n" $p --check; done
done
for p in stage2 stage3; do
    run "${p}_dynamic_a_N2" 2 $p
    run "${p}_static65536_N2" 2 $p --loss-scale 65536
    run "${p}_static1024_N2" 2 $p --loss-scale 1024
    run "${p}_dynamic_b_N2" 2 $p
done
for p in stage0_ddp stage1 stage2 stage3; do
    run "${p}_accum4_N2" 2 $p --accum 4 --batch 2048 --check
    run "${p}_ckpt-act_N2" 2 $p --checkpoint-activations --check
done
trace() { # name prog flags... -> trace_<name>_N2.json (the timeline) and .report.json
    local name=$1 prog=$2
    shift 2
    timeout 300 $MPIEXEC -n 2 "build/cuda/$prog" --preset lab-1b --steps 5 --quiet \
        --json "$out/trace_${name}_N2.report.json" --trace "$out/trace_${name}_N2.json" "$@" > "$out/trace_$name.txt" 2>&1
    echo "trace $name rc=$? $(grep -E 'exposed' "$out/trace_$name.txt" | head -1)"
}
trace stage0_ddp stage0_ddp
trace stage2 stage2
trace stage3_prefetch0 stage3 --prefetch 0
trace stage3_prefetch1 stage3 --prefetch 1
