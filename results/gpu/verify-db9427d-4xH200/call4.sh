#!/bin/bash
# stop 27 call 4 (4 GPUs): test-gpu.sh's new mixed and ckpt parts with N up to 4 (MAX_WORLD=4),
# Criterion verbose so that a part cut off by the time limit still shows what passed
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/f4; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt; cat /tmp/build.txt >> $S
export CRITERION_VERBOSITY_LEVEL=1
MPIEXEC=mpirun MAX_WORLD=4 PARTS="mixed" timeout 220 scripts/test-gpu.sh > $R/mixed.txt 2>&1; echo "mixed rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|^\(mixed" $R/mixed.txt | tail -5 | tee -a $S
MPIEXEC=mpirun MAX_WORLD=4 PARTS="ckpt" timeout $((548-SECONDS+T0)) scripts/test-gpu.sh > $R/ckpt.txt 2>&1; echo "ckpt rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|^\(ckpt" $R/ckpt.txt | tail -5 | tee -a $S
grep -c '^\[PASS\]' $R/mixed.txt $R/ckpt.txt | tee -a $S
