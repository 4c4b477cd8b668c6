#!/bin/bash
# session 46 call 1 (2 x H200): (a) the GPU suite's new order on a real GPU (d79f772: with PARALLEL=1
# the benches part runs alone, before the others; the kernel log's Xid lines on a failure or a stop):
# PARTS="benches kernels sanitizer reference"; (b) lab-1b beside the PyTorch peer at N = 2, 20 steps,
# the committed GEMM table; (c) ZeRO-3 lab-1b at N = 2 with and without the windows knob
# (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2: gathers on NCCL symmetric windows, zero-CTA policy),
# three alternating rounds of 20 steps: the one untried lever on the pair 0.8 % from 1.15x.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $OUT/log.txt
echo "xid lines before: $(dmesg 2>/dev/null | grep -i -c xid)" >> $OUT/log.txt
PARTS="benches kernels sanitizer reference" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k1s \
  timeout -s TERM 220 scripts/test-gpu.sh > /tmp/k1_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|^===|FAIL|SKIPPED|ended|unfinished|failed|ALL PASSED|passed|Xid|side by side|alone" /tmp/k1_suite.txt | head -50 >> $OUT/log.txt
cp /tmp/k1_suite.txt $OUT/suite.txt
NS=2 STEPS=20 OUT=/tmp/k1_peer timeout 200 scripts/bench-gpu.sh lab-1b > /tmp/k1_peer.log 2>&1
echo "peer rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
cp /tmp/k1_peer.log $OUT/peer.log
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
mkdir -p /tmp/k1_win
for r in 1 2 3; do
  for v in default windows; do
    [ $((SECONDS-T0)) -lt 540 ] || break 2
    env=(); [ $v = windows ] && env=(env ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2)
    "${env[@]}" timeout 60 mpirun -n 2 --bind-to none build/cuda/stage3 --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet \
      --json /tmp/k1_win/stage3_N2_${v}_$r.json > /tmp/k1_win/stage3_N2_${v}_$r.txt 2>&1
    echo "stage3 N=2 $v round $r rc=$? $((SECONDS-T0)) s: $(grep -m1 -o '[0-9.]* ms/step (median [0-9.]*)' /tmp/k1_win/stage3_N2_${v}_$r.txt) $(grep -m1 -o 'param_hash[^,]*' /tmp/k1_win/stage3_N2_${v}_$r.json)" >> $OUT/log.txt
  done
done
tar -C /tmp -czf $OUT/k1.tgz k1s k1_peer k1_win
echo "done $((SECONDS-T0)) s" >> $OUT/log.txt
cat $OUT/log.txt; tail -12 $OUT/peer.log
