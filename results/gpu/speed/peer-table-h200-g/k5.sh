#!/bin/bash
# session 44 call 5 (4 x H100 asked; 4-GPU kinds lent late in the session): make demo's table on
# 4 GPUs at HEAD (scripts/demo.sh cuda 4), then lab-1b beside the PyTorch peer at N = 2 and 4,
# 20 steps, with the committed GEMM table for this GPU (bench-gpu.sh picks tables/lab-1b-GPU.json).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $OUT/log.txt
MPIEXEC=mpirun timeout 90 scripts/demo.sh cuda 4 > /tmp/k5_demo.txt 2>&1
echo "demo cuda 4 rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
cp /tmp/k5_demo.txt $OUT/demo.txt
NS="2 4" STEPS=20 OUT=/tmp/k5_peer timeout 440 scripts/bench-gpu.sh lab-1b > /tmp/k5_peer.log 2>&1
echo "peer rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
cp /tmp/k5_peer.log $OUT/peer.log
tar -C /tmp -czf $OUT/k5.tgz k5_peer
cat $OUT/log.txt; tail -30 $OUT/peer.log
