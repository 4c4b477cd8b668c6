#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --oversubscribe): split on purpose
# gpu-levers.sh OUTDIR — the speed levers of docs/performance.md, before/after in one lease:
# lab-1b (D = 4096, L = 8, 8192 rows per rank) with NCCL's CTA limits and policy varied (the
# SMs NCCL's kernels take from the GEMMs they overlap), the stored-vs-recomputed GELU output
# (ZL_MLP_KEEP_GELU), each with a timeline (--trace) so the compute lane's busy time shows
# where the milliseconds go. Default runs open and close each group (drift check).
# Each run writes OUTDIR/<name>.json, .txt and a trace; one line per run on stdout.
# The keepgelu runs (a kept for every block) need commit 6fc187a: its ZL_MLP_KEEP_GELU diagnostic
# was removed after the measurement (it breaks measured == formula); later commits run the lean policy.
set -u
out=${1:?usage: gpu-levers.sh OUTDIR}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-levers: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
mkdir -p "$out/traces"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
STEPS=${STEPS:-8}
gpus=$(nvidia-smi -L | grep -c '^GPU')
run() { # name n prog [VAR=value ...] [-- flags...]
    local name=$1 n=$2 prog=$3
    shift 3
    local vars=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    [ "$n" -le "$gpus" ] || return 0
    env "${vars[@]}" timeout 180 $MPIEXEC -n "$n" "build/cuda/$prog" --preset lab-1b --steps "$STEPS" --quiet \
        --json "$out/$name.json" --trace "$out/traces/$name.trace.json" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc $(grep -oE '[0-9.]+ ms/step' "$out/$name.txt") $(grep -oE '[0-9.]+ TFLOP/s' "$out/$name.txt")" \
        "| $(grep -oE 'compute busy [0-9.]+ ms' "$out/$name.txt"), $(grep -oE 'exposed communication [0-9.]+ ms' "$out/$name.txt")" \
        "| end $(awk '/device used \(end\)/ {print $5}' "$out/$name.txt")"
}
for n in 1 2 4; do
    for p in stage0_ddp stage1 stage2 stage3; do run "${p}_N${n}_default" "$n" $p; done
done
for n in 4 2; do
    for p in stage3 stage2; do
        run "${p}_N${n}_ctas16" "$n" $p NCCL_MAX_CTAS=16
        run "${p}_N${n}_ctas8" "$n" $p NCCL_MAX_CTAS=8
        run "${p}_N${n}_ctas4" "$n" $p NCCL_MAX_CTAS=4
        run "${p}_N${n}_policy1" "$n" $p ZL_NCCL_CTA_POLICY=1
        run "${p}_N${n}_default2" "$n" $p
    done
done
for p in stage0_ddp stage1; do run "${p}_N4_ctas8" 4 $p NCCL_MAX_CTAS=8; done
for r in a b; do
    for p in stage2 stage3; do
        run "${p}_N2_keepgelu_$r" 2 $p ZL_MLP_KEEP_GELU=1
        run "${p}_N2_lean_$r" 2 $p
    done
done
