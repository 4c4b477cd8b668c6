#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options: split on purpose
# gpu-eight.sh OUTDIR — issue 16 on a node of 8 GPUs, in one lease: SECTIONS (default all, in
# this order; a device call runs 10 minutes at most, so give each its own call), each writing
# OUTDIR/<section>/ and OUTDIR/<section>.log, one status line each on stdout:
#   scaling  lab-1b, every stage at N = 1, 2, 4, 8: ms/step, TFLOP/s per GPU, device memory,
#            --check (measured == formula), param_hash (equal across stages at N = 1, 2)   ~250 s
#   table2   the measured Table 2 at N = 8 (scripts/gpu-table2.sh, RANKS=8), beside zerocalc  ~600 s
#   peer     zerolab vs its PyTorch peer per stage at N = 8 (scripts/bench-gpu.sh, NS=8)   ~250 s
#   test     make test-gpu's suite with the integration tests up to N = 8 (MAX_WORLD=8)   ~400 s
# Needs `make cpu cuda` first. Results go to results/gpu/ with the device and date (notebook
# 03_scaling reads the scaling JSON).
set -u
out=${1:?usage: gpu-eight.sh OUTDIR}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-eight: needs NVIDIA GPUs and nvidia-smi -L lists none" >&2; exit 1; }
gpus=$(nvidia-smi -L | grep -c '^GPU')
[ "$gpus" -ge 8 ] || echo "gpu-eight: $gpus GPU(s) listed: the N = 8 runs are skipped" >&2
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MPIEXEC=${MPIEXEC:-mpirun}
section() { # name limit command...
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    mkdir -p "$out/$name"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc in $((SECONDS - t0)) s (limit $limit s)"
}
scaling() {
    local n p f
    for n in 1 2 4 8; do
        [ "$n" -le "$gpus" ] || continue
        for p in stage0_ddp stage1 stage2 stage3; do
            f="$out/scaling/${p}_lab-1b_N$n"
            timeout 120 $MPIEXEC -n "$n" "build/cuda/$p" --preset lab-1b --quiet --check --json "$f.json" > "$f.txt" 2>&1
            echo "$p N=$n rc=$? $(grep -m1 '^summary:' "$f.txt")"
        done
    done
}
for s in ${SECTIONS:-scaling table2 peer test}; do
    case $s in
    scaling) export -f scaling && export out gpus && section scaling 300 bash -c scaling ;;
    table2) RANKS=8 CONFIGS="stage0_ddp stage1 stage2 stage3" section table2 590 scripts/gpu-table2.sh "$out/table2" ;;
    peer) NS=8 OUT="$out/peer" section peer 300 scripts/bench-gpu.sh lab-1b ;;
    test) MAX_WORLD=8 section test 590 scripts/test-gpu.sh ;;
    *) echo "gpu-eight: unknown section '$s'" >&2 ;;
    esac
done
