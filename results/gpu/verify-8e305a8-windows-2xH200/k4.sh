#!/bin/bash
# session 46 call 4 (2 x H200): the GPU suite's integration, gpt, offload and mixed parts with the
# gathers on NCCL symmetric windows and the zero-CTA policy exported to every run
# (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2): does the knob keep every check (--check, bitwise
# equality between stages and with the CPU, offload, the GPT's tied embedding, overflows) across
# the configurations the tests run? PARALLEL=1, MAX_WORLD=2.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0 ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
T0=$SECONDS
PARTS="integration gpt offload mixed" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k4s \
  timeout -s TERM 500 scripts/test-gpu.sh > /tmp/k4_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s (ZL_NCCL_WINDOWS=$ZL_NCCL_WINDOWS ZL_NCCL_CTA_POLICY=$ZL_NCCL_CTA_POLICY)" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|UNFINISHED|Xid|stopped" /tmp/k4_suite.txt | head -60 >> $OUT/log.txt
gzip -c /tmp/k4_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/k4s.tgz k4s
cat $OUT/log.txt
