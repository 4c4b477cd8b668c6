#!/bin/bash
# session 47 call 2 (2 x H200): the GPU suite's loud part again (after the test fix) and the ckpt part with the
# gathers on NCCL symmetric windows and the zero-CTA policy exported to every run
# PARALLEL=1 (parts side by side), MAX_WORLD=2.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0 ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
T0=$SECONDS
PARTS="loud ckpt" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k2s \
  timeout -s TERM 560 scripts/test-gpu.sh > /tmp/k2_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s (ZL_NCCL_WINDOWS=$ZL_NCCL_WINDOWS ZL_NCCL_CTA_POLICY=$ZL_NCCL_CTA_POLICY)" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|UNFINISHED|Xid|stopped|rc=|passed|took" /tmp/k2_suite.txt | head -80 >> $OUT/log.txt
gzip -c /tmp/k2_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/k2s.tgz k2s
cat $OUT/log.txt
