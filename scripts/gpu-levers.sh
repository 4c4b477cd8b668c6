#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --oversubscribe): split on purpose
# gpu-levers.sh OUTDIR [BASE] — the speed levers of docs/performance.md, measured in one lease on
# lab-1b (D = 4096, L = 8, 8192 rows per rank), each run with a timeline (--trace) so the compute
# lane's busy time and the exposed communication show where the milliseconds go.
#   without BASE  the sweep: NCCL's CTA limits (NCCL_MAX_CTAS) and CTA policy
#                 (ZL_NCCL_CTA_POLICY=1) on build/cuda; default runs open and close each group
#                 (drift check)
#   with BASE     before/after: build/cuda (after, every run with --check) beside
#                 BASE/build/cuda (before: a checkout of an earlier commit, built there), runs
#                 alternating so that drift shows as a spread
# Each run writes OUTDIR/<name>.json, .txt and a trace; one line per run on stdout: ms/step,
# TFLOP/s, compute busy, exposed communication, device memory used at the end, param_hash.
# The stored-vs-recomputed GELU runs of results/gpu/speed came from this script at commit
# 6fc187a, whose ZL_MLP_KEEP_GELU diagnostic was removed after the measurement (it breaks
# measured == formula).
set -u
out=${1:?usage: gpu-levers.sh OUTDIR [BASE]}
base=${2:-}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-levers: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
mkdir -p "$out/traces"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
STEPS=${STEPS:-8}
gpus=$("$(dirname "$0")/gpu-count.sh") # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
run() { # name n prog before|after|sweep [VAR=value ...]
    local name=$1 n=$2 prog=$3 which=$4 bin="build/cuda/$3" check=()
    shift 4
    [ "$n" -le "$gpus" ] || return 0
    [ "$which" = before ] && bin="$base/build/cuda/$prog"
    [ "$which" = after ] && check=(--check)
    env "$@" timeout 180 $MPIEXEC -n "$n" "$bin" --preset lab-1b --steps "$STEPS" --quiet "${check[@]}" \
        --json "$out/$name.json" --trace "$out/traces/$name.trace.json" > "$out/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc $(grep -oE '[0-9.]+ ms/step' "$out/$name.txt") $(grep -oE '[0-9.]+ TFLOP/s' "$out/$name.txt")" \
        "| $(grep -oE 'compute busy [0-9.]+ ms' "$out/$name.txt"), $(grep -oE 'exposed communication [0-9.]+ ms' "$out/$name.txt")" \
        "| end $(awk '/device used \(end\)/ {print $5}' "$out/$name.txt") | $(grep -oE 'param_hash [0-9a-f]+' "$out/$name.txt")"
}

if [ -n "$base" ]; then
    for n in 4 2; do
        for p in stage0_ddp stage1 stage2 stage3; do
            run "${p}_N${n}_before_a" "$n" $p before
            run "${p}_N${n}_after_a" "$n" $p after
            [ "$n" = 4 ] || continue
            run "${p}_N${n}_before_b" "$n" $p before
            run "${p}_N${n}_after_b" "$n" $p after
        done
    done
    for p in stage0_ddp stage1 stage2 stage3; do run "${p}_N1_after" 1 $p after; done
    exit 0
fi

for n in 1 2 4; do
    for p in stage0_ddp stage1 stage2 stage3; do run "${p}_N${n}_default" "$n" $p sweep; done
done
for n in 4 2; do
    for p in stage3 stage2; do
        run "${p}_N${n}_ctas16" "$n" $p sweep NCCL_MAX_CTAS=16
        run "${p}_N${n}_ctas8" "$n" $p sweep NCCL_MAX_CTAS=8
        run "${p}_N${n}_ctas4" "$n" $p sweep NCCL_MAX_CTAS=4
        run "${p}_N${n}_policy1" "$n" $p sweep ZL_NCCL_CTA_POLICY=1
        run "${p}_N${n}_default2" "$n" $p sweep
    done
done
for p in stage0_ddp stage1; do run "${p}_N4_ctas8" 4 $p sweep NCCL_MAX_CTAS=8; done
