#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --oversubscribe): split on purpose
# gpu-ab.sh OUTDIR BASE — before/after in one lease: the programs of build/cuda (after) beside
# those of BASE/build/cuda (before: a checkout of an earlier commit, built there), on lab-1b
# (D = 4096, L = 8, 8192 rows per rank), runs alternating so that drift shows as a spread.
# Every "after" run also runs --check. One line per run: ms/step, TFLOP/s, compute busy,
# exposed communication (from --trace), device memory used at the end, param_hash.
# The keepgelu runs (a kept for every block) need commit 6fc187a: its ZL_MLP_KEEP_GELU diagnostic
# was removed after the measurement (it breaks measured == formula); later commits run the lean policy.
set -u
out=${1:?usage: gpu-ab.sh OUTDIR BASE}
base=${2:?usage: gpu-ab.sh OUTDIR BASE}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-ab: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
mkdir -p "$out/traces"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
STEPS=${STEPS:-8}
gpus=$(nvidia-smi -L | grep -c '^GPU')
run() { # name n prog before|after [VAR=value ...]
    local name=$1 n=$2 prog=$3 which=$4 bin="build/cuda/$3" check=(--check)
    shift 4
    [ "$n" -le "$gpus" ] || return 0
    [ "$which" = before ] && bin="$base/build/cuda/$prog" && check=()
    env "$@" timeout 180 $MPIEXEC -n "$n" "$bin" --preset lab-1b --steps "$STEPS" --quiet "${check[@]}" \
        --json "$out/$name.json" --trace "$out/traces/$name.trace.json" > "$out/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc $(grep -oE '[0-9.]+ ms/step' "$out/$name.txt") $(grep -oE '[0-9.]+ TFLOP/s' "$out/$name.txt")" \
        "| $(grep -oE 'compute busy [0-9.]+ ms' "$out/$name.txt"), $(grep -oE 'exposed communication [0-9.]+ ms' "$out/$name.txt")" \
        "| end $(awk '/device used \(end\)/ {print $5}' "$out/$name.txt") | $(grep -oE 'param_hash [0-9a-f]+' "$out/$name.txt")"
}
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
for r in a b; do # the activation policy: a kept for every block (diagnostic) vs recomputed
    for p in stage2 stage3; do
        run "${p}_N2_keepgelu_$r" 2 $p after ZL_MLP_KEEP_GELU=1
        run "${p}_N2_lean_$r" 2 $p after
    done
done
