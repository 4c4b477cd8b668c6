#!/bin/sh
# results-cpu.sh — CPU runs of all four stages for N = 1 .. 8 (make results-cpu), for the
# notebooks: results/cpu/<prog>_N<n>.json; and timelines (--trace) at N = 2 for
# notebooks/04_timeline: results/cpu/trace_<prog>[_prefetch<K>]_N2.json with its report beside.
# Demo model (L = 4, D = 256, 32 rows per rank), 3 steps: memory and traffic do not depend on
# the step count. Last, for notebooks/05_accumulation, --accum K (K = 1 .. 4) and
# --checkpoint-activations / --keep-activations at N = 2 on a small model (L = 4, D = 64, 8 rows per rank):
# results/cpu/accum/<prog>_K<K>[_ckpt|_keep]_N2.json. Slow at N > 2 on a small
# machine (ranks outnumber cores, and each collective waits for the slowest), a few minutes in all.
set -eu
MPIEXEC=${MPIEXEC:-mpiexec}
# shellcheck disable=SC2086 # $MPIEXEC may carry options: split on purpose
if [ "$("$(dirname "$0")/mpi-kind.sh" $MPIEXEC)" = openmpi ]; then MPIEXEC="$MPIEXEC --allow-run-as-root --oversubscribe"; fi
out=results/cpu
mkdir -p "$out"
for n in 1 2 3 4 5 6 7 8; do
    for prog in stage0_ddp stage1 stage2 stage3; do
        $MPIEXEC -n "$n" "build/cpu/$prog" --preset demo --steps 3 --quiet --json "$out/${prog}_N$n.json" >/dev/null
        echo "$prog N=$n -> $out/${prog}_N$n.json"
    done
done

# Timelines: DDP vs ZeRO-2, ZeRO-3 at --prefetch 0 vs 1; 4 steps, so steps 2..4 are traced.
trace() { # name, prog, extra flags...
    name=$1 prog=$2
    shift 2
    $MPIEXEC -n 2 "build/cpu/$prog" --preset demo --steps 4 --quiet "$@" \
        --json "$out/trace_${name}_N2.report.json" --trace "$out/trace_${name}_N2.json" >/dev/null
    echo "$prog $* N=2 -> $out/trace_${name}_N2.json"
}
trace stage0_ddp stage0_ddp
trace stage2 stage2
trace stage3_prefetch0 stage3 --prefetch 0
trace stage3_prefetch1 stage3 --prefetch 1

# Accumulation and activation policy: every stage at N = 2, --accum 1..4, and --checkpoint-activations
# and --keep-activations at K = 1; a small model (traffic and activation bytes are exact at any size), --check on.
mkdir -p "$out/accum"
for prog in stage0_ddp stage1 stage2 stage3; do
    for k in 1 2 3 4; do
        $MPIEXEC -n 2 "build/cpu/$prog" --layers 4 --dim 64 --batch 8 --steps 3 --quiet --check \
            --accum "$k" --json "$out/accum/${prog}_K${k}_N2.json" >/dev/null
        echo "$prog --accum $k N=2 -> $out/accum/${prog}_K${k}_N2.json"
    done
    $MPIEXEC -n 2 "build/cpu/$prog" --layers 4 --dim 64 --batch 8 --steps 3 --quiet --check \
        --accum 1 --checkpoint-activations --json "$out/accum/${prog}_K1_ckpt_N2.json" >/dev/null
    echo "$prog --checkpoint-activations N=2 -> $out/accum/${prog}_K1_ckpt_N2.json"
    $MPIEXEC -n 2 "build/cpu/$prog" --layers 4 --dim 64 --batch 8 --steps 3 --quiet --check \
        --accum 1 --keep-activations --json "$out/accum/${prog}_K1_keep_N2.json" >/dev/null
    echo "$prog --keep-activations N=2 -> $out/accum/${prog}_K1_keep_N2.json"
done
