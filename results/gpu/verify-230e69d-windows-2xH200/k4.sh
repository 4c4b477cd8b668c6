#!/bin/bash
# session 47 call 4 (2 x H200): the GPU suite's GPT reference part (tests/gpu/gpt-reference.sh:
# --model gpt against PyTorch, every stage at N = 1 and 2) with the copy-engine gathers exported
# (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2), the one part that launches training runs not yet run so.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0 ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
T0=$SECONDS
PARTS="reference" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k4s \
  timeout -s TERM 300 scripts/test-gpu.sh > /tmp/k4_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s (ZL_NCCL_WINDOWS=$ZL_NCCL_WINDOWS ZL_NCCL_CTA_POLICY=$ZL_NCCL_CTA_POLICY)" >> $OUT/log.txt
gzip -c /tmp/k4_suite.txt > $OUT/suite.txt.gz
tail -40 /tmp/k4_suite.txt >> $OUT/log.txt
cat $OUT/log.txt
