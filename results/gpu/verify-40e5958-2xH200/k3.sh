#!/bin/bash
# session 47 call 3 (2 x H200): the GPU suite's other parts at HEAD, by default (no ZL_ knob):
# benches alone first, then kernels, integration, gpt, offload, mixed and the GPT reference side
# by side. PARALLEL=1, MAX_WORLD=2.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
PARTS="benches kernels integration gpt offload mixed reference" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k3s \
  timeout -s TERM 540 scripts/test-gpu.sh > /tmp/k3_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|UNFINISHED|Xid|stopped|failed" /tmp/k3_suite.txt | head -80 >> $OUT/log.txt
gzip -c /tmp/k3_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/k3s.tgz k3s
cat $OUT/log.txt
