#!/bin/bash
# session 51 call 2 (4 x H200): the new default (ZeRO-1/2's all-gathers on the copy engines, dfc46ff)
# beside the PyTorch peer at N = 2 and 4 (bench-gpu.sh lab-1b, 20 steps, the run line's engine
# checked), then the 7.5 B fill model (D = 8192, L = 14, 1024 rows per rank, 10 steps, --check) by
# default, every stage at N = 4, then at N = 2, while time is left.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/p1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
NS="2 4" STEPS=20 OUT=$R/bench timeout 300 scripts/bench-gpu.sh lab-1b > $R/bench.log 2>&1
echo "bench NS=2,4 rc=$? at $((SECONDS-T0)) s" >> $S
fill() { local stage=$1 n=$2; local name=fill_${stage}_N$n
  timeout 75 mpirun --bind-to none -n $n build/cuda/$stage --layers 14 --dim 8192 --batch 1024 --steps 10 --quiet --check --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE '[0-9.]+ TFLOP/s' $R/$name.txt | tail -1) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) $(grep -oE '"allgather_engine": *"[a-z_]+"' $R/$name.json) at $((SECONDS-T0)) s" >> $S; }
for n in 4 2; do for st in stage1 stage2 stage3 stage0_ddp; do
  [ $((SECONDS-T0)) -lt 480 ] && fill $st $n
done; done
tail -14 $R/bench.log >> $S
cat $S; tar -C /tmp -czf $OUT/p1.tgz p1; cp $S $R/bench.log $OUT/
