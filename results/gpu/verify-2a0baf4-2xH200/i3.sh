#!/bin/bash
# session 41 call 3 (2 × H100 asked): on H100, lab-1b beside the peer at N = 2 with
# tables/lab-1b-h100.json, then the parts this session's commits touched; on H200 those parts only.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv >> $OUT/log.txt
P="integration loud report gpt offload mixed ckpt"
if nvidia-smi -L | head -1 | grep -q H100; then
  NS=2 STEPS=20 OUT=/tmp/i3_peer_N2 timeout 230 scripts/bench-gpu.sh lab-1b > /tmp/i3_N2.log 2>&1
  echo "peer N=2 rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/i3_N2.log $OUT/peer_N2.log
  tar -C /tmp -czf $OUT/i3_N2.tgz i3_peer_N2
  P="gpt loud mixed report"
fi
PARTS="$P" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/i3s timeout -s TERM $((565-SECONDS+T0)) scripts/test-gpu.sh > /tmp/i3_suite.txt 2>&1
echo "suite ($P) rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|unfinished|failed" /tmp/i3_suite.txt | head -60 >> $OUT/log.txt
gzip -c /tmp/i3_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/i3s.tgz i3s 2>/dev/null
cat $OUT/log.txt
