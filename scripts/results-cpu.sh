#!/bin/sh
# results-cpu.sh — CPU runs of all four stages for N = 1 .. 8 (make results-cpu), for the
# notebooks: results/cpu/<prog>_N<n>.json. Demo model (L = 4, D = 256, 32 rows per rank),
# 3 steps: memory and traffic do not depend on the step count. Slow at N > 2 on a small
# machine (MPICH busy-polls when ranks outnumber cores), a few minutes in all.
set -eu
MPIEXEC=${MPIEXEC:-mpiexec}
if $MPIEXEC --version 2>&1 | grep -qi "open mpi"; then MPIEXEC="$MPIEXEC --allow-run-as-root --oversubscribe"; fi
out=results/cpu
mkdir -p "$out"
for n in 1 2 3 4 5 6 7 8; do
    for prog in stage0_ddp stage1 stage2 stage3; do
        $MPIEXEC -n "$n" "build/cpu/$prog" --preset demo --steps 3 --quiet --json "$out/${prog}_N$n.json" >/dev/null
        echo "$prog N=$n -> $out/${prog}_N$n.json"
    done
done
