#!/bin/bash
# stop 35 call 4 (2 × H200): the parts that launch ranks, at HEAD, after the session's loud-failure
# changes (outputs, checkpoints, --data, the watchdog through a save), side by side.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/suite.log
MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=2 PARTS="integration loud report gpt offload mixed ckpt" timeout 560 scripts/test-gpu.sh >> $OUT/suite.log 2>&1
echo "test-gpu rc=$?" >> $OUT/suite.log
grep -E "^===|Synthesis|rc=|FAIL|SKIP|\(.*: [0-9]+ s\)" $OUT/suite.log | tail -40
