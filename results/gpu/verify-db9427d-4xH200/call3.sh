#!/bin/bash
# stop 27 call 3 (4 GPUs): make test-gpu's gpt part with N up to 4 (MAX_WORLD=4)
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/f3; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt; cat /tmp/build.txt >> $S
MPIEXEC=mpirun MAX_WORLD=4 PARTS="gpt" timeout 540 scripts/test-gpu.sh > $R/gpt.txt 2>&1; echo "gpt rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|checks failed|^\(gpt" $R/gpt.txt | tail -5 | tee -a $S
