#!/bin/bash
# session 46 call 3 (2 x H200, the lease of call 2, still warm): lab-1b beside the PyTorch peer at N = 2, 20 steps, the committed GEMM
# table, again in the reverse order (so that calls 2 and 3 are default, windows, windows, default): with the gathers on NCCL symmetric windows and the
# zero-CTA policy (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2; DDP gathers nothing, so its row is the
# control for the lease's drift between the two tables). Call 1 found ZeRO-3 at N = 2 1.1-1.3 % faster
# with the knob in three alternating rounds (param_hash equal).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $OUT/log.txt
ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 NS=2 STEPS=20 OUT=/tmp/k3_windows timeout 260 scripts/bench-gpu.sh lab-1b > $OUT/peer_windows.log 2>&1
echo "windows rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
NS=2 STEPS=20 OUT=/tmp/k3_default timeout 260 scripts/bench-gpu.sh lab-1b > $OUT/peer_default.log 2>&1
echo "default rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
for f in /tmp/k3_*/stage*_N2.json; do echo "$f $(grep -m1 -o 'param_hash[^,]*' $f)"; done >> $OUT/log.txt
tar -C /tmp -czf $OUT/k3.tgz k3_default k3_windows
cat $OUT/log.txt; tail -6 $OUT/peer_default.log; tail -6 $OUT/peer_windows.log
