#!/bin/bash
# session 39 call 4 (2 GPUs): test-gpu's kernels and loud parts at HEAD (the beta-keyed GEMM plans;
# the GEMM-table code after review).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
PARTS="kernels loud" LOGDIR=/tmp/y2/suite MPIEXEC="mpirun --bind-to none" MAX_WORLD=2 timeout 300 scripts/test-gpu.sh > /tmp/y2_suite.txt 2>&1
echo "kernels+loud rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|PASSED|rc=" /tmp/y2_suite.txt | tail -20 >> $OUT/log.txt
tar -C /tmp -czf $OUT/y2.tgz y2_suite.txt y2
cat $OUT/log.txt
