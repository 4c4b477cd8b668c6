#!/bin/bash
# session 45 call 1 (2 x H200): the whole GPU suite at HEAD (PARALLEL=1, MAX_WORLD=2), for the three
# reread commits of session 44 (common/replace.c direct writes, outputs.c, zl_test_hold_ms) that no
# GPU had run.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $OUT/log.txt
PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k1s timeout -s TERM 540 scripts/test-gpu.sh > /tmp/k1_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|unfinished|failed|ALL PASSED|round trip|Xid" /tmp/k1_suite.txt | head -60 >> $OUT/log.txt
gzip -c /tmp/k1_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/k1s.tgz k1s 2>/dev/null
cat $OUT/log.txt
