#!/bin/bash
# session 48 call 2 (4 x H200): the copy-engine knob (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2) at N = 4
# beside the PyTorch peer, second half of ABBA (B then A): (A) bench-gpu.sh lab-1b with the knob, NS="2 4", 20 steps;
# (B) the default, NS=4; then the fill model's ZeRO-3 at N = 4, knob then default, 10 steps, --check.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/q2; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
NS="4" STEPS=20 OUT=$R/def2 timeout 170 scripts/bench-gpu.sh lab-1b > $R/def2.log 2>&1
echo "B def NS=4 rc=$? at $((SECONDS-T0)) s" >> $S
ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 NS="2 4" STEPS=20 OUT=$R/win2 timeout 300 scripts/bench-gpu.sh lab-1b > $R/win2.log 2>&1
echo "A win NS=2,4 rc=$? at $((SECONDS-T0)) s" >> $S
fill() { local name=$1; shift
  env "$@" timeout 80 mpirun --bind-to none -n 4 build/cuda/stage3 --layers 14 --dim 8192 --batch 1024 --steps 10 --quiet --check --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE '[0-9.]+ TFLOP/s' $R/$name.txt | tail -1) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) at $((SECONDS-T0)) s" >> $S; }
[ $((SECONDS-T0)) -lt 470 ] && fill fill3_N4_win_2 ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
[ $((SECONDS-T0)) -lt 510 ] && fill fill3_N4_def_2 ZL_NCCL_WINDOWS=0
for f in win2 def2; do tail -12 $R/$f.log >> $S; done
cat $S; tar -C /tmp -czf $OUT/q2.tgz q2; cp $S $R/win2.log $R/def2.log $OUT/
