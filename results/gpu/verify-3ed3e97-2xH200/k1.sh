#!/bin/bash
# session 44 call 1 (2 x H100 asked): on H100, lab-1b beside the peer at N = 2 with tables/lab-1b-h100.json
# (the first multi-GPU H100 with the table), then the loud, benches and report parts at HEAD;
# on H200, the whole GPU suite at HEAD (PARALLEL=1, MAX_WORLD=2).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv >> $OUT/log.txt
if nvidia-smi -L | head -1 | grep -q H100; then
  NS=2 STEPS=20 OUT=/tmp/k1_peer_N2 timeout 250 scripts/bench-gpu.sh lab-1b > /tmp/k1_N2.log 2>&1
  echo "peer N=2 rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/k1_N2.log $OUT/peer_N2.log
  tar -C /tmp -czf $OUT/k1_N2.tgz k1_peer_N2
  PARTS="loud benches report" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k1s timeout -s TERM $((560-SECONDS+T0)) scripts/test-gpu.sh > /tmp/k1_suite.txt 2>&1
else
  PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k1s timeout -s TERM 555 scripts/test-gpu.sh > /tmp/k1_suite.txt 2>&1
fi
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|unfinished|failed|ALL PASSED|round trip" /tmp/k1_suite.txt | head -60 >> $OUT/log.txt
gzip -c /tmp/k1_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/k1s.tgz k1s 2>/dev/null
cat $OUT/log.txt
