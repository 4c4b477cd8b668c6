#!/bin/bash
# session 47 call 5 (2 x H200): by default (no ZL_ knob) at the session's last code: the benches
# part (now also each CUDA benchmark's --help) alone, then the loud part. PARALLEL=1, MAX_WORLD=2.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
PARTS="benches loud" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k5s \
  timeout -s TERM 380 scripts/test-gpu.sh > /tmp/k5_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|ended|UNFINISHED|Xid|stopped|--help|rc=" /tmp/k5_suite.txt | head -60 >> $OUT/log.txt
gzip -c /tmp/k5_suite.txt > $OUT/suite.txt.gz
cat $OUT/log.txt
