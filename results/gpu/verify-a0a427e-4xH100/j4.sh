#!/bin/bash
# session 42 call 4 (4 GPUs asked): the integration, report and loud parts at N up to 4, side by
# side — N = 3 and 4 on GPUs, not run since 66bec7f. Logs straight under $OUT (a cut call keeps them).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,memory.total --format=csv >> $OUT/log.txt
PARTS="integration report loud" PARALLEL=1 MAX_WORLD=4 MPIEXEC=mpirun LOGDIR=$OUT/j4s timeout -s TERM 390 scripts/test-gpu.sh > $OUT/suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|unfinished|failed" $OUT/suite.txt | head -40 >> $OUT/log.txt
cat $OUT/log.txt
