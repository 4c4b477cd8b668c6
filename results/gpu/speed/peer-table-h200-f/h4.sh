#!/bin/bash
# session 40 call 5 (4 × H100 asked): the peer with the committed table for this GPU
# (tables/lab-1b-h100.json from call 3, or lab-1b-h200.json), bench-gpu.sh lab-1b, N = 4 then N = 2,
# 20 steps, each tarred as soon as it ends (the call may be cut short by the session's device time).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv >> $OUT/log.txt
for n in ${H4_NS:-4 2}; do
  NS="$n" STEPS=20 OUT=/tmp/h4_peer_N$n timeout 165 scripts/bench-gpu.sh lab-1b > /tmp/h4_N$n.log 2>&1
  echo "peer N=$n rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/h4_N$n.log $OUT/peer_N$n.log
  tar -C /tmp -czf $OUT/h4_N$n.tgz h4_peer_N$n
done
cat $OUT/log.txt $OUT/peer_N*.log
