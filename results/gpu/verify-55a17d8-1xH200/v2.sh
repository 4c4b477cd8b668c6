#!/bin/bash
# stop 53 call 2 (1 x H200): bench-gpu.sh lab-1b at N = 1 by default (zerolab recomputes gelu(h),
# the peer keeps it); then DDP and ZeRO-3 at N = 1, kept and default, with --trace (the compute
# lane phase by phase); then bench-gpu.sh --keep-activations again (the second reading).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/v2; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
NS=1 STEPS=20 OUT=$R/bench-default timeout 200 scripts/bench-gpu.sh lab-1b > $R/bench-default.log 2>&1
echo "bench default rc=$? at $((SECONDS-T0)) s" >> $S; tail -7 $R/bench-default.log >> $S
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
one() { local prog=$1 flags=$2 name=$3
  timeout 40 mpirun --bind-to none -n 1 build/cuda/$prog --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet $flags --trace $R/$name.trace.json --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) at $((SECONDS-T0)) s" >> $S
  grep -iE "compute lane|busy|phase" $R/$name.txt | head -4 >> $S; rm -f $R/$name.trace.json; }
for p in stage0_ddp stage3; do one $p "--keep-activations" ${p}_keep; one $p "" ${p}_default; done
unset ZL_GEMM_TABLE
NS=1 STEPS=20 OUT=$R/bench-keep ZEROLAB_FLAGS=--keep-activations timeout $((560-SECONDS+T0)) scripts/bench-gpu.sh lab-1b > $R/bench-keep.log 2>&1
echo "bench keep rc=$? at $((SECONDS-T0)) s" >> $S; tail -7 $R/bench-keep.log >> $S
cat $S; tar -C /tmp -czf $OUT/v2.tgz v2; cp $S $R/bench-default.log $R/bench-keep.log $OUT/
