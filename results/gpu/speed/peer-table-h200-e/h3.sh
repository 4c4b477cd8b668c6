#!/bin/bash
# session 40 call 4 (2 × H100 asked): the peer at N = 2 with the committed table for this GPU
# (tables/lab-1b-h100.json, made in call 3, or lab-1b-h200.json), bench-gpu.sh lab-1b NS=2, 20 steps.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv >> $OUT/log.txt
NS="2" STEPS=20 OUT=/tmp/h3_peer timeout 300 scripts/bench-gpu.sh lab-1b > $OUT/peer.log 2>&1
echo "peer rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/h3.tgz h3_peer
cat $OUT/log.txt $OUT/peer.log
