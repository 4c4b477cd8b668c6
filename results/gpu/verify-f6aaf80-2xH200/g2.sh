#!/bin/bash
# session 40 call 2 (2 GPUs): the whole GPU suite at HEAD, parts side by side (PARALLEL=1, MAX_WORLD=2).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
T0=$SECONDS
PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/g2 timeout -s TERM 540 scripts/test-gpu.sh > /tmp/g2_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|unfinished|failed" /tmp/g2_suite.txt | head -60 >> $OUT/log.txt
cp /tmp/g2_suite.txt $OUT/suite.txt
tar -C /tmp -czf $OUT/g2.tgz g2 2>/dev/null
cat $OUT/log.txt
