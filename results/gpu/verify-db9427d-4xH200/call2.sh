#!/bin/bash
# stop 27 call 2 (4 GPUs): make test-gpu's loud and reference parts with N up to 4 (MAX_WORLD=4)
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/f2; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt; cat /tmp/build.txt >> $S
MPIEXEC=mpirun MAX_WORLD=4 PARTS="loud" timeout 330 scripts/test-gpu.sh > $R/loud.txt 2>&1; echo "loud rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|checks failed|^\(loud" $R/loud.txt | tail -5 | tee -a $S
MPIEXEC=mpirun MAX_WORLD=4 PARTS="reference" timeout $((545-SECONDS+T0)) scripts/test-gpu.sh > $R/reference.txt 2>&1; echo "reference rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "FAIL|ALL PASSED|^\(reference|SKIPPED" $R/reference.txt | tail -5 | tee -a $S
