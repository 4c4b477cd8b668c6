#!/bin/bash
# stop 36 call 1 (4 × H200): the whole GPU suite at HEAD, N up to 4, parts side by side.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/suite.log
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv >> $OUT/suite.log
T0=$SECONDS
MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=4 timeout 545 scripts/test-gpu.sh >> $OUT/suite.log 2>&1
echo "test-gpu rc=$? wall $((SECONDS-T0)) s" >> $OUT/suite.log
grep -E "^===|tests?:|Synthesis|rc=|FAIL|SKIP|\(.*: [0-9]+ s\)" $OUT/suite.log | tail -70
