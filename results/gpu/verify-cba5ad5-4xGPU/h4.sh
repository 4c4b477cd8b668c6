#!/bin/bash
# stop 29 call 4 (4 GPUs): the whole GPU suite with PARALLEL=1 (every part side by side), N <= 2
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/h4; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=2 timeout ${LIM:-430} scripts/test-gpu.sh > $R/test-gpu.txt 2>&1
echo "test-gpu PARALLEL=1 MAX_WORLD=2 rc=$? at $((SECONDS-T0)) s" >> $S
grep -E '^\(|^test-gpu|Synthesis|SKIPPED|FAIL' $R/test-gpu.txt >> $S
for d in /tmp/zl_test_gpu_*; do cp -r "$d" $R/logs; done
for f in $R/logs/*.rc; do echo "$(basename "$f" .rc) rc=$(cat "$f")"; done >> $S
cat $S; tar -C /tmp -czf $OUT/h4.tgz h4; cp $S $OUT/
