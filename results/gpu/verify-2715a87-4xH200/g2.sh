#!/bin/bash
# stop 28 call 2 (4 GPUs): test-gpu.sh's mixed part at MAX_WORLD=4, then kernels, sanitizer, benches at HEAD
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/g2; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt; cat /tmp/build.txt >> $S
export CRITERION_VERBOSITY_LEVEL=1
MPIEXEC=mpirun MAX_WORLD=4 PARTS="mixed" timeout 260 scripts/test-gpu.sh > $R/mixed.txt 2>&1; echo "mixed rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|^\(mixed" $R/mixed.txt | tail -8 | tee -a $S
for p in kernels benches sanitizer; do
  left=$((560-SECONDS+T0)); [ $left -gt 20 ] || break
  MPIEXEC=mpirun MAX_WORLD=4 PARTS="$p" timeout $left scripts/test-gpu.sh > $R/$p.txt 2>&1; echo "$p rc=$? at $((SECONDS-T0)) s" | tee -a $S
  tail -4 $R/$p.txt | tee -a $S
done
tar -C /tmp -czf $OUT/g2.tgz g2; cp $S $OUT/
