#!/bin/bash
# stop 53 call 1 (1 x H200, the only kind lent): make test-gpu at N = 1 (MAX_WORLD=1, parts side by
# side) at 55a17d8, the reread of stop 52 not yet run on a GPU; then bench-gpu.sh lab-1b at N = 1
# with --keep-activations (both sides keep every block's activations: the compute lane alone).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/v1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
MPIEXEC=mpirun MAX_WORLD=1 PARALLEL=1 LOGDIR=$R/logs timeout 380 scripts/test-gpu.sh > $R/test-gpu.txt 2>&1
echo "test-gpu rc=$? at $((SECONDS-T0)) s" >> $S
grep -E "Synthesis|FAIL|PASSED|SKIPPED|failed|ended" $R/test-gpu.txt | head -40 >> $S
NS=1 STEPS=20 OUT=$R/bench-keep ZEROLAB_FLAGS=--keep-activations timeout $((560-SECONDS+T0)) scripts/bench-gpu.sh lab-1b > $R/bench-keep.log 2>&1
echo "bench keep rc=$? at $((SECONDS-T0)) s" >> $S
tail -8 $R/bench-keep.log >> $S
cat $S; tar -C /tmp -czf $OUT/v1.tgz v1; cp $S $R/test-gpu.txt $R/bench-keep.log $OUT/
