#!/bin/bash
# session 42 call 3 (2 × H100 asked): on H100, lab-1b beside the peer at N = 2 with tables/lab-1b-h100.json
# (the first multi-GPU H100 with the table), then the report, integration and ckpt parts at HEAD (a run of one step times its update);
# on H200, the report, integration, ckpt and offload parts.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv >> $OUT/log.txt
if nvidia-smi -L | head -1 | grep -q H100; then
  NS=2 STEPS=20 OUT=/tmp/j3_peer_N2 timeout 230 scripts/bench-gpu.sh lab-1b > /tmp/j3_N2.log 2>&1
  echo "peer N=2 rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/j3_N2.log $OUT/peer_N2.log
  tar -C /tmp -czf $OUT/j3_N2.tgz j3_peer_N2
  PARTS="report integration ckpt" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/j3s timeout -s TERM $((560-SECONDS+T0)) scripts/test-gpu.sh > /tmp/j3_suite.txt 2>&1
else
  PARTS="report integration ckpt offload" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/j3s timeout -s TERM 545 scripts/test-gpu.sh > /tmp/j3_suite.txt 2>&1
fi
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|unfinished|failed" /tmp/j3_suite.txt | head -60 >> $OUT/log.txt
gzip -c /tmp/j3_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/j3s.tgz j3s 2>/dev/null
cat $OUT/log.txt
